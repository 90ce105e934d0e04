"""Feature extraction: the paper's small CNN (on scikit-learn's bundled digits) and tf-idf.

Offline and fast: the CNN is trained on the 8x8 digits for a few epochs with one thread.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

SEED = 0


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def cnn(torch):
    from svbop.features import cnn

    return cnn


@pytest.fixture(scope="module")
def digits():
    """Digits images / 16 as float32 with a seeded 60/20/20 train/validation/test split."""
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    X = (d.images / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    idx = np.random.default_rng(SEED).permutation(len(y))
    n = len(y)
    tr, va, te = np.split(idx, [int(0.6 * n), int(0.8 * n)])
    return {"X": X, "y": y, "train": tr, "val": va, "test": te}


@pytest.fixture(scope="module")
def trained(cnn, digits):
    X, y, tr, va = digits["X"], digits["y"], digits["train"], digits["val"]
    return cnn.train_cnn(X[tr], y[tr], X[va], y[va], n_classes=10, max_epochs=6, seed=SEED, n_threads=1)


def _val_loss(torch, model, X, y) -> float:
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(np.ascontiguousarray(X[:, None], dtype=np.float32)))
        return float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(y)))


# --------------------------------------------------------------------------------------------
# CNN
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(8, 8), (28, 28), (8, 12)])
@pytest.mark.parametrize("in_channels", [1, 3])
def test_small_cnn_shapes(torch, cnn, size, in_channels):
    model = cnn.SmallCNN(in_channels, 7, size).eval()
    x = torch.zeros(5, in_channels, *size)
    assert tuple(model.features(x).shape) == (5, 32)
    assert tuple(model(x).shape) == (5, 7)
    with torch.no_grad():
        assert float(model.features(torch.randn(5, in_channels, *size)).min()) >= 0  # after the ReLU
    X = np.random.default_rng(0).random((4, *size) if in_channels == 1 else (4, in_channels, *size))
    F = cnn.extract_features(model, X, batch_size=3)
    assert F.shape == (4, 32) and F.dtype == np.float32


def test_small_cnn_rejects_bad_arguments(cnn):
    with pytest.raises(ValueError, match="too small for 3 max-pool blocks"):
        cnn.SmallCNN(1, 10, (7, 28))
    with pytest.raises(ValueError, match="n_classes"):
        cnn.SmallCNN(1, 1, (8, 8))
    with pytest.raises(ValueError, match="channels"):
        cnn.SmallCNN(1, 10, (8, 8), channels=())
    assert cnn.SmallCNN(1, 10, (4, 4), channels=(8, 8)).config["channels"] == (8, 8)


def test_train_cnn_validates_inputs(cnn):
    X = np.zeros((6, 8, 8), dtype=np.float32)
    y = np.arange(6) % 2
    with pytest.raises(ValueError, match="y_train"):
        cnn.train_cnn(X, y + 5, X, y, n_classes=2)
    with pytest.raises(ValueError, match="X_val has images of shape"):
        cnn.train_cnn(X, y, np.zeros((6, 16, 16)), y, n_classes=2)
    with pytest.raises(ValueError, match="X_train must have shape"):
        cnn.train_cnn(X.reshape(6, 64), y, X, y, n_classes=2)
    with pytest.raises(ValueError, match="patience"):
        cnn.train_cnn(X, y, X, y, n_classes=2, patience=0)
    with pytest.raises(ValueError, match="X_train contains NaN"):
        cnn.train_cnn(np.full_like(X, np.nan), y, X, y, n_classes=2)


def test_digits_accuracy_and_linear_probe(torch, cnn, digits, trained):
    linear_model = pytest.importorskip("sklearn.linear_model")
    X, y, tr, va, te = (digits[k] for k in ("X", "y", "train", "val", "test"))
    res = trained
    assert [h["epoch"] for h in res.history] == list(range(1, res.n_epochs + 1))
    assert set(res.history[0]) == {"epoch", "train_loss", "val_loss", "val_accuracy", "seconds"}
    assert res.best["val_accuracy"] > 0.85
    assert res.history[-1]["train_loss"] < res.history[0]["train_loss"]
    assert not res.model.training
    F = cnn.extract_features(res.model, X)
    assert F.shape == (len(y), 32) and F.dtype == np.float32
    probe = linear_model.LogisticRegression(max_iter=2000).fit(F[tr], y[tr])
    probe_acc = probe.score(F[te], y[te])
    with torch.no_grad():
        logits = res.model(torch.from_numpy(X[te][:, None]))
    cnn_acc = float(np.mean(logits.argmax(1).numpy() == y[te]))
    assert probe_acc > 0.85
    assert abs(probe_acc - cnn_acc) < 0.05


def test_early_stopping_restores_the_best_epoch(torch, cnn, digits):
    X, tr, va = digits["X"], digits["train"], digits["val"]
    noise = np.random.default_rng(1).integers(0, 10, size=len(X))  # unlearnable labels
    res = cnn.train_cnn(
        X[tr], noise[tr], X[va], noise[va], n_classes=10, max_epochs=60, patience=3, seed=SEED, n_threads=1
    )
    assert res.stopped_early
    assert res.n_epochs <= 20  # well before max_epochs
    assert res.best_epoch + 3 == res.history[-1]["epoch"] == res.n_epochs
    losses = [h["val_loss"] for h in res.history]
    assert res.best_epoch == 1 + int(np.argmin(losses))
    assert min(losses) < losses[-1]
    assert _val_loss(torch, res.model, X[va], noise[va]) == pytest.approx(min(losses), rel=1e-5)


def test_same_seed_same_features_and_global_rng_untouched(torch, cnn, digits):
    X, y, tr, va = digits["X"], digits["y"], digits["train"][:300], digits["val"][:100]
    state = torch.random.get_rng_state()
    kw = dict(n_classes=10, max_epochs=2, patience=5, n_threads=1)
    a = cnn.train_cnn(X[tr], y[tr], X[va], y[va], seed=3, **kw)
    b = cnn.train_cnn(X[tr], y[tr], X[va], y[va], seed=3, **kw)
    c = cnn.train_cnn(X[tr], y[tr], X[va], y[va], seed=4, **kw)
    assert torch.equal(state, torch.random.get_rng_state())
    assert a.history[-1]["val_loss"] == b.history[-1]["val_loss"]
    Fa, Fb, Fc = (cnn.extract_features(r.model, X[va]) for r in (a, b, c))
    np.testing.assert_array_equal(Fa, Fb)
    assert not np.array_equal(Fa, Fc)


def test_save_load_round_trip(torch, cnn, digits, trained, tmp_path):
    X = digits["X"][digits["test"]]
    path = tmp_path / "sub" / "cnn.pt"
    assert cnn.save_cnn(path, trained, dataset="digits", n=np.int64(3), scale=np.float32(0.5)) == path
    assert [p.name for p in path.parent.iterdir()] == ["cnn.pt"]  # no temporary file left
    raw = torch.load(path, weights_only=True)
    assert raw["config"]["hidden"] == 32 and raw["best_epoch"] == trained.best_epoch
    model = cnn.load_cnn(path, device="cpu")
    assert not model.training
    np.testing.assert_array_equal(cnn.extract_features(model, X), cnn.extract_features(trained.model, X))
    assert model.meta["dataset"] == "digits" and model.meta["n"] == 3 and model.meta["scale"] == 0.5
    assert model.meta["history"] == trained.history and model.meta["stopped_early"] == trained.stopped_early

    bare = tmp_path / "bare.pt"
    cnn.save_cnn(bare, model)  # a bare model works too
    np.testing.assert_array_equal(cnn.extract_features(cnn.load_cnn(bare), X), cnn.extract_features(model, X))


def test_checkpoint_errors(torch, cnn, trained, tmp_path):
    with pytest.raises(ValueError, match=r"meta\['bad'\]"):
        cnn.save_cnn(tmp_path / "x.pt", trained, bad=object())
    assert not list(tmp_path.iterdir())  # nothing written on error
    with pytest.raises(ValueError, match="no such file"):
        cnn.load_cnn(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a SmallCNN checkpoint"):
        cnn.load_cnn(tmp_path / "other.pt")


def test_extract_features_checks_and_keeps_the_mode(cnn, trained, digits):
    model = trained.model
    with pytest.raises(ValueError, match=r"network expects \(1, 8, 8\)"):
        cnn.extract_features(model, np.zeros((2, 28, 28)))
    with pytest.raises(ValueError, match="model must be a SmallCNN"):
        cnn.extract_features(object(), digits["X"][:2])
    model.train()
    try:
        cnn.extract_features(model, digits["X"][:2])
        assert model.training
    finally:
        model.eval()


def test_importing_svbop_features_does_not_import_torch():
    code = (
        "import sys, svbop, svbop.features, svbop.features.tfidf\n"
        "from svbop.features import tfidf_features\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "from svbop.features import SmallCNN\n"
        "assert 'torch' in sys.modules\n"
    )
    pytest.importorskip("sklearn")
    pytest.importorskip("torch")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------
# tf-idf
# --------------------------------------------------------------------------------------------


def _counts():
    rng = np.random.default_rng(7)
    C = rng.poisson(0.7, size=(40, 12)).astype(np.int64)
    C[:30, 11] = 0  # term 11 never occurs in the training rows 0..29
    C[30:, 11] = 1 + np.arange(10) % 3
    C[35] = 1  # a test row holding every term once: with norm=None it shows the idf vector
    return C


def test_tfidf_idf_is_fitted_on_the_train_rows_only(text):
    from svbop.features import tfidf_features

    C = _counts()
    train = np.arange(30)
    W = tfidf_features(C, train, norm=None)
    assert isinstance(W, sp.csr_matrix) and W.dtype == np.float32 and W.shape == C.shape
    df = np.count_nonzero(C[train], axis=0)
    idf = np.log((1 + 30) / (1 + df)) + 1
    np.testing.assert_allclose(W[35].toarray().ravel(), idf, rtol=1e-6)
    assert idf[11] == idf.max() == pytest.approx(np.log(31) + 1)
    ref = text.TfidfTransformer(norm=None).fit(C[train]).transform(C)
    np.testing.assert_allclose(W.toarray(), ref.toarray(), rtol=1e-6)
    # a boolean mask is the same as the indices; the order of the indices does not matter
    mask = np.zeros(len(C), dtype=bool)
    mask[train] = True
    np.testing.assert_array_equal(tfidf_features(C, mask).toarray(), tfidf_features(C, train[::-1]).toarray())


def test_tfidf_rows_are_normalised_and_match_sklearn_on_all_rows(text):
    from svbop.features import tfidf_features

    C = _counts()
    C[3] = 0  # an empty document stays a zero row
    W = tfidf_features(sp.csr_matrix(C))
    norms = np.sqrt(np.asarray(W.multiply(W).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms[np.arange(len(C)) != 3], 1.0, rtol=1e-6)
    assert norms[3] == 0
    ref = text.TfidfTransformer().fit_transform(C)
    np.testing.assert_allclose(W.toarray(), ref.toarray(), rtol=1e-6, atol=1e-7)
    ref = text.TfidfTransformer(sublinear_tf=True, norm="l1").fit_transform(C)
    np.testing.assert_allclose(tfidf_features(C, sublinear_tf=True, norm="l1").toarray(), ref.toarray(), rtol=1e-6)


def test_tfidf_validation(text):
    from svbop.features import tfidf_features

    C = _counts()
    with pytest.raises(ValueError, match="non-negative"):
        tfidf_features(C - 1)
    with pytest.raises(ValueError, match="non-negative"):
        tfidf_features(sp.csr_matrix(C - 1))
    with pytest.raises(ValueError, match="2-D"):
        tfidf_features(C[0])
    with pytest.raises(ValueError, match="norm must be"):
        tfidf_features(C, norm="max")
    with pytest.raises(ValueError, match="fit_rows is a boolean mask of length 3"):
        tfidf_features(C, np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match=r"fit_rows\[1\] = 40 is not a row index"):
        tfidf_features(C, [0, 40])
    with pytest.raises(ValueError, match="fit_rows repeats"):
        tfidf_features(C, [0, 0, 1])
    with pytest.raises(ValueError, match="selects no rows"):
        tfidf_features(C, [])
    with pytest.raises(ValueError, match="smooth_idf=False"):
        tfidf_features(C, np.arange(30), smooth_idf=False)


def test_tfidf_texts_fits_vocabulary_and_idf_on_train_rows(text):
    from svbop.features import tfidf_texts

    docs = ["the cat sat", "the dog sat", "a cat and a dog", "zebra zebra cat"]
    W = tfidf_texts(docs, [0, 1, 2])
    ref = text.TfidfVectorizer().fit(docs[:3])
    assert isinstance(W, sp.csr_matrix) and W.dtype == np.float32
    assert W.shape == (4, len(ref.vocabulary_)) and "zebra" not in ref.vocabulary_
    np.testing.assert_allclose(W.toarray(), ref.transform(docs).toarray(), rtol=1e-6)
    full = text.TfidfVectorizer(sublinear_tf=True).fit_transform(docs).toarray()
    np.testing.assert_allclose(tfidf_texts(docs, sublinear_tf=True).toarray(), full, rtol=1e-6)
    with pytest.raises(ValueError, match="single string"):
        tfidf_texts("the cat sat")
    with pytest.raises(ValueError, match=r"texts\[1\] must be a str"):
        tfidf_texts(["a b", 3])


def test_tfidf_drop_unseen_keeps_the_training_vocabulary_in_order():
    from svbop.features import tfidf_features

    C = sp.csr_matrix(np.array([[1, 0, 2, 0], [0, 0, 1, 3], [5, 0, 0, 1]], dtype=float))
    full = tfidf_features(C, [0, 1]).toarray()
    kept = tfidf_features(C, [0, 1], drop_unseen=True).toarray()
    assert kept.shape == (3, 3)  # term 1 never occurs; terms 0, 2, 3 occur in rows 0-1
    # Same idf for the kept terms; rows renormalised over them (term 1 is zero everywhere anyway).
    np.testing.assert_allclose(kept, full[:, [0, 2, 3]], rtol=1e-6)
