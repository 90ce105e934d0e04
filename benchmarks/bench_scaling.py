"""Test time of SVBOP-Full, -HSG and -HF as the number of classes K grows: svbop's own measurement,
beyond the paper.

One run per size K (default 1,000, 10,000, 100,000 and 1,000,000 classes), each on a synthetic
sparse problem with LSHTC-like statistics, timing under u_F1:

* bare scoring ``X W^T + b`` of all K classes (``svbop.full.linear_scores``);
* our SVBOP-Full (``svbop.full.predict_sets_full``);
* the paper's SVBOP-Full (``svbop.full.predict_sets_full_naive``: all K probabilities per row, sorted);
* SVBOP-HSG (``svbop.hsg.predict_sets_hsg``) on an ``svbop.index.HNSWIndex`` built over the class
  weights (its build time is reported apart, not in the per-row time);
* SVBOP-HF (``svbop.hf.predict_sets_hf``) on a ``svbop.trees.TreeModel``.

The models are **random, not trained** (inference cost is what is measured, not accuracy):

* features: ``D`` = 400,000 (``--features``), popularity Zipf-like (exponent 1.1);
* flat model: each class weight vector has ``--class-nnz`` (200) non-zeros: 3/4 on features of its
  own (uniform over ``D``, positive weights) and 1/4 on Zipf-popular features (weights of either
  sign); every intercept is ``-(ln K + 2)``, so that the probability left outside a row's class
  stays about the same at every K;
* tree: the classes shuffled and split in halves until a node holds at most 100 classes (the
  shape of the paper's balanced 2-means tree with l = 100, built at random instead of by
  2-means); each internal node's classifier has 200 non-zeros on features of its own, a leaf's
  is its class's flat weight vector;
* test rows (``--rows``): a class drawn uniformly, then about 30 features of its own, 4 of each
  internal node on its path and 20 Zipf-popular ones, value 1 each, L2-normalised (70-110
  non-zeros per row, as LSHTC1's tf-idf rows), so that both models rank the row's class first
  with probability about 0.5-0.95 and u_F1's sets hold one or two classes, as trained models
  give; the flat weights are scaled so that the class's score ``w . x`` is ``ln K + 2`` on average.

Every algorithm is warmed up (compilation, per-model structures) on a few rows, then timed
``--repeat`` times over all rows; the median is reported in ms per row with the min and max,
with the process's peak memory (``ru_maxrss``) after each size, the load average at start and
end, CPU and wall seconds.  HSG's index is built only up to ``--hsg-max-classes`` (default
100,000: NMSLIB's HNSW build takes hours at a million sparse vectors on one core); above it the
row says so.

    python benchmarks/bench_scaling.py --sizes 1000 10000 --rows 500 --repeat 3
    python benchmarks/bench_scaling.py --sizes 1000 10000 100000 1000000 --rows 200 \
        --out results/bench_scaling.json --figure results/bench_scaling.png

Memory: at K = 1,000,000 with 200 non-zeros per class, the flat weights take 2.4 GB, Full's
transposed copy as much (freed before the tree model is built), and the tree model about the same
again; the flat weights are drawn 50,000 classes at a time (issue 49: the test rows' classes are now drawn
first, so the problem is a different draw from the same distribution than in runs before issue 49).  Time: the HNSW build took 1,187 s at K = 100,000 on a loaded 2-core machine,
and the paper's Full 0.2 s per row there (ten times that at K = 1,000,000: keep --rows small).
With ``--out``, the JSON is rewritten after every size, so a run stopped early keeps what it measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from svbop.datasets.base import Hierarchy  # noqa: E402
from svbop.full import linear_scores, predict_sets_full, predict_sets_full_naive  # noqa: E402
from svbop.hf import predict_sets_hf  # noqa: E402
from svbop.hsg import predict_sets_hsg  # noqa: E402
from svbop.metrics import set_agreement  # noqa: E402
from svbop.index import HNSWIndex  # noqa: E402
from svbop.linear import LinearModel  # noqa: E402
from svbop.report.figures import SCALING_ALGORITHMS, SCALING_STAMP, plot_scaling, save_figure  # noqa: E402
from svbop.trees import TreeModel  # noqa: E402
from _timing import cpu_name  # noqa: E402

ALGORITHMS = SCALING_ALGORITHMS
LEAVES = 100  # classes under a node that is not split (the paper's l)
STAMP = SCALING_STAMP


# --- the synthetic problem --------------------------------------------------------------------


class Zipf:
    """Draws feature ids with probability proportional to 1 / rank**a (rank 1 = feature 0)."""

    def __init__(self, D: int, a: float = 1.1) -> None:
        p = 1.0 / np.arange(1, D + 1) ** a
        self.cdf = np.cumsum(p / p.sum())

    def __call__(self, rng: np.random.Generator, size) -> np.ndarray:
        return np.minimum(np.searchsorted(self.cdf, rng.random(size)), self.cdf.size - 1)


def _csr(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape) -> sp.csr_matrix:
    M = sp.csr_matrix((vals, (rows, cols)), shape=shape)  # duplicates summed
    M.sort_indices()
    return M


def random_tree(K: int, rng: np.random.Generator) -> Hierarchy:
    """Classes shuffled, then split in halves (breadth-first) until a node holds <= LEAVES."""
    parent = [-1]
    leaf_parent = np.empty(K, dtype=np.int64)
    queue, head = [(0, rng.permutation(K))], 0
    while head < len(queue):
        node, members = queue[head]
        head += 1
        if members.size <= LEAVES:
            leaf_parent[members] = K + node
            continue
        half = (members.size + 1) // 2
        for part in (members[:half], members[half:]):
            parent.append(K + node)
            queue.append((len(parent) - 1, part))
    return Hierarchy(np.concatenate([leaf_parent, np.asarray(parent, dtype=np.int64)]), K)


def make_problem(K: int, n_rows: int, D: int, class_nnz: int, seed: int = 0, chunk: int = 50_000):
    """``(flat LinearModel, tree Hierarchy, node weights of the internal nodes, X)`` (see the module notes).

    The flat weights are drawn ``chunk`` classes at a time into arrays of their final size (issue 49: drawn
    all at once, the K = 10^6 problem's construction peaked at 11 GB for 2.4 GB of weights); only the
    test rows' classes keep their own features for drawing the rows.
    """
    rng = np.random.default_rng(seed)
    zipf = Zipf(D)
    own, shared = class_nnz - class_nnz // 4, class_nnz // 4
    y = rng.integers(0, K, size=n_rows)
    need = np.unique(y)  # the classes the test rows draw their own features from
    need_cols = np.empty((need.size, own), dtype=np.int64)
    need_vals = np.empty((need.size, own))
    # flat weights: own features (uniform, positive) then popular ones (Zipf, either sign)
    data = np.empty(K * class_nnz)
    # one index type for indices and indptr (scipy would otherwise copy the indices to the wider one)
    idx = np.int32 if max(D, K * class_nnz) < 2**31 else np.int64
    indices = np.empty(K * class_nnz, dtype=idx)
    indptr = np.zeros(K + 1, dtype=idx)
    at = 0
    for c0 in range(0, K, chunk):
        m = min(chunk, K - c0)
        own_cols = rng.integers(0, D, size=(m, own))
        own_vals = np.abs(rng.standard_normal((m, own)))
        cols = np.concatenate([own_cols, zipf(rng, (m, shared))], axis=1)
        vals = np.concatenate([own_vals, 0.3 * rng.standard_normal((m, shared))], axis=1)
        part = _csr(np.repeat(np.arange(m), class_nnz), cols.ravel(), vals.ravel(), (m, D))
        data[at:at + part.nnz] = part.data
        indices[at:at + part.nnz] = part.indices
        indptr[c0 + 1:c0 + m + 1] = at + part.indptr[1:]
        at += part.nnz
        lo, hi = np.searchsorted(need, [c0, c0 + m])
        need_cols[lo:hi] = own_cols[need[lo:hi] - c0]
        need_vals[lo:hi] = own_vals[need[lo:hi] - c0]
        del own_cols, own_vals, cols, vals, part
    W = sp.csr_matrix((data[:at], indices[:at], indptr), shape=(K, D))
    tree = random_tree(K, rng)
    n_internal = tree.n_nodes - K
    node_cols = rng.integers(0, D, size=(n_internal, 200))
    node_vals = rng.uniform(0.5, 1.5, size=(n_internal, 200))
    node_vals[0] = 0.0  # the root has no classifier (TreeModel: its row is zero)
    # test rows: own features of the class, 4 of every internal node on its path but the root, popular ones
    rows_c, rows_v, true_raw = [], [], np.empty(n_rows)
    parent = tree.parent
    for i, c in enumerate(y):
        pick = rng.choice(own, size=30, replace=False)
        k = np.searchsorted(need, c)
        feats = [need_cols[k, pick]]
        node = parent[c]
        while parent[node] >= 0:
            feats.append(node_cols[node - K, rng.choice(200, size=4, replace=False)])
            node = parent[node]
        feats.append(zipf(rng, 20))
        f = np.unique(np.concatenate(feats))
        rows_c.append(f)
        rows_v.append(np.full(f.size, 1.0 / math.sqrt(f.size)))
        true_raw[i] = need_vals[k, pick].sum() / math.sqrt(f.size)
    lengths = np.array([r.size for r in rows_c])
    X = _csr(np.repeat(np.arange(n_rows), lengths), np.concatenate(rows_c), np.concatenate(rows_v), (n_rows, D))
    # the scale: the row's class scores ln K + 2 on average, as much as the intercepts take away, so
    # that its logit is about 0 and the other K - 1 classes share about e**-2 of its weight
    scale = (math.log(K) + 2) / true_raw.mean()
    W.data *= scale
    model = LinearModel(W, np.full(K, -(math.log(K) + 2)), np.arange(K))
    # internal nodes: the sibling on the row's path wins by about 5 (4 features of value 1/sqrt(nnz))
    node_scale = 5.0 * math.sqrt(lengths.mean()) / 4.0
    node_W = _csr(np.repeat(np.arange(n_internal), 200), node_cols.ravel(), node_scale * node_vals.ravel(),
                  (n_internal, D))
    node_W.eliminate_zeros()
    return model, tree, node_W, X


def drop_search_caches(model) -> None:
    """Free the search structures cached on a model (``svbop._kernels.per_model``: Full's transposed weights)."""
    for name in [n for n in vars(model) if n.startswith("_svbop")]:
        object.__delattr__(model, name)


def tree_model(model: LinearModel, tree: Hierarchy, node_W: sp.csr_matrix) -> TreeModel:
    """Leaves score with their class's flat weights (intercepts 0), internal nodes with ``node_W``."""
    K = model.n_classes
    # stacked by hand (one copy of the weights): sp.vstack went through COO at K = 10^6 and peaked past 8 GB
    A, B = model.W, node_W
    idx = np.int32 if A.nnz + B.nnz < 2**31 and A.shape[1] < 2**31 else np.int64
    W = sp.csr_matrix((np.concatenate([A.data, B.data]), np.concatenate([A.indices, B.indices]).astype(idx, copy=False),
                       np.concatenate([A.indptr, A.indptr[-1] + B.indptr[1:]]).astype(idx, copy=False)),
                      shape=(A.shape[0] + B.shape[0], A.shape[1]))
    trained = np.zeros(tree.n_nodes, dtype=bool)
    trained[K:] = True
    return TreeModel(tree, W, np.zeros(tree.n_nodes), trained)


# --- timing ---------------------------------------------------------------------------------


def timed(fn, X, repeat: int, warm_rows: int = 8) -> dict:
    """Median, min and max ms per row of ``fn(X)`` over ``repeat`` calls after a warm-up."""
    fn(X[:warm_rows])
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn(X)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    n = X.shape[0]
    ms = 1e3 * np.asarray(walls) / n
    out = {"ms_per_row": float(np.median(ms)), "ms_min": float(ms.min()), "ms_max": float(ms.max()),
           "cpu_ms_per_row": float(np.median(1e3 * np.asarray(cpus) / n)), "repeats": repeat}
    sets = result[0] if isinstance(result, tuple) else result
    if hasattr(sets, "sizes"):
        out["mean_set_size"] = float(sets.sizes.mean())
        out["sets"] = sets  # for the agreement with our Full; not written to the JSON
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def run_size(K: int, args) -> dict:
    t0 = time.perf_counter()
    model, tree, node_W, X = make_problem(K, args.rows, args.features, args.class_nnz, args.seed)
    build = {"problem_s": time.perf_counter() - t0}
    jobs = args.threads
    u = "fbeta:beta=1"
    res: dict[str, dict] = {}
    res["bare scoring"] = timed(lambda R: linear_scores(model, R, n_jobs=jobs), X, args.repeat)
    res["Full (svbop)"] = timed(lambda R: predict_sets_full(model, R, u, n_jobs=jobs), X, args.repeat)
    # the paper's Full costs K exp() and a full sort per row: at K = 1e6 about 2 s a row, so it may be
    # timed on the first --naive-rows rows only (its per-row cost does not depend on which rows)
    Xn = X[: args.naive_rows] if args.naive_rows else X
    if "paper" in args.skip:
        res["Full (paper)"] = {"skipped": "--skip paper"}
    else:
        res["Full (paper)"] = timed(lambda R: predict_sets_full_naive(model, R, u, n_jobs=jobs), Xn, args.repeat)
        res["Full (paper)"]["rows"] = int(Xn.shape[0])
    if "hsg" in args.skip:
        res["HSG"] = {"skipped": "--skip hsg"}
    elif K <= args.hsg_max_classes:
        t = time.perf_counter()
        index = HNSWIndex.from_model(model, M=args.M, ef_construction=args.ef_construction, n_threads=args.index_threads)
        build["hsg_index_s"] = time.perf_counter() - t
        res["HSG"] = timed(lambda R: predict_sets_hsg(model, index, R, u, k=args.k, n_jobs=jobs), X, args.repeat)
        del index
    else:
        res["HSG"] = {"skipped": f"K > --hsg-max-classes {args.hsg_max_classes} (HNSW build too slow)"}
    rss_flat = peak_rss_mb()
    t = time.perf_counter()
    drop_search_caches(model)  # Full's transposed weights: 2.4 GB at K = 10^6, no longer needed
    gc.collect()
    tm = tree_model(model, tree, node_W)
    del model, node_W
    gc.collect()
    build["hf_tree_s"] = time.perf_counter() - t
    res["HF"] = ({"skipped": "--skip hf"} if "hf" in args.skip else
                 timed(lambda R: predict_sets_hf(tm, R, u, n_jobs=jobs), X, args.repeat))
    del tm
    gc.collect()
    full = res["Full (svbop)"]["ms_per_row"]
    full_sets = res["Full (svbop)"]["sets"]
    for r in res.values():
        if "ms_per_row" in r:
            r["ratio_to_full"] = r["ms_per_row"] / full
        sets = r.pop("sets", None)
        if sets is not None:  # share of rows whose set equals our Full's (the paper's Full: its rows only)
            r["agreement_with_full_pct"] = 100.0 * set_agreement(sets, full_sets.take(np.arange(len(sets))))
    return {"K": K, "rows": int(X.shape[0]), "D": args.features, "x_nnz_mean": float(np.diff(X.indptr).mean()),
            "class_nnz": args.class_nnz, "internal_nodes": int(tree.n_nodes - K), "build_seconds": build,
            "algorithms": res, "peak_rss_mb_after_flat": rss_flat, "peak_rss_mb": peak_rss_mb(),
            "load_after": list(os.getloadavg())}


def crossover(results: list[dict], name: str) -> int | None:
    """The smallest K from which ``name`` is faster than our Full at every larger K measured."""
    beats = [(r["K"], r["algorithms"][name].get("ratio_to_full", math.inf) < 1.0) for r in results]
    first = None
    for K, ok in beats:
        first = (first or K) if ok else None
    return first


def figure(out: dict, path: str) -> None:
    """The log-log figure of ms per row against K (the report draws the same from the JSON)."""
    save_figure(plot_scaling(out), path)


def write_json(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_name(f".tmp{os.getpid()}.{Path(path).name}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)



def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--rows", type=int, default=200, help="test rows per size (default 200)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats after the warm-up (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="n_jobs of every predictor (default 1)")
    ap.add_argument("--features", type=int, default=400_000)
    ap.add_argument("--class-nnz", type=int, default=200)
    ap.add_argument("--k", type=int, default=100, help="HSG's first query size")
    ap.add_argument("--M", type=int, default=20)
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--index-threads", type=int, default=1, help="threads of the HNSW build (default 1)")
    ap.add_argument("--naive-rows", type=int, default=None,
                    help="time the paper's Full on the first N rows only (default: all; it costs K exp() per row)")
    ap.add_argument("--skip", nargs="*", default=[], choices=("paper", "hsg", "hf"),
                    help="algorithms left out (bare scoring and our Full always run: every ratio is to it)")
    ap.add_argument("--hsg-max-classes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--figure", help="write the log-log figure of ms per row against K here (PNG)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.rows < 1 or args.threads < 1:
        ap.error("--repeat, --rows and --threads must be at least 1")
    meta = {"stamp": STAMP, "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu_name(), "cpu_count": os.cpu_count(), "threads": args.threads, "load_start": list(os.getloadavg()),
            "models": "random (not trained): see benchmarks/bench_scaling.py's docstring", "utility": "fbeta_1",
            "options": {k: v for k, v in vars(args).items() if k not in ("out", "figure")}}
    print(f"{STAMP}. {meta['date']}, {meta['cpu']} ({meta['cpu_count']} CPUs), {args.threads} thread(s), "
          f"load average {' '.join(f'{x:.2f}' for x in meta['load_start'])}")
    print(f"random models (not trained), D={args.features:,}, {args.class_nnz} non-zeros per class, "
          f"{args.rows} test rows, median of {args.repeat} after a warm-up, u_F1")
    wall, cpu = time.perf_counter(), time.process_time()
    results = []
    head = f"{'K':>10} {'algorithm':<14} {'ms/row':>9} {'min-max':>17} {'x Full':>7} {'|set|':>6} {'=Full%':>6}"
    for K in args.sizes:
        r = run_size(K, args)
        results.append(r)
        if args.out:  # kept after every size: the largest take long
            write_json(args.out, {"meta": {**meta, "load_end": list(os.getloadavg()), "wall_s": time.perf_counter() - wall,
                                           "cpu_s": time.process_time() - cpu, "peak_rss_mb": peak_rss_mb(),
                                           "partial": True},
                                  "results": results, "beats_full_from_K": {}})
        b = r["build_seconds"]
        print(f"\nK={K:,}: problem {b['problem_s']:.1f} s, HNSW build {b.get('hsg_index_s', float('nan')):.1f} s, "
              f"tree model {b['hf_tree_s']:.1f} s; peak RSS {r['peak_rss_mb']:.0f} MB; mean nnz(x) {r['x_nnz_mean']:.0f}")
        print(head)
        for name in ALGORITHMS:
            a = r["algorithms"][name]
            if "ms_per_row" not in a:
                print(f"{K:>10,} {name:<14} {'-':>9}  {a['skipped']}")
                continue
            print(f"{K:>10,} {name:<14} {a['ms_per_row']:9.4f} {a['ms_min']:8.4f}-{a['ms_max']:<8.4f} "
                  f"{a['ratio_to_full']:7.2f} {a.get('mean_set_size', float('nan')):6.2f} "
                  f"{a.get('agreement_with_full_pct', float('nan')):6.1f}")
        sys.stdout.flush()
    meta.update(load_end=list(os.getloadavg()), wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu,
                peak_rss_mb=peak_rss_mb())
    summary = {name: crossover(results, name) for name in ("HSG", "HF", "Full (paper)")}
    print(f"\nwall {meta['wall_s']:.0f} s, CPU {meta['cpu_s']:.0f} s, peak RSS {meta['peak_rss_mb']:.0f} MB, "
          f"load average at the end {' '.join(f'{x:.2f}' for x in meta['load_end'])}")
    for name in ("HSG", "HF"):
        K = summary[name]
        ran = [r for r in results if "ms_per_row" in r["algorithms"][name]]
        if not ran:
            print(f"{name} was not run ({results[0]['algorithms'][name]['skipped']})")
        elif K:
            agree = [f"{r['algorithms'][name].get('agreement_with_full_pct', float('nan')):.0f} %"
                     for r in ran if r["K"] >= K]
            print(f"{name} beats our Full from K = {K:,} on (of the sizes it ran); its sets equal Full's in "
                  f"{', '.join(agree)} of the rows there")
        else:
            print(f"{name} does not beat our Full at the largest size it ran")
    out = {"meta": meta, "results": results, "beats_full_from_K": summary}
    if args.out:
        write_json(args.out, out)
    if args.figure:
        figure(out, args.figure)
    return out


if __name__ == "__main__":
    main()
