"""Figures of the report (matplotlib, Agg; no pyplot global state).

``matplotlib`` is imported here only, so the rest of :mod:`svbop.report` works without it.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..io import atomic_path
from ..utilities import STANDARD_UTILITIES, utility
from .tables import utility_name

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["figure_to_png", "plot_utilities", "save_figure"]

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
    if ax is None:
        fig = _new_figure()
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    s = np.arange(1, K + 1)
    for u in us:
        ax.plot(s, u.values(), label=f"{_tex(utility_name(u.spec))}  {u.title}", linewidth=1.6)
    ax.set_xscale("log")
    ax.set_xlim(1, K)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("set size $s = |\\hat{Y}|$ (log scale)")
    ax.set_ylabel("$g(s)$")
    ax.set_title(f"Set-based utilities, K = {K}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", frameon=False)
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
