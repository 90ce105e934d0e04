"""Conformity scores of the split-conformal sets: LAC (the paper's ICP), APS and RAPS.

* :func:`conformal_quantile` and :func:`conformal_sets`: the paper's inductive conformal
  prediction baseline (ICP, nonconformity ``1 - P(y|x)``).
* ``_calibration_scores``: the score ``s(x_i, y_i)`` of every calibration row; ``_score_sets``:
  the sets ``{c : s(x, c) <= q}`` (one ``q``, or one per class) with the partial-sorting engine.

The definitions are in :class:`svbop.conformal.ConformalSetPredictor`'s docstring.
"""

from __future__ import annotations

import math

import numpy as np

from .._blocks import row_blocks
from .._prefix import (
    DEFAULT_CHUNK_BYTES,
    SortedHeads,
    as_score_matrix,
    geometric_widening,
    prefix_search,
    row_stats,
    settle_all,
    sorted_heads,
)
from ..metrics import check_labels
from ..sets import SetPredictions
from ._common import _epsilon, _no_calibration_rows, _normalised_chunks, _summed_chunks, _with_tolerance

__all__ = ["conformal_quantile", "conformal_sets", "CONFORMAL_SCORES", "PREDICTOR_SCORES"]

def conformal_quantile(P_cal, y_cal, epsilon: float) -> float:
    """ICP threshold ``q`` on nonconformity ``1 - P(y|x)`` from a calibration set.

    ``q`` is the ``k``-th smallest calibration score with ``k = ceil((n+1)(1-epsilon))``
    (computed in exact arithmetic), i.e. the empirical quantile at level ``k/n``; ``inf``
    when ``k > n`` (too few calibration samples for this ``epsilon``: every class is kept).
    """
    P_cal = as_score_matrix(P_cal, "P_cal")
    y_cal = check_labels(y_cal, P_cal.shape, "y_cal")
    eps = _epsilon(epsilon)
    _no_calibration_rows(P_cal)
    scores = _lac_scores(P_cal, y_cal)
    n = scores.size
    k = math.ceil((n + 1) * (1 - eps))
    if k > n:
        return math.inf
    return float(np.partition(scores, k - 1)[k - 1])


def _lac_scores(P: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The ICP scores ``1 - P(y|x)/sum_c P(c|x)`` of :func:`conformal_quantile`."""
    _, total = row_stats(P, 0, "P_cal")
    return 1.0 - P[np.arange(y.size), y] / total


def conformal_sets(
    P, quantile: float, *, empty: str = "top1", chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> SetPredictions:
    """ICP sets ``{c : 1 - P(c|x) <= quantile}``, classes in decreasing probability.

    Parameters
    ----------
    P : array-like of shape (n_samples, n_classes)
    quantile : float
        From :func:`conformal_quantile`.
    empty : {"top1", "keep"}
        What an empty set becomes: the most probable class (default) or stays empty.
    """
    if empty not in ("top1", "keep"):
        raise ValueError(f"empty must be 'top1' or 'keep', got {empty!r}")
    q = float(quantile)
    if np.isnan(q):
        raise ValueError("conformal quantile is NaN")

    def first(X, rowmax, total):
        # a hair below (1 - q) * total (relative and absolute margins for the rounding of
        # 1 - P/total); the exact test on the nonconformity score is done in decide
        return np.maximum(((1.0 - q) - 1e-15) * (1 - 1e-9) * total, 0.0)

    def decide(heads: SortedHeads, t, total, K):
        W = heads.values.shape[1]
        valid = np.arange(W) < heads.counts[:, None]
        keep = valid & (1.0 - heads.values / total[:, None] <= q)
        size = keep.sum(axis=1)
        if empty == "top1":
            size = np.maximum(size, 1)
        return settle_all(size)

    sets, _ = prefix_search(P, decide, first, geometric_widening(), chunk_bytes=chunk_bytes)
    return sets


# --- conformal scores beyond LAC, class-conditional sets, Bayes-optimal sets with coverage ---------

#: Scores compared with a threshold ``q`` along the ranking of a row (non-decreasing in the rank):
#: ``lac`` ``1 - P(c|x)``; ``aps`` the mass of the ranks up to ``c``'s; ``raps`` APS plus
#: ``lam * max(0, o(c) - k_reg)``; ``saps`` (Huang et al. 2024) ``P_max`` for the top class and
#: ``P_max + lam * (o(c) - 1)`` below it; ``topk`` the rank ``o(c)``; ``margin`` the largest other
#: probability minus ``P(c|x)``.  (The randomised APS, RAPS and SAPS scores are in
#: :class:`ConformalSetPredictor`'s docstring.)
RANKED_SCORES = ("lac", "aps", "raps", "saps", "topk", "margin")
#: The scores with a randomised variant (``randomized=True``).
RANDOMIZED_SCORES = ("aps", "raps", "saps", "topk")
#: The scores randomised unless ``randomized=False`` (top-k is deterministic unless asked: TorchCP
#: randomises it by default, svbop keeps its earlier default).
RANDOMIZED_BY_DEFAULT = ("aps", "raps", "saps")
#: Conformity scores of :class:`ConformalSetPredictor`: the ranked scores and the Bayes-optimal families.
CONFORMAL_SCORES = (*RANKED_SCORES, "fbeta", "credal")
#: Every score of :class:`ConformalSetPredictor`: the above, and the hierarchy-restricted sets of
#: :mod:`svbop.conformal.hierarchical` (``score="hierarchical"``, with ``hierarchy`` and ``max_nodes``).
PREDICTOR_SCORES = (*CONFORMAL_SCORES, "hierarchical")


def _ranked_scores(V: np.ndarray, score: str, k_reg: int, lam: float, U: np.ndarray | None = None) -> np.ndarray:
    """Scores of the classes in ranked order: ``V[i, j]`` is the normalised probability of the class
    of rank ``j + 1`` of row ``i`` (decreasing, ties by class index).  Calibration and prediction
    both call this on the same values in the same order, so their scores agree exactly (the
    compiled kernel of :mod:`svbop.conformal._ranked` does the same operations in the same order).

    ``U`` (one per row): the randomised APS/RAPS score ``cum - U * V`` and SAPS score; ``None``
    gives the deterministic ones (APS/RAPS ``U = 0``, SAPS ``U = 1``).  ``margin`` needs the first
    two ranks of every row (all ranks for ``K = 1``)."""
    o = np.arange(1, V.shape[1] + 1)
    if score == "lac":
        return 1.0 - V
    if score == "topk":  # randomised (TorchCP's TOPK): o - u
        S = np.broadcast_to(o.astype(np.float64), V.shape).copy()
        return S if U is None else S - U[:, None]
    if score == "margin":
        v1 = V[:, :1]
        S = v1 - V
        if V.shape[1]:
            S[:, 0] = (V[:, 1] if V.shape[1] > 1 else 0.0) - V[:, 0]
        return S
    if score == "saps":
        u = np.ones(V.shape[0]) if U is None else U
        S = V[:, :1] + lam * ((o - 2) + u[:, None])
        if V.shape[1]:
            S[:, 0] = u * V[:, 0]
        return S
    cum = np.cumsum(V, axis=1)  # sequential: the same for any width of V
    if U is not None:
        cum = cum - U[:, None] * V
    if score == "raps":
        cum = cum + lam * np.maximum(0, o - k_reg)
    return cum


def _label_ranks(Xn: np.ndarray, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The 1-based rank of each row's label (decreasing value, ties by class index)."""
    above = (Xn > t[:, None]).sum(axis=1)
    tied = ((Xn == t[:, None]) & (np.arange(Xn.shape[1]) < y[:, None])).sum(axis=1)
    return above + tied + 1


def _calibration_label_ranks(P: np.ndarray, y: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """The 1-based rank of every calibration row's label among its row's normalised probabilities
    (decreasing, ties by class index: the ranking of the sets)."""
    out = np.empty(y.size, dtype=np.int64)
    for row0, Xn in _normalised_chunks(P, "P_cal", chunk_bytes):
        r = Xn.shape[0]
        yc = y[row0 : row0 + r]
        out[row0 : row0 + r] = _label_ranks(Xn, yc, Xn[np.arange(r), yc])
    return out


def _calibration_scores(P: np.ndarray, y: np.ndarray, score: str, k_reg: int, lam: float, chunk_bytes: int,
                        U: np.ndarray | None = None):
    """The score ``s(x_i, y_i)`` of every calibration row (any of :data:`RANKED_SCORES`; ``U`` one
    uniform per row for the randomised scores).

    For APS and RAPS only the classes ranked at or before ``y_i`` (those with ``P >= P(y_i|x_i)``)
    are sorted; the other scores need no sort (the label's rank, the row's two largest values).
    """
    k_reg = min(k_reg, P.shape[1])  # ranks stop at K: a larger k_reg is K (and stays a small integer)
    out = np.empty(y.size)
    for row0, Xn in _normalised_chunks(P, "P_cal", chunk_bytes):
        r = Xn.shape[0]
        yc = y[row0 : row0 + r]
        t = Xn[np.arange(r), yc]
        u = None if U is None else U[row0 : row0 + r]
        if score == "lac":
            out[row0 : row0 + r] = 1.0 - t
            continue
        if score in ("saps", "topk", "margin"):
            o = _label_ranks(Xn, yc, t) if score != "margin" else None  # margin: no rank needed
            if score == "topk":
                out[row0 : row0 + r] = o if u is None else o - u
            elif score == "margin":
                Xn[np.arange(r), yc] = -np.inf
                out[row0 : row0 + r] = (Xn.max(axis=1) if Xn.shape[1] > 1 else 0.0) - t
            else:
                v1 = Xn.max(axis=1)
                uu = np.ones(r) if u is None else u
                out[row0 : row0 + r] = np.where(o == 1, uu * v1, v1 + lam * ((o - 2) + uu))
            continue
        for heads in sorted_heads(Xn, t):
            S = _ranked_scores(heads.values, score, k_reg, lam, None if u is None else u[heads.rows])
            # y is among the heads (its own value is >= t) and, before any padding, found first
            pos = np.argmax(heads.classes == yc[heads.rows][:, None], axis=1)
            out[row0 + heads.rows] = S[np.arange(pos.size), pos]
    return out


def _score_sets(P, q, score, k_reg, lam, empty, chunk_bytes):
    """Sets ``{c : s(x, c) <= q_c}`` for LAC/APS/RAPS; ``q`` a float or one per class.

    Every score is non-decreasing along the ranking, so ``{c : s <= max_c q_c}`` is a prefix found
    with the partial-sorting engine; per-class thresholds then filter that prefix.  Scores are
    compared with ``q`` widened by :func:`_score_tolerance`.
    """
    P = as_score_matrix(P, "P")
    k_reg = min(k_reg, P.shape[1])  # ranks stop at K: a larger k_reg is K (and stays a small integer)
    q = _with_tolerance(q, P.shape[1])
    per_class = np.ndim(q) == 1
    qmax = float(np.max(q)) if per_class else float(q)

    def first(X, rowmax, total):
        if score == "lac":  # candidates: P >= 1 - q, with a margin; the test on s is exact
            return np.full(X.shape[0], max(0.0, (1.0 - qmax) - 1e-12))
        if score == "raps" and lam > 0:  # ranks o with lam (o - k_reg) > q are out: the top m suffice
            r = qmax / lam  # compared as a float first: inf or 1e300 for a tiny lam
            if r < X.shape[1]:
                m = k_reg + int(r) + 1
                if m < X.shape[1]:
                    return np.partition(X, X.shape[1] - m, axis=1)[:, X.shape[1] - m]
        return rowmax * 1e-2

    def decide(heads: SortedHeads, t, total, K):
        c = heads.counts
        W = heads.values.shape[1]
        S = _ranked_scores(heads.values, score, k_reg, lam)
        keep = (np.arange(W) < c[:, None]) & (S <= qmax)
        size = keep.sum(axis=1)
        settled = (size < c) | (c >= K)  # a class beyond q: every later one is too
        if score == "lac":  # every class left out has P < t, so s > 1 - t
            settled |= (1.0 - t) > qmax
        elif score == "raps" and lam > 0:  # the next class's score is at least cum + its penalty
            nxt = np.cumsum(heads.values, axis=1)[np.arange(c.size), c - 1] + lam * np.maximum(0, c + 1 - k_reg)
            settled |= nxt > qmax
        if empty == "top1" and not per_class:
            size = np.maximum(size, 1)
        return settled, size, np.full(size.size, np.nan)

    indices, indptr = [], [np.zeros(1, dtype=np.int64)]
    offset = 0
    for row0, Xn in _normalised_chunks(P, "P", chunk_bytes):
        if qmax == math.inf:  # some class is in every set: the whole ranking, sorted at once
            order = np.argsort(-Xn, axis=1, kind="stable")  # decreasing, ties by class index
            ind, ptr = order.reshape(-1), np.arange(0, Xn.size + 1, Xn.shape[1])
        elif score == "aps":
            ind, ptr = _aps_prefixes(Xn, qmax, decide, first)
        else:
            sets, _ = prefix_search(Xn, decide, first, geometric_widening(), chunk_bytes=Xn.nbytes + 1)
            ind, ptr = sets.indices, sets.indptr
        if per_class:
            ind, ptr = _filter_per_class(Xn, ind, ptr, q, score, k_reg, lam, empty)
        indices.append(ind)
        indptr.append(ptr[1:] + offset)
        offset += ind.size
    return SetPredictions(
        np.concatenate(indices) if indices else np.empty(0, dtype=np.int64), np.concatenate(indptr), P.shape[1]
    )


def _aps_prefixes(Xn, q, decide, first):
    """APS prefixes of a chunk: rows whose set ends among the classes above 1 % of their maximum go
    through the engine as usual; rows with larger sets would take several widening rounds, so their
    values are sorted once (a fast value sort), the APS scores computed along them (the same
    cumulative sums: equal values are interchangeable) and the first class outside the set
    becomes the engine's threshold, which then settles them in one round."""
    r, K = Xn.shape
    rowmax = Xn.max(axis=1)
    t1 = rowmax * 1e-2
    big = ~(np.where(Xn >= t1[:, None], Xn, 0.0).sum(axis=1) > q * (1 + 1e-9) + 1e-12)
    parts = []
    for rows, big_rows in ((np.flatnonzero(~big), False), (np.flatnonzero(big), True)):
        if rows.size == 0:
            continue
        X = Xn[rows]
        if big_rows:
            V = np.sort(X, axis=1)[:, ::-1]
            size = (np.cumsum(V, axis=1) <= q).sum(axis=1)
            t0 = np.where(size < K, V[np.arange(rows.size), np.minimum(size, K - 1)], 0.0)
            del V
            start = lambda X, rowmax, total, t0=t0: t0  # noqa: E731
        else:
            start = first
        sets, _ = prefix_search(X, decide, start, geometric_widening(), chunk_bytes=X.nbytes + 1)
        parts.append((rows, sets))
    sizes = np.zeros(r, dtype=np.int64)
    for rows, sets in parts:
        sizes[rows] = sets.sizes
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    ind = np.empty(ptr[-1], dtype=np.int64)
    for rows, sets in parts:
        within = np.arange(sets.indices.size) - np.repeat(sets.indptr[:-1], sets.sizes)
        ind[np.repeat(ptr[rows], sets.sizes) + within] = sets.indices
    return ind, ptr




def _mask_chunks(P, score, q_row, q_class, k_reg, lam, U, empty, chunk_bytes, k_class=None, values: bool = True,
                 out=None):
    """Yield ``(row0, mask, X)``: the sets ``{c : s(x, c) <= min(q_row, q_class[c])}`` of chunks of
    rows of ``P`` as boolean masks, and the values that rank each row (for the sets' order; ``None``
    with ``values=False``, when only the masks are wanted: the ranked kernel then divides each row
    as it reads it, and the chunk is not copied).

    ``q_row``: one threshold per row (array of ``P``'s rows) or for all; ``q_class``: one per class
    or ``None``; ``U``: the randomised scores' uniforms (one per row) or ``None``; ``k_class``: one
    rank limit per class (RC3P: a class is kept only at a rank at most its limit) or ``None``.  Marginal and
    per-row LAC keep :func:`conformal_sets`' arithmetic (``1 - P/total <= q``, no tolerance);
    every other score compares with ``q`` widened by :func:`_score_tolerance`, as
    :func:`_score_sets` does.  An empty set becomes the top class when ``empty="top1"``.  ``out``: an
    ``(n, K)`` boolean array the masks are written into (the yielded masks are its rows), for the
    marginal LAC and the ranked kernel's paths; otherwise each chunk's mask is new.
    """
    from ._ranked import CODES, margin_mask, ranked_mask

    n, K = P.shape
    q_row = np.broadcast_to(np.asarray(q_row, dtype=np.float64), (n,))
    top1 = empty == "top1"
    kc = np.empty(0, dtype=np.int64) if k_class is None else np.ascontiguousarray(k_class, dtype=np.int64)
    if score == "lac" and q_class is None:
        rows = max(1, int(chunk_bytes) // max(1, K * 8))
        for row0, _, X in row_blocks(P, rows):  # a mapped matrix: one chunk resident (svbop._blocks)
            X = np.ascontiguousarray(X)
            _, total = row_stats(X, row0, "P")
            X = X.astype(np.float64, copy=False)
            T = np.divide(X, total[:, None])  # 1 - X/total <= q in one buffer (fresh temporaries page-fault)
            np.subtract(1.0, T, out=T)
            mask = np.less_equal(T, q_row[row0 : row0 + X.shape[0], None],
                                 out=None if out is None else out[row0 : row0 + X.shape[0]])
            del T
            if top1:  # the top class of the empty rows only
                empty = np.flatnonzero(~mask.any(axis=1))
                if empty.size:
                    mask[empty, X[empty].argmax(axis=1)] = True
            yield row0, mask, X
        return
    q_row = _with_tolerance(q_row, K) if q_row.size else q_row
    qc = np.empty(0) if q_class is None else _with_tolerance(q_class, K)
    k_reg = min(k_reg, K)
    margin = score == "margin" and k_class is None  # the two largest values suffice: no ranking
    kernel = margin or not (score == "lac" and k_class is None)

    def kernel_mask(X, total, row0, mask):
        """The kernel's masks of the chunk ``X`` (rows ``row0 ..``) into ``mask``; a bad row named."""
        r = X.shape[0]
        q = np.ascontiguousarray(q_row[row0 : row0 + r])
        if margin:
            bad = margin_mask(X, total, q, qc, top1, mask)
        else:
            u = np.full(r, 1.0 if score == "saps" else 0.0) if U is None else U[row0 : row0 + r]
            bad = ranked_mask(X, total, CODES[score], q, qc, kc, k_reg, float(lam),
                              np.ascontiguousarray(u, dtype=np.float64), top1, mask)
        if bad >= 0:  # NaN, infinity, a negative value or no mass: named in one line
            row_stats(X, row0, "P")
            raise ValueError(f"P: row {row0 + bad} contains a negative value, NaN or infinity, or no mass")
        return mask

    if kernel and not values:
        for row0, X, total in _summed_chunks(P, chunk_bytes):
            r = X.shape[0]
            mask = np.empty((r, K), dtype=bool) if out is None else out[row0 : row0 + r]  # every entry written
            yield row0, kernel_mask(X, total, row0, mask), None
        return
    for row0, Xn in _normalised_chunks(P, "P", chunk_bytes):
        r = Xn.shape[0]
        if kernel:
            mask = kernel_mask(Xn, np.ones(r), row0, np.empty((r, K), dtype=bool))
        else:  # LAC per class: no ranking needed
            mask = (1.0 - Xn <= qc) & (1.0 - Xn <= q_row[row0 : row0 + r, None])
            if top1:
                mask[np.arange(r), Xn.argmax(axis=1)] |= ~mask.any(axis=1)
        yield row0, mask, Xn


def _mask_sets(P, score, q_row, q_class, k_reg, lam, U, empty, chunk_bytes, k_class=None) -> SetPredictions:
    """:func:`_mask_chunks`' sets as :class:`SetPredictions`, classes in ranked order."""
    from ._ranked import mask_sets

    P = as_score_matrix(P, "P")
    indices, sizes = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    for _, mask, X in _mask_chunks(P, score, q_row, q_class, k_reg, lam, U, empty, chunk_bytes, k_class):
        ind, size = mask_sets(mask, X)
        indices.append(ind)
        sizes.append(size)
    return SetPredictions(np.concatenate(indices), np.concatenate([[0], np.cumsum(np.concatenate(sizes))]), P.shape[1])


def _every_class(P: np.ndarray, chunk_bytes: int) -> SetPredictions:
    """Every class of every row, in decreasing probability (ties by class index)."""
    return _score_sets(P, math.inf, "aps", 1, 0.0, "keep", chunk_bytes)


def _filter_per_class(Xn, ind, ptr, q, score, k_reg, lam, empty):
    """Keep the classes of each ranked prefix whose score is within their own class's threshold."""
    r = Xn.shape[0]
    size = np.diff(ptr)
    W = int(size.max()) if r else 0
    pad = np.arange(W) < size[:, None]
    C = np.zeros((r, W), dtype=np.int64)
    C[pad] = ind
    V = np.where(pad, Xn[np.arange(r)[:, None], C], 0.0)
    keep = pad & (_ranked_scores(V, score, k_reg, lam) <= q[C])
    if empty == "top1":
        none = ~keep.any(axis=1)
        if none.any():  # the most probable class (lowest index among ties), whatever its threshold
            top = np.argmax(Xn[none], axis=1)
            if W == 0:
                C, keep = np.zeros((r, 1), dtype=np.int64), np.zeros((r, 1), dtype=bool)
            C[none, 0] = top
            keep[none, 0] = True
    new_size = keep.sum(axis=1)
    return C[keep], np.concatenate([[0], np.cumsum(new_size)])
