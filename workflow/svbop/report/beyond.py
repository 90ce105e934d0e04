"""The report's section "Beyond the paper: every kind of set": per dataset, every method's utilities,
coverage, worst-class coverage and mean set size (``results/<dataset>/beyond.tsv``, written by
:func:`svbop.evaluation.evaluate_beyond`), apart from the paper's Tables 3 and 4."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from ..evaluation import BEYOND_COLUMNS, BEYOND_PAPER_METHODS, CONDITIONAL_COLUMNS
from ..io import unescape_frame
from .names import method_name, utility_label

__all__ = ["BEYOND_FAMILIES", "method_family", "read_beyond", "beyond_table", "group_coverage_table"]

#: Kinds of set, in the order the section lists them: (family key, display name).
BEYOND_FAMILIES = (
    ("svbop_full", "SVBOP-Full (the paper)"),
    ("threshold", "Threshold (the paper)"),
    ("top_s", "Top-s (the paper)"),
    ("icp", "ICP, LAC score (the paper)"),
    ("conformal", "Conformal APS / RAPS / SAPS / top-k / margin"),
    ("class_conditional", "Class-conditional and clustered conformal"),
    ("mondrian", "Mondrian conformal (per group)"),
    ("coverage", "Bayes-optimal with coverage"),
    ("risk", "Conformal risk control (E[loss] <= alpha)"),
    ("weighted", "Weighted conformal (covariate shift)"),
    ("conditional", "Conditional conformal (overlapping groups)"),
    ("label_shift", "Label-shift conformal (estimated class weights)"),
    ("hierarchical", "Hierarchy-restricted"),
)

_NUMERIC = BEYOND_COLUMNS[3:]
#: How a number that is not there is written (svbop.io.write_tsv writes NaN as "nan"); a method that
#: could not be calibrated has no numbers (svbop.evaluation.evaluate_beyond's ``unreachable``).
_MISSING = ("", "nan", "NaN", "NA")


def method_family(method: str) -> str:
    """The kind of set a method gives (a key of :data:`BEYOND_FAMILIES`)."""
    if method in BEYOND_PAPER_METHODS:
        return method
    if method.startswith("conformal_"):
        return "class_conditional" if method.endswith(("_cc", "_clustered", "_rc3p")) else "conformal"
    for family in ("coverage", "hierarchical", "mondrian", "risk", "weighted", "conditional", "label_shift"):
        if method.startswith(family + "_"):
            return family
    raise ValueError(f"unknown method {method!r} of the section beyond the paper")


def read_beyond(paths: str | os.PathLike | Iterable[str | os.PathLike],
                utilities: Sequence[str] | None = None) -> pd.DataFrame:
    """Read and concatenate per-dataset ``beyond.tsv`` files.

    Parameters
    ----------
    paths : path or iterable of paths
        Files with the columns :data:`svbop.evaluation.BEYOND_COLUMNS` and ``<label>_pct``.
    utilities : sequence of str, optional
        Utility specs or labels whose ``<label>_pct`` column every file must hold.

    Returns
    -------
    DataFrame
        One row per (dataset, method, param), ``param`` as written (``"0.10"`` stays ``"0.10"``),
        with a column ``family`` (:func:`method_family`).

    Raises
    ------
    ValueError
        A file is missing or empty, lacks a column, has a value that is not a number in a numeric
        column, names an unknown method or repeats a row; the message names the file.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    required = [*BEYOND_COLUMNS, *(f"{utility_label(u)}_pct" for u in (utilities or ()))]
    frames = []
    for path in map(Path, paths):
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
        try:
            # every column as written (param "0.10" stays "0.10"); numbers, NaN written as "nan" included, below
            df = unescape_frame(pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False))
        except pd.errors.EmptyDataError:
            raise ValueError(f"{path}: empty file, expected a header with columns {', '.join(required)}") from None
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not a tab-separated table ({str(exc).splitlines()[0]})") from None
        for col in required:
            if col not in df.columns:
                raise ValueError(f"{path}: missing column {col!r}")
        numeric = [c for c in df.columns if c in _NUMERIC or c.endswith("_pct")]
        for col in numeric:
            missing = df[col].isin(_MISSING)
            values = pd.to_numeric(df[col].mask(missing), errors="coerce")
            bad = values.isna() & ~missing
            if bad.any():
                row = int(bad.to_numpy().argmax()) + 2
                raise ValueError(f"{path}: row {row}: column {col!r} is not a number: {df[col].iloc[row - 2]!r}")
            df[col] = values.astype(float)
        try:
            df["family"] = [method_family(m) for m in df["method"]]
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        dup = df.duplicated(["dataset", "method", "param"])
        if dup.any():
            r = df[dup].iloc[0]
            raise ValueError(f"{path}: row ({r['dataset']}, {r['method']}, {r['param']}) appears twice")
        if "calibrated" not in df.columns:
            df["calibrated"] = ""
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=[*required, "family", "calibrated"])
    return pd.concat(frames, ignore_index=True)


def beyond_table(frame: pd.DataFrame, dataset: str, utilities: Sequence[str]) -> pd.DataFrame:
    """The section's table of one dataset: one row per method, kinds of set in the order of
    :data:`BEYOND_FAMILIES`, each kind in its file order.

    Returns
    -------
    DataFrame
        Columns ``method`` (display name), ``key`` (``method/param``), ``family``, one
        ``<label>_pct`` per utility, ``n_test``, ``coverage_pct``, ``target_coverage_pct``,
        ``class_coverage_worst_pct``, ``covgap_pct``, ``sscv_pct``, ``wsc_pct`` (NaN where the file
        lacks them), ``mean_size``, ``singleton_pct``, ``empty_pct``, ``calibrated``;
        ``worst_group_<by>_pct`` and ``group_coverage_<by>`` (JSON) where the file has them.
    """
    order = {key: i for i, (key, _) in enumerate(BEYOND_FAMILIES)}
    df = frame[frame["dataset"].astype(str) == str(dataset)].copy()
    df["_order"] = [order[f] for f in df["family"]]
    df = df.sort_values("_order", kind="stable")
    labels = [f"{utility_label(u)}_pct" for u in utilities]
    out = pd.DataFrame({
        "method": [method_name(m, p) for m, p in zip(df["method"], df["param"])],
        "key": [f"{m}/{p}" for m, p in zip(df["method"], df["param"])],
        "family": df["family"].to_numpy(),
    })
    for col in [*labels, "n_test", "coverage_pct", "target_coverage_pct", "class_coverage_worst_pct", "mean_size",
                "singleton_pct", "empty_pct"]:
        out[col] = df[col].to_numpy() if col in df.columns else float("nan")
    for col in CONDITIONAL_COLUMNS:  # CovGap, SSCV, WSC (issue 48): absent from older files
        out[col] = pd.to_numeric(df[col], errors="coerce").to_numpy() if col in df.columns else float("nan")
    for col in sorted(c for c in df.columns if c.startswith("worst_group_") and c.endswith("_pct")):
        out[col] = df[col].to_numpy()  # methods.mondrian.by: the worst group's coverage, per grouping
    for col in sorted(c for c in df.columns if c.startswith("group_coverage_")):
        out[col] = df[col].fillna("").astype(str).to_numpy()  # each group's coverage, by name (group_column)
    out["calibrated"] = df["calibrated"].fillna("").astype(str).to_numpy()
    return out


def group_coverage_table(table: pd.DataFrame, by: str = "group_column") -> dict[str, object] | None:
    """The coverage of every group of one grouping, by name, for the report: ICP (one threshold for
    all rows, the paper's) beside the Mondrian sets grouped by it (one threshold per group).

    Parameters
    ----------
    table : DataFrame
        One dataset's :func:`beyond_table`, with a column ``group_coverage_<by>`` (JSON
        ``[[name, test rows, coverage %], ...]``, :func:`svbop.evaluation.evaluate_beyond`).
    by : str
        The grouping.

    Returns
    -------
    dict or None
        ``methods`` (display names), ``keys`` (``method/param``), ``targets`` (guaranteed
        coverage %), ``groups`` (``[{"name", "n", "coverage": [% per method]}]``, in the order
        of the names) and ``worst`` (each method's smallest group coverage %); None when the
        table has no such column or no method shows it.
    """
    col = f"group_coverage_{by}"
    if col not in table.columns:
        return None
    keep = [i for i, (family, key) in enumerate(zip(table["family"], table["key"]))
            if family == "icp" or (family == "mondrian" and key.split("/")[0].endswith(f"_{by}"))]
    keep = [i for i in keep if str(table[col].iloc[i])]  # not a method that could not be calibrated
    if not keep:
        return None
    per_method = [{name: (int(n), float(c)) for name, n, c in json.loads(table[col].iloc[i])} for i in keep]
    names = list(dict.fromkeys(name for m in per_method for name in m))
    groups = [{"name": name, "n": next(m[name][0] for m in per_method if name in m),
               "coverage": [m[name][1] if name in m else float("nan") for m in per_method]} for name in names]
    return {
        "methods": [str(table["method"].iloc[i]) for i in keep],
        "keys": [str(table["key"].iloc[i]) for i in keep],
        "targets": [float(table["target_coverage_pct"].iloc[i]) for i in keep],
        "groups": groups,
        "worst": [min(m.values(), key=lambda v: v[1])[1] for m in per_method],
    }


def skipped_text(skipped: Mapping[str, str]) -> list[str]:
    """One line per kind of set not run on a dataset: ``"Hierarchy-restricted: not run, <reason>"``."""
    names = dict(BEYOND_FAMILIES)
    names["mondrian_group_column"] = names["mondrian"]  # the grouping by the dataset's format.group_column
    return [f"{names.get(k, k)}: not run, {why}" for k, why in skipped.items()]
