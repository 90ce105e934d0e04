"""CPU seconds per class of the flat liblinear model at a rehearsal's shape, against training rows.

The flat model is K independent binary problems (liblinear ``-s 7``, each over every training
row), so its cost is K times the mean cost of one class.  This script generates a rehearsal
dataset of ``workflow/configs/rehearsal.yaml`` (same generator and parameters, with as many
training rows as asked), fits the pipeline's tf-idf, trains a random sample of classes with the
dataset's ``flat`` hyper-parameters (C, eps, clip) in this process, one thread, and prints the
CPU seconds per class and the projection ``K x mean`` for the whole model, for each number of
training rows.  The projection holds for these synthetic data: how many passes liblinear's
dual solver needs depends on the data, so real LSHTC1 or DMOZ may cost more or less.  A small
random sample of a long-tailed K misses most of the few large classes, which cost the most: the
ratio between sizes (last column, the same classes at every size) times a whole model's measured
cost (the rehearsal's ``train_flat_part`` jobs) projects more safely than ``K x mean``.

    python benchmarks/bench_train_scaling.py rehearsal_lshtc1 --n-train 14000 93805 [--classes 16]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import yaml

from svbop.datasets import make_hierarchical_text
from svbop.features.tfidf import tfidf_features
from svbop.linear import train_ovr

CONFIG = Path(__file__).resolve().parents[1] / "workflow" / "configs" / "rehearsal.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="a dataset of rehearsal.yaml, e.g. rehearsal_lshtc1")
    parser.add_argument("--n-train", type=int, nargs="+", required=True, help="training rows to measure at")
    parser.add_argument("--classes", type=int, default=16, help="classes sampled per measurement")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    entry = yaml.safe_load(CONFIG.read_text())["datasets"][args.dataset]
    shape = dict(entry["source"]["synthetic"])
    flat = entry["flat"]
    K = shape["n_classes"]
    print(f"{args.dataset}: K={K}, D={shape['n_features']}, C={flat['C']}, eps={flat['eps']}, clip={flat.get('clip')}")
    print("| training rows | classes timed | CPU s per class (mean) | slowest class s | projected CPU h for K classes | x the first row |")
    print("|---:|---:|---:|---:|---:|---:|")
    # the same classes at every size, so that the last column compares like with like (the
    # class frequencies are the generator's, by class id, whatever the number of rows)
    rng = np.random.default_rng(args.seed)
    classes = np.sort(rng.choice(K, size=args.classes, replace=False))
    first = None
    for n_train in args.n_train:
        shape.update(n_samples=n_train + 1, n_test=1)  # the generator's training part is what matters
        data = make_hierarchical_text(**shape)
        rows = np.arange(n_train)
        X = tfidf_features(data.X, fit_rows=rows)[rows]
        seconds = []
        for c in classes:
            t0 = time.process_time()
            train_ovr(X, data.y[rows], K, C=flat["C"], eps=flat["eps"], classes=[c], clip=flat.get("clip"), progress=False)
            seconds.append(time.process_time() - t0)
        mean = float(np.mean(seconds))
        first = first or mean
        print(f"| {n_train:,} | {len(classes)} | {mean:.2f} | {max(seconds):.1f} | {K * mean / 3600:.1f} "
              f"| {mean / first:.1f} |", flush=True)


if __name__ == "__main__":
    main()
