"""SVBOP-Full from a linear model: score every class, then Algorithm 1 (the paper's Section 3.1).

:func:`svbop.predict_sets` takes a probability matrix.  Computing that matrix for a softmax model
costs one ``exp`` per class and row, which for large ``K`` is slower than the scores themselves.
:func:`predict_sets_full` goes from features to sets without it: the sets depend only on the
order and ratios of ``exp(w_c . x + b_c)`` (no partition function is needed, Section 3.2), so for
each row it takes the classes with ``exp(s_c - max s) >= t``, exponentiates and sorts only those,
and runs Algorithm 1 with the same certificate as :func:`svbop.predict_sets`.  With sparse
weights, scoring and search are fused per row, so no ``n x K`` score matrix is written.

:func:`linear_scores` is the bare scoring ``X W^T + b`` with the same kernel (the reference cost
that the benchmark compares SVBOP-Full with).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import _kernels
from .linear import LinearModel, _as_sorted_csr, softmax
from .search import TIE_RTOL, candidate_factor, predict_sets, utility_for
from .sets import SetPredictions
from .utilities import Utility

__all__ = ["linear_scores", "predict_sets_full", "predict_sets_full_naive"]

logger = logging.getLogger(__name__)

#: Rows per block handed to a thread (dense scores of a block are about this many rows x K).
_BLOCK_BYTES = 8 * 1024 * 1024
#: Rounds of the candidate threshold (t, t/16, t/256, then every class), as predict_sets.
_ROUNDS = 3


def _check_model(model: Any) -> LinearModel:
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a svbop.linear.LinearModel, got {type(model).__name__}")
    if not np.array_equal(model.classes, np.arange(model.n_classes)):
        raise ValueError("model must cover classes 0..K-1 in order (merge the parts of a chunked model first)")
    return model


def _transposed(model: LinearModel) -> np.ndarray | sp.csr_matrix:
    """``W^T``, one row per feature (CSR for sparse weights, C-contiguous otherwise), built once
    per model object: scipy would otherwise copy the transposed view of dense weights per call."""
    return _kernels.per_model(model, "_svbop_wt", _build_transposed)


def _build_transposed(model: LinearModel) -> np.ndarray | sp.csr_matrix:
    if not sp.issparse(model.W):
        return np.ascontiguousarray(model.W.T)
    WT = model.W.T.tocsr()
    WT.sort_indices()
    return WT


def _build_rows(model: LinearModel) -> np.ndarray | sp.csr_matrix:
    """``W`` one row per class, as the paper's SVBOP-Full reads it: CSR with sorted indices (a copy:
    the caller's matrix is left as it is) or C-contiguous float64."""
    if sp.issparse(model.W):
        W = sp.csr_matrix(model.W, copy=True)
        W.sort_indices()
        return W
    return np.ascontiguousarray(model.W, dtype=np.float64)


def _block_rows(K: int) -> int:
    return max(1, min(4096, _BLOCK_BYTES // (8 * max(K, 1))))


def _dense_scores(model: LinearModel, X) -> np.ndarray:
    """Scores of dense weights for the rows ``X`` (sparse: scipy with the cached ``W^T``)."""
    scores = X @ _transposed(model) if sp.issparse(X) else X @ model.W.T
    scores = np.array(scores, dtype=np.float64)
    scores += model.b
    return scores


def linear_scores(model: LinearModel, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
    """Scores ``X W^T + b`` of every class, shape (n_samples, K), float64.

    Equal to :meth:`LinearModel.decision_function` (bit for bit with sparse weights and sparse
    ``X``), computed with a compiled kernel for sparse weights and in blocks of rows in ``n_jobs``
    threads.
    """
    model = _check_model(model)
    K = model.n_classes
    if sp.issparse(model.W):
        X = _as_sorted_csr(X, model.n_features)
        WT = _transposed(model)
        out = np.empty((X.shape[0], K))
        xptr, xind = X.indptr.astype(np.int64), X.indices.astype(np.int64)
        wt_ptr, wt_ind = WT.indptr.astype(np.int64), WT.indices.astype(np.int64)

        def task(lo: int, hi: int) -> None:
            _kernels.score_rows(xptr[lo:hi + 1], xind, X.data, wt_ptr, wt_ind, WT.data, model.b, out[lo:hi])

        _kernels.run_blocks(task, X.shape[0], _block_rows(K), n_jobs)
        return out
    X = _as_sorted_csr(X, model.n_features) if sp.issparse(X) else _dense_features(X, model)
    return _dense_scores(model, X)


def predict_sets_full(
    model: LinearModel,
    X: Any,
    u: Utility | str,
    *,
    tie_rtol: float = TIE_RTOL,
    expected_utility: bool = False,
    n_jobs: int | None = None,
) -> SetPredictions:
    """SVBOP-Full for a one-vs-rest linear model with softmax probabilities, from features.

    Parameters
    ----------
    model : LinearModel
        Weights ``W`` (dense or CSR) and intercepts ``b`` of all ``K`` classes.
    X : array or scipy sparse matrix of shape (n_samples, n_features)
    u : Utility or str
        The set utility.
    tie_rtol : float
        Tie tolerance of Algorithm 1 (as :func:`svbop.predict_sets`).
    expected_utility : bool, default False
        Also compute each set's expected utility, which needs the softmax's normaliser: one
        ``exp`` per class and row (the sets themselves do not need it).
    n_jobs : int or None
        Threads working on blocks of rows (``None``/1 one, -1 every core).

    Returns
    -------
    SetPredictions
        Equal to ``predict_sets(model.predict_proba(X), u)`` (up to rounding of the scores);
        ``expected_utility`` is set only when asked for.

    Notes
    -----
    For utilities where Theorem 2's early stop is not valid, the probabilities of each block of
    rows are computed and passed to :func:`svbop.predict_sets`.
    """
    model = _check_model(model)
    u, g, early = utility_for(u, model.n_classes, tie_rtol)
    K = model.n_classes
    g_pad = np.concatenate([g, [0.0]])  # g(K+1) = 0: a full row cannot grow
    sparse_w = sp.issparse(model.W)
    X = _as_sorted_csr(X, model.n_features) if (sparse_w or sp.issparse(X)) else _dense_features(X, model)
    n = X.shape[0]
    block = _block_rows(K)
    start = time.perf_counter()
    if not early:
        pieces: list[SetPredictions] = [None] * (-(-n // block))  # type: ignore[list-item]

        def task(lo: int, hi: int) -> None:
            scores = linear_scores(model, X[lo:hi]) if sparse_w else _dense_scores(model, X[lo:hi])
            pieces[lo // block] = predict_sets(softmax(scores, out=scores), u, tie_rtol=tie_rtol)

        _kernels.run_blocks(task, n, block, n_jobs)
        sets = _concatenate(pieces, K)
        if not expected_utility:
            sets.expected_utility = None
        logger.info("SVBOP-Full %s: %d rows in %.3f s (all probabilities)", u.label, n, time.perf_counter() - start)
        return sets
    f = candidate_factor(g, tie_rtol)
    f = f if f > 0 else 1e-2
    if sparse_w:
        WT = _transposed(model)
        wt_ptr, wt_ind = WT.indptr.astype(np.int64), WT.indices.astype(np.int64)

    def search(Xs, out_cls: np.ndarray, out_size: np.ndarray, out_val: np.ndarray) -> None:
        if sparse_w:
            _kernels.full_sparse(
                Xs.indptr.astype(np.int64), Xs.indices.astype(np.int64), Xs.data, wt_ptr, wt_ind, WT.data, model.b,
                g_pad, float(tie_rtol), f, _ROUNDS, out_cls, out_size, out_val, expected_utility,
            )
        else:
            _kernels.full_dense(_dense_scores(model, Xs), g_pad, float(tie_rtol), f, _ROUNDS, out_cls, out_size,
                                out_val, expected_utility)

    sets = _padded_search(search, X, K, block, n_jobs, expected_utility)
    logger.info("SVBOP-Full %s: %d rows in %.3f s", u.label, n, time.perf_counter() - start)
    return sets


def _padded_search(search, X, K: int, block: int, n_jobs: int | None, keep_value: bool) -> SetPredictions:
    """Run ``search(rows, out_cls, out_size, out_val)`` over blocks of rows of ``X`` with room for
    64 classes per set, then once more on the rows whose sets are longer, with room for them."""
    n = X.shape[0]
    cap = min(64, K)
    sizes = np.zeros(n, dtype=np.int64)
    value = np.zeros(n)
    cls = np.zeros((n, cap), dtype=np.int64)
    _kernels.run_blocks(lambda lo, hi: search(X[lo:hi], cls[lo:hi], sizes[lo:hi], value[lo:hi]), n, block, n_jobs)
    long_rows = np.flatnonzero(sizes > cap)
    longer = None
    if long_rows.size:  # sets longer than the first buffer: those rows again, with room for them
        longer = np.zeros((long_rows.size, int(sizes[long_rows].max())), dtype=np.int64)
        search(X[long_rows], longer, np.zeros(long_rows.size, np.int64), np.zeros(long_rows.size))
    indices, indptr = _kernels.ragged_sets(sizes, cls, long_rows, longer)
    return SetPredictions(indices, indptr, K, value if keep_value else None)


def predict_sets_full_naive(
    model: LinearModel,
    X: Any,
    u: Utility | str,
    *,
    tie_rtol: float = TIE_RTOL,
    n_jobs: int | None = None,
) -> SetPredictions:
    """SVBOP-Full as the paper (and napkinXC) runs it: per row all ``K`` probabilities, sorted.

    For every test row: the ``K`` scores ``w_c . x + b_c``, one class after the other (the paper's
    Algorithm 2 queries ``P(c|x)`` for each class ``c`` in turn), the softmax over all ``K``
    classes (one ``exp`` each and the partition function), a full sort of the ``K``
    probabilities, then Algorithm 1 on the sorted list (Algorithm 3 pops it).  This is the
    paper's cost model for SVBOP-Full -- ``O(K nnz(x))`` class-by-class products (dense weights:
    ``nnz(W)`` with sparse ones) and ``O(K log K)`` per row -- against which it reports the
    speed-ups of SVBOP-HSG and SVBOP-HF.  :func:`predict_sets_full` returns the same sets by
    scoring feature by feature (``W^T``, one contiguous pass per feature of ``x``) and
    exponentiating and sorting only the classes that can enter the set; the pipeline runs both
    (``svbop_full_naive`` and ``svbop_full``) so that Table 4 shows the speed-ups over each.

    Parameters
    ----------
    model : LinearModel
        Weights ``W`` (dense or CSR) and intercepts ``b`` of all ``K`` classes.
    X : array or scipy sparse matrix of shape (n_samples, n_features)
    u : Utility or str
        The set utility.
    tie_rtol : float
        Tie tolerance of Algorithm 1 (as :func:`svbop.predict_sets`).
    n_jobs : int or None
        Threads working on blocks of rows (``None``/1 one, -1 every core).

    Returns
    -------
    SetPredictions
        Equal to :func:`predict_sets_full` and to ``predict_sets(model.predict_proba(X), u)``
        (up to rounding of the scores), with each set's expected utility.
    """
    model = _check_model(model)
    u, g, early = utility_for(u, model.n_classes, tie_rtol)
    K = model.n_classes
    X = _as_sorted_csr(X if sp.issparse(X) else _dense_features(X, model), model.n_features)
    start = time.perf_counter()
    W = _kernels.per_model(model, "_svbop_w_rows", _build_rows)
    if sp.issparse(W):
        w_ptr, w_ind = W.indptr.astype(np.int64), W.indices.astype(np.int64)

    def search(Xs, out_cls: np.ndarray, out_size: np.ndarray, out_val: np.ndarray) -> None:
        xptr, xind = Xs.indptr.astype(np.int64), Xs.indices.astype(np.int64)
        if sp.issparse(W):
            _kernels.full_naive_sparse(w_ptr, w_ind, W.data, model.b, model.n_features, xptr, xind, Xs.data, g,
                                       float(tie_rtol), early, out_cls, out_size, out_val)
        else:
            _kernels.full_naive_dense(W, model.b, xptr, xind, Xs.data, g, float(tie_rtol), early, out_cls, out_size,
                                      out_val)

    sets = _padded_search(search, X, K, _block_rows(K), n_jobs, True)
    logger.info("SVBOP-Full (as in the paper) %s: %d rows in %.3f s", u.label, X.shape[0], time.perf_counter() - start)
    return sets


def _dense_features(X: Any, model: LinearModel) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-d (n_samples, n_features), got shape {X.shape}")
    if X.shape[1] != model.n_features:
        raise ValueError(f"X has {X.shape[1]} features, the model has {model.n_features}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or an infinite value")
    return X


def _concatenate(pieces: list[SetPredictions], K: int) -> SetPredictions:
    if not pieces:
        return SetPredictions(np.zeros(0, np.int64), np.zeros(1, np.int64), K, np.zeros(0))
    sizes = np.concatenate([np.diff(p.indptr) for p in pieces])
    indices = np.concatenate([p.indices for p in pieces])
    value = np.concatenate([p.expected_utility for p in pieces])
    return SetPredictions(indices, np.concatenate([[0], np.cumsum(sizes)]), K, value)
