"""Coverage metrics of issue 38: per group, CovGap, worst-slab coverage, running coverage."""

import numpy as np
import pytest

import svbop
from svbop.metrics import (
    EXTRA_COVERAGE_KEYS,
    covgap,
    group_coverage,
    mean_scores,
    running_coverage,
    worst_slab_coverage,
)

SETS = [[0], [1, 2], [], [3], [0, 1, 2, 3], [2]]
Y = np.array([0, 2, 1, 0, 3, 2])  # hits: 1, 1, 0, 0, 1, 1


def test_group_coverage_known_answer():
    labels, cov, counts = group_coverage(SETS, Y, ["b", "a", "a", "b", "c", "b"])
    assert labels.tolist() == ["a", "b", "c"]
    assert cov.tolist() == [0.5, pytest.approx(2 / 3), 1.0]
    assert counts.tolist() == [2, 3, 1]
    labels, cov, counts = group_coverage(svbop.SetPredictions.from_sets(SETS, 4), Y, np.array([3, 3, 3, 3, -1, -1]))
    assert labels.tolist() == [-1, 3] and cov.tolist() == [1.0, 0.5] and counts.tolist() == [2, 4]


def test_covgap_known_answer():
    # class coverage: 0 -> 1/2, 1 -> 0, 2 -> 1, 3 -> 1 (class 3's one row is covered)
    assert covgap(SETS, Y, 0.1) == pytest.approx((0.4 + 0.9 + 0.1 + 0.1) / 4)
    # a class absent from y is left out, not counted as 0 or 1
    assert covgap(svbop.SetPredictions.from_sets(SETS, 6), Y, 0.2) == pytest.approx((0.3 + 0.8 + 0.2 + 0.2) / 4)
    assert covgap([[0], [1]], [0, 1], 0.25) == pytest.approx(0.25)
    with pytest.raises(ValueError, match=r"epsilon must be a number in \(0, 1\), got 1.5"):
        covgap(SETS, Y, 1.5)


def _brute_wsc(z, hit, m):
    """The smallest coverage over the slabs a <= z <= b (a, b values of z) holding >= m rows."""
    values = np.unique(z)
    best = np.inf
    for a in values:
        for b in values[values >= a]:
            inside = (z >= a) & (z <= b)
            if inside.sum() >= m:
                best = min(best, hit[inside].mean())
    return best


def test_worst_slab_coverage_known_answers():
    X = np.arange(100.0)[:, None]
    y = np.zeros(100, dtype=np.int64)
    sets = [[0]] * 100
    for i in range(40, 50):  # ten misses in a row
        sets[i] = [1]
    assert worst_slab_coverage(sets, y, X, delta=0.1) == 0.0
    assert worst_slab_coverage(sets, y, X, delta=0.2) == 0.5
    assert worst_slab_coverage(sets, y, X, delta=1.0) == 0.9
    # ties: the slab holds every row of its value, so the ten misses cannot be cut out of a run of 20 equal x
    Xt = np.repeat(np.arange(5.0), 20)[:, None]
    assert worst_slab_coverage(sets, y, Xt, delta=0.1) == 0.5


def test_worst_slab_coverage_equals_a_brute_force_over_the_same_directions(rng):
    for _ in range(40):
        n = int(rng.integers(1, 40))
        X = rng.integers(0, 4, size=(n, 2)).astype(float)  # many ties
        y = np.zeros(n, dtype=np.int64)
        hit = rng.random(n) < rng.random()
        sets = [[0] if h else [1] for h in hit]
        V = rng.standard_normal((3, 2))
        delta = float(rng.uniform(0.05, 1.0))
        m = int(np.ceil(delta * n - 1e-9))
        expected = min(_brute_wsc(X @ v, hit, m) for v in V)
        assert worst_slab_coverage(sets, y, X, delta=delta, directions=V) == expected


def test_worst_slab_coverage_is_seeded_and_finds_a_hidden_hole(rng):
    """A predictor that misses every row in a half-space of 2-D features: marginal coverage 0.9,
    worst slab 0; the same seed gives the same answer."""
    n = 2000
    X = rng.standard_normal((n, 2))
    u = X @ np.array([0.6, 0.8])
    hit = u < np.quantile(u, 0.9)
    sets = [[0] if h else [1] for h in hit]
    y = np.zeros(n, dtype=np.int64)
    a = worst_slab_coverage(sets, y, X, delta=0.1, n_directions=200, seed=5)
    assert a == worst_slab_coverage(sets, y, X, delta=0.1, n_directions=200, seed=5)
    assert a < 0.3
    assert worst_slab_coverage(sets, y, X, delta=1.0) == pytest.approx(0.9)


def test_running_coverage_known_answer():
    r = running_coverage(SETS, Y)
    np.testing.assert_allclose(r, [1, 1, 2 / 3, 2 / 4, 3 / 5, 4 / 6])
    np.testing.assert_allclose(running_coverage(SETS, Y, window=2), [1, 1, 0.5, 0, 0.5, 1])
    with pytest.raises(ValueError, match="window must be a positive int, got 0"):
        running_coverage(SETS, Y, window=0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: group_coverage(SETS, Y, [0] * 5), "groups has 5 entries but sets has 6 rows"),
        (lambda: worst_slab_coverage(SETS, Y, np.zeros((5, 2))), "X must have shape (n, d) with n = 6 rows"),
        (lambda: worst_slab_coverage(SETS, Y, np.zeros((6, 2)), delta=0), "delta must be a number in (0, 1], got 0"),
        (lambda: worst_slab_coverage(SETS, Y, np.zeros((6, 2)), n_directions=0), "n_directions must be a positive"),
        (lambda: worst_slab_coverage(SETS, Y, np.full((6, 2), np.nan)), "X holds NaN or infinite values"),
        (lambda: worst_slab_coverage(SETS, Y, np.zeros((6, 2)), directions=np.ones((2, 3))),
         "directions must be a finite array of shape (m, 2), got (2, 3)"),
    ],
)
def test_refusals(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_mean_scores_adds_the_new_coverage_keys_only_when_asked():
    sets = svbop.SetPredictions.from_sets(SETS, 4)
    plain = mean_scores(sets, Y, ["fbeta:beta=1"])
    assert not set(EXTRA_COVERAGE_KEYS) & set(plain)
    scores = mean_scores(sets, Y, ["fbeta:beta=1"], epsilon=0.1, groups=["b", "a", "a", "b", "c", "b"],
                         X=np.arange(6.0), slab_delta=0.5)
    assert list(scores)[: len(plain)] == list(plain)
    assert list(scores)[len(plain):] == list(EXTRA_COVERAGE_KEYS)
    assert scores["covgap_pct"] == pytest.approx(100 * covgap(sets, Y, 0.1))
    assert scores["group_coverage_worst_pct"] == pytest.approx(50.0)
    assert scores["worst_slab_coverage_pct"] == pytest.approx(100 * worst_slab_coverage(sets, Y, np.arange(6.0),
                                                                                          delta=0.5))


def test_the_report_does_not_take_the_new_keys_for_utilities():
    pd = pytest.importorskip("pandas")
    from svbop.report.tables import utility_columns

    sets = svbop.SetPredictions.from_sets(SETS, 4)
    row = mean_scores(sets, Y, ["fbeta:beta=1"], epsilon=0.1, groups=np.zeros(6), X=np.arange(6.0))
    assert utility_columns(pd.DataFrame([row])) == ["fbeta_1"]
