"""Issue 56, the library's side: costs that follow a user's input are bounded or refused up front
(group patterns of the conditional sets, the 2-means tree over sparse feature ids), pairwise
Venn-Abers scores of rows with two zero probabilities, and sizes claimed by a file checked against
the file before anything is allocated."""

import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest
import scipy.sparse as sp

from svbop.trees import balanced_kmeans_tree, class_profiles

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads ru_maxrss in kB (Linux)")


# --------------------------------------------------------------------------------------------
# balanced_kmeans_tree: memory follows the non-zeros, not the feature ids
# --------------------------------------------------------------------------------------------


@linux
def test_kmeans_tree_memory_follows_the_non_zeros_not_the_feature_ids():
    """1,500 non-zeros over 2^27 feature ids: the tree's scratch arrays were 8 bytes per feature id
    (class sums, the splitter's column map, the root's centroids): 3.3 GB peak; training its nodes
    then took 1 GB more (each process's column map). Now a few MB each."""
    code = textwrap.dedent("""
        import resource
        import numpy as np, scipy.sparse as sp
        from svbop.trees import balanced_kmeans_tree, train_tree
        rng = np.random.default_rng(0)
        n, D, K = 300, 2**27, 30
        rows = np.repeat(np.arange(n), 5)
        X = sp.csr_matrix((rng.random(rows.size) + 0.1, (rows, rng.integers(0, D, rows.size))), shape=(n, D))
        y = rng.integers(0, K, n)
        small = balanced_kmeans_tree(X[:, :1000], y, K, max_leaves=4)  # compiled before measuring
        train_tree(X[:, :1000], y, small, progress=False)
        peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        before = peak()
        tree = balanced_kmeans_tree(X, y, K, max_leaves=4)
        after_tree = peak()
        model = train_tree(X, y, tree, progress=False)
        assert tree.n_classes == K and model.n_features == D
        print(after_tree - before, peak() - after_tree)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    tree_mb, train_mb = (int(v) / 1024 for v in done.stdout.split()[-2:])
    assert tree_mb < 300, f"the tree's peak memory grew by {tree_mb:.0f} MB"
    assert train_mb < 300, f"training the tree's nodes grew the peak memory by {train_mb:.0f} MB"


def test_kmeans_tree_and_profiles_do_not_depend_on_unused_feature_ids():
    """The same tree, bit for bit, when the used features are spread over many more ids (the
    renumbering keeps their order, so every sum is taken in the same order)."""
    rng = np.random.default_rng(1)
    n, D, K = 500, 300, 60
    X = sp.random(n, D, density=0.05, random_state=rng, format="csr", dtype=np.float32)
    y = rng.integers(0, K, n)
    spread = 7 * np.arange(D) + 3  # feature j becomes id 7 j + 3 of 7 D + 5
    Xs = sp.csr_matrix((X.data, spread[X.indices], X.indptr), shape=(n, 7 * D + 5))
    tree, tree_s = (balanced_kmeans_tree(M, y, K, max_leaves=3, seed=4) for M in (X, Xs))
    np.testing.assert_array_equal(tree.parent, tree_s.parent)
    P, Ps = class_profiles(X, y, K), class_profiles(Xs, y, K)
    assert Ps.shape == (K, 7 * D + 5)
    np.testing.assert_array_equal(Ps.toarray()[:, spread], P.toarray())
    assert Ps.nnz == P.nnz
    from svbop.trees import train_tree

    W, Ws = (train_tree(M, y, tree, C=1.0, eps=0.1, seed=0, progress=False).W for M in (X, Xs))
    assert Ws.shape == (tree.n_nodes, 7 * D + 5) and Ws.nnz == W.nnz
    np.testing.assert_array_equal(Ws.toarray()[:, spread], W.toarray())


# --------------------------------------------------------------------------------------------
# sizes claimed by a file are checked against the file before anything is allocated
# --------------------------------------------------------------------------------------------


def _tree_model():
    from svbop.datasets import Hierarchy
    from svbop.trees import TreeModel

    tree = Hierarchy(np.array([2, 2, -1]), 2)
    return TreeModel(tree, sp.csr_matrix(np.arange(12.0).reshape(3, 4)), np.zeros(3), np.array([False, False, True]))


def _rewrite(path, out, **changes):
    from svbop.io import save_arrays

    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays.update(changes)
    save_arrays(out, **arrays)
    return out


def _one_line_naming(exc, path):
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg, msg
    return msg


@pytest.mark.parametrize("width, indices", [(2**40, None), (2**40, np.array([0, 1, 2, 2**40 - 1] * 3))])
def test_tree_model_file_claiming_2_to_the_40_features_is_refused_naming_the_file(tmp_path, width, indices):
    """Before: the file loaded, and SVBOP-HF's layout (or any product) then asked for 4 TiB. One entry
    in column 2^40 - 1 does not back the width either: it is one entry."""
    from svbop.trees import TreeModel

    good = tmp_path / "model.npz"
    _tree_model().save(good)
    assert TreeModel.load(good).n_features == 4
    changes = {"W_shape": np.array([3, width])}
    if indices is not None:
        changes["W_indices"] = indices.astype(np.int64)
    bad = _rewrite(good, tmp_path / "crafted.npz", **changes)
    with pytest.raises(ValueError) as exc:
        TreeModel.load(bad)
    msg = _one_line_naming(exc, bad)
    assert "W_shape" in msg and str(2**40) in msg


def test_every_sparse_matrix_file_checks_its_claimed_shape(tmp_path):
    """The check sits in the one reader of stored sparse matrices (svbop.io.NpzReader.matrix): matrix
    files, LinearModel files and dataset files alike; rows must match the stored row pointers."""
    from svbop.io import load_matrix, save_matrix
    from svbop.linear import LinearModel

    X = sp.csr_matrix(np.eye(3))
    save_matrix(tmp_path / "m.npz", X)
    wide = _rewrite(tmp_path / "m.npz", tmp_path / "wide.npz", X_shape=np.array([3, 2**40]))
    with pytest.raises(ValueError) as exc:
        load_matrix(wide)
    assert "X_shape" in _one_line_naming(exc, wide)
    tall = _rewrite(tmp_path / "m.npz", tmp_path / "tall.npz", X_shape=np.array([2**40, 3]))
    with pytest.raises(ValueError) as exc:
        load_matrix(tall)
    assert "rows" in _one_line_naming(exc, tall)
    # a width the file's size backs (under the bound of decompressed bytes) still loads
    ok = _rewrite(tmp_path / "m.npz", tmp_path / "ok.npz", X_shape=np.array([3, 10**6]))
    assert load_matrix(ok).shape == (3, 10**6)

    LinearModel(sp.csr_matrix(np.ones((2, 3))), np.zeros(2), np.arange(2)).save(tmp_path / "lin.npz")
    bad = _rewrite(tmp_path / "lin.npz", tmp_path / "lin_bad.npz", W_shape=np.array([2, 2**40]))
    with pytest.raises(ValueError) as exc:
        LinearModel.load(bad)
    assert "W_shape" in _one_line_naming(exc, bad)


def test_the_width_bound_follows_the_environment(tmp_path, monkeypatch):
    from svbop.io import load_matrix, save_matrix

    save_matrix(tmp_path / "m.npz", sp.csr_matrix(np.eye(3)))
    wide = _rewrite(tmp_path / "m.npz", tmp_path / "wide.npz", X_shape=np.array([3, 2**24]))  # 128 MiB of columns
    with pytest.raises(ValueError, match="SVBOP_INFLATE_FLOOR_MB"):
        load_matrix(wide)
    monkeypatch.setenv("SVBOP_INFLATE_FLOOR_MB", "256")
    assert load_matrix(wide).shape == (3, 2**24)


# --------------------------------------------------------------------------------------------
# Venn-Abers one-vs-one: rows with two zero probabilities
# --------------------------------------------------------------------------------------------


def test_one_vs_one_scores_a_pair_of_zero_probabilities_as_any_equal_pair():
    """Calibration and test rows with P_i = P_j = 0 gave 'scores holds NaN or infinite values' (the
    pairwise share 0/0). Their share is now 1/2, the share of every equal pair: the calibrated
    probabilities are those of the same rows with both zeros replaced by one tiny equal value (the
    binary fits depend on the scores' order alone, which that keeps)."""
    from svbop.venn_abers import VennAbersMultiClass

    rng = np.random.default_rng(5)
    P = rng.dirichlet(np.ones(4), 400)
    y = rng.integers(0, 4, 400)
    zero = np.r_[0:6, 200:206, 390:396]  # calibration rows of several classes, and test rows
    P[zero, 0] = P[zero, 1] = 0.0
    P[zero, 2] = 1.0 - P[zero, 3]
    tiny = P.copy()
    tiny[zero, 0] = tiny[zero, 1] = 1e-300
    model = VennAbersMultiClass("one_vs_one").fit(P[:300], y[:300])
    Q = model.predict_proba(P[300:])
    assert np.isfinite(Q).all() and np.allclose(Q.sum(axis=1), 1)
    np.testing.assert_array_equal(Q, VennAbersMultiClass("one_vs_one").fit(tiny[:300], y[:300]).predict_proba(tiny[300:]))
    p0, p1 = model.predict_interval(P[300:])
    assert ((0 <= p0) & (p0 <= p1) & (p1 <= 1)).all()


@pytest.mark.parametrize("strategy", ["one_vs_one", "one_vs_rest"])
def test_venn_abers_names_the_row_of_a_bad_probability(strategy):
    from svbop.venn_abers import VennAbersMultiClass

    rng = np.random.default_rng(6)
    P = rng.dirichlet(np.ones(3), 60)
    y = np.arange(60) % 3
    model = VennAbersMultiClass(strategy).fit(P, y)
    bad = P.copy()
    bad[7, 2] = np.nan
    with pytest.raises(ValueError, match=r"^P holds NaN or infinite values: nan at row 7, class 2$"):
        model.predict_proba(bad)
    bad[7, 2] = -0.25
    if strategy == "one_vs_one":  # a share of two probabilities: a negative one is refused
        with pytest.raises(ValueError, match=r"P holds negative values .* -0.25 at row 7, class 2$"):
            VennAbersMultiClass(strategy).fit(bad, y)
    else:  # one score per class, any real number
        assert np.isfinite(VennAbersMultiClass(strategy).fit(bad, y).predict_proba(bad)).all()


# --------------------------------------------------------------------------------------------
# ConditionalSetPredictor: many group patterns share one warm-started simplex
# --------------------------------------------------------------------------------------------


def _conditional_case(rng, n, d, *, eps=0.1, ties=False, p_in=0.3):
    from svbop.conformal import ConditionalSetPredictor

    K = 6
    P = rng.dirichlet(np.ones(K), n)
    if ties:  # few distinct scores: degenerate programmes, optimal faces of several fits
        P = np.round(P, 1) + 1e-3
        P /= P.sum(axis=1, keepdims=True)
    y = rng.integers(0, K, n)
    Phi = rng.random((n, d)) < p_in
    return ConditionalSetPredictor(eps), P, y, Phi


def _all_patterns(d):
    return ((np.arange(2**d)[:, None] >> np.arange(d)) & 1).astype(bool)


def _reference(cp, patterns):
    """One HiGHS programme (and the smallest fit over its optimal face) per pattern: the code before."""
    return np.array([cp._cutoff(row) for row in patterns])


def test_many_group_patterns_do_not_cost_a_linear_programme_each(monkeypatch):
    """2^16 patterns of 16 overlapping groups were 2^17 HiGHS programmes (137 ms each: 150 minutes,
    no sets, no refusal). 2^12 patterns now take no HiGHS programme at all (a warm-started dual
    simplex shares the work), and give the per-pattern programmes' cutoffs."""
    import svbop.conformal.conditional as conditional

    rng = np.random.default_rng(56)
    cp, P, y, Phi = _conditional_case(rng, 400, 12)
    cp.fit(P, y, Phi)
    patterns = _all_patterns(12)
    solved = []
    real = conditional.linprog
    monkeypatch.setattr(conditional, "linprog", lambda *a, **k: solved.append(1) or real(*a, **k))
    q = cp.thresholds(patterns)
    assert len(solved) <= 5, f"{len(solved)} HiGHS programmes for {patterns.shape[0]} patterns"
    some = rng.choice(patterns.shape[0], 40, replace=False)
    np.testing.assert_allclose(q[some], _reference(cp, patterns[some]), rtol=1e-9, atol=1e-12)
    # each test row gets its pattern's cutoff, in any order and with repeats
    rows = rng.integers(0, patterns.shape[0], 300)
    np.testing.assert_array_equal(cp.thresholds(patterns[rows]), q[rows])


@pytest.mark.parametrize("case", ["plain", "ties", "integer quantile", "complementary", "duplicate", "empty group",
                                  "small groups", "everyone"])
def test_shared_simplex_gives_every_per_pattern_cutoff(case):
    """Against one programme per pattern, on degenerate cases: tied scores, tau (n_G + 1) an integer
    (the quantile anywhere between two scores: the smallest fit is taken), groups that are each
    other's complement or copies (dependent columns: inconsistent patterns have an unbounded fit),
    a group without calibration rows, groups too small for their quantile, a group of every row."""
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    for trial in range(6):
        n, d = int(rng.integers(8, 160)), int(rng.integers(2, 6))
        eps = {"integer quantile": 1 / 3, "small groups": 0.05}.get(case, float(rng.choice([0.1, 0.2, 0.5])))
        if case == "integer quantile":
            n = 3 * int(rng.integers(3, 40)) - 1  # tau (n + 1) = 2 (n + 1) / 3 an integer
        cp, P, y, Phi = _conditional_case(rng, n, d, eps=eps, ties=case in ("ties", "integer quantile"),
                                          p_in=0.08 if case == "small groups" else 0.4)
        if case == "complementary":
            Phi[:, 1] = ~Phi[:, 0]
        elif case == "duplicate":
            Phi[:, 1] = Phi[:, 0]
        elif case == "empty group":
            Phi[:, -1] = False
        elif case == "everyone":
            Phi[:, 0] = True
        cp.fit(P, y, Phi)
        patterns = _all_patterns(d)
        q, ref = cp.thresholds(patterns), _reference(cp, patterns)
        same = np.isclose(q, ref, rtol=1e-9, atol=1e-12) | (np.isinf(q) & np.isinf(ref))
        assert same.all(), (trial, patterns[~same].astype(int).tolist(), q[~same], ref[~same])
        if case in ("complementary", "empty group", "small groups"):
            assert np.isinf(q).any()


def test_a_singular_basis_stops_the_shared_simplex_for_a_fresh_start():
    """The kernel reports how far it went: a basis that rounding made singular leaves its pattern
    unsettled (solved on its own by the caller) and stops there, so the caller starts afresh
    instead of leaving every later pattern to a programme of its own."""
    from svbop.conformal._lp_kernels import UNSETTLED, warm_cutoffs

    U = np.array([[1.0, 0.0], [1.0, 1.0]])
    pid = np.array([0, 0, 1, 1, 0])
    S = np.array([0.1, 0.5, 0.2, 0.7, 0.9])
    phis = np.array([[1.0, 1.0], [1.0, 0.0]])
    basis = np.array([0, 1])  # two copies of one column: singular
    status = np.array([2, 2, 0, 0, 0], dtype=np.int8)
    out, flag = np.empty(2), np.empty(2, dtype=np.int8)
    done = warm_cutoffs(U, pid, S, 0.9 * (np.array([5.0, 2.0]) + phis), -phis, phis, basis, status, 100, out, flag)
    assert done == 1 and flag[0] == UNSETTLED
