"""The report in a real browser: headless Chromium loads it, every image decodes, the tables are there.

Skipped, with the reason, where Chromium is not installed (Debian package ``chromium``; ``.ci/run``
installs it).  The pipeline's own report is checked the same way in tests/test_workflow.py.
"""

from __future__ import annotations

import base64
import re

import pytest

from browser import chromium_executable, inspect_page
from test_report import _report, figure_png, inputs  # noqa: F401  (pytest fixtures, used by name)

pytestmark = pytest.mark.skipif(
    chromium_executable() is None,
    reason="Chromium not installed (Debian package chromium): the report is not checked in a browser",
)

# a valid 1x1 PNG, and the same bytes cut short
_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_the_report_loads_with_every_image_and_table(inputs, tmp_path):  # noqa: F811
    html, _ = _report(inputs, tmp_path)
    seen = inspect_page(tmp_path / "results" / "report.html", screenshot=tmp_path / "shot.png")
    assert seen["title"] == re.search(r"<title>(.*?)</title>", html).group(1)
    assert seen["errors"] == [] and seen["broken_images"] == []
    assert len(seen["images"]) >= 3 and all(im["naturalWidth"] > 100 for im in seen["images"])
    tables = {t["class"]: t for t in seen["tables"]}
    for cls in ("status", "table1", "table1-paper", "table3", "claims"):
        assert tables[cls]["rows"] > 0, cls
    assert set(re.findall(r'<section id="([^"]+)"', html)) == set(seen["sections"])
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
