"""Weighted conformal sets under covariate shift (Tibshirani et al. 2019; issue 48, item 3): the
coverage reached under a simulated shift where the unweighted sets fall short, for every ranked
score, marginal and class-conditional; equal weights give the unweighted sets; refusals."""

import math

import numpy as np
import pytest

from svbop.conformal import ConformalSetPredictor

K = 5
SHIFT = 1.5  # calibration covariates N(0, 1), test covariates N(SHIFT, 1)


def _rows(rng, x):
    """The model's probabilities do not depend on x, but the labels grow noisier with x (uniform with
    probability sigmoid(2x - 2)): calibrated near x = 0, overconfident at the test covariates."""
    n = x.size
    P = rng.dirichlet(np.full(K, 0.4), size=n)
    drawn = np.minimum((P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    noisy = rng.random(n) < 1 / (1 + np.exp(-(2 * x - 2)))
    return P, np.where(noisy, rng.integers(0, K, n), drawn)


def _ratio(x):
    """dQ_X/dP_X for N(SHIFT, 1) over N(0, 1)."""
    return np.exp(SHIFT * x - SHIFT**2 / 2)


CONFIGS = [dict(score="lac"), dict(score="aps"), dict(score="raps", k_reg=1, lam=0.05), dict(score="saps"),
           dict(score="topk"), dict(score="margin"), dict(score="aps", randomized=False),
           dict(score="lac", class_conditional=True), dict(score="aps", class_conditional=True)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_weighted_coverage_under_covariate_shift(config):
    """Over 80 seeded splits (1,000 calibration rows from P_X, 1,000 test rows from Q_X) the mean
    coverage of the weighted sets is >= 1 - eps - 3 se, where the unweighted sets of the same splits
    fall short by more than 0.03 (class-conditional: every class's coverage)."""
    rng = np.random.default_rng(48)
    eps, n = 0.1, 1000
    weighted, plain = [], []
    for split in range(80):
        x_cal, x_test = rng.standard_normal(n), rng.standard_normal(n) + SHIFT
        (P, y), (Pt, yt) = _rows(rng, x_cal), _rows(rng, x_test)
        a = ConformalSetPredictor(eps, random_state=split, **config).fit(P, y, weights=_ratio(x_cal))
        b = ConformalSetPredictor(eps, random_state=split, **config).fit(P, y)
        hit_a = a.predict_mask(Pt, weights=_ratio(x_test))[np.arange(n), yt]
        hit_b = b.predict_mask(Pt)[np.arange(n), yt]
        if config.get("class_conditional"):
            weighted.append([hit_a[yt == c].mean() for c in range(K)])
            plain.append([hit_b[yt == c].mean() for c in range(K)])
        else:
            weighted.append([hit_a.mean()])
            plain.append([hit_b.mean()])
    weighted, plain = np.array(weighted), np.array(plain)
    se = weighted.std(axis=0) / math.sqrt(weighted.shape[0])
    assert np.all(weighted.mean(axis=0) >= 1 - eps - 3 * se), weighted.mean(axis=0)
    assert plain.mean() < 1 - eps - 0.03, plain.mean(axis=0)


@pytest.mark.parametrize("score", ["lac", "aps", "raps", "saps", "topk", "margin"])
@pytest.mark.parametrize("class_conditional", [False, True])
def test_equal_weights_give_the_unweighted_sets(score, class_conditional):
    """Equal weights (any constant) reproduce the unweighted threshold and sets exactly, for the
    randomised scores too (the same uniforms)."""
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.full(8, 0.5), size=1999)
    y = np.minimum((P.cumsum(axis=1) < rng.random((1999, 1))).sum(axis=1), 7)
    kw = dict(k_reg=2, lam=0.01) if score == "raps" else {}
    a = ConformalSetPredictor(0.1, score=score, class_conditional=class_conditional, random_state=1, **kw)
    b = ConformalSetPredictor(0.1, score=score, class_conditional=class_conditional, random_state=1, **kw)
    a.fit(P[:999], y[:999])
    b.fit(P[:999], y[:999], weights=np.full(999, 3.0))
    assert a.quantile_ == b.quantile_
    w = np.full(1000, 3.0)
    np.testing.assert_array_equal(a.predict_mask(P[999:]), b.predict_mask(P[999:], weights=w))
    assert a.predict(P[999:]) == b.predict(P[999:], weights=w)


def test_the_quantile_includes_the_test_weight():
    """A test row whose weight outweighs the calibration rows gets every class (its point mass at
    +inf is above 1 - eps by itself); a test weight of 0 gives the calibration quantile at level
    1 - eps of the calibration weights alone."""
    rng = np.random.default_rng(2)
    P = rng.dirichlet(np.ones(K), size=200)
    y = rng.integers(0, K, 200)
    model = ConformalSetPredictor(0.1).fit(P[:100], y[:100], weights=np.ones(100))
    assert model.predict_mask(P[100:110], weights=np.full(10, 1e4)).all()
    s = np.sort(1 - P[np.arange(100), y[:100]])
    q = model._weighted.row_thresholds(np.zeros(1))[0]
    assert q == s[89]  # the 90th smallest: cumulative weight 90 >= 0.9 * 100


def test_refusals():
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(K), size=50)
    y = rng.integers(0, K, 50)
    w = np.ones(50)
    with pytest.raises(ValueError, match="weights has 49 weights but P_cal has 50 rows"):
        ConformalSetPredictor(0.1).fit(P, y, weights=w[:49])
    with pytest.raises(ValueError, match=r"weights\[3\] = -1.0: a weight must be finite and >= 0"):
        ConformalSetPredictor(0.1).fit(P, y, weights=np.where(np.arange(50) == 3, -1.0, 1.0))
    with pytest.raises(ValueError, match="sum to 0"):
        ConformalSetPredictor(0.1).fit(P, y, weights=np.zeros(50))
    with pytest.raises(ValueError, match="weights cannot be combined with groups"):
        ConformalSetPredictor(0.1).fit(P, y, groups=y % 2, weights=w)
    with pytest.raises(ValueError, match="weights .* are for the ranked scores"):
        ConformalSetPredictor(0.1, score="fbeta").fit(P, y, weights=w)
    model = ConformalSetPredictor(0.1).fit(P, y, weights=w)
    with pytest.raises(ValueError, match="weights is required: the predictor was calibrated with weights"):
        model.predict(P)
    with pytest.raises(ValueError, match="weights has 3 weights but P has 50 rows"):
        model.predict_mask(P, weights=w[:3])
    plain = ConformalSetPredictor(0.1).fit(P, y)
    with pytest.raises(ValueError, match="calibrated without them"):
        plain.predict_mask(P, weights=w)
