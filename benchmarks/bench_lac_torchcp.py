"""LAC's fit + predict_mask beside TorchCP's from K = 100 to 10,000 (issue 58, item 2).

svbop: ``ConformalSetPredictor(0.1, score="lac").fit(P_cal, y_cal).predict_mask(P_test)``; TorchCP
1.2: ``SplitPredictor(LAC())`` ``calculate_threshold`` + ``predict_with_logits`` on ``log(P)`` as
float64 tensors.  One thread each; the two interleaved three times, each time the median of
``--repeat`` calls (21 at K = 100, 7 above); the median of the three printed.  Outputs:
``bench_anchors.real_like``.  TorchCP from ``/tmp/anchors`` or the environment (``tests/anchors.py``).

    python benchmarks/bench_lac_torchcp.py
"""

from __future__ import annotations

import os
import sys

import numpy as np
from threadpoolctl import threadpool_limits

import svbop
from _timing import median_time
from bench_anchors import real_like
from stand_ins import StandIns

SIZES = ((100, 5000, 5000), (1000, 10000, 10000), (10000, 2000, 2000))


def main() -> None:
    sys.path.append(os.environ.get("SVBOP_ANCHORS", "/tmp/anchors"))
    sys.meta_path.append(StandIns())
    import torch
    from torchcp.classification.predictor import SplitPredictor
    from torchcp.classification.score import LAC

    torch.set_num_threads(1)
    print(f"one thread; {os.uname().machine}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} at start")
    with threadpool_limits(1):
        for K, n_cal, n_test in SIZES:
            P, y = real_like(np.random.default_rng(0), n_cal + n_test, K)
            P_cal, y_cal, P_test = P[:n_cal], y[:n_cal], P[n_cal:]
            L_cal = torch.from_numpy(np.log(np.maximum(P_cal, 1e-300)))
            L_test = torch.from_numpy(np.log(np.maximum(P_test, 1e-300)))
            t_cal = torch.from_numpy(y_cal)

            def ours():
                return svbop.ConformalSetPredictor(0.1, score="lac").fit(P_cal, y_cal).predict_mask(P_test)

            def theirs():
                p = SplitPredictor(LAC())
                p.calculate_threshold(L_cal, t_cal, 0.1)
                return p.predict_with_logits(L_test)

            ours(), theirs()
            repeat = 21 if K == 100 else 7
            a, b = [], []
            for _ in range(3):
                a.append(median_time(ours, repeat)[0])
                b.append(median_time(theirs, repeat)[0])
            a, b = float(np.median(a)), float(np.median(b))
            print(f"K = {K:>6}, {n_cal} / {n_test} rows: svbop {a * 1e3:8.2f} ms  TorchCP {b * 1e3:8.2f} ms"
                  f"  TorchCP / svbop {b / a:5.2f}", flush=True)
    print(f"load {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
