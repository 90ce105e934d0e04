"""The HTML report: one self-contained file (inline CSS, figures as base64 PNG data URIs).

The page is rendered with jinja2 (autoescape on) from ``report/templates/report.html.j2`` at the
repository's top level; ``build_report(..., template=...)`` overrides it.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import numbers
import os
import platform
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path

import pandas as pd
from markupsafe import Markup, escape

from ..io import atomic_path
from ..utilities import utility
from .tables import (
    _check_summary,
    best_mask,
    dataset_label,
    read_metrics,
    read_summaries,
    table1,
    table3,
    utility_label,
    utility_name,
)

__all__ = ["DEFAULT_TEMPLATE", "build_report", "environment_versions"]

#: The template shipped with the repository (``<repo>/report/templates/report.html.j2``).
DEFAULT_TEMPLATE = Path(__file__).resolve().parents[3] / "report" / "templates" / "report.html.j2"

#: Distributions reported by :func:`environment_versions`: shown name -> distribution names tried.
_PACKAGES = {
    "numpy": ("numpy",),
    "scipy": ("scipy",),
    "scikit-learn": ("scikit-learn",),
    "torch": ("torch",),
    "liblinear": ("liblinear-official", "liblinear"),
    "snakemake": ("snakemake",),
    "svbop": ("svbop",),
}

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SUB = re.compile(r"_\{([^}]*)\}")

_UTILITIES_CAPTION = (
    "The set-based utilities g(s) of the evaluation as a function of the set size s (the paper's "
    "Figure \"g\", left panel, drawn for K = 100 classes). A predicted set Ŷ earns g(|Ŷ|) when it "
    "contains the true class and 0 otherwise."
)


def environment_versions() -> dict[str, str]:
    """Versions of Python and of the packages the pipeline uses.

    Returns
    -------
    dict of str to str
        ``python``, ``numpy``, ``scipy``, ``scikit-learn``, ``torch``, ``liblinear``,
        ``snakemake``, ``svbop``; ``"not installed"`` for a package that is not.
    """
    out = {"python": platform.python_version()}
    for name, dists in _PACKAGES.items():
        out[name] = "not installed"
        for dist in dists:
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def _html_name(text: str) -> Markup:
    """Escape a display name and turn its ``_{...}`` subscripts into ``<sub>``."""
    return Markup(_SUB.sub(r"<sub>\1</sub>", str(escape(text))))


def _png_bytes(name: str, source: object) -> bytes:
    if isinstance(source, (bytes, bytearray)):
        data, where = bytes(source), f"figure {name!r}"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"{path}: no such file (figure {name!r})")
        data, where = path.read_bytes(), str(path)
    elif hasattr(source, "savefig"):
        from .figures import figure_to_png

        data, where = figure_to_png(source), f"figure {name!r}"
    else:
        raise ValueError(f"figure {name!r}: expected a PNG path, PNG bytes or a matplotlib Figure, got {type(source).__name__}")
    if not data.startswith(_PNG_SIGNATURE):
        raise ValueError(f"{where}: not a PNG image")
    return data


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _plain(obj: object) -> object:
    """Config -> plain JSON types (tuples, paths, numpy scalars become lists / str / numbers)."""
    return json.loads(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def _config_text(config: Mapping[str, object]) -> str:
    plain = _plain(dict(config))
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML comes with snakemake
        return json.dumps(plain, indent=2)
    return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=False)


def _fmt(value: object, decimals: int = 2) -> str:
    """Numbers as the tables show them: integers as is, reals with ``decimals``, NaN as a dash."""
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, numbers.Real) and value != value):
        return "–"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    return f"{float(value):.{decimals}f}"


def _format_created(created: object) -> str:
    if created is None:
        created = _dt.datetime.now(_dt.timezone.utc)
    if isinstance(created, _dt.datetime):
        return created.strftime("%Y-%m-%d %H:%M %Z").strip()
    return str(created)


def _resolve_template(template: str | os.PathLike | None) -> Path:
    candidates = [Path(template)] if template is not None else [DEFAULT_TEMPLATE, Path("report/templates/report.html.j2")]
    for path in candidates:
        if path.is_file():
            return path
    raise ValueError(
        f"{candidates[0]}: report template not found; pass template= the path of report.html.j2"
    )


def _context_table3(metrics: pd.DataFrame, dataset: str, labels: list[str]) -> dict[str, object]:
    t = table3(metrics, dataset, labels)
    best = best_mask(t)
    util_cols = t.attrs["utility_columns"]
    header = [{"name": _html_name(c), "label": lab, "utility": True} for c, lab in zip(util_cols, labels)]
    header += [{"name": c, "label": c, "utility": False} for c in ("recall %", "mean set size")]
    rows = []
    for i, method in enumerate(t.index):
        cells = [
            {"text": _fmt(t.iloc[i][c]), "best": bool(best.iloc[i][c])} for c in t.columns
        ]
        rows.append({"name": _html_name(method), "key": "/".join(map(str, t.attrs["keys"][i])), "cells": cells})
    return {"header": header, "rows": rows}


def build_report(
    path: str | os.PathLike,
    *,
    summaries: Iterable[Mapping[str, object] | str | os.PathLike],
    metrics: pd.DataFrame | str | os.PathLike | Iterable[str | os.PathLike],
    figures: Mapping[str, object] | None,
    config: Mapping[str, object],
    utilities: Sequence[str],
    title: str = "Efficient set-valued prediction in multi-class classification: reproduction report",
    created: _dt.datetime | str | None = None,
    versions: Mapping[str, str] | None = None,
    template: str | os.PathLike | None = None,
) -> Path:
    """Render the report into one self-contained HTML file.

    Parameters
    ----------
    path : path
        Output ``.html``; written atomically.
    summaries : iterable of dict or path
        Per-dataset summaries, or paths of ``summary.json`` files (order kept).
    metrics : DataFrame, path or iterable of paths
        The wide metrics table (:func:`~svbop.report.read_metrics`) or the ``metrics.tsv`` files.
    figures : mapping of str to (path, bytes or Figure), or None
        PNG figures to embed.  ``"utilities"`` is the g(s) figure of the "Utilities" section (drawn
        from ``utilities`` at K=100 when absent); any other entry is shown under "Further
        figures" with its key as caption.
    config : mapping
        The configuration actually used (shown as YAML).
    utilities : sequence of str
        Spec strings of the evaluation utilities, in the configured order (Table 3's columns).
    title : str
        Page title.
    created : datetime or str, optional
        Creation time shown in the header; default: now (UTC).
    versions : mapping of str to str, optional
        Software versions; default: :func:`environment_versions`.
    template : path, optional
        Jinja2 template; default: ``report/templates/report.html.j2`` of the repository.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        Bad summaries / metrics (the message names the file and key or column), a figure that is
        not a PNG, an unknown utility spec, or a missing template.
    """
    import jinja2

    summaries = [
        read_summaries(s)[0] if isinstance(s, (str, os.PathLike)) else _check_summary(s) for s in summaries
    ]
    if not isinstance(metrics, pd.DataFrame):
        metrics = read_metrics(metrics, utilities)
    specs = [utility(spec).spec for spec in utilities]
    labels = [utility_label(spec) for spec in specs]
    versions = dict(environment_versions() if versions is None else versions)
    figures = dict(figures or {})
    if "utilities" not in figures:
        from .figures import plot_utilities

        figures["utilities"] = plot_utilities(specs, K=100)
    images = {name: _data_uri(_png_bytes(name, src)) for name, src in figures.items()}

    by_id = {str(s["dataset"]): s for s in summaries}
    dataset_ids = list(by_id) + [d for d in dict.fromkeys(metrics["dataset"].astype(str)) if d not in by_id]

    def info(d: str) -> dict[str, object]:
        s = by_id.get(d, {"dataset": d, "title": d, "synthetic": False})
        return {"id": d, "label": dataset_label(s), "synthetic": bool(s.get("synthetic")), "summary": s}

    datasets = [info(d) for d in dataset_ids]
    Ks = sorted({int(s["K"]) for s in summaries})
    convexity = []
    for spec in specs:
        u = utility(spec)
        convexity.append(
            {
                "name": _html_name(utility_name(spec)),
                "spec": spec,
                "label": u.label,
                "title": u.title,
                "formula": u.formula,
                "convex": [utility(spec, K).properties().one_over_x_convex for K in Ks],
            }
        )
    k_datasets = {K: [dataset_label(s) for s in summaries if int(s["K"]) == K] for K in Ks}
    props100 = []
    for spec in specs:
        u = utility(spec, K=100)
        p = u.properties()
        props100.append(
            {"name": _html_name(utility_name(spec)), "spec": spec, "title": u.title, "formula": u.formula,
             "g1": _fmt(float(u.values()[0]), 3), "gK": _fmt(float(u.values()[-1]), 3), **p.as_dict()}
        )

    t1 = table1(summaries)
    predictions = []
    present = set(metrics["dataset"].astype(str))
    for d in datasets:
        entry = dict(d)
        entry["table"] = _context_table3(metrics, d["id"], labels) if d["id"] in present else None
        predictions.append(entry)

    context = {
        "title": title,
        "created": _format_created(created),
        "svbop_version": versions.get("svbop", "unknown"),
        "datasets": datasets,
        "Ks": Ks,
        "k_datasets": k_datasets,
        "utilities": convexity,
        "utilities_K100": props100,
        "config_yaml": _config_text(config),
        "versions": versions,
        "table1": {
            "columns": list(t1.columns),
            "rows": [
                {"synthetic": bool(s.get("synthetic")), "cells": [_fmt(v) for v in row]}
                for s, row in zip(summaries, t1.itertuples(index=False))
            ],
        },
        "any_synthetic": any(bool(s.get("synthetic")) for s in summaries),
        "predictions": predictions,
        "utilities_figure": images.pop("utilities"),
        "utilities_caption": _UTILITIES_CAPTION,
        "other_figures": [{"name": k, "src": v} for k, v in images.items()],
        "n_methods": int(metrics.groupby(["method", "param"]).ngroups),
    }
    template_path = _resolve_template(template)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_path.parent)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    html = env.get_template(template_path.name).render(**context)
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return path
