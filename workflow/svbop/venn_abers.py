"""Inductive Venn-Abers calibration (Vovk and Petej, UAI 2014), binary and one-vs-rest multi-class.

**Binary.**  Calibration rows with scores ``s_1..s_n`` (any number that grows with the chance of
label 1) and labels ``y_i`` in {0, 1}.  For a test score ``s``, ``p0`` is the value at ``s`` of the
isotonic (non-decreasing) regression of the labels on the scores, fitted to the calibration rows
and ``(s, 0)``; ``p1`` the same with ``(s, 1)``.  ``p0 <= p1``, and one of them is the fit that
the test row's true label would give: Venn-Abers predictors are *valid* (Vovk and Petej,
Theorem 1): for the true label the multiprobability ``{p0, p1}`` contains a perfectly calibrated
probability, whatever the distribution, given exchangeable rows.  The single probability is the
merge that minimises the worst log loss, ``p = p1 / (1 - p0 + p1)``, which lies in ``[p0, p1]``;
the interval width ``p1 - p0`` is the uncertainty of the calibration itself (about ``1/n``).

*Computation.*  The isotonic fit at a point is ``max_{a <= i} min_{b >= i}`` of the mean label of
the rows between ``a`` and ``b`` (the min-max formula): with ``W_j``, ``S_j`` the number of rows and
the sum of labels among the ``j`` smallest distinct scores (the cumulative-sum diagram, CSD), a
test score between the ``i``-th and ``(i+1)``-th distinct score with label ``t`` gets

``f_t(i) = max_{a <= i} min_{b >= i} (S_b - S_a + t) / (W_b - W_a + 1)``,

the slope of the greatest convex minorant of the CSD with the points left of the test shifted by
``(-1, -t)`` across the test point (Vovk, Petej and Fedorova, NeurIPS 2015, Section 2).  Here every
``f_t(i)`` is computed in ``O(log^2 n)``: the lower convex hulls of every prefix of the shifted left
points and of every suffix of the right points are kept as parent pointers (one stack pass each)
with binary-lifting tables; ``f_t(i) >= u`` holds iff the point of the left hull lowest in the
direction ``u`` and that of the right hull are joined by a slope ``>= u`` (one tangent query on each
hull), so a bisection on ``u`` finds the two tangent points and ``f_t(i)`` is their slope, an
exact quotient of integers (as the ``venn-abers`` package's ``calc_p0p1`` computes it, with which
``tests/test_venn_abers.py`` checks equality).  The ``n + 1`` values of ``p0`` and of ``p1`` are
computed once in ``fit``; ``predict_proba`` looks a test score up by binary search.  A test score
equal to a calibration score is placed, as in the ``venn-abers`` package, before the equal
calibration scores for ``p1`` and after them for ``p0`` (the tie rule of its ``searchsorted``).

**Multi-class** (:class:`VennAbersMultiClass`).  One-vs-rest (the default): class ``c`` is a binary
problem with score ``P(c|x)`` and label ``y == c``; its merged ``p`` is computed for every class and
the row is divided by its sum (the ``venn-abers`` package's ``predict_proba_prefitted_va`` with
``va_tpe="one_vs_rest"``, MAPIE's ``"one_vs_all"``): ``K`` binary fits of ``n`` rows each.
One-vs-one (``strategy="one_vs_one"``, the package's default and its ``VennAbersMultiClass``): one
binary predictor per pair of classes on their rows, coupled per class: ``K (K - 1) / 2`` fits, for a
few classes (a row whose probabilities of both classes of a pair are 0 gets the pair's score
``1/2``: :func:`_pair_scores`).  The binary ``p0``, ``p1`` are kept
(:meth:`VennAbersMultiClass.predict_interval`); the validity above holds for each binary problem,
not for the normalised row.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._arrays import as_host_array

__all__ = ["STRATEGIES", "VennAbers", "VennAbersMultiClass", "venn_abers_table"]

_JIT = {"nogil": True, "cache": True}


@njit(**_JIT)
def _hull_parents(X, Y, forward):
    """Parent of each point on the lower convex hull of the points before it (``forward``: in
    increasing index, whose x increases) or after it (in decreasing index): ``-1`` for none."""
    n = X.size
    par = np.full(n, -1, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for step in range(n):
        r = step if forward else n - 1 - step
        while top >= 2:
            p = stack[top - 2]
            q = stack[top - 1]
            # q leaves the lower hull when it is on or above the segment p-r (integer cross product;
            # its sign flips when the points come in decreasing x)
            lhs = (Y[q] - Y[p]) * (X[r] - X[q])
            rhs = (Y[r] - Y[q]) * (X[q] - X[p])
            if (lhs >= rhs) if forward else (lhs <= rhs):
                top -= 1
            else:
                break
        par[r] = stack[top - 1] if top >= 1 else -1
        stack[top] = r
        top += 1
    return par


@njit(**_JIT)
def _lift(par):
    levels = 1
    while (1 << levels) < par.size + 1:
        levels += 1
    up = np.full((levels, par.size), -1, dtype=np.int64)
    up[0] = par
    for j in range(1, levels):
        for v in range(par.size):
            w = up[j - 1, v]
            up[j, v] = -1 if w < 0 else up[j - 1, w]
    return up


@njit(**_JIT)
def _edge(X, Y, a, b):
    return (Y[b] - Y[a]) / (X[b] - X[a])


@njit(**_JIT)
def _lowest_left(X, Y, up, i, u):
    """The point of the lower hull of points ``0..i`` lowest in direction ``u`` (min ``Y - u X``):
    walk back from ``i`` while the edge into the current point is steeper than ``u``."""
    par = up[0]
    v = i
    if par[v] < 0 or _edge(X, Y, par[v], v) <= u:
        return v
    for j in range(up.shape[0] - 1, -1, -1):
        w = up[j, v]
        if w >= 0 and par[w] >= 0 and _edge(X, Y, par[w], w) > u:
            v = w
    return par[v]


@njit(**_JIT)
def _lowest_right(X, Y, up, i, u):
    """The point of the lower hull of points ``i..k`` lowest in direction ``u``: walk forward from
    ``i`` while the edge out of the current point is less steep than ``u``."""
    nxt = up[0]
    v = i
    if nxt[v] < 0 or _edge(X, Y, v, nxt[v]) >= u:
        return v
    for j in range(up.shape[0] - 1, -1, -1):
        w = up[j, v]
        if w >= 0 and nxt[w] >= 0 and _edge(X, Y, w, nxt[w]) < u:
            v = w
    return nxt[v]


@njit(**_JIT)
def _isotonic_with_test_point(W, S, t):
    """``f_t(i)`` for ``i = 0..k`` (module docstring): ``W``, ``S`` the CSD (int64, ``k + 1``
    points from ``(0, 0)``), ``t`` the test point's label (0 or 1)."""
    k1 = W.size
    LX = W - 1
    LY = S - t
    upL = _lift(_hull_parents(LX, LY, True))
    upR = _lift(_hull_parents(W, S, False))
    out = np.empty(k1)
    # two slopes with denominators at most n + 1 differ by at least 1/(n+1)^2: once the bracket is
    # narrower, the tangent points at its feasible end are those of f_t(i) itself
    steps = 2
    while 2.0 ** -steps >= 1.0 / (W[k1 - 1] + 1.0) ** 2:
        steps += 1
    steps += 1
    lo0 = 0.0
    for i in range(k1):
        lo, hi = lo0, 1.0  # f_t is non-decreasing in i: f_t(i - 1) is a feasible start
        a = _lowest_left(LX, LY, upL, i, lo)
        b = _lowest_right(W, S, upR, i, lo)
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            aa = _lowest_left(LX, LY, upL, i, mid)
            bb = _lowest_right(W, S, upR, i, mid)
            if (S[bb] - LY[aa]) >= mid * (W[bb] - LX[aa]):  # f_t(i) >= mid
                lo, a, b = mid, aa, bb
            else:
                hi = mid
        out[i] = (S[b] - LY[a]) / (W[b] - LX[a])
        lo0 = out[i]
    return out


def venn_abers_table(scores, y):
    """``(c, p0, p1)``: the distinct calibration scores (increasing, float64) and the ``p0`` and
    ``p1`` of a test score in each of the ``len(c) + 1`` slots between them (the ``venn-abers``
    package's ``calc_p0p1``); a test score ``s`` gets ``p0[searchsorted(c, s, "right")]`` and
    ``p1[searchsorted(c, s, "left")]``."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y).astype(np.int64)
    c, inverse = np.unique(s, return_inverse=True)
    inverse = inverse.reshape(-1)
    W = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=c.size))]).astype(np.int64)
    S = np.concatenate([[0], np.cumsum(np.bincount(inverse, weights=y, minlength=c.size))]).astype(np.int64)
    return c, _isotonic_with_test_point(W, S, 0), _isotonic_with_test_point(W, S, 1)


def _check_scores(scores, name: str) -> np.ndarray:
    s = as_host_array(scores, name)
    if s.ndim == 2 and s.shape[1] == 2:  # the venn-abers package's (n, 2) probabilities: column 1
        s = s[:, 1]
    if s.ndim != 1:
        raise ValueError(f"{name} must be one score per row (shape (n,) or (n, 2)), got shape {s.shape}")
    s = s.astype(np.float64, copy=False)
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name} holds NaN or infinite values")
    return s


class VennAbers:
    """Inductive Venn-Abers predictor for a binary score (see the module docstring).

    Examples
    --------
    >>> va = VennAbers().fit([0.1, 0.3, 0.6, 0.9], [0, 1, 0, 1])
    >>> p0, p1 = va.predict_interval([0.5]).T
    >>> bool(p0[0] <= va.predict_proba([0.5])[0, 1] <= p1[0])
    True
    """

    def fit(self, scores, y) -> "VennAbers":
        """Fit on calibration scores (shape (n,), or (n, 2) probabilities whose column 1 is used) and
        labels in {0, 1} (booleans accepted)."""
        s = _check_scores(scores, "scores")
        y = as_host_array(y, "y", what="labels 0 or 1")
        if y.shape != s.shape:
            raise ValueError(f"y must have one label per score ({s.size}), got shape {y.shape}")
        if s.size == 0:
            raise ValueError("scores has no rows: Venn-Abers needs calibration rows")
        if not np.all((y == 0) | (y == 1)):
            raise ValueError("y must hold binary labels 0 and 1 (or booleans)")
        self.c_, self.p0_, self.p1_ = venn_abers_table(s, y)
        return self

    def predict_interval(self, scores) -> np.ndarray:
        """``(n, 2)``: each test score's ``p0`` and ``p1``."""
        if not hasattr(self, "c_"):
            raise ValueError("VennAbers is not fitted: call fit(scores, y) first")
        s = _check_scores(scores, "scores")
        return np.column_stack([self.p0_[np.searchsorted(self.c_, s, "right")],
                                self.p1_[np.searchsorted(self.c_, s, "left")]])

    def predict_proba(self, scores) -> np.ndarray:
        """``(n, 2)``: ``1 - p`` and the merged ``p = p1 / (1 - p0 + p1)``."""
        p0, p1 = self.predict_interval(scores).T
        p = p1 / (1.0 - p0 + p1)
        return np.column_stack([1.0 - p, p])


def _pair_scores(p_i: np.ndarray, p_j: np.ndarray) -> np.ndarray:
    """One-vs-one's binary score ``p_j / (p_i + p_j)`` of each row; ``1/2`` where both are 0.

    The share is undefined at ``0 / 0`` (the ``venn-abers`` package divides anyway, under
    ``np.seterr(invalid="ignore")``, and its isotonic fit then runs on NaN).  A row that gives both
    classes probability 0 says nothing about one against the other: it gets the score of every row
    that gives them equal probabilities, ``1/2`` (the share's value along ``p_i = p_j``)."""
    total = p_i + p_j
    out = np.full(total.shape, 0.5)
    np.divide(p_j, total, out=out, where=total > 0)
    return out


#: Multi-class strategies of :class:`VennAbersMultiClass`.
STRATEGIES = ("one_vs_rest", "one_vs_one")


class VennAbersMultiClass:
    """Venn-Abers calibration of ``K``-class probabilities (see the module docstring).

    Parameters
    ----------
    strategy : {"one_vs_rest", "one_vs_one"}, default "one_vs_rest"
        ``one_vs_rest``: ``K`` binary predictors, class ``c`` (score ``P(c|x)``) against the rest,
        each row's merged probabilities divided by their sum (the ``venn-abers`` package's
        ``predict_proba_prefitted_va(va_tpe="one_vs_rest")``).  ``one_vs_one``: one binary
        predictor per pair ``i < j`` of classes, fitted on the calibration rows of ``i`` and ``j``
        with score ``P(j|x) / (P(i|x) + P(j|x))``; class ``i`` gets ``1 / (sum over its pairs of
        1 / p_i - (K - 2))``, then the row is divided by its sum (Manokhin's pairwise coupling, the
        package's default ``"one_vs_one"`` and its ``VennAbersMultiClass``): ``K (K - 1) / 2``
        fits, for a few classes.

    Attributes
    ----------
    calibrators_ : list of VennAbers
        One binary predictor per class (one-vs-rest: score ``P(c|x)``, label ``y == c``) or per
        pair ``(i, j)``, ``i < j``, in the order of :attr:`pairs_` (one-vs-one: label ``y == j``).
    pairs_ : list of (int, int)
        One-vs-one only: the pairs of classes.
    n_classes_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> P = rng.dirichlet(np.ones(3), 200); y = rng.integers(0, 3, 200)
    >>> Q = VennAbersMultiClass().fit(P, y).predict_proba(P[:5])
    >>> Q.shape, bool(np.allclose(Q.sum(axis=1), 1))
    ((5, 3), True)
    """

    def __init__(self, strategy: str = "one_vs_rest") -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy = strategy

    def fit(self, P, y) -> "VennAbersMultiClass":
        from .metrics import check_labels

        P = as_host_array(P, "P")
        if P.ndim != 2 or P.shape[1] < 2:
            raise ValueError(f"P must have shape (n, K) with K >= 2 classes, got {P.shape}")
        if P.shape[0] == 0:
            raise ValueError("P has no rows: Venn-Abers needs calibration rows")
        y = check_labels(y, P.shape, "y")
        P = self._checked(P.astype(np.float64, copy=False))
        K = self.n_classes_ = P.shape[1]
        if self.strategy == "one_vs_rest":
            self.calibrators_ = [VennAbers().fit(P[:, c], y == c) for c in range(K)]
            return self
        self.pairs_, self.calibrators_ = [], []
        rows = [np.flatnonzero(y == c) for c in range(K)]
        for i in range(K - 1):
            for j in range(i + 1, K):
                r = np.sort(np.concatenate([rows[i], rows[j]]))
                if r.size == 0:
                    raise ValueError(f"classes {i} and {j} have no calibration rows: one_vs_one needs rows of every"
                                     " pair (use strategy='one_vs_rest')")
                self.pairs_.append((i, j))
                self.calibrators_.append(VennAbers().fit(_pair_scores(P[r, i], P[r, j]), y[r] == j))
        return self

    def _columns(self, P):
        if not hasattr(self, "calibrators_"):
            raise ValueError("VennAbersMultiClass is not fitted: call fit(P, y) first")
        P = as_host_array(P, "P")
        if P.ndim != 2 or P.shape[1] != self.n_classes_:
            raise ValueError(f"P must have shape (n, {self.n_classes_}), got {P.shape}")
        return self._checked(P.astype(np.float64, copy=False))

    def _checked(self, P: np.ndarray) -> np.ndarray:
        """``P`` if finite (and, one-vs-one, non-negative: its pairwise score is a share of two
        probabilities); else a ValueError naming the first bad row and class."""
        bad = ~np.isfinite(P)
        what = "NaN or infinite values"
        if not bad.any() and self.strategy == "one_vs_one":
            bad, what = P < 0, "negative values (one_vs_one's pairwise score P_j / (P_i + P_j) needs probabilities)"
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise ValueError(f"P holds {what}: {float(P[r, c])!r} at row {r}, class {c}")
        return P

    def predict_interval(self, P) -> tuple[np.ndarray, np.ndarray]:
        """``(p0, p1)``, each ``(n, K)`` (one-vs-rest) or ``(n, number of pairs)`` (one-vs-one):
        every binary predictor's multiprobability (not normalised)."""
        P = self._columns(P)
        m = len(self.calibrators_)
        p0, p1 = np.empty((P.shape[0], m)), np.empty((P.shape[0], m))
        for k, va in enumerate(self.calibrators_):
            p0[:, k], p1[:, k] = va.predict_interval(self._score(P, k)).T
        return p0, p1

    def _score(self, P, k):
        if self.strategy == "one_vs_rest":
            return P[:, k]
        i, j = self.pairs_[k]
        return _pair_scores(P[:, i], P[:, j])

    def predict_proba(self, P, *, block_rows: int = 4096) -> np.ndarray:
        """``(n, K)`` calibrated probabilities, each row summing to 1 (``block_rows`` rows at a time:
        the extra memory is a few blocks)."""
        P = self._columns(P)
        out = np.empty(P.shape)
        K = self.n_classes_
        for lo in range(0, P.shape[0], block_rows):
            p0, p1 = self.predict_interval(P[lo: lo + block_rows])
            p = p1 / (1.0 - p0 + p1)  # P(second class of the pair), or of the class against the rest
            if self.strategy == "one_vs_one":
                q = np.empty((p.shape[0], K))
                for c in range(K):  # the package's order: pairs (c, j) first, then (i, c)
                    first = [k for k, (i, _) in enumerate(self.pairs_) if i == c]
                    second = [k for k, (_, j) in enumerate(self.pairs_) if j == c]
                    inv = np.hstack([1 / (1 - p[:, first]), 1 / p[:, second]])
                    q[:, c] = 1 / (np.sum(inv, axis=1) - (K - 2))
                p = q
            out[lo: lo + block_rows] = p / p.sum(axis=1, keepdims=True)
        return out
