"""Test time of the set predictors, as the paper's Table 4 reports it (milliseconds per test sample).

The pipeline's ``predict_svbop_*`` rules time one call of a predictor on all test rows with
:func:`time_predictions`, and write :func:`timing_record` as JSON beside the sets
(``results/{dataset}/predictions/<method>/<utility>.json``, :func:`write_timing`); the evaluate
rule reads them back with :func:`read_timing`.

What is timed is the prediction call alone: scoring the classes (all of them for SVBOP-Full, those
the index or the tree search visits for SVBOP-HSG and SVBOP-HF) and the set search.  Reading the
model and the features is not, and neither is the one-time work of the first call (numba's
compilation or loading of its cache, per-model search structures), which :func:`time_predictions`
does in an untimed warm-up on one row.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .io import atomic_path

__all__ = ["TIMING_KEYS", "read_timing", "rule_costs", "time_predictions", "timing_record", "write_timing"]

T = TypeVar("T")

#: Keys every timing record holds (method-specific statistics may follow).
TIMING_KEYS = ("method", "utility", "n_test", "seconds", "cpu_seconds", "ms_per_sample", "threads")


def time_predictions(predict: Callable[[Any], T], X: Any, *, warmup: bool = True) -> tuple[T, float, float]:
    """Call ``predict(X)`` once and measure it.

    Parameters
    ----------
    predict : callable
        Takes a feature matrix (rows to predict) and returns the predictions.
    X : array or scipy sparse matrix of shape (n_samples, n_features)
        The rows to predict; must support ``X[:1]``.
    warmup : bool, default True
        First call ``predict(X[:1])``, untimed.  The numba kernels behind SVBOP-Full, -HSG and -HF
        are compiled (or loaded from numba's cache) on their first call in a process, and the
        predictors build per-model structures then (``W^T`` for SVBOP-Full, the tree layout for
        SVBOP-HF); that one-time cost, up to seconds, is no part of the per-sample test time.

    Returns
    -------
    result
        What ``predict(X)`` returned.
    seconds : float
        Wall time of the call (``time.perf_counter``).
    cpu_seconds : float
        CPU time of the process during the call (``time.process_time``; all its threads).
    """
    if warmup and X.shape[0]:
        predict(X[:1])
    wall, cpu = time.perf_counter(), time.process_time()
    result = predict(X)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def timing_record(
    method: str,
    utility: str,
    n_test: int,
    seconds: float,
    cpu_seconds: float,
    *,
    threads: int = 1,
    stats: Mapping[str, Any] | None = None,
    **params: Any,
) -> dict[str, Any]:
    """The timing JSON of one prediction job.

    Parameters
    ----------
    method : str
        E.g. ``svbop_full``, ``svbop_hsg``, ``svbop_hf_kmeans``.
    utility : str
        Label of the utility (``fbeta_1``).
    n_test : int
        Number of rows predicted (at least one).
    seconds, cpu_seconds : float
        Wall and CPU time of the prediction call (:func:`time_predictions`).
    threads : int, default 1
        Threads the predictor was given.
    stats : mapping of str to array, optional
        Per-row search statistics (``return_stats=True`` of SVBOP-HSG / SVBOP-HF); each becomes
        ``mean_<name>``, its mean over the rows.
    **params
        Further entries written as they are (e.g. ``k`` and ``ef`` of SVBOP-HSG).

    Returns
    -------
    dict
        :data:`TIMING_KEYS`, with ``ms_per_sample = 1000 * seconds / n_test``, then
        ``mean_<name>`` per statistic and ``params``.
    """
    n_test = int(n_test)
    if n_test < 1:
        raise ValueError(f"{method} {utility}: n_test must be at least 1, got {n_test}")
    record = {
        "method": str(method),
        "utility": str(utility),
        "n_test": n_test,
        "seconds": float(seconds),
        "cpu_seconds": float(cpu_seconds),
        "ms_per_sample": 1000.0 * float(seconds) / n_test,
        "threads": int(threads),
    }
    for name, values in (stats or {}).items():
        values = np.asarray(values)
        if values.shape != (n_test,):
            raise ValueError(f"{method} {utility}: statistic {name!r} has shape {values.shape}, expected ({n_test},)")
        record[f"mean_{name}"] = float(values.mean())
    record.update(params)
    return record


def write_timing(path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """Write a timing record as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(dict(record), indent=2) + "\n")


def read_timing(path: str | os.PathLike) -> dict[str, Any]:
    """Read a timing JSON written by :func:`write_timing`.

    Raises
    ------
    ValueError
        The file is missing, not a JSON object, lacks a key of :data:`TIMING_KEYS`, or its
        ``ms_per_sample`` is not a positive number (the message names the file and the key).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(record).__name__}")
    for key in TIMING_KEYS:
        if key not in record:
            raise ValueError(f"{path}: missing key {key!r}")
    ms = record["ms_per_sample"]
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms > 0:
        raise ValueError(f"{path}: key 'ms_per_sample' must be a positive number, got {ms!r}")
    return record


#: Columns of :func:`rule_costs`.
RULE_COST_COLUMNS = ("dataset", "rule", "jobs", "wall_s", "max_job_wall_s", "cpu_s", "peak_rss_mb")


def rule_costs(bench_dir: str | os.PathLike, datasets: list[str] | tuple[str, ...] = ()):
    """Cost of every rule per dataset, from Snakemake's ``benchmark:`` files.

    The pipeline writes one tab-separated file per job to
    ``results/benchmarks/<rule>/<wildcards>.tsv`` (Snakemake's columns ``s`` wall seconds,
    ``cpu_time`` CPU seconds, ``max_rss`` peak resident MB, one row per repeat).  A file belongs
    to the dataset whose name starts its wildcards (``{dataset}`` or ``{dataset}_...``; the
    longest matching name wins); files of rules without a dataset (tables, report) go to ``""``.

    Parameters
    ----------
    bench_dir : path
        The benchmarks folder (``results/benchmarks``).
    datasets : sequence of str
        Dataset names to attribute files to; files of other datasets are left out.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`RULE_COST_COLUMNS`: per (dataset, rule) the number of jobs, the summed
        wall and CPU seconds, the longest job's wall seconds and the largest peak RSS of any job
        (MB), sorted by dataset then decreasing CPU seconds.

    Raises
    ------
    ValueError
        A benchmark file without the ``s``, ``cpu_time`` or ``max_rss`` column (named).
    """
    import pandas as pd

    names = sorted(datasets, key=len, reverse=True)
    records = []
    for path in sorted(Path(bench_dir).glob("*/*.tsv")):
        rule, stem = path.parent.name, path.stem
        owner = next((d for d in names if stem == d or stem.startswith(d + "_")), None)
        if owner is None:
            if any(stem.startswith(prefix) for prefix in ("tables", "report")) or not names:
                owner = ""
            else:
                continue
        table = pd.read_csv(path, sep="\t")
        missing = {"s", "cpu_time", "max_rss"} - set(table.columns)
        if missing:
            raise ValueError(f"{path}: not a Snakemake benchmark file (no column {sorted(missing)})")
        row = table.iloc[-1]
        rss = pd.to_numeric(pd.Series([row["max_rss"]]), errors="coerce").iloc[0]
        records.append({"dataset": owner, "rule": rule, "wall_s": float(row["s"]),
                        "cpu_s": float(row["cpu_time"]), "peak_rss_mb": float(rss)})
    if not records:
        return pd.DataFrame(columns=list(RULE_COST_COLUMNS))
    df = pd.DataFrame(records)
    out = df.groupby(["dataset", "rule"], sort=False).agg(
        jobs=("wall_s", "size"), wall_s=("wall_s", "sum"), max_job_wall_s=("wall_s", "max"),
        cpu_s=("cpu_s", "sum"), peak_rss_mb=("peak_rss_mb", "max"),
    ).reset_index()
    return out.sort_values(["dataset", "cpu_s"], ascending=[True, False], ignore_index=True)[list(RULE_COST_COLUMNS)]
