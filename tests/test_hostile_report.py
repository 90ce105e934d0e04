"""Hostile names in the report's outputs: LaTeX tables that compile, figures that draw every name as
written, and a failed run whose page never stands in for the finished report (issue 26)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from watched import run_watched
import yaml

from svbop.report import table2, write_table
from svbop.report.status import dataset_status, failure_summary
from test_report import SUMMARIES

#: Every character LaTeX treats specially, and a command that would run if it passed through.
SPECIALS = "\\{}$&#^_~%"
HOSTILE = [
    r"$\frac{$",
    "a_b & 50% of $5",
    r"{x} \input{x} ~ ^ #1",
    "back\\slash\\",
    "~^~",
]
TITLE = r"T_1 & 50% $x$ #1 {a} \input{x} ~ ^ \\"
PDFLATEX_MISSING = "pdflatex not installed: apt-get install texlive-latex-base"

# a LaTeX escape pandas writes -> the character it shows
_ESCAPES = re.compile(r"\\(textbackslash|textasciitilde|textasciicircum|space)(?: |(?=[^a-zA-Z])|$)|\\([&%$#_{}])")
_WORDS = {"textbackslash": "\\", "textasciitilde": "~", "textasciicircum": "^", "space": " "}


def unescape_cell(cell: str) -> str:
    """The text a LaTeX cell shows; raises AssertionError on a special character that is not escaped."""
    out, pos = [], 0
    for m in _ESCAPES.finditer(cell):
        plain = cell[pos:m.start()]
        assert not set(plain) & set(SPECIALS), f"unescaped {sorted(set(plain) & set(SPECIALS))} in {cell!r}"
        out += [plain, _WORDS[m.group(1)] if m.group(1) else m.group(2)]
        pos = m.end()
    plain = cell[pos:]
    assert not set(plain) & set(SPECIALS), f"unescaped {sorted(set(plain) & set(SPECIALS))} in {cell!r}"
    return "".join(out + [plain])


def tex_rows(tex: str) -> list[list[str]]:
    """The cells of a ``to_latex`` tabular, each as the text it shows (checked: nothing unescaped)."""
    rows = []
    for line in tex.splitlines():
        line = line.strip()
        if not line or re.fullmatch(r"\\(begin\{tabular\}\{[lrc]*\}|toprule|midrule|bottomrule|end\{tabular\})", line):
            continue
        assert line.endswith("\\\\"), f"not a table row: {line!r}"
        cells = re.split(r"(?<!\\) & ", " " + line[:-2].strip() + " ")  # a cell separator is an unescaped &
        rows.append([unescape_cell(c.strip()) for c in cells])
    return rows


def _hostile_frame() -> pd.DataFrame:
    return pd.DataFrame({name: [other, 1.5] for name, other in zip(HOSTILE, reversed(HOSTILE))},
                        index=pd.Index(["row_1 & %", r"\input{x}"], name="index_&_$"))


def _hostile_tables(folder: Path) -> list[Path]:
    """The report's LaTeX tables of hostile names: Table 1 (a dataset title), the datasets' status
    (titles and keys), and a frame whose every name and cell is hostile."""
    summary = {**SUMMARIES[0], "title": TITLE}
    datasets = {"mine": {"title": TITLE}, "other_1": {"title": HOSTILE[1]}}
    frames = {"table2": table2([summary]), "status": dataset_status(datasets, ["mine"]), "frame": _hostile_frame()}
    out = []
    for name, df in frames.items():
        path = folder / f"{name}.tex"
        write_table(df, path, index=name == "frame")
        out.append(path)
    return out


def test_latex_tables_escape_every_special_character_and_show_the_names_as_written(tmp_path):
    table2_tex, status_tex, frame_tex = _hostile_tables(tmp_path)
    rows = tex_rows(table2_tex.read_text())
    assert rows[0][0] == "Dataset" and rows[0][-1] == "top-1 %"
    assert rows[1][0] == TITLE and len({len(r) for r in rows}) == 1
    status = tex_rows(status_tex.read_text())
    assert [TITLE, HOSTILE[1]] == [r[1] for r in status[1:] if r[0] in ("mine", "other_1")]
    frame = tex_rows(frame_tex.read_text())
    assert frame[0][1:] == HOSTILE  # the header: every column name as written
    assert frame[1][0] == "index_&_$"
    assert frame[2] == ["row_1 & %", *reversed(HOSTILE)] and frame[3][0] == r"\input{x}"
    assert len({len(r) for r in frame if len(r) > 1}) == 1


def test_unescape_cell_finds_what_is_not_escaped():
    assert unescape_cell(r"a\_b \& 50\% \textbackslash input\{x\}") == r"a_b & 50% \input{x}"
    for bad in ("a_b", r"\input{x}", "50%", "$x$", "~", "^", "#"):
        with pytest.raises(AssertionError, match="unescaped"):
            unescape_cell(bad)


def _compile(tex_files: list[Path], folder: Path) -> subprocess.CompletedProcess:
    inputs = "\n".join(rf"\input{{{p.stem}}}\par" for p in tex_files)
    (folder / "doc.tex").write_text(
        "\\documentclass{article}\n"
        # booktabs (texlive-latex-recommended) draws the rules; plain \hline where it is absent
        "\\IfFileExists{booktabs.sty}{\\usepackage{booktabs}}"
        "{\\providecommand\\toprule{\\hline}\\providecommand\\midrule{\\hline}\\providecommand\\bottomrule{\\hline}}\n"
        f"\\begin{{document}}\n{inputs}\n\\end{{document}}\n"
    )
    return run_watched(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "doc.tex"],
        cwd=folder,
    )


def test_latex_tables_of_hostile_names_compile_with_pdflatex(tmp_path):
    if shutil.which("pdflatex") is None:
        pytest.skip(PDFLATEX_MISSING)
    result = _compile(_hostile_tables(tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 0


def _records(names):
    from svbop.report.illustrations import describe_rows, pick_by_entropy

    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.full(len(names), 0.5), size=60)
    y = rng.integers(0, len(names), size=60)
    rows = pick_by_entropy(P, y, n=3)
    return describe_rows(P, y, rows, names, ["fbeta:beta=5", "fbeta:beta=1"], k=5)


def test_figures_draw_hostile_class_names_as_written():
    """Class names with mathtext in them (``$\\frac{$``) are drawn as the characters they are."""
    from matplotlib.text import Text

    from svbop.report.figures import figure_to_png
    from svbop.report.illustrations import plot_entropy_panel, plot_image_top

    records = _records(HOSTILE)
    image = np.zeros((8, 8), dtype=np.uint8)
    for fig in (plot_entropy_panel([image] * len(records), records, ["fbeta_5", "fbeta_1"]),
                plot_image_top(image, records[-1], "fbeta_1")):
        assert figure_to_png(fig).startswith(b"\x89PNG")
        texts = [t for t in fig.findobj(Text) if t.get_text() in HOSTILE]
        assert texts and all(not t.get_parse_math() for t in texts)
    shown = {t.get_text() for t in fig.findobj(Text)}  # the top-k of the last record, every name as written
    assert {t["name"] for t in records[-1]["top"]} <= shown


def test_the_failure_summary_names_failed_jobs_outside_the_datasets():
    job = {"job": "illustrate (name=entropy)", "reason": "ParseException", "log": "results/logs/illustrate/entropy.log"}
    lines = failure_summary(["mine"], {}, [job])
    assert lines[0] == ("the run failed in job illustrate (name=entropy), which belongs to no dataset: ParseException "
                        "(log: results/logs/illustrate/entropy.log)")
    assert "0 of 1 datasets failed" not in " ".join(lines) and "the 1 dataset finished" in lines[-1]
    lines = failure_summary(["a"], {"b": "fetch failed"}, [job])
    assert lines[0] == "dataset 'b' failed: fetch failed"
    assert lines[-1].startswith("1 of 2 datasets failed; the run also failed in 1 job that belongs to no dataset")
    assert "results/report.partial.html" in lines[-1]
    lines = failure_summary(None, None, [], log=".snakemake/log/x.log")
    assert lines == ["the run failed; no partial report could be built (Snakemake's log: .snakemake/log/x.log). "
                     "Fix the cause and rerun."]


# --- a real run -----------------------------------------------------------------------------------


def _idx(path: Path, arr: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    path.write_bytes(header + arr.tobytes())


def _hostile_config(folder: Path) -> dict:
    """`hostile`: 8 x 8 images of 3 classes with hostile names and title (IDX files by path);
    `broken`: a libsvm file that does not parse."""
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, size=300).astype(np.uint8)
    centres = rng.uniform(0, 255, size=(3, 8, 8))
    X = np.clip(centres[y] + rng.normal(0, 60, size=(300, 8, 8)), 0, 255).astype(np.uint8)
    _idx(folder / "images.idx", X)
    _idx(folder / "labels.idx", y)
    (folder / "broken.svm").write_text("this is not libsvm\n")
    return {
        "run": ["hostile", "broken"],
        "utilities": ["fbeta:beta=1"],
        "baselines": {"top_s": [1], "icp_epsilon": [0.1]},
        "utility_table": {"K": [10]},
        "report": {"illustrations": {"entropy": {"dataset": "hostile", "utilities": ["fbeta:beta=5", "fbeta:beta=1"]},
                                     "image_top": {"dataset": "hostile"}}},
        "datasets": {
            "hostile": {
                "title": TITLE,
                "files": {"images.idx": {"path": str(folder / "images.idx")},
                          "labels.idx": {"path": str(folder / "labels.idx")}},
                "format": {"kind": "mnist_idx", "parts": {"all": ["images.idx", "labels.idx"]},
                           "class_names": HOSTILE[:3]},
                "features": {"kind": "raw"},
            },
            "broken": {
                "title": "Broken file",
                "files": {"data.svm": {"path": str(folder / "broken.svm")}},
                "format": {"kind": "libsvm", "parts": {"all": ["data.svm"]}},
                "features": {"kind": "raw"},
            },
        },
    }


def test_a_failed_dataset_left_out_of_run_rebuilds_tables_and_report_and_names_stay_literal(tmp_path):
    """Run 1: `broken` fails, `hostile` (hostile title and class names) finishes, illustrations and
    all: the run exits non-zero, the page of what finished is results/report.partial.html, and
    results/report.html is not written. Run 2, `broken` taken out of `run:`: the tables and the
    report are built (their LaTeX compiles), the partial page goes, and `snakemake --report`
    works. Run 3, the tables job fails: the terminal names that job, not "0 of 1 datasets failed"."""
    pytest.importorskip("snakemake", reason="snakemake is not installed (pip install -e '.[pipeline]')")
    from test_workflow import _copy_workflow, _snakemake

    data = tmp_path / "data_in"
    data.mkdir()
    config = _hostile_config(data)
    workdir = tmp_path / "work"
    workdir.mkdir()
    _copy_workflow(workdir)
    (workdir / "mine.yaml").write_text(yaml.safe_dump(config))
    results = workdir / "results"

    first = _snakemake("--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    text = first.stdout + first.stderr
    assert first.returncode != 0
    assert "svbop: dataset 'broken' failed: prepare_dataset failed" in text, text[-3000:]
    assert "svbop: 1 of 2 datasets failed" in text and "results/report.partial.html shows the 1 that finished" in text
    assert "belongs to no dataset" not in text  # the illustrations of the hostile names were drawn
    assert (results / "illustrations/entropy.png").exists() and (results / "illustrations/image_top.png").exists()
    assert not (results / "report.html").exists()
    partial = (results / "report.partial.html").read_text()
    assert re.search(r'<tr data-dataset="broken" data-status="failed">', partial)
    assert 'id="table3-hostile"' in partial and "a_b &amp; 50% of $5" in partial  # the names, HTML-escaped

    config["run"] = ["hostile"]
    (workdir / "mine.yaml").write_text(yaml.safe_dump(config))
    second = _snakemake("--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    assert "Nothing to be done" not in second.stdout + second.stderr
    html = (results / "report.html").read_text()
    assert 'data-status="failed"' not in html and 'id="table3-hostile"' in html
    assert not (results / "report.partial.html").exists()
    tex = sorted((results / "tables").glob("*.tex"))
    assert len(tex) == 4
    assert any(TITLE in [c for row in tex_rows(p.read_text()) for c in row] for p in tex)
    if shutil.which("pdflatex") is not None:
        compiled = _compile(tex, results / "tables")
        assert compiled.returncode == 0, compiled.stdout[-3000:]
    provenance = _snakemake("--report", "results/provenance.zip", "--configfile", "mine.yaml", cwd=workdir)
    assert provenance.returncode == 0, (provenance.stdout + provenance.stderr)[-3000:]
    assert (results / "provenance.zip").stat().st_size > 0

    # a job of no dataset fails: the tables (their script raises; the library file is touched so they rerun)
    script = workdir / "workflow/scripts/tables.py"
    script.write_text(script.read_text() + "\nraise RuntimeError('tables broke on purpose')\n")
    (workdir / "workflow/svbop/report/tables.py").touch()
    third = _snakemake("--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    text = third.stdout + third.stderr
    assert third.returncode != 0
    assert ("svbop: the run failed in job tables, which belongs to no dataset: tables broke on purpose "
            "(log: results/logs/tables/tables.log)") in text, text[-3000:]
    assert "the 1 dataset finished: results/report.partial.html shows it" in text
    assert "0 of 1 datasets failed" not in text
