"""Time to read and check a model's outputs before any work starts (`svbop.datasets.outputs.check_model_outputs`).

Writes (in a temporary folder) a test part of ``--rows`` x ``--classes`` float32 scores as ``.npy``
(logits, and the same rows as probabilities), int64 labels and int32 groups, and times, in one run on
the same files (median of ``--repeats``):

* ``np.load`` of the scores file alone (the floor: reading the bytes once);
* ``check_model_outputs`` with ``outputs="logits"``, ``"probabilities"`` and ``"auto"`` (every
  check: regular files, headers, shapes, finiteness, row sums, label range, row counts, groups);
* ``read_model_outputs`` (the same checks and the float64 dataset the workflow builds),

and prints each time and its ratio to ``np.load``.  Not a test.

    python benchmarks/bench_read_outputs.py [--rows 50000] [--classes 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from _timing import median_time

from svbop.datasets.outputs import check_model_outputs, read_model_outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--classes", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    z = rng.normal(size=(args.rows, args.classes)).astype(np.float32) * 3
    P = np.exp(z - z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = rng.integers(0, args.classes, args.rows)
    g = rng.integers(0, 20, args.rows).astype(np.int32)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        np.save(d / "logits.npy", z)
        np.save(d / "probs.npy", P.astype(np.float32))
        np.save(d / "y.npy", y)
        np.save(d / "g.npy", g)
        logits = {"test": {"scores": d / "logits.npy", "labels": d / "y.npy", "groups": d / "g.npy"}}
        probs = {"test": {"scores": d / "probs.npy", "labels": d / "y.npy", "groups": d / "g.npy"}}
        base, _ = median_time(lambda: np.load(d / "logits.npy"), args.repeats)
        rows = [
            ("np.load (scores only)", (base, None)),
            ("check_model_outputs logits", median_time(lambda: check_model_outputs(logits, outputs="logits"), args.repeats)),
            ("check_model_outputs probabilities", median_time(lambda: check_model_outputs(probs, outputs="probabilities"),
                                                          args.repeats)),
            ("check_model_outputs auto (probabilities)", median_time(lambda: check_model_outputs(probs), args.repeats)),
            ("read_model_outputs logits", median_time(lambda: read_model_outputs(None, logits, outputs="logits"), args.repeats)),
        ]
    print(f"{args.rows:,} x {args.classes:,} float32 scores, median of {args.repeats}")
    for name, (t, _) in rows:
        print(f"  {name:<42} {t:8.3f} s  {t / base:6.2f} x np.load")


if __name__ == "__main__":
    main()
