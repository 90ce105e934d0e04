"""Figures of the report (matplotlib, Agg; no pyplot global state).

``matplotlib`` is imported here only, so the rest of :mod:`svbop.report` works without it.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..io import atomic_path
from ..utilities import STANDARD_UTILITIES, utility
from .tables import utility_name

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "MIN_FONT_KEY",
    "figure_to_png",
    "fit_figure",
    "literal_row",
    "min_font_px",
    "outside_figure",
    "plot_coverage_size",
    "plot_fbeta_family",
    "plot_genreject_family",
    "plot_scaling",
    "plot_utilities",
    "read_scaling",
    "save_figure",
    "SCALING_ALGORITHMS",
    "SCALING_STAMP",
]

#: PNG text chunk holding the smallest font of a figure in pixels at its natural size
#: (:func:`min_font_px`), so a reader of the page can check the text stays legible when scaled.
MIN_FONT_KEY = "svbop:min-font-px"
#: Font size (points) of legends and annotations: at 120 dpi 10 pt is 16.7 px, legible (>= 10 px)
#: down to 60 % of the natural width (two figures side by side on a 1280 px screen).
LEGEND_PT = 10

_TEX_GREEK = {"δ": r"\delta", "γ": r"\gamma", "α": r"\alpha", "β": r"\beta", "ε": r"\varepsilon"}


def _tex(name: str) -> str:
    """``"u_{δ=1.6,γ=0.6}"`` -> ``"$u_{\\delta=1.6,\\gamma=0.6}$"`` (matplotlib mathtext)."""
    for k, v in _TEX_GREEK.items():
        name = name.replace(k, v + " ")
    name = re.sub(r" (?=[=,}])", "", name)
    return f"${name}$"


def literal_row(ax: "Axes", x: float, y: float, parts: Sequence[str | tuple[str, dict]], fontsize: float = LEGEND_PT,
                color: str | None = None) -> None:
    """Draw a line of text pieces side by side, centred at ``(x, y)`` in axes coordinates, each
    shown exactly as written: user strings (class names, titles) are never parsed as mathtext,
    so ``$\\frac{$`` is drawn as those seven characters instead of failing inside matplotlib.

    Parameters
    ----------
    ax : matplotlib Axes
        Where to draw.
    x, y : float
        Centre of the line, in axes coordinates.
    parts : sequence of str or (str, dict)
        The pieces, in order; a dict may set ``bold`` and ``underline`` (bool) for its piece.
    fontsize : float, default=LEGEND_PT
        Font size in points.
    color : str, optional
        Text colour (matplotlib's default when omitted).
    """
    from matplotlib.offsetbox import AnnotationBbox, HPacker, TextArea

    children = []
    for part in parts:
        text, style = (part, {}) if isinstance(part, str) else part
        unknown = set(style) - {"bold", "underline"}
        if unknown:
            raise ValueError(f"literal_row: unknown style {sorted(unknown)} (known: bold, underline)")
        props = {"parse_math": False, "fontsize": fontsize, "fontweight": "bold" if style.get("bold") else "normal"}
        if color is not None:
            props["color"] = color
        children.append((_underlined_area() if style.get("underline") else TextArea)(str(text), textprops=props))
    box = HPacker(children=children, sep=0, pad=0, align="baseline")
    ax.add_artist(AnnotationBbox(box, (x, y), xycoords=ax.transAxes, frameon=False, box_alignment=(0.5, 0.5), pad=0))


def _underlined_area():
    """matplotlib's TextArea with a line under its text (matplotlib has no underlined plain text;
    mathtext's \\underline would parse the text)."""
    from matplotlib.lines import Line2D
    from matplotlib.offsetbox import TextArea
    from matplotlib.transforms import IdentityTransform

    class UnderlinedTextArea(TextArea):
        def draw(self, renderer):
            super().draw(renderer)
            text = self._text
            box = text.get_window_extent(renderer)
            _, _, descent = renderer.get_text_width_height_descent("lp", text.get_fontproperties(), ismath=False)
            y = box.y0 + 0.5 * descent  # between the baseline and the descenders
            line = Line2D([box.x0, box.x1], [y, y], transform=IdentityTransform(), color=text.get_color(),
                          linewidth=text.get_fontsize() / 14)
            line.set_figure(self.get_figure(root=True))
            line.draw(renderer)

    return UnderlinedTextArea


def _new_figure(figsize=(6.0, 4.2)) -> "Figure":
    import matplotlib

    matplotlib.use("Agg")  # no display; a no-op if Agg is already in use
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)  # drawn and measured off-screen (fit_figure, outside_figure)
    return fig


def plot_utilities(specs: Sequence[str] = STANDARD_UTILITIES, K: int = 100, ax: "Axes | None" = None,
                   title: str | None = None) -> "Figure":
    """Plot ``g(s)`` for ``s = 1..K``, one line per utility (the paper's Figure 1, left panel).

    Parameters
    ----------
    specs : sequence of str, default=STANDARD_UTILITIES
        Utility spec strings (see :func:`svbop.utility`).
    K : int, default=100
        Number of classes.
    ax : matplotlib Axes, optional
        Axes to draw on; a new figure is made when omitted.
    title : str, optional
        The axes' title (default ``"Set-based utilities, K = <K>"``).

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the axes.

    Raises
    ------
    ValueError
        No utilities, or a bad spec / ``K`` (from :func:`svbop.utility`).
    """
    specs = list(specs)
    if not specs:
        raise ValueError("plot_utilities: no utility specs given")
    us = [utility(spec, K=K) for spec in specs]
    fig, ax = _figure_axes(ax)
    s = np.arange(1, K + 1)
    for u in us:
        ax.plot(s, u.values(), label=f"{_tex(utility_name(u.spec))}  {u.title}", linewidth=1.6)
    _finish_log_axes(ax, K, "$g(s)$", title or f"Set-based utilities, K = {K}")
    return fig


def _figure_axes(ax: "Axes | None") -> tuple["Figure", "Axes"]:
    """``ax`` and its figure, or a new figure with one axes when ``ax`` is None."""
    if ax is None:
        fig = _new_figure()
        return fig, fig.add_subplot()
    return ax.figure, ax


def _finish_log_axes(ax: "Axes", K: int, ylabel: str, title: str) -> None:
    """Axes of a g(s) plot: set size 1..K on a log scale, g in [0, 1], grid and legend."""
    ax.set_xscale("log")
    ax.set_xlim(1, K)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("set size $s = |\\hat{Y}|$ (log scale)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=LEGEND_PT, frameon=False)


def _number_text(x: float) -> str:
    """A finite number as the shortest decimal text a utility spec accepts (``0.5``, ``2``)."""
    x = float(x)
    if not np.isfinite(x):
        raise ValueError(f"utility parameters must be finite numbers, got {x!r}")
    text = format(Decimal(repr(x)).normalize(), "f")
    return text[:-2] if text.endswith(".0") else text


def plot_fbeta_family(
    betas: Sequence[float] = (0.5, 1, 2, 5, 10), K: int = 100, ax: "Axes | None" = None
) -> "Figure":
    """Plot ``g_Fβ(s) = (1+β²)/(s+β²)`` for several β (the paper's Figure 1, right panel).

    One line per β, from ``svbop.utility(f"fbeta:beta={β}", K=K).values()``, then precision
    ``g_P(s) = 1/s`` dashed for reference (it is ``g_Fβ`` with β = 0).  The set size runs over
    ``s = 1..K`` on a log scale.

    Parameters
    ----------
    betas : sequence of float, default=(0.5, 1, 2, 5, 10)
        The β values, each ``>= 0``; drawn in the given order.
    K : int, default=100
        Number of classes (largest set size).
    ax : matplotlib Axes, optional
        Axes to draw on; a new figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure
        The figure; its axes hold ``len(betas) + 1`` lines (the last one is ``g_P``).

    Raises
    ------
    ValueError
        No β given, a β that is negative or not finite, or a bad ``K``.
    """
    betas = list(betas)
    if not betas:
        raise ValueError("plot_fbeta_family: no beta values given")
    us = [utility(f"fbeta:beta={_number_text(b)}", K=K) for b in betas]
    precision = utility("precision", K=K)
    fig, ax = _figure_axes(ax)
    s = np.arange(1, K + 1)
    for u in us:
        ax.plot(s, u.values(), label=f"$\\beta = {u.label.split('_', 1)[1]}$", linewidth=1.6)
    ax.plot(s, precision.values(), "k--", label="$g_P(s) = 1/s$", linewidth=1.2)
    _finish_log_axes(ax, K, "$g_{F\\beta}(s) = (1+\\beta^2)/(s+\\beta^2)$", f"F-beta utilities, K = {K}")
    return fig


def _bound_alpha(K: int) -> str:
    """``(K-1)/K`` as spec text, rounded down to 6 decimals (so it stays ``<= (K-1)/K``)."""
    if K == 1:
        return "0"
    q = (Decimal(K - 1) / Decimal(K)).quantize(Decimal("0.000001"), rounding=ROUND_FLOOR)
    return format(q.normalize(), "f")


def _members_text(fails: dict[str, list[str]], betas: list[str]) -> str:
    """``{"1": [all betas], "0.9": ["0.2"]}`` -> ``"α = 1 (every β), α = 0.9 (β = 0.2)"``."""
    parts = []
    for a, bs in fails.items():
        if bs:
            parts.append(f"α = {a} (" + ("every β" if len(bs) == len(betas) else "β = " + ", ".join(bs)) + ")")
    return ", ".join(parts) or "none"


def plot_genreject_family(
    Ks: Sequence[int] = (10, 100),
    alphas: Sequence[float] | None = None,
    betas: Sequence[float] = (0.2, 0.5, 1, 2, 5),
    axes: "Sequence[Axes] | None" = None,
) -> "Figure":
    """Plot the generalised reject option utility for several ``K`` (the paper's Figure 3, appendix).

    One panel per ``K`` with ``g_{α,β}(s) = 1 - α((s-1)/(K-1))^β`` for every pair of the grid
    ``alphas × betas`` (colour by β, solid for the first α, then dotted, dash-dotted, ...), then
    precision ``g_P(s) = 1/s`` dashed.  The set size runs over ``s = 1..K`` on a linear scale, where
    β < 1 gives convex and β > 1 concave members (β = 1 is linear).

    The default grid shows the paper's appendix bounds: ``α = (K-1)/K`` is the largest α for which
    ``g_{α,β}`` can be lower-bounded by precision (``g(K) >= 1/K``), and ``α = 1`` (``g(K) = 0``)
    breaks both properties for every β; with ``α = (K-1)/K``, β = 0.2 is below the bound
    ``β >= 1 + log_{1/(K-1)}(K/2)`` for ``K = 10`` (≈ 0.27) but above it for ``K = 100``
    (≈ 0.15), and the convex members (β < 1) are not (1/x)-convex.

    One legend for all panels (the β colours, the α line styles and ``g_P``: ``len(betas) +
    len(alphas) + 1`` entries, in :data:`LEGEND_PT` points, below the panels).  Under each panel,
    the members that are *not lower-bounded by precision* and those that are *not (1/x)-convex*,
    decided exactly by :meth:`svbop.Utility.properties` for that panel's ``K``; the panel's axes
    carry them as ``ax.svbop_flags = {"not ≥ g_P": {α: [β, ...]}, "not (1/x)-convex": {...}}``.

    Parameters
    ----------
    Ks : sequence of int, default=(10, 100)
        Number of classes of each panel (each ``>= 2``).
    alphas : sequence of float, optional
        Values of α in [0, 1].  Default: ``((K-1)/K, 1)`` per panel, ``(K-1)/K`` rounded down to
        6 decimals.
    betas : sequence of float, default=(0.2, 0.5, 1, 2, 5)
        Values of β > 0.
    axes : sequence of matplotlib Axes, optional
        One axes per ``K``; a new figure with ``len(Ks)`` panels side by side when omitted (the
        properties are then written under each panel; with given axes, into their x labels).

    Returns
    -------
    matplotlib.figure.Figure
        The figure; each panel holds ``len(alphas) * len(betas) + 1`` lines (the last is ``g_P``).

    Raises
    ------
    ValueError
        Empty ``Ks``, ``alphas`` or ``betas``; a ``K < 2``; ``axes`` not one per ``K``; a
        parameter out of its domain (from :func:`svbop.utility`).
    """
    Ks = list(Ks)
    betas = list(betas)
    if not Ks:
        raise ValueError("plot_genreject_family: no K values given")
    if not betas:
        raise ValueError("plot_genreject_family: no beta values given")
    for K in Ks:
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 2:
            raise ValueError(f"plot_genreject_family: every K must be an integer >= 2, got {K!r}")
    if alphas is not None:
        alphas = list(alphas)
        if not alphas:
            raise ValueError("plot_genreject_family: no alpha values given")
    notes = None
    if axes is None:
        fig = _new_figure(figsize=(5.0 * len(Ks), 5.2))
        grid = fig.add_gridspec(2, len(Ks), height_ratios=[6, 1])
        axes = [fig.add_subplot(grid[0, i]) for i in range(len(Ks))]
        notes = [fig.add_subplot(grid[1, i]) for i in range(len(Ks))]
    else:
        axes = list(axes)
        if len(axes) != len(Ks):
            raise ValueError(
                f"plot_genreject_family: got {len(axes)} axes for {len(Ks)} values of K; give one per K"
            )
        fig = axes[0].figure
    styles = ["-", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]
    colours = [f"C{i}" for i in range(10)]
    b_texts = [_number_text(b) for b in betas]
    for k, (K, ax) in enumerate(zip(Ks, axes)):
        K = int(K)
        a_texts = [_bound_alpha(K), "1"] if alphas is None else [_number_text(a) for a in alphas]
        s = np.arange(1, K + 1)
        flags: dict[str, dict[str, list[str]]] = {"not ≥ g_P": {}, "not (1/x)-convex": {}}
        for i, a in enumerate(a_texts):
            for j, b in enumerate(b_texts):
                u = utility(f"genreject:alpha={a},beta={b}", K=K)
                p = u.properties()
                flags["not ≥ g_P"].setdefault(a, [])
                flags["not (1/x)-convex"].setdefault(a, [])
                if not p.lower_bounded_by_precision:
                    flags["not ≥ g_P"][a].append(b)
                if not p.one_over_x_convex:
                    flags["not (1/x)-convex"][a].append(b)
                ax.plot(s, u.values(), linestyle=styles[i % len(styles)], color=colours[j % len(colours)],
                        linewidth=1.5)
        ax.plot(s, utility("precision", K=K).values(), "k--", linewidth=1.2)
        ax.svbop_flags = flags
        ax.set_xlim(1, K)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("$g_{\\alpha,\\beta}(s) = 1 - \\alpha((s-1)/(K-1))^\\beta$")
        ax.set_title(f"Generalised reject option, K = {K}")
        ax.grid(True, alpha=0.3)
        text = "\n".join(f"{'not ≥ $g_P$' if name == 'not ≥ g_P' else name}: {_members_text(f, b_texts)}"
                          for name, f in flags.items())
        if notes is not None:
            ax.set_xlabel("set size $s = |\\hat{Y}|$")
            notes[k].set_axis_off()
            notes[k].text(0.0, 1.0, text, ha="left", va="top", fontsize=LEGEND_PT, transform=notes[k].transAxes,
                          wrap=True)
        else:
            ax.set_xlabel("set size $s = |\\hat{Y}|$\n" + text, fontsize=LEGEND_PT)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colours[j % len(colours)], linewidth=2, label=f"$\\beta = {b}$")
               for j, b in enumerate(b_texts)]
    a_names = ["(K−1)/K", "1"] if alphas is None else [_number_text(a) for a in alphas]
    handles += [Line2D([], [], color="0.3", linestyle=styles[i % len(styles)], linewidth=1.5, label=f"α = {a}")
                for i, a in enumerate(a_names)]
    handles.append(Line2D([], [], color="k", linestyle="--", linewidth=1.2, label="$g_P(s) = 1/s$"))
    _legend_below(fig, handles, max_ncol=4)
    return fig


#: Marker and colour of each kind of set in :func:`plot_coverage_size` (svbop.report.beyond.BEYOND_FAMILIES).
_FAMILY_STYLE = {
    "svbop_full": ("o", "tab:blue"), "threshold": ("s", "tab:orange"), "top_s": ("^", "tab:gray"),
    "icp": ("X", "tab:red"), "conformal": ("D", "tab:purple"), "class_conditional": ("P", "tab:brown"),
    "coverage": ("*", "tab:green"), "hierarchical": ("h", "tab:cyan"), "mondrian": ("v", "tab:olive"),
    "risk": ("p", "tab:pink"), "weighted": ("<", "darkgoldenrod"), "conditional": (">", "teal"),
}


def plot_coverage_size(frame, titles=None, ncols: int = 2, paper: bool = True) -> "Figure":
    """Coverage against mean set size of every kind of set, one panel per dataset (the report's
    section "Beyond the paper").

    Parameters
    ----------
    frame : DataFrame
        :func:`svbop.report.beyond.read_beyond`'s table: ``dataset``, ``family``, ``coverage_pct``,
        ``mean_size``, ``target_coverage_pct``.
    titles : mapping of str to str, optional
        Dataset key -> panel title.
    ncols : int, default=2
        Panels per row.
    paper : bool, default=True
        Name the paper's kinds of set as the paper's in the legend (False: the page about a model).

    Returns
    -------
    matplotlib.figure.Figure
        One marker per method (shape and colour: its kind of set), the mean set size on a log
        scale, and a dotted line at each coverage a method guarantees (1 - epsilon).

    Raises
    ------
    ValueError
        ``frame`` has no rows.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from .beyond import BEYOND_FAMILIES

    if len(frame) == 0:
        raise ValueError("plot_coverage_size: no methods to plot")
    titles = dict(titles or {})
    datasets = list(dict.fromkeys(frame["dataset"].astype(str)))
    ncols = max(1, min(ncols, len(datasets)))
    nrows = -(-len(datasets) // ncols)
    fig = _new_figure(figsize=(max(5.2 * ncols, 7.5), 3.9 * nrows + 0.9))  # room for the legend below
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, d in zip(axes, datasets):
        df = frame[frame["dataset"].astype(str) == d]
        for target in sorted(set(df["target_coverage_pct"].dropna())):
            ax.axhline(target, color="0.5", linestyle=":", linewidth=1.0)
        for family, rows in df.groupby("family", sort=False):
            marker, color = _FAMILY_STYLE.get(family, ("o", "k"))
            ax.scatter(rows["mean_size"], rows["coverage_pct"], marker=marker, color=color, s=110 if marker == "*" else 46,
                       alpha=0.85, edgecolors="none")
        ax.set_xscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)  # 1, 10, 100 (not 10^0); sizes within a decade label their minor ticks
        sizes = df["mean_size"][df["mean_size"] > 0]
        narrow = len(sizes) and sizes.max() / sizes.min() < 20
        ax.xaxis.set_minor_formatter(plain if narrow else NullFormatter())
        ax.set_xlabel("mean set size (log scale)")
        ax.set_ylabel("coverage on the test rows (%)")
        ax.set_title(titles.get(d, d))
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[len(datasets):]:
        ax.set_visible(False)
    present = set(frame["family"])
    names = {k: name if paper else name.replace(" (the paper)", "") for k, name in BEYOND_FAMILIES}
    # every kind plotted has its entry (a kind the table does not name by its own key, too)
    handles = [Line2D([], [], linestyle="none", marker=_FAMILY_STYLE.get(k, ("o", "k"))[0],
                      color=_FAMILY_STYLE.get(k, ("o", "k"))[1], markersize=8, label=names.get(k, k))
               for k in [*(k for k, _ in BEYOND_FAMILIES if k in present),
                         *sorted(k for k in present if k not in names)]]
    if frame["target_coverage_pct"].notna().any():
        handles.append(Line2D([], [], color="0.5", linestyle=":", label="guaranteed coverage 1 - ε"))
    _legend_below(fig, handles)
    return fig


def plot_reliability(records: Mapping[str, Mapping[str, object]], titles=None, ncols: int = 2) -> "Figure":
    """Reliability diagrams of the test rows before and after calibration, one panel per dataset.

    Parameters
    ----------
    records : mapping of dataset key to calibration record
        :func:`svbop.calibration.calibrate_parts`'s record (``test.before`` / ``test.after``, each with
        ``reliability``: equal-mass bins of the top-label confidence).
    titles : mapping of str to str, optional
        Dataset key -> panel title.

    Returns
    -------
    matplotlib.figure.Figure
        Accuracy against mean confidence per bin; the diagonal is perfect calibration.
    """
    if not records:
        raise ValueError("plot_reliability: no calibration records")
    titles = dict(titles or {})
    keys = list(records)
    ncols = max(1, min(ncols, len(keys)))
    nrows = -(-len(keys) // ncols)
    fig = _new_figure(figsize=(4.6 * ncols, 4.0 * nrows + 0.6))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, d in zip(axes, keys):
        rec = records[d]
        test = rec.get("test") or {}
        ax.plot([0, 1], [0, 1], color="0.6", linestyle=":", linewidth=1.0, label="perfect calibration")
        T = float(rec.get("temperature", 1.0))
        if rec.get("method") == "venn_abers":
            shown = [("before", "tab:red", "o", "as given"), ("after", "tab:blue", "s", "after (Venn-Abers)")]
        else:
            shown = [("before", "tab:red", "o", "as given")] if T == 1.0 else [
                ("before", "tab:red", "o", "before (T = 1)"), ("after", "tab:blue", "s", f"after (T = {T:.3g})")]
        for when, color, marker, label in shown:
            curve = (test.get(when) or {}).get("reliability") or {}
            ece = (test.get(when) or {}).get("ece")
            ax.plot(curve.get("confidence", []), curve.get("accuracy", []), color=color, marker=marker, markersize=4,
                    linewidth=1.2, label=f"{label}, ECE {100 * ece:.1f} %" if ece is not None else label)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("mean top-class probability (bin)")
        ax.set_ylabel("top-1 accuracy (bin)")
        ax.set_title(titles.get(d, d))
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=LEGEND_PT, frameon=False)
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    return fig


def min_font_px(fig: "Figure", dpi: int = 120) -> float:
    """The smallest font size of a figure's visible, non-empty texts (titles, labels, tick labels,
    legends, annotations), in pixels of its PNG at ``dpi``."""
    from matplotlib.text import Text

    fig.canvas.draw()  # tick labels exist once drawn
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_figure() is not None
             and (t.axes is None or t.axes.get_visible())]
    return round(min(sizes) * dpi / 72, 2) if sizes else 0.0


def _png_metadata(fig: "Figure", dpi: int) -> dict[str, str]:
    return {"Software": "svbop (matplotlib)", MIN_FONT_KEY: f"{min_font_px(fig, dpi):g}"}


#: The algorithms of ``benchmarks/bench_scaling.py``'s results, in the order they are drawn.
SCALING_ALGORITHMS = ("bare scoring", "Full (svbop)", "Full (paper)", "HSG", "HF")
#: What every scaling figure says of itself.
SCALING_STAMP = "svbop's own measurement, beyond the paper"


def read_scaling(path: str | os.PathLike) -> dict:
    """Read the results JSON of ``benchmarks/bench_scaling.py --out``.

    Returns
    -------
    dict
        ``meta`` (date, cpu, cpu_count, threads, load_start, load_end, ...), ``results`` (one
        entry per K: ``K`` and ``algorithms`` -> ``ms_per_row``, ``ms_min``, ``ms_max``,
        ``ratio_to_full``, or ``skipped``) and ``beats_full_from_K``; optionally ``trained``, entries of
        the same shape measured on trained models (``benchmarks/bench_extreme.py --scaling-json``), drawn
        beside the random ones.

    Raises
    ------
    ValueError
        The file is missing, not JSON, or lacks a key the figure needs (named, with the file).
    """
    import json

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (report: scaling names a results JSON of benchmarks/bench_scaling.py --out)")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("meta"), dict) or not isinstance(data.get("results"), list):
        raise ValueError(f"{path}: not a results file of bench_scaling.py (expected an object with 'meta' and 'results')")
    for key in ("date", "cpu", "threads", "load_start", "load_end"):
        if key not in data["meta"]:
            raise ValueError(f"{path}: meta lacks key {key!r}")
    if not isinstance(data.get("trained", []), list):
        raise ValueError(f"{path}: 'trained' must be a list of results")
    for part in ("results", "trained"):
        for i, r in enumerate(data.get(part, [])):
            if not isinstance(r, dict) or not isinstance(r.get("K"), int) or not isinstance(r.get("algorithms"), dict):
                raise ValueError(f"{path}: {part}[{i}] needs an integer 'K' and an object 'algorithms'")
            for name, a in r["algorithms"].items():
                if not isinstance(a, dict):
                    raise ValueError(f"{path}: {part}[{i}].algorithms[{name!r}] is not an object")
                for key in ("ms_per_row", "ms_min", "ms_max") if "ms_per_row" in a else ():
                    v = a.get(key)
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                        raise ValueError(f"{path}: {part}[{i}].algorithms[{name!r}].{key} must be a positive number, "
                                         f"got {v!r}")
    return data


def plot_scaling(data: dict) -> "Figure":
    """Time per test row against K, log-log, from :func:`read_scaling`'s data (one line per
    algorithm, bars from the fastest to the slowest repeat), stamped :data:`SCALING_STAMP` with
    the date, CPU, threads and load of the run.  Entries of ``trained`` (trained models) are drawn
    dashed with open markers, labelled "(trained)", beside the random models' lines."""
    fig = _new_figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    for part, suffix, style in (("results", "", {}), ("trained", " (trained)", {"linestyle": "--", "mfc": "none"})):
        for name, marker in zip(SCALING_ALGORITHMS, "o^vsD"):
            pts = [(r["K"], r["algorithms"][name]) for r in data.get(part, [])
                   if "ms_per_row" in r["algorithms"].get(name, {})]
            if not pts:
                continue
            Ks = [K for K, _ in pts]
            ms = np.array([a["ms_per_row"] for _, a in pts])
            lo, hi = np.array([a["ms_min"] for _, a in pts]), np.array([a["ms_max"] for _, a in pts])
            ax.errorbar(Ks, ms, yerr=[np.maximum(ms - lo, 0), np.maximum(hi - ms, 0)], marker=marker, capsize=2,
                        label=name + suffix, **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of classes K", fontsize=LEGEND_PT)
    ax.set_ylabel("ms per test row (median; bars: min-max)", fontsize=LEGEND_PT)
    ax.tick_params(labelsize=LEGEND_PT)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=LEGEND_PT)
    m = data["meta"]
    ax.set_title(f"{SCALING_STAMP}\n{m['date']}, {m['cpu']}, {m['threads']} thread(s), "
                 f"load {m['load_start'][0]:.1f} -> {m['load_end'][0]:.1f}", fontsize=LEGEND_PT)
    return fig


def outside_figure(fig: "Figure", tolerance_px: float = 1.0) -> list[str]:
    """What of a figure reaches outside it once drawn (a cut legend, label, title or tick label).

    Each visible axes is measured with everything it draws (tick labels, axis labels, title, its legend,
    annotations), and so is each legend and text of the figure itself.

    Returns
    -------
    list of str
        One line per such part: what it is and by how many pixels it overflows; empty when everything lies
        within the figure.
    """
    renderer = _renderer(fig)
    box = fig.bbox
    parts = [(f"axes {ax.get_title()!r} (its labels, ticks, title or legend)", ax.get_tightbbox(renderer))
             for ax in fig.axes if ax.get_visible()]
    parts += [("legend " + repr(", ".join(t.get_text() for t in leg.get_texts())), leg.get_window_extent(renderer))
              for leg in fig.legends if leg.get_visible()]
    parts += [(f"text {t.get_text()!r}", t.get_window_extent(renderer)) for t in fig.texts
              if t.get_visible() and t.get_text().strip()]
    out = []
    for what, e in parts:
        if e is None:
            continue
        over = max(box.x0 - e.x0, e.x1 - box.x1, box.y0 - e.y0, e.y1 - box.y1)
        if over > tolerance_px:
            out.append(f"{what} reaches {over:.0f} px outside the figure")
    return out


def _renderer(fig: "Figure"):
    """The figure drawn on an Agg canvas (one is attached to a figure made elsewhere), and its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def fit_figure(fig: "Figure", max_rounds: int = 4) -> "Figure":
    """Grow a figure until every text and legend lies within it (nothing is cut when it is saved): the figure
    is widened and heightened by what reaches outside, and its constrained layout placed again."""
    for _ in range(max_rounds):
        renderer = _renderer(fig)
        tight = fig.get_tightbbox(renderer)  # inches
        w, h = fig.get_size_inches()
        grow_w = max(0.0, -tight.x0) + max(0.0, tight.x1 - w)
        grow_h = max(0.0, -tight.y0) + max(0.0, tight.y1 - h)
        if grow_w <= 1 / fig.dpi and grow_h <= 1 / fig.dpi:
            break
        fig.set_size_inches(w + 2 * grow_w + 0.1 * (grow_w > 0), h + grow_h + 0.1 * (grow_h > 0))
    return fig


def _legend_below(fig: "Figure", handles, max_ncol: int = 3, **kwargs):
    """One legend for the whole figure, below its panels, in as many columns (at most ``max_ncol``) as fit its
    width; the figure is grown when even one column does not (:func:`fit_figure`)."""
    legend = None
    for ncol in range(min(len(handles), max_ncol), 0, -1):
        if legend is not None:
            legend.remove()
        legend = fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=LEGEND_PT,
                            frameon=False, **kwargs)
        if legend.get_window_extent(_renderer(fig)).width <= fig.bbox.width - 4:
            break
    fit_figure(fig)
    return legend


def figure_to_png(fig: "Figure", dpi: int = 120) -> bytes:
    """Render a figure to PNG bytes, grown first so that nothing is cut (:func:`fit_figure`); the PNG's text
    chunk :data:`MIN_FONT_KEY` holds its smallest font in pixels (:func:`min_font_px`)."""
    fit_figure(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata=_png_metadata(fig, dpi))
    return buf.getvalue()


def save_figure(fig: "Figure", path: str | os.PathLike, dpi: int = 120) -> None:
    """Save a figure as PNG, atomically (temporary file beside ``path``, then rename), grown first so that
    nothing is cut (:func:`fit_figure`), with its smallest font in the text chunk :data:`MIN_FONT_KEY`.

    Raises
    ------
    ValueError
        ``path`` does not end in ``.png``.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"{path}: figures are written as PNG; use a .png file name")
    fit_figure(fig)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata=_png_metadata(fig, dpi))
