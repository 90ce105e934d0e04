"""Reading probability matrices and writing set predictions (.npy, .npz, .csv)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .sets import SetPredictions

__all__ = ["atomic_path", "load_scores", "save_sets", "load_sets"]


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Write a file atomically: yield a temporary path beside ``path``, then rename it onto ``path``.

    The temporary name ends with the final name (so suffix-sensitive writers such as
    ``np.savez`` keep it), starts with a dot and carries the process id.  If the body raises,
    the temporary file is removed and ``path`` is left untouched, so a killed or failed job
    never leaves a file that looks finished.  Parent folders are created.

    Examples
    --------
    >>> with atomic_path("results/model.npz") as tmp:   # doctest: +SKIP
    ...     np.savez(tmp, W=W)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp{os.getpid()}.{path.name}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_scores(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """Load an (n_samples, n_classes) matrix of probabilities or scores.

    Parameters
    ----------
    path : path
        ``.npy``; ``.npz`` (array ``key``, or the only array, or one named ``probs``/``P``);
        ``.csv``/``.tsv``/``.txt`` (numbers only, comma / tab / whitespace separated, optional
        ``#`` comments).
    key : str, optional
        Array name inside an ``.npz`` file.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        arr = np.load(path, allow_pickle=False)
    elif suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            names = list(data.files)
            if key is None:
                preferred = [n for n in ("probs", "P", "scores") if n in names]
                if len(names) == 1:
                    key = names[0]
                elif preferred:
                    key = preferred[0]
                else:
                    raise ValueError(f"{path}: holds arrays {names}; say which one with --key")
            if key not in names:
                raise ValueError(f"{path}: no array {key!r} (it holds {names})")
            arr = data[key]
    elif suffix in (".csv", ".tsv", ".txt"):
        delimiter = {".csv": ",", ".tsv": "\t"}.get(suffix)
        try:
            arr = np.loadtxt(path, delimiter=delimiter, ndmin=2, dtype=np.float64)
        except ValueError as exc:
            raise ValueError(f"{path}: not a numeric matrix ({exc})") from None
    else:
        raise ValueError(f"{path}: unknown format {suffix!r} (use .npy, .npz, .csv, .tsv or .txt)")
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D (n_samples, n_classes) matrix, got shape {arr.shape}")
    return arr


def save_sets(path: str | os.PathLike, sets: SetPredictions) -> None:
    """Write sets: ``.npz`` (compact, with expected utilities) or text, one set per line.

    Text files (``.csv``/``.txt``) hold the class indices of each set separated by spaces, in
    decreasing probability; an empty set is an empty line.  Written atomically (temporary file,
    then rename).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".csv", ".txt"):
        raise ValueError(f"{path}: unknown output format {suffix!r} (use .npz, .csv or .txt)")
    with atomic_path(path) as tmp:
        if suffix == ".npz":
            sets.save(tmp)
        else:
            with open(tmp, "w") as fh:
                for s in sets:
                    fh.write(" ".join(map(str, s.tolist())) + "\n")


def load_sets(path: str | os.PathLike, n_classes: int | None = None) -> SetPredictions:
    """Read sets written by :func:`save_sets`."""
    path = Path(path)
    if path.suffix.lower() == ".npz":
        return SetPredictions.load(path)
    with open(path) as fh:
        rows = []
        for lineno, line in enumerate(fh, start=1):
            try:
                rows.append([int(v) for v in line.split()])
            except ValueError:
                raise ValueError(f"{path}, line {lineno}: expected class indices, got {line.strip()!r}") from None
    if n_classes is None:
        n_classes = 1 + max((max(r) for r in rows if r), default=0)
    return SetPredictions.from_sets(rows, n_classes)
