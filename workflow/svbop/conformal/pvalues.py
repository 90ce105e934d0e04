r"""Conformal p-values (Vovk, Gammerman and Shafer, *Algorithmic Learning in a Random World*):
:func:`conformal_p_values`, :func:`online_p_values`, and the p-values of a fitted
:class:`~svbop.conformal.ConformalSetPredictor` (its ``predict_p``).

For calibration scores ``s_1..s_n`` (large: non-conforming) and a candidate score ``s``,

* the **unsmoothed** p-value is ``p = (1 + #{i : s_i >= s}) / (n + 1)``;
* the **smoothed** p-value is ``p = (#{i : s_i > s} + tau (1 + #{i : s_i = s})) / (n + 1)`` with
  ``tau`` uniform on [0, 1), one per test row.

Under exchangeability of the calibration pairs and the test pair, the unsmoothed p-value of the
true label is super-uniform, ``P(p <= e) <= e``, and the smoothed one is exactly uniform (the
martingales of :mod:`svbop.conformal.martingales` need the latter).

*The set at ``epsilon``.*  The split-conformal set keeps ``c`` when ``s(x, c) <= q`` with ``q`` the
``k``-th smallest ``s_i``, ``k = ceil((n+1)(1-epsilon))``.  ``s <= s_(k)`` holds iff at least
``n - k + 1`` calibration scores are ``>= s``, i.e. ``(n+1) p >= n - k + 2``; as ``(n+1) p`` is an
integer and ``n + 1 - k = floor((n+1) epsilon)``, that is ``(n+1) p > (n+1) epsilon``:
**``{c : p_c > epsilon}`` is the set**, including ``k > n`` (``q = inf``, every class:
``p >= 1/(n+1) > epsilon`` then).  The sets compare with a widened threshold ``q + tol max(1,
|q|)`` (:func:`svbop.conformal._common._score_tolerance`); the p-values count ``s_i`` as ``>= s``
when ``s_i + tol max(1, |s_i|) >= s``, the same widening applied to every calibration score, so the
equivalence stays exact (the widening is increasing in ``s_i``).  ``empty="top1"`` turns an empty
set into the top class: that set is ``{c : p_c > epsilon}``, or the top-ranked class when no
p-value exceeds ``epsilon`` (the p-values themselves do not change).  The unsmoothed p-value
``m/(n+1)`` is returned as the smallest float whose decimal is at least ``m/(n+1)``
(:func:`_ratio_floats`), so that the float comparison ``p > epsilon`` is the predictor's exact one
(which reads ``epsilon`` as its shortest decimal): at most one ulp above the nearest float.

Smoothed p-values give the *smoothed* conformal predictor ``{c : p_c > epsilon}``, whose coverage
is exactly ``1 - epsilon``; it is contained in the unsmoothed set (``p_smoothed <= p``).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .._prefix import DEFAULT_CHUNK_BYTES, row_stats
from .._blocks import row_blocks
from ._common import _normalised_chunks, _with_tolerance

__all__ = ["conformal_p_values", "online_p_values"]


def _uniforms(random_state, n: int) -> np.ndarray:
    if isinstance(random_state, (np.random.Generator, np.random.RandomState)):
        return random_state.random(n) if isinstance(random_state, np.random.Generator) \
            else random_state.random_sample(n)
    if random_state is not None and (isinstance(random_state, (bool, np.bool_))
                                     or not isinstance(random_state, (int, np.integer)) or random_state < 0):
        raise ValueError(f"random_state must be None, an integer >= 0 or a numpy Generator/RandomState, got"
                         f" {random_state!r}")
    return np.random.default_rng(random_state).random(n)


def _scores_1d(scores, name: str) -> np.ndarray:
    s = np.asarray(scores)
    if s.ndim != 1 or not (np.issubdtype(s.dtype, np.floating) or np.issubdtype(s.dtype, np.integer)) \
            or s.dtype == np.bool_:
        raise ValueError(f"{name} must be a 1-d array of numbers, got {s.dtype} of shape {s.shape}")
    s = s.astype(np.float64)
    if np.isnan(s).any():
        raise ValueError(f"{name} holds NaN at index {int(np.flatnonzero(np.isnan(s))[0])}")
    return s


def _p_values(sorted_scores: np.ndarray, S: np.ndarray, tau: np.ndarray | None, K_tol: int | None) -> np.ndarray:
    """The p-values of the scores ``S`` (any shape, rows first) against the sorted calibration
    scores; ``tau`` (one per row of ``S``) smooths; ``K_tol``: compare with the sets' widened
    threshold for ``K`` classes (``None``: exact comparisons)."""
    n = sorted_scores.size
    widened = sorted_scores if K_tol is None else _with_tolerance(sorted_scores, K_tol)
    ge = n - np.searchsorted(widened, S, side="left")  # #{i : s_i (widened) >= s}
    if tau is None:
        return _ratio_floats(ge + 1, n + 1)
    gt = n - np.searchsorted(sorted_scores, S, side="right")  # #{i : s_i > s}
    t = tau.reshape((-1,) + (1,) * (S.ndim - 1))
    return (gt + t * (ge - gt + 1.0)) / (n + 1.0)


def _ratio_floats(m: np.ndarray, d: int) -> np.ndarray:
    """``m / d`` as the float ``f`` for which ``f > e`` says ``m/d > epsilon`` for every float ``e``,
    ``epsilon`` being ``e`` as the predictors read it (``Fraction(str(e))``, the shortest decimal
    that gives ``e``): the smallest float whose decimal is ``>= m/d``.  The nearest float to
    ``m/d`` can miss by one ulp (``6/18`` rounds to the float ``1/3``, whose decimal
    ``0.3333333333333333`` is below ``1/3``: ``p > 1/3`` would be False where the set, at
    ``epsilon = 1/3``, holds the class); the result is then the next float up."""
    values, inverse = np.unique(m, return_inverse=True)
    out = np.empty(values.size)
    for j, v in enumerate(values.tolist()):
        r = Fraction(v, d)
        f = v / d
        while Fraction(repr(f)) < r:
            f = math.nextafter(f, math.inf)
        while True:
            g = math.nextafter(f, -math.inf)
            if Fraction(repr(g)) < r:
                break
            f = g
        out[j] = f
    return out[inverse.reshape(m.shape)]


def conformal_p_values(cal_scores, test_scores, *, smoothed: bool = False, random_state=None) -> np.ndarray:
    """Conformal p-values of ``test_scores`` (m,) or (m, K) against ``cal_scores`` (n,).

    Parameters
    ----------
    cal_scores : array-like of shape (n,)
        Non-conformity scores of the calibration pairs (large: non-conforming).
    test_scores : array-like of shape (m,) or (m, K)
        Scores of the candidates (one per class of each row, or one per row).
    smoothed : bool, default False
        Smoothed p-values (one ``tau`` per row, drawn from ``random_state``).
    random_state : int, numpy Generator or RandomState, optional

    Returns
    -------
    ndarray of the shape of ``test_scores``: ``(1 + #{s_i >= s}) / (n + 1)``, or the smoothed value.
    """
    if not isinstance(smoothed, (bool, np.bool_)):
        raise ValueError(f"smoothed must be True or False, got {smoothed!r}")
    cal = _scores_1d(cal_scores, "cal_scores")
    if cal.size == 0:
        raise ValueError("cal_scores is empty: a p-value needs at least one calibration score")
    S = np.asarray(test_scores)
    if S.ndim not in (1, 2) or not (np.issubdtype(S.dtype, np.floating) or np.issubdtype(S.dtype, np.integer)):
        raise ValueError(f"test_scores must be a 1-d or 2-d array of numbers, got {S.dtype} of shape {S.shape}")
    S = S.astype(np.float64)
    if np.isnan(S).any():
        raise ValueError("test_scores holds NaN")
    tau = _uniforms(random_state, S.shape[0]) if smoothed else None
    return _p_values(np.sort(cal), S, tau, None)


def online_p_values(scores, *, n_initial: int = 0, random_state=None) -> np.ndarray:
    """Smoothed online conformal p-values of a stream of scores (Vovk et al. 2003).

    Row ``t`` (0-based) is compared with every row before it and itself:
    ``p_t = (#{i < t : s_i > s_t} + tau_t (1 + #{i < t : s_i = s_t})) / (t + 1)``.
    If the whole sequence is exchangeable, ``p_0, p_1, ...`` are independent and uniform on
    [0, 1] (Vovk, Nouretdinov and Gammerman, *Testing exchangeability on-line*, ICML 2003,
    Theorem 1): the input of a conformal test martingale.  The first ``n_initial`` rows (a
    calibration set taken as the start of the stream) are compared with but get no p-value.

    Parameters
    ----------
    scores : array-like of shape (n,)
        The non-conformity score of each row's label, in time order.
    n_initial : int, default 0
    random_state : int, numpy Generator or RandomState, optional
        The ``tau`` of each row.

    Returns
    -------
    ndarray of shape (n - n_initial,)
    """
    s = _scores_1d(scores, "scores")
    if isinstance(n_initial, (bool, np.bool_)) or not isinstance(n_initial, (int, np.integer)) \
            or not 0 <= n_initial <= s.size:
        raise ValueError(f"n_initial must be an integer in [0, {s.size}] (rows of scores), got {n_initial!r}")
    tau = _uniforms(random_state, s.size)
    # dense ranks (equal scores share one), then counts of earlier rows by a Fenwick tree
    uniq, rank = np.unique(s, return_inverse=True)
    gt, eq = _online_counts(rank.reshape(-1).astype(np.int64), uniq.size)
    t = np.arange(s.size, dtype=np.float64)
    p = (gt + tau * (eq + 1.0)) / (t + 1.0)
    return p[int(n_initial):]


def _online_counts(rank: np.ndarray, m: int):
    from ._online import online_counts

    return online_counts(rank, m)


# --- the p-values of a fitted ConformalSetPredictor -------------------------------------------------


def _test_scores(model, P: np.ndarray, U: np.ndarray | None, chunk_bytes: int) -> np.ndarray:
    """``S[i, c] = s(x_i, c)`` for every class, with the arithmetic of the model's sets (marginal
    and Mondrian LAC: ``1 - P/total`` of :func:`svbop.conformal.conformal_sets`; the other ranked
    scores along each row's ranking, as :func:`svbop.conformal.scores._ranked_scores` computes them)."""
    from .scores import _ranked_scores

    n, K = P.shape
    S = np.empty((n, K))
    if model.score == "lac" and not model.class_conditional:
        rows = max(1, int(chunk_bytes) // max(1, K * 8))
        for row0, _, X in row_blocks(P, rows):
            X = np.ascontiguousarray(X)
            _, total = row_stats(X, row0, "P")
            S[row0 : row0 + X.shape[0]] = 1.0 - X.astype(np.float64, copy=False) / total[:, None]
        return S
    k_reg = min(model.k_reg, K)
    for row0, Xn in _normalised_chunks(P, "P", chunk_bytes):
        r = Xn.shape[0]
        order = np.argsort(-Xn, axis=1, kind="stable")  # decreasing, ties by class index
        V = np.take_along_axis(Xn, order, axis=1)
        u = None if U is None else U[row0 : row0 + r]
        R = _ranked_scores(V, model.score, k_reg, model.lam, u)
        out = np.empty((r, K))
        np.put_along_axis(out, order, R, axis=1)
        S[row0 : row0 + r] = out
    return S


class _Cells:
    """The calibration scores of a fitted predictor, sorted within each cell (the whole set, each
    class, or each group): what its p-values are counted against."""

    def __init__(self, scores: np.ndarray, cell: np.ndarray | None, n_cells: int) -> None:
        if cell is None:
            self.sorted = np.sort(scores)
            self.starts = np.array([0, scores.size])
        else:
            order = np.lexsort((scores, cell))
            self.sorted = scores[order]
            counts = np.bincount(cell, minlength=n_cells)
            self.starts = np.concatenate([[0], np.cumsum(counts)])
        self.sorted.setflags(write=False)

    def cell(self, j: int) -> np.ndarray:
        return self.sorted[self.starts[j] : self.starts[j + 1]]


def calibration_cells(model, scores: np.ndarray, y: np.ndarray, groups_inverse: np.ndarray | None) -> "_Cells":
    """What ``fit`` keeps for ``predict_p``: the scores sorted by class (``class_conditional=True``),
    by group (Mondrian, ``groups_inverse`` the index of each row's group), or all together."""
    if groups_inverse is not None:
        return _Cells(scores, groups_inverse, int(groups_inverse.max()) + 1 if groups_inverse.size else 0)
    if model.class_conditional is True:
        return _Cells(scores, y, model.n_classes_)
    return _Cells(scores, None, 1)


def predictor_p_values(model, P: np.ndarray, groups, smoothed: bool, row_seeds, chunk_bytes: int) -> np.ndarray:
    """:meth:`ConformalSetPredictor.predict_p` (see there)."""
    from .scores import RANKED_SCORES
    from ._common import row_uniforms

    if not isinstance(smoothed, (bool, np.bool_)):
        raise ValueError(f"smoothed must be True or False, got {smoothed!r}")
    if model.score not in RANKED_SCORES:
        raise ValueError(f"predict_p is for the ranked scores ({', '.join(RANKED_SCORES)}); score={model.score!r}"
                         " sets are not thresholds on one score")
    if model.class_conditional in ("clustered", "rc3p"):
        raise ValueError(f"predict_p is for marginal, class_conditional=True and group (Mondrian) calibration, not"
                         f" class_conditional={model.class_conditional!r}")
    from .lazy import is_lazy

    if is_lazy(P):
        raise ValueError(f"predict_p needs a dense P (an n x K matrix of every class's score), not"
                         f" {type(P).__name__}")
    P = model._check_predict(P)
    cells = getattr(model, "_p_cells", None)
    if cells is None:
        raise ValueError("predict_p needs the calibration scores, which this fit did not keep (weights, class"
                         " weights, label noise, or a tree's or top-k outputs in fit); refit on a dense P_cal without"
                         " them")
    where = model._row_calibrations(P, groups)
    n, K = P.shape
    U = model._test_uniforms(n, row_seeds)
    tau = None
    if smoothed:
        if row_seeds is not None:  # a stream of its own: the set's uniform and tau are independent
            tau = row_uniforms(model.seed_ ^ 0x5DEECE66D, row_seeds, n)
        else:
            if getattr(model, "_tau_rng", None) is None:
                model._tau_rng = np.random.default_rng(np.random.SeedSequence(model.seed_, spawn_key=(3,)))
            tau = model._tau_rng.random(n)
    S = _test_scores(model, P, U, chunk_bytes)
    if getattr(model, "calibrate_top1", False):  # the top class is in every set: p = 1 (its score -inf)
        S[np.arange(n), np.argmin(S, axis=1)] = -np.inf
    K_tol = None if (model.score == "lac" and not model.class_conditional) else K
    if where is None and model.class_conditional is True:
        out = np.empty((n, K))
        for c in range(K):
            out[:, c] = _p_values(cells.cell(c), S[:, c], tau, K_tol)
        return out
    if where is None:
        return _p_values(cells.cell(0), S, tau, K_tol)
    key = model._row_keys(where)  # a group's index; -1 the marginal calibration, -2 every class
    out = np.empty((n, K))
    marginal = None
    for k in np.unique(key).tolist():
        rows = np.flatnonzero(key == k)
        t = None if tau is None else tau[rows]
        if k == -2:
            out[rows] = 1.0
            continue
        if k == -1:
            if marginal is None:
                marginal = np.sort(cells.sorted)
            ref = marginal
        else:
            ref = cells.cell(k)
        out[rows] = _p_values(ref, S[rows], t, K_tol)
    return out
