"""Split-conformal set prediction: ICP (LAC), APS, RAPS, class-conditional, Bayes-optimal sets with coverage.

* :func:`conformal_quantile` and :func:`conformal_sets`: the paper's inductive conformal
  prediction baseline (ICP, nonconformity ``1 - P(y|x)``), also re-exported by
  :mod:`svbop.baselines` beside the paper's other baselines.
* :class:`ConformalSetPredictor`: the LAC, APS and RAPS scores, class-conditional thresholds, and
  Bayes-optimal F-beta and credal sets calibrated to cover the true class with probability at
  least ``1 - epsilon`` (see its docstring for the definitions and the proofs).

* Group-conditional (Mondrian) calibration for every score (``fit(..., groups=...)``) and
  :class:`AdaptiveConformalSetPredictor`, adaptive conformal inference for streams (Gibbs and
  Candès 2021).  What MAPIE, crepes, TorchCP and puncc do for these, and what svbop does
  differently (explicit small/unseen-group rules; ACI's update and both ends of the level as in
  the paper), is noted in ``workflow/docs/library.md``, section "Conformal sets".

This module imports only svbop's lower modules (``_prefix``, ``search``, ``metrics``, ``sets``,
``utilities``); :mod:`svbop.baselines` imports it, never the other way.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ._prefix import (
    DEFAULT_CHUNK_BYTES,
    SortedHeads,
    as_score_matrix,
    geometric_widening,
    prefix_search,
    row_stats,
    settle_all,
    sorted_heads,
)
from ._conformal_common import (  # noqa: F401  (_score_tolerance: re-exported by baselines)
    _epsilon,
    _normalised_chunks,
    _order_statistic,
    _score_tolerance,
    _with_tolerance,
)
from .metrics import check_groups as _check_groups
from .metrics import check_labels
from .search import TIE_RTOL, _scan, predict_sets
from .sets import SetPredictions
from .utilities import Utility, utility

__all__ = [
    "conformal_quantile",
    "conformal_sets",
    "ConformalSetPredictor",
    "CONFORMAL_SCORES",
    "PREDICTOR_SCORES",
    "SMALL_GROUPS",
    "GroupCalibrationWarning",
    "min_calibration_rows",
    "AdaptiveConformalSetPredictor",
    "ACI_STEP",
    "GROUPINGS",
    "predicted_groups",
]




def _no_calibration_rows(P_cal: np.ndarray) -> None:
    if P_cal.shape[0] == 0:
        raise ValueError(f"P_cal has no rows (shape {P_cal.shape}, dtype {P_cal.dtype}): the calibration set is empty")


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
    _, total = row_stats(P_cal, 0, "P_cal")
    scores = 1.0 - P_cal[np.arange(y_cal.size), y_cal] / total
    n = scores.size
    k = math.ceil((n + 1) * (1 - eps))
    if k > n:
        return math.inf
    return float(np.partition(scores, k - 1)[k - 1])


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

#: Conformity scores of :class:`ConformalSetPredictor`.
CONFORMAL_SCORES = ("lac", "aps", "raps", "fbeta", "credal")
#: Every score of :class:`ConformalSetPredictor`: the five above, and the hierarchy-restricted sets of
#: :mod:`svbop.hierarchical_conformal` (``score="hierarchical"``, with ``hierarchy`` and ``max_nodes``).
PREDICTOR_SCORES = (*CONFORMAL_SCORES, "hierarchical")

#: F-beta with a beta this large has ``beta**2 = inf`` in float64, so ``g = 1`` (recall): the
#: Bayes-optimal set is every class.  The end of the search range for ``score="fbeta"``.
_FBETA_EVERY_CLASS = 1.4e154

#: Smallest positive normal float64: ``lam`` and ``gamma`` are 0 (``lam`` only) or at least this,
#: as the utilities' parameters are (a subnormal has too few bits to compute with).
_NORMAL_MIN = float(np.finfo(np.float64).tiny)








def _ranked_scores(V: np.ndarray, score: str, k_reg: int, lam: float) -> np.ndarray:
    """Scores of the classes in ranked order: ``V[i, j]`` is the normalised probability of the class
    of rank ``j + 1`` of row ``i`` (decreasing, ties by class index).  Calibration and prediction
    both call this on the same values in the same order, so their scores agree exactly."""
    if score == "lac":
        return 1.0 - V
    cum = np.cumsum(V, axis=1)  # sequential: the same for any width of V
    if score == "raps":
        cum = cum + lam * np.maximum(0, np.arange(1, V.shape[1] + 1) - k_reg)
    return cum


def _calibration_scores(P: np.ndarray, y: np.ndarray, score: str, k_reg: int, lam: float, chunk_bytes: int):
    """The score ``s(x_i, y_i)`` of every calibration row (LAC, APS or RAPS).

    Only the classes ranked at or before ``y_i`` (those with ``P >= P(y_i|x_i)``) are sorted.
    """
    k_reg = min(k_reg, P.shape[1])  # ranks stop at K: a larger k_reg is K (and stays a small integer)
    out = np.empty(y.size)
    for row0, Xn in _normalised_chunks(P, "P_cal", chunk_bytes):
        yc = y[row0 : row0 + Xn.shape[0]]
        t = Xn[np.arange(yc.size), yc]
        for heads in sorted_heads(Xn, t):
            S = _ranked_scores(heads.values, score, k_reg, lam)
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


def _family_utility(score: str, parameter: float, gamma: float | None) -> Utility:
    """The member of the F-beta or credal family with the given beta or delta."""
    if score == "fbeta":
        return utility(f"fbeta:beta={float(parameter)!r}")
    return utility(f"credal:delta={float(parameter)!r},gamma={float(gamma)!r}")


def _covered(P: np.ndarray, y: np.ndarray, u: Utility) -> np.ndarray:
    """Whether ``y[i]`` is in the Bayes-optimal set of row ``i`` (``svbop.predict_sets``)."""
    sets = predict_sets(P, u)
    rows = np.repeat(np.arange(y.size), sets.sizes)
    out = np.zeros(y.size, dtype=bool)
    out[rows[sets.indices == y[rows]]] = True
    return out


def _float_between(a: float, b: float) -> float | None:
    """A float64 halfway (in representation) between non-negative ``a < b``; None if adjacent."""
    ia, ib = np.float64(a).view(np.int64), np.float64(b).view(np.int64)
    if ib - ia <= 1:
        return None
    return float(np.int64(ia + (ib - ia) // 2).view(np.float64))


def _credal_delta_max(gamma: float, K: int) -> float:
    """The largest delta whose credal utility has ``0 <= g(s) <= 1`` for every ``s`` (ValueError if none)."""
    # g(s) = delta/s - gamma/s^2 <= 1 for every s up to K (and up to 1000, where a utility
    # without K is checked); g >= 0 needs delta >= gamma
    s = np.arange(1, max(K, 1000) + 1, dtype=np.float64)
    delta_max = float(np.min(s + gamma / s))
    for _ in range(8):  # a few ulps below the bound if rounding leaves g(s) above 1
        if delta_max < gamma:
            break
        try:
            _family_utility("credal", delta_max, gamma).values(K)
            break
        except ValueError:
            delta_max = float(np.nextafter(delta_max, 0.0))
    else:  # pragma: no cover - rounding is a few ulps
        raise RuntimeError(f"no largest delta found for gamma={gamma}")
    if delta_max < gamma:
        raise ValueError(
            f"score='credal': no delta gives 0 <= g(s) <= 1 for every s with gamma={gamma}"
            " (g(1) >= 0 needs delta >= gamma, g(s) <= 1 needs delta <= s + gamma/s)"
        )
    return delta_max


class _RankedCalibration:
    """Every calibration row sorted once (the engine's order and float64 values) and the rank of its
    label, so that the coverage of many members of a family is counted without sorting again."""

    def __init__(self, P: np.ndarray, y: np.ndarray, chunk_bytes: int) -> None:
        n, K = P.shape
        self.V = np.empty((n, K))
        self.pos = np.empty(n, dtype=np.int64)
        self.rows = max(1, int(chunk_bytes) // max(1, K * 8))
        for row0 in range(0, n, self.rows):
            X = np.ascontiguousarray(P[row0 : row0 + self.rows])
            row_stats(X, row0, "P_cal")
            order = np.argsort(-X, axis=1, kind="stable")  # decreasing, ties by class index
            self.V[row0 : row0 + X.shape[0]] = np.take_along_axis(X, order, axis=1)
            self.pos[row0 : row0 + X.shape[0]] = np.argmax(order == y[row0 : row0 + X.shape[0], None], axis=1)

    def covered(self, rows: np.ndarray, u: Utility, early_stop: bool = False) -> np.ndarray:
        """Whether the label of each of ``rows`` is in its Bayes-optimal set under ``u``: Algorithm
        1's scan with the arithmetic of :func:`svbop.predict_sets`.  Without ``early_stop`` the set
        is the last accepted prefix of the whole ranking; with it (exact when ``g`` is
        (1/x)-convex and non-increasing, Theorem 2, and then what ``predict_sets`` does) the label
        is covered when every prefix up to it is accepted, so only the classes ranked at or
        before the label are scanned (rows in order of the label's rank, chunk by chunk)."""
        K = self.V.shape[1]
        g = u.values(K)
        out = np.empty(rows.size, dtype=bool)
        if early_stop:
            by_rank = np.argsort(self.pos[rows], kind="stable")
            for i in range(0, rows.size, self.rows):
                j = by_rank[i : i + self.rows]
                r = rows[j]
                pos = self.pos[r]
                W = int(pos.max()) + 1
                ok = _scan(self.V[r, :W], np.full(r.size, W), g, TIE_RTOL)[3]
                out[j] = (ok | (np.arange(W) > pos[:, None])).all(axis=1)
            return out
        for i in range(0, rows.size, self.rows):
            r = rows[i : i + self.rows]
            ok = _scan(self.V[r], np.full(r.size, K), g, TIE_RTOL)[3]
            out[i : i + r.size] = K - np.argmax(ok[:, ::-1], axis=1) > self.pos[r]
        return out


def _calibrate_parameter(cover, n, k, score, gamma, lo, hi, verified=False):
    """The ``k``-th order statistic of the family scores, by bisection over the float64 values.

    With the coverage count ``N(t) = #{i : y_i in S_i(t)}``, monotone in ``t`` (nested sets), the
    ``k``-th smallest F-beta score is the smallest ``beta`` with ``N(beta) >= k`` and the ``k``-th
    largest credal score the largest ``delta`` with ``N(delta) >= k``.  Bisection over the bit
    patterns of float64 in ``[lo, hi]`` (about 64 steps) ends at two adjacent floats and returns
    the one at which the count was found ``>= k``.  ``cover(rows, u)`` says which of the labels of
    ``rows`` ``u`` covers.  Rows already decided drop out: a row covered at a parameter is covered
    at every parameter on the large-set side of it, a row not covered is not covered on the
    small-set side.  With ``verified``, no row drops out: every step counts all ``n`` rows, so the
    end returned has an evaluated count ``>= k`` whether or not coverage is monotone (the large-set
    end ``hi``/``lo`` must cover ``k`` rows: every class for F-beta, checked for credal).
    """
    grows = score == "fbeta"  # sets grow with the parameter
    small_end = lo if grows else hi
    everyone = np.arange(n)
    c = cover(everyone, _family_utility(score, small_end, gamma))
    if c.sum() >= k:
        return small_end
    base, active = int(c.sum()), everyone[~c]  # covered at the small end: covered everywhere
    a, b = lo, hi
    if verified:
        base, active = 0, everyone
    while (mid := _float_between(a, b)) is not None:
        c = cover(active, _family_utility(score, mid, gamma)) if active.size else np.zeros(0, dtype=bool)
        if verified:
            a, b = ((a, mid) if grows else (mid, b)) if int(c.sum()) >= k else ((mid, b) if grows else (a, mid))
            continue
        if base + int(c.sum()) >= k:  # mid is on the covering side: move the large-set end there
            a, b = (a, mid) if grows else (mid, b)
            active = active[c]  # not covered at mid: not covered between the small end and mid
        else:  # move the small-set end to mid
            a, b = (mid, b) if grows else (a, mid)
            base += int(c.sum())
            active = active[~c]
    return b if grows else a


# --- group-conditional (Mondrian) calibration -----------------------------------------------------

#: What a group with too few calibration rows for a finite quantile gets (``small_groups=``).
SMALL_GROUPS = ("marginal", "full")


class GroupCalibrationWarning(UserWarning):
    """A group too small for its own threshold, or not seen at calibration, got a fallback."""


def min_calibration_rows(epsilon) -> int:
    """The fewest calibration rows ``n`` whose conformal quantile is finite at level ``epsilon``.

    The quantile is the ``k``-th smallest of ``n`` scores with ``k = ceil((n+1)(1-epsilon))``,
    finite iff ``k <= n``, i.e. iff ``(n+1)(1-epsilon) <= n``, i.e. ``n >= 1/epsilon - 1``
    (exact arithmetic): 9 rows at ``epsilon = 0.1``, 19 at 0.05, 99 at 0.01.
    """
    eps = _epsilon(epsilon)
    return max(1, math.ceil(1 / eps - 1))


@dataclass(frozen=True)
class _Calibration:
    """One calibration's result: the threshold ``quantile`` (for ``fbeta``/``credal`` the family
    ``parameter`` and its ``utility``), per-class thresholds when class-conditional, or every class."""

    quantile: float
    quantiles: np.ndarray | None = None
    parameter: float | None = None
    utility: Utility | None = None
    every_class_: bool = False

    @classmethod
    def every_class(cls) -> "_Calibration":
        return cls(math.inf, every_class_=True)


def _group_list(labels: np.ndarray, counts: np.ndarray, most: int = 20) -> str:
    """``'a' (3 rows), 'b' (5 rows)``, at most ``most`` of them (then how many more)."""
    items = [f"{label!r} ({int(c)} rows)" for label, c in zip(labels.tolist()[:most], counts[:most])]
    if labels.size > most:
        items.append(f"and {labels.size - most} more")
    return ", ".join(items)


def _every_class(P: np.ndarray, chunk_bytes: int) -> SetPredictions:
    """Every class of every row, in decreasing probability (ties by class index)."""
    return _score_sets(P, math.inf, "aps", 1, 0.0, "keep", chunk_bytes)


def _merge_rows(parts, n: int, K: int) -> SetPredictions:
    """One SetPredictions of ``n`` rows from ``(rows, sets)`` parts that partition ``0..n-1``."""
    sizes = np.zeros(n, dtype=np.int64)
    for rows, sets in parts:
        sizes[rows] = sets.sizes
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    ind = np.empty(int(ptr[-1]), dtype=np.int64)
    eu = np.empty(n) if parts and all(sets.expected_utility is not None for _, sets in parts) else None
    for rows, sets in parts:
        within = np.arange(sets.indices.size) - np.repeat(sets.indptr[:-1], sets.sizes)
        ind[np.repeat(ptr[rows], sets.sizes) + within] = sets.indices
        if eu is not None:
            eu[rows] = sets.expected_utility
    return SetPredictions(ind, ptr, K, eu)


class ConformalSetPredictor:
    r"""Split-conformal set predictor: LAC, APS, RAPS, class-conditional, or Bayes-optimal sets.

    Classes of a row are ranked by decreasing ``P(c|x)`` (normalised per row), ties by class
    index; ``o(c)`` is the 1-based rank.  Scores ``s(x, c)`` (large: non-conforming):

    * ``"lac"``: ``1 - P(c|x)`` (the paper's ICP; unchanged);
    * ``"aps"``: ``sum of P(c'|x)`` over the classes ``c'`` ranked at or before ``c``;
    * ``"raps"``: the APS score ``+ lam * max(0, o(c) - k_reg)``.

    ``fit`` computes the calibration scores ``s(x_i, y_i)``, and ``q`` is their
    ``k``-th smallest with ``k = ceil((n+1)(1-epsilon))`` (exact arithmetic); **``q = inf`` when
    ``k > n``** (too few calibration rows for this ``epsilon``: every class is kept).  ``predict``
    returns ``{c : s(x, c) <= q}`` in ranked order.  With ``class_conditional=True`` (Mondrian
    conformal prediction), each class ``c`` gets its own ``q_c`` from the calibration rows with
    ``y_i = c`` and the set is ``{c : s(x, c) <= q_c}``: coverage at least ``1 - epsilon`` holds
    *for every class*; **a class with no calibration rows (or too few) has ``q_c = inf``: it is
    in every set.**  Class-conditional sets are not prefixes of the ranking in general.  An
    empty set stays empty (``empty="keep"``) or becomes the top-ranked class (``"top1"``, default:
    adding a class only raises coverage).

    Arithmetic: for APS, RAPS and class-conditional LAC, a row is divided by its float64 sum
    (numpy's ``sum``) and the cumulative sums run along the ranking, the same operations at
    calibration and at prediction, so a test point equal to a calibration point gets exactly
    that point's scores.  Scores equal in exact arithmetic can still differ in their last bits
    between two rows (a row's total mass rounds to ``1.0`` in one and ``0.9999999999999999`` in
    another), so **a class is kept when ``s(x, c) <= q + tol * max(1, |q|)``** with
    ``tol = 4 K 2**-52`` (:func:`_score_tolerance`; MAPIE compares with an absolute 1e-8): the
    last class is never dropped by rounding, and the classes the tolerance adds only raise
    coverage.  (Marginal LAC keeps the paper's implementation, :func:`conformal_quantile` and
    :func:`conformal_sets`.)

    **Bayes-optimal sets with coverage** (``score="fbeta"`` or ``"credal"``).  Let
    ``S(x; t)`` be :func:`svbop.predict_sets` for the family member with parameter ``t``
    (F-beta with ``beta = t``; credal with ``delta = t`` at the fixed ``gamma > 0``), with its
    tie rule (ties within ``tie_rtol`` go to the larger set).

    *Nestedness.*  Every ``S(x; t)`` is a prefix of the same ranking, of size
    ``m(t) = max{s : A_s(t)}`` where ``A_s(t)`` says ``U_s >= (1 - rho) U_j`` for all ``j < s``,
    ``U_s = g_t(s) C_s`` and ``C_s`` the mass of the first ``s`` classes.  For ``j < s``,

    * F-beta: ``U_s/U_j = (C_s/C_j) (j + beta^2)/(s + beta^2)``, increasing in ``beta``
      (derivative of ``(j+b)/(s+b)`` is ``(s-j)/(s+b)^2 > 0``);
    * credal, ``g(s) = delta/s - gamma/s^2``: ``U_s/U_j = (C_s j^2 / (C_j s^2)) h(delta)`` with
      ``h = (delta s - gamma)/(delta j - gamma)`` and ``h' = gamma (j - s)/(delta j - gamma)^2
      < 0`` for ``gamma > 0``: decreasing in ``delta``, so **credal sets shrink as delta grows**.
      (``gamma = 0`` makes the sets independent of ``delta``; ``gamma < 0`` reverses the
      direction: both are refused.)

    So each pairwise condition, hence each ``A_s``, holds on a closed half-line of the parameter
    (closed: the inequalities are non-strict and continuous), and ``m(t)`` is monotone:
    non-decreasing in ``beta``, non-increasing in ``delta``.  The sets are nested, and
    ``{t : y in S(x; t)} = {t : m(t) >= o(y)}`` is a closed half-line.

    *Score and calibration.*  The score of ``(x, y)`` is the end of that half-line: for F-beta
    ``V = min{beta : y in S(x; beta)}``, for credal ``V = max{delta : y in S(x; delta)}``
    (``-inf`` if no ``delta`` in ``[gamma, delta_max]`` covers ``y``; ``delta_max`` is the largest
    delta with ``0 <= g <= 1``).  ``parameter_`` is the ``k``-th smallest F-beta score (the
    ``k``-th *largest* credal score, the quantile on the other side), found without computing
    each score: it is the smallest ``beta`` (largest ``delta``) at which at least ``k``
    calibration sets contain their label, located by bisection over all float64 values of the
    parameter, which ends at two adjacent floats; the final ``parameter_`` is the end at which
    the count was evaluated as ``>= k``.  ``predict(P)`` is exactly
    ``svbop.predict_sets(P, utility_)``.

    *Coverage.*  For a test pair exchangeable with the ``n`` calibration pairs,
    ``y in S(x; parameter_)`` iff ``V <= parameter_`` (F-beta; ``>=`` for credal) by
    nestedness, and ``parameter_`` is the ``k``-th order statistic of ``V_1..V_n``.  By
    exchangeability the rank of ``V_{n+1}`` among ``V_1..V_{n+1}`` is uniform (ties broken
    at random), so ``P(V_{n+1} <= V_(k)) >= k/(n+1) >= 1 - epsilon``.  The argument is in
    exact arithmetic; the computed expected utilities round in their last bits, which can move
    a switch point of ``m(t)`` by a few ulps of ``t`` but never the count at ``parameter_``,
    which is evaluated (if the fast count and ``predict_sets`` disagree there, the bisection is
    redone counting every row with ``predict_sets`` at every step, so that the count at the
    result is always an evaluated ``>= k``).

    *Labels of probability 0.*  Such a class adds no mass, so it enters ``S(x; t)`` only through
    the tie tolerance (for F-beta near ``beta^2 ~ 1/tie_rtol``), where rounding can make its
    coverage non-monotone in ``t``.  **Its score is defined as never covered**: ``V = +inf``
    for F-beta (only the every-class member ``parameter_ = 1.4e154`` holds it), ``V = -inf``
    for credal; the bisection runs on the other rows.  Float32 probabilities (the pipeline's)
    often hold exact zeros: when more than ``n - k`` calibration labels have probability 0,
    the ``k``-th smallest F-beta score is ``+inf`` and F-beta returns every class.
    When ``k > n``: F-beta returns every class (``quantile_ = inf``,
    ``parameter_ = 1.4e154``, where ``beta^2`` overflows and ``g = 1``); credal cannot keep
    every class and ``fit`` raises ``ValueError``, as it does when even ``delta = gamma`` (the
    largest credal sets) covers fewer than ``k`` calibration rows.

    **Group-conditional (Mondrian) calibration** (``fit(P_cal, y_cal, groups=g)``, every score).
    The calibration rows are split by group and each group ``h`` gets its own calibration from
    its ``n_h`` rows alone (the same single-threshold fit as the marginal one: ``q_h``, or the
    family parameter ``t_h``); ``predict(P, groups=g_test)`` gives a row of group ``h`` the set
    ``S(x; q_h)``.  The groups must be known at test time (a metadata column, the predicted
    class, the top-level hierarchy node of the predicted class: anything computed from ``x`` or
    given beside it; not the label).

    *Coverage in every group.*  Let the test pair be exchangeable with the ``n_h`` calibration
    pairs of its group (for instance, all pairs i.i.d.: conditional on the groups, the pairs of
    group ``h`` are i.i.d. from the distribution of the pairs of group ``h``).  The proof above,
    applied to the ``n_h + 1`` scores of group ``h``, gives ``P(y in S(x) | group = h) >=
    ceil((n_h+1)(1-epsilon))/(n_h+1) >= 1 - epsilon`` for every group ``h`` separately, whatever
    the other groups (Vovk et al. 2005, Mondrian conformal prediction).  The quantile of a group
    is finite only when ``n_h >= 1/epsilon - 1`` (:func:`min_calibration_rows`: 9 rows at
    ``epsilon = 0.1``).  A smaller group gets, as ``small_groups`` says, the marginal
    calibration (``"marginal"``, the default: no per-group guarantee for that group, only a set
    of the usual size) or every class (``"full"``: coverage 1, the guarantee kept trivially); one
    :class:`GroupCalibrationWarning` names those groups and their counts.  A group not seen in
    ``fit`` gets the marginal calibration (one warning per ``predict`` call names them).
    ``class_conditional=True`` is the Mondrian calibration by the label (whose groups are not
    known at test time: each candidate class is tested against its own threshold); it is not
    combined with ``groups``.  A credal fit can fail in a group as it can marginally (too few
    rows covered even at ``delta = gamma``): the error names the group.

    Parameters
    ----------
    epsilon : float
        Significance level in (0, 1): coverage at least ``1 - epsilon``.
    score : {"lac", "aps", "raps", "fbeta", "credal", "hierarchical"}
        ``"hierarchical"``: sets that are unions of at most ``max_nodes`` nodes of ``hierarchy``
        (the authors' conformal hierarchy-restricted sets, Mortier, Javanmardi, Sale, Hullermeier and
        Waegeman, PMLR vol. 300; their CSVPHF without randomisation, with a running maximum of the
        cover masses so that the score implies coverage: :mod:`svbop.hierarchical_conformal` states
        the variant, why it departs from theirs, and proves ``P(y in C(x)) >= 1 - epsilon``).
        ``max_nodes >= K`` gives APS's sets.  Groups (Mondrian) work as for every score;
        ``predict(..., return_nodes=True)`` also returns each row's nodes.
    class_conditional : bool, default False
        One threshold per class (``lac``, ``aps``, ``raps`` only).
    k_reg : int, default 1
        RAPS: ranks up to ``k_reg`` are not penalised (``score="raps"`` only; any ``k_reg >= K``
        penalises nothing).
    lam : float, default 0.0
        RAPS: penalty per rank beyond ``k_reg`` (``score="raps"`` only; 0 gives APS).  0 or a
        normal double-precision number (at least 2.2e-308): subnormal values are refused.
    empty : {"top1", "keep"}
        What an empty set becomes (F-beta and credal sets are never empty).
    gamma : float, optional
        The credal family's fixed ``gamma > 0`` (required for ``score="credal"`` only), a normal
        double-precision number (at least 2.2e-308), as the utility's parameters are.
    small_groups : {"marginal", "full"}, default "marginal"
        With ``fit(..., groups=...)``: what a group with fewer than
        :func:`min_calibration_rows` calibration rows gets (the marginal calibration, or every
        class).
    hierarchy : svbop.datasets.Hierarchy, optional
        ``score="hierarchical"`` only (required there): a class tree whose leaves are the columns.
    max_nodes : int, default 1
        ``score="hierarchical"`` only: the most nodes a set may join.

    Attributes
    ----------
    quantile_ : float
        Calibrated threshold ``q`` (for class-conditional sets: the largest ``q_c``; for
        ``fbeta``/``credal``: ``parameter_``, or ``inf`` when ``k > n``).
    quantiles_ : ndarray of shape (n_classes,)
        Per-class thresholds ``q_c`` (``class_conditional=True`` only).
    parameter_ : float
        ``fbeta``: beta; ``credal``: delta.
    utility_ : Utility
        The family member with ``parameter_`` (``fbeta``/``credal`` only).
    n_classes_ : int
        Number of classes seen in ``fit``.
    groups_ : ndarray
        The sorted group labels seen in ``fit`` (``fit(..., groups=...)`` only, as the next three).
    group_counts_ : ndarray of int
        Calibration rows of each group of ``groups_``.
    group_quantiles_ : ndarray of float
        Each group's threshold (``fbeta``/``credal``: parameter); a small group's is the marginal
        one (``small_groups="marginal"``) or ``inf`` (``"full"``).
    small_groups_ : ndarray
        The groups of ``groups_`` with too few rows for their own threshold.

    Examples
    --------
    >>> import numpy as np, svbop
    >>> rng = np.random.default_rng(0)
    >>> P = rng.dirichlet(np.ones(5), size=200); y = rng.integers(0, 5, 200)
    >>> aps = svbop.ConformalSetPredictor(0.1, score="aps").fit(P[:100], y[:100])
    >>> len(aps.predict(P[100:]))
    100
    """

    def __init__(
        self,
        epsilon: float,
        score: str = "lac",
        class_conditional: bool = False,
        k_reg: int = 1,
        lam: float = 0.0,
        empty: str = "top1",
        gamma: float | None = None,
        small_groups: str = "marginal",
        hierarchy=None,
        max_nodes: int = 1,
    ) -> None:
        _epsilon(epsilon)
        if not isinstance(score, str) or score not in PREDICTOR_SCORES:
            raise ValueError(f"score must be one of {', '.join(PREDICTOR_SCORES)}; got {score!r}")
        if score == "hierarchical":
            from .datasets.base import Hierarchy
            from .hierarchical_conformal import _max_nodes

            if not isinstance(hierarchy, Hierarchy):
                raise ValueError("score='hierarchical' needs hierarchy= (a svbop.datasets.Hierarchy whose leaves are "
                                 f"the classes), got {type(hierarchy).__name__}")
            max_nodes = _max_nodes(max_nodes)
        elif hierarchy is not None or max_nodes != 1:
            raise ValueError(f"hierarchy and max_nodes are for score='hierarchical'; score={score!r} takes neither")
        if not isinstance(class_conditional, (bool, np.bool_)):
            raise ValueError(f"class_conditional must be True or False, got {class_conditional!r}")
        if class_conditional and score not in ("lac", "aps", "raps"):
            raise ValueError(f"class_conditional=True is for score 'lac', 'aps' or 'raps', not {score!r}")
        if isinstance(k_reg, (bool, np.bool_)) or not isinstance(k_reg, (int, np.integer)) or k_reg < 0:
            raise ValueError(f"k_reg must be an integer >= 0, got {k_reg!r}")
        if isinstance(lam, (bool, np.bool_)) or not isinstance(lam, (int, float, np.integer, np.floating)) or not (
            lam == 0 or _NORMAL_MIN <= lam <= np.finfo(np.float64).max
        ):
            raise ValueError(
                f"lam must be a finite number >= 0, and 0 or at least {_NORMAL_MIN:.4g} (not subnormal), got {lam!r}"
            )
        if score != "raps" and (lam != 0 or k_reg != 1):
            raise ValueError(f"k_reg and lam are RAPS parameters; score={score!r} takes neither (use score='raps')")
        if empty not in ("top1", "keep"):
            raise ValueError(f"empty must be 'top1' or 'keep', got {empty!r}")
        if score == "credal":
            if gamma is None:
                raise ValueError("score='credal' needs gamma (the credal family's fixed gamma > 0)")
            if isinstance(gamma, (bool, np.bool_)) or not isinstance(gamma, (int, float, np.integer, np.floating)):
                raise ValueError(f"gamma must be a number > 0, got {gamma!r}")
            if 0 < gamma < _NORMAL_MIN:
                raise ValueError(
                    f"gamma must be a double-precision number >= {_NORMAL_MIN:.4g} (not subnormal), got {gamma!r}"
                )
            if not 0 < gamma <= np.finfo(np.float64).max:
                raise ValueError(
                    f"gamma must be finite and > 0, got {gamma!r}: at gamma = 0 the credal sets do not depend on"
                    " delta, and at gamma < 0 they grow with it (see the class docstring)"
                )
        elif gamma is not None:
            raise ValueError(f"gamma is the credal family's parameter; score={score!r} takes none")
        if not isinstance(small_groups, str) or small_groups not in SMALL_GROUPS:
            raise ValueError(f"small_groups must be 'marginal' or 'full', got {small_groups!r}")
        self.epsilon = epsilon
        self.score = score
        self.class_conditional = bool(class_conditional)
        self.k_reg = int(k_reg)
        self.lam = float(lam)
        self.empty = empty
        self.gamma = None if gamma is None else float(gamma)
        self.small_groups = small_groups
        self.hierarchy = hierarchy
        self.max_nodes = int(max_nodes)

    def fit(self, P_cal, y_cal, groups=None, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> "ConformalSetPredictor":
        """Calibrate on held-out probabilities ``P_cal`` (n, K) and labels ``y_cal`` (n,).

        Parameters
        ----------
        P_cal : array-like of shape (n, K)
        y_cal : array-like of shape (n,)
        groups : array-like of shape (n,), optional
            Group of every calibration row (integers, strings or booleans; known at test time, e.g.
            a metadata column or the predicted class): one threshold (F-beta/credal: one
            parameter) per group, so that coverage is at least ``1 - epsilon`` *within every
            group* (Mondrian calibration; see the class docstring).  ``predict`` then needs the
            groups of its rows.
        """
        P_cal = as_score_matrix(P_cal, "P_cal")
        y_cal = check_labels(y_cal, P_cal.shape, "y_cal")
        eps = _epsilon(self.epsilon)
        _no_calibration_rows(P_cal)
        if groups is not None:
            if self.class_conditional:
                raise ValueError(
                    "groups cannot be combined with class_conditional=True (one threshold per class already is a"
                    " Mondrian calibration by the label); pass one or the other"
                )
            groups = _check_groups(groups, P_cal.shape[0], "groups", "P_cal")
        for attr in ("quantiles_", "parameter_", "utility_", "groups_", "group_counts_", "group_quantiles_",
                     "small_groups_", "_group_cals", "_group_index"):
            self.__dict__.pop(attr, None)
        K = P_cal.shape[1]
        marginal = self._calibrate(P_cal, y_cal, eps, chunk_bytes)
        self.quantile_ = marginal.quantile
        for attr, value in (("quantiles_", marginal.quantiles), ("parameter_", marginal.parameter),
                            ("utility_", marginal.utility)):
            if value is not None:
                setattr(self, attr, value)
        self.n_classes_ = K
        if groups is not None:
            self._fit_groups(P_cal, y_cal, groups, eps, marginal, chunk_bytes)
        return self

    def _calibrate(self, P, y, eps: Fraction, chunk_bytes: int) -> "_Calibration":
        """One calibration (threshold or family parameter) from the rows ``P``, ``y``.

        The single-threshold fit that the marginal, the per-class and the per-group (Mondrian)
        calibrations share: a new score adds its branch here and in :meth:`_predict_with`, and
        gets group-conditional calibration from :meth:`_fit_groups` for free.
        """
        K = P.shape[1]
        if self.score == "hierarchical":
            from .hierarchical_conformal import hierarchical_scores

            s = hierarchical_scores(P, y, self.hierarchy, self.max_nodes, chunk_bytes=chunk_bytes)
            return _Calibration(_order_statistic(s, eps))
        if self.score in ("fbeta", "credal"):
            return self._fit_family(P, y, eps, K, chunk_bytes)
        if self.score == "lac" and not self.class_conditional:
            return _Calibration(conformal_quantile(P, y, eps))
        s = _calibration_scores(P, y, self.score, self.k_reg, self.lam, chunk_bytes)
        if self.class_conditional:
            order = np.argsort(y, kind="stable")
            bounds = np.searchsorted(y[order], np.arange(K + 1))
            quantiles = np.array([_order_statistic(s[order[bounds[c] : bounds[c + 1]]], eps) for c in range(K)])
            return _Calibration(float(quantiles.max()), quantiles=quantiles)
        return _Calibration(_order_statistic(s, eps))

    def _fit_groups(self, P, y, groups, eps, marginal, chunk_bytes) -> None:
        """One :meth:`_calibrate` per group; groups too small for a finite quantile follow ``small_groups``."""
        labels, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        need = min_calibration_rows(eps)
        cals, small = [], []
        for j, label in enumerate(labels.tolist()):
            if counts[j] < need:
                small.append(j)
                cals.append(marginal if self.small_groups == "marginal" else _Calibration.every_class())
                continue
            rows = order[bounds[j] : bounds[j + 1]]
            try:
                cals.append(self._calibrate(P[rows], y[rows], eps, chunk_bytes))
            except ValueError as e:
                raise ValueError(f"group {label!r} ({counts[j]} calibration rows): {e}") from None
        if small:
            what = "the marginal threshold" if self.small_groups == "marginal" else "every class"
            warnings.warn(
                f"{len(small)} of {labels.size} group(s) have fewer calibration rows than the {need} that"
                f" epsilon={self.epsilon} needs: {_group_list(labels[small], counts[small])}; they get {what}"
                f" (small_groups={self.small_groups!r})",
                GroupCalibrationWarning,
                stacklevel=3,
            )
        self.groups_ = labels
        self.group_counts_ = counts.astype(np.int64)
        self.group_quantiles_ = np.array([c.quantile for c in cals], dtype=np.float64)
        self.small_groups_ = labels[small]
        self._group_cals = tuple(cals)
        self._group_index = {label: j for j, label in enumerate(labels.tolist())}

    def _bisect(self, P, y, k, lo, hi, chunk_bytes):
        """``_calibrate_parameter`` on the once-sorted calibration rows; if ``predict_sets`` at the
        result covers fewer than ``k`` labels (rounding made the two scans disagree, or coverage
        not monotone in the last bits of the parameter), again with ``predict_sets`` itself,
        counting every row at every step: its result's count is then one evaluated (``>= k``)."""
        n = y.size
        fast = _RankedCalibration(P, y, chunk_bytes)
        # F-beta is (1/x)-convex and decreasing for every beta (the paper's Section 2.2; its
        # properties hold with equality), so predict_sets stops early and so can the count
        early = self.score == "fbeta"
        t = _calibrate_parameter(lambda r, u: fast.covered(r, u, early), n, k, self.score, self.gamma, lo, hi)
        del fast
        if _covered(P, y, _family_utility(self.score, t, self.gamma)).sum() < k:
            t = _calibrate_parameter(
                lambda r, u: _covered(P[r], y[r], u), n, k, self.score, self.gamma, lo, hi, verified=True
            )
        return t

    def _fit_family(self, P, y, eps, K, chunk_bytes) -> "_Calibration":
        n = y.size
        k = math.ceil((n + 1) * (1 - eps))
        # A label of probability 0 enters a Bayes-optimal set only through the tie tolerance, where
        # its coverage need not be monotone in the parameter: its score is taken as never covered
        # (F-beta: +inf; credal: -inf), and only the other rows are bisected on.
        labelled = np.flatnonzero(P[np.arange(n), y] != 0)
        if labelled.size < n:
            P, y = P[labelled], y[labelled]
        if self.score == "fbeta":
            if k > labelled.size:  # the k-th smallest score is +inf: only every class covers
                quantile, parameter = math.inf, _FBETA_EVERY_CLASS
            else:
                parameter = quantile = self._bisect(P, y, k, 0.0, _FBETA_EVERY_CLASS, chunk_bytes)
            return _Calibration(quantile, parameter=parameter, utility=_family_utility("fbeta", parameter, None))
        else:
            gamma = self.gamma
            if k > n:
                raise ValueError(
                    f"score='credal': {n} calibration rows are too few for epsilon={self.epsilon} (the quantile is"
                    " infinite, i.e. every class, which no credal utility predicts); add rows or raise epsilon"
                )
            delta_max = _credal_delta_max(gamma, K)
            if not (k <= labelled.size and _covered(P, y, _family_utility("credal", gamma, gamma)).sum() >= k):
                zeros = f" ({n - labelled.size} of them have a label of probability 0)" if labelled.size < n else ""
                raise ValueError(
                    f"score='credal' with gamma={gamma}: even the largest credal sets (delta = gamma) contain the"
                    f" label of fewer than {k} of the {n} calibration rows{zeros} needed for epsilon={self.epsilon};"
                    " use score='fbeta' or a larger epsilon"
                )
            parameter = self._bisect(P, y, k, gamma, delta_max, chunk_bytes)
            return _Calibration(parameter, parameter=parameter, utility=_family_utility("credal", parameter, gamma))

    def predict(self, P, groups=None, *, return_nodes: bool = False, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        """Conformal sets of the rows of ``P`` (classes in decreasing probability).

        ``groups`` (one per row) is required when ``fit`` had groups, and refused otherwise: each
        row gets its group's threshold; a group not seen in ``fit`` gets the marginal one (one
        :class:`GroupCalibrationWarning` per call names them).
        """
        if not hasattr(self, "quantile_"):
            raise ValueError("ConformalSetPredictor is not fitted: call fit(P_cal, y_cal) first")
        if return_nodes and self.score != "hierarchical":
            raise ValueError(f"return_nodes is for score='hierarchical' (its sets are unions of nodes), not {self.score!r}")
        P = as_score_matrix(P, "P")
        if P.shape[1] != self.n_classes_:
            raise ValueError(f"P has {P.shape[1]} classes but the predictor was calibrated on {self.n_classes_}")
        grouped = hasattr(self, "groups_")
        if groups is None:
            if grouped:
                raise ValueError(
                    "groups is required: the predictor was calibrated per group (fit(P_cal, y_cal, groups=...))"
                )
            return self._predict_with(self._marginal(), P, chunk_bytes, return_nodes)
        if not grouped:
            raise ValueError(
                "groups given to predict but the predictor was calibrated without groups: pass"
                " fit(P_cal, y_cal, groups=...) too"
            )
        groups = _check_groups(groups, P.shape[0], "groups", "P")
        labels, inverse = np.unique(groups, return_inverse=True)
        inverse = inverse.reshape(-1)
        where = [self._group_index.get(label) for label in labels.tolist()]
        unseen = [j for j, w in enumerate(where) if w is None]
        if unseen:
            counts = np.bincount(inverse, minlength=labels.size)
            warnings.warn(
                f"{len(unseen)} group(s) not seen in fit: {_group_list(labels[unseen], counts[unseen])};"
                " their rows get the marginal threshold",
                GroupCalibrationWarning,
                stacklevel=2,
            )
        marginal = self._marginal()
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=labels.size))])
        parts, nodes = [], [None] * P.shape[0]
        for j, w in enumerate(where):
            rows = order[bounds[j] : bounds[j + 1]]
            cal = marginal if w is None else self._group_cals[w]
            out = self._predict_with(cal, P[rows], chunk_bytes, return_nodes)
            if return_nodes:
                out, part_nodes = out
                for r, v in zip(rows.tolist(), part_nodes):
                    nodes[r] = v
            parts.append((rows, out))
        merged = _merge_rows(parts, P.shape[0], P.shape[1])
        return (merged, nodes) if return_nodes else merged

    def _marginal(self) -> "_Calibration":
        return _Calibration(
            self.quantile_,
            quantiles=getattr(self, "quantiles_", None),
            parameter=getattr(self, "parameter_", None),
            utility=getattr(self, "utility_", None),
        )

    def _predict_with(self, cal: "_Calibration", P: np.ndarray, chunk_bytes: int, return_nodes: bool = False):
        """The sets of the rows of ``P`` under one calibration (see :meth:`_calibrate`); with
        ``return_nodes`` (hierarchical score only) also each row's nodes."""
        if self.score == "hierarchical":
            from .hierarchical_conformal import hierarchical_conformal_sets

            q = math.inf if cal.every_class_ else cal.quantile
            return hierarchical_conformal_sets(P, q, self.hierarchy, self.max_nodes, empty=self.empty,
                                               return_nodes=return_nodes, chunk_bytes=chunk_bytes)
        if cal.every_class_:
            return _every_class(P, chunk_bytes)
        if self.score in ("fbeta", "credal"):
            return predict_sets(P, cal.utility, chunk_bytes=chunk_bytes)
        if self.score == "lac" and not self.class_conditional:
            return conformal_sets(P, cal.quantile, empty=self.empty, chunk_bytes=chunk_bytes)
        q = cal.quantiles if self.class_conditional else cal.quantile
        return _score_sets(P, q, self.score, self.k_reg, self.lam, self.empty, chunk_bytes)


#: Groups known at test time that :func:`predicted_groups` computes from the probabilities.
GROUPINGS = ("predicted_class", "predicted_top_node")


def predicted_groups(P, by: str, hierarchy=None) -> np.ndarray:
    """The group of every row that is known at test time, from its probabilities: for Mondrian
    calibration (``ConformalSetPredictor.fit(..., groups=...)``) and per-group coverage.

    ``by="predicted_class"``: the most probable class (ties: the lowest id).
    ``by="predicted_top_node"``: the top-level node of the hierarchy (a child of the root) above the
    most probable class (the class itself when it hangs from the root); needs ``hierarchy``.
    """
    P = as_score_matrix(P, "P")
    if by not in GROUPINGS:
        raise ValueError(f"by must be one of {', '.join(GROUPINGS)}, got {by!r}")
    top = np.empty(P.shape[0], dtype=np.int64)
    rows = max(1, DEFAULT_CHUNK_BYTES // max(1, P.shape[1] * 8))
    for lo in range(0, P.shape[0], rows):
        top[lo: lo + rows] = np.asarray(P[lo: lo + rows]).argmax(axis=1)
    if by == "predicted_class":
        return top
    from .datasets.base import Hierarchy

    if not isinstance(hierarchy, Hierarchy):
        raise ValueError("by='predicted_top_node' needs hierarchy (a svbop.datasets.Hierarchy over the classes)")
    if hierarchy.n_classes != P.shape[1]:
        raise ValueError(f"hierarchy has {hierarchy.n_classes} classes but P has {P.shape[1]} columns")
    parent = np.asarray(hierarchy.parent)
    first = np.arange(hierarchy.n_classes)  # the ancestor of each class just below the root
    for _ in range(parent.size):
        up = parent[first]
        move = (up >= 0) & (parent[np.maximum(up, 0)] >= 0)
        if not move.any():
            break
        first = np.where(move, up, first)
    return first[top]


# --- adaptive conformal inference (ACI) for a stream --------------------------------------------

#: The default ``step`` of :class:`AdaptiveConformalSetPredictor` (see its docstring: with it the
#: miscoverage of any window of ``T`` rows is within ``52/T`` of ``epsilon``, whatever the drift).
ACI_STEP = 0.02


def _family_values(score: str, t: np.ndarray, gamma: float | None, K: int) -> np.ndarray:
    """``g(1..K)`` of the family member of parameter ``t[i]`` for every ``i`` (shape (r, K)): the
    arithmetic of :meth:`svbop.Utility.values` (``utilities.FBeta._g``/``Credal._g``, clipped to
    [0, 1]) for one parameter per row."""
    s = np.arange(1, K + 1, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)[:, None]
    if score == "fbeta":
        g = 1.0 - (s - 1.0) / (s + t * t)
    else:
        g = t / s - gamma / (s * s)
    return np.clip(g, 0.0, 1.0)


def _family_sizes(V: np.ndarray, g: np.ndarray, early: bool) -> np.ndarray:
    """Sizes of the Bayes-optimal sets of rows ``V`` (each sorted decreasing, raw values) under one
    ``g`` per row (shape (r, K)): Algorithm 1's scan with :func:`svbop.predict_sets`' arithmetic;
    with ``early`` the set ends at the first prefix not accepted (F-beta), otherwise at the last
    accepted one (as :class:`_RankedCalibration` counts)."""
    cum = np.cumsum(V, axis=1)
    U = cum * g
    best = np.maximum.accumulate(U, axis=1)
    ok = U >= (1.0 - TIE_RTOL) * best
    K = V.shape[1]
    if early:
        fail = ~ok
        return np.where(fail.any(axis=1), fail.argmax(axis=1), K)
    return K - np.argmax(ok[:, ::-1], axis=1)


def _family_scores(rc: _RankedCalibration, score: str, gamma: float | None, lo: float, hi: float) -> np.ndarray:
    """Every row's *minimal covering parameter*: F-beta ``min{beta : y in S(x; beta)}``, credal
    ``max{delta : y in S(x; delta)}`` (``-inf`` if even ``delta = lo = gamma`` misses ``y``), by a
    bisection over the float64 values of ``[lo, hi]`` run for all rows at once (about 64 steps,
    one parameter per row).  A label of probability 0 scores ``+inf`` (F-beta) or ``-inf`` (credal),
    never covered, as in :class:`ConformalSetPredictor`."""
    n, K = rc.V.shape
    grows = score == "fbeta"
    label = rc.V[np.arange(n), rc.pos]
    out = np.full(n, np.inf if grows else -np.inf)
    todo = np.flatnonzero(label > 0)

    def covered(rows, t):
        return _family_sizes(rc.V[rows], _family_values(score, t, gamma, K), grows) > rc.pos[rows]

    small_end, large_end = (lo, hi) if grows else (hi, lo)
    at_small = covered(todo, np.full(todo.size, small_end))
    out[todo[at_small]] = small_end
    todo = todo[~at_small]
    if not grows:  # not covered even by the largest credal sets: -inf
        todo = todo[covered(todo, np.full(todo.size, large_end))]
    # invariant: covered at the large-set end, not at the small-set end
    a = np.full(todo.size, np.float64(lo).view(np.int64))
    b = np.full(todo.size, np.float64(hi).view(np.int64))
    while todo.size and np.any(b - a > 1):
        mid = a + (b - a) // 2
        c = covered(todo, mid.view(np.float64))
        if grows:  # covered: the smallest covering beta is at or below mid
            b, a = np.where(c, mid, b), np.where(c, a, mid)
        else:  # covered: the largest covering delta is at or above mid
            a, b = np.where(c, mid, a), np.where(c, b, mid)
    out[todo] = (b if grows else a).view(np.float64)
    return out


class AdaptiveConformalSetPredictor:
    r"""Adaptive conformal inference (ACI) for a stream: coverage that holds under drift.

    Gibbs and Candès, "Adaptive conformal inference under distribution shift", NeurIPS 2021.
    Split conformal prediction covers with probability ``1 - epsilon`` when the test rows are
    exchangeable with the calibration rows; a deployed model sees drift, and the coverage of a
    threshold calibrated once can fall far below its target (or rise far above).  ACI keeps a
    working level ``alpha_t`` and, after each labelled row, moves it:

    ``alpha_{t+1} = alpha_t + step * (epsilon - err_t)``,  ``err_t = 1`` if ``y_t`` is not in
    ``C_t``, else 0,

    where ``C_t`` is the split-conformal set at level ``alpha_t``: the calibration scores' ``k``-th
    smallest with ``k = ceil((n+1)(1 - alpha_t))`` is the threshold.  A miss lowers the level
    (larger sets), a hit raises it by ``step * epsilon``.  As in Gibbs and Candès, **``alpha_t <=
    0`` (or ``k > n``) gives every class and ``alpha_t >= 1`` the empty set** (whatever ``empty``
    says: the bound below needs it).

    *Long-run coverage* (their Proposition 4.1, with its proof).  (i) ``alpha_t`` stays in
    ``[-step, 1 + step]`` when ``alpha_1`` is in ``[0, 1]``: if ``alpha_t >= 1`` the set is empty,
    ``err_t = 1`` and ``alpha`` falls (by ``step (1 - epsilon)``); if ``alpha_t < 1`` it rises by at
    most ``step epsilon < step``, so it never passes ``1 + step``; symmetrically, ``alpha_t <= 0``
    gives every class, ``err_t = 0`` and ``alpha`` rises, and from ``alpha_t > 0`` it falls by at
    most ``step (1 - epsilon) < step``.  (ii) Summing the update over ``t = 1..T``,
    ``alpha_{T+1} = alpha_1 + step * sum_t (epsilon - err_t)``, so

    ``|(1/T) sum_{t<=T} err_t - epsilon| = |alpha_{T+1} - alpha_1| / (step T)
    <= (max(alpha_1, 1 - alpha_1) + step) / (step T)``,

    **for every sequence of rows, with no assumption on the data** (adversarial drift included).
    The same argument over any window ``t0 .. t0+T-1`` (where ``alpha_{t0}`` is anywhere in
    ``[-step, 1 + step]``) bounds its miscoverage gap by ``(1 + 2 step) / (step T)``.  Nothing is
    claimed for one row: the guarantee is a long-run frequency.

    *The default step* (``ACI_STEP = 0.02``; Gibbs and Candès use 0.005).  The window bound is
    ``52/T`` at 0.02: within 0.01 of ``epsilon`` over every window of 5,200 rows or more, 0.0052
    over 10,000, whatever happens; at 0.005 the bound over 10,000 rows is 0.0201, and after an
    abrupt drift the level moves 4 times slower (it moves by ``step (err - epsilon)`` per row, so
    a shift of ``Delta`` in the level the new data need takes about
    ``Delta / (step * |miscoverage - epsilon|)`` rows: 50 rows at 0.02 for ``Delta = 0.1`` and a
    miscoverage of twice a 0.1 target, 200 at 0.005).  A larger step makes the level, hence the
    sets, vary more from row to row (one miss moves it by ``step (1 - epsilon)``: at ``n = 1,000``
    calibration rows, about 18 order statistics at 0.02): 0.02 is the smallest round step whose
    guarantee reaches 0.01 over 10,000 rows.

    *Scores.*  ``lac``, ``aps``, ``raps``: the calibration scores ``s(x_i, y_i)`` of
    :class:`ConformalSetPredictor` (its arithmetic and tolerance; LAC here uses the class-conditional
    LAC's arithmetic, ``1 - P(c|x)`` of the row divided by its float64 sum), sorted once: each row's
    threshold is one index into them.  ``fbeta``, ``credal``: each calibration row's *minimal
    covering parameter* (F-beta: the smallest beta whose Bayes-optimal set holds the label; credal:
    the largest delta; :class:`ConformalSetPredictor` explains why these are conformity scores, the
    sets being nested in the parameter) is computed once by a bisection over the float64 values
    for all rows at once; the level's order statistic is then the parameter (for credal the
    ``k``-th *largest* delta), and a row's set is Algorithm 1's Bayes-optimal set under that family
    member (the scan of :func:`svbop.predict_sets` on the sorted row).  A credal score is ``+inf``
    when even the largest credal sets (``delta = gamma``) miss the label; a level whose order
    statistic is such a row gives every class, as an infinite quantile does for the other scores.

    Parameters
    ----------
    epsilon : float
        The target miscoverage in (0, 1), also the initial level ``alpha_1``.
    score : {"lac", "aps", "raps", "fbeta", "credal"}
    step : float, default ACI_STEP (0.02)
        The learning rate ``gamma`` of Gibbs and Candès, in (0, 1].
    k_reg, lam, empty, gamma
        As in :class:`ConformalSetPredictor` (``empty="top1"``: an empty set at ``0 < alpha_t < 1``
        becomes the top class; at ``alpha_t >= 1`` the set stays empty).

    Attributes
    ----------
    scores_ : ndarray
        The calibration scores, sorted (credal: the negated deltas, so that small is conforming).
    alpha_ : float
        The current working level (``alpha_1 = epsilon`` after ``fit``).
    alphas_ : ndarray
        The levels used for the rows of the last :meth:`update`, in order.
    n_seen_, n_errors_ : int
        Rows seen by :meth:`update` since ``fit``, and how many of their sets missed the label.
    n_classes_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from svbop.conformal import AdaptiveConformalSetPredictor
    >>> rng = np.random.default_rng(0)
    >>> P = rng.dirichlet(np.ones(4), size=300); y = rng.integers(0, 4, 300)
    >>> aci = AdaptiveConformalSetPredictor(0.1, score="aps").fit(P[:100], y[:100])
    >>> sets = aci.update(P[100:], y[100:])       # the sets the stream got, one level per row
    >>> len(sets), aci.n_seen_
    (200, 200)
    """

    def __init__(
        self,
        epsilon: float,
        score: str = "lac",
        step: float = ACI_STEP,
        *,
        k_reg: int = 1,
        lam: float = 0.0,
        empty: str = "top1",
        gamma: float | None = None,
    ) -> None:
        if not isinstance(score, str) or score not in CONFORMAL_SCORES:  # no hierarchical score here (yet)
            raise ValueError(f"score must be one of {', '.join(CONFORMAL_SCORES)}; got {score!r}")
        # the same checks (and one-line messages) as the split-conformal predictor's
        ConformalSetPredictor(epsilon, score=score, k_reg=k_reg, lam=lam, empty=empty, gamma=gamma)
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, float, np.integer, np.floating)) \
                or not 0 < step <= 1:
            raise ValueError(f"step must be a number in (0, 1], got {step!r}")
        self.epsilon = epsilon
        self.score = score
        self.step = float(step)
        self.k_reg = int(k_reg)
        self.lam = float(lam)
        self.empty = empty
        self.gamma = None if gamma is None else float(gamma)

    def fit(self, P_cal, y_cal, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> "AdaptiveConformalSetPredictor":
        """Initial calibration on held-out probabilities ``P_cal`` (n, K) and labels ``y_cal`` (n,);
        the level starts at ``epsilon``."""
        P_cal = as_score_matrix(P_cal, "P_cal")
        y_cal = check_labels(y_cal, P_cal.shape, "y_cal")
        _epsilon(self.epsilon)
        _no_calibration_rows(P_cal)
        K = P_cal.shape[1]
        if self.score in ("fbeta", "credal"):
            rc = _RankedCalibration(P_cal, y_cal, chunk_bytes)
            if self.score == "fbeta":
                scores = _family_scores(rc, "fbeta", None, 0.0, _FBETA_EVERY_CLASS)
            else:
                self._delta_max = _credal_delta_max(self.gamma, K)
                scores = -_family_scores(rc, "credal", self.gamma, self.gamma, self._delta_max)
            del rc
        else:
            scores = _calibration_scores(P_cal, y_cal, self.score, self.k_reg, self.lam, chunk_bytes)
        self.scores_ = np.sort(scores)
        self.scores_.setflags(write=False)
        self.alpha_ = float(self.epsilon)
        self.alphas_ = np.empty(0)
        self.n_seen_ = 0
        self.n_errors_ = 0
        self.n_classes_ = K
        return self

    def _threshold(self, alpha: float) -> float:
        """The calibration scores' ``ceil((n+1)(1-alpha))``-th smallest; ``inf`` (every class) when
        that exceeds ``n`` (``alpha <= 1/(n+1)``, ``alpha <= 0`` included), ``-inf`` (the empty set)
        at ``alpha >= 1``."""
        if alpha >= 1:
            return -math.inf
        n = self.scores_.size
        k = math.ceil((n + 1) * (1 - alpha))
        return math.inf if k > n else float(self.scores_[k - 1])

    def _check(self, P, name: str) -> np.ndarray:
        if not hasattr(self, "scores_"):
            raise ValueError("AdaptiveConformalSetPredictor is not fitted: call fit(P_cal, y_cal) first")
        P = as_score_matrix(P, name)
        if P.shape[1] != self.n_classes_:
            raise ValueError(f"{name} has {P.shape[1]} classes but the predictor was calibrated on {self.n_classes_}")
        return P

    def predict(self, P, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SetPredictions:
        """The sets of the rows of ``P`` at the current level ``alpha_`` (rows whose labels are not
        known yet; the level moves only in :meth:`update`)."""
        P = self._check(P, "P")
        return self._run(P, None, chunk_bytes)

    def update(self, P, y, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SetPredictions:
        """Rows of a stream, in order, with their labels: row ``t`` gets the set at the level in
        force (``alpha_t``), then its label moves the level.  Returns those sets (what the stream
        was given); ``alphas_`` holds the levels, ``alpha_`` the level for the next row."""
        P = self._check(P, "P")
        y = check_labels(y, P.shape, "y")
        return self._run(P, y, chunk_bytes)

    def _run(self, P: np.ndarray, y: np.ndarray | None, chunk_bytes: int) -> SetPredictions:
        n, K = P.shape
        family = self.score in ("fbeta", "credal")
        alphas = np.empty(n)
        indices, indptr, offset = [], [np.zeros(1, dtype=np.int64)], 0
        alpha, eps, step = self.alpha_, float(self.epsilon), self.step
        errors = 0
        rows = max(1, int(chunk_bytes) // max(1, K * 8))
        for row0 in range(0, n, rows):
            X = np.ascontiguousarray(P[row0 : row0 + rows])
            r = X.shape[0]
            row_stats(X, row0, "P")  # NaN, infinity, negative or all-zero rows: named, one line
            if family:
                order = np.argsort(-X, axis=1, kind="stable")  # decreasing, ties by class index
                V = np.take_along_axis(X, order, axis=1).astype(np.float64)
            else:
                Xn = X.astype(np.float64)  # as _normalised_chunks: divided by the float64 row sum
                Xn /= Xn.sum(axis=1)[:, None]
                order = np.argsort(-Xn, axis=1, kind="stable")
                S = _ranked_scores(np.take_along_axis(Xn, order, axis=1), self.score, min(self.k_reg, K), self.lam)
            pos = None if y is None else np.argmax(order == y[row0 : row0 + r, None], axis=1)
            sizes = np.empty(r, dtype=np.int64)
            cache: dict[float, np.ndarray] = {}
            for i in range(r):
                alphas[row0 + i] = alpha
                q = self._threshold(alpha)
                if q == -math.inf:
                    size = 0
                elif q == math.inf:
                    size = K
                elif family:
                    t = q if self.score == "fbeta" else -q
                    g = cache.get(t)
                    if g is None:
                        g = cache[t] = _family_values(self.score, np.array([t]), self.gamma, K)
                    size = int(_family_sizes(V[i : i + 1], g, self.score == "fbeta")[0])
                else:
                    size = int(np.count_nonzero(S[i] <= _with_tolerance(q, K)))
                    if size == 0 and self.empty == "top1":
                        size = 1
                sizes[i] = size
                if pos is not None:
                    err = pos[i] >= size
                    errors += err
                    alpha = alpha + step * (eps - err)
            keep = np.arange(K) < sizes[:, None]
            indices.append(order[keep])
            indptr.append(np.cumsum(sizes) + offset)
            offset += int(sizes.sum())
        sets = SetPredictions(
            np.concatenate(indices) if indices else np.empty(0, dtype=np.int64), np.concatenate(indptr), K
        )
        if y is not None:
            self.alpha_ = float(alpha)
            self.alphas_ = alphas
            self.n_seen_ += n
            self.n_errors_ += int(errors)
        return sets
