"""Issue 54, item 5: the helpers of benchmarks/bench_extreme_nxc_conformal.py (napkinXC's threshold prediction
against svbop's tree LAC), and the identity the comparison rests on: svbop's LAC set from the tree at
``q`` is the threshold set ``{c : P(c|x) >= 1 - q}`` that napkinXC's ``--threshold`` search returns."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from svbop.conformal import ConformalSetPredictor
from svbop.datasets.base import Hierarchy
from svbop.trees import TreeModel, TreeProbabilities, balanced_kmeans_tree, train_tree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_extreme_nxc_conformal import (  # noqa: E402
    float32_at_most,
    identical_rows,
    read_nxc_sets,
    set_stats,
    write_nxc_tree,
)


def _ragged(rows):
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return indptr, np.array([c for r in rows for c in r], dtype=np.int64)


def test_identical_rows_against_comparing_python_sets():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        a = [list(rng.choice(12, size=int(rng.integers(0, 6)), replace=False)) for _ in range(n)]
        b = [list(rng.permutation(r)) if rng.random() < 0.5 else
             list(rng.choice(12, size=int(rng.integers(0, 6)), replace=False)) for r in a]
        expected = np.array([set(x) == set(y) for x, y in zip(a, b)])
        np.testing.assert_array_equal(identical_rows(_ragged(a), _ragged(b)), expected)


def test_identical_rows_refuses_different_row_counts():
    try:
        identical_rows(_ragged([[1]]), _ragged([[1], [2]]))
    except ValueError as exc:
        assert "1 and 2 rows" in str(exc)
    else:
        raise AssertionError("no error")


def test_read_nxc_sets_and_set_stats(tmp_path):
    path = tmp_path / "pred.txt"
    path.write_text("3:0.5 7:0.25\n\n12:0.9\n")
    indptr, classes = read_nxc_sets(path)
    np.testing.assert_array_equal(indptr, [0, 2, 2, 3])
    np.testing.assert_array_equal(classes, [3, 7, 12])
    stats = set_stats((indptr, classes), np.array([7, 1, 4]))
    assert stats["coverage"] == round(1 / 3, 4)
    assert stats["mean_set_size"] == 1.0 and stats["empty_pct"] == round(100 / 3, 2) and stats["max_set_size"] == 2


def test_float32_at_most_never_rounds_up():
    for t in (0.1, 1 / 3, 0.999999999, 1e-7, 0.5):
        t32 = float32_at_most(t)
        assert t32 <= t and float(np.float32(f"{t32:.9g}")) == t32
        assert float(np.nextafter(np.float32(t32), np.float32(1))) > t


def test_nxc_tree_format(tmp_path):
    tree = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), 4)
    write_nxc_tree(tree, tmp_path / "t.txt")
    assert (tmp_path / "t.txt").read_text().splitlines() == [
        "4 7", "4 0 0", "4 1 1", "5 2 2", "5 3 3", "6 4", "6 5", "-1 6"]


def test_tree_lac_set_is_the_threshold_set_napkinxc_searches():
    """svbop's LAC sets from the tree (empty sets kept) equal {c : P(c|x) >= 1 - q} on predict_proba."""
    rng = np.random.default_rng(1)
    K, n = 60, 500
    centres = rng.normal(size=(K, 8))
    y = rng.integers(0, K, size=n)
    X = centres[y] + rng.normal(scale=1.5, size=(n, 8))
    tree = balanced_kmeans_tree(X[:200], y[:200], K, max_leaves=6, n_init=1, seed=0)
    model = train_tree(X[:200], y[:200], tree, C=1.0, progress=False)
    assert isinstance(model, TreeModel)
    P = model.predict_proba(X[350:])
    for eps in (0.05, 0.1, 0.2, 0.4):
        cp = ConformalSetPredictor(eps, score="lac", empty="keep").fit(TreeProbabilities(model, X[200:350]), y[200:350])
        sets = cp.predict(TreeProbabilities(model, X[350:]))
        t = 1.0 - cp.quantile_
        expected = [np.flatnonzero(1.0 - row <= cp.quantile_) for row in P]
        assert np.mean([len(e) for e in expected]) > 0
        got = [np.sort(sets.indices[sets.indptr[i]:sets.indptr[i + 1]]) for i in range(len(P))]
        assert all(np.array_equal(g, e) for g, e in zip(got, expected)), eps
        # away from the threshold by more than rounding, the set is {c : P >= t}
        clear = np.abs(P - t) > 1e-9
        assert all(np.array_equal(np.isin(np.arange(K), g)[c], (P[i] >= t)[c])
                   for i, (g, c) in enumerate(zip(got, clear)))
