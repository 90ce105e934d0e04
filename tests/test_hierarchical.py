"""svbop.predict_sets_hierarchical: the best union of at most m nodes of a class tree.

The oracle enumerates every set of classes, keeps those that are unions of at most ``m`` nodes
and applies the documented tie rule literally: per size the largest mass (within tie_rtol), then
the smallest rank sum, then the first in depth-first leaf order; then the size as Algorithm 1
picks it (running maximum, ties to the larger set).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svbop
from svbop.datasets import Hierarchy
from svbop.hierarchical import canonical_nodes

RHO = svbop.TIE_RTOL
UTILITIES = ("fbeta:beta=1", "fbeta:beta=3", "credal:delta=2.2,gamma=1.2", "reject:alpha=0.3", "log")


def test_utilities_include_a_non_convex_one():
    assert not svbop.utility("reject:alpha=0.3").properties(9).early_stop_valid
    assert not svbop.utility("log").properties(9).early_stop_valid


# --- random trees -------------------------------------------------------------------------------


@st.composite
def trees(draw, max_K=9):
    """Random shapes: any branching, single-child chains, leaves at different depths, classes
    placed in a random order (class ids are not the depth-first order)."""
    K = draw(st.integers(1, max_K))
    classes = draw(st.permutations(list(range(K))))
    edges: list[tuple[int, int]] = []  # (child key, parent key); keys: ("c", class) or ("n", i)
    counter = itertools.count()

    def chain(key):
        for _ in range(draw(st.integers(0, 2)) if draw(st.booleans()) else 0):
            top = ("n", next(counter))
            edges.append((key, top))
            key = top
        return key

    def build(items):
        if len(items) == 1:
            return chain(("c", items[0]))
        n_groups = draw(st.integers(2, len(items)))
        cuts = sorted(draw(st.lists(st.integers(1, len(items) - 1), min_size=n_groups - 1,
                                    max_size=n_groups - 1, unique=True)))
        node = ("n", next(counter))
        for a, b in zip([0] + cuts, cuts + [len(items)]):
            edges.append((build(items[a:b]), node))
        return chain(node)

    root = build(list(classes))
    inner = sorted({k for e in edges for k in e if k[0] == "n"} | ({root} if root[0] == "n" else set()))
    ids = {k: K + i for i, k in enumerate(inner)}
    ids.update({("c", c): c for c in range(K)})
    parent = np.full(K + len(inner), -1, dtype=np.int64)
    for child, par in edges:
        parent[ids[child]] = ids[par]
    return Hierarchy(parent, n_classes=K)


def leaf_sets(h: Hierarchy) -> list[frozenset]:
    below = [set() for _ in range(h.n_nodes)]
    for c in range(h.n_classes):
        for v in h.path(c):
            below[v].add(c)
    return [frozenset(b) for b in below]


def dfs_positions(h: Hierarchy) -> dict[int, int]:
    children = h.children()
    out: dict[int, int] = {}

    def visit(v):
        if v < h.n_classes:
            out[v] = len(out)
        for c in children[v]:
            visit(int(c))

    visit(h.root)
    return out


def cover_size(Y: frozenset, nodes: list[frozenset], h: Hierarchy) -> int:
    """Fewest nodes whose union is Y: the nodes inside Y whose parent is not."""
    inside = [v for v in range(h.n_nodes) if nodes[v] <= Y]
    return sum(1 for v in inside if h.parent[v] < 0 or not nodes[h.parent[v]] <= Y)


def all_cover_sizes(h: Hierarchy) -> list[tuple[frozenset, int]]:
    """Every non-empty set of classes, by size, with its :func:`cover_size` (2^K - 1 entries)."""
    nodes = leaf_sets(h)
    return [(Y, cover_size(Y, nodes, h)) for r in range(1, h.n_classes + 1)
            for Y in map(frozenset, itertools.combinations(range(h.n_classes), r))]


def best_by_size(p, h: Hierarchy, m: int, covers: list[tuple[frozenset, int]] | None = None) -> dict[int, tuple]:
    """Size r -> (mass, rank sum, set) of the best union of at most m nodes with r classes (the
    documented tie rule); it does not depend on the utility.  ``covers``: :func:`all_cover_sizes` of
    ``h``, computed once by a caller that asks for many rows and m of one tree."""
    p = np.asarray(p, dtype=np.float64)
    rank = np.empty(p.size, dtype=np.int64)
    rank[np.argsort(-p, kind="stable")] = np.arange(p.size)
    pos = dfs_positions(h)
    best: dict[int, tuple] = {}
    for Y, size in all_cover_sizes(h) if covers is None else covers:
        if size > m:
            continue
        mass = float(sum(p[c] for c in sorted(Y)))
        key = (mass, int(sum(rank[c] for c in Y)), Y)
        inc = best.get(len(Y))
        if inc is None or _better(key, inc, pos):
            best[len(Y)] = key
    return best


def oracle(p, g, h: Hierarchy, m: int, best: dict[int, tuple] | None = None):
    """Exhaustive search over every set that is a union of at most m nodes; the documented rule
    (``best``: :func:`best_by_size` of ``p``, ``h``, ``m``, when the caller has it)."""
    p = np.asarray(p, dtype=np.float64)
    rank = np.empty(p.size, dtype=np.int64)
    rank[np.argsort(-p, kind="stable")] = np.arange(p.size)
    best = best_by_size(p, h, m) if best is None else best
    running, choice = -np.inf, None
    for s in sorted(best):
        u = g[s - 1] * best[s][0]
        if u >= (1 - RHO) * running:
            choice = s
        running = max(running, u)
    Y = best[choice][2]
    return sorted(Y, key=lambda c: rank[c]), g[choice - 1] * best[choice][0] / p.sum()


def _better(cand, inc, pos) -> bool:
    tol = RHO * max(cand[0], inc[0])
    if cand[0] != inc[0] and abs(cand[0] - inc[0]) > tol:
        return cand[0] > inc[0]
    if cand[1] != inc[1]:
        return cand[1] < inc[1]
    diff = cand[2] ^ inc[2]
    return bool(diff) and min(diff, key=pos.__getitem__) in cand[2]


@st.composite
def rows(draw, K, n=3):
    kind = draw(st.sampled_from(["random", "ties", "dyadic"]))
    out = []
    for _ in range(n):
        if kind == "random":
            v = np.array(draw(st.lists(st.floats(0.001, 1.0), min_size=K, max_size=K)))
        elif kind == "ties":  # small integer scores: exact sums, ties of classes and of sums
            v = np.array(draw(st.lists(st.integers(0, 3), min_size=K, max_size=K)), dtype=float)
            if v.sum() == 0:
                v[draw(st.integers(0, K - 1))] = 1.0
        else:  # probabilities that are multiples of 1/16: exact sums
            v = np.array(draw(st.lists(st.integers(0, 4), min_size=K, max_size=K)), dtype=float)
            v[draw(st.integers(0, K - 1))] += 16 - v.sum() if v.sum() < 16 else 0
            v /= v.sum()
        out.append(v)
    return np.array(out)


# --- acceptance: equal to exhaustive search -----------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_equals_exhaustive_search_over_node_unions(data):
    h = data.draw(trees())
    K = h.n_classes
    P = data.draw(rows(K))
    covers = all_cover_sizes(h)
    best = {(i, m): best_by_size(p, h, m, covers) for i, p in enumerate(P) for m in range(1, K + 1)}
    for spec in UTILITIES:
        g = svbop.utility(spec).values(K)
        for m in range(1, K + 1):
            sets, nodes = svbop.predict_sets_hierarchical(P, spec, h, m, return_nodes=True)
            for i, p in enumerate(P):
                want, value = oracle(p, g, h, m, best[i, m])
                assert sets[i].tolist() == want, (spec, m, i, p, h.parent)
                assert sets.expected_utility[i] == pytest.approx(value, rel=1e-12, abs=1e-15)
                assert len(nodes[i]) <= m
                union = set()
                for v in nodes[i]:
                    union |= leaf_sets(h)[v]
                assert union == set(want)
            assert nodes.to_list() == canonical_nodes(sets, h).to_list()


@settings(max_examples=40, deadline=None)
@given(h=trees(max_K=6))
def test_oracle_feasible_sets_are_the_literal_unions_of_nodes(h):
    """The oracle's "cover size <= m" is the same as "a union of at most m nodes"."""
    nodes = leaf_sets(h)
    K = h.n_classes
    for m in range(1, K + 1):
        unions = {frozenset().union(*c) for r in range(1, m + 1) for c in itertools.combinations(nodes, r)}
        feasible = {frozenset(c) for r in range(1, K + 1) for c in itertools.combinations(range(K), r)
                    if cover_size(frozenset(c), nodes, h) <= m}
        assert unions == feasible


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_at_least_K_nodes_equals_predict_sets(data):
    h = data.draw(trees())
    K = h.n_classes
    P = data.draw(rows(K))
    for spec in UTILITIES:
        want = svbop.predict_sets(P, spec)
        g = svbop.utility(spec).values(K)
        for m in (K, K + 1, 10**9):
            got = svbop.predict_sets_hierarchical(P, spec, h, m)
            assert got.to_list() == want.to_list()
            np.testing.assert_array_equal(got.expected_utility, want.expected_utility)
        # the documented rule itself (the oracle) agrees with predict_sets when nothing is restricted
        assert [oracle(p, g, h, K)[0] for p in P] == want.to_list()


@pytest.mark.parametrize("kind", ["random", "ties", "uniform"])
@pytest.mark.parametrize("spec", UTILITIES)
def test_dp_agrees_with_predict_sets_where_every_set_is_allowed(kind, spec):
    """A flat tree with m = K - 1 allows every set, without delegating to predict_sets."""
    rng = np.random.default_rng(0)
    K = 40
    if kind == "random":
        P = rng.dirichlet(np.full(K, 0.3), size=50)
    elif kind == "ties":
        P = rng.integers(0, 3, size=(50, K)).astype(float)
        P[:, 0] += 1
    else:
        P = np.full((5, K), 1.0 / K)
    h = Hierarchy(np.r_[np.full(K, K), -1], n_classes=K)
    got = svbop.predict_sets_hierarchical(P, spec, h, K - 1)
    want = svbop.predict_sets(P, spec)
    assert got.to_list() == want.to_list()
    np.testing.assert_allclose(got.expected_utility, want.expected_utility, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_one_node_is_the_best_single_node(data):
    h = data.draw(trees())
    K = h.n_classes
    P = data.draw(rows(K))
    nodes = leaf_sets(h)
    for spec in UTILITIES:
        g = svbop.utility(spec).values(K)
        sets, chosen = svbop.predict_sets_hierarchical(P, spec, h, 1, return_nodes=True)
        for i, p in enumerate(P):
            values = [g[len(b) - 1] * sum(p[c] for c in b) / p.sum() for b in nodes]
            assert len(chosen[i]) == 1
            assert set(sets[i].tolist()) == nodes[chosen[i][0]]
            assert sets.expected_utility[i] >= (1 - 1e-9) * max(values)


def test_internal_node_as_rejection():
    # root 6 > {4: 0, 1}, {5: 2, 3}
    h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
    P = np.array([[0.35, 0.3, 0.2, 0.15], [0.42, 0.1, 0.33, 0.15]])
    sets, nodes = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, 1, return_nodes=True)
    assert sets.to_list() == [[0, 1], [0]]
    assert nodes.to_list() == [[4], [0]]
    assert nodes.n_classes == h.n_nodes
    sets = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, 2)
    assert sets.to_list() == [[0, 1], [0, 2]]
    np.testing.assert_allclose(sets.expected_utility, [0.65 * 2 / 3, 0.75 * 2 / 3])


# --- larger trees: blocks, threads, dtypes ------------------------------------------------------


def random_tree(K: int, seed: int) -> Hierarchy:
    """Random recursive splits with chains; classes in random order."""
    rng = np.random.default_rng(seed)
    parent: list[int] = [0] * K
    inner_parent: list[int] = []

    def build(items):
        if len(items) == 1 and rng.random() < 0.8:
            return items[0]
        node = K + len(inner_parent)
        inner_parent.append(-1)
        if len(items) == 1:
            child = build(items)
            (parent.__setitem__(child, node) if child < K else inner_parent.__setitem__(child - K, node))
            return node
        k = int(rng.integers(2, min(len(items), 6) + 1))
        cuts = np.sort(rng.choice(np.arange(1, len(items)), size=k - 1, replace=False))
        for part in np.split(np.asarray(items), cuts):
            child = build(list(part))
            (parent.__setitem__(child, node) if child < K else inner_parent.__setitem__(child - K, node))
        return node

    build(list(rng.permutation(K)))
    return Hierarchy(np.array(parent + inner_parent), n_classes=K)


def test_blocks_threads_and_float32_give_the_same_sets():
    K = 300
    h = random_tree(K, 1)
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((64, K)) / 0.5
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    ref, nodes = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, 3, return_nodes=True)
    got = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, 3, chunk_bytes=1, n_jobs=2)
    assert got.to_list() == ref.to_list()
    np.testing.assert_array_equal(got.expected_utility, ref.expected_utility)
    got32 = svbop.predict_sets_hierarchical(P.astype(np.float32), "fbeta:beta=1", h, 3)
    assert len(got32) == len(ref)
    assert np.all(np.diff(nodes.indptr) <= 3)
    # more nodes never hurt
    prev = ref.expected_utility
    for m in (5, 10, K):
        cur = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, m).expected_utility
        assert np.all(cur >= prev * (1 - 1e-9))
        prev = cur


def test_a_single_class_and_a_chain_above_it():
    h = Hierarchy(np.array([1, 2, -1]), n_classes=1)
    sets, nodes = svbop.predict_sets_hierarchical(np.array([[0.7]]), "fbeta:beta=1", h, 1, return_nodes=True)
    assert sets.to_list() == [[0]]
    assert nodes.to_list() == [[2]]  # the topmost node of the chain holding exactly the set


def test_no_rows():
    h = Hierarchy(np.array([2, 2, -1]), n_classes=2)
    sets = svbop.predict_sets_hierarchical(np.empty((0, 2)), "fbeta:beta=1", h, 1)
    assert len(sets) == 0


# --- argument errors: one line ------------------------------------------------------------------


H4 = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
P4 = np.full((2, 4), 0.25)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_max_nodes_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match=r"^max_nodes must be an integer >= 1, got") as e:
        svbop.predict_sets_hierarchical(P4, "fbeta:beta=1", H4, bad)
    assert "\n" not in str(e.value)


def test_hierarchy_must_match_the_columns():
    h3 = Hierarchy(np.array([3, 3, 3, -1]), n_classes=3)
    with pytest.raises(ValueError, match=r"hierarchy has 3 leaves \(classes\) but P has 4 columns") as e:
        svbop.predict_sets_hierarchical(P4, "fbeta:beta=1", h3, 2)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="hierarchy must be a svbop.datasets.Hierarchy, got ndarray"):
        svbop.predict_sets_hierarchical(P4, "fbeta:beta=1", H4.parent, 2)


@pytest.mark.parametrize(
    "value, message",
    [(np.nan, "P: row 1 contains NaN"), (np.inf, "P: row 1 contains an infinite value"),
     (-0.5, r"P: row 1 has a negative probability")],
)
def test_bad_probabilities(value, message):
    P = P4.copy()
    P[1, 2] = value
    with pytest.raises(ValueError, match=message) as e:
        svbop.predict_sets_hierarchical(P, "fbeta:beta=1", H4, 2)
    assert "\n" not in str(e.value)


def test_bad_shapes_and_utilities():
    with pytest.raises(ValueError, match="P must be 2-D"):
        svbop.predict_sets_hierarchical(P4[0], "fbeta:beta=1", H4, 2)
    with pytest.raises(ValueError, match="row 0 is all zeros"):
        svbop.predict_sets_hierarchical(np.zeros((1, 4)), "fbeta:beta=1", H4, 2)
    with pytest.raises(ValueError, match="unknown utility"):
        svbop.predict_sets_hierarchical(P4, "nope", H4, 2)
    with pytest.raises(ValueError, match="tie_rtol"):
        svbop.predict_sets_hierarchical(P4, "fbeta:beta=1", H4, 2, tie_rtol=2.0)


@pytest.mark.parametrize("a, b, want", [(6, 7, [0, 3]), (7, 6, [1, 2])])
def test_last_tie_goes_to_the_first_set_in_depth_first_leaf_order(a, b, want):
    """{0, 3} and {1, 2}: same size, same mass, same rank sum; the node visited first wins."""
    parent = np.full(9, 8)
    parent[[0, 3]] = a
    parent[[1, 2]] = b
    parent[8] = -1
    h = Hierarchy(parent, n_classes=6)
    P = np.array([[0.2, 0.2, 0.2, 0.2, 0.1, 0.1]])
    for spec in ("precision", "genreject:alpha=1,beta=1"):
        got = svbop.predict_sets_hierarchical(P, spec, h, 1)
        assert got.to_list() == [want]
        assert oracle(P[0], svbop.utility(spec).values(6), h, 1)[0] == want


def test_a_row_too_large_for_the_workspace_is_refused_in_one_line():
    K = 200  # two inner nodes of 100 classes below the root (a flat tree needs no tables)
    h = Hierarchy(np.r_[np.full(K // 2, K), np.full(K // 2, K + 1), K + 2, K + 2, -1], n_classes=K)
    P = np.full((3, K), 1.0 / K)  # recall: every size can be optimal
    ok = svbop.predict_sets_hierarchical(P, "recall", h, 150)
    assert ok.to_list() == [list(range(K))] * 3
    with pytest.raises(ValueError, match=r"^P: row 0: the exact search would need more than workspace_bytes=1000 ") as e:
        svbop.predict_sets_hierarchical(P, "recall", h, 150, workspace_bytes=1000)
    assert "\n" not in str(e.value)
