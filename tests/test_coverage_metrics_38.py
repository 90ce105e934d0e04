"""Coverage metrics of issue 38: per group, CovGap, running coverage (worst-slab coverage and SSCV:
tests/test_conditional_metrics.py)."""

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
        (lambda: worst_slab_coverage(SETS, Y, np.zeros((6, 2)), delta=0), "delta must be a number in (0, 1), got 0"),
        (lambda: worst_slab_coverage(SETS, Y, np.zeros((6, 2)), M=0), "M (the number of directions) must be a positive"),
        (lambda: worst_slab_coverage(SETS, Y, np.full((6, 2), np.nan)), "X holds NaN or infinite values"),
        (lambda: worst_slab_coverage(SETS, Y, np.zeros((6, 2)), test_fraction=1.0),
         "test_fraction must be a number in (0, 1), got 1.0"),
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
                                                                                          delta=0.5), nan_ok=True)


def test_the_report_does_not_take_the_new_keys_for_utilities():
    pd = pytest.importorskip("pandas")
    from svbop.report.tables import utility_columns

    sets = svbop.SetPredictions.from_sets(SETS, 4)
    row = mean_scores(sets, Y, ["fbeta:beta=1"], epsilon=0.1, groups=np.zeros(6), X=np.arange(6.0))
    assert utility_columns(pd.DataFrame([row])) == ["fbeta_1"]
