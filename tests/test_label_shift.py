"""Conformal sets under label shift (issue 55, item 4): the class weights estimated by BBSE and EM,
the weighted calibration of Podkopaev and Ramdas (2021) against its definition, the coverage it
restores on real outputs whose class frequencies move toward the classes the model gets wrong, and
the refusals."""

import math

import numpy as np
import pytest

from digits_outputs import digits_outputs
from svbop.conformal import ConformalSetPredictor, estimate_label_shift
from svbop.conformal.label_shift import label_shift_thresholds

EPS = 0.1


def _shifted_split(seed, w_true, n_cal=750, n_test=2000):
    """Calibration rows drawn from the real outputs as they are; test rows drawn from the other rows
    with class frequencies ``q = p w_true`` (a class, then one of its rows)."""
    P, y = digits_outputs()
    K = P.shape[1]
    rng = np.random.default_rng(seed)
    order = rng.permutation(y.size)
    cal, rest = order[:n_cal], order[n_cal:]
    p = np.bincount(y, minlength=K) / y.size
    q = p * w_true
    classes = rng.choice(K, size=n_test, p=q / q.sum())
    by_class = [rest[y[rest] == c] for c in range(K)]
    rows = np.array([by_class[c][rng.integers(by_class[c].size)] for c in classes])
    return P[cal], y[cal], P[rows], y[rows]


def _toward_errors():
    """``w(y)`` proportional to the squared error rate of class ``y`` (0.07 for the 6s, 4.1 for the 9s)."""
    P, y = digits_outputs()
    K = P.shape[1]
    acc = np.array([(P.argmax(axis=1) == y)[y == c].mean() for c in range(K)])
    p = np.bincount(y, minlength=K) / y.size
    w = (1 - acc) ** 2
    return w / (p @ w)


def test_label_shift_sets_restore_coverage_on_real_outputs():
    """Over 60 seeded splits of the digits' outputs (750 calibration rows, 2,000 test rows shifted
    toward the classes the model gets wrong), unweighted LAC at eps = 0.1 covers about 0.84; with
    the true weights, with BBSE's and with EM's estimates, the mean coverage is >= 1 - eps - 0.015.
    The cost of estimating (measured here, 2026-11-29): coverage 0.894 with the true weights,
    0.895 with BBSE's, 0.889 with EM's, mean sizes 1.53, 1.53, 1.50."""
    w_true = _toward_errors()
    cov = {k: [] for k in ("plain", "true", "bbse", "em")}
    size = {k: [] for k in cov}
    for seed in range(60):
        P, y, Pt, yt = _shifted_split(seed, w_true)
        weights = {"plain": None, "true": w_true, "bbse": estimate_label_shift(P, y, Pt, "bbse"),
                   "em": estimate_label_shift(P, y, Pt, "em")}
        for key, w in weights.items():
            mask = ConformalSetPredictor(EPS).fit(P, y, class_weights=w).predict_mask(Pt)
            cov[key].append(mask[np.arange(yt.size), yt].mean())
            size[key].append(mask.sum(axis=1).mean())
    mean = {k: float(np.mean(v)) for k, v in cov.items()}
    assert mean["plain"] < 1 - EPS - 0.03, mean
    for key in ("true", "bbse", "em"):
        assert mean[key] >= 1 - EPS - 0.015, (key, mean)
    # estimated weights cost little: sizes within 5 % of the true weights' sets
    assert abs(np.mean(size["bbse"]) / np.mean(size["true"]) - 1) < 0.05
    assert abs(np.mean(size["em"]) / np.mean(size["true"]) - 1) < 0.05


@pytest.mark.parametrize("score", ["aps", "raps", "margin"])
def test_label_shift_coverage_other_scores(score):
    """The randomised APS, RAPS and margin scores under the same shift with the true weights: mean
    coverage over 30 splits >= 1 - eps - 0.015."""
    w_true = _toward_errors()
    kw = dict(lam=0.05) if score == "raps" else {}
    hits = []
    for seed in range(30):
        P, y, Pt, yt = _shifted_split(seed, w_true)
        m = ConformalSetPredictor(EPS, score=score, random_state=seed, **kw).fit(P, y, class_weights=w_true)
        hits.append(m.predict_mask(Pt)[np.arange(yt.size), yt].mean())
    assert np.mean(hits) >= 1 - EPS - 0.015, np.mean(hits)


def test_thresholds_equal_the_weighted_quantile_by_its_definition():
    """Each class's threshold against a direct reading of the weighted distribution
    ``sum_i w(y_i) delta_{s_i} + w(c) delta_inf``: the smallest ``s`` whose mass reaches 1 - eps."""
    rng = np.random.default_rng(3)
    K, n = 6, 57
    s = rng.random(n)
    y = rng.integers(0, K, n)
    y[:K] = np.arange(K)
    w = rng.random(K) * 3
    w[2] = 0.0
    Q = label_shift_thresholds(s, y, w, 0.9)
    for c in range(K):
        total = w[y].sum() + w[c]
        expect = math.inf
        for t in np.sort(s):
            if w[y][s <= t].sum() / total >= 0.9:
                expect = t
                break
        assert Q[c] == expect, c


def test_equal_weights_give_the_unweighted_sets_and_a_constant_cancels():
    P, y = digits_outputs()
    for score in ("lac", "aps"):
        plain = ConformalSetPredictor(EPS, score=score, random_state=1).fit(P[:700], y[:700])
        ones = ConformalSetPredictor(EPS, score=score, random_state=1).fit(P[:700], y[:700], class_weights=np.ones(10))
        np.testing.assert_array_equal(ones.quantiles_, np.full(10, plain.quantile_))
        np.testing.assert_array_equal(ones.predict_mask(P[700:]), plain.predict_mask(P[700:]))
        w = np.linspace(0.2, 3, 10)
        a = ConformalSetPredictor(EPS, score=score, random_state=1).fit(P[:700], y[:700], class_weights=w)
        b = ConformalSetPredictor(EPS, score=score, random_state=1).fit(P[:700], y[:700], class_weights=w * 2.0**40)
        np.testing.assert_array_equal(a.quantiles_, b.quantiles_)
        rows = np.arange(P.shape[0] - 700)
        np.testing.assert_array_equal(a.predict_mask(P[700:], row_seeds=rows), b.predict_mask(P[700:], row_seeds=rows))
        np.testing.assert_array_equal(a.predict(P[700:], row_seeds=rows).to_mask(),
                                      a.predict_mask(P[700:], row_seeds=rows))


def test_estimators_recover_known_weights():
    """Calibrated outputs (the posterior of a known mixture), 20,000 rows each side: BBSE and EM find
    the true ``q/p`` within 0.05, and weights 1 when nothing shifted."""
    rng = np.random.default_rng(5)
    K = 4
    means = np.arange(K) * 2.5

    def draw(prior, n):
        yy = rng.choice(K, size=n, p=prior)
        x = rng.standard_normal(n) + means[yy]
        logit = -0.5 * (x[:, None] - means) ** 2 + np.log(np.full(K, 1 / K))
        PP = np.exp(logit - logit.max(axis=1, keepdims=True))
        return PP / PP.sum(axis=1, keepdims=True), yy

    p = np.full(K, 0.25)
    q = np.array([0.5, 0.1, 0.1, 0.3])
    P, y = draw(p, 20000)
    Pt, _ = draw(q, 20000)
    p_hat = np.bincount(y, minlength=K) / y.size
    for method in ("bbse", "em"):
        w = estimate_label_shift(P, y, Pt, method)
        np.testing.assert_allclose(w, q / p_hat, atol=0.05)
        assert abs(p_hat @ w - 1) < 1e-9
        Pu, _ = draw(p, 20000)
        np.testing.assert_allclose(estimate_label_shift(P, y, Pu, method), p / p_hat, atol=0.05)


def test_bbse_clips_negative_solutions():
    """A test set of one predicted class makes the least-squares solution negative for some class:
    it is clipped to 0 and the rest rescaled so that sum p w = 1."""
    P = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.1, 0.2, 0.7], [0.6, 0.4, 0.0], [0.0, 0.1, 0.9]])
    y = np.array([0, 1, 2, 1, 2])
    Pt = np.tile([[0.9, 0.05, 0.05]], (4, 1))
    w = estimate_label_shift(P, y, Pt, "bbse")
    assert (w >= 0).all() and w.min() == 0
    p = np.bincount(y, minlength=3) / 5
    assert abs(p @ w - 1) < 1e-12


@pytest.mark.parametrize("call, message", [
    (lambda P, y: estimate_label_shift(P, np.where(y == 3, 4, y), P), "class 3 has no calibration rows"),
    (lambda P, y: estimate_label_shift(P, y, P, "kmm"), "method must be one of"),
    (lambda P, y: estimate_label_shift(P, y, P[:, :5]), "P_test has 5 classes"),
    (lambda P, y: estimate_label_shift(P, y, P[:0]), "P_test has no rows"),
    (lambda P, y: estimate_label_shift(P, y, P, "em", max_iter=0), "max_iter"),
    (lambda P, y: ConformalSetPredictor(EPS).fit(P, y, class_weights=-np.ones(10)), r"class_weights\[0\] = -1.0"),
    (lambda P, y: ConformalSetPredictor(EPS).fit(P, y, class_weights=np.r_[np.ones(9), np.inf]),
     r"class_weights\[9\] = inf"),
    (lambda P, y: ConformalSetPredictor(EPS).fit(P, y, class_weights=np.ones(9)), r"shape \(10,\)"),
    (lambda P, y: ConformalSetPredictor(EPS).fit(P, y, class_weights=np.zeros(10)), "weight 0"),
    (lambda P, y: ConformalSetPredictor(EPS, class_conditional=True).fit(P, y, class_weights=np.ones(10)),
     "marginal calibration"),
    (lambda P, y: ConformalSetPredictor(EPS, score="fbeta").fit(P, y, class_weights=np.ones(10)), "ranked scores"),
    (lambda P, y: ConformalSetPredictor(EPS).fit(P, y, groups=y % 2, class_weights=np.ones(10)),
     "cannot be combined with groups"),
    (lambda P, y: ConformalSetPredictor(EPS).fit(P, y, weights=np.ones(y.size), class_weights=np.ones(10)),
     "cannot be combined with weights"),
])
def test_refusals_are_one_line(call, message):
    P, y = digits_outputs()
    with pytest.raises(ValueError, match=message) as e:
        call(np.array(P), np.array(y))
    assert "\n" not in str(e.value)


def test_cli_predict_label_shift_gives_the_library_sets(tmp_path):
    """``svbop predict --method conformal --label-shift bbse`` (and ``--class-weights``): the sets of
    ``fit(class_weights=estimate_label_shift(...))``."""
    from svbop.cli import main
    from svbop.io import load_sets

    P, y, Pt, _ = _shifted_split(0, _toward_errors(), n_test=400)
    np.save(tmp_path / "cal.npy", P)
    np.savetxt(tmp_path / "cal.txt", y, fmt="%d")
    np.save(tmp_path / "test.npy", Pt)
    base = ["predict", str(tmp_path / "test.npy"), "-m", "conformal", "--epsilon", "0.1", "--calibration",
            str(tmp_path / "cal.npy"), "--calibration-labels", str(tmp_path / "cal.txt")]
    w = estimate_label_shift(P, y, Pt, "bbse")
    expect = ConformalSetPredictor(EPS, random_state=0).fit(P, y, class_weights=w).predict(Pt)
    assert main([*base, "--label-shift", "bbse", "-o", str(tmp_path / "a.npz")]) == 0
    np.savetxt(tmp_path / "w.txt", w, fmt="%.17g")
    assert main([*base, "--class-weights", str(tmp_path / "w.txt"), "-o", str(tmp_path / "b.npz")]) == 0
    for name in ("a.npz", "b.npz"):
        np.testing.assert_array_equal(load_sets(tmp_path / name).to_mask(), expect.to_mask())
    assert main([*base, "--label-shift", "bbse", "--class-weights", str(tmp_path / "w.txt"), "-o",
                 str(tmp_path / "c.npz")]) == 2


def test_report_config_label_shift_is_a_valid_workflow_config(tmp_path):
    from svbop._resources import workflow_root
    from svbop.config import check_config, load_yaml, merge_configs, validate_config
    from svbop.report.run import report_config

    for name in ("s.npy", "y.txt"):
        (tmp_path / name).write_text("0\n")
    config = report_config(test=(str(tmp_path / "s.npy"), str(tmp_path / "y.txt")), label_shift="em")
    assert config["methods"]["label_shift"] == {"estimator": "em", "scores": ["lac", "aps"]}
    check_config(validate_config(merge_configs(load_yaml(workflow_root() / "config.yaml"), config)))
    assert "label_shift" not in report_config(test=(str(tmp_path / "s.npy"), str(tmp_path / "y.txt")))["methods"]


def test_page_block_shows_estimated_beside_calibration_frequencies():
    """The promises block of the page: the label-shift methods' test coverage and the table of class
    frequencies (calibration, estimated, the test rows' own), from the records the pipeline writes."""
    import jinja2

    from svbop.evaluation import check_promise, label_shift_record
    from svbop.report.names import DisplayNames
    from svbop.report.promises import promises_context

    P, y, Pt, yt = _shifted_split(1, _toward_errors())
    w = estimate_label_shift(P, y, Pt, "bbse")
    model = ConformalSetPredictor(EPS).fit(P, y, class_weights=w)
    record = label_shift_record(method="label_shift_lac", epsilon=EPS, y_cal=y, estimator="bbse", class_weights=w,
                                quantiles=model.quantiles_)
    checked = check_promise(record, model.predict(Pt), yt)
    assert checked["coverage_pct"] == pytest.approx(100 * model.predict_mask(Pt)[np.arange(yt.size), yt].mean())
    promise = {"method": "label_shift_lac", "param": "0.1", "promise": "label_shift", **checked,
               **{k: record[k] for k in ("estimator", "weights", "calibration_freq", "estimated_test_freq")}}
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"dataset": "digits", "n_test": int(yt.size), "promises": [promise]}, f)
    ctx = promises_context({"digits": f.name}, DisplayNames({"digits": "Digits"}), ["digits"])
    freq = ctx[0]["frequencies"]
    assert freq["estimator"] == "BBSE" and len(freq["rows"]) == 10
    p = np.bincount(y, minlength=10) / y.size
    assert freq["rows"][9]["calibration"] == f"{100 * p[9]:.2f}"
    assert freq["rows"][9]["estimated"] == f"{100 * record['estimated_test_freq'][9]:.2f}"
    assert freq["rows"][9]["observed"] == f"{100 * np.mean(yt == 9):.2f}"
    from pathlib import Path

    templates = Path(__file__).resolve().parents[1] / "report" / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    html = env.get_template("promises.html.j2").render(model={"promises": ctx})
    assert 'class="label-shift-frequencies"' in html and "estimated test" in html and "Label-shift" in html


def test_label_shift_methods_are_known_to_the_pages_table():
    """The pipeline's method names ``label_shift_<score>`` are rows of the table beyond the paper, with
    the coverage they promise (a name outside it failed the workflow's evaluate_beyond)."""
    from svbop.evaluation import beyond_method, target_coverage_pct
    from svbop.report.beyond import method_family
    from svbop.report.names import DisplayNames

    for name in ("label_shift_lac", "label_shift_aps", "label_shift_raps_deterministic"):
        assert beyond_method(name) and method_family(name) == "label_shift"
        assert target_coverage_pct(name, "0.1") == pytest.approx(90.0)
        assert DisplayNames({}).method(name, "0.1").startswith("Label-shift ")
    assert not beyond_method("label_shift_fbeta")
