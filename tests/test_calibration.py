"""Temperature scaling and calibration metrics (svbop.calibration, issue 37): a synthetic problem whose
true probabilities are known, made over-confident (temperature 2.5), is recovered; ECE and NLL go down;
SVBOP-Full's sets move toward those of the true probabilities; known answers and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from svbop import predict_sets
from svbop.calibration import (
    TemperatureScaling,
    calibrate_parts,
    calibration_metrics,
    describe,
    expected_calibration_error,
    fit_temperature,
    negative_log_likelihood,
    outputs_to_probabilities,
    reliability_curve,
)
from svbop.utilities import utility

#: the paper's four evaluation utilities (top-1 precision is unchanged by any temperature)
UTILITIES = ["credal:delta=1.6,gamma=0.6", "fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "fbeta:beta=5"]


def _problem(n, K=25, seed=0, scale=1.5):
    """True logits z (P_true = softmax z), labels drawn from P_true, and the model's logits 2.5 z."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, K)) * scale
    P = outputs_to_probabilities(z)
    y = (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return 2.5 * z, y, P


def _true_expected_utility(sets, P_true, spec):
    """The mean over rows of g(|Y|) P_true(Y|x): what the sets are worth under the true probabilities
    (no label noise: the Bayes-optimal sets of P_true maximise it)."""
    g = utility(spec).values(P_true.shape[1])
    return float(np.mean([g[len(s) - 1] * P_true[i, s].sum() for i, s in enumerate(sets.to_list())]))


def test_an_over_confident_model_gets_its_temperature_back():
    z_val, y_val, _ = _problem(5000, seed=1)
    T = fit_temperature(z_val, y_val)
    assert abs(T - 2.5) / 2.5 < 0.10, T


def test_calibration_lowers_ece_and_nll_and_moves_the_sets_toward_the_true_ones():
    z_val, y_val, _ = _problem(5000, seed=1)
    z_test, y_test, P_true = _problem(4000, seed=2)
    probs, record = calibrate_parts({"validation": z_val, "test": z_test}, {"validation": y_val, "test": y_test},
                                    outputs="logits", method="temperature", utilities=UTILITIES)
    before, after = record["test"]["before"], record["test"]["after"]
    assert after["ece"] < before["ece"] / 3 and after["nll"] < before["nll"]
    assert record["validation"]["after"]["nll"] < record["validation"]["before"]["nll"]
    P_before = outputs_to_probabilities(z_test)
    for spec in UTILITIES:
        best = _true_expected_utility(predict_sets(P_true, spec), P_true, spec)
        u_before = _true_expected_utility(predict_sets(P_before, spec), P_true, spec)
        u_after = _true_expected_utility(predict_sets(probs["test"], spec), P_true, spec)
        assert u_before <= best + 1e-12 and u_after <= best + 1e-12
        assert best - u_after < best - u_before, (spec, best, u_before, u_after)
    # the record's sets: the over-confident model's sets were too small
    for entry in record["sets"]:
        assert entry["after"]["mean_size"] >= entry["before"]["mean_size"]


def test_the_log_line_states_the_test_rows_ece_and_nll_before_and_after():
    z_val, y_val, _ = _problem(500, seed=5)
    z_test, y_test, _ = _problem(500, seed=6)
    _, record = calibrate_parts({"validation": z_val, "test": z_test}, {"validation": y_val, "test": y_test})
    before, after = record["test"]["before"], record["test"]["after"]
    line = describe(record)
    assert "nan" not in line
    assert f"test ECE {before['ece']:.4f} -> {after['ece']:.4f}, NLL {before['nll']:.4f} -> {after['nll']:.4f}" in line


def test_probabilities_are_calibrated_on_their_logarithms_as_the_logits_would_be():
    z, y, _ = _problem(3000, seed=3)
    P = outputs_to_probabilities(z)
    assert fit_temperature(P, y, outputs="probabilities") == pytest.approx(fit_temperature(z, y), rel=1e-4)
    ts = TemperatureScaling("probabilities").fit(P, y)
    np.testing.assert_allclose(ts.transform(P), outputs_to_probabilities(z, temperature=ts.temperature_), atol=1e-9)


def test_a_temperature_never_changes_the_order_of_the_classes():
    z, _, _ = _problem(200, seed=4)
    for T in (0.3, 1.0, 7.0):
        P = outputs_to_probabilities(z, temperature=T)
        np.testing.assert_array_equal(np.argsort(-P, axis=1, kind="stable")[:, :5], np.argsort(-z, axis=1, kind="stable")[:, :5])


def test_ece_known_answer_with_equal_mass_bins():
    # four rows, two bins of two rows by confidence: {0.6, 0.7} right once, {0.8, 0.9} right twice
    P = np.array([[0.6, 0.4], [0.7, 0.3], [0.8, 0.2], [0.9, 0.1]])
    y = np.array([0, 1, 0, 0])
    curve = reliability_curve(P, y, n_bins=2)
    assert curve["count"] == [2, 2]
    np.testing.assert_allclose(curve["confidence"], [0.65, 0.85])
    np.testing.assert_allclose(curve["accuracy"], [0.5, 1.0])
    assert expected_calibration_error(P, y, n_bins=2) == pytest.approx(0.5 * 0.15 + 0.5 * 0.15)
    assert negative_log_likelihood(P, y) == pytest.approx(-np.mean(np.log([0.6, 0.3, 0.8, 0.9])))
    assert calibration_metrics(P, y, 2)["top1_pct"] == pytest.approx(75.0)


def test_calibrate_none_keeps_the_probabilities_and_still_measures_them():
    z, y, _ = _problem(500, seed=5)
    probs, record = calibrate_parts({"validation": z[:200], "test": z[200:]}, {"validation": y[:200], "test": y[200:]},
                                    method="none", utilities=["fbeta:beta=1"], dtype=np.float64)
    assert record["temperature"] == 1.0
    np.testing.assert_allclose(probs["test"], outputs_to_probabilities(z[200:]))
    assert record["test"]["before"] == record["test"]["after"]
    assert record["sets"][0]["before"] == record["sets"][0]["after"]


@pytest.mark.parametrize("call, message", [
    (lambda: fit_temperature(np.array([[0.0, np.nan]]), [0]), "scores: non-finite logits"),
    (lambda: fit_temperature(np.zeros((3, 2)), [0, 1, 2]), "y[2] = 2 is not a class index in 0..1"),
    (lambda: fit_temperature(np.zeros((0, 2)), []), "scores: no rows to fit a temperature on"),
    (lambda: fit_temperature(np.zeros((2, 2)), [0]), "y has 1 labels but there are 2 samples"),
    (lambda: outputs_to_probabilities(np.zeros((2, 2)), temperature=0), "temperature: expected a finite number > 0"),
    (lambda: outputs_to_probabilities(np.zeros((2, 2)), outputs="scores"), "outputs: expected 'logits' or 'probabilities'"),
    (lambda: calibrate_parts({"test": np.zeros((2, 2))}, {"test": [0, 1]}), "calibrate: temperature is fitted on the validation rows"),
    (lambda: calibrate_parts({"test": np.zeros((2, 2))}, {"test": [0, 1]}, method="isotonic"), "calibrate: expected one of none, temperature"),
])
def test_refusals_name_the_argument(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_rows_all_classified_right_keep_temperature_one_and_say_why():
    z, y, _ = _problem(300, seed=6)
    y = z.argmax(axis=1)  # every top class right: the NLL has no minimiser, sharpening only overfits
    ts = TemperatureScaling().fit(z, y)
    assert ts.temperature_ == 1.0 and ts.skipped_.startswith("every validation row's top class is its label")
    _, record = calibrate_parts({"validation": z, "test": z}, {"validation": y, "test": y})
    assert record["temperature"] == 1.0 and record["not_fitted"] == ts.skipped_


def test_logits_of_magnitude_1e308_give_finite_probabilities_at_every_temperature():
    """Issue 44: finite logits of 1e308 overflowed z / T and z - max z: NaN likelihood, T = 0.337 and NaN
    probabilities in every row.  Now the curve is finite, the fit lands at the upper bound (the gaps are
    1e308: only the softest temperature is right about the wrong rows) and every row is a distribution."""
    import warnings

    z = np.array([[1e308, -1e308, 0.0], [0.0, 1e308, -1e308], [-1e308, 0.0, 1e308], [1e308, 0.0, 0.0]])
    y = [0, 0, 2, 1]  # two rows wrong: not separable, so a temperature is fitted
    expected = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or invalid-value warning escapes either
        T = fit_temperature(z, y)
        assert T == pytest.approx(100.0, rel=1e-3)
        for t in (T, 0.5, 0.01, 1.0, 1e-300):
            np.testing.assert_array_equal(outputs_to_probabilities(z, temperature=t), expected)
        ts = TemperatureScaling().fit(z, y)
        assert np.isfinite(ts.transform(z)).all()


def test_the_fitted_temperature_scales_with_the_logits_up_to_the_largest_double():
    """softmax(a z / (a T)) = softmax(z / T): logits scaled by 2**1000 (the scaled path) give the
    temperature of the unscaled ones (the plain path) times 2**1000, with the bounds scaled alike."""
    z, y, _ = _problem(300, K=6, seed=3)
    a = 2.0**1000
    t1 = fit_temperature(z, y)
    t2 = fit_temperature(z * a, y, bounds=(0.01 * a, 100.0 * a))
    assert 1.1 < t1 < 10
    assert t2 / a == pytest.approx(t1, rel=1e-4)
    np.testing.assert_allclose(outputs_to_probabilities(z * a, temperature=t1 * a), outputs_to_probabilities(z, temperature=t1),
                               rtol=1e-12, atol=1e-300)


def test_calibration_metrics_of_no_rows_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^P: no rows \(calibration metrics need at least one labelled row\)$"):
        calibration_metrics(np.zeros((0, 3)), np.zeros(0, dtype=np.int64))
