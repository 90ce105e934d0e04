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
from markupsafe import Markup

from .._resources import workflow_path
from ..io import atomic_path
from ..utilities import utility
from .compare import SMALL_TEST, check_claims, table2_vs_paper, table3_vs_paper, table4_vs_paper, table5_vs_paper
from .illustrations import ILLUSTRATIONS, entropy_text
from .paper import paper_datasets
from .names import PAPER_ITEMS, DisplayNames, algorithm_name, html_name, paper_caption, paper_ref
from .status import _file_groups, dataset_domain, dataset_status, paper_link, status_view
from .tables import (
    METRICS_COLUMNS,
    THETA_COLUMN,
    _check_summary,
    best_mask,
    dataset_label,
    read_metrics,
    read_summaries,
    table2,
    table3,
    utility_label,
    utility_name,
)

__all__ = ["DEFAULT_TEMPLATE", "build_report", "environment_versions"]

#: The template shipped with the repository (``<repo>/report/templates/report.html.j2``).
DEFAULT_TEMPLATE = workflow_path("report/templates/report.html.j2")

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

#: What each exported table holds, by file name without extension (the downloads list); files are
#: named by the paper's numbering of its tables.
DOWNLOADS = {
    "table2_datasets": "Table 2 (the datasets), as computed from the files run",
    "table2_vs_paper": "Table 2 (the datasets) beside the paper's",
    "table3_utilities": "Table 3, every cell in the long format of the paper's CSV",
    "table3_vs_paper": "Table 3 beside the paper's: each cell, the paper's value and the difference",
    "table4_vs_paper": "Table 4 (SVBOP-Full vs. SVBOP-HSG vs. SVBOP-HF) beside the paper's",
    "table5_vs_paper": "Table 5 (hyper-parameters) beside the paper's",
    "dataset_status": "the status of every dataset (the first section)",
    "claims": "the paper's claims checked (evidence names datasets, utilities and methods by their keys)",
    "beyond_every_set": "beyond the paper: every kind of set's utilities, coverage, worst-class coverage and size",
    "choose_sets": "which sets to use: per coverage level and utility, the best method and its runners-up",
    "class_coverage": "every method's coverage of each class, with its test and calibration rows",
}

#: What each table of the page about a model holds (its downloads), by file name without extension.
MODEL_DOWNLOADS = {
    "choose_sets": "which sets to use: per coverage level and utility, the choice, its runners-up and the methods "
                   "without a guarantee that reached the level on the test rows, each test coverage with its interval",
    "beyond_every_set": "every kind of set: its mean utilities, coverage, worst-class coverage and set sizes",
    "class_coverage": "every method's coverage of each class, with the class's test and calibration rows",
}

#: The packages the page about a model lists (what its sets were made with); those not installed are left out.
MODEL_PACKAGES = ("python", "numpy", "scipy", "scikit-learn", "snakemake", "svbop")


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


def _grid_text(grid: object) -> str:
    """``[0.01, 0.02, 0.05, 0.1, ..., 1.0]`` -> ``"0.01, 0.02, 0.05, 0.1, …, 1"`` (at most 10 values shown)."""
    try:
        values = [float(g) for g in grid]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return ""
    text = [f"{v:g}" for v in values]
    return ", ".join(text if len(text) <= 10 else [*text[:4], "…", *text[-4:]])


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
    # orange (>= 5 points off) only where the dataset is the paper's own: a stand-in is not expected to match
    same = paired is not None and bool((paired["relation"] == "same").any())
    if paired is not None and paired["paper"].notna().any():
        paper = {(m, str(p), u): (v, d) for m, p, u, v, d in paired[["method", "param", "eval_utility", "paper", "diff"]].itertuples(index=False)}
    paper_best = {}
    for lab in labels:
        values = [v for (m, p, u), (v, _) in paper.items() if u == lab and v == v]
        paper_best[lab] = round(max(values), 2) if values else None
    header = []
    for c, lab in zip(util_cols, labels):
        header.append({"name": html_name(c), "label": lab, "utility": True, "paper": False})
        if paper:
            header.append({"name": "paper (Δ)", "label": lab, "utility": False, "paper": True})
    header += [{"name": c, "label": c, "utility": False, "paper": False} for c in ("recall %", "mean set size", THETA_COLUMN)]
    label_of = dict(zip(util_cols, labels))
    rows = []
    edges = []
    for i, method in enumerate(t.index):
        key = t.attrs["keys"][i]
        cells = []
        for c in t.columns:
            if c == THETA_COLUMN:  # a threshold's tuned theta, marked at a binding edge of the grid
                theta, edge = t.iloc[i][c], t.attrs["theta_edge"][i]
                cells.append({"text": "–" if theta != theta else f"{theta:g}", "best": False, "paper": False,
                              "theta": True, "edge": edge})
                if edge:
                    edges.append({"method": html_name(method), "theta": f"{theta:g}", "edge": edge})
                continue
            cells.append({"text": _fmt(t.iloc[i][c]), "best": bool(best.iloc[i][c]), "paper": False, "theta": False})
            lab = label_of.get(c)
            if paper and lab is not None:
                v, d = paper.get((key[0], str(key[1]), lab), (float("nan"), float("nan")))
                known = v == v
                cells.append({
                    "text": f"{v:.2f} ({d:+.2f})" if known else "–", "best": False, "paper": True, "theta": False,
                    "paper_best": known and paper_best[lab] is not None and round(v, 2) == paper_best[lab],
                    "far": same and known and abs(d) >= 5,
                })
        rows.append({"name": html_name(method), "key": "/".join(map(str, key)), "cells": cells})
    return {"header": header, "rows": rows, "theta_edges": edges}


def _comparable(ran: Sequence[str], links: Mapping[str, tuple[str | None, str]], names: DisplayNames,
                synthetic: Mapping[str, bool]) -> dict[str, object]:
    """What this run can compare with the paper (the banner at the top of the page).

    Returns
    -------
    dict
        ``same``: ``{"title", "paper"}`` of the datasets run that are the paper's own (their numbers
        are compared with the paper's); ``stand_in``: those standing in for one (for reference
        only); ``outside``: titles of the others (no paper numbers); ``paper_not_run``: how many
        of the paper's ``n_paper`` datasets nothing of this run covers; ``any``: whether anything
        is compared; ``ran``: how many datasets ran.
    """
    same, stand_in, outside, covered = [], [], [], set()
    for d in ran:
        paper, relation = links.get(d, (None, ""))
        title = names.dataset(d) + (" (synthetic)" if synthetic.get(d) else "")
        if paper:
            covered.add(paper)
            (same if relation == "same" else stand_in).append({"title": title, "paper": paper})
        else:
            outside.append(title)
    return {"same": same, "stand_in": stand_in, "outside": outside, "any": bool(same or stand_in), "ran": len(ran),
            "n_paper": len(paper_datasets()), "paper_not_run": len([p for p in paper_datasets() if p not in covered])}


def _context_table4(t4: pd.DataFrame, names: DisplayNames) -> list[dict[str, object]]:
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
                          (r["set_size"], r["set_size_paper"], 2), (r["t_test_ms"], r["t_test_ms_paper"], 3, _spread(r)),
                          (r["speedup_vs_full_naive"], r["speedup_vs_full_paper"], 2), (r["speedup_vs_full"], nan, 2)]
            algos.append({"name": html_name(algorithm_name(algorithm)), "key": algorithm,
                          "cells": [{"ours": _fmt(c[0], c[2]), "paper": _fmt(c[1], c[2]) if c[1] == c[1] else "",
                                     "spread": c[3] if len(c) > 3 else ""} for c in cells]})
        first = df.iloc[0]
        features = first.get("t_features_s", float("nan"))
        out.append({"id": dataset, "title": names.dataset(dataset), "paper": first["paper_dataset"],
                    "relation": first["relation"], "features_seconds": "" if features != features else _fmt(features, 1),
                    "utilities": [html_name(utility_name(u)) for u in utilities], "rows": algos,
                    "timing": _timing_note(df)})
    return out


def _calibrated_text(text: str, paper: bool = True) -> str:
    """``"beta = 1.87"`` -> ``"β = 1.87"`` (the calibrated parameter's symbol); other texts as they are, but on
    a model's page (``paper=False``, svbop report) a method that could not be calibrated says what its command
    line can do instead of the library's arguments (``score='credal' with gamma=...``)."""
    for name, symbol in (("beta = ", "β = "), ("delta = ", "δ = ")):
        if text.startswith(name):
            return symbol + text[len(name):]
    if not paper and text.startswith("not reachable:"):
        if "too few for epsilon" in text:
            return ("not reachable: too few calibration rows for this ε (every class would be needed); give more "
                    "rows with --calibration, or a larger --epsilon")
        return ("not reachable at this ε: even the largest sets of this family hold the true class of too few "
                "calibration rows; a larger --epsilon (or a better calibrated model: --calibrate temperature) may "
                "reach it, and SVBOP-uFβ-coverage, beside it, always can")
    return text


def _context_beyond(beyond: object, figure: object, skipped: Mapping[str, Mapping[str, str]] | None,
                    labels: Sequence[str], names: DisplayNames, order: Sequence[str],
                    paper: bool = True) -> dict[str, object] | None:
    """The section "Beyond the paper": per dataset, one row per method (utilities, coverage, worst-class
    coverage, set sizes) and the reasons a kind of set was not run; its figure. None without ``beyond``."""
    if beyond is None:
        return None
    from .beyond import beyond_table, group_coverage_table, read_beyond, skipped_text

    frame = beyond if isinstance(beyond, pd.DataFrame) else read_beyond(beyond, labels)
    for lab in labels:
        if f"{lab}_pct" not in frame.columns:
            raise ValueError(f"beyond the paper: no column {lab}_pct (the utility {lab}) in the table")
    present = list(dict.fromkeys(frame["dataset"].astype(str)))
    datasets = [d for d in order if d in present] + [d for d in present if d not in order]
    skipped = {str(d): dict(v) for d, v in dict(skipped or {}).items()}
    out = []
    # methods.mondrian.by: the worst group's coverage of every method, one column per grouping
    group_cols = sorted(c for c in frame.columns if c.startswith("worst_group_") and c.endswith("_pct"))
    for d in datasets:
        t = beyond_table(frame, d, labels)
        for c in group_cols:
            if c not in t.columns:
                t[c] = float("nan")
        rows = []
        for r in t.to_dict("records"):
            target, cover = r["target_coverage_pct"], r["coverage_pct"]
            cells = [{"text": _fmt(r[f"{lab}_pct"]), "cls": "num"} for lab in labels]
            cells += [
                {"text": _fmt(cover), "cls": "num coverage" + (" below" if target == target and cover < target else "")},
                {"text": "" if target != target else _fmt(target), "cls": "num target"},
                {"text": _fmt(r["class_coverage_worst_pct"]), "cls": "num worst-class"},
                {"text": _fmt(r["covgap_pct"]), "cls": "num covgap"},
                {"text": _fmt(r["sscv_pct"]), "cls": "num sscv"},
                {"text": _fmt(r["wsc_pct"]), "cls": "num wsc"},
                {"text": _fmt(r["mean_size"]), "cls": "num size"},
                {"text": _fmt(r["singleton_pct"]), "cls": "num"},
                {"text": _fmt(r["empty_pct"]), "cls": "num"},
            ]
            cells += [{"text": _fmt(r[c]), "cls": "num worst-group"} for c in group_cols]
            cells += [{"text": _calibrated_text(r["calibrated"], paper), "cls": "text prose-cell"}]
            rows.append({"name": html_name(r["method"]), "key": r["key"], "family": r["family"], "cells": cells})
        groups = group_coverage_table(t)  # methods.mondrian.by: group_column - every group's coverage, by name
        if groups is not None:
            groups["methods"] = [html_name(m) for m in groups["methods"]]
            for g in groups["groups"]:
                g["cells"] = [{"text": _fmt(v), "cls": "num coverage" + (" below" if v < target else "")}
                              for v, target in zip(g["coverage"], groups["targets"])]
            groups["worst_cells"] = [{"text": _fmt(v), "cls": "num worst-group"} for v in groups["worst"]]
        out.append({"id": d, "title": names.dataset(d), "rows": rows, "groups": groups,
                     "skipped": [{"key": k, "text": line} for k, line in zip(skipped.get(d, {}), skipped_text(skipped.get(d, {})))]})
    if figure is None and len(frame):
        from .figures import plot_coverage_size

        figure = plot_coverage_size(frame, {d: names.dataset(d) for d in datasets}, paper=paper)
    header = [*(html_name(utility_name(lab)) + Markup(" %") for lab in labels), "coverage %", "guaranteed %",
              "worst class %", "CovGap %", "SSCV %", "WSC %", "mean set size", "singletons %", "empty %",
              *(f"worst group % (by {c[len('worst_group_'):-len('_pct')].replace('_', ' ')})" for c in group_cols),
              "calibrated"]
    return {"datasets": out, "header": header, "n_utilities": len(labels),
            "figure": _data_uri(_png_bytes("beyond the paper", figure)) if figure is not None else None}


def _context_model_page(specs: Sequence[str], summaries: Mapping[str, Mapping[str, object]], names: DisplayNames,
                        order: Sequence[str], config: Mapping[str, object], versions: Mapping[str, str],
                        downloads: Mapping[str, str]) -> dict[str, object]:
    """What the page about a model shows beside :func:`svbop.report.model.model_context`: the utilities in a
    practitioner's words (one figure at the models' K), the rows of each part, the configuration that made the
    page, the packages installed that made it, and its tables (:data:`MODEL_DOWNLOADS`)."""
    from .model import data_context, model_config, utilities_context

    Ks = [int(s["K"]) for s in summaries.values() if s.get("K") is not None]
    grouped: dict[str, dict[str, object]] = {}
    for text, href in downloads.items():
        stem = Path(text).stem
        what = MODEL_DOWNLOADS.get(stem) or next((v for k, v in MODEL_DOWNLOADS.items() if stem.startswith(k + "_")),
                                                 None)
        if what is None:  # a table of the paper's page: not this page's
            continue
        grouped.setdefault(stem, {"stem": stem, "what": what, "files": []})["files"].append({"text": text, "href": href})
    def rank(stem: str) -> tuple[int, str]:
        return next((i for i, k in enumerate(MODEL_DOWNLOADS) if stem == k or stem.startswith(k + "_")),
                    len(MODEL_DOWNLOADS)), stem

    files = sorted(grouped.values(), key=lambda d: rank(d["stem"]))
    return {
        "utilities": utilities_context(specs, max(Ks) if Ks else 100),
        "data": data_context(summaries, names, order),
        "config_yaml": _config_text(model_config(config)),
        "versions": {k: v for k, v in versions.items() if k in MODEL_PACKAGES and v != "not installed"},
        "downloads": files,
    }


def _read_calibration(source: object) -> dict[str, object]:
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable calibration record ({exc})") from None
    if not isinstance(record, dict) or "temperature" not in record or "test" not in record:
        raise ValueError(f"{path}: not a calibration record (no temperature or test key)")
    return record


def _uncalibrated_costs(frame: pd.DataFrame | None, dataset: str, labels: Sequence[str]) -> list[dict[str, str]]:
    """What uncalibrated probabilities cost on a dataset's test rows: each utility under which SVBOP-Full's set of
    another utility scores more than SVBOP-Full's own (Bayes-optimal only for calibrated probabilities)."""
    if frame is None or not len(frame):
        return []
    rows = frame[(frame["dataset"].astype(str) == str(dataset)) & (frame["method"] == "svbop_full")]
    by_param = {str(p): r for p, r in zip(rows["param"], rows.to_dict("records"))}
    out = []
    for lab in labels:
        own = by_param.get(str(lab))
        if own is None or f"{lab}_pct" not in own:
            continue
        others = [(float(r[f"{lab}_pct"]), p) for p, r in by_param.items() if p != str(lab)]
        if others and max(others)[0] > float(own[f"{lab}_pct"]):
            value, p = max(others)
            out.append({"utility": html_name(utility_name(lab)), "by": html_name(f"SVBOP-Full-{utility_name(p)}"),
                        "full": html_name(f"SVBOP-Full-{utility_name(lab)}"), "own": _fmt(own[f"{lab}_pct"]),
                        "value": _fmt(value)})
    return out


def _context_calibration(calibration: Mapping[str, object] | None, names: DisplayNames,
                         order: Sequence[str], frame: pd.DataFrame | None = None,
                         labels: Sequence[str] = ()) -> dict[str, object] | None:
    """The section "Calibration of the probabilities": per dataset, the temperature, ECE and NLL before
    and after (validation and test rows), where its rows came from (a model's outputs), and what
    calibration changed in SVBOP-Full's sets; one reliability figure. None without records.  Not calibrated
    (``calibrate: none``): the ECE as given and what it costs on the test rows (``frame``, every kind of set:
    a utility under which a set built for another utility beats SVBOP-Full's, ``costs``)."""
    if not calibration:
        return None
    from .figures import plot_reliability

    records = {str(d): _read_calibration(src) for d, src in calibration.items()}
    keys = [d for d in order if d in records] + [d for d in records if d not in order]
    out = []
    for d in keys:
        r = records[d]
        T = float(r["temperature"])
        metrics = []
        for part in ("validation", "test"):
            m = r.get(part)
            if not m:
                continue
            b, a = m["before"], m["after"]
            metrics.append({"part": part, "rows": int((r.get("rows") or {}).get(part, 0)),
                            "nll": (_fmt(b["nll"], 4), _fmt(a["nll"], 4)),
                            "ece": (_fmt(100 * b["ece"], 2), _fmt(100 * a["ece"], 2)),
                            "top1": _fmt(a["top1_pct"], 2)})
        sets = [{"name": html_name(utility_name(e["utility"])),
                 "u": (_fmt(e["before"]["utility_pct"]), _fmt(e["after"]["utility_pct"])),
                 "size": (_fmt(e["before"]["mean_size"], 3), _fmt(e["after"]["mean_size"], 3))}
                for e in r.get("sets") or []]
        out.append({"id": d, "title": names.dataset(d), "method": r.get("method", "none"), "temperature": f"{T:.4g}",
                    "at_bound": bool(r.get("at_bound")), "outputs": r.get("outputs", ""),
                    "model_outputs": bool(r.get("model_outputs")), "origin": dict(r.get("origin") or {}),
                    "metrics": metrics, "sets": sets,
                    "calibrated": T != 1.0 or r.get("method") == "venn_abers", "not_fitted": r.get("not_fitted") or "",
                    "test_ece": _fmt(100 * r["test"]["before"]["ece"], 2) if r.get("test") else "",
                    "costs": _uncalibrated_costs(frame, d, labels) if r.get("method", "none") == "none" else []})
    figure = plot_reliability(records, {d: names.dataset(d) for d in keys})
    return {"datasets": out, "figure": _data_uri(_png_bytes("reliability", figure)), "bins": records[keys[0]].get("ece_bins", 15)}


def _context_scaling(scaling: str | os.PathLike | Mapping[str, object] | None) -> dict[str, object] | None:
    """The scaling figure (svbop's own, beyond the paper) and its one-line summary, or None."""
    if scaling is None:
        return None
    from .figures import figure_to_png, plot_scaling, read_scaling

    data = dict(scaling) if isinstance(scaling, Mapping) else read_scaling(scaling)
    m = data["meta"]
    Ks = [int(r["K"]) for r in data["results"]]
    beats = data.get("beats_full_from_K") or {}
    said = "; ".join(f"{name} faster than svbop's Full from K = {beats[name]:,}" if beats.get(name) else
                     f"{name} not faster than svbop's Full at any K run" for name in ("HSG", "HF"))
    trained = [r for r in data.get("trained", []) if "ms_per_row" in r["algorithms"].get("HF", {})]
    if trained:  # measured on trained trees (benchmarks/bench_extreme.py), beside the random models
        said += "; trained HF (dashed): " + ", ".join(
            f"{r['algorithms']['HF']['ms_per_row']:.3g} ms per row at K = {int(r['K']):,}" for r in trained)
    return {"src": _data_uri(figure_to_png(plot_scaling(data))),
            "meta": f"{m['date']}, {m['cpu']}, {m['threads']} thread(s), 1-minute load {m['load_start'][0]:.2f} at the "
                    f"start, {m['load_end'][0]:.2f} at the end; K = {', '.join(f'{K:,}' for K in Ks)}",
            "summary": said}


def _spread(r: Mapping[str, object]) -> str:
    """``min–max`` of a test time's repeats (empty for one measurement)."""
    lo, hi, n = (float(r.get(c, float("nan"))) for c in ("t_test_ms_min", "t_test_ms_max", "t_test_repeats"))
    if not (n == n and n > 1 and lo == lo and hi == hi):
        return ""
    return f"{_fmt(lo, 3)}–{_fmt(hi, 3)}"


def _timing_note(df: pd.DataFrame) -> str:
    """How a dataset's test times were measured: repeats, the load average around them, CPUs."""
    def col(name: str) -> pd.Series:
        return pd.to_numeric(df[name], errors="coerce") if name in df.columns else pd.Series(dtype=float)

    repeats = col("t_test_repeats").dropna()
    load = pd.concat([col("load_start"), col("load_end")]).dropna()
    cpus = col("cpu_count").dropna()
    if repeats.empty or repeats.max() <= 1:
        return ("t_test: one timed call per algorithm (metrics written before svbop timed repeats): "
                "no spread, machine load unknown")
    n = int(repeats.min()) if repeats.min() == repeats.max() else f"{int(repeats.min())}-{int(repeats.max())}"
    text = f"t_test: median of {n} timed calls after one warm-up (small: fastest–slowest)"
    if not load.empty:
        text += f"; 1-minute load average {load.min():.2f}–{load.max():.2f} while timing"
    if not cpus.empty:
        text += f", on {int(cpus.max())} CPU{'s' if cpus.max() != 1 else ''}"
    return text


def _code(text: object) -> Markup:
    return Markup("<code>{}</code>").format(text)


def _files_html(groups: Sequence[Mapping[str, object]], capital: bool = False) -> Markup:
    """Where to put the missing files and where to get them, one clause per group of files."""
    parts = []
    for i, g in enumerate(groups):
        put = "Put" if capital and i == 0 else "put"
        files = list(g["files"])
        if g["local"]:
            parts.append(Markup("{} not found at {} (put it there or fix its <code>path:</code> in config.yaml)").format(
                _code(files[0]), _code(g["paths"][0])))
            continue
        if len(files) == 1:
            what = Markup("{} {} at {}").format(put, _code(files[0]), _code(g["paths"][0]))
        else:
            what = Markup("{} {} in {}").format(put, Markup(", ").join(_code(f) for f in files), _code(g["folder"]))
        source = "; ".join(t for t in (f"from {g['url']}" if g["url"] else "", str(g["note"])) if t)
        parts.append(what + (Markup(" ({})").format(source) if source else ""))
    return Markup("; ").join(parts)


def _todo_html(row: Mapping[str, object]) -> Markup:
    """The status table's "what to do" of one dataset, keys and paths as code."""
    state = row["state"]
    if state == "ran":
        return Markup("")
    if state == "failed":
        return Markup("{} Fix the cause and rerun <code>snakemake</code> (finished work is kept).").format(row["detail"])
    return Markup("{}; then rerun <code>snakemake</code>.").format(_files_html(row["files"], capital=True))


def _illustration_reason(name: str, entry: Mapping[str, object], rows: Mapping[str, Mapping[str, object]],
                         names: DisplayNames, configured: Mapping[str, object]) -> Markup:
    """One line: why an illustration is empty and how to fill it."""
    panel, kind, paper = ILLUSTRATIONS.get(name, ("?", "inputs", "the paper's dataset"))
    item = "image" if kind == "images" else "text"
    where = Markup("set <code>report: illustrations: {}: dataset:</code> to a dataset of <code>run:</code> "
                   "with {}").format(name, kind)
    d = entry.get("dataset")
    if entry["status"] == "no example":
        n = entry.get("n_test")
        criterion = ("whose top-1 is wrong while the truth is in its top-5 and in its SVBOP-Full set"
                     if name != "entropy" else "to show")
        return Markup("No test {} {} among the {}test rows of {}; to fill this panel, {}.").format(
            item, criterion, f"{n:,} " if isinstance(n, int) else "", names.dataset(d), where)
    if entry["status"] == "not applicable":
        return Markup("{} holds feature vectors, not {}: {}.").format(names.dataset(d), kind, where)
    if entry["status"] not in ("not run", ""):
        return Markup("{}: {}").format(entry["status"], entry.get("reason", ""))
    wanted = (configured.get(name) or {}).get("dataset")
    if not wanted:
        return Markup("No dataset configured and none of this run has {}: {}.").format(kind, where)
    row = rows.get(wanted)
    title = names.dataset(wanted)
    if row is None:
        return Markup("{} is not among the configured datasets: {}.").format(_code(wanted), where)
    if row["state"] == "failed":
        return Markup("{} failed ({}), and no other dataset of this run has {}.").format(title, row["detail"], kind)
    if row["state"] == "ran":
        return Markup("{} ran but its illustration was not drawn (see <code>results/logs/illustrate/</code>).").format(title)
    todo = Markup("add {} under <code>run:</code>").format(_code(wanted))
    if row.get("files"):
        todo = todo + Markup(" and ") + _files_html(row["files"])
    return Markup("{} was not run and no dataset of this run has {}: to fill this panel, {}.").format(title, kind, todo)


def _context_illustrations(illustrations: Mapping[str, Mapping[str, object]] | None, config: Mapping[str, object],
                           view: Mapping[str, object], names: DisplayNames,
                           links: Mapping[str, tuple[str | None, str]],
                           missing: Mapping[str, Sequence[Mapping[str, str]]] | None = None) -> list[dict[str, object]]:
    """The paper's three panels of Figure 2: records and figure of each, or one line saying why
    it is empty and how to fill it."""
    configured = dict((config.get("report") or {}).get("illustrations") or {})
    illustrations = dict(illustrations or {})
    rows = {r["dataset"]: r for r in view["rows"]}
    # a dataset not in run: the files to fetch by hand before adding it (the status only lists it)
    rows |= {r["dataset"]: {**r, "state": "not in run",
                            "files": _file_groups([m for m in (missing or {}).get(r["dataset"], [])
                                                   if m.get("kind", "manual") == "manual"])}
             for r in view["not_in_run"]}
    out = []
    for name, (panel, kind, paper) in ILLUSTRATIONS.items():
        if name not in configured and name not in illustrations:
            continue
        entry = {"name": name, "panel": panel, "kind": kind, "paper": paper,
                 "dataset": (configured.get(name) or {}).get("dataset"), "status": "not run", "reason": "",
                 "records": [], "figure": None, "labels": [], "n_test": None}
        given = illustrations.get(name)
        if given:
            data = given.get("records")
            if isinstance(data, (str, os.PathLike)):
                data = json.loads(Path(data).read_text())
            data = dict(data or {})
            entry.update(status=data.get("status", "ok"), reason=data.get("reason", ""), dataset=data.get("dataset", entry["dataset"]),
                         records=data.get("records", []), labels=data.get("utilities", []), n_test=data.get("n_test"))
            if given.get("figure") is not None and entry["status"] == "ok":
                entry["figure"] = _data_uri(_png_bytes(f"illustration {name}", given["figure"]))
        d = entry["dataset"]
        shown_paper, relation = links.get(str(d), (None, "")) if d else (None, "")
        entry["title"] = names.dataset(d) if d else ""
        entry["shown_note"] = ("" if shown_paper == paper and relation == "same" else f"the paper: {paper}")
        entry["message"] = Markup("") if entry["status"] == "ok" else _illustration_reason(name, entry, rows, names, configured)
        entry["label_names"] = [html_name(utility_name(lab)) for lab in entry["labels"]]
        for rec in entry["records"]:
            rec["entropy_text"] = entropy_text(rec.get("entropy_bits", 0.0))
        out.append(entry)
    return out


def _t5_value(value: object, empty: str) -> str:
    """A Table 5 cell: ``empty`` for None/NaN, a number as ``:g``, text (``"= k"``, two trees' values) as it is."""
    if value is None or (isinstance(value, float) and value != value):
        return empty
    return value if isinstance(value, str) else f"{value:g}"


def _context_tree_sets(paths, names, dataset_ids) -> list[dict] | None:
    """The section "Guaranteed sets from the tree" (issue 54): per dataset, the rows of its ``tree_sets.tsv``
    (svbop.tree_sets: conformal and risk-controlled sets from the tree beside SVBOP-HF's), or None."""
    if not paths:
        return None
    out = []
    for path in paths:
        frame = pd.read_csv(path, sep="\t", keep_default_na=False, dtype={"dataset": str, "method": str, "param": str})
        if frame.empty:
            continue
        d = str(frame["dataset"].iloc[0])
        num = {c: pd.to_numeric(frame[c], errors="coerce").astype(float).tolist()  # "nan": a method without one
               for c in ("target_coverage_pct", "coverage_pct", "mean_size", "fit_ms_per_row", "ms_per_row")}
        rows = [{"method": names.method(m, p) if m.startswith("svbop_hf") else _tree_method_name(m), "param": p,
                 "target": _fmt(num["target_coverage_pct"][i], 1), "coverage": _fmt(num["coverage_pct"][i], 2),
                 "size": _fmt(num["mean_size"][i], 2), "calibrated": str(r["calibrated"]),
                 "fit_ms": _fmt(num["fit_ms_per_row"][i], 4), "ms": _fmt(num["ms_per_row"][i], 4),
                 "n_cal": str(r["n_calibration"]), "n_test": str(r["n_test"])}
                for i, (m, p, (_, r)) in enumerate(zip(frame["method"], frame["param"], frame.iterrows()))]
        out.append({"id": d, "title": names.dataset(d), "rows": rows})
    return out or None


def _tree_method_name(method: str) -> str:
    """``tree_aps_kmeans`` -> ``"APS from the tree (kmeans)"``, ``tree_risk_hierarchical_kmeans`` -> ``"risk control,
    hierarchical loss, from the tree (kmeans)"``."""
    body, _, tree = method[len("tree_"):].rpartition("_")
    if body.startswith("risk_"):
        return f"risk control ({body[len('risk_'):]} loss, LAC's sets) from the tree ({tree})"
    label = {"lac": "LAC", "aps": "APS (randomised)", "raps": "RAPS (randomised)", "saps": "SAPS (randomised)",
             "topk": "top-k"}.get(body, body)
    return f"conformal {label} from the tree ({tree})"


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
    missing: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    beyond: pd.DataFrame | str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    beyond_figure: object | None = None,
    beyond_skipped: Mapping[str, Mapping[str, str]] | None = None,
    scaling: str | os.PathLike | Mapping[str, object] | None = None,
    calibration: Mapping[str, object] | None = None,
    tuning: Mapping[str, object] | None = None,
    model: Mapping[str, object] | None = None,
    tree_sets: Iterable[str | os.PathLike] | None = None,
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
        Link text -> relative URL of the exported tables (CSV, LaTeX) next to the report; each is
        described by its file name (:data:`DOWNLOADS`).
    missing : mapping, optional
        :func:`~svbop.report.status.missing_inputs` of every configured dataset: those not in
        ``run`` whose files a person must fetch get a status row saying which, where and from where.
    beyond : DataFrame, path or iterable of paths, optional
        The methods beyond the paper (:func:`~svbop.report.beyond.read_beyond` or the
        ``beyond.tsv`` files): the section "Beyond the paper: every kind of set", apart from
        Tables 3 and 4; no section when None.
    beyond_figure : path, bytes or Figure, optional
        That section's figure of coverage against mean set size (drawn from ``beyond`` when omitted).
    beyond_skipped : mapping, optional
        dataset -> {kind of set: reason} of the methods beyond the paper not run on a dataset
        (e.g. ``{"hierarchical": "this dataset has no class hierarchy ..."}``), shown under its table.
    scaling : path or dict, optional
        Results of ``benchmarks/bench_scaling.py --out`` (the file, or
        :func:`~svbop.report.figures.read_scaling`'s data): the Table 4 section then shows its time
        per row against K, marked as svbop's own measurement beyond the paper.  None: nothing shown.
    calibration : mapping, optional
        dataset -> its calibration record (``results/<dataset>/calibration.json`` or the dict of
        :func:`svbop.calibration.calibrate_parts`): the section "Calibration of the probabilities"
        (temperature, ECE and NLL before and after, reliability diagram, what changed in the sets);
        none when omitted or empty.
    tuning : mapping, optional
        dataset -> its tuning record (``results/<dataset>/tuning/flat.json``), for the datasets whose
        ``flat`` has an ``auto`` value: Table 5 shows the chosen value with "auto: chose X from grid Y",
        marked † at a binding edge of its grid (:func:`svbop.report.compare.table5_vs_paper`).
    model : mapping, optional
        The page about a model (every dataset of the run a model's outputs; needs ``beyond``):
        ``epsilons`` (the coverage levels asked), ``classes`` and ``examples`` (dataset -> the rule
        describe_model's files). The page then leads with which sets to use, the classes and example
        rows (:func:`svbop.report.model.model_context`) and leaves out the paper's sections (the
        status of its datasets, its illustrations, Tables 4 and 5, its claims, the generalised reject
        option). None: the paper's page.

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
    if "utilities" not in figures and model is None:
        from .figures import plot_utilities

        figures["utilities"] = plot_utilities(specs, K=100)
    if "fbeta_family" not in figures and model is None:  # the paper's figures: not on the page about a model
        from .figures import plot_fbeta_family

        figures["fbeta_family"] = plot_fbeta_family(K=100)
    if "genreject_family" not in figures and model is None:
        from .figures import plot_genreject_family

        figures["genreject_family"] = plot_genreject_family()
    images = {name: _data_uri(_png_bytes(name, src)) for name, src in figures.items()}

    by_id = {str(s["dataset"]): s for s in summaries}
    dataset_ids = list(by_id) + [d for d in dict.fromkeys(metrics["dataset"].astype(str)) if d not in by_id]
    configured = dict(config.get("datasets") or {})
    names = DisplayNames({**{d: (c or {}).get("title") for d, c in configured.items()},
                          **{d: s.get("title") for d, s in by_id.items()}})

    def info(d: str) -> dict[str, object]:
        s = by_id.get(d, {"dataset": d, "title": names.dataset(d), "synthetic": False})
        parts = dict(s.get("train_seconds_parts") or {})
        names_of = {"cnn": "CNN", "flat": "liblinear"}
        return {"id": d, "title": names.dataset(d), "label": dataset_label(s), "synthetic": bool(s.get("synthetic")),
                "summary": s,
                "train_parts": ", ".join(f"{names_of.get(k, k)} {v:.1f}" for k, v in parts.items()) if len(parts) > 1 else "",
                "features_seconds": "–" if s.get("features_seconds") is None else _fmt(float(s["features_seconds"]), 1)}

    datasets = [info(d) for d in dataset_ids]
    Ks = sorted({int(s["K"]) for s in summaries})
    convexity = []
    for spec in specs:
        u = utility(spec)
        convexity.append(
            {
                "name": html_name(utility_name(spec)),
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
            {"name": html_name(utility_name(spec)), "spec": spec, "title": u.title, "formula": u.formula,
             "g1": _fmt(float(u.values()[0]), 3), "gK": _fmt(float(u.values()[-1]), 3), **p.as_dict()}
        )

    t1 = table2(summaries)
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

    fbeta_figure, genreject_figure = images.pop("fbeta_family", None), images.pop("genreject_family", None)
    status = dataset_status(configured, run, not_run, failed, missing=missing) if configured else dataset_status(
        {d: {"title": by_id[d].get("title", d)} for d in dataset_ids}, dataset_ids)
    view = status_view(status, {**dict(missing or {}), **dict(not_run or {})})
    t1p = table2_vs_paper(summaries, links)
    t1p_rows, t1p_not_run, t1p_outside = [], [], []
    for r in t1p.to_dict("records"):
        if not r["dataset"]:  # a paper dataset nothing ran for: one line below the table
            t1p_not_run.append(r["paper_dataset"])
            continue
        if not r["paper_dataset"]:  # outside the paper: nothing to compare (its sizes are in Table 2)
            t1p_outside.append(r["title"])
            continue
        cells = []
        for c in ("K", "D", "N_train", "N_test"):
            ours, theirs = r[c], r[f"{c}_paper"]
            cells.append({"ours": "–" if pd.isna(ours) else str(int(ours)), "paper": "" if pd.isna(theirs) else str(int(theirs)),
                          "differs": r["relation"] == "same" and not pd.isna(ours) and not pd.isna(theirs)
                          and int(ours) != int(theirs)})
        t1p_rows.append({"dataset": r["dataset"], "title": r["title"], "paper": r["paper_dataset"], "relation": r["relation"],
                         "synthetic": bool(by_id.get(r["dataset"], {}).get("synthetic")), "cells": cells})
    t4 = table4_vs_paper(metrics, train_seconds or {}, links,
                         features_seconds={d: s.get("features_seconds") for d, s in by_id.items()})
    t5 = table5_vs_paper(configured, [d for d in run if d in by_id], links, tuned=tuning) if configured else None
    t5_rows, t5_edges = [], []
    if t5 is not None:
        from .compare import TABLE5_KEYS

        for r in t5.to_dict("records"):
            t5_rows.append({"dataset": r["dataset"], "title": names.dataset(r["dataset"]), "paper": r["paper_dataset"],
                            "relation": r["relation"],
                            "cells": [{"ours": _t5_value(r[k], "–"), "paper": _t5_value(r[f"{k}_paper"], ""),
                                       "auto": r.get(f"{k}_auto") or "", "edge": r.get(f"{k}_edge") or ""}
                                      for k in TABLE5_KEYS]})
            for k in TABLE5_KEYS:
                if r.get(f"{k}_edge"):
                    t5_edges.append({"dataset": names.dataset(r["dataset"]), "key": k, "value": _t5_value(r[k], ""),
                                     "edge": r[f"{k}_edge"]})
    claims = []
    domains = {name: dataset_domain(cfg) for name, cfg in configured.items()}
    for c in check_claims(metrics, summaries, links=links, names=names, domains=domains or None):
        claims.append({**c, "claim": html_name(c["claim"]), "context": html_name(c["context"]),
                       "evidence": [html_name(e) for e in c["evidence"]]})
    for r in view["rows"]:
        r["todo"] = _todo_html(r)
        r["synthetic"] = bool(by_id.get(r["dataset"], {}).get("synthetic"))
        s = by_id.get(r["dataset"])
        if r["state"] == "ran" and s is not None:
            r["todo"] = Markup('K = {:,}; {:,} test rows; top-1 {:.2f} %: <a href="#table3-{}">{}</a>').format(
                int(s["K"]), int(s["N_test"]), float(s["top1_pct"]), r["dataset"], paper_ref("baselines"))
    given_downloads = dict(downloads or {})
    grouped: dict[str, dict[str, object]] = {}  # one line per table, its formats side by side
    for text, href in dict(downloads or {}).items():
        stem = Path(text).stem
        what = DOWNLOADS.get(stem) or next((v for k, v in DOWNLOADS.items() if stem.startswith(k + "_")), "")
        grouped.setdefault(stem, {"stem": stem, "what": what, "files": []})["files"].append(
            {"text": text, "href": href})
    order = {stem: i for i, stem in enumerate(DOWNLOADS)}
    downloads = sorted(grouped.values(), key=lambda d: order.get(d["stem"], len(order)))
    context = {
        "title": title,
        "created": _format_created(created),
        "svbop_version": versions.get("svbop", "unknown"),
        "ref": {item: paper_ref(item) for item in PAPER_ITEMS},
        "caption": {item: html_name(paper_caption(item)) for item in PAPER_ITEMS},
        "datasets": datasets,
        "Ks": Ks,
        "k_datasets": k_datasets,
        "utilities": convexity,
        "utilities_K100": props100,
        "config_yaml": _config_text(config),
        "versions": versions,
        "table2": {
            "columns": [html_name(re.sub(r"^N_(\w+)$", r"N_{\1}", c)) for c in t1.columns],
            "rows": [
                {"synthetic": bool(s.get("synthetic")), "cells": [_fmt(v) for v in row]}
                for s, row in zip(summaries, t1.itertuples(index=False))
            ],
        },
        "any_synthetic": any(bool(s.get("synthetic")) for s in summaries),
        "predictions": predictions,
        "any_paper_t3": bool(paired["paper"].notna().any()),
        "threshold_grid": _grid_text((config.get("baselines") or {}).get("threshold_grid")),
        "utilities_figure": images.pop("utilities", None),
        "other_figures": [{"name": k, "src": v} for k, v in images.items()],
        "n_methods": int(metrics.groupby(["method", "param"]).ngroups),
        "status": view,
        "n_run": view["counts"]["ran"],
        "n_failed": view["counts"]["failed"],
        "table2_paper": t1p_rows,
        "table2_paper_not_run": t1p_not_run,
        "table2_paper_outside": t1p_outside,
        "table4": _context_table4(t4, names),
        "scaling": _context_scaling(scaling),
        "table5": t5_rows,
        "table5_edges": t5_edges,
        "table5_has_auto": any(c["auto"] for r in t5_rows for c in r["cells"]),
        "table5_has_paper": any(c["paper"] for r in t5_rows for c in r["cells"]),
        "comparable": _comparable([d["id"] for d in datasets if d["id"] in present or d["id"] in by_id], links, names,
                                  {d["id"]: d["synthetic"] for d in datasets}),
        "table5_columns": ["C", "ε", "M", "efC", "k", "ef", "C", "ε", "l", "ε<sub>c</sub>"],
        "claims": claims,
        "min_test_rows": SMALL_TEST,
        "illustrations": _context_illustrations(illustrations, config, view, names, links, missing),
        "fbeta_figure": fbeta_figure,
        "genreject_figure": genreject_figure,
        "downloads": downloads,
    }
    frame_for_calibration = None
    if model is not None and beyond is not None:  # what uncalibrated probabilities cost (calibrate: none)
        from .beyond import read_beyond

        frame_for_calibration = beyond if isinstance(beyond, pd.DataFrame) else read_beyond(beyond, labels)
    context["calibration"] = _context_calibration(calibration, names, dataset_ids, frame_for_calibration, labels)
    context["model_outputs"] = [{"id": d["id"], "title": d["title"]} for d in datasets
                                if d["summary"].get("model_outputs") is True]
    context["beyond"] = _context_beyond(beyond, beyond_figure, beyond_skipped, labels, names, dataset_ids,
                                        paper=model is None)
    context["tree_sets"] = _context_tree_sets(tree_sets, names, dataset_ids)
    context["model"] = None
    if model is not None and beyond is not None:  # the page about a model: its own sections first
        from .beyond import read_beyond
        from .model import model_context

        frame = beyond if isinstance(beyond, pd.DataFrame) else read_beyond(beyond, labels)
        records = {str(d): _read_calibration(src) for d, src in dict(calibration or {}).items()}
        context["model"] = model_context(model, frame, labels, names, dataset_ids, config=config,
                                         calibration=records, summaries=by_id)
        # several models on the same rows side by side, and the level chosen in the browser
        from .live import live_context
        from .models import compare_models

        context["model"]["compare"] = compare_models(frame, labels, dataset_ids, model.get("epsilons") or [],
                                                     titles={d: names.dataset(d) for d in dataset_ids},
                                                     calibration=records, class_coverage=model.get("classes"))
        context["model"]["live"] = live_context(model.get("live"), frame, labels, names, dataset_ids,
                                                model.get("epsilons") or [])
        from .promises import promises_context  # weighted and conditional sets' promises, checked on the test rows

        context["model"]["promises"] = promises_context(model.get("promises"), names, dataset_ids)
        context["model"].update(_context_model_page(specs, by_id, names, dataset_ids, config, versions,
                                                    given_downloads))
        context["downloads"] = context["model"].pop("downloads")
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
