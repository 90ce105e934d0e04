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

__all__ = ["TIMING_KEYS", "read_timing", "time_predictions", "timing_record", "write_timing"]

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
