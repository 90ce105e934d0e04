"""The paper's flat model: one-vs-rest L2-regularised logistic regression trained with liblinear.

Mortier et al. (2021) train their flat classifier with liblinear's dual solver for L2-regularised
logistic regression (``-s 7``), one binary problem per class (class ``c`` against the rest) with a
bias feature (``-B 1``), and turn the K one-vs-rest scores ``w_c . x + b_c`` into a distribution
with a softmax.  This module does the same:

* :func:`train_ovr` trains the K binary problems class by class, so that progress can be shown,
  a subset of classes (a *chunk*) can be trained by a separate job (:func:`merge_models` joins the
  chunks), and classes can be trained in parallel.
* :class:`LinearModel` holds the weights, computes scores / probabilities, saves and loads itself
  (``.npz``, no pickle) and can be sparsified with :meth:`LinearModel.clip` (the paper zeroes
  weights below 0.1 in absolute value on DMOZ and LSHTC1).

Reproducibility
---------------
liblinear's dual coordinate-descent solvers visit the examples in an order drawn from the C
library's process-wide ``rand()``, which liblinear never seeds.  With the paper's loose stopping
tolerance (``eps=0.1``) the weights therefore depend on how many random numbers were drawn before
(differences of the order of the tolerance, about 1e-3 on the weights).  :func:`train_ovr` calls
``srand(seed)`` before every class, which makes every class's weights a deterministic function of
the data and the parameters alone: the same whether the class is trained alone, in a chunk or with
all others.  Parallel training uses forked worker *processes* (``backend="processes"``, the
default), each with its own ``rand()`` state, so ``n_jobs > 1`` gives bit-for-bit the same model as
``n_jobs=1``.  ``backend="threads"`` is also available (liblinear releases the GIL), but all
threads then draw from the one shared ``rand()`` state and the result is not reproducible
(it differs from run to run within the solver tolerance).

For the same reasons the weights differ, within the solver tolerance, from those of liblinear's
own multi-class training (``train -s 7 ...``): liblinear trains class ``c`` on the examples
reordered by class, continues one ``rand()`` stream over all classes, and its binary trainer puts
the positive examples first.  With a tight tolerance both converge to the same (unique) optimum.

Two-label and one-label problems
--------------------------------
For a binary problem liblinear stores one weight vector, for its *first* label (labels in order of
first appearance, except that ``{-1, +1}`` is reordered to put ``+1`` first); the vector is negated
when that label is ``-1``.  When a class has no training example, liblinear sees a single label
(``-1``) and trains "class ``-1``" against nothing, i.e. a logistic regression with every example
positive; negated, that is exactly the one-vs-rest model "never this class" (a negative score on
every training example, typically a bias of a few units below zero).  No special case is needed.
"""

from __future__ import annotations

import dataclasses

import ctypes
import logging
import mmap
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._checks import check_sparse_structure
from ._threads import _n_workers, _positive_int, cpu_count
from .io import NpzReader, check_scores, matrix_arrays, save_arrays
from .logs import progress as _progress

__all__ = ["LinearModel", "softmax", "train_ovr", "merge_models", "class_parts", "cpu_count"]

logger = logging.getLogger(__name__)

_FORMAT = "svbop.LinearModel"
_FORMAT_VERSION = 1
#: liblinear solvers for (binary) classification: 0-3 and 5-7 (4 is Crammer-Singer multi-class).
_CLASSIFICATION_SOLVERS = (0, 1, 2, 3, 5, 6, 7)
#: Bytes of float64 scores that :meth:`LinearModel.predict_proba` computes at once, by default.
_BLOCK_BYTES = 64 * 1024 * 1024


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------


def softmax(scores: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Row-wise softmax ``exp(s_c) / sum_k exp(s_k)``, numerically stable.

    The row maximum is subtracted before exponentiating, so huge scores neither overflow nor
    give NaN, and every row sums to 1 (up to rounding).

    Parameters
    ----------
    scores : array of shape (n_samples, n_classes) or (n_classes,)
        Real scores (finite, or ``-inf`` for impossible classes; a row needs one finite score).
    out : float64 array of the same shape, optional
        Where to write the result; may be ``scores`` itself (in place).

    Returns
    -------
    ndarray of float64, same shape as ``scores``
    """
    scores = np.asarray(scores)
    if scores.ndim not in (1, 2) or scores.shape[-1] == 0:
        raise ValueError(f"scores must be a non-empty 1-d or 2-d array, got shape {scores.shape}")
    if out is None:
        out = np.empty(scores.shape, dtype=np.float64)
    elif out.shape != scores.shape or out.dtype != np.float64:
        raise ValueError(
            f"out must be a float64 array of shape {scores.shape}, got {out.dtype} {out.shape}"
        )
    peak = np.max(scores, axis=-1, keepdims=True)
    with np.errstate(over="ignore"):  # a difference below -1.8e308 becomes -inf: exp gives 0
        np.subtract(scores, peak, out=out)
    np.exp(out, out=out)
    out /= np.sum(out, axis=-1, keepdims=True)
    return out


def _as_features(X: Any, name: str = "X") -> np.ndarray | sp.csr_matrix:
    """A float64 dense 2-d array or CSR matrix (other sparse formats are converted); a sparse
    matrix's indices are checked against its shape first (:func:`svbop._checks.check_sparse_structure`)."""
    if sp.issparse(X):
        check_sparse_structure(X, name)
        X = sp.csr_matrix(X)
        if X.dtype != np.float64:
            X = X.astype(np.float64)
        return X
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-d (n_samples, n_features), got shape {X.shape}")
    return X


def _as_sorted_csr(X: Any, n_features: int, name: str = "X") -> sp.csr_matrix:
    """``X`` as float64 CSR with sorted indices (a copy only where needed); checks the width and,
    for sparse ``X``, that every index lies inside it (:func:`svbop._checks.check_sparse_structure`)."""
    if sp.issparse(X):
        check_sparse_structure(X, name)
        X = sp.csr_matrix(X, dtype=np.float64)
    else:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            hint = " (use x.reshape(1, -1) for one sample)" if X.ndim == 1 else ""
            raise ValueError(f"{name} must be 2-d (n_samples, n_features), got shape {X.shape}{hint}")
        X = sp.csr_matrix(X)
    if X.shape[1] != n_features:
        raise ValueError(f"{name} has {X.shape[1]} features, the model has {n_features}")
    if not X.has_sorted_indices:
        X = X.copy()
        X.sort_indices()
    if X.nnz and not np.all(np.isfinite(X.data)):
        row = int(np.searchsorted(X.indptr, np.flatnonzero(~np.isfinite(X.data))[0], side="right") - 1)
        raise ValueError(f"{name}: row {row} contains NaN or an infinite value")
    return X


@dataclass
class LinearModel:
    """One-vs-rest linear scores ``X W^T + b`` for classes ``classes``.

    Attributes
    ----------
    W : ndarray of shape (K, D) or scipy.sparse.csr_matrix
        Weights, one row per class (CSR after :meth:`clip`).
    b : ndarray of shape (K,)
        Intercepts: liblinear's bias-feature weight times the bias value, so that the scores equal
        liblinear's decision values.
    classes : ndarray of shape (K,), int64
        Class id of each row: ``np.arange(K)`` for a full model, a subset for a chunk.
    clip_threshold : float or None
        The threshold of :meth:`clip` when the weights were clipped.
    """

    W: np.ndarray | sp.csr_matrix
    b: np.ndarray
    classes: np.ndarray
    clip_threshold: float | None = None

    def __post_init__(self) -> None:
        if sp.issparse(self.W):
            self.W = sp.csr_matrix(self.W, dtype=np.float64)
        else:
            self.W = np.asarray(self.W, dtype=np.float64)
        if self.W.ndim != 2:
            raise ValueError(f"W must be 2-d (n_classes, n_features), got shape {self.W.shape}")
        K = self.W.shape[0]
        self.b = np.asarray(self.b, dtype=np.float64)
        if self.b.shape != (K,):
            raise ValueError(f"b must have shape ({K},) to match W {self.W.shape}, got {self.b.shape}")
        classes = np.asarray(self.classes)
        if classes.shape != (K,) or (K and not np.issubdtype(classes.dtype, np.integer)):
            raise ValueError(
                f"classes must be {K} integers (one per row of W), got {classes.dtype} {classes.shape}"
            )
        self.classes = classes.astype(np.int64)
        if K and (self.classes.min() < 0 or np.unique(self.classes).size != K):
            raise ValueError("classes must be distinct non-negative integers")

    @property
    def n_classes(self) -> int:
        """Number of rows (classes) of the model."""
        return int(self.W.shape[0])

    @property
    def n_features(self) -> int:
        """Number of features ``D``."""
        return int(self.W.shape[1])

    @property
    def nnz(self) -> int:
        """Number of non-zero weights in ``W`` (the bias ``b`` not counted)."""
        return int(self.W.nnz if sp.issparse(self.W) else np.count_nonzero(self.W))

    @property
    def density(self) -> float:
        """Fraction of non-zero weights in ``W``."""
        size = self.W.shape[0] * self.W.shape[1]
        return self.nnz / size if size else 0.0

    def with_temperature(self, temperature: float) -> "LinearModel":
        """The model whose softmax is ``softmax((X W^T + b) / T)``: ``W / T`` and ``b / T``, a copy.

        Temperature scaling (:mod:`svbop.calibration`) of the flat model's probabilities, applied
        to the model itself so that SVBOP-Full and -HSG, which score the model, make their sets
        from the calibrated probabilities; the order of the classes in every row is unchanged.
        """
        from .calibration import _check_temperature

        T = _check_temperature(temperature)
        return dataclasses.replace(self, W=self.W / T, b=self.b / T)

    def decision_function(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """One-vs-rest scores ``X W^T + b``.

        Parameters
        ----------
        X : array or sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes), float64
        """
        X = self._check_features(X)
        return self._scores(X, self.W.T)

    def _check_features(self, X: Any) -> np.ndarray | sp.csr_matrix:
        X = _as_features(X)
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, the model has {self.n_features}")
        return X

    def _scores(self, X: np.ndarray | sp.csr_matrix, WT: Any) -> np.ndarray:
        """``X @ WT + b`` as a float64 array (``WT`` is ``W.T``, or a CSR copy of it)."""
        scores = X @ WT
        if sp.issparse(scores):
            scores = scores.toarray()
        scores = np.asarray(scores, dtype=np.float64)
        scores += self.b
        return scores

    def predict_proba(
        self, X: np.ndarray | sp.spmatrix, *, dtype: Any = np.float64, batch_size: int | None = None
    ) -> np.ndarray:
        """Softmax of the one-vs-rest scores (rows sum to 1), computed in blocks of rows.

        Parameters
        ----------
        X : array or sparse matrix of shape (n_samples, n_features)
        dtype : {numpy.float64, numpy.float32}, default float64
            dtype of the result.  Scores and softmax are computed in float64 either way; float32
            rounds each probability to 24 bits (relative error below ``6e-8``) and halves the
            memory (the pipeline stores the held-out rows' probabilities in float32: rule
            score_flat, :data:`svbop.io.SCORES_DTYPE`).  Rounding can make two probabilities
            that differ in float64 equal in float32.
        batch_size : int, optional
            Rows scored at once (default: blocks of about 64 MB of float64 scores).  The memory
            needed besides the result is one block's scores.  The result does not depend on it
            (bit for bit with sparse ``X``; BLAS may round a dense product differently).

        Returns
        -------
        ndarray of shape (n_samples, n_classes), of ``dtype``
        """
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError(f"dtype must be float64 or float32, got {dtype}")
        X = self._check_features(X)
        n, K = X.shape[0], self.n_classes
        if batch_size is None:
            batch_size = max(1, _BLOCK_BYTES // (8 * max(K, 1)))
        batch_size = _positive_int("batch_size", batch_size)
        # W^T once per call: scipy would convert the CSC view of a CSR W^T to CSR for every block
        WT = self.W.T.tocsr() if sp.issparse(self.W) else self.W.T
        out = np.empty((n, K), dtype=dtype)
        for lo in range(0, n, batch_size):
            hi = min(n, lo + batch_size)
            scores = self._scores(X[lo:hi], WT)
            if dtype == np.float64:
                softmax(scores, out=out[lo:hi])
            else:
                out[lo:hi] = softmax(scores, out=scores)
        return out

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """Class id (from ``classes``) of the highest score, shape (n_samples,)."""
        return self.classes[np.argmax(self.decision_function(X), axis=1)]

    def clip(self, threshold: float) -> LinearModel:
        """A copy with the weights ``|w| < threshold`` set to zero and ``W`` stored as CSR.

        The intercepts ``b`` are kept as they are.  The kept fraction is logged and available as
        :attr:`density`; the threshold is recorded in :attr:`clip_threshold`.
        """
        threshold = _clip_threshold("threshold", threshold)
        if sp.issparse(self.W):
            W = _clip_csr(self.W, threshold)
        else:
            W = sp.csr_matrix(np.where(np.abs(self.W) >= threshold, self.W, 0.0))
        clipped = LinearModel(W, self.b.copy(), self.classes.copy(), clip_threshold=threshold)
        logger.info(
            "clip |w| < %g: kept %d of %d weights (density %.4g, was %.4g)",
            threshold, clipped.nnz, W.shape[0] * W.shape[1], clipped.density, self.density,
        )
        return clipped

    @classmethod
    def from_liblinear(cls, model: Any) -> LinearModel:
        """Convert a trained liblinear classification model (python binding) to a LinearModel.

        Rows are put in increasing label order; labels must be non-negative integers.  A
        two-label model (one weight vector ``w`` for its first label) gives rows ``w`` and ``-w``.
        The scores equal liblinear's decision values.
        """
        labels = np.asarray(model.get_labels(), dtype=np.int64)
        D, nr_class = int(model.nr_feature), int(model.nr_class)
        if labels.size == 0 or labels.min() < 0:
            raise ValueError(f"model labels must be non-negative class ids, got {labels.tolist()}")
        bias = float(model.bias)
        n = D + 1 if bias >= 0 else D
        n_vectors = 1 if nr_class == 2 else nr_class
        w = np.ctypeslib.as_array(model.w, (n * n_vectors,)).reshape(n, n_vectors).T.copy()
        if nr_class == 2:
            w = np.vstack([w, -w])
        b = w[:, D] * bias if bias >= 0 else np.zeros(nr_class)
        order = np.argsort(labels)
        return cls(w[order, :D], b[order], labels[order])

    def save(self, path: str | os.PathLike) -> None:
        """Write the model to ``path`` (``.npz``, compressed, atomic, no pickle)."""
        arrays: dict[str, np.ndarray] = {
            "format": np.array(_FORMAT),
            "version": np.array(_FORMAT_VERSION),
            "b": self.b,
            "classes": self.classes,
            "clip_threshold": np.array(np.nan if self.clip_threshold is None else self.clip_threshold),
        }
        arrays.update(matrix_arrays(self.W, "W"))
        save_arrays(path, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> LinearModel:
        """Read a model written by :meth:`save`; errors name the file and the missing array."""
        with NpzReader(path, "LinearModel file") as data:
            get = data.__getitem__
            if str(get("format")) != _FORMAT:
                raise ValueError(f"{path}: format is {str(get('format'))!r}, expected {_FORMAT!r}")
            version = int(get("version"))
            if version > _FORMAT_VERSION:
                raise ValueError(f"{path}: format version {version} is newer than this code ({_FORMAT_VERSION})")
            W = data.matrix("W")
            b = get("b")
            threshold = float(get("clip_threshold"))
            try:
                model = cls(W, b, get("classes"), None if np.isnan(threshold) else threshold)
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
        _check_weights(path, W=model.W, b=model.b)
        return model


def _check_weights(path: str | os.PathLike, **arrays: Any) -> None:
    """Raise ``ValueError("<path>: ...")`` when a loaded weight array (dense, 1-D or sparse) holds
    a NaN or an infinity: such a model would load and then predict NaN probabilities."""
    for name, values in arrays.items():
        if sp.issparse(values):
            values = values.data
        values = np.asarray(values)
        if values.ndim == 2:
            check_scores(values, f"{path}: {name}")
        elif values.size and not np.isfinite(values).all():
            i = int(np.flatnonzero(~np.isfinite(values))[0])
            raise ValueError(f"{path}: {name} holds {float(values[i])!r} at position {i}; a model's weights must be finite")


def merge_models(models: Sequence[LinearModel], n_classes: int | None = None) -> LinearModel:
    """Join models trained on disjoint chunks of classes into one model, rows in class order.

    Parameters
    ----------
    models : sequence of LinearModel
        The chunks; their ``classes`` must be disjoint and together cover ``0..K-1``, and they
        must have the same number of features.
    n_classes : int, optional
        The expected ``K`` (default: the largest class id plus one).

    Returns
    -------
    LinearModel
        ``classes == np.arange(K)``; ``W`` is dense unless some chunk is sparse (then CSR).
    """
    models = list(models)
    if not models:
        raise ValueError("models is empty: nothing to merge")
    D = models[0].n_features
    for i, m in enumerate(models):
        if not isinstance(m, LinearModel):
            raise ValueError(f"models[{i}] is a {type(m).__name__}, not a LinearModel")
        if m.n_features != D:
            raise ValueError(f"models[{i}] has {m.n_features} features, models[0] has {D}")
    classes = np.concatenate([m.classes for m in models])
    K = int(classes.max()) + 1 if n_classes is None else int(n_classes)
    counts = np.bincount(classes, minlength=K)
    if np.any(counts > 1):
        dup = np.flatnonzero(counts > 1)
        raise ValueError(f"overlapping chunks: classes {_few(dup)} appear in more than one model")
    if counts.size > K:
        extra = np.flatnonzero(counts[K:]) + K
        raise ValueError(f"classes {_few(extra)} are outside 0..{K - 1}")
    missing = np.flatnonzero(counts == 0)
    if missing.size:
        raise ValueError(f"missing classes: {_few(missing)} are in no model (expected 0..{K - 1})")
    order = np.argsort(classes, kind="stable")
    if any(sp.issparse(m.W) for m in models):
        W: np.ndarray | sp.csr_matrix = sp.vstack([sp.csr_matrix(m.W) for m in models], format="csr")[order]
    else:
        W = np.concatenate([m.W for m in models], axis=0)[order]
    thresholds = {m.clip_threshold for m in models}
    threshold = thresholds.pop() if len(thresholds) == 1 else None
    b = np.concatenate([m.b for m in models])[order]
    return LinearModel(W, b, classes[order], clip_threshold=threshold)


def class_parts(n_classes: int, n_parts: int) -> list[np.ndarray]:
    """Split classes ``0..K-1`` into ``n_parts`` contiguous ranges of (nearly) equal size.

    The ranges are the chunks that separate jobs train (:func:`train_ovr` with ``classes=``) and
    :func:`merge_models` joins; when ``n_parts > K`` the last ranges are empty.
    """
    n_classes, n_parts = _positive_int("n_classes", n_classes), _positive_int("n_parts", n_parts)
    return [part.astype(np.int64) for part in np.array_split(np.arange(n_classes), n_parts)]


def _few(ids: np.ndarray, limit: int = 10) -> str:
    shown = ", ".join(str(int(i)) for i in ids[:limit])
    return f"[{shown}{', ...' if ids.size > limit else ''}] ({ids.size} in all)"


# --------------------------------------------------------------------------------------------
# training with liblinear
# --------------------------------------------------------------------------------------------


def _clip_threshold(name: str, value: Any) -> float:
    """A clipping threshold: a finite number >= 0, else ValueError naming ``name``."""
    ok = isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
    if not (ok and np.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _clip_csr(W: sp.csr_matrix, threshold: float) -> sp.csr_matrix:
    """A copy of ``W`` without its entries ``|w| < threshold``."""
    W = W.copy()
    W.data[np.abs(W.data) < threshold] = 0.0
    W.eliminate_zeros()
    return W


def _liblinear():
    try:
        from liblinear import liblinear as ll
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "train_ovr needs liblinear's python binding: pip install liblinear-official"
        ) from exc
    return ll


_libc = ctypes.CDLL(None)  # liblinear's rand() is the C library's process-wide one


def _make_problem(X: sp.csr_matrix, bias: float):
    """A liblinear ``problem`` for CSR ``X`` (labels left at 0), built without a per-row loop.

    Same layout as the binding's own ``problem(y, X)`` for CSR input: each row is its non-zero
    features (1-based indices), a bias node ``(D+1, bias)`` (index -1 when ``bias < 0``) and the
    terminator -1.
    """
    ll = _liblinear()
    N, D = X.shape
    if not X.has_sorted_indices:
        X = X.sorted_indices()
    counts = np.diff(X.indptr)
    rowptr = X.indptr.astype(np.int64) + 2 * np.arange(N + 1, dtype=np.int64)
    x_space = np.empty(X.nnz + 2 * N, dtype=ll.feature_node)
    pos = np.arange(X.nnz, dtype=np.int64) + 2 * np.repeat(np.arange(N, dtype=np.int64), counts)
    x_space["index"][pos] = X.indices + 1
    x_space["value"][pos] = X.data
    x_space["index"][rowptr[1:] - 2] = D + 1 if bias >= 0 else -1
    x_space["value"][rowptr[1:] - 2] = bias
    x_space["index"][rowptr[1:] - 1] = -1
    x_space["value"][rowptr[1:] - 1] = 0.0

    return _problem_of(x_space, rowptr, D, bias)


def _check_liblinear_options(C: Any, eps: Any, bias: Any, solver: Any = 7) -> None:
    """Refuse options liblinear would reject or misread, naming the option."""
    for name, value in (("C", C), ("eps", eps)):
        if not (isinstance(value, (int, float, np.number)) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if not (isinstance(bias, (int, float, np.number)) and np.isfinite(bias)):
        raise ValueError(f"bias must be a finite number, got {bias!r}")
    if solver not in _CLASSIFICATION_SOLVERS:
        raise ValueError(f"solver must be a liblinear classification solver {_CLASSIFICATION_SOLVERS}, got {solver!r}")


def _liblinear_parameter(C: float, eps: float, bias: float, solver: int = 7):
    """liblinear's ``parameter`` for ``train -s solver -c C -e eps -B bias -q``."""
    return _liblinear().parameter(["-s", str(int(solver)), "-c", repr(float(C)), "-e", repr(float(eps)),
                                   "-B", repr(float(bias)), "-q"])


def _feature_nodes(n: int) -> np.ndarray:
    """Uninitialised storage for ``n`` of liblinear's ``feature_node`` (fields ``index``, ``value``)."""
    return np.empty(n, dtype=_liblinear().feature_node)


def _problem_of(x_space: np.ndarray, rowptr: np.ndarray, n_features: int, bias: float):
    """A liblinear ``problem`` (labels left at 0) over filled ``feature_node`` storage: row ``i``
    starts at ``x_space[rowptr[i]]`` (its features, the bias node, the terminator -1)."""
    ll = _liblinear()
    N = rowptr.size - 1
    prob = ll.problem.__new__(ll.problem)
    prob.l = N
    prob.n = n_features + 1 if bias >= 0 else n_features
    prob.bias = bias
    prob.x_space, prob.rowptr = x_space, rowptr  # keep the storage alive
    prob.y = (ctypes.c_double * N)()
    prob.x = (ctypes.POINTER(ll.feature_node) * N)()
    base = x_space.ctypes.data
    pointers = np.ctypeslib.as_array(ctypes.cast(prob.x, ctypes.POINTER(ctypes.c_uint64)), (N,))
    pointers[:] = base + rowptr[:-1] * ctypes.sizeof(ll.feature_node)
    return prob


def _sibling_problem(prob):
    """A problem sharing ``prob``'s feature storage but with its own label array.

    liblinear's ``train`` only reads ``prob->x`` (it builds its own permuted pointer array), so
    threads can share the features; each needs its own labels.
    """
    ll = _liblinear()
    twin = ll.problem.__new__(ll.problem)
    twin.l, twin.n, twin.bias = prob.l, prob.n, prob.bias
    twin.x_space, twin.rowptr = prob.x_space, prob.rowptr
    twin.x = prob.x  # same pointer array (the ctypes object is kept alive by the field)
    twin._x_owner = prob
    twin.y = (ctypes.c_double * prob.l)()
    return twin


def _fit_one(prob, param, y: np.ndarray, c: int, seed: int | None) -> tuple[np.ndarray, float]:
    """Train class ``c`` against the rest on ``prob``; return its feature weights and intercept
    (liblinear's bias feature times ``prob.bias``), signed so that a positive score means ``c``."""
    ll = _liblinear()
    labels = np.ctypeslib.as_array(prob.y, (prob.l,))
    np.copyto(labels, np.where(y == c, 1.0, -1.0))
    if seed is not None:
        _libc.srand(ctypes.c_uint(seed))
    model = ll.toPyModel(ll.liblinear.train(prob, param))  # freed with the Python object
    sign = 1.0 if model.label[0] == 1 else -1.0
    w = np.ctypeslib.as_array(model.w, (prob.n,))  # nr_class is 1 or 2: one vector
    if prob.bias >= 0:  # the last feature is the bias
        return sign * w[:-1], sign * w[-1] * prob.bias
    return sign * w, 0.0


class _Trainer:
    """Everything a worker needs; ``fit(i)`` trains row ``i``.

    Without ``clip`` the row is written into ``W``/``b`` (shared memory for forked workers) and
    ``fit`` returns ``i``; with ``clip`` the weights ``|w| < clip`` are dropped at once and ``fit``
    returns ``(i, indices, values, intercept)``, so no dense ``K x D`` matrix is ever allocated.
    """

    def __init__(self, prob, param, y, classes, seed, W, b, threads: bool, clip: float | None = None):
        self.prob, self.param, self.y, self.classes, self.seed = prob, param, y, classes, seed
        self.W, self.b = W, b
        self.threads = threads
        self.clip = clip
        self._local = threading.local()

    def _problem(self):
        if not self.threads:
            return self.prob
        prob = getattr(self._local, "prob", None)
        if prob is None:
            prob = self._local.prob = _sibling_problem(self.prob)
        return prob

    def fit(self, i: int):
        seed = None if self.threads else self.seed
        prob = self._problem()
        w, intercept = _fit_one(prob, self.param, self.y, int(self.classes[i]), seed)
        if self.clip is not None:
            keep = np.flatnonzero(np.abs(w) >= self.clip)
            return i, keep, w[keep], intercept
        self.W[i] = w
        self.b[i] = intercept
        return i


_FORKED: Any = None  # the function forked worker processes call (inherited, not pickled)


def _call_forked(item: Any) -> Any:
    assert _FORKED is not None
    return _FORKED(item)


def _forked_map(fn: Any, items: Any, workers: int, chunksize: int = 1):
    """``map(fn, items)`` in ``workers`` forked processes, results in order.

    The workers inherit ``fn`` and everything it refers to (features, liblinear problems) by
    fork, copy-on-write, instead of receiving them pickled; only items and results travel.
    """
    global _FORKED
    _FORKED = fn
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            yield from pool.map(_call_forked, items, chunksize=chunksize)
    finally:
        _FORKED = None


def _shared_zeros(shape: tuple[int, ...]) -> np.ndarray:
    """Zeros in anonymous shared memory: writes by forked children are seen by the parent."""
    size = int(np.prod(shape)) * 8
    buf = mmap.mmap(-1, max(size, 1))
    return np.frombuffer(buf, dtype=np.float64, count=int(np.prod(shape))).reshape(shape)


def train_ovr(
    X: np.ndarray | sp.spmatrix,
    y: np.ndarray,
    n_classes: int,
    *,
    C: float = 1.0,
    eps: float = 0.1,
    bias: float = 1.0,
    solver: int = 7,
    classes: Sequence[int] | np.ndarray | None = None,
    n_jobs: int = 1,
    backend: str = "processes",
    seed: int | None = 1,
    clip: float | None = None,
    progress: bool = True,
) -> LinearModel:
    """Train one-vs-rest liblinear models (``train -s solver -c C -e eps -B bias``), class by class.

    For each class ``c`` in ``classes``, liblinear solves the binary problem ``y == c`` (+1)
    against the rest (-1), as its own one-vs-rest multi-class training does.  The features are
    converted once and the problem is reused for every class (only its labels are rewritten).

    Parameters
    ----------
    X : array or sparse matrix of shape (n_samples, n_features)
        Features (CSR is used internally; dense input is converted).
    y : array of shape (n_samples,)
        Integer labels in ``0..n_classes-1``.
    n_classes : int
        Number of classes ``K``; a class without training examples still gets a model (see the
        module notes).
    C, eps : float
        liblinear's ``-c`` (cost) and ``-e`` (stopping tolerance); both > 0.
    bias : float
        liblinear's ``-B``: when ``>= 0`` a constant feature ``bias`` is appended and its weight,
        times ``bias``, is returned as the intercept ``b``; when negative, no intercept (b = 0).
    solver : int
        liblinear's ``-s``: a classification solver, 0-3 or 5-7 (default 7, the paper's).
    classes : sequence of int, optional
        The classes to train (a chunk, for :func:`merge_models`); default all ``0..K-1``.  The
        rows of the result are in increasing class order; an empty sequence gives an empty model.
    n_jobs : int
        Classes trained at once; -1 means every core available to the process.
    backend : {"processes", "threads"}
        How ``n_jobs > 1`` runs: forked processes (reproducible, the default) or threads (one
        shared ``rand()`` state, so not reproducible; see the module notes).
    seed : int or None
        ``srand(seed)`` before every class, so each class's weights do not depend on what was
        trained before (ignored by the thread backend); None leaves ``rand()`` alone.
    clip : float, optional
        Drop the weights ``|w| < clip`` of every class as soon as it is trained and return ``W``
        as CSR: the same model as ``train_ovr(...).clip(clip)`` without ever holding the dense
        ``K x D`` matrix (the paper clips at 0.1 on DMOZ and LSHTC1).
    progress : bool
        Show a progress bar over the classes and log every tenth of them.

    Returns
    -------
    LinearModel
        ``W`` of shape (len(classes), n_features), dense float64 (CSR with ``clip``).
    """
    X = _as_features(X)
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-d, got shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} labels")
    if X.shape[0] == 0:
        raise ValueError("X has no rows: nothing to train on")
    n_classes = _positive_int("n_classes", n_classes)
    if not (np.issubdtype(y.dtype, np.integer) or (np.issubdtype(y.dtype, np.floating) and np.all(y == np.round(y)))):
        raise ValueError(f"y must hold integer class ids, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if y.min() < 0 or y.max() >= n_classes:
        bad = y[(y < 0) | (y >= n_classes)]
        raise ValueError(f"y must be in 0..{n_classes - 1}, found {bad[0]} ({bad.size} labels out of range)")
    _check_liblinear_options(C, eps, bias, solver)
    if clip is not None:
        clip = _clip_threshold("clip", clip)
    if backend not in ("processes", "threads"):
        raise ValueError(f"backend must be 'processes' or 'threads', got {backend!r}")
    if seed is not None and not (isinstance(seed, (int, np.integer)) and 0 <= seed < 2**32):
        raise ValueError(f"seed must be an integer in 0..2**32-1 or None, got {seed!r}")
    if classes is None:
        todo = np.arange(n_classes, dtype=np.int64)
    else:
        raw = np.asarray(classes)
        if raw.ndim == 1 and raw.size == 0:  # an empty part (more parts than classes)
            return LinearModel(np.zeros((0, X.shape[1])), np.zeros(0), np.zeros(0, dtype=np.int64))
        if raw.ndim != 1 or not np.issubdtype(raw.dtype, np.integer):
            raise ValueError(f"classes must be a 1-d sequence of integers, got {classes!r}")
        todo = np.unique(raw).astype(np.int64)
        if todo.size != raw.size:
            raise ValueError("classes must not repeat a class")
        if todo[0] < 0 or todo[-1] >= n_classes:
            raise ValueError(f"classes must be in 0..{n_classes - 1}, got {todo[0] if todo[0] < 0 else todo[-1]}")
    workers = min(_n_workers("n_jobs", n_jobs), todo.size)
    if sp.issparse(X):
        if X.nnz and not np.all(np.isfinite(X.data)):
            raise ValueError("X contains NaN or infinite values")
    elif not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values")
    if X.shape[1] + 1 >= 2**31:
        raise ValueError(f"X has {X.shape[1]} features, more than liblinear's int indices allow")

    ll = _liblinear()
    start = time.perf_counter()
    prob = _make_problem(sp.csr_matrix(X), float(bias))
    param = _liblinear_parameter(C, eps, bias, solver)
    error = ll.liblinear.check_parameter(prob, param)
    if error:
        raise ValueError(f"liblinear rejects the parameters: {error.decode()}")
    logger.info(
        "liblinear -s %d -c %g -e %g -B %g: %d classes of %d, %d x %d (%d non-zeros), %d %s",
        solver, C, eps, bias, todo.size, n_classes, X.shape[0], X.shape[1],
        X.nnz if sp.issparse(X) else np.count_nonzero(X), workers,
        "job" if workers == 1 else backend,
    )

    K, D = todo.size, X.shape[1]
    forked = workers > 1 and backend == "processes"
    if clip is None:
        W = _shared_zeros((K, D)) if forked else np.zeros((K, D))
        b = _shared_zeros((K,)) if forked else np.zeros(K)
    else:  # rows come back sparse from fit(); nothing dense to fill
        W = b = None
    trainer = _Trainer(prob, param, y, todo, None if seed is None else int(seed), W, b,
                       threads=workers > 1 and backend == "threads", clip=clip)

    def tracked(iterable):
        if not progress:
            return iterable
        return _progress(iterable, desc="liblinear one-vs-rest", total=K, logger=logger)

    if workers == 1:
        rows = list(tracked(map(trainer.fit, range(K))))
    elif backend == "threads":
        with ThreadPoolExecutor(workers) as pool:
            rows = list(tracked(pool.map(trainer.fit, range(K))))
    else:
        rows = list(tracked(_forked_map(trainer.fit, range(K), workers)))
    if clip is not None:  # rows are (i, indices, values, intercept), in class order
        counts = np.array([r[1].size for r in rows], dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        indices = np.concatenate([r[1] for r in rows])
        data = np.concatenate([r[2] for r in rows])
        W = sp.csr_matrix((data, indices, indptr), shape=(K, D))
        b = np.array([r[3] for r in rows])
    elif forked:
        W, b = np.array(W), np.array(b)  # copy out of the shared memory
    logger.info("liblinear one-vs-rest: %d classes in %.1f s", K, time.perf_counter() - start)
    if clip is not None:
        model = LinearModel(W, b, todo, clip_threshold=float(clip))
        logger.info("clip |w| < %g while training: kept %d weights (density %.4g)", clip, model.nnz, model.density)
        return model
    return LinearModel(W, b, todo)
