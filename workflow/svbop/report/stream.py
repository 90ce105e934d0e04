"""The report's "stream" section (``svbop report --ordered``): the test rows taken in their file
order, as a deployed model meets them.

* an exchangeability alarm: the simple-jumper and power conformal test martingales
  (:class:`svbop.conformal.ExchangeabilityMartingale`) over the online p-values of the label's LAC
  score, the calibration rows first (:func:`svbop.conformal.online_p_values`), with the alarm line
  ``1/delta`` and the first row at or above it;
* online coverage: ACI, DtACI and conformal PID (:class:`svbop.conformal.AdaptiveConformalSetPredictor`)
  calibrated on the calibration rows, their coverage in every window of ``window`` rows and their
  mean set size.

:func:`stream_summary` computes it, :func:`stream_figure` draws it, :func:`stream_html` writes the
section and :func:`add_stream_section` puts it into a written page.  :func:`check_times` refuses a
time column that is not in order, before any work.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np

__all__ = ["STREAM_METHODS", "StreamPlan", "add_stream_section", "check_times", "prepare_stream", "stream_figure",
           "stream_html", "stream_summary"]

#: The online methods the section compares.
STREAM_METHODS = ("aci", "dtaci", "pid")


def check_times(times, n: int, where: str = "--test-times") -> np.ndarray:
    """A time (or order) column of ``n`` rows, non-decreasing: the rows must already be in time order.
    Numbers or ISO dates/times; one line names the first row out of order."""
    t = np.asarray(times)
    if t.ndim != 1 or t.size != n:
        raise ValueError(f"{where}: {t.size} times for {n} test rows (one per row, in the rows' order)")
    if t.dtype.kind in "US":  # numbers first ("508" is no year), then ISO dates
        try:
            t = t.astype(np.float64)
        except ValueError:
            try:
                t = t.astype("datetime64[ns]")
            except ValueError:
                raise ValueError(f"{where}: times must be numbers or ISO dates (e.g. 2024-05-01T12:00), got"
                                 f" {str(t[0])!r}") from None
    if t.dtype.kind == "f" and np.isnan(t).any():
        raise ValueError(f"{where}: row {int(np.flatnonzero(np.isnan(t))[0])} has no time (NaN)")
    if t.dtype.kind == "M" and np.isnat(t).any():
        raise ValueError(f"{where}: row {int(np.flatnonzero(np.isnat(t))[0])} has no time (NaT)")
    back = np.flatnonzero(t[1:] < t[:-1])
    if back.size:
        i = int(back[0]) + 1
        raise ValueError(f"{where}: the time column is not in order: row {i} ({t[i]}) comes before row {i - 1}"
                         f" ({t[i - 1]}); --ordered reads the rows in file order: sort them by time first")
    return t


def _window_coverage(hit: np.ndarray, window: int) -> np.ndarray:
    """Trailing coverage over the last ``window`` rows at every row from ``window - 1`` on."""
    c = np.concatenate([[0], np.cumsum(hit, dtype=np.int64)])
    return (c[window:] - c[:-window]) / window


def stream_summary(P_cal, y_cal, P, y, *, epsilon: float = 0.1, score: str = "lac", window: int = 500,
                   delta: float = 0.01, seed: int = 0, offset: int = 0) -> dict:
    """The stream section's numbers for the test rows ``P``, ``y`` in order (probabilities), with
    ``P_cal``, ``y_cal`` the calibration rows; ``offset``: the file row of the stream's first row
    (the page and the figure count rows as the file does).

    Returns a dict: ``martingales`` (method -> path over the test rows), ``alarms`` (method ->
    first test row at or above ``1/delta``, or -1), ``coverage`` (method -> per-row hit), ``windows``
    (method -> trailing coverage of ``window`` rows), ``worst`` (method -> largest distance of a
    non-overlapping window's coverage from ``1 - epsilon``), ``size`` (method -> mean set size), and
    the parameters.
    """
    from ..conformal import AdaptiveConformalSetPredictor, ExchangeabilityMartingale, online_p_values
    from ..conformal.scores import _lac_scores

    P_cal, P = np.asarray(P_cal, dtype=np.float64), np.asarray(P, dtype=np.float64)
    y_cal, y = np.asarray(y_cal, dtype=np.int64), np.asarray(y, dtype=np.int64)
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or window < 2:
        raise ValueError(f"window must be an integer >= 2, got {window!r}")
    if y.size < window:
        raise ValueError(f"the stream has {y.size} test rows, fewer than one window of {window}: use a smaller window")
    scores = np.concatenate([_lac_scores(P_cal, y_cal), _lac_scores(P, y)])
    p = online_p_values(scores, n_initial=y_cal.size, random_state=seed)
    out: dict = {"epsilon": float(epsilon), "delta": float(delta), "window": int(window), "score": score,
                 "n": int(y.size), "n_calibration": int(y_cal.size), "offset": int(offset), "martingales": {},
                 "alarms": {},
                 "coverage": {}, "windows": {}, "worst": {}, "size": {}}
    for method in ("simple_jumper", "power"):
        m = ExchangeabilityMartingale(method, delta=delta)
        out["martingales"][method] = m.run(p)
        out["alarms"][method] = m.alarm_
    for method in STREAM_METHODS:
        model = AdaptiveConformalSetPredictor(epsilon, score=score, method=method, random_state=seed)
        sets = model.fit(P_cal, y_cal).update(P, y)
        hit = sets.contains(y)
        out["coverage"][method] = hit
        out["windows"][method] = _window_coverage(hit, window)
        blocks = hit[: hit.size // window * window].reshape(-1, window).mean(axis=1)
        out["worst"][method] = float(np.abs(blocks - (1 - epsilon)).max())
        out["size"][method] = float(sets.sizes.mean())
    return out


_NAMES = {"aci": "ACI (Gibbs and Candès 2021)", "dtaci": "DtACI (Gibbs and Candès 2024)",
          "pid": "conformal PID (Angelopoulos et al. 2023)", "simple_jumper": "simple jumper",
          "power": "power (mixture)"}


def stream_figure(summary: dict, path=None) -> bytes:
    """The section's figure as PNG bytes (the page's other figures' way: :func:`svbop.report.figures.figure_to_png`,
    its smallest font in the PNG's text chunk), also saved at ``path`` (a ``.png``) when given: the
    martingales' paths (log scale) with the alarm line, and the trailing coverage of ACI, DtACI and
    PID against ``1 - epsilon``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .figures import LEGEND_PT, figure_to_png, save_figure

    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True, constrained_layout=True)
    rows = np.arange(summary["n"]) + summary.get("offset", 0)
    k = max(1, summary["n"] // 2000)  # at most about 2,000 points a line: a light SVG
    for method, m in summary["martingales"].items():
        a.plot(rows[::k], np.maximum(m, 1e-300)[::k], label=_NAMES[method], lw=1.2)
    a.axhline(1 / summary["delta"], color="crimson", ls="--", lw=1, label=f"alarm 1/δ = {1 / summary['delta']:g}")
    for method, at in summary["alarms"].items():
        if at >= 0:
            a.axvline(at + summary.get("offset", 0), color="crimson", alpha=0.35, lw=1)
    a.set_yscale("log")
    a.set_ylabel("martingale")
    a.set_title("exchangeability: conformal test martingales")
    a.legend(fontsize=LEGEND_PT, loc="upper left")
    w = summary["window"]
    for method in STREAM_METHODS:
        b.plot(rows[w - 1 :][::k], summary["windows"][method][::k], label=_NAMES[method], lw=1.1)
    b.axhline(1 - summary["epsilon"], color="black", ls="--", lw=1, label=f"1 - ε = {1 - summary['epsilon']:g}")
    b.set_ylabel(f"coverage of the last {w} rows")
    b.set_xlabel("test row (the file's order and numbering)")
    b.legend(fontsize=LEGEND_PT, loc="lower left")
    png = figure_to_png(fig)
    if path is not None:
        save_figure(fig, path)
    plt.close(fig)
    return png


def stream_html(summary: dict, figure: str) -> str:
    """The ``<section id="stream">`` of the page (``figure``: the figure's ``src``, a data URI or a path)."""
    eps, w = summary["epsilon"], summary["window"]
    alarms = [(m, at) for m, at in summary["alarms"].items() if at >= 0]
    if alarms:
        m, at = min(alarms, key=lambda x: x[1])
        row = at + summary.get("offset", 0)
        alarm = (f"<p class=\"stream-alarm\"><strong>First alarm: test row {row:,}</strong> ({html.escape(_NAMES[m])}"
                 f" martingale at or above 1/δ = {1 / summary['delta']:g}): the rows stopped being exchangeable with"
                 " the calibration rows there; a split-conformal guarantee no longer holds after it.</p>")
    else:
        alarm = (f"<p class=\"stream-alarm\">No alarm: neither martingale reached 1/δ = {1 / summary['delta']:g}"
                 f" over the {summary['n']:,} test rows (on exchangeable rows that happens with probability at"
                 f" least 1 - δ = {1 - summary['delta']:g}).</p>")
    rows = "".join(
        f"<tr><td>{html.escape(_NAMES[m])}</td><td>{summary['coverage'][m].mean():.4f}</td>"
        f"<td>{summary['worst'][m]:.4f}</td><td>{summary['size'][m]:.3f}</td></tr>" for m in STREAM_METHODS)
    return (
        "<section id=\"stream\" class=\"stream\">\n<h2>Stream: the test rows in order</h2>\n"
        f"<p>The {summary['n']:,} test rows in their file order, after the {summary['n_calibration']:,} calibration"
        f" rows{' (the first 20 % of the test rows: no --calibration)' if summary.get('split') else ''}; LAC scores"
        f" of the probabilities (softmax of logits, not temperature-scaled); ε = {eps:g}.</p>\n{alarm}\n"
        f"<figure><img src=\"{figure}\" alt=\"martingale paths with the alarm line, and windowed"
        f" coverage of ACI, DtACI and PID\"><figcaption>Top: conformal test martingales over the online p-values"
        f" (alarm line 1/δ; vertical lines: alarms). Bottom: coverage of the last {w} rows.</figcaption></figure>\n"
        f"<table class=\"stream-methods\"><thead><tr><th>online method</th><th>coverage</th><th>worst window of {w}"
        f" (distance from {1 - eps:g})</th><th>mean set size</th></tr></thead><tbody>{rows}</tbody></table>\n"
        "</section>\n"
    )


def add_stream_section(page, summary: dict, *, figure_name: str = "figures/stream.png") -> Path:
    """Put the section before the page's ``</body>``, its figure inside the page (a data URI, as the
    page's other figures) and beside it (``figure_name``); a page that already has one gets it
    replaced (a rerun)."""
    import base64

    page = Path(page)
    png = stream_figure(summary, page.parent / figure_name)
    text = page.read_text(encoding="utf-8")
    start = text.find("<section id=\"stream\"")
    if start >= 0:
        end = text.index("</section>", start) + len("</section>\n")
        text = text[:start] + text[end:]
    section = stream_html(summary, "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
    at = text.rfind("</body>")
    text = text[:at] + section + text[at:] if at >= 0 else text + section
    tmp = page.with_suffix(".html.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(page)
    return page


def _read_part(pair, names, what: str):
    """Probabilities and class indices of one ``(scores, labels)`` pair of files (logits: softmax)."""
    from ..datasets.outputs import _labels_to_indices, _read_labels, _read_scores

    scores, labels = Path(pair[0]).expanduser(), Path(pair[1]).expanduser()
    S = np.asarray(_read_scores(scores, scores_key=None, header=False, sep=None, label_column=None)[0],
                   dtype=np.float64)
    if S.ndim != 2:
        raise ValueError(f"{scores}: {what} scores have shape {S.shape}; expected rows x classes")
    y = _labels_to_indices(_read_labels(labels), S.shape[1], names, labels)
    if y.size != S.shape[0]:
        raise ValueError(f"{labels}: {y.size} labels for {S.shape[0]} {what} rows")
    if not np.all(np.isfinite(S)):
        raise ValueError(f"{scores}: {what} scores hold NaN or infinite values")
    if S.min() < 0 or not np.allclose(S.sum(axis=1), 1.0, atol=1e-3):  # logits: softmax
        Z = S - S.max(axis=1, keepdims=True)
        S = np.exp(Z)
        S /= S.sum(axis=1, keepdims=True)
    return S, y


class StreamPlan:
    """What ``svbop report --ordered`` checked before any work, and the section it writes after the
    page (:meth:`write`)."""

    def __init__(self, P_cal, y_cal, P, y, *, epsilon: float, window: int, split: bool) -> None:
        self.P_cal, self.y_cal, self.P, self.y = P_cal, y_cal, P, y
        self.epsilon, self.window, self.split = epsilon, window, split

    def write(self, page) -> Path:
        summary = stream_summary(self.P_cal, self.y_cal, self.P, self.y, epsilon=self.epsilon, window=self.window,
                                 offset=self.y_cal.size if self.split else 0)
        summary["split"] = self.split
        return add_stream_section(page, summary)


def prepare_stream(args, model: dict) -> StreamPlan | None:
    """``svbop report --ordered``: read the (first) model's test rows in file order and check them,
    with ``--test-times``, before any work; ``None`` without ``--ordered``.  The calibration rows are
    ``--calibration``'s, or else the first 20 % of the test rows (the stream is the rest)."""
    times = getattr(args, "test_times", None)
    window = getattr(args, "stream_window", None)
    if not getattr(args, "ordered", False):
        for flag, value in (("--test-times", times), ("--stream-window", window)):
            if value is not None:
                raise ValueError(f"{flag} is for --ordered (the test rows in time order); add --ordered or drop {flag}")
        return None
    window = 500 if window is None else window
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ValueError(f"--stream-window must be an integer >= 2, got {window!r}")
    from ..datasets.outputs import _read_names

    names = _read_names(Path(args.class_names).expanduser()) if getattr(args, "class_names", None) else None
    P, y = _read_part(model["test"], names, "test")
    if times is not None:
        from ..datasets.outputs import _read_lines

        path = Path(times).expanduser()
        raw = np.load(path, allow_pickle=False) if path.suffix.lower() == ".npy" else _read_lines(path, "time")
        check_times(raw, y.size, f"--test-times {path}")
    if model.get("calibration") is not None:
        P_cal, y_cal = _read_part(model["calibration"], names, "calibration")
        if P_cal.shape[1] != P.shape[1]:
            raise ValueError(f"--calibration has {P_cal.shape[1]} classes, --test {P.shape[1]}")
        split = False
    else:
        cut = max(1, y.size // 5)
        P_cal, y_cal, P, y = P[:cut], y[:cut], P[cut:], y[cut:]
        split = True
    if y.size < window:
        raise ValueError(f"--ordered: {y.size} test rows in the stream, fewer than one window of {window}"
                         " (--stream-window)")
    eps = (getattr(args, "epsilon", None) or [0.1])[0]
    return StreamPlan(P_cal, y_cal, P, y, epsilon=float(eps), window=window, split=split)
