"""Training time, memory and top-1 accuracy of the flat and tree models on the LSHTC1 dry-run.

The data is the real LSHTC1 "dry-run" in ``../shared/data/lshtc1-dryrun`` (train + validation to
train, test to test; 1,139 classes).  Features are the pipeline's: tf-idf of the term counts with
the idf and vocabulary fitted on the training rows.  The script trains, each in a fresh forked
process so that peak memory is measured per model:

* the flat model: liblinear ``-s 7`` one-vs-rest over all classes (SVBOP-Full / -HSG);
* the tree model on the predefined hierarchy ``cat_hier.txt`` (single-child chains collapsed);
* the tree model on a hierarchical balanced 2-means tree (tree building time included);

and prints wall time, CPU time, peak resident memory and top-1 test accuracy.  It quotes no
figures of the authors' C++ library (napkinXC): times from another run, on other inputs, are not
comparable; compare with napkinXC only in one run on identical features (``../shared/tools/napkinxc/``).

Then it builds SVBOP-HSG's HNSW index over the flat model's weights (M=20, efC=100, one thread,
the dry-run's Table 5 row) and prints its build time and, for the test rows, the recall of the
exact top-k classes at ``ef = k`` and the query time, against the brute-force scores.

    python benchmarks/bench_models.py [--jobs 2] [--C 10] [--eps 0.1] [--max-leaves 100]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

from svbop.datasets import read_dataset
from svbop.index import HNSWIndex
from svbop.features.tfidf import tfidf_features
from svbop.linear import train_ovr
from svbop.trees import balanced_kmeans_tree, train_tree, tree_from_hierarchy

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "lshtc1-dryrun"
PREFIX = "Task2_Train_RDFData_Test_CrawlData__"


def load(data: Path):
    spec = {
        "kind": "libsvm",
        "parts": {"train": [f"{PREFIX}train.txt", f"{PREFIX}validation.txt"], "test": [f"{PREFIX}test.txt"]},
        "ignore_features": [0],
    }
    dataset = read_dataset(data, spec, hierarchy={"format": "lshtc_paths", "file": "cat_hier.txt"}, name="lshtc1_dryrun")
    train = np.flatnonzero(dataset.part == "train")
    test = np.flatnonzero(dataset.part == "test")
    X = tfidf_features(dataset.X, train, drop_unseen=True).astype(np.float64)
    return dataset, X, train, test


def _child(task, conn):
    start_cpu = time.process_time()
    start = time.perf_counter()
    accuracy, extra, payload = task()
    wall = time.perf_counter() - start
    cpu = time.process_time() - start_cpu + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    conn.send((wall, cpu, peak / 1024, accuracy, extra, payload))
    conn.close()


def measure(task):
    """Run ``task`` in a forked process: (wall s, CPU s, peak RSS MB, accuracy, extra, payload)."""
    parent, child = multiprocessing.get_context("fork").Pipe(duplex=False)
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(task, child))
    proc.start()
    child.close()
    result = parent.recv()
    proc.join()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--C", type=float, default=10.0)
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--max-leaves", type=int, default=100)
    parser.add_argument("--kmeans-eps", type=float, default=1e-3)
    args = parser.parse_args(argv)
    if not (args.data / "cat_hier.txt").exists():
        print(f"LSHTC1 dry-run not found in {args.data} (see ../shared/data/README.md)", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    dataset, X, train, test = load(args.data)
    Xtr, ytr, Xte, yte = X[train], dataset.y[train], X[test], dataset.y[test]
    K = dataset.n_classes
    print(f"LSHTC1 dry-run: {train.size} train / {test.size} test rows, K={K}, D={X.shape[1]} "
          f"(tf-idf, training vocabulary); loaded in {time.perf_counter() - t0:.1f} s")
    params = {"C": args.C, "eps": args.eps}

    def predefined():
        tree = tree_from_hierarchy(dataset.hierarchy)
        model = train_tree(Xtr, ytr, tree, n_jobs=args.jobs, progress=False, **params)
        return float(np.mean(model.predict(Xte) == yte)), f"{tree.n_nodes - K} internal nodes", None

    def kmeans():
        tree = balanced_kmeans_tree(Xtr, ytr, K, max_leaves=args.max_leaves, eps=args.kmeans_eps)
        model = train_tree(Xtr, ytr, tree, n_jobs=args.jobs, progress=False, **params)
        return float(np.mean(model.predict(Xte) == yte)), f"{tree.n_nodes - K} internal nodes", None

    def flat():
        model = train_ovr(Xtr, ytr, K, n_jobs=args.jobs, progress=False, **params)
        return float(np.mean(model.predict(Xte) == yte)), "", model  # the model goes on to the index

    print(f"liblinear -s 7 -c {args.C:g} -e {args.eps:g} -B 1, {args.jobs} process(es)")
    print(f"{'model':<20} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'top-1 %':>8}  notes")
    flat_model = None
    for name, task in (("tree (predefined)", predefined), ("tree (2-means)", kmeans), ("flat", flat)):
        wall, cpu, peak, accuracy, extra, payload = measure(task)
        flat_model = payload if name == "flat" else flat_model
        print(f"{name:<20} {wall:8.1f} {cpu:8.1f} {peak:8.0f} {100 * accuracy:8.2f}  {extra}")

    model = flat_model
    start = time.perf_counter()
    index = HNSWIndex.from_model(model, M=20, ef_construction=100, n_threads=1)
    build = time.perf_counter() - start
    start = time.perf_counter()
    exact = np.argsort(-model.decision_function(Xte), axis=1)
    brute = time.perf_counter() - start
    print(f"\nHNSW index (M=20, efC=100, 1 thread) over the flat weights: built in {build:.1f} s; "
          f"brute-force scores + full sort of {test.size} rows: {brute:.2f} s")
    print(f"{'k':>5} {'ef':>5} {'query s':>8} {'recall@k %':>11} {'top-1 found %':>14}")
    for k in (1, 10, 100):
        for ef in sorted({k, 4 * k}):
            start = time.perf_counter()
            ids, _ = index.query(Xte, k, ef=ef)
            seconds = time.perf_counter() - start
            recall = np.mean([np.intersect1d(a, b).size / k for a, b in zip(ids, exact[:, :k])])
            top1 = np.mean(ids[:, 0] == exact[:, 0])
            print(f"{k:5d} {ef:5d} {seconds:8.2f} {100 * recall:11.2f} {100 * top1:14.2f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
