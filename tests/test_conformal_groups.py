"""Group-conditional (Mondrian) calibration of ConformalSetPredictor (issue 38, item 3)."""

import math
import warnings

import numpy as np
import pytest

from svbop.conformal import ConformalSetPredictor, GroupCalibrationWarning, min_calibration_rows

SCORES = [dict(score="lac"), dict(score="aps", randomized=False), dict(score="raps", randomized=False, k_reg=1, lam=0.05), dict(score="fbeta"),
          dict(score="credal", gamma=0.6)]


def _grouped(rng, n, K):
    """Calibrated probabilities (labels drawn from them) whose group is their temperature: group 0
    flat (hard), group 2 peaked (easy), so that one marginal threshold covers the groups unequally."""
    groups = rng.integers(0, 3, n)
    Z = rng.standard_normal((n, K)) * np.array([0.5, 1.5, 4.0])[groups][:, None]
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = np.minimum((P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    return P, y, groups


@pytest.mark.parametrize("config", SCORES, ids=lambda c: c["score"])
def test_per_group_coverage_over_200_random_splits(config):
    """Mean over 200 calibration/test splits of every group's coverage >= 1 - eps - 0.01, where the
    marginal calibration of the same splits misses the hard group's by more than 0.01."""
    rng = np.random.default_rng(38)
    n, K, G = 600, 5, 3
    P, y, groups = _grouped(rng, n, K)
    eps = 0.3 if config["score"] == "credal" else 0.1  # credal sets stay small: 70 % is reachable
    mondrian, marginal = np.zeros(G), np.zeros(G)
    for split in range(200):
        perm = rng.permutation(n)
        cal, test = perm[: n // 2], perm[n // 2 :]
        model = ConformalSetPredictor(eps, empty="keep", **config).fit(P[cal], y[cal], groups=groups[cal])
        hit = model.predict(P[test], groups=groups[test]).contains(y[test])
        for g in range(G):
            mondrian[g] += hit[groups[test] == g].mean() / 200
        if split < 50:  # the marginal calibration of the same splits, for comparison
            hit0 = ConformalSetPredictor(eps, empty="keep", **config).fit(P[cal], y[cal]).predict(P[test])
            hit0 = hit0.contains(y[test])
            for g in range(G):
                marginal[g] += hit0[groups[test] == g].mean() / 50
    assert np.all(mondrian >= 1 - eps - 0.01), mondrian
    assert marginal.min() < 1 - eps - 0.01, marginal  # the case is one where grouping matters


def test_lac_mondrian_equals_the_textbook_per_group_quantile(rng):
    """q_g is the ceil((n_g+1)(1-eps))-th smallest score 1 - P(y|x) of the group's rows, and a row of
    group g gets {c : 1 - P(c|x) <= q_g}."""
    n, K, eps = 500, 7, 0.1
    P = rng.dirichlet(np.ones(K), size=n)
    y = rng.integers(0, K, n)
    groups = np.array(["north", "south", "east", "west"])[rng.integers(0, 4, n)]
    model = ConformalSetPredictor(eps, empty="keep").fit(P, y, groups=groups)
    assert model.groups_.tolist() == sorted(set(groups.tolist()))
    for j, g in enumerate(model.groups_):
        s = np.sort(1 - P[groups == g, y[groups == g]])
        k = math.ceil((s.size + 1) * (1 - eps))
        assert model.group_counts_[j] == s.size
        assert model.group_quantiles_[j] == s[k - 1]
    sets = model.predict(P, groups=groups)
    q = dict(zip(model.groups_.tolist(), model.group_quantiles_))
    for i in range(n):
        expected = {c for c in range(K) if 1 - P[i, c] <= q[groups[i]]}
        assert set(sets[i].tolist()) == expected
    # one group alone is the marginal calibration of its rows
    north = groups == "north"
    alone = ConformalSetPredictor(eps, empty="keep").fit(P[north], y[north])
    assert alone.quantile_ == q["north"]
    assert sets.take(np.flatnonzero(north)) == alone.predict(P[north])


@pytest.mark.parametrize("config", SCORES, ids=lambda c: c["score"])
def test_each_group_gets_what_its_rows_alone_calibrate(rng, config):
    """For every score, a group's sets are those of a predictor calibrated on that group's rows only."""
    n, K, eps = 300, 5, 0.3 if config["score"] == "credal" else 0.1
    P, y, groups = _grouped(rng, n, K)
    model = ConformalSetPredictor(eps, **config).fit(P, y, groups=groups)
    sets = model.predict(P, groups=groups)
    for g in range(3):
        rows = np.flatnonzero(groups == g)
        alone = ConformalSetPredictor(eps, **config).fit(P[rows], y[rows])
        assert model.group_quantiles_[g] == alone.quantile_
        assert sets.take(rows).to_list() == alone.predict(P[rows]).to_list()
    if config["score"] in ("fbeta", "credal"):  # the Bayes-optimal sets keep their expected utilities
        assert sets.expected_utility is not None


def test_min_calibration_rows_is_where_the_quantile_becomes_finite():
    for eps in (0.5, 0.3, 0.25, 0.1, 0.05, 0.01, 0.07):
        m = min_calibration_rows(eps)
        for n in (m - 1, m):
            finite = math.ceil((n + 1) * (1 - __import__("fractions").Fraction(str(eps)))) <= n
            assert finite == (n == m), (eps, n)
    assert min_calibration_rows(0.1) == 9


@pytest.mark.parametrize("small_groups", ["marginal", "full"])
def test_small_groups_get_the_marginal_threshold_or_every_class_with_one_warning(rng, small_groups):
    n, K, eps = 200, 6, 0.1  # 9 rows needed at eps = 0.1
    P = rng.dirichlet(np.ones(K), size=n)
    y = rng.integers(0, K, n)
    groups = np.zeros(n, dtype=np.int64)
    groups[:3] = 7  # 3 rows
    groups[3:8] = 5  # 5 rows
    groups[8:17] = 4  # 9 rows: enough
    with pytest.warns(GroupCalibrationWarning) as record:
        model = ConformalSetPredictor(eps, small_groups=small_groups).fit(P, y, groups=groups)
    assert len(record) == 1
    message = str(record[0].message)
    assert "5 (5 rows), 7 (3 rows)" in message and "the 9 that epsilon=0.1 needs" in message
    assert model.small_groups_.tolist() == [5, 7]
    small = np.flatnonzero(np.isin(groups, [5, 7]))
    sets = model.predict(P[small], groups=groups[small])
    if small_groups == "marginal":
        assert model.group_quantiles_[np.isin(model.groups_, [5, 7])].tolist() == [model.quantile_] * 2
        assert sets == ConformalSetPredictor(eps).fit(P, y).predict(P[small])
    else:
        assert np.all(np.isinf(model.group_quantiles_[np.isin(model.groups_, [5, 7])]))
        assert np.all(sets.sizes == K)
    with warnings.catch_warnings():  # a group of exactly the rows needed gets its own threshold, silently
        warnings.simplefilter("error")
        ConformalSetPredictor(eps).fit(P[8:17], y[8:17], groups=groups[8:17])


def test_unseen_groups_get_the_marginal_threshold_said_once(rng):
    n, K = 300, 5
    P, y, groups = _grouped(rng, n, K)
    model = ConformalSetPredictor(0.1, score="aps", randomized=False).fit(P, y, groups=groups)
    test_groups = groups.copy()
    test_groups[:4] = 9
    test_groups[4:6] = -1
    with pytest.warns(GroupCalibrationWarning) as record:
        sets = model.predict(P, groups=test_groups)
    assert len(record) == 1
    assert str(record[0].message).startswith("2 group(s) not seen in fit: -1 (2 rows), 9 (4 rows)")
    marginal = ConformalSetPredictor(0.1, score="aps", randomized=False).fit(P, y).predict(P[:6])
    assert sets.take(np.arange(6)) == marginal


@pytest.mark.parametrize(
    "fit_groups, predict_groups, message",
    [
        (np.zeros(99), None, "groups has 99 entries but P_cal has 100 rows"),
        (np.zeros((100, 1)), None, "groups must be a 1-D array of group labels (one per row), got shape (100, 1)"),
        (np.r_[np.zeros(99), np.nan], None, "groups has a missing or infinite value (nan) at row 99"),
        (np.array([None] * 100), None, "groups must hold integers, strings or booleans; row 0 holds None (NoneType)"),
        (np.array(["a"] * 50 + [1] * 50, dtype=object), None, "groups mixes labels that cannot be compared"),
        (np.zeros(100, dtype=complex), None, "groups must hold integers, strings or booleans, got dtype complex128"),
        (np.zeros(100), np.zeros(3), "groups has 3 entries but P has 4 rows"),
        (np.zeros(100), "missing", "groups is required: the predictor was calibrated per group"),
        (None, np.zeros(4), "groups given to predict but the predictor was calibrated without groups"),
    ],
)
def test_bad_groups_are_refused_with_one_line(rng, fit_groups, predict_groups, message):
    P = rng.dirichlet(np.ones(4), size=100)
    y = rng.integers(0, 4, 100)
    model = ConformalSetPredictor(0.1)
    if predict_groups is None:
        with pytest.raises(ValueError) as info:
            model.fit(P, y, groups=fit_groups)
    else:
        model.fit(P, y, groups=fit_groups)
        with pytest.raises(ValueError) as info:
            model.predict(P[:4], groups=None if isinstance(predict_groups, str) else predict_groups)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_other_refusals(rng):
    P = rng.dirichlet(np.ones(4), size=100)
    y = rng.integers(0, 4, 100)
    with pytest.raises(ValueError, match="small_groups must be 'marginal' or 'full', got 'none'"):
        ConformalSetPredictor(0.1, small_groups="none")
    with pytest.raises(ValueError, match="groups cannot be combined with class_conditional=True"):
        ConformalSetPredictor(0.1, class_conditional=True).fit(P, y, groups=np.zeros(100))
    # a credal fit that fails in one group names the group
    P, y, _ = _grouped(rng, 100, 4)
    g = np.r_[np.zeros(90, dtype=np.int64), np.ones(10, dtype=np.int64)]
    y[90:] = np.argmin(P[90:], axis=1)  # the least probable class: no credal set holds it
    with pytest.raises(ValueError, match=r"^group 1 \(10 calibration rows\): score='credal' with gamma=0.6: even"):
        ConformalSetPredictor(0.3, score="credal", gamma=0.6).fit(P, y, groups=g)


def test_groups_from_other_containers_and_label_types(rng):
    """Lists, strings, booleans and pandas Series give the same sets as their integer codes."""
    n, K = 200, 5
    P, y, groups = _grouped(rng, n, K)
    ref = ConformalSetPredictor(0.1).fit(P, y, groups=groups).predict(P, groups=groups)
    for g in (groups.tolist(), np.array(["g0", "g1", "g2"])[groups], np.array(["g0", "g1", "g2"], dtype=object)[groups]):
        got = ConformalSetPredictor(0.1).fit(P, y, groups=g).predict(P, groups=g)
        assert got == ref
    pd = pytest.importorskip("pandas")
    s = pd.Series(groups)
    assert ConformalSetPredictor(0.1).fit(P, y, groups=s).predict(P, groups=s) == ref


# --- groups known at test time, from the probabilities (the pipeline's methods.mondrian.by) ----------


def test_predicted_groups_are_the_top_class_and_the_top_level_node_above_it():
    from svbop.conformal import predicted_groups
    from svbop.datasets import hierarchy_from_edges

    # root -> a -> {0, 1}; root -> b -> c -> {2, 3}; root -> 4 (a class right under the root)
    h = hierarchy_from_edges([("root", "a"), ("a", "0"), ("a", "1"), ("root", "b"), ("b", "c"), ("c", "2"),
                              ("c", "3"), ("root", "4")], ["0", "1", "2", "3", "4"])
    P = np.array([[0.6, 0.1, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.6, 0.1], [0.1, 0.1, 0.1, 0.1, 0.6],
                  [0.2, 0.2, 0.2, 0.2, 0.2]])
    assert predicted_groups(P, "predicted_class").tolist() == [0, 3, 4, 0]
    top = predicted_groups(P, "predicted_top_node", h)
    names = [h.node_names[v] for v in top]
    assert names == ["a", "b", "4", "a"]
    with pytest.raises(ValueError, match=r"^by='predicted_top_node' needs hierarchy"):
        predicted_groups(P, "predicted_top_node")
    with pytest.raises(ValueError, match=r"^by must be one of predicted_class, predicted_top_node"):
        predicted_groups(P, "site")


def test_evaluate_beyond_reports_every_methods_worst_group():
    from svbop import SetPredictions
    from svbop.evaluation import evaluate_beyond

    sets = {("icp", "0.10"): SetPredictions.from_sets([[0], [1], [0, 1], [2]], n_classes=3)}
    rows = evaluate_beyond(sets, np.array([0, 0, 1, 1]), ["fbeta:beta=1"], dataset="d",
                           groups={"predicted_class": np.array([0, 0, 1, 1])})
    assert rows[0]["worst_group_predicted_class_pct"] == 50.0 and rows[0]["n_groups_predicted_class"] == 2
