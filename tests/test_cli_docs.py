"""`svbop docs` (issue 50, item 7): the help of `svbop report` points to what a wheel user has, the documentation
that comes with the package, and `svbop docs` lists or prints it, from a checkout or from a wheel's copy."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from svbop import _resources
from svbop.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_svbop_docs_lists_every_page_with_its_title(capsys):
    assert main(["docs"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"svbop's documentation: {ROOT / 'workflow' / 'docs'}"
    for page in sorted((ROOT / "workflow" / "docs").glob("*.md")):
        title = page.read_text().splitlines()[0].lstrip("#").strip()
        assert re.search(rf"^  {page.stem}\s+{re.escape(title)}$", out, re.M), page.stem


@pytest.mark.parametrize("page", ["your_model", "your_model.md"])
def test_svbop_docs_prints_a_page(capsys, page):
    assert main(["docs", page]) == 0
    assert capsys.readouterr().out == (ROOT / "workflow" / "docs" / "your_model.md").read_text()


def test_an_unknown_page_is_refused_in_one_line_naming_the_pages(capsys):
    assert main(["docs", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("svbop: error: PAGE: no page 'nope'; the pages are ") and "your_model" in err
    assert err.count("\n") == 1


def test_the_help_of_svbop_report_points_to_svbop_docs_not_to_a_checkouts_path():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    report = sub.choices["report"]
    text = " ".join(report.format_help().split())
    assert "svbop docs your_model" in text and "workflow/docs" not in text
    groups = next(a for a in report._actions if a.dest == "test_groups").help
    assert "(give it for every part given)" not in groups
    assert "--validation-groups when you give --validation" in groups
    assert "--calibration-groups when you give --calibration" in groups


def test_the_wheel_carries_the_docs(tmp_path, monkeypatch):
    """The wheel's copy (svbop/_workflow, which setup.py fills with WORKFLOW_FILES and DOC_FILES) is found
    without a checkout; the source distribution carries the docs for that build."""
    assert "graft workflow/docs" in (ROOT / "MANIFEST.in").read_text().splitlines()
    assert "DOC_FILES" in (ROOT / "setup.py").read_text()
    package = tmp_path / "svbop"
    (package / "_workflow").mkdir(parents=True)
    (package / "_workflow" / "Snakefile").write_text("")
    for name in _resources.DOC_FILES:
        shutil.copytree(ROOT / name, package / "_workflow" / name)
    monkeypatch.setattr(_resources, "_PACKAGE", package)
    monkeypatch.setattr(_resources, "_checkout", lambda: None)
    assert _resources.docs_folder() == package / "_workflow" / "workflow" / "docs"
    assert _resources.doc_pages()["your_model"][1].startswith("Your own model")
    shutil.rmtree(package / "_workflow" / "workflow")
    with pytest.raises(ValueError, match="svbop's documentation is missing: .* reinstall svbop"):
        _resources.docs_folder()
