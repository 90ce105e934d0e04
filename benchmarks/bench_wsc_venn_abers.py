"""svbop's worst-slab coverage and Venn-Abers calibration beside their anchors, in one run (issue 48).

* WSC: ``svbop.metrics.worst_slab_coverage`` against TorchCP 1.2.1's ``calWSC`` + ``wsc_vab`` with the
  coverage indicators passed where they belong (the same split and directions: the same number);
* Venn-Abers: ``svbop.calibration.VennAbersMultiClass`` (fit + predict_proba) against the
  ``venn-abers`` package's ``predict_proba_prefitted_va(va_tpe="one_vs_rest")`` (the same probabilities).

Both anchors optional (``pip install --no-deps --target /tmp/anchors torchcp==1.2.1 venn-abers``,
then ``PYTHONPATH=/tmp/anchors``).  One thread, median of ``--repeat`` runs.

    python benchmarks/bench_wsc_venn_abers.py [--repeat 3] [--wsc-rows 4000] [--directions 100]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from threadpoolctl import threadpool_limits

from _timing import median_time
from bench_anchors import real_like
from stand_ins import StandIns
from svbop.calibration import VennAbersMultiClass
from svbop.metrics import worst_slab_coverage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--wsc-rows", type=int, default=4000)
    ap.add_argument("--directions", type=int, default=100)
    ap.add_argument("--va", nargs="*", default=["10:5000:5000", "100:5000:5000"], help="K:calibration rows:test rows")
    args = ap.parse_args()
    sys.meta_path.append(StandIns())
    from sklearn.model_selection import train_test_split
    from torchcp.classification.utils import metrics as tm
    from venn_abers.venn_abers import predict_proba_prefitted_va

    print(f"median of {args.repeat}; one thread; load {os.getloadavg()[0]:.2f} at start")
    with threadpool_limits(1):
        n, d, M = args.wsc_rows, 10, args.directions
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, d))
        y = rng.integers(0, 5, n)
        mask = rng.random((n, 5)) < 0.4
        mask[np.arange(n), y] = rng.random(n) < np.where(X[:, 0] > 0.5, 0.6, 0.95)

        def ours():
            return worst_slab_coverage(mask, y, X, M=M)

        def theirs():
            covered = mask[np.arange(n), y]
            Xtr, Xte, ytr, yte, ctr, cte = train_test_split(X, y, covered, test_size=0.75, random_state=2020)
            _, v, a, b = tm.calWSC(Xtr, ytr, ctr, delta=0.1, M=M, random_state=2020, verbose=False)
            return tm.wsc_vab(Xte, yte, cte, v, a, b)

        t_o, w_o = median_time(ours, args.repeat)
        t_t, w_t = median_time(theirs, args.repeat)
        print(f"WSC n={n} d={d} M={M}: svbop {t_o * 1e3:.1f} ms, TorchCP {t_t * 1e3:.1f} ms, ratio {t_t / t_o:.1f};"
              f" WSC {w_o:.4f} / {w_t:.4f}")
        for size in args.va:
            K, n_cal, n_test = map(int, size.split(":"))
            P, y = real_like(np.random.default_rng(K), n_cal + n_test, K)
            P_cal, y_cal, P_test = P[:n_cal], y[:n_cal], P[n_cal:]
            t_o, Q_o = median_time(lambda: VennAbersMultiClass().fit(P_cal, y_cal).predict_proba(P_test), args.repeat)
            t_t, (Q_t, _) = median_time(lambda: predict_proba_prefitted_va(P_cal, y_cal, P_test, va_tpe="one_vs_rest"),
                                        args.repeat)
            print(f"Venn-Abers one-vs-rest K={K} {n_cal}/{n_test}: svbop {t_o:.2f} s, venn-abers {t_t:.2f} s,"
                  f" ratio {t_t / t_o:.2f}; max |difference| {np.abs(Q_o - Q_t).max():.1e}")
    print(f"load {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
