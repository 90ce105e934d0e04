"""Mondrian calibration with many groups (issue 44): ``fit`` and ``predict`` of
``ConformalSetPredictor`` with ``--groups`` distinct groups of ``--per-group`` rows each (every group
too small at ``--per-group 2``: the marginal threshold), beside the same predictor without groups.

Before the one-pass Mondrian code, ``predict`` called the set machinery once per group (about
0.5 ms a group: 35-60 s at 10^5 groups); now the threshold scores take one pass whatever the
number of groups.  Median of ``--repeat`` runs, one thread.  Not a test.

    python benchmarks/bench_conformal_groups.py [--groups 100000] [--per-group 2] [--classes 10]
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

import svbop
from _timing import median_time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--per-group", type=int, default=2)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.groups * args.per_group
    P = rng.dirichlet(np.ones(args.classes), size=2 * n)
    y = rng.integers(0, args.classes, 2 * n)
    g = np.tile(np.repeat(np.arange(args.groups), args.per_group), 2)
    print(f"{args.groups} groups x {args.per_group} rows, K = {args.classes}; load {os.getloadavg()[0]:.2f}")
    warnings.simplefilter("ignore", svbop.conformal.GroupCalibrationWarning)
    with threadpool_limits(1):
        for score, kw in (("lac", {}), ("aps", {"random_state": 0}), ("fbeta", {})):
            model = svbop.ConformalSetPredictor(0.1, score=score, **kw)
            t_fit = median_time(lambda: model.fit(P[:n], y[:n], groups=g[:n]), args.repeat)[0]
            t_pred = median_time(lambda: model.predict(P[n:], groups=g[n:]), args.repeat)[0]
            plain = svbop.ConformalSetPredictor(0.1, score=score, **kw)
            t_fit0 = median_time(lambda: plain.fit(P[:n], y[:n]), args.repeat)[0]
            t_pred0 = median_time(lambda: plain.predict(P[n:]), args.repeat)[0]
            print(f"{score:6s} fit {t_fit:7.3f} s (no groups {t_fit0:6.3f} s)   predict {t_pred:7.3f} s"
                  f" (no groups {t_pred0:6.3f} s)")


if __name__ == "__main__":
    main()
