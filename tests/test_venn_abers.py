"""Inductive Venn-Abers calibration (svbop.venn_abers, calibrate: venn_abers), issue 48 item 5:
isotonic fits with the test point brute-forced, validity over seeded splits, and the venn-abers
package's calc_p0p1 and one-vs-rest probabilities (skipped without the package)."""

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from svbop.calibration import CALIBRATION_METHODS, VennAbers, VennAbersMultiClass, calibrate_parts
from svbop.venn_abers import venn_abers_table

import anchors


def _isotonic_at(s, y, s_test, label):
    fit = IsotonicRegression().fit(np.append(s, s_test), np.append(y, label))
    return fit.predict([s_test])[0]


def test_p0_p1_are_the_isotonic_fits_with_the_test_point_labelled_0_and_1(rng):
    for _ in range(15):
        n = int(rng.integers(1, 30))
        s = rng.permutation(100)[:n] / 100.0  # distinct scores
        y = (rng.random(n) < s).astype(int)
        va = VennAbers().fit(s, y)
        tests = np.array([-0.5, 0.005, *(rng.permutation(100)[:5] / 100.0 + 0.005), 1.5])
        p0, p1 = va.predict_interval(tests).T
        for t, a, b in zip(tests, p0, p1):
            assert a == pytest.approx(_isotonic_at(s, y, t, 0), abs=1e-12)
            assert b == pytest.approx(_isotonic_at(s, y, t, 1), abs=1e-12)
        p = va.predict_proba(tests)
        np.testing.assert_allclose(p[:, 1], p1 / (1 - p0 + p1))
        assert np.all(p0 <= p[:, 1] + 1e-15) and np.all(p[:, 1] <= p1 + 1e-15)


def test_known_answer():
    c, p0, p1 = venn_abers_table([0.1, 0.3, 0.6, 0.9], [0, 1, 0, 1])
    np.testing.assert_allclose(p0, [0, 0, 1 / 3, 1 / 3, 1 / 2])
    np.testing.assert_allclose(p1, [1 / 2, 2 / 3, 2 / 3, 1, 1])


def _binned_error(p, y, bins=10):
    """sum over 10 equal-width bins of p of |(number of 1s) - (sum of p)|, over n: the calibration
    error of P(y = 1)."""
    b = np.minimum((p * bins).astype(int), bins - 1)
    gap = np.bincount(b, weights=y, minlength=bins) - np.bincount(b, weights=p, minlength=bins)
    return np.abs(gap).sum() / y.size


def test_venn_abers_is_valid_over_seeded_splits():
    """An over-confident score (the true probability is s**3), 300 calibration and 1,000 test rows
    per split: over 100 splits the share of label 1 on the test rows lies within [mean p0, mean p1]
    up to sampling error, and the merged p, pooled over the splits, is calibrated (binned error a
    fraction of the raw score's 0.25)."""
    rng = np.random.default_rng(0)
    low, high, ps, ss, ys = [], [], [], [], []
    for _ in range(100):
        s = rng.random(1300)
        y = (rng.random(1300) < s ** 3).astype(int)
        va = VennAbers().fit(s[:300], y[:300])
        p0, p1 = va.predict_interval(s[300:]).T
        low.append(y[300:].mean() - p0.mean())
        high.append(p1.mean() - y[300:].mean())
        ps.append(va.predict_proba(s[300:])[:, 1])
        ss.append(s[300:])
        ys.append(y[300:])
    for gap in (np.array(low), np.array(high)):
        assert gap.mean() >= -3 * gap.std() / np.sqrt(gap.size)
    y = np.concatenate(ys)
    raw, calibrated = _binned_error(np.concatenate(ss), y), _binned_error(np.concatenate(ps), y)
    assert raw > 0.2 and calibrated < 0.02, (raw, calibrated)


def test_one_vs_one_couples_the_pairwise_predictors(rng):
    """Three classes: each class's probability is 1 / (1/p_ij + 1/p_ik - 1) from its two pairs,
    before the row is divided by its sum."""
    P = rng.dirichlet(np.ones(3), 900)
    y = np.array([rng.choice(3, p=p) for p in P])
    m = VennAbersMultiClass("one_vs_one").fit(P[:600], y[:600])
    assert m.pairs_ == [(0, 1), (0, 2), (1, 2)]
    p0, p1 = m.predict_interval(P[600:])
    p = p1 / (1 - p0 + p1)  # P(j) in pair (i, j)
    q = np.column_stack([1 / (1 / (1 - p[:, 0]) + 1 / (1 - p[:, 1]) - 1),
                         1 / (1 / (1 - p[:, 2]) + 1 / p[:, 0] - 1),
                         1 / (1 / p[:, 1] + 1 / p[:, 2] - 1)])
    np.testing.assert_allclose(m.predict_proba(P[600:]), q / q.sum(axis=1, keepdims=True), rtol=1e-12)
    pair = VennAbers().fit(P[:600][y[:600] != 2][:, 1] / P[:600][y[:600] != 2][:, :2].sum(axis=1),
                           y[:600][y[:600] != 2] == 1)
    np.testing.assert_array_equal(pair.predict_interval(P[600:, 1] / P[600:, :2].sum(axis=1)),
                                  np.column_stack([p0[:, 0], p1[:, 0]]))


def test_multiclass_rows_sum_to_one_and_each_class_is_its_binary_predictor(rng):
    P = rng.dirichlet(np.full(4, 0.5), 600)
    y = np.array([rng.choice(4, p=p) for p in P])
    m = VennAbersMultiClass().fit(P[:300], y[:300])
    Q = m.predict_proba(P[300:], block_rows=7)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0)
    p = VennAbers().fit(P[:300, 2], y[:300] == 2).predict_proba(P[300:, 2])[:, 1]
    p0, p1 = m.predict_interval(P[300:])
    np.testing.assert_allclose(p1[:, 2] / (1 - p0[:, 2] + p1[:, 2]), p)


def test_calibrate_parts_with_venn_abers():
    rng = np.random.default_rng(1)
    K, n = 5, 3000
    Z = rng.standard_normal((n, K)) * 3
    P = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=np.sqrt(p) / np.sqrt(p).sum()) for p in P])  # over-confident P
    parts = {"validation": slice(0, 1000), "calibration": slice(1000, 1500), "test": slice(1500, n)}
    scores = {k: P[v] for k, v in parts.items()}
    labels = {k: y[v] for k, v in parts.items()}
    probs, record = calibrate_parts(scores, labels, outputs="probabilities", method="venn_abers")
    assert "venn_abers" in CALIBRATION_METHODS
    assert record["method"] == "venn_abers" and record["temperature"] == 1.0 and record["fitted_on"] == "validation"
    assert probs["test"].dtype == np.float32
    np.testing.assert_allclose(probs["test"].sum(axis=1), 1.0, rtol=1e-5)
    assert record["test"]["after"]["ece"] < 0.5 * record["test"]["before"]["ece"]
    with pytest.raises(ValueError, match="venn_abers is fitted on the validation rows, and there are none"):
        calibrate_parts({"test": P}, {"test": y}, outputs="probabilities", method="venn_abers")


@pytest.mark.parametrize("call, match", [
    (lambda: VennAbers().fit([0.1, 0.2], [0, 2]), "binary labels 0 and 1"),
    (lambda: VennAbers().fit([0.1, np.nan], [0, 1]), "scores holds NaN"),
    (lambda: VennAbers().fit([0.1, 0.2], [0]), "one label per score"),
    (lambda: VennAbers().predict_proba([0.1]), "not fitted"),
    (lambda: VennAbersMultiClass("ovo"), "strategy must be one of one_vs_rest, one_vs_one"),
    (lambda: VennAbersMultiClass("one_vs_one").fit(np.ones((3, 3)) / 3, [0, 0, 0]), "classes 1 and 2 have no"),
    (lambda: VennAbersMultiClass().fit(np.ones((3, 2)), [0, 1, 2]), "y"),
    (lambda: VennAbersMultiClass().fit(np.ones((3, 2)) / 2, [0, 1, 1]).predict_proba(np.ones((2, 3))),
     r"shape \(n, 2\)"),
])
def test_refusals(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_equals_the_venn_abers_package(rng):
    """calc_p0p1 (the package's Vovk-Petej-Fedorova implementation) bit for bit, ties included, and
    the one-vs-rest multi-class probabilities of predict_proba_prefitted_va."""
    anchors.venn_abers()
    from venn_abers.venn_abers import calc_p0p1, predict_proba_prefitted_va

    for trial in range(60):
        n = int(rng.integers(1, 200))
        s = rng.random(n)
        if trial % 3 == 0:
            s = np.round(s, 1)  # ties
        y = (rng.random(n) < s).astype(int)
        p0, p1, c = calc_p0p1(np.column_stack([1 - s, s]), y)
        ours = venn_abers_table(s, y)
        np.testing.assert_array_equal(ours[0], c)
        np.testing.assert_array_equal(ours[1], p0[:, 1])
        np.testing.assert_array_equal(ours[2], p1[:, 1])
    K, n = 6, 2000
    P = rng.dirichlet(np.full(K, 0.4), 2 * n)
    y = np.array([rng.choice(K, p=p) for p in P])
    theirs, _ = predict_proba_prefitted_va(P[:n], y[:n], P[n:], va_tpe="one_vs_rest")
    np.testing.assert_array_equal(VennAbersMultiClass().fit(P[:n], y[:n]).predict_proba(P[n:]), theirs)
    # the package's default: one binary predictor per pair of classes, coupled
    theirs, _ = predict_proba_prefitted_va(P[:n], y[:n], P[n:], va_tpe="one_vs_one")
    np.testing.assert_array_equal(VennAbersMultiClass("one_vs_one").fit(P[:n], y[:n]).predict_proba(P[n:]), theirs)


def test_p1_above_every_calibration_score_is_1_where_mapies_port_drops_it():
    """Issue 58: a test score above every calibration score, labelled 1, is a block of its own in the
    isotonic fit: p1 = 1 (the paper, the venn-abers package: ``p1[-1, 1] = 1``).  MAPIE's port of
    calc_p0p1 (mapie._venn_abers) leaves the last slope there: 0.75 on this known answer, the
    other entries equal."""
    s, y = np.array([0.2, 0.4, 0.6, 0.8]), np.array([0, 1, 1, 0])
    c, p0, p1 = venn_abers_table(s, y)
    assert p1[-1] == 1.0 == _isotonic_at(s, y, 0.9, 1)
    np.testing.assert_allclose(p1, [0.5, 0.75, 0.75, 0.75, 1.0])
    port = pytest.importorskip("mapie._venn_abers", reason="MAPIE (optional) is the anchor of this difference")
    with np.errstate(divide="ignore", invalid="ignore"):
        q0, q1, qc = port.calc_p0p1(np.stack([1 - s, s], axis=1), y)
    np.testing.assert_array_equal(qc, c)
    np.testing.assert_allclose(q0[:, 1], p0)
    np.testing.assert_allclose(q1[:-1, 1], p1[:-1])
    assert q1[-1, 1] == 0.75
