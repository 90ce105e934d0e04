"""Hierarchies whose size or shape would make the work explode (issue 36, class 3).

Readers must be linear in the file's size (parent pointers, not per-class path copies; iteration,
not recursion), the hierarchical search must decide the trivial cases without its quadratic
tables and refuse, naming the bound, a search whose counted work exceeds ``max_work``, and a
validated ``Hierarchy`` must not be editable into one that crashes the compiled kernels.  Memory
is bounded by tracemalloc's peak (a count of bytes), work by the search's own count: no test
here measures time.
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from watched import run_watched

import svbop
from svbop.datasets import Hierarchy, hierarchy_from_labels, read_hierarchy
from svbop.hierarchical import DEFAULT_MAX_WORK

SVBOP_ROOT = str(Path(svbop.__file__).resolve().parents[1])


def _peak_bytes(fn, *args, **kwargs):
    """The call's result and the peak of the memory Python allocated during it."""
    tracemalloc.start()
    try:
        out = fn(*args, **kwargs)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- readers: linear in the file ----------------------------------------------------------------


def _deep_chain_edges(path: Path, depth: int, n_classes: int) -> list[str]:
    """An ``edges`` file: a chain of ``depth`` inner nodes with ``n_classes`` classes at the bottom."""
    lines = [f"n{i} n{i + 1}" for i in range(depth - 1)]
    lines += [f"n{depth - 1} {c}" for c in range(n_classes)]
    path.write_text("\n".join(lines) + "\n")
    return [str(c) for c in range(n_classes)]


def test_edges_of_a_deep_chain_are_read_in_memory_linear_in_the_file(tmp_path):
    # Every class's whole path (the old reader) would be 1,000 x 20,000 list entries: 160 MB.
    path = tmp_path / "chain.txt"
    classes = _deep_chain_edges(path, 20_000, 1_000)
    tree, peak = _peak_bytes(read_hierarchy, None, {"format": "edges", "file": str(path)}, classes)
    assert tree.n_classes == 1_000 and tree.n_nodes == 21_000
    assert int(tree.depth().max()) == 20_000
    assert [tree.node_names[v] for v in tree.path(7)[:3]] == ["n0", "n1", "n2"]
    assert peak < 60 * path.stat().st_size, peak  # about 20 MB for a 0.3 MB file


def test_edges_keep_their_meaning_classes_with_children_and_cycles(tmp_path):
    path = tmp_path / "e.txt"
    # "a" is a class and has a child: it becomes a leaf below its namesake; "x y" reaches no class
    path.write_text("r a\na b\nr c\nx y\n")
    tree = read_hierarchy(None, {"format": "edges", "file": str(path)}, ["a", "b", "c"])
    names = tree.node_names
    assert [names[v] for v in tree.path(0)] == ["r", "a", "a"]
    assert [names[v] for v in tree.path(1)] == ["r", "a", "b"]
    assert [names[v] for v in tree.path(2)] == ["r", "c"]
    path.write_text("a b\nb c\nc a\n")
    with pytest.raises(ValueError, match=r"e\.txt:\d+: the edges form a cycle through"):
        read_hierarchy(None, {"format": "edges", "file": str(path)}, ["b"])


def test_a_taxonomy_line_of_many_levels_costs_memory_linear_in_its_length(tmp_path):
    # node keys that are whole path prefixes: 5,000^2 / 2 tuple entries (100 MB) for a 30 KB line
    path = tmp_path / "tax.txt"
    levels = [f"L{i}" for i in range(5_000)]
    path.write_text(";".join(levels + ["leaf"]) + "\n" + ";".join(["L0", "other"]) + "\n")
    tree, peak = _peak_bytes(read_hierarchy, None, {"format": "taxonomy", "file": str(path)}, ["leaf", "other"])
    assert int(tree.depth()[0]) == 5_000 and int(tree.depth()[1]) == 1
    assert peak < 20_000_000, peak


def test_a_dotted_label_of_many_levels_costs_memory_linear_in_its_length():
    # prefixes as node names: 10,000 strings of 15,000 characters on average (150 MB) for 30 KB
    deep = ".".join(["ab"] * 10_000)
    tree, peak = _peak_bytes(hierarchy_from_labels, [deep, "ab.cd", "ab"])
    assert int(tree.depth()[0]) == 9_999
    assert peak < 30_000_000, peak
    # short prefixes keep their whole name; the class "ab" is a leaf below its namesake
    assert [tree.node_names[v] for v in tree.path(1)] == ["ab", "ab.cd"]
    assert [tree.node_names[v] for v in tree.path(2)] == ["ab", "ab"]
    assert tree.node_names[tree.path(0)[-2]].endswith("ab (level 9999)")
    assert max(len(name) for name in tree.node_names[3:]) <= 1_000


def test_from_label_gives_the_same_tree_as_before_on_ordinary_names():
    tree = hierarchy_from_labels(["1.2.3", "1.2.4", "1.5", "2.1", "1.2"])
    names = tree.node_names
    assert [names[v] for v in tree.path(0)] == ["<root>", "1", "1.2", "1.2.3"]
    assert [names[v] for v in tree.path(4)] == ["<root>", "1", "1.2", "1.2"]
    assert [names[v] for v in tree.path(3)] == ["<root>", "2", "2.1"]


def test_nested_lists_nested_100000_deep_is_refused_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"deep\.json:1: nested deeper than a list of lists") as e:
        read_hierarchy(None, {"format": "nested_lists", "file": str(path)}, ["a"])
    assert "\n" not in str(e.value)
    path.write_text("[[1, 2], [1], [2]]")  # an ordinary file still reads
    from svbop.datasets import hierarchies

    monkeypatch.setattr(hierarchies, "MAX_NESTED_LISTS_CHARS", 10)  # read whole: bounded
    with pytest.raises(ValueError, match=r"deep\.json: longer than 10 characters, the most a nested_lists file"):
        read_hierarchy(None, {"format": "nested_lists", "file": str(path)}, ["a", "b"])
    monkeypatch.undo()
    tree = read_hierarchy(None, {"format": "nested_lists", "file": str(path)}, ["a", "b"])
    assert tree.n_classes == 2


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_hierarchy_that_is_not_a_regular_file_is_refused(tmp_path, target):
    # Before: /dev/zero read until memory ran out, a FIFO blocked: in a child process with a
    # bounded address space, so that the code before the check fails this test, not the machine.
    if target == "fifo":
        target = tmp_path / "fifo"
        os.mkfifo(target)
    code = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from svbop.datasets import read_hierarchy
        try:
            read_hierarchy(None, {{"format": "edges", "file": {str(target)!r}}}, ["0"])
        except ValueError as exc:
            print(exc)
    """)
    run = run_watched([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SVBOP_ROOT})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == f"{target}: not a regular file (the edges hierarchy file)\n"


# --- the search: trivial cases without tables, a bound on work ----------------------------------


def test_a_star_with_recall_and_one_node_is_the_root_without_tables():
    # the root's table would grow one column per child: O(K^2) states; max_work=1 forbids any
    K = 20_000
    h = Hierarchy(np.r_[np.full(K, K), -1], n_classes=K)
    P = np.random.default_rng(0).random((2, K))
    sets, nodes = svbop.predict_sets_hierarchical(P, "recall", h, 1, max_work=1, return_nodes=True)
    assert nodes.to_list() == [[K], [K]]
    assert sets.sizes.tolist() == [K, K]


def test_a_flat_tree_with_f1_on_a_near_uniform_row_needs_no_tables():
    K = 20_000
    h = Hierarchy(np.r_[np.full(K, K), -1], n_classes=K)
    P = 1.0 + 1e-6 * np.random.default_rng(1).random((1, K))
    for m in (1, 3, 1000):
        sets, nodes = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, m, max_work=1, return_nodes=True)
        # g(K) * 1 = 2 / (K + 1) beats g(s) * s / K ~ 2 / K * s / (s + 1) for every s <= m
        assert nodes.to_list() == [[K]], m
    # a row with a clear winner: the top classes as leaves, in leaf order
    P = np.full((1, K), 1e-9)
    P[0, [7, 3]] = [0.5, 0.4]
    sets, nodes = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, 3, max_work=1, return_nodes=True)
    assert sets.to_list() == [[7, 3]] and nodes.to_list() == [[3, 7]]


def _balanced_binary(K: int) -> Hierarchy:
    parent = np.full(2 * K - 1, -1, dtype=np.int64)
    level = list(range(K))
    nxt = K
    while len(level) > 1:
        up = []
        for a, b in zip(level[::2], level[1::2]):
            parent[a] = parent[b] = nxt
            up.append(nxt)
            nxt += 1
        level = up
    return Hierarchy(parent, n_classes=K)


def test_a_search_over_its_work_bound_is_refused_naming_the_bound():
    h = _balanced_binary(16_384)  # recall, 32 nodes: 85 s for one row before the bound
    P = np.full((1, 16_384), 1.0)
    with pytest.raises(ValueError, match=r"^P: row 0: the exact search would take more than "
                                         rf"max_work={DEFAULT_MAX_WORK} steps") as e:
        svbop.predict_sets_hierarchical(P, "recall", h, 32, max_work=DEFAULT_MAX_WORK)
    assert "\n" not in str(e.value) and "larger max_work" in str(e.value)


def test_the_work_bound_counts_and_a_larger_bound_answers():
    h = _balanced_binary(256)
    P = np.random.default_rng(2).random((2, 256))
    with pytest.raises(ValueError, match=r"^P: row 0: the exact search would take more than max_work=1000 steps"):
        svbop.predict_sets_hierarchical(P, "recall", h, 4, max_work=1000)
    sets = svbop.predict_sets_hierarchical(P, "recall", h, 4, max_work=10**12)
    assert sets.sizes.tolist() == [256, 256]  # recall: everything, the root
    with pytest.raises(ValueError, match=r"^max_work must be an integer >= 1, got 0$"):
        svbop.predict_sets_hierarchical(P, "recall", h, 4, max_work=0)


# --- a validated hierarchy stays valid ----------------------------------------------------------


def test_a_validated_hierarchys_arrays_cannot_be_edited():
    h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
    with pytest.raises(ValueError, match="read-only"):
        h.parent[0] = 99
    with pytest.raises(ValueError):
        h.parent.flags.writeable = True
    with pytest.raises(AttributeError, match="fixed once validated"):
        h.parent = np.array([99, 4, 5, 5, 6, 6, -1])
    with pytest.raises(AttributeError, match="fixed once validated"):
        h.n_classes = 7
    given = np.array([4, 4, 5, 5, 6, 6, -1])
    h = Hierarchy(given, n_classes=4)
    given[0] = 99  # the caller's array is copied, not kept
    assert h.parent[0] == 4
    for copied in (pickle.loads(pickle.dumps(h)), copy.deepcopy(h)):  # copies stay read-only
        assert not copied.parent.flags.writeable and copied.depth().tolist() == [2, 2, 2, 2, 1, 1, 0]
        with pytest.raises(ValueError, match="read-only"):
            copied.parent[0] = 99


def test_editing_a_hierarchy_in_place_does_not_crash_the_kernels():
    # Before: parent[0] = 10**9 passed straight to the compiled kernels (SIGSEGV); in a child
    # process so that a crash fails this test, not the suite.
    code = textwrap.dedent("""
        import numpy as np, svbop
        from svbop.datasets import Hierarchy
        K = 64
        parent = np.r_[np.repeat(np.arange(K, K + 8), 8), np.full(8, K + 8), -1]
        h = Hierarchy(parent, n_classes=K)
        try:
            h.parent[:K] = 10**9
        except ValueError:
            pass
        P = np.random.default_rng(0).random((3, K))
        sets = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, 2)
        print("ok", len(sets))
    """)
    run = run_watched([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SVBOP_ROOT})
    assert run.returncode == 0 and "ok 3" in run.stdout, (run.returncode, run.stderr[-2000:])


def test_the_table_free_cases_agree_with_the_tables():
    """The single-node and flat-tree shortcuts return what the dynamic programme returns (its
    kernel called directly), ties included, on trees larger than the exhaustive oracle's."""
    from svbop import hierarchical as H
    from svbop.search import utility_for

    rng = np.random.default_rng(7)
    for trial in range(24):
        K = int(rng.integers(3, 25))
        if trial % 2:  # a flat tree, any max_nodes
            h, ms = Hierarchy(np.r_[np.full(K, K), -1], n_classes=K), range(1, K)
        else:  # a random tree (inner nodes below earlier ones, classes anywhere), one node
            n_inner = int(rng.integers(1, K))
            inner = [-1] + [K + int(rng.integers(0, i)) for i in range(1, n_inner)]
            classes = np.r_[np.arange(n_inner), rng.integers(0, n_inner, K - n_inner)][:K]
            h, ms = Hierarchy(np.r_[K + classes, inner], n_classes=K), [1]
        P = rng.random((3, K)) if trial % 3 else rng.integers(0, 3, (3, K)) + 1e-3
        post, size, start, dfs_leaf = H._layout(h)
        indptr, children = h.children_csr()
        for spec in ("fbeta:beta=1", "recall", "reject:alpha=0.3", "log"):
            _, g, _ = utility_for(spec, K, svbop.TIE_RTOL, owner="P")
            for m in ms:
                got = []
                for shortcut in (True, False):
                    out = (np.empty((3, K), np.int64), np.zeros(3, np.int64), np.zeros(3), np.empty((3, m), np.int64),
                           np.zeros(3, np.int64))
                    if shortcut:
                        H._rows_simple(P, g, svbop.TIE_RTOL, m, h.n_nodes == K + 1, post, indptr, children, size,
                                       start, dfs_leaf, K, *out)
                    else:
                        H._rows(P, g, svbop.TIE_RTOL, m, post, indptr, children, size, start, dfs_leaf, K, 1 << 40,
                                1e18, *out)
                    cls, sz, val, nodes, nn = out
                    got.append(([cls[i, :sz[i]].tolist() for i in range(3)], [nodes[i, :nn[i]].tolist() for i in range(3)],
                                val.tolist()))
                assert got[0][:2] == got[1][:2], (spec, m, h.parent.tolist(), P.tolist())
                assert got[0][2] == pytest.approx(got[1][2], rel=1e-12)
