"""Speed of hierarchy-restricted sets (`svbop.predict_sets_hierarchical`) beside `svbop.predict_sets`.

For K = 1,000 and 10,000 classes, builds a random class tree (random recursive splits into 2 to
``--branching`` parts, single-child chains, leaves at different depths, classes in random order)
and a matrix of realistic probabilities (softmax of Gaussian scores at temperatures 0.25, 0.5
and 1, as in ``bench_search.py``), then times in one run on the same matrix:

* ``predict_sets_hierarchical`` with ``max_nodes`` 1, 3 and 10;
* ``predict_sets`` (no restriction).

Prints ms per row, one thread, best of ``--repeat`` (after one warm-up call that also compiles).

    python benchmarks/bench_hierarchical.py [--rows 300] [--utility fbeta:beta=1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

import svbop
from svbop.datasets import Hierarchy


def random_tree(K: int, branching: int = 8, chain: float = 0.1, seed: int = 0) -> Hierarchy:
    rng = np.random.default_rng(seed)
    parent = np.full(K, -1, dtype=np.int64)
    inner: list[int] = []
    stack = [(list(rng.permutation(K)), -1)]  # (classes below, parent node)
    while stack:
        items, up = stack.pop()
        if len(items) == 1 and rng.random() >= chain:
            parent[items[0]] = up
            continue
        node = K + len(inner)
        inner.append(up)
        if len(items) == 1:
            stack.append((items, node))
            continue
        k = int(rng.integers(2, min(len(items), branching) + 1))
        cuts = np.sort(rng.choice(np.arange(1, len(items)), size=k - 1, replace=False))
        stack.extend((list(part), node) for part in np.split(np.asarray(items), cuts))
    parent_all = np.concatenate([parent, np.asarray(inner, dtype=np.int64)])
    return Hierarchy(parent_all, n_classes=K)


def make_probabilities(n: int, K: int, temperatures=(0.25, 0.5, 1.0), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, K)) / np.resize(np.asarray(temperatures), n)[:, None]
    Z -= Z.max(axis=1, keepdims=True)
    np.exp(Z, out=Z)
    Z /= Z.sum(axis=1, keepdims=True)
    return Z


def best_of(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--classes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--max-nodes", type=int, nargs="+", default=[1, 3, 10])
    ap.add_argument("--utility", default="fbeta:beta=1")
    ap.add_argument("--branching", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
          f"python {sys.version.split()[0]}, utility {args.utility}, {args.rows} rows, one thread")
    print(f"{'K':>6} {'nodes':>6} {'depth':>5} {'method':<28} {'ms/row':>9} {'mean |Y|':>8} {'mean EU':>8}")
    for K in args.classes:
        h = random_tree(K, args.branching)
        P = make_probabilities(args.rows, K)
        runs = [(f"predict_sets_hierarchical m={m}",
                 lambda m=m: svbop.predict_sets_hierarchical(P, args.utility, h, m)) for m in args.max_nodes]
        runs.append(("predict_sets", lambda: svbop.predict_sets(P, args.utility)))
        for name, f in runs:
            sets = f()  # warm-up (and numba compilation on the first call)
            t = best_of(f, args.repeat)
            print(f"{K:>6} {h.n_nodes:>6} {int(h.depth().max()):>5} {name:<28} {1e3 * t / args.rows:>9.3f} "
                  f"{np.diff(sets.indptr).mean():>8.2f} {sets.expected_utility.mean():>8.4f}", flush=True)


if __name__ == "__main__":
    main()
