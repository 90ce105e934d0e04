"""Figures of the report (matplotlib, Agg; no pyplot global state).

``matplotlib`` is imported here only, so the rest of :mod:`svbop.report` works without it.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence
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
    "figure_to_png",
    "plot_fbeta_family",
    "plot_genreject_family",
    "plot_utilities",
    "save_figure",
]

_TEX_GREEK = {"δ": r"\delta", "γ": r"\gamma", "α": r"\alpha", "β": r"\beta", "ε": r"\varepsilon"}


def _tex(name: str) -> str:
    """``"u_{δ=1.6,γ=0.6}"`` -> ``"$u_{\\delta=1.6,\\gamma=0.6}$"`` (matplotlib mathtext)."""
    for k, v in _TEX_GREEK.items():
        name = name.replace(k, v + " ")
    name = re.sub(r" (?=[=,}])", "", name)
    return f"${name}$"


def _new_figure(figsize=(6.4, 4.2)) -> "Figure":
    import matplotlib

    matplotlib.use("Agg")  # no display; a no-op if Agg is already in use
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def plot_utilities(specs: Sequence[str] = STANDARD_UTILITIES, K: int = 100, ax: "Axes | None" = None) -> "Figure":
    """Plot ``g(s)`` for ``s = 1..K``, one line per utility (the paper's Figure "g", left panel).

    Parameters
    ----------
    specs : sequence of str, default=STANDARD_UTILITIES
        Utility spec strings (see :func:`svbop.utility`).
    K : int, default=100
        Number of classes.
    ax : matplotlib Axes, optional
        Axes to draw on; a new figure is made when omitted.

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
    _finish_log_axes(ax, K, "$g(s)$", f"Set-based utilities, K = {K}")
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
    ax.legend(fontsize="small", frameon=False)


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
    """Plot ``g_Fβ(s) = (1+β²)/(s+β²)`` for several β (the paper's Figure "g", right panel).

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


def plot_genreject_family(
    Ks: Sequence[int] = (10, 100),
    alphas: Sequence[float] | None = None,
    betas: Sequence[float] = (0.2, 0.5, 1, 2, 5),
    axes: "Sequence[Axes] | None" = None,
) -> "Figure":
    """Plot the generalised reject option utility for several ``K`` (the paper's Figure fig:gab).

    One panel per ``K`` with ``g_{α,β}(s) = 1 - α((s-1)/(K-1))^β`` for every pair of the grid
    ``alphas × betas`` (colour by β, solid for the first α, then dotted, dash-dotted, ...), then
    precision ``g_P(s) = 1/s`` dashed.  The set size runs over ``s = 1..K`` on a linear scale, where
    β < 1 gives convex and β > 1 concave members (β = 1 is linear).

    The default grid shows the paper's appendix bounds: ``α = (K-1)/K`` is the largest α for which
    ``g_{α,β}`` can be lower-bounded by precision (``g(K) >= 1/K``), and ``α = 1`` (``g(K) = 0``)
    breaks both properties for every β; with ``α = (K-1)/K``, β = 0.2 is below the bound
    ``β >= 1 + log_{1/(K-1)}(K/2)`` for ``K = 10`` (≈ 0.27) but above it for ``K = 100``
    (≈ 0.15), and the convex members (β < 1) are not (1/x)-convex.

    Legend entries of members that are *not lower-bounded by precision* end in
    ``"not ≥ g_P"``, those that are *not (1/x)-convex* in ``"not (1/x)-convex"``; both are
    decided exactly by :meth:`svbop.Utility.properties` for that panel's ``K``.

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
        One axes per ``K``; a new figure with ``len(Ks)`` panels side by side when omitted.

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
    if axes is None:
        fig = _new_figure(figsize=(6.0 * len(Ks), 5.6))
        axes = [fig.add_subplot(1, len(Ks), i + 1) for i in range(len(Ks))]
    else:
        axes = list(axes)
        if len(axes) != len(Ks):
            raise ValueError(
                f"plot_genreject_family: got {len(axes)} axes for {len(Ks)} values of K; give one per K"
            )
        fig = axes[0].figure
    styles = ["-", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]
    colours = [f"C{i}" for i in range(10)]
    for K, ax in zip(Ks, axes):
        K = int(K)
        a_texts = [_bound_alpha(K), "1"] if alphas is None else [_number_text(a) for a in alphas]
        s = np.arange(1, K + 1)
        for i, a in enumerate(a_texts):
            for j, b in enumerate(betas):
                u = utility(f"genreject:alpha={a},beta={_number_text(b)}", K=K)
                p = u.properties()
                alpha, beta = u.label.split("_")[1:]
                flags = [m for m, ok in (("not ≥ $g_P$", p.lower_bounded_by_precision),
                                         ("not (1/x)-convex", p.one_over_x_convex)) if not ok]
                label = f"$\\alpha = {alpha}, \\beta = {beta}$" + (f"  ({', '.join(flags)})" if flags else "")
                ax.plot(s, u.values(), linestyle=styles[i % len(styles)], color=colours[j % len(colours)],
                        label=label, linewidth=1.5)
        ax.plot(s, utility("precision", K=K).values(), "k--", label="$g_P(s) = 1/s$", linewidth=1.2)
        ax.set_xlim(1, K)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("set size $s = |\\hat{Y}|$")
        ax.set_ylabel("$g_{\\alpha,\\beta}(s) = 1 - \\alpha((s-1)/(K-1))^\\beta$")
        ax.set_title(f"Generalised reject option, K = {K}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small", frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    return fig


def figure_to_png(fig: "Figure", dpi: int = 120) -> bytes:
    """Render a figure to PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def save_figure(fig: "Figure", path: str | os.PathLike, dpi: int = 120) -> None:
    """Save a figure as PNG, atomically (temporary file beside ``path``, then rename).

    Raises
    ------
    ValueError
        ``path`` does not end in ``.png``.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"{path}: figures are written as PNG; use a .png file name")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
