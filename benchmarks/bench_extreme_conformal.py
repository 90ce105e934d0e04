"""Conformal sets at extreme K without an n x K matrix (issue 54): LAC and APS from a trained class tree
(svbop.trees.TreeProbabilities), and from top-k outputs (svbop.SparseOutputs).

Tree (``--tree``): the model trained by ``benchmarks/bench_extreme.py --classes K --test-rows N
--uncompressed`` (its ``model.npz``, mapped read-only, and the problem's ``test.txt``).  In one process,
one thread: the held-out rows are split at random into ``--calibration`` rows and the rest; for each score
and level, ``fit`` on the calibration rows and ``predict`` on the others, timed (wall and CPU), with the
coverage, the mean set size and the process's peak RSS so far.

Top-k (``--top-k``): ``--rows`` rows of ``k`` outputs at ``K`` classes, generated (a peaked Dirichlet
over random distinct classes; the label drawn from them, or outside with probability ``--outside``),
calibrated on ``--calibration`` rows and predicted on all, through the library.

    python benchmarks/bench_extreme_conformal.py --tree --classes 100000 --data data/extreme --out results/extreme/conformal_k100000.json
    python benchmarks/bench_extreme_conformal.py --top-k --classes 1000000 --k 100 --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from svbop.conformal import ConformalSetPredictor  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn):
    w, c = time.perf_counter(), cpu()
    out = fn()
    return out, time.perf_counter() - w, cpu() - c


def run_levels(src_cal, y_cal, src_test, y_test, scores, levels, record):
    rows = []
    for score in scores:
        for eps in levels:
            model = ConformalSetPredictor(eps, score=score, random_state=0)
            _, fw, fc = timed(lambda: model.fit(src_cal, y_cal))
            sets, pw, pc = timed(lambda: model.predict(src_test))
            row = {"score": score, "epsilon": eps, "quantile": model.quantile_,
                   "fit_s": round(fw, 2), "fit_cpu_s": round(fc, 2),
                   "fit_ms_per_row": round(fw / len(y_cal) * 1e3, 4),
                   "predict_s": round(pw, 2), "predict_cpu_s": round(pc, 2),
                   "predict_ms_per_row": round(pw / len(y_test) * 1e3, 4),
                   "coverage": round(float(sets.contains(y_test).mean()), 4),
                   "mean_size": round(float(sets.sizes.mean()), 2), "peak_rss_mb": round(peak_mb())}
            print(json.dumps(row), flush=True)
            rows.append(row)
            record["runs"] = rows
    return rows


def tree(args, record):
    from svbop.datasets.libsvm import read_libsvm
    from svbop.hf import TreeSearchLayout
    from svbop.trees import TreeModel, TreeProbabilities

    K = args.classes
    folder = Path(args.data) / f"k{K}"
    problem = json.loads((folder / "problem.json").read_text())
    data = read_libsvm(folder, {"test": ["test.txt"]}, n_features=problem["n_features"])
    X, y = data.X, np.array([int(c) for c in data.class_names])[data.y.astype(np.int64)]
    del data
    model = TreeModel.load(folder / "svbop" / "model.npz")
    layout = TreeSearchLayout.from_model(model)
    del model
    record["rows"] = int(X.shape[0])
    record["after_load_rss_mb"] = round(peak_mb())
    perm = np.random.default_rng(0).permutation(X.shape[0])
    cal, test = np.sort(perm[: args.calibration]), np.sort(perm[args.calibration:])
    src_cal, src_test = TreeProbabilities(layout, X[cal]), TreeProbabilities(layout, X[test])
    ConformalSetPredictor(0.1).fit(TreeProbabilities(layout, X[:50]), y[:50])  # compile
    return run_levels(src_cal, y[cal], src_test, y[test], args.scores, args.levels, record)


def top_k(args, record):
    from svbop.sparse_outputs import SparseOutputs

    rng = np.random.default_rng(0)
    n, k, K = args.rows, args.k, args.classes
    indices = np.empty((n, k), dtype=np.int64)
    values = np.empty((n, k), dtype=np.float32)  # a model's outputs as float32, as they usually come
    y = np.empty(n, dtype=np.int64)
    for lo in range(0, n, 100_000):  # block by block: k distinct classes per row, a peaked distribution over them
        hi = min(n, lo + 100_000)
        r = rng.integers(0, K - k, size=(hi - lo, k))
        r.sort(axis=1)
        indices[lo:hi] = r + np.arange(k)
        v = rng.gamma(0.3, size=(hi - lo, k))
        v *= (1 - args.outside) / v.sum(axis=1, keepdims=True)
        values[lo:hi] = v
        pos = (v.cumsum(axis=1) < rng.random(hi - lo)[:, None]).sum(axis=1)  # the label: drawn from the row
        y[lo:hi] = np.where(pos < k, indices[lo:hi][np.arange(hi - lo), np.minimum(pos, k - 1)],
                            (indices[lo:hi, -1] + 1) % K)
    src = SparseOutputs(indices, values, K)
    del indices, values
    record["after_load_rss_mb"] = round(peak_mb())
    cal = np.arange(args.calibration)
    return run_levels(src.take(cal), y[cal], src, y, args.scores, args.levels, record)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--tree", action="store_true")
    kind.add_argument("--top-k", action="store_true")
    parser.add_argument("--classes", type=int, default=100_000)
    parser.add_argument("--data", default="data/extreme")
    parser.add_argument("--calibration", type=int, default=20_000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--outside", type=float, default=0.02, help="top-k: mass outside the top-k")
    parser.add_argument("--scores", nargs="+", default=["lac", "aps"])
    parser.add_argument("--levels", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    record = {"K": args.classes, "kind": "tree" if args.tree else "top_k", "machine": platform.processor() or
              platform.machine(), "cpus": os.cpu_count(), "load_start": os.getloadavg()[0],
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    (tree if args.tree else top_k)(args, record)
    record["load_end"] = os.getloadavg()[0]
    record["peak_rss_mb"] = round(peak_mb())
    print(json.dumps({k: v for k, v in record.items() if k != "runs"}), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
