"""svbop against napkinXC 0.5.2 on the same generated LIBSVM files, in one run (issue 49).

napkinXC is the authors' C++ library (GitHub mwydmuch/napkinXC, tag ``0.5.2``); this script runs its
command-line program ``nxc`` (``--nxc``), built by the user outside the repository
(``../shared/tools/napkinxc/README.md``: with ``-DEXE=ON -DPYTHON=OFF -DMIPS_EXT=OFF`` the build needs
no network).  Every job runs in its own process and is measured with ``wait4``: wall seconds, CPU seconds
(user + system) and peak RSS.  One thread for inference; ``--threads`` for training on both sides.

Training (the files of ``benchmarks/extreme_problem.py`` under ``--data/k<K>``; liblinear ``-s 7``, C =
``--C``, eps 0.1, bias 1, weights ``|w| < 0.1`` dropped, balanced 2-means trees with at most 100 classes
a leaf node, 2-means tolerance ``--kmeans-eps``):

* napkinXC ``plt`` (its probabilistic label tree, its own binary 2-means tree);
* napkinXC ``svbopHf`` (its hierarchical softmax, its own tree), and again on svbop's tree
  (``--treeStructure``);
* svbop: read, ``balanced_kmeans_tree``, ``train_tree(clip=0.1)``, save (``bench_extreme.py``'s steps).

Inference under u_F1, ``--repeat`` times, the two sides alternating: napkinXC ``nxc test -m svbopHf
--setUtility uF1`` (its own timing of the predictions, model loading excluded) and svbop's
``predict_sets_hf`` (after a warm-up, the median).  Quality: u_F1, recall, mean set size; and the
share of rows whose set is identical (same classes) between napkinXC's svbopHf on svbop's tree and
svbop's HF.

    python benchmarks/bench_extreme_nxc.py --nxc /tmp/nxc/build/nxc --data data/extreme --classes 100000 \\
        --work /tmp/nxc-bench --out results/extreme/nxc_k100000.json
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

HERE = Path(__file__).resolve().parent


def measured(cmd: list[str], log: Path) -> dict:
    """Run ``cmd`` (stdout and stderr to ``log``); wall, CPU and peak RSS from ``wait4``."""
    t = time.perf_counter()
    load = os.getloadavg()[0]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (status {status}); see {log}")
    return {"wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "load_1min": round(load, 2)}


def nxc_train(args, model: str, out: Path, extra: list[str] = ()) -> dict:
    cmd = [args.nxc, "train", "-i", str(args.folder / "train.txt"), "-o", str(out), "-m", model, "-c", str(args.C),
           "-e", "0.1", "--bias", "1", "--weightsThreshold", "0.1", "--maxLeaves", "100", "--arity", "2",
           "--kmeansEps", str(args.kmeans_eps), "-t", str(args.threads), "--seed", "0", *extra]
    rec = measured(cmd, out.with_suffix(".train.log"))
    text = out.with_suffix(".train.log").read_text()
    for key, pat in (("nxc_train_cpu_s", r"Train CPU time \(s\): ([\d.]+)"),
                     ("nxc_train_real_s", r"Train real time \(s\): ([\d.]+)")):
        m = re.search(pat, text)
        if m:
            rec[key] = float(m.group(1))
    rec["model_disk_mb"] = round(sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 1e6, 1)
    return rec


def nxc_test(args, out: Path, pred: Path) -> dict:
    cmd = [args.nxc, "test", "-i", str(args.test_file), "-o", str(out), "--setUtility", "uF1", "--measures", "u,s",
           "--prediction", str(pred), "-t", "1"]
    rec = measured(cmd, pred.with_suffix(".log"))
    text = pred.with_suffix(".log").read_text()
    for key, pat in (("ms_per_row", r"Test real time / data point \(ms\): ([\d.e-]+)"),
                     ("cpu_ms_per_row", r"Test CPU time / data point \(ms\): ([\d.e-]+)")):
        m = re.search(pat, text)
        rec[key] = float(m.group(1)) if m else None
    return rec


def read_nxc_sets(path: Path) -> list[np.ndarray]:
    return [np.array([int(t.split(":")[0]) for t in line.split()], dtype=np.int64)
            for line in path.read_text().splitlines()]


def quality(sets: list[np.ndarray], y: np.ndarray) -> dict:
    sizes = np.array([s.size for s in sets])
    hit = np.array([yi in s for s, yi in zip(sets, y)])
    return {"u_f1": round(float(np.mean(np.where(hit, 2 / (1 + sizes), 0.0))), 4),
            "recall": round(float(hit.mean()), 4), "mean_set_size": round(float(sizes.mean()), 3)}


# --- svbop workers (each a fresh process, measured by the parent) ---------------------------------------


def svbop_train(args) -> None:
    sys.path.insert(0, str(HERE.parent / "workflow"))
    from svbop.datasets.libsvm import read_libsvm
    from svbop.trees import balanced_kmeans_tree, save_tree, train_tree

    meta = json.loads((args.folder / "problem.json").read_text())
    data = read_libsvm(args.folder, {"train": ["train.txt"]}, n_features=meta["n_features"])
    y = np.array([int(c) for c in data.class_names])[data.y]
    K = args.classes
    tree = balanced_kmeans_tree(data.X, y, K, max_leaves=100, eps=args.kmeans_eps, n_init=1, seed=0)
    model = train_tree(data.X, y, tree, C=args.C, eps=0.1, clip=0.1, n_jobs=args.threads, progress=False)
    model.save(args.work / "svbop_model.npz")
    save_tree(args.work / "svbop_tree.npz", tree)


def svbop_test(args) -> None:
    sys.path.insert(0, str(HERE.parent / "workflow"))
    import scipy.sparse as sp

    from svbop.datasets.libsvm import read_libsvm
    from svbop.hf import predict_sets_hf
    from svbop.trees import TreeModel

    model = TreeModel.load(args.work / "svbop_model.npz")
    data = read_libsvm(args.test_file.parent, {"test": [args.test_file.name]}, n_features=model.n_features)
    X = sp.csr_matrix(data.X, dtype=np.float64)
    predict_sets_hf(model, X[:50], "fbeta:beta=1")  # compilation, the search layout
    t, c = time.perf_counter(), time.process_time()
    sets = predict_sets_hf(model, X, "fbeta:beta=1")
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    np.savez(args.work / "svbop_sets.npz", indices=sets.indices, indptr=sets.indptr)
    (args.work / "svbop_test.json").write_text(json.dumps({"ms_per_row": 1e3 * wall / X.shape[0],
                                                           "cpu_ms_per_row": 1e3 * cpu / X.shape[0]}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nxc", required=True, help="napkinXC's nxc program (built outside the repository)")
    ap.add_argument("--data", default="data/extreme")
    ap.add_argument("--classes", type=int, default=100_000)
    ap.add_argument("--work", default="results/extreme/nxc", help="models, predictions and logs")
    ap.add_argument("--test-rows", type=int, default=0, help="first N test rows only (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--C", type=float, default=10.0)
    ap.add_argument("--kmeans-eps", type=float, default=1e-4,
                    help="2-means stopping tolerance of both sides' trees (napkinXC's default; at 1e-3 svbop's 2-means "
                         "stopped early on these data)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip", nargs="*", default=[], choices=("plt", "own-tree", "svbop-train"),
                    help="jobs left out (svbop-train: reuse svbop_model.npz in --work)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.folder = Path(args.data) / f"k{args.classes}"
    args.work = Path(args.work)
    args.work.mkdir(parents=True, exist_ok=True)
    args.test_file = args.folder / "test.txt"
    if args.test_rows:
        lines = args.folder.joinpath("test.txt").read_text().splitlines(keepends=True)[: args.test_rows]
        args.test_file = args.work / "test.txt"
        args.test_file.write_text("".join(lines))
    if args.worker == "svbop-train":
        return svbop_train(args)
    if args.worker == "svbop-test":
        return svbop_test(args)
    y = np.array([int(line.split(" ", 1)[0]) for line in args.test_file.read_text().splitlines()])
    me = [sys.executable, __file__, "--nxc", args.nxc, "--data", args.data, "--classes", str(args.classes),
          "--work", str(args.work), "--threads", str(args.threads), "--C", str(args.C),
          "--kmeans-eps", str(args.kmeans_eps),
          "--test-rows", str(args.test_rows)]
    rec: dict = {"K": args.classes, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "load_start": os.getloadavg()[0], "train": {}, "test": {}}

    def save():
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
        print(json.dumps(rec["train"]), "\n", json.dumps(rec["test"]), flush=True)

    # training, alternating the sides
    if "svbop-train" not in args.skip:
        rec["train"]["svbop_hf"] = measured(me + ["--worker", "svbop-train"], args.work / "svbop_train.log")
        rec["train"]["svbop_hf"]["model_disk_mb"] = round((args.work / "svbop_model.npz").stat().st_size / 1e6, 1)
        save()
    if "own-tree" not in args.skip:
        rec["train"]["nxc_svbopHf_own_tree"] = nxc_train(args, "svbopHf", args.work / "nxc_hf_own")
        save()
    if "plt" not in args.skip:
        rec["train"]["nxc_plt"] = nxc_train(args, "plt", args.work / "nxc_plt")
        save()
    sys.path.insert(0, str(HERE.parent / "workflow"))
    from svbop.trees import load_tree

    tree = load_tree(args.work / "svbop_tree.npz")
    structure = args.work / "svbop_tree.nxc.txt"
    with open(structure, "w") as fh:  # napkinXC's tree format: "K n_nodes", then "parent node [label]"
        fh.write(f"{tree.n_classes} {tree.n_nodes}\n")
        for v in range(tree.n_nodes):
            fh.write(f"{int(tree.parent[v])} {v}" + (f" {v}" if v < tree.n_classes else "") + "\n")
    rec["train"]["nxc_svbopHf_svbop_tree"] = nxc_train(args, "svbopHf", args.work / "nxc_hf_same",
                                                        ["--treeStructure", str(structure)])
    save()

    # inference, alternating which side goes first
    for r in range(args.repeat):
        jobs = [("svbop_hf", None), ("nxc_svbopHf_svbop_tree", args.work / "nxc_hf_same")]
        if "own-tree" not in args.skip:
            jobs.append(("nxc_svbopHf_own_tree", args.work / "nxc_hf_own"))
        for name, model_dir in (jobs if r % 2 == 0 else jobs[::-1]):
            if model_dir is None:
                run = measured(me + ["--worker", "svbop-test"], args.work / "svbop_test.log")
                run.update(json.loads((args.work / "svbop_test.json").read_text()))
            else:
                run = nxc_test(args, model_dir, args.work / f"{name}.pred.txt")
            rec["test"].setdefault(name, {"runs": []})["runs"].append(run)
    with np.load(args.work / "svbop_sets.npz") as f:
        ours = np.split(f["indices"], f["indptr"][1:-1])
    for name, entry in rec["test"].items():
        ms = [run["ms_per_row"] for run in entry["runs"] if run.get("ms_per_row") is not None]
        entry["ms_per_row_median"] = round(float(np.median(ms)), 4) if ms else None
        entry["ms_per_row_all"] = [round(m, 4) for m in ms]
        cpu = [run["cpu_ms_per_row"] for run in entry["runs"] if run.get("cpu_ms_per_row") is not None]
        entry["cpu_ms_per_row_median"] = round(float(np.median(cpu)), 4) if cpu else None
        entry["peak_rss_mb_max"] = max(run["peak_rss_mb"] for run in entry["runs"])
        sets = ours if name == "svbop_hf" else read_nxc_sets(args.work / f"{name}.pred.txt")
        entry.update(quality(sets, y))
        if name == "nxc_svbopHf_svbop_tree":
            entry["identical_sets_pct"] = round(100 * float(np.mean(
                [np.array_equal(np.sort(a), np.sort(b)) for a, b in zip(sets, ours)])), 2)
    rec["load_end"] = os.getloadavg()[0]
    save()


if __name__ == "__main__":
    main()
