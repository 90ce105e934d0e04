"""Shared test helpers: brute-force oracles and a naive Algorithm 1."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: benchmarks/ is importable from the tests: its generators (extreme_problem, bench_anchors.real_like) and
#: TorchCP's import stand-ins (stand_ins) serve both
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

#: The sections of results/report.html, in the paper's order (``<section id=...>``).
REPORT_SECTIONS = ("status", "utilities", "datasets", "illustrations", "predictions", "algorithms", "claims",
                   "hyperparameters", "genreject", "what-was-run", "downloads")


def need_shared_data(folder: str, what: str = "real public data, see its README") -> Path:
    """The folder ``../shared/data/<folder>``, or skip the test saying what is missing."""
    path = SHARED_DATA / folder
    if not path.is_dir():
        pytest.skip(f"needs ../shared/data/{folder} ({what}); absent")
    return path


def brute_force_best(p: np.ndarray, g: np.ndarray):
    """Every non-empty subset: (best expected utility, best expected utility per set size)."""
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    K = p.size
    best_by_size = np.full(K, -np.inf)
    for s in range(1, K + 1):
        for subset in itertools.combinations(range(K), s):
            best_by_size[s - 1] = max(best_by_size[s - 1], g[s - 1] * p[list(subset)].sum())
    return best_by_size.max(), best_by_size


def naive_algorithm1(p: np.ndarray, g: np.ndarray, early_stop: bool, rho: float = 1e-9):
    """Per-row reference implementation of Algorithm 1 (full sort, Python loop)."""
    order = np.argsort(-np.asarray(p, dtype=np.float64), kind="stable")
    mass, running, best = 0.0, -np.inf, 0
    for s, c in enumerate(order, start=1):
        mass += float(p[c])
        U = g[s - 1] * mass
        if U >= (1 - rho) * running:
            best, running = s, max(running, U)
        elif early_stop:
            break
    return order[:best]


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def text():
    """scikit-learn's text module (the reference for the tf-idf tests), or skip without it."""
    return pytest.importorskip("sklearn.feature_extraction.text")
