"""Speed of the conformal set predictors (`svbop.ConformalSetPredictor`) beside `svbop.predict_sets`.

Builds (by default) a 10,000 x 10,000 matrix of class probabilities (softmax of Gaussian scores
at a few temperatures, as in bench_search.py) for prediction and a smaller calibration matrix
with labels drawn from its probabilities, and times, in one run on the same matrices:

* ``predict_sets`` for F1 (the paper's Bayes-optimal sets), the reference, and a full row-wise
  ``np.sort`` for scale (sets of thousands of classes cost about a sort);
* ``fit`` and ``predict`` of every conformal score: LAC, APS, RAPS, class-conditional LAC and
  APS, and the Bayes-optimal F-beta and credal(gamma=0.6) sets with a coverage guarantee (credal
  at the smallest of epsilon, 0.5, 0.7, 0.9 its largest sets reach: they hold a few classes);

With fewer calibration rows per class than ``ceil(1/epsilon) - 1``, a class's threshold is
infinite and it is in every class-conditional set: with 10,000 classes and 2,000 calibration
rows that is every class, the worst case of the class-conditional predictors.

and prints the times, their ratio to ``predict_sets`` and the mean set size.  Not a test.

    python benchmarks/bench_conformal.py [--rows 10000] [--classes 10000] [--cal 2000] [--epsilon 0.1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import svbop

from bench_search import best_of, make_probabilities

CONFIGS = [
    ("lac", dict(score="lac")),
    ("aps deterministic", dict(score="aps", randomized=False)),
    ("aps randomised", dict(score="aps", random_state=0)),
    ("raps k_reg=5 lam=0.01 deterministic", dict(score="raps", k_reg=5, lam=0.01, randomized=False)),
    ("saps lam=0.2 randomised", dict(score="saps", random_state=0)),
    ("topk", dict(score="topk")),
    ("lac class-conditional", dict(score="lac", class_conditional=True)),
    ("aps class-conditional deterministic", dict(score="aps", class_conditional=True, randomized=False)),
    ("fbeta (beta calibrated)", dict(score="fbeta")),
    ("credal gamma=0.6 (delta calibrated)", dict(score="credal", gamma=0.6)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--classes", type=int, default=10_000)
    ap.add_argument("--cal", type=int, default=2_000, help="calibration rows")
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="time only the scores whose name contains one of these")
    args = ap.parse_args()

    P = make_probabilities(args.rows, args.classes, seed=0)
    P_cal = make_probabilities(args.cal, args.classes, seed=1)
    rng = np.random.default_rng(2)
    y_cal = np.minimum((P_cal.cumsum(axis=1) < rng.random((args.cal, 1))).sum(axis=1), args.classes - 1)
    n, K = P.shape
    print(f"predict on {n} x {K} float64 ({P.nbytes / 2**20:.0f} MiB); calibrate on {args.cal} rows; epsilon {args.epsilon}")
    u = svbop.utility("fbeta:beta=1", K=K)
    u.properties()
    t_ref = best_of(lambda: svbop.predict_sets(P, u), args.repeat)
    ref = svbop.predict_sets(P, u)
    print(f"{'predict_sets fbeta:beta=1':40s} {'':>10s} {t_ref * 1e3:9.1f} ms  1.00 x   mean |Y| = {ref.sizes.mean():.2f}")
    t_sort = best_of(lambda: np.sort(P, axis=1), 1)
    print(f"{'full np.sort(P, axis=1), for scale':40s} {'':>10s} {t_sort * 1e3:9.1f} ms {t_sort / t_ref:5.2f} x")
    print(f"{'conformal score':40s} {'fit':>10s} {'predict':>12s}")
    for name, kw in CONFIGS:
        if args.only and not any(o in name for o in args.only):
            continue
        # credal's largest sets (delta = gamma) hold a few classes: the smallest epsilon they reach
        for eps in [args.epsilon] + ([0.5, 0.7, 0.9] if kw["score"] == "credal" else []):
            model = svbop.ConformalSetPredictor(eps, **kw)
            t0 = time.perf_counter()
            try:
                model.fit(P_cal, y_cal)
                break
            except ValueError as e:
                print(f"{name:40s} epsilon {eps} refused: {str(e)[:90]}...")
        else:
            continue
        t_fit = time.perf_counter() - t0
        if hasattr(model, "utility_"):
            model.utility_.properties(K)  # cached, as for the reference
        t = best_of(lambda: model.predict(P), args.repeat)
        sets = model.predict(P)
        extra = f"  parameter {model.parameter_:.6g}" if hasattr(model, "parameter_") else ""
        extra += f"  (epsilon {eps})" if eps != args.epsilon else ""
        print(
            f"{name:40s} {t_fit * 1e3:8.0f} ms {t * 1e3:9.1f} ms {t / t_ref:5.2f} x   mean |Y| = {sets.sizes.mean():.2f}{extra}"
        )


if __name__ == "__main__":
    main()
