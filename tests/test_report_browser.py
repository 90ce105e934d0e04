"""The report in a real browser: headless Chromium loads it, every image decodes, the tables are
there, and it reads like the paper (no LaTeX label or internal key in the prose, the status fits
one screen, every text legible).

Skipped, with the reason, where Chromium is not installed (Debian package ``chromium``; ``.ci/run``
installs it).  The pipeline's own report is checked the same way in tests/test_workflow.py.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import svbop
from browser import chromium_executable, inspect_page, unreadable
from svbop.config import load_yaml, merge_configs, validate_config
from svbop.report import build_report
from svbop.report.browser import ChromiumError, screenshot
from svbop.report.illustrations import describe_rows, pick_by_entropy, plot_entropy_panel
from svbop.report.status import missing_inputs
from test_report import SUMMARIES, _metrics, _report, figure_png, inputs  # noqa: F401  (pytest fixtures, used by name)

ROOT = Path(__file__).resolve().parents[1]
needs_chromium = pytest.mark.skipif(
    chromium_executable() is None,
    reason="Chromium not installed (Debian package chromium): the report is not checked in a browser",
)

# a valid 1x1 PNG, and the same bytes cut short
_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def quickstart_config() -> dict:
    """config.yaml with workflow/configs/quickstart.yaml over it, defaults filled in, as the pipeline sees it."""
    config = merge_configs(load_yaml(ROOT / "config.yaml"), load_yaml(ROOT / "workflow/configs/quickstart.yaml"))
    return validate_config(config, ROOT / "workflow/schemas/config.schema.yaml")


def _approximate_rows(dataset: str, labels: list[str], seed: int) -> pd.DataFrame:
    """SVBOP-Full as the paper runs it, HSG and both HFs, timed (Table 4)."""
    rng = np.random.default_rng(seed)
    rows = []
    for method, ms in (("svbop_full_naive", 2.0), ("svbop_hsg", 0.5), ("svbop_hf_predefined", 0.2), ("svbop_hf_kmeans", 0.3)):
        for lab in labels:
            rows.append({"dataset": dataset, "method": method, "param": lab, "n_test": 4000, "recall_pct": 80.0,
                         "mean_size": 1.5, "top1_pct": 68.0, "t_test_ms": ms, "index_recall_pct": 98.0,
                         **{f"{u}_pct": rng.uniform(50, 80) for u in labels}})
    return pd.DataFrame(rows)


@pytest.fixture
def quickstart_report(tmp_path):
    """A report shaped as the quickstart's: its config (digits and synthetic1000 run, the paper's
    datasets configured, three of them behind manual downloads), Tables 2-5, the entropy panel
    drawn, panel (b) without an example and panel (c) without its dataset."""
    config = quickstart_config()
    labels = [svbop.utility(u).label for u in config["utilities"]]
    summaries = [dict(SUMMARIES[0], dataset="digits", title=config["datasets"]["digits"]["title"]),
                 dict(SUMMARIES[1], dataset="synthetic1000", title=config["datasets"]["synthetic1000"]["title"]),
                 # the digits' probabilities read back as a model's outputs: no D, no training of ours
                 dict(SUMMARIES[0], dataset="digits_outputs", title=config["datasets"]["digits_outputs"]["title"],
                      features="model outputs", D=None, train_seconds=None, N_train=0, model_outputs=True)]
    metrics = pd.concat([_metrics("digits", 0).assign(dataset="digits"),
                         _metrics("synthetic1000", 1).assign(dataset="synthetic1000"),
                         _approximate_rows("synthetic1000", labels, 2),
                         _metrics("digits_outputs", 3).assign(dataset="digits_outputs")], ignore_index=True)
    metrics = metrics[~((metrics["dataset"] == "digits_outputs") & (metrics["method"] == "svbop_full_naive"))]
    metrics.loc[metrics["method"] == "svbop_full", "t_test_ms"] = 0.1
    # the quickstart's finding: a threshold tuned to the smallest theta of the grid
    metrics["theta_edge"] = ""
    edge = (metrics["dataset"] == "synthetic1000") & (metrics["method"] == "threshold") & (metrics["param"] == "fbeta_1")
    metrics.loc[edge, ["theta", "theta_edge"]] = [0.01, "smallest"]
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(300, 10)) * rng.uniform(0.1, 6, size=(300, 1))
    P = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = rng.integers(0, 10, 300)
    specs = config["report"]["illustrations"]["entropy"]["utilities"]
    rows = pick_by_entropy(P, y, n=3, spec=specs[0])
    records = describe_rows(P, y, rows, [str(i) for i in range(10)], specs)
    images = [rng.integers(0, 255, (8, 8), dtype=np.uint8) for _ in rows]
    illustrations = {
        "entropy": {"records": {"status": "ok", "dataset": "digits", "n_test": 300, "records": records,
                                "utilities": [svbop.utility(s).label for s in specs]},
                    "figure": plot_entropy_panel(images, records, [svbop.utility(s).label for s in specs])},
        "image_top": {"records": {"status": "no example", "dataset": "digits", "n_test": 300, "records": [],
                                  "utilities": ["fbeta_1"], "reason": "none"}, "figure": None},
    }
    missing = {name: missing_inputs(name, cfg, root=tmp_path) for name, cfg in config["datasets"].items()}
    train = {"synthetic1000": {m: 10.0 for m in ("svbop_full", "svbop_full_naive", "svbop_hsg", "svbop_hf_predefined",
                                                  "svbop_hf_kmeans")}}
    files = ["table2_datasets.tsv", "table2_vs_paper.csv", "table2_vs_paper.tex", "table3_utilities.csv",
             "table3_vs_paper.csv", "dataset_status.csv", "claims.json"]
    out = build_report(
        tmp_path / "results" / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
        utilities=config["utilities"], title=config["report"]["title"], not_run={}, missing=missing,
        train_seconds=train, illustrations=illustrations, downloads={f: f"tables/{f}" for f in files},
        created="2024-01-02 03:04 UTC", calibration={"digits_outputs": _calibration_record(rng)},
    )
    return out, config


def _calibration_record(rng):
    """The calibration record of an over-confident 10-class model (the quickstart's digits_outputs)."""
    from svbop.calibration import calibrate_parts

    z = rng.normal(size=(600, 10)) * 3
    y = rng.integers(0, 10, 600)
    _, record = calibrate_parts({"validation": z[:300], "test": z[300:]}, {"validation": y[:300], "test": y[300:]},
                                utilities=["fbeta:beta=1"])
    return {**record, "model_outputs": True, "origin": {"validation": "300 rows from its own file",
                                                        "calibration": "none", "test": "300 rows from its own file"}}


@needs_chromium
def test_the_report_loads_with_every_image_and_table(inputs, tmp_path):  # noqa: F811
    html, _ = _report(inputs, tmp_path)
    seen = inspect_page(tmp_path / "results" / "report.html", screenshot=tmp_path / "shot.png")
    assert seen["title"] == re.search(r"<title>(.*?)</title>", html).group(1)
    assert seen["errors"] == [] and seen["broken_images"] == []
    assert len(seen["images"]) >= 3 and all(im["naturalWidth"] > 100 for im in seen["images"])
    tables = {t["class"]: t for t in seen["tables"]}
    for cls in ("status", "table2", "table3", "claims"):
        assert tables[cls]["rows"] > 0, cls
    assert set(re.findall(r'<section id="([^"]+)"', html)) == set(seen["sections"])
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_the_quickstart_report_reads_like_the_paper(quickstart_report, tmp_path):
    path, config = quickstart_report
    seen = inspect_page(path, screenshot=tmp_path / "page.png")
    assert seen["errors"] == [] and seen["broken_images"] == []
    # every check of browser.unreadable: no label or key in the prose, status <= 900 px, text >= 10 px
    keys = [k for k in config["datasets"] if re.search(r"[\d_]", k)]  # keys that are not plain words
    assert unreadable(seen, keys=keys) == []
    # the figures are svbop's and say how small their text is; all four are there and loaded
    assert len(seen["images"]) == 5 and all(im["min_font_px"] for im in seen["images"])  # + the reliability diagram
    html = Path(path).read_text(encoding="utf-8")
    # the banner, on the first screen: no paper dataset in the quickstart, and where to find the paper's numbers
    banner = seen["banner"]
    assert banner["visible"] and banner["top"] + banner["height"] < 900, banner
    assert banner["text"].startswith("No paper numbers to compare: no dataset of this run — Digits")
    assert "config.yaml" in banner["text"] and "workflow/configs/shared_data.yaml" in banner["text"]
    # no caption promises paper values that are not there
    assert "the paper's value below each" not in seen["prose"] and "followed by the paper's value" not in seen["prose"]
    # Table 3: a theta column, its Threshold rows tuned, the edge of the grid marked and explained
    table3 = [t for t in seen["tables"] if t["class"] == "table3"]
    assert [t["dataset"] for t in table3] == ["digits", "synthetic1000", "digits_outputs"]
    assert all(t["headers"][-1] == "θ" and t["columns"] == len(config["utilities"]) + 4 for t in table3)
    assert re.search(r"θ at the edge of the grid: Threshold-u ?F1 \(θ = 0\.01, the smallest value\)", seen["prose"])
    assert "does not give" not in seen["prose"] and "without giving them" in seen["prose"]
    # the compact status: the three datasets run; every other one on one line, even Bacteria (files by hand)
    rows = re.findall(r'<tr data-dataset="([^"]*)" data-status="[^"]*">', html)
    assert rows == ["digits", "synthetic1000", "digits_outputs"]
    status = html[html.index('<section id="status">'):html.index('<section id="utilities">')]
    assert re.search(r"Not in this run \((\d+)\)", status).group(1) == str(len(config["datasets"]) - 3)
    # the model's outputs: calibrated, and what needs features or our model said not to apply
    assert 'id="calibration-digits_outputs"' in html and "not applicable: model outputs" in seen["prose"]
    assert "<code>bacteria</code><sup>*</sup>" in status and "fetched by hand" in status
    assert "data/bacteria/downloads/" not in status and "no public copy" not in status
    # the paper's numbering, never a LaTeX label
    for text in ("Table 1", "Table 2: the datasets", "Table 3: SVBOP-Full vs.", "Table 4: SVBOP-Full vs.",
                 "Table 5: hyper-parameters", "Figure 1: the utilities g(s), K = 100", "Figure 2: set-valued",
                 "Figure 3: the generalised reject option"):
        assert text in html, text
    # the empty panels say why and how to fill them
    assert "No test image whose top-1 is wrong" in html and "300 test rows of Digits" in html
    panel_c = html[html.index('id="illustration-text_top"'):][:1500]
    assert "DBpedia was not run" in panel_c and "<code>dbpedia</code> under <code>run:</code>" in panel_c
    assert "DBPEDIA_train.csv" not in panel_c  # downloaded by the pipeline: nothing to fetch by hand


@needs_chromium
def test_a_broken_image_is_caught(tmp_path):
    good = "data:image/png;base64," + base64.b64encode(_PNG).decode()
    bad = "data:image/png;base64," + base64.b64encode(_PNG[:30]).decode()
    page = tmp_path / "page.html"
    page.write_text(f'<!DOCTYPE html><html><head><title>t</title></head><body>'
                    f'<img alt="good" src="{good}"><img alt="bad" src="{bad}">'
                    f'<table class="x"><tbody><tr><td>1</td></tr></tbody></table></body></html>')
    seen = inspect_page(page)
    assert seen["broken_images"] == ["bad"]
    assert [t["rows"] for t in seen["tables"]] == [1]


@needs_chromium
def test_unreadable_names_small_text_keys_and_a_tall_status(tmp_path):
    page = tmp_path / "page.html"
    page.write_text('<!DOCTYPE html><html><head><title>t</title></head><body>'
                    '<section id="status" style="height: 1200px"><p>The paper\'s Figure "g"</p></section>'
                    '<p style="font-size: 7px">tiny</p><p>SVBOP-HF_p on voc2006</p>'
                    '<code>credal_1.6_0.6 is fine here</code><section id="downloads"><a href="x">fbeta_1.csv</a></section>'
                    '</body></html>')
    problems = unreadable(inspect_page(page), keys=["voc2006"])
    assert len(problems) == 5, problems
    text = "\n".join(problems)
    for what in ('Figure "g"', "HF_[pc]", "voc2006", "status", "7 px"):
        assert what in text, what
    assert "credal" not in text and "fbeta" not in text  # code and downloads are not prose


@needs_chromium
def test_screenshot_is_the_first_screen(inputs, tmp_path):  # noqa: F811
    _report(inputs, tmp_path)
    png = screenshot(tmp_path / "results" / "report.html", tmp_path / "sub" / "first.png")
    from PIL import Image

    assert png == tmp_path / "sub" / "first.png" and Image.open(png).size == (1280, 900)
    assert [p.name for p in png.parent.iterdir()] == ["first.png"]  # no temporary file left


def test_screenshot_without_chromium_says_how_to_install_it(tmp_path, monkeypatch):
    page = tmp_path / "page.html"
    page.write_text("<!DOCTYPE html><title>t</title>")
    monkeypatch.setenv("SVBOP_CHROMIUM", str(tmp_path / "no-such-chromium"))
    with pytest.raises(ChromiumError, match="apt-get install chromium"):
        screenshot(page, tmp_path / "shot.png")
    assert not (tmp_path / "shot.png").exists()
    with pytest.raises(ValueError, match="missing.html"):
        screenshot(tmp_path / "missing.html", tmp_path / "shot.png")
