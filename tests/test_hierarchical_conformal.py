"""svbop.conformal.hierarchical: conformal sets that are unions of at most c nodes of a tree.

The oracle transcribes the module's definition literally: every union of at most ``c`` nodes is
enumerated; ``S_k`` is the smallest one containing the ``k`` most probable classes (ties to the
larger mass), ``m_k`` its mass, ``M_k`` the running maximum; the score of ``y`` is
``M_{o(y)}`` and the set at ``q`` is ``S_{k(q)}``, ``k(q) = #{k : M_k <= q}`` (``S_1`` when
that is 0, the default ``empty="top1"``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import svbop
from svbop.datasets import Hierarchy
from svbop.conformal.hierarchical import (
    HierarchicalConformalScore,
    hierarchical_conformal_sets,
    hierarchical_scores,
)
from test_hierarchical import leaf_sets  # the classes below each node


def random_tree(rng, K: int) -> Hierarchy:
    """Random groupings of 2-4 subtrees, single-child chains now and then, classes in random
    order (class ids are not the depth-first order)."""
    parent: dict[int, int] = {}
    nodes = [int(c) for c in rng.permutation(K)]
    nxt = K
    while len(nodes) > 1:
        g = int(rng.integers(2, min(4, len(nodes)) + 1))
        picked = set(rng.choice(len(nodes), size=g, replace=False).tolist())
        for i in picked:
            parent[nodes[i]] = nxt
        nodes = [v for i, v in enumerate(nodes) if i not in picked] + [nxt]
        nxt += 1
        if rng.random() < 0.15:  # a chain above the new node
            parent[nxt - 1] = nxt
            nodes[-1] = nxt
            nxt += 1
    par = np.full(max(nxt, 1), -1, dtype=np.int64)
    for v, p in parent.items():
        par[v] = p
    return Hierarchy(par, n_classes=K)


def node_unions(h: Hierarchy, c: int) -> set[frozenset]:
    """Every union of at most c nodes of h, as a set of classes."""
    L = leaf_sets(h)
    return {
        frozenset().union(*(L[v] for v in comb))
        for r in range(1, c + 1)
        for comb in itertools.combinations(range(h.n_nodes), r)
    }


def oracle(h: Hierarchy, p: np.ndarray, c: int, unions: set[frozenset] | None = None):
    """Ranking, smallest covers S_k and running maxima M_k, by enumeration of node unions
    (``unions``: :func:`node_unions` of h and c, when the caller has them)."""
    unions = node_unions(h, c) if unions is None else unions
    order = np.argsort(-p, kind="stable")
    S, m = [], []
    for k in range(1, h.n_classes + 1):
        A = set(order[:k].tolist())
        best = min((u for u in unions if A <= u), key=lambda u: (len(u), -sum(p[sorted(u)])))
        S.append(best)
        m.append(sum(p[sorted(best)]))
    return order, S, np.maximum.accumulate(m), np.array(m)


def test_scores_and_sets_equal_the_enumeration_of_node_unions():
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(40):
        K = int(rng.integers(2, 10))
        h = random_tree(rng, K)
        # probabilities away from 0: masses of different sets never tie in float64
        P = rng.uniform(0.01, 1.0, size=(3, K))
        P /= P.sum(axis=1, keepdims=True)
        y = rng.integers(0, K, size=3)
        for c in (1, 2, 3):
            s = hierarchical_scores(P, y, h, c)
            unions = node_unions(h, c)
            for i in range(3):
                order, S, M, _ = oracle(h, P[i], c, unions)
                o = int(np.flatnonzero(order == y[i])[0])
                assert s[i] == pytest.approx(M[o], abs=1e-12)
                for k in range(K):  # every distinct threshold, and one below the first
                    for q in ((M[0] - 1e-6) if k == 0 else None, M[k]):
                        if q is None:
                            continue
                        kq = int((M <= q + 1e-12).sum())
                        want = S[kq - 1] if kq else S[0]
                        sets, nodes = hierarchical_conformal_sets(P[i : i + 1], q, h, c, return_nodes=True)
                        assert set(sets[0].tolist()) == want, (K, c, h.parent.tolist(), P[i].tolist(), q)
                        assert len(nodes[0]) <= c
                        # classes in decreasing probability
                        assert list(sets[0]) == [cl for cl in order if cl in want]
                        checked += 1
    assert checked > 500


def test_the_authors_score_is_not_monotone_so_the_running_maximum_is_used():
    # a tree and row where the smallest 3-node cover of the 5 most probable classes has less
    # mass than that of the 4 most probable: m_4 > m_5.
    h = Hierarchy(np.array([8, 8, 10, 10, 10, 8, 8, 10, 9, 11, 11, -1]), n_classes=8)
    p = np.array([0.081, 0.043, 0.005, 0.089, 0.123, 0.229, 0.346, 0.084])
    order, S, M, m = oracle(h, p, 3)
    assert order[4] == 7 and m[3] > m[4]
    assert not S[3] <= S[4]  # the smallest covers are not nested
    s = hierarchical_scores(p[None], [7], h, 3)
    assert s[0] == pytest.approx(m[3]) and s[0] > m[4]
    # at q = m_5 the authors' score of class 7 (m_5) is within the level, yet their set (the
    # first cover with mass beyond q: S_4) misses class 7; the running maximum is beyond q
    q = m[4]
    assert 7 not in S[3]
    assert 7 not in hierarchical_conformal_sets(p[None], q, h, 3)[0]


def calibrated(rng, n, K, temperature=1.0):
    """Softmax probabilities, labels drawn from them: calibrated by construction."""
    Z = rng.normal(size=(n, K)) * 2.5 / temperature
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) < rng.random(n)[:, None]).sum(axis=1)
    return P, np.minimum(y, K - 1)


@pytest.mark.parametrize("c", [1, 3])
def test_coverage_over_200_splits_and_every_set_a_union_of_at_most_c_nodes(c):
    rng = np.random.default_rng(c)
    K, n_cal, n_test, eps = 30, 200, 200, 0.1
    h = random_tree(rng, K)
    L = leaf_sets(h)
    P, y = calibrated(rng, n_cal + n_test, K)
    covered = []
    for split in range(200):
        perm = np.random.default_rng(1000 + split).permutation(n_cal + n_test)
        cal, test = perm[:n_cal], perm[n_cal:]
        hc = HierarchicalConformalScore(h, max_nodes=c).fit_quantile(P[cal], y[cal], eps)
        sets, nodes = hc.predict(P[test], return_nodes=True)
        covered.append(np.mean([y[t] in s for t, s in zip(test, sets)]))
        if split < 5:
            for s, v in zip(sets, nodes):
                assert len(v) <= c
                assert frozenset().union(*(L[u] for u in v)) == frozenset(s.tolist())
    assert np.mean(covered) >= 1 - eps - 0.01


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_at_least_K_nodes_is_aps(dtype):
    rng = np.random.default_rng(3)
    K = 12
    h = random_tree(rng, K)
    P, y = calibrated(rng, 400, K)
    P[:50, :3] = P[:50, :1]  # equal probabilities: ties by class index
    P = P.astype(dtype)
    aps = svbop.ConformalSetPredictor(0.1, score="aps", randomized=False).fit(P[:200], y[:200])
    for c in (K, K + 5):
        hc = HierarchicalConformalScore(h, max_nodes=c).fit_quantile(P[:200], y[:200], 0.1)
        assert hc.quantile_ == aps.quantile_
        assert hc.predict(P[200:]).to_list() == aps.predict(P[200:]).to_list()
    # and the DP with c = K - 1 nodes, where a cover of k <= K - 1 classes is the classes
    # themselves, gives the same sets (up to rounding of the masses)
    hc = HierarchicalConformalScore(h, max_nodes=K - 1).fit_quantile(P[:200], y[:200], 0.1)
    assert hc.quantile_ == pytest.approx(aps.quantile_, rel=1e-12)
    same = [a == b for a, b in zip(hc.predict(P[200:]).to_list(), aps.predict(P[200:]).to_list())]
    assert np.mean(same) > 0.97


def test_one_node_sets_are_ancestors_of_the_top_class_and_nested_in_q():
    rng = np.random.default_rng(5)
    K = 40
    h = random_tree(rng, K)
    P, _ = calibrated(rng, 30, K)
    top = P.argmax(axis=1)
    prev = None
    for q in (0.0, 0.3, 0.6, 0.9, 0.99, np.inf):
        sets, nodes = hierarchical_conformal_sets(P, q, h, 1, return_nodes=True)
        for i in range(30):
            assert len(nodes[i]) == 1 and nodes[i][0] in h.path(top[i])
        if prev is not None:
            assert all(set(a) <= set(b) for a, b in zip(prev, sets.to_list()))
        prev = sets.to_list()
    assert all(len(s) == K for s in prev)  # q = inf: every class


@pytest.mark.parametrize("c", [2, 9])
def test_one_threshold_per_row_equals_one_call_per_row(c):
    rng = np.random.default_rng(9)
    h = random_tree(rng, 9)
    P, _ = calibrated(rng, 12, 9)
    q = np.array([0.0, 0.2, 0.5, 0.8, 0.95, np.inf] * 2)
    sets, nodes = hierarchical_conformal_sets(P, q, h, c, return_nodes=True)
    for i in range(12):
        one, one_nodes = hierarchical_conformal_sets(P[i : i + 1], q[i], h, c, return_nodes=True)
        assert list(sets[i]) == list(one[0]) and list(nodes[i]) == list(one_nodes[0])
    assert len(sets[5]) == 9 and list(nodes[5]) == [h.root]


def test_empty_sets_keep_or_top_class():
    rng = np.random.default_rng(6)
    h = random_tree(rng, 9)
    P, _ = calibrated(rng, 20, 9)
    assert all(len(s) == 0 for s in hierarchical_conformal_sets(P, 0.0, h, 2, empty="keep"))
    top1 = hierarchical_conformal_sets(P, 0.0, h, 2)
    assert [list(s) for s in top1] == [[int(t)] for t in P.argmax(axis=1)]


def test_blocks_threads_and_scaled_rows_give_the_same_answers():
    rng = np.random.default_rng(8)
    K = 300
    h = random_tree(rng, K)
    P, y = calibrated(rng, 120, K, temperature=3.0)
    s = hierarchical_scores(P, y, h, 4)
    assert np.array_equal(s, hierarchical_scores(P, y, h, 4, chunk_bytes=1, n_jobs=2))
    q = float(np.quantile(s, 0.9))
    a = hierarchical_conformal_sets(P, q, h, 4).to_list()
    assert a == hierarchical_conformal_sets(P, q, h, 4, chunk_bytes=1, n_jobs=2).to_list()
    # scores proportional to probabilities: the same sets (rows are normalised)
    assert a == hierarchical_conformal_sets(P * 8.0, q, h, 4).to_list()


# --- refusals -----------------------------------------------------------------------------------


def one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None])
def test_max_nodes_must_be_a_positive_integer(bad):
    h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
    P = np.full((2, 4), 0.25)
    for call in (
        lambda: hierarchical_scores(P, [0, 1], h, bad),
        lambda: hierarchical_conformal_sets(P, 0.5, h, bad),
        lambda: HierarchicalConformalScore(h, bad),
    ):
        with pytest.raises(ValueError, match="max_nodes must be an integer >= 1") as e:
            call()
        assert repr(bad) in one_line(e)


def test_probabilities_of_the_wrong_width_for_the_hierarchy():
    h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
    P = np.full((2, 5), 0.2)
    with pytest.raises(ValueError, match="hierarchy has 4 leaves .* P_cal has 5 columns") as e:
        hierarchical_scores(P, [0, 1], h, 2)
    one_line(e)
    with pytest.raises(ValueError, match="hierarchy has 4 leaves .* P has 5 columns") as e:
        HierarchicalConformalScore(h, 2).fit_quantile(np.full((2, 4), 0.25), [0, 1], 0.1).predict(P)
    one_line(e)
    with pytest.raises(ValueError, match="hierarchy must be a svbop.datasets.Hierarchy") as e:
        hierarchical_scores(np.full((2, 4), 0.25), [0, 1], np.array([4, 4, 5, 5, 6, 6, -1]), 2)
    one_line(e)


@pytest.mark.parametrize("labels, message", [([0, 4], r"y_cal\[1\] = 4 is not a class index in 0..3"),
                                             ([-1, 0], r"y_cal\[0\] = -1 is not a class index in 0..3"),
                                             ([0], "y_cal has 1 labels but there are 2 samples"),
                                             ([0.5, 1], "y_cal must hold integer class indices")])
def test_labels_out_of_range(labels, message):
    h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
    with pytest.raises(ValueError, match=message) as e:
        HierarchicalConformalScore(h, 2).fit_quantile(np.full((2, 4), 0.25), labels, 0.1)
    one_line(e)


def test_other_refusals():
    h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
    P = np.full((2, 4), 0.25)
    cases = [
        (lambda: HierarchicalConformalScore(h, 2).predict(P), "not fitted"),
        (lambda: HierarchicalConformalScore(h, 2).fit_quantile(P, [0, 1], 1.5), "epsilon must be in"),
        (lambda: HierarchicalConformalScore(h, 2).fit_quantile(P[:0], [], 0.1), "no rows"),
        (lambda: hierarchical_conformal_sets(P, float("nan"), h, 2), "q must not be NaN"),
        (lambda: hierarchical_conformal_sets(P, [0.5, 0.5, 0.5], h, 2), r"q must be a number or one per row of P"),
        (lambda: hierarchical_conformal_sets(P, "high", h, 2), "q must be a number or one number per row"),
        (lambda: hierarchical_conformal_sets(P, 0.5, h, 2, empty="all"), "empty must be 'top1' or 'keep'"),
        (lambda: hierarchical_scores(np.array([[0.5, np.nan, 0.2, 0.3]]), [0], h, 2), r"^P_cal: row 0 contains NaN$"),
        (lambda: hierarchical_conformal_sets(np.zeros((1, 4)), 0.5, h, 2),
         r"^P: row 0 is all zeros \(no probability mass\)$"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as e:
            call()
        one_line(e)


# --- wired into ConformalSetPredictor, the scikit-learn classifier and the CLI (issue 38, item 2) ---------------


def _wired_problem():
    from svbop.datasets import hierarchy_from_edges

    K = 12
    edges = [("root", f"g{g}") for g in range(3)] + [(f"g{c // 4}", str(c)) for c in range(K)]
    h = hierarchy_from_edges(edges, [str(c) for c in range(K)])
    rng = np.random.default_rng(5)
    P = rng.dirichlet(np.full(K, 0.3), size=600)
    y = (P.cumsum(axis=1) > rng.random((600, 1))).argmax(axis=1)
    return h, P, y


@pytest.mark.parametrize("max_nodes", [1, 2, 3, 12])
def test_conformal_set_predictor_gives_the_modules_sets_and_nodes(max_nodes):
    import svbop

    h, P, y = _wired_problem()
    wired = svbop.ConformalSetPredictor(0.1, score="hierarchical", hierarchy=h, max_nodes=max_nodes).fit(P[:300], y[:300])
    direct = HierarchicalConformalScore(h, max_nodes).fit_quantile(P[:300], y[:300], 0.1)
    (a, na), (b, nb) = wired.predict(P[300:], return_nodes=True), direct.predict(P[300:], return_nodes=True)
    assert wired.quantile_ == direct.quantile_ and a.to_list() == b.to_list()
    assert [list(v) for v in na] == [list(v) for v in nb] and max(len(v) for v in na) <= max_nodes
    # per group (Mondrian), through the same machinery as every score
    groups = P[:300].argmax(axis=1) // 4
    grouped = svbop.ConformalSetPredictor(0.1, score="hierarchical", hierarchy=h, max_nodes=max_nodes).fit(
        P[:300], y[:300], groups=groups)
    test_groups = P[300:].argmax(axis=1) // 4
    sets, nodes = grouped.predict(P[300:], groups=test_groups, return_nodes=True)
    assert len(sets) == 300 and max(len(v) for v in nodes) <= max_nodes
    # each group's sets and nodes are the module's, calibrated on that group's rows alone
    for g in range(3):
        cal, test = np.flatnonzero(groups == g), np.flatnonzero(test_groups == g)
        alone = HierarchicalConformalScore(h, max_nodes).fit_quantile(P[:300][cal], y[:300][cal], 0.1)
        assert grouped.group_quantiles_[g] == alone.quantile_
        own, own_nodes = alone.predict(P[300:][test], return_nodes=True)
        assert sets.take(test).to_list() == own.to_list()
        assert [list(nodes[i]) for i in test] == [list(v) for v in own_nodes]


def test_the_hierarchical_score_is_refused_without_its_hierarchy_and_its_options_elsewhere():
    import svbop

    h, _, _ = _wired_problem()
    with pytest.raises(ValueError, match=r"^score='hierarchical' needs hierarchy="):
        svbop.ConformalSetPredictor(0.1, score="hierarchical")
    with pytest.raises(ValueError, match=r"^hierarchy and max_nodes are for score='hierarchical'; score='aps'"):
        svbop.ConformalSetPredictor(0.1, score="aps", randomized=False, hierarchy=h)
    with pytest.raises(ValueError, match=r"^return_nodes is for score='hierarchical'"):
        svbop.ConformalSetPredictor(0.1).fit(np.full((20, 12), 1 / 12), np.arange(20) % 12).predict(
            np.full((2, 12), 1 / 12), return_nodes=True)


def test_the_classifier_and_the_cli_take_the_hierarchical_score(tmp_path):
    pytest.importorskip("sklearn")
    import subprocess
    import sys

    from sklearn.linear_model import LogisticRegression
    from svbop.sklearn import ConformalSetClassifier

    h, P, y = _wired_problem()
    X = np.log(P)
    clf = ConformalSetClassifier(LogisticRegression(max_iter=2000), 0.1, conformity_score="hierarchical", hierarchy=h,
                                 max_nodes=2, random_state=0).fit(X[:400], y[:400])
    sets = clf.predict_sets(X[400:])
    assert len(sets) == 200 and clf.predictor_.score == "hierarchical"
    # the module's sets on the classifier's probabilities, calibrated on its calibration rows' quantile
    module = hierarchical_conformal_sets(clf.predict_proba(X[400:]), clf.quantile_, h, 2)
    assert [sorted(s.tolist()) for s in sets] == [sorted(clf.classes_[s].tolist()) for s in module]
    np.save(tmp_path / "cal.npy", P[:300])
    np.savetxt(tmp_path / "ycal.txt", y[:300], fmt="%d")
    np.save(tmp_path / "test.npy", P[300:])
    (tmp_path / "tree.txt").write_text("".join(f"root g{g}\n" for g in range(3)) + "".join(f"g{c // 4} {c}\n" for c in range(12)))
    result = subprocess.run([sys.executable, "-m", "svbop", "predict", "test.npy", "-m", "conformal", "--epsilon", "0.1",
                             "--score", "hierarchical", "--hierarchy", "tree.txt", "--max-nodes", "2",
                             "--calibration", "cal.npy", "--calibration-labels", "ycal.txt", "-o", "sets.npz"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    from svbop.io import load_sets

    expected = HierarchicalConformalScore(h, 2).fit_quantile(P[:300], y[:300], 0.1).predict(P[300:])
    assert load_sets(tmp_path / "sets.npz").to_list() == expected.to_list()
    assert "conformal hierarchical over at most 2 node(s) of tree.txt" in result.stdout
