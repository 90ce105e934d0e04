"""Conformal sets of outputs held in a :mod:`dask.array`, block by block (``pip install -e ".[dask]"`` in a checkout).

A fitted :class:`~svbop.conformal.ConformalSetPredictor` (or
:class:`~svbop.conformal.RiskControlSetPredictor`) given a dask array scores it one block of rows
at a time, on whatever scheduler is active (threads, processes, or a ``dask.distributed``
cluster): each task holds one block of rows and its outputs, never the whole array.  Their
methods dispatch here when ``P`` is a dask array; the functions can also be called directly.

* :func:`predict_mask` returns a lazy boolean dask array chunked by the rows of ``P``.
* :func:`predict_blocks` returns one lazy :class:`~svbop.sets.SetPredictions` per block of rows
  (``dask.delayed``); :func:`predict` computes them and joins them.
* :func:`fit` computes the calibration scores block by block and selects their exact
  ``ceil((n+1)(1-epsilon))``-th smallest with :func:`order_statistic` (an exact radix selection
  over the scores' bits: a few passes of per-block histograms, then one gather of the scores left
  in the selected bin): the same ``quantile_`` as the single-process fit, bit for bit.
* :func:`npy_rows`: a ``.npy`` file (memory-mapped on the worker that reads each block) as a dask array.
* :class:`SparseBlocks`: top-k outputs (``indices`` and ``values``) held in dask arrays; each task
  scores its block as :class:`svbop.SparseOutputs`, with the same sets and ``quantile_`` as the
  single-process call on the whole :class:`svbop.SparseOutputs`.

*The randomised scores' uniforms.*  A single-process call draws one uniform per row, in row order,
from the fitted model's generator (a PCG64 stream): row ``i`` of a call gets the draw that
follows the ``i`` draws before it.  The dask path gives row ``i`` exactly that draw: the stream's
state is taken when the call is made, and the task of the block starting at row ``r0`` jumps the
generator ahead by ``r0`` draws (``PCG64.advance``) before drawing its rows' uniforms; the model's
generator is then advanced by ``n`` draws, as the single-process call would have consumed them.
The sets therefore do not depend on the chunking, equal the single-process call's bit for bit,
and the next call of the model gets fresh uniforms; computing the returned lazy array twice gives
the same sets (the state is fixed when the call is made).  ``row_seeds=`` (one integer per row, a
numpy or dask array) works as in the single-process call.  The calibration rows' uniforms are
drawn the same way from the fit's stream 0.

:func:`fit_risk` is :meth:`RiskControlSetPredictor.fit` for ``loss="miscoverage"``, whose
``lambda_`` is an order statistic of the label scores.

Refused on dask arrays (one line, before any work): ``fit`` with ``groups``, ``weights``,
``class_weights``, ``label_noise``, ``class_conditional`` or the Bayes-optimal families
(``fbeta``, ``credal``), whose calibration needs every row in one process (compute ``P_cal``
first); :meth:`RiskControlSetPredictor.fit` with another loss, and :meth:`LearnThenTest.fit`.
"""

from __future__ import annotations

import copy
import math
import sys

import numpy as np

__all__ = ["is_dask_array", "SparseBlocks", "predict_mask", "predict_blocks", "predict", "fit", "fit_risk",
           "order_statistic", "npy_rows"]

#: At most this many scores are gathered into the calling process by :func:`order_statistic`
#: (8 MB of float64): a bin holding more is split by a further histogram pass.
MAX_GATHER = 1 << 20
#: Bins of one histogram pass of :func:`order_statistic` (16 bits of the scores' keys per pass).
_BITS = 16


def is_dask_array(x) -> bool:
    """Whether ``x`` is held in dask: a ``dask.array.Array``, or top-k outputs in dask arrays
    (:class:`SparseBlocks`).  Without importing dask: such an object can only exist once
    ``dask.array`` is imported."""
    mod = sys.modules.get("dask.array")
    return mod is not None and isinstance(x, (getattr(mod, "Array", ()), SparseBlocks))


class SparseBlocks:
    """A model's top-k outputs held in dask arrays (:class:`svbop.SparseOutputs` by blocks of rows).

    Parameters
    ----------
    indices : dask array of int, shape (n, k)
        Each row's ``k`` classes (unique within the row).
    values : dask array of float, shape (n, k)
        Their probabilities or logits (rechunked to the rows of ``indices``).
    n_classes : int
        ``K``.
    kind : {"probabilities", "logits"}

    Each task builds the :class:`svbop.SparseOutputs` of its block of rows (every check of top-k
    outputs applies there, the error naming the block's rows) and scores it as the single-process
    call scores top-k outputs; shapes, dtypes, ``k`` and ``K`` are checked here, before any work.
    """

    def __init__(self, indices, values, n_classes: int, kind: str = "probabilities") -> None:
        from ..sparse_outputs import check_top_k_shapes

        _, da = _dask()
        for name, a in (("indices", indices), ("values", values)):
            if not is_dask_array(a) or isinstance(a, SparseBlocks):
                raise ValueError(f"{name} must be a dask array, got {type(a).__name__} (numpy top-k outputs:"
                                 " svbop.SparseOutputs)")
            if a.ndim == 2 and any(math.isnan(c) for c in a.shape):
                raise ValueError(f"{name} has unknown chunk sizes: call {name}.compute_chunk_sizes() first")
        check_top_k_shapes(indices, values, n_classes, kind)
        k = indices.shape[1]
        if indices.dtype.kind not in "iu":
            raise ValueError(f"indices must be integers, got dtype {indices.dtype}")
        if values.dtype.kind != "f":
            raise ValueError(f"values must be floats, got dtype {values.dtype}")
        self.indices = indices.rechunk({1: -1})
        self.values = values.rechunk((self.indices.chunks[0], (k,)))
        self.n_classes = int(n_classes)
        self.kind = kind
        self.ndim = 2

    @property
    def shape(self) -> tuple[int, int]:
        return (self.indices.shape[0], self.n_classes)

    @property
    def k(self) -> int:
        return self.indices.shape[1]

    @property
    def chunks(self):
        return (self.indices.chunks[0], (self.n_classes,))

    def __getitem__(self, rows) -> "SparseBlocks":
        """The rows ``rows`` (a slice or row indices), as top-k outputs in dask arrays."""
        if isinstance(rows, tuple):
            raise ValueError("SparseBlocks takes rows only (P[rows]), not a column index")
        return SparseBlocks(self.indices[rows], self.values[rows], self.n_classes, self.kind)

    def __repr__(self) -> str:
        return f"SparseBlocks(n={self.shape[0]}, k={self.k}, K={self.n_classes}, kind={self.kind!r})"


def _dask():
    try:
        import dask
        import dask.array as da
    except ImportError:  # pragma: no cover - only reached with a dask array, so dask is there
        raise ImportError('svbop\'s dask path needs dask: pip install -e ".[dask]" in a checkout') from None
    return dask, da


def _check_matrix(P, name: str, n_classes: int | None = None):
    """``P`` checked as a dask matrix of probabilities (shape, dtype, known chunks), one column chunk
    (top-k outputs: checked when made, and against ``n_classes``)."""
    if isinstance(P, SparseBlocks):
        if n_classes is not None and P.shape[1] != n_classes:
            raise ValueError(f"{name} has {P.shape[1]} classes but the predictor was calibrated on {n_classes}")
        return P
    if P.ndim != 2:
        raise ValueError(f"{name} must be 2-D of shape (n_samples, n_classes), got a dask array of shape {P.shape}")
    if any(math.isnan(c) for c in P.shape):
        raise ValueError(f"{name} has unknown chunk sizes (shape {P.shape}): call {name}.compute_chunk_sizes() first")
    if P.shape[1] < 1:
        raise ValueError(f"{name} has no classes (shape {P.shape})")
    if P.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold numbers, got a dask array of dtype {P.dtype}")
    if n_classes is not None and P.shape[1] != n_classes:
        raise ValueError(f"{name} has {P.shape[1]} classes but the predictor was calibrated on {n_classes}")
    if P.numblocks[1] > 1:  # a row's classes in one block: the sets need the whole row
        P = P.rechunk({1: -1})
    return P


def _parts(P) -> list:
    """One delayed input per block of rows: a block of ``P``, or the ``(indices, values)`` of one."""
    if isinstance(P, SparseBlocks):
        return list(zip(P.indices.to_delayed().ravel(), P.values.to_delayed().ravel()))
    return list(P.to_delayed().ravel())


def _block_input(X, sparse):
    """The block a task scores: ``X`` itself, or the :class:`svbop.SparseOutputs` of its top-k parts."""
    if sparse is None:
        return X
    from ..sparse_outputs import SparseOutputs

    return SparseOutputs(X[0], X[1], sparse[0], kind=sparse[1])


def _sparse(P):
    return (P.n_classes, P.kind) if isinstance(P, SparseBlocks) else None


def _row_blocks(P):
    """``(r0, r1)`` of every block of rows of ``P``."""
    bounds = np.concatenate([[0], np.cumsum(P.chunks[0])]).astype(np.int64).tolist()
    return list(zip(bounds[:-1], bounds[1:]))


def _per_block(x, P, name: str, integer: bool = False):
    """A 1-D companion of ``P``'s rows (numpy-like or dask): ``None``, or one part per block of
    rows (a numpy slice, or a delayed block of the dask array rechunked as ``P``'s rows)."""
    if x is None:
        return None
    n = P.shape[0]
    if is_dask_array(x):
        if x.ndim != 1 or x.shape[0] != n:
            raise ValueError(f"{name}: expected {n} values (one per row of P), got a dask array of shape {x.shape}")
        if integer and x.dtype.kind not in "iu":
            raise ValueError(f"{name}: expected integers, got a dask array of dtype {x.dtype}")
        return list(x.rechunk((P.chunks[0],)).to_delayed().ravel())
    a = np.asarray(x)
    if a.shape != (n,):
        raise ValueError(f"{name}: expected {n} values (one per row of P), got shape {a.shape}")
    if integer and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: expected integers, got dtype {a.dtype}")
    return [a[r0:r1] for r0, r1 in _row_blocks(P)]


def _jumped(state: dict, r0: int) -> np.random.Generator:
    """The generator of ``state`` advanced by ``r0`` draws of one float64 each (PCG64)."""
    bg = getattr(np.random, state["bit_generator"])()
    bg.state = state
    return np.random.Generator(bg.advance(r0))


def _call_stream(model, n: int, row_seeds) -> dict | None:
    """The state of ``model``'s test-row generator for this call (``None`` when no uniforms are
    drawn from it), the generator advanced by the ``n`` draws the call consumes."""
    if not getattr(model, "randomized", False) or row_seeds is not None:
        return None
    if getattr(model, "_test_rng", None) is None:  # as ConformalSetPredictor._test_uniforms creates it
        model._test_rng = np.random.default_rng(np.random.SeedSequence(model.seed_, spawn_key=(1,)))
    state = model._test_rng.bit_generator.state
    model._test_rng.bit_generator.advance(n)
    return state


def _in_block(r0: int, r1: int, name: str, fn):
    """``fn()``, a ``ValueError`` prefixed with the block's rows (its row numbers count from ``r0``)."""
    try:
        return fn()
    except ValueError as e:
        raise ValueError(f"{name} rows {r0}:{r1} (one dask block; rows below count from {r0}): {e}") from None


def _block_call(method: str, model, X, r0: int, state, chunk_bytes: int, kw: dict, sparse=None):
    m = model
    if state is not None:  # this block's uniforms: the call's stream jumped ahead to row r0
        m = copy.copy(model)
        m._test_rng = _jumped(state, r0)
    kw = {k: v for k, v in kw.items() if v is not None}
    fn = getattr(m, method)
    r1 = r0 + (X[0] if sparse else X).shape[0]
    return _in_block(r0, r1, "P", lambda: fn(_block_input(X, sparse), chunk_bytes=chunk_bytes, **kw))


def _block_calls(method: str, model, P, groups, weights, row_seeds, chunk_bytes, **extra):
    """One delayed ``model.<method>`` per block of rows of ``P`` (checked), and ``P``'s row blocks."""
    dask, _ = _dask()
    if not hasattr(model, "n_classes_"):
        raise ValueError(f"{type(model).__name__} is not fitted: call fit(P_cal, y_cal) first")
    P = _check_matrix(P, "P", model.n_classes_)
    if isinstance(P, SparseBlocks) and hasattr(model, "_lazy_refusal"):  # what top-k outputs cannot do, now
        model._lazy_refusal(P, groups, "predict")
    blocks = _row_blocks(P)
    parts = {"groups": _per_block(groups, P, "groups"), "weights": _per_block(weights, P, "weights"),
             "row_seeds": _per_block(row_seeds, P, "row_seeds", integer=True)}
    state = _call_stream(model, P.shape[0], row_seeds)
    m = dask.delayed(model, pure=False)  # one key: the model travels once to each worker
    call = dask.delayed(_block_call, pure=True)
    out = []
    sparse = _sparse(P)
    for b, (X, (r0, _)) in enumerate(zip(_parts(P), blocks)):
        kw = {k: (v[b] if v is not None else None) for k, v in parts.items()}
        out.append(call(method, m, X, r0, state, int(chunk_bytes), {**kw, **extra}, sparse))
    return out, blocks, P


def predict_mask(model, P, groups=None, *, weights=None, chunk_bytes: int | None = None, row_seeds=None):
    """``model.predict_mask`` of a dask array ``P`` (n, K): a lazy boolean dask array of shape
    ``(n, K)`` chunked by ``P``'s rows, one task per block of rows.  ``groups``, ``weights`` and
    ``row_seeds`` (one per row) are numpy or dask arrays, as the model's ``predict_mask`` takes them."""
    _, da = _dask()
    calls, blocks, P = _block_calls("predict_mask", model, P, groups, weights, row_seeds, _chunk(chunk_bytes))
    K = P.shape[1]
    parts = [da.from_delayed(c, shape=(r1 - r0, K), dtype=bool) for c, (r0, r1) in zip(calls, blocks)]
    return da.concatenate(parts, axis=0) if parts else da.zeros((0, K), dtype=bool)


def predict_blocks(model, P, groups=None, *, weights=None, chunk_bytes: int | None = None, row_seeds=None,
                   **kwargs) -> list:
    """``model.predict`` of every block of rows of a dask array ``P``: a list of ``dask.delayed``
    :class:`~svbop.sets.SetPredictions`, one per block of rows in order (``kwargs``: the model's
    other ``predict`` keywords, e.g. ``return_nodes``)."""
    calls, _, _ = _block_calls("predict", model, P, groups, weights, row_seeds, _chunk(chunk_bytes), **kwargs)
    return calls


def predict(model, P, groups=None, *, weights=None, chunk_bytes: int | None = None, row_seeds=None, **kwargs):
    """The sets of :func:`predict_blocks`, computed (on the active scheduler) and joined into one
    :class:`~svbop.sets.SetPredictions` of ``P``'s rows: the single-process ``model.predict(P)``."""
    dask, _ = _dask()
    calls = predict_blocks(model, P, groups, weights=weights, chunk_bytes=chunk_bytes, row_seeds=row_seeds, **kwargs)
    parts = list(dask.compute(*calls))
    if kwargs.get("return_nodes"):
        sets = _join([s for s, _ in parts], P.shape[1])
        return sets, [node for _, nodes in parts for node in nodes]
    return _join(parts, P.shape[1])


def _join(parts, K: int):
    from ..sets import SetPredictions

    if not parts:
        return SetPredictions(np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64), K)
    offsets = np.cumsum([0] + [p.indices.size for p in parts[:-1]])
    indptr = np.concatenate([[0]] + [p.indptr[1:] + o for p, o in zip(parts, offsets)])
    eu = None
    if all(p.expected_utility is not None for p in parts):
        eu = np.concatenate([p.expected_utility for p in parts])
    return SetPredictions(np.concatenate([p.indices for p in parts]), indptr, K, eu)


def _chunk(chunk_bytes):
    from .._prefix import DEFAULT_CHUNK_BYTES

    return DEFAULT_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)


# --- fit: calibration scores block by block, then their exact order statistic ------------------


def _block_scores(model, X, y, r0: int, seed: int, chunk_bytes: int, sparse=None) -> np.ndarray:
    """The calibration scores of one block of rows (``X``, ``y`` starting at row ``r0``): the
    single-process fit's (``model._scores``; top-k outputs: ``lazy_calibration_scores``)."""
    from .._prefix import as_score_matrix
    from ..metrics import check_labels

    def scores():
        P = _block_input(X, sparse) if sparse else as_score_matrix(X, "P_cal")
        yy = check_labels(y, P.shape, "y_cal")
        U = None
        if model.randomized:  # the fit's stream 0, jumped ahead to row r0
            bg = np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(0,))).advance(r0)
            U = np.random.Generator(bg).random(yy.size)
        if sparse:
            from .lazy import lazy_calibration_scores

            return np.asarray(lazy_calibration_scores(P, yy, model.score, model.k_reg, model.lam, U), dtype=np.float64)
        return np.asarray(model._scores(P, yy, chunk_bytes, U), dtype=np.float64)

    return _in_block(r0, r0 + (X[0] if sparse else X).shape[0], "P_cal", scores)


def fit(model, P_cal, y_cal, groups=None, *, weights=None, class_weights=None, chunk_bytes: int | None = None):
    """``model.fit(P_cal, y_cal)`` with ``P_cal`` a dask array (n, K) and ``y_cal`` a dask or numpy
    array (n,): the calibration scores are computed one block of rows per task and kept on the
    cluster (``persist``: 8 bytes a row), and ``quantile_`` is their exact
    ``ceil((n+1)(1-epsilon))``-th smallest (:func:`order_statistic`), the single-process fit's value.
    The marginal threshold scores only (``lac``, ``aps``, ``raps``, ``saps``, ``topk``, ``margin``,
    ``hierarchical``)."""
    from ._common import _epsilon, _seed

    _, da = _dask()
    name = type(model).__name__
    if not hasattr(model, "_scores") or not hasattr(model, "epsilon"):
        raise ValueError(f"{name}.fit takes numpy-like arrays only; P_cal is a dask array: compute it first"
                         " (P_cal.compute())")
    why = ("groups" if groups is not None else "weights" if weights is not None
           else "class_weights" if class_weights is not None
           else "label_noise" if getattr(model, "label_noise", None) is not None
           else f"class_conditional={model.class_conditional!r}" if model.class_conditional
           else f"score={model.score!r}" if model.score in ("fbeta", "credal") else None)
    if why is not None:
        raise ValueError(f"fit on a dask array supports the marginal threshold scores, not {why} (its calibration"
                         " needs every row in one process): compute P_cal first (P_cal.compute())")
    P = _check_matrix(P_cal, "P_cal")
    if isinstance(P, SparseBlocks) and hasattr(model, "_lazy_refusal"):
        model._lazy_refusal(P, groups, "calibrate")
    if P.shape[0] == 0:
        raise ValueError(f"P_cal has no rows (shape {P.shape}, dtype {P.dtype}): the calibration set is empty")
    eps = _epsilon(model.epsilon)
    ys = _per_block(y_cal, P, "y_cal", integer=True)
    chunk_bytes = _chunk(chunk_bytes)
    seed = _seed(model.random_state)
    dask, _ = _dask()
    call = dask.delayed(_block_scores, pure=True)
    m = dask.delayed(model, pure=False)
    sparse = _sparse(P)
    parts = [da.from_delayed(call(m, X, ys[b], r0, seed, chunk_bytes, sparse), shape=(r1 - r0,), dtype=np.float64)
             for b, (X, (r0, r1)) in enumerate(zip(_parts(P), _row_blocks(P))) if r1 > r0]
    s = da.concatenate(parts).persist()
    n = P.shape[0]
    k = math.ceil((n + 1) * (1 - eps))
    q = order_statistic(s, min(k, n))  # every score computed (and every row checked) even when k > n
    for attr in ("quantiles_", "parameter_", "utility_", "groups_", "group_counts_", "group_quantiles_",
                 "small_groups_", "_group_cals", "_group_index", "clusters_", "_weighted", "rank_limits_",
                 "class_weights_"):
        model.__dict__.pop(attr, None)
    model.seed_ = seed
    model._test_rng = None
    model._p_cells = model._tau_rng = None  # predict_p needs the scores in one process: not kept
    model.quantile_ = math.inf if k > n else q
    model.n_classes_ = P.shape[1]
    return model


def _keys(x: np.ndarray) -> np.ndarray:
    """Order-preserving unsigned keys of float64 values (``a < b`` iff ``key(a) < key(b)``, but for
    ``-0.0 < 0.0``; NaN excluded)."""
    b = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    sign = np.uint64(1 << 63)
    return np.where(b & sign, ~b, b | sign)


def _value(key: int) -> float:
    b = key & ~(1 << 63) if key >> 63 else ~key & (2**64 - 1)
    return float(np.array([b], dtype=np.uint64).view(np.float64)[0])


def _key_range(x):
    if x.size and np.isnan(x).any():
        raise ValueError("order_statistic: the scores hold NaN")
    k = _keys(x)
    return np.array([[k.min() if k.size else np.uint64(2**64 - 1), k.max() if k.size else np.uint64(0)]],
                    dtype=np.uint64)


def _key_histogram(x, lo: int, hi: int, shift: int, nbins: int):
    k = _keys(x)
    k = k[(k >= np.uint64(lo)) & (k <= np.uint64(hi))]
    return np.bincount(((k - np.uint64(lo)) >> np.uint64(shift)).astype(np.intp), minlength=nbins)[None, :]


def _key_select(x, lo: int, hi: int):
    k = _keys(x)
    return np.asarray(x, dtype=np.float64)[(k >= np.uint64(lo)) & (k <= np.uint64(hi))]


def order_statistic(s, k: int, *, max_gather: int = MAX_GATHER) -> float:
    """The exact ``k``-th smallest value (1-based) of the 1-D float dask array ``s``, that of
    ``np.partition(s, k - 1)[k - 1]``, with at most ``max_gather`` values in the calling process.

    A radix selection over order-preserving 64-bit keys of the values: one pass for the keys'
    range, then passes of per-block histograms of the next 16 bits of the keys within the current
    range (summed over the blocks by a tree reduction) until the bin holding the ``k``-th value
    has at most ``max_gather`` values, or a single key; then those values are gathered and the
    ``k``-th is selected among them.  At most four histogram passes (64 bits); each block's task
    holds its block and a histogram of 65,536 counts.  Persist ``s`` first when it is costly to
    compute.
    """
    dask, da = _dask()
    n = s.shape[0]
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ValueError(f"k must be an integer in 1..{n} (the length of s), got {k!r}")
    nb = s.numblocks[0]
    rng = s.map_blocks(_key_range, new_axis=1, chunks=((1,) * nb, (2,)), dtype=np.uint64).compute()
    lo, hi = int(rng[:, 0].min()), int(rng[:, 1].max())
    below = 0  # values with a key below lo
    count = n  # values with a key in [lo, hi]
    while True:
        if lo == hi:
            return _value(lo)
        if count <= max_gather:
            parts = [dask.delayed(_key_select, pure=True)(b, lo, hi) for b in s.to_delayed().ravel()]
            vals = np.concatenate(dask.compute(*parts))
            return float(np.partition(vals, k - below - 1)[k - below - 1])
        shift = max(0, (hi - lo).bit_length() - _BITS)
        nbins = ((hi - lo) >> shift) + 1
        hist = s.map_blocks(_key_histogram, lo, hi, shift, nbins, new_axis=1, chunks=((1,) * nb, (nbins,)),
                            dtype=np.int64).sum(axis=0).compute()
        cum = np.cumsum(hist)
        j = int(np.searchsorted(cum, k - below, side="left"))
        below += int(cum[j - 1]) if j else 0
        count = int(hist[j])
        lo, hi = lo + (j << shift), min(hi, lo + (j << shift) + (1 << shift) - 1)


# --- memory-mapped inputs ------------------------------------------------------------------------


def _read_rows(path: str, r0: int, r1: int) -> np.ndarray:
    """Rows ``r0:r1`` of the ``.npy`` at ``path``: a view of its memory map, not a copy (the map, and
    its pages, go with the last task that uses the block; the library reads a mapped block by
    sub-blocks and gives their pages back, svbop._blocks)."""
    return np.load(path, mmap_mode="r")[r0:r1]


def npy_rows(path, chunk_rows: int):
    """A 2-D ``.npy`` file as a dask array of blocks of ``chunk_rows`` rows, each read (through a
    memory map) by the task that uses it: no task, and no process, holds the whole file.  The
    path must be readable by every worker (a shared file system on a cluster)."""
    dask, da = _dask()
    path = str(path)
    try:
        mm = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable .npy file ({e})") from None
    if mm.ndim != 2 or not mm.flags.c_contiguous:
        raise ValueError(f"{path}: expected a 2-D C-ordered array, got shape {mm.shape}"
                         f"{' in Fortran order' if mm.ndim == 2 else ''}")
    if isinstance(chunk_rows, (bool, np.bool_)) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be an integer >= 1, got {chunk_rows!r}")
    n, K = mm.shape
    dtype = mm.dtype
    del mm
    read = dask.delayed(_read_rows, pure=True)
    parts = [da.from_delayed(read(path, r0, min(n, r0 + chunk_rows)), shape=(min(n, r0 + chunk_rows) - r0, K),
                             dtype=dtype) for r0 in range(0, n, int(chunk_rows))]
    return da.concatenate(parts, axis=0) if parts else da.zeros((0, K), dtype=dtype)


# --- conformal risk control: the miscoverage loss's lambda is an order statistic -----------------


def _risk_block_scores(model, X, y, r0: int, chunk_bytes: int) -> np.ndarray:
    """The label scores of one block of calibration rows, as ``RiskControlSetPredictor.fit`` computes them."""
    from .._prefix import as_score_matrix, row_stats
    from ..metrics import check_labels
    from .scores import _calibration_scores

    def scores():
        P = as_score_matrix(X, "P_cal")
        yy = check_labels(y, P.shape, "y_cal")
        if model.score == "lac":
            return 1.0 - P[np.arange(yy.size), yy] / row_stats(P, 0, "P_cal")[1]
        return _calibration_scores(P, yy, model.score, model.k_reg, model.lam, chunk_bytes)

    return _in_block(r0, r0 + X.shape[0], "P_cal", scores)


def fit_risk(model, P_cal, y_cal, *, chunk_bytes: int | None = None):
    """``RiskControlSetPredictor.fit`` on a dask array, for ``loss="miscoverage"``: the total loss at
    ``lambda`` is the number of label scores above it, so ``lambda_`` (the smallest candidate whose
    total is within ``alpha (n+1) - 1``) is the ``(n - L)``-th smallest label score,
    ``L = floor(alpha (n+1) - 1)`` (``-inf`` when ``L >= n``, ``inf`` when ``L < 0``), selected
    exactly by :func:`order_statistic`; ``calibration_risk_`` is counted on the workers.  The same
    ``lambda_`` and ``calibration_risk_`` as the single-process fit."""
    from fractions import Fraction

    from ._common import _check_level

    _, da = _dask()
    name = type(model).__name__
    loss = getattr(model, "loss_", None)
    if getattr(loss, "name", None) != "miscoverage" or isinstance(P_cal, SparseBlocks):
        what = "top-k outputs in dask arrays" if isinstance(P_cal, SparseBlocks) \
            else f"loss {getattr(loss, 'name', loss)!r}"
        raise ValueError(f"{name}.fit on a dask array takes loss='miscoverage' on a dask matrix (its lambda_ is an"
                         f" order statistic of the label scores), not {what}: compute P_cal first (P_cal.compute())")
    P = _check_matrix(P_cal, "P_cal")
    n = P.shape[0]
    if n == 0:
        raise ValueError(f"P_cal has no rows (shape {P.shape}, dtype {P.dtype}): the calibration set is empty")
    ys = _per_block(y_cal, P, "y_cal", integer=True)
    chunk_bytes = _chunk(chunk_bytes)
    dask, _ = _dask()
    call = dask.delayed(_risk_block_scores, pure=True)
    m = dask.delayed(model, pure=False)
    parts = [da.from_delayed(call(m, X, ys[b], r0, chunk_bytes), shape=(r1 - r0,), dtype=np.float64)
             for b, (X, (r0, r1)) in enumerate(zip(_parts(P), _row_blocks(P))) if r1 > r0]
    s = da.concatenate(parts).persist()
    alpha = _check_level(model.alpha, "alpha", loss.bound)
    # RiskControlSetPredictor.fit's test, total <= limit, in its arithmetic; totals are counts here
    budget = alpha * (n + 1) - Fraction(loss.bound)
    limit = float(budget) * (1 + 8 * np.finfo(np.float64).eps) if budget > 0 else float(budget)
    L = math.floor(limit)
    lowest = order_statistic(s, 1)  # every score computed (and every row checked) whatever L
    if L < 0:  # no lambda qualifies: every class (the miscoverage of the full set is 0)
        lam, risk = math.inf, 0.0
    elif L >= n:  # the empty sets already qualify
        lam, risk = -math.inf, 1.0
    else:
        lam = lowest if n - L == 1 else order_statistic(s, n - L)
        risk = int((s > lam).sum().compute()) / n
    model.n_classes_ = P.shape[1]
    model.lambda_, model.calibration_risk_, model.B_ = float(lam), float(risk), loss.bound
    return model
