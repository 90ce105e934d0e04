"""report/screenshot.png is complete or the job fails: a picture is kept only when two consecutive
drawings of the page agree (a stand-in Chromium draws what each test needs; no browser needed)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from svbop.report.browser import ChromiumError, screenshot

FAKE = '''#!{python}
import sys
from pathlib import Path
count = Path(sys.argv[0]).with_suffix(".count")
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
pictures = {pictures!r}
shot = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--screenshot="))
Path(shot).write_bytes(pictures[min(n, len(pictures)) - 1])
'''


def fake_chromium(tmp_path: Path, monkeypatch, pictures: list[bytes]) -> Path:
    """A 'Chromium' whose n-th run writes pictures[n-1] (the last one from then on)."""
    exe = tmp_path / "fake-chromium"
    exe.write_text(FAKE.format(python=sys.executable, pictures=pictures))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("SVBOP_CHROMIUM", str(exe))
    return exe.with_suffix(".count")


@pytest.fixture
def page(tmp_path):
    html = tmp_path / "report.html"
    html.write_text("<!doctype html><title>r</title><p>hello</p>")
    return html


def test_a_picture_that_changes_every_time_is_refused_and_nothing_written(tmp_path, monkeypatch, page):
    """The flaky case: every run exited 0, some pictures had an unpainted rectangle."""
    count = fake_chromium(tmp_path, monkeypatch, [b"\x89PNG tile missing", b"\x89PNG complete", b"\x89PNG other tile missing",
                                                  b"\x89PNG complete again?"] * 3)
    png = tmp_path / "report" / "screenshot.png"
    with pytest.raises(ChromiumError, match="differently each of 4 times"):
        screenshot(page, png, attempts=4)
    assert not png.exists() and count.read_text() == "4"
    assert list(png.parent.iterdir()) == []  # no temporary file left behind


def test_the_picture_is_kept_once_two_drawings_agree(tmp_path, monkeypatch, page):
    count = fake_chromium(tmp_path, monkeypatch, [b"\x89PNG tile missing", b"\x89PNG complete"])
    png = tmp_path / "screenshot.png"
    png.write_bytes(b"older picture")
    assert screenshot(page, png) == png
    assert png.read_bytes() == b"\x89PNG complete" and count.read_text() == "3"


def test_attempts_must_allow_a_comparison(tmp_path, page):
    with pytest.raises(ValueError, match="at least 2"):
        screenshot(page, tmp_path / "x.png", attempts=1)
