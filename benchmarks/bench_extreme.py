"""SVBOP-HF trained at extreme K (issue 49): the balanced 2-means tree and its node classifiers on the
generated problem of ``benchmarks/extreme_problem.py``, and its sets on held-out rows.

For each ``--classes`` K, in one process (so ``peak RSS`` is the whole run's, reported after each step):

1. the problem's LIBSVM files (``train.txt``, ``test.txt`` under ``--data/k<K>``), generated if absent;
2. read (:func:`svbop.datasets.read_libsvm`, train and test in one call: one feature space);
3. the tree (:func:`svbop.trees.balanced_kmeans_tree`, ``--max-leaves``, ``--kmeans-eps``, one restart
   per split as napkinXC: ``--n-init``);
4. the node classifiers (:func:`svbop.trees.train_tree`, liblinear ``-s 7``, ``--C``, ``--eps``, bias 1,
   in ``--jobs`` forked processes, every node's weights ``|w| < --clip`` dropped as it is trained:
   napkinXC's ``weightsThreshold``, 0.1 by default as there);
5. the model saved (``model.npz``, its size on disk; ``--uncompressed``: stored as is, so that loading
   maps the weights from the file) and loaded back, its search layout built
   (:class:`svbop.hf.TreeSearchLayout`) and the model's weights dropped (``--predict-only``: steps 5-6
   alone, in a fresh process, from a saved model);
6. SVBOP-HF (:func:`svbop.hf.predict_sets_hf` on the layout, one thread) under u_F1 on the test rows: ms per row (the
   median of ``--repeat`` timed calls after a warm-up), u_F1 (mean utility), recall (the share of
   sets that hold the true class), top-1 accuracy (the tree's most probable class) and mean set size;
   the search layout's bytes against the model's CSR bytes.

Wall and CPU seconds of every step (CPU includes the forked training workers: ``RUSAGE_CHILDREN``) and
peak RSS (``ru_maxrss`` of the process and, apart, of its largest child) go to ``--out`` (JSON,
rewritten after every step) and to stdout.

    python benchmarks/bench_extreme.py --classes 100000 --data data/extreme --out results/extreme/k100000.json
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from extreme_problem import ExtremeProblem, write_problem  # noqa: E402
from svbop.datasets.libsvm import read_libsvm  # noqa: E402
from svbop.hf import TreeSearchLayout, predict_sets_hf  # noqa: E402
from svbop.metrics import recall, set_sizes, set_utility  # noqa: E402
from svbop.trees import TreeModel, balanced_kmeans_tree, train_tree  # noqa: E402


def peak_mb() -> dict[str, float]:
    """Peak resident memory so far, MB: this process and its largest (forked) child."""
    return {"self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Steps:
    """Times steps (wall, CPU, peak RSS after) into a dict written to ``out`` after each one."""

    def __init__(self, record: dict, out: Path | None) -> None:
        self.record, self.out = record, out
        self.record.setdefault("steps", {})

    def __call__(self, name: str, fn, **extra):
        wall, cpu = time.perf_counter(), cpu_s()
        result = fn()
        step = {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(cpu_s() - cpu, 2),
                "peak_rss_mb": {k: round(v) for k, v in peak_mb().items()}, **extra}
        self.record["steps"][name] = step
        print(f"  {name}: {json.dumps(step)}", flush=True)
        self.save()
        return result

    def save(self) -> None:
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text(json.dumps(self.record, indent=2) + "\n")


def run(K: int, args) -> dict:
    record = {"K": K, "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_start": os.getloadavg()[0],
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "options": {k: v for k, v in vars(args).items() if k not in ("classes",)}}
    out = Path(args.out) if args.out else None
    steps = Steps(record, out)
    folder = Path(args.data) / f"k{K}"
    problem = ExtremeProblem(classes=K, train_per_class=args.train_per_class, test_rows=args.test_rows,
                             seed=args.seed)
    if not (folder / "problem.json").exists():
        steps("generate", lambda: write_problem(problem, folder, log=lambda m: print("   ", m, flush=True)))
    record["problem"] = json.loads((folder / "problem.json").read_text())

    path = Path(args.model_dir or (folder / "svbop")) / "model.npz"
    if args.predict_only:  # a fresh process: the trained model and the test rows only
        data = steps("read", lambda: read_libsvm(folder, {"test": ["test.txt"]}, n_features=record["problem"]["n_features"]))
        Xte, yte = data.X, np.array([int(c) for c in data.class_names])[data.y.astype(np.int64)]
        del data
        record["model"] = {"path": str(path), "disk_mb": round(path.stat().st_size / 1e6, 1)}
        return predict(record, steps, path, Xte, yte, args, K)
    data = steps("read", lambda: read_libsvm(folder, {"train": ["train.txt"], "test": ["test.txt"]},
                                            n_features=record["problem"]["n_features"]))
    X, y = data.X, data.y.astype(np.int64)
    # labels are 0..K-1 and every class has training rows, so the reader's sorted label names are 0..K-1
    assert len(data.class_names) == K and data.class_names[0] == "0" and data.class_names[-1] == str(K - 1)
    y = np.array([int(c) for c in data.class_names])[y]
    train, test = np.flatnonzero(data.part == "train"), np.flatnonzero(data.part == "test")
    # the parts are consecutive rows: views of X's arrays, not copies (at K = 10^6 X is 2 GB)
    assert train.size and test.size and train[-1] + 1 == test[0] and np.all(np.diff(train) == 1)
    Xtr, Xte = _rows_view(X, 0, train.size), X[train.size:]  # the test rows a copy: a view would keep all of X
    ytr, yte = y[train], y[test]
    del data, X
    record["shape"] = {"train": list(Xtr.shape), "test": list(Xte.shape), "nnz_train": int(Xtr.nnz)}

    tree = steps("tree", lambda: balanced_kmeans_tree(Xtr, ytr, K, max_leaves=args.max_leaves, eps=args.kmeans_eps,
                                                     n_init=args.n_init, seed=args.seed))
    record["tree"] = {"internal_nodes": int(tree.n_nodes - K), "depth_max": int(tree.depth()[:K].max())}
    model = steps("train", lambda: train_tree(Xtr, ytr, tree, C=args.C, eps=args.eps, clip=args.clip,
                                             n_jobs=args.jobs, progress=False))
    del Xtr, ytr
    path.parent.mkdir(parents=True, exist_ok=True)
    steps("save", lambda: model.save(path, compress=not args.uncompressed))
    record["model"] = {"disk_mb": round(path.stat().st_size / 1e6, 1), "path": str(path)}
    del model
    return predict(record, steps, path, Xte, yte, args, K)


def predict(record: dict, steps: Steps, path: Path, Xte, yte, args, K: int) -> dict:
    """Steps 5-6: load the model, build its search layout, drop the weights, HF on the test rows."""
    model = steps("load", lambda: TreeModel.load(path))
    W = model.W
    record["model"].update(nnz=int(W.nnz), csr_mb=round((W.data.nbytes + W.indices.nbytes + W.indptr.nbytes) / 1e6, 1))
    del W
    layout = steps("layout", lambda: TreeSearchLayout.from_model(model))
    record["model"]["layout_mb"] = round(layout.nbytes / 1e6, 1)
    record["model"]["layout_over_csr"] = round(layout.nbytes / 1e6 / record["model"]["csr_mb"], 3)
    # the search reads only the layout: the weights go (at K = 10^6 each is gigabytes)
    del model
    rows = Xte[: args.predict_rows] if args.predict_rows else Xte
    labels = yte[: rows.shape[0]]
    predict_sets_hf(layout, rows[:50], "fbeta:beta=1")  # warm-up: compilation

    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        sets, stats = predict_sets_hf(layout, rows, "fbeta:beta=1", return_stats=True)
        times.append(time.perf_counter() - t)
    steps("predict", lambda: None)
    first = sets.indices[sets.indptr[:-1][np.diff(sets.indptr) > 0]]
    has = np.diff(sets.indptr) > 0
    record["hf"] = {
        "rows": int(rows.shape[0]),
        "ms_per_row_median": round(float(np.median(times)) / rows.shape[0] * 1e3, 4),
        "ms_per_row_all": [round(t / rows.shape[0] * 1e3, 4) for t in times],
        "u_f1": round(float(set_utility(sets, labels, "fbeta:beta=1").mean()), 4),
        "recall": round(float(recall(sets, labels).mean()), 4),
        "top1_accuracy": round(float(_first_is(first, has, labels).mean()), 4),
        "mean_set_size": round(float(set_sizes(sets).mean()), 3),
        "expanded_per_row": round(float(stats["expanded"].mean()), 1),
    }
    if args.scaling_json:  # the report's scaling figure draws it beside the random models
        path = Path(args.scaling_json)
        data = json.loads(path.read_text())
        ms = np.array(record["hf"]["ms_per_row_all"])
        source = (f"benchmarks/bench_extreme.py --classes {K} (the trained 2-means tree, l = {args.max_leaves}, 2-means "
                  f"tolerance {args.kmeans_eps:g}, on the generated problem; {record['hf']['rows']:,} held-out rows, u_F1 "
                  f"{record['hf']['u_f1']}): wall ms per row, median of {args.repeat} (min-max)")
        entry = {"K": K, "source": source,
                 "date": record["started"], "load": [record["load_start"], os.getloadavg()[0]],
                 "algorithms": {"HF": {"ms_per_row": float(np.median(ms)), "ms_min": float(ms.min()),
                                       "ms_max": float(ms.max()), "u_f1": record["hf"]["u_f1"]}}}
        data["trained"] = [r for r in data.get("trained", []) if r["K"] != K] + [entry]
        data["trained"].sort(key=lambda r: r["K"])
        path.write_text(json.dumps(data, indent=1) + "\n")
    record["load_end"] = os.getloadavg()[0]
    record["peak_rss_mb"] = {k: round(v) for k, v in peak_mb().items()}
    steps.save()
    print(json.dumps({k: record[k] for k in ("K", "model", "hf", "peak_rss_mb", "load_start", "load_end")}), flush=True)
    return record


def _rows_view(X, lo: int, hi: int):
    """Rows ``lo:hi`` of CSR ``X`` sharing its arrays (scipy's slicing copies them)."""
    import scipy.sparse as sp
    a, b = X.indptr[lo], X.indptr[hi]
    return sp.csr_matrix((X.data[a:b], X.indices[a:b], X.indptr[lo:hi + 1] - a), shape=(hi - lo, X.shape[1]), copy=False)


def _first_is(first: np.ndarray, has: np.ndarray, labels: np.ndarray) -> np.ndarray:
    out = np.zeros(labels.size, dtype=bool)
    out[has] = first == labels[has]
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--data", default="data/extreme", help="folder of the generated problems (k<K>/)")
    parser.add_argument("--model-dir", default=None, help="where model.npz goes (default: <data>/k<K>/svbop)")
    parser.add_argument("--train-per-class", type=int, default=3)
    parser.add_argument("--test-rows", type=int, default=10_000)
    parser.add_argument("--predict-rows", type=int, default=0, help="test rows predicted (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-leaves", type=int, default=100)
    parser.add_argument("--kmeans-eps", type=float, default=1e-4,
                        help="2-means tolerance (napkinXC's default; at 1e-3 the 2-means stopped early on these data)")
    parser.add_argument("--n-init", type=int, default=1)
    parser.add_argument("--C", type=float, default=10.0)
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--clip", type=float, default=0.1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--uncompressed", action="store_true",
                        help="save the model uncompressed: loading maps its weights, and HF's layout is built without them resident")
    parser.add_argument("--predict-only", action="store_true",
                        help="load <model-dir>/model.npz and predict (steps 5-6 in a fresh process: inference's own peak)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None, help="JSON of the measurements (one K)")
    parser.add_argument("--scaling-json", default=None,
                        help="a bench_scaling.py --out JSON to add the trained HF timing to ('trained', per K)")
    args = parser.parse_args(argv)
    for K in args.classes:
        run(K, args)


if __name__ == "__main__":
    main()
