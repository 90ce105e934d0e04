"""Bayes-optimal sets with coverage (``score="fbeta"`` or ``"credal"``): the family members, the
once-sorted calibration rows, the bisection for the calibrated parameter, and each row's minimal
covering parameter (for adaptive conformal inference).  The definitions and proofs are in
:class:`svbop.conformal.ConformalSetPredictor`'s docstring."""

from __future__ import annotations

import numpy as np

from .._blocks import row_blocks
from .._prefix import row_stats
from ..search import TIE_RTOL, _scan, predict_sets
from ..utilities import Utility, utility

#: F-beta with a beta this large has ``beta**2 = inf`` in float64, so ``g = 1`` (recall): the
#: Bayes-optimal set is every class.  The end of the search range for ``score="fbeta"``.
_FBETA_EVERY_CLASS = 1.4e154


def _family_utility(score: str, parameter: float, gamma: float | None) -> Utility:
    """The member of the F-beta or credal family with the given beta or delta."""
    if score == "fbeta":
        return utility(f"fbeta:beta={float(parameter)!r}")
    return utility(f"credal:delta={float(parameter)!r},gamma={float(gamma)!r}")


def _covered(P: np.ndarray, y: np.ndarray, u: Utility, rows: np.ndarray | None = None) -> np.ndarray:
    """Whether ``y[i]`` is in the Bayes-optimal set of row ``i`` (``svbop.predict_sets``), for every row or
    for ``rows`` only (indices into ``P``, increasing: the rows are read where they are, never copied)."""
    sets = predict_sets(P, u)
    at = np.repeat(np.arange(y.size), sets.sizes)
    out = np.zeros(y.size, dtype=bool)
    out[at[sets.indices == y[at]]] = True
    return out if rows is None else out[rows]


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
    """Every calibration row sorted once (the engine's order, the values in the scores' own float dtype:
    float32 scores are kept as float32, half the memory, and widened to float64 chunk by chunk, exactly)
    and the rank of its label, so that the coverage of many members of a family is counted without
    sorting again.  ``rows`` (increasing indices into ``P``): only those rows, read block by block where
    they are, never gathered into a copy of the matrix."""

    def __init__(self, P: np.ndarray, y: np.ndarray, chunk_bytes: int, rows: np.ndarray | None = None) -> None:
        n, K = P.shape
        keep = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
        kind = np.result_type(P.dtype, np.float32) if P.dtype.kind == "f" else np.dtype(np.float64)
        self.V = np.empty((keep.size, K), dtype=kind)
        self.pos = np.empty(keep.size, dtype=np.int64)
        self.rows = max(1, int(chunk_bytes) // max(1, K * 8))
        for row0, row1, X in row_blocks(P, self.rows):  # a mapped matrix: one chunk resident
            X = np.ascontiguousarray(X)
            row_stats(X, row0, "P_cal")
            a, b = np.searchsorted(keep, (row0, row1))
            if a == b:
                continue
            X = X[keep[a:b] - row0] if b - a < X.shape[0] else X
            order = np.argsort(-X, axis=1, kind="stable")  # decreasing, ties by class index
            self.V[a:b] = np.take_along_axis(X, order, axis=1)
            self.pos[a:b] = np.argmax(order == y[keep[a:b], None], axis=1)

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
                ok = _scan(self.V[r, :W].astype(np.float64), np.full(r.size, W), g, TIE_RTOL)[3]
                out[j] = (ok | (np.arange(W) > pos[:, None])).all(axis=1)
            return out
        for i in range(0, rows.size, self.rows):
            r = rows[i : i + self.rows]
            ok = _scan(self.V[r].astype(np.float64), np.full(r.size, K), g, TIE_RTOL)[3]
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

    def covered(rows, t):  # chunk by chunk: a few rows' float64 copies at a time
        t = np.broadcast_to(np.asarray(t, dtype=np.float64), rows.shape)
        out = np.empty(rows.size, dtype=bool)
        for i in range(0, rows.size, rc.rows):
            r = rows[i : i + rc.rows]
            V = rc.V[r].astype(np.float64)
            out[i : i + r.size] = _family_sizes(V, _family_values(score, t[i : i + r.size], gamma, K), grows) > rc.pos[r]
        return out

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
