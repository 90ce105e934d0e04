"""Random binning features of the Laplacian kernel, fitted on the training rows only.

The paper's ALOI.BIN data set is plain ALOI (108,000 images x 128 dense features) mapped
through the random binning features of Rahimi & Recht (2007, "Random features for large-scale
kernel machines", section 4) for the Laplacian kernel

    k(x, y) = exp(-||x - y||_1 / sigma).

**Recipe.**  ``P`` independent grids.  Grid ``p`` has, for every input feature ``d``, a pitch
``delta[p, d] ~ Gamma(shape=2, scale=sigma)`` (density ``delta / sigma**2 * exp(-delta / sigma)``)
and a shift ``u[p, d] ~ Uniform[0, delta[p, d])``.  The bin of ``x`` in grid ``p`` is the integer
vector ``floor((x - u[p]) / delta[p])``.  The feature map ``z(x)`` is, for every grid, the
one-hot indicator of ``x``'s bin scaled by ``1 / sqrt(P)``, concatenated over the grids, so
``z(x) . z(y)`` is the fraction of grids in which ``x`` and ``y`` share a bin.  Per feature the
probability of sharing a bin, averaged over the pitch, is ``exp(-|x_d - y_d| / sigma)``; the
features are independent, so the expectation of ``z(x) . z(y)`` is exactly ``k(x, y)`` and its
standard deviation ``sqrt(k (1 - k) / P)`` (a binomial proportion).

**Bins are numbered exactly** (no hashing, so no collisions).  The bin index
``floor((x_d - u) / delta)`` does not decrease with ``x_d``, so the bin indices of the training
rows along feature ``d`` span ``lo .. hi`` with ``lo`` and ``hi`` those of the smallest and
largest training value of ``d``.  A grid's bin vector is packed in mixed radix (radix
``hi - lo + 1`` per feature) into int64 words, a new word whenever the radix product would reach
``2**62`` -- one word per grid in practice -- and the words are folded into dense bin numbers by
sorted look-up tables (``np.unique`` when fitting, ``np.searchsorted`` when transforming).
Features with a single training bin index in a grid (most of them when ``sigma`` is large
against the spread of a feature) take no room and no work: they matter only for a row outside
the training rows' bounding box, which is checked exactly.  Grid ``p``'s columns are its
training bins in the order of its tables.

**Unseen bins.**  The columns are the bins that hold at least one training row.  A row whose bin
in grid ``p`` holds none (possible only for rows that are not training rows) has no non-zero in
grid ``p``'s columns: it contributes nothing there, exactly as it shares that grid's bin with no
training row.  Such rows have fewer than ``P`` non-zeros; training rows have exactly ``P``.

**Kernel width.**  ``sigma="median"`` sets ``sigma`` to the median L1 distance between pairs of
distinct fitting rows: all pairs when there are at most 10,000 of them (up to 141 rows), else
10,000 random pairs drawn with the seed (the sampling error of that median is around a percent
for smooth distance distributions, far below what matters for a kernel width).  It is the usual
median heuristic; the median pair then has kernel value ``exp(-1)``.

The output is a ``scipy.sparse.csr_matrix`` of **float32** with the rows in input order, sorted
column indices and at most ``P`` non-zeros per row, all equal to ``float32(1 / sqrt(P))``: the
dtype of the pipeline's other feature matrices, half the memory of float64, and a relative
rounding error (below 6e-8) far below the Monte Carlo error ``1 / sqrt(P)``.  With ``P`` a power
of 4 the value is exact and ``z(x) . z(x) == 1`` exactly.

* :class:`RandomBinning` -- the transformer (``fit``, ``transform``, ``fit_transform``).
* :func:`random_binning_features` -- fit on ``X[fit_rows]``, transform all rows.
"""

from __future__ import annotations

import logging
import numbers

import numpy as np
import scipy.sparse as sp

from ..logs import progress
from .tfidf import check_fit_rows

__all__ = ["RandomBinning", "random_binning_features"]

logger = logging.getLogger(__name__)

#: Pairs of fitting rows whose median L1 distance is ``sigma="median"``.
MEDIAN_PAIRS = 10_000

#: Rows per batch, and elements of the largest temporary float64 array of a batch.
_ROWS = 8192
_CELLS = 1 << 21
#: Largest number of int64 words of the fitting rows held at once while fitting.
_KEYS = 1 << 24
#: A word of packed bin indices stays below this (so its sum of code * stride never overflows).
_WORD = 1 << 62
#: Largest number of bin indices along one feature (float64 bin indices are exact below 2**53).
_MAX_RANGE = 1 << 52
#: Show a progress bar when a transform handles at least this many (row, grid) cells.
_PROGRESS_CELLS = 5_000_000


def _check_X(X, name: str = "X", min_rows: int = 1):
    """A finite numeric 2-D matrix: dense arrays as they are (no copy), sparse ones as CSR."""
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_rows, n_features), got shape {X.shape}")
        X = sp.csr_matrix(X)
        values = X.data
    else:
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_rows, n_features), got shape {X.shape}")
        values = X
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating) or values.dtype == bool):
        raise ValueError(f"{name} must be a real numeric matrix, got dtype {values.dtype}")
    if X.shape[1] == 0 or X.shape[0] < min_rows:
        raise ValueError(f"{name} is empty (shape {X.shape})")
    if values.size and not np.all(np.isfinite(values)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def _batch_rows(n_features: int) -> int:
    """Rows per batch: ``_ROWS``, fewer when a dense batch would exceed ``_CELLS`` values."""
    return max(1, min(_ROWS, _CELLS // (n_features + 1)))


def _batches(X, rows: np.ndarray | None, size: int):
    """``(positions, x)`` per batch of rows of ``X`` (all, or ``rows``): ``x`` dense float64 with
    one extra column of zeros (the dummy feature of every grid, see ``RandomBinning._fit``)."""
    n = X.shape[0] if rows is None else rows.size
    for start in range(0, n, size):
        stop = min(start + size, n)
        block = X[start:stop] if rows is None else X[rows[start:stop]]
        x = np.zeros((stop - start, X.shape[1] + 1))
        x[:, :-1] = block.toarray() if sp.issparse(block) else block
        yield slice(start, stop), x


def _median_l1(X, rows: np.ndarray | None, rng: np.random.Generator) -> tuple[float, int]:
    """Median L1 distance between pairs of distinct rows (all pairs, or ``MEDIAN_PAIRS`` random ones)."""
    n = X.shape[0] if rows is None else rows.size
    if n < 2:
        raise ValueError(f"sigma='median' needs at least 2 fitting rows, got {n}; pass a number for sigma")
    if n * (n - 1) // 2 <= MEDIAN_PAIRS:
        i, j = np.triu_indices(n, 1)
    else:
        i = rng.integers(0, n, size=MEDIAN_PAIRS)
        j = (i + rng.integers(1, n, size=MEDIAN_PAIRS)) % n  # uniform over the other rows
    if rows is not None:
        i, j = rows[i], rows[j]
    distances = np.empty(i.size)
    size = _batch_rows(X.shape[1])
    for start in range(0, i.size, size):
        a, b = i[start : start + size], j[start : start + size]
        if sp.issparse(X):
            diff = X[a].astype(np.float64) - X[b].astype(np.float64)
            distances[start : start + size] = np.asarray(abs(diff).sum(axis=1)).ravel()
        else:
            distances[start : start + size] = np.abs(X[a].astype(np.float64) - X[b]).sum(axis=1)
    return float(np.median(distances)), int(i.size)


def _fold_fit(words: np.ndarray) -> tuple[list, int]:
    """Dense bin numbers of the rows of ``words`` (n, W): the look-up tables and the number of bins.

    Word 0 is ranked with ``np.unique``; every further word is ranked too and combined with the
    running bin number (``id * n_w + rank_w < n**2``, no overflow), then re-ranked.  The tables
    are ``[u_0, (u_1, c_1), ...]``: the sorted distinct words and combined numbers (``c_w`` None
    when word ``w`` takes a single value).
    """
    u0, ids = np.unique(words[:, 0], return_inverse=True)
    tables: list = [u0]
    n_bins = u0.size
    for w in range(1, words.shape[1]):
        uw, rank = np.unique(words[:, w], return_inverse=True)
        if uw.size == 1:
            tables.append((uw, None))
            continue
        cw, ids = np.unique(ids.astype(np.int64) * uw.size + rank, return_inverse=True)
        tables.append((uw, cw))
        n_bins = cw.size
    return tables, int(n_bins)


def _lookup(table: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``values`` in the sorted ``table`` and whether each is there."""
    pos = np.minimum(np.searchsorted(table, values), table.size - 1)
    return pos, table[pos] == values


def _fold_transform(tables: list, words: np.ndarray, unseen: np.ndarray) -> np.ndarray:
    """Bin numbers of the rows of ``words`` (n, W) by the tables of :func:`_fold_fit`; -1 if unseen."""
    ids, found = _lookup(tables[0], words[:, 0])
    found &= ~unseen
    for w, (uw, cw) in enumerate(tables[1:], start=1):
        rank, ok = _lookup(uw, words[:, w])
        found &= ok
        if cw is not None:
            ids, ok = _lookup(cw, ids.astype(np.int64) * uw.size + rank)
            found &= ok
    return np.where(found, ids, -1)


def _contiguous(sizes: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Split ``range(len(sizes))`` into runs ``(g, h)`` with ``sizes[g:h].sum() <= budget`` (or one item)."""
    runs, g, total = [], 0, 0
    for h, size in enumerate(sizes.tolist()):
        if h > g and total + size > budget:
            runs.append((g, h))
            g, total = h, 0
        total += size
    runs.append((g, len(sizes)))
    return runs


class RandomBinning:
    """Random binning features of the Laplacian kernel ``exp(-||x - y||_1 / sigma)`` (Rahimi & Recht 2007).

    See the module docstring for the recipe, the exact bin numbering and unseen bins.

    Parameters
    ----------
    n_grids : int
        Number of random grids ``P`` (>= 1): the number of non-zeros of a training row; the
        kernel estimate has standard deviation ``sqrt(k (1 - k) / P)``.
    sigma : float or "median"
        Kernel width, in the units of the L1 distance between rows (> 0), or ``"median"``: the
        median L1 distance between pairs of fitting rows (see the module docstring).
    seed : int
        Seed (>= 0) of the grids and of the pairs of the median heuristic.  The pitches are
        ``sigma`` times standard Gamma(2) draws and the shifts uniform fractions of them, drawn
        grid after grid from separate streams: the same seed gives the same grids up to the
        scale ``sigma``, and the first ``P`` grids of a fit with more grids are those of a fit
        with ``P`` grids.

    Attributes
    ----------
    sigma_ : float
        The kernel width used.
    n_features_in_ : int
        Number of input features ``D``.
    n_features_out_ : int
        Number of output columns: the training bins summed over the grids.
    pitches_ : ndarray of shape (n_grids, n_features_in_), float64
        ``delta[p, d]``, in the units of ``X``.
    shifts_ : ndarray of shape (n_grids, n_features_in_), float64
        ``u[p, d]`` in ``[0, delta[p, d])``.
    n_bins_ : ndarray of shape (n_grids,), int64
        Training bins per grid.
    offsets_ : ndarray of shape (n_grids + 1,), int64
        Grid ``p``'s columns are ``offsets_[p] .. offsets_[p + 1] - 1``.

    Notes
    -----
    Parameters are checked by ``fit`` (scikit-learn's convention), not by the constructor.
    Time and memory: fitting reads the fitting rows twice (once more per 16M int64 words when
    the packed words of all grids and fitting rows exceed that) and transforming reads the rows
    once, a batch of at most 8,192 rows at a time (sparse rows densified per batch).  The work
    per row is ``O(D)`` plus ``O(1)`` per grid and feature with more than one training bin
    index, plus ``O(P)`` per feature on which the row lies outside the training range.  On a
    random dense 108,000 x 128 matrix with 100 grids, fitted on 80% of it: about 2.5 s, 0.35 GB.

    Examples
    --------
    >>> rb = RandomBinning(n_grids=256, sigma=1.0, seed=0).fit(X_train)   # doctest: +SKIP
    >>> Z_train, Z_test = rb.transform(X_train), rb.transform(X_test)      # doctest: +SKIP
    >>> (Z_test @ Z_train.T).toarray()  # about exp(-||x - y||_1 / 1.0)    # doctest: +SKIP
    """

    def __init__(self, n_grids: int = 100, sigma: float | str = "median", seed: int = 0) -> None:
        self.n_grids = n_grids
        self.sigma = sigma
        self.seed = seed

    def __repr__(self) -> str:
        return f"RandomBinning(n_grids={self.n_grids!r}, sigma={self.sigma!r}, seed={self.seed!r})"

    def _check_params(self) -> None:
        n_grids, sigma, seed = self.n_grids, self.sigma, self.seed
        if isinstance(n_grids, bool) or not isinstance(n_grids, numbers.Integral) or n_grids < 1:
            raise ValueError(f"n_grids must be a positive integer, got n_grids={n_grids!r}")
        if isinstance(sigma, str):
            if sigma != "median":
                raise ValueError(f"sigma must be a positive number or 'median', got sigma={sigma!r}")
        elif isinstance(sigma, bool) or not isinstance(sigma, numbers.Real) or not 0 < sigma < np.inf:
            raise ValueError(f"sigma must be a positive finite number or 'median', got sigma={sigma!r}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got seed={seed!r}")

    def fit(self, X) -> RandomBinning:
        """Draw the grids and number the training bins of every grid from the rows of ``X``.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_rows, n_features)
            Finite numeric training rows.

        Returns
        -------
        RandomBinning
            ``self``, fitted.

        Raises
        ------
        ValueError
            For bad parameters (naming ``n_grids``, ``sigma`` or ``seed``); an ``X`` that is not
            a finite, numeric, non-empty 2-D matrix; ``sigma="median"`` with fewer than two rows
            or a median distance of 0; a ``sigma`` so small against the spread of ``X`` that a
            grid has more than ``2**52`` bins along a feature.
        """
        self._check_params()
        return self._fit(_check_X(X), None)

    def _fit(self, X, rows: np.ndarray | None) -> RandomBinning:
        """Fit on the rows ``rows`` (all when None) of the validated ``X``."""
        n = X.shape[0] if rows is None else rows.size
        D, P = X.shape[1], int(self.n_grids)
        size = _batch_rows(D)
        gamma, uniform, pairs = (np.random.default_rng(s) for s in np.random.SeedSequence(int(self.seed)).spawn(3))
        if isinstance(self.sigma, str):
            sigma, n_pairs = _median_l1(X, rows, pairs)
            if not sigma > 0:
                raise ValueError(
                    f"sigma='median' gives 0: at least half of {n_pairs} pairs of fitting rows are "
                    "identical; pass a number for sigma"
                )
            how = f"median L1 distance of {n_pairs} pairs"
        else:
            sigma, how = float(self.sigma), "given"
        pitches = sigma * gamma.standard_gamma(2.0, size=(P, D))
        shifts = uniform.random((P, D)) * pitches

        # Bin index ranges lo .. hi per grid and feature, from the training bounding box (the
        # bin index is monotone in the value, and float subtraction/division/floor keep that).
        xmin, xmax = np.full(D, np.inf), np.full(D, -np.inf)
        for _, x in _batches(X, rows, size):
            np.minimum(xmin, x[:, :D].min(axis=0), out=xmin)
            np.maximum(xmax, x[:, :D].max(axis=0), out=xmax)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # a tiny sigma, reported below
            lo = np.floor((xmin - shifts) / pitches)
            hi = np.floor((xmax - shifts) / pitches)
            spread = np.nan_to_num(hi - lo + 1, nan=np.inf, posinf=np.inf)
        if spread.max() > _MAX_RANGE:
            p, d = np.unravel_index(int(np.argmax(spread)), spread.shape)
            raise ValueError(
                f"sigma={sigma!r} is too small for the spread of X: grid {p} has {spread[p, d]:.3g} bins "
                f"along feature {d} (at most 2**52 are supported)"
            )

        # The columns a grid computes: a dummy feature D (always 0, in the zero column that
        # _batches appends, so that every grid has one) and its features with spread > 1.
        # Mixed-radix packing over them in order, a new word when the product would reach 2**62.
        col_grid, j = np.nonzero(np.column_stack([np.ones(P, dtype=bool), spread > 1]))  # grid by grid
        dummy = j == 0
        col_dim = np.where(dummy, D, j - 1)
        safe = np.where(dummy, 0, col_dim)
        col_shift = np.where(dummy, 0.0, shifts[col_grid, safe])
        col_pitch = np.where(dummy, 1.0, pitches[col_grid, safe])
        col_lo = np.where(dummy, 0.0, lo[col_grid, safe])
        col_hi = np.where(dummy, 0.0, hi[col_grid, safe])
        radix = (col_hi - col_lo + 1).astype(np.int64).tolist()
        col_stride = np.zeros(len(radix), dtype=np.int64)
        word_start, product = [], 1
        for c, r in enumerate(radix):
            if dummy[c] or product * r >= _WORD:
                word_start.append(c)
                product = 1
            col_stride[c] = product
            product *= r
        word_start = np.asarray(word_start, dtype=np.int64)
        grid_cols = np.searchsorted(col_grid, np.arange(P + 1))
        grid_words = np.searchsorted(word_start, grid_cols)
        self.sigma_ = sigma
        self.n_features_in_ = D
        self.pitches_, self.shifts_ = pitches, shifts
        self._xmin, self._xmax, self._lo, self._hi = xmin, xmax, lo, hi
        self._cols = (col_dim, col_shift, col_pitch, col_lo, col_hi, col_stride)
        self._word_start, self._grid_cols, self._grid_words = word_start, grid_cols, grid_words
        # Runs of grids whose columns make a batch of at most _CELLS values.
        self._blocks = _contiguous(np.diff(grid_cols), max(1, _CELLS // size))

        # The words of the fitting rows (for runs of blocks holding at most _KEYS of them),
        # folded into bin numbers per grid.
        n_words = np.diff(grid_words)
        block_words = np.array([n_words[g:h].sum() for g, h in self._blocks])
        tables: list = [None] * P
        n_bins = np.zeros(P, dtype=np.int64)
        for b0, b1 in _contiguous(block_words, max(1, _KEYS // n)):
            blocks = self._blocks[b0:b1]
            g0, g1 = blocks[0][0], blocks[-1][1]
            w0 = grid_words[g0]
            words = np.empty((n, grid_words[g1] - w0), dtype=np.int64)
            for pos, x in _batches(X, rows, size):
                for g, h in blocks:
                    words[pos, grid_words[g] - w0 : grid_words[h] - w0] = self._words(x, g, h)
            for p in range(g0, g1):
                tables[p], n_bins[p] = _fold_fit(words[:, grid_words[p] - w0 : grid_words[p + 1] - w0])
        self._tables = tables
        self.n_bins_ = n_bins
        self.offsets_ = np.concatenate([[0], np.cumsum(n_bins)]).astype(np.int64)
        self.n_features_out_ = int(self.offsets_[-1])
        logger.info(
            "random binning: sigma=%.6g (%s), %d grids over %d features fitted on %d rows: %d bins "
            "(per grid min %d, median %g, max %d); %.1f features per grid with more than one bin index; "
            "%d grids need more than one int64 word",
            sigma, how, P, D, n, self.n_features_out_, n_bins.min(), np.median(n_bins), n_bins.max(),
            (col_dim.size - P) / P, int(np.sum(n_words > 1)),
        )
        return self

    def _words(self, x: np.ndarray, g: int, h: int) -> np.ndarray:
        """Packed bin words (rows, words of grids ``g .. h - 1``) of the batch ``x`` (with its zero column).

        Bin indices outside the training range are clipped into it: such rows are flagged by
        :meth:`_outside`, not here.
        """
        col_dim, col_shift, col_pitch, col_lo, col_hi, col_stride = self._cols
        c = slice(self._grid_cols[g], self._grid_cols[h])
        t = np.floor((x[:, col_dim[c]] - col_shift[c]) / col_pitch[c])
        np.clip(t, col_lo[c], col_hi[c], out=t)
        t -= col_lo[c]
        codes = t.astype(np.int64)
        codes *= col_stride[c]
        starts = self._word_start[self._grid_words[g] : self._grid_words[h]] - self._grid_cols[g]
        return np.add.reduceat(codes, starts, axis=1)

    def _outside(self, x: np.ndarray) -> np.ndarray:
        """(rows, grids) bool: the row's bin index along some feature is outside the training range."""
        D, P = self.n_features_in_, self.pitches_.shape[0]
        x = x[:, :D]
        out = np.zeros((x.shape[0], P), dtype=bool)
        beyond = (x < self._xmin) | (x > self._xmax)  # inside the box is inside every range
        rows = np.flatnonzero(beyond.any(axis=1))
        if rows.size == 0:
            return out
        dims = np.flatnonzero(beyond[rows].any(axis=0))
        xr = x[np.ix_(rows, dims)][:, None, :]
        step = max(1, _CELLS // (rows.size * dims.size))
        for g in range(0, P, step):
            h = min(g + step, P)
            t = np.floor((xr - self.shifts_[g:h, dims]) / self.pitches_[g:h, dims])
            out[rows, g:h] = ((t < self._lo[g:h, dims]) | (t > self._hi[g:h, dims])).any(axis=2)
        return out

    def transform(self, X) -> sp.csr_matrix:
        """The random binning features ``z(x)`` of the rows of ``X``.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_rows, n_features_in_)
            Finite numeric rows.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (n_rows, n_features_out_), float32
            Rows in input order; per grid one non-zero ``1 / sqrt(n_grids)`` in the column of
            the row's bin, none when that bin holds no training row.  Sorted column indices.

        Raises
        ------
        ValueError
            If the transformer is not fitted, or ``X`` is not a finite numeric 2-D matrix with
            ``n_features_in_`` columns.
        """
        if not hasattr(self, "_tables"):
            raise ValueError(f"{self!r} is not fitted: call fit(X) before transform(X)")
        return self._transform(_check_X(X, min_rows=0))

    def _transform(self, X) -> sp.csr_matrix:
        n, D = X.shape
        P = self.pitches_.shape[0]
        if D != self.n_features_in_:
            raise ValueError(f"X has {D} columns but RandomBinning was fitted on {self.n_features_in_} (n_features_in_)")
        small = max(self.n_features_out_, n * P) < np.iinfo(np.int32).max  # columns and non-zeros
        index_dtype = np.int32 if small else np.int64
        cols = np.empty((n, P), dtype=index_dtype)
        gw = self._grid_words
        size = _batch_rows(D)
        batches = _batches(X, None, size)
        if n * P >= _PROGRESS_CELLS:
            batches = progress(batches, desc="random binning", total=-(-n // size), logger=logger)
        for pos, x in batches:
            outside = self._outside(x)
            for g, h in self._blocks:
                words = self._words(x, g, h)
                for p in range(g, h):
                    ids = _fold_transform(self._tables[p], words[:, gw[p] - gw[g] : gw[p + 1] - gw[g]], outside[:, p])
                    cols[pos, p] = np.where(ids >= 0, ids + self.offsets_[p], -1)
        seen = cols >= 0
        indptr = np.zeros(n + 1, dtype=index_dtype)
        np.cumsum(seen.sum(axis=1), out=indptr[1:])
        indices = cols[seen]  # row-major: grid after grid within a row, so sorted
        data = np.full(indices.size, 1.0 / np.sqrt(P), dtype=np.float32)
        out = sp.csr_matrix((data, indices, indptr), shape=(n, self.n_features_out_))
        out.has_sorted_indices = True
        logger.info(
            "random binning: %d rows -> %d columns, %d non-zeros (%.2f per row); %d rows fall in a bin "
            "unseen in training in at least one grid",
            n, self.n_features_out_, out.nnz, out.nnz / max(n, 1), int(np.sum(np.diff(indptr) < P)),
        )
        return out

    def fit_transform(self, X) -> sp.csr_matrix:
        """``fit(X).transform(X)``: every row has exactly ``n_grids`` non-zeros."""
        self._check_params()
        X = _check_X(X)
        return self._fit(X, None)._transform(X)


def random_binning_features(
    X,
    fit_rows=None,
    *,
    n_grids: int = 100,
    sigma: float | str = "median",
    seed: int = 0,
) -> sp.csr_matrix:
    """Random binning features of the Laplacian kernel of all rows, fitted on ``X[fit_rows]``.

    A :class:`RandomBinning` is fitted on the training rows (their bins are the columns, and the
    median heuristic for ``sigma`` uses their pairs) and applied to every row.  This is how
    ALOI.BIN is made from ALOI.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_rows, n_features)
        Finite numeric rows.
    fit_rows : array-like of int or bool, optional
        The training rows (indices or a boolean mask of length ``n_rows``); default all.
    n_grids, sigma, seed
        As for :class:`RandomBinning`.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_rows, n_bins), float32
        Rows in input order; ``n_grids`` non-zeros per training row, at most that many elsewhere.

    Raises
    ------
    ValueError
        As :meth:`RandomBinning.fit`, and for bad ``fit_rows``.
    """
    model = RandomBinning(n_grids=n_grids, sigma=sigma, seed=seed)
    model._check_params()
    X = _check_X(X)
    rows = check_fit_rows(fit_rows, X.shape[0])
    return model._fit(X, rows)._transform(X)
