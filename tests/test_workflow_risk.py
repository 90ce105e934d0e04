"""Conformal risk control in the pipeline (config `methods.risk_control`, issue 48 item 8): the schema and
svbop.config's one-line errors, the planned jobs, and a tiny real run whose beyond.tsv checks each
promise (mean loss <= alpha) on the test rows."""

from __future__ import annotations

import re

import pytest
from test_workflow import ROOT, _copy_workflow, _planned_rules, _read_tsv, _snakemake

from svbop.config import ConfigError, check_config, load_yaml, merge_configs, validate_config

BASE = load_yaml(ROOT / "config.yaml")

TINY = """
run: [digits, synthetic]
utilities: ["fbeta:beta=1"]
utility_table: {K: [10]}
report:
  illustrations:
    entropy: {dataset: null}
    image_top: {dataset: null}
    text_top: {dataset: null}
methods:
  epsilon: [0.1]
  risk_control:
    losses: [miscoverage, hierarchical]
    scores: [lac, aps]
datasets:
  digits:
    features: {kind: raw}
  synthetic:
    title: "Tiny synthetic"
    source:
      synthetic: {n_classes: 12, branching: [3, 4], n_samples: 900, n_features: 500}
    split: {validation: 0.1, calibration: 0.3, test: 0.3}
    features: {kind: tfidf}
    flat: {C: 10.0}
"""


def _checked(methods: dict):
    config = validate_config(merge_configs(BASE, {"methods": methods}))
    check_config(config, datasets=[])
    return config


def test_the_schema_and_the_checks():
    config = _checked({"epsilon": [0.1], "risk_control": {"losses": ["class_cost"], "scores": ["aps"],
                                                          "cost": [1, 2, 3]}})
    assert config["methods"]["risk_control"]["cost"] == [1, 2, 3]
    assert validate_config(merge_configs(BASE, {}))["methods"]["risk_control"] == {"losses": [], "scores": ["lac"],
                                                                                  "cost": None}
    for methods, message in [
        ({"risk_control": {"losses": ["class_cost"]}},
         "config: methods.risk_control.cost: missing: losses has class_cost"),
        ({"risk_control": {"losses": ["miscoverage"], "cost": [1, 2]}}, "config: methods.risk_control.cost: given but"),
        ({"epsilon": [0.5], "risk_control": {"losses": ["class_cost"], "cost": [0.2, 0.5]}},
         "config: methods.risk_control.cost: the largest cost 0.5 (the loss's bound B) must exceed every level"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            _checked(methods)
    with pytest.raises(ConfigError, match="methods.risk_control.losses"):
        validate_config(merge_configs(BASE, {"methods": {"risk_control": {"losses": ["f1"]}}}))


def test_the_jobs_are_planned(tmp_path):
    workdir = _copy_workflow(tmp_path)
    (workdir / "tiny.yaml").write_text(TINY)
    assert {"predict_risk", "evaluate_beyond"} <= _planned_rules(workdir)


@pytest.mark.slow
def test_a_real_run_checks_each_promise_on_the_test_rows(tmp_path):
    workdir = _copy_workflow(tmp_path)
    (workdir / "tiny.yaml").write_text(TINY)
    result = _snakemake("--cores", "2", "--configfile", "tiny.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    digits = {r["method"]: r for r in _read_tsv(workdir / "results/digits/beyond.tsv")}
    synthetic = {r["method"]: r for r in _read_tsv(workdir / "results/synthetic/beyond.tsv")}
    assert "risk_hierarchical_lac" not in digits  # no hierarchy: skipped, and said
    for rows, methods in ((digits, ["risk_miscoverage_lac", "risk_miscoverage_aps"]),
                          (synthetic, ["risk_miscoverage_lac", "risk_hierarchical_lac", "risk_hierarchical_aps"])):
        for m in methods:
            row = rows[m]
            assert float(row["target_risk"]) == 0.1
            assert 0 <= float(row["test_risk"]) <= 0.1 + 0.08  # one split of a few hundred test rows
            assert row["calibrated"].startswith("lambda = ")
    assert float(digits["risk_miscoverage_lac"]["target_coverage_pct"]) == 90.0
    html = (workdir / "results/report.html").read_text()
    section = re.search(r'<section id="beyond"[^>]*>.*?</section>', html, re.S).group(0)
    assert "Risk control, hierarchical, APS" in section
    assert re.search(r"promise E\[loss\] (&lt;|<)= 0\.1: mean loss on the test rows 0\.\d{4}", section)
    assert 'data-skipped="risk_hierarchical"' in section  # digits: no hierarchy, said under its table


# --- the library side (no Snakemake) ---


def test_method_names_records_and_the_promise_checked(tmp_path):
    import json

    import numpy as np

    from svbop.conformal import RiskControlSetPredictor
    from svbop.conformal.methods import risk_method
    from svbop.evaluation import beyond_method, read_calibration, risk_record, target_coverage_pct, test_risk
    from svbop.report.beyond import method_family
    from svbop.report.names import method_name

    assert risk_method("risk_class_cost_aps") == {"loss": "class_cost", "score": "aps"}
    with pytest.raises(ValueError, match="unknown risk-control method"):
        risk_method("risk_f1_lac")
    assert beyond_method("risk_hierarchical_margin") and not beyond_method("risk_f1_lac")
    assert method_family("risk_miscoverage_lac") == "risk"
    assert method_name("risk_class_cost_aps", "0.10") == "Risk control, class cost, APS_{α=0.10}"
    assert target_coverage_pct("risk_miscoverage_lac", "0.10") == 90.0
    assert np.isnan(target_coverage_pct("risk_class_cost_lac", "0.10"))
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(4), size=300)
    y = rng.integers(0, 4, 300)
    cost = [1.0, 2.0, 1.0, 1.0]
    crc = RiskControlSetPredictor(0.3, "class_cost", cost=cost).fit(P[:200], y[:200])
    record = risk_record(crc, method="risk_class_cost_lac", n_calibration=200)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    assert read_calibration(path)["calibrated"].startswith("lambda = ")
    sets = crc.predict(P[200:])
    checked = test_risk(json.loads(path.read_text()), sets, y[200:])
    mask = sets.to_mask()
    expected = np.where(mask[np.arange(100), y[200:]], 0.0, np.array(cost)[y[200:]]).mean()
    assert checked == {"target_risk": 0.3, "test_risk": expected}
