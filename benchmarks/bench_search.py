"""Speed of SVBOP-Full inference (`svbop.predict_sets`) against the obvious alternatives.

Builds a (10,000 x 12,000) matrix of realistic class probabilities (softmax of Gaussian scores
at a few temperatures, LSHTC1/DMOZ-sized K) and times, in one run on the same matrix:

* ``predict_sets`` for F1 and credal(2.2, 1.2);
* a plain full row-wise ``np.sort`` of the matrix (what Algorithm 2 does first);
* one bare pass over the matrix (``P.max(axis=1)``): the memory-bandwidth floor;
* a per-row Python loop implementing Algorithm 1 naively (full argsort, then the scan).

and prints the times and their ratios.  Target: ``predict_sets`` <= 0.25 x the ``np.sort`` time.  ``predict_sets`` runs single-threaded
unless ``n_jobs`` is given; both are printed.

    python benchmarks/bench_search.py [--rows 10000] [--classes 12000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import svbop


def make_probabilities(n: int, K: int, temperatures=(0.25, 0.5, 1.0), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    P = np.empty((n, K))
    block = 500
    for i, start in enumerate(range(0, n, block)):
        Z = rng.standard_normal((min(block, n - start), K)) / temperatures[i % len(temperatures)]
        Z -= Z.max(axis=1, keepdims=True)
        np.exp(Z, out=Z)
        Z /= Z.sum(axis=1, keepdims=True)
        P[start : start + Z.shape[0]] = Z
    return P


def naive_algorithm1(P: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    out = []
    for p in P:
        order = np.argsort(-p)
        mass, best_u, best = 0.0, -1.0, 0
        for s, c in enumerate(order, start=1):
            mass += p[c]
            u = g[s - 1] * mass
            if u >= best_u:
                best_u, best = u, s
            else:
                break
        out.append(order[:best])
    return out


def best_of(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--classes", type=int, default=12_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive-rows", type=int, default=None, help="rows for the naive loop (default: all)")
    args = ap.parse_args()

    P = make_probabilities(args.rows, args.classes)
    n, K = P.shape
    print(f"matrix: {n} x {K} float64 ({P.nbytes / 2**20:.0f} MiB), temperatures 0.25/0.5/1.0")
    t_pass = best_of(lambda: P.max(axis=1), args.repeat)
    t_sort = best_of(lambda: np.sort(P, axis=1), args.repeat)
    print(f"{'bare pass P.max(axis=1)':38s} {t_pass * 1e3:9.1f} ms   1.00 x pass")
    print(f"{'full np.sort(P, axis=1)':38s} {t_sort * 1e3:9.1f} ms {t_sort / t_pass:6.2f} x pass")
    for spec in ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2"]:
        u = svbop.utility(spec, K=K)
        u.properties()  # exact property check, cached: not part of the per-matrix cost
        sets = svbop.predict_sets(P, u)
        t = best_of(lambda: svbop.predict_sets(P, u), args.repeat)
        t_par = best_of(lambda: svbop.predict_sets(P, u, n_jobs=-1), args.repeat)
        m = args.naive_rows or n
        t0 = time.perf_counter()
        naive = naive_algorithm1(P[:m], u.values())
        t_naive = (time.perf_counter() - t0) * n / m
        agree = all(np.array_equal(a, b) for a, b in zip(naive, sets[:m]))
        print(
            f"{'predict_sets ' + spec:38s} {t * 1e3:9.1f} ms {t / t_pass:6.2f} x pass"
            f"  {t / t_sort:5.3f} x sort   mean |Y| = {sets.sizes.mean():.2f}"
        )
        print(
            f"{'  same, n_jobs=-1 (' + str(os.cpu_count()) + ' cores)':38s} {t_par * 1e3:9.1f} ms {t_par / t_pass:6.2f} x pass"
            f"  {t_par / t_sort:5.3f} x sort"
        )
        print(
            f"{'naive per-row Algorithm 1 ' + u.label:38s} {t_naive * 1e3:9.1f} ms {t_naive / t_pass:6.1f} x pass"
            f"  {t_naive / t_sort:5.2f} x sort   predict_sets is {t_naive / t:5.1f} x faster;"
            f" same sets: {agree}"
        )


if __name__ == "__main__":
    main()
