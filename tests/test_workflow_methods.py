"""Methods beyond the paper in the pipeline (config `methods:`, issue 28): the schema's keys and their
one-line errors, off by default (the paper's experiment is unchanged), and a tiny real run whose
report has the section "Beyond the paper: every kind of set"."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_workflow import ROOT, _copy_workflow, _planned_rules, _read_tsv, _snakemake

from svbop.config import ConfigError, load_yaml, merge_configs, validate_config

BASE = load_yaml(ROOT / "config.yaml")
BEYOND_RULES = {"predict_conformal", "predict_coverage", "predict_hierarchical", "evaluate_beyond", "beyond_report"}

# A digits dataset on its raw pixels (no CNN, no hierarchy) and a tiny synthetic one with a hierarchy;
# no HSG or HF: only what the methods beyond the paper need.
TINY = """
run: [digits, synthetic]
utilities: ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2"]
utility_table: {K: [10]}
report:
  illustrations:
    entropy: {dataset: null}
    image_top: {dataset: null}
    text_top: {dataset: null}
methods:
  epsilon: [0.1]
  conformal: [aps, raps, topk]
  class_conditional: [lac]
  clustered: [lac]
  raps: {k_reg: 1, lam: 0.05}
  coverage: [fbeta, credal]
  hierarchical: {max_nodes: [1, 2], utilities: ["fbeta:beta=1"]}
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


def _error(extra: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(merge_configs(BASE, extra))
    message = str(info.value)
    assert "\n" not in message and message.startswith("config: ")
    return message


def test_every_method_beyond_the_paper_is_off_by_default():
    config = validate_config(merge_configs(BASE, {}))
    m = config["methods"]
    assert m["conformal"] == m["class_conditional"] == m["coverage"] == m["hierarchical"]["max_nodes"] == []
    assert m["epsilon"] is None  # the paper's ICP levels, baselines.icp_epsilon


def test_the_quickstart_turns_them_on():
    quick = validate_config(merge_configs(BASE, load_yaml(ROOT / "workflow/configs/quickstart.yaml")))["methods"]
    assert quick["conformal"] and quick["class_conditional"] and quick["coverage"] and quick["hierarchical"]["max_nodes"]


def test_the_schema_accepts_every_key():
    config = validate_config(merge_configs(BASE, {"methods": {
        "epsilon": [0.05, 0.2], "conformal": ["aps", "raps", "saps", "topk", "margin", "aps_deterministic"],
        "class_conditional": ["lac", "aps", "raps", "raps_deterministic"], "clustered": ["lac", "saps"],
        "saps": {"lam": 0.1},
        "raps": {"k_reg": 0, "lam": 0.2}, "empty": "keep", "coverage": ["fbeta", "credal"], "credal": {"gamma": 0.6},
        "hierarchical": {"max_nodes": [1, 3, 10], "utilities": ["fbeta:beta=2"]}}}))
    assert config["methods"]["raps"] == {"k_reg": 0, "lam": 0.2} and config["methods"]["credal"] == {"gamma": 0.6}


@pytest.mark.parametrize("methods, expected", [
    ({"conformal": ["lac"]}, "config: methods.conformal[0]: 'lac' is not one of 'aps', 'raps', 'saps', 'topk'"),
    ({"class_conditional": ["fbeta"]}, "config: methods.class_conditional[0]: 'fbeta' is not one of 'lac', 'aps', 'raps', 'saps'"),
    ({"clustered": ["credal"]}, "config: methods.clustered[0]: 'credal' is not one of 'lac', 'aps', 'raps', 'saps'"),
    ({"saps": {"lam": 0}}, "config: methods.saps.lam: expected a value > 0, got 0"),
    ({"coverage": ["exp"]}, "config: methods.coverage[0]: 'exp' is not one of 'fbeta', 'credal'"),
    ({"epsilon": [1.0]}, "config: methods.epsilon[0]: expected a value < 1, got 1.0"),
    ({"epsilon": []}, "config: methods.epsilon: [] should be non-empty"),
    ({"raps": {"lam": -0.1}}, "config: methods.raps.lam: expected a value >= 0, got -0.1"),
    ({"raps": {"k_reg": 1.5}}, "config: methods.raps.k_reg: expected integer, got 1.5"),
    ({"empty": "none"}, "config: methods.empty: 'none' is not one of 'top1', 'keep', None"),
    ({"credal": {"gamma": 0}}, "config: methods.credal.gamma: expected a value > 0, got 0"),
    ({"hierarchical": {"max_nodes": [0]}}, "config: methods.hierarchical.max_nodes[0]: expected a value >= 1, got 0"),
    ({"hierarchical": {"utilities": ["F1"]}}, "config: methods.hierarchical.utilities[0]: 'F1' does not have the expected form"),
    ({"hierarchical": {"depth": 2}}, "config: methods.hierarchical.depth: unknown key"),
    ({"aps": True}, "config: methods.aps: unknown key"),
])
def test_the_schema_refuses_a_bad_key_naming_it(methods, expected):
    message = _error({"methods": methods})
    assert message.startswith(expected), message


def test_an_unknown_hierarchical_utility_stops_the_workflow_naming_the_key(tmp_path):
    workdir = _copy_workflow(tmp_path)
    (workdir / "bad.yaml").write_text('methods: {hierarchical: {max_nodes: [1], utilities: ["fbetta:beta=1"]}}\n')
    result = _snakemake("-n", "--configfile", "bad.yaml", cwd=workdir)
    assert result.returncode != 0
    assert ("config: methods.hierarchical.utilities[0]: unknown utility 'fbetta' in spec 'fbetta:beta=1'; known: "
            in result.stdout + result.stderr)


def test_the_papers_config_plans_no_method_beyond_it(tmp_path):
    workdir = _copy_workflow(tmp_path)
    (workdir / "tiny.yaml").write_text(re.sub(r"\nmethods:\n(  .*\n)+", "\n", TINY))
    planned = _planned_rules(workdir)
    assert planned and not planned & BEYOND_RULES


@pytest.fixture(scope="module")
def beyond_run(tmp_path_factory):
    workdir = _copy_workflow(tmp_path_factory.mktemp("beyond"))
    (workdir / "tiny.yaml").write_text(TINY)
    result = _snakemake("--cores", "2", "--configfile", "tiny.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def test_the_run_evaluates_every_kind_of_set(beyond_run):
    for d, hierarchy in (("digits", False), ("synthetic", True)):
        rows = _read_tsv(beyond_run / f"results/{d}/beyond.tsv")
        keys = [(r["method"], r["param"]) for r in rows]
        expected = {("svbop_full", "fbeta_1"), ("threshold", "credal_2.2_1.2"), ("top_s", "3"), ("icp", "0.10"),
                    ("conformal_aps", "0.10"), ("conformal_raps", "0.10"), ("conformal_lac_cc", "0.10"),
                    ("conformal_topk", "0.10"), ("conformal_lac_clustered", "0.10"),
                    ("coverage_fbeta", "0.10"), ("coverage_credal", "0.10")}
        assert expected <= set(keys)
        hier = {k for k in keys if k[0].startswith("hierarchical_")}
        assert hier == ({("hierarchical_1", "fbeta_1"), ("hierarchical_2", "fbeta_1")} if hierarchy else set())
        for r in rows:
            if r["calibrated"].startswith("not reachable: "):  # a credal family short of 1 - epsilon: no numbers
                assert r["method"] == "coverage_credal" and r["coverage_pct"] == "nan"
                continue
            cover, worst, size = float(r["coverage_pct"]), float(r["class_coverage_worst_pct"]), float(r["mean_size"])
            assert 0 <= worst <= cover <= 100 and size >= 0
            if r["method"].startswith(("conformal_", "coverage_")):
                assert float(r["target_coverage_pct"]) == pytest.approx(90.0)
                assert r["calibrated"]
        # the paper's methods have the same numbers as in its Table 3 (metrics.tsv)
        metrics = {(r["method"], r["param"]): r for r in _read_tsv(beyond_run / f"results/{d}/metrics.tsv")}
        for r in rows:
            if (r["method"], r["param"]) in metrics:
                m = metrics[r["method"], r["param"]]
                assert float(r["coverage_pct"]) == pytest.approx(float(m["recall_pct"]))
                assert float(r["fbeta_1_pct"]) == pytest.approx(float(m["fbeta_1_pct"]))
    # the calibrated F-beta sets are the Bayes-optimal sets of the calibrated beta
    import json

    import svbop
    from svbop.io import load_score_arrays, load_sets

    record = json.loads((beyond_run / "results/synthetic/predictions/coverage_fbeta/0.10.json").read_text())
    (P,) = load_score_arrays(beyond_run / "results/synthetic/scores/flat.npz", "P_test")
    sets = load_sets(beyond_run / "results/synthetic/predictions/coverage_fbeta/0.10.npz")
    expected = svbop.predict_sets(P, f"fbeta:beta={record['parameter']!r}")
    assert np.array_equal(sets.indptr, expected.indptr) and np.array_equal(sets.indices, expected.indices)


def test_the_report_has_the_section_beyond_the_paper(beyond_run):
    html = (beyond_run / "results/report.html").read_text()
    section = re.search(r'<section id="beyond"[^>]*>.*?</section>', html, re.S)
    assert section, "no section beyond the paper"
    section = section.group(0)
    assert "Beyond the paper: every kind of set" in section
    for d in ("digits", "synthetic"):
        assert f'<table class="beyond" data-dataset="{d}">' in section
    assert re.search(r'<img src="data:image/png;base64,', section)
    # digits has no hierarchy: skipped, and said so under its table
    assert 'data-skipped="hierarchical"' in section and "no class hierarchy" in section
    assert section.count('data-skipped="hierarchical"') == 1
    # Tables 3 and 4 hold none of these methods
    for name in ("predictions", "algorithms"):
        other = re.search(rf'<section id="{name}"[^>]*>.*?</section>', html, re.S).group(0)
        assert not re.search(r'data-method="(conformal|coverage|hierarchical)_', other)
    assert (beyond_run / "results/tables/beyond_every_set.csv").is_file()
    assert (beyond_run / "results/figures/beyond_coverage_size.png").is_file()
    assert 'href="tables/beyond_every_set.csv"' in html


# --- the library side of the pipeline's methods beyond the paper (svbop.evaluation), no Snakemake ---


def _toy():
    import svbop

    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.ones(6) * 0.5, size=400)
    y = np.array([rng.choice(6, p=p) for p in P])
    return svbop, P, y


def test_evaluate_beyond_scores_every_kind_of_set():
    from svbop.evaluation import BEYOND_COLUMNS, evaluate_beyond
    from svbop.metrics import class_conditional_coverage, coverage

    svbop, P, y = _toy()
    sets = {("svbop_full", "fbeta_1"): svbop.predict_sets(P[200:], "fbeta:beta=1"),
            ("conformal_aps", "0.10"): svbop.ConformalSetPredictor(0.1, score="aps").fit(P[:200], y[:200]).predict(P[200:])}
    rows = evaluate_beyond(sets, y[200:], ["fbeta:beta=1"], dataset="toy", extra={("conformal_aps", "0.10"): {"calibrated": "q"}})
    assert [(r["method"], r["param"]) for r in rows] == list(sets)
    for r, s in zip(rows, sets.values()):
        assert list(r)[: len(BEYOND_COLUMNS)] == list(BEYOND_COLUMNS)
        assert r["coverage_pct"] == pytest.approx(100 * coverage(s, y[200:]))
        assert r["class_coverage_worst_pct"] == pytest.approx(100 * class_conditional_coverage(s, y[200:])[1])
        assert r["mean_size"] == pytest.approx(s.sizes.mean())
    assert np.isnan(rows[0]["target_coverage_pct"]) and rows[1]["target_coverage_pct"] == pytest.approx(90.0)
    assert rows[1]["calibrated"] == "q" and "calibrated" not in rows[0]
    with pytest.raises(ValueError, match="unknown method 'svbop_hsg'"):
        evaluate_beyond({("svbop_hsg", "fbeta_1"): sets["svbop_full", "fbeta_1"]}, y[200:], [], dataset="toy")


@pytest.mark.parametrize("kwargs, method, text", [
    ({"score": "aps"}, "conformal_aps", r"q = [\d.]+"),
    ({"score": "lac", "class_conditional": True}, "conformal_lac_cc", r"q = [\d.]+\.\.[\d.]+ \(median [\d.]+\)"),
    ({"score": "fbeta"}, "coverage_fbeta", r"beta = [\d.]+"),
    ({"score": "credal", "gamma": 1.2, "epsilon": 0.4}, "coverage_credal", r"delta = [\d.]+"),
])
def test_the_calibration_record_says_what_was_calibrated(tmp_path, kwargs, method, text):
    import json

    from svbop.evaluation import calibration_record, read_calibration

    svbop, P, y = _toy()
    kwargs = {"epsilon": 0.1, **kwargs}
    predictor = svbop.ConformalSetPredictor(**kwargs).fit(P[:200], y[:200])
    record = calibration_record(predictor, method=method, epsilon=kwargs["epsilon"], n_calibration=200)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(record))
    assert read_calibration(path) == {"calibrated": read_calibration(path)["calibrated"], "reached": True}
    assert re.fullmatch(text, read_calibration(path)["calibrated"])
    if "parameter" in record:
        assert record["parameter"] == predictor.parameter_
    elif kwargs.get("class_conditional"):
        assert record["quantile_max"] == pytest.approx(np.max(predictor.quantiles_[np.isfinite(predictor.quantiles_)]))


def test_classes_too_rare_to_calibrate_are_counted(tmp_path):
    import json

    from svbop.evaluation import calibration_record, read_calibration

    svbop, P, y = _toy()
    y_cal = y[:40].copy()
    y_cal[y_cal == 5] = 4
    y_cal[0] = 5  # class 5 has one calibration row: its threshold is infinite at epsilon 0.3, the others' are not
    predictor = svbop.ConformalSetPredictor(0.3, score="lac", class_conditional=True).fit(P[:40], y_cal)
    assert 0 < np.sum(np.isfinite(predictor.quantiles_)) < 6
    record = calibration_record(predictor, method="conformal_lac_cc", epsilon=0.3, n_calibration=40)
    unbounded = int(np.sum(~np.isfinite(predictor.quantiles_)))
    assert record["classes_unbounded"] == unbounded > 0
    assert record["rows_needed_per_class"] == svbop.conformal.min_calibration_rows(0.3) == 3
    path = tmp_path / "c.json"
    path.write_text(json.dumps(record))
    # not a result: its sets would hold those classes on every row; the row says why and what it needs
    assert read_calibration(path) == {"reached": False, "calibrated": (
        f"not calibrated: {unbounded} of 6 classes have fewer than 3 calibration rows, the fewest a class needs for a "
        "finite threshold at epsilon 0.3 (with fewer, q = inf: every set would hold that class); give at least 3 "
        "calibration rows per class")}
    predictor = svbop.ConformalSetPredictor(0.01, score="lac", class_conditional=True).fit(P[:20], y[:20])
    path.write_text(json.dumps(calibration_record(predictor, method="conformal_lac_cc", epsilon=0.01, n_calibration=20)))
    assert read_calibration(path)["calibrated"].startswith("not calibrated: 6 of 6 classes have fewer than 99 ")


def test_a_credal_family_that_reaches_no_coverage_gives_a_row_without_numbers(tmp_path):
    import json

    from svbop.evaluation import evaluate_beyond, read_calibration, unreachable_record

    svbop, P, y = _toy()
    with pytest.raises(ValueError) as info:  # even delta = gamma covers too few rows at gamma 1.2
        svbop.ConformalSetPredictor(0.1, score="credal", gamma=1.2).fit(P[:200], y[:200])
    record = unreachable_record(method="coverage_credal", epsilon=0.1, n_calibration=200, reason=str(info.value))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(record))
    read = read_calibration(path)
    assert read["reached"] is False and read["calibrated"].startswith("not reachable: score='credal'")

    class Unread(dict):  # the unreachable method's (empty) sets are never read
        def __getitem__(self, key):
            if key[0] == "coverage_credal":
                raise AssertionError("read the sets of an unreachable method")
            return dict.__getitem__(self, key)

    sets = Unread({("top_s", "1"): svbop.top_s_sets(P[200:], 1), ("coverage_credal", "0.10"): None})
    rows = evaluate_beyond(sets, y[200:], ["fbeta:beta=1"], dataset="toy", unreachable=[("coverage_credal", "0.10")],
                           extra={("coverage_credal", "0.10"): {"calibrated": read["calibrated"]}})
    assert rows[1]["target_coverage_pct"] == pytest.approx(90.0) and rows[1]["n_test"] == 200
    assert all(np.isnan(rows[1][c]) for c in ("coverage_pct", "class_coverage_worst_pct", "mean_size", "fbeta_1_pct"))
    assert rows[0]["coverage_pct"] > 0


@pytest.mark.parametrize("content, message", [
    ("{", "cannot read the calibration record"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"method": "x"}', "neither 'parameter', 'quantile' nor"),
    ('{"quantile": "high"}', "the calibrated values are not numbers"),
])
def test_a_bad_calibration_record_is_named(tmp_path, content, message):
    from svbop.evaluation import read_calibration

    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(ValueError) as info:
        read_calibration(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
