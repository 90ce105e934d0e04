"""A model's top-k outputs: each row's ``k`` most probable classes and their probabilities (or
logits), without the ``n x K`` matrix: :class:`SparseOutputs`.

At extreme ``K`` (product catalogues, ICD coding, retrieval) a model gives each row its ``k`` best
classes; the other ``K - k`` are not scored.  svbop reads such outputs as the dense row with
**probability 0 outside the top-k** (the score of a class outside is fixed by that), so every set
built on them is the set of the dense path on that row, and every guarantee holds for that score
function:

* ``kind="probabilities"``: the row is its ``k`` values and zeros; like any dense row it is divided
  by its sum where a score needs normalised probabilities (the conformal scores do);
* ``kind="logits"``: the probabilities are the softmax of the ``k`` logits (zeros outside).

What each conformal score means on truncated outputs, and which sets cannot be built from them,
is in ``workflow/docs/library.md`` (section "Top-k outputs and trees at extreme K").

On disk: an ``.npz`` with ``indices`` (n, k) integers, ``values`` (n, k) floats and ``K`` (a scalar),
optionally ``kind`` (``"probabilities"`` or ``"logits"``): :meth:`SparseOutputs.load`,
:meth:`SparseOutputs.save`, :func:`is_sparse_outputs_file`.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

__all__ = ["SparseOutputs", "is_sparse_outputs_file", "check_top_k_shapes", "SPARSE_KINDS"]

#: What the values of a :class:`SparseOutputs` are.
SPARSE_KINDS = ("probabilities", "logits")
#: Largest row sum of probabilities accepted (the dense rows' tolerance: rounding of a softmax).
_SUM_TOLERANCE = 1e-6
#: Rows checked (and converted) at a time.
_CHECK_ROWS = 1 << 16


def check_top_k_shapes(indices, values, n_classes, kind: str, where: str = "") -> int:
    """``K``, once ``kind``, ``n_classes`` and the arrays' shapes (numpy or dask: anything with ``ndim``
    and ``shape``) are those of top-k outputs, or a one-line ValueError (prefixed by ``where``)."""
    if kind not in SPARSE_KINDS:
        raise ValueError(f"{where}kind must be 'probabilities' or 'logits', got {kind!r}")
    if isinstance(n_classes, (bool, np.bool_)) or not isinstance(n_classes, (int, np.integer)) or n_classes < 1:
        raise ValueError(f"{where}n_classes (K) must be a positive integer, got {n_classes!r}")
    for name, a in (("indices", indices), ("values", values)):
        if a.ndim != 2:
            raise ValueError(f"{where}{name} must be 2-d (n rows, k classes per row), got shape {a.shape}")
    if indices.shape != values.shape:
        raise ValueError(f"{where}indices has shape {indices.shape} but values has {values.shape}: one value per index")
    k = indices.shape[1]
    if k == 0:
        raise ValueError(f"{where}k = 0: every row needs at least one class (indices has shape {indices.shape})")
    if k > n_classes:
        raise ValueError(f"{where}k = {k} classes per row but the model has K = {n_classes} classes: k must be <= K")
    return int(n_classes)


def _check_block(ind, val, K, kind, row0, where, out=None) -> None:
    """Every check of rows ``row0 ..`` of the arrays (one line naming the first bad row); ``out``: where
    the logits' softmax goes."""
    bad = (ind < 0) | (ind >= K)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"{where}indices[{row0 + r}, {c}] = {int(ind[r, c])} is not a class id in 0 .. {K - 1}")
    srt = np.sort(ind, axis=1)
    rep = srt[:, 1:] == srt[:, :-1]
    if rep.any():
        r = int(np.flatnonzero(rep.any(axis=1))[0])
        c = int(srt[r, 1:][rep[r]][0])
        raise ValueError(f"{where}row {row0 + r} of indices names class {c} twice: a row's classes must be unique")
    del srt, rep
    finite = np.isfinite(val)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise ValueError(f"{where}values[{row0 + r}, {c}] = {float(val[r, c])!r}: values must be finite")
    if kind == "probabilities":
        neg = val < 0
        if neg.any():
            r, c = np.argwhere(neg)[0]
            raise ValueError(f"{where}values[{row0 + r}, {c}] = {float(val[r, c])!r}: probabilities must be >= 0")
        total = val.sum(axis=1, dtype=np.float64)
        over = np.flatnonzero(total > 1 + _SUM_TOLERANCE)
        if over.size:
            raise ValueError(f"{where}row {row0 + int(over[0])} of values sums to {float(total[over[0]])!r}: the top-k"
                             f" probabilities of a row sum to at most 1 (kind='logits' for scores)")
        zero = np.flatnonzero(total <= 0)
        if zero.size:
            raise ValueError(f"{where}row {row0 + int(zero[0])} of values is all zero: a row needs a class of positive"
                             f" probability")
    else:
        e = np.exp(val - val.max(axis=1, keepdims=True), dtype=np.float64)
        e /= e.sum(axis=1, keepdims=True)
        out[...] = e


class SparseOutputs:
    """Each row's ``k`` most probable classes and their probabilities or logits.

    Parameters
    ----------
    indices : array-like of int, shape (n, k)
        Class ids in ``0 .. n_classes - 1``, unique within each row (any order).
    values : array-like of float, shape (n, k)
        Their probabilities (finite, >= 0, summing to at most ``1 + 1e-6`` per row, not all 0)
        or logits (finite).
    n_classes : int
        ``K``, the number of classes of the model (``k <= K``).
    kind : {"probabilities", "logits"}

    Every check of dense outputs applies, with a one-line ``ValueError`` naming the argument (and
    ``source``, a file name, when given) and the first offending row, before any work.

    Attributes
    ----------
    shape : (n, K)
    k : int
    """

    def __init__(self, indices, values, n_classes: int, kind: str = "probabilities", *, source: str | None = None):
        where = f"{source}: " if source else ""
        ind = np.asarray(indices)
        val = np.asarray(values)
        values = val
        K = check_top_k_shapes(ind, val, n_classes, kind, where)
        n = ind.shape[0]
        if ind.dtype.kind not in "iu" or ind.dtype == bool:
            if ind.dtype.kind == "f" and np.all(np.isfinite(ind)) and np.all(ind == np.round(ind)):
                ind = ind.astype(np.int64)
            else:
                raise ValueError(f"{where}indices must hold integer class ids, got dtype {ind.dtype}")
        if val.dtype.kind not in "iuf" or val.dtype == bool:
            raise ValueError(f"{where}values must hold numbers, got dtype {val.dtype}")
        if kind == "logits":
            val = np.empty(ind.shape)  # the softmax over the k logits, filled block by block below
        for lo in range(0, n, _CHECK_ROWS):  # block by block: memory bounded by the arrays, not copies of them
            hi = min(n, lo + _CHECK_ROWS)
            _check_block(ind[lo:hi], np.asarray(values[lo:hi]) if kind == "logits" else val[lo:hi], K, kind, lo,
                         where, val[lo:hi] if kind == "logits" else None)
        self._ind, self._val, self._rows = ind, val, None
        self.n_classes = K
        self.kind = kind
        self.source = source

    @property
    def indices(self) -> np.ndarray:
        """The rows' class ids, (n, k) (a copy for rows taken by :meth:`take`)."""
        return self._ind if self._rows is None else self._ind[self._rows]

    @property
    def values(self) -> np.ndarray:
        """Their probabilities, (n, k) (the softmax of logits; a copy for rows taken by :meth:`take`)."""
        return self._val if self._rows is None else self._val[self._rows]

    def _select(self, rows):
        """Positions in the stored arrays of this object's rows ``rows``."""
        return rows if self._rows is None else self._rows[rows]

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.n_classes)

    @property
    def k(self) -> int:
        return self._ind.shape[1]

    def __len__(self) -> int:
        return self._ind.shape[0] if self._rows is None else self._rows.size

    def holds(self, y) -> np.ndarray:
        """Whether each row's top-k holds its class ``y[i]`` (block by block)."""
        y = np.asarray(y)
        out = np.empty(len(self), dtype=bool)
        for lo in range(0, len(self), _CHECK_ROWS):
            hi = min(len(self), lo + _CHECK_ROWS)
            out[lo:hi] = (self._ind[self._select(slice(lo, hi))] == y[lo:hi, None]).any(axis=1)
        return out

    def __repr__(self) -> str:
        return f"SparseOutputs(n={len(self)}, k={self.k}, K={self.n_classes}, kind={self.kind!r})"

    def take(self, rows) -> "SparseOutputs":
        """The rows ``rows`` (a slice, indices or a boolean mask), already checked: a view of this
        object's arrays (no copy of them; each block of rows is read from them when used)."""
        out = object.__new__(SparseOutputs)
        picked = np.arange(len(self), dtype=np.int64)[rows]
        out._ind, out._val = self._ind, self._val
        out._rows = picked if self._rows is None else self._rows[picked]
        out.n_classes, out.kind, out.source = self.n_classes, "probabilities", self.source
        return out

    def ranked(self, rows=slice(None)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(classes, V, count)`` of the rows ``rows``: each row's classes of positive probability by
        decreasing probability (ties by class id, the order of the dense path), ``V`` their
        probabilities divided by the row's sum, ``count`` how many (padding: class -1, value 0)."""
        at = self._select(rows)
        ind, val = self._ind[at], self._val[at].astype(np.float64)
        order = np.lexsort((ind, -val), axis=1) if ind.size else np.zeros(ind.shape, dtype=np.int64)
        ind = np.take_along_axis(ind, order, axis=1)
        val = np.take_along_axis(val, order, axis=1)
        count = (val > 0).sum(axis=1)
        V = val / val.sum(axis=1, keepdims=True)
        ind = np.where(val > 0, ind, -1)
        return ind, V, count.astype(np.int64)

    def toarray(self, rows=slice(None)) -> np.ndarray:
        """The dense rows (zeros outside the top-k): for checks at small ``K``."""
        at = self._select(rows)
        ind, val = self._ind[at], self._val[at].astype(np.float64)
        out = np.zeros((ind.shape[0], self.n_classes))
        np.put_along_axis(out, ind, val, axis=1)
        return out

    def save(self, path: str | os.PathLike) -> None:
        """An ``.npz`` that :meth:`load` (and ``svbop report --test``) reads back."""
        np.savez(path, indices=self.indices, values=self.values, K=np.int64(self.n_classes),
                 kind=np.array("probabilities"))

    @classmethod
    def load(cls, path: str | os.PathLike, kind: str | None = None) -> "SparseOutputs":
        """Read an ``.npz`` with ``indices``, ``values`` and ``K`` (and optionally ``kind``); every check
        names the file.  Each member's header is checked against the archive before its array is read
        (a header cannot make it allocate more than the file holds: :class:`svbop.io.NpzReader`).

        ``kind``: ``"probabilities"`` or ``"logits"``; ``None`` or ``"auto"``: the file's ``kind``, or,
        without one, probabilities when every value lies in [0, 1] and every row sums to at most
        ``1 + 1e-6``, else logits (as ``svbop report --outputs auto`` decides for dense scores).
        """
        from ._npz import NpzReader

        path = os.fspath(path)
        with NpzReader(path, "file of top-k outputs (indices, values, K)") as z:
            missing = [key for key in ("indices", "values", "K") if key not in z]
            if missing:
                raise ValueError(f"{path}: top-k outputs need the arrays indices, values and K; missing "
                                 f"{', '.join(missing)} (it holds {', '.join(sorted(z.files)) or 'nothing'})")
            K = z["K"]
            if K.shape != () or K.dtype.kind not in "iu":
                raise ValueError(f"{path}: K must be one integer (the number of classes), got {K.dtype} of shape {K.shape}")
            stored = str(z["kind"]) if "kind" in z else None
            indices, values = z["indices"], z["values"]
        if kind in (None, "auto"):
            kind = stored or _detect_kind(values)
        return cls(indices, values, int(K), kind, source=path)


def _detect_kind(values) -> str:
    """``"probabilities"`` when every value lies in [0, 1] and every row sums to at most 1 + 1e-6, else
    ``"logits"`` (block by block)."""
    v = np.asarray(values)
    if v.ndim != 2 or v.dtype.kind not in "iuf":
        return "probabilities"  # the checks of SparseOutputs name what is wrong
    for lo in range(0, v.shape[0], _CHECK_ROWS):
        block = v[lo:lo + _CHECK_ROWS]
        if not (np.all(block >= 0) and np.all(block <= 1)
                and np.all(block.sum(axis=1, dtype=np.float64) <= 1 + _SUM_TOLERANCE)):
            return "logits"
    return "probabilities"


def is_sparse_outputs_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an ``.npz`` holding top-k outputs (``indices``, ``values`` and ``K``)."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        return False
    try:
        with zipfile.ZipFile(path) as z:
            names = {n[:-4] if n.endswith(".npy") else n for n in z.namelist()}
    except (OSError, zipfile.BadZipFile):
        return False
    return {"indices", "values", "K"} <= names
