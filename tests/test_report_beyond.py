"""The report's section "Beyond the paper: every kind of set" (issue 28), from small synthetic inputs:
its own section, apart from the paper's Tables 3 and 4, one table per dataset and one figure."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from test_report import LABELS, METHODS, UTILITIES, _report, figure_png, inputs  # noqa: F401 (fixtures)

from svbop.report.beyond import read_beyond
from svbop.report.figures import plot_coverage_size

NEW_METHODS = [("conformal_aps", "0.10"), ("conformal_raps", "0.01"), ("conformal_lac_cc", "0.10"),
               ("coverage_fbeta", "0.10"), ("coverage_credal", "0.10"), ("hierarchical_3", "fbeta_1")]


def _beyond(dataset: str, seed: int, hierarchy: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    methods = [m for m in METHODS] + [m for m in NEW_METHODS if hierarchy or not m[0].startswith("hierarchical")]
    for method, param in methods:
        eps = method == "icp" or method.startswith(("conformal_", "coverage_"))
        row = {"dataset": dataset, "method": method, "param": param, "n_test": 347,
               "target_coverage_pct": 100 * (1 - float(param)) if eps else np.nan,
               "coverage_pct": round(rng.uniform(80, 100), 3), "class_coverage_worst_pct": round(rng.uniform(40, 80), 3),
               "ssc_worst_pct": rng.uniform(30, 90), "singleton_pct": rng.uniform(0, 100), "empty_pct": 0.0,
               "mean_size": round(rng.uniform(1, 9), 3)}
        row.update({f"{lab}_pct": round(rng.uniform(20, 98), 3) for lab in LABELS})
        row["calibrated"] = "beta = 2.5" if method == "coverage_fbeta" else ("q = 0.93" if method.startswith("conformal") else "")
        rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture
def beyond_files(tmp_path):
    paths = []
    for i, (d, hierarchy) in enumerate((("digits", False), ("synth1000", True))):
        path = tmp_path / "results" / d / "beyond.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        _beyond(d, i, hierarchy).to_csv(path, sep="\t", index=False)
        paths.append(path)
    return paths


def _section(html: str, name: str) -> str:
    match = re.search(rf'<section id="{name}"[^>]*>.*?</section>', html, re.S)
    assert match, f"no section {name}"
    return match.group(0)


def _row_keys(section: str, dataset: str) -> list[str]:
    table = re.search(rf'<table class="beyond" data-dataset="{dataset}">.*?</table>', section, re.S).group(0)
    return re.findall(r'<tr data-method="([^"]+)"', table)


def test_the_section_stands_apart_from_tables_3_and_4(inputs, beyond_files, tmp_path):  # noqa: F811
    skipped = {"digits": {"hierarchical": "this dataset has no class hierarchy"}}
    html, page = _report(inputs, tmp_path, beyond=beyond_files, beyond_skipped=skipped)
    ids = re.findall(r'<section id="([^"]+)"', html)
    # after every section of the paper's tables and figures, before what was run
    assert ids.index("beyond") > max(ids.index(s) for s in ("predictions", "algorithms", "claims", "genreject"))
    assert ids.index("beyond") < ids.index("what-was-run")
    section = _section(html, "beyond")
    assert "Beyond the paper: every kind of set" in section and "beyond the paper" in section
    assert '<a href="#beyond">' in html
    # no method beyond the paper leaks into Table 3 or Table 4
    for name in ("predictions", "algorithms"):
        other = _section(html, name)
        assert not re.search(r'data-method="(conformal|coverage|hierarchical)_', other)
        assert "APS" not in other and "coverage<sub>" not in other
    # one table per dataset, every method of its file in it
    tables = {t["attrs"]["data-dataset"]: t for t in page.tables if "beyond" in t["attrs"].get("class", "")}
    assert set(tables) == {"digits", "synth1000"}
    for d, path in zip(("digits", "synth1000"), beyond_files):
        frame = pd.read_csv(path, sep="\t", dtype={"param": str})
        rows = tables[d]["rows"][1:]
        keys = _row_keys(section, d)
        assert len(rows) == len(frame)
        header = [c["text"] for c in tables[d]["rows"][0]]
        cov, worst, size = header.index("coverage %"), header.index("worst class %"), header.index("mean set size")
        for r in frame.to_dict("records"):
            row = rows[keys.index(f"{r['method']}/{r['param']}")]
            assert row[cov]["text"] == f"{r['coverage_pct']:.2f}"
            assert row[worst]["text"] == f"{r['class_coverage_worst_pct']:.2f}"
            assert row[size]["text"] == f"{r['mean_size']:.2f}"
            # the utility columns first, in the run's order
            assert [c["text"] for c in row[1:1 + len(LABELS)]] == [f"{r[f'{lab}_pct']:.2f}" for lab in LABELS]
    # the paper's methods come first, the new ones after
    keys = _row_keys(section, "synth1000")
    assert keys[0].startswith("svbop_full/") and keys[-1].startswith("hierarchical_3/")
    # the figure is in the section, and the reason a kind of set did not run is said
    assert re.search(r'<img src="data:image/png;base64,', section)
    assert "Hierarchy-restricted: not run, this dataset has no class hierarchy" in section
    assert "β = 2.5" in section  # the calibrated parameter, by its symbol


def test_an_unreachable_method_shows_dashes_and_its_reason(inputs, beyond_files, tmp_path):  # noqa: F811
    frame = pd.read_csv(beyond_files[0], sep="\t", dtype={"param": str})
    row = frame["method"] == "coverage_credal"
    numbers = ["coverage_pct", "class_coverage_worst_pct", "mean_size", *(f"{lab}_pct" for lab in LABELS)]
    frame.loc[row, numbers] = np.nan
    reason = "not reachable: score='credal' with gamma=1.2: even the largest credal sets; use score='fbeta'"
    frame.loc[row, "calibrated"] = reason
    from svbop.io import write_tsv  # as evaluate_beyond's rows are written: NaN as "nan"

    write_tsv(beyond_files[0], frame.to_dict("records"))
    assert "\tnan\t" in beyond_files[0].read_text()
    html, page = _report(inputs, tmp_path, beyond=beyond_files)
    table = next(t for t in page.tables if t["attrs"].get("data-dataset") == "digits" and "beyond" in t["attrs"]["class"])
    keys = _row_keys(_section(html, "beyond"), "digits")
    cells = [c["text"] for c in table["rows"][1 + keys.index("coverage_credal/0.10")]]
    assert cells[1:1 + len(LABELS)] == ["–"] * len(LABELS) and cells[-1] == reason


def test_no_section_without_methods_beyond_the_paper(inputs, tmp_path):  # noqa: F811
    html, _ = _report(inputs, tmp_path)
    assert 'id="beyond"' not in html and "#beyond" not in html


def test_coverage_below_its_guarantee_is_marked(inputs, beyond_files, tmp_path):  # noqa: F811
    frame = read_beyond(beyond_files)
    frame.loc[(frame["method"] == "conformal_aps") & (frame["dataset"] == "digits"), "coverage_pct"] = 85.0
    frame.loc[(frame["method"] == "conformal_raps") & (frame["dataset"] == "digits"), "coverage_pct"] = 99.5
    html, _ = _report(inputs, tmp_path, beyond=frame)
    section = re.search(r'<table class="beyond" data-dataset="digits">.*?</table>', _section(html, "beyond"), re.S).group(0)
    below = re.findall(r'data-method="([^"]+)" data-family="[^"]+"[^>]*>\s*<th[^>]*>.*?</th>(.*?)</tr>', section, re.S)
    marked = {key for key, cells in below if "coverage below" in cells}
    assert "conformal_aps/0.10" in marked and "conformal_raps/0.01" not in marked


@pytest.mark.parametrize("change, message", [
    (lambda df: df.drop(columns=["class_coverage_worst_pct"]), "missing column 'class_coverage_worst_pct'"),
    (lambda df: df.assign(method=["lac_magic"] * len(df)), "unknown method 'lac_magic'"),
    (lambda df: df.assign(coverage_pct=["high"] * len(df)), "column 'coverage_pct' is not a number: 'high'"),
    (lambda df: pd.concat([df, df.iloc[:1]]), "appears twice"),
])
def test_a_bad_beyond_file_is_named(tmp_path, change, message):
    path = tmp_path / "beyond.tsv"
    change(_beyond("digits", 0)).to_csv(path, sep="\t", index=False)
    with pytest.raises(ValueError) as info:
        read_beyond(path, UTILITIES)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_the_figure_has_one_panel_per_dataset_and_one_marker_per_method(beyond_files):
    frame = read_beyond(beyond_files)
    fig = plot_coverage_size(frame, {"digits": "Digits"})
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["Digits", "synth1000"]
    for ax, d in zip(axes, ("digits", "synth1000")):
        points = np.vstack([c.get_offsets() for c in ax.collections])
        rows = frame[frame["dataset"] == d]
        assert len(points) == len(rows)
        assert sorted(map(tuple, points.round(6))) == sorted(zip(rows["mean_size"].round(6), rows["coverage_pct"].round(6)))
        assert ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="no methods"):
        plot_coverage_size(frame.iloc[:0])
