"""The wall-clock timer the issue-43/44 benchmark scripts share (run as ``python benchmarks/<script>.py``,
so this folder is on ``sys.path``)."""

from __future__ import annotations

import statistics
import time


def median_time(f, repeat: int):
    """``(median seconds of `repeat` calls of f(), what the last call returned)``."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out
