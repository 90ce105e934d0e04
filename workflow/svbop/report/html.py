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
from .compare import ALGORITHM_NAMES, check_claims, table1_vs_paper, table3_vs_paper, table4_vs_paper, table5_vs_paper
from .status import dataset_status, paper_link
from .tables import (
    METRICS_COLUMNS,
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


def _context_table3(
    metrics: pd.DataFrame, dataset: str, labels: list[str], paired: pd.DataFrame | None = None
) -> dict[str, object]:
    """Table 3 of one dataset; with ``paired`` (its rows of :func:`table3_vs_paper`), each utility
    cell is followed by the paper's value and the difference, the paper's best underlined."""
    t = table3(metrics, dataset, labels)
    best = best_mask(t)
    util_cols = t.attrs["utility_columns"]
    paper = {}
    if paired is not None and paired["paper"].notna().any():
        paper = {(m, str(p), u): (v, d) for m, p, u, v, d in paired[["method", "param", "eval_utility", "paper", "diff"]].itertuples(index=False)}
    paper_best = {}
    for lab in labels:
        values = [v for (m, p, u), (v, _) in paper.items() if u == lab and v == v]
        paper_best[lab] = round(max(values), 2) if values else None
    header = []
    for c, lab in zip(util_cols, labels):
        header.append({"name": _html_name(c), "label": lab, "utility": True, "paper": False})
        if paper:
            header.append({"name": "paper (Δ)", "label": lab, "utility": False, "paper": True})
    header += [{"name": c, "label": c, "utility": False, "paper": False} for c in ("recall %", "mean set size")]
    label_of = dict(zip(util_cols, labels))
    rows = []
    for i, method in enumerate(t.index):
        key = t.attrs["keys"][i]
        cells = []
        for c in t.columns:
            cells.append({"text": _fmt(t.iloc[i][c]), "best": bool(best.iloc[i][c]), "paper": False})
            lab = label_of.get(c)
            if paper and lab is not None:
                v, d = paper.get((key[0], str(key[1]), lab), (float("nan"), float("nan")))
                known = v == v
                cells.append({
                    "text": f"{v:.2f} ({d:+.2f})" if known else "–", "best": False, "paper": True,
                    "paper_best": known and paper_best[lab] is not None and round(v, 2) == paper_best[lab],
                    "far": known and abs(d) >= 5,
                })
        rows.append({"name": _html_name(method), "key": "/".join(map(str, key)), "cells": cells})
    return {"header": header, "rows": rows}


def _context_table4(t4: pd.DataFrame) -> list[dict[str, object]]:
    """Table 4 rows grouped by dataset: per algorithm, the measures of each utility, paper beside."""
    out = []
    for dataset, df in t4.groupby("dataset", sort=False):
        if set(df["algorithm"]) <= {"Full", "Full_svbop"}:  # as in the paper: only datasets with HSG or HF
            continue
        utilities = list(dict.fromkeys(df["utility"]))
        algos = []
        for algorithm, rows in df.groupby("algorithm", sort=False):
            first = rows.iloc[0]
            nan = float("nan")
            cells = [(first["t_train_s"], first["t_train_s_paper"], 1), (first["top1_pct"], first["top1_pct_paper"], 2),
                     (first.get("index_recall_pct", nan), nan, 1)]
            for u in utilities:
                r = rows[rows["utility"] == u]
                if r.empty:
                    cells += [(nan, nan, 2)] * 6
                    continue
                r = r.iloc[0]
                cells += [(r["utility_pct"], r["utility_pct_paper"], 2), (r["recall_pct"], r["recall_pct_paper"], 2),
                          (r["set_size"], r["set_size_paper"], 2), (r["t_test_ms"], r["t_test_ms_paper"], 3),
                          (r["speedup_vs_full_naive"], r["speedup_vs_full_paper"], 2), (r["speedup_vs_full"], nan, 2)]
            algos.append({"name": _html_name(ALGORITHM_NAMES.get(algorithm, algorithm).replace("_p", "_{p}")
                                             .replace("_c", "_{c}")),
                          "key": algorithm,
                          "cells": [{"ours": _fmt(o, d), "paper": _fmt(p, d) if p == p else ""} for o, p, d in cells]})
        first = df.iloc[0]
        out.append({"id": dataset, "paper": first["paper_dataset"], "relation": first["relation"],
                    "utilities": [_html_name(utility_name(u)) for u in utilities], "rows": algos})
    return out


def _context_illustrations(illustrations: Mapping[str, Mapping[str, object]] | None, config: Mapping[str, object],
                           status: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Each configured illustration: its records and figure, or why it was not drawn."""
    configured = dict((config.get("report") or {}).get("illustrations") or {})
    illustrations = dict(illustrations or {})
    by_dataset = {r["dataset"]: r for r in status.to_dict("records")}
    out = {}
    for name in dict.fromkeys([*configured, *illustrations]):
        cfg = dict(configured.get(name) or {})
        entry = {"name": name, "dataset": cfg.get("dataset"), "status": "not run", "reason": "", "records": [],
                 "figure": None, "labels": []}
        given = illustrations.get(name)
        if given:
            data = given.get("records")
            if isinstance(data, (str, os.PathLike)):
                data = json.loads(Path(data).read_text())
            data = dict(data or {})
            entry.update(status=data.get("status", "ok"), reason=data.get("reason", ""), dataset=data.get("dataset", entry["dataset"]),
                         records=data.get("records", []), labels=data.get("utilities", []))
            if given.get("figure") is not None and entry["status"] == "ok":
                entry["figure"] = _data_uri(_png_bytes(f"illustration {name}", given["figure"]))
        else:
            d = entry["dataset"]
            row = by_dataset.get(d)
            if not d:
                entry["reason"] = "no dataset configured (report: illustrations: " + name + ": dataset)"
            elif row is None:
                entry["reason"] = f"dataset {d!r} is not in the config's datasets"
            else:
                entry["reason"] = f"dataset {d!r}: {row['status']}" + (f" ({row['detail']})" if row["detail"] else "")
        entry["label_names"] = [_html_name(utility_name(lab)) for lab in entry["labels"]]
        out[name] = entry
    return out


def build_report(
    path: str | os.PathLike,
    *,
    summaries: Iterable[Mapping[str, object] | str | os.PathLike],
    metrics: pd.DataFrame | str | os.PathLike | Iterable[str | os.PathLike] | None,
    figures: Mapping[str, object] | None,
    config: Mapping[str, object],
    utilities: Sequence[str],
    title: str = "Efficient set-valued prediction in multi-class classification: reproduction report",
    created: _dt.datetime | str | None = None,
    versions: Mapping[str, str] | None = None,
    template: str | os.PathLike | None = None,
    not_run: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    failed: Mapping[str, str] | None = None,
    train_seconds: Mapping[str, Mapping[str, float]] | None = None,
    illustrations: Mapping[str, Mapping[str, object]] | None = None,
    downloads: Mapping[str, str] | None = None,
) -> Path:
    """Render the report into one self-contained HTML file.

    Parameters
    ----------
    path : path
        Output ``.html``; written atomically.
    summaries : iterable of dict or path
        Per-dataset summaries, or paths of ``summary.json`` files (order kept).
    metrics : DataFrame, path or iterable of paths
        The wide metrics table (:func:`~svbop.report.read_metrics`) or the ``metrics.tsv`` files;
        None when no dataset was run.
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
    not_run : mapping, optional
        Datasets of ``config["run"]`` left out for missing files: name ->
        :func:`~svbop.report.status.missing_inputs` (shown in the status table).
    failed : mapping, optional
        Datasets of ``config["run"]`` that failed or did not finish: name -> reason (one line),
        shown as ``failed`` in the status table; the report covers the other datasets (the
        pipeline's partial report after a failed run).
    train_seconds : mapping, optional
        dataset -> SVBOP method -> training seconds, for Table 4
        (:func:`~svbop.report.compare.read_train_seconds`); empty cells when omitted.
    illustrations : mapping, optional
        name (``entropy``, ``image_top``, ``text_top``) -> ``{"records": JSON path or dict,
        "figure": PNG or None}`` as written by the pipeline's rule ``illustrate``; configured
        illustrations without an entry are shown as not run, with the reason.
    downloads : mapping, optional
        Link text -> relative URL of the exported tables (CSV, LaTeX) next to the report.

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
    if metrics is None:  # nothing was run: every table is empty, the status says why
        metrics = pd.DataFrame(columns=[*METRICS_COLUMNS, *(f"{utility(u).label}_pct" for u in utilities)])
    elif not isinstance(metrics, pd.DataFrame):
        metrics = read_metrics(metrics, utilities)
    specs = [utility(spec).spec for spec in utilities]
    labels = [utility_label(spec) for spec in specs]
    versions = dict(environment_versions() if versions is None else versions)
    figures = dict(figures or {})
    if "utilities" not in figures:
        from .figures import plot_utilities

        figures["utilities"] = plot_utilities(specs, K=100)
    if "fbeta_family" not in figures:
        from .figures import plot_fbeta_family

        figures["fbeta_family"] = plot_fbeta_family(K=100)
    if "genreject_family" not in figures:
        from .figures import plot_genreject_family

        figures["genreject_family"] = plot_genreject_family()
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
    configured = dict(config.get("datasets") or {})
    run = [str(d) for d in (config.get("run") or [])]
    links = {name: paper_link(cfg) for name, cfg in configured.items()}
    paired = table3_vs_paper(metrics, links)
    predictions = []
    present = set(metrics["dataset"].astype(str))
    for d in datasets:
        paper, relation = links.get(d["id"], (None, ""))
        table = None
        if d["id"] in present:
            table = _context_table3(metrics, d["id"], labels, paired[paired["dataset"] == d["id"]])
        predictions.append({**d, "table": table, "paper": paper, "relation": relation})

    fbeta_figure, genreject_figure = images.pop("fbeta_family"), images.pop("genreject_family")
    status = dataset_status(configured, run, not_run, failed) if configured else dataset_status(
        {d: {"title": by_id[d].get("title", d)} for d in dataset_ids}, dataset_ids)
    t1p = table1_vs_paper(summaries, links)
    t1p_rows = []
    for r in t1p.to_dict("records"):
        cells = []
        for c in ("K", "D", "N_train", "N_test"):
            ours, theirs = r[c], r[f"{c}_paper"]
            cells.append({"ours": "–" if pd.isna(ours) else str(int(ours)), "paper": "" if pd.isna(theirs) else str(int(theirs)),
                          "differs": not pd.isna(ours) and not pd.isna(theirs) and int(ours) != int(theirs)})
        t1p_rows.append({"dataset": r["dataset"], "title": r["title"], "paper": r["paper_dataset"], "relation": r["relation"],
                         "run": bool(r["dataset"]), "cells": cells})
    t4 = table4_vs_paper(metrics, train_seconds or {}, links)
    t5 = table5_vs_paper(configured, [d for d in run if d in by_id], links) if configured else None
    t5_rows = []
    if t5 is not None:
        from .compare import TABLE5_KEYS

        for r in t5.to_dict("records"):
            t5_rows.append({"dataset": r["dataset"], "paper": r["paper_dataset"], "relation": r["relation"],
                            "cells": [{"ours": "–" if r[k] is None or r[k] != r[k] else f"{r[k]:g}",
                                       "paper": "" if r[f"{k}_paper"] is None or r[f"{k}_paper"] != r[f"{k}_paper"] else f"{r[f'{k}_paper']:g}"}
                                      for k in TABLE5_KEYS]})
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
        "status": status.to_dict("records"),
        "n_run": sum(1 for r in status.to_dict("records") if r["status"] == "run"),
        "n_failed": sum(1 for r in status.to_dict("records") if r["status"] == "failed"),
        "table1_paper": t1p_rows,
        "table4": _context_table4(t4),
        "table5": t5_rows,
        "table5_columns": ["C", "ε", "M", "efC", "k", "C", "ε", "l", "ε<sub>c</sub>"],
        "claims": check_claims(metrics, summaries, links=links),
        "illustrations": _context_illustrations(illustrations, config, status),
        "fbeta_figure": fbeta_figure,
        "genreject_figure": genreject_figure,
        "downloads": dict(downloads or {}),
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
