"""SVBOP-HSG against our SVBOP-Full at K = 10^5 on trained weights (issue 49): the index's recall@k and how
often HSG's sets equal Full's, against its time, over a grid of (k, ef) and the index's M.

The trained weights: the leaf classifiers of the trained 2-means tree that ``benchmarks/bench_extreme.py``
saves (``<data>/k<K>/svbop/model.npz``), one weight vector and intercept per class, as a one-vs-rest
:class:`svbop.linear.LinearModel`.  Each was trained by liblinear against the classes of its 2-means leaf
group (about 100), not against all K (a whole one-vs-rest model at K = 10^5 over 300,000 rows is about
10^5 liblinear problems over every row: hours on this machine); Full and HSG search the same weights, so
the comparison is exact: HSG is an approximation of Full on this model.

For every ``--M``: the HNSW index over the class vectors (sparse, as the model is clipped; NMSLIB,
``efC`` = ``--ef-construction``, ``--index-threads``), its build time; then for every ``(k, ef)`` in
``--grid``: recall@k of ``HNSWIndex.query`` against the exact top-k (from the dense scores), and
``predict_sets_hsg`` (u_F1, one thread) ms per row (median of ``--repeat``) and the share of rows whose
set equals Full's.  Full's time (``predict_sets_full``, one thread) is measured in the same run.

    python benchmarks/bench_extreme_hsg.py --data data/extreme --classes 100000 --rows 1000 --out hsg.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from svbop.datasets.libsvm import read_libsvm  # noqa: E402
from svbop.full import linear_scores, predict_sets_full  # noqa: E402
from svbop.hsg import predict_sets_hsg  # noqa: E402
from svbop.index import HNSWIndex  # noqa: E402
from svbop.linear import LinearModel  # noqa: E402
from svbop.metrics import set_agreement  # noqa: E402
from svbop.trees import TreeModel  # noqa: E402


def median_ms(fn, n_rows: int, repeat: int):
    fn()  # warm-up
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times)) / n_rows, [round(1e3 * t / n_rows, 4) for t in times], out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/extreme")
    ap.add_argument("--classes", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=1000, help="test rows")
    ap.add_argument("--M", type=int, nargs="+", default=[20])
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--index-threads", type=int, default=2)
    ap.add_argument("--grid", nargs="+", default=["10:10", "10:50", "20:100", "100:100", "100:400"],
                    help="k:ef pairs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    folder = Path(args.data) / f"k{args.classes}"
    K = args.classes
    record = {"K": K, "rows": args.rows, "load_start": os.getloadavg()[0],
              "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": []}
    tree_model = TreeModel.load(folder / "svbop" / "model.npz")
    model = LinearModel(tree_model.W[:K].tocsr(), tree_model.b[:K].copy(), np.arange(K))
    del tree_model
    record["flat_nnz"] = int(model.W.nnz)
    meta = json.loads((folder / "problem.json").read_text())
    data = read_libsvm(folder, {"test": ["test.txt"]}, n_features=meta["n_features"])
    X = data.X[: args.rows].astype(np.float64)
    if X.shape[1] < model.W.shape[1]:
        import scipy.sparse as sp
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], model.W.shape[1]))
    u = "fbeta:beta=1"
    full_ms, full_all, full_sets = median_ms(lambda: predict_sets_full(model, X, u), X.shape[0], args.repeat)
    record["full"] = {"ms_per_row": round(full_ms, 4), "ms_all": full_all}
    print(f"Full: {full_ms:.4f} ms/row {full_all}", flush=True)
    ks = sorted({int(p.split(":")[0]) for p in args.grid})
    exact = {k: [] for k in ks}
    for lo in range(0, X.shape[0], 200):  # exact top-k from the dense scores, 200 rows at a time
        S = linear_scores(model, X[lo:lo + 200])
        for k in ks:
            exact[k].append(np.argpartition(-S, k - 1, axis=1)[:, :k])
    exact = {k: np.concatenate(v) for k, v in exact.items()}
    for M in args.M:
        t = time.perf_counter()
        index = HNSWIndex.from_model(model, M=M, ef_construction=args.ef_construction, n_threads=args.index_threads)
        build_s = time.perf_counter() - t
        print(f"M={M}: index built in {build_s:.0f} s", flush=True)
        for pair in args.grid:
            k, ef = (int(v) for v in pair.split(":"))
            ids, _ = index.query(X, k, ef=ef)
            recall = float(np.mean([np.intersect1d(a, b).size / k for a, b in zip(ids, exact[k])]))
            ms, ms_all, sets = median_ms(lambda: predict_sets_hsg(model, index, X, u, k=k, ef=ef), X.shape[0],
                                         args.repeat)
            run = {"M": M, "efC": args.ef_construction, "index_build_s": round(build_s, 1), "k": k, "ef": ef,
                   "recall_at_k": round(recall, 4), "ms_per_row": round(ms, 4), "ms_all": ms_all,
                   "x_full": round(ms / full_ms, 3), "same_sets_pct": round(100 * set_agreement(sets, full_sets), 2),
                   "load": os.getloadavg()[0]}
            record["runs"].append(run)
            print(json.dumps(run), flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        del index
    record["load_end"] = os.getloadavg()[0]
    record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
