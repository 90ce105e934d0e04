"""The page about a model (issue 42, items 3 and 4): `svbop report` on a model's outputs with class names leads
with which sets to use, the classes and example rows, leaves out the paper's sections, writes
tables/choose_sets.csv in agreement with its own table of every kind of set, and says when a method cannot be
calibrated with the calibration rows given, naming the rows per class it needs."""

from __future__ import annotations

import html as html_lib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

NAMES = ["cat", "dog", "horse", "ship", "truck", "frog"]
K = len(NAMES)


def _write(folder: Path) -> None:
    """Over-confident logits of a 6-class problem; a calibration file with 3 rows per class (too few at 0.1)."""
    rng = np.random.default_rng(3)
    folder.mkdir(parents=True, exist_ok=True)

    def draw(n):
        z = rng.normal(size=(n, K)) * 1.5
        P = np.exp(z - z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        return 2.5 * z, (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)

    for part, n in (("val", 200), ("test", 600)):
        z, y = draw(n)
        np.save(folder / f"{part}_logits.npy", z)
        np.save(folder / f"{part}_labels.npy", y)
    z, _ = draw(3 * K)
    np.save(folder / "cal_logits.npy", z)
    np.save(folder / "cal_labels.npy", np.repeat(np.arange(K), 3))
    (folder / "names.txt").write_text("".join(f"{n}\n" for n in NAMES))


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    files = tmp_path_factory.mktemp("files")
    _write(files)
    out = tmp_path_factory.mktemp("page") / "out"
    result = subprocess.run(
        [sys.executable, "-m", "svbop", "report", "--name", "pets",
         "--test", str(files / "test_logits.npy"), str(files / "test_labels.npy"),
         "--validation", str(files / "val_logits.npy"), str(files / "val_labels.npy"),
         "--calibration", str(files / "cal_logits.npy"), str(files / "cal_labels.npy"),
         "--class-names", str(files / "names.txt"), "--cores", "2", "-o", str(out)],
        capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    page = next(p for p in (out / "report.html", out / "results" / "report.html") if p.is_file())
    tables = next(p for p in (out / "tables", out / "results" / "tables") if (p / "choose_sets.csv").is_file())
    return page.read_text(), tables


def _text(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def _every_kind_of_set(page: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The page's table of every kind of set: its header, and per method (as the page's text reads it) its cells."""
    table = re.search(r'<table class="beyond".*?</table>', page, re.S).group(0)
    header = [_text(h) for h in re.findall(r"<th>(.*?)</th>", re.search(r"<thead>.*?</thead>", table, re.S).group(0))]
    rows = {}
    for name, cells in re.findall(r'<tr data-method="[^"]+"[^>]*>\s*<th class="row">(.*?)</th>(.*?)</tr>', table, re.S):
        rows[_text(name)] = dict(zip(header, (_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S))))
    return header, rows


def test_the_model_page_has_its_own_sections_and_not_the_papers(model_run):
    page, _ = model_run
    sections = re.findall(r'<section id="([\w-]+)"', page)
    for wanted in ("choose", "classes", "examples", "calibration", "predictions", "beyond"):
        assert wanted in sections
    assert sections.index("choose") < sections.index("classes") < sections.index("examples")
    for paper_only in ("status", "illustrations", "algorithms", "claims", "hyperparameters", "genreject"):
        assert paper_only not in sections
    assert 'id="compared"' not in page and "Claims checked" not in page and "Generalised reject option" not in page
    assert '<table class="table3" data-dataset="pets">' in page  # Table 3 is kept
    downloads = re.search(r'<ul class="downloads">.*?</ul>', page, re.S).group(0)
    assert 'href="tables/choose_sets.csv"' in downloads and 'href="tables/class_coverage_pets.tsv"' in downloads
    assert "vs_paper" not in downloads and "claims" not in downloads


def test_class_names_are_shown_wherever_a_class_is(model_run):
    page, tables = model_run
    shown = {_text(n) for n in re.findall(r'<(?:span|th) class="[^"]*class-name[^"]*">(.*?)</(?:span|th)>', page, re.S)}
    assert shown and shown <= set(NAMES)
    worst = re.search(r'<table class="worst-classes" data-dataset="pets">.*?</table>', page, re.S).group(0)
    assert {_text(n) for n in re.findall(r'<th class="row class-name">(.*?)</th>', worst)} <= set(NAMES)
    summary = _text(re.search(r'<p class="summary classes-summary".*?</p>', page, re.S).group(0))
    assert re.search(r"the worst-covered: (cat|dog|horse|ship|truck|frog) \(", summary)
    examples = re.findall(r'<details class="example" data-dataset="pets" data-kind="(\w+)"', page)
    assert "uncertain" in examples and "wrong_confident" in examples and "confident" in examples
    classes = pd.read_csv(tables / "class_coverage_pets.tsv", sep="\t")
    assert list(classes["name"]) == NAMES and (classes["n_calibration"] == 3).all()


def test_choose_sets_csv_agrees_with_the_pages_table_and_is_its_argmin(model_run):
    page, tables = model_run
    chosen = pd.read_csv(tables / "choose_sets.csv", dtype={"goal": str, "method": str})
    assert list(chosen.columns) == ["model", "goal", "method", "coverage_pct", "mean_set_size"]
    header, rows = _every_kind_of_set(page)
    numbers = {m: r for m, r in rows.items() if r["coverage %"] not in ("–", "")}
    for r in chosen.itertuples(index=False):  # every method named is a row of the page's table, with its numbers
        assert r.method in numbers, r.method
        assert (float(numbers[r.method]["coverage %"]), float(numbers[r.method]["mean set size"])) == (
            pytest.approx(r.coverage_pct, abs=1e-9), pytest.approx(r.mean_set_size, abs=1e-9))
    first = chosen.drop_duplicates("goal")
    assert list(first["goal"][:1]) == ["coverage >= 90%"]
    eligible = {m: float(r["mean set size"]) for m, r in numbers.items() if float(r["coverage %"]) >= 90}
    assert first["mean_set_size"].iloc[0] == min(eligible.values())
    ranks = chosen[chosen["goal"] == "coverage >= 90%"]
    assert list(ranks["mean_set_size"]) == sorted(eligible.values())[: len(ranks)]
    for goal, label in (("best F1 utility", "uF1 %"), ("best F5 utility", "uF5 %")):
        best = chosen[chosen["goal"] == goal]["method"].iloc[0]
        assert float(numbers[best][label]) == max(float(r[label]) for r in numbers.values())
    # the page's own "which sets to use" table names the same methods in the same order
    table = re.search(r'<table class="choose-sets" data-dataset="pets">.*?</table>', page, re.S).group(0)
    on_page = [_text(m) for m in re.findall(r'<td class="text method">(.*?)</td>', table, re.S)]
    assert on_page == list(chosen["method"])


def test_a_method_short_of_calibration_rows_per_class_says_so_with_the_rows_it_needs(model_run):
    page, tables = model_run
    note = re.search(r'<p class="caption not-calibrated" data-dataset="pets" data-method="conformal_lac_cc/0.10" '
                     r'data-rows-needed="9">(.*?)</p>', page, re.S)
    assert note, "no note that class-conditional LAC could not be calibrated"
    text = _text(note.group(1))
    assert "could not be calibrated" in text and "at least 9 calibration rows per class" in text
    assert "6 of 6 classes have fewer than 9 calibration rows" in text
    _, rows = _every_kind_of_set(page)
    cc = rows["Class-conditional LACε=0.10"]
    assert cc["coverage %"] == "–" and cc["mean set size"] == "–" and cc["calibrated"].startswith("not calibrated:")
    chosen = pd.read_csv(tables / "choose_sets.csv")
    assert not chosen["method"].str.startswith("Class-conditional").any()
    # Mondrian by the predicted class: its groups are as short of rows; it falls back and says so, per group
    groups = re.search(r'<p class="caption small-groups" data-dataset="pets" data-method="mondrian_lac_predicted_class/'
                       r'0.10" data-rows-needed="9">(.*?)</p>', page, re.S)
    assert groups and "at least 9 calibration rows per group" in _text(groups.group(1))
    share = _text(re.search(r'<p class="caption calibration-share" data-dataset="pets">(.*?)</p>', page, re.S).group(1))
    assert share.startswith("Calibration rows: 18, from your own calibration file; the fewest in a class: 3")


def test_choose_sets_is_the_brute_force_choice():
    from svbop.report.model import choose_sets

    rng = np.random.default_rng(0)
    for _ in range(50):
        n = 12
        table = pd.DataFrame({
            "method": [f"M_{{{i}}}" for i in range(n)], "key": [f"m{i}/x" for i in range(n)], "family": "conformal",
            "coverage_pct": rng.choice([85.0, 89.996, 90.0, 92.5, 95.0, np.nan], n),
            "mean_size": rng.choice([1.0, 1.234, 1.236, 2.5, 3.0], n), "target_coverage_pct": 90.0,
            "fbeta_1_pct": rng.uniform(40, 60, n).round(3)})
        chosen = choose_sets(table, [0.1, 0.05], ["fbeta:beta=1"], runners_up=2)
        assert list(dict.fromkeys(chosen["goal"])) == ["coverage >= 90%", "coverage >= 95%", "best F1 utility"]
        for eps, goal in ((0.1, "coverage >= 90%"), (0.05, "coverage >= 95%")):
            rows = chosen[chosen["goal"] == goal]
            shown = table.assign(c=[float(f"{v:.2f}") for v in table["coverage_pct"]],
                                 s=[float(f"{v:.2f}") for v in table["mean_size"]])
            ok = shown[shown["c"] >= 100 * (1 - eps)]
            if ok.empty:
                assert list(rows["method"]) == ["none"]
                continue
            best = sorted(zip(ok["s"], ok["mean_size"], -ok["coverage_pct"], ok.index))
            assert list(rows["method"]) == [f"M{i}" for *_, i in best[:3]]
        u = chosen[chosen["goal"] == "best F1 utility"]
        valid = table[table["coverage_pct"].notna()]
        assert u["utility_pct"].iloc[0] == max(float(f"{v:.2f}") for v in valid["fbeta_1_pct"])


def test_auto_calibration_rows_are_the_fewest_that_give_every_class_its_rows():
    from svbop.datasets.calibration_share import auto_calibration_rows
    from svbop.datasets.outputs import split_model_outputs

    rng = np.random.default_rng(1)
    y = np.r_[rng.integers(0, 40, 3000), np.full(5, 40)]  # class 40: too rare for 9 rows from half of the rows
    part = np.array(["test"] * y.size)
    share = auto_calibration_rows(y, part, {"validation": 0.1}, rows_per_class=9, seed=4)

    def counts(n):
        rows = split_model_outputs(y, part, {"validation": 0.1, "calibration": n}, seed=4)["calibration"]
        return np.bincount(y[rows], minlength=41)

    n = share["rows"]
    assert n > round(0.1 * y.size)  # 10 % gives about 7 rows a class: not enough
    assert counts(n)[:40].min() >= 9 and counts(n - 1)[:40].min() < 9  # the fewest that give each class 9
    assert share["classes_short"] == 1 and share["fewest"] == counts(n).min()  # the rare class did not raise it
    given = auto_calibration_rows(y, np.r_[["calibration"] * 100, ["test"] * (y.size - 100)], {}, rows_per_class=9)
    assert given["rows"] is None  # a calibration file of one's own is used as it is


def test_svbop_report_splits_its_calibration_rows_by_the_auto_share(tmp_path):
    from svbop.report.run import report_config

    for name in ("s.npy", "y.npy"):
        (tmp_path / name).write_text("")
    pair = (str(tmp_path / "s.npy"), str(tmp_path / "y.npy"))
    assert report_config(test=pair)["datasets"]["model"]["split"] == {"calibration": "auto"}
    assert "split" not in report_config(test=pair, calibration=pair)["datasets"]["model"]


def test_split_calibration_auto_is_for_model_outputs_only():
    from svbop.config import ConfigError, check_config, load_yaml, merge_configs, validate_config
    from test_workflow import ROOT

    config = validate_config(merge_configs(load_yaml(ROOT / "config.yaml"), {"run": ["digits"], "datasets": {"digits": {
        "source": {"builtin": "digits"}, "features": {"kind": "raw"}, "split": {"calibration": "auto"}}}}))
    with pytest.raises(ConfigError) as info:  # the cross-field checks the Snakefile runs before any job
        check_config(config)
    assert str(info.value) == ("config: datasets.digits.split.calibration: 'auto' is for a model's outputs "
                               "(format.kind: model_outputs); give a fraction or a row count")


def test_one_model_has_the_level_section_and_no_comparison_of_models(model_run):
    page, _ = model_run
    assert '<section id="level">' in page and 'class="live-data" data-dataset="pets"' in page
    assert '<section id="models">' not in page

