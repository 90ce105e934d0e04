"""Calibration metrics with their uncertainty (issue 55, item 6): classwise, adaptive and smooth ECE,
AUARC and AUROC of the confidence, against their definitions, MAPIE, netcal and relplot on real
outputs (the digits' of tests/digits_outputs.py), their bootstrap intervals over seeded samples, and
the refusals."""

import math

import numpy as np
import pytest

from digits_outputs import digits_outputs
from svbop.calibration import expected_calibration_error
from svbop.metrics import Estimate, adaptive_ece, auarc, classwise_ece, confidence_auroc, smooth_ece


def _anchor(name):
    return pytest.importorskip(name, reason=f"{name} not installed (pip install {name}): cross-check skipped")


def test_classwise_ece_by_its_definition_and_against_mapie():
    P, y = digits_outputs()
    B = 15
    expect = 0.0
    for c in range(P.shape[1]):
        p, hit = P[:, c], (y == c).astype(float)
        for b in range(B):
            inside = (p > b / B) & (p <= (b + 1) / B) if b else (p <= 1 / B)
            if inside.any():
                expect += inside.sum() / y.size * abs(hit[inside].mean() - p[inside].mean())
    assert classwise_ece(P, y, B) == pytest.approx(expect / P.shape[1], rel=1e-12)
    calibration = _anchor("mapie.metrics.calibration")
    mapie = calibration.expected_calibration_error(y, P, num_bins=B + 1, split_strategy="uniform", classwise=True,
                                                   class_labels=y)
    assert classwise_ece(P, y, B) == pytest.approx(mapie, rel=1e-12)


def test_adaptive_ece_is_the_equal_mass_ece_and_agrees_with_netcal():
    P, y = digits_outputs()
    assert adaptive_ece(P, y, 15) == pytest.approx(expected_calibration_error(P, y, 15), rel=1e-12)
    metrics = _anchor("netcal.metrics")
    for B in (10, 15):
        ours = adaptive_ece(P, y, B)
        assert ours == pytest.approx(metrics.ECE(bins=B, equal_intervals=False).measure(P, y), abs=1e-5)


def _smece_by_definition(conf, resid, sigma, mesh=20001):
    """``int_0^1 |(1/n) sum_i K_sigma(t, f_i) r_i| dt`` with the reflected Gaussian kernel (images at
    2k +- f for |k| <= 3), on a fine mesh."""
    t = np.linspace(0, 1, mesh)
    S = np.zeros(mesh)
    for k in range(-3, 4):
        for img in (2 * k + conf, 2 * k - conf):
            S += (np.exp(-0.5 * ((t[:, None] - img[None, :]) / sigma) ** 2) * resid).sum(axis=1)
    S /= sigma * math.sqrt(2 * math.pi) * conf.size
    a = np.abs(S)
    return (a.sum() - 0.5 * (a[0] + a[-1])) / (mesh - 1)


@pytest.mark.parametrize("sigma", [0.03, 0.1, 0.5])
def test_smooth_ece_by_its_definition(sigma):
    """Residuals of both signs and confidences at the ends (0.1 to exactly 1): within 2e-5 of the
    kernel integral computed directly."""
    rng = np.random.default_rng(7)
    n, K = 400, 3
    P = rng.dirichlet(np.full(K, 0.3), size=n)
    P[:40] = np.eye(K)[rng.integers(0, K, 40)]  # confidence exactly 1
    y = np.where(rng.random(n) < 0.7, P.argmax(axis=1), rng.integers(0, K, n))
    conf = P.max(axis=1)
    resid = (P.argmax(axis=1) == y) - conf
    assert smooth_ece(P, y, sigma=sigma) == pytest.approx(_smece_by_definition(conf, resid, sigma), abs=2e-5)


def test_smooth_ece_bandwidth_is_the_fixed_point_and_agrees_with_relplot_away_from_the_ends():
    P, y = digits_outputs()
    value, sigma = smooth_ece(P, y, return_sigma=True)
    assert abs(value - sigma) < 1e-5
    conf = P.max(axis=1)
    # the digits' outputs: a model over-confident everywhere, so the smECE is the mean gap
    assert value == pytest.approx(abs(((P.argmax(axis=1) == y) - conf).mean()), rel=1e-6)
    relplot = _anchor("relplot")
    rng = np.random.default_rng(3)
    n = 5000
    f = rng.uniform(0.25, 0.75, n)
    hit = (rng.random(n) < f + 0.15 * np.sin(8 * f)).astype(float)
    Q = np.column_stack([f, 1 - f])  # binary outputs whose top class is column 0 (f > 1/2) or 1
    yy = np.where(hit == 1, Q.argmax(axis=1), 1 - Q.argmax(axis=1))
    top = Q.max(axis=1)
    correct = (Q.argmax(axis=1) == yy).astype(float)
    assert smooth_ece(Q, yy) == pytest.approx(relplot.smECE(top, correct), abs=1e-3)
    assert smooth_ece(Q, yy, sigma=0.05) == pytest.approx(relplot.smECE_sigma(top, correct, 0.05), abs=1e-3)


def test_smooth_ece_ends_relplot_reproduces_relplot_on_over_confident_outputs():
    """relplot 1.0.3 halves the kernel of a confidence at 1 and renormalises: on over-confident outputs
    (the digits', CIFAR-100-like ones) its smECE is well above the definition's; ``ends="relplot"``
    reproduces it within 2e-3, bandwidth included."""
    relplot = _anchor("relplot")
    from bench_anchors import real_like

    for P, y in (digits_outputs(), real_like(np.random.default_rng(0), 10000, 100)):
        top, correct = P.max(axis=1), (P.argmax(axis=1) == y).astype(float)
        theirs, width = relplot.smECE(top, correct, return_width=True)
        ours, sigma = smooth_ece(P, y, ends="relplot", return_sigma=True)
        assert ours == pytest.approx(theirs, abs=2e-3) and sigma == pytest.approx(width, abs=2e-3)
        assert smooth_ece(P, y) < theirs - 0.005  # the definition: every row's kernel of mass 1


def test_auarc_and_auroc_against_mapie_and_scikit_learn():
    P, y = digits_outputs()
    conf, correct = P.max(axis=1), (P.argmax(axis=1) == y).astype(int)
    from sklearn.metrics import roc_auc_score

    assert confidence_auroc(P, y) == pytest.approx(roc_auc_score(correct, conf), rel=1e-12)
    uncertainty = _anchor("mapie.metrics.uncertainty")
    assert auarc(P, y) == pytest.approx(uncertainty.auarc(correct, conf), rel=1e-12)
    assert confidence_auroc(P, y) == pytest.approx(uncertainty.auroc(correct, conf), rel=1e-12)


def test_known_answers():
    """One-hot probabilities that are always right: every ECE 0, AUARC 1; a constant 1/2 confidence
    right half of the time: ECE 0, AUROC 1/2."""
    y = np.arange(20) % 4
    P = np.eye(4)[y]
    assert classwise_ece(P, y) == 0 and adaptive_ece(P, y) == 0 and auarc(P, y) == 1
    assert smooth_ece(P, y, sigma=0.1) == pytest.approx(0, abs=1e-12)
    Q = np.full((20, 2), 0.5)
    yy = np.arange(20) % 2
    assert adaptive_ece(Q, yy, 2) == pytest.approx(0, abs=1e-15) and confidence_auroc(Q, yy) == 0.5


@pytest.mark.parametrize("metric", [confidence_auroc, auarc])
def test_bootstrap_intervals_cover_the_population_value(metric):
    """100 seeded samples of 300 rows from a population of 200,000 (a known miscalibrated model):
    the 90 % percentile-bootstrap interval (200 resamples) holds the population value in at least
    80 % of them."""
    rng = np.random.default_rng(11)

    def draw(n):
        logit = rng.normal(0, 1.5, n)
        f = 1 / (1 + np.exp(-logit))
        P = np.column_stack([f, 1 - f])
        y = np.where(rng.random(n) < np.maximum(f, 1 - f) ** 1.5, P.argmax(axis=1), 1 - P.argmax(axis=1))
        return P, y

    truth = metric(*draw(200_000))
    hits = []
    for seed in range(100):
        est = metric(*draw(300), n_boot=200, confidence=0.9, random_state=seed)
        assert isinstance(est, Estimate) and est.low <= est.value <= est.high
        hits.append(est.low <= truth <= est.high)
    assert np.mean(hits) >= 0.8, np.mean(hits)


def test_every_ece_returns_an_interval_on_request():
    P, y = digits_outputs()
    for f in (classwise_ece, adaptive_ece, smooth_ece):
        value, low, high = f(P, y, n_boot=30, random_state=0)
        assert low <= value <= high or abs(value - low) < 0.02  # the binned ECE's upward bias
        assert value == f(P, y)


@pytest.mark.parametrize("call, message", [
    (lambda P, y: classwise_ece(P, y, 0), "n_bins must be an integer >= 1"),
    (lambda P, y: adaptive_ece(np.where(P > 0.5, np.nan, P), y), "P holds NaN"),
    (lambda P, y: auarc(P * 2, y), r"outside \[0, 1\]"),
    (lambda P, y: smooth_ece(P, y[:-1]), "y has 1496 labels but there are 1497 samples"),
    (lambda P, y: classwise_ece(P, y, n_boot=-1), "n_boot must be an integer >= 0"),
    (lambda P, y: adaptive_ece(P, y, n_boot=10, confidence=1.5), r"confidence must be in \(0, 1\)"),
    (lambda P, y: smooth_ece(P, y, sigma=0.0), "sigma must be None"),
    (lambda P, y: smooth_ece(P, y, ends="clip"), "ends must be 'reflect'"),
    (lambda P, y: confidence_auroc(np.eye(10)[y], y), "every row is correct"),
    (lambda P, y: auarc(P[:0], y[:0]), "P has no rows"),
])
def test_refusals_are_one_line(call, message):
    P, y = digits_outputs()
    with pytest.raises(ValueError, match=message) as e:
        call(np.array(P), np.array(y))
    assert "\n" not in str(e.value)
