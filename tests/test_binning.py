"""Random binning features of the Laplacian kernel (svbop.features.binning): offline and fast.

The oracle for the exact facts is the recipe itself, evaluated naively from the fitted pitches
and shifts: the bin of ``x`` in grid ``p`` is ``floor((x - shifts_[p]) / pitches_[p])``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from svbop.features import binning
from svbop.features.binning import RandomBinning, random_binning_features


def naive_bins(model: RandomBinning, X: np.ndarray) -> np.ndarray:
    """(n_rows, n_grids, n_features) bin indices straight from the recipe."""
    return np.floor((np.asarray(X, dtype=np.float64)[:, None, :] - model.shifts_) / model.pitches_)


def grid_columns(model: RandomBinning, Z: sp.csr_matrix) -> np.ndarray:
    """(n_rows, n_grids) column of each row's non-zero in each grid, -1 where it has none."""
    Z = sp.csr_matrix(Z)
    out = np.full((Z.shape[0], model.offsets_.size - 1), -1, dtype=np.int64)
    rows = np.repeat(np.arange(Z.shape[0]), np.diff(Z.indptr))
    grids = np.searchsorted(model.offsets_, Z.indices, side="right") - 1
    assert not np.any(np.diff(np.ravel_multi_index((rows, grids), out.shape)) <= 0), "two non-zeros in one grid"
    out[rows, grids] = Z.indices
    return out


def clustered(rng: np.random.Generator, n: int, d: int, spread: float = 0.3) -> np.ndarray:
    """Points around 4 centres, so that bins are shared even when they are small."""
    centres = rng.normal(size=(4, d)) * 3
    return centres[rng.integers(0, 4, n)] + rng.normal(size=(n, d)) * spread


# --------------------------------------------------------------------------------------------
# Known answers
# --------------------------------------------------------------------------------------------


def test_gram_matrix_approximates_the_laplacian_kernel_within_five_binomial_sds():
    X = np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.05], [0.3, -0.2, 0.1], [0.6, 0.4, 0.0], [-0.5, 0.2, 0.3], [1.0, 0.8, -0.4]])
    sigma, P = 1.0, 2000
    Z = RandomBinning(n_grids=P, sigma=sigma, seed=0).fit_transform(X)
    Z = Z.astype(np.float64)  # a float32 product would add 2000 terms in float32
    gram = (Z @ Z.T).toarray()
    kernel = np.exp(-np.abs(X[:, None, :] - X[None, :, :]).sum(axis=2) / sigma)
    assert 0.05 < kernel.min() and kernel[~np.eye(6, dtype=bool)].max() < 0.95  # informative pairs
    tolerance = 5 * np.sqrt(kernel * (1 - kernel) / P) + 1e-6  # float32 rounding of 1/sqrt(P)
    assert np.all(np.abs(gram - kernel) <= tolerance)


def test_diagonal_of_the_gram_matrix_is_exactly_one():
    # 256 grids: 1/sqrt(256) = 1/16 is exact in float32, so every point sharing its own bin
    # in all 256 grids gives exactly 1.
    X = np.random.default_rng(0).normal(size=(50, 4))
    Z = RandomBinning(n_grids=256, sigma=0.5, seed=1).fit_transform(X)
    assert np.array_equal((Z @ Z.T).diagonal(), np.ones(50, dtype=np.float32))


def test_median_heuristic_is_the_median_l1_distance_of_all_pairs_on_tiny_examples():
    # L1 distances 1, 3, 4 -> median 3.
    three = RandomBinning(n_grids=3).fit(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]]))
    assert three.sigma_ == 3.0
    # On a line 0, 1, 3, 7: distances 1, 3, 7, 2, 6, 4 -> median (3 + 4) / 2.
    four = RandomBinning(n_grids=3).fit(np.array([[0.0], [1.0], [3.0], [7.0]]))
    assert four.sigma_ == 3.5
    # The same through the fit rows of random_binning_features: only rows 0, 1, 3 count.
    X = np.array([[0.0], [1.0], [100.0], [3.0]])
    model = RandomBinning(n_grids=3)
    model._fit(X, np.array([0, 1, 3]))
    assert model.sigma_ == 2.0  # distances 1, 3, 2


def test_median_heuristic_samples_pairs_of_larger_inputs_close_to_the_full_median():
    X = np.random.default_rng(3).random((300, 8))  # 44,850 pairs > MEDIAN_PAIRS
    full = np.median(np.abs(X[:, None] - X[None]).sum(axis=2)[np.triu_indices(300, 1)])
    a = RandomBinning(n_grids=2, seed=0).fit(X).sigma_
    assert a == RandomBinning(n_grids=2, seed=0).fit(X).sigma_  # seeded
    assert abs(a - full) < 0.03 * full


# --------------------------------------------------------------------------------------------
# Exact facts
# --------------------------------------------------------------------------------------------


def test_training_rows_have_one_nonzero_per_grid_equal_to_one_over_sqrt_n_grids():
    X = np.random.default_rng(1).normal(size=(200, 6))
    model = RandomBinning(n_grids=30, sigma=2.0, seed=0)
    Z = model.fit_transform(X)
    assert isinstance(Z, sp.csr_matrix) and Z.dtype == np.float32 and Z.has_sorted_indices
    assert Z.shape == (200, model.n_features_out_) and model.n_features_out_ == model.offsets_[-1] == model.n_bins_.sum()
    assert np.all(Z.getnnz(axis=1) == 30)
    assert np.all(Z.data == np.float32(1 / np.sqrt(30)))
    assert np.all(grid_columns(model, Z) >= 0)  # one in every grid
    assert np.all(Z.getnnz(axis=0) > 0)  # every column is a training bin


@pytest.mark.parametrize(
    "n_features, sigma, min_words",
    [(3, 1.0, 1), (5, 0.02, 1), (40, 0.5, 2)],  # the last packs each grid into several int64 words
)
def test_columns_are_exactly_the_training_bins_of_the_recipe(n_features, sigma, min_words):
    rng = np.random.default_rng(n_features)
    X = clustered(rng, 300, n_features)
    fit = rng.permutation(300)[:200]
    model = RandomBinning(n_grids=12, sigma=sigma, seed=2)
    model._fit(X, fit)
    assert np.diff(model._grid_words).max() >= min_words
    Z = model.transform(X)
    bins = naive_bins(model, X)
    cols = grid_columns(model, Z)
    for p in range(12):
        training_bins = {tuple(b) for b in bins[fit, p]}
        assert model.n_bins_[p] == len(training_bins)
        seen = np.array([tuple(b) in training_bins for b in bins[:, p]])
        assert np.array_equal(cols[:, p] >= 0, seen)
        same_bin = (bins[seen, None, p] == bins[None, seen, p]).all(axis=2)
        assert np.array_equal(cols[seen, None, p] == cols[None, seen, p], same_bin)
        assert np.all((cols[seen, p] >= model.offsets_[p]) & (cols[seen, p] < model.offsets_[p + 1]))


def test_rows_in_bins_unseen_in_training_get_fewer_nonzeros():
    rng = np.random.default_rng(4)
    train = rng.random((100, 3))
    model = RandomBinning(n_grids=50, sigma=0.5, seed=0).fit(train)
    far = train[:1] + 1000.0  # beyond every training bin in every grid
    edge = np.array([[1.6, 0.5, 0.5]])  # outside the box along one feature: some grids only
    Z = model.transform(np.vstack([train[:5], far, edge]))
    nnz = Z.getnnz(axis=1)
    assert np.all(nnz[:5] == 50) and nnz[5] == 0 and 0 < nnz[6] < 50
    unseen = (naive_bins(model, edge)[0][None] != naive_bins(model, train)).any(axis=2).all(axis=0)
    assert nnz[6] == 50 - unseen.sum()


def test_same_seed_gives_the_same_features_and_another_seed_others():
    X = np.random.default_rng(5).normal(size=(80, 5))
    a = random_binning_features(X, n_grids=20, seed=7)
    b = random_binning_features(X, n_grids=20, seed=7)
    c = random_binning_features(X, n_grids=20, seed=8)
    assert (a != b).nnz == 0 and a.shape == b.shape
    assert a.shape != c.shape or (a != c).nnz > 0


def test_grids_are_a_prefix_of_larger_fits_and_scale_with_sigma():
    X = np.random.default_rng(6).normal(size=(40, 3))
    small = RandomBinning(n_grids=5, sigma=1.0, seed=3).fit(X)
    large = RandomBinning(n_grids=10, sigma=1.0, seed=3).fit(X)
    wide = RandomBinning(n_grids=5, sigma=2.0, seed=3).fit(X)
    assert np.array_equal(large.pitches_[:5], small.pitches_) and np.array_equal(large.shifts_[:5], small.shifts_)
    assert np.allclose(wide.pitches_, 2 * small.pitches_) and np.allclose(wide.shifts_, 2 * small.shifts_)
    assert np.all((small.shifts_ >= 0) & (small.shifts_ < small.pitches_))


def test_transform_of_the_fit_rows_equals_fit_transform_and_the_function():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(120, 4))
    fit = np.sort(rng.permutation(120)[:90])
    model = RandomBinning(n_grids=25, sigma="median", seed=1)
    Z_fit = model.fit_transform(X[fit])
    assert (model.transform(X[fit]) != Z_fit).nnz == 0
    Z_all = model.transform(X)
    for fit_rows in (fit, np.isin(np.arange(120), fit)):
        Z = random_binning_features(X, fit_rows, n_grids=25, sigma="median", seed=1)
        assert Z.shape == Z_all.shape and (Z != Z_all).nnz == 0
    assert (Z_all[fit] != Z_fit).nnz == 0 and np.all(Z_all.getnnz(axis=1) <= 25)


def test_sparse_and_float32_inputs_give_the_same_features_as_dense():
    X = np.random.default_rng(8).normal(size=(150, 6)).astype(np.float32)
    X[X < 0.2] = 0
    dense = random_binning_features(X, np.arange(100), n_grids=20, seed=0)
    for other in (sp.csr_matrix(X), sp.csc_matrix(X), X.astype(np.float64)):
        Z = random_binning_features(other, np.arange(100), n_grids=20, seed=0)
        assert Z.shape == dense.shape and (Z != dense).nnz == 0


def test_small_memory_budgets_give_the_same_features(monkeypatch):
    rng = np.random.default_rng(9)
    X = clustered(rng, 250, 30, spread=1.0)
    X[240:] += 2.0  # some rows outside the training box
    fit = np.arange(200)
    expected = random_binning_features(X, fit, n_grids=15, sigma=1.0, seed=4)
    monkeypatch.setattr(binning, "_ROWS", 7)
    monkeypatch.setattr(binning, "_CELLS", 400)
    monkeypatch.setattr(binning, "_KEYS", 700)
    model = RandomBinning(n_grids=15, sigma=1.0, seed=4)
    model._fit(X, fit)
    Z = model.transform(X)
    # Batches of 7 rows, several blocks of grids, fitted in several runs of at most 3 words.
    n_words = np.diff(model._grid_words)
    assert len(model._blocks) > 1 and n_words.max() > 1 and n_words.sum() > 3
    assert Z.shape == expected.shape and (Z != expected).nnz == 0


def test_transform_of_no_rows_is_an_empty_matrix():
    model = RandomBinning(n_grids=4, sigma=1.0).fit(np.eye(3))
    Z = model.transform(np.zeros((0, 3)))
    assert Z.shape == (0, model.n_features_out_) and Z.nnz == 0


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

GOOD = np.random.default_rng(10).normal(size=(10, 3))


@pytest.mark.parametrize(
    "X, match",
    [
        (np.array([[0.0, np.nan], [1.0, 2.0]]), "X contains NaN or infinite"),
        (np.array([[0.0, np.inf], [1.0, 2.0]]), "X contains NaN or infinite"),
        (sp.csr_matrix(np.array([[0.0, -np.inf], [1.0, 2.0]])), "X contains NaN or infinite"),
        (np.arange(5.0), r"X must be 2-D .* got shape \(5,\)"),
        (np.zeros((2, 2, 2)), r"X must be 2-D .* got shape \(2, 2, 2\)"),
        (np.array([["a", "b"]]), "X must be a real numeric matrix"),
        (np.zeros((0, 3)), r"X is empty \(shape \(0, 3\)\)"),
    ],
)
def test_bad_inputs_raise_naming_X(X, match):
    with pytest.raises(ValueError, match=match):
        RandomBinning(sigma=1.0).fit(X)
    with pytest.raises(ValueError, match=match):
        random_binning_features(X, sigma=1.0)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_grids": 0}, "n_grids=0"),
        ({"n_grids": 2.5}, "n_grids=2.5"),
        ({"sigma": 0.0}, "sigma=0.0"),
        ({"sigma": -1.0}, "sigma=-1.0"),
        ({"sigma": float("nan")}, "sigma=nan"),
        ({"sigma": "mean"}, "sigma='mean'"),
        ({"seed": -1}, "seed=-1"),
    ],
)
def test_bad_parameters_raise_naming_them(params, match):
    with pytest.raises(ValueError, match=match):
        RandomBinning(**params).fit(GOOD)
    with pytest.raises(ValueError, match=match):
        random_binning_features(GOOD, **params)


def test_transform_before_fit_or_with_other_columns_raises():
    with pytest.raises(ValueError, match="not fitted"):
        RandomBinning().transform(GOOD)
    model = RandomBinning(sigma=1.0).fit(GOOD)
    with pytest.raises(ValueError, match=r"X has 4 columns .* fitted on 3 \(n_features_in_\)"):
        model.transform(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="X contains NaN"):
        model.transform(np.full((1, 3), np.nan))


def test_median_heuristic_needs_two_distinct_rows():
    with pytest.raises(ValueError, match="sigma='median' needs at least 2 fitting rows"):
        RandomBinning().fit(np.ones((1, 3)))
    with pytest.raises(ValueError, match="sigma='median' gives 0"):
        RandomBinning().fit(np.ones((5, 3)))


def test_bad_fit_rows_raise_naming_fit_rows():
    with pytest.raises(ValueError, match="fit_rows"):
        random_binning_features(GOOD, [0, 10], sigma=1.0)
    with pytest.raises(ValueError, match="fit_rows"):
        random_binning_features(GOOD, np.ones(4, dtype=bool), sigma=1.0)


def test_sigma_too_small_for_the_spread_of_X_raises_naming_sigma():
    with pytest.raises(ValueError, match="sigma=1e-300 is too small"):
        RandomBinning(n_grids=2, sigma=1e-300).fit(np.array([[0.0], [1e10]]))
