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
from ._row_checks import check_labels  # noqa: F401  (public here: svbop.metrics.check_labels)
from .sets import SetPredictions
from .utilities import Utility, utility

__all__ = ["check_labels", "set_utility", "recall", "set_sizes", "top1_accuracy", "mean_scores", "set_agreement",
           "coverage", "size_stratified_coverage", "size_strata", "size_stratified_coverage_violation", "SSCV_STRATA",
           "class_conditional_coverage", "singleton_rate", "empty_rate",
           "COVERAGE_KEYS", "EXTRA_COVERAGE_KEYS", "check_groups", "group_coverage", "covgap",
           "worst_slab_coverage", "wsc", "sscv", "running_coverage"]

#: The coverage keys of :func:`mean_scores` (percentages that are not utilities).
COVERAGE_KEYS = ("coverage_pct", "class_coverage_worst_pct", "ssc_worst_pct", "singleton_pct", "empty_pct")

#: Coverage keys :func:`mean_scores` adds only when given what they need (``epsilon``, ``groups``,
#: ``X``): percentages that are not utilities either.
EXTRA_COVERAGE_KEYS = ("covgap_pct", "sscv_pct", "group_coverage_worst_pct", "worst_slab_coverage_pct")


def check_groups(groups, n: int, name: str = "groups", rows_of: str = "sets") -> np.ndarray:
    """``groups`` as a 1-D numpy array of ``n`` comparable, hashable labels, or a one-line ValueError.

    Integers, booleans, strings (also in an object array), or finite floats; a list, a pandas
    Series or a tensor.  ``rows_of`` names what has ``n`` rows, for the message.
    """
    if hasattr(groups, "__dlpack__") and not isinstance(groups, np.ndarray):
        groups = as_host_array(groups, name)
    try:
        g = np.asarray(groups)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name} must be a 1-D array of group labels: {str(e).splitlines()[0]}") from None
    if g.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of group labels (one per row), got shape {g.shape}")
    if g.size != n:
        raise ValueError(f"{name} has {g.size} entries but {rows_of} has {n} rows")
    if g.dtype.kind not in "biufUSO":
        raise ValueError(f"{name} must hold integers, strings or booleans, got dtype {g.dtype}")
    if g.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(g))
        if bad.size:
            raise ValueError(f"{name} has a missing or infinite value ({float(g[bad[0]])!r}) at row {bad[0]}")
    if g.dtype.kind == "O":
        for i, v in enumerate(g.tolist()):
            if not isinstance(v, (str, bytes, int, bool, np.integer, np.bool_)):
                raise ValueError(
                    f"{name} must hold integers, strings or booleans; row {i} holds {v!r} ({type(v).__name__})"
                )
        try:
            np.unique(g)
        except TypeError:
            raise ValueError(f"{name} mixes labels that cannot be compared (e.g. strings and integers)") from None
    return g


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


def size_stratified_coverage(sets, y, epsilon: float | None = None, *, stratified_size=None, bins=None,
                             min_count: int = 1) -> float:
    """The size-stratified coverage of Angelopoulos, Bates, Malik and Jordan (ICLR 2021) as one number.

    With ``epsilon`` (the target ``1 - epsilon``): its violation, SSCV, the largest
    ``|coverage - (1 - epsilon)|`` over the set-size strata ``stratified_size`` (TorchCP 1.2.1's
    ``SSCV`` and its default strata :data:`SSCV_STRATA`; the same as
    :func:`size_stratified_coverage_violation`).  Without: the worst coverage over the strata of
    :func:`size_strata` (``bins``) holding at least ``min_count`` rows (nan when none does).
    :func:`size_strata` gives every stratum's coverage and row count.

    Examples
    --------
    >>> sets, y = [[0], [1], [0, 1], [2, 0, 1]], [0, 0, 1, 2]
    >>> size_stratified_coverage(sets, y)  # size 1: 1 of 2 rows covered
    0.5
    >>> round(size_stratified_coverage(sets, y, 0.1), 6)  # sizes 0-1: 0.5, 2-3: 1.0 -> |0.5 - 0.9|
    0.4
    """
    if epsilon is not None:
        if bins is not None or min_count != 1:
            raise ValueError("bins and min_count are for the worst stratum's coverage (no epsilon); with epsilon the"
                             " strata are stratified_size's")
        return size_stratified_coverage_violation(
            sets, y, epsilon, stratified_size=SSCV_STRATA if stratified_size is None else stratified_size)
    if stratified_size is not None:
        raise ValueError("stratified_size is for the violation (SSCV): give epsilon too, or bins for the strata of the"
                         " worst coverage")
    if isinstance(min_count, (bool, np.bool_)) or not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise ValueError(f"min_count must be a positive int, got {min_count!r}")
    _, cov, counts = size_strata(sets, y, bins)
    enough = counts >= min_count
    return float(cov[enough].min()) if enough.any() else float("nan")


def size_strata(sets, y, bins=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coverage within strata of set size (the strata of the size-stratified coverage of Angelopoulos et al.).

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
    >>> edges, cov, counts = size_strata([[0], [1], [0, 1], [2, 0, 1]], [0, 0, 1, 2])
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
    from ._blocks import row_blocks

    hit = np.empty(P.shape[0], dtype=bool)
    for lo, hi, block in row_blocks(P):  # by blocks: a mapped P holds one block resident
        hit[lo:hi] = block.argmax(axis=1) == y[lo:hi]
    return float(np.mean(hit))


def mean_scores(
    sets, y, utilities=(), P=None, *, ssc_min_count: int = 1, epsilon: float | None = None, groups=None, X=None,
    slab_delta: float = 0.1,
) -> dict[str, float]:
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
    epsilon : float, optional
        The target's significance level: adds ``covgap_pct`` (:func:`covgap`, in percent) and
        ``sscv_pct`` (:func:`size_stratified_coverage_violation`, TorchCP's strata, in percent).
    groups : array-like of shape (n,), optional
        Adds ``group_coverage_worst_pct``: the smallest coverage of a group
        (:func:`group_coverage`).
    X : array-like of shape (n, d), optional
        Adds ``worst_slab_coverage_pct`` (:func:`worst_slab_coverage` with ``delta=slab_delta``
        and its defaults: TorchCP's 1,000 seeded directions and held-out split).

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
        zero rows.  Then, only when given what they need, those of :data:`EXTRA_COVERAGE_KEYS`
        (``covgap_pct``, ``sscv_pct``, ``group_coverage_worst_pct``, ``worst_slab_coverage_pct``).

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
    if epsilon is not None:
        cov, _ = _class_strata(y, hit, sets.n_classes)
        present = ~np.isnan(cov)
        gap = np.mean(np.abs(cov[present] - (1 - _check_epsilon(epsilon)))) if present.any() else np.nan
        out["covgap_pct"] = 100.0 * float(gap)
        out["sscv_pct"] = 100.0 * size_stratified_coverage_violation(sets, y, epsilon)
    if groups is not None:
        g = check_groups(groups, n, "groups", "sets")
        _, inverse = np.unique(g, return_inverse=True)
        cov, counts = _per_group_coverage(inverse.reshape(-1), hit, int(inverse.max(initial=-1)) + 1)
        out["group_coverage_worst_pct"] = 100.0 * float(cov[counts > 0].min()) if n else float("nan")
    if X is not None:
        out["worst_slab_coverage_pct"] = 100.0 * worst_slab_coverage(sets, y, X, delta=slab_delta)
    return out


# --- coverage per group, class-coverage gap, worst-slab coverage, running coverage (issue 38) ------


def group_coverage(sets, y, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coverage within each group of rows (the coverage a Mondrian conformal predictor guarantees).

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays, n sets
    y : array of int, shape (n,)
        True classes.
    groups : array-like of shape (n,)
        Group of every row: integers, booleans or strings (:func:`check_groups`).

    Returns
    -------
    labels : ndarray, shape (m,)
        The distinct groups, sorted.
    cov : ndarray of float, shape (m,)
        Share of each group's rows whose set contains the true class.
    counts : ndarray of int64, shape (m,)
        Rows per group.

    Examples
    --------
    >>> labels, cov, counts = group_coverage([[0], [1], [0, 1], [2]], [0, 0, 1, 1], ["a", "a", "b", "b"])
    >>> labels.tolist(), cov.tolist(), counts.tolist()
    (['a', 'b'], [0.5, 0.5], [2, 2])
    """
    sets, y = _sets_and_labels(sets, y)
    g = check_groups(groups, len(sets), "groups", "sets")
    labels, inverse = np.unique(g, return_inverse=True)
    cov, counts = _per_group_coverage(inverse.reshape(-1), sets.contains(y), labels.size)
    return labels, cov, counts.astype(np.int64)


def _check_epsilon(epsilon) -> float:
    if isinstance(epsilon, (bool, np.bool_)) or not isinstance(epsilon, (int, float, np.integer, np.floating)) \
            or not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be a number in (0, 1), got {epsilon!r}")
    return float(epsilon)


def covgap(sets, y, epsilon: float, n_classes: int | None = None) -> float:
    """Mean absolute gap between each class's coverage and ``1 - epsilon`` (CovGap).

    ``CovGap = (1/|C|) sum_{c in C} |cov_c - (1 - epsilon)|`` over the classes ``C`` present in
    ``y``, with ``cov_c`` the coverage of the rows of true class ``c``
    (:func:`class_conditional_coverage`): Ding, Angelopoulos, Bates, Jordan and Tibshirani,
    "Class-conditional conformal prediction with many classes", NeurIPS 2023, Eq. (5), which
    reports it in percent (``100 *`` this number; ``mean_scores(..., epsilon=)`` gives
    ``covgap_pct``).  0 when every class is covered exactly at the target; over-coverage counts
    as much as under-coverage.

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays, n sets
    y : array of int, shape (n,)
    epsilon : float
        Significance level in (0, 1) of the target ``1 - epsilon``.
    n_classes : int, optional
        As in :func:`class_conditional_coverage` (classes absent from ``y`` are left out).

    Returns
    -------
    float
        In [0, 1]; nan for zero rows.

    Examples
    --------
    >>> covgap([[0], [0], [1], [2]], [0, 0, 1, 1], 0.1)  # class 0 covered 1.0, class 1 0.5
    0.25
    """
    eps = _check_epsilon(epsilon)
    cov, _ = class_conditional_coverage(sets, y, n_classes)
    present = ~np.isnan(cov)
    return float(np.mean(np.abs(cov[present] - (1 - eps)))) if present.any() else float("nan")


#: TorchCP 1.2.1's size strata of :func:`size_stratified_coverage_violation` (``SSCV``'s default).
SSCV_STRATA = ((0, 1), (2, 3), (4, 10), (11, 100), (101, 1000))


def _hits_and_sizes(sets, y) -> tuple[np.ndarray, np.ndarray]:
    """Each row's coverage (the label in its set) and set size, from sets (SetPredictions, a
    sequence of class arrays) or an ``(n, K)`` boolean mask (TorchCP's prediction sets)."""
    if not isinstance(sets, SetPredictions) and (hasattr(sets, "shape") or hasattr(sets, "__dlpack__")):
        mask = as_host_array(sets, "sets")
        if mask.ndim == 2 and mask.dtype == np.bool_:
            y = check_labels(as_host_array(y, "y", what="integer class indices"), mask.shape)
            return mask[np.arange(y.size), y], mask.sum(axis=1).astype(np.int64)
    sets, y = _sets_and_labels(sets, y)
    return sets.contains(y), sets.sizes


def size_stratified_coverage_violation(sets, y, epsilon: float, *, stratified_size=SSCV_STRATA) -> float:
    """Size-stratified coverage violation (SSCV; Angelopoulos, Bates, Malik and Jordan, ICLR 2021).

    ``SSCV = max_j |cov_j - (1 - epsilon)|`` over the strata of set size ``[lo_j, hi_j]`` that
    hold at least one row, ``cov_j`` the coverage of the rows whose set size is in the stratum
    (both ends included).  TorchCP 1.2.1's ``SSCV`` with its default strata
    (:data:`SSCV_STRATA`: sizes 0-1, 2-3, 4-10, 11-100, 101-1000; a larger set is in none); a
    predictor with coverage ``1 - epsilon`` whatever the set size has SSCV near 0.  The coverage
    of each stratum is :func:`size_strata` with ``bins=None`` and these strata.

    Parameters
    ----------
    sets : SetPredictions, sequence of int arrays, or boolean array of shape (n, K)
    y : array of int, shape (n,)
    epsilon : float
        Significance level in (0, 1) of the target ``1 - epsilon`` (TorchCP's ``alpha``).
    stratified_size : sequence of (lo, hi) pairs of ints, default :data:`SSCV_STRATA`
        Non-overlapping, ``0 <= lo <= hi``.

    Returns
    -------
    float
        In [0, 1]; nan when no stratum holds a row (TorchCP returns -1 there).

    Examples
    --------
    >>> size_stratified_coverage_violation([[0], [1], [0, 1], [2, 0, 1]], [0, 0, 1, 2], 0.1)  # 0-1: 1/2
    0.4
    """
    eps = _check_epsilon(epsilon)
    try:
        strata = [(int(lo), int(hi)) for lo, hi in stratified_size]
        ok = bool(strata) and all(0 <= lo <= hi and lo == a and hi == b
                                  for (lo, hi), (a, b) in zip(strata, stratified_size))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"stratified_size must be a non-empty list of [lo, hi] integer pairs with 0 <= lo <= hi, got"
                         f" {stratified_size!r}")
    ordered = sorted(strata)
    if any(b[0] <= a[1] for a, b in zip(ordered, ordered[1:])):
        raise ValueError(f"stratified_size must not overlap, got {stratified_size!r}")
    hit, sizes = _hits_and_sizes(sets, y)
    worst = float("nan")
    for lo, hi in strata:
        inside = (sizes >= lo) & (sizes <= hi)
        if inside.any():
            v = abs(1 - eps - float(hit[inside].mean()))
            worst = v if np.isnan(worst) else max(worst, v)
    return worst


def worst_slab_coverage(sets, y, X, *, delta: float = 0.1, M: int = 1000, test_fraction: float = 0.75,
                        random_state: int | None = 2020) -> float:
    """Worst-slab coverage (WSC; Cauchois, Gupta and Duchi, JMLR 22, 2021; Romano, Sesia and
    Candès, NeurIPS 2020), TorchCP 1.2.1's ``WSC`` procedure and parameters, corrected.

    A slab is ``{x : a <= v'x <= b}``.  The rows are split by scikit-learn's
    ``train_test_split(..., test_size=test_fraction, random_state=random_state)``; ``M``
    directions ``v`` are drawn uniform on the unit sphere from
    ``numpy.random.default_rng(random_state)`` (TorchCP's ``sample_sphere``); on the first part,
    along every direction, the slab of at least a share ``delta`` of its rows with the lowest
    coverage is found (TorchCP's scan, its rounding of ``delta n`` and its tie rules, computed
    exactly in ``O(n)`` per step by :func:`svbop._slab.worst_window`), and the worst slab over the
    directions is kept; WSC is the coverage of the held-out rows in that slab.  So the slab is
    chosen on rows it is not reported on: a predictor with coverage ``1 - epsilon`` given ``x`` has
    WSC near ``1 - epsilon``, one that under-covers a region of the features shows it lower.

    **The correction.**  TorchCP 1.2.1 calls ``calWSC(X_train, covered_train, y_train, ...)``
    against its signature ``calWSC(X, y, covered, ...)``: the slab is chosen on the *labels*
    instead of the coverage indicators, so its slab is unrelated to coverage and its WSC is about
    the plain held-out coverage.  Here the slab is chosen on the coverage indicators, as the
    procedure intends; the split, the directions and the scan are TorchCP's, so TorchCP's
    ``calWSC(X_train, y_train, covered_train, ...)`` and ``wsc_vab`` on the same split give this
    number (checked in ``tests/test_conditional_metrics.py``).

    Parameters
    ----------
    sets : SetPredictions, sequence of int arrays, or boolean array of shape (n, K)
    y : array of int, shape (n,)
    X : array-like of shape (n, d)
        Features (or any representation of the rows, e.g. the probabilities).  TorchCP's order of
        the three, ``(features, prediction_sets, labels)`` with a boolean mask, is recognised by the
        shapes (the labels are the only 1-D one) and accepted too.
    delta : float, default 0.1
        Smallest share of the selection rows a slab holds, in (0, 1).
    M : int, default 1000
        Number of directions.
    test_fraction : float, default 0.75
        Share of the rows held out to evaluate the slab, in (0, 1).
    random_state : int or None, default 2020
        Seed of the split and of the directions (TorchCP's default).

    Returns
    -------
    float
        The held-out coverage in the worst slab, in [0, 1]; nan when no held-out row falls in it.
    """
    if _ndim(sets) == 2 and _ndim(y) == 2 and _ndim(X) == 1:  # TorchCP's order: (features, prediction_sets, labels)
        sets, y, X = y, X, sets
    hit, _ = _hits_and_sizes(sets, y)
    plan = _SlabPlan(X, hit.size, delta=delta, M=M, test_fraction=test_fraction, random_state=random_state)
    return plan.coverage(hit)


def _ndim(x):
    """The number of dimensions of an array-like, None for a ragged sequence (sets of several sizes)."""
    if hasattr(x, "ndim"):
        return x.ndim
    try:
        return np.ndim(x)
    except ValueError:
        return None


def _shuffle_split(n: int, test_fraction: float, random_state):
    """``(train, test)`` row indices as scikit-learn's ``train_test_split(np.arange(n), test_size=
    test_fraction, random_state=random_state)`` draws them (TorchCP's WSC split), without importing
    scikit-learn (not a dependency of svbop or of its ``report`` extra): ``ceil(test_fraction * n)``
    test rows first in one ``RandomState(random_state).permutation(n)`` (NumPy's global generator for
    ``None``), the rest for training."""
    n_test = int(np.ceil(test_fraction * n))
    n_train = n - n_test
    if n_train < 1:
        raise ValueError(f"test_fraction={test_fraction} leaves no row of {n} to choose the slab on")
    rng = np.random.mtrand._rand if random_state is None else np.random.RandomState(int(random_state))
    perm = rng.permutation(n)
    return perm[n_test:], perm[:n_test]


class _SlabPlan:
    """What :func:`worst_slab_coverage` computes once for given features, whatever the sets: the
    split, the directions and, per direction, the selection rows' projections in increasing order
    (kept when they fit in ``budget`` bytes, so that many set predictors on the same rows, as the
    report's methods, share them); :meth:`coverage` then costs ``O(n)`` per direction."""

    def __init__(self, X, n: int, *, delta=0.1, M=1000, test_fraction=0.75, random_state=2020,
                 budget: int = 256 << 20) -> None:
        X = as_host_array(X, "X")
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[0] != n:
            raise ValueError(f"X must have shape (n, d) with n = {n} rows (one per set), got {X.shape}")
        X = X.astype(np.float64, copy=False)
        if not np.all(np.isfinite(X)):
            raise ValueError("X holds NaN or infinite values")
        for name, value in (("delta", delta), ("test_fraction", test_fraction)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not 0 < value < 1:
                raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
        if isinstance(M, (bool, np.bool_)) or not isinstance(M, (int, np.integer)) or M < 1:
            raise ValueError(f"M (the number of directions) must be a positive int, got {M!r}")
        if random_state is not None and (isinstance(random_state, (bool, np.bool_))
                                         or not isinstance(random_state, (int, np.integer)) or random_state < 0):
            raise ValueError(f"random_state must be None or an integer >= 0, got {random_state!r}")
        if n < 2:
            raise ValueError(f"worst_slab_coverage needs at least 2 rows (one to choose the slab, one to evaluate"
                             f" it), got {n}")
        self.train, self.test = _shuffle_split(n, test_fraction, random_state)
        self.X = X
        m = self.train.size
        # TorchCP's sample_sphere: one (d, M) draw, columns normalised
        V = np.random.default_rng(random_state).normal(size=(X.shape[1], int(M)))
        V /= np.linalg.norm(V, axis=0)
        self.V = V.T
        self.r = int(np.round(delta * m))
        self.a_max = int(np.round((1.0 - delta) * m))
        self._sorted = None
        if m * int(M) * 12 <= budget:
            self._sorted = [self._direction(k) for k in range(int(M))]

    def _direction(self, k: int):
        z = np.dot(self.X[self.train], self.V[k])  # per direction, as TorchCP: the same rounding
        order = np.argsort(z)  # TorchCP's sort (the same algorithm: the same order of ties)
        return order.astype(np.int32), z[order]

    def coverage(self, hit: np.ndarray) -> float:
        """WSC of the sets whose coverage indicators (one per row) are ``hit``."""
        from ._slab import worst_window

        c_train = hit[self.train].astype(np.int64)
        best = (np.inf, 0, 0.0, 0.0)
        for k in range(self.V.shape[0]):
            order, zs = self._sorted[k] if self._sorted is not None else self._direction(k)
            p, q, a, b = worst_window(c_train[order], self.r, self.a_max)
            cover = p / q
            if cover < best[0]:  # ties: the first direction
                best = (cover, k, zs[a], zs[b])
        _, k, lo, hi = best
        z = np.dot(self.X[self.test], self.V[k])
        inside = (z >= lo) & (z <= hi)
        return float(hit[self.test][inside].mean()) if inside.any() else float("nan")


#: Short names of the two conditional-coverage metrics (TorchCP's ``WSC`` and ``SSCV``).
wsc = worst_slab_coverage
sscv = size_stratified_coverage_violation


def running_coverage(sets, y, window: int | None = None) -> np.ndarray:
    """Coverage of the rows seen so far, row after row (a stream's coverage over time).

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays, n sets in stream order
    y : array of int, shape (n,)
    window : int, optional
        Only the last ``window`` rows (fewer at the start): the coverage of a sliding window.

    Returns
    -------
    ndarray of float, shape (n,)
        ``out[t]`` = share of the rows ``0..t`` (or ``t-window+1..t``) whose set holds the label.

    Examples
    --------
    >>> running_coverage([[0], [1], [0], [0]], [0, 0, 0, 1]).tolist()
    [1.0, 0.5, 0.6666666666666666, 0.5]
    >>> running_coverage([[0], [1], [0], [0]], [0, 0, 0, 1], window=2).tolist()
    [1.0, 0.5, 0.5, 0.5]
    """
    sets, y = _sets_and_labels(sets, y)
    hit = sets.contains(y).astype(np.int64)
    cum = np.cumsum(hit)
    t = np.arange(1, hit.size + 1)
    if window is None:
        return cum / t
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    w = int(window)
    out = cum.astype(np.float64)
    out[w:] -= cum[:-w]
    return out / np.minimum(t, w)


# The calibration metrics with their bootstrap intervals live in their own module (one concept); they are
# re-exported here, where the other metrics are (that module imports this one only inside its functions).
from .calibration_metrics import (  # noqa: E402
    Estimate,
    adaptive_ece,
    auarc,
    classwise_ece,
    confidence_auroc,
    smooth_ece,
)

__all__ += ["Estimate", "adaptive_ece", "auarc", "classwise_ece", "confidence_auroc", "smooth_ece"]
