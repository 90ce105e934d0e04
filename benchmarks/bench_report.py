"""What `svbop report` costs on a model's outputs: wall time, CPU time and peak memory (issues 37, 42).

Makes seeded synthetic outputs of a given shape (float32 logits of validation and test rows, labels drawn
from the model's own distribution), runs `svbop report` on them in a fresh folder, and reports the
command's wall seconds, the CPU seconds of it and every process it started, the largest resident memory
of any one of them (getrusage of the waited-for children), the load average before and after, the
number of jobs, and the slowest jobs from Snakemake's benchmark files. Not a test: a measurement,
written to --out as JSON.

Two kinds of outputs (--data):

* ``realistic`` (default): an ImageNet-like model. Per row a Gaussian logit per class, one class
  lifted by a margin of log(K) (0.9 + Gamma(2, 0.5)) and four others by 30-90 % of it, the label
  drawn from the softmax of these logits, the model's logits 1.7 times them (over-confident):
  top-1 accuracy 69 % (K = 100), 78 % (1,000), 84 % (10,000); top-5 93 %.
* ``flat``: the outputs of issue 37's measurement (a likely class lifted by 4 over Gaussian noise of
  scale 1.5, logits 2.5 times too confident): near-uniform rows at K = 1,000 (top-1 about 2 %), so
  that conformal sets at epsilon 0.1 hold hundreds of classes.

    python benchmarks/bench_report.py --cores 2 --out bench_report.json   # 10000x100, 50000x1000, 2000x10000
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _realistic(n: int, K: int, rng: np.random.Generator, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    logits = np.empty((n, K), dtype=np.float32)
    y = np.empty(n, dtype=np.int64)
    for lo in range(0, n, block):
        m = min(block, n - lo)
        r = np.arange(m)
        t = rng.normal(size=(m, K))
        margin = np.log(K) * (0.9 + rng.gamma(2.0, 0.5, m))
        t[r, rng.integers(0, K, m)] += margin
        t[r[:, None], rng.integers(0, K, (m, 4))] += margin[:, None] * rng.uniform(0.3, 0.9, (m, 4))
        p = np.exp(t - t.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        y[lo: lo + m] = np.minimum((p.cumsum(axis=1) < rng.random((m, 1))).sum(axis=1), K - 1)
        logits[lo: lo + m] = 1.7 * t
    return logits, y


def _flat(n: int, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    z = rng.normal(size=(n, K)).astype(np.float64) * 1.5
    z[np.arange(n), rng.integers(0, K, n)] += 4.0  # one likely class per row
    P = np.exp(z - z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return (2.5 * z).astype(np.float32), y


def make_outputs(folder: Path, n_test: int, K: int, n_val: int, seed: int = 0, data: str = "realistic") -> None:
    rng = np.random.default_rng(seed)
    for part, n in (("val", n_val), ("test", n_test)):
        logits, y = (_realistic if data == "realistic" else _flat)(n, K, rng)
        np.save(folder / f"{part}_logits.npy", logits)
        np.save(folder / f"{part}_labels.npy", y)


def rule_seconds(bench_dir: Path) -> list[tuple[str, float, float]]:
    """(rule/job, wall s, max RSS MB) of every Snakemake benchmark file, slowest first."""
    out = []
    for path in bench_dir.rglob("*.tsv"):
        with open(path) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if rows:
            rss = rows[0].get("max_rss", "NA")
            out.append((str(path.relative_to(bench_dir)), float(rows[0]["s"]), float(rss) if rss not in ("NA", "-") else float("nan")))
    return sorted(out, key=lambda r: -r[1])


def _job_count(log: Path) -> int | None:
    """The number of jobs Snakemake ran ("37 of 37 steps (100%) done"), from the command's log."""
    import re

    steps = re.findall(r"\d+ of (\d+) steps", log.read_text()) if log.is_file() else []
    return int(steps[-1]) if steps else None


def run(shape: str, cores: int, keep: bool, data: str = "realistic") -> dict:
    n_test, K = (int(v) for v in shape.lower().split("x"))
    work = Path(tempfile.mkdtemp(prefix=f"bench_report_{shape}_"))
    make_outputs(work, n_test, K, n_val=max(1000, n_test // 5), data=data)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "svbop", "report", "--test", "test_logits.npy", "test_labels.npy",
                             "--validation", "val_logits.npy", "val_labels.npy", "--cores", str(cores), "-o", "page"],
                            cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"svbop report failed on {shape}:\n{result.stderr[-3000:]}")
    # the working files: OUT/.svbop/ (issue 42's layout) or OUT/ (before it)
    bench_dir = next((d for d in (work / "page" / ".svbop" / "results" / "benchmarks", work / "page" / "results" / "benchmarks")
                      if d.is_dir()), work / "page" / "results" / "benchmarks")
    rules = rule_seconds(bench_dir)
    record = {
        "shape": shape, "data": data, "n_test": n_test, "n_validation": max(1000, n_test // 5), "K": K, "cores": cores,
        "jobs": _job_count(work / "page" / "svbop_report.log"), "jobs_with_benchmark": len(rules),
        "jobs_wall_s_sum": round(sum(r[1] for r in rules), 1),
        "wall_s": round(wall, 1),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "peak_rss_mb_one_process": round(after.ru_maxrss / 1024, 1),
        "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
        "slowest_jobs": [{"job": j, "wall_s": round(s, 2), "max_rss_mb": r} for j, s, r in rules[:6]],
    }
    if not keep:
        shutil.rmtree(work)
    else:
        record["folder"] = str(work)
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", help="N_TESTxK (repeatable; default 10000x100, 50000x1000 and 2000x10000)")
    ap.add_argument("--data", choices=("realistic", "flat"), default="realistic", help="kind of outputs (see above)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the folders (their path is printed)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    shapes = args.shape or ["10000x100", "50000x1000", "2000x10000"]
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "processor": platform.processor()},
               "runs": []}
    for shape in shapes:
        record = run(shape, args.cores, args.keep, args.data)
        results["runs"].append(record)
        print(f"{shape} ({args.data}): wall {record['wall_s']} s, CPU {record['cpu_s']} s, peak "
              f"{record['peak_rss_mb_one_process']} MB (one process), {record['jobs']} jobs, load {record['load_before'][0]} -> "
              f"{record['load_after'][0]}", flush=True)
        for job in record["slowest_jobs"][:3]:
            print(f"    {job['job']}: {job['wall_s']} s, {job['max_rss_mb']} MB")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
