"""Online conformal sets for a stream, :class:`AdaptiveConformalSetPredictor`: adaptive conformal
inference (ACI, Gibbs and Candes 2021), dynamically-tuned ACI (DtACI, Gibbs and Candes, JMLR 2024)
and conformal PID control (Angelopoulos, Candes and Tibshirani, NeurIPS 2023)."""

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

__all__ = ["ACI_STEP", "ADAPTIVE_METHODS", "DTACI_STEPS", "AdaptiveConformalSetPredictor"]

#: The online methods of :class:`AdaptiveConformalSetPredictor`.
ADAPTIVE_METHODS = ("aci", "dtaci", "pid")
#: DtACI's default experts: the step sizes of Gibbs and Candes (2024), Section 4.
DTACI_STEPS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128)

# --- adaptive conformal inference (ACI) for a stream --------------------------------------------

#: The default ``step`` of :class:`AdaptiveConformalSetPredictor` (see its docstring: with it the
#: miscoverage of any window of ``T`` rows is within ``52/T`` of ``epsilon``, whatever the drift).
ACI_STEP = 0.02


class _PrefixSets:
    """Sets that are prefixes of each row's ranking, gathered a block of rows at a time."""

    def __init__(self, K: int) -> None:
        self.K, self.indices, self.sizes = K, [], []

    def add(self, order: np.ndarray, sizes: np.ndarray) -> None:
        """The block's rows: ``order`` their classes ranked, ``sizes`` how many each set keeps."""
        self.indices.append(order[np.arange(self.K) < sizes[:, None]])
        self.sizes.append(sizes)

    def result(self) -> SetPredictions:
        sizes = np.concatenate(self.sizes) if self.sizes else np.empty(0, dtype=np.int64)
        return SetPredictions(np.concatenate(self.indices) if self.indices else np.empty(0, dtype=np.int64),
                              np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), self.K)


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

    **DtACI** (``method="dtaci"``; Gibbs and Candès, "Conformal inference for online prediction
    with arbitrary distribution shifts", JMLR 2024, Algorithm 1).  ACI's step is a guess at how fast
    the stream drifts.  DtACI runs one ACI expert per step ``gamma_i`` of ``steps`` (default
    :data:`DTACI_STEPS`), each moving its own level ``alpha^i`` with *its own* errors, and weighs them
    by exponential reweighting on the pinball loss ``l(beta_t, a) = eps (beta_t - a) - min(0, beta_t
    - a)`` of each level, where ``beta_t`` is the largest level whose set holds ``y_t`` (the label's
    conformal p-value: the set at ``a`` holds it iff ``a < beta_t``): ``w^i <- w^i exp(-eta
    l(beta_t, alpha^i))``, then ``w <- (1 - sigma) w / sum(w) + sigma / k`` (a share ``sigma`` of
    the mass spread back, so that an expert that was wrong long ago can come back within an
    interval of ``interval`` rows).  ``sigma = 1/(2 interval)`` and ``eta = sqrt(3/interval)
    sqrt((log(k interval) + 2) / ((1-eps)^2 eps^3 + eps^2 (1-eps)^3))`` as in the paper.  Row ``t``
    gets the set of one expert, drawn with probability ``p_t^i = w^i / sum(w)`` (``random_state``).

    *Long-run coverage of DtACI* (for any sequence; proof).  Write ``m_t = sum_i p_t^i err_t^i``,
    the probability that row ``t`` misses given the past.  Expert ``i``'s update gives ``err_t^i -
    eps = (alpha_t^i - alpha_{t+1}^i) / gamma_i``, and summing by parts with ``alpha^i - 1/2`` in
    ``[-1/2 - gamma_i, 1/2 + gamma_i]`` (ACI's argument (i)),

    ``|sum_{t<=T} (m_t - eps)| <= sum_i (1/2 + gamma_i)/gamma_i (p_1^i + p_T^i + sum_{t=2}^T
    |p_t^i - p_{t-1}^i|) =: B_T``,

    computed exactly from the weights (``dtaci_bound_``).  The movement of the weights is what
    the step-size tuning costs (``O(eta + sigma)`` per row, the paper's extra term); the realised
    misses differ from the ``m_t`` by a martingale (Azuma: ``sqrt(T log(2/delta)/2)`` with
    probability ``1 - delta``).

    **Conformal PID control** (``method="pid"``; Angelopoulos, Candès and Tibshirani, NeurIPS 2023).
    The quantile tracker (P) plus an integrator (I): with ``E_t = sum_{i<=t} (err_i - eps)``, row
    ``t`` gets ACI's set at the level

    ``alpha_t = eps - lr E_{t-1} - ki tan(E_{t-1} log(t+1) / ((t+1) csat))``,

    the tangent saturating: an argument at or above ``pi/2`` gives every class (``alpha = -inf``),
    at or below ``-pi/2`` the empty set (``alpha = +inf``, even with ``empty="top1"``).  ``eps - lr
    E_{t-1}`` is the tracker ``P_{t+1} = P_t + lr (eps - err_t)`` (ACI's update: with ``ki = 0`` it
    is ACI with step ``lr``, set for set); the integrator adds a push that grows with the
    accumulated error and with time.  The paper steers the threshold on the score's own scale; on
    the level scale, where the sets are ACI's, one ``lr`` suits every score (LAC thresholds live
    near 1, APS ones near 3; a fixed rate on the raw scale made the sets 20-50 % larger than ACI's
    in our drift streams).  (The paper's optional scorecaster, a forecast of the next score, is not
    included.)

    *Long-run coverage of PID* (any sequence; proof).  Let ``h(t) = (pi/2) csat (t+1)/log(t+1)``
    (increasing).  If ``E_{t-1} >= h(t-1)`` the set is every class, ``err_t = 0`` and ``E`` falls;
    otherwise ``E_t < h(t-1) + 1``.  Symmetrically ``E_{t-1} <= -h(t-1)`` gives the empty set and
    ``E`` rises (and ``E_t > -h(t) - eps``).  (``ki = 0`` has no integrator, hence ACI's bound.)  So ``|E_T| <= max_{t<=T} h(t) + 1 = max(h(1), h(T)) +
    1``: ``|(1/T) sum err_t - eps| <= ((pi/2) csat max(2/log 2, (T+1)/log(T+1)) + 1)/T``
    (``pid_bound(T)``: 0.017 at ``T = 10,000`` with the default ``csat``), whatever the scores.

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
    method : {"aci", "dtaci", "pid"}, default "aci"
        ``dtaci`` and ``pid``: the ranked scores (``lac``, ``aps``, ``raps``, ``saps``, ``topk``,
        ``margin``) only.
    steps : sequence of float, optional
        DtACI's experts' steps, each in (0, 1] (default :data:`DTACI_STEPS`).
    interval : int, default 500
        DtACI: the interval length ``I`` its ``sigma`` and ``eta`` are tuned for.
    lr, ki, csat : float, default 0.02, 0.2, 0.1
        PID: the quantile tracker's rate and the integrator's gain (on the level scale), and the
        saturation constant.
    random_state : int or numpy Generator, optional
        DtACI: the draws of the expert of each row.

    Attributes
    ----------
    scores_ : ndarray
        The calibration scores, sorted (credal: the negated deltas, so that small is conforming).
    alpha_ : float
        The current working level (``alpha_1 = epsilon`` after ``fit``).
    alphas_ : ndarray
        The levels used for the rows of the last :meth:`update`, in order (PID: ``-inf``/``inf`` for
        a saturated integrator).
    expert_alphas_, weights_ : ndarray
        DtACI: the experts' current levels and probabilities.
    expected_errors_ : ndarray
        DtACI: ``m_t``, each row's miss probability given the past (last :meth:`update`).
    dtaci_bound_ : float
        DtACI: ``B_T`` over every row since ``fit`` (see above).
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
        method: str = "aci",
        steps=None,
        interval: int = 500,
        lr: float = ACI_STEP,
        ki: float = 0.2,
        csat: float = 0.1,
        random_state=None,
    ) -> None:
        if not isinstance(score, str) or score not in CONFORMAL_SCORES:  # no hierarchical score here (yet)
            raise ValueError(f"score must be one of {', '.join(CONFORMAL_SCORES)}; got {score!r}")
        if not isinstance(method, str) or method not in ADAPTIVE_METHODS:
            raise ValueError(f"method must be one of {', '.join(ADAPTIVE_METHODS)}; got {method!r}")
        if method != "aci" and score in ("fbeta", "credal"):
            raise ValueError(f"method={method!r} is for the ranked scores (lac, aps, raps, saps, topk, margin), not"
                             f" score={score!r}")
        if steps is None:
            steps = DTACI_STEPS
        try:
            steps_arr = np.asarray(steps, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"steps must be numbers in (0, 1], got {steps!r}") from None
        if steps_arr.size == 0 or not np.all((steps_arr > 0) & (steps_arr <= 1)):
            raise ValueError(f"steps must be one or more numbers in (0, 1], got {steps!r}")
        if isinstance(interval, (bool, np.bool_)) or not isinstance(interval, (int, np.integer)) or interval < 1:
            raise ValueError(f"interval must be an integer >= 1, got {interval!r}")
        for name, value in (("lr", lr), ("ki", ki), ("csat", csat)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not (value >= 0 and math.isfinite(value)) or (name == "csat" and value == 0):
                raise ValueError(f"{name} must be a finite number {'> 0' if name == 'csat' else '>= 0'}, got {value!r}")
        self.method = method
        self.steps = tuple(steps_arr.tolist())
        self.interval = int(interval)
        self.lr, self.ki, self.csat = float(lr), float(ki), float(csat)
        self.random_state = random_state
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
        if self.method == "dtaci":
            k = len(self.steps)
            self.expert_alphas_ = np.full(k, float(self.epsilon))
            self.weights_ = np.full(k, 1.0 / k)
            self.expected_errors_ = np.empty(0)
            self._p_first = self.weights_.copy()  # p_1, and the running sum of |p_t - p_{t-1}|
            self._p_moves = np.zeros(k)
            self._rng = np.random.default_rng(self.random_state)
        elif self.method == "pid":
            self._integral = 0.0  # E, the integrated error (the tracker is epsilon - lr E)
        return self

    @property
    def dtaci_bound_(self) -> float:
        """``B_T`` (class docstring) over the rows seen since ``fit``."""
        g = np.asarray(self.steps)
        return float(np.sum((0.5 + g) / g * (self._p_first + self.weights_ + self._p_moves)))

    def pid_bound(self, T: int) -> float:
        """PID's bound on ``|(1/T) sum err_t - epsilon|`` after ``T`` rows (class docstring)."""
        h = max(2 / math.log(2), (T + 1) / math.log(T + 1))  # (t+1)/log(t+1): smallest at t = 2, then increasing
        return (math.pi / 2 * self.csat * h + 1.0) / T

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
        if self.method != "aci":
            return self._run_tuned(P, y, chunk_bytes)
        n, K = P.shape
        family = self.score in ("fbeta", "credal")
        alphas = np.empty(n)
        built = _PrefixSets(K)
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
                order, S = self._ranked(X)
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
            built.add(order, sizes)
        sets = built.result()
        if y is not None:
            self.alpha_ = float(alpha)
            self.alphas_ = alphas
            self.n_seen_ += n
            self.n_errors_ += int(errors)
        return sets

    def _ranked(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's classes by decreasing probability (ties by class index) and their scores along that
        ranking, the row divided by its float64 sum as :func:`svbop.conformal._common._normalised_chunks`
        divides it."""
        Xn = X.astype(np.float64)
        Xn /= Xn.sum(axis=1)[:, None]
        order = np.argsort(-Xn, axis=1, kind="stable")
        K = X.shape[1]
        return order, _ranked_scores(np.take_along_axis(Xn, order, axis=1), self.score, min(self.k_reg, K), self.lam)

    # --- DtACI and PID ------------------------------------------------------------------------------

    def _run_tuned(self, P: np.ndarray, y: np.ndarray | None, chunk_bytes: int) -> SetPredictions:
        """The rows of a stream under DtACI or PID (class docstring); ``y=None``: the sets at the
        current state, which does not move."""
        n, K = P.shape
        eps = float(self.epsilon)
        top1 = self.empty == "top1"
        cal = self.scores_
        ncal = cal.size
        wide = _with_tolerance(cal, K) if ncal else cal  # the sets' comparison, widened per calibration score
        dtaci = self.method == "dtaci"
        used = np.empty(n)
        expected = np.empty(n) if dtaci else None
        if dtaci:
            g = np.asarray(self.steps)
            a = self.expert_alphas_.copy()
            w = self.weights_.copy()
            moves = self._p_moves.copy()
            k = g.size
            sigma = 1.0 / (2 * self.interval)
            eta = math.sqrt(3.0 / self.interval) * math.sqrt(
                (math.log(k * self.interval) + 2) / ((1 - eps) ** 2 * eps**3 + eps**2 * (1 - eps) ** 3))
        else:
            integral = self._integral
            t_seen = self.n_seen_
        errors = 0
        built = _PrefixSets(K)
        rows = max(1, int(chunk_bytes) // max(1, K * 8))

        def level_threshold(alpha):
            if alpha >= 1:
                return -math.inf
            kk = math.ceil((ncal + 1) * (1 - alpha))
            return math.inf if kk > ncal else float(wide[kk - 1])

        def covered(q, s_y, pos, s_top):
            """Whether the label (score ``s_y``, rank ``pos``) is in the set of threshold ``q``
            (already widened); ``-inf``: the empty set, whatever ``empty`` says."""
            if q == -math.inf:
                return False
            if s_y <= q:
                return True
            return top1 and pos == 0 and s_top > q

        for row0, _, X in row_blocks(P, rows):
            X = np.ascontiguousarray(X)
            r = X.shape[0]
            row_stats(X, row0, "P")
            order, S = self._ranked(X)
            pos = None if y is None else np.argmax(order == y[row0 : row0 + r, None], axis=1)
            sizes = np.empty(r, dtype=np.int64)
            for i in range(r):
                if dtaci:
                    prob = w / w.sum()
                    j = int(self._rng.choice(k, p=prob))
                    alpha = float(a[j])
                    used[row0 + i] = alpha
                    q = level_threshold(alpha)
                else:
                    t1 = t_seen + 1  # this row's 1-based index since fit
                    x = integral * math.log(t1 + 1) / ((t1 + 1) * self.csat)
                    if self.ki == 0:  # no integrator (the paper's r_t = 0): ACI with step lr
                        alpha = eps - self.lr * integral
                    elif x >= math.pi / 2:  # saturated: every class
                        alpha = -math.inf
                    elif x <= -math.pi / 2:  # the empty set
                        alpha = math.inf
                    else:
                        alpha = eps - self.lr * integral - self.ki * math.tan(x)
                    used[row0 + i] = alpha
                    q = math.inf if alpha == -math.inf else level_threshold(alpha)
                if q == -math.inf:
                    size = 0
                elif q == math.inf:
                    size = K
                else:
                    size = int(np.count_nonzero(S[i] <= q))
                    if size == 0 and top1:
                        size = 1
                sizes[i] = size
                if pos is None:
                    continue
                p_i = int(pos[i])
                err = p_i >= size
                errors += err
                s_y, s_top = float(S[i, p_i]), float(S[i, 0])
                if dtaci:
                    errs = np.array([not covered(level_threshold(float(v)), s_y, p_i, s_top) for v in a])
                    expected[row0 + i] = float(prob @ errs)
                    ge = ncal - int(np.searchsorted(wide, s_y, side="left"))
                    # the largest level whose set holds y (a < beta); "top1" keeps the top class below 1
                    beta = 1.0 if (top1 and p_i == 0) else (ge + 1.0) / (ncal + 1.0)
                    diff = beta - a
                    loss = eps * diff - np.minimum(0.0, diff)
                    wb = prob * np.exp(-eta * (loss - loss.min()))  # normalised: no underflow of all
                    wb /= wb.sum()
                    w_new = (1 - sigma) * wb + sigma / k
                    moves += np.abs(w_new / w_new.sum() - prob)
                    w = w_new
                    a = a + g * (eps - errs)
                else:
                    integral += err - eps
                    t_seen += 1
            built.add(order, sizes)
        sets = built.result()
        if y is not None:
            self.alphas_ = used
            self.alpha_ = float(used[-1]) if n else self.alpha_
            self.n_seen_ += n
            self.n_errors_ += int(errors)
            if dtaci:
                self.expert_alphas_, self.weights_ = a, w / w.sum()
                self._p_moves = moves
                self.expected_errors_ = expected
            else:
                self._integral = integral
        return sets
