"""Counting cores and checking job counts: the bottom layer, imported by the compiled kernels
(:mod:`svbop._kernels`) as well as by the models, so it imports nothing of svbop."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["cpu_count"]


def cpu_count() -> int:
    """Cores this process may run on (``sched_getaffinity`` where available)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _positive_int(name: str, value: Any, allow_all: bool = False) -> int:
    """``value`` as an int >= 1 (or -1 for "every core" when ``allow_all``), else ValueError."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if ok and (value >= 1 or (allow_all and value == -1)):
        return int(value)
    expected = "a positive integer or -1" if allow_all else "a positive integer"
    raise ValueError(f"{name} must be {expected}, got {value!r}")


def _n_workers(name: str, n_jobs: Any) -> int:
    """A job count (``-1``: every available core) checked and resolved to a number of workers."""
    n_jobs = _positive_int(name, n_jobs, allow_all=True)
    return cpu_count() if n_jobs == -1 else n_jobs


def _chunk_workers(n_jobs: Any, n_chunks: int) -> int:
    """Threads for ``n_chunks`` chunks by scikit-learn's convention: None or 1 -> one thread, -1 -> every
    available core, -2 -> all but one; never more than the chunks."""
    if n_jobs is None:
        return 1
    if not isinstance(n_jobs, (int, np.integer)) or isinstance(n_jobs, bool) or n_jobs == 0:
        raise ValueError(f"n_jobs must be a non-zero integer or None, got {n_jobs!r}")
    workers = int(n_jobs) if n_jobs > 0 else max(1, cpu_count() + 1 + int(n_jobs))
    return max(1, min(workers, n_chunks))
