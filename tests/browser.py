"""Check an HTML page in a real (headless) Chromium, with no Python dependency beyond the stdlib.

``inspect_page`` copies the page into a temporary folder with two injected scripts: a tiny hook
at the top of ``<head>`` that records JavaScript errors, and a collector before ``</body>`` that,
once the window ``load`` event has fired (all images decoded or failed), writes what the browser
saw as JSON into a hidden ``<pre id="svbop-browser-check">``.  Chromium runs headless with
``--dump-dom``; the JSON is read back from the serialised DOM.

``chromium_executable`` finds the browser (``$SVBOP_CHROMIUM`` first; set it to a path that does
not exist to pretend Chromium is not installed).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

__all__ = ["chromium_executable", "inspect_page"]

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
MARKER = "svbop-browser-check"
MAX_SCREENSHOT_HEIGHT = 16000
SRC_PREFIX = 40

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

# Runs first: JavaScript errors of the page (window "error" events from scripts, i.e. what
# window.onerror sees, kept even if the page installs its own onerror) and unhandled rejections.
_HOOK = """<script>(function () {
  var errs = window.__svbopErrors = [];
  window.addEventListener("error", function (e) {
    if (e.target && e.target !== window) { return; }  /* resource errors: reported via images */
    errs.push(String(e.message) + (e.filename ? " (" + e.filename.slice(0, 80) + ":" + e.lineno + ":" + e.colno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) {
    errs.push("unhandled rejection: " + String(e.reason));
  });
})();</script>"""

# Runs on "load" (after the page's own load handlers: setTimeout 0).
_COLLECT = """<script>window.addEventListener("load", function () { setTimeout(function () {
  var squash = function (s) { return (s || "").replace(/\\s+/g, " ").trim(); };
  var tables = Array.prototype.map.call(document.querySelectorAll("table"), function (t) {
    var head = t.tHead && t.tHead.rows.length ? t.tHead.rows[0] : null;
    var rows = 0, i;
    for (i = 0; i < t.tBodies.length; i++) { rows += t.tBodies[i].rows.length; }
    if (!head && t.rows.length && !t.rows[0].querySelector("td")) {  /* header row without <thead> */
      head = t.rows[0]; rows = Math.max(0, rows - 1);
    }
    var columns = 0;
    if (head) { for (i = 0; i < head.cells.length; i++) { columns += head.cells[i].colSpan || 1; } }
    return {"class": t.getAttribute("class") || "", "id": t.id || "", "rows": rows, "columns": columns};
  });
  var facts = {
    "title": document.title,
    "images": Array.prototype.map.call(document.images, function (im) {
      return {"alt": im.getAttribute("alt") || "", "complete": im.complete,
              "naturalWidth": im.naturalWidth, "naturalHeight": im.naturalHeight,
              "src_prefix": (im.getAttribute("src") || "").slice(0, %(src_prefix)d)};
    }),
    "tables": tables,
    "sections": Array.prototype.map.call(document.querySelectorAll("section[id]"), function (s) { return s.id; }),
    "headings": Array.prototype.map.call(document.querySelectorAll("h2"), function (h) { return squash(h.textContent); }),
    "errors": (window.__svbopErrors || []).slice(),
    "body_text_length": document.body ? document.body.innerText.length : 0,
    "scroll_height": Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0)
  };
  var pre = document.createElement("pre");
  pre.id = "%(marker)s";
  pre.hidden = true;
  pre.textContent = JSON.stringify(facts);
  (document.body || document.documentElement).appendChild(pre);
}, 0); });</script>""" % {"src_prefix": SRC_PREFIX, "marker": MARKER}

_RESULT = re.compile(r'<pre[^>]*\bid="%s"[^>]*>(.*?)</pre>' % MARKER, re.S)


def chromium_executable() -> str | None:
    """Path of a Chromium/Chrome binary, or None.

    ``$SVBOP_CHROMIUM`` (a path or a command name) wins when set; if it names nothing executable
    the answer is None ("not installed"), which lets one exercise the skip path.
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


def _instrument(source: str, base_dir: Path) -> str:
    """The page with the error hook, a <base> (relative URLs keep pointing next to the original)
    and the collector."""
    head = _HOOK
    if not re.search(r"<base\b", source, re.I):
        head = '<base href="%s">' % html.escape(base_dir.resolve().as_uri() + "/") + head
    # after <meta charset> if any (it must stay in the first 1024 bytes), else after <head>/<html>
    for pattern in (r"<meta\b[^>]*charset[^>]*>", r"<head\b[^>]*>", r"<html\b[^>]*>", r"<!doctype[^>]*>"):
        m = re.search(pattern, source, re.I)
        if m:
            source = source[: m.end()] + head + source[m.end():]
            break
    else:
        source = head + source
    end = source.lower().rfind("</body>")
    if end < 0:
        return source + _COLLECT
    return source[:end] + _COLLECT + source[end:]


def _run(exe: str, args: list[str], timeout: float) -> tuple[str, str]:
    """Run Chromium in its own process group (killed whole on timeout); (stdout, stderr)."""
    proc = subprocess.Popen(
        [exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
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
        raise RuntimeError(f"Chromium timed out after {timeout:g} s: {' '.join(args[-2:])}\n{_tail(err)}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"Chromium exited with code {proc.returncode}\n{_tail(err)}")
    return out, err


def _tail(text: str, lines: int = 20) -> str:
    kept = [ln for ln in (text or "").splitlines() if ln.strip()][-lines:]
    return "Chromium stderr (tail):\n" + "\n".join(kept) if kept else "(Chromium wrote nothing to stderr)"


def inspect_page(
    html_path: str | os.PathLike,
    screenshot: str | os.PathLike | None = None,
    width: int = 1280,
    timeout: float = 120,
) -> dict:
    """Open ``html_path`` in headless Chromium and report what the browser saw after ``load``.

    Returns a dict with ``title``, ``images`` (``alt``, ``complete``, ``naturalWidth``,
    ``naturalHeight``, ``src_prefix``), ``broken_images`` (alt, or else src prefix, of images not
    complete or with naturalWidth 0), ``tables`` (``class``, ``id``, ``rows`` = tbody rows,
    ``columns`` = header cells), ``sections`` (ids of <section>), ``headings`` (text of <h2>),
    ``errors`` (JavaScript errors), ``body_text_length`` and ``scroll_height`` (px at ``width``).
    With ``screenshot``, also writes a PNG of the whole page (height capped at 16000 px).
    Raises RuntimeError when Chromium is missing, fails, times out or never reaches ``load``.
    """
    exe = chromium_executable()
    if exe is None:
        raise RuntimeError("Chromium not found (install the Debian package chromium or set SVBOP_CHROMIUM)")
    page = Path(html_path)
    source = page.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="svbop-browser-") as tmp:
        tmp = Path(tmp)
        copy = tmp / page.name
        copy.write_text(_instrument(source, page.parent), encoding="utf-8")
        common = [*FLAGS, f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=10000"]
        out, err = _run(exe, [*common, f"--window-size={width},900", "--dump-dom", copy.as_uri()], timeout)
        m = _RESULT.search(out)
        if not m:
            raise RuntimeError(
                "the page never reported its load event (no #%s in the dumped DOM; %d characters dumped)\n%s"
                % (MARKER, len(out), _tail(err))
            )
        facts = json.loads(html.unescape(m.group(1)))
        facts["broken_images"] = [
            im["alt"] or im["src_prefix"]
            for im in facts["images"]
            if not im["complete"] or not im["naturalWidth"]
        ]
        if screenshot is not None:
            shot = Path(screenshot).resolve()
            shot.parent.mkdir(parents=True, exist_ok=True)
            if shot.exists():
                shot.unlink()
            height = int(min(max(int(facts.get("scroll_height") or 0), 600), MAX_SCREENSHOT_HEIGHT))
            _, err = _run(exe, [*common, f"--window-size={width},{height}", f"--screenshot={shot}", copy.as_uri()],
                          timeout)
            if not shot.is_file() or shot.stat().st_size == 0:
                raise RuntimeError(f"Chromium wrote no screenshot to {shot}\n{_tail(err)}")
            facts["screenshot"] = str(shot)
            facts["screenshot_height"] = height
    return facts
