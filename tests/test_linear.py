"""svbop.linear: one-vs-rest liblinear training, softmax, save/load, clip, merge."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from svbop.linear import LinearModel, class_parts, merge_models, softmax, train_ovr

liblinearutil = pytest.importorskip("liblinear.liblinearutil")
from svbop.linear import _libc  # noqa: E402


@pytest.fixture(scope="module")
def data():
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=300, n_features=25, n_informative=12, n_classes=6, n_clusters_per_class=1,
        random_state=3,
    )
    return X, y


def liblinear_binary(X, yb, options):
    """liblinear's own binary training from a fresh rand() state, as train_ovr does per class."""
    _libc.srand(1)
    return liblinearutil.train(yb.astype(float), sp.csr_matrix(X), options)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("bias", [1.0, 2.5])
def test_each_row_is_liblinears_own_binary_model(data, sparse, bias):
    X, y = data
    Xin = sp.csr_matrix(X) if sparse else X
    model = train_ovr(Xin, y, 6, C=0.5, eps=0.1, bias=bias, progress=False)
    assert model.W.shape == (6, 25) and np.array_equal(model.classes, np.arange(6))
    scores = model.decision_function(Xin)
    for c in range(6):
        yb = np.where(y == c, 1, -1)
        ref = liblinear_binary(X, yb, f"-s 7 -c 0.5 -e 0.1 -B {bias} -q")
        _, _, dv = liblinearutil.predict(yb.astype(float), sp.csr_matrix(X), ref, "-q")
        # liblinear's decision value is for its first label, which is +1 here
        assert ref.get_labels()[0] == 1
        np.testing.assert_allclose(scores[:, c], np.ravel(dv), rtol=0, atol=1e-12)


def test_matches_liblinear_multiclass_model(data):
    X, y = data
    Xs = sp.csr_matrix(X)
    # liblinear's multi-class training orders the examples by class and continues one rand()
    # stream over the classes, so only a tight tolerance makes the two solutions coincide
    model = train_ovr(X, y, 6, C=0.5, eps=1e-8, progress=False)
    ref = liblinearutil.train(y.astype(float), Xs, "-s 7 -c 0.5 -e 1e-8 -B 1 -q")
    assert ref.get_labels() != sorted(ref.get_labels())  # the reordering is exercised
    converted = LinearModel.from_liblinear(ref)
    np.testing.assert_allclose(model.W, converted.W, atol=1e-6)
    np.testing.assert_allclose(model.b, converted.b, atol=1e-6)
    # the conversion itself is exact: scores equal liblinear's decision values
    _, _, dv = liblinearutil.predict(y.astype(float), Xs, ref, "-q")
    dv = np.asarray(dv)[:, np.argsort(ref.get_labels())]
    np.testing.assert_allclose(converted.decision_function(X), dv, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.decision_function(Xs), dv, atol=1e-5)


def test_paper_tolerance_is_close_to_liblinear_multiclass(data):
    X, y = data
    model = train_ovr(X, y, 6, progress=False)
    ref = LinearModel.from_liblinear(liblinearutil.train(y.astype(float), sp.csr_matrix(X), "-s 7 -c 1 -e 0.1 -B 1 -q"))
    assert np.mean(model.predict(X) == ref.predict(X)) > 0.97
    np.testing.assert_allclose(model.predict_proba(X), ref.predict_proba(X), atol=0.05)


def test_chunks_and_parallel_jobs_give_the_same_model_exactly(data):
    X, y = data
    full = train_ovr(X, y, 6, progress=False)
    chunks = [train_ovr(X, y, 6, classes=cls, progress=False) for cls in ([4, 0], [5, 2], [1, 3])]
    assert np.array_equal(chunks[0].classes, [0, 4])
    merged = merge_models(chunks[::-1])
    assert np.array_equal(merged.classes, np.arange(6))
    assert np.array_equal(merged.W, full.W) and np.array_equal(merged.b, full.b)
    parallel = train_ovr(X, y, 6, n_jobs=2, progress=False)
    assert np.array_equal(parallel.W, full.W) and np.array_equal(parallel.b, full.b)


@pytest.mark.parametrize("parts", [1, 4, 8])
def test_class_parts_as_separate_jobs_merge_to_the_unchunked_model(data, parts):
    X, y = data
    full = train_ovr(X, y, 6, progress=False)
    ranges = class_parts(6, parts)
    assert len(ranges) == parts and np.array_equal(np.concatenate(ranges), np.arange(6))
    assert max(r.size for r in ranges) - min(r.size for r in ranges) <= 1
    chunks = [train_ovr(X, y, 6, classes=r, progress=False) for r in ranges]  # some empty when parts > K
    merged = merge_models(chunks)
    assert np.array_equal(merged.W, full.W) and np.array_equal(merged.b, full.b)
    clipped = merge_models([c.clip(0.5) for c in chunks])
    assert clipped.clip_threshold == 0.5
    np.testing.assert_array_equal(clipped.W.toarray(), full.clip(0.5).W.toarray())


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_clipping_while_training_equals_clipping_afterwards(data, n_jobs):
    X, y = data
    full = train_ovr(X, y, 6, progress=False)
    clipped = train_ovr(X, y, 6, clip=0.3, n_jobs=n_jobs, classes=[1, 4, 5], progress=False)
    expected = full.clip(0.3)
    assert clipped.clip_threshold == 0.3 and clipped.nnz < full.nnz
    np.testing.assert_array_equal(clipped.classes, [1, 4, 5])
    np.testing.assert_array_equal(clipped.W.toarray(), expected.W.toarray()[[1, 4, 5]])
    np.testing.assert_array_equal(clipped.b, full.b[[1, 4, 5]])
    with pytest.raises(ValueError, match="clip"):
        train_ovr(X, y, 6, clip=-1.0, progress=False)


def test_thread_backend_agrees_within_the_solver_tolerance(data):
    X, y = data
    full = train_ovr(X, y, 6, progress=False)
    threaded = train_ovr(sp.csr_matrix(X), y, 6, n_jobs=2, backend="threads", progress=False)
    np.testing.assert_allclose(threaded.W, full.W, atol=0.05)
    assert np.mean(threaded.predict(X) == full.predict(X)) > 0.97


def test_sign_when_the_first_example_is_negative(data):
    X, y = data
    c = int(y[1]) if y[1] != y[0] else int((y[0] + 1) % 6)
    assert y[0] != c
    model = train_ovr(X, y, 6, classes=[c], progress=False)
    own = model.decision_function(X[y == c])[:, 0]
    rest = model.decision_function(X[y != c])[:, 0]
    assert np.mean(own > 0) > 0.5 and own.mean() > rest.mean() + 1


def test_class_without_examples_gets_small_probabilities(data):
    X, y = data
    y = np.where(y == 3, 2, y)  # class 3 is absent
    model = train_ovr(X, y, 6, progress=False)
    assert np.all(model.decision_function(X)[:, 3] < 0)
    P = model.predict_proba(X)
    assert np.all(np.isfinite(P)) and P[:, 3].max() < 1 / 6 and P[:, 3].mean() < 0.01
    assert not np.any(model.predict(X) == 3)


def test_softmax_is_stable_and_keeps_the_argmax(rng):
    S = rng.standard_normal((50, 7)) * 30
    S[0] = [1e308, -1e308, 0, 5, 1e300, -np.inf, 3]
    S[1] += 1e6
    P = softmax(S)
    assert np.all(np.isfinite(P)) and np.allclose(P.sum(axis=1), 1)
    np.testing.assert_array_equal(P.argmax(axis=1), S.argmax(axis=1))
    Z = rng.standard_normal((4, 3))
    np.testing.assert_allclose(softmax(Z), np.exp(Z) / np.exp(Z).sum(1, keepdims=True), rtol=1e-14)
    out = Z.copy()
    assert softmax(out, out=out) is out
    np.testing.assert_allclose(softmax(Z[0]), softmax(Z)[0])


def toy_model(rng, K=4, D=6):
    return LinearModel(rng.standard_normal((K, D)), rng.standard_normal(K), np.arange(K))


def test_save_load_round_trip_dense_and_clipped(tmp_path, rng):
    model = toy_model(rng)
    model.save(tmp_path / "m.npz")
    back = LinearModel.load(tmp_path / "m.npz")
    assert isinstance(back.W, np.ndarray) and back.clip_threshold is None
    np.testing.assert_array_equal(back.W, model.W)
    np.testing.assert_array_equal(back.b, model.b)
    np.testing.assert_array_equal(back.classes, model.classes)
    clipped = model.clip(0.5)
    clipped.save(tmp_path / "c.npz")
    back = LinearModel.load(tmp_path / "c.npz")
    assert sp.issparse(back.W) and back.clip_threshold == 0.5
    np.testing.assert_array_equal(back.W.toarray(), clipped.W.toarray())
    X = rng.standard_normal((5, 6))
    np.testing.assert_allclose(back.decision_function(X), clipped.decision_function(X))
    np.testing.assert_allclose(back.decision_function(sp.csr_matrix(X)), clipped.decision_function(X))


def test_load_names_the_file_and_the_missing_array(tmp_path, rng):
    toy_model(rng).save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as good:
        np.savez(tmp_path / "bad.npz", **{k: good[k] for k in good.files if k != "b"})
    with pytest.raises(ValueError, match=r"bad\.npz.*missing key 'b'"):
        LinearModel.load(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="nope.npz: no such file"):
        LinearModel.load(tmp_path / "nope.npz")


def test_clip_zeroes_exactly_the_small_weights(rng):
    model = toy_model(rng)
    clipped = model.clip(0.7)
    expected = np.where(np.abs(model.W) < 0.7, 0.0, model.W)
    assert sp.isspmatrix_csr(clipped.W) or isinstance(clipped.W, sp.csr_matrix)
    np.testing.assert_array_equal(clipped.W.toarray(), expected)
    assert clipped.nnz == np.count_nonzero(expected)
    assert clipped.density == pytest.approx(np.count_nonzero(expected) / expected.size)
    np.testing.assert_array_equal(clipped.b, model.b)
    np.testing.assert_array_equal(clipped.clip(1.0).W.toarray(), np.where(np.abs(model.W) < 1.0, 0.0, model.W))
    with pytest.raises(ValueError, match="threshold"):
        model.clip(-1)


def test_merge_rejects_overlap_gaps_and_mismatched_features(rng):
    a = LinearModel(rng.standard_normal((2, 5)), np.zeros(2), [0, 1])
    b = LinearModel(rng.standard_normal((2, 5)), np.zeros(2), [1, 2])
    c = LinearModel(rng.standard_normal((1, 5)), np.zeros(1), [3])
    d = LinearModel(rng.standard_normal((1, 4)), np.zeros(1), [2])
    with pytest.raises(ValueError, match=r"overlapping chunks: classes \[1\]"):
        merge_models([a, b])
    with pytest.raises(ValueError, match=r"missing classes: \[2\]"):
        merge_models([a, c])
    with pytest.raises(ValueError, match="models\\[1\\] has 4 features, models\\[0\\] has 5"):
        merge_models([a, d])
    with pytest.raises(ValueError, match="missing classes"):
        merge_models([a], n_classes=3)
    merged = merge_models([c, LinearModel(b.W[1:], b.b[1:], [2]), a.clip(0.0)])
    assert sp.issparse(merged.W) and np.array_equal(merged.classes, np.arange(4))
    np.testing.assert_array_equal(merged.W.toarray()[3], c.W[0])


def test_train_ovr_validates_its_arguments(data):
    X, y = data
    cases = [
        (dict(y=y[:-1]), "X has 300 rows but y has 299 labels"),
        (dict(y=np.where(y == 0, 7, y)), r"y must be in 0\.\.5, found 7"),
        (dict(y=y + 0.5), "integer class ids"),
        (dict(C=0.0), "C must be a finite number > 0, got 0.0"),
        (dict(eps=-1.0), "eps must be"),
        (dict(classes=[1, 1]), "must not repeat"),
        (dict(classes=[6]), r"classes must be in 0\.\.5"),
        (dict(n_jobs=0), "n_jobs must be"),
        (dict(solver=4), "solver must be"),
    ]
    for kwargs, message in cases:
        args = dict(X=X, y=y, n_classes=6, progress=False) | kwargs
        with pytest.raises(ValueError, match=message):
            train_ovr(**args)
    with pytest.raises(ValueError, match="X has 3 features, the model has 25"):
        train_ovr(X, y, 6, classes=[0], progress=False).decision_function(np.ones((2, 3)))


@pytest.mark.parametrize("clipped", [False, True])
@pytest.mark.parametrize("sparse_x", [False, True])
def test_predict_proba_in_blocks_equals_the_softmax_of_all_scores(rng, clipped, sparse_x):
    K, D = 37, 50
    W = rng.standard_normal((K, D)) * (rng.random((K, D)) < 0.2)
    model = LinearModel(sp.csr_matrix(W) if clipped else W, rng.standard_normal(K), np.arange(K))
    X = rng.standard_normal((103, D)) * (rng.random((103, D)) < 0.3)
    X = sp.csr_matrix(X) if sparse_x else X
    whole = softmax(model.decision_function(X))
    for batch_size in (1, 7, 103, 1000):
        blocks = model.predict_proba(X, batch_size=batch_size)
        assert blocks.dtype == np.float64 and blocks.shape == (103, K)
        if sparse_x:  # row by row the same sums as one product: bit for bit
            np.testing.assert_array_equal(blocks, whole)
        else:  # BLAS may block a dense product differently
            np.testing.assert_allclose(blocks, whole, rtol=1e-12, atol=1e-300)
    assert model.predict_proba(X[:0]).shape == (0, K)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        model.predict_proba(X, batch_size=0)


def test_predict_proba_in_float32_is_the_float64_result_rounded(rng):
    model = LinearModel(sp.csr_matrix(rng.standard_normal((20, 30))), rng.standard_normal(20), np.arange(20))
    X = sp.csr_matrix(rng.standard_normal((41, 30)))
    P32 = model.predict_proba(X, dtype=np.float32, batch_size=6)
    assert P32.dtype == np.float32
    np.testing.assert_array_equal(P32, model.predict_proba(X).astype(np.float32))
    with pytest.raises(ValueError, match="dtype must be float64 or float32"):
        model.predict_proba(X, dtype=np.float16)
