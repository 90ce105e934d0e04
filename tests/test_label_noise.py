"""Conformal sets that cover the clean label given noisy calibration labels (issue 55, item 5):
coverage of the clean test labels within 1 point of 1 - eps at 10-30 % uniform noise and under a
class-flip matrix, on real outputs, with sets no larger than the naive corrections'; the threshold
against its definition; the refusals."""

import math
from fractions import Fraction

import numpy as np
import pytest

from digits_outputs import digits_outputs
from svbop.conformal import ConformalSetPredictor
from svbop.conformal.label_noise import noise_inverse, noisy_label_threshold

EPS = 0.1
K = 10


def _noisy(rng, y, M):
    """Each label replaced by a draw from its row of the transition matrix ``M``."""
    cum = M.cumsum(axis=1)[y]
    return np.minimum((cum < rng.random((y.size, 1))).sum(axis=1), M.shape[0] - 1)


def _uniform(r):
    return (1 - r) * np.eye(K) + r / K


def _runs(noise, M, score, seeds=50, n_cal=750):
    """Mean clean coverage and size over seeded splits: noise-aware, naive (noise ignored), the
    worst-case correction (noise ignored at level 1 - eps (1 - r))."""
    P, y = digits_outputs()
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        order = rng.permutation(y.size)
        cal, test = order[:n_cal], order[n_cal:]
        y_noisy = _noisy(rng, y[cal], M)
        r = noise if isinstance(noise, float) else 0.3
        row = []
        for model in (ConformalSetPredictor(EPS, score=score, random_state=seed, label_noise=noise),
                      ConformalSetPredictor(EPS, score=score, random_state=seed),
                      ConformalSetPredictor(EPS * (1 - r), score=score, random_state=seed)):
            mask = model.fit(P[cal], y_noisy).predict_mask(P[test])
            row += [mask[np.arange(test.size), y[test]].mean(), mask.sum(axis=1).mean()]
        out.append(row)
    return np.mean(out, axis=0)


@pytest.mark.parametrize("score", ["lac", "aps"])
@pytest.mark.parametrize("rate", [0.1, 0.2, 0.3])
def test_clean_coverage_under_uniform_noise_on_real_outputs(rate, score):
    """50 seeded splits of the digits' outputs (750 calibration rows with ``rate`` uniform noise, 747
    test rows with their clean labels): mean clean coverage within 1 point of 0.9, mean size at most
    the naive sets' (noise ignored: coverage 0.98-1.0, sizes 2.1-6.7 against 1.15-1.3 here, measured
    2026-11-29) and the worst-case correction's."""
    cov, size, naive_cov, naive_size, worst_cov, worst_size = _runs(rate, _uniform(rate), score)
    assert abs(cov - (1 - EPS)) <= 0.01, cov
    assert size <= naive_size and size <= worst_size, (size, naive_size, worst_size)
    assert naive_cov > 1 - EPS + 0.05  # the noise ignored over-covers the clean labels


def test_clean_coverage_under_a_class_flip_matrix():
    """A non-uniform transition matrix: each label moves to the next class with probability 0.25
    (and to the class two on with 0.05): clean coverage within 1 point of 0.9."""
    M = 0.7 * np.eye(K) + 0.25 * np.roll(np.eye(K), 1, axis=1) + 0.05 * np.roll(np.eye(K), 2, axis=1)
    cov, size, _, naive_size, _, _ = _runs(M, M, "lac")
    assert abs(cov - (1 - EPS)) <= 0.01, cov
    assert size <= naive_size


def test_no_noise_is_split_conformal_and_a_rate_equals_its_matrix():
    P, y = digits_outputs()
    for score in ("lac", "aps"):
        plain = ConformalSetPredictor(EPS, score=score, random_state=2).fit(P[:600], y[:600])
        zero = ConformalSetPredictor(EPS, score=score, random_state=2, label_noise=0.0).fit(P[:600], y[:600])
        assert zero.quantile_ == plain.quantile_
        rate = ConformalSetPredictor(EPS, score=score, random_state=2, label_noise=0.2).fit(P[:600], y[:600])
        matrix = ConformalSetPredictor(EPS, score=score, random_state=2, label_noise=_uniform(0.2)).fit(P[:600],
                                                                                                       y[:600])
        assert rate.quantile_ == pytest.approx(matrix.quantile_, abs=1e-12)


def test_threshold_against_the_estimated_clean_coverage_by_its_definition():
    """The smallest ``t`` among the scores with ``F_hat(t) >= ceil((n+1)(1-eps))/n``, ``F_hat`` summed
    term by term."""
    rng = np.random.default_rng(4)
    n, k = 40, 4
    S = np.round(rng.random((n, k)), 2)  # ties on purpose
    y = rng.integers(0, k, n)
    M = 0.8 * np.eye(k) + 0.2 / k
    V = noise_inverse(M, k)
    eps = Fraction(1, 5)
    target = math.ceil((n + 1) * (1 - eps)) / n
    expect = math.inf
    for t in np.unique(S):
        F = sum(V[y[i], c] * (S[i, c] <= t) for i in range(n) for c in range(k)) / n
        if F >= target - 1e-12:
            expect = t
            break
    assert noisy_label_threshold(S, y, V, eps) == expect


@pytest.mark.parametrize("noise, message", [
    (np.full((K, K), 0.2), "not a stochastic matrix: row 0 sums to 2.0"),
    (_uniform(0.2) + 0.1 * (np.eye(K) - np.roll(np.eye(K), 1, axis=1)), "not a stochastic matrix: it holds negative"),
    (np.ones((K, K - 1)) / (K - 1), "square"),
    (1.0, r"label_noise = 1.0: a uniform noise rate must be in \[0, 1\)"),
    (-0.1, "label_noise = -0.1"),
    (True, "label_noise must be a noise rate"),
    ("uniform", "label_noise must be a noise rate or a"),
])
def test_bad_noise_models_are_refused_in_one_line(noise, message):
    with pytest.raises(ValueError, match=message) as e:
        ConformalSetPredictor(EPS, label_noise=noise)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("make, fit, message", [
    (dict(label_noise=_uniform(0.2)[:4, :4] / _uniform(0.2)[:4, :4].sum(axis=1, keepdims=True)), {},
     "label_noise is 4 x 4 but P_cal has 10 classes"),
    (dict(label_noise=np.full((K, K), 1 / K)), {}, "singular"),
    (dict(label_noise=0.2, class_conditional=True), {}, "marginal calibration of the ranked scores"),
    (dict(label_noise=0.2, score="fbeta"), {}, "marginal calibration of the ranked scores"),
    (dict(label_noise=0.2), dict(groups=np.arange(1497) % 2), "label_noise cannot be combined with groups"),
    (dict(label_noise=0.2), dict(weights=np.ones(1497)), "label_noise cannot be combined with weights"),
    (dict(label_noise=0.2), dict(class_weights=np.ones(K)), "cannot be combined with label_noise"),
])
def test_bad_combinations_are_refused_in_one_line(make, fit, message):
    P, y = digits_outputs()
    with pytest.raises(ValueError, match=message) as e:
        ConformalSetPredictor(EPS, **make).fit(P, y, **fit)
    assert "\n" not in str(e.value)
