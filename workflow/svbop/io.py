"""Reading probability matrices and writing set predictions (.npy, .npz, .csv)."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ._npz import _MAP_BYTES
from ._npz import (  # noqa: F401 - re-exported: svbop.io is where callers find them
    INFLATE_FLOOR_MB, INFLATE_RATIO, UNREADABLE_NPZ, NpzReader, check_npy_header, inflate_bounds, inflate_problem,
    file_kind, missing_or_not_regular,
)
from .sets import SetPredictions

__all__ = ["SCORES_DTYPE", "UNREADABLE_NPZ", "INFLATE_RATIO", "INFLATE_FLOOR_MB", "inflate_bounds", "inflate_problem", "check_npy_header", "check_scores", "load_npy", "atomic_path", "FORMULA_STARTS", "escape_cell", "escape_frame", "unescape_cell", "unescape_frame", "write_tsv", "save_arrays", "RowStream", "matrix_arrays", "NpzReader", "save_matrix", "load_matrix", "load_scores", "load_score_groups", "save_sets", "load_sets", "SetFiles"]


#: dtype of the held-out rows' class probabilities the pipeline stores (rule score_flat,
#: ``results/{dataset}/scores/flat.npz``, arrays ``P_validation``, ``P_calibration``, ``P_test``).
#: float32 halves the memory and disk of float64 (LSHTC1's 34,905 x 12,166 test probabilities:
#: 1.6 GB instead of 3.4 GB), and the baselines and metrics read it as it is, without a float64
#: copy.  Rounding to float32 (relative error below 6e-8) can tie probabilities that differ in
#: float64; the baselines break ties by the lower class index.  SVBOP's own predictions do not
#: read these matrices: they score the model in float64.
SCORES_DTYPE = np.dtype(np.float32)


def load_npy(path: str | os.PathLike, what: str = ".npy file") -> np.ndarray:
    """Read one ``.npy`` array without pickles; an unreadable file raises a ValueError naming it.

    The header's shape is checked against the file's size before anything is allocated.  A file of
    at least 16 MB is mapped copy-on-write rather than copied into fresh memory (which costs about
    10 us per 4 KiB page on the development VM: 0.8 CPU s for 200 MB of float32 logits).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: {missing_or_not_regular(path)}")
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
        if size >= _MAP_BYTES:  # mapped copy-on-write (a plain ndarray over the mapping): read as used
            return np.asarray(np.load(path, mmap_mode="c", allow_pickle=False))
        return np.load(path, allow_pickle=False)
    except UNREADABLE_NPZ as exc:
        raise ValueError(f"{path}: not a readable {what} ({type(exc).__name__}: {exc})") from None


def read_json_object(path: str | os.PathLike, what: str) -> dict:
    """A JSON file holding one object (a record the pipeline wrote); an unreadable file, bad JSON or
    another JSON value raises a one-line ValueError naming the file and ``what`` it should be."""
    import json

    try:
        with open(path) as fh:
            record = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: cannot read {what} ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(record).__name__}")
    return record


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Write a file atomically: yield a temporary path beside ``path``, then rename it onto ``path``.

    The temporary file is created exclusively (:func:`tempfile.mkstemp`: a random name, opened
    with ``O_CREAT | O_EXCL``, so a symlink or file planted at a guessable name can neither
    redirect the write nor be overwritten), in ``path``'s folder (the rename stays on one file
    system), with the permissions a new file would get (``0o666`` less the umask).  Its name
    starts with ``.tmp`` and ends with the final name (so suffix-sensitive writers such as
    ``np.savez`` keep it).  If the body raises, the temporary file is removed and ``path`` is
    left untouched, so a killed or failed job never leaves a file that looks finished.  Parent
    folders are created.

    Examples
    --------
    >>> with atomic_path("results/model.npz") as tmp:   # doctest: +SKIP
    ...     np.savez(tmp, W=W)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".tmp", suffix=f".{path.name}", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``os.umask`` sets it,
    briefly, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: First characters that make a spreadsheet read a text cell as a formula (``=SUM(1+2)``; OWASP, "CSV
#: injection"), and the quote that marks an escaped cell: such a cell is written with a ``'`` before it.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def escape_cell(value):
    """``value`` as a CSV/TSV cell a spreadsheet shows as text: a string starting with one of
    :data:`FORMULA_STARTS` gets a ``'`` before it (a number written as text, ``-0.5``, stays);
    anything else is returned as it is.  :func:`unescape_cell` undoes it."""
    if isinstance(value, str) and value[:1] in FORMULA_STARTS and not _is_number(value):
        return "'" + value
    return value


def unescape_cell(value):
    """The cell :func:`escape_cell` escaped, as it was (a string starting with ``'`` loses it)."""
    return value[1:] if isinstance(value, str) and value.startswith("'") else value


def escape_frame(df):
    """A copy of the DataFrame ``df`` with every text cell, column name and index label escaped
    (:func:`escape_cell`), for ``DataFrame.to_csv``."""
    out = df.copy()
    for j in range(out.shape[1]):
        if not _numeric_kind(out.iloc[:, j]):
            out.isetitem(j, out.iloc[:, j].map(escape_cell))
    out.columns = out.columns.map(lambda c: tuple(map(escape_cell, c)) if isinstance(c, tuple) else escape_cell(c))
    if not _numeric_kind(out.index):
        out.index = out.index.map(lambda c: tuple(map(escape_cell, c)) if isinstance(c, tuple) else escape_cell(c))
    return out


def _numeric_kind(values) -> bool:
    return getattr(values, "dtype", None) is not None and getattr(values.dtype, "kind", "O") in "biufcmM"


def unescape_frame(df, columns=None):
    """``df`` with the text cells of ``columns`` (default: every text column) and the column names
    unescaped in place (:func:`unescape_cell`); returns ``df``."""
    df.columns = [unescape_cell(c) for c in df.columns]
    for col in df.columns if columns is None else [c for c in columns if c in df.columns]:
        if not _numeric_kind(df[col]):
            df[col] = df[col].map(unescape_cell)
    return df


def write_tsv(path: str | os.PathLike, rows, columns=None) -> None:
    """Write dict rows as a tab-separated table with a header, atomically.

    ``columns`` defaults to the keys in order of first appearance; a missing value is empty.  Text
    cells and names that a spreadsheet would run as a formula are escaped (:func:`escape_cell`).
    """
    import csv

    rows = list(rows)
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    extra = {key for row in rows for key in row} - set(columns)
    if extra:
        raise ValueError(f"write_tsv: rows hold fields not in columns: {sorted(map(str, extra))}")
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow([escape_cell(c) for c in columns])
        writer.writerows([escape_cell(row.get(c, "")) for c in columns] for row in rows)


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
        if compress:
            np.savez_compressed(fh, **arrays)
        else:
            _savez_aligned(fh, arrays)


#: Alignment of the data of uncompressed members (a cache line; numpy's own ``.npy`` headers end on it).
_ALIGN = 64


def _savez_aligned(fh, arrays: Mapping[str, np.ndarray]) -> None:
    """``np.savez`` whose members' data start at a multiple of :data:`_ALIGN` bytes in the file.

    A padding field in each member's local zip header (id ``0xD935``, as ``zipalign`` uses) moves the
    member so that its ``.npy`` data (after a header numpy pads to 64 bytes) lands on the boundary;
    :class:`svbop._npz.NpzReader` then maps the data as an aligned array instead of copying it.
    ``np.load`` reads the file as any ``.npz``.
    """
    import struct
    import zipfile

    from numpy.lib import format as npy_format

    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, value in arrays.items():
            arr = value if isinstance(value, RowStream) else np.asanyarray(value)
            name = f"{key}.npy"
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.file_size = arr.nbytes + 4096  # decides zip64 (the local header's length) only
            zip64 = info.file_size * 1.05 > zipfile.ZIP64_LIMIT
            fixed = 30 + len(name.encode()) + (20 if zip64 else 0)
            pad = (-(fh.tell() + fixed + 4)) % _ALIGN
            info.extra = struct.pack("<HH", 0xD935, pad) + bytes(pad)
            with zf.open(info, "w", force_zip64=zip64) as out:
                _write_npy(out, value if isinstance(value, RowStream) else arr)


class RowStream:
    """A matrix written to an uncompressed ``.npz`` member block by block (:func:`save_arrays` with
    ``compress=False``): its ``shape``, ``dtype`` and an iterable of row blocks that together make
    ``shape[0]`` rows.  The writer holds one block at a time, so a member may exceed memory."""

    def __init__(self, shape, dtype, blocks) -> None:
        self.shape = tuple(int(v) for v in shape)
        self.dtype = np.dtype(dtype)
        self.blocks = blocks
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize


def _write_npy(out, arr) -> None:
    """One ``.npy`` into the writable ``out``; a large array (or a :class:`RowStream`) by row blocks,
    a mapped array's pages given back after each (:func:`svbop._blocks.row_blocks`)."""
    from numpy.lib import format as npy_format

    from ._blocks import BLOCK_BYTES, row_blocks

    stream = isinstance(arr, RowStream)
    if not stream and (arr.ndim == 0 or arr.nbytes < BLOCK_BYTES or not arr.flags.c_contiguous or arr.dtype.hasobject):
        npy_format.write_array(out, arr, allow_pickle=False)
        return
    header = {"descr": npy_format.dtype_to_descr(arr.dtype), "fortran_order": False, "shape": tuple(arr.shape)}
    try:
        npy_format.write_array_header_1_0(out, header)
    except ValueError:  # a header over 64 KiB: format 2.0
        npy_format.write_array_header_2_0(out, header)
    rows, row_shape = 0, tuple(arr.shape[1:])
    for block in (arr.blocks if stream else (b for _, _, b in row_blocks(arr))):
        block = np.ascontiguousarray(block, dtype=arr.dtype)
        if tuple(block.shape[1:]) != row_shape:
            raise ValueError(f"a block of shape {block.shape} in a matrix of shape {arr.shape}")
        out.write(memoryview(block.reshape(-1)).cast("B"))
        rows += block.shape[0]
    if rows != arr.shape[0]:
        raise ValueError(f"{rows} rows written to a matrix announced with {arr.shape[0]}")


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
        raise ValueError(f"{path}: {missing_or_not_regular(path)}")
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
    from ._blocks import row_blocks

    for lo, _, block in row_blocks(arr, chunk_rows):  # a mapped matrix's pages given back block by block
        if block.size and arr.dtype.kind == "f":  # two reductions, no temporaries: NaN fails both tests
            least, most = block.min(), block.max()
            if (least >= 0 and most <= 1) if probabilities else (np.isfinite(least) and np.isfinite(most)):
                continue
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


def load_score_groups(path: str | os.PathLike, *parts: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The per-row groups of a score file's parts (``format.group_column``, written by
    :func:`svbop.datasets.splits.split_groups`).

    Parameters
    ----------
    path : path
        The ``.npz`` score file.
    *parts : str
        The parts whose groups to read, e.g. ``"calibration", "test"``.

    Returns
    -------
    names : ndarray of str, shape (G,)
        The group names.
    codes : list of ndarray of int64
        Per part, each row's index into ``names``.

    Raises
    ------
    ValueError
        One line naming the file: no groups in it (the dataset has no ``format.group_column``),
        or codes that do not index ``names``.
    """
    with NpzReader(path, "score file") as data:
        if "group_names" not in data.files:
            raise ValueError(f"{path}: no per-row groups (key 'group_names'); the dataset has no format.group_column")
        names = data["group_names"]
        if names.ndim != 1 or names.dtype.kind not in "US":
            raise ValueError(f"{path}: key 'group_names': expected a 1-D array of names, got {names.dtype.name} of "
                             f"shape {names.shape}")
        codes = []
        for part in parts:
            g = data[f"g_{part}"]
            if g.ndim != 1 or g.dtype.kind not in "iu" or (g.size and (g.min() < 0 or g.max() >= names.size)):
                raise ValueError(f"{path}: key 'g_{part}': expected 1-D integer codes in 0..{names.size - 1}")
            codes.append(g.astype(np.int64, copy=False))
    return names.astype(np.str_), codes


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
