"""Reading probability matrices and writing set predictions (.npy, .npz, .csv)."""

from __future__ import annotations

import os
import warnings
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .sets import SetPredictions

__all__ = ["SCORES_DTYPE", "UNREADABLE_NPZ", "INFLATE_RATIO", "INFLATE_FLOOR_MB", "inflate_bounds", "inflate_problem", "check_npy_header", "check_scores", "load_npy", "atomic_path", "write_tsv", "save_arrays", "matrix_arrays", "NpzReader", "save_matrix", "load_matrix", "load_scores", "save_sets", "load_sets", "SetFiles"]


#: dtype of the held-out rows' class probabilities the pipeline stores (rule score_flat,
#: ``results/{dataset}/scores/flat.npz``, arrays ``P_validation``, ``P_calibration``, ``P_test``).
#: float32 halves the memory and disk of float64 (LSHTC1's 34,905 x 12,166 test probabilities:
#: 1.6 GB instead of 3.4 GB), and the baselines and metrics read it as it is, without a float64
#: copy.  Rounding to float32 (relative error below 6e-8) can tie probabilities that differ in
#: float64; the baselines break ties by the lower class index.  SVBOP's own predictions do not
#: read these matrices: they score the model in float64.
SCORES_DTYPE = np.dtype(np.float32)

#: What numpy raises for a file that is not a readable ``.npy`` / ``.npz`` (not a zip, truncated,
#: a damaged member, pickled objects): caught at the library's boundary and reported naming the file.
UNREADABLE_NPZ = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)

#: Decompression bound: compressed data (a ``.gz``/``.bz2``/``.xz`` file read by the dataset
#: readers, a compressed member of an ``.npz``) may inflate to at most ``INFLATE_RATIO`` times the
#: compressed bytes it came from, or to ``INFLATE_FLOOR_MB`` MiB, whichever is larger.  Real data
#: inflates 2-10 times (text, libSVM, MNIST); a decompression bomb about 1000 times (gzip's limit).
#: The environment variables ``SVBOP_INFLATE_RATIO`` and ``SVBOP_INFLATE_FLOOR_MB`` override them.
INFLATE_RATIO = 100.0
INFLATE_FLOOR_MB = 64


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(f"environment variable {name}: expected a positive number, got {raw!r}")
    return value


def inflate_bounds() -> tuple[float, int]:
    """The decompression bound in force: ``(ratio, floor in bytes)`` (see :data:`INFLATE_RATIO`).

    Raises
    ------
    ValueError
        If ``SVBOP_INFLATE_RATIO`` or ``SVBOP_INFLATE_FLOOR_MB`` is set to something other than a
        positive number.
    """
    ratio = _env_number("SVBOP_INFLATE_RATIO", INFLATE_RATIO)
    floor = int(_env_number("SVBOP_INFLATE_FLOOR_MB", INFLATE_FLOOR_MB) * (1 << 20))
    return ratio, floor


def inflate_problem(inflated: int, compressed: int, bounds: tuple[float, int] | None = None) -> str | None:
    """Why ``inflated`` bytes from ``compressed`` bytes break the bound (``None`` when they do not).

    ``bounds`` is ``(ratio, floor)`` as :func:`inflate_bounds` returns it (the default).
    """
    ratio, floor = inflate_bounds() if bounds is None else bounds
    if inflated <= max(floor, ratio * compressed):
        return None
    return (
        f"{inflated} bytes inflated from {compressed} compressed bytes is over {ratio:g} times as many (and over "
        f"{floor >> 20} MiB): refused as a likely decompression bomb (the environment variables SVBOP_INFLATE_RATIO "
        f"and SVBOP_INFLATE_FLOOR_MB raise the bound)"
    )


def check_npy_header(fh, size: int, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """Read and check an ``.npy`` header from ``fh`` against the ``size`` bytes the array occupies.

    The array a header describes is allocated whole by :func:`numpy.load` before any data is
    read, so a damaged or hostile header (a shape of 10**10 rows in a 1 kB file) would cost that
    much memory; checking it against the real size first bounds memory by the data.

    Parameters
    ----------
    fh : binary file object
        Positioned at the start of the ``.npy`` data (its magic string).
    size : int
        Bytes of the whole ``.npy`` data (the file's size, or an ``.npz`` member's inflated size).
    where : str
        Names the file (and member) in messages.

    Returns
    -------
    shape, dtype

    Raises
    ------
    ValueError
        ``"<where>: ..."`` for a file that is not ``.npy``, an unreadable header, an object dtype
        (pickles), or a header whose shape and dtype need more or fewer bytes than there are.
    """
    from numpy.lib import format as npy_format

    try:
        major, minor = npy_format.read_magic(fh)
        if (major, minor) == (1, 0):
            shape, _, dtype = npy_format.read_array_header_1_0(fh)
        elif (major, minor) == (2, 0):
            shape, _, dtype = npy_format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"npy format version {major}.{minor} is not read here (1.0 and 2.0 are)")
        offset = fh.tell()
    except (ValueError, EOFError, OSError, SyntaxError, TypeError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{where}: not a readable .npy array ({type(exc).__name__}: {exc})") from None
    if dtype.hasobject:
        raise ValueError(f"{where}: holds Python objects (dtype {dtype}); only plain arrays are read, never pickles")
    need = dtype.itemsize
    for n in shape:
        need *= int(n)
    if need != size - offset:
        raise ValueError(
            f"{where}: the .npy header announces shape {tuple(shape)} of {dtype} = {need} bytes of data, "
            f"there are {size - offset} ({'truncated or a damaged header' if need > size - offset else 'extra bytes'})"
        )
    return tuple(int(n) for n in shape), dtype


def load_npy(path: str | os.PathLike, what: str = ".npy file") -> np.ndarray:
    """Read one ``.npy`` array without pickles; an unreadable file raises a ValueError naming it.

    The header's shape is checked against the file's size before anything is allocated.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(6)
            fh.seek(0)
            if head != b"\x93NUMPY":
                raise ValueError(f"{path}: not a readable {what} (an .npy file starts with b'\\x93NUMPY', this one with {head!r})")
            check_npy_header(fh, size, f"{path} ({what})")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return np.load(path, allow_pickle=False)
    except UNREADABLE_NPZ as exc:
        raise ValueError(f"{path}: not a readable {what} ({type(exc).__name__}: {exc})") from None


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


def write_tsv(path: str | os.PathLike, rows, columns=None) -> None:
    """Write dict rows as a tab-separated table with a header, atomically.

    ``columns`` defaults to the keys in order of first appearance; a missing value is empty.
    """
    import csv

    rows = list(rows)
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def save_arrays(path: str | os.PathLike, *, compress: bool = True, **arrays) -> None:
    """Write named arrays to an ``.npz`` file atomically (no pickled objects).

    Parameters
    ----------
    path : path
        The file.
    compress : bool, default True
        zlib-compress every array (``np.savez_compressed``), or store them as they are
        (``np.savez``: for data that zlib hardly shrinks, such as dense probabilities, where it
        costs minutes of CPU per GB; see :data:`SCORES_DTYPE`).
    **arrays
        The arrays, by name.
    """
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        (np.savez_compressed if compress else np.savez)(fh, **arrays)


def matrix_arrays(X, prefix: str = "X") -> dict[str, np.ndarray]:
    """Arrays that store a dense array (``prefix``) or a sparse matrix as CSR parts
    (``prefix_data``, ``prefix_indices``, ``prefix_indptr``, ``prefix_shape``) in an ``.npz``."""
    import scipy.sparse as sp

    if not sp.issparse(X):
        return {prefix: np.asarray(X)}
    X = sp.csr_matrix(X)
    return {
        f"{prefix}_data": X.data,
        f"{prefix}_indices": X.indices,
        f"{prefix}_indptr": X.indptr,
        f"{prefix}_shape": np.asarray(X.shape, dtype=np.int64),
    }


class NpzReader:
    """Read an ``.npz`` file without pickles; a missing or unreadable array raises a ValueError
    naming the file, what it should be and the key.  Use as a context manager.

    Parameters
    ----------
    path : path
        The file.
    what : str
        What the file should be, for messages (e.g. ``"dataset file"``).
    """

    def __init__(self, path: str | os.PathLike, what: str = "file") -> None:
        self.path, self.what = Path(path), what
        if not self.path.is_file():
            raise ValueError(f"{self.path}: no such file")
        with open(self.path, "rb") as fh:
            head = fh.read(4)
        if not head.startswith(b"PK"):  # numpy would try it as a pickle and say so
            raise ValueError(f"{self.path}: not an .npz file (an .npz is a zip archive; this file starts with {head!r})")
        try:
            self._data = np.load(self.path, allow_pickle=False)
        except UNREADABLE_NPZ as exc:  # truncated, damaged directory, ...
            raise ValueError(f"{self.path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
        self.files = set(self._data.files)
        self._size = self.path.stat().st_size
        self._checked: set[str] = set()

    def __enter__(self) -> "NpzReader":
        return self

    def __exit__(self, *exc) -> None:
        self._data.close()

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.files:
            raise ValueError(f"{self.path}: missing key {key!r} (not a {self.what}, or truncated; it holds {sorted(self.files)})")
        if key not in self._checked:
            self._check_member(key)
            self._checked.add(key)
        try:
            return self._data[key]
        except ValueError as exc:
            raise ValueError(f"{self.path}: key {key!r} cannot be read without pickle ({exc})") from None
        except UNREADABLE_NPZ as exc:  # a damaged member of the zip
            raise ValueError(f"{self.path}: key {key!r} is damaged ({type(exc).__name__}: {exc})") from None

    def _check_member(self, key: str) -> None:
        """Check member ``key`` before numpy allocates what its header announces.

        Its sizes in the zip directory must fit in the file (and, compressed, within the
        decompression bound :func:`inflate_bounds`), and its ``.npy`` header must describe
        exactly the bytes the member holds: a damaged or hostile member is a one-line error,
        not a MemoryError or a ``bytes`` object where an array was expected.
        """
        where = f"{self.path}: key {key!r}"
        zf = self._data.zip
        names = set(zf.namelist())
        member = f"{key}.npy" if f"{key}.npy" in names else key
        try:
            info = zf.getinfo(member)
        except KeyError:  # pragma: no cover - numpy listed it
            raise ValueError(f"{where}: not in the zip directory") from None
        if info.compress_size > self._size or (info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size):
            raise ValueError(f"{where}: damaged zip directory (member of {info.compress_size} bytes, {info.file_size} "
                             f"inflated, in a file of {self._size} bytes)")
        if info.compress_type != zipfile.ZIP_STORED:
            problem = inflate_problem(info.file_size, info.compress_size)
            if problem is not None:
                raise ValueError(f"{where}: {problem}")
        try:
            with zf.open(info) as fh:
                check_npy_header(fh, info.file_size, where)
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
            raise ValueError(f"{where} is damaged ({type(exc).__name__}: {exc})") from None

    def matrix(self, prefix: str = "X"):
        """The matrix stored by :func:`matrix_arrays` under ``prefix``: numpy array or CSR."""
        import scipy.sparse as sp

        if prefix in self.files:
            return self[prefix]
        shape = self[f"{prefix}_shape"]
        if shape.shape != (2,) or shape.dtype.kind not in "iu" or shape.min() < 0:
            raise ValueError(f"{self.path}: {prefix}_shape is {shape.tolist()!r}, expected two non-negative integers")
        parts = (self[f"{prefix}_data"], self[f"{prefix}_indices"], self[f"{prefix}_indptr"])
        if parts[0].dtype.kind not in "fiub" or parts[1].dtype.kind not in "iu" or parts[2].dtype.kind not in "iu":
            raise ValueError(f"{self.path}: sparse {prefix!r} has parts of dtypes {[p.dtype.name for p in parts]}, "
                             f"expected numbers and integer indices")
        try:
            X = sp.csr_matrix(parts, shape=tuple(int(v) for v in shape))
            X.check_format(full_check=True)  # indices in range, indptr non-decreasing: O(nnz), once
        except ValueError as exc:
            raise ValueError(f"{self.path}: inconsistent sparse {prefix!r} ({exc})") from None
        return X


def save_matrix(path: str | os.PathLike, X, **extra) -> None:
    """Write a dense array or a scipy sparse matrix (stored as CSR) to ``.npz``, atomically.

    ``extra`` arrays are stored beside it; :func:`load_matrix` returns the matrix.
    """
    save_arrays(path, **matrix_arrays(X), **extra)


def load_matrix(path: str | os.PathLike):
    """Read a matrix written by :func:`save_matrix`: a numpy array or a ``scipy.sparse.csr_matrix``."""
    with NpzReader(path, "matrix file") as data:
        return data.matrix("X")


def load_scores(path: str | os.PathLike, key: str | None = None, *, probabilities: bool = False) -> np.ndarray:
    """Load an (n_samples, n_classes) matrix of probabilities or scores.

    Parameters
    ----------
    path : path
        ``.npy``; ``.npz`` (array ``key``, or the only array, or one named ``probs``/``P``);
        ``.csv``/``.tsv``/``.txt`` (numbers only, comma / tab / whitespace separated, optional
        ``#`` comments).
    key : str, optional
        Array name inside an ``.npz`` file.
    probabilities : bool, default False
        The values must be probabilities, in [0, 1] (else any finite number).

    Raises
    ------
    ValueError
        Naming the file: missing, unreadable, a header announcing more data than the file holds,
        not a non-empty 2-D numeric matrix, a NaN or infinite value, or (with
        ``probabilities``) a value outside [0, 1]; the first bad row and column are named.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        arr = load_npy(path, "probability file (.npy)")
    elif suffix == ".npz":
        with NpzReader(path, "probability file") as data:
            names = sorted(data.files)
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
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "input contained no data": checked below
                arr = np.loadtxt(path, delimiter=delimiter, ndmin=2, dtype=np.float64)
        except ValueError as exc:
            raise ValueError(f"{path}: not a numeric matrix ({exc})") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not a text file ({exc})") from None
    else:
        raise ValueError(f"{path}: unknown format {suffix!r} (use .npy, .npz, .csv, .tsv or .txt)")
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D (n_samples, n_classes) matrix, got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{path}: empty matrix of shape {arr.shape} (expected at least one row and one class)")
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"{path}: expected numbers, got an array of dtype {arr.dtype}")
    check_scores(arr, str(path) if key is None or suffix != ".npz" else f"{path}: key {key!r}", probabilities=probabilities)
    return arr


def check_scores(arr: np.ndarray, where: str, *, probabilities: bool = False, chunk_rows: int = 4096) -> None:
    """Raise ``ValueError("<where>: ...")`` at the first NaN or infinite value of a score matrix,
    or (``probabilities``) the first value outside [0, 1]; checked in chunks of rows (no full copy)."""
    if arr.dtype.kind not in "f" and not probabilities:
        return
    for lo in range(0, arr.shape[0], chunk_rows):
        block = arr[lo:lo + chunk_rows]
        bad = ~np.isfinite(block) if arr.dtype.kind == "f" else np.zeros(block.shape, dtype=bool)
        if probabilities:
            bad |= (block < 0) | (block > 1)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            value = block[i, j]
            what = "not finite" if not np.isfinite(value) else "outside [0, 1] (not a probability)"
            raise ValueError(f"{where}: value {float(value)!r} at row {lo + int(i)}, column {int(j)} is {what}")


def load_score_arrays(path: str | os.PathLike, *keys: str) -> list[np.ndarray]:
    """Arrays of a held-out score file (the pipeline's ``scores.npz``), each checked on load.

    ``P_<part>`` must be a 2-D matrix of probabilities (finite, in [0, 1]) and ``y_<part>`` a
    1-D array of non-negative integer labels; other keys are returned as stored.  A damaged or
    hostile file is a one-line ``ValueError`` naming it and the key (:class:`NpzReader` checks
    every header against the file before anything is allocated).

    Parameters
    ----------
    path : path
        The ``.npz`` file.
    *keys : str
        The arrays to read, e.g. ``"P_test", "y_test"``.

    Returns
    -------
    list of ndarray
        In the order of ``keys``.
    """
    arrays = []
    with NpzReader(path, "score file") as data:
        for key in keys:
            arr = data[key]
            where = f"{path}: key {key!r}"
            if key.startswith("P_"):
                if arr.ndim != 2 or arr.dtype.kind != "f":
                    raise ValueError(f"{where}: expected a 2-D float matrix of probabilities, got {arr.dtype.name} "
                                     f"of shape {arr.shape}")
                check_scores(arr, where, probabilities=True)
            elif key.startswith("y_"):
                if arr.ndim != 1 or arr.dtype.kind not in "iu" or (arr.size and arr.min() < 0):
                    raise ValueError(f"{where}: expected a 1-D array of non-negative integer labels, got "
                                     f"{arr.dtype.name} of shape {arr.shape}")
            arrays.append(arr)
    return arrays


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
    """Read sets written by :func:`save_sets`.

    Raises
    ------
    ValueError
        Naming the file (and line, for text): a missing or unreadable file, a line that is not
        class indices, a negative index, or a class repeated within one set (a set holds each
        class at most once; counting it twice would inflate every set-based utility).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if path.suffix.lower() == ".npz":
        return SetPredictions.load(path)
    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                try:
                    row = [int(v) for v in line.split()]
                except ValueError:
                    raise ValueError(f"{path}, line {lineno}: expected class indices, got {line.strip()!r}") from None
                if any(c < 0 for c in row):
                    raise ValueError(f"{path}, line {lineno}: negative class index in {line.strip()!r}")
                if len(set(row)) != len(row):
                    twice = next(c for c in row if row.count(c) > 1)
                    raise ValueError(f"{path}, line {lineno}: class {twice} appears twice in one set")
                rows.append(row)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a text file of sets ({exc})") from None
    if n_classes is None:
        n_classes = 1 + max((max(r) for r in rows if r), default=0)
    return SetPredictions.from_sets(rows, n_classes)


class SetFiles(Mapping):
    """Set predictions by key, each read from its file when looked up and not kept.

    A caller that goes through the methods one at a time (:func:`svbop.evaluation.evaluate_methods`
    iterates ``items()``) then holds one method's sets at a time: conformal sets on many classes
    can hold thousands of classes per row (GBs), and a dataset has a dozen baselines.

    Parameters
    ----------
    paths : mapping of key to path
        Files written by :func:`save_sets`, e.g. ``{(method, param): path}``.
    n_classes : int, optional
        Passed to :func:`load_sets` (for text files).
    """

    def __init__(self, paths: Mapping, n_classes: int | None = None) -> None:
        self.paths = dict(paths)
        self.n_classes = n_classes

    def __getitem__(self, key) -> SetPredictions:
        return load_sets(self.paths[key], self.n_classes)

    def __contains__(self, key) -> bool:  # without reading the file (Mapping's would)
        return key in self.paths

    def __iter__(self) -> Iterator:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)
