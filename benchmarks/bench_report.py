"""What `svbop report` costs on a model's outputs: wall time, CPU time and peak memory (issue 37).

Makes seeded synthetic logits of a given shape (validation and test rows, over-confident by a
temperature of 2.5), runs `svbop report` on them in a fresh folder, and reports the command's wall
seconds, the CPU seconds of it and every process it started, and the largest resident memory of any
one of them (getrusage of the waited-for children), with the slowest rules from Snakemake's
`results/benchmarks/` files. Not a test: a measurement, written to --out as JSON.

    python benchmarks/bench_report.py --shape 10000x1000 --shape 2000x10000 --cores 2 --out bench_report.json
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


def make_outputs(folder: Path, n_test: int, K: int, n_val: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for part, n in (("val", n_val), ("test", n_test)):
        z = rng.normal(size=(n, K)).astype(np.float64) * 1.5
        z[np.arange(n), rng.integers(0, K, n)] += 4.0  # one likely class per row
        P = np.exp(z - z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        y = (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
        np.save(folder / f"{part}_logits.npy", (2.5 * z).astype(np.float32))
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


def run(shape: str, cores: int, keep: bool) -> dict:
    n_test, K = (int(v) for v in shape.lower().split("x"))
    work = Path(tempfile.mkdtemp(prefix=f"bench_report_{shape}_"))
    make_outputs(work, n_test, K, n_val=max(1000, n_test // 5))
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
    rules = rule_seconds(work / "page" / "results" / "benchmarks")
    record = {
        "shape": shape, "n_test": n_test, "n_validation": max(1000, n_test // 5), "K": K, "cores": cores,
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
    ap.add_argument("--shape", action="append", help="N_TESTxK (repeatable; default 10000x1000 and 2000x10000)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the folders (their path is printed)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    shapes = args.shape or ["10000x1000", "2000x10000"]
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "processor": platform.processor()},
               "runs": []}
    for shape in shapes:
        record = run(shape, args.cores, args.keep)
        results["runs"].append(record)
        print(f"{shape}: wall {record['wall_s']} s, CPU {record['cpu_s']} s, peak {record['peak_rss_mb_one_process']} MB "
              f"(one process), load {record['load_before'][0]} -> {record['load_after'][0]}")
        for job in record["slowest_jobs"][:3]:
            print(f"    {job['job']}: {job['wall_s']} s, {job['max_rss_mb']} MB")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
