"""Check an HTML page in a real (headless) Chromium, with no Python dependency beyond the stdlib.

``inspect_page`` copies the page into a temporary folder with two injected scripts: a tiny hook
at the top of ``<head>`` that records JavaScript errors, and a collector before ``</body>`` that,
once the window ``load`` event has fired (all images decoded or failed), writes what the browser
saw as JSON into a hidden ``<pre id="svbop-browser-check">``.  Chromium runs headless with
``--dump-dom``; the JSON is read back from the serialised DOM.

Chromium itself is found and run by the library (:mod:`svbop.report.browser`, which also takes
the pipeline's ``report/screenshot.png``): ``chromium_executable`` tries ``$SVBOP_CHROMIUM``
first (set it to a path that does not exist to pretend Chromium is not installed).
"""

from __future__ import annotations

import base64
import html
import json
import re
import struct
import tempfile
from pathlib import Path

from svbop.report.browser import ChromiumError, chromium_executable, run_chromium, stderr_tail

__all__ = ["FORBIDDEN", "chromium_executable", "inspect_page", "png_text", "unreadable"]

MARKER = "svbop-browser-check"
MAX_SCREENSHOT_HEIGHT = 16000
SRC_PREFIX = 40
#: Text of these (and inside them) is not "visible text" for the page checks: code, the
#: downloads list (file names), the check's own output.
NOT_PROSE = "code, pre, script, style, #downloads, #%s" % MARKER

#: What a reader of the report must never see in its prose (outside code, pre and the downloads):
#: the paper's LaTeX labels and the pipeline's keys. Regular expressions, case-sensitive.
FORBIDDEN = (
    r"ubopmnistvoc2006", r'Figure "g"', r"\bfig:", r"\btab:", r"\btbl:",  # LaTeX labels
    r"\bcredal_\d", r"\bfbeta_\d", r"\bgenreject_\d", r"\bHF_[pc]\b", r"\bFull_svbop\b",  # utility / algorithm keys
    r"\bsvbop_(full|hsg|hf)", r"\btop_s\b", r"\b[a-z]+_\{",  # method keys, raw subscripts
)


def unreadable(seen: dict, keys=(), status_max_px: float = 900, min_px: float = 10) -> list[str]:
    """What makes a page :func:`inspect_page` saw read badly, one sentence each (empty: none).

    * a :data:`FORBIDDEN` pattern or one of ``keys`` (dataset keys, as words) in the prose;
    * the ``#status`` section taller than ``status_max_px`` (one 1280 x 900 screen);
    * rendered text smaller than ``min_px`` CSS pixels;
    * a figure whose smallest font (the PNG's ``svbop:min-font-px``), at its displayed size, is
      smaller than ``min_px``;
    * an image that did not load.
    """
    problems = []
    prose = seen.get("prose", "")
    for pattern in (*FORBIDDEN, *(rf"\b{re.escape(k)}\b" for k in keys)):
        for m in re.finditer(pattern, prose):
            problems.append(f"{pattern!r} in the prose: ...{prose[max(0, m.start() - 50):m.end() + 30]}...")
            break
    for box in seen.get("section_boxes", []):
        if box["id"] == "status" and box["height"] > status_max_px:
            problems.append(f"the status section is {box['height']:.0f} px tall (> {status_max_px:g} px)")
    for f in seen.get("smallest_fonts", []):
        if f["px"] < min_px:
            problems.append(f"text of {f['px']:g} px (< {min_px:g}) in {f['where']}: {f['text']!r}")
    for im in seen.get("images", []):
        shown = im.get("displayed_min_font_px")
        if shown is not None and shown < min_px:
            problems.append(f"figure {im['alt']!r}: smallest text {shown:.1f} px as displayed (< {min_px:g}; "
                            f"{im['min_font_px']:g} px at {im['naturalWidth']} px wide, shown {im['width']:.0f} px)")
    problems += [f"image not loaded: {name}" for name in seen.get("broken_images", [])]
    return problems


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
    var columns = 0, headers = [];
    if (head) {
      for (i = 0; i < head.cells.length; i++) { columns += head.cells[i].colSpan || 1; headers.push(squash(head.cells[i].innerText)); }
    }
    var box = t.getBoundingClientRect(), tallest = 0, words = 0;
    Array.prototype.forEach.call(t.querySelectorAll("td"), function (c) {
      var h = c.getBoundingClientRect().height;
      if (h > tallest) { tallest = h; words = squash(c.innerText).split(" ").length; }
    });
    return {"class": t.getAttribute("class") || "", "id": t.id || "", "rows": rows, "columns": columns,
            "headers": headers, "dataset": t.getAttribute("data-dataset") || "",
            "left": box.left, "right": box.right, "visible": !!t.getClientRects().length,
            "tallest_cell_px": tallest, "tallest_cell_words": words};
  });
  var bodyBox = document.body.getBoundingClientRect(), bodyStyle = getComputedStyle(document.body);
  /* every rendered text node: its computed font size, and the prose outside NOT_PROSE */
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  var prose = [], fonts = [], node;
  while ((node = walker.nextNode())) {
    var el = node.parentElement, text = node.nodeValue;
    if (!el || !text || !text.trim() || el.closest("script, style, #%(marker)s")) { continue; }
    if (!el.getClientRects().length) { continue; }  /* not rendered: display none, closed <details> */
    fonts.push({"px": parseFloat(getComputedStyle(el).fontSize), "text": squash(text).slice(0, 60),
                "where": el.tagName.toLowerCase() + (el.className ? "." + String(el.className).split(" ")[0] : "")});
    if (!el.closest("%(not_prose)s")) { prose.push(text); }
  }
  fonts.sort(function (a, b) { return a.px - b.px; });
  var facts = {
    "title": document.title,
    "images": Array.prototype.map.call(document.images, function (im) {
      var r = im.getBoundingClientRect();
      return {"alt": im.getAttribute("alt") || "", "complete": im.complete,
              "naturalWidth": im.naturalWidth, "naturalHeight": im.naturalHeight,
              "width": r.width, "height": r.height,
              "src_prefix": (im.getAttribute("src") || "").slice(0, %(src_prefix)d)};
    }),
    "section_boxes": Array.prototype.map.call(document.querySelectorAll("section[id]"), function (sec) {
      var r = sec.getBoundingClientRect();
      return {"id": sec.id, "top": r.top + window.scrollY, "height": r.height};
    }),
    "prose": squash(prose.join(" ")),
    "smallest_fonts": fonts.slice(0, 20),
    "tables": tables,
    "column": {"left": bodyBox.left + parseFloat(bodyStyle.paddingLeft),
               "right": bodyBox.right - parseFloat(bodyStyle.paddingRight), "window": window.innerWidth},
    "sections": Array.prototype.map.call(document.querySelectorAll("section[id]"), function (s) { return s.id; }),
    "banner": (function () {
      var b = document.getElementById("compared");
      if (!b) { return null; }
      var r = b.getBoundingClientRect();
      return {"text": squash(b.innerText), "top": r.top + window.scrollY, "height": r.height,
              "visible": !!b.getClientRects().length};
    })(),
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
}, 0); });</script>""" % {"src_prefix": SRC_PREFIX, "marker": MARKER, "not_prose": NOT_PROSE}

_RESULT = re.compile(r'<pre[^>]*\bid="%s"[^>]*>(.*?)</pre>' % MARKER, re.S)


def png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG (keyword -> text), e.g. the smallest font svbop's figures record."""
    out, pos = {}, 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"tEXt":
            key, _, value = data[pos + 8:pos + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        pos += 12 + length
    return out


def _image_sources(source: str) -> list[str]:
    """The ``src`` of every ``<img>`` of a page, in document order."""
    return [html.unescape(m.group(1)) for m in re.finditer(r"<img\b[^>]*?\bsrc=\"([^\"]*)\"", source, re.I)]


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


def _min_font(src: str) -> float | None:
    """The smallest font (px at natural size) a data-URI PNG records (svbop's figures), or None."""
    if not src.startswith("data:image/png;base64,"):
        return None
    value = png_text(base64.b64decode(src.split(",", 1)[1])).get("svbop:min-font-px")
    return float(value) if value else None


def inspect_page(
    html_path: str | os.PathLike,
    screenshot: str | os.PathLike | None = None,
    width: int = 1280,
    timeout: float = 120,
) -> dict:
    """Open ``html_path`` in headless Chromium and report what the browser saw after ``load``.

    Returns a dict with ``title``, ``images`` (``alt``, ``complete``, ``naturalWidth``,
    ``naturalHeight``, ``width`` and ``height`` as displayed, ``src_prefix``, ``min_font_px``:
    the smallest font the PNG records at its natural size, or None, and ``displayed_min_font_px``
    = that x displayed / natural width), ``broken_images`` (alt, or else src prefix, of images not
    complete or with naturalWidth 0), ``tables`` (``class``, ``id``, ``dataset`` (its
    ``data-dataset``), ``rows`` = tbody rows, ``columns`` = header cells, ``headers`` = the
    rendered text of the first header row's cells, ``left``/``right`` its box in px, ``visible``, and its
    tallest ``td``'s height ``tallest_cell_px`` and word count ``tallest_cell_words``), ``column`` (the page's
    column: ``left``/``right`` of the body's content box, and the ``window``'s width), ``banner`` (the ``#compared`` box at the top of
    the report: ``text``, ``top``, ``height``, ``visible``; None without one), ``sections`` (ids of
    <section>), ``section_boxes`` (``id``,
    ``top``, ``height`` in px), ``headings`` (text of <h2>), ``prose`` (the rendered text outside
    code, pre and the downloads section), ``smallest_fonts`` (the 20 smallest rendered texts:
    ``px``, ``where``, ``text``), ``errors`` (JavaScript errors), ``body_text_length`` and
    ``scroll_height`` (px at ``width``).  With ``screenshot``, also writes a PNG of the whole page
    (height capped at 16000 px).  Raises RuntimeError (:class:`svbop.report.browser.ChromiumError`)
    when Chromium is missing, fails, times out or never reaches ``load``.
    """
    page = Path(html_path)
    source = page.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="svbop-browser-") as tmp:
        tmp = Path(tmp)
        copy = tmp / page.name
        copy.write_text(_instrument(source, page.parent), encoding="utf-8")
        common = [f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=10000"]
        out, err = run_chromium([*common, f"--window-size={width},900", "--dump-dom", copy.as_uri()], timeout)
        m = _RESULT.search(out)
        if not m:
            raise ChromiumError(
                "the page never reported its load event (no #%s in the dumped DOM; %d characters dumped)\n%s"
                % (MARKER, len(out), stderr_tail(err))
            )
        facts = json.loads(html.unescape(m.group(1)))
        sources = _image_sources(source)
        for im, src in zip(facts["images"], sources if len(sources) == len(facts["images"]) else []):
            im["min_font_px"] = _min_font(src)
            im["displayed_min_font_px"] = (im["min_font_px"] * im["width"] / im["naturalWidth"]
                                           if im["min_font_px"] and im["naturalWidth"] else None)
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
            _, err = run_chromium([*common, f"--window-size={width},{height}", f"--screenshot={shot}", copy.as_uri()],
                                  timeout)
            if not shot.is_file() or shot.stat().st_size == 0:
                raise ChromiumError(f"Chromium wrote no screenshot to {shot}\n{stderr_tail(err)}")
            facts["screenshot"] = str(shot)
            facts["screenshot_height"] = height
    return facts
