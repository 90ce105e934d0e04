"""Conformal sets without an n x K matrix (issue 54): from a probabilistic class tree
(svbop.trees.TreeProbabilities) and from top-k outputs (svbop.SparseOutputs).

* the same sets as the dense path: a tree's against the dense path on ``model.predict_proba``,
  top-k outputs' against the dense path on the top-k rows with zeros elsewhere, for every ranked
  score, marginal and class-conditional, randomised or not, and with weights;
* coverage over seeded splits in [1 - eps, 1 - eps + 1/(n+1)] on average;
* every new input checked where it enters, one line naming the argument or file.
"""

import math

import numpy as np
import pytest

import svbop
from svbop.conformal import ConformalSetPredictor
from svbop.sparse_outputs import SparseOutputs, is_sparse_outputs_file
from svbop.trees import TreeProbabilities
from test_hf import binary_tree, caterpillar_tree, queries, random_model, wide_tree

D = 20
TREES = {"binary": lambda: binary_tree(37), "wide": lambda: wide_tree(30), "caterpillar": lambda: caterpillar_tree(25)}
CONFIGS = [dict(score="lac"), dict(score="aps"), dict(score="aps", randomized=False),
           dict(score="raps", k_reg=2, lam=0.05), dict(score="raps", k_reg=1, lam=0.05, randomized=False),
           dict(score="saps", lam=0.05), dict(score="topk"), dict(score="topk", randomized=True),
           dict(score="margin")]


def _labels(P, seed):
    rng = np.random.default_rng(seed)
    cum = P.cumsum(axis=1)
    return np.minimum((cum < rng.random((P.shape[0], 1)) * cum[:, -1:]).sum(axis=1), P.shape[1] - 1)


def _top_k(P, k):
    top = np.argsort(-P, axis=1, kind="stable")[:, :k]
    return SparseOutputs(top, np.take_along_axis(P, top, axis=1), P.shape[1])


def _assert_same(a, b):
    assert len(a) == len(b)
    bad = [i for i in range(len(a)) if not np.array_equal(a[i], b[i])]
    assert not bad, f"{len(bad)} rows differ, first {bad[0]}: {a[bad[0]]} vs {b[bad[0]]}"


@pytest.mark.parametrize("shape", sorted(TREES))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("class_conditional", [False, True])
def test_tree_sets_equal_the_dense_path_on_predict_proba(shape, config, class_conditional):
    """The same threshold and the same sets, class for class and in the same order (class-conditional:
    the same classes), as the dense path on the model's predict_proba, at three levels (sets of a few
    classes to nearly all)."""
    model = random_model(TREES[shape](), D, 1, scale=3.0)
    Xc, Xt = queries(D, 400, 1), queries(D, 300, 2)
    Pc, Pt = model.predict_proba(Xc), model.predict_proba(Xt)
    yc = _labels(Pc, 0)
    for eps in (0.05, 0.2, 0.5):
        kw = dict(config, class_conditional=class_conditional, random_state=3)
        dense = ConformalSetPredictor(eps, **kw).fit(Pc, yc)
        lazy = ConformalSetPredictor(eps, **kw).fit(TreeProbabilities(model, Xc), yc)
        assert lazy.quantile_ == pytest.approx(dense.quantile_, rel=1e-12, abs=1e-13)
        if class_conditional:
            np.testing.assert_allclose(lazy.quantiles_, dense.quantiles_, rtol=1e-12, atol=1e-13)
        a, b = dense.predict(Pt), lazy.predict(TreeProbabilities(model, Xt))
        if class_conditional:  # classes of infinite threshold (too few rows) come after the search's, by id
            a, b = ([np.sort(s) for s in sets] for sets in (a, b))
        _assert_same(a, b)
        np.testing.assert_array_equal(dense.predict_mask(Pt), lazy.predict_mask(TreeProbabilities(model, Xt)))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("class_conditional", [False, True])
def test_top_k_sets_equal_the_dense_path_with_zeros_outside(config, k, class_conditional):
    """Top-k outputs give the dense path's sets on the same rows with the classes outside set to 0,
    at levels where the threshold reaches some or all of those classes (then they come after the
    top-k, by class id)."""
    model = random_model(binary_tree(37), D, 1, scale=3.0)
    Pc, Pt = model.predict_proba(queries(D, 400, 1)), model.predict_proba(queries(D, 300, 2))
    yc = _labels(Pc, 0)
    Sc, St = _top_k(Pc, k), _top_k(Pt, k)
    reached = 0
    for eps in (0.02, 0.1, 0.3):
        kw = dict(config, class_conditional=class_conditional, random_state=5)
        dense = ConformalSetPredictor(eps, **kw).fit(Sc.toarray(), yc)
        lazy = ConformalSetPredictor(eps, **kw).fit(Sc, yc)
        assert lazy.quantile_ == pytest.approx(dense.quantile_, rel=1e-12, abs=1e-13)
        a, b = dense.predict(St.toarray()), lazy.predict(St)
        _assert_same(a, b)
        reached += int((b.sizes > k).sum())
    if k < 10 and not class_conditional and config["score"] in ("raps", "topk", "saps"):
        assert reached, "no threshold reached past the top-k: the test would not check the zeros' order"


def test_logits_are_the_softmax_over_the_top_k():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 4)) * 3
    ind = np.tile(np.array([7, 2, 9, 0]), (50, 1))
    s = SparseOutputs(ind, logits, 12, kind="logits")
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(s.toarray()[:, [7, 2, 9, 0]], e / e.sum(axis=1, keepdims=True))
    assert s.toarray()[:, 1].max() == 0


def test_weighted_sets_from_top_k_and_trees_equal_the_dense_path():
    model = random_model(binary_tree(37), D, 4, scale=3.0)
    Xc, Xt = queries(D, 400, 3), queries(D, 300, 4)
    Pc, Pt = model.predict_proba(Xc), model.predict_proba(Xt)
    yc = _labels(Pc, 1)
    rng = np.random.default_rng(2)
    wc, wt = rng.exponential(size=400), rng.exponential(size=300)
    for score in ("lac", "aps"):
        dense = ConformalSetPredictor(0.1, score=score, random_state=1).fit(Pc, yc, weights=wc)
        tree = ConformalSetPredictor(0.1, score=score, random_state=1).fit(TreeProbabilities(model, Xc), yc, weights=wc)
        _assert_same(dense.predict(Pt, weights=wt), tree.predict(TreeProbabilities(model, Xt), weights=wt))
        Sc, St = _top_k(Pc, 5), _top_k(Pt, 5)
        dense = ConformalSetPredictor(0.1, score=score, random_state=1).fit(Sc.toarray(), yc, weights=wc)
        top = ConformalSetPredictor(0.1, score=score, random_state=1).fit(Sc, yc, weights=wc)
        _assert_same(dense.predict(St.toarray(), weights=wt), top.predict(St, weights=wt))


@pytest.mark.parametrize("source", ["tree", "top_k"])
@pytest.mark.parametrize("score", ["lac", "aps"])
def test_coverage_over_seeded_splits(source, score):
    """Labels drawn from the tree's own distribution: over 100 seeded splits (500 calibration rows,
    500 test rows) the mean coverage lies in [1 - eps, 1 - eps + 1/(n+1)] up to 3 standard errors
    (randomised APS with empty sets kept: exactly 1 - eps in expectation)."""
    eps, n_cal = 0.1, 500
    model = random_model(binary_tree(64), D, 7, scale=2.0)
    X = queries(D, 1000, 11)
    P = model.predict_proba(X)
    rng = np.random.default_rng(54)
    cover = []
    for split in range(100):
        y = _labels(P, 1000 + split)
        perm = rng.permutation(P.shape[0])
        cal, test = perm[:n_cal], perm[n_cal:]
        if source == "tree":
            src_c, src_t = TreeProbabilities(model, X[cal]), TreeProbabilities(model, X[test])
        else:  # top-40 of 64 classes: the label is outside for some rows (score of probability 0)
            src_c, src_t = _top_k(P[cal], 40), _top_k(P[test], 40)
        kw = dict(score=score, random_state=split, empty="keep")
        sets = ConformalSetPredictor(eps, **kw).fit(src_c, y[cal]).predict(src_t)
        cover.append(sets.contains(y[test]).mean())
    cover = np.array(cover)
    se = cover.std() / math.sqrt(cover.size)
    assert 1 - eps - 3 * se <= cover.mean() <= 1 - eps + 1 / (n_cal + 1) + 3 * se, (cover.mean(), se)


def test_tree_probabilities_take_a_search_layout_and_many_threads():
    from svbop.hf import TreeSearchLayout

    model = random_model(binary_tree(37), D, 1, scale=3.0)
    Xc, Xt = queries(D, 300, 1), queries(D, 600, 2)
    yc = _labels(model.predict_proba(Xc), 0)
    a = ConformalSetPredictor(0.1, score="aps", random_state=0).fit(TreeProbabilities(model, Xc), yc)
    b = ConformalSetPredictor(0.1, score="aps", random_state=0).fit(
        TreeProbabilities(TreeSearchLayout.from_model(model), Xc, n_jobs=2), yc)
    assert a.quantile_ == b.quantile_
    _assert_same(a.predict(TreeProbabilities(model, Xt), row_seeds=np.arange(600)),
                 b.predict(TreeProbabilities(TreeSearchLayout.from_model(model), Xt, n_jobs=2), row_seeds=np.arange(600)))


def test_sparse_outputs_file_round_trip(tmp_path):
    s = SparseOutputs(np.array([[3, 1], [0, 2]]), np.array([[0.6, 0.3], [0.5, 0.5]]), 5)
    path = tmp_path / "top.npz"
    s.save(path)
    assert is_sparse_outputs_file(path)
    back = SparseOutputs.load(path)
    np.testing.assert_array_equal(back.toarray(), s.toarray())
    assert svbop.SparseOutputs is SparseOutputs
    np.save(tmp_path / "dense.npy", np.eye(3))
    assert not is_sparse_outputs_file(tmp_path / "dense.npy")


@pytest.mark.parametrize("indices, values, K, message", [
    ([[0, 5]], [[0.5, 0.4]], 5, r"indices\[0, 1\] = 5 is not a class id in 0 .. 4"),
    ([[0, -1]], [[0.5, 0.4]], 5, r"indices\[0, 1\] = -1 is not a class id"),
    ([[2, 2]], [[0.5, 0.4]], 5, "row 0 of indices names class 2 twice"),
    ([[0, 1]], [[np.nan, 0.4]], 5, r"values\[0, 0\] = nan: values must be finite"),
    ([[0, 1]], [[0.9, 0.4]], 5, "row 0 of values sums to 1.3"),
    ([[0, 1]], [[-0.1, 0.4]], 5, r"values\[0, 0\] = -0.1: probabilities must be >= 0"),
    ([[0, 1]], [[0.0, 0.0]], 5, "row 0 of values is all zero"),
    (np.zeros((2, 0), int), np.zeros((2, 0)), 5, "k = 0"),
    ([[0, 1, 2]], [[0.2, 0.2, 0.2]], 2, "k = 3 classes per row but the model has K = 2"),
    ([[0, 1]], [[0.2, 0.2, 0.1]], 5, r"indices has shape \(1, 2\) but values has \(1, 3\)"),
    ([[0.5, 1]], [[0.2, 0.2]], 5, "indices must hold integer class ids"),
    ([[0, 1]], [[0.2, 0.2]], 0, "n_classes .* must be a positive integer"),
])
def test_sparse_outputs_refusals(indices, values, K, message):
    with pytest.raises(ValueError, match=message):
        SparseOutputs(np.array(indices), np.array(values), K)


def test_file_refusals_name_the_file(tmp_path):
    bad = tmp_path / "top.npz"
    np.savez(bad, indices=np.array([[0, 9]]), values=np.array([[0.5, 0.1]]), K=np.int64(4))
    with pytest.raises(ValueError, match=f"{bad}: indices\\[0, 1\\] = 9"):
        SparseOutputs.load(bad)
    missing = tmp_path / "missing.npz"
    np.savez(missing, indices=np.array([[0]]), values=np.array([[0.5]]))
    with pytest.raises(ValueError, match=f"{missing}: top-k outputs need the arrays indices, values and K; missing K"):
        SparseOutputs.load(missing)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=f"{junk}: not an .npz file"):
        SparseOutputs.load(junk)


def test_lazy_sources_refuse_what_they_cannot_do():
    model = random_model(binary_tree(9), D, 1)
    X = queries(D, 50, 1)
    src = TreeProbabilities(model, X)
    y = _labels(model.predict_proba(X), 0)
    with pytest.raises(ValueError, match="gives the ranked scores .* not score='fbeta'"):
        ConformalSetPredictor(0.1, score="fbeta").fit(src, y)
    with pytest.raises(ValueError, match="takes class_conditional=False or True, not 'rc3p'"):
        ConformalSetPredictor(0.1, class_conditional="rc3p").fit(src, y)
    with pytest.raises(ValueError, match="takes no groups"):
        ConformalSetPredictor(0.1).fit(src, y, groups=y % 2)
    with pytest.raises(ValueError, match="y_cal"):
        ConformalSetPredictor(0.1).fit(src, y[:10])
    with pytest.raises(ValueError, match="X has 3 features, the model has 20"):
        TreeProbabilities(model, np.ones((2, 3)))
    with pytest.raises(ValueError, match="model must be a svbop.trees.TreeModel or its svbop.hf.TreeSearchLayout"):
        TreeProbabilities("model", X)
    fitted = ConformalSetPredictor(0.1).fit(src, y)
    with pytest.raises(ValueError, match="P has 5 classes but the predictor was calibrated on 9"):
        fitted.predict(_top_k(np.full((3, 5), 0.2), 2))


def test_mask_and_sets_past_their_bounds_are_refused(monkeypatch):
    from svbop.conformal import lazy

    model = random_model(binary_tree(37), D, 1)
    X = queries(D, 100, 1)
    y = _labels(model.predict_proba(X), 0)
    fitted = ConformalSetPredictor(0.1).fit(TreeProbabilities(model, X), y)
    monkeypatch.setattr(lazy, "MAX_MASK_BYTES", 1000)
    with pytest.raises(ValueError, match=r"predict_mask of TreeProbabilities would make an \(100, 37\) boolean matrix"):
        fitted.predict_mask(TreeProbabilities(model, X))
    every = ConformalSetPredictor(0.001).fit(TreeProbabilities(model, X[:20]), y[:20])  # k > n: q = inf
    assert every.quantile_ == math.inf
    monkeypatch.setattr(lazy, "MAX_SET_ENTRIES", 500)
    with pytest.raises(ValueError, match="100 rows hold every class"):
        every.predict(TreeProbabilities(model, X))


# --- svbop report on top-k outputs ----------------------------------------------------------------

def _top_k_files(folder, n=3000, k=10, K=50_000, seed=0, outside=0.03):
    rng = np.random.default_rng(seed)
    ind = np.sort(rng.integers(0, K - k, (n, k)), axis=1) + np.arange(k)
    val = rng.gamma(0.3, size=(n, k))
    val = val / val.sum(axis=1, keepdims=True) * (1 - outside)
    pos = (val.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1)
    y = np.where(pos < k, ind[np.arange(n), np.minimum(pos, k - 1)], (ind[:, -1] + 1) % K)
    SparseOutputs(ind, val, K).save(folder / "top.npz")
    np.save(folder / "y.npy", y)
    return folder / "top.npz", folder / "y.npy", ind, val, y


def test_svbop_report_on_a_top_k_file(tmp_path):
    """`svbop report --test top.npz labels.npy` (detected by its arrays) makes the sets defined on top-k
    outputs at every level, the same as the library on the same split, and says what it cannot run."""
    import csv

    from svbop.cli import main

    scores, labels, ind, val, y = _top_k_files(tmp_path)
    out = tmp_path / "rep"
    assert main(["report", "--test", str(scores), str(labels), "-o", str(out), "--epsilon", "0.1",
                 "--epsilon", "0.2"]) == 0
    rows = list(csv.DictReader(open(out / "tables" / "top_k_sets.csv")))
    assert {r["method"] for r in rows} == {"lac", "aps", "raps", "saps", "topk"}
    page = (out / "report.html").read_text()
    assert "Not run on top-k outputs" in page and "temperature scaling" in page
    # the library on the same seeded split gives the same coverage
    perm = np.random.default_rng(0).permutation(y.size)
    cal, test = np.sort(perm[:300]), np.sort(perm[300:])
    src = SparseOutputs(ind, val, 50_000)
    sets = ConformalSetPredictor(0.1, score="lac", random_state=0).fit(src.take(cal), y[cal]).predict(src.take(test))
    lac = next(r for r in rows if r["method"] == "lac" and float(r["epsilon"]) == 0.1)
    assert float(lac["coverage_pct"]) == pytest.approx(100 * sets.contains(y[test]).mean(), abs=1e-3)
    # a second run into the same folder is allowed (it is svbop report's)
    assert main(["report", "--test", str(scores), str(labels), "-o", str(out)]) == 0


def test_svbop_report_refuses_bad_top_k_input(tmp_path, capsys):
    from svbop.cli import main

    scores, labels, ind, val, y = _top_k_files(tmp_path, n=200)
    bad = tmp_path / "bad.npz"
    ind2 = ind.copy()
    ind2[5, 3] = ind2[5, 2]
    np.savez(bad, indices=ind2, values=val, K=np.int64(50_000))
    assert main(["report", "--test", str(bad), str(labels), "-o", str(tmp_path / "r1")]) != 0
    assert "row 5 of indices names class" in capsys.readouterr().err
    np.save(tmp_path / "short.npy", y[:10])
    assert main(["report", "--test", str(scores), str(tmp_path / "short.npy"), "-o", str(tmp_path / "r2")]) != 0
    assert "10 labels but the top-k file has 200 rows" in capsys.readouterr().err
    far = y.copy()
    far[3] = 50_000
    np.save(tmp_path / "far.npy", far)
    assert main(["report", "--test", str(scores), str(tmp_path / "far.npy"), "-o", str(tmp_path / "r4")]) != 0
    assert "far.npy: labels[3] = 50000 is not a class index in 0..49999" in capsys.readouterr().err
    assert main(["report", "--test", str(scores), str(labels), "--hierarchy", str(labels), "-o",
                 str(tmp_path / "r3")]) != 0
    assert "--hierarchy: not with top-k outputs" in capsys.readouterr().err
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r3").exists()


# --- risk control and Learn-then-Test from a tree or top-k outputs ------------------------------------

@pytest.mark.parametrize("shape", sorted(TREES))
@pytest.mark.parametrize("score", ["lac", "aps", "raps", "saps", "topk", "margin"])
def test_risk_control_from_a_tree_equals_the_dense_path(shape, score):
    """Conformal risk control with miscoverage, class costs and the tree's own distance (the tree as
    the hierarchy), and Learn-then-Test, choose the dense path's lambda and give its sets; top-k
    outputs give the dense path's on the rows with zeros outside."""
    from svbop.conformal import LearnThenTest, RiskControlSetPredictor

    tree = TREES[shape]()
    model = random_model(tree, D, 1, scale=3.0)
    Xc, Xt = queries(D, 400, 1), queries(D, 300, 2)
    Pc, Pt = model.predict_proba(Xc), model.predict_proba(Xt)
    yc = _labels(Pc, 0)
    K = Pc.shape[1]
    for alpha, kw in ((0.1, dict(loss="miscoverage")), (0.2, dict(loss="class_cost", cost=np.linspace(0.5, 2, K))),
                      (0.1, dict(loss="hierarchical", hierarchy=tree))):
        dense = RiskControlSetPredictor(alpha, score=score, **kw).fit(Pc, yc)
        lazy = RiskControlSetPredictor(alpha, score=score, **kw).fit(TreeProbabilities(model, Xc), yc)
        assert lazy.lambda_ == pytest.approx(dense.lambda_, rel=1e-12, abs=1e-13)
        np.testing.assert_array_equal(dense.predict_mask(Pt), lazy.predict_mask(TreeProbabilities(model, Xt)))
        if kw["loss"] != "hierarchical":
            Sc, St = _top_k(Pc, 6), _top_k(Pt, 6)
            dense = RiskControlSetPredictor(alpha, score=score, **kw).fit(Sc.toarray(), yc)
            top = RiskControlSetPredictor(alpha, score=score, **kw).fit(Sc, yc)
            assert top.lambda_ == pytest.approx(dense.lambda_, rel=1e-12, abs=1e-13)
            _assert_same(dense.predict(St.toarray()), top.predict(St))
    a = LearnThenTest(levels=(0.15,), score=score).fit(Pc, yc)
    b = LearnThenTest(levels=(0.15,), score=score).fit(TreeProbabilities(model, Xc), yc)
    assert a.lambda_ == b.lambda_ and a.procedure_ == b.procedure_


def test_tree_diameter_is_the_largest_class_distance():
    """The O(nodes) diameter equals the largest entry of the pairwise table, on trees of every shape
    (the pairwise search cost K^2: 10^10 comparisons at K = 10^5)."""
    from svbop.conformal.risk import _tree_diameter, _TreeDistance
    from test_hf import predefined_tree

    rng = np.random.default_rng(0)
    trees = [t() for t in TREES.values()] + [predefined_tree(), binary_tree(2), binary_tree(1000)]
    for _ in range(5):  # random trees: each node's parent among the later nodes
        K, inner = 40, 15
        leaves = np.concatenate([K + np.arange(inner), rng.integers(K, K + inner, K - inner)])  # none childless
        parent = np.concatenate([leaves, [K + int(rng.integers(j + 1, inner)) for j in range(inner - 1)], [-1]])
        from svbop.trees import collapse_single_children
        from svbop.datasets import Hierarchy

        trees.append(collapse_single_children(Hierarchy(parent, K)))
    for t in trees:
        assert _tree_diameter(t) == int(_TreeDistance(t).table.max())


def test_risk_losses_that_need_every_class_are_refused_on_lazy_sources():
    from svbop.conformal import LearnThenTest, RiskControlSetPredictor, set_loss

    model = random_model(binary_tree(9), D, 1)
    X = queries(D, 60, 1)
    y = _labels(model.predict_proba(X), 0)
    with pytest.raises(ValueError, match="TreeProbabilities: loss .* needs every class's score"):
        RiskControlSetPredictor(0.2, loss=lambda m, yy: (~m[np.arange(yy.size), yy]).astype(float)).fit(
            TreeProbabilities(model, X), y)
    with pytest.raises(ValueError, match="needs every class's score"):
        LearnThenTest(losses=["miscoverage", set_loss("size_above", max_size=3)], levels=(0.2, 0.3)).fit(
            TreeProbabilities(model, X), y)
    with pytest.raises(ValueError, match="SparseOutputs: this loss weighs every class that enters a set before the label"):
        RiskControlSetPredictor(0.2, loss="hierarchical", hierarchy=binary_tree(9)).fit(
            _top_k(model.predict_proba(X), 3), y)


def test_long_searches_are_rerun_in_bounded_batches(monkeypatch):
    """Rows whose search outgrows the first buffer are searched again in batches of bounded buffers
    (one row held every class's buffer at once before); the classes and values are the same."""
    from svbop import hf

    model = random_model(binary_tree(37), D, 1, scale=3.0)
    X = queries(D, 200, 3)
    ref = hf.enumerate_leaves(model, X, p_min=0.001)
    monkeypatch.setattr(hf, "_FIRST_CAP", 2)
    monkeypatch.setattr(hf, "_LONG_ENTRIES", 7)
    small = hf.enumerate_leaves(model, X, p_min=0.001)
    for a, b in zip(ref, small):
        np.testing.assert_array_equal(a, b)
    assert np.diff(ref[0]).max() > 7  # some rows needed more than one batch's buffer
    # every class of every row, in decreasing probability: the dense ranking
    full = hf.enumerate_leaves(model, X)
    P = model.predict_proba(X)
    order = np.argsort(-P, axis=1, kind="stable")
    np.testing.assert_array_equal(full[1].reshape(P.shape), order)
    np.testing.assert_allclose(np.exp(full[2]).reshape(P.shape), np.take_along_axis(P, order, axis=1), rtol=1e-12)


@pytest.mark.parametrize("config", [dict(score="aps"), dict(score="aps", randomized=False),
                                    dict(score="raps", k_reg=2, lam=0.05), dict(score="saps", lam=0.05),
                                    dict(score="topk"), dict(score="topk", randomized=True)],
                         ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("give_up", [1, 2, 5])
def test_tree_quantile_with_far_labels_given_up_is_exact(monkeypatch, config, give_up):
    """A tree's calibration first gives a row up after a few classes (a lower bound of its score) and
    searches to the end only the rows whose bound could change the order statistic: the quantile is the
    dense path's at every level."""
    from svbop.conformal import lazy

    monkeypatch.setattr(lazy, "_GIVE_UP_RANK", give_up)
    model = random_model(binary_tree(37), D, 5, scale=1.5)  # flat rows: labels often rank far down
    Xc = queries(D, 500, 9)
    Pc = model.predict_proba(Xc)
    yc = _labels(Pc, 3)
    for eps in (0.05, 0.2, 0.6):
        dense = ConformalSetPredictor(eps, random_state=2, **config).fit(Pc, yc)
        lazy_fit = ConformalSetPredictor(eps, random_state=2, **config).fit(TreeProbabilities(model, Xc), yc)
        assert lazy_fit.quantile_ == pytest.approx(dense.quantile_, rel=1e-12, abs=1e-13)


def test_top_k_files_a_header_cannot_make_allocate_and_logits_are_detected(tmp_path):
    """A member whose header claims 10^12 rows is refused before any allocation, naming the file; a file
    without `kind` holding logits (negative values, rows past 1) is read as logits."""
    import io
    import zipfile

    crafted = tmp_path / "crafted.npz"
    with zipfile.ZipFile(crafted, "w") as z:
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": "<i8", "fortran_order": False, "shape": (10**12, 100)})
        z.writestr("indices.npy", head.getvalue() + b"\0" * 64)
        for name, arr in (("values", np.zeros((2, 2))), ("K", np.int64(5))):
            b = io.BytesIO()
            np.save(b, arr)
            z.writestr(f"{name}.npy", b.getvalue())
    with pytest.raises(ValueError, match=str(crafted)):
        SparseOutputs.load(crafted)
    logits = tmp_path / "logits.npz"
    np.savez(logits, indices=np.array([[1, 2], [0, 3]]), values=np.array([[2.0, -1.0], [0.5, 0.1]]), K=np.int64(5))
    s = SparseOutputs.load(logits)
    assert s.kind == "logits"
    np.testing.assert_allclose(s.values.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match=r"values\[0, 1\] = -1.0: probabilities must be >= 0"):
        SparseOutputs.load(logits, kind="probabilities")
