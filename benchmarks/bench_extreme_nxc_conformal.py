"""svbop's conformal LAC sets from the tree against napkinXC's threshold prediction on the same tree, in
one run (issue 54, item 5).

napkinXC (the authors' C++ library, GitHub mwydmuch/napkinXC, tag ``0.5.2``) predicts, for a tree model,
the classes whose path probability reaches a threshold ``t`` (``nxc test --threshold t``: its best-first
search drops every node below ``t``).  svbop's LAC set from the tree is the same set,
``{c : P(c|x) >= 1 - q}``, found by the same pruned search (:class:`svbop.trees.TreeProbabilities` in
:class:`svbop.conformal.ConformalSetPredictor`); what svbop adds is ``q``, the conformal quantile of the
calibration rows' label scores, which makes the sets cover the true class with probability at least
``1 - epsilon``.  napkinXC's user picks ``t`` with no such promise.

On the files of ``benchmarks/extreme_problem.py`` (``--data/k<K>``) and svbop's trained model
(``--model``, by default ``<data>/k<K>/svbop/model.npz``: ``bench_extreme.py --uncompressed``):

1. the model's tree is written in napkinXC's tree format, and napkinXC trains its hierarchical softmax
   (``-m hsm``, the model under its ``svbopHf``: the same nodes) on that tree (``--treeStructure``),
   liblinear C = ``--C``, eps 0.1, bias 1, weights ``|w| < 0.1`` dropped (as svbop's model), ``--threads``
   threads (``--skip-train`` reuses the model in ``--work``);
2. the problem's test file is split: its first ``--cal-rows`` rows calibrate svbop, the next
   ``--test-rows`` (0: the rest) are predicted by both sides;
3. for each ``--epsilons`` value svbop fits LAC (``empty="keep"``: an empty set stays empty, as
   napkinXC's) and predicts the test rows; ``t = 1 - quantile_`` is given to ``nxc test --threshold``
   on napkinXC's model (napkinXC reads the threshold as a 32-bit float: the largest float32 not above
   ``t`` is passed, so that rounding never drops a class);
4. ``--repeat`` rounds, the side that goes first alternating, each job in its own process measured by
   ``wait4`` (wall, CPU, peak RSS), one thread each: napkinXC's own timing of its predictions (model
   and data loading excluded) and svbop's ``predict`` (after loading the model, building its search
   layout and reading the rows, and a warm-up fit and predict on 50 rows), ms per row wall and CPU, the
   median (and svbop's calibration, ms per calibration row);
5. quality: the share of test rows whose sets are identical (the same classes), mean set sizes, the
   share of empty sets, and each side's coverage of the true class on the test rows.

    python benchmarks/bench_extreme_nxc_conformal.py --nxc /tmp/nxc-src/build/nxc --data data/extreme \\
        --classes 100000 --work /tmp/nxc-conf100k --out results/extreme/nxc_conformal_k100000.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _timing import cpu_name

HERE = Path(__file__).resolve().parent
ONE_THREAD = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def measured(cmd: list[str], log: Path) -> dict:
    """Run ``cmd`` (stdout and stderr to ``log``, one thread); wall, CPU and peak RSS from ``wait4``."""
    t = time.perf_counter()
    load = os.getloadavg()[0]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **ONE_THREAD})
        _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (status {status}); see {log}")
    return {"wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "load_1min": round(load, 2)}


def write_nxc_tree(tree, path: Path) -> None:
    """``tree`` (a :class:`svbop.datasets.base.Hierarchy` whose classes are nodes ``0 .. K-1``) in napkinXC's tree
    format: ``K n_nodes``, then one line ``parent node [label]`` a node (the root's parent is -1)."""
    with open(path, "w") as fh:
        fh.write(f"{tree.n_classes} {tree.n_nodes}\n")
        for v in range(tree.n_nodes):
            fh.write(f"{int(tree.parent[v])} {v}" + (f" {v}" if v < tree.n_classes else "") + "\n")


def float32_at_most(t: float) -> float:
    """The largest 32-bit float not above ``t`` (napkinXC parses ``--threshold`` with ``std::stof``)."""
    t32 = np.float32(t)
    if float(t32) > t:
        t32 = np.nextafter(t32, np.float32(-np.inf))
    return float(t32)


def read_nxc_sets(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """napkinXC's prediction file (``label:value`` pairs, one row a line) as ``(indptr, classes)``."""
    sizes, parts = [], []
    with open(path) as fh:
        for line in fh:
            ids = [int(tok.split(":", 1)[0]) for tok in line.split()]
            sizes.append(len(ids))
            parts.append(ids)
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    classes = np.fromiter((c for p in parts for c in p), dtype=np.int64, count=int(indptr[-1]))
    return indptr, classes


def _sorted_rows(indptr: np.ndarray, classes: np.ndarray) -> np.ndarray:
    row = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    return classes[np.lexsort((classes, row))]


def identical_rows(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per row, whether the two ragged sets ``(indptr, classes)`` hold the same classes."""
    (pa, ca), (pb, cb) = a, b
    if pa.size != pb.size:
        raise ValueError(f"the two sides predicted {pa.size - 1} and {pb.size - 1} rows")
    same = np.diff(pa) == np.diff(pb)
    sa, sb = _sorted_rows(pa, ca), _sorted_rows(pb, cb)
    rows = np.flatnonzero(same)
    # rows of equal sizes: compare their sorted classes entry by entry
    take_a = np.concatenate([np.arange(pa[i], pa[i + 1]) for i in rows]) if rows.size else np.empty(0, np.int64)
    take_b = np.concatenate([np.arange(pb[i], pb[i + 1]) for i in rows]) if rows.size else np.empty(0, np.int64)
    diff_row = np.repeat(rows, np.diff(pa)[rows])[sa[take_a] != sb[take_b]]
    same[np.unique(diff_row)] = False
    return same


def set_stats(sets: tuple[np.ndarray, np.ndarray], y: np.ndarray) -> dict:
    indptr, classes = sets
    sizes = np.diff(indptr)
    row = np.repeat(np.arange(sizes.size), sizes)
    covered = np.zeros(sizes.size, dtype=bool)
    covered[row[classes == y[row]]] = True
    return {"coverage": round(float(covered.mean()), 4), "mean_set_size": round(float(sizes.mean()), 3),
            "median_set_size": float(np.median(sizes)), "max_set_size": int(sizes.max(initial=0)),
            "empty_pct": round(100 * float(np.mean(sizes == 0)), 2)}


def labels_of(path: Path) -> np.ndarray:
    with open(path) as fh:
        return np.array([int(line.split(" ", 1)[0].split(",")[0]) for line in fh], dtype=np.int64)


# --- the two sides' jobs ----------------------------------------------------------------------------------


def nxc_train(args, structure: Path) -> dict:
    out = args.work / "nxc_hsm"
    cmd = [args.nxc, "train", "-i", str(args.folder / "train.txt"), "-o", str(out), "-m", "hsm", "-c", str(args.C),
           "-e", "0.1", "--bias", "1", "--weightsThreshold", "0.1", "-t", str(args.threads), "--seed", "0",
           "--treeStructure", str(structure)]
    t = time.perf_counter()
    load = os.getloadavg()[0]
    with open(out.with_suffix(".train.log"), "w") as fh:  # training uses --threads: no one-thread environment
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (status {status}); see {out.with_suffix('.train.log')}")
    return {"wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "load_1min": round(load, 2), "command": " ".join(cmd)}


def nxc_test(args, t32: float, pred: Path) -> dict:
    cmd = [args.nxc, "test", "-i", str(args.test_split), "-o", str(args.work / "nxc_hsm"), "-m", "hsm",
           "--threshold", f"{t32:.9g}", "--measures", "s", "--prediction", str(pred), "-t", "1"]
    rec = measured(cmd, pred.with_suffix(".log"))
    text = pred.with_suffix(".log").read_text()
    for key, pat in (("ms_per_row", r"Test real time / data point \(ms\): ([\d.e-]+)"),
                     ("cpu_ms_per_row", r"Test CPU time / data point \(ms\): ([\d.e-]+)")):
        m = re.search(pat, text)
        if not m:
            raise RuntimeError(f"{pred.with_suffix('.log')}: no '{key}' in napkinXC's output")
        rec[key] = float(m.group(1))
    return rec


def svbop_worker(args) -> None:
    """One process: load the model and its search layout, read the rows, then for each epsilon fit LAC on
    the calibration rows and predict the test rows (timed)."""
    sys.path.insert(0, str(HERE.parent / "workflow"))
    import scipy.sparse as sp

    from svbop.conformal import ConformalSetPredictor
    from svbop.datasets.libsvm import read_libsvm
    from svbop.hf import TreeSearchLayout
    from svbop.trees import TreeModel, TreeProbabilities

    model = TreeModel.load(args.model)
    layout = TreeSearchLayout.from_model(model)
    n_features = model.n_features
    del model

    def rows(path: Path):
        data = read_libsvm(path.parent, {"s": [path.name]}, zero_based=False, n_features=n_features)  # 1-based files
        return sp.csr_matrix(data.X, dtype=np.float64), np.array([int(c) for c in data.class_names])[data.y]

    X_cal, y_cal = rows(args.cal_split)
    X_te, _ = rows(args.test_split)
    out = {}
    for eps in args.epsilons:
        cp = ConformalSetPredictor(eps, score="lac", empty="keep")
        cp.fit(TreeProbabilities(layout, X_cal[:50]), y_cal[:50])  # compilation (numba's cache may be stale)
        t, c = time.perf_counter(), time.process_time()
        cp.fit(TreeProbabilities(layout, X_cal), y_cal)
        fit_wall, fit_cpu = time.perf_counter() - t, time.process_time() - c
        cp.predict(TreeProbabilities(layout, X_te[:50]))  # compilation, caches
        t, c = time.perf_counter(), time.process_time()
        sets = cp.predict(TreeProbabilities(layout, X_te))
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        np.savez(args.work / f"svbop_eps{eps}.npz", indices=sets.indices, indptr=sets.indptr)
        out[str(eps)] = {"quantile": cp.quantile_, "threshold": 1.0 - cp.quantile_,
                         "fit_ms_per_cal_row": 1e3 * fit_wall / X_cal.shape[0],
                         "fit_cpu_ms_per_cal_row": 1e3 * fit_cpu / X_cal.shape[0],
                         "ms_per_row": 1e3 * wall / X_te.shape[0], "cpu_ms_per_row": 1e3 * cpu / X_te.shape[0]}
    (args.work / "svbop_run.json").write_text(json.dumps(out))



def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nxc", required=True, help="napkinXC's nxc program (built outside the repository)")
    ap.add_argument("--data", default="data/extreme")
    ap.add_argument("--classes", type=int, default=100_000)
    ap.add_argument("--model", default=None, help="svbop's model.npz (default <data>/k<K>/svbop/model.npz)")
    ap.add_argument("--work", default="results/extreme/nxc_conformal", help="models, predictions and logs")
    ap.add_argument("--cal-rows", type=int, default=20_000, help="the test file's first rows: svbop's calibration")
    ap.add_argument("--test-rows", type=int, default=0, help="the next rows, predicted by both (0: the rest)")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    ap.add_argument("--threads", type=int, default=2, help="napkinXC's training threads")
    ap.add_argument("--C", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-train", action="store_true", help="reuse napkinXC's model in --work")
    ap.add_argument("--plain-thresholds", type=float, nargs="*", default=[],
                    help="thresholds a napkinXC user might pick (0.5, 0.1, ...): napkinXC's sets at each, once, with "
                         "their coverage (no calibration behind them)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("cal_rows", "repeat"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.test_rows < 0:
        raise SystemExit(f"--test-rows must be >= 0, got {args.test_rows}")
    if not all(0 < e < 1 for e in args.epsilons):
        raise SystemExit(f"--epsilons must lie in (0, 1), got {args.epsilons}")
    if not all(0 < t <= 1 for t in args.plain_thresholds):
        raise SystemExit(f"--plain-thresholds must lie in (0, 1], got {args.plain_thresholds}")
    args.folder = Path(args.data) / f"k{args.classes}"
    args.model = Path(args.model) if args.model else args.folder / "svbop" / "model.npz"
    args.work = Path(args.work)
    args.cal_split, args.test_split = args.work / "cal.txt", args.work / "test.txt"
    if args.worker:
        return svbop_worker(args)
    for path, what in ((args.folder / "train.txt", "train file"), (args.folder / "test.txt", "test file"),
                       (args.model, "--model"), (Path(args.nxc), "--nxc")):
        if not path.is_file():
            raise SystemExit(f"{path}: {what} not found")
    args.work.mkdir(parents=True, exist_ok=True)
    with open(args.folder / "test.txt") as fh:
        lines = fh.readlines()
    end = len(lines) if args.test_rows == 0 else args.cal_rows + args.test_rows
    if end > len(lines) or args.cal_rows >= len(lines):
        raise SystemExit(f"{args.folder / 'test.txt'}: {len(lines)} rows, fewer than --cal-rows {args.cal_rows} + "
                         f"--test-rows {args.test_rows or 1}")
    args.cal_split.write_text("".join(lines[: args.cal_rows]))
    args.test_split.write_text("".join(lines[args.cal_rows:end]))
    del lines
    y = labels_of(args.test_split)
    rec: dict = {"K": args.classes, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_name(),
                 "load_start": [round(x, 2) for x in os.getloadavg()], "cal_rows": args.cal_rows,
                 "test_rows": int(y.size), "argv": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
                 "train": {}, "eps": {}}

    def save():
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")

    if not args.skip_train:
        sys.path.insert(0, str(HERE.parent / "workflow"))
        from svbop.trees import TreeModel

        structure = args.work / "svbop_tree.nxc.txt"
        write_nxc_tree(TreeModel.load(args.model).tree, structure)
        rec["train"]["nxc_hsm_svbop_tree"] = nxc_train(args, structure)
        print("napkinXC training:", json.dumps(rec["train"]["nxc_hsm_svbop_tree"]), flush=True)
        save()
    me = [sys.executable, __file__, "--worker", "--nxc", args.nxc, "--data", args.data, "--classes",
          str(args.classes), "--model", str(args.model), "--work", str(args.work), "--epsilons",
          *map(str, args.epsilons)]
    runs: dict = {"svbop": [], "nxc": {str(e): [] for e in args.epsilons}}
    thresholds = None
    for r in range(args.repeat):
        for side in (("svbop", "nxc") if r % 2 == 0 else ("nxc", "svbop")):
            if side == "svbop":
                run = measured(me, args.work / "svbop_run.log")
                run["per_eps"] = json.loads((args.work / "svbop_run.json").read_text())
                got = {e: v["threshold"] for e, v in run["per_eps"].items()}
                if thresholds is not None and got != thresholds:
                    raise RuntimeError(f"svbop's thresholds changed between repeats: {thresholds} then {got}")
                thresholds = got
                runs["svbop"].append(run)
            else:
                for e in args.epsilons:
                    runs["nxc"][str(e)].append(nxc_test(args, float32_at_most(thresholds[str(e)]),
                                                        args.work / f"nxc_eps{e}.pred.txt"))
        print(f"round {r + 1}/{args.repeat} done, load {os.getloadavg()[0]:.2f}", flush=True)
    for e in args.epsilons:
        key = str(e)
        with np.load(args.work / f"svbop_eps{e}.npz") as f:
            ours = (f["indptr"], f["indices"])
        theirs = read_nxc_sets(args.work / f"nxc_eps{e}.pred.txt")
        sv = [run["per_eps"][key] for run in runs["svbop"]]
        nx = runs["nxc"][key]
        entry = {"quantile": sv[0]["quantile"], "threshold": thresholds[key],
                 "threshold_float32": float32_at_most(thresholds[key]),
                 "svbop": {**set_stats(ours, y),
                           "ms_per_row_median": round(float(np.median([s["ms_per_row"] for s in sv])), 4),
                           "cpu_ms_per_row_median": round(float(np.median([s["cpu_ms_per_row"] for s in sv])), 4),
                           "ms_per_row_all": [round(s["ms_per_row"], 4) for s in sv],
                           "fit_ms_per_cal_row_median": round(float(np.median([s["fit_ms_per_cal_row"] for s in sv])), 4)},
                 "nxc": {**set_stats(theirs, y),
                         "ms_per_row_median": round(float(np.median([n["ms_per_row"] for n in nx])), 4),
                         "cpu_ms_per_row_median": round(float(np.median([n["cpu_ms_per_row"] for n in nx])), 4),
                         "ms_per_row_all": [round(n["ms_per_row"], 4) for n in nx],
                         "peak_rss_mb_max": max(n["peak_rss_mb"] for n in nx),
                         "load_1min": [n["load_1min"] for n in nx]},
                 "identical_sets_pct": round(100 * float(identical_rows(ours, theirs).mean()), 2)}
        rec["eps"][key] = entry
        print(f"eps {e}: t = {entry['threshold']:.6g}, identical {entry['identical_sets_pct']} %,",
              "svbop", json.dumps(entry["svbop"]), "| napkinXC", json.dumps(entry["nxc"]), flush=True)
    for t in args.plain_thresholds:  # what a threshold picked without calibration covers
        pred = args.work / f"nxc_plain{t}.pred.txt"
        run = nxc_test(args, float32_at_most(t), pred)
        rec.setdefault("nxc_plain", {})[str(t)] = {**set_stats(read_nxc_sets(pred), y), "ms_per_row": run["ms_per_row"],
                                                   "cpu_ms_per_row": run["cpu_ms_per_row"]}
        print(f"napkinXC at threshold {t} (no calibration):", json.dumps(rec["nxc_plain"][str(t)]), flush=True)
    rec["svbop_runs"] = [{k: v for k, v in run.items() if k != "per_eps"} for run in runs["svbop"]]
    rec["load_end"] = [round(x, 2) for x in os.getloadavg()]
    save()


if __name__ == "__main__":
    main()
