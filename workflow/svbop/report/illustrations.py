"""The paper's illustrations (its Figure 2), chosen from test data by its criteria.

* Panel (a), MNIST: three test images of increasing uncertainty (Shannon entropy H of P(.|x)) with
  their SVBOP-Full sets for g_Fβ, β ∈ {5, 2, 1}; in the last one top-1 is wrong but the larger
  sets hold the true class (:func:`pick_by_entropy`, :func:`plot_entropy_panel`).
* Panels (b) and (c), VOC 2006 and DBpedia: test samples whose top-1 is wrong, with their top-5
  and the SVBOP-Full set for g_F1 in bold: the set holds the truth without the top-5's irrelevant
  low-probability classes (:func:`pick_top1_wrong`, :func:`plot_image_top`).

Rows are chosen deterministically (no randomness).  :func:`describe_rows` gives one JSON-able
record per chosen row; sets come from :func:`svbop.predict_sets` (exact SVBOP-Full on P).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..search import predict_sets
from ..utilities import utility
from .tables import utility_name

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = [
    "ILLUSTRATIONS",
    "describe_rows",
    "entropy_bits",
    "entropy_text",
    "illustration_dataset",
    "input_kind",
    "load_image",
    "pick_by_entropy",
    "pick_top1_wrong",
    "plot_entropy_panel",
    "plot_image_top",
]


#: The paper's three panels of Figure 2: name -> (panel, the inputs it shows, the paper's dataset).
ILLUSTRATIONS = {"entropy": ("a", "images", "MNIST"), "image_top": ("b", "images", "VOC 2006"),
                 "text_top": ("c", "texts", "DBpedia")}
_IMAGE_FORMATS = ("mnist_idx", "image_list", "voc", "image_folder")
_TEXT_FORMATS = ("csv_text", "fasta")
_IMAGE_BUILTINS = ("digits",)


def input_kind(dataset_config: Mapping[str, object]) -> str | None:
    """What a configured dataset's inputs are, read from its config: ``"images"``, ``"texts"``
    (text or sequences) or None (feature vectors: libsvm, npz, synthetic).

    Examples
    --------
    >>> input_kind({"source": {"builtin": "digits"}}), input_kind({"format": {"kind": "csv_text"}})
    ('images', 'texts')
    >>> input_kind({"format": {"kind": "libsvm"}}) is None
    True
    """
    source = dict(dataset_config.get("source") or {})
    if source.get("builtin") in _IMAGE_BUILTINS:
        return "images"
    kind = dict(dataset_config.get("format") or {}).get("kind")
    if kind in _IMAGE_FORMATS:
        return "images"
    if kind in _TEXT_FORMATS:
        return "texts"
    return None


def illustration_dataset(name: str, configured: str | None, run: Sequence[str],
                         datasets: Mapping[str, Mapping[str, object]]) -> str | None:
    """The dataset an illustration is drawn from.

    The configured one when it runs; otherwise the first dataset of ``run`` whose inputs are of
    the panel's kind (:data:`ILLUSTRATIONS`, :func:`input_kind`); None when no dataset fits.

    Parameters
    ----------
    name : {"entropy", "image_top", "text_top"}
        The illustration.
    configured : str or None
        ``report: illustrations: <name>: dataset``.
    run : sequence of str
        The datasets that run (without those whose files are missing).
    datasets : mapping
        ``config["datasets"]``.
    """
    if name not in ILLUSTRATIONS:
        raise ValueError(f"illustration {name!r}: unknown (known: {', '.join(ILLUSTRATIONS)})")
    if configured in run:
        return configured
    wanted = ILLUSTRATIONS[name][1]
    return next((d for d in run if input_kind(datasets.get(d) or {}) == wanted), None)


def entropy_text(h: float) -> str:
    """Entropy in bits as the report prints it: ``"< 0.01"`` near zero, else two decimals."""
    h = float(h)
    return "< 0.01" if h < 0.005 else f"{h:.2f}"


def _check_P(P, y) -> tuple[np.ndarray, np.ndarray]:
    P = np.asarray(P, dtype=float)
    y = np.asarray(y)
    if P.ndim != 2 or P.shape[0] != y.shape[0]:
        raise ValueError(f"P must be (n_samples, n_classes) with one label per row, got P {P.shape}, y {y.shape}")
    return P, y


def entropy_bits(P) -> np.ndarray:
    """Shannon entropy ``-Σ p log2 p`` of each row, in bits (``0 log 0 = 0``).

    The paper quotes H = 2.54 for a 10-class MNIST image, above ln 10 = 2.30: its H is in bits.
    """
    P = np.asarray(P, dtype=float)
    if P.ndim != 2:
        raise ValueError(f"P must be 2-D (n_samples, n_classes), got shape {P.shape}")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(P > 0, P * np.log2(np.where(P > 0, P, 1.0)), 0.0)
    return np.abs(-terms.sum(axis=1))


def _contains(sets, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.array([int(y[r]) in set(np.asarray(sets[i]).tolist()) for i, r in enumerate(rows)], dtype=bool)


def pick_by_entropy(P, y, n: int = 3, spec: str = "fbeta:beta=5") -> np.ndarray:
    """``n`` test rows of increasing entropy, as in the paper's MNIST panel.

    The last row is the most uncertain row whose top-1 is wrong but whose SVBOP-Full set for
    ``spec`` holds the true class (the paper's "number two"); when there is none, the row of
    highest entropy.  The others are correctly classified rows of lower entropy: the first the most
    confident one, the ``i``-th (``i = 1 .. n - 2``) the one closest to ``i / (n - 1)`` of the
    last row's entropy.  Ties go to the lower row index.

    Returns
    -------
    ndarray of int
        Row indices into ``P`` with strictly increasing entropy where the data allows (at most
        ``n``, fewer when ``P`` has fewer distinct rows).
    """
    P, y = _check_P(P, y)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    H = entropy_bits(P)
    top1 = P.argmax(axis=1)
    wrong = np.flatnonzero(top1 != y)
    last = None
    if wrong.size:
        order = wrong[np.lexsort((wrong, -H[wrong]))]
        hold = _contains(predict_sets(P[order], spec), order, y)
        if hold.any():
            last = int(order[np.argmax(hold)])
    if last is None:
        last = int(np.lexsort((np.arange(len(H)), -H))[0])
    right = np.flatnonzero((top1 == y) & (H < H[last]))
    if n == 1 or right.size == 0:
        return np.array([last], dtype=int)
    targets = [0.0] + [H[last] * i / (n - 1) for i in range(1, n - 1)]
    chosen: list[int] = []
    for t in targets:
        free = right[~np.isin(right, chosen)]
        if free.size == 0:
            break
        chosen.append(int(free[np.lexsort((free, np.abs(H[free] - t)))[0]]))
    chosen = sorted(set(chosen), key=lambda r: (H[r], r))
    return np.array([*chosen, last], dtype=int)


def pick_top1_wrong(P, y, n: int = 1, spec: str = "fbeta:beta=1", k: int = 5) -> np.ndarray:
    """Test rows whose top-1 is wrong while the truth is in the top-``k`` and the SVBOP-Full set.

    Rows whose SVBOP-Full set is smaller than ``k`` come first (the top-k then shows irrelevant
    classes: the paper's point), then by decreasing entropy, then by row index.

    Returns
    -------
    ndarray of int
        Up to ``n`` row indices; empty when no row qualifies (e.g. a perfect classifier).
    """
    P, y = _check_P(P, y)
    if n < 1 or k < 1:
        raise ValueError(f"n and k must be >= 1, got n={n}, k={k}")
    top = np.argsort(-P, axis=1, kind="stable")[:, :k]
    rows = np.flatnonzero((top[:, 0] != y) & (top == y[:, None]).any(axis=1))
    if rows.size == 0:
        return np.zeros(0, dtype=int)
    sets = predict_sets(P[rows], spec)
    hold = _contains(sets, rows, y)
    sizes = np.array([len(s) for s in sets])
    rows, sizes = rows[hold], sizes[hold]
    H = entropy_bits(P[rows])
    order = np.lexsort((rows, -H, sizes >= k))
    return rows[order][:n].astype(int)


def describe_rows(
    P,
    y,
    rows: Sequence[int],
    class_names: Sequence[str],
    specs: Sequence[str],
    k: int = 5,
    texts: Mapping[int, str] | Sequence[str] | None = None,
    text_chars: int = 300,
) -> list[dict[str, object]]:
    """One JSON-able record per chosen row.

    Returns
    -------
    list of dict
        Keys ``row``, ``truth`` (class name), ``entropy_bits``, ``top1_correct``, ``text``
        (``texts[row]`` cut to ``text_chars`` with "…", or None), ``sets`` (utility label -> class
        names of the SVBOP-Full set in decreasing probability) and ``top`` (the top-``k`` classes:
        ``name``, ``prob``, ``truth``, ``in_full``: label -> bool).
    """
    P, y = _check_P(P, y)
    rows = np.asarray(rows, dtype=int)
    names = [str(c) for c in class_names]
    if len(names) != P.shape[1]:
        raise ValueError(f"class_names: {len(names)} names for {P.shape[1]} classes")
    labels = [utility(s).label for s in specs]
    sets = {lab: predict_sets(P[rows], spec) for lab, spec in zip(labels, specs)} if rows.size else {}
    H = entropy_bits(P[rows]) if rows.size else np.zeros(0)
    out = []
    for i, r in enumerate(rows):
        p = P[r] / P[r].sum()
        order = np.argsort(-p, kind="stable")[:k]
        members = {lab: [int(c) for c in np.asarray(sets[lab][i])] for lab in labels}
        text = None
        if texts is not None:
            text = str(texts[int(r)])
            if len(text) > text_chars:
                text = text[:text_chars].rstrip() + "…"
        out.append({
            "row": int(r),
            "truth": names[int(y[r])],
            "entropy_bits": float(H[i]),
            "top1_correct": bool(order[0] == y[r]),
            "text": text,
            "sets": {lab: [names[c] for c in members[lab]] for lab in labels},
            "top": [{"name": names[int(c)], "prob": float(p[c]), "truth": bool(c == y[r]),
                     "in_full": {lab: int(c) in members[lab] for lab in labels}} for c in order],
        })
    return out


def load_image(path: str | os.PathLike, size: int | None = None) -> np.ndarray:
    """An image file as an RGB ``uint8`` array (longest side scaled to ``size`` when given)."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            if size is not None:
                im.thumbnail((size, size))
            return np.asarray(im)
    except (OSError, UnidentifiedImageError) as exc:
        raise ValueError(f"{path}: cannot read the image ({exc})") from None


def _as_image(image) -> np.ndarray:
    a = np.asarray(image)
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (3, 4)):
        raise ValueError(f"an image must be H x W (grey) or H x W x 3/4 (colour), got shape {a.shape}")
    return a


def _set_parts(names: Sequence[str], truth: str, bold: Sequence[bool] | None = None) -> list[tuple[str, dict]]:
    """``{8, 3}`` as pieces for :func:`svbop.report.figures.literal_row`: every class name as
    written (never mathtext), the truth underlined, members flagged in ``bold`` in bold."""
    parts: list[tuple[str, dict]] = [("{", {})]
    for i, name in enumerate(names):
        if i:
            parts.append((", ", {}))
        parts.append((str(name), {"underline": str(name) == truth, "bold": bool(bold[i]) if bold is not None else False}))
    parts.append(("}", {}))
    return parts


def _row_title(label: str) -> str:
    family, *rest = label.split("_")
    return f"β = {rest[0]}" if family == "fbeta" and rest else utility_name(label).replace("_{", " ").rstrip("}")


def _h_text(h: float) -> str:
    text = entropy_text(h)
    return f"H {text}" if text.startswith("<") else f"H = {text}"


def plot_entropy_panel(images: Sequence, records: Sequence[Mapping[str, object]], labels: Sequence[str]) -> "Figure":
    """The paper's MNIST table as a figure: images on top, one row of sets per utility, then H.

    The true class is underlined in each set; class names are drawn as written (no mathtext).
    """
    from .figures import _new_figure, literal_row

    if len(images) != len(records) or not images:
        raise ValueError(f"one record per image needed, got {len(images)} images and {len(records)} records")
    labels = list(labels)
    n = len(images)
    fig = _new_figure(figsize=(2.2 * n + 1.2, 1.9 + 0.45 * (len(labels) + 1)))
    grid = fig.add_gridspec(2, n + 1, height_ratios=[1.6, 0.45 * (len(labels) + 1)], width_ratios=[0.6] + [1] * n)
    for j, (img, rec) in enumerate(zip(images, records)):
        ax = fig.add_subplot(grid[0, j + 1])
        a = _as_image(img)
        ax.imshow(a, cmap="gray" if a.ndim == 2 else None)
        ax.set_axis_off()
    ax = fig.add_subplot(grid[1, :])
    ax.set_axis_off()
    rows = len(labels) + 1
    for i, lab in enumerate(labels):
        yy = 1 - (i + 0.5) / rows
        ax.text(0.5 / (n + 0.6) * 0.6, yy, _row_title(lab), ha="center", va="center", fontsize=10, transform=ax.transAxes)
        for j, rec in enumerate(records):
            literal_row(ax, (0.6 + j + 0.5) / (n + 0.6), yy, _set_parts(rec["sets"][lab], str(rec["truth"])),
                        fontsize=10)
    for j, rec in enumerate(records):
        ax.text((0.6 + j + 0.5) / (n + 0.6), 0.5 / rows, _h_text(float(rec["entropy_bits"])), ha="center",
                va="center", fontsize=10, transform=ax.transAxes)
    return fig


def plot_image_top(image, record: Mapping[str, object], label: str) -> "Figure":
    """The VOC panel: the image, its top-k below, SVBOP-Full members (for ``label``) in bold, the
    true class underlined; class names are drawn as written (no mathtext)."""
    from .figures import _new_figure, literal_row

    a = _as_image(image)
    fig = _new_figure(figsize=(4.6, 4.6))
    grid = fig.add_gridspec(2, 1, height_ratios=[4, 1])
    ax = fig.add_subplot(grid[0])
    ax.imshow(a, cmap="gray" if a.ndim == 2 else None)
    ax.set_axis_off()
    ax = fig.add_subplot(grid[1])
    ax.set_axis_off()
    top = list(record["top"])
    truth = next((str(t["name"]) for t in top if t["truth"]), None)
    parts = _set_parts([str(t["name"]) for t in top], truth, bold=[bool(t["in_full"][label]) for t in top])
    literal_row(ax, 0.5, 0.65, [(f"top-{len(top)}: ", {}), *parts], fontsize=10)
    ax.text(0.5, 0.2, f"bold: SVBOP-Full set for {_row_title(label)}; underlined: truth", ha="center", va="center",
            fontsize=10, color="#555", transform=ax.transAxes)
    return fig
