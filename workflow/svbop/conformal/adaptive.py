"""Adaptive conformal inference (ACI) for a stream (Gibbs and Candes 2021):
:class:`AdaptiveConformalSetPredictor`."""

from __future__ import annotations

import math

import numpy as np

from .._blocks import row_blocks
from .._prefix import DEFAULT_CHUNK_BYTES, as_score_matrix, row_stats
from ..metrics import check_labels
from ..sets import SetPredictions
from ._common import _epsilon, _no_calibration_rows, _with_tolerance
from .family import _FBETA_EVERY_CLASS, _credal_delta_max, _family_scores, _family_sizes, _family_values, \
    _RankedCalibration
from .scores import CONFORMAL_SCORES, _calibration_scores, _ranked_scores
from .split import ConformalSetPredictor

__all__ = ["ACI_STEP", "AdaptiveConformalSetPredictor"]

# --- adaptive conformal inference (ACI) for a stream --------------------------------------------

#: The default ``step`` of :class:`AdaptiveConformalSetPredictor` (see its docstring: with it the
#: miscoverage of any window of ``T`` rows is within ``52/T`` of ``epsilon``, whatever the drift).
ACI_STEP = 0.02


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

    *Scores.*  ``lac``, ``aps``, ``raps``, ``saps``, ``topk``, ``margin``: the calibration scores ``s(x_i, y_i)`` of
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
    score : {"lac", "aps", "raps", "saps", "topk", "margin", "fbeta", "credal"}
        The deterministic scores (APS/RAPS with the whole last class, SAPS with ``u = 1``): ACI's
        long-run bound holds for any score, and its level, not a random draw, settles the
        coverage, so there is no ``randomized`` here.
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
        lam: float | None = None,
        empty: str = "top1",
        gamma: float | None = None,
    ) -> None:
        if not isinstance(score, str) or score not in CONFORMAL_SCORES:  # no hierarchical score here (yet)
            raise ValueError(f"score must be one of {', '.join(CONFORMAL_SCORES)}; got {score!r}")
        # the same checks (and one-line messages) as the split-conformal predictor's
        check = ConformalSetPredictor(epsilon, score=score, k_reg=k_reg, lam=lam, empty=empty, gamma=gamma,
                                      randomized=False)
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, float, np.integer, np.floating)) \
                or not 0 < step <= 1:
            raise ValueError(f"step must be a number in (0, 1], got {step!r}")
        self.epsilon = epsilon
        self.score = score
        self.step = float(step)
        self.k_reg = int(k_reg)
        self.lam = check.lam  # SAPS: its default weight when not given
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
        for row0, _, X in row_blocks(P, rows):  # a mapped matrix: one chunk resident (svbop._blocks)
            X = np.ascontiguousarray(X)
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
