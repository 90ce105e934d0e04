"""``split.calibration: auto`` for a model's outputs: the calibration rows split off the test rows are
the fewest that let one conformal threshold per class be calibrated.

A class-conditional conformal threshold at level epsilon needs at least
:func:`svbop.conformal.min_calibration_rows` calibration rows of its class (9 at epsilon 0.1, 19 at
0.05): with fewer, its threshold is infinite and every set holds the class.  A fixed share (10 %) of
10,000 test rows of 100 classes gives about 10 rows a class, so one class in two falls short of 9 when
the classes are uneven or the share is 8 %.  ``auto`` takes the smallest share, at least
:data:`LEAST_SHARE` of the rows it is drawn from (and at least the rows one finite threshold needs),
whose stratified draw gives every class that many rows, and never more than :data:`MOST_SHARE` of
them.  A class too rare to get them even from that share does not move the share (it cannot be calibrated on its own; the report says so).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["AUTO", "LEAST_SHARE", "MOST_SHARE", "auto_calibration_rows"]

#: The config value (``split: {calibration: auto}``).
AUTO = "auto"
#: The share ``auto`` never goes below (the schema's default fraction).
LEAST_SHARE = 0.1
#: The share ``auto`` never goes above: the test keeps at least the other half of the rows.
MOST_SHARE = 0.5


def auto_calibration_rows(y, part, sizes: Mapping[str, object], *, rows_per_class: int, seed: int = 0,
                          least: float = LEAST_SHARE, most: float = MOST_SHARE) -> dict[str, object]:
    """How many calibration rows ``auto`` splits off a model's outputs.

    Parameters
    ----------
    y : array of int, shape (n,)
        Every row's class.
    part : array of str, shape (n,)
        The part each row was given for (:func:`svbop.datasets.outputs.read_model_outputs`).
    sizes : mapping
        The split's sizes (``validation`` is drawn first, as
        :func:`svbop.datasets.outputs.split_model_outputs` draws it); ``calibration`` is ignored.
    rows_per_class : int
        Calibration rows each class needs (:func:`svbop.conformal.min_calibration_rows` at the
        smallest epsilon of the run).
    seed : int
        The split's seed.
    least, most : float
        The smallest and largest share of the rows the calibration is drawn from.

    Returns
    -------
    dict
        ``rows`` (the count to give ``split.calibration``; None when the outputs give a calibration
        part of their own), ``pool`` (the rows it is drawn from), ``pool_part`` (``"test"`` or
        ``"all"``), ``rows_per_class``, ``fewest`` (the smallest class's calibration rows with that
        count) and ``classes_short`` (classes that still have fewer than ``rows_per_class``: too rare
        in the pool).

    Raises
    ------
    ValueError
        ``rows_per_class`` below 1, or ``least``/``most`` not in (0, 1) with ``least <= most``.
    """
    from .outputs import part_rows, split_model_outputs

    if int(rows_per_class) < 1:
        raise ValueError(f"rows_per_class: {rows_per_class!r}, expected a count >= 1")
    if not 0 < least <= most < 1:
        raise ValueError(f"least, most: {least!r}, {most!r}: expected 0 < least <= most < 1")
    y = np.asarray(y)
    part = np.asarray(part).astype(np.str_)
    given = set(part.tolist())
    pool_part = "all" if "all" in given else "test"
    pool = int(np.sum(part == pool_part))
    out: dict[str, object] = {"rows": None, "pool": pool, "pool_part": pool_part, "rows_per_class": int(rows_per_class),
                              "fewest": None, "classes_short": 0}
    if "calibration" in given:
        return out
    sizes = {k: v for k, v in sizes.items() if k in ("validation",)}
    classes = np.unique(y[part == pool_part])

    def counts(n: int) -> np.ndarray:
        rows = split_model_outputs(y, part, {**sizes, "calibration": int(n)}, seed=seed)["calibration"]
        found = np.searchsorted(classes, y[rows])
        return np.bincount(found, minlength=classes.size)

    taken = 0 if "validation" in given else part_rows(sizes.get("validation", 0.1), pool)
    lo = max(1, int(np.floor(least * pool + 0.5)))
    hi = min(int(np.floor(most * pool)), pool - taken - 1)
    if hi < 1:  # too few rows for any calibration of its own: the split says so
        out["rows"] = lo
        return out
    lo = min(max(lo, int(rows_per_class)), hi)  # at least the rows one finite (marginal) threshold needs
    # a class too rare to get its rows even from the largest share does not push the share up: it cannot
    # be calibrated on its own whatever the share (the report says so, naming the rows it needs)
    reachable = counts(hi) >= int(rows_per_class)
    target = np.where(reachable, int(rows_per_class), 0)
    if np.all(counts(lo) >= target):
        hi = lo
    while lo < hi:  # the prefix of a stratified order: each class's count grows with n
        mid = (lo + hi) // 2
        if np.all(counts(mid) >= target):
            hi = mid
        else:
            lo = mid + 1
    final = counts(hi)
    out.update(rows=int(hi), fewest=int(final.min()) if final.size else 0,
               classes_short=int(np.sum(final < int(rows_per_class))))
    return out

