"""The page about a model (issue 42, items 3 and 4): `svbop report` on a model's outputs with class names leads
with which sets to use, the classes and example rows, leaves out the paper's sections, writes
tables/choose_sets.csv in agreement with its own table of every kind of set, and says when a method cannot be
calibrated with the calibration rows given, naming the rows per class it needs."""

from __future__ import annotations

import html as html_lib
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from watched import run_watched

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
    result = run_watched(  # stopped only if it hangs
        [sys.executable, "-m", "svbop", "report", "--name", "pets",
         "--test", str(files / "test_logits.npy"), str(files / "test_labels.npy"),
         "--validation", str(files / "val_logits.npy"), str(files / "val_labels.npy"),
         "--calibration", str(files / "cal_logits.npy"), str(files / "cal_labels.npy"),
         "--class-names", str(files / "names.txt"), "--cores", "2", "-o", str(out)],
    )
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
    assert sections == ["choose", "level", "classes", "examples", "utilities", "data", "calibration", "beyond", "what-was-run",
                        "downloads"]
    assert re.findall(r'<li><a href="#([\w-]+)">', page) == sections  # the contents list every section, in order
    assert 'id="compared"' not in page and "Claims checked" not in page and "Generalised reject option" not in page
    assert '<table class="table3"' not in page  # every method is in the table of every kind of set
    downloads = re.search(r'<ul class="downloads">.*?</ul>', page, re.S).group(0)
    assert re.findall(r'href="tables/([^"]+)"', downloads) == [
        "choose_sets.csv", "beyond_every_set.csv", "class_coverage_pets.tsv"]


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
    classes = pd.read_csv(tables / "class_coverage_pets.tsv", sep="\t").drop_duplicates("class")
    assert list(classes["name"]) == NAMES and (classes["n_calibration"] == 3).all()


def test_choose_sets_csv_agrees_with_the_pages_table_and_is_its_argmin(model_run):
    page, tables = model_run
    from svbop.report.model import CHOOSE_COLUMNS

    chosen = pd.read_csv(tables / "choose_sets.csv", dtype={"goal": str, "method": str, "param": str, "label": str})
    assert tuple(chosen.columns) == CHOOSE_COLUMNS
    header, rows = _every_kind_of_set(page)
    numbers = {m: r for m, r in rows.items() if r["coverage %"] not in ("–", "")}
    for r in chosen.itertuples(index=False):  # every method named is a row of the page's table, with its numbers
        assert r.label in numbers, r.label
        assert (float(numbers[r.label]["coverage %"]), float(numbers[r.label]["mean set size"])) == (
            pytest.approx(r.coverage_pct, abs=1e-9), pytest.approx(r.mean_set_size, abs=1e-9))
    first = chosen.drop_duplicates("goal")
    assert list(first["goal"][:1]) == ["coverage >= 90%"]
    # the choice at 90 %: the smallest sets among the methods that guarantee 90 %, whatever these rows covered
    promised = {m: float(r["mean set size"]) for m, r in numbers.items()
                if r["guaranteed %"] not in ("", "–") and float(r["guaranteed %"]) >= 90
                and "without coverage guaranteed" not in r["calibrated"]}
    assert first["mean_set_size"].iloc[0] == min(promised.values())
    ranks = chosen[(chosen["goal"] == "coverage >= 90%") & (chosen["basis"] == "guaranteed")]
    assert list(ranks["mean_set_size"]) == sorted(promised.values())[: len(ranks)]
    for goal, label in (("best F1 utility", "uF1 %"), ("best F5 utility", "uF5 %")):
        best = chosen[chosen["goal"] == goal]["label"].iloc[0]
        assert float(numbers[best][label]) == max(float(r[label]) for r in numbers.values())
    # the page's own "which sets to use" table names the same methods in the same order
    table = re.search(r'<table class="choose-sets" data-dataset="pets">.*?</table>', page, re.S).group(0)
    on_page = [_text(m) for m in re.findall(r'<td class="text method">(.*?)</td>', table, re.S)]
    assert on_page == list(chosen["label"])
    assert re.findall(r'<tr data-goal="[^"]+" data-rank="\d+" data-method="([^"]+)" data-param="([^"]*)"', table) == \
        list(zip(chosen["method"], chosen["param"]))


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
    assert not chosen["label"].str.startswith("Class-conditional").any()
    assert "conformal_lac_cc" not in set(chosen["method"])
    # Mondrian by the predicted class: its groups are as short of rows; it falls back and says so, per group
    groups = re.search(r'<p class="caption small-groups" data-dataset="pets" data-method="mondrian_lac_predicted_class/'
                       r'0.10" data-rows-needed="9">(.*?)</p>', page, re.S)
    assert groups and "at least 9 calibration rows per group" in _text(groups.group(1))
    share = _text(re.search(r'<p class="caption calibration-share" data-dataset="pets">(.*?)</p>', page, re.S).group(1))
    assert share.startswith("Calibration rows: 18, from your own calibration file; the fewest in a class: 3")


def test_choose_sets_is_the_brute_force_choice():
    """Coverage goals: the methods whose promise meets the level, smallest sets first, whatever the test rows
    covered; then, apart, those without a promise that reached it on the rows; a broken promise (a Mondrian
    fallback, a method not calibrated) is no promise."""
    from svbop.report.model import BASIS_GUARANTEED, BASIS_REACHED, choose_sets

    rng = np.random.default_rng(0)
    for _ in range(50):
        n = 12
        table = pd.DataFrame({
            "method": [f"M_{{{i}}}" for i in range(n)], "key": [f"m{i}/x" for i in range(n)], "family": "conformal",
            "n_test": 1000,
            "coverage_pct": rng.choice([85.0, 89.996, 90.0, 92.5, 95.0, np.nan], n),
            "mean_size": rng.choice([1.0, 1.234, 1.236, 2.5, 3.0], n),
            "target_coverage_pct": rng.choice([90.0, 95.0, np.nan], n),
            "calibrated": rng.choice(["q = 0.9", "", "one q per group: 3 groups (1 group with fewer than 9 calibration "
                                      "rows ...: they get the marginal q = 0.9, without coverage guaranteed within "
                                      "them)"], n, p=[0.6, 0.3, 0.1]),
            "fbeta_1_pct": rng.uniform(40, 60, n).round(3)})
        chosen = choose_sets(table, [0.1, 0.05], ["fbeta:beta=1"], runners_up=2)
        assert list(dict.fromkeys(chosen["goal"])) == ["coverage >= 90%", "coverage >= 95%", "best F1 utility"]
        shown = table.assign(c=[float(f"{v:.2f}") for v in table["coverage_pct"]],
                             s=[float(f"{v:.2f}") for v in table["mean_size"]])
        kept = shown["c"].notna() & ~shown["calibrated"].str.contains("without coverage guaranteed")
        for eps, goal in ((0.1, "coverage >= 90%"), (0.05, "coverage >= 95%")):
            rows = chosen[chosen["goal"] == goal]
            level = 100 * (1 - eps)
            promised = shown[kept & (shown["target_coverage_pct"] >= level)]
            best = sorted(zip(promised["s"], promised["mean_size"], -promised["target_coverage_pct"], promised.index))
            first = rows[rows["basis"] == BASIS_GUARANTEED]
            if promised.empty:
                assert list(first["method"]) == ["none"] and list(first["rank"]) == [0]
            else:
                assert list(first["method"]) == [f"m{i}" for *_, i in best[:3]]
                assert list(first["rank"]) == list(range(1, len(first) + 1))
                assert (first["guaranteed_pct"] >= level).all()
            reached = shown[shown["c"].notna() & ~shown.index.isin(promised.index) & (shown["c"] >= level)]
            order = sorted(zip(reached["s"], reached["mean_size"], -reached["coverage_pct"], reached.index))
            after = rows[rows["basis"] == BASIS_REACHED]
            assert list(after["method"]) == [f"m{i}" for *_, i in order[:3]]
            start = 1 + int((first["rank"] > 0).sum())  # the count goes on after the guaranteed ones
            assert list(after["rank"]) == list(range(start, start + len(after)))
            assert list(rows["basis"]) == sorted(rows["basis"], key=lambda b: b != BASIS_GUARANTEED)  # apart, after
        u = chosen[chosen["goal"] == "best F1 utility"]
        valid = table[table["coverage_pct"].notna()]
        assert u["utility_pct"].iloc[0] == max(float(f"{v:.2f}") for v in valid["fbeta_1_pct"])


def test_the_test_coverage_is_given_with_its_clopper_pearson_interval():
    from scipy.stats import binomtest

    from svbop.report.model import choose_sets, clopper_pearson

    low, high = clopper_pearson([0, 10, 7, 900], [10, 10, 10, 1000])
    assert high[0] == pytest.approx(100 * (1 - 0.025 ** (1 / 10)))  # k = 0: 1 - (alpha/2)^(1/n)
    assert low[1] == pytest.approx(100 * 0.025 ** (1 / 10)) and high[1] == 100 and low[0] == 0
    for k, n, lo, hi in ((7, 10, low[2], high[2]), (900, 1000, low[3], high[3])):
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert (lo, hi) == (pytest.approx(100 * ci.low), pytest.approx(100 * ci.high))
    assert np.isnan(clopper_pearson([1], [0])[0][0])
    table = pd.DataFrame({"method": ["ICP_{ε=0.10}"], "key": ["icp/0.10"], "family": ["icp"], "n_test": [1000],
                          "coverage_pct": [89.95], "mean_size": [2.96], "target_coverage_pct": [90.0],
                          "calibrated": [""]})
    row = choose_sets(table, [0.1], []).iloc[0]  # the case: ICP guaranteed 90 %, 89.95 % on these rows
    assert (row["method"], row["param"], row["rank"], row["basis"]) == ("icp", "0.10", 1, "guaranteed")
    ci = binomtest(900, 1000).proportion_ci(0.95, method="exact")  # 899.5 rows covered, rounded half to even
    assert (row["coverage_low_pct"], row["coverage_high_pct"]) == (pytest.approx(100 * ci.low),
                                                                  pytest.approx(100 * ci.high))


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


#: What only the paper's page may say: its experiments, tables, figures, theorem, datasets and files (issue 50).
PAPER_WORDS = ("paper", "table 1", "table 2", "table 3", "table 4", "table 5", "figure 1", "figure 2", "figure 3",
               "theorem", "θ", "theta", "beyond the", "not installed", "not applicable", "liblinear", "torch",
               "lshtc", "mnist", "vgg", "stand-in", "claims", "reproduction")
PAPER_FILES = ("vs_paper", "claims", "utility_properties", "genreject", "fbeta_family", "table2", "table3",
               "dataset_status")


def test_nothing_of_the_paper_on_the_model_page_or_in_its_files(model_run):
    """One sentence cites the paper for the Bayes-optimal sets; no other word of the page (text, attributes, CSS),
    no file under tables/ or figures/ and no cell of those tables refers to the paper's experiments."""
    page, tables = model_run
    out = tables.parent
    names = sorted(p.name for folder in ("tables", "figures") for p in (out / folder).iterdir())
    assert names == ["beyond_coverage_size.png", "beyond_every_set.csv", "choose_sets.csv", "class_coverage_pets.tsv"]
    assert not [n for n in names if any(w in n.lower() for w in PAPER_FILES)], names
    raw = re.sub(r'src="data:image/png;base64,[^"]+"', "", page)
    raw = re.sub(r'(<script[^>]*>).*?(</script>)', r"\1\2", raw, flags=re.S)  # the level section's data and code
    text = " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", raw)).split())
    citation = re.findall(r"[^.]*Mortier[^.]*\.[^.]*\.[^.]*\.", text)
    assert len(citation) == 1 and text.count("Efficient set-valued prediction") == 1, citation
    rest = html_lib.unescape(raw).replace(html_lib.unescape(re.search(r'<p class="meta citation">.*?</p>', raw,
                                                                      re.S).group(0)), "").lower()
    found = {w: rest.count(w) for w in PAPER_WORDS if w in rest}
    assert not found, {w: re.findall(rf".{{0,60}}{re.escape(w)}.{{0,40}}", rest)[:2] for w in found}
    for path in (out / "tables").iterdir():
        body = path.read_text().lower()
        assert not [w for w in PAPER_WORDS if w in body], path


def test_the_tables_join_on_their_method_keys(model_run):
    _, tables = model_run
    every = pd.read_csv(tables / "beyond_every_set.csv", dtype={"method": str, "param": str, "label": str})
    chosen = pd.read_csv(tables / "choose_sets.csv", dtype={"method": str, "param": str, "label": str})
    classes = pd.read_csv(tables / "class_coverage_pets.tsv", sep="\t", dtype={"method": str, "param": str,
                                                                                "label": str, "name": str})
    keys = ["dataset", "method", "param"]
    assert not every.duplicated(keys).any()
    named = chosen[chosen["method"] != "none"]
    joined = named.merge(every, on=keys, how="left", suffixes=("", "_every"), validate="many_to_one")
    assert joined["label_every"].notna().all() and (joined["label"] == joined["label_every"]).all()
    assert np.allclose(joined["coverage_pct"], joined["coverage_pct_every"], atol=0.005 + 1e-9)  # as shown: 2 decimals
    assert np.allclose(joined["mean_set_size"], joined["mean_size"], atol=0.005 + 1e-9)
    assert (joined["n_test"] == joined["n_test_every"]).all()
    # every class's coverage under every method that has sets, by the same keys and labels
    per_class = classes.merge(every, on=keys, how="left", suffixes=("", "_every"))
    assert per_class["label_every"].notna().all() and (per_class["label"] == per_class["label_every"]).all()
    assert set(map(tuple, classes[keys[1:]].drop_duplicates().to_numpy())) == set(
        map(tuple, every.loc[every["coverage_pct"].notna(), keys[1:]].to_numpy()))
    # no label with a method's key in it, no key with a display character in it
    assert not every["method"].str.contains(r"[^a-z0-9_]").any() and every["label"].str.contains(r"[A-Z]").all()


def test_the_page_says_the_chosen_methods_coverage_is_an_estimate_with_its_interval(model_run):
    page, tables = model_run
    chosen = pd.read_csv(tables / "choose_sets.csv", dtype={"param": str})
    first = chosen[(chosen["goal"] == "coverage >= 90%")].iloc[0]
    assert first["basis"] == "guaranteed" and first["guaranteed_pct"] >= 90
    assert first["coverage_low_pct"] <= first["coverage_pct"] <= first["coverage_high_pct"]
    note = _text(re.search(r'<p class="caption estimate" data-dataset="pets" data-goal="coverage &gt;= 90%">(.*?)</p>',
                           page, re.S).group(1))
    assert note == (f"coverage ≥ 90%: {first['label']} guarantees {first['guaranteed_pct']:.1f} %; on the "
                    f"{int(first['n_test']):,} test rows it covered {first['coverage_pct']:.2f} %, an estimate whose "
                    f"95 % interval is {first['coverage_low_pct']:.1f}–{first['coverage_high_pct']:.1f} %.")
    reached = chosen[(chosen["goal"] == "coverage >= 90%") & (chosen["basis"] != "guaranteed")]
    assert (reached["guaranteed_pct"].isna()).all() and (reached["coverage_pct"] >= 90).all()
    if len(reached):
        assert "reached the level on these rows" in _text(page)


def test_each_utility_says_what_it_rewards_with_the_size_that_still_earns_half():
    from svbop.report.model import utilities_context, utility_rewards

    # F1: g(s) = 2 / (s + 1), half at s = 3; F5: 26 / (s + 25), half at s = 27; credal (1.6, 0.6): g(2) = 0.65,
    # g(3) = 0.4667
    assert utility_rewards("fbeta:beta=1", 100).endswith("(their F-measure at β = 1): β = 1 weighs them alike, a "
                                                         "larger β weighs holding the true class more, so larger sets "
                                                         "pay; a right set earns at least half of the most up to s = 3 "
                                                         "classes")
    assert utility_rewards("fbeta:beta=5", 100).endswith("up to s = 27 classes")
    assert utility_rewards("credal:delta=1.6,gamma=0.6", 100).endswith("up to s = 2 classes")
    assert utility_rewards("fbeta:beta=5", 10).endswith("up to s = 10 classes")  # never more than K
    assert "half" not in utility_rewards("recall", 100)
    context = utilities_context(["fbeta:beta=1", "credal:delta=1.6,gamma=0.6"], 4)
    assert context["sizes"] == [1, 2, 3] and [r["g"] for r in context["rows"]] == [["1.00", "0.67", "0.50"],
                                                                                   ["1.00", "0.65", "0.47"]]
    assert context["figure"].startswith("data:image/png;base64,")
