"""Conformal risk control and Learn-then-Test (issue 48, item 1): the promise over many seeded splits
for every kind of loss (a hierarchy's included), the exact search against brute force, the
equivalence with split conformal, and the refusals with their messages."""

import math

import numpy as np
import pytest

from svbop.conformal import ConformalSetPredictor, LearnThenTest, RiskControlSetPredictor, set_loss
from svbop.conformal.risk import hoeffding_bentkus_p_values
from svbop.datasets import read_hierarchy
from svbop.datasets.base import Hierarchy

K = 10
#: classes 0-2 under node 10, 3-5 under 11, 6-9 under 12; 10 and 11 under 13; 13 and 12 under the root 14
TREE = Hierarchy(np.array([10, 10, 10, 11, 11, 11, 12, 12, 12, 12, 13, 13, 14, 14, -1]), n_classes=K)


def _pool(rng, n, K=K, scales=(0.5, 1.5, 3.0)):
    """Calibrated probabilities (labels drawn from them) of varied temperature."""
    Z = rng.standard_normal((n, K)) * rng.choice(scales, size=n)[:, None]
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = np.minimum((P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    return P, y


COST = np.linspace(0.5, 3.0, K)
LOSSES = {
    "miscoverage": (dict(loss="miscoverage"), 0.1),
    "class_cost": (dict(loss="class_cost", cost=COST), 0.2),
    "hierarchical": (dict(loss="hierarchical", hierarchy=TREE), 0.05),
    "callable": (dict(loss=lambda mask, y: np.where(mask[np.arange(y.size), y], 0.0, 0.5 + 0.5 * (y % 2)), B=1.0), 0.1),
}


@pytest.mark.parametrize("kind", list(LOSSES))
def test_mean_loss_at_most_alpha_over_300_splits(kind):
    """Over 300 seeded calibration/test splits the mean test loss is within [alpha - 2B/(n+1), alpha]
    (the paper's Theorem 1 and its tightness bound for a loss without atoms), up to 3 standard errors."""
    rng = np.random.default_rng(48)
    options, alpha = LOSSES[kind]
    P, y = _pool(rng, 1200)
    loss = set_loss(options["loss"], cost=options.get("cost"), hierarchy=options.get("hierarchy"),
                    bound=options.get("B"))
    n_cal, means = 400, []
    for _ in range(300):
        perm = rng.permutation(y.size)
        cal, test = perm[:n_cal], perm[n_cal:]
        model = RiskControlSetPredictor(alpha, score="aps", **options).fit(P[cal], y[cal])
        means.append(loss(model.predict_mask(P[test]), y[test]).mean())
    means = np.array(means)
    se = means.std() / math.sqrt(means.size)
    assert means.mean() <= alpha + 3 * se
    assert means.mean() >= alpha - 2 * loss.bound / (n_cal + 1) - 3 * se


def test_a_hierarchy_read_from_a_file(tmp_path):
    """loss="hierarchical" takes any hierarchy svbop reads: an edges file over the classes gives the
    same threshold as the same tree built by hand."""
    edges = ["a\tb", "b\tc", "c\tl0", "c\tl1", "c\tl2", "b\td", "d\tl3", "d\tl4", "d\tl5", "a\te"] + \
        [f"e\tl{c}" for c in range(6, 10)]
    path = tmp_path / "tree.tsv"
    path.write_text("\n".join(edges) + "\n")
    read = read_hierarchy(None, {"format": "edges", "file": str(path)}, [f"l{c}" for c in range(K)])
    P, y = _pool(np.random.default_rng(1), 500)
    a = RiskControlSetPredictor(0.05, "hierarchical", hierarchy=read).fit(P, y)
    b = RiskControlSetPredictor(0.05, "hierarchical", hierarchy=TREE).fit(P, y)
    assert a.lambda_ == b.lambda_


def _brute_force_lambda(model, P, y, loss):
    """The smallest candidate lambda (every calibration score, and -inf) whose adjusted risk is <= alpha,
    by evaluating the loss on the masks at every candidate."""
    from svbop.conformal._matrix import score_matrix, threshold_mask

    S = score_matrix(P, model.score)
    n = y.size
    for t in np.concatenate([[-np.inf], np.unique(S)]):
        total = loss(threshold_mask(S, t, False), y).sum()
        if n / (n + 1) * total / n + loss.bound / (n + 1) <= model.alpha * (1 + 1e-12):
            return t
    return math.inf


@pytest.mark.parametrize("kind", ["class_cost", "hierarchical", "callable"])
@pytest.mark.parametrize("score", ["lac", "aps", "margin"])
def test_exact_search_equals_brute_force(kind, score):
    options, alpha = LOSSES[kind]
    rng = np.random.default_rng(7)
    loss = set_loss(options["loss"], cost=options.get("cost"), hierarchy=options.get("hierarchy"),
                    bound=options.get("B"))
    for n in (30, 150):
        P, y = _pool(rng, n)
        model = RiskControlSetPredictor(alpha, score=score, **options).fit(P, y)
        assert model.lambda_ == _brute_force_lambda(model, P, y, loss)


def test_callable_loss_gives_the_named_loss_threshold():
    """A callable computing the hierarchical loss finds (by bisection) the threshold of the named
    loss (exact step function)."""
    P, y = _pool(np.random.default_rng(3), 800)
    named = set_loss("hierarchical", hierarchy=TREE)
    a = RiskControlSetPredictor(0.05, "hierarchical", "aps", hierarchy=TREE).fit(P, y)
    b = RiskControlSetPredictor(0.05, lambda m, y: named(m, y), "aps").fit(P, y)
    assert a.lambda_ == b.lambda_


@pytest.mark.parametrize("score", ["lac", "aps", "raps", "saps", "topk", "margin"])
def test_miscoverage_risk_control_is_split_conformal(score):
    """loss="miscoverage": lambda_ is split conformal's quantile and the sets are the same."""
    P, y = _pool(np.random.default_rng(5), 900)
    kw = dict(k_reg=2, lam=0.01) if score == "raps" else {}
    risk = RiskControlSetPredictor(0.1, score=score, **kw).fit(P[:500], y[:500])
    cp = ConformalSetPredictor(0.1, score=score, empty="keep", **kw,
                               **({"randomized": False} if score in ("aps", "raps", "saps") else {}))
    cp.fit(P[:500], y[:500])
    assert risk.lambda_ == cp.quantile_
    np.testing.assert_array_equal(risk.predict_mask(P[500:]), cp.predict_mask(P[500:]))
    assert risk.predict(P[500:]) == cp.predict(P[500:])


def test_too_few_rows_keep_every_class():
    """B/(n+1) > alpha: no finite lambda qualifies, every class is kept (the guarantee holds trivially)."""
    P, y = _pool(np.random.default_rng(0), 5)
    model = RiskControlSetPredictor(0.1).fit(P, y)
    assert model.lambda_ == math.inf and model.predict_mask(P).all()


def test_refusals():
    P, y = _pool(np.random.default_rng(0), 200)
    grows = lambda mask, y: (mask.sum(axis=1) > 3).astype(float)  # noqa: E731
    with pytest.raises(ValueError, match="is not non-increasing in lambda .* calibration row .* use LearnThenTest"):
        RiskControlSetPredictor(0.2, loss=grows).fit(P, y)
    with pytest.raises(ValueError, match="grows with the sets .* use LearnThenTest"):
        RiskControlSetPredictor(0.2, loss=set_loss("size_above", max_size=3))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        RiskControlSetPredictor(0.2, loss=lambda m, y: np.full(y.size, 2.0)).fit(P, y)
    with pytest.raises(ValueError, match="one value per row"):
        RiskControlSetPredictor(0.2, loss=lambda m, y: np.zeros(3)).fit(P, y)
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 3\)"):
        RiskControlSetPredictor(3.0, loss="class_cost", cost=np.linspace(0, 3, K))
    with pytest.raises(ValueError, match="needs cost="):
        RiskControlSetPredictor(0.1, loss="class_cost")
    with pytest.raises(ValueError, match="needs hierarchy="):
        RiskControlSetPredictor(0.1, loss="hierarchical", hierarchy="tree.txt")
    with pytest.raises(ValueError, match="loss must be one of"):
        RiskControlSetPredictor(0.1, loss="f1")
    with pytest.raises(ValueError, match="non-negative cost"):
        RiskControlSetPredictor(0.1, loss="class_cost", cost=[1, -1])
    with pytest.raises(ValueError, match="cost has 3 entries but the sets have 10 classes"):
        RiskControlSetPredictor(0.1, loss="class_cost", cost=[1, 2, 3]).fit(P, y)
    with pytest.raises(ValueError, match="not fitted"):
        RiskControlSetPredictor(0.1).predict(P)
    with pytest.raises(ValueError, match="score must be one of"):
        RiskControlSetPredictor(0.1, score="fbeta")


def test_learn_then_test_controls_both_risks_with_probability_1_minus_delta():
    """Miscoverage <= 0.15 and the share of sets above 3 classes <= 0.25 together: over 200 splits the
    share of splits where a true risk (estimated on 4,000 fresh rows) exceeds its level is at most
    delta (+ 3 standard errors); Bonferroni is the procedure chosen for a loss that grows."""
    rng = np.random.default_rng(11)
    P, y = _pool(rng, 3000, scales=(2, 4, 8))
    P_big, y_big = _pool(rng, 4000, scales=(2, 4, 8))
    size = set_loss("size_above", max_size=3)
    delta, failures = 0.1, 0
    for _ in range(200):
        cal = rng.choice(y.size, 1500, replace=False)
        model = LearnThenTest(["miscoverage", size], [0.15, 0.25], delta=delta).fit(P[cal], y[cal])
        mask = model.predict_mask(P_big)
        miss = 1 - mask[np.arange(y_big.size), y_big].mean()
        failures += miss > 0.15 or size(mask, y_big).mean() > 0.25
    assert model.procedure_ == "bonferroni"
    assert failures / 200 <= delta + 3 * math.sqrt(delta * (1 - delta) / 200)


def test_learn_then_test_fixed_sequence_and_its_refusals():
    P, y = _pool(np.random.default_rng(2), 2000)
    fs = LearnThenTest(["miscoverage"], [0.1], delta=0.1).fit(P, y)
    bf = LearnThenTest(["miscoverage"], [0.1], delta=0.1, procedure="bonferroni").fit(P, y)
    assert fs.procedure_ == "fixed_sequence"
    assert fs.lambda_ <= bf.lambda_  # the fixed sequence spends all of delta on each test
    assert np.all(fs.p_values_[fs.lambdas_ >= fs.lambda_] <= 0.1)
    with pytest.raises(ValueError, match="no lambda of the grid .* is certified"):
        LearnThenTest([set_loss("size_above", max_size=0)], [0.01], delta=0.1).fit(P[:50], y[:50])
    with pytest.raises(ValueError, match="one level per loss"):
        LearnThenTest(["miscoverage", "miscoverage"], [0.1])
    with pytest.raises(ValueError, match="procedure must be None or one of fixed_sequence, bonferroni"):
        LearnThenTest(["miscoverage"], [0.1], procedure="holm")


def test_hoeffding_bentkus_p_values_match_mapie():
    methods = pytest.importorskip("mapie.risk_control.methods", reason="MAPIE (optional) cross-checks the p-values")
    fn = methods.compute_hoeffding_bentkus_p_value
    r = np.linspace(0, 0.3, 31)
    theirs = np.ravel(fn(r, 500, 0.1))
    np.testing.assert_allclose(hoeffding_bentkus_p_values(r, 500, 0.1), theirs, rtol=1e-9, atol=1e-12)


def _binomial_tail(count: int, n: int, level: float) -> float:
    """P(Binomial(n, level) <= count), summed term by term (the brute force)."""
    return math.fsum(math.comb(n, k) * level**k * (1 - level) ** (n - k) for k in range(count + 1))


def test_binary_bentkus_p_values_are_the_binomial_tail_and_mapies():
    """Issue 58: for 0/1 losses the Bentkus term is P(Binomial(n, level) <= count), no factor e; it
    equals a term-by-term sum and MAPIE's binary=True wherever MAPIE's ceil of the float count is the
    count, and is never above MAPIE's."""
    n, level = 300, 0.1
    counts = np.arange(0, 61)
    r = counts / n
    ours = hoeffding_bentkus_p_values(r, n, level, binary=True)
    for c, p in zip(counts.tolist(), ours.tolist()):
        a = min(c / n, level)
        h = (a * math.log(a / level) if a > 0 else 0.0) + (1 - a) * math.log((1 - a) / (1 - level))
        assert p == pytest.approx(min(1.0, math.exp(-n * h), _binomial_tail(c, n, level)), rel=1e-9, abs=1e-300)
    assert np.all(ours <= hoeffding_bentkus_p_values(r, n, level) * (1 + 1e-12))
    methods = pytest.importorskip("mapie.risk_control.methods", reason="MAPIE (optional) cross-checks the p-values")
    theirs = np.ravel(methods.compute_hoeffding_bentkus_p_value(r, n, level, binary=True))
    exact = np.ceil(n * r) == counts  # MAPIE's ceil of the float product is the count
    np.testing.assert_allclose(ours[exact], theirs[exact], rtol=1e-9, atol=1e-300)
    assert np.all(ours <= theirs * (1 + 1e-12))
    assert (~exact).any() and np.all(ours[~exact] < theirs[~exact])  # 0.07 * 300 = 21.000000000000004: 22


def test_learn_then_test_picks_the_binary_p_value_for_0_1_losses():
    P, y = _pool(np.random.default_rng(5), 2000)
    auto = LearnThenTest(["miscoverage"], [0.1], delta=0.1).fit(P, y)
    hb = LearnThenTest(["miscoverage"], [0.1], delta=0.1, p_value="hoeffding_bentkus").fit(P, y)
    assert auto.p_value_ == "binary_bentkus" and hb.p_value_ == "hoeffding_bentkus"
    assert auto.procedure_ == "fixed_sequence"
    assert np.all(auto.p_values_ <= hb.p_values_ * (1 + 1e-12))
    assert auto.lambda_ <= hb.lambda_  # sets no larger
    assert auto.predict_mask(P).sum() <= hb.predict_mask(P).sum()
    # a callable 0/1 loss is recognised from its values; a loss with other values is not binary
    miss = lambda mask, y: (~mask[np.arange(y.size), y]).astype(float)  # noqa: E731
    assert LearnThenTest([miss], [0.1], delta=0.1).fit(P, y).p_value_ == "binary_bentkus"
    half = lambda mask, y: 0.5 * (~mask[np.arange(y.size), y])  # noqa: E731
    assert LearnThenTest([half], [0.1], delta=0.1).fit(P, y).p_value_ == "hoeffding_bentkus"
    cost = np.ones(P.shape[1])
    cost[0] = 0.5
    assert LearnThenTest([set_loss("class_cost", cost=cost)], [0.1]).fit(P, y).p_value_ == "hoeffding_bentkus"
    with pytest.raises(ValueError, match="p_value='binary_bentkus' needs losses of 0 or their bound; loss 'class_cost'"):
        LearnThenTest([set_loss("class_cost", cost=cost)], [0.1], p_value="binary_bentkus").fit(P, y)
    with pytest.raises(ValueError, match="p_value must be None or one of hoeffding_bentkus, binary_bentkus"):
        LearnThenTest(["miscoverage"], [0.1], p_value="exact")


def test_binary_learn_then_test_controls_miscoverage_with_probability_1_minus_delta():
    """The binary p-value keeps the LTT promise: over 300 splits the true miscoverage exceeds the
    level in at most delta of them (+ 3 standard errors)."""
    rng = np.random.default_rng(12)
    P, y = _pool(rng, 3000, scales=(2, 4, 8))
    P_big, y_big = _pool(rng, 4000, scales=(2, 4, 8))
    delta, failures = 0.1, 0
    for _ in range(300):
        cal = rng.choice(y.size, 400, replace=False)
        model = LearnThenTest(["miscoverage"], [0.1], delta=delta).fit(P[cal], y[cal])
        mask = model.predict_mask(P_big)
        failures += 1 - mask[np.arange(y_big.size), y_big].mean() > 0.1
    assert model.p_value_ == "binary_bentkus"
    assert failures / 300 <= delta + 3 * math.sqrt(delta * (1 - delta) / 300)
