"""`svbop report --weights` and `--group-columns` (issue 48, item 8): per-row likelihood ratios and group
indicator columns beside the scores, every file refused before any work in one line naming the option and the
file and row; and one small run whose page states each promise and whose weighted test coverage and per-group
coverage (with row counts) are the library's on the rows the run used."""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from watched import run_watched

from svbop.cli import main

K = 5


def _probs(rng, n, shift=0.0):
    """Rows whose feature x ~ N(shift, 1) and whose model is worse for large x (over-confident there)."""
    x = rng.normal(shift, 1.0, size=n)
    z = rng.normal(size=(n, K)) * 1.5
    y = (np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)).cumsum(axis=1) > rng.random((n, 1))
    y = y.argmax(axis=1)
    sharp = np.exp(0.6 * x)[:, None]  # over-confidence grows with x
    P = np.exp(sharp * z)
    P /= P.sum(axis=1, keepdims=True)
    return x, P, y


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Valid test, validation and calibration probabilities, labels, weights and group columns."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    for part, n in (("test", 60), ("val", 30), ("cal", 50)):
        x, P, y = _probs(rng, n)
        np.save(f"{part}_p.npy", P)
        np.save(f"{part}_y.npy", y)
        np.save(f"{part}_w.npy", np.exp(x))
        Path(f"{part}_g.csv").write_text("low,high\n" + "".join(f"{int(v < 0)},{int(v > -0.5)}\n" for v in x))
    return tmp_path


def _refused(capsys, *argv):
    code = main(["report", *argv, "-o", "out"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not os.path.exists("out"), "a refused run wrote its output folder"
    assert "Traceback" not in err and "Snakemake" not in err
    return err.strip().splitlines()[-1]


TEST = ("--test", "test_p.npy", "test_y.npy")
ALL = (*TEST, "--validation", "val_p.npy", "val_y.npy", "--calibration", "cal_p.npy", "cal_y.npy")


def test_weights_of_the_wrong_row_count_are_refused_naming_the_option_and_file(files, capsys):
    np.save("short.npy", np.ones(59))
    line = _refused(capsys, *TEST, "--weights", "short.npy")
    assert "--weights" in line and "short.npy" in line and "59 weights" in line and "60 rows" in line


@pytest.mark.parametrize("bad, shown", [(-1.0, "-1.0"), (np.nan, "nan"), (np.inf, "inf")])
def test_a_negative_or_non_finite_weight_is_refused_naming_its_row(files, capsys, bad, shown):
    w = np.ones(60)
    w[7] = bad
    np.save("bad_w.npy", w)
    line = _refused(capsys, *TEST, "--weights", "bad_w.npy")
    assert line.startswith("svbop: --weights: bad_w.npy: row 7:") or "--weights: bad_w.npy: row 7" in line
    assert shown in line


def test_a_weight_that_is_not_a_number_is_refused_naming_its_line(files, capsys):
    Path("w.txt").write_text("1\n" * 10 + "heavy\n" + "1\n" * 49)
    line = _refused(capsys, *TEST, "--weights", "w.txt")
    assert "--weights: w.txt: line 11" in line and "heavy" in line


def test_a_group_column_value_other_than_0_or_1_is_refused_naming_line_and_group(files, capsys):
    lines = Path("test_g.csv").read_text().splitlines()
    lines[5] = "1,2"
    Path("bad_g.csv").write_text("\n".join(lines) + "\n")
    line = _refused(capsys, *TEST, "--group-columns", "bad_g.csv")
    assert "--group-columns: bad_g.csv: line 6" in line and "'high'" in line and "not 0 or 1" in line


def test_group_columns_of_the_wrong_row_count_are_refused(files, capsys):
    Path("short_g.csv").write_text("a\n" + "1\n" * 59)
    line = _refused(capsys, *TEST, "--group-columns", "short_g.csv")
    assert "--group-columns: short_g.csv" in line and "59 rows" in line and "60 rows" in line


def test_a_group_without_calibration_rows_is_refused_before_any_work(files, capsys):
    Path("cal_none.csv").write_text("low,high\n" + "0,1\n" * 50)
    line = _refused(capsys, *ALL, "--group-columns", "test_g.csv", "--validation-group-columns", "val_g.csv",
                    "--calibration-group-columns", "cal_none.csv")
    assert "--calibration-group-columns: cal_none.csv: group 'low' has no calibration row" in line


def test_a_group_without_test_rows_is_refused_when_calibration_rows_are_split_off_them(files, capsys):
    Path("none.csv").write_text("low,high\n" + "1,0\n" * 60)
    line = _refused(capsys, *TEST, "--group-columns", "none.csv")
    assert "--group-columns: none.csv: group 'high' has no --test row" in line


def test_weights_for_some_parts_only_are_refused_naming_the_missing_option(files, capsys):
    line = _refused(capsys, *ALL, "--weights", "test_w.npy", "--validation-weights", "val_w.npy")
    assert line.startswith("svbop: --calibration-weights: missing") or "--calibration-weights: missing" in line


def test_weights_for_a_part_not_given_are_refused(files, capsys):
    line = _refused(capsys, *TEST, "--weights", "test_w.npy", "--calibration-weights", "cal_w.npy")
    assert "--calibration-weights: there is no --calibration" in line


def test_group_columns_naming_other_groups_than_the_test_files_are_refused(files, capsys):
    Path("other.csv").write_text("low,middle\n" + "1,1\n" * 50)
    line = _refused(capsys, *ALL, "--group-columns", "test_g.csv", "--validation-group-columns", "val_g.csv",
                    "--calibration-group-columns", "other.csv")
    assert "other.csv" in line and "differ" in line


def test_every_weight_zero_is_refused(files, capsys):
    np.save("zero.npy", np.zeros(60))
    line = _refused(capsys, *TEST, "--weights", "zero.npy")
    assert "--weights: zero.npy: every weight is 0" in line


def test_the_config_needs_weights_in_every_part_or_none():
    from svbop.config import ConfigError, check_dataset

    cfg = {"format": {"kind": "model_outputs", "outputs": "probabilities",
                      "parts": {"test": {"scores": "t.npy", "labels": "ty.npy", "weights": "tw.npy"},
                                "calibration": {"scores": "c.npy", "labels": "cy.npy"}}},
           "files": {k: {"path": "/x"} for k in ("t.npy", "ty.npy", "tw.npy", "c.npy", "cy.npy")}}
    with pytest.raises(ConfigError, match=r"parts\.calibration\.weights: missing"):
        check_dataset("m", cfg, None)


def test_weights_and_group_columns_follow_their_rows_through_the_split():
    """Rows split off the test part keep their own weight and groups (the dataset's order is not the split's)."""
    from svbop.datasets import Dataset
    from svbop.datasets.splits import split_row_arrays

    n = 12
    d = Dataset("d", np.eye(n)[:, :3], np.arange(n) % 3, ["a", "b", "c"], weights=np.arange(n) + 0.5,
                group_columns=(np.arange(n)[:, None] % np.array([2, 3]) == 0), group_column_names=["even", "third"])
    split = {"validation": np.array([3, 1]), "calibration": np.array([11, 0, 5]),
             "test": np.array([2, 4, 6, 7, 8, 9, 10])}
    out = split_row_arrays(d, split)
    for part, rows in split.items():
        assert out[f"w_{part}"].tolist() == (rows + 0.5).tolist()
        assert out[f"Phi_{part}"].tolist() == [[r % 2 == 0, r % 3 == 0] for r in rows]
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"svbop_weights_{os.getpid()}.npz"
    try:
        d.save(path)
        back = Dataset.load(path)
    finally:
        path.unlink(missing_ok=True)
    assert back.weights.tolist() == d.weights.tolist()
    assert back.group_columns.tolist() == d.group_columns.tolist() and back.group_column_names == ["even", "third"]


# --- one small run ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shift_run(tmp_path_factory):
    """Labelled rows of the source, x ~ N(0, 1) (calibration and test alike), weighted towards a target where
    x ~ N(1, 1): w(x) = exp(x - 1/2), larger where the model is over-confident."""
    files = tmp_path_factory.mktemp("files")
    rng = np.random.default_rng(5)
    for part, n, shift in (("test", 400, 0.0), ("val", 100, 0.0), ("cal", 400, 0.0)):
        x, P, y = _probs(rng, n, shift)
        np.save(files / f"{part}_p.npy", P)
        np.save(files / f"{part}_y.npy", y)
        np.save(files / f"{part}_w.npy", np.exp(x - 0.5))
        (files / f"{part}_g.tsv").write_text("x<0\tx>0.5\tall\n" + "".join(
            f"{int(v < 0)}\t{int(v > 0.5)}\t1\n" for v in x))
    out = tmp_path_factory.mktemp("page") / "out"
    argv = ["--name", "shifted"]
    for part, flag in (("test", "--test"), ("val", "--validation"), ("cal", "--calibration")):
        prefix = "" if part == "test" else f"{flag[2:]}-"
        argv += [flag, str(files / f"{part}_p.npy"), str(files / f"{part}_y.npy"),
                 f"--{prefix}weights", str(files / f"{part}_w.npy"),
                 f"--{prefix}group-columns", str(files / f"{part}_g.tsv")]
    result = run_watched([sys.executable, "-m", "svbop", "report", *argv, "--calibrate", "none",
                          "--outputs", "probabilities", "--cores", "2", "-o", str(out)])
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return out, files


def _text(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def test_the_page_states_each_promise_and_checks_it_with_the_librarys_numbers(shift_run):
    from svbop import ConformalSetPredictor
    from svbop.conformal import ConditionalSetPredictor
    from svbop.io import load_score_arrays

    out, files = shift_run
    page = (out / "report.html").read_text()
    section = re.search(r'<section id="promises">.*?</section>', page, re.S).group(0)
    assert "covariate shift" in section and "within every group" in section and 'href="#promises"' in page
    scores = out / ".svbop" / "results" / "shifted" / "scores" / "flat.npz"
    P_cal, y_cal, w_cal, Phi_cal, P_test, y_test, w_test, Phi_test = load_score_arrays(
        scores, "P_calibration", "y_calibration", "w_calibration", "Phi_calibration", "P_test", "y_test", "w_test",
        "Phi_test")
    # the weights and groups travelled with their rows: the files' own values, in the files' order
    assert np.allclose(w_test, np.load(files / "test_w.npy")) and np.allclose(w_cal, np.load(files / "cal_w.npy"))
    assert Phi_test[:, 2].all() and Phi_test[:, 0].sum() == (np.log(np.load(files / "test_w.npy")) + 0.5 < 0).sum()

    weighted = re.search(r'<table class="promises-weighted".*?</table>', section, re.S).group(0)
    rows = {_text(a): [_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", b, re.S)]
            for a, b in re.findall(r'<tr><td class="row">(.*?)</td>(.*?)</tr>', weighted, re.S)}
    lac = next(v for k, v in rows.items() if k.startswith("Weighted LAC"))
    sets = ConformalSetPredictor(0.1).fit(P_cal, y_cal, weights=w_cal).predict(P_test, weights=w_test)
    covered = sets.contains(y_test)
    assert lac[0] == "90.0"
    assert lac[1] == f"{100 * (w_test @ covered) / w_test.sum():.1f}"
    assert lac[2] == f"{w_test.sum() ** 2 / (w_test ** 2).sum():,.0f}" and lac[3] == f"{100 * covered.mean():.1f}"
    plain = ConformalSetPredictor(0.1).fit(P_cal, y_cal).predict(P_test).contains(y_test)
    assert (w_test @ plain) / w_test.sum() < (w_test @ covered) / w_test.sum()  # the weights matter here

    tables = re.findall(r'<table class="promises-groups".*?</table>', section, re.S)
    by_method = {_text(re.search(r"<caption>(.*?)</caption>", t, re.S).group(1)).split(":")[0]: t for t in tables}
    for score in ("lac", "aps"):
        name = next(k for k in by_method if k.startswith(f"Conditional {score.upper()}"))
        got = [[_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
               for r in re.findall(r"<tr><td.*?</tr>", by_method[name], re.S)]
        mask = ConditionalSetPredictor(0.1, score).fit(P_cal, y_cal, Phi_cal).predict_mask(P_test, Phi_test)
        hit = mask[np.arange(y_test.size), y_test]
        expected = [[g, f"{Phi_test[:, j].sum():,}", f"{Phi_cal[:, j].sum():,}",
                     f"{100 * hit[Phi_test[:, j]].mean():.1f}"] for j, g in enumerate(["x<0", "x>0.5", "all"])]
        assert [r[1:] for r in got] == [r[1:] for r in expected] and [r[0] for r in got] == ["x<0", "x>0.5", "all"]
    record = json.loads((out / ".svbop" / "results" / "shifted" / "promises.json").read_text())
    assert {p["method"] for p in record["promises"]} == {"weighted_lac", "weighted_aps", "conditional_lac",
                                                         "conditional_aps"}


def test_the_table_of_every_kind_of_set_says_the_promise_and_its_check(shift_run):
    out, _ = shift_run
    page = _text((out / "report.html").read_text())
    assert "promise coverage under the weights >= 90 %: weighted coverage of the test rows" in page
    assert "promise coverage >= 90 % in each of 3 groups: lowest on the test rows" in page


def test_method_names_families_and_targets():
    from svbop.evaluation import beyond_method, target_coverage_pct
    from svbop.report.beyond import method_family
    from svbop.report.names import method_name

    for method, family, name in [("weighted_lac", "weighted", "Weighted LAC_{ε=0.1}"),
                                 ("weighted_aps_cc", "weighted", "Weighted class-conditional APS_{ε=0.1}"),
                                 ("weighted_raps_deterministic", "weighted", None),
                                 ("conditional_aps", "conditional", "Conditional APS over groups_{ε=0.1}")]:
        assert beyond_method(method) and method_family(method) == family
        assert target_coverage_pct(method, "0.1") == pytest.approx(90.0)
        if name is not None:
            assert method_name(method, "0.1") == name
    assert not beyond_method("weighted_hierarchical_1") and not beyond_method("conditional_aps_deterministic")


def test_the_schema_defaults_and_datasets_without_weights_skip_the_methods(tmp_path):
    from test_workflow import ROOT, _copy_workflow, _planned_rules

    from svbop.config import load_yaml, merge_configs, validate_config

    config = validate_config(merge_configs(load_yaml(ROOT / "config.yaml"), {}))
    assert config["methods"]["weighted"] == {"scores": []} and config["methods"]["conditional"] == {"scores": []}
    workdir = _copy_workflow(tmp_path)
    (workdir / "tiny.yaml").write_text("""
run: [digits]
utilities: ["fbeta:beta=1"]
utility_table: {K: [10]}
report:
  illustrations:
    entropy: {dataset: null}
    image_top: {dataset: null}
    text_top: {dataset: null}
methods:
  epsilon: [0.1]
  conformal: [aps]
  weighted: {scores: [lac]}
  conditional: {scores: [lac]}
datasets:
  digits:
    features: {kind: raw}
""")
    planned = _planned_rules(workdir)
    assert "evaluate_beyond" in planned and not {"predict_weighted", "predict_conditional"} & planned
