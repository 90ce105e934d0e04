"""Issue 57, the model's page as a practitioner reads it: what has no other home.

* Deterministic APS calibrated with the top class in every set (``calibrate_top1=True``): the score the sets are
  built with, so that coverage is close to ``1 - epsilon`` where TorchCP's rule (the plain score, ``False``)
  over-covers; the pipeline's ``conformal_aps_top1`` and its name on the page.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from svbop import ConformalSetPredictor
from svbop.conformal.methods import conformal_method
from svbop.evaluation import beyond_method
from svbop.report.names import method_name


def _overconfident(seed: int, n: int, K: int = 50):
    """A confident, overconfident model: most rows' top probability is above any sensible APS threshold."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    logits = rng.normal(size=(n, K))
    logits[np.arange(n), y] += 2.5
    logits *= 3.0
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True), y


def _brute_force_q(P, y, epsilon):
    """The k-th smallest of the scores the sets are built with: 0 for a row's top class (ties by class index),
    the mass ranked at or before the label otherwise."""
    order = np.argsort(-P, axis=1, kind="stable")
    rank = np.argmax(order == y[:, None], axis=1)
    cum = np.cumsum(np.take_along_axis(P, order, axis=1), axis=1)
    s = np.where(rank == 0, 0.0, cum[np.arange(y.size), rank])
    k = math.ceil((y.size + 1) * (1 - epsilon))
    return np.sort(s)[k - 1]


def test_aps_calibrated_with_the_top_class_covers_close_to_the_level_where_torchcps_rule_over_covers():
    """Over 40 seeded splits at epsilon = 0.1: the calibrated sets cover 1 - epsilon on average (no less than
    three standard errors below it, at most two points above); the plain score's sets (TorchCP's rule) cover far
    more, with twice the classes."""
    eps, cover_top1, cover_plain, size_top1, size_plain = 0.1, [], [], [], []
    for seed in range(40):
        P, y = _overconfident(seed, 1000)
        cal, test = slice(0, 500), slice(500, None)
        top1 = ConformalSetPredictor(eps, score="aps", randomized=False, calibrate_top1=True).fit(P[cal], y[cal])
        plain = ConformalSetPredictor(eps, score="aps", randomized=False).fit(P[cal], y[cal])
        assert top1.quantile_ == pytest.approx(_brute_force_q(P[cal], y[cal], eps), abs=1e-12)
        for model, cover, size in ((top1, cover_top1, size_top1), (plain, cover_plain, size_plain)):
            sets = model.predict(P[test])
            cover.append(sets.contains(y[test]).mean())
            size.append(sets.sizes.mean())
    se = np.std(cover_top1) / np.sqrt(len(cover_top1))  # the guarantee is on the mean over splits
    assert 0.9 - 3 * se <= np.mean(cover_top1) <= 0.92, (np.mean(cover_top1), se)
    assert np.mean(cover_plain) > 0.95, np.mean(cover_plain)  # the fault the option removes
    assert np.mean(size_top1) < 0.5 * np.mean(size_plain)


def test_the_calibrated_sets_are_the_plain_rule_at_the_same_threshold():
    """Only the calibration changes: at a given q, the sets are {c : cum(c) <= q} with the top class added."""
    P, y = _overconfident(7, 800, K=20)
    top1 = ConformalSetPredictor(0.1, score="aps", randomized=False, calibrate_top1=True).fit(P[:400], y[:400])
    mask = top1.predict_mask(P[400:])
    order = np.argsort(-P[400:], axis=1, kind="stable")
    cum = np.cumsum(np.take_along_axis(P[400:], order, axis=1), axis=1)
    keep = cum <= top1.quantile_ * (1 + 1e-9)
    keep[:, 0] = True
    expected = np.zeros_like(mask)
    np.put_along_axis(expected, order, keep, axis=1)
    assert np.array_equal(mask, expected)


@pytest.mark.parametrize("kwargs", [
    {"score": "aps"},  # randomised by default
    {"score": "aps", "randomized": False, "class_conditional": True},
    {"score": "aps", "randomized": False, "empty": "keep"},
    {"score": "lac"},
    {"score": "aps", "randomized": False, "calibrate_top1": 1},
])
def test_calibrate_top1_is_refused_where_the_top_class_is_not_in_every_set(kwargs):
    kwargs = {"calibrate_top1": True, **kwargs}
    with pytest.raises(ValueError, match="calibrate_top1") as info:
        ConformalSetPredictor(0.1, **kwargs)
    assert "\n" not in str(info.value)


def test_the_pipelines_aps_top1_is_the_calibrated_variant_and_named_deterministic():
    methods = {"raps": {"k_reg": 2, "lam": 0.01}}
    got = conformal_method("aps_top1", methods, 0)
    assert got["score"] == "aps" and got["options"] == {"calibrate_top1": True, "randomized": False}
    assert conformal_method("aps_deterministic", methods, 0)["options"] == {"randomized": False}  # TorchCP's rule
    assert conformal_method("raps_top1", methods, 0)["options"]["calibrate_top1"] is True
    with pytest.raises(ValueError, match="aps_top1_cc"):
        conformal_method("aps_top1_cc", methods, 0)
    assert beyond_method("conformal_aps_top1")
    assert method_name("conformal_aps_top1", "0.10") == "APS (deterministic, top class kept)_{ε=0.10}"
    assert method_name("conformal_aps", "0.10") == "APS_{ε=0.10}"


def test_a_method_that_cannot_be_reached_says_what_the_command_line_can_do():
    """Item 6: svbop report's page names its options, never the library's arguments; the paper's page keeps
    the library's text (its users write configs and code)."""
    from svbop.report.html import _calibrated_text

    library = ("not reachable: score='credal' with gamma=1.2: even the largest credal sets (delta = gamma) contain "
               "the label of fewer than 271 of the 300 calibration rows needed for epsilon=0.1; use score='fbeta' or "
               "a larger epsilon")
    text = _calibrated_text(library, paper=False)
    assert "score=" not in text and "gamma=" not in text and "--epsilon" in text and "\n" not in text
    assert _calibrated_text(library, paper=True) == library
    few = "not reachable: score='credal': 5 calibration rows are too few for epsilon=0.01 (the quantile is infinite)"
    assert "--calibration" in _calibrated_text(few, paper=False)


def test_the_default_title_names_the_scores_file_not_model(tmp_path):
    """Item 9: "Set-valued predictions of model" said nothing; without --name or --title the page is titled by
    the test scores' file."""
    from svbop.report.run import report_config

    rng = np.random.default_rng(0)
    for name in ("resnet20_test_logits.npy", "t.npy"):
        np.save(tmp_path / name, rng.normal(size=(40, 3)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, 40))
    config = report_config(test=[str(tmp_path / "resnet20_test_logits.npy"), str(tmp_path / "y.npy")])
    assert config["report"]["title"] == "Set-valued predictions of resnet20_test_logits.npy"
    named = report_config(test=[str(tmp_path / "t.npy"), str(tmp_path / "y.npy")], name="resnet20")
    assert named["report"]["title"] == "Set-valued predictions of resnet20"


def test_uncalibrated_input_says_so_what_it_costs_and_how_to_calibrate():
    """Item 7: with --calibrate none there is no before and after; the page says the input was not calibrated,
    its ECE, the utility under which a set built for another utility beats SVBOP-Full, and the option to use."""
    from pathlib import Path

    import jinja2
    import pandas as pd

    from svbop.report.html import _uncalibrated_costs

    frame = pd.DataFrame({"dataset": ["m"] * 3, "method": ["svbop_full", "svbop_full", "icp"],
                          "param": ["fbeta_1", "fbeta_5", "0.10"],
                          "fbeta_1_pct": [76.19, 76.66, 70.0], "fbeta_5_pct": [80.0, 85.0, 60.0]})
    costs = _uncalibrated_costs(frame, "m", ["fbeta_1", "fbeta_5"])
    assert [(str(c["utility"]), c["value"], c["own"]) for c in costs] == [("u<sub>F1</sub>", "76.66", "76.19")]
    d = {"id": "m", "title": "model m", "model_outputs": True, "not_fitted": "", "method": "none", "temperature": "1",
         "at_bound": False, "outputs": "probabilities", "origin": {}, "sets": [], "calibrated": False,
         "test_ece": "13.95", "costs": costs,
         "metrics": [{"part": "test", "rows": 5000, "nll": ("1.2", "1.2"), "ece": ("13.95", "13.95"), "top1": "70"}]}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parents[1] / "report" /
                                                                 "templates")), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template("model/calibration.html.j2").render(calibration={"datasets": [d], "figure": "x",
                                                                              "bins": 15})
    assert "not calibrated" in page and "13.95 %" in page and "--calibrate temperature" in page
    assert "76.66" in page and "76.19" in page
    assert "<th>NLL before</th>" not in page and "<th>ECE % after</th>" not in page
    assert "before and after calibration" not in page


def test_files_the_workflow_made_itself_are_recorded_without_a_warning(tmp_path, monkeypatch, caplog):
    """Item 9: the quickstart's six `path: results/...` files (its own outputs, read back as a model's) gave six
    "no checksum configured" warnings; a user's own file without a digest still warns."""
    import logging

    from svbop.download import fetch

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "p.npy").write_bytes(b"made by the workflow")
    (tmp_path / "mine.npy").write_bytes(b"the user's own")
    (tmp_path / "data").mkdir()
    with caplog.at_level(logging.INFO, logger="svbop"):
        fetch(tmp_path / "data" / "p.npy", path="results/p.npy", progress=False)
        fetch(tmp_path / "data" / "mine.npy", path=str(tmp_path / "mine.npy"), progress=False)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "mine.npy" in warned[0] and "no checksum configured" in warned[0], warned
    assert any("no checksum configured" in r.getMessage() and "p.npy" in r.getMessage() for r in caplog.records)
