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


# --- issue 56: weights valid up to a constant give the sets of any constant multiple -------------

def _shifted(seed, n_cal=999, n_test=1000):
    rng = np.random.default_rng(seed)
    x_cal, x_test = rng.standard_normal(n_cal), rng.standard_normal(n_test) + SHIFT
    (P, y), (Pt, _) = _rows(rng, x_cal), _rows(rng, x_test)
    return P, y, _ratio(x_cal), Pt, _ratio(x_test)


@pytest.mark.parametrize("config", [dict(score="lac"), dict(score="aps"), dict(score="topk", randomized=True),
                                    dict(score="lac", class_conditional=True),
                                    dict(score="aps", class_conditional=True)],
                         ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("constant", [2.0**1000, 2.0**-1000, 1e306 / 20, 1e-300, 1e200, 7.3, "near_max"])
def test_a_constant_multiple_of_the_weights_gives_the_same_sets(config, constant):
    """Likelihood ratios are defined up to a constant: multiplying the calibration and test weights by
    the same constant (near float64's largest and smallest, where their sums overflowed or lost every
    bit) leaves the threshold of every row and every set as they are."""
    P, y, w, Pt, wt = _shifted(56)
    if constant == "near_max":  # each weight finite, their sum past float64's largest
        constant = 0.5 * np.finfo(np.float64).max / max(w.max(), wt.max())
    a = ConformalSetPredictor(0.1, random_state=3, **config).fit(P, y, weights=w)
    b = ConformalSetPredictor(0.1, random_state=3, **config).fit(P, y, weights=w * constant)
    assert np.isfinite(b.quantile_) and b.quantile_ == pytest.approx(a.quantile_, rel=1e-12)
    np.testing.assert_array_equal(a.predict_mask(Pt, weights=wt), b.predict_mask(Pt, weights=wt * constant))


@pytest.mark.parametrize("class_conditional", [False, True])
def test_equal_huge_weights_are_no_shift(class_conditional):
    """Equal weights of 1e306 (finite; equal weights mean no shift) give the unweighted sets: their sum
    overflowed to inf, and the sets shrank to one class (coverage 0.35 for 0.9)."""
    rng = np.random.default_rng(1)
    P = rng.dirichlet(np.full(8, 0.5), size=1999)
    y = np.minimum((P.cumsum(axis=1) < rng.random((1999, 1))).sum(axis=1), 7)
    a = ConformalSetPredictor(0.1, class_conditional=class_conditional).fit(P[:999], y[:999])
    b = ConformalSetPredictor(0.1, class_conditional=class_conditional).fit(P[:999], y[:999],
                                                                          weights=np.full(999, 1e306))
    assert a.quantile_ == b.quantile_
    np.testing.assert_array_equal(a.predict_mask(P[999:]), b.predict_mask(P[999:], weights=np.full(1000, 1e306)))
    # the test weights alone huge, against calibration weights of 1: each row's own mass at +inf
    # dominates, every class (as in exact arithmetic), never an overflow turned into a small set
    c = ConformalSetPredictor(0.1, class_conditional=class_conditional).fit(P[:999], y[:999], weights=np.ones(999))
    assert c.predict_mask(P[999:1009], weights=np.full(10, 1e308)).all()


def test_effective_sizes_of_huge_weights_are_finite():
    """Kish's effective size of weights near float64's largest: their squares overflowed (the page's
    "effective test rows" read nan for weights of 1e200)."""
    from svbop.conformal.weighted import effective_size
    from svbop.evaluation import check_promise, promise_record
    from svbop.sets import SetPredictions

    assert effective_size(np.full(400, 1e200)) == pytest.approx(400)
    assert effective_size(np.array([1e306, 1e306, 0.0])) == pytest.approx(2)
    assert effective_size(np.zeros(3)) == 0.0
    record = promise_record(method="weighted_lac", epsilon=0.1, y_cal=np.zeros(300, int), weights=np.full(300, 1e200))
    assert record["n_effective"] == pytest.approx(300)
    sets = SetPredictions.from_sets([[0], [1], [2], [0]], 3)
    checked = check_promise(record, sets, np.array([0, 1, 0, 0]), weights=np.full(4, 1e306))
    assert checked["n_effective"] == pytest.approx(4) and checked["weighted_coverage_pct"] == pytest.approx(75)


def test_rc3p_and_clusters_refuse_weights():
    """RC3P with weights silently dropped its rank limits (the sets of plain class-conditional); the
    combination is refused, as clusters with weights are."""
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(K), size=200)
    y = rng.integers(0, K, 200)
    for kind in ("rc3p", "clustered"):
        with pytest.raises(ValueError, match=f"weights are for class_conditional=False or True, not '{kind}'"):
            ConformalSetPredictor(0.1, class_conditional=kind).fit(P, y, weights=np.ones(200))


def _textbook_threshold(s, w, w_test, eps):
    """Tibshirani et al. 2019: the smallest calibration score whose weighted share (each row's own
    weight, the test row's at +inf) reaches 1 - eps, brute force."""
    for t in np.sort(s):
        if w[s <= t].sum() / (w.sum() + w_test) >= 1 - eps:
            return t
    return math.inf


def test_weighted_threshold_pairs_each_weight_with_its_score_where_torchcp_sorts_them_apart():
    """Issue 58: svbop's weighted threshold is the textbook one (each calibration row's weight with its
    own score).  TorchCP 1.2.1's WeightedPredictor sorts the weights by themselves (w_sorted) and the
    scores by themselves (scores_sorted) and pairs them by rank: its threshold is the textbook one
    only when the weights rise with the scores.  Its predict is driven here with logits carrying the
    test row's weight as an offset (log P + log w: the same softmax) and an encoder that reads it back."""
    import anchors

    anchors.torchcp()
    import torch
    from torchcp.classification.predictor import WeightedPredictor
    from torchcp.classification.score import LAC

    rng = np.random.default_rng(58)
    K, n, eps = 4, 30, 0.1
    P_cal = rng.dirichlet(np.ones(K), n)
    y_cal = rng.integers(0, K, n)
    w_cal = rng.uniform(0.2, 5.0, n)
    P_test = rng.dirichlet(np.ones(K), 6)
    w_test = rng.uniform(0.2, 5.0, 6)
    s = 1 - P_cal[np.arange(n), y_cal]
    ours = ConformalSetPredictor(eps, score="lac").fit(P_cal, y_cal, weights=w_cal)
    q_ours = ours._weighted.row_thresholds(w_test)
    np.testing.assert_allclose(q_ours, [_textbook_threshold(s, w_cal, wt, eps) for wt in w_test], rtol=1e-12)

    class Offset(torch.nn.Module):  # the encoder: the logits' logsumexp is log w
        def forward(self, x):
            return x.logsumexp(dim=1, keepdim=True)

    class Same(torch.nn.Module):  # the model: the logits themselves (one parameter: TorchCP reads its device)
        def __init__(self):
            super().__init__()
            self.unused = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

        def forward(self, x):
            return x

    tcp = WeightedPredictor(LAC(), model=Same(), image_encoder=Offset())
    tcp.calculate_threshold(torch.from_numpy(np.log(P_cal)), torch.from_numpy(y_cal), eps)
    tcp.IW = lambda f: torch.exp(f[:, 0])
    tcp.w_sorted = torch.sort(torch.from_numpy(w_cal), descending=False)[0]  # as its evaluate() sets it
    seen = []
    inner = tcp.predict_with_logits
    tcp.predict_with_logits = lambda logits, q_hat=None: (seen.append(float(q_hat)), inner(logits, q_hat))[1]
    tcp.predict(torch.from_numpy(np.log(P_test) + np.log(w_test)[:, None]))
    # TorchCP's: the k-th smallest weight with the k-th smallest score
    ss, ws = np.sort(s), np.sort(w_cal)
    apart = [ss[np.argmax(np.cumsum(np.append(ws, wt)) / (ws.sum() + wt) >= 1 - eps)] for wt in w_test]
    np.testing.assert_allclose(seen, apart, rtol=1e-6)
    assert np.any(np.abs(np.array(seen) - q_ours) > 1e-6)  # the pairing changes the threshold
