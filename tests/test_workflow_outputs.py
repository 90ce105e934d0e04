"""The pipeline on a model's outputs (format.kind: model_outputs, issue 37): npy and csv, logits and
probabilities, with and without a hierarchy, with only the test rows given; the report has Table 3, the
calibration section and the section beyond the paper for them, and `svbop report` on the same files gives
the same Table 3 numbers as the pipeline."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_workflow import _copy_workflow, _snakemake
from watched import run_watched

K = 12


def report_results(out: Path) -> Path:
    """The pipeline's results/ folder of a `svbop report -o OUT` run (the one place that knows where
    svbop report keeps its workflow's files: OUT/.svbop/results)."""
    return out / ".svbop" / "results"


def _write_outputs(folder: Path) -> None:
    """Over-confident logits (temperature 2.5) of a 12-class problem with a 3 x 4 class tree."""
    rng = np.random.default_rng(7)
    folder.mkdir(parents=True, exist_ok=True)

    def draw(n):
        z = rng.normal(size=(n, K)) * 1.2
        z += np.repeat(rng.normal(size=(n, 3)), 4, axis=1)  # classes of one group move together
        P = np.exp(z - z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        y = (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
        return 2.5 * z, y

    for part, n in (("val", 300), ("test", 600)):
        z, y = draw(n)
        np.save(folder / f"{part}_logits.npy", z)
        np.save(folder / f"{part}_labels.npy", y)
        # a column of the user's data (format.group_column, per-part groups files): the label's parity, by name
        (folder / f"{part}_groups.txt").write_text("".join(("even\n", "odd\n")[c % 2] for c in y))
    (folder / "tree.txt").write_text("".join(f"root g{g}\n" for g in range(3))
                                     + "".join(f"g{c // 4} {c}\n" for c in range(K)))
    z, y = draw(500)  # a second model: probabilities in a CSV with its label column, test rows only
    P = np.exp(z / 2.5 - (z / 2.5).max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    names = [f"c{c}" for c in range(K)]
    lines = [",".join([*names, "truth", "site"])]  # site: a group column (format.group_column)
    lines += [",".join([*(repr(float(v)) for v in P[i]), names[y[i]], f"site-{'ab'[i % 2]}"]) for i in range(len(y))]
    (folder / "probs.csv").write_text("\n".join(lines) + "\n")


def _config(folder: Path) -> str:
    return f"""
run: [mo_npy, mo_csv, digits_cal]
baselines: {{icp_epsilon: [0.1]}}
utility_table: {{K: [10]}}
methods:
  epsilon: [0.1]
  conformal: [aps, hierarchical]
  coverage: [fbeta]
  hierarchical: {{max_nodes: [1], utilities: ["fbeta:beta=1"]}}
  mondrian: {{by: [predicted_class, predicted_top_node, group_column]}}
datasets:
  mo_npy:
    title: "Logits, npy"
    files:
      val_logits.npy: {{path: {folder}/val_logits.npy}}
      val_labels.npy: {{path: {folder}/val_labels.npy}}
      test_logits.npy: {{path: {folder}/test_logits.npy}}
      test_labels.npy: {{path: {folder}/test_labels.npy}}
      val_groups.txt: {{path: {folder}/val_groups.txt}}
      test_groups.txt: {{path: {folder}/test_groups.txt}}
      tree.txt: {{path: {folder}/tree.txt}}
    format:
      kind: model_outputs
      outputs: logits
      parts:
        validation: {{scores: val_logits.npy, labels: val_labels.npy, groups: val_groups.txt}}
        test: {{scores: test_logits.npy, labels: test_labels.npy, groups: test_groups.txt}}
    hierarchy: {{format: edges, file: tree.txt}}
    split: {{calibration: auto}}  # as svbop report splits it: 9 rows of each class (one threshold per class, 0.1)
  digits_cal:
    title: "Digits, liblinear on pixels, calibrated"
    source: {{builtin: digits}}
    features: {{kind: raw}}
    calibrate: temperature
  mo_csv:
    title: "Probabilities, csv, test rows only"
    files:
      probs.csv: {{path: {folder}/probs.csv}}
    format:
      kind: model_outputs
      outputs: probabilities
      label_column: truth
      group_column: site
      parts:
        test: {{scores: probs.csv}}
"""


@pytest.fixture(scope="module")
def outputs_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("outputs")
    _write_outputs(folder / "files")
    workdir = _copy_workflow(tmp_path_factory.mktemp("run"))
    (workdir / "mine.yaml").write_text(_config(folder / "files"))
    result = _snakemake("--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir, folder / "files"


def test_model_outputs_plan_no_features_model_or_approximate_algorithm(outputs_run):
    workdir, _ = outputs_run
    for d in ("mo_npy", "mo_csv"):
        assert not (workdir / "results" / d / "features").exists() and not (workdir / "results" / d / "models").exists()
        assert sorted(p.name for p in (workdir / "results" / d / "predictions").iterdir() if p.name.startswith("svbop")) == [
            "svbop_full"]


def test_the_report_has_table3_calibration_and_beyond_for_model_outputs(outputs_run):
    workdir, _ = outputs_run
    html = (workdir / "results" / "report.html").read_text()
    for d in ("mo_npy", "mo_csv"):
        assert f'id="table3-{d}"' in html and f'id="calibration-{d}"' in html and f'id="beyond-{d}"' in html
        assert f'class="not-applicable" data-dataset="{d}"' in html
    assert "not applicable: model outputs" in html
    temps = dict(re.findall(r'class="calibration-summary" data-dataset="(\w+)" data-temperature="([0-9.e+-]+)"', html))
    assert 2.0 < float(temps["mo_npy"]) < 3.2  # the logits were made 2.5 times too confident
    assert 0.7 < float(temps["mo_csv"]) < 1.4  # these probabilities are calibrated already
    # only the test file was given: validation and calibration rows were split off it, and the page says so
    assert re.search(r'class="origin" data-dataset="mo_csv">Rows: validation: 50 rows split off test \(seeded, '
                     r'stratified\); calibration: 50 rows split off test', html)
    beyond = pd.read_csv(workdir / "results" / "tables" / "beyond_every_set.csv")
    methods = set(beyond.loc[beyond["dataset"] == "mo_npy", "method"])
    assert {"hierarchical_1", "conformal_hierarchical_1"} <= methods  # Bayes-optimal and conformal, over the tree
    others = set(beyond.loc[beyond["dataset"] == "mo_csv", "method"])
    assert not {"hierarchical_1", "conformal_hierarchical_1"} & others  # no hierarchy there
    assert "Conformal hierarchy ≤ 1 node" in html
    # Mondrian: by the predicted class everywhere, by the top-level node where there is a hierarchy; every
    # method's worst group coverage is in the table
    assert {"mondrian_lac_predicted_class", "mondrian_lac_predicted_top_node"} <= methods
    assert "mondrian_lac_predicted_class" in others and "mondrian_lac_predicted_top_node" not in others
    npy = beyond[beyond["dataset"] == "mo_npy"]
    assert npy["worst_group_predicted_top_node_pct"].notna().all() and npy["n_groups_predicted_top_node"].max() == 3
    assert "Mondrian LAC by predicted class" in html and "worst group % (by predicted top node)" in html
    # by a column of the user's data: a groups file (mo_npy) or a CSV column (mo_csv); the page lists every
    # group by name with its coverage under the Mondrian sets and the worst group's; digits_cal has no column
    assert "mondrian_lac_group_column" in methods and "mondrian_lac_group_column" in others
    assert (npy["n_groups_group_column"] == 2).all() and npy["worst_group_group_column_pct"].notna().all()
    for d, names in (("mo_npy", ["even", "odd"]), ("mo_csv", ["site-a", "site-b"])):
        table = re.search(rf'<table class="group-coverage" data-dataset="{d}".*?</table>', html, re.S).group(0)
        assert re.findall(r'<tr data-group="([^"]+)">', table) == names
        assert "Mondrian LAC by group column" in table and "worst group" in table
    mondrian = npy.loc[npy["method"] == "mondrian_lac_group_column"].iloc[0]
    assert mondrian["worst_group_group_column_pct"] >= 100 * (1 - 0.1) - 5  # calibrated within each group
    assert '<table class="group-coverage" data-dataset="digits_cal"' not in html
    assert re.search(r'data-skipped="mondrian_group_column">[^<]*not applicable: no format.group_column', html)


def test_calibration_made_the_logits_sets_larger_and_ece_lower(outputs_run):
    import json

    workdir, _ = outputs_run
    record = json.loads((workdir / "results" / "mo_npy" / "calibration.json").read_text())
    assert record["test"]["after"]["ece"] < record["test"]["before"]["ece"]
    assert record["test"]["after"]["nll"] < record["test"]["before"]["nll"]
    assert all(e["after"]["mean_size"] >= e["before"]["mean_size"] for e in record["sets"])
    summary = json.loads((workdir / "results" / "mo_npy" / "summary.json").read_text())
    assert summary["model_outputs"] is True and summary["D"] is None and summary["train_seconds"] is None
    # split.calibration: auto: the fewest stratified rows of the 600 that give each of the 12 classes 9 (10 %: 60
    # rows, 5 a class, would leave class-conditional LAC uncalibrated)
    assert summary["N_train"] == 0 and summary["N_test"] == 461 and summary["N_calibration"] == 139


def test_a_calibrated_liblinear_dataset_makes_every_set_from_the_calibrated_probabilities(outputs_run):
    """calibrate: temperature on one of our own models: the baselines read the calibrated probabilities, and
    SVBOP-Full, which scores the model, scores it at the fitted temperature (W / T, b / T)."""
    import json

    from svbop import predict_sets
    from svbop.io import load_score_arrays, load_sets
    from svbop.metrics import set_agreement

    workdir, _ = outputs_run
    d = workdir / "results" / "digits_cal"
    record = json.loads((d / "calibration.json").read_text())
    assert record["method"] == "temperature" and record["temperature"] != 1.0 and not record["model_outputs"]
    P_raw, = load_score_arrays(d / "scores" / "uncalibrated.npz", "P_test")
    P, = load_score_arrays(d / "scores" / "flat.npz", "P_test")
    assert not np.allclose(P, P_raw, atol=1e-3)
    for spec, label in (("fbeta:beta=1", "fbeta_1"), ("fbeta:beta=5", "fbeta_5")):
        full = load_sets(d / "predictions" / "svbop_full" / f"{label}.npz")
        assert set_agreement(full, predict_sets(P, spec)) >= 0.99
    html = (workdir / "results" / "report.html").read_text()
    assert 'id="calibration-digits_cal"' in html and 'class="not-applicable" data-dataset="digits_cal"' not in html


def test_svbop_report_gives_the_pipelines_table3(outputs_run, tmp_path):
    from svbop import utility
    from svbop.config import load_yaml
    from test_workflow import ROOT

    workdir, files = outputs_run
    out = tmp_path / "page"
    result = run_watched(  # stopped only if it hangs
        [sys.executable, "-m", "svbop", "report", "--name", "mo_npy",
         "--test", str(files / "test_logits.npy"), str(files / "test_labels.npy"),
         "--validation", str(files / "val_logits.npy"), str(files / "val_labels.npy"),
         "--hierarchy", str(files / "tree.txt"), "--test-groups", str(files / "test_groups.txt"),
         "--validation-groups", str(files / "val_groups.txt"), "--cores", "2", "-o", str(out)],
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    assert f"svbop report: {out / 'report.html'} (" in result.stdout
    assert "--outputs auto: the test scores are logits" in result.stderr
    assert "no --calibration: calibration rows are split off the test rows" in result.stderr
    html = (out / "report.html").read_text()
    # the page about a model: every method in its table of every kind of set, none of the paper's tables
    assert 'id="beyond-mo_npy"' in html and 'id="calibration-mo_npy"' in html and 'id="table3-mo_npy"' not in html
    assert not (out / "tables" / "table3_utilities.csv").exists()
    # --test-groups/--validation-groups: the coverage of each of the user's groups, by name
    table = re.search(r'<table class="group-coverage" data-dataset="mo_npy".*?</table>', html, re.S).group(0)
    assert re.findall(r'<tr data-group="([^"]+)">', table) == ["even", "odd"]
    # the paper's methods give the same numbers as the pipeline's run (its Table 3, in the long format)
    every = pd.read_csv(out / "tables" / "beyond_every_set.csv", dtype={"param": str})
    labels = [c[: -len("_pct")] for c in every.columns if c.endswith("_pct") and c[: -len("_pct")] in
              {utility(spec).label for spec in load_yaml(ROOT / "config.yaml")["utilities"]}]
    ours = every[every["method"].isin(["svbop_full", "threshold", "top_s", "icp"])].melt(
        id_vars=["dataset", "method", "param"], value_vars=[f"{lab}_pct" for lab in labels], var_name="eval_utility",
        value_name="utility_pct")
    ours["eval_utility"] = ours["eval_utility"].str.removesuffix("_pct")
    pipeline = pd.read_csv(workdir / "results" / "tables" / "table3_utilities.csv", dtype={"param": str})
    pipeline = pipeline[pipeline["dataset"] == "mo_npy"]
    keys = ["dataset", "method", "param", "eval_utility"]
    both = ours.merge(pipeline, on=keys, suffixes=("", "_pipeline"), validate="one_to_one")
    assert len(both) == len(pipeline) == len(ours) > 0
    assert np.allclose(both["utility_pct"], both["utility_pct_pipeline"], rtol=0, atol=1e-9)
    # the numbers, not only the config: SVBOP-Full's utilities are those of svbop.predict_sets on the calibrated
    # test probabilities that svbop report's run stored, under every utility of the run
    _table3_full_matches_predict_sets(ours, report_results(out) / "mo_npy" / "scores" / "flat.npz")
    # nothing was written beside the output folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page"]


def _table3_full_matches_predict_sets(table3: pd.DataFrame, scores: Path) -> None:
    """Every svbop_full row of a long Table 3 (optimised utility ``param``, evaluated under ``eval_utility``)
    equals the mean utility in % of ``predict_sets(P_test, param)`` on ``y_test`` of ``scores``."""
    from svbop import predict_sets, set_utility, utility
    from svbop.config import load_yaml
    from svbop.io import load_score_arrays
    from test_workflow import ROOT

    P, y = load_score_arrays(scores, "P_test", "y_test")
    specs = {utility(spec).label: spec for spec in load_yaml(ROOT / "config.yaml")["utilities"]}
    full = table3[table3["method"] == "svbop_full"]
    assert sorted(set(full["param"])) == sorted(specs) and sorted(set(full["eval_utility"])) == sorted(specs)
    assert len(full) == len(specs) ** 2
    sets = {label: predict_sets(P, spec) for label, spec in specs.items()}
    for row in full.itertuples():
        expected = 100.0 * float(np.mean(set_utility(sets[row.param], y, specs[row.eval_utility])))
        assert row.utility_pct == pytest.approx(expected, abs=1e-6), row


@pytest.mark.parametrize("groups, message", [
    ({"calibration": "g.txt"}, "--calibration-groups: there is no --calibration (groups are given for the parts given)"),
    ({"test": "g.txt"}, "--validation-groups: missing; with groups for one part, every part given needs them "
                        "(given: --validation, --test)"),
])
def test_svbop_report_groups_flags_are_refused_naming_the_flag(tmp_path, groups, message):
    from svbop.report.run import report_config

    for name in ("s.npy", "y.npy", "g.txt"):
        (tmp_path / name).write_text("")
    pair = (str(tmp_path / "s.npy"), str(tmp_path / "y.npy"))
    with pytest.raises(ValueError) as info:
        report_config(test=pair, validation=pair, groups={k: str(tmp_path / v) for k, v in groups.items()})
    assert str(info.value) == message
    config = report_config(test=pair, validation=pair, groups={"test": str(tmp_path / "g.txt"),
                                                                "validation": str(tmp_path / "g.txt")})
    parts = config["datasets"]["model"]["format"]["parts"]
    assert parts["test"]["groups"] == "test_groups.txt" and parts["validation"]["groups"] == "validation_groups.txt"
    assert config["methods"]["mondrian"]["by"] == ["predicted_class", "group_column"]


def test_svbop_report_refuses_a_folder_holding_other_files(tmp_path):
    """svbop report writes only its own names in the folder: a report.html or tables/ of the user's,
    or a link planted under one of its names, is refused before anything is written."""
    (tmp_path / "config.yaml").write_text("mine: 1\n")
    np.save(tmp_path / "s.npy", np.full((4, 3), 1 / 3))
    np.save(tmp_path / "y.npy", np.arange(4) % 3)
    (tmp_path / "report.html").write_text("my page")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_watched([sys.executable, "-m", "svbop", "report", "--test", str(tmp_path / "s.npy"),
                          str(tmp_path / "y.npy"), "-o", str(tmp_path)])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"svbop: error: -o {tmp_path}: already holds report.html, not svbop report's; choose a new or empty folder")
    assert (tmp_path / "report.html").read_text() == "my page"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("name", ["svbop_report.log", "svbop_report.yaml", "report.html", "tables", ".svbop"])
def test_svbop_report_never_writes_through_a_planted_link(tmp_path, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(outside / "victim")
    np.save(tmp_path / "s.npy", np.full((4, 3), 1 / 3))
    np.save(tmp_path / "y.npy", np.arange(4) % 3)
    result = run_watched([sys.executable, "-m", "svbop", "report", "--test", str(tmp_path / "s.npy"),
                          str(tmp_path / "y.npy"), "-o", str(out)])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"svbop: error: -o {out}: {name} is a link (to {outside / 'victim'}); svbop report writes only real files "
        "inside the folder: remove the link or choose another folder")
    assert (outside / "victim").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == [name]
