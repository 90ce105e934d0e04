"""SVBOP-HSG: Bayes-optimal sets with an HNSW index over the class weights (the paper's Section 3.2).

For a softmax model ``P(c|x) ~ exp(w_c . x + b_c)`` the classes of highest probability are those
of largest inner product, so a maximum-inner-product index (:class:`svbop.index.HNSWIndex`) can
deliver them without scoring all ``K`` classes.  SVBOP-HSG (Algorithms 4 and 5):

1. query the index for the top ``k`` classes of ``x``;
2. take their scores ``w_c . x + b_c`` (by default the float32 inner products the index returns
   with them, as the authors' napkinXC does; ``rescore=True`` recomputes them exactly from the
   model), and feed ``exp`` of them (unnormalised: Algorithm 1 does not need the partition
   function) to Algorithm 1 in decreasing order;
3. when Algorithm 1 asks for class ``|Q| + 1`` (every delivered class was accepted), query again
   for ``2 |Q|`` classes and append, sorted, the ones not delivered before ("doubling").

Since the index is approximate, an appended class can be more probable than one delivered
earlier; Algorithm 1 simply continues on the stream in the order it comes (as the paper's
``Q.at(i)`` does).  With an exhaustive index (``ef`` and ``k`` at least ``K``) the stream is the
exact order and the sets equal SVBOP-Full's (a query for all ``K`` classes is always rescored).

* :func:`predict_sets_hsg` runs this for many rows at once: every round is one batched
  (multi-threaded) query of the index for all rows still open, exact scoring (if asked) in compiled
  code, and Algorithm 1 continued across rounds.  The rows are sparse: for a dense index the query
  is svbop's own search of NMSLIB's graph, whose inner products read only the rows' non-zeros
  (``engine="auto"``); ``engine="nmslib"`` sends them dense to NMSLIB's query, as the paper does.
* :class:`HSGProvider` is the paper's ``initPrediction`` / ``getNextClass`` pair for one row, for
  :func:`svbop.svbop` and for reading.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import _hsg_kernels, _kernels
from .full import _transposed
from .index import HNSWIndex
from .linear import LinearModel, _as_sorted_csr, _positive_int
from .search import TIE_RTOL, utility_for
from .sets import SetPredictions
from .utilities import Utility

__all__ = ["HSGProvider", "exact_scores", "index_recall", "predict_sets_hsg"]

logger = logging.getLogger(__name__)

#: Rows per block of exact scoring given to a thread.
_BLOCK = 1024


def _check(model: Any, index: Any) -> tuple[LinearModel, HNSWIndex]:
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a svbop.linear.LinearModel, got {type(model).__name__}")
    if not isinstance(index, HNSWIndex):
        raise ValueError(f"index must be a svbop.index.HNSWIndex, got {type(index).__name__}")
    if not np.array_equal(model.classes, np.arange(model.n_classes)):
        raise ValueError("model must cover classes 0..K-1 in order (merge the parts of a chunked model first)")
    if index.n_classes != model.n_classes or index.n_features != model.n_features:
        raise ValueError(
            f"index ({index.n_classes} classes, {index.n_features} features) does not match the model "
            f"({model.n_classes} classes, {model.n_features} features)"
        )
    return model, index


def _query(index: HNSWIndex, X: sp.csr_matrix, k: int, ef: int | None, K: int, threads: Any,
           engine: str) -> tuple[np.ndarray, np.ndarray]:
    """``index.query`` with efSearch ``max(k, ef)``, its ids checked to be the model's ``0..K-1``
    (or -1): the kernels that rescore them index the weights with them."""
    ids, scores = index.query(X, k, ef=max(k, ef or k), n_threads=threads, engine=engine)
    if ids.size and (ids.min() < -1 or ids.max() >= K):
        bad = int(ids.min()) if ids.min() < -1 else int(ids.max())
        raise ValueError(f"index returned class id {bad}, outside the model's 0..{K - 1}: the index was not built "
                         "from this model")
    return ids, scores


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def exact_scores(model: LinearModel, X: Any, ids: np.ndarray, n_jobs: int | None = None) -> np.ndarray:
    """``w_c . x_i + b_c`` for ``c = ids[i, q]`` (``-inf`` where ``ids < 0``), shape of ``ids``.

    ``X`` has one row per row of ``ids`` (converted to CSR with sorted indices; its column
    indices must lie in ``0..D-1``) and ``ids`` holds class ids ``0..K-1`` or -1.  The products
    are summed in increasing feature order, as ``X @ W.T`` sums them, so the scores equal
    :func:`svbop.full.linear_scores` bit for bit.  Sparse weights are walked by candidate row or
    by the columns ``x`` uses, whichever is shorter for the row (see :mod:`svbop._hsg_kernels`).
    """
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a LinearModel, got {type(model).__name__}")
    X = _as_sorted_csr(X, model.n_features)
    raw = np.asarray(ids)
    if raw.ndim != 2 or raw.shape[0] != X.shape[0] or not (np.issubdtype(raw.dtype, np.integer) or raw.size == 0):
        raise ValueError(f"ids must be a 2-d integer array with one row per row of X ({X.shape[0]}), got "
                         f"{raw.dtype} of shape {raw.shape}")
    if raw.size and (raw.min() < -1 or raw.max() >= model.n_classes):
        raise ValueError(f"ids must be class ids in 0..{model.n_classes - 1} or -1, found "
                         f"{int(raw.min()) if raw.min() < -1 else int(raw.max())}")
    return _exact_scores(model, X, raw, n_jobs)


def _exact_scores(model: LinearModel, X: sp.csr_matrix, ids: np.ndarray, n_jobs: int | None = None) -> np.ndarray:
    """:func:`exact_scores` of a checked sorted CSR ``X`` and checked ``ids``."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    out = np.empty(ids.shape)
    xptr, xind = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    if sp.issparse(model.W):
        W, WT, w_ptr, w_ind, wt_ptr, wt_ind = _kernels.per_model(model, "_svbop_hsg_csr", _csr_parts)

        def task(lo: int, hi: int) -> None:
            _hsg_kernels.rescore_sparse(w_ptr, w_ind, W.data, wt_ptr, wt_ind, WT.data, model.b, ids[lo:hi],
                                        xptr[lo:hi + 1], xind, X.data, np.zeros(model.n_features),
                                        np.zeros(model.n_classes), out[lo:hi])
    else:
        W = np.ascontiguousarray(model.W)

        def task(lo: int, hi: int) -> None:
            _kernels.gather_scores_dense(W, model.b, ids[lo:hi], xptr[lo:hi + 1], xind, X.data, out[lo:hi])

    _kernels.run_blocks(task, ids.shape[0], _BLOCK, n_jobs)
    return out


def _csr_parts(model: LinearModel) -> tuple:
    """Sparse ``W`` (sorted CSR), its CSR transpose, and their int64 index arrays, once per model."""
    W = sp.csr_matrix(model.W)
    W.sort_indices()
    WT = _transposed(model)
    return (W, WT, W.indptr.astype(np.int64), W.indices.astype(np.int64), WT.indptr.astype(np.int64),
            WT.indices.astype(np.int64))


def _complete(ids: np.ndarray, delivered: np.ndarray) -> np.ndarray:
    """Rows of ``ids`` (a query for all ``K`` classes, -1 padded) with the classes that are in
    neither the row nor ``delivered`` (bool, shape (n, K): delivered in earlier rounds) written
    into the padding.

    NMSLIB may return fewer classes than asked even for ``k = ef = K`` (its graph need not reach
    every node); a query for every class must deliver every class, so SVBOP-HSG scores the ones
    the index missed exactly, and with ``k = K`` its sets equal SVBOP-Full's.
    """
    n, K = delivered.shape
    present = delivered.copy()
    r, q = np.nonzero(ids >= 0)
    present[r, ids[r, q]] = True
    mr, mc = np.nonzero(~present)  # missing classes, row by row
    if not mr.size:
        return ids
    fr, fq = np.nonzero(ids < 0)  # free slots, row by row (at least as many as missing classes)
    rank = np.arange(mr.size) - np.searchsorted(mr, mr)  # position of a missing class in its row
    out = ids.copy()
    out[mr, fq[np.searchsorted(fr, mr) + rank]] = mc
    logger.debug("HSG: %d classes the index did not return were scored exactly", mr.size)
    return out


def _sorted_new(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: classes by decreasing exact score (ties: lower id), invalid (-1) last; and counts."""
    order = np.lexsort((ids, -scores), axis=-1)
    ids = np.take_along_axis(ids, order, axis=1)
    scores = np.take_along_axis(scores, order, axis=1)
    return ids, scores, (ids >= 0).sum(axis=1)


def predict_sets_hsg(
    model: LinearModel,
    index: HNSWIndex,
    X: Any,
    u: Utility | str,
    *,
    k: int = 100,
    ef: int | None = None,
    tie_rtol: float = TIE_RTOL,
    n_jobs: int | None = None,
    rescore: bool = False,
    engine: str = "auto",
    return_stats: bool = False,
) -> SetPredictions | tuple[SetPredictions, dict[str, np.ndarray]]:
    """SVBOP-HSG: Algorithm 1 on the classes an HNSW index delivers, with doubling.

    Parameters
    ----------
    model : LinearModel
        The one-vs-rest softmax model the index was built from (its weights score the classes).
    index : HNSWIndex
        Index over the model's class vectors (:meth:`HNSWIndex.from_model`).
    X : array or scipy sparse matrix of shape (n_samples, n_features)
    u : Utility or str
        The set utility.
    k : int, default 100
        Classes asked for in the first query (capped at ``K``).
    ef : int, optional
        HNSW's ``efSearch``; every query uses ``max(ef, its k)`` (default: its ``k``, as the paper).
    tie_rtol : float
        Tie tolerance of Algorithm 1.
    n_jobs : int or None
        Threads of NMSLIB's batched queries and of the exact scoring (``None``/1 one, -1 all).
    rescore : bool, default False
        Score the delivered classes exactly from the model (float64, :func:`exact_scores`)
        instead of using the inner products the index returns with them (float32, relative error
        about 1e-7: see :mod:`svbop.index`), as the authors' napkinXC does.  Rescoring walks the
        weights of every candidate and cost the LSHTC1 dry-run clipped at 0.1 about a fifth of
        HSG's time.  A query for all ``K`` classes is always rescored, so with an exhaustive
        index the sets equal SVBOP-Full's either way.
    engine : {"auto", "nmslib", "svbop"}
        Who walks the HNSW graph (:meth:`HNSWIndex.query`): for a dense index, ``"auto"`` uses
        svbop's compiled search, whose inner products read only each row's non-zeros; ``"nmslib"``
        sends the rows dense to NMSLIB's query, as the paper does.  A sparse index is always
        searched by NMSLIB.
    return_stats : bool
        Also return per-row statistics: ``queries`` (index queries), ``scored`` (classes scored
        exactly, i.e. delivered by the index) and ``pulled`` (classes Algorithm 1 consumed).

    Returns
    -------
    SetPredictions
        Classes in the order they were delivered (decreasing probability within each query).
        ``expected_utility`` is None: the partition function is never computed.

    Notes
    -----
    A row asks for more classes only while every class delivered so far was accepted.  For
    utilities without Theorem 2's early stop that is every row until all ``K`` classes are in,
    so SVBOP-HSG is useful with (1/x)-convex utilities (all those of the paper).
    """
    model, index = _check(model, index)
    rescore = _flag("rescore", rescore)
    u, g, early = utility_for(u, model.n_classes, tie_rtol)
    K = model.n_classes
    k = min(_positive_int("k", k), K)
    if ef is not None:
        ef = _positive_int("ef", ef)
    threads = 1 if n_jobs is None else n_jobs
    X = _as_sorted_csr(X, model.n_features)
    n = X.shape[0]
    mass, best, chosen_u = np.zeros(n), np.full(n, -np.inf), np.zeros(n)
    n_seen, size = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    top = np.zeros(n)  # exact score of each row's first class: the unit of exp()
    queries = np.zeros(n, dtype=np.int64)
    want = np.full(n, k, dtype=np.int64)
    stream_rows, stream_pos, stream_cls = [], [], []  # every delivered class, for the final sets
    seen_keys = np.zeros(0, dtype=np.int64)
    pending = np.arange(n, dtype=np.int64)
    start = time.perf_counter()
    first = True
    while pending.size:
        if not first:  # row * K + class of what the open rows were delivered so far, sorted
            open_row = np.zeros(n, dtype=bool)
            open_row[pending] = True
            r_all, c_all = np.concatenate(stream_rows), np.concatenate(stream_cls)
            seen_keys = np.sort(r_all[open_row[r_all]] * K + c_all[open_row[r_all]])
        groups = [pending[want[pending] == kk] for kk in np.unique(want[pending])]
        for rows in groups:
            kk = int(want[rows[0]])
            Xr = X[rows]
            ids, scores = _query(index, Xr, kk, ef, K, threads, engine)
            queries[rows] += 1
            if not first:  # the doubling: keep only classes not delivered before
                keys = rows[:, None] * K + np.maximum(ids, 0)
                pos = np.minimum(np.searchsorted(seen_keys, keys), max(seen_keys.size - 1, 0))
                ids = np.where((ids >= 0) & (seen_keys[pos] == keys), -1, ids) if seen_keys.size else ids
            if kk >= K:  # a query for every class: the classes the index did not return are added
                line = np.full(n, -1)
                line[rows] = np.arange(rows.size)
                at = line[seen_keys // K]
                delivered = np.zeros((rows.size, K), dtype=bool)
                delivered[at[at >= 0], seen_keys[at >= 0] % K] = True
                ids = _complete(ids, delivered)
            if rescore or kk >= K:
                scores = _exact_scores(model, Xr, ids, n_jobs)
            else:
                scores = np.where(ids >= 0, scores, -np.inf)
            ids, scores, counts = _sorted_new(ids, scores)
            if first:
                top[rows] = scores[:, 0]
            vals = np.exp(scores - top[rows, None])  # exp(-inf) = 0 for the padding
            offset = n_seen[rows].copy()
            valid = np.arange(ids.shape[1]) < counts[:, None]
            r_idx = np.broadcast_to(rows[:, None], ids.shape)[valid]
            stream_rows.append(r_idx)
            stream_pos.append((offset[:, None] + np.arange(ids.shape[1]))[valid])
            stream_cls.append(ids[valid])
            # Algorithm 1 goes on from where it stopped; it may stop early within this batch, in
            # which case the classes after the stop are delivered but never consumed
            consumed = n_seen[rows].copy()
            _kernels.continue_stream(vals, counts, rows, g, float(tie_rtol), early, mass, best, n_seen, size,
                                     chosen_u, done)
            n_seen[rows] = consumed + counts  # the stream's length (not what was consumed)
            exhausted = np.full(rows.size, kk >= K)  # every class has been delivered
            done[rows[exhausted]] = True
            want[rows] = np.minimum(K, 2 * np.maximum(n_seen[rows], kk))
        first = False
        pending = pending[~done[pending]]
    rows = np.concatenate(stream_rows) if stream_rows else np.zeros(0, np.int64)
    pos = np.concatenate(stream_pos) if stream_pos else np.zeros(0, np.int64)
    cls = np.concatenate(stream_cls) if stream_cls else np.zeros(0, np.int64)
    keep = pos < size[rows]
    order = np.lexsort((pos[keep], rows[keep]))
    indptr = np.concatenate([[0], np.cumsum(size)]).astype(np.int64)
    sets = SetPredictions(cls[keep][order], indptr, K)
    logger.info(
        "SVBOP-HSG %s: %d rows in %.3f s, k=%d, %.2f queries and %.1f classes scored per row",
        u.label, n, time.perf_counter() - start, k, queries.mean() if n else 0.0, n_seen.mean() if n else 0.0,
    )
    if return_stats:
        return sets, {"queries": queries, "scored": n_seen.copy()}
    return sets


def index_recall(model: LinearModel, index: HNSWIndex, X: Any, k: int, ef: int | None = None,
                 *, max_rows: int = 2000, seed: int = 0, engine: str = "auto") -> float:
    """Recall@k of the index: the share of each row's exact top-``k`` classes its query returns.

    Parameters
    ----------
    model, index
        As for :func:`predict_sets_hsg`.
    X : array or scipy sparse matrix of shape (n_samples, n_features)
    k : int
        Classes asked for (capped at ``K``), as SVBOP-HSG's first query.
    ef : int, optional
        efSearch, as :func:`predict_sets_hsg` uses it (``max(ef, k)``).
    max_rows : int, default 2000
        A seeded sample of at most this many rows is used (the exact top-k needs all K scores).
    seed : int, default 0
    engine : {"auto", "nmslib", "svbop"}
        Who searches the graph, as for :func:`predict_sets_hsg`.

    Returns
    -------
    float
        Mean over rows of ``|returned & exact top-k| / k``, in [0, 1] (NaN for no rows).  Classes
        tied with the k-th exact score count as in the exact top-k.
    """
    model, index = _check(model, index)
    k = min(_positive_int("k", k), model.n_classes)
    X = _as_sorted_csr(X, model.n_features)
    n = X.shape[0]
    if n == 0:
        return float("nan")
    if n > max_rows:
        X = X[np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))]
    from .full import linear_scores

    S = linear_scores(model, X)
    ids, _ = _query(index, X, k, ef, model.n_classes, 1, engine)
    kth = -np.partition(-S, k - 1, axis=1)[:, k - 1]
    found = np.take_along_axis(S, np.maximum(ids, 0), axis=1) >= kth[:, None]
    return float(np.mean(((ids >= 0) & found).sum(axis=1) / k))


class HSGProvider:
    """SVBOP-HSG's class provider (Algorithms 4 and 5), one row at a time.

    ``init_prediction(x)`` queries the index for ``k`` classes (scored as
    :func:`predict_sets_hsg` scores them: ``rescore``);
    ``get_next_class()`` returns them in decreasing order and, when they run out, queries for
    twice as many and appends the new ones.  Probabilities are ``exp(w_c . x + b_c - s_1)``,
    unnormalised (``s_1`` the first class's score).  Use with :func:`svbop.svbop`::

        svbop.svbop(HSGProvider(model, index, k=10), x, "fbeta:beta=1", K=model.n_classes,
                    require_sorted=False)
    """

    def __init__(self, model: LinearModel, index: HNSWIndex, k: int = 100, ef: int | None = None,
                 rescore: bool = False, engine: str = "auto") -> None:
        self.model, self.index = _check(model, index)
        self.engine = engine
        self.rescore = _flag("rescore", rescore)
        self.k = min(_positive_int("k", k), model.n_classes)
        self.ef = None if ef is None else _positive_int("ef", ef)
        self.queries = 0

    def _query(self, kk: int) -> None:
        kk = min(kk, self.model.n_classes)
        ids, scores = _query(self.index, self._x, kk, self.ef, self.model.n_classes, 1, self.engine)
        self.queries += 1
        ids = np.array([[c if c not in self._seen else -1 for c in ids[0]]], dtype=np.int64)
        if kk >= self.model.n_classes:  # every class must come: add those the index missed
            delivered = np.zeros((1, self.model.n_classes), dtype=bool)
            delivered[0, list(self._seen)] = True
            ids = _complete(ids, delivered)
        if self.rescore or kk >= self.model.n_classes:
            scores = _exact_scores(self.model, self._x, ids)
        else:
            scores = np.where(ids >= 0, scores, -np.inf)
        ids, scores, counts = _sorted_new(ids, scores)
        if self._top is None:
            self._top = float(scores[0, 0])
        for c, s in zip(ids[0, : counts[0]], scores[0, : counts[0]]):
            self._seen.add(int(c))
            self._queue.append((int(c), float(np.exp(s - self._top))))
        self._last_k = kk

    def init_prediction(self, x: Any) -> None:
        x = x if sp.issparse(x) else np.asarray(x).reshape(1, -1)  # sparse: checked before any conversion
        self._x = _as_sorted_csr(x, self.model.n_features, "x")
        if self._x.shape[0] != 1:
            raise ValueError(f"init_prediction takes one row, got {self._x.shape[0]}")
        self._queue: list[tuple[int, float]] = []
        self._seen: set[int] = set()
        self._top: float | None = None
        self._i = 0
        self.queries = 0
        self._query(self.k)

    def get_next_class(self) -> tuple[int, float] | None:
        self._i += 1
        if len(self._queue) < self._i and self._last_k < self.model.n_classes:
            self._query(2 * max(len(self._queue), self._last_k))  # the doubling (Algorithm 5)
        if len(self._queue) < self._i:
            return None
        return self._queue[self._i - 1]
