"""Coverage metrics of set-valued predictions (svbop.metrics), with known answers."""

import numpy as np
import pytest

import svbop
from svbop.metrics import (
    class_conditional_coverage,
    coverage,
    empty_rate,
    mean_scores,
    recall,
    singleton_rate,
    size_stratified_coverage,
    size_strata,
)

# five rows over four classes: sizes 1, 1, 2, 3, 0; rows 0, 2, 3 are covered
SETS = [[0], [1], [0, 1], [2, 0, 1], []]
Y = [0, 0, 1, 2, 3]


def test_coverage_singleton_and_empty_rates_on_a_known_example():
    assert coverage(SETS, Y) == pytest.approx(3 / 5)
    assert singleton_rate(SETS) == pytest.approx(2 / 5)
    assert empty_rate(SETS) == pytest.approx(1 / 5)
    as_container = svbop.SetPredictions.from_sets(SETS, 4)
    assert coverage(as_container, Y) == coverage(SETS, Y)
    # zero rows: no share to speak of
    none = svbop.SetPredictions.from_sets([], 4)
    assert np.isnan(coverage(none, [])) and np.isnan(singleton_rate(none)) and np.isnan(empty_rate(none))


def test_a_label_no_set_holds_is_a_miss_not_an_error():
    # class 3 is in no set: K comes from the labels too (it used to raise "not a class index in 0..2")
    assert recall(SETS, Y).tolist() == [True, False, True, True, False]
    assert svbop.set_utility([[0]], [5], "fbeta:beta=1").tolist() == [0.0]
    with pytest.raises(ValueError, match=r"y\[1\] = -1 is not a class index"):
        coverage([[0], [1]], [0, -1])


def test_size_strata_one_stratum_per_observed_size():
    edges, cov, counts = size_strata(SETS, Y)
    assert edges.tolist() == [0, 1, 2, 3] and edges.dtype == np.int64
    np.testing.assert_array_equal(cov, [0.0, 0.5, 1.0, 1.0])
    assert counts.tolist() == [1, 2, 1, 1] and counts.dtype == np.int64


def test_size_strata_with_histogram_edges_closed_on_the_left():
    # strata [0, 2) and [2, 4]: sizes 0, 1, 1 | 2, 3; an empty stratum [4, 9] has nan coverage
    edges, cov, counts = size_strata(SETS, Y, bins=[0, 2, 4, 9])
    assert edges.tolist() == [0.0, 2.0, 4.0, 9.0]
    np.testing.assert_array_equal(cov, [1 / 3, 1.0, np.nan])
    assert counts.tolist() == [3, 2, 0]
    # the last stratum is closed on the right: size 3 falls in [2, 3]; size 0 is outside [1, 3]
    edges, cov, counts = size_strata(SETS, Y, bins=[1, 2, 3])
    assert counts.tolist() == [2, 2] and cov.tolist() == [0.5, 1.0]
    # an int is that many equal-width strata over the observed sizes, as in np.histogram
    edges, cov, counts = size_strata(SETS, Y, bins=3)
    np.testing.assert_allclose(edges, [0, 1, 2, 3])
    assert counts.tolist() == [1, 2, 2]


@pytest.mark.parametrize("bins, match", [
    (0, "positive number of strata"), ([3, 1], "strictly increasing"), ([1], "at least two"),
    ([0, np.inf], "finite"), ("auto", "None, a positive int or a 1-D sequence"), (True, "None, a positive int"),
    (["a", "b"], "must be numbers"),
])
def test_size_strata_refuses_bad_bins(bins, match):
    with pytest.raises(ValueError, match=match):
        size_strata(SETS, Y, bins=bins)


def test_class_conditional_coverage_with_the_worst_present_class():
    cov, worst = class_conditional_coverage(SETS, Y)
    # class 0: rows 0 (hit) and 1 (miss); class 1: row 2 (hit); class 2: row 3 (hit); class 3: row 4 (miss)
    np.testing.assert_array_equal(cov, [0.5, 1.0, 1.0, 0.0])
    assert worst == 0.0
    cov, worst = class_conditional_coverage(SETS[:4], Y[:4], n_classes=6)
    np.testing.assert_array_equal(cov, [0.5, 1.0, 1.0, np.nan, np.nan, np.nan])
    assert worst == 0.5  # classes absent from y do not count
    cov, worst = class_conditional_coverage(svbop.SetPredictions.from_sets([], 3), [])
    assert np.isnan(cov).all() and cov.shape == (3,) and np.isnan(worst)
    with pytest.raises(ValueError, match=r"y\[4\] = 3 is not a class index in 0..2"):
        class_conditional_coverage(SETS, Y, n_classes=3)
    with pytest.raises(ValueError, match="n_classes must be a positive int"):
        class_conditional_coverage(SETS, Y, n_classes=0)


def test_coverage_metrics_equal_a_loop_over_rows_on_random_sets():
    rng = np.random.default_rng(0)
    K, n = 7, 400
    sets = [rng.permutation(K)[: rng.integers(0, K + 1)] for _ in range(n)]
    y = rng.integers(0, K, n)
    hit = np.array([yi in s for s, yi in zip(sets, y)])
    sizes = np.array([len(s) for s in sets])
    assert coverage(sets, y) == pytest.approx(hit.mean())
    edges, cov, counts = size_strata(sets, y)
    for e, c, m in zip(edges, cov, counts):
        assert m == (sizes == e).sum() and c == pytest.approx(hit[sizes == e].mean())
    per_class, worst = class_conditional_coverage(sets, y)
    for c in range(K):
        assert per_class[c] == pytest.approx(hit[y == c].mean())
    assert worst == pytest.approx(min(hit[y == c].mean() for c in range(K)))


def test_mean_scores_adds_coverage_keys_in_percent_and_keeps_the_old_ones():
    sets = svbop.SetPredictions.from_sets(SETS, 4)
    scores = mean_scores(sets, Y, ["fbeta:beta=1"])
    assert list(scores)[:5] == ["n", "recall_pct", "mean_size", "top1_pct", "fbeta_1_pct"]
    assert list(scores)[5:] == list(svbop.metrics.COVERAGE_KEYS)
    assert scores["recall_pct"] == scores["coverage_pct"] == pytest.approx(60.0)
    assert scores["mean_size"] == pytest.approx(7 / 5)
    assert scores["class_coverage_worst_pct"] == 0.0  # class 3's only row has an empty set
    assert scores["ssc_worst_pct"] == 0.0  # the one row of size 0
    assert scores["singleton_pct"] == pytest.approx(40.0) and scores["empty_pct"] == pytest.approx(20.0)
    # sizes held by fewer than two rows are left out: only size 1 (coverage 1/2) remains
    assert mean_scores(sets, Y, ssc_min_count=2)["ssc_worst_pct"] == pytest.approx(50.0)
    assert np.isnan(mean_scores(sets, Y, ssc_min_count=3)["ssc_worst_pct"])
    with pytest.raises(ValueError, match="ssc_min_count must be a positive int, got 0"):
        mean_scores(sets, Y, ssc_min_count=0)


def test_coverage_keys_of_mean_scores_are_not_taken_for_utilities_by_the_report():
    # a metrics row is mean_scores' dict; the report's tables read every *_pct column as a utility
    # unless told otherwise, and Table 3 would gain "coverage", "empty", ... columns
    import pandas as pd

    from svbop.report.tables import utility_columns

    sets = svbop.SetPredictions.from_sets([[0], [1, 2], []], 3)
    row = mean_scores(sets, np.array([0, 2, 1]), ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2"])
    row["index_recall_pct"] = 99.0
    assert utility_columns(pd.DataFrame([row])) == ["fbeta_1", "credal_2.2_1.2"]
