"""Tables of the report: the paper's Table 2 (datasets) and Table 3 (SVBOP-Full vs. baselines).

Inputs are the pipeline's per-dataset files:

* ``results/{dataset}/summary.json`` -- one dict per dataset (see :data:`SUMMARY_KEYS`);
* ``results/{dataset}/metrics.tsv`` -- one row per method (see :data:`METRICS_COLUMNS`), then one
  column ``<label>_pct`` per evaluation utility, ``<label>`` being ``svbop.utility(spec).label``
  (``fbeta_1``, ``credal_2.2_1.2``, ...), the names of the paper's ``table3_utilities.csv``.

Display names follow the paper (:mod:`svbop.report.names`): a subscript is written ``_{...}``
(``SVBOP-Full-u_{F1}``, ``ICP_{ε=0.01}``); :mod:`svbop.report.html` turns it into ``<sub>``.  Every file is written
atomically (:func:`svbop.io.atomic_path`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..evaluation import METHODS as METHOD_ORDER
from ..evaluation import CONDITIONAL_COLUMNS, SUMMARY_KEYS, SVBOP_METHODS
from ..io import atomic_path, escape_frame, unescape_frame, write_tsv
from ..metrics import COVERAGE_KEYS, EXTRA_COVERAGE_KEYS
from ..utilities import STANDARD_UTILITIES, utility_table
from .names import method_name, utility_label, utility_name

__all__ = [
    "METHOD_ORDER",
    "METRICS_COLUMNS",
    "SUMMARY_KEYS",
    "THETA_COLUMN",
    "THETA_EDGES",
    "TABLE2_COLUMNS",
    "best_mask",
    "dataset_label",
    "method_name",
    "metrics_long",
    "read_metrics",
    "read_summaries",
    "table2",
    "table3",
    "utility_columns",
    "utility_label",
    "utility_name",
    "write_table",
    "write_utility_table",
]

#: Columns every ``metrics.tsv`` must hold (plus one ``<label>_pct`` per evaluation utility).
METRICS_COLUMNS = ("dataset", "method", "param", "n_test", "recall_pct", "mean_size", "top1_pct")

#: Columns of :func:`table2`.
TABLE2_COLUMNS = ("Dataset", "K", "D", "N_train", "N_validation", "N_calibration", "N_test", "top-1 %")

_NUMERIC_METRICS = ("n_test", "recall_pct", "mean_size", "top1_pct")
#: Numeric columns that only some methods fill (empty elsewhere): a threshold's tuned theta, and
#: the test time of the SVBOP methods (median of the repeats, fastest and slowest, the load around
#: them) and their agreement with SVBOP-Full (svbop.evaluation).  A
#: threshold also has ``theta_edge`` (text: ``smallest``, ``largest`` or empty, see
#: :func:`svbop.evaluation.read_threshold_tuning`).
_OPTIONAL_NUMERIC = ("theta", "t_test_ms", "agreement_with_full_pct", "speedup_vs_full", "speedup_vs_full_naive",
                     "index_recall_pct", "t_test_ms_min", "t_test_ms_max", "t_test_repeats", "load_start", "load_end",
                     "cpu_count")
#: ``*_pct`` columns that are not a utility's mean: the coverage metrics of svbop.mean_scores among them.
_NOT_UTILITIES = ("recall_pct", "top1_pct", "agreement_with_full_pct", "index_recall_pct", *COVERAGE_KEYS,
                  *EXTRA_COVERAGE_KEYS, *CONDITIONAL_COLUMNS)
#: Values of a metrics table's ``theta_edge`` column.
THETA_EDGES = ("", "smallest", "largest")
#: Table 3's column of the threshold methods' tuned theta.
THETA_COLUMN = "θ"

PathLike = str | os.PathLike


# --- the utility property table (rule utility_properties) ------------------------------------


def write_utility_table(path: PathLike, specs=STANDARD_UTILITIES, K: int = 100) -> None:
    """Write the property table of ``specs`` for ``K`` classes as a TSV file.

    Parameters
    ----------
    path : path
        Output ``.tsv``; written atomically, parent folders created.
    specs : sequence of str, default=STANDARD_UTILITIES
        Utility spec strings (see :func:`svbop.utility`).
    K : int, default=100
        Number of classes the properties are checked for.
    """
    write_tsv(path, utility_table(specs, K=K))


# --- names -----------------------------------------------------------------------------------


def dataset_label(summary: Mapping[str, object]) -> str:
    """Title of a dataset, with ``" (synthetic)"`` appended when it is flagged synthetic."""
    title = str(summary.get("title") or summary.get("dataset"))
    return f"{title} (synthetic)" if _flag(summary.get("synthetic")) else title


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


# --- reading -----------------------------------------------------------------------------------


def _as_paths(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def read_summaries(paths: PathLike | Iterable[PathLike]) -> list[dict[str, object]]:
    """Read per-dataset ``summary.json`` files, checking they hold :data:`SUMMARY_KEYS`.

    Raises
    ------
    ValueError
        A file is missing, is not a JSON object, or lacks a key (the message names both).
    """
    out = []
    for path in _as_paths(paths):
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        out.append(_check_summary(data, source=str(path)))
    return out


def _check_summary(summary: object, source: str | None = None) -> dict[str, object]:
    if not isinstance(summary, Mapping):
        raise ValueError(f"{source or 'summary'}: expected a JSON object (dict), got {type(summary).__name__}")
    where = source or f"summary of dataset {summary.get('dataset', '?')!r}"
    for key in SUMMARY_KEYS:
        if key not in summary:
            raise ValueError(f"{where}: missing key {key!r}")
    # a model's outputs (summary model_outputs: true) have no features or training of ours: D and
    # train_seconds are None there, and every table says "not applicable: model outputs"
    optional = ("D", "train_seconds") if summary.get("model_outputs") is True else ()
    for key in ("K", "D", "N_train", "N_validation", "N_calibration", "N_test", "top1_pct", "train_seconds"):
        value = summary[key]
        if value is None and key in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: key {key!r} must be a number, got {value!r}")
    return dict(summary)


def utility_columns(df: pd.DataFrame) -> list[str]:
    """Labels of the evaluation utilities in a metrics table (its ``<label>_pct`` columns)."""
    return [c[: -len("_pct")] for c in df.columns if c.endswith("_pct") and c not in _NOT_UTILITIES]


def read_metrics(
    paths: PathLike | Iterable[PathLike], utilities: Sequence[str] | None = None
) -> pd.DataFrame:
    """Read and concatenate per-dataset ``metrics.tsv`` files.

    Parameters
    ----------
    paths : path or iterable of paths
        Tab-separated files with the columns :data:`METRICS_COLUMNS` and ``<label>_pct``.
    utilities : sequence of str, optional
        Spec strings or labels of utilities whose ``<label>_pct`` column every file must hold.

    Returns
    -------
    DataFrame
        One row per (dataset, method, param); ``dataset``, ``method`` and ``param`` are strings
        exactly as written (``param`` ``"0.10"`` stays ``"0.10"``); ``theta_edge``, where present,
        is ``"smallest"``, ``"largest"`` or ``""``.

    Raises
    ------
    ValueError
        A file is missing or empty, lacks a column, has a non-numeric value in a numeric column,
        or repeats a (dataset, method, param) row; the message names the file and the column.
    """
    frames = []
    required = list(METRICS_COLUMNS) + [f"{utility_label(u)}_pct" for u in (utilities or ())]
    for path in _as_paths(paths):
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
        try:
            df = unescape_frame(pd.read_csv(
                path, sep="\t", dtype={"dataset": str, "method": str, "param": str, "theta_edge": str},
                keep_default_na=False,
                na_values={c: ["", "NA", "NaN", "nan"] for c in (*_OPTIONAL_NUMERIC, *_NUMERIC_METRICS)},
            ), ["dataset", "method", "param", "theta_edge"])
        except pd.errors.EmptyDataError:
            raise ValueError(f"{path}: empty file, expected a header with columns {', '.join(required)}") from None
        for col in required:
            if col not in df.columns:
                raise ValueError(f"{path}: missing column {col!r}")
        if df.empty:
            raise ValueError(f"{path}: no rows")
        for col in [*_NUMERIC_METRICS, *(f"{u}_pct" for u in utility_columns(df)), *_OPTIONAL_NUMERIC]:
            if col not in df.columns:
                continue
            values = pd.to_numeric(df[col], errors="coerce")
            bad = values.isna() & df[col].notna() & (df[col].astype(str).str.strip() != "")
            if col not in _OPTIONAL_NUMERIC:
                bad |= values.isna()
            if bad.any():
                i = int(bad.to_numpy().nonzero()[0][0])
                raise ValueError(f"{path}: column {col!r}, row {i + 2}: not a number: {df[col].iloc[i]!r}")
            df[col] = values
        if "theta_edge" in df.columns:
            bad = ~df["theta_edge"].isin(THETA_EDGES)
            if bad.any():
                i = int(bad.to_numpy().nonzero()[0][0])
                raise ValueError(f"{path}: column 'theta_edge', row {i + 2}: expected one of "
                                 f"{', '.join(map(repr, THETA_EDGES))}, got {df['theta_edge'].iloc[i]!r}")
        dup = df.duplicated(["dataset", "method", "param"], keep=False)
        if dup.any():
            row = df[dup].iloc[0]
            raise ValueError(
                f"{path}: duplicate rows for dataset={row['dataset']!r}, method={row['method']!r}, "
                f"param={row['param']!r} (column 'param')"
            )
        frames.append(df)
    if not frames:
        raise ValueError("read_metrics: no metrics files given")
    out = pd.concat(frames, ignore_index=True, sort=False)
    dup = out.duplicated(["dataset", "method", "param"], keep=False)
    if dup.any():
        row = out[dup].iloc[0]
        raise ValueError(f"metrics files repeat dataset {row['dataset']!r} (column 'dataset')")
    return out


def metrics_long(df: pd.DataFrame) -> pd.DataFrame:
    """Wide metrics table -> the long format of the paper's ``table3_utilities.csv``.

    Returns
    -------
    DataFrame
        Columns ``dataset, method, param, eval_utility, utility_pct``: one row per method and
        evaluation utility (in the order of the wide table's ``<label>_pct`` columns).
    """
    _require(df, ("dataset", "method", "param"), "metrics table")
    labels = utility_columns(df)
    if not labels:
        raise ValueError("metrics table: no '<label>_pct' utility columns")
    long = df.melt(
        id_vars=["dataset", "method", "param"],
        value_vars=[f"{u}_pct" for u in labels],
        var_name="eval_utility",
        value_name="utility_pct",
    )
    long["eval_utility"] = long["eval_utility"].str.slice(0, -len("_pct"))
    long = long.dropna(subset=["utility_pct"])
    return long.reset_index(drop=True)[["dataset", "method", "param", "eval_utility", "utility_pct"]]


def _require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    for col in columns:
        if col not in df.columns:
            raise ValueError(f"{what}: missing column {col!r}")


# --- the paper's tables ---------------------------------------------------------------------


def table2(summaries: Iterable[Mapping[str, object]]) -> pd.DataFrame:
    """The paper's Table 2 (the datasets): one row per dataset, in the given order.

    Parameters
    ----------
    summaries : iterable of dict
        Per-dataset summaries (``summary.json``); see :data:`SUMMARY_KEYS`.

    Returns
    -------
    DataFrame
        Columns :data:`TABLE2_COLUMNS`; synthetic datasets read ``"<title> (synthetic)"``.
    """
    rows = []
    for s in summaries:
        s = _check_summary(s)
        rows.append(
            {
                "Dataset": dataset_label(s),
                "K": int(s["K"]),
                "D": None if s["D"] is None else int(s["D"]),
                "N_train": int(s["N_train"]),
                "N_validation": int(s["N_validation"]),
                "N_calibration": int(s["N_calibration"]),
                "N_test": int(s["N_test"]),
                "top-1 %": float(s["top1_pct"]),
            }
        )
    return pd.DataFrame(rows, columns=list(TABLE2_COLUMNS))


def _param_key(method: str, param: str, labels: list[str]) -> tuple:
    if method in (*SVBOP_METHODS, "threshold"):
        return (labels.index(param), 0.0, "") if param in labels else (len(labels), 0.0, param)
    try:
        return (0, float(param), param)
    except ValueError:
        return (1, 0.0, param)


def table3(metrics: pd.DataFrame, dataset: str, eval_labels: Sequence[str]) -> pd.DataFrame:
    """The paper's Table 3 for one dataset.

    Parameters
    ----------
    metrics : DataFrame
        Wide metrics table (:func:`read_metrics`).
    dataset : str
        Dataset id (the ``dataset`` column).
    eval_labels : sequence of str
        Evaluation utilities in the configured order (labels or spec strings).

    Returns
    -------
    DataFrame
        Index ``Method`` (display names, paper's order: SVBOP-Full per utility (once: the paper's
        cost-model run ``svbop_full_naive`` has the same sets and is left out), then SVBOP-HSG
        and SVBOP-HF where run, Threshold per utility, Top-s, ICP; unknown methods last); columns: one per evaluation utility (named
        by :func:`utility_name`, values: mean test utility in %), then ``recall %``,
        ``mean set size`` and ``θ`` (:data:`THETA_COLUMN`: the tuned theta of the Threshold rows,
        NaN elsewhere).  ``attrs["theta_edge"]``: per row, ``"smallest"`` or ``"largest"`` where
        the tuned theta sits at that edge of the grid and beats its neighbour (the best theta may
        lie beyond the grid), else ``""``.

    Raises
    ------
    ValueError
        No rows for ``dataset``, or a ``<label>_pct`` column is missing.
    """
    labels = [utility_label(u) for u in eval_labels]
    _require(metrics, [*METRICS_COLUMNS, *(f"{u}_pct" for u in labels)], "metrics table")
    df = metrics[metrics["dataset"].astype(str) == str(dataset)]
    if df.empty:
        known = ", ".join(sorted(map(str, metrics["dataset"].unique())))
        raise ValueError(f"metrics table: no rows for dataset {dataset!r} (column 'dataset' holds: {known})")
    df = df[df["method"] != "svbop_full_naive"]  # SVBOP-Full's sets again (only its test time differs: Table 4)
    rank = {m: i for i, m in enumerate(METHOD_ORDER)}
    keys = sorted(
        range(len(df)),
        key=lambda i: (
            rank.get(df["method"].iloc[i], len(rank)),
            df["method"].iloc[i],
            _param_key(df["method"].iloc[i], str(df["param"].iloc[i]), labels),
        ),
    )
    df = df.iloc[keys]
    out = pd.DataFrame(
        {utility_name(u): df[f"{u}_pct"].to_numpy(dtype=float) for u in labels}
        | {"recall %": df["recall_pct"].to_numpy(dtype=float), "mean set size": df["mean_size"].to_numpy(dtype=float),
           THETA_COLUMN: (pd.to_numeric(df["theta"], errors="coerce").to_numpy(dtype=float) if "theta" in df.columns
                          else np.full(len(df), np.nan))},
        index=pd.Index([method_name(m, p) for m, p in zip(df["method"], df["param"])], name="Method"),
    )
    edges = df["theta_edge"].astype(str) if "theta_edge" in df.columns else pd.Series("", index=df.index)
    out.attrs["theta_edge"] = [e if e in THETA_EDGES else "" for e in edges.replace("nan", "")]
    out.attrs["utility_columns"] = [utility_name(u) for u in labels]
    out.attrs["keys"] = list(zip(df["method"], df["param"]))
    return out


def best_mask(table: pd.DataFrame, columns: Sequence[str] | None = None, decimals: int | None = 2) -> pd.DataFrame:
    """Mark the best (highest) value of each utility column; ties are all marked.

    Parameters
    ----------
    table : DataFrame
        E.g. the output of :func:`table3`.
    columns : sequence of str, optional
        Columns to mark; default: the utility columns of a :func:`table3` frame
        (``table.attrs["utility_columns"]``), else every numeric column.
    decimals : int or None, default=2
        Compare values rounded to this many decimals (what the reader sees); None: exact.

    Returns
    -------
    DataFrame of bool
        Same shape as ``table``; False outside ``columns`` and for NaN.
    """
    if columns is None:
        columns = table.attrs.get("utility_columns") or list(table.select_dtypes("number").columns)
    mask = pd.DataFrame(False, index=table.index, columns=table.columns)
    for col in columns:
        if col not in table.columns:
            raise ValueError(f"best_mask: no column {col!r}")
        values = pd.to_numeric(table[col], errors="coerce").astype(float)
        if decimals is not None:
            values = values.round(decimals)
        if values.notna().any():
            mask[col] = (values == values.max()).to_numpy()
    return mask


def write_table(df: pd.DataFrame, path: PathLike, index: bool = True) -> None:
    """Write a table as ``.tsv``, ``.csv`` or ``.tex`` (``DataFrame.to_latex``), atomically.

    In ``.tex`` every cell, column name and index entry is text, escaped for LaTeX
    (``DataFrame.to_latex(escape=True)``: ``\\ { } $ & # ^ _ ~ %`` become ``\\textbackslash``,
    ``\\{``, ...), so dataset titles or names from a user's config show as written and the file
    compiles with pdflatex (``\\usepackage{booktabs}`` for its rules).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".tsv", ".csv", ".tex"):
        raise ValueError(f"{path}: unknown table format {suffix!r} (use .tsv, .csv or .tex)")
    with atomic_path(path) as tmp:
        if suffix == ".tex":
            tmp.write_text(df.to_latex(index=index, float_format="%.2f", escape=True))
        else:
            escape_frame(df).to_csv(tmp, sep="\t" if suffix == ".tsv" else ",", index=index)  # no formula cells
