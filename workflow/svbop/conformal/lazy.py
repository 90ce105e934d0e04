r"""Conformal sets without the ``n x K`` matrix: from a probabilistic class tree
(:class:`svbop.trees.TreeProbabilities`) or from a model's top-k outputs
(:class:`svbop.SparseOutputs`).

Every ranked score (LAC, APS, RAPS, SAPS, top-k, margin; randomised or not) is non-decreasing
along a row's ranking (classes by decreasing probability, ties by class id), so a set
``{c : s(x, c) <= q}`` is a prefix of the ranking and a calibration score ``s(x_i, y_i)`` needs the
ranking only down to the label.  Both sources give the ranking's head without the rest:

* a **tree** yields its classes in exactly decreasing probability by SVBOP-HF's best-first search
  (:func:`svbop.hf.enumerate_leaves`); a node's probability bounds every class below it, so the
  search stops as soon as every class left is known to score above ``q``: below ``1 - q`` (LAC),
  after a mass above ``q`` (APS, RAPS), past a rank (top-k, RAPS, SAPS), below the top
  probability minus ``q`` (margin).  A calibration row searches down to its label.
* **top-k outputs** hold the head; a class outside it has probability 0 (the score function is
  defined so), ranks after the row's positive classes by class id, and scores as the dense path
  scores a zero: LAC 1, APS the row's whole mass, RAPS/SAPS/top-k by its rank, margin the top
  probability.  A threshold that reaches them adds them in that order; "every class" when all.

The scores are computed with the dense path's arithmetic on the same values
(:mod:`svbop.conformal._prefix_kernels`), and compared with ``q`` as the dense path compares
them (marginal LAC exactly, the others with :func:`svbop.conformal._common._score_tolerance`), so
the sets equal the dense path's on ``model.predict_proba(X)`` (a tree; its rows sum to 1 up to
rounding, which the tolerance covers) or on the top-k rows with zeros elsewhere.
"""

from __future__ import annotations

import math

import numpy as np

from ..sets import SetPredictions
from ..sparse_outputs import SparseOutputs
from ..trees import TreeProbabilities
from ._common import _with_tolerance
from ._prefix_kernels import CODES, ragged_scores

__all__ = ["is_lazy", "lazy_calibration_scores", "lazy_quantile", "lazy_ranked_heads", "lazy_sets", "lazy_mask",
           "MAX_SET_ENTRIES", "MAX_MASK_BYTES"]

#: Largest total size of the sets :func:`lazy_sets` returns (int64 class ids: 2 GiB); past it the
#: refusal says how many rows hold every class.
MAX_SET_ENTRIES = 1 << 28
#: Largest boolean mask :func:`lazy_mask` makes (``n x K`` bytes).
MAX_MASK_BYTES = 1 << 30
#: Rows per block of top-k outputs.
_BLOCK = 8192
#: Margin by which a tree search goes on past the threshold (its exact test is done on the values).
_SLACK = 1e-9


def is_lazy(P) -> bool:
    """Whether ``P`` is a lazy probability source (a tree's or top-k outputs), not a matrix."""
    return isinstance(P, (SparseOutputs, TreeProbabilities))


def _ragged_sparse(src: SparseOutputs, rows: slice):
    ids, V, count = src.ranked(rows)
    valid = np.arange(ids.shape[1]) < count[:, None]
    indptr = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    return indptr, ids[valid], np.ascontiguousarray(V[valid])


def _scores(indptr, V, score, k_reg, lam, U):
    n = indptr.size - 1
    out = np.empty(V.size)
    cum = np.empty(n)
    u = np.zeros(n) if U is None else np.ascontiguousarray(U, dtype=np.float64)
    ragged_scores(indptr, V, CODES[score], int(k_reg), float(lam), u, U is not None, out, cum)
    return out, cum


def _tail_score(score, o, v0, cum, u, k_reg, lam):
    """The dense path's score of a class of probability 0 at rank ``o >= 2`` (after the row's top class):
    :func:`_label_score` with that probability, the row's top probability ``v0`` and its mass ``cum``."""
    return _label_score(o, 0.0, cum, v0, 0.0, score, k_reg, lam, u)


def lazy_calibration_scores(src, y: np.ndarray, score: str, k_reg: int, lam: float, U=None) -> np.ndarray:
    """The score ``s(x_i, y_i)`` of every calibration row of a lazy source (``U``: one uniform per row
    for the randomised scores)."""
    n, K = src.shape
    k_reg = min(k_reg, K)
    out = np.empty(n)
    if isinstance(src, SparseOutputs):
        for lo in range(0, n, _BLOCK):
            hi = min(n, lo + _BLOCK)
            indptr, cls, V = _ragged_sparse(src, slice(lo, hi))
            u = None if U is None else U[lo:hi]
            S, cum = _scores(indptr, V, score, k_reg, lam, u)
            out[lo:hi] = _label_scores(indptr, cls, V, S, cum, y[lo:hi], score, k_reg, lam, u, K)
        return out
    scores, _ = _tree_label_scores(src, y, score, k_reg, lam, U, None)
    return scores


def _tree_label_scores(src, y, score, k_reg, lam, U, give_up_rank):
    """A tree's calibration scores: ``(scores, exact)``.  LAC reads the label's path alone, margin that and
    the row's first two classes; the other scores search each row down to its label, or give up after
    ``give_up_rank`` classes, where ``scores`` holds a lower bound of the score and ``exact`` is False."""
    from ..hf import enumerate_leaves, path_log_proba

    n = y.size
    if score in ("lac", "margin"):
        py = np.exp(path_log_proba(src.model, src.X, y, n_jobs=src.n_jobs))
        if score == "lac":
            return 1.0 - py, np.ones(n, dtype=bool)
        _, cls, first, _, _ = enumerate_leaves(src.model, src.X, rank_max=2, min_n=2, keep=False, n_jobs=src.n_jobs)
        o = np.where(cls[:, 0] == y, 1, 2)  # only the top class's margin differs from v0 - p(y)
        v = np.exp(first)
        v1 = v[:, 1] if v.shape[1] > 1 else 0.0  # one class: no second
        return _label_score(o, py, 0.0, v[:, 0], v1, score, k_reg, lam, U), np.ones(n, dtype=bool)
    # each row searched down to its label; only its first two classes and the label's rank, probability
    # and mass kept (memory bounded by the rows, whatever the labels' ranks)
    counts, _, first, mass, found = enumerate_leaves(src.model, src.X, target=y, rank_max=1, keep=False,
                                                     n_jobs=src.n_jobs,
                                                     give_up_rank=give_up_rank)
    o = found[:, 0].astype(np.int64)
    exact = o > 0
    out = np.empty(n)
    v = np.exp(first[exact])
    v1 = v[:, 1] if v.shape[1] > 1 else 0.0
    out[exact] = _label_score(o[exact], np.exp(found[exact, 1]), found[exact, 2], v[:, 0], v1, score, k_reg, lam,
                              None if U is None else U[exact])
    lost = ~exact  # the label is below the counts[i] classes out: its score is at least ...
    c, m, v0 = counts[lost], mass[lost], np.exp(first[lost, 0])
    if score == "aps":
        lb = m
    elif score == "raps":
        lb = m + lam * np.maximum(0, c + 1 - k_reg)
    elif score == "topk":
        lb = c.astype(np.float64)  # o - u > o - 1 >= c
    else:  # saps: o >= c + 1 >= 2
        lb = v0 + lam * np.maximum(c - 1, 0)
    out[lost] = lb * (1 - 1e-12)  # below the exact score's rounding
    return out, exact


#: Classes a tree's calibration search takes before giving a row up to a lower bound of its score.
_GIVE_UP_RANK = 512


def lazy_quantile(src, y: np.ndarray, score: str, k_reg: int, lam: float, U, eps) -> float:
    """The conformal quantile, the ``ceil((n+1)(1-eps))``-th smallest calibration score, of a lazy source,
    exactly.  A tree's rows whose labels rank far down are first given up with a lower bound of their
    score; only those whose bound does not settle the order statistic are searched to the end."""
    n = y.size
    k = math.ceil((n + 1) * (1 - eps))
    if k > n:
        return math.inf
    if isinstance(src, SparseOutputs) or score in ("lac", "margin"):
        s = lazy_calibration_scores(src, y, score, k_reg, lam, U)
        return float(np.partition(s, k - 1)[k - 1])
    K = src.shape[1]
    s, exact = _tree_label_scores(src, y, score, min(k_reg, K), lam, U, _GIVE_UP_RANK)
    while True:
        E = s[exact]
        t = float(np.partition(E, k - 1)[k - 1]) if E.size >= k else math.inf
        need = np.flatnonzero(~exact & (s <= t))
        if need.size == 0:
            return t
        part = src.take(need)
        s[need], _ = _tree_label_scores(part, y[need], score, min(k_reg, K), lam, None if U is None else U[need], None)
        exact[need] = True


def _label_score(o, py, cum, v0, v1, score, k_reg, lam, U):
    """A class's score from its rank ``o``, probability ``py``, the mass down to it ``cum`` and the row's two
    largest probabilities ``v0``, ``v1`` (arrays or scalars, broadcast): the arithmetic of
    :func:`svbop.conformal._prefix_kernels.ragged_scores` at that class's entry."""
    if score == "lac":
        return 1.0 - py
    if score == "topk":
        return np.asarray(o, dtype=np.float64) if U is None else o - U
    if score == "margin":
        return np.where(o == 1, v1 - v0, v0 - py)
    if score == "saps":
        u = 1.0 if U is None else U
        return np.where(o == 1, u * v0, v0 + lam * ((o - 2) + u))
    s = cum if U is None else cum - U * py
    if score == "raps":
        s = s + lam * np.maximum(0, o - k_reg)
    return s


def lazy_ranked_heads(src, y: np.ndarray, score: str, k_reg: int, lam: float):
    """Each calibration row's classes in the order its nested sets take them in, down to its label, with
    their (deterministic) scores: ``(indptr, classes, scores)``, for losses that weigh more than the
    label's own score (the hierarchical distance).  A tree only: top-k outputs would list every class
    of probability 0 ranked before a label outside the top-k."""
    if not isinstance(src, TreeProbabilities):
        raise ValueError(f"{type(src).__name__}: this loss weighs every class that enters a set before the label;"
                         " from top-k outputs give the full outputs, or use a loss of the label alone (miscoverage,"
                         " class_cost)")
    from ..hf import enumerate_leaves

    K = src.shape[1]
    indptr, cls, logp, _ = enumerate_leaves(src.model, src.X, target=y, rank_max=1, min_n=2 if score == "margin" else 1,
                                            n_jobs=src.n_jobs)
    S, _ = _scores(indptr, np.exp(logp), score, min(k_reg, K), lam, None)
    return indptr, cls, S


def _label_scores(indptr, cls, V, S, cum, y, score, k_reg, lam, u, K):
    n = indptr.size - 1
    count = np.diff(indptr)
    row = np.repeat(np.arange(n), count)
    hit = np.flatnonzero(cls == y[row])
    out = np.full(n, np.nan)
    out[row[hit]] = S[hit]
    missing = np.flatnonzero(np.isnan(out))
    if missing.size:  # top-k outputs: the label is outside (probability 0)
        below = np.array([np.count_nonzero(cls[indptr[i]:indptr[i + 1]] < y[i]) for i in missing], dtype=np.int64)
        o = count[missing] + 1 + (y[missing] - below)
        v0 = V[indptr[missing]]
        out[missing] = _tail_score(score, o, v0, cum[missing], None if u is None else u[missing], k_reg, lam)
    return out


def _search_stops(score, q, k_reg, lam, K):
    """Per-row stops of the tree search for thresholds ``q`` (already widened by the tolerance):
    every class past them scores above ``q``."""
    n = q.size
    p_min = np.zeros(n)
    p_below_top = np.full(n, np.inf)
    mass_max = np.full(n, np.inf)
    rank_max = np.full(n, K, dtype=np.int64)
    finite = np.isfinite(q)
    qf = np.where(finite, q, 0.0)
    if score == "lac":
        p_min = np.where(finite, np.maximum(0.0, (1.0 - qf) * (1 - _SLACK) - 1e-12), 0.0)
    elif score in ("aps", "raps"):
        mass_max = np.where(finite, qf * (1 + _SLACK) + 1e-12, np.inf)
    elif score == "margin":
        p_below_top = np.where(finite, qf * (1 + _SLACK) + 1e-12, np.inf)
    if score == "topk":
        rank_max = np.where(finite, np.minimum(K, np.floor(np.maximum(qf, 0)) + 2), K).astype(np.int64)
    elif score in ("raps", "saps") and lam > 0:
        extra = np.maximum(qf, 0) / lam + (k_reg if score == "raps" else 2) + 2
        rank_max = np.where(finite & (extra < K), np.minimum(K, np.floor(extra)), K).astype(np.int64)
    rank_max = np.where(q == -np.inf, 1, rank_max)  # the empty sets: the top class alone (empty="top1")
    return p_min, p_below_top, mass_max, rank_max


def _check_size(total: int, n_every: int, what: str) -> None:
    if total > MAX_SET_ENTRIES:
        raise ValueError(
            f"the sets hold {total:,} classes in all ({n_every:,} rows hold every class: their threshold reaches the"
            f" classes {what}), past {MAX_SET_ENTRIES:,} (svbop.conformal.lazy.MAX_SET_ENTRIES): a larger epsilon (alpha)"
            f" gives smaller sets")


def lazy_sets(src, q_row, q_class, score: str, k_reg: int, lam: float, U, empty: str) -> SetPredictions:
    """The sets ``{c : s(x, c) <= min(q_row, q_class[c])}`` of a lazy source (``q_row`` one threshold per
    row or for all, ``q_class`` one per class or ``None``), classes in ranked order (then, for a tree
    with classes of infinite threshold, those classes by id); an empty set becomes the top class when
    ``empty="top1"``."""
    n, K = src.shape
    k_reg = min(k_reg, K)
    q_row = np.broadcast_to(np.asarray(q_row, dtype=np.float64), (n,))
    exact_lac = score == "lac" and q_class is None  # conformal_sets' arithmetic: no tolerance
    qr = q_row.copy() if exact_lac else _with_tolerance(q_row, K)
    qc = None if q_class is None else _with_tolerance(np.asarray(q_class, dtype=np.float64), K)
    if isinstance(src, SparseOutputs):
        parts = []
        for lo in range(0, n, _BLOCK):
            hi = min(n, lo + _BLOCK)
            indptr, cls, V = _ragged_sparse(src, slice(lo, hi))
            u = None if U is None else U[lo:hi]
            parts.append(_decide(indptr, cls, V, qr[lo:hi], qc, score, k_reg, lam, u, empty, K, exact_lac, True))
        return _join(parts, K)
    from ..hf import enumerate_leaves

    bound = qr.copy()
    inf_classes = np.empty(0, dtype=np.int64)
    if qc is not None:
        finite = qc[np.isfinite(qc)]
        bound = np.minimum(qr, finite.max() if finite.size else -np.inf)
        inf_classes = np.flatnonzero(~np.isfinite(qc))
    p_min, p_below_top, mass_max, rank_max = _search_stops(score, bound, k_reg, lam, K)
    if np.any(bound == np.inf) and K > 1:
        every = int(np.count_nonzero(bound == np.inf))
        _check_size(every * K, every, "of every probability")
    indptr, cls, logp, _ = enumerate_leaves(src.model, src.X, p_min=p_min, p_below_top=p_below_top,
                                            mass_max=mass_max, rank_max=rank_max, n_jobs=src.n_jobs,
                                            min_n=2 if score == "margin" else 1)  # margin: the top's score needs the second
    V = np.exp(logp)
    return _join([_decide(indptr, cls, V, qr, qc, score, k_reg, lam, U, empty, K, exact_lac, False,
                          inf_classes=inf_classes)], K)


def _decide(indptr, cls, V, qr, qc, score, k_reg, lam, u, empty, K, exact_lac, zero_tail, inf_classes=None):
    """Each row's set from its ranked head (and, for top-k outputs, its classes of probability 0)."""
    n = indptr.size - 1
    count = np.diff(indptr)
    row = np.repeat(np.arange(n), count)
    S, cum = _scores(indptr, V, score, k_reg, lam, u)
    if exact_lac:
        keep = 1.0 - V <= qr[row]
    else:
        keep = S <= qr[row]
    if qc is not None:
        keep &= S <= qc[cls]
    kept = np.bincount(row[keep], minlength=n)
    v0 = np.zeros(n)
    v0[count > 0] = V[indptr[:-1][count > 0]]  # each row's top probability
    tails: dict[int, np.ndarray] = {}
    tail_count = np.zeros(n, dtype=np.int64)
    if zero_tail:  # top-k outputs: classes of probability 0 after the head, by class id
        tail_count = _zero_tail(indptr, cls, count, kept, v0, cum, qr, qc, score, k_reg, lam, u, K, tails)
    elif inf_classes is not None and inf_classes.size:  # a tree: classes of infinite threshold are in every set
        for i in range(n):
            extra = np.setdiff1d(inf_classes, cls[indptr[i]:indptr[i + 1]][keep[indptr[i]:indptr[i + 1]]],
                                 assume_unique=True)
            tail_count[i] = extra.size
            tails[i] = extra
    sizes = kept + tail_count
    top1 = (empty == "top1") & (sizes == 0) & (count > 0)
    if top1.any():
        keep[indptr[:-1][top1]] = True
        sizes = sizes + top1
    _check_size(int(sizes.sum()), int(np.count_nonzero(sizes == K)), "of probability 0 outside the top-k"
                if zero_tail else "of infinite threshold")
    head = cls[keep]
    if not tails:
        return head, sizes
    # each row: its kept head, then its tail
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    out = np.empty(int(ptr[-1]), dtype=np.int64)
    kept_row = row[keep]
    kept_now = np.bincount(kept_row, minlength=n)
    hptr = np.concatenate([[0], np.cumsum(kept_now)])
    out[ptr[kept_row] + np.arange(head.size) - hptr[kept_row]] = head
    for i, tail in tails.items():
        out[ptr[i] + kept_now[i]:ptr[i + 1]] = tail
    return out, sizes


def _zero_tail(indptr, cls, count, kept, v0, cum, qr, qc, score, k_reg, lam, u, K, tails):
    """How many classes of probability 0 each row keeps (they rank after its head, by class id)."""
    n = count.size
    out = np.zeros(n, dtype=np.int64)
    room = K - count
    if qc is None:
        # marginal: every score is non-decreasing along the ranking, so the zeros come in only after
        # the whole head; their scores rise with the rank: count those within q by bisection
        open_ = (kept == count) & (room > 0)
        rows = np.flatnonzero(open_)
        if rows.size == 0:
            return out
        uu = None if u is None else u[rows]

        def within(o):
            return _tail_score(score, o, v0[rows], cum[rows], uu, k_reg, lam) <= qr[rows]

        c = count[rows]
        # the last rank o* in [c, K] up to which every zero is within q (within is true, then false)
        all_in, none_in = within(np.full(rows.size, K, dtype=np.int64)), ~within(c + 1)
        lo, hi = c + 1, np.full(rows.size, K, dtype=np.int64)  # within(lo) holds, within(hi) fails
        active = ~all_in & ~none_in
        while True:
            step = active & (hi - lo > 1)
            if not step.any():
                break
            mid = (lo + hi) // 2
            good = within(mid)
            lo = np.where(step & good, mid, lo)
            hi = np.where(step & ~good, mid, hi)
        lo = np.where(all_in, K, np.where(none_in, c, lo))
        m = lo - count[rows]
        out[rows] = m
        for j, i in enumerate(rows.tolist()):
            if m[j]:
                tails[i] = _first_zeros(cls[indptr[i]:indptr[i + 1]], int(m[j]), K)
        return out
    # per class: a class c of probability 0 at rank o_c is kept when its score is within q_row and q_c
    # the zeros' scores rise with the rank: a row whose first zero is above both its threshold and
    # every class's keeps none (no pass over the K classes)
    first = _tail_score(score, count + 1, v0, cum, u, k_reg, lam)
    pos_rows = np.flatnonzero((room > 0) & (first <= np.minimum(qr, qc.max() if qc.size else -np.inf)))
    for i in pos_rows.tolist():
        head = np.sort(cls[indptr[i]:indptr[i + 1]])
        zeros = np.setdiff1d(np.arange(K), head, assume_unique=True)
        o = count[i] + 1 + np.arange(zeros.size)
        s = _tail_score(score, o, v0[i], cum[i], None if u is None else u[i], k_reg, lam)
        keep = (s <= qr[i]) & (s <= qc[zeros])
        out[i] = int(np.count_nonzero(keep))
        if out[i]:
            tails[i] = zeros[keep]
    return out


def _first_zeros(head: np.ndarray, m: int, K: int) -> np.ndarray:
    """The ``m`` smallest class ids not in ``head``."""
    # the m smallest missing ids lie below m + len(head)
    ids = np.arange(m + head.size, dtype=np.int64)
    ids = ids[ids < K]
    return np.setdiff1d(ids, head, assume_unique=True)[:m]


def _join(parts, K):
    indices = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    sizes = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    return SetPredictions(indices.astype(np.int64, copy=False), np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), K)


def lazy_mask(sets: SetPredictions, n: int, K: int, name: str = "P") -> np.ndarray:
    """The sets as an ``(n, K)`` boolean mask, refused past :data:`MAX_MASK_BYTES`."""
    if n * K > MAX_MASK_BYTES:
        raise ValueError(f"predict_mask of {name} would make an ({n:,}, {K:,}) boolean matrix ({n * K / 2**30:.1f} GiB),"
                         f" past {MAX_MASK_BYTES // 2**30} GiB: use predict (the sets' class ids) at this K")
    return sets.to_mask()
