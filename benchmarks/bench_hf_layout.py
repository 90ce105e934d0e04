"""SVBOP-HF's search layout, two versions of the library on the same model in one run (issue 49).

The model is ``bench_scaling.py``'s random tree model at ``--classes`` K (the same generator, seed and
sizes: D = 400,000, 200 non-zeros per node, l = 100, ``--rows`` test rows), built once and cached
uncompressed under ``--cache``.  Each version (``--repo``: this checkout's ``workflow/`` and, for
example, an older commit unpacked with ``git archive <commit> workflow | tar -x -C DIR``) runs in a
fresh process, alternately (the first one alternates between rounds), and reports:

* the layout's build time and bytes, against the model's CSR bytes (``data`` + ``indices`` + ``indptr``);
* SVBOP-HF under u_F1, one thread: ms per row, the median of ``--repeat`` timed calls after a warm-up
  (and CPU ms per row);
* the process's peak RSS (``ru_maxrss`` from ``wait4``: loading the model, the layout and the search);
* whether its sets are those of the first version (they must be: both are exact).

    python benchmarks/bench_hf_layout.py --classes 100000 --repo . /tmp/old --cache /tmp/hf-layout
    python benchmarks/bench_hf_layout.py --classes 1000000 --repo . --cache /tmp/hf-layout --rounds 1

With ``--model M.npz --test test.txt`` a trained :class:`svbop.trees.TreeModel` (``bench_extreme.py``'s
``model.npz``) and the first ``--rows`` rows of a LIBSVM file are measured instead of the random model.

The cached model at K = 10^6 takes 2.6 GB on disk; building it peaks at about 5 GB.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def build_cache(K: int, rows: int, seed: int, folder: Path) -> None:
    sys.path.insert(0, str(HERE.parent / "workflow"))
    sys.path.insert(0, str(HERE))
    import bench_scaling as bs

    t = time.perf_counter()
    model, tree, node_W, X = bs.make_problem(K, rows, 400_000, 200, seed)
    tm = bs.tree_model(model, tree, node_W)
    del model, node_W
    gc.collect()
    folder.mkdir(parents=True, exist_ok=True)
    W = tm.W
    np.savez(folder / "model.npz", data=W.data, indices=W.indices, indptr=W.indptr, shape=np.array(W.shape),
             parent=tree.parent, n_classes=np.array(K), b=tm.b)
    np.savez(folder / "rows.npz", data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape))
    print(f"model cached in {folder} ({time.perf_counter() - t:.0f} s)", flush=True)


def worker(repo: str, folder: Path, repeat: int, out: Path, trained: tuple | None = None) -> None:
    sys.path.insert(0, str(Path(repo).resolve() / "workflow"))
    import scipy.sparse as sp

    from svbop.datasets.base import Hierarchy
    from svbop.hf import TreeSearchLayout, predict_sets_hf
    from svbop.trees import TreeModel

    if trained is not None:  # a trained model and the first rows of a LIBSVM file
        from svbop.datasets.libsvm import read_libsvm

        model = TreeModel.load(trained[0])
        test = Path(trained[1])
        X = read_libsvm(test.parent, {"test": [test.name]}, n_features=model.n_features).X
        X = sp.csr_matrix(X[: trained[2]], dtype=np.float64)
    else:  # the cached random model
        with np.load(folder / "model.npz") as f:
            tree = Hierarchy(f["parent"], int(f["n_classes"]))
            mask = np.zeros(tree.n_nodes, dtype=bool)
            mask[tree.n_classes:] = True
            model = TreeModel(tree, sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"])),
                              f["b"], mask)
        with np.load(folder / "rows.npz") as f:
            X = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))
    W, tree = model.W, model.tree
    t = time.perf_counter()
    layout = TreeSearchLayout.from_model(model)
    build_s = time.perf_counter() - t
    object.__setattr__(model, "_svbop_search_layout", (model.W, layout))  # the cache predict_sets_hf reads
    predict_sets_hf(model, X[:8], "fbeta:beta=1")
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        sets = predict_sets_hf(model, X, "fbeta:beta=1")
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    np.savez(out.with_suffix(".sets.npz"), indices=sets.indices, indptr=sets.indptr)
    csr = W.data.nbytes + W.indices.nbytes + W.indptr.nbytes
    n = X.shape[0]
    out.write_text(json.dumps({
        "repo": repo, "K": tree.n_classes, "rows": n, "layout_build_s": round(build_s, 1),
        "layout_mb": round(layout.nbytes / 1e6, 1), "csr_mb": round(csr / 1e6, 1),
        "layout_over_csr": round(layout.nbytes / csr, 3),
        "ms_per_row": round(1e3 * float(np.median(walls)) / n, 4),
        "ms_per_row_all": [round(1e3 * w / n, 4) for w in walls],
        "cpu_ms_per_row": round(1e3 * float(np.median(cpus)) / n, 4),
        "mean_set_size": round(float(np.diff(sets.indptr).mean()), 3)}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--classes", type=int, default=100_000)
    ap.add_argument("--repo", nargs="+", default=["."], help="checkouts whose workflow/svbop is measured")
    ap.add_argument("--cache", default="results/hf-layout")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON of every measurement")
    ap.add_argument("--model", default=None, help="a trained TreeModel (.npz) instead of the random model")
    ap.add_argument("--test", default=None, help="with --model: the LIBSVM file whose first --rows rows are predicted")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    folder = Path(args.cache) / (f"k{args.classes}" if not args.model else f"trained-{Path(args.model).parent.parent.name}")
    folder.mkdir(parents=True, exist_ok=True)
    trained = (args.model, args.test, args.rows) if args.model else None
    if args.worker:
        worker(args.worker, folder, args.repeat, Path(args.out), trained)
        return
    if not args.model and not (folder / "rows.npz").exists():
        build_cache(args.classes, args.rows, args.seed, folder)
    results = []
    first_sets = None
    for r in range(args.rounds):
        order = args.repo if r % 2 == 0 else args.repo[::-1]
        for repo in order:
            out = folder / f"run{len(results)}.json"
            load = os.getloadavg()[0]
            extra = ["--model", args.model, "--test", args.test, "--rows", str(args.rows)] if args.model else []
            proc = subprocess.Popen([sys.executable, __file__, "--worker", repo, "--classes", str(args.classes),
                                     "--cache", args.cache, "--repeat", str(args.repeat), "--out", str(out), *extra])
            _, status, usage = os.wait4(proc.pid, 0)
            if status != 0:
                print(f"{repo}: worker failed (status {status})", flush=True)
                continue
            rec = json.loads(out.read_text())
            rec.update(peak_rss_mb=round(usage.ru_maxrss / 1024), cpu_s=round(usage.ru_utime + usage.ru_stime, 1),
                       load_1min_before=load, round=r)
            with np.load(out.with_suffix(".sets.npz")) as f:
                sets = (f["indices"], f["indptr"])
            if first_sets is None:
                first_sets = sets
            rec["same_sets_as_first"] = bool(all(np.array_equal(a, b) for a, b in zip(sets, first_sets)))
            results.append(rec)
            print(json.dumps(rec), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"classes": args.classes, "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
