"""Conformal sets of a memory-mapped output matrix on Dask (issue 54, item 6) against one process.

Writes (once, kept under ``--dir``) an ``n x K`` float32 ``.npy`` of class probabilities (rows of
``u**4``, ``u`` uniform, normalised: a peaked model; block by block, never whole in memory) and
labels drawn from those rows, then times on the same file:

* **one process**: the library's numpy path over the memory-mapped rows, one block of
  ``--chunk-rows`` rows at a time (``fit`` on the calibration rows, then ``predict_mask`` of
  every block and its set sizes), no scheduler;
* **dask, 1 worker**: the same work through ``svbop.conformal.dask`` on a ``LocalCluster`` of one
  process worker with one thread (``npy_rows`` blocks of the same size; the mask is reduced to set
  sizes on the workers, never gathered): the scheduler's overhead is its time over one process's;
* **dask, W workers** (``--workers``, default 2): throughput per worker.

Every run's ``quantile_`` and set sizes are checked equal to the one-process run.  Prints the
CPU, the cores, the load average before and after, and rows per second (per worker).  Not a test.

    python benchmarks/bench_dask.py [--rows 10000000] [--classes 100] [--cal 1000000] [--chunk-rows 250000]
        [--score lac] [--workers 2] [--dir /tmp/svbop_bench_dask]

At ``--rows 100000000`` the file is 40 GB (float32): it needs that much free disk, and its rows
are read from disk at every pass (more than this machine's memory).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _timing import cpu_name


def write_outputs(path: str, n: int, K: int, chunk: int, seed: int = 0) -> None:
    """The probabilities (float32 ``.npy``) and labels (``<path>.labels.npy``), block by block."""
    if os.path.exists(path) and os.path.exists(path + ".labels.npy"):
        mm = np.load(path, mmap_mode="r")
        if mm.shape == (n, K) and mm.dtype == np.float32:
            return
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, K))
    y = np.lib.format.open_memmap(path + ".labels.npy", mode="w+", dtype=np.int64, shape=(n,))
    for r0 in range(0, n, chunk):
        r1 = min(n, r0 + chunk)
        rng = np.random.default_rng([seed, r0])
        X = rng.random((r1 - r0, K), dtype=np.float32) ** 16 + np.float32(1e-6)  # a few classes dominate
        X /= X.sum(axis=1, keepdims=True)
        mm[r0:r1] = X
        y[r0:r1] = np.minimum((X.cumsum(axis=1) < rng.random((r1 - r0, 1), dtype=np.float32)).sum(axis=1), K - 1)
    mm.flush()
    y.flush()
    del mm, y



def cpu_seconds() -> float:
    """This process's CPU time (user + system), for ``client.run`` on the workers."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def load() -> str:
    a = os.getloadavg()
    return f"{a[0]:.1f} {a[1]:.1f} {a[2]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--cal", type=int, default=1_000_000, help="calibration rows (the first ones)")
    ap.add_argument("--chunk-rows", type=int, default=250_000)
    ap.add_argument("--score", default="lac")
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/svbop_bench_dask")
    args = ap.parse_args()

    import dask.array as da
    from distributed import Client, LocalCluster

    from svbop import ConformalSetPredictor
    from svbop.conformal.dask import npy_rows

    n, K, chunk, ncal = args.rows, args.classes, args.chunk_rows, args.cal
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, f"P_{n}x{K}.npy")
    t0 = time.perf_counter()
    write_outputs(path, n, K, chunk)
    print(f"file {path}: {n:,} x {K} float32, {n * K * 4 / 1e9:.1f} GB (ready in {time.perf_counter() - t0:.0f} s)")
    print(f"CPU {cpu_name()}, {os.cpu_count()} cores; load average {load()}")
    y = np.load(path + ".labels.npy", mmap_mode="r")
    mm = np.load(path, mmap_mode="r")
    make = lambda: ConformalSetPredictor(args.epsilon, score=args.score, random_state=0)  # noqa: E731

    # one process: the numpy path, block by block over the mapped rows
    t0 = time.perf_counter()
    one = make().fit(mm[:ncal], np.asarray(y[:ncal]))
    t_fit1 = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    sizes1 = np.concatenate([one.predict_mask(mm[r0:min(n, r0 + chunk)]).sum(axis=1) for r0 in range(0, n, chunk)])
    t_pred1, c_pred1 = time.perf_counter() - t0, time.process_time() - c0
    print(f"one process: fit {ncal:,} rows {t_fit1:.1f} s; predict_mask {n:,} rows {t_pred1:.1f} s wall,"
          f" {c_pred1:.1f} s CPU ({n / t_pred1:,.0f} rows/s); mean set size {sizes1.mean():.3f}; load {load()}")

    rows = [("one process", 1, t_fit1, t_pred1, c_pred1)]
    for workers in sorted({1, args.workers}):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          memory_limit="2GiB") as cluster, Client(cluster) as client:
            P = npy_rows(path, chunk)
            yd = da.from_array(np.asarray(y[:ncal]), chunks=chunk)
            make().fit(P[:chunk], yd[:chunk])  # warm-up: imports and compiled kernels in every worker
            t0 = time.perf_counter()
            many = make().fit(P[:ncal], yd)
            t_fit = time.perf_counter() - t0
            before = client.run(cpu_seconds)
            t0 = time.perf_counter()
            sizes = many.predict_mask(P).sum(axis=1).compute()
            t_pred = time.perf_counter() - t0
            after = client.run(cpu_seconds)
            c_pred = sum(after[w] - before[w] for w in after)
            assert many.quantile_ == one.quantile_, (many.quantile_, one.quantile_)
            assert np.array_equal(sizes, sizes1)
            peak = client.run(lambda: int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024)
            rows.append((f"dask, {workers} worker(s)", workers, t_fit, t_pred, c_pred))
            print(f"dask {workers} worker(s): fit {t_fit:.1f} s; predict_mask {t_pred:.1f} s wall, {c_pred:.1f} s CPU"
                  f" ({n / t_pred / workers:,.0f} rows/s per worker); worker peak RSS"
                  f" {max(peak.values()) / 2**20:.0f} MiB; same quantile and set sizes; load {load()}")
    print()
    print("| run | workers | fit (s) | predict_mask wall (s) | CPU (s, all workers) | rows/s per worker (wall)"
          " | rows per CPU second | CPU / one process |")
    print("|---|---|---|---|---|---|---|---|")
    for name, w, tf, tp, cp in rows:
        print(f"| {name} | {w} | {tf:.1f} | {tp:.1f} | {cp:.1f} | {n / tp / w:,.0f} | {n / cp:,.0f}"
              f" | {cp / c_pred1:.2f} |")


if __name__ == "__main__":
    main()
