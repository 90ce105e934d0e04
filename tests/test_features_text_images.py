"""Features of string inputs: VGG16 convolutional features of image files, tf-idf of texts and k-mers.

VGG16 runs with ``weights=None`` (random weights; no download) on a handful of small images,
with two torch threads, and the network is built once per module (about 3 s on CPU).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

N_FEATURES = 512 * 7 * 7


# --------------------------------------------------------------------------------------------
# VGG16
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    pytest.importorskip("PIL")
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield torch
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def vgg(torch):
    from svbop.features import vgg16

    return vgg16


@pytest.fixture(scope="module")
def random_vgg(torch, vgg):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return vgg.vgg16_model(weights=None)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Small images of different modes and sizes: RGB png, greyscale jpg, RGBA png, palette gif."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    (root / "sub").mkdir()
    Image.fromarray(rng.integers(0, 256, (120, 90, 3), dtype=np.uint8), "RGB").save(root / "rgb.png")
    Image.fromarray(rng.integers(0, 256, (300, 400), dtype=np.uint8), "L").save(root / "sub" / "grey.jpg")
    Image.fromarray(rng.integers(0, 256, (64, 64, 4), dtype=np.uint8), "RGBA").save(root / "rgba.png")
    Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8), "RGB").convert("P").save(root / "palette.gif")
    return root, ["rgb.png", "sub/grey.jpg", "rgba.png", "palette.gif"]


def test_vgg16_features_shape_and_batch_size_independence(vgg, random_vgg, images):
    root, paths = images
    F1 = vgg.vgg16_features(paths, root, model=random_vgg, batch_size=1, device="cpu", progress=False)
    F3 = vgg.vgg16_features(np.array(paths, dtype=object), root, model=random_vgg, batch_size=3, device="cpu", progress=False)
    assert F1.shape == (len(paths), N_FEATURES) == (4, vgg.VGG16_FEATURE_DIM)
    assert F1.dtype == np.float32 and np.all(np.isfinite(F1))
    assert F1.min() >= 0 and np.count_nonzero(F1) > 0  # after a ReLU and a max-pool
    np.testing.assert_allclose(F3, F1, rtol=0, atol=1e-4 * float(np.abs(F1).max()))
    assert not np.allclose(F1[0], F1[1])  # different images, different features
    assert not random_vgg.training


def test_vgg16_features_match_the_network_on_the_documented_preprocessing(torch, vgg, random_vgg, images):
    from PIL import Image

    root, paths = images
    img = Image.open(root / paths[2]).convert("RGB").resize((224, 224), Image.Resampling.BILINEAR)
    x = (np.asarray(img, dtype=np.float32) / 255 - np.array([0.485, 0.456, 0.406], dtype=np.float32)) / np.array(
        [0.229, 0.224, 0.225], dtype=np.float32
    )
    with torch.no_grad():
        ref = random_vgg(torch.from_numpy(x.transpose(2, 0, 1).copy())[None]).flatten(1).numpy()
    F = vgg.vgg16_features([root / paths[2]], model=random_vgg, progress=False)  # absolute path, no root
    np.testing.assert_allclose(F, ref, rtol=0, atol=1e-4 * float(np.abs(ref).max()))  # float rounding only


def test_vgg16_random_weights_are_deterministic_for_a_fixed_seed(torch, vgg, images):
    root, paths = images
    out = []
    for _ in range(2):
        torch.manual_seed(123)
        out.append(vgg.vgg16_features(paths[:2], root, weights=None, batch_size=2, n_threads=2, progress=False))
    np.testing.assert_array_equal(out[0], out[1])
    assert torch.get_num_threads() == 2  # restored


def test_vgg16_progress_callback_and_out_array(vgg, random_vgg, images):
    root, paths = images
    calls = []
    out = np.full((len(paths), N_FEATURES), np.nan, dtype=np.float32)
    F = vgg.vgg16_features(paths, root, model=random_vgg, batch_size=3, progress=lambda d, n: calls.append((d, n)), out=out)
    assert F is out and np.all(np.isfinite(out))
    assert calls == [(3, 4), (4, 4)]
    assert vgg.vgg16_features([], root, model=random_vgg).shape == (0, N_FEATURES)


def test_vgg16_default_progress_logs_and_worker_processes(vgg, random_vgg, images, tmp_path, caplog):
    import logging

    root, paths = images
    with caplog.at_level(logging.INFO, logger="svbop.features.vgg16"):
        F = vgg.vgg16_features(paths, root, model=random_vgg, batch_size=2, num_workers=1)
    assert "VGG16 features: 2/2 (100%)" in caplog.text and "4 images in" in caplog.text
    np.testing.assert_allclose(
        vgg.vgg16_features(paths, root, model=random_vgg, batch_size=2, progress=False), F, rtol=0, atol=1e-6
    )
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    with pytest.raises(ValueError, match=r"broken\.png: unreadable image"):  # raised from a worker, same message
        vgg.vgg16_features([tmp_path / "broken.png"], model=random_vgg, num_workers=1, progress=False)


def test_vgg16_missing_and_unreadable_images_are_named(vgg, random_vgg, images, tmp_path):
    root, paths = images
    with pytest.raises(ValueError, match=r"nope\.png: no such image file \(and 1 more missing\)"):
        vgg.vgg16_features(paths + ["nope.png", "also.png"], root, model=random_vgg, progress=False)
    (tmp_path / "broken.jpg").write_bytes(b"not an image at all")
    with pytest.raises(ValueError, match=r"broken\.jpg: unreadable image"):
        vgg.vgg16_features([root / paths[0], tmp_path / "broken.jpg"], model=random_vgg, progress=False)
    with pytest.raises(ValueError, match="single path"):
        vgg.vgg16_features("rgb.png", root, model=random_vgg)
    with pytest.raises(ValueError, match="IMAGENET1K_V2: no such weights file"):
        vgg.vgg16_model(weights="IMAGENET1K_V2")  # not a torchvision name here: a file that is not there
    with pytest.raises(ValueError, match="batch_size"):
        vgg.vgg16_features(paths, root, model=random_vgg, batch_size=0)


@pytest.fixture
def served(tmp_path):
    """A local HTTP server (127.0.0.1) serving tmp_path/served: (folder, base URL)."""
    import functools
    import http.server
    import threading

    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _stand_in(torch):
    """A small network laid out like VGG16 (convolutions under ``features.``, a classifier)."""
    return torch.nn.ModuleDict({
        "features": torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 3)),
        "classifier": torch.nn.Sequential(torch.nn.Linear(8, 3)),
    })


def test_weights_are_fetched_with_a_checksum_and_loaded_from_that_file(torch, vgg, served, tmp_path):
    """The pipeline's way: fetch (URL, sha256) -> file -> load; a corrupt copy is refused, never loaded."""
    import hashlib

    from svbop.download import ChecksumError, fetch

    folder, base = served
    with torch.random.fork_rng():
        torch.manual_seed(1)
        net = _stand_in(torch)
    torch.save(net.state_dict(), folder / "standin-weights.pth")
    good = (folder / "standin-weights.pth").read_bytes()
    sha256 = hashlib.sha256(good).hexdigest()
    dest = fetch(tmp_path / "data/pretrained/standin.pth", url=f"{base}/standin-weights.pth", sha256=sha256,
                 retries=0, progress=False)
    fresh = _stand_in(torch)["features"]
    vgg.load_state_dict_file(dest, fresh, prefix="features.")
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, net.state_dict()[f"features.{name}"]), name
    # a corrupt copy on the server: refused by the checksum, moved aside, nothing to load
    (folder / "standin-weights.pth").write_bytes(good[:-100] + bytes(100))
    other = tmp_path / "data/pretrained/other.pth"
    with pytest.raises(ChecksumError, match=sha256):
        fetch(other, url=f"{base}/standin-weights.pth", sha256=sha256, retries=0, progress=False)
    assert not other.exists() and (tmp_path / "data/pretrained/other.pth.corrupt").exists()
    # and a damaged file that reaches the loader anyway is named, not a torch traceback
    (tmp_path / "broken.pth").write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"broken\.pth: not a readable torch weights file"):
        vgg.load_state_dict_file(tmp_path / "broken.pth", _stand_in(torch)["features"], prefix="features.")


def test_weights_file_that_does_not_fit_is_named(torch, vgg, tmp_path):
    torch.save(_stand_in(torch).state_dict(), tmp_path / "standin.pth")
    with pytest.raises(ValueError, match=r"standin\.pth: does not fit the network \(missing features\.5\.weight"):
        vgg.vgg16_model(tmp_path / "standin.pth")
    with pytest.raises(ValueError, match=r"standin\.pth: no weights under 'feat\.'"):
        vgg.load_state_dict_file(tmp_path / "standin.pth", _stand_in(torch)["features"], prefix="feat.")


def test_vgg16_loads_torchvision_layout_weights_from_a_file(torch, vgg, random_vgg, tmp_path):
    """A file with torchvision's key layout (here the convolutional part of a random VGG16, 59 MB)
    gives exactly the network it was saved from, in eval mode."""
    torch.save({f"features.{k}": v for k, v in random_vgg.state_dict().items()}, tmp_path / "vgg16.pth")
    loaded = vgg.vgg16_model(tmp_path / "vgg16.pth")
    assert not loaded.training
    expected = random_vgg.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    assert all(torch.equal(v, expected[k]) for k, v in loaded.state_dict().items())


def test_importing_features_does_not_import_torchvision():
    import subprocess
    import sys

    code = (
        "import sys, svbop.features\n"
        "from svbop.features import tfidf_strings\n"
        "assert 'torch' not in sys.modules and 'torchvision' not in sys.modules\n"
        "from svbop.features import vgg16_features\n"
        "assert 'torch' in sys.modules\n"
    )
    pytest.importorskip("sklearn")
    pytest.importorskip("torchvision")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------
# tf-idf of strings
# --------------------------------------------------------------------------------------------


def test_char_analyzer_gives_exactly_the_overlapping_kmers(text):
    from svbop.features import tfidf_strings

    X, vocab = tfidf_strings(["ACGTA"], analyzer="char", ngram_range=(3, 3), lowercase=False, return_vocabulary=True)
    assert vocab == ["ACG", "CGT", "GTA"]
    np.testing.assert_allclose(X.toarray(), np.full((1, 3), 1 / np.sqrt(3)), rtol=1e-6)
    _, vocab = tfidf_strings(["ACGTA"], analyzer="char", ngram_range=(3, 3), return_vocabulary=True)
    assert vocab == ["acg", "cgt", "gta"]  # lowercase=True (default)
    # "char_wb" pads with spaces: not k-mers
    _, vocab = tfidf_strings(["ACGTA"], analyzer="char_wb", ngram_range=(3, 3), lowercase=False, return_vocabulary=True)
    assert vocab == [" AC", "ACG", "CGT", "GTA", "TA "]
    # 3-, 4- and 5-mers (the paper's Bacteria features) with their counts
    seqs = np.array(["ACGTAC", "AAAA"], dtype=object)
    X, vocab = tfidf_strings(seqs, analyzer="char", ngram_range=(3, 5), lowercase=False, norm=None, return_vocabulary=True)
    expected = {"ACG", "CGT", "GTA", "TAC", "ACGT", "CGTA", "GTAC", "ACGTA", "CGTAC", "AAA", "AAAA"}
    assert set(vocab) == expected and len(vocab) == len(expected)
    counts = text.CountVectorizer(analyzer="char", ngram_range=(3, 5), lowercase=False).fit(seqs)
    assert counts.get_feature_names_out().tolist() == vocab
    row = dict(zip(vocab, X[1].toarray().ravel()))
    idf = np.log(3 / 2) + 1  # smoothed idf of a k-mer in one of two sequences
    assert row["AAA"] == pytest.approx(2 * idf) and row["AAAA"] == pytest.approx(idf) and row["ACG"] == 0


def test_strings_vocabulary_and_idf_fitted_on_train_rows_only(text):
    from svbop.features import tfidf_strings

    docs = np.array(["the cat sat", "the dog sat", "a cat and a dog", "zebra zebra cat", "zebra"], dtype=object)
    train = np.array([True, True, True, False, False])
    X, vocab = tfidf_strings(docs, train, return_vocabulary=True)
    ref = text.TfidfVectorizer().fit(docs[:3])
    assert isinstance(X, sp.csr_matrix) and X.dtype == np.float32 and X.shape == (5, len(ref.vocabulary_))
    assert "zebra" not in vocab and vocab == ref.get_feature_names_out().tolist()
    np.testing.assert_allclose(X.toarray(), ref.transform(docs).toarray(), rtol=1e-6)
    assert X[4].nnz == 0  # only an unseen term: an empty row
    np.testing.assert_allclose(X[3].toarray().ravel()[vocab.index("cat")], 1.0, rtol=1e-6)  # l2-normalised, one term left
    # indices in any order are the same as the mask
    np.testing.assert_array_equal(tfidf_strings(docs, [2, 0, 1]).toarray(), X.toarray())
    # idf from the train rows: "sat" (df 2 of 3) and "cat" (df 2 of 3), not counting row 3's cat
    Xn, vocab = tfidf_strings(docs, train, norm=None, return_vocabulary=True)
    assert Xn[0, vocab.index("cat")] == pytest.approx(np.log(4 / 3) + 1)
    assert Xn[0, vocab.index("the")] == pytest.approx(np.log(4 / 3) + 1)


def test_word_options_match_sklearn(text):
    from svbop.features import tfidf_strings, tfidf_texts

    docs = ["Red apples and green apples", "green pears", "red wine, red apples", "apples"]
    kw = dict(ngram_range=(1, 2), min_df=2, sublinear_tf=True, norm="l1", lowercase=True)
    X, vocab = tfidf_strings(docs, return_vocabulary=True, **kw)
    ref = text.TfidfVectorizer(**kw).fit(docs)
    assert vocab == ref.get_feature_names_out().tolist() and "red apples" in vocab and "pears" not in vocab
    np.testing.assert_allclose(X.toarray(), ref.transform(docs).toarray(), rtol=1e-6)
    np.testing.assert_allclose(tfidf_texts(docs, **kw).toarray(), X.toarray())  # the pass-through form agrees
    X2, vocab2 = tfidf_strings(docs, max_features=2, return_vocabulary=True)
    assert X2.shape == (4, 2) and set(vocab2) == {"apples", "red"}
    X3, vocab3 = tfidf_strings(docs, lowercase=False, min_df=0.5, return_vocabulary=True)
    assert vocab3 == ["apples", "green"]  # in at least half the rows; "Red" and "red" once each


def test_strings_validation(text):
    from svbop.features import tfidf_strings

    with pytest.raises(ValueError, match="single string"):
        tfidf_strings("ACGT")
    with pytest.raises(ValueError, match=r"strings\[1\] must be a str, got float"):
        tfidf_strings(["ACGT", float("nan")])
    with pytest.raises(ValueError, match="holds no documents"):
        tfidf_strings([])
    with pytest.raises(ValueError, match="1-D"):
        tfidf_strings(np.array([["a", "b"]], dtype=object))
    with pytest.raises(ValueError, match="analyzer"):
        tfidf_strings(["ACGT"], analyzer="kmer")
    for bad in [(3,), (0, 2), (5, 3), "3-5"]:
        with pytest.raises(ValueError, match="ngram_range"):
            tfidf_strings(["ACGT"], ngram_range=bad)
    with pytest.raises(ValueError, match="norm must be"):
        tfidf_strings(["ACGT"], norm="max")
    with pytest.raises(ValueError, match="min_df"):
        tfidf_strings(["ACGT"], min_df=0)
    with pytest.raises(ValueError, match="max_features"):
        tfidf_strings(["ACGT"], max_features=0)
    with pytest.raises(ValueError, match="fit_rows"):
        tfidf_strings(["ACGT", "CC"], [0, 2])
    with pytest.raises(ValueError, match=r"tf-idf \(char 3-3-grams, min_df=1\): empty vocabulary"):
        tfidf_strings(["AC", "G"], analyzer="char", ngram_range=(3, 3))
