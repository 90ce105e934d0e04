"""The report in a real browser: headless Chromium, found on the PATH and run without a display.

:func:`screenshot` takes a picture of a page at a given window size (the pipeline's
``report/screenshot.png``: the first screen of ``results/report.html`` at 1280 x 900).
:func:`run_chromium` is the one way this package starts Chromium (its own process group, killed
whole on timeout); ``tests/browser.py`` builds its page checks on it.  No Python dependency beyond
the standard library.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..io import atomic_path

__all__ = ["CANDIDATES", "FLAGS", "ChromiumError", "chromium_executable", "run_chromium", "screenshot", "stderr_tail"]

#: Names of a Chromium or Chrome binary, tried in this order on the PATH.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

#: Flags of every run: headless, no sandbox (containers run as root), nothing from the network.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--allow-file-access-from-files",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-crash-reporter",
    "--mute-audio",
    "--hide-scrollbars",
)

_MISSING = ("Chromium not found: install the Debian package chromium (apt-get install chromium), or set "
            "SVBOP_CHROMIUM to the path of a Chromium or Chrome binary")


class ChromiumError(RuntimeError):
    """Chromium is missing, failed, timed out or did not write what was asked."""


def chromium_executable() -> str | None:
    """Path of a Chromium/Chrome binary, or None.

    ``$SVBOP_CHROMIUM`` (a path or a command name) wins when set; if it names nothing executable
    the answer is None ("not installed"), which lets one exercise that path.
    """
    wanted = os.environ.get("SVBOP_CHROMIUM", "").strip()
    if wanted:
        found = shutil.which(wanted)
        return str(Path(found).resolve()) if found else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def stderr_tail(text: str, lines: int = 20) -> str:
    """The last ``lines`` non-empty lines of Chromium's stderr, for error messages."""
    kept = [ln for ln in (text or "").splitlines() if ln.strip()][-lines:]
    return "Chromium stderr (tail):\n" + "\n".join(kept) if kept else "(Chromium wrote nothing to stderr)"


def run_chromium(args: Sequence[str], timeout: float = 120, exe: str | None = None) -> tuple[str, str]:
    """Run Chromium with :data:`FLAGS` plus ``args``; return (stdout, stderr).

    Parameters
    ----------
    args : sequence of str
        Further flags and the URL (e.g. ``["--dump-dom", "file:///..."]``).
    timeout : float, default=120
        Seconds; past it the whole process group is killed.
    exe : str, optional
        The binary; default :func:`chromium_executable`.

    Raises
    ------
    ChromiumError
        Chromium is not installed, exits non-zero or times out (the message ends with its stderr).
    """
    exe = exe or chromium_executable()
    if exe is None:
        raise ChromiumError(_MISSING)
    proc = subprocess.Popen(
        [exe, *FLAGS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, errors="replace", start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        raise ChromiumError(f"Chromium timed out after {timeout:g} s: {' '.join(list(args)[-2:])}\n{stderr_tail(err)}") from None
    if proc.returncode != 0:
        raise ChromiumError(f"Chromium exited with code {proc.returncode}\n{stderr_tail(err)}")
    return out, err


def screenshot(
    html_path: str | os.PathLike,
    png_path: str | os.PathLike,
    width: int = 1280,
    height: int = 900,
    timeout: float = 120,
    attempts: int = 4,
) -> Path:
    """A PNG of the first ``width`` x ``height`` pixels of a page, as a browser window shows it.

    A loaded machine's Chromium can leave part of the picture unpainted (seen: a white rectangle
    over the lower right, a table row cut mid-word) and still exit 0.  So the page is drawn until
    two consecutive pictures are identical, byte for byte (a static page draws the same pixels
    every time; an unpainted tile does not repeat itself exactly), at most ``attempts`` times;
    otherwise nothing is written and :class:`ChromiumError` says so.

    Parameters
    ----------
    html_path : path
        The page (a local file; relative links resolve next to it).
    png_path : path
        The PNG to write; parent folders are created, an older file is replaced only on success.
    width, height : int, default=1280, 900
        The window, in CSS pixels.
    timeout : float, default=120
        Seconds, per picture.
    attempts : int, default=4
        Pictures taken at most (at least 2).

    Returns
    -------
    Path
        ``png_path``.

    Raises
    ------
    ValueError
        ``html_path`` does not exist, or a size or ``attempts`` is out of range.
    ChromiumError
        Chromium is missing (the message says how to install it), fails, writes no PNG, or no
        two consecutive pictures of ``attempts`` agree.
    """
    page = Path(html_path)
    if not page.is_file():
        raise ValueError(f"{page}: no such file")
    if width < 1 or height < 1:
        raise ValueError(f"screenshot: width and height must be positive, got {width} x {height}")
    if attempts < 2:
        raise ValueError(f"screenshot: attempts must be at least 2 (two pictures must agree), got {attempts}")
    png = Path(png_path)
    previous: bytes | None = None
    with tempfile.TemporaryDirectory(prefix="svbop-screenshot-") as tmp, atomic_path(png) as shot:
        for attempt in range(1, attempts + 1):
            profile = Path(tmp) / f"profile{attempt}"
            if shot.exists():
                shot.unlink()
            _, err = run_chromium(
                # all compositor stages before the picture: without it a loaded machine's screenshot
                # can miss the last tiles (seen: the bottom 140 px left white)
                [f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--run-all-compositor-stages-before-draw",
                 f"--window-size={width},{height}", f"--screenshot={shot.resolve()}", page.resolve().as_uri()],
                timeout=timeout,
            )
            if not shot.is_file() or shot.stat().st_size == 0:
                raise ChromiumError(f"Chromium wrote no screenshot for {page}\n{stderr_tail(err)}")
            picture = shot.read_bytes()
            if picture == previous:
                return png
            previous = picture
        raise ChromiumError(
            f"Chromium drew {page} differently each of {attempts} times (part of the page left unpainted on a "
            "loaded machine?); no screenshot written. Rerun when the machine is less busy."
        )
