"""Peak memory and time of the pipeline's jobs on a problem of LSHTC1's shape (issue #18).

What it measures
----------------
The pipeline's own scripts (``workflow/scripts/*.py``), each run in a fresh Python process as
Snakemake would run it (the script gets a ``snakemake`` object with the rule's input, output,
params, log, wildcards and threads), on files laid out as the pipeline lays them out under
``--workdir``.  For every job the table gives its wall seconds, CPU seconds (user + system of the
process and of the worker processes it waited for) and peak resident memory (``ru_maxrss`` of
the process, or of its largest worker process if that is larger), which is what a cluster's
memory limit is compared with.  The Python interpreter with numpy, scipy and numba loaded is
about 100-150 MB of every figure.

The data
--------
A synthetic dataset of LSHTC1's shape, ``svbop.datasets.make_hierarchical_text`` with
K = 12,166 classes (branching 2 x 7 x 11 x 79), D = 381,571 features and documents of about 120
words (about 68 distinct words per row), split into ``--n-train`` training rows (few: training
liblinear on LSHTC1's 93,805 rows takes hours) and LSHTC1's held-out sizes: ``--n-validation``
(2,600) and ``--n-calibration`` (2,600) rows, and ``--n-test`` (34,905) test rows.  Features are
the pipeline's tf-idf (idf fitted on the training rows, the whole vocabulary kept so that D is
LSHTC1's); the flat model is trained by the pipeline's ``train_flat_part`` jobs with
``config.yaml``'s lshtc1 entry (C = 1000, eps = 0.1, clip 0.1, 16 parts), so the weights are as
sparse as the clipping makes them on this data (about 100 non-zeros per class).  The jobs that
read the held-out rows (scoring, the baselines, the SVBOP predictions, evaluation) therefore see
the paper's sizes; the training jobs' figures are for ``--n-train`` rows only.

Every artefact is kept under ``--workdir`` and reused on the next run (delete a file, or pass
``--redo``, to recompute it); ``--steps`` picks jobs by name prefix (default all).  The figures
are written to ``<workdir>/bench_memory.tsv`` as well.

Running it
----------
From the repository root, with the library on the path::

    PYTHONPATH=$PWD/workflow python benchmarks/bench_memory.py --workdir /tmp/svbop-mem
    PYTHONPATH=$PWD/workflow python benchmarks/bench_memory.py --workdir /tmp/svbop-mem \\
        --steps score_flat predict_ evaluate --redo

``--repo DIR`` runs the scripts and the library of another checkout (e.g. an older commit
unpacked with ``git archive <commit> | tar -x -C DIR``) on the same files, for before/after
figures; files written by one version must be readable by the other.  On a shared two-core
machine, preparing the data and training the flat model took about 25 minutes, and the other jobs
about an hour with two utilities for the SVBOP jobs (``--utilities "fbeta:beta=1"
"credal:delta=2.2,gamma=1.2"``; SVBOP-Full as the paper runs it takes about 12 minutes per
utility, and the baselines' sets are large: this model's probabilities are flatter than a real
LSHTC1 model's, so thresholds and conformal sets hold hundreds to thousands of classes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
DATASET = "lshtc1"
#: LSHTC1's shape (the paper's Table 1): K, D, test rows; the validation and calibration parts
#: are 2 % each of the 128,710 rows, as config.yaml's split of lshtc1 makes them.
K, BRANCHING, D = 12166, (2, 7, 11, 79), 381571


# --------------------------------------------------------------------------------------------
# the jobs
# --------------------------------------------------------------------------------------------


class Names(list):
    """A list whose items are also attributes (Snakemake's ``Namedlist``, as scripts use it)."""

    def __init__(self, items: dict | None = None, **named):
        items = {**(items or {}), **named}
        flat = []
        for value in items.values():
            flat.extend(value if isinstance(value, list) else [value])
        super().__init__(flat)
        self._keys = list(items)
        for key, value in items.items():
            setattr(self, key, value)

    def keys(self):
        return list(self._keys)


def load_config(repo: str) -> dict:
    """``repo``'s config.yaml with the schema's defaults (its lshtc1 entry gives the parameters)."""
    sys.path.insert(0, str(Path(repo) / "workflow"))
    from svbop.config import load_yaml, validate_config

    return validate_config(load_yaml(Path(repo) / "config.yaml"))


def utility_labels(specs) -> dict[str, str]:
    from svbop import utility

    return {utility(spec).label: spec for spec in specs}


def epsilon_label(epsilon: float) -> str:
    text = f"{epsilon:.2f}"
    return text if float(text) == epsilon else repr(float(epsilon))


def jobs(args, config) -> list[dict]:
    """Every job, in an order that respects their inputs: name, script (or None) and its files."""
    cfg = config["datasets"][DATASET]
    cfg["features"]["drop_unseen"] = False  # keep D = 381,571 (the training vocabulary of LSHTC1)
    d = DATASET
    data, res = f"data/{d}", f"results/{d}"
    feats = f"{res}/features/tfidf.npz"
    labels = utility_labels(config["utilities"])
    svbop_labels = utility_labels(args.utilities) if args.utilities else labels
    out: list[dict] = [{"name": "generate", "function": "generate", "outputs": [f"{data}/dataset.npz", f"{data}/split.npz"]}]

    def job(name, script, input, output, params=None, wildcards=None, threads=1):
        out.append({"name": name, "script": script, "input": input, "output": output, "params": params or {},
                    "wildcards": {"dataset": d, **(wildcards or {})}, "threads": threads,
                    "log": f"results/logs/{name}.log"})

    job("features_tfidf", "features_tfidf", {"dataset": f"{data}/dataset.npz", "split": f"{data}/split.npz"},
        {"features": feats}, {"features": cfg["features"]})
    parts = cfg["flat"]["parts"]
    part_files = [f"{res}/models/flat/part_{i}.npz" for i in range(parts)]
    for i in range(parts):
        job(f"train_flat_part_{i}", "train_flat_part",
            {"features": feats, "dataset": f"{data}/dataset.npz", "split": f"{data}/split.npz"},
            {"model": part_files[i], "info": part_files[i].replace(".npz", ".json")},
            {"flat": cfg["flat"], "part": i, "parts": parts}, {"part": str(i)}, threads=cfg["flat"]["threads"])
    job("train_flat", "train_flat", {"parts": part_files, "infos": [p.replace(".npz", ".json") for p in part_files]},
        {"model": f"{res}/models/flat.npz", "info": f"{res}/models/flat.json"}, {"flat": cfg["flat"]})
    model = f"{res}/models/flat.npz"
    scores = f"{res}/scores/flat.npz"
    job("score_flat", "score_flat", {"model": model, "features": feats, "dataset": f"{data}/dataset.npz",
                                     "split": f"{data}/split.npz"}, [scores])
    index = f"{res}/indexes/hnsw.bin"
    job("build_index", "build_index", {"model": model},
        {"index": index, "data": index + ".dat", "sidecar": index + ".json", "info": f"{res}/indexes/hnsw.json"},
        {"hsg": {key: cfg["hsg"][key] for key in ("M", "efC")}}, threads=cfg["hsg"]["threads"])
    sets, timed = {}, {}
    for method in ("svbop_full", "svbop_full_naive", "svbop_hsg"):
        for label, spec in svbop_labels.items():
            path = f"{res}/predictions/{method}/{label}"
            sets[method, label], timed[method, label] = path + ".npz", path + ".json"
            if method == "svbop_hsg":
                job(f"predict_svbop_hsg_{label}", "predict_svbop_hsg",
                    {"model": model, "index": index, "features": feats, "split": f"{data}/split.npz"},
                    {"sets": path + ".npz", "timing": path + ".json"},
                    {"utility": spec, "k": cfg["hsg"]["k"], "ef": cfg["hsg"]["ef"]}, {"utility": label})
            else:
                job(f"predict_{method}_{label}", "predict_svbop_full",
                    {"model": model, "features": feats, "split": f"{data}/split.npz"},
                    {"sets": path + ".npz", "timing": path + ".json"}, {"utility": spec, "method": method},
                    {"utility": label})
    if args.hf:
        tree = f"{res}/models/tree_kmeans.npz"
        job("build_tree_kmeans", "build_tree",
            {"features": feats, "dataset": f"{data}/dataset.npz", "split": f"{data}/split.npz"},
            {"tree": tree, "info": tree.replace(".npz", ".json")}, {"hf": cfg["hf"], "seed": 0}, {"tree": "kmeans"})
        hf_parts = [f"{res}/models/hf_kmeans/part_{i}.npz" for i in range(cfg["hf"]["parts"])]
        for i, part in enumerate(hf_parts):
            job(f"train_tree_part_kmeans_{i}", "train_tree_part",
                {"tree": tree, "features": feats, "dataset": f"{data}/dataset.npz", "split": f"{data}/split.npz"},
                {"model": part, "info": part.replace(".npz", ".json")},
                {"hf": cfg["hf"], "part": i, "parts": len(hf_parts)}, {"tree": "kmeans", "part": str(i)},
                threads=cfg["hf"]["threads"])
        job("train_tree_kmeans", "train_tree",
            {"parts": hf_parts, "infos": [p.replace(".npz", ".json") for p in hf_parts],
             "tree_info": tree.replace(".npz", ".json")},
            {"model": f"{res}/models/hf_kmeans.npz", "info": f"{res}/models/hf_kmeans.json"}, {"hf": cfg["hf"]},
            {"tree": "kmeans"})
        for label, spec in svbop_labels.items():
            path = f"{res}/predictions/svbop_hf_kmeans/{label}"
            sets["svbop_hf_kmeans", label], timed["svbop_hf_kmeans", label] = path + ".npz", path + ".json"
            job(f"predict_svbop_hf_kmeans_{label}", "predict_svbop_hf",
                {"model": f"{res}/models/hf_kmeans.npz", "features": feats, "split": f"{data}/split.npz"},
                {"sets": path + ".npz", "timing": path + ".json"}, {"utility": spec},
                {"tree": "kmeans", "utility": label})
    tuning = []
    for label, spec in labels.items():
        path = f"{res}/predictions/threshold/{label}"
        sets["threshold", label] = path + ".npz"
        tuning.append(path + ".tsv")
        job(f"predict_threshold_{label}", "predict_threshold", {"scores": scores},
            {"sets": path + ".npz", "tuning": path + ".tsv"},
            {"utility": spec, "grid": config["baselines"]["threshold_grid"]}, {"utility": label})
    for s in config["baselines"]["top_s"]:
        sets["top_s", str(s)] = f"{res}/predictions/top_s/{s}.npz"
        job(f"predict_top_s_{s}", "predict_top_s", {"scores": scores}, [sets["top_s", str(s)]], {"s": s}, {"s": str(s)})
    for eps in config["baselines"]["icp_epsilon"]:
        label = epsilon_label(eps)
        sets["icp", label] = f"{res}/predictions/icp/{label}.npz"
        job(f"predict_icp_{label}", "predict_icp", {"scores": scores}, [sets["icp", label]], {"epsilon": eps},
            {"epsilon": label})
    job("summarise_dataset", "summarise_dataset",
        {"dataset": f"{data}/dataset.npz", "split": f"{data}/split.npz", "scores": scores,
         "model_info": f"{res}/models/flat.json"}, [f"{res}/summary.json"],
        {"dataset": d, "title": "LSHTC1-shaped synthetic", "features": "tfidf"})
    job("evaluate", "evaluate",
        {"sets": list(sets.values()), "tuning": tuning, "timings": list(timed.values()), "scores": scores},
        [f"{res}/metrics.tsv"],
        {"dataset": d, "utilities": list(labels.values()), "methods": list(sets), "timed": list(timed)})
    return out


def generate(args, workdir: Path) -> None:
    """The synthetic dataset and its split (train, then LSHTC1's held-out sizes)."""
    import numpy as np

    from svbop.datasets import save_split
    from svbop.datasets.synthetic import make_hierarchical_text

    sizes = {"train": args.n_train, "validation": args.n_validation, "calibration": args.n_calibration,
             "test": args.n_test}
    n = sum(sizes.values())
    dataset = make_hierarchical_text(n_classes=K, branching=BRANCHING, n_features=D, n_samples=n, seed=args.seed,
                                     name=DATASET)
    dataset.save(workdir / f"data/{DATASET}/dataset.npz")
    order = np.random.default_rng(args.seed).permutation(n)
    bounds = np.cumsum([0, *sizes.values()])
    split = {part: np.sort(order[lo:hi]) for part, lo, hi in zip(sizes, bounds[:-1], bounds[1:])}
    save_split(workdir / f"data/{DATASET}/split.npz", split)


# --------------------------------------------------------------------------------------------
# running one job in a child process
# --------------------------------------------------------------------------------------------


def run_child(args) -> None:
    """``--child NAME``: run one job here and print its measurements as JSON (last line)."""
    config = load_config(args.repo)
    spec = next(j for j in jobs(args, config) if j["name"] == args.child)
    workdir = Path(args.workdir)
    os.chdir(workdir)
    wall, cpu = time.perf_counter(), time.process_time()
    if spec.get("function") == "generate":
        generate(args, workdir)
    else:
        for path in (spec["output"].values() if isinstance(spec["output"], dict) else spec["output"]):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(spec["log"]).parent.mkdir(parents=True, exist_ok=True)
        io = lambda value: Names(value) if isinstance(value, dict) else Names({f"_{i}": v for i, v in enumerate(value)})  # noqa: E731
        snakemake = SimpleNamespace(
            input=io(spec["input"]), output=io(spec["output"]), params=Names(spec["params"]),
            wildcards=Names(spec["wildcards"]), log=Names(log=spec["log"]), threads=spec["threads"],
            resources=Names({}), rule=spec["script"],
        )
        runpy.run_path(str(Path(args.repo) / "workflow/scripts" / f"{spec['script']}.py"),
                       init_globals={"snakemake": snakemake}, run_name="__main__")
    wall = time.perf_counter() - wall
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({
        "step": args.child, "wall_s": wall,
        "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
        "peak_mb": max(own.ru_maxrss, kids.ru_maxrss) / 1024,
    }))


def outputs_of(spec) -> list[str]:
    if "outputs" in spec:
        return spec["outputs"]
    out = spec["output"]
    return list(out.values()) if isinstance(out, dict) else list(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/svbop-bench-memory", help="where the files go (kept between runs)")
    ap.add_argument("--repo", default=str(ROOT), help="checkout whose scripts and library are run (default: this one)")
    ap.add_argument("--steps", nargs="*", default=None,
                    help="run only the jobs whose name starts with one of these (default: all missing, or all with --redo)")
    ap.add_argument("--redo", action="store_true", help="run the selected jobs even where their outputs exist")
    ap.add_argument("--n-train", type=int, default=8559, help="training rows (default 8,559: 4 rows per class in all)")
    ap.add_argument("--n-validation", type=int, default=2600)
    ap.add_argument("--n-calibration", type=int, default=2600)
    ap.add_argument("--n-test", type=int, default=34905)
    ap.add_argument("--utilities", nargs="*", default=None,
                    help="utility specs of the SVBOP jobs (default: config.yaml's four; the baselines always use all)")
    ap.add_argument("--no-hf", dest="hf", action="store_false", help="skip SVBOP-HF's 2-means tree and its jobs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.workdir = str(Path(args.workdir).resolve())
    args.repo = str(Path(args.repo).resolve())
    if args.child:
        run_child(args)
        return

    config = load_config(args.repo)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    forwarded = [a for a in sys.argv[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(args.repo) / "workflow"), os.environ.get("PYTHONPATH", "")])}
    rows = []
    print(f"repo {args.repo}, workdir {workdir}, load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'step':<44} {'wall s':>9} {'CPU s':>9} {'peak MB':>9}", flush=True)
    for spec in jobs(args, config):
        selected = args.steps is None or any(spec["name"].startswith(prefix) for prefix in args.steps)
        done = all((workdir / path).exists() for path in outputs_of(spec))
        if not selected or (done and not args.redo):
            continue
        result = subprocess.run([sys.executable, str(Path(__file__).resolve()), *forwarded, "--child", spec["name"]],
                                env=env, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"{spec['name']} failed:\n{result.stderr[-4000:]}")
        row = json.loads(result.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['step']:<44} {row['wall_s']:>9.1f} {row['cpu_s']:>9.1f} {row['peak_mb']:>9.0f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    table = workdir / "bench_memory.tsv"
    new = not table.exists()
    with open(table, "a") as fh:
        if new:
            fh.write("repo\tstep\twall_s\tcpu_s\tpeak_mb\n")
        for row in rows:
            fh.write(f"{args.repo}\t{row['step']}\t{row['wall_s']:.2f}\t{row['cpu_s']:.2f}\t{row['peak_mb']:.0f}\n")


if __name__ == "__main__":
    main()
