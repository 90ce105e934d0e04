"""The HTML report and its tables, from small synthetic inputs (offline, no pipeline run)."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import svbop
from svbop.report import (
    best_mask,
    build_report,
    environment_versions,
    metrics_long,
    plot_utilities,
    read_metrics,
    save_figure,
    table2,
    table3,
    write_utility_table,
)

PAPER_TABLE3 = Path(__file__).resolve().parents[2] / "shared" / "paper" / "table3_utilities.csv"
UTILITIES = ["credal:delta=1.6,gamma=0.6", "fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "fbeta:beta=5"]
LABELS = [svbop.utility(u).label for u in UTILITIES]
METHODS = (
    [("svbop_full", lab) for lab in LABELS]
    + [("threshold", lab) for lab in LABELS]
    + [("top_s", s) for s in ("1", "3", "5")]
    + [("icp", e) for e in ("0.01", "0.10")]
)
SUMMARIES = [
    {
        "dataset": "digits", "title": "Digits (scikit-learn)", "synthetic": False,
        "description": "8x8 handwritten digits <b>not bold</b>", "features": "raw", "K": 10, "D": 64,
        "N_train": 1000, "N_validation": 250, "N_calibration": 200, "N_test": 347,
        "top1_pct": 96.54, "train_seconds": 1.25,
    },
    {
        "dataset": "synth1000", "title": "Synthetic 1000", "synthetic": True,
        "description": "Gaussian blobs", "features": "raw", "K": 1000, "D": 20,
        "N_train": 5000, "N_validation": 1000, "N_calibration": 1000, "N_test": 2000,
        "top1_pct": 41.5, "train_seconds": 12.0,
    },
]


def _metrics(dataset: str, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for method, param in METHODS:
        row = {"dataset": dataset, "method": method, "param": param, "n_test": 347,
               "recall_pct": rng.uniform(80, 100), "mean_size": rng.uniform(1, 5), "top1_pct": 90.0}
        for lab in LABELS:
            row[f"{lab}_pct"] = round(rng.uniform(20, 98), 4)
        row["theta"] = rng.uniform(0, 1) if method == "threshold" else np.nan
        rows.append(row)
    df = pd.DataFrame(rows)
    # a tie for the best of one column: both cells must be marked
    best = df["fbeta_5_pct"].max()
    df.loc[df["method"] == "top_s", "fbeta_5_pct"] = best
    return df


@pytest.fixture(scope="module")
def figure_png(tmp_path_factory):
    path = tmp_path_factory.mktemp("figures") / "utilities_K100.png"
    save_figure(plot_utilities(UTILITIES, K=100), path)
    return path


@pytest.fixture
def inputs(tmp_path, figure_png):
    paths = {"summaries": [], "metrics": [], "figure": figure_png}
    for i, s in enumerate(SUMMARIES):
        folder = tmp_path / "results" / s["dataset"]
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(s))
        _metrics(s["dataset"], seed=i).to_csv(folder / "metrics.tsv", sep="\t", index=False)
        paths["summaries"].append(folder / "summary.json")
        paths["metrics"].append(folder / "metrics.tsv")
    return paths


class _Page(HTMLParser):
    """Collects <img> sources, links and the cells of every <table> (text, marked best or not)."""

    def __init__(self):
        super().__init__()
        self.imgs, self.attrs, self.tables, self.stack, self.text = [], [], [], [], []
        self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.attrs.append((tag, attrs))
        if tag == "img":
            self.imgs.append(attrs.get("src", ""))
        elif tag == "table":
            self.tables.append({"attrs": attrs, "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = {"text": "", "best": "best" in attrs.get("class", ""), "attrs": attrs}

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._cell["text"] = " ".join(self._cell["text"].split())
            self.tables[-1]["rows"][-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell["text"] += data


def _report(inputs, tmp_path, **kwargs) -> tuple[str, _Page]:
    kwargs.setdefault("config", {"utilities": UTILITIES, "run": ["digits", "synth1000"], "seed": np.int64(7), "K": (1, 2)})
    out = build_report(
        tmp_path / "results" / "report.html",
        summaries=inputs["summaries"],
        metrics=inputs["metrics"],
        figures={"utilities": inputs["figure"]},
        utilities=UTILITIES,
        created="2024-01-02 03:04 UTC",
        **kwargs,
    )
    html = Path(out).read_text(encoding="utf-8")
    page = _Page()
    page.feed(html)
    return html, page


def test_report_is_one_self_contained_html_page(inputs, tmp_path):
    html, page = _report(inputs, tmp_path)
    assert html.lstrip().lower().startswith("<!doctype html>") and html.count("<html") == 1
    assert html.rstrip().endswith("</html>")
    for tag, attrs in page.attrs:
        for key in ("src", "href"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//")), (tag, attrs)
        assert not (tag == "link" and attrs.get("rel") == "stylesheet"), attrs
        assert tag != "script" or not attrs.get("src"), attrs
    assert page.imgs
    for src in page.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1], validate=True).startswith(b"\x89PNG\r\n\x1a\n")
    for section in ("What was run", "Datasets", "Set-valued predictions", "Utilities"):
        assert f">{section}</h2>" in html
    assert "svbop " + svbop.__version__ in html and "2024-01-02 03:04 UTC" in html
    # text is escaped, the config is shown as YAML
    assert "<b>not bold</b>" not in html and "&lt;b&gt;not bold&lt;/b&gt;" in html
    assert "<details>" in html and "seed: 7" in html


def test_table2_equals_the_summaries(inputs, tmp_path):
    _, page = _report(inputs, tmp_path)
    (t1,) = [t for t in page.tables if t["attrs"].get("class") == "table2"]
    header = [c["text"] for c in t1["rows"][0]]
    # the paper's notation: N<sub>train</sub> (the parser joins it to "Ntrain")
    assert header == ["Dataset", "K", "D", "Ntrain", "Nvalidation", "Ncalibration", "Ntest", "top-1 %"]
    body = t1["rows"][1:]
    assert len(body) == len(SUMMARIES)
    for row, s in zip(body, SUMMARIES):
        cells = [c["text"] for c in row]
        assert cells[0].startswith(s["title"])
        assert ("synthetic" in cells[0]) == s["synthetic"]
        for col, value in zip(header[1:7], cells[1:7]):
            assert int(value) == s[col.replace("N", "N_") if col.startswith("N") else col]
        assert float(cells[7]) == pytest.approx(s["top1_pct"], abs=0.005)
    frame = table2(SUMMARIES)
    assert frame["Dataset"].tolist() == ["Digits (scikit-learn)", "Synthetic 1000 (synthetic)"]


def test_table3_marks_the_column_maxima_of_the_metrics_files(inputs, tmp_path):
    _, page = _report(inputs, tmp_path)
    tables = [t for t in page.tables if t["attrs"].get("class") == "table3"]
    assert [t["attrs"]["data-dataset"] for t in tables] == ["digits", "synth1000"]
    for t, path in zip(tables, inputs["metrics"]):
        metrics = pd.read_csv(path, sep="\t", dtype={"param": str})
        header, body = t["rows"][0], t["rows"][1:]
        assert len(body) == 13
        assert body[0][0]["text"] == "SVBOP-Full-uδ=1.6,γ=0.6" and body[-1][0]["text"] == "ICPε=0.10"
        assert [r[0]["text"] for r in body[8:11]] == ["Top-1", "Top-3", "Top-5"]
        utility_cols = [(j, c["attrs"]["data-utility"]) for j, c in enumerate(header) if "data-utility" in c["attrs"]]
        assert [lab for _, lab in utility_cols] == LABELS
        for j, lab in utility_cols:
            values = np.array([float(r[j]["text"]) for r in body])
            marked = {i for i, r in enumerate(body) if r[j]["best"]}
            expected = metrics[f"{lab}_pct"].round(2).max()
            assert marked and all(values[i] == pytest.approx(expected) for i in marked)
            assert marked == set(np.flatnonzero(np.isclose(values, expected)))
        j5 = dict((lab, j) for j, lab in utility_cols)["fbeta_5"]
        assert sum(r[j5]["best"] for r in body) >= 3  # the planted tie: top-1, top-3, top-5 share it
        assert not any(c["best"] for r in body for c in r[len(LABELS) + 1 :])  # recall, size unmarked


def test_the_synthetic_dataset_is_labelled_everywhere(inputs, tmp_path):
    html, page = _report(inputs, tmp_path)
    assert re.search(r'<h3 id="table3-synth1000"[^>]*>Synthetic 1000 \(synthetic\)</h3>', html)
    assert re.search(r'<h3 id="table3-digits"[^>]*>Digits \(scikit-learn\)</h3>', html)
    run = [t for t in page.tables if t["attrs"].get("class") == "run-datasets"][0]
    labels = {r[0]["text"]: r[1]["text"] for r in run["rows"][1:]}
    assert "synthetic" in labels["synth1000"] and "synthetic" not in labels["digits"]


def test_what_was_run_lists_convexity_and_versions(inputs, tmp_path):
    _, page = _report(inputs, tmp_path, versions={"python": "3.11", "svbop": "9.9", "torch": "not installed"})
    run = [t for t in page.tables if t["attrs"].get("class") == "run-utilities"][0]
    # name, spec, then (1/x)-convexity at each dataset's K (g(s) itself is in Table 1, not repeated)
    assert [c["text"].replace(" ", "") for c in run["rows"][0][2:]] == ["(1/x)-convexK=10", "(1/x)-convexK=1000"]
    for row, spec in zip(run["rows"][1:], UTILITIES):
        assert row[1]["text"] == spec
        expected = [svbop.utility(spec, K).properties().one_over_x_convex for K in (10, 1000)]
        assert [c["text"] == "yes" for c in row[2:]] == expected
    versions = [t for t in page.tables if t["attrs"].get("class") == "versions"][0]
    assert {r[0]["text"]: r[1]["text"] for r in versions["rows"][1:]}["torch"] == "not installed"
    found = environment_versions()
    assert set(found) == {"python", "numpy", "scipy", "scikit-learn", "torch", "liblinear", "snakemake", "svbop"}
    assert found["numpy"] == np.__version__


def test_table3_and_best_mask_frames(inputs):
    metrics = read_metrics(inputs["metrics"])
    t = table3(metrics, "digits", UTILITIES)
    assert list(t.columns) == ["u_{δ=1.6,γ=0.6}", "u_{F1}", "u_{δ=2.2,γ=1.2}", "u_{F5}", "recall %", "mean set size", "θ"]
    # the tuned theta on the Threshold rows only
    threshold = [m == "threshold" for m, _ in t.attrs["keys"]]
    assert t["θ"][threshold].notna().all() and t["θ"][[not x for x in threshold]].isna().all()
    assert t.index[0] == "SVBOP-Full-u_{δ=1.6,γ=0.6}" and t.index[4] == "Threshold-u_{δ=1.6,γ=0.6}"
    mask = best_mask(t)
    assert mask["u_{F1}"].sum() >= 1 and not mask["recall %"].any()
    assert t.loc[mask["u_{F1}"], "u_{F1}"].iloc[0] == pytest.approx(t["u_{F1}"].max())
    with pytest.raises(ValueError, match="nope"):
        table3(metrics, "nope", UTILITIES)


def test_metrics_long_matches_the_paper_csv(inputs):
    if not PAPER_TABLE3.is_file():
        pytest.skip("the paper's table is not available at ../shared/paper/table3_utilities.csv")
    paper = pd.read_csv(PAPER_TABLE3, dtype={"param": str})
    long = metrics_long(read_metrics(inputs["metrics"]))
    assert list(long.columns) == list(paper.columns)
    assert set(map(tuple, long[["method", "param"]].drop_duplicates().to_numpy())) == set(
        map(tuple, paper[["method", "param"]].drop_duplicates().to_numpy())
    )
    assert set(long["eval_utility"]) == set(paper["eval_utility"])
    assert len(long) == 2 * 13 * 4
    wide = read_metrics(inputs["metrics"][0])
    row = long[(long["method"] == "icp") & (long["param"] == "0.10") & (long["eval_utility"] == "fbeta_1")]
    assert row["utility_pct"].iloc[0] == wide.loc[wide["param"] == "0.10", "fbeta_1_pct"].iloc[0]


def test_write_utility_table_still_works(tmp_path):
    out = tmp_path / "sub" / "utility_properties_K100.tsv"
    write_utility_table(out, ["fbeta:beta=1", "log"], K=100)
    lines = out.read_text().splitlines()
    header = lines[0].split("\t")
    row = dict(zip(header, lines[1].split("\t")))
    assert row["spec"] == "fbeta:beta=1" and row["one_over_x_convex"] == "True" and row["K"] == "100"
    assert len(lines) == 3 and list(out.parent.iterdir()) == [out]  # no temporary file left


@pytest.mark.parametrize("column", ["recall_pct", "param", "fbeta_1_pct"])
def test_a_metrics_file_missing_a_column_is_named(inputs, tmp_path, column):
    bad = tmp_path / "bad_metrics.tsv"
    pd.read_csv(inputs["metrics"][0], sep="\t").drop(columns=[column]).to_csv(bad, sep="\t", index=False)
    with pytest.raises(ValueError, match=rf"bad_metrics\.tsv.*{column}"):
        read_metrics([bad], utilities=UTILITIES)
    with pytest.raises(ValueError, match=rf"bad_metrics\.tsv.*{column}"):
        build_report(tmp_path / "r.html", summaries=SUMMARIES, metrics=[bad], figures={},
                     config={}, utilities=UTILITIES)
    assert not (tmp_path / "r.html").exists()


def test_bad_summaries_and_figures_are_refused(inputs, tmp_path):
    broken = dict(SUMMARIES[0])
    del broken["N_test"]
    with pytest.raises(ValueError, match="N_test"):
        table2([broken])
    not_png = tmp_path / "fig.png"
    not_png.write_text("hello")
    with pytest.raises(ValueError, match="fig.png"):
        build_report(tmp_path / "r.html", summaries=SUMMARIES, metrics=inputs["metrics"],
                     figures={"utilities": not_png}, config={}, utilities=UTILITIES)
    with pytest.raises(ValueError, match="template"):
        build_report(tmp_path / "r.html", summaries=SUMMARIES, metrics=inputs["metrics"],
                     figures={"utilities": inputs["figure"]}, config={}, utilities=UTILITIES,
                     template=tmp_path / "missing.j2")


def test_plot_utilities_draws_one_line_per_utility(tmp_path):
    fig = plot_utilities(UTILITIES, K=100)
    (ax,) = fig.axes
    assert len(ax.get_lines()) == 4 and ax.get_xscale() == "log"
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), svbop.utility("fbeta:beta=1", 100).values())
    save_figure(fig, tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="g.pdf"):
        save_figure(fig, tmp_path / "g.pdf")


def test_output_files_are_named_by_the_papers_numbering(inputs, tmp_path):
    """The datasets table is the paper's Table 2: its files are table2_*, the downloads say what each
    holds without explaining an older numbering, and no rule, caption or doc names table1_* files."""
    root = Path(__file__).resolve().parents[1]
    rules = (root / "workflow/rules/report.smk").read_text()
    assert "results/tables/table2_datasets.tsv" in rules and '("table2", 2)' in rules
    docs = [root / "workflow/rules/report.smk", root / "workflow/README.md", root / "report/README.md",
            root / "report/workflow.rst", *sorted((root / "report/captions").glob("*.rst")), root / "README.md"]
    for path in docs:
        assert not re.search(r"table1_(datasets|vs_paper)|table\{1,", path.read_text()), path
    files = ["table2_datasets.tsv", "table2_vs_paper.csv", "table2_vs_paper.tex", "claims.json"]
    html, _ = _report(inputs, tmp_path, downloads={f: f"tables/{f}" for f in files})
    downloads = html[html.index('<section id="downloads">'):]
    assert re.search(r'href="tables/table2_datasets.tsv">table2_datasets.tsv</a> <small>&mdash; Table 2 \(the datasets\)',
                     downloads)
    assert "older numbering" not in html and "table1" not in downloads


def test_threshold_rows_show_their_theta_and_flag_an_edge_of_the_grid(inputs, tmp_path):
    """Table 3's θ column holds each Threshold row's tuned theta (from metrics.tsv); a theta at a
    binding edge of the grid is marked, listed under the table, and named in the claims."""
    path = inputs["metrics"][1]  # synth1000: 2,000 test rows, judged by the claims
    df = pd.read_csv(path, sep="\t", dtype={"param": str})
    thresholds = df["method"] == "threshold"
    df.loc[thresholds, "theta"] = [0.01, 0.01, 0.3, 1.0]
    df["theta_edge"] = ""
    df.loc[thresholds, "theta_edge"] = ["smallest", "smallest", "", "largest"]
    df.to_csv(path, sep="\t", index=False)
    html, page = _report(inputs, tmp_path)
    (t,) = [t for t in page.tables if t["attrs"].get("data-dataset") == "synth1000"]
    header = [c["text"] for c in t["rows"][0]]
    j = header.index("θ")
    shown = {r[0]["text"]: r[j]["text"] for r in t["rows"][1:]}
    assert [v for k, v in shown.items() if k.startswith("Threshold")] == ["0.01†", "0.01†", "0.3", "1†"]
    assert all(v == "–" for k, v in shown.items() if not k.startswith("Threshold"))
    block = html[html.index('data-dataset="synth1000"'):]
    note = re.search(r'<p class="caption theta-edge" data-count="3">(.*?)</p>', block, re.S).group(1)
    assert "Threshold-u<sub>δ=1.6,γ=0.6</sub> (θ = 0.01, the smallest value)" in note
    assert "Threshold-u<sub>F5</sub> (θ = 1, the largest value)" in note
    # the other dataset has no edge: no note
    digits = html[html.index('data-dataset="digits"'):html.index('data-dataset="synth1000"')]
    assert "theta-edge" not in digits
    # the caption says what θ is, and that the paper does not give its grid
    assert "without giving them" in html and "often identical" in html
    # the claims name the edge
    claims = html[html.index('<section id="claims">'):html.index('<section id="hyperparameters">')]
    assert re.search(r"θ at the edge of its grid.*Synthetic 1000, u<sub>δ=1.6,γ=0.6</sub> \(θ = 0.01, the smallest\)",
                     claims, re.S)
    # and the tables' file: theta beside every cell of a Threshold row
    from svbop.report.compare import table3_vs_paper

    t3 = table3_vs_paper(read_metrics(inputs["metrics"]), {})
    rows = t3[(t3.dataset == "synth1000") & (t3.method == "threshold") & (t3.param == "fbeta_5")]
    assert (rows["theta"] == 1.0).all() and (rows["theta_edge"] == "largest").all()
    assert (t3[t3.method != "threshold"]["theta_edge"] == "").all() and t3[t3.method != "threshold"]["theta"].isna().all()


def test_the_banner_says_there_are_no_paper_numbers_to_compare(inputs, tmp_path):
    """A run of no paper dataset: the top of the page says so and where the paper's numbers come from,
    and no caption promises the paper's value beside ours."""
    html, _ = _report(inputs, tmp_path)
    banner = re.search(r'<div class="banner banner-none" id="compared"[^>]*>(.*?)</div>', html, re.S).group(1)
    assert html.index('id="compared"') < html.index('<section id="status">')
    assert "No paper numbers to compare" in banner and "Digits (scikit-learn); Synthetic 1000 (synthetic)" in banner
    assert "<code>config.yaml</code>" in banner and "workflow/configs/shared_data.yaml" in banner
    assert "the paper's value below each" not in html and "followed by the paper's value" not in html
    assert "there are no paper values to put beside" in html


def test_table5_shows_a_value_chosen_on_the_validation_rows_and_flags_an_edge(inputs, tmp_path):
    """flat: {C: auto}: Table 5 shows the chosen C, "auto: chose X from grid Y", and † at a binding edge."""
    from svbop.tuning import select_point

    record = select_point([{"C": c, "eps": 0.1, "validation_log_loss": s} for c, s in ((10.0, 0.9), (100.0, 0.5),
                                                                                      (1000.0, 0.4))], tuned=("C",))
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(record))
    datasets = {"digits": {"flat": {"C": 100.0, "eps": 0.1}}, "synth1000": {"flat": {"C": "auto", "eps": 0.1}}}
    html, page = _report(inputs, tmp_path, tuning={"synth1000": str(path)},
                         config={"utilities": UTILITIES, "run": ["digits", "synth1000"], "datasets": datasets})
    (t5,) = [t for t in page.tables if t["attrs"].get("class") == "table5"]
    rows = {r[0]["text"].split(" (")[0]: r for r in t5["rows"][2:]}
    synth = next(r for name, r in rows.items() if "1000" in name)
    digits = next(r for name, r in rows.items() if "igits" in name)
    assert synth[1]["text"].startswith("1000†")
    assert "auto: chose 1000 from grid 10, 100, 1000 (the largest value" in synth[1]["text"]
    assert synth[1]["attrs"]["data-edge"] == "largest" and "edge" in synth[1]["attrs"]["class"]
    assert digits[1]["text"] == "100" and "auto" not in digits[1]["attrs"].get("class", "")
    note = re.search(r'<p class="caption table5-edge" data-count="1">(.*?)</p>', html, re.S).group(1)
    assert "full_C = 1000 (the largest value)" in note
