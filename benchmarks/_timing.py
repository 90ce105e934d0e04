"""What the benchmark scripts share: the wall-clock timer of issues 43/44 and the CPU's name (run as
``python benchmarks/<script>.py``, so this folder is on ``sys.path``)."""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path


def median_time(f, repeat: int):
    """``(median seconds of `repeat` calls of f(), what the last call returned)``."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``; where it cannot be read, what :mod:`platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
