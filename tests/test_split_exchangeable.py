"""Issue 47: every split of rows into parts is a stratified random draw, exchangeable with the test rows.

The old order put every class's first row before any class's second row, so a part dealt first
(``split.calibration: auto`` with ``--validation`` given, or no validation) took one row of every
tail class: with a long tail that is easier than the head, ICP covered far below ``1 - epsilon``.
Here a long tail (10 head classes of 300 rows, 400 tail classes of 1 to 4 rows) whose difficulty
differs from the head's is split over many seeds, and ICP's mean test coverage must lie in
``[1 - epsilon, 1 - epsilon + 1/(n+1)]`` (up to 4 standard errors), the calibration part must hold
the tail in the same share as the test part, and within a class the rows must be drawn at random.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from svbop.datasets import make_split
from svbop.datasets.calibration_share import auto_calibration_rows
from svbop.datasets.outputs import split_model_outputs

EPSILON = 0.1
SEEDS = 300


def long_tail(tail_easy: bool, seed: int = 0):
    """Labels, LAC scores (``1 - P(y|x)``) and the tail mask of a long tail of classes."""
    rng = np.random.default_rng(seed)
    counts = np.r_[np.full(10, 300), rng.integers(1, 5, size=400)]
    y = np.repeat(np.arange(counts.size), counts)
    tail = counts[y] < 300
    easy, hard = rng.uniform(0.0, 0.3, y.size), rng.uniform(0.3, 1.0, y.size)
    s = np.where(tail == tail_easy, easy, hard)
    return y, s, tail


def icp_coverage(s, cal, test) -> tuple[float, int]:
    c = s[cal]
    k = math.ceil((c.size + 1) * (1 - EPSILON))
    q = np.partition(c, k - 1)[k - 1] if k <= c.size else np.inf
    return float(np.mean(s[test] <= q)), c.size


def assert_guarantee(coverages, n_cal, tail_cal, tail_test, what):
    cov = np.asarray(coverages)
    se = cov.std(ddof=1) / math.sqrt(cov.size)
    mean = cov.mean()
    assert mean >= 1 - EPSILON - 4 * se, f"{what}: ICP covered {mean:.4f} < {1 - EPSILON} over {cov.size} splits"
    assert mean <= 1 - EPSILON + 1 / (min(n_cal) + 1) + 4 * se, f"{what}: ICP covered {mean:.4f}, above its bound"
    # the same share of the tail in the calibration part as in the test part
    gap = np.mean(tail_cal) - np.mean(tail_test)
    spread = np.std(np.asarray(tail_cal) - np.asarray(tail_test), ddof=1) / math.sqrt(len(tail_cal))
    assert abs(gap) <= 4 * spread + 0.005, f"{what}: tail share {np.mean(tail_cal):.3f} in calibration, " \
                                           f"{np.mean(tail_test):.3f} in test"


@pytest.mark.parametrize("tail_easy", [True, False])
@pytest.mark.parametrize("validation_given", [True, False])
def test_auto_calibration_split_keeps_the_guarantee_on_a_long_tail(tail_easy, validation_given):
    y, s, tail = long_tail(tail_easy)
    part = np.full(y.size, "test")
    if validation_given:  # svbop report --validation: the calibration part is the first dealt
        part[np.random.default_rng(1).random(y.size) < 0.1] = "validation"
    covs, ns, tail_cal, tail_test = [], [], [], []
    for seed in range(SEEDS):
        rows = auto_calibration_rows(y, part, {"validation": 0.1}, rows_per_class=9, seed=seed)["rows"]
        split = split_model_outputs(y, part, {"validation": 0.1, "calibration": rows}, seed=seed)
        cov, n = icp_coverage(s, split["calibration"], split["test"])
        covs.append(cov)
        ns.append(n)
        tail_cal.append(tail[split["calibration"]].mean())
        tail_test.append(tail[split["test"]].mean())
        if not validation_given:
            assert abs(tail[split["validation"]].mean() - tail_test[-1]) < 0.1
    assert_guarantee(covs, ns, tail_cal, tail_test, f"split.calibration: auto (tail easy: {tail_easy})")


@pytest.mark.parametrize("tail_easy", [True, False])
@pytest.mark.parametrize("sizes", [{"validation": 0.1, "calibration": 0.1, "test": 0.2},
                                   {"validation": 0.1, "calibration": 0.1, "test": 0.7}])
def test_make_split_calibration_is_exchangeable_with_test(tail_easy, sizes):
    y, s, tail = long_tail(tail_easy)
    covs, ns, tail_cal, tail_test = [], [], [], []
    for seed in range(SEEDS):
        split = make_split(y.size, sizes, seed=seed, y=y, small_classes="drop")  # drop: no warning per split
        cov, n = icp_coverage(s, split["calibration"], split["test"])
        covs.append(cov)
        ns.append(n)
        tail_cal.append(tail[split["calibration"]].mean())
        tail_test.append(tail[split["test"]].mean())
        # every class's first row trains (make_split's promise, when train has room for them)
        assert np.unique(y[split["train"]]).size == min(np.unique(y).size, split["train"].size)
    assert_guarantee(covs, ns, tail_cal, tail_test, f"make_split {sizes} (tail easy: {tail_easy})")


def test_every_row_is_equally_likely_in_a_part_whatever_its_class_size():
    """A part of share f holds each row with chance f: rows of a 1-row class as often as rows of a big one."""
    y = np.repeat(np.arange(60), np.r_[np.full(50, 1), np.full(10, 100)])
    part = np.full(y.size, "test")
    hits = np.zeros(y.size)
    for seed in range(2000):
        split = split_model_outputs(y, part, {"validation": 0, "calibration": 0.2}, seed=seed)
        hits[split["calibration"]] += 1
    rate = hits / 2000
    assert abs(rate[:50].mean() - 0.2) < 0.03, rate[:50].mean()  # old order: 1.0 (every singleton first)
    assert abs(rate[50:].mean() - 0.2) < 0.01
    assert rate.std() < 0.05


def test_subsample_is_a_stratified_draw():
    y = np.repeat(np.arange(60), np.r_[np.full(50, 1), np.full(10, 100)])
    kept = np.zeros(y.size)
    for seed in range(400):
        split = make_split(y.size, {"subsample": 0.25, "test": 0.2}, seed=seed, y=y, small_classes="drop")
        kept[np.concatenate([split[k] for k in split])] += 1
    rate = kept / 400
    assert abs(rate[:50].mean() - 0.25) < 0.05 and abs(rate[50:].mean() - 0.25) < 0.01
