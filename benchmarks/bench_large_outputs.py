"""Outputs larger than memory (issue 49, item 6): `svbop report` and the conformal library on a 4 GB
float32 logits file, memory-mapped, with every process's peak resident memory.

Makes seeded ImageNet-like logits (``bench_report.py``'s ``realistic`` outputs: a Gaussian logit
per class, one class lifted by log(K) (0.9 + Gamma(2, 0.5)) and four by 30-90 % of it, labels
drawn from their softmax, the model 1.7 times over-confident), written block by block with plain
file writes (the generator itself holds one block), then measures:

* ``report``: ``svbop report --test LOGITS LABELS`` (validation and calibration split off the test
  rows, as a user without them gets), each Snakemake job's peak resident memory and wall time from
  its benchmark file (``max_rss``: psutil's RSS, mapped file pages included, sampled), every process's
  true peak (VmHWM of the command, Snakemake and each job, polled every 0.2 s), wall and CPU;
* ``library``: in a fresh process, on ``np.load(LOGITS, mmap_mode="r")``: softmax probabilities
  written block by block to a ``.npy`` (:func:`svbop.calibration.outputs_to_probabilities` per
  block), then ``ConformalSetPredictor(score=..., epsilon=0.1)`` fitted on the first 10 % of the rows
  and ``predict`` / ``predict_mask`` on all of them, and ``svbop.predict_sets`` (F1), each with the
  process's peak resident memory (VmHWM) and wall/CPU seconds.

    python benchmarks/bench_large_outputs.py --shape 1000000x1000 --what report --what library
    python benchmarks/bench_large_outputs.py --shape 10000000x100 --what library
    python benchmarks/bench_large_outputs.py --generate-only --folder /tmp/big --shape 1000000x1000

The inputs (4 GB each at these shapes) are deleted at the end unless ``--keep``.  Not a test: a
measurement, printed and written to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import _realistic  # noqa: E402


def generate(folder: Path, n: int, K: int, seed: int = 0, block: int = 8192) -> tuple[Path, Path]:
    """``test_logits.npy`` (float32, n x K) and ``test_labels.npy``, written block by block."""
    from numpy.lib import format as npy_format

    rng = np.random.default_rng(seed)
    logits, labels = folder / "test_logits.npy", folder / "test_labels.npy"
    y = np.empty(n, dtype=np.int64)
    with open(logits, "wb") as fh:
        npy_format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (n, K)})
        for lo in range(0, n, block):
            z, y[lo: lo + block] = _realistic(min(block, n - lo), K, rng, block=block)
            fh.write(z.astype(np.float32).tobytes())
    np.save(labels, y)
    return logits, labels


def _rule_rows(bench_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(bench_dir.rglob("*.tsv")):
        with open(path) as fh:
            got = list(csv.DictReader(fh, delimiter="\t"))
        if got:
            rss = got[0].get("max_rss", "NA")
            rows.append({"job": str(path.relative_to(bench_dir))[:-4], "wall_s": round(float(got[0]["s"]), 2),
                         "cpu_s": round(float(got[0].get("cpu_time", "nan") or "nan"), 2),
                         "max_rss_mb": float(rss) if rss not in ("NA", "-", "") else None})
    return sorted(rows, key=lambda r: -(r["max_rss_mb"] or 0))


def _tree_peaks(root: int, peaks: dict, stop) -> None:
    """Every 0.2 s, the peak resident memory (VmHWM: it never misses a spike) of ``root`` and each of its
    descendants, by pid, and the largest private memory seen (RssAnon: not the mapped input files' pages,
    sampled): ``peaks[pid] = [name, MB, private MB]``."""
    while not stop.is_set():
        children: dict[int, list[int]] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/stat") as fh:
                        ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        todo = [root]
        while todo:
            pid = todo.pop()
            todo.extend(children.get(pid, ()))
            try:
                with open(f"/proc/{pid}/status") as fh:
                    status = {ln.split(":")[0]: ln.split()[1:] for ln in fh}
                hwm = int(status["VmHWM"][0]) / 1024 if "VmHWM" in status else None
                anon = int(status["RssAnon"][0]) / 1024 if "RssAnon" in status else 0.0
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if hwm is not None:
                name = ("svbop report" if pid == root else "snakemake" if "-m snakemake" in cmd and "--configfile" in cmd
                        else next((w.rsplit("/", 1)[-1] for w in cmd.split() if w.endswith(".py")), cmd[:60]))
                old = peaks.get(pid, ["", 0.0, 0.0])
                peaks[pid] = [name, max(hwm, old[1]), max(anon, old[2])]
        stop.wait(0.2)


def run_report(folder: Path, cores: int, validation: bool = False) -> dict:
    import threading

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    more = ["--validation", "val_logits.npy", "val_labels.npy"] if validation else []
    proc = subprocess.Popen([sys.executable, "-m", "svbop", "report", "--test", "test_logits.npy", "test_labels.npy",
                             *more, "--cores", str(cores), "-o", "page"], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peaks: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_tree_peaks, args=(proc.pid, peaks, stop), daemon=True)
    watcher.start()
    _, err = proc.communicate()
    stop.set()
    watcher.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"svbop report failed:\n{err[-3000:]}")
    jobs = _rule_rows(folder / "page" / ".svbop" / "results" / "benchmarks")
    processes = sorted(([name, round(mb, 1)] for name, mb, _ in peaks.values()), key=lambda r: -r[1])
    private = sorted(([name, round(mb, 1)] for name, _, mb in peaks.values()), key=lambda r: -r[1])
    return {"wall_s": round(wall, 1), "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
            "peak_rss_mb_any_process": round(after.ru_maxrss / 1024, 1),
            "peak_rss_mb_svbop_report": round(next((mb for n, mb, _ in peaks.values() if n == "svbop report"), 0.0), 1),
            "peak_rss_mb_snakemake": round(max((mb for n, mb, _ in peaks.values() if n == "snakemake"), default=0.0), 1),
            "processes_vmhwm_mb": processes, "processes_private_mb": private, "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "jobs": jobs}


_LIBRARY = r'''
import json, os, resource, sys, time
import numpy as np
import svbop
from svbop._blocks import row_blocks
from svbop.calibration import outputs_to_probabilities
from svbop.conformal import ConformalSetPredictor
from numpy.lib import format as npy_format

logits, labels, probs, score = sys.argv[1:5]
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out = {}
def step(name, fn):
    t0, c0 = time.perf_counter(), cpu()
    value = fn()
    out[name] = {"wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(cpu() - c0, 1), "peak_rss_mb": round(hwm(), 1)}
    print(name, out[name], flush=True)
    return value
Z = np.load(logits, mmap_mode="r")
y = np.load(labels)
n, K = Z.shape
def softmax_to_file():
    P = npy_format.open_memmap(probs, mode="w+", dtype=np.float32, shape=(n, K))
    for lo, hi, block in row_blocks(Z):
        P[lo:hi] = outputs_to_probabilities(block, dtype=np.float32)
        from svbop._blocks import release_rows
        release_rows(P, lo, hi)
    P.flush()
step("softmax to .npy", softmax_to_file)
P = np.load(probs, mmap_mode="r")
m = n // 10
cp = step(f"ConformalSetPredictor({score}).fit, {m:,} rows", lambda: ConformalSetPredictor(score=score, epsilon=0.1).fit(P[:m], y[:m]))
sets = step(f"predict, {n:,} rows", lambda: cp.predict(P))
out["coverage"] = float(np.mean(sets.contains(y))); out["mean_size"] = float(np.mean(sets.sizes))
del sets
mask = step(f"predict_mask, {n:,} rows", lambda: cp.predict_mask(P))
del mask
f1 = step(f"predict_sets (F1), {n:,} rows", lambda: svbop.predict_sets(P, "fbeta:beta=1"))
out["f1_mean_size"] = float(np.mean(f1.sizes))
print("JSON" + json.dumps(out))
'''


def run_library(folder: Path, score: str) -> dict:
    load = os.getloadavg()[0]
    res = subprocess.run([sys.executable, "-c", _LIBRARY, str(folder / "test_logits.npy"), str(folder / "test_labels.npy"),
                          str(folder / "probabilities.npy"), score], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"the library run failed:\n{res.stderr[-3000:]}")
    (folder / "probabilities.npy").unlink(missing_ok=True)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("JSON"))
    return {"score": score, "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            **json.loads(line[4:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1000000x1000", help="N_ROWSxK (default 1000000x1000: 4 GB of float32)")
    ap.add_argument("--what", action="append", choices=("report", "library"), help="what to run (repeatable)")
    ap.add_argument("--score", default="aps", help="the conformal score of the library run (default aps)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--folder", help="where the inputs go (default: a new temporary folder)")
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the inputs and the report's folder")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--validation-rows", type=int, default=0,
                    help="also give --validation of this many rows (the calibration rows are then split off the test "
                         "rows alone, as issue 56 measured); default none")
    args = ap.parse_args()
    n, K = (int(v) for v in args.shape.lower().split("x"))
    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix=f"bench_large_{args.shape}_"))
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not (folder / "test_logits.npy").is_file():
        generate(folder, n, K)
    if args.validation_rows and not (folder / "val_logits.npy").is_file():
        val_folder = folder / "val"
        val_folder.mkdir(exist_ok=True)
        generate(val_folder, args.validation_rows, K, seed=1)
        (val_folder / "test_logits.npy").rename(folder / "val_logits.npy")
        (val_folder / "test_labels.npy").rename(folder / "val_labels.npy")
        val_folder.rmdir()
    print(f"inputs in {folder} ({n:,} x {K:,} float32, {(folder / 'test_logits.npy').stat().st_size / 1e9:.1f} GB; "
          f"{time.perf_counter() - t0:.0f} s)", flush=True)
    if args.generate_only:
        return
    results = {"shape": args.shape, "cpus": os.cpu_count()}
    try:
        for what in args.what or ["report", "library"]:
            if what == "report":
                results["report"] = rec = run_report(folder, args.cores, validation=bool(args.validation_rows))
                print(f"svbop report: wall {rec['wall_s']} s, CPU {rec['cpu_s']} s, peak of any process "
                      f"{rec['peak_rss_mb_any_process']} MB (the svbop report process {rec['peak_rss_mb_svbop_report']} MB, "
                      f"Snakemake {rec['peak_rss_mb_snakemake']} MB), load {rec['load_before']} -> {rec['load_after']}")
                print("  largest processes (VmHWM, polled):", rec["processes_vmhwm_mb"][:8])
                print("  largest private memory (RssAnon, polled):", rec["processes_private_mb"][:8])
                print("  every job (Snakemake's benchmark files, max_rss):")
                for job in rec["jobs"]:
                    print(f"    {job['job']}: {job['max_rss_mb']} MB, {job['wall_s']} s")
            else:
                results["library"] = rec = run_library(folder, args.score)
                print(f"library ({args.score}), load {rec['load_before']} -> {rec['load_after']}:")
                for key, value in rec.items():
                    if isinstance(value, dict):
                        print(f"    {key}: wall {value['wall_s']} s, CPU {value['cpu_s']} s, peak {value['peak_rss_mb']} MB")
                print(f"    coverage {rec['coverage']:.4f}, mean size {rec['mean_size']:.2f}; F1 sets' mean size "
                      f"{rec['f1_mean_size']:.2f}")
    finally:
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
