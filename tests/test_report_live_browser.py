"""Several models side by side and the level chosen in the browser, end to end: ``svbop report`` with two
models on the same rows, then the page in headless Chromium: the controls, the URL fragment, and the
numbers it shows (``data-coverage``, ``data-size``) against svbop's library at a few levels.

The pipeline runs once for the module (small inputs: 6 classes, a few hundred rows).  The browser
checks skip, with the reason, where Chromium is not installed.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from browser import chromium_executable
from svbop import ConformalSetPredictor
from svbop.io import load_score_arrays
from svbop.report.browser import run_chromium
from watched import run_watched

needs_chromium = pytest.mark.skipif(
    chromium_executable() is None,
    reason="Chromium not installed (Debian package chromium): the page's controls are not checked in a browser",
)
K = 6


def _write(folder: Path) -> None:
    """Two models' logits on the same rows (model b sharper), their labels once."""
    for part, n, seed in (("val", 200, 1), ("cal", 300, 2), ("test", 400, 3)):
        rng = np.random.default_rng(seed)
        y = rng.integers(0, K, n)
        for name, shift in (("a", 1.2), ("b", 2.2)):
            logits = rng.normal(size=(n, K))
            logits[np.arange(n), y] += shift
            np.save(folder / f"{name}_{part}.npy", logits.astype(np.float32))
        np.save(folder / f"y_{part}.npy", y)


def _report(files: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_watched([sys.executable, "-m", "svbop", "report", *extra, "-o", str(out)], cwd=files)  # stopped if hung


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    files = tmp_path_factory.mktemp("files")
    _write(files)
    out = tmp_path_factory.mktemp("page") / "out"
    result = _report(files, out, "--test", "a_test.npy", "y_test.npy", "--test", "b_test.npy", "y_test.npy",
                     "--name", "a", "--name", "b", "--validation", "a_val.npy", "y_val.npy",
                     "--validation", "b_val.npy", "y_val.npy", "--calibration", "a_cal.npy", "y_cal.npy",
                     "--calibration", "b_cal.npy", "y_cal.npy", "--cores", "2")
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return out


def _library(out: Path, model: str, epsilon: float) -> dict[str, tuple[float, float]]:
    """method -> (coverage, mean size) of svbop's library at ``epsilon`` on the rows the run used."""
    P_cal, y_cal, P, y = load_score_arrays(out / ".svbop" / "results" / model / "scores" / "flat.npz",
                                           "P_calibration", "y_calibration", "P_test", "y_test")
    predictors = {"icp": ConformalSetPredictor(epsilon),
                  "conformal_aps_top1": ConformalSetPredictor(epsilon, score="aps", randomized=False,
                                                     calibrate_top1=True),
                  "conformal_lac_cc": ConformalSetPredictor(epsilon, score="lac", class_conditional=True)}
    result = {}
    for method, predictor in predictors.items():
        sets = predictor.fit(P_cal, y_cal).predict(P)
        result[method] = (float(sets.contains(y).mean()), float(sets.sizes.mean()))
    return result


# --- several models: the options, the tables, the page -------------------------------------------------------

def test_two_models_share_one_choose_sets_table_with_a_model_column(two_models):
    chosen = pd.read_csv(two_models / "tables" / "choose_sets.csv")
    assert list(chosen.columns[:3]) == ["model", "dataset", "goal"]
    assert set(chosen["model"]) == {"a", "b"} and (chosen["model"] == chosen["dataset"]).all()
    assert not chosen["goal"].str.contains(":").any()  # the model is a column, not a prefix of the goal
    a = chosen[chosen["model"] == "a"]["goal"].tolist()
    assert a == chosen[chosen["model"] == "b"]["goal"].tolist()


def test_the_page_compares_the_models_at_each_goal(two_models):
    page = (two_models / "report.html").read_text()
    section = re.search(r'<section id="models">.*?</section>', page, re.S)
    assert section, "no section comparing the models"
    table = section.group(0)
    heads = re.findall(r'<th data-model="([^"]+)">', table)
    assert heads == ["a", "b"]
    for measure in ("coverage", "size", "worst", "method"):
        assert f'data-measure="{measure}"' in table
    assert 'data-measure="ece"' in table
    # the sharper model b is calibrated better or equal and its sets at 90 % are smaller
    goal = re.search(r'<tr data-goal="coverage &gt;= 90%" data-measure="size".*?</tr>', table, re.S).group(0)
    sizes = [float(v) for v in re.findall(r'<td class="num" data-model="[ab]">(?:<strong>)?([0-9.]+)', goal)]
    assert len(sizes) == 2 and sizes[1] < sizes[0]


@pytest.mark.parametrize("extra, message", [
    (["--test", "a_test.npy", "y_test.npy", "--test", "b_test.npy", "y_test.npy", "--name", "a"],
     "--name: given 1 times for 2 --test"),
    (["--test", "a_test.npy", "y_test.npy", "--test", "b_test.npy", "y_test.npy"],
     "--name: missing; with 2 --test"),
    (["--test", "a_test.npy", "y_test.npy", "--test", "b_test.npy", "y_test.npy", "--name", "a", "--name", "a"],
     "--name: 'a' given twice"),
    (["--test", "a_test.npy", "y_test.npy", "--test", "b_test.npy", "y_test.npy", "--name", "a", "--name", "b",
      "--calibration", "a_cal.npy", "y_cal.npy", "--calibration", "b_cal.npy", "y_cal.npy",
      "--calibration", "a_cal.npy", "y_cal.npy"],
     "--calibration: given 3 times for 2 --test"),
    (["--test", "a_test.npy", "y_test.npy", "--test", "b_val.npy", "y_val.npy", "--name", "a", "--name", "b"],
     "--test: "),
])
def test_several_models_refused_in_one_line_naming_the_options(tmp_path, extra, message):
    _write(tmp_path)
    result = _report(tmp_path, tmp_path / "out", *extra)
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.strip() and not ln.startswith("svbop report:")]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_models_on_different_rows_are_refused_naming_both_label_files(tmp_path):
    _write(tmp_path)
    y = np.load(tmp_path / "y_test.npy")
    y2 = y.copy()
    y2[7] = (y2[7] + 1) % K
    np.save(tmp_path / "y2_test.npy", y2)
    result = _report(tmp_path, tmp_path / "out", "--test", "a_test.npy", "y_test.npy", "--test", "b_test.npy",
                     "y2_test.npy", "--name", "a", "--name", "b")
    assert result.returncode != 0
    assert "y2_test.npy: row 7" in result.stderr and "y_test.npy" in result.stderr
    assert "same rows" in result.stderr


# --- the level chosen in the browser --------------------------------------------------------------------------

_GRAB = """
function grab() {
  return Array.prototype.map.call(document.querySelectorAll("table.live-choice tr[data-method]"), function (tr) {
    return {model: tr.getAttribute("data-model"), method: tr.getAttribute("data-method"),
            param: tr.getAttribute("data-param"), coverage: tr.getAttribute("data-coverage"),
            size: tr.getAttribute("data-size"), goal: tr.getAttribute("data-goal"), rank: tr.getAttribute("data-rank")};
  });
}
function examples() {
  return Array.prototype.map.call(document.querySelectorAll("div.live-examples td.live-set"), function (td) {
    return td.getAttribute("data-method") + ":" + td.getAttribute("data-size");
  });
}
function state() {
  return {rows: grab(), examples: examples(), hash: location.hash,
          slider: document.getElementById("live-epsilon").value,
          utility: (document.getElementById("live-utility") || {}).value,
          points: document.querySelectorAll("svg.live-svg circle.live-point").length,
          yticks: Array.prototype.map.call(document.querySelectorAll("svg.live-svg"), function (svg) {
            return Array.prototype.map.call(svg.querySelectorAll('text[text-anchor="end"]'),
                                            function (t) { return t.textContent; }); }),
          note: document.getElementById("live-note").textContent,
          compare: Array.prototype.map.call(document.querySelectorAll("#models-live td[data-model]"), function (td) {
            return [td.parentNode.getAttribute("data-goal"), td.parentNode.getAttribute("data-measure"),
                    td.getAttribute("data-model"), td.getAttribute("data-method") || "", td.getAttribute("data-param") || "",
                    td.textContent]; }),
          errors: (window.__liveErrors || [])};
}
"""


def _browse(page: Path, fragment: str, steps: list[str]) -> list[dict]:
    """Open ``page#fragment`` in Chromium; after load, the page's state, then after each step (JavaScript run
    50 ms after the previous state was taken) the state again."""
    source = page.read_text(encoding="utf-8")
    hook = '<script>window.__liveErrors = []; window.addEventListener("error", function (e) { ' \
           'window.__liveErrors.push(String(e.message)); });</script>'
    chain = "".join(f"setTimeout(function () {{ {step}; setTimeout(function () {{ out.push(state()); "
                    for step in steps) + "done();" + "}, 50); }, 0);" * len(steps)
    script = ("<script>" + _GRAB + "window.addEventListener('load', function () { setTimeout(function () {"
              "var out = [state()]; function done() { var pre = document.createElement('pre'); pre.id = 'live-check';"
              "pre.textContent = JSON.stringify(out); document.body.appendChild(pre); }" + chain + "}, 0); });</script>")
    source = source.replace("<head>", "<head>" + hook, 1)
    end = source.rfind("</body>")
    source = source[:end] + script + source[end:]
    with tempfile.TemporaryDirectory(prefix="svbop-live-") as tmp:
        copy = Path(tmp) / "report.html"
        copy.write_text(source, encoding="utf-8")
        out, _ = run_chromium([f"--user-data-dir={Path(tmp) / 'profile'}", "--virtual-time-budget=10000",
                               "--dump-dom", copy.as_uri() + ("#" + fragment if fragment else "")], 120)
    m = re.search(r'<pre id="live-check">(.*?)</pre>', out, re.S)
    assert m, "the page never reported its state"
    return json.loads(html.unescape(m.group(1)))


def _check_against_library(out: Path, rows: list[dict], epsilon: float, param: str) -> None:
    seen = 0
    for model in ("a", "b"):
        expected = _library(out, model, epsilon)
        for r in rows:
            if r["model"] != model or r["method"] not in expected:
                continue
            assert r["param"] == param
            assert float(r["coverage"]) == expected[r["method"]][0], (model, r, expected)
            assert float(r["size"]) == expected[r["method"]][1], (model, r, expected)
            seen += 1
    assert seen >= 6, rows  # three methods of each model (in each goal's ranking)


@needs_chromium
@pytest.mark.parametrize("epsilon, param", [("0.05", "0.05"), ("0.2", "0.20"), ("0.125", "0.13")])
def test_the_fragment_sets_the_level_and_the_numbers_equal_the_librarys(two_models, epsilon, param):
    states = _browse(two_models / "report.html", f"epsilon={epsilon}&utility=fbeta:beta=1", [])
    s = states[0]
    assert not s["errors"], s["errors"]
    assert s["utility"] == "fbeta:beta=1"
    _check_against_library(two_models, s["rows"], float(param), param)  # a level between steps: the nearest
    assert ("between the slider's steps" in s["note"]) == (epsilon != param.rstrip("0") and epsilon != param)
    assert {r["model"] for r in s["rows"]} == {"a", "b"}
    assert s["points"] == 2 * 4  # each model: LAC, APS, class-conditional LAC, SVBOP-Full highlighted


@needs_chromium
def test_controls_and_hashchange_update_the_numbers_the_figure_and_the_fragment(two_models):
    states = _browse(two_models / "report.html", "", [
        'var e = document.getElementById("live-epsilon"); e.value = "0.15"; e.dispatchEvent(new Event("input"))',
        'var u = document.getElementById("live-utility"); u.value = "fbeta:beta=5"; u.dispatchEvent(new Event("change"))',
        'location.hash = "#epsilon=0.3&utility=credal:delta=1.6,gamma=0.6"',
        'location.hash = "#epsilon=0.9"',
    ])
    first, moved, utility, hashed, refused = states
    assert all(not s["errors"] for s in states), [s["errors"] for s in states]
    assert float(first["slider"]) == 0.1 and first["hash"] == ""  # the run's level; nothing written on load
    _check_against_library(two_models, first["rows"], 0.1, "0.10")
    assert moved["hash"] == f"#epsilon=0.15&utility={first['utility']}"  # the first utility of the run
    _check_against_library(two_models, moved["rows"], 0.15, "0.15")
    assert moved["examples"] != first["examples"] or moved["rows"] != first["rows"]
    assert utility["hash"] == "#epsilon=0.15&utility=fbeta:beta=5"
    goals = {r["goal"] for r in utility["rows"]}
    assert "best uF5 utility" in goals
    full = [r for r in utility["rows"] if r["method"] == "svbop_full"]
    assert full and all(r["param"] == "fbeta_5" for r in full)
    assert hashed["slider"] in ("0.3", "0.30") and hashed["utility"] == "credal:delta=1.6,gamma=0.6"
    _check_against_library(two_models, hashed["rows"], 0.3, "0.30")
    assert "not a level from 0.01 to 0.30: the default level 0.1" in refused["note"]
    _check_against_library(two_models, refused["rows"], 0.1, "0.10")  # the default level, said so


@needs_chromium
@pytest.mark.parametrize("fragment, said", [
    ("epsilon=5%", "epsilon=5% cannot be read"),
    ("epsilon=%", "epsilon=% cannot be read"),
    ("epsilon=0.05%E0%A4%A&utility=fbeta:beta=5", "epsilon=0.05%E0%A4%A cannot be read"),
    ("epsilon=0.05&utility=%E0%A4%A", "is not one of this page's utilities"),
    ("epsilon=0.015", "epsilon=0.015 is between the slider's steps of 0.01: 0.02 is shown"),
])
def test_a_fragment_the_page_cannot_read_falls_back_and_says_so(two_models, fragment, said):
    """Hostile fragments: the live tables are still filled (the default level, or the nearest step), the page
    says what it did, and every control still works afterwards."""
    states = _browse(two_models / "report.html", fragment, [
        'var e = document.getElementById("live-epsilon"); e.value = "0.2"; e.dispatchEvent(new Event("input"))',
        'var u = document.getElementById("live-utility"); u.value = "fbeta:beta=5"; u.dispatchEvent(new Event("change"))',
        'location.hash = "#epsilon=%25"',
    ])
    first, moved, utility, hashed = states
    assert all(not s["errors"] for s in states), [s["errors"] for s in states]
    assert said in first["note"], first["note"]
    level = {"epsilon=0.015": "0.02", "epsilon=0.05&utility=%E0%A4%A": "0.05"}.get(fragment, "0.10")
    _check_against_library(two_models, first["rows"], float(level), level)
    assert first["examples"] and first["points"] == 2 * 4
    _check_against_library(two_models, moved["rows"], 0.2, "0.20")
    assert moved["note"] == "" and moved["hash"].startswith("#epsilon=0.2&")
    assert utility["hash"] == "#epsilon=0.2&utility=fbeta:beta=5"
    assert "not a level" in hashed["note"] and hashed["rows"]
    _check_against_library(two_models, hashed["rows"], 0.1, "0.10")


@needs_chromium
@pytest.mark.parametrize("width", [1280, 1400, 1920])
def test_no_table_passes_the_pages_column(two_models, width):
    """Issue 57 item 5: every table (the every-kind-of-set table with its calibrated column, the live tables)
    stays within the page's column, a wider one scrolling inside it; no cell is squeezed to a word a line."""
    from browser import inspect_page

    seen = inspect_page(two_models / "report.html", width=width)
    assert not seen["errors"], seen["errors"]
    right = seen["column"]["right"]
    tables = [t for t in seen["tables"] if t["visible"]]
    assert any("beyond" in t["class"] for t in tables) and any("live-choice" in t["class"] for t in tables)
    wide = [(t["class"], t["dataset"], t["right"]) for t in tables if t["right"] > right + 0.5]
    assert not wide, (right, wide)
    squeezed = [(t["class"], t["tallest_cell_px"], t["tallest_cell_words"]) for t in tables
                if t["tallest_cell_px"] > 160]
    assert not squeezed, squeezed


def test_the_models_are_compared_by_name_on_the_same_rows(two_models):
    """Issue 57 item 4: the comparison's method cells name the method with its level or utility (not a key),
    the worst-covered class is named, and both models show the same example rows."""
    page = (two_models / "report.html").read_text()
    section = re.search(r'<section id="models">.*?</section>', page, re.S).group(0)
    cells = re.findall(r'<td class="text" data-model="[ab]" data-method="([^"]*)" data-param="([^"]*)">'
                       r'(?:<strong>)?([^<]*)', section)
    assert cells
    for method, param, text in cells:
        assert text.strip() and text.strip() != method and "_" not in text, (method, param, text)
        if method == "icp" or method.startswith(("conformal_", "coverage_")):
            assert f"ε={param}" in text, text
        elif method.startswith(("svbop_", "threshold")):
            assert "-u" in text, text
    worst = re.findall(r'<tr data-goal="[^"]*" data-measure="worst".*?</tr>', section, re.S)
    assert worst and all(re.search(r"[0-9.]+ \(class \d+\)", w) for w in worst), worst
    rows = {m: [(e["kind"], e["row"]) for e in json.loads(
        (two_models / ".svbop" / "results" / m / "examples.json").read_text())["rows"]] for m in ("a", "b")}
    assert rows["a"] == rows["b"] and rows["a"]


@needs_chromium
def test_the_side_by_side_comparison_follows_the_controls(two_models):
    states = _browse(two_models / "report.html", "", [
        'var e = document.getElementById("live-epsilon"); e.value = "0.2"; e.dispatchEvent(new Event("input"))',
        'var u = document.getElementById("live-utility"); u.value = "fbeta:beta=5"; u.dispatchEvent(new Event("change"))',
    ])
    first, moved, utility = states
    assert all(not s["errors"] for s in states), [s["errors"] for s in states]
    for state, level in ((first, "0.10"), (moved, "0.20")):
        chosen = [c for c in state["compare"] if c[0] == "coverage" and c[1] == "method"]
        assert {c[2] for c in chosen} == {"a", "b"} and all(c[4] == level for c in chosen), state["compare"]
        for model, method in ((c[2], c[3]) for c in chosen):  # the chosen method's numbers are the live table's
            live = [r for r in state["rows"] if r["model"] == model and r["method"] == method and r["rank"] == "1"
                    or r["model"] == model and r["method"] == method]
            cover = [c[5] for c in state["compare"] if c[0] == "coverage" and c[1] == "coverage" and c[2] == model]
            assert cover and abs(float(cover[0]) - 100 * float(live[0]["coverage"])) < 0.006
        worst = [c[5] for c in state["compare"] if c[1] == "worst"]
        assert worst and all("(class " in w for w in worst)
    full = [c for c in utility["compare"] if c[0] == "utility" and c[1] == "method"]
    assert full and all(c[5].startswith(("SVBOP-Full for uF5", "LAC", "APS", "class-conditional")) for c in full)


@needs_chromium
def test_the_live_svbop_full_equals_the_static_tables(two_models):
    """Issue 57 item 3: for every utility, the page's SVBOP-Full (coverage, mean size, mean utility) is the
    table of every kind of set's, on the same rows (the page used to look at each row's ten classes only)."""
    states = _browse(two_models / "report.html", "", [
        f'var u = document.getElementById("live-utility"); u.value = "{spec}"; u.dispatchEvent(new Event("change"))'
        for spec in ("fbeta:beta=1", "fbeta:beta=5", "credal:delta=1.6,gamma=0.6")])
    seen = 0
    for state in states[1:]:
        assert not state["errors"], state["errors"]
        for r in state["rows"]:
            if r["method"] != "svbop_full":
                continue
            table = pd.read_csv(two_models / ".svbop" / "results" / r["model"] / "beyond.tsv", sep="\t",
                                dtype={"param": str})
            row = table[(table["method"] == "svbop_full") & (table["param"] == r["param"])].iloc[0]
            assert abs(100 * float(r["coverage"]) - row["coverage_pct"]) < 1e-9, (r, row["coverage_pct"])
            assert abs(float(r["size"]) - row["mean_size"]) < 1e-9, (r, row["mean_size"])
            seen += 1
    assert seen >= 2 * 3  # two models, three utilities


@needs_chromium
@pytest.mark.parametrize("fragment", ["epsilon=0.01", "epsilon=0.3&utility=fbeta:beta=5"])
def test_the_live_figures_coverage_ticks_are_round(two_models, fragment):
    """Issue 57 item 9: ticks such as 65/74/83/91 read badly: they are multiples of 1, 2 or 5 times a power of
    ten, evenly spaced."""
    state = _browse(two_models / "report.html", fragment, [])[0]
    assert not state["errors"], state["errors"]
    assert len(state["yticks"]) == 2  # two models' figures
    for model in ([float(t) for t in ticks] for ticks in state["yticks"]):
        assert len(model) >= 2, model
        steps = {round(b - a, 9) for a, b in zip(model, model[1:])}
        assert len(steps) == 1, model
        step = steps.pop()
        mantissa = step / 10 ** np.floor(np.log10(step))
        assert round(mantissa, 9) in (1, 2, 5), model
        assert all(abs(v / step - round(v / step)) < 1e-9 for v in model), model
