"""Test time of the set predictors, as the paper's Table 4 reports it (milliseconds per test sample).

The pipeline's ``predict_svbop_*`` rules time a predictor on all test rows with
:func:`time_predictions` (the median of ``timing: repeats`` calls, 3 by default, with their spread
and the machine's load average before and after), and write :func:`timing_record` as JSON beside the sets
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
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .io import atomic_path

__all__ = ["REPEAT_KEYS", "TIMING_KEYS", "Timing", "read_timing", "rule_costs", "time_predictions", "timing_record", "write_timing"]

T = TypeVar("T")

#: Keys every timing record holds (method-specific statistics may follow).
TIMING_KEYS = ("method", "utility", "n_test", "seconds", "cpu_seconds", "ms_per_sample", "threads")


#: Keys a record of several repeats adds (:func:`timing_record` given a :class:`Timing`); a record
#: without them (one measurement, as svbop wrote them before) reads as one repeat, load unknown.
REPEAT_KEYS = ("repeats", "ms_per_sample_min", "ms_per_sample_max", "seconds_each", "load_start", "load_end",
               "cpu_count")


@dataclass(frozen=True)
class Timing:
    """Wall and CPU seconds of repeated calls of a predictor, and the machine's load around them.

    Attributes
    ----------
    wall, cpu : tuple of float
        Seconds of each timed call (``time.perf_counter``, ``time.process_time``).
    load_start, load_end : tuple of float
        ``os.getloadavg()`` (1, 5 and 15 minutes) before the first and after the last call.
    cpu_count : int
        CPUs of the machine (``os.cpu_count()``).
    """

    wall: tuple[float, ...]
    cpu: tuple[float, ...]
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    cpu_count: int

    @property
    def seconds(self) -> float:
        """Median wall seconds of one call."""
        return float(np.median(self.wall))

    @property
    def cpu_seconds(self) -> float:
        """Median CPU seconds of one call."""
        return float(np.median(self.cpu))


def _loadavg() -> tuple[float, float, float]:
    try:
        return tuple(float(x) for x in os.getloadavg())  # type: ignore[return-value]
    except OSError:  # pragma: no cover - not available on this platform
        return (math.nan, math.nan, math.nan)


def time_predictions(predict: Callable[[Any], T], X: Any, *, warmup: bool = True, repeats: int = 1) -> tuple[T, Timing]:
    """Call ``predict(X)`` ``repeats`` times and measure each call.

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
    repeats : int, default 1
        Timed calls of ``predict(X)``; :attr:`Timing.seconds` is their median.  One time of one
        call moves with the machine's load (the same algorithm's time varied 4x between utilities
        of one run): the pipeline times 3 (config ``timing: repeats``).

    Returns
    -------
    result
        What the last ``predict(X)`` returned.
    timing : Timing
        Wall and CPU seconds of every call, and the load average before and after them.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    if warmup and X.shape[0]:
        predict(X[:1])
    load_start, walls, cpus = _loadavg(), [], []
    for _ in range(int(repeats)):
        wall, cpu = time.perf_counter(), time.process_time()
        result = predict(X)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return result, Timing(tuple(walls), tuple(cpus), load_start, _loadavg(), os.cpu_count() or 1)


def timing_record(
    method: str,
    utility: str,
    n_test: int,
    seconds: float | Timing,
    cpu_seconds: float | None = None,
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
    seconds : Timing or float
        What :func:`time_predictions` measured; or the wall seconds of one call (then
        ``cpu_seconds`` is its CPU seconds, and the record has no spread or load).
    cpu_seconds : float, optional
        CPU seconds of that one call (only with a float ``seconds``).
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
        :data:`TIMING_KEYS`, with ``seconds``/``cpu_seconds`` the median over the repeats and
        ``ms_per_sample = 1000 * seconds / n_test``; given a :class:`Timing` also
        :data:`REPEAT_KEYS` (the number of repeats, the fastest and slowest repeat in ms per
        sample, every repeat's seconds, the 1/5/15-minute load average before and after, the
        CPU count); then ``mean_<name>`` per statistic and ``params``.
    """
    n_test = int(n_test)
    if n_test < 1:
        raise ValueError(f"{method} {utility}: n_test must be at least 1, got {n_test}")
    timing = seconds if isinstance(seconds, Timing) else None
    if timing is None and cpu_seconds is None:
        raise ValueError(f"{method} {utility}: cpu_seconds is needed with a number of seconds (or pass a Timing)")
    if timing is not None and cpu_seconds is not None:
        raise ValueError(f"{method} {utility}: cpu_seconds comes from the Timing; pass one or the other")
    wall = timing.seconds if timing is not None else float(seconds)
    record = {
        "method": str(method),
        "utility": str(utility),
        "n_test": n_test,
        "seconds": wall,
        "cpu_seconds": timing.cpu_seconds if timing is not None else float(cpu_seconds),
        "ms_per_sample": 1000.0 * wall / n_test,
        "threads": int(threads),
    }
    if timing is not None:
        record.update({
            "repeats": len(timing.wall),
            "ms_per_sample_min": 1000.0 * min(timing.wall) / n_test,
            "ms_per_sample_max": 1000.0 * max(timing.wall) / n_test,
            "seconds_each": [float(t) for t in timing.wall],
            "load_start": [float(x) for x in timing.load_start],
            "load_end": [float(x) for x in timing.load_end],
            "cpu_count": int(timing.cpu_count),
        })
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

    A record of one measurement (no :data:`REPEAT_KEYS`, as svbop wrote them before it timed
    repeats) reads as one repeat: ``repeats`` 1, ``ms_per_sample_min`` and ``_max`` equal to
    ``ms_per_sample``, the load and CPU count ``None`` (unknown).

    Raises
    ------
    ValueError
        The file is missing, not a JSON object, lacks a key of :data:`TIMING_KEYS`, its
        ``ms_per_sample`` is not a positive number, or a key of :data:`REPEAT_KEYS` is malformed
        (repeats not a positive integer, the median outside min..max, a load not three numbers)
        (the message names the file and the key).
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
    return _repeat_keys(path, record)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _repeat_keys(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Check the keys of repeated timing, or fill them for a record of one measurement."""
    if "repeats" not in record:  # one measurement (svbop before repeats): no spread, load unknown
        record.update(repeats=1, ms_per_sample_min=record["ms_per_sample"], ms_per_sample_max=record["ms_per_sample"],
                      seconds_each=[record["seconds"]], load_start=None, load_end=None, cpu_count=None)
        return record
    repeats = record["repeats"]
    if not (isinstance(repeats, int) and not isinstance(repeats, bool) and repeats >= 1):
        raise ValueError(f"{path}: key 'repeats' must be a positive integer, got {repeats!r}")
    for key in REPEAT_KEYS[1:]:
        if key not in record:
            raise ValueError(f"{path}: missing key {key!r} (a record of {repeats} repeats has {', '.join(REPEAT_KEYS)})")
    lo, ms, hi = record["ms_per_sample_min"], record["ms_per_sample"], record["ms_per_sample_max"]
    if not (_is_number(lo) and _is_number(hi) and 0 < lo <= ms * (1 + 1e-9) and ms <= hi * (1 + 1e-9)):
        raise ValueError(f"{path}: keys 'ms_per_sample_min' {lo!r} <= 'ms_per_sample' {ms!r} <= 'ms_per_sample_max' "
                         f"{hi!r} must be positive numbers in that order")
    each = record["seconds_each"]
    if not (isinstance(each, list) and len(each) == repeats and all(_is_number(t) and t >= 0 for t in each)):
        raise ValueError(f"{path}: key 'seconds_each' must be a list of {repeats} non-negative numbers, got {each!r}")
    for key in ("load_start", "load_end"):
        load = record[key]
        if not (isinstance(load, list) and len(load) == 3 and all(_is_number(x) and x >= 0 for x in load)):
            raise ValueError(f"{path}: key {key!r} must be the 1, 5 and 15-minute load averages (three numbers >= 0), "
                             f"got {load!r}")
    cpus = record["cpu_count"]
    if not (isinstance(cpus, int) and not isinstance(cpus, bool) and cpus >= 1):
        raise ValueError(f"{path}: key 'cpu_count' must be a positive integer, got {cpus!r}")
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
