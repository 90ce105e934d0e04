from fractions import Fraction

import numpy as np
import pytest

import svbop
from svbop.utilities import STANDARD_UTILITIES


@pytest.mark.parametrize(
    "spec, s, expected",
    [
        ("precision", [1, 2, 4], [1, 1 / 2, 1 / 4]),
        ("recall", [1, 5], [1, 1]),
        ("fbeta:beta=1", [1, 2, 3], [1, 2 / 3, 1 / 2]),
        ("fbeta:beta=5", [2], [26 / 27]),
        ("credal:delta=2.2,gamma=1.2", [1, 2], [1.0, 1.1 - 0.3]),
        ("credal:delta=1.6,gamma=0.6", [2], [0.8 - 0.15]),
        ("exp:delta=1", [1, 2], [1 - np.exp(-1), 1 - np.exp(-0.5)]),
        ("log", [1, 3], [np.log(2), np.log(4 / 3)]),
    ],
)
def test_utility_values_match_the_papers_formulas(spec, s, expected):
    np.testing.assert_allclose(svbop.utility(spec)(np.array(s)), expected, rtol=1e-14)


def test_reject_option_rewards_only_singletons_and_the_full_set():
    g = svbop.utility("reject:alpha=0.3", K=5).values()
    np.testing.assert_allclose(g, [1, 0, 0, 0, 0.7])


def test_generalised_reject_formula_and_limits():
    g = svbop.utility("genreject:alpha=0.5,beta=2", K=5).values()
    np.testing.assert_allclose(g, 1 - 0.5 * (np.arange(5) / 4) ** 2)
    # K = 1: the only set is the full set, with g(1) = 1
    assert svbop.utility("genreject:alpha=0.5,beta=2", K=1).values().tolist() == [1.0]


def test_precision_is_the_boundary_case_of_one_over_x_convexity():
    u = svbop.utility("precision")
    g = u.exact_values(50)
    # the defining inequality holds with equality for every s (exact rationals)
    for s in range(48):
        assert 2 / g[s + 1] == 1 / g[s] + 1 / g[s + 2]
    props = u.properties(50)
    assert props.one_over_x_convex and props.exact and props.lower_bounded_by_precision


@pytest.mark.parametrize("spec", ["fbeta:beta=1", "fbeta:beta=5", "credal:delta=1.6,gamma=0.6", "credal:delta=2.2,gamma=1.2"])
@pytest.mark.parametrize("K", [2, 10, 100, 12166])
def test_paper_utilities_satisfy_all_four_properties(spec, K):
    p = svbop.utility(spec).properties(K)
    assert p.strictly_decreasing and p.g1_is_one and p.lower_bounded_by_precision and p.one_over_x_convex
    assert p.early_stop_valid


def test_generalised_reject_can_be_above_precision_yet_not_one_over_x_convex():
    # the paper: g >= 1/s does not imply (1/x)-convexity; small beta is such a case
    p = svbop.utility("genreject:alpha=0.9,beta=0.2", K=100).properties()
    assert p.lower_bounded_by_precision and p.strictly_decreasing and p.g1_is_one
    assert not p.one_over_x_convex and not p.early_stop_valid


def test_generalised_reject_parameter_bound_for_precision():
    # alpha = 1 drives g(K) to 0 < 1/K
    assert not svbop.utility("genreject:alpha=1,beta=2", K=10).properties().lower_bounded_by_precision
    # the paper's bound beta >= log_{1/(K-1)}(K/2) + 1 with alpha = (K-1)/K keeps g >= 1/s
    K = 100
    beta = np.log(K / 2) / np.log(1 / (K - 1)) + 1
    spec = f"genreject:alpha={(K - 1) / K},beta={beta + 1e-6:.8f}"
    assert svbop.utility(spec, K=K).properties().lower_bounded_by_precision
    spec_low = f"genreject:alpha={(K - 1) / K},beta={beta - 0.05:.8f}"
    assert not svbop.utility(spec_low, K=K).properties().lower_bounded_by_precision


def test_reject_option_is_neither_decreasing_nor_convex():
    p = svbop.utility("reject:alpha=0.3", K=10).properties()
    assert not p.strictly_decreasing and not p.one_over_x_convex and not p.early_stop_valid
    assert p.g1_is_one


def test_logarithmic_utility_is_not_one_over_x_convex_and_needs_rescaling():
    p = svbop.utility("log").properties(20)
    assert not p.exact and not p.g1_is_one and not p.one_over_x_convex


def test_exponential_utility_is_one_over_x_convex():
    p = svbop.utility("exp:delta=1").properties(200)
    assert p.one_over_x_convex and p.strictly_decreasing and not p.g1_is_one


def test_recall_is_not_strictly_decreasing_but_admits_early_stop():
    p = svbop.utility("recall").properties(10)
    assert not p.strictly_decreasing and p.one_over_x_convex and p.early_stop_valid


def test_spec_round_trip_and_labels():
    u = svbop.utility(" credal : delta=2.20, gamma=1.2 ".replace(" : ", ":"))
    assert u.spec == "credal:delta=2.2,gamma=1.2"
    assert u.label == "credal_2.2_1.2"
    assert svbop.utility(u.spec) == u
    assert svbop.utility("fbeta").spec == "fbeta:beta=1"
    assert svbop.utility("fbeta:beta=5").label == "fbeta_5"
    assert u.params["delta"] == Fraction(11, 5)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nonsense", "unknown utility 'nonsense'"),
        ("fbeta:beta", "malformed utility spec"),
        ("fbeta:", "malformed utility spec"),
        ("fbeta:gamma=1", "unknown parameter 'gamma'"),
        ("fbeta:beta=1,beta=2", "duplicate parameter 'beta'"),
        ("credal:delta=2.2", "needs parameter 'gamma'"),
        ("credal:delta=3,gamma=1", "leaves [0, 1] at set size s=1"),
        ("credal:delta=1,gamma=2", "leaves [0, 1] at set size s=1"),
        ("exp:delta=-1", "delta > 0"),
        ("exp:delta=abc", "not a finite number"),
        ("fbeta:beta=nan", "not a finite number"),
        ("reject:alpha=1.5", "0 <= alpha <= 1"),
        ("genreject:alpha=0.5,beta=0", "beta > 0"),
    ],
)
def test_bad_specs_raise_value_errors_naming_the_problem(spec, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        svbop.utility(spec, K=10)


def test_K_is_required_where_g_depends_on_it_and_must_match():
    u = svbop.utility("reject:alpha=0.3")
    with pytest.raises(ValueError, match="needs K"):
        u.values()
    with pytest.raises(ValueError, match="K mismatch"):
        svbop.utility("fbeta:beta=1", K=5).values(6)
    with pytest.raises(ValueError, match="positive integer"):
        svbop.utility("fbeta", K=0)


def test_utility_table_covers_the_standard_utilities():
    rows = svbop.utility_table(K=100)
    assert [r["spec"] for r in rows] == [svbop.utility(s).spec for s in STANDARD_UTILITIES]
    assert all(0 <= r["g(K)"] <= r["g(1)"] <= 1 for r in rows)
