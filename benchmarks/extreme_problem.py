"""A learnable extreme multi-class problem, written as LIBSVM files (issue 49).

A seeded generator of sparse multi-class data with a known class structure that a trained tree can
recover, at K = 10^4 - 10^6 classes, streamed to ``train.txt`` and ``test.txt`` (libSVM: ``label
index:value ...``, labels ``0..K-1``, indices 1-based and sorted) so that svbop
(:func:`svbop.datasets.libsvm.read_libsvm`) and napkinXC read the same files.  Rows are drawn and written
10,000 at a time, each block from its own seeded generator: memory is bounded by a block, not by the
number of rows.

The hidden structure:

* **Hierarchy.** The classes are the leaves of a complete ``--branching``-ary tree (class ``c``'s
  ancestor at height ``h`` is ``c // b^h``); every ancestor below the root (heights 1 .. ``depth - 1``)
  has ``--shared`` features of its own, shared by every class below it.
* **Classes.** Every class has ``--own`` features of its own.
* **Rows.** A row of class ``c`` draws ``--own-per-row`` of its class's own features (without
  replacement), ``--sibling-per-row`` own features of classes drawn uniformly among ``c``'s hidden
  siblings (``c`` included: the confusers that make sets of more than one class worth predicting),
  ``--shared-per-row`` of each of its ancestors' features (with replacement), and
  ``--noise`` features from a Zipf-like vocabulary of ``--vocabulary`` common words (exponent 1.1,
  shared by all classes: LSHTC's stop words).  Each drawn feature counts 1, duplicates add up; the
  values are tf-idf, ``log1p(count) * ln(1 / P(feature in a row))`` with the probability that the
  generator itself puts the feature in a row of a uniformly drawn class (so common words weigh
  little, as in LSHTC's tf-idf rows, and a 2-means tree on class profiles sees the hierarchy
  rather than the common words), L2-normalised per row (LSHTC1's rows hold 70-110 non-zeros; the
  defaults give about 50-60 at K = 10^4 - 10^6).
* **Rows per class.** ``--train-per-class`` training rows for every class (so every class is seen
  in training), in a shuffled order; ``--test-rows`` test rows with classes drawn uniformly.

Feature ids (1-based in the files): the vocabulary first, then the ancestors' features (height 1
first), then the classes' own.  ``D = vocabulary + shared x (internal nodes below the root) + own x K``;
the defaults keep ``D`` under svbop's reader's cap of 2^24 up to K = 10^6 (11.2 M features).

A classifier sees every class's own features in its training rows (``own-per-row`` of ``own``, so
a test row shares some with them) and the ancestors' features separate the branches of the hidden
tree, which a balanced 2-means tree on class profiles recovers; the noise words carry no label
information.  The Bayes-optimal top-1 accuracy is high but below 1 (a test row may draw own
features its class's few training rows never had).

    python benchmarks/extreme_problem.py --classes 100000 --out data/extreme/k100000
    python benchmarks/extreme_problem.py --classes 1000000 --train-per-class 2 --out data/extreme/k1000000

The folder receives ``train.txt``, ``test.txt`` and ``problem.json`` (every parameter, ``D``, row
counts, seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class ExtremeProblem:
    """Parameters of the generated problem (see the module docstring)."""

    classes: int
    branching: int = 10
    own: int = 10
    shared: int = 4
    own_per_row: int = 4
    sibling_per_row: int = 4
    shared_per_row: int = 2
    noise: int = 60
    vocabulary: int = 20_000
    train_per_class: int = 3
    test_rows: int = 10_000
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("classes", "branching", "own", "own_per_row", "vocabulary", "train_per_class"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("shared", "shared_per_row", "sibling_per_row", "noise", "test_rows", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if self.classes < 2:
            raise ValueError(f"classes must be at least 2, got {self.classes}")
        if self.branching < 2:
            raise ValueError(f"branching must be at least 2, got {self.branching}")
        if self.own_per_row > self.own:
            raise ValueError(f"own_per_row ({self.own_per_row}) must not exceed own ({self.own})")
        if self.shared_per_row and not self.shared:
            raise ValueError("shared_per_row needs shared > 0")
        if self.n_features >= 2**31 - 1:
            raise ValueError(f"the problem would have {self.n_features} features, more than int32 indices hold")

    @property
    def depth(self) -> int:
        """Height of the hidden tree (the root's)."""
        return max(1, math.ceil(math.log(self.classes) / math.log(self.branching) - 1e-9))

    def level_sizes(self) -> list[int]:
        """Ancestors at heights 1 .. depth - 1 (the root, height ``depth``, has no features)."""
        return [-(-self.classes // self.branching**h) for h in range(1, self.depth)]

    def level_offsets(self) -> list[int]:
        out, at = [], self.vocabulary
        for size in self.level_sizes():
            out.append(at)
            at += size * self.shared
        return out

    @property
    def own_offset(self) -> int:
        return self.vocabulary + self.shared * sum(self.level_sizes())

    @property
    def n_features(self) -> int:
        return self.own_offset + self.own * self.classes

    def hidden_parent(self) -> np.ndarray:
        """The hidden hierarchy as a parent array: classes ``0..K-1``, then the ancestors by height
        (height 1 first), the root last (``-1``)."""
        sizes = [self.classes] + self.level_sizes() + [1]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        parent = np.full(int(starts[-1]), -1, dtype=np.int64)
        for h in range(len(sizes) - 1):
            below = np.arange(sizes[h])
            parent[starts[h]:starts[h + 1]] = starts[h + 1] + below // self.branching
        return parent

    def idf(self, features: np.ndarray) -> np.ndarray:
        """``ln(1 / P(feature in a row))`` of 0-based ``features``, P from the generator's own draws."""
        p = np.empty(features.size)
        noise = features < self.vocabulary
        p_word = np.diff(np.concatenate([[0.0], np.minimum(_zipf_cdf(self.vocabulary), 1.0)]))
        p[noise] = 1.0 - (1.0 - p_word[features[noise]]) ** self.noise
        for offset, size in zip(self.level_offsets(), self.level_sizes()):
            at = (features >= offset) & (features < offset + size * self.shared)
            p[at] = (1.0 - (1.0 - 1.0 / self.shared) ** self.shared_per_row) / size
        own = features >= self.own_offset
        p[own] = (self.own_per_row + self.sibling_per_row) / self.own / self.classes
        return -np.log(np.clip(p, 1e-300, 1.0)) + 1e-3

    def rows(self, labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR arrays ``(indptr, indices, values)`` (0-based sorted indices, float64) of rows of ``labels``."""
        n = labels.size
        parts = []
        keys = rng.random((n, self.own))
        pick = np.argsort(keys, axis=1)[:, : self.own_per_row]
        parts.append(self.own_offset + labels[:, None] * self.own + pick)
        if self.sibling_per_row:  # confusers: own features of classes with the same hidden parent (itself included)
            sib = (labels // self.branching)[:, None] * self.branching + rng.integers(0, self.branching, (n, self.sibling_per_row))
            sib = np.where(sib < self.classes, sib, labels[:, None])
            parts.append(self.own_offset + sib * self.own + rng.integers(0, self.own, (n, self.sibling_per_row)))
        for h, offset in enumerate(self.level_offsets(), start=1):
            node = labels // self.branching**h
            parts.append(offset + node[:, None] * self.shared + rng.integers(0, self.shared, (n, self.shared_per_row)))
        if self.noise:
            parts.append(np.searchsorted(_zipf_cdf(self.vocabulary), rng.random((n, self.noise)), side="right"))
        ids = np.sort(np.concatenate(parts, axis=1), axis=1)
        width = ids.shape[1]
        new = np.ones(ids.shape, dtype=bool)
        new[:, 1:] = ids[:, 1:] != ids[:, :-1]
        counts_per_row = new.sum(axis=1)
        flat_new = new.ravel()
        indices = ids.ravel()[flat_new]
        group = np.cumsum(flat_new) - 1
        counts = np.bincount(group, minlength=indices.size).astype(np.float64)
        values = np.log1p(counts) * self.idf(indices)
        indptr = np.concatenate([[0], np.cumsum(counts_per_row)])
        norms = np.sqrt(np.add.reduceat(values**2, indptr[:-1])) if n else np.zeros(0)
        values /= np.repeat(norms, counts_per_row)
        del width
        return indptr, indices, values


_CDF_CACHE: dict[int, np.ndarray] = {}


def _zipf_cdf(vocabulary: int) -> np.ndarray:
    if vocabulary not in _CDF_CACHE:
        p = 1.0 / np.arange(1, vocabulary + 1) ** 1.1
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        cdf[-1] = 2.0  # a draw of 1 - eps lands on the last word
        _CDF_CACHE[vocabulary] = cdf
    return _CDF_CACHE[vocabulary]


def format_libsvm(labels: np.ndarray, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> str:
    """Lines ``label index:value ...`` (1-based indices, values to 6 significant digits)."""
    tokens = [f"{j}:{v:.6g}" for j, v in zip((indices + 1).tolist(), values.tolist())]
    bounds = indptr.tolist()
    return "".join(f"{c} {' '.join(tokens[bounds[r]:bounds[r + 1]])}\n" for r, c in enumerate(labels.tolist()))


#: Rows drawn and written at a time, each block from a generator seeded by (seed, file, block).
BLOCK = 10_000


def write_problem(problem: ExtremeProblem, out: str | os.PathLike, *, log=print) -> dict:
    """Write ``train.txt``, ``test.txt`` and ``problem.json`` to the folder ``out``; returns the summary.

    Rows are drawn and written :data:`BLOCK` at a time (memory: a few hundred bytes a row of a block);
    the same problem gives the same bytes.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    K = problem.classes
    order_rng = np.random.default_rng([problem.seed, 0])
    train_labels = np.repeat(np.arange(K, dtype=np.int64), problem.train_per_class)
    order_rng.shuffle(train_labels)
    test_labels = order_rng.integers(0, K, problem.test_rows).astype(np.int64)
    nnz = {}
    for name, labels, stream in (("train", train_labels, 1), ("test", test_labels, 2)):
        path = out / f"{name}.txt"
        tmp = path.with_suffix(".txt.part")
        total = 0
        with open(tmp, "w") as fh:
            for c0 in range(0, labels.size, BLOCK):
                rng = np.random.default_rng([problem.seed, stream, c0 // BLOCK])
                part = labels[c0:c0 + BLOCK]
                indptr, indices, values = problem.rows(part, rng)
                total += indices.size
                fh.write(format_libsvm(part, indptr, indices, values))
        os.replace(tmp, path)
        nnz[name] = total
        log(f"{path}: {labels.size} rows, {total / max(labels.size, 1):.1f} non-zeros a row "
            f"({time.perf_counter() - start:.1f} s)")
    summary = {**asdict(problem), "n_features": problem.n_features, "depth": problem.depth,
               "n_train": int(train_labels.size), "n_test": int(test_labels.size),
               "nnz_train": int(nnz["train"]), "nnz_test": int(nnz["test"]),
               "seconds": round(time.perf_counter() - start, 2)}
    (out / "problem.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, required=True, help="K")
    defaults = ExtremeProblem(classes=2)
    for name in ("branching", "own", "shared", "own_per_row", "sibling_per_row", "shared_per_row", "noise", "vocabulary",
                 "train_per_class", "test_rows", "seed"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    parser.add_argument("--out", required=True, help="folder for train.txt, test.txt, problem.json")
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    try:
        problem = ExtremeProblem(**args)
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps(write_problem(problem, out, log=lambda m: print(m, file=sys.stderr))))


if __name__ == "__main__":
    main()
