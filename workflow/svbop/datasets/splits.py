"""Seeded train / validation / calibration / test splits, optionally stratified by class."""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..io import NpzReader, atomic_path
from .base import Dataset, encode_groups

__all__ = ["SPLIT_KEYS", "SMALL_CLASSES", "drop_small_classes", "make_split", "split_parts", "save_split", "load_split",
           "split_groups"]

logger = logging.getLogger(__name__)

#: The parts of a split, in the order they are dealt.
SPLIT_KEYS = ("train", "validation", "calibration", "test")
_SIZED_KEYS = SPLIT_KEYS[1:]

#: What to do about classes with fewer rows than the split has parts (``split.small_classes``).
SMALL_CLASSES = ("warn", "error", "drop")


def _count(key: str, value, n_samples: int) -> int:
    """A size as a row count: a float in (0, 1) is a fraction of ``n_samples``, an int a count."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"sizes[{key!r}]: expected a fraction in (0, 1), a count >= 0 or 'source', got {value!r}")
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise ValueError(f"sizes[{key!r}]: negative size {value}")
        return int(value)
    v = float(value)
    if not np.isfinite(v) or v < 0:
        raise ValueError(f"sizes[{key!r}]: expected a fraction in (0, 1) or a count >= 0, got {value!r}")
    if v >= 1:
        raise ValueError(f"sizes[{key!r}]: float {value!r} is not a fraction in (0, 1); give a count as an int")
    return int(np.floor(v * n_samples + 0.5))


def _stratified_order(rows: np.ndarray, y: np.ndarray | None, rng: np.random.Generator, *,
                      every_class_first: bool = False) -> np.ndarray:
    """``rows`` in random order; with ``y``, interleaved by class so that every slice of the order is a
    stratified random draw: the same share of every class, drawn at random within the class.

    Class ``c``'s ``n_c`` rows, in random order, get the keys ``(r + u_c) / n_c`` (``r`` the rank,
    ``u_c`` uniform: systematic sampling with a random start), so the rows whose keys fall in
    ``[a, b)`` hold ``floor`` or ``ceil`` of ``(b - a) n_c`` rows of class ``c``, ``(b - a) n_c`` in
    expectation: every row has the same chance to be in a slice, whatever its class's size, so a
    part dealt from the order is exchangeable with the rows dealt after it (the conformal guarantee
    needs calibration rows exchangeable with test rows).  ``every_class_first`` (the training
    prefix of :func:`make_split`: every class trains) puts each class's first row before all others;
    the other rows get the keys ``(r - 1 + u_c) / (n_c - 1)``, so every slice after those first rows
    is a stratified draw of the rows beyond each class's first.
    """
    perm = rows[rng.permutation(rows.size)]
    if y is None or rows.size == 0:
        return perm
    _, codes = np.unique(y[perm], return_inverse=True)
    codes = codes.ravel()
    # Group a random permutation by class: rank r of each row within its class is random.
    by_class = np.argsort(codes, kind="stable")
    grouped, g_codes = perm[by_class], codes[by_class]
    class_counts = np.bincount(g_codes)
    starts = np.concatenate([[0], np.cumsum(class_counts)[:-1]])
    rank = np.arange(rows.size) - starts[g_codes]
    u = rng.random(class_counts.size)[g_codes]
    if not every_class_first:
        key = (rank + u) / class_counts[g_codes]
    else:  # rank-0 rows first (keys below 0), the rest spread over [0, 1) as a class of n_c - 1 rows
        key = (rank - 1 + u) / np.maximum(class_counts[g_codes] - 1, 1)
        key[rank == 0] = u[rank == 0] - 1.0
    return grouped[np.argsort(key, kind="stable")]


def make_split(
    n_samples: int,
    sizes: Mapping[str, float | int | str],
    *,
    seed: int = 0,
    y: np.ndarray | None = None,
    part: np.ndarray | None = None,
    small_classes: str = "warn",
    class_names: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Split ``0 .. n_samples - 1`` into train, validation, calibration and test rows.

    Parameters
    ----------
    n_samples : int
        Number of rows to split.
    sizes : mapping
        Sizes of ``"validation"``, ``"calibration"`` and ``"test"`` (a missing key means 0): a
        float in (0, 1) is a fraction of the rows in use (rounded to the nearest row), an int a
        row count, and ``"source"`` takes the rows whose ``part`` has that name (the source's
        own test set, say).  ``"subsample"`` (fraction or count) first keeps only that many rows
        (stratified); the others are in no part.  ``"train"`` gets the remaining rows.
    seed : int
        Seed of the random permutation; equal seeds give equal splits.
    y : ndarray of int, shape (n_samples,), optional
        Class labels.  When given, every random draw is stratified: a part takes about its
        share (within one row) of every class, and every class's first row goes to train, so a
        class with at least one row appears in train as long as train has room for it.
    part : ndarray of str, shape (n_samples,), optional
        The source part of every row (:attr:`Dataset.part`), needed for ``"source"`` sizes.
        Rows of source parts that no size names are in the training pool.
    small_classes : {"warn", "error", "drop"}
        What to do about classes with fewer rows than the split has non-empty parts: they cannot
        appear in every part (a class with one row is only ever in train, never tested).
        ``"warn"`` logs a WARNING with their number and examples, ``"error"`` raises.
        ``"drop"`` means the caller removed them before the split
        (:func:`drop_small_classes`, which counts rows before ``subsample``): classes that the
        subsample leaves small are warned about.
    class_names : sequence of str, optional
        Names of the classes of ``y``, for those messages.

    Returns
    -------
    dict of str to ndarray of int64
        Keys ``"train"``, ``"validation"``, ``"calibration"``, ``"test"``; sorted, disjoint
        index arrays (covering every row unless ``subsample`` is given).

    Raises
    ------
    ValueError
        For an unknown key, a negative or malformed size, ``"source"`` without ``part`` or
        naming a part the source lacks, sizes leaving no training rows (the message names the
        key(s)), ``y`` / ``part`` of the wrong shape, or small classes with ``small_classes="error"``.

    Examples
    --------
    >>> s = make_split(10, {"test": 0.2, "calibration": 3})
    >>> [len(s[k]) for k in ("train", "validation", "calibration", "test")]
    [5, 0, 3, 2]
    >>> s = make_split(6, {"test": "source"}, part=np.array(["train"] * 4 + ["test"] * 2))
    >>> s["test"].tolist()
    [4, 5]
    """
    if small_classes not in SMALL_CLASSES:
        raise ValueError(f"small_classes: expected one of {list(SMALL_CLASSES)}, got {small_classes!r}")
    if isinstance(n_samples, (bool, np.bool_)) or not isinstance(n_samples, numbers.Integral) or n_samples < 1:
        raise ValueError(f"n_samples: expected an integer >= 1, got {n_samples!r}")
    n = int(n_samples)
    if not isinstance(sizes, Mapping):
        raise ValueError(f"sizes: expected a mapping of part name to size, got {type(sizes).__name__}")
    for key in sizes:
        if key not in _SIZED_KEYS + ("subsample",):
            hint = " (train gets the rows the others leave)" if key == "train" else ""
            raise ValueError(f"sizes: unknown key {key!r}{hint}; expected some of {list(_SIZED_KEYS) + ['subsample']}")
    if y is not None:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y: expected shape ({n},) (n_samples,), got {y.shape}")
    if part is not None:
        part = np.asarray(part).astype(np.str_)
        if part.shape != (n,):
            raise ValueError(f"part: expected shape ({n},) (n_samples,), got {part.shape}")
    rng = np.random.default_rng(seed)
    rows = np.arange(n, dtype=np.int64)

    if sizes.get("subsample") is not None:
        m = _count("subsample", sizes["subsample"], n)
        if not 1 <= m <= n:
            raise ValueError(f"sizes['subsample']: {m} rows asked, the data has {n}")
        rows = np.sort(_stratified_order(rows, y, rng)[:m])

    split: dict[str, np.ndarray] = {}
    pool = rows
    for key in _SIZED_KEYS[::-1]:  # source parts first: test, calibration, validation
        if isinstance(sizes.get(key), str):
            if sizes[key] != "source":
                raise ValueError(f"sizes[{key!r}]: expected a fraction, a count or 'source', got {sizes[key]!r}")
            if part is None:
                raise ValueError(f"sizes[{key!r}]: 'source' needs the source's parts (the dataset has none)")
            mine = part[pool] == key
            if not mine.any():
                raise ValueError(
                    f"sizes[{key!r}]: 'source' but the source has no {key!r} rows (its parts: {sorted(set(part.tolist()))})"
                )
            split[key], pool = pool[mine], pool[~mine]
    counts = {k: _count(k, sizes.get(k, 0), rows.size) for k in _SIZED_KEYS if k not in split}
    taken = sum(counts.values())
    if taken >= pool.size:
        parts = ", ".join(f"{k}={v}" for k, v in counts.items() if v)
        raise ValueError(f"sizes: {parts} take {taken} of {pool.size} rows and leave no training rows")
    order = _stratified_order(pool, y, rng, every_class_first=True)
    start = pool.size - taken
    split["train"] = order[:start]
    for key in _SIZED_KEYS:
        if key in counts:
            split[key] = order[start : start + counts[key]]
            start += counts[key]
    split = {k: np.sort(split[k]).astype(np.int64) for k in SPLIT_KEYS}
    if y is not None:
        _check_small_classes(split, y, small_classes, class_names)
    logger.debug("split %d rows: %s", n, {k: v.size for k, v in split.items()})
    return split


def _check_small_classes(split: Mapping[str, np.ndarray], y: np.ndarray, mode: str, class_names) -> None:
    """Warn about (or refuse) classes with fewer rows than the split's non-empty parts."""
    parts = [k for k in SPLIT_KEYS if split[k].size]
    used = np.concatenate([split[k] for k in parts]) if parts else np.zeros(0, dtype=np.int64)
    classes, counts = np.unique(y[used], return_counts=True)
    small = classes[counts < len(parts)]
    if not small.size:
        return
    def name(c):
        return repr(str(class_names[c])) if class_names is not None else f"class {int(c)}"
    missing = {k: int(np.setdiff1d(small, y[split[k]]).size) for k in parts if k != "train"}
    shown = ", ".join(f"{name(c)} ({int(counts[classes == c][0])} rows)" for c in small[:3])
    message = (
        f"{small.size} classes have fewer rows than the split's {len(parts)} parts ({', '.join(parts)}), "
        f"so they cannot appear in every part, e.g. {shown}; missing from "
        + ", ".join(f"{k}: {v}" for k, v in missing.items())
    )
    if mode == "error":
        raise ValueError(f"split: {message} (split.small_classes: error; use warn to go on, or drop)")
    if mode == "drop":
        logger.warning("%s (split.small_classes: drop removed the classes small before subsample; these are small "
                       "after it)", message)
    else:
        logger.warning("%s (split.small_classes: warn; error stops instead, drop removes them)", message)


def split_parts(n_samples: int, sizes: Mapping[str, float | int | str]) -> list[str]:
    """The parts that a split with ``sizes`` fills: train, and every part with a non-zero size
    (a fraction of ``n_samples`` that rounds to at least one row, a count >= 1, or ``"source"``).

    Examples
    --------
    >>> split_parts(100, {"validation": 0.1, "calibration": 0, "test": "source"})
    ['train', 'validation', 'test']
    """
    parts = ["train"]
    for key in _SIZED_KEYS:
        value = sizes.get(key, 0)
        if value == "source" or (not isinstance(value, str) and _count(key, value, n_samples) > 0):
            parts.append(key)
    return parts


def drop_small_classes(dataset: Dataset, sizes: Mapping[str, float | int | str], *,
                       where: str = "split.small_classes") -> Dataset:
    """Remove the classes with fewer rows than a split with ``sizes`` has parts (``small_classes: drop``).

    Such a class cannot appear in every part (a class with one row is only ever in train, never
    tested); dropping its rows before the split keeps every tested class trainable and testable.
    The rows are counted in the whole dataset, before any ``subsample``.

    Parameters
    ----------
    dataset : Dataset
        The parsed dataset.
    sizes : mapping
        The split's sizes, as for :func:`make_split` (other keys, such as ``seed`` or
        ``small_classes``, are ignored).
    where : str
        Config key, for messages.

    Returns
    -------
    Dataset
        ``dataset`` itself when no class is small; else :meth:`Dataset.keep_classes` of the others
        (classes renumbered, the hierarchy pruned).  A WARNING says how many classes and rows went,
        with examples.

    Raises
    ------
    ValueError
        When fewer than two classes would be left.
    """
    parts = split_parts(dataset.n_samples, {k: v for k, v in sizes.items() if k in _SIZED_KEYS})
    counts = np.bincount(dataset.y, minlength=dataset.n_classes)
    small = np.flatnonzero(counts < len(parts))
    if not small.size:
        logger.info("%s: drop: no class has fewer rows than the split's %d parts", where, len(parts))
        return dataset
    kept = np.flatnonzero(counts >= len(parts))
    if kept.size < 2:
        raise ValueError(
            f"{where}: drop would leave {kept.size} of {dataset.n_classes} classes (the others have fewer rows than "
            f"the split's {len(parts)} parts, {', '.join(parts)}); nothing to classify"
        )
    out = dataset.keep_classes(kept)
    shown = ", ".join(f"{dataset.class_names[c]!r} ({counts[c]} row{'s' if counts[c] != 1 else ''})" for c in small[:3])
    tree = (f"; hierarchy pruned to {out.hierarchy.n_nodes} of {dataset.hierarchy.n_nodes} nodes"
            if dataset.hierarchy is not None else "")
    logger.warning(
        "%s: drop: dropped %d of %d classes with fewer rows than the split's %d parts (%s), e.g. %s, and their "
        "%d of %d rows; %d classes and %d rows left%s", where, small.size, dataset.n_classes, len(parts),
        ", ".join(parts), shown, dataset.n_samples - out.n_samples, dataset.n_samples, out.n_classes,
        out.n_samples, tree,
    )
    return out


def _check_split(split: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """Validate keys, integer 1-D arrays and disjointness; return int64 copies."""
    missing = [k for k in SPLIT_KEYS if k not in split]
    if missing:
        raise ValueError(f"{where}: missing key {missing[0]!r} (a split needs {list(SPLIT_KEYS)})")
    extra = [k for k in split if k not in SPLIT_KEYS]
    if extra:
        raise ValueError(f"{where}: unknown key {extra[0]!r} (a split holds {list(SPLIT_KEYS)})")
    out = {}
    for k in SPLIT_KEYS:
        a = np.asarray(split[k])
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise ValueError(f"{where}: {k!r} must be a 1-D integer index array, got shape {a.shape} dtype {a.dtype}")
        if a.size and a.min() < 0:
            raise ValueError(f"{where}: {k!r} holds a negative index {int(a.min())}")
        out[k] = a.astype(np.int64)
    allidx = np.concatenate([out[k] for k in SPLIT_KEYS])
    uniq, counts = np.unique(allidx, return_counts=True)
    if np.any(counts > 1):
        row = int(uniq[np.argmax(counts > 1)])
        parts = [k for k in SPLIT_KEYS if np.any(out[k] == row)]
        where_row = f"in {parts}" if len(parts) > 1 else f"twice in {parts[0]!r}"
        raise ValueError(f"{where}: parts are not disjoint; row {row} appears {where_row}")
    return out


def save_split(path: str | os.PathLike, split: Mapping[str, np.ndarray]) -> Path:
    """Write a split (as from :func:`make_split`) to a compressed ``.npz`` file, atomically.

    Raises
    ------
    ValueError
        If a key is missing or unknown, or the parts overlap.
    """
    path = Path(path)
    arrays = _check_split(split, "split")
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return path


def load_split(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a split written by :func:`save_split`; check key presence and disjointness.

    Raises
    ------
    ValueError
        If the file is missing or unreadable, lacks a key, or its parts overlap (the message
        names the file).
    """
    path = Path(path)
    with NpzReader(path, "split file") as data:  # each member's header checked against its size
        split = {k: data[k] for k in sorted(data.files)}
    return _check_split(split, str(path))


def split_groups(groups, split: Mapping[str, np.ndarray],
                 parts: Sequence[str] = ("validation", "calibration", "test")) -> dict[str, np.ndarray]:
    """A dataset's per-row groups (:attr:`Dataset.groups`) as the arrays of a score file.

    Parameters
    ----------
    groups : sequence of str, shape (N,)
        Every row's group.
    split : mapping of str to ndarray of int
        Row indices per part (:func:`make_split`, :func:`~svbop.datasets.outputs.split_model_outputs`).
    parts : sequence of str
        The parts to write.

    Returns
    -------
    dict of str to ndarray
        ``group_names`` (the distinct groups of all rows, sorted) and ``g_<part>`` (int64 codes
        into it, one per row of ``split[part]``, in the split's row order, so row ``i`` of
        ``P_<part>`` has group ``group_names[g_<part>[i]]``).  The codes are shared by every part.

    Examples
    --------
    >>> out = split_groups(["a", "b", "a", "c"], {"calibration": np.array([0, 1]), "test": np.array([3])},
    ...                    parts=("calibration", "test"))
    >>> out["group_names"].tolist(), out["g_calibration"].tolist(), out["g_test"].tolist()
    (['a', 'b', 'c'], [0, 1], [2])
    """
    names, codes = encode_groups(groups)
    out = {"group_names": names}
    for part in parts:
        out[f"g_{part}"] = codes[np.asarray(split[part], dtype=np.int64)]
    return out


def split_row_arrays(dataset, split: Mapping[str, np.ndarray],
                     parts: Sequence[str] = ("validation", "calibration", "test")) -> dict[str, np.ndarray]:
    """A dataset's per-row weights and group indicator columns as the arrays of a score file.

    Each part's rows keep their own values: ``w_<part>`` (float64, one likelihood ratio per row of
    ``split[part]``, in the split's row order) when :attr:`Dataset.weights` is set, ``Phi_<part>``
    (bool, ``(rows, G)``) and ``group_column_names`` when :attr:`Dataset.group_columns` is set;
    nothing for what is not set.

    Examples
    --------
    >>> from svbop.datasets import Dataset
    >>> d = Dataset("d", np.eye(3), [0, 1, 2], ["a", "b", "c"], weights=[1.0, 2.0, 3.0],
    ...             group_columns=[[1], [0], [1]], group_column_names=["old"])
    >>> out = split_row_arrays(d, {"calibration": np.array([2, 0]), "test": np.array([1])}, ("calibration", "test"))
    >>> out["w_calibration"].tolist(), out["Phi_calibration"][:, 0].tolist(), out["group_column_names"].tolist()
    ([3.0, 1.0], [True, True], ['old'])
    """
    out: dict[str, np.ndarray] = {}
    if dataset.weights is not None:
        for part in parts:
            out[f"w_{part}"] = dataset.weights[np.asarray(split[part], dtype=np.int64)]
    if dataset.group_columns is not None:
        out["group_column_names"] = np.asarray(dataset.group_column_names, dtype=np.str_)
        for part in parts:
            out[f"Phi_{part}"] = dataset.group_columns[np.asarray(split[part], dtype=np.int64)]
    return out
