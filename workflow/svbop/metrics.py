"""Evaluation of set-valued predictions: utility, recall, set size, top-1 accuracy, coverage.

Per-sample functions return arrays of shape (n,); :func:`mean_scores` returns the means the way
the paper's tables report them (percentages, mean set size).  The coverage metrics
(:func:`coverage`, :func:`size_stratified_coverage`, :func:`class_conditional_coverage`,
:func:`singleton_rate`, :func:`empty_rate`) are those of the conformal-prediction literature:
coverage is the paper's recall under its conformal name.
"""

from __future__ import annotations

import numpy as np

from ._arrays import as_host_array
from .sets import SetPredictions
from .utilities import Utility, utility

__all__ = ["check_labels", "set_utility", "recall", "set_sizes", "top1_accuracy", "mean_scores", "set_agreement",
           "coverage", "size_stratified_coverage", "class_conditional_coverage", "singleton_rate", "empty_rate",
           "COVERAGE_KEYS"]

#: The coverage keys of :func:`mean_scores` (percentages that are not utilities).
COVERAGE_KEYS = ("coverage_pct", "class_coverage_worst_pct", "ssc_worst_pct", "singleton_pct", "empty_pct")


def check_labels(y, shape: tuple[int, int] | None = None, name: str = "y") -> np.ndarray:
    """Validate integer class labels; ``shape`` is ``(n_samples, n_classes)`` to match.

    ``y`` may be a numpy array, a torch tensor (any device), a pandas Series, or anything else
    :func:`svbop._arrays.as_host_array` reads; integral floats are accepted.
    """
    arr = as_host_array(y, name, what="integer class indices")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of class indices, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must hold integer class indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if shape is not None:
        n, K = shape
        if arr.size != n:
            raise ValueError(f"{name} has {arr.size} labels but there are {n} samples")
        bad = np.flatnonzero((arr < 0) | (arr >= K))
        if bad.size:
            raise ValueError(f"{name}[{bad[0]}] = {arr[bad[0]]} is not a class index in 0..{K - 1}")
    return arr


def _as_sets(sets, n_classes: int | None = None) -> SetPredictions:
    if isinstance(sets, SetPredictions):
        return sets
    sets = list(sets)
    if n_classes is None:
        n_classes = 1 + max((int(np.max(s)) for s in sets if len(s)), default=0)
    return SetPredictions.from_sets(sets, n_classes)


def _sets_and_labels(sets, y) -> tuple[SetPredictions, np.ndarray]:
    """``sets`` as SetPredictions and ``y`` checked against them.

    Plain sequences of sets get ``K`` = 1 + the largest class in the sets or in ``y``, so that a
    label no set holds is a miss, not an error.
    """
    y = as_host_array(y, "y", what="integer class indices")  # once: a tensor on a GPU is copied to the host here
    if not isinstance(sets, SetPredictions):
        sets = list(sets)
        labels = check_labels(y)
        negative = np.flatnonzero(labels < 0)
        if negative.size:
            raise ValueError(f"y[{negative[0]}] = {labels[negative[0]]} is not a class index (negative)")
        largest = max((int(np.max(s)) for s in sets if len(s)), default=0)
        sets = _as_sets(sets, 1 + max(largest, int(labels.max(initial=0))))
    return sets, check_labels(y, (len(sets), sets.n_classes))


def set_utility(sets, y, u: Utility | str) -> np.ndarray:
    """Per-sample utility ``u(y_i, Y_i) = g(|Y_i|) [y_i in Y_i]`` (0 for an empty set)."""
    sets, y = _sets_and_labels(sets, y)
    g = utility(u).values(sets.n_classes)
    sizes = sets.sizes
    gs = np.where(sizes > 0, g[np.maximum(sizes, 1) - 1], 0.0)
    return np.where(sets.contains(y), gs, 0.0)


def recall(sets, y) -> np.ndarray:
    """Per-sample recall indicator ``[y_i in Y_i]``."""
    sets, y = _sets_and_labels(sets, y)
    return sets.contains(y)


def set_sizes(sets) -> np.ndarray:
    """Per-sample set size ``|Y_i|``."""
    return _as_sets(sets).sizes


def set_agreement(a, b) -> float:
    """Fraction of rows whose two sets hold the same classes (in any order).

    Parameters
    ----------
    a, b : SetPredictions or sequence of int arrays
        Sets for the same rows, e.g. SVBOP-HSG's and SVBOP-Full's under one utility.

    Returns
    -------
    float
        In [0, 1]; 1.0 for zero rows.

    Raises
    ------
    ValueError
        The two hold different numbers of rows, or are SetPredictions over different ``K``.
    """
    if isinstance(a, SetPredictions) and isinstance(b, SetPredictions) and a.n_classes != b.n_classes:
        raise ValueError(f"the two set predictions are over {a.n_classes} and {b.n_classes} classes")
    a, b = _as_sets(a), _as_sets(b)
    if len(a) != len(b):
        raise ValueError(f"the two set predictions have {len(a)} and {len(b)} rows")
    if len(a) == 0:
        return 1.0
    same_size = a.sizes == b.sizes
    # Sort each row's classes (rows as the primary key) and compare entry by entry, on the rows of
    # equal size only, so that the entries of a row line up in both.
    rows = np.flatnonzero(same_size)
    a, b = a.take(rows), b.take(rows)
    row_ids = a.row_ids
    sorted_a = a.indices[np.lexsort((a.indices, row_ids))]
    sorted_b = b.indices[np.lexsort((b.indices, row_ids))]
    mismatched = np.unique(row_ids[sorted_a != sorted_b])
    return float((rows.size - mismatched.size) / same_size.size)


def coverage(sets, y) -> float:
    """Share of rows whose set contains the true class (marginal coverage).

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays, n sets
    y : array of int, shape (n,)
        True classes.

    Returns
    -------
    float
        In [0, 1]; nan for zero rows.  The same number as ``recall(sets, y).mean()``.

    Raises
    ------
    ValueError
        ``y`` is not one class index per set.
    """
    hit = recall(sets, y)
    return float(hit.mean()) if hit.size else float("nan")


def _per_group_coverage(groups: np.ndarray, hit: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    counts = np.bincount(groups, minlength=n_groups)
    covered = np.bincount(groups[hit], minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = np.where(counts > 0, covered / np.maximum(counts, 1), np.nan)
    return cov, counts


def size_stratified_coverage(sets, y, bins=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coverage within strata of set size (the size-stratified coverage of Angelopoulos et al.).

    A set predictor may reach its marginal coverage by over-covering large sets and
    under-covering small ones; the coverage per size stratum shows it.

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays, n sets
    y : array of int, shape (n,)
        True classes.
    bins : None, int or sequence of float, optional
        None (default): one stratum per distinct set size observed.  Otherwise the strata of
        :func:`numpy.histogram` over the set sizes with these ``bins``: an int is that many
        equal-width strata between the smallest and largest size; a sequence is increasing edges
        ``e_0 < e_1 < ... < e_m``, stratum ``j`` holding sizes ``e_j <= s < e_{j+1}`` (closed on the
        left, open on the right) except the last, ``e_{m-1} <= s <= e_m`` (closed on both sides).
        Sizes outside ``[e_0, e_m]`` are in no stratum.

    Returns
    -------
    edges : ndarray
        With ``bins=None``, the distinct sizes, increasing (int64, shape (m,)); otherwise the
        stratum edges (float, shape (m + 1,)).
    cov : ndarray of float, shape (m,)
        Coverage within each stratum, nan where the stratum holds no row.
    counts : ndarray of int64, shape (m,)
        Rows per stratum.

    Raises
    ------
    ValueError
        ``y`` is not one class index per set, or ``bins`` is not a positive int or increasing
        finite edges.

    Examples
    --------
    >>> edges, cov, counts = size_stratified_coverage([[0], [1], [0, 1], [2, 0, 1]], [0, 0, 1, 2])
    >>> edges.tolist(), cov.tolist(), counts.tolist()
    ([1, 2, 3], [0.5, 1.0, 1.0], [2, 1, 1])
    """
    sets, y = _sets_and_labels(sets, y)
    return _size_strata(sets.sizes, sets.contains(y), bins)


def _size_strata(sizes: np.ndarray, hit: np.ndarray, bins) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if bins is None:
        edges, stratum = np.unique(sizes, return_inverse=True)
        cov, counts = _per_group_coverage(stratum.reshape(-1), hit, edges.size)
        return edges.astype(np.int64), cov, counts.astype(np.int64)
    if isinstance(bins, (bool, np.bool_)) or not (
        isinstance(bins, (int, np.integer)) or np.ndim(bins) == 1
    ):
        raise ValueError(f"bins must be None, a positive int or a 1-D sequence of edges, got {bins!r}")
    if isinstance(bins, (int, np.integer)):
        if bins < 1:
            raise ValueError(f"bins must be a positive number of strata, got {bins}")
    else:
        try:
            edges = np.asarray(bins, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"bins must be numbers, got {bins!r}") from None
        if edges.size < 2 or not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
            raise ValueError(f"bins must be at least two finite, strictly increasing edges, got {edges.tolist()}")
        bins = edges
    counts, edges = np.histogram(sizes, bins=bins)
    covered, _ = np.histogram(sizes[hit], bins=edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = np.where(counts > 0, covered / np.maximum(counts, 1), np.nan)
    return edges, cov, counts.astype(np.int64)


def class_conditional_coverage(sets, y, n_classes: int | None = None) -> tuple[np.ndarray, float]:
    """Coverage within each true class, and the worst class's.

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays, n sets
    y : array of int, shape (n,)
        True classes.
    n_classes : int, optional
        Length of the result; default the sets' ``n_classes`` (for a plain sequence of sets,
        1 + the largest class in the sets or in ``y``).

    Returns
    -------
    cov : ndarray of float, shape (n_classes,)
        ``cov[c]`` = share of the rows of true class ``c`` whose set contains ``c``; nan for a
        class absent from ``y``.
    worst : float
        The smallest ``cov[c]`` over the classes present in ``y``; nan for zero rows.

    Raises
    ------
    ValueError
        ``y`` is not one class index per set, or a label is ``>= n_classes``.
    """
    sets, y = _sets_and_labels(sets, y)
    if n_classes is None:
        n_classes = sets.n_classes
    elif isinstance(n_classes, (bool, np.bool_)) or not isinstance(n_classes, (int, np.integer)) or n_classes < 1:
        raise ValueError(f"n_classes must be a positive int, got {n_classes!r}")
    else:
        y = check_labels(y, (len(sets), int(n_classes)))
    return _class_strata(y, sets.contains(y), int(n_classes))


def _class_strata(y: np.ndarray, hit: np.ndarray, n_classes: int) -> tuple[np.ndarray, float]:
    cov, counts = _per_group_coverage(y, hit, n_classes)
    worst = float(np.min(cov[counts > 0])) if y.size else float("nan")
    return cov, worst


def singleton_rate(sets) -> float:
    """Share of rows whose set holds exactly one class (nan for zero rows)."""
    sizes = set_sizes(sets)
    return float(np.mean(sizes == 1)) if sizes.size else float("nan")


def empty_rate(sets) -> float:
    """Share of rows whose set is empty (nan for zero rows)."""
    sizes = set_sizes(sets)
    return float(np.mean(sizes == 0)) if sizes.size else float("nan")


def top1_accuracy(P, y) -> float:
    """Fraction of rows whose most probable class (lowest index among ties) is ``y``."""
    P = as_host_array(P, "P")
    if P.ndim != 2:
        raise ValueError(f"P must be 2-D (n_samples, n_classes), got shape {P.shape}")
    y = check_labels(y, P.shape)
    return float(np.mean(P.argmax(axis=1) == y))


def mean_scores(sets, y, utilities=(), P=None, *, ssc_min_count: int = 1) -> dict[str, float]:
    """Means as in the paper's tables, and the coverage metrics beside them.

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays
    y : array of int, shape (n,)
    utilities : iterable of Utility or str
        Each adds ``"<label>_pct"``: mean utility in percent (labels as in the paper's CSVs,
        e.g. ``fbeta_1``, ``credal_2.2_1.2``).
    P : array, optional
        Probabilities, for ``top1_pct``; without it top-1 is the first class of each set.
    ssc_min_count : int, default 1
        ``ssc_worst_pct`` looks only at set sizes held by at least this many rows (a size seen
        once has coverage 0 or 100 %, which says little about the predictor).

    Returns
    -------
    dict
        ``n``; ``recall_pct``, ``mean_size``, ``top1_pct`` (the paper's); one ``<label>_pct``
        per utility; and in percent: ``coverage_pct`` (:func:`coverage`, equal to
        ``recall_pct``), ``class_coverage_worst_pct`` (the worst class of
        :func:`class_conditional_coverage` over the sets' ``n_classes``), ``ssc_worst_pct``
        (the smallest coverage over the distinct set sizes held by at least ``ssc_min_count``
        rows, :func:`size_stratified_coverage`; nan when no size is), ``singleton_pct``
        (:func:`singleton_rate`) and ``empty_pct`` (:func:`empty_rate`).  Every share is nan for
        zero rows.

    Raises
    ------
    ValueError
        ``y`` is not one class index per set, or ``ssc_min_count`` is not a positive int.
    """
    if isinstance(ssc_min_count, (bool, np.bool_)) or not isinstance(ssc_min_count, (int, np.integer)) \
            or ssc_min_count < 1:
        raise ValueError(f"ssc_min_count must be a positive int, got {ssc_min_count!r}")
    sets, y = _sets_and_labels(sets, y)
    n = len(sets)
    hit = sets.contains(y)
    sizes = sets.sizes
    out: dict[str, float] = {"n": float(n)}
    out["recall_pct"] = 100.0 * float(hit.mean()) if n else float("nan")
    out["mean_size"] = float(sizes.mean()) if n else float("nan")
    if P is not None:
        out["top1_pct"] = 100.0 * top1_accuracy(P, y)
    else:
        first = np.full(n, -1)  # an empty set has no top-1 class
        nonempty = sizes > 0
        first[nonempty] = sets.indices[sets.indptr[:-1][nonempty]]
        out["top1_pct"] = 100.0 * float(np.mean(first == y)) if n else float("nan")
    for spec in utilities:
        u = utility(spec)
        out[f"{u.label}_pct"] = 100.0 * float(set_utility(sets, y, u).mean()) if n else float("nan")
    out["coverage_pct"] = out["recall_pct"]
    out["class_coverage_worst_pct"] = 100.0 * _class_strata(y, hit, sets.n_classes)[1]
    _, ssc, counts = _size_strata(sizes, hit, None)
    enough = counts >= ssc_min_count
    out["ssc_worst_pct"] = 100.0 * float(ssc[enough].min()) if enough.any() else float("nan")
    out["singleton_pct"] = 100.0 * float(np.mean(sizes == 1)) if n else float("nan")
    out["empty_pct"] = 100.0 * float(np.mean(sizes == 0)) if n else float("nan")
    return out
