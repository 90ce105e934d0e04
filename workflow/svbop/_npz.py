"""Reading ``.npz`` / ``.npy`` files safely: the lowest layer of :mod:`svbop.io`.

:class:`NpzReader` and the header and decompression checks live here, below :mod:`svbop.sets`,
so that :meth:`svbop.sets.SetPredictions.load` can use them without importing :mod:`svbop.io`
(which imports :mod:`svbop.sets`).  :mod:`svbop.io` re-exports every name; use them from there.
"""

from __future__ import annotations

import mmap
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ._memory import FileMapping

__all__ = ["UNREADABLE_NPZ", "INFLATE_RATIO", "INFLATE_FLOOR_MB", "inflate_bounds", "inflate_problem", "check_npy_header", "NpzReader"]

#: Uncompressed ``.npz`` members of at least this many bytes are mapped, not copied (:meth:`NpzReader._read_stored`).
_MAP_BYTES = 1 << 24
#: Only members whose data start at a multiple of this many bytes are mapped (an array at an odd
#: address is slower to compute on, and a compiled kernel would be compiled again for it).
_ALIGN = 64

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


def missing_or_not_regular(path: Path) -> str:
    """Why ``path`` is not a file to read: ``"no such file"``, or ``"is a FIFO (named pipe), not a
    regular file"`` (a FIFO would block a reader, a device such as ``/dev/zero`` never ends)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "no such file"
    return f"is {file_kind(mode)}, not a regular file"


def file_kind(mode: int) -> str:
    """What a non-regular file is, from its ``st_mode``: ``"a FIFO (named pipe)"``, ``"a folder"``..."""
    import stat

    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


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
            raise ValueError(f"{self.path}: {missing_or_not_regular(self.path)}")
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
        stored = self._read_stored(key)
        if stored is not None:
            return stored
        try:
            return self._data[key]
        except ValueError as exc:
            raise ValueError(f"{self.path}: key {key!r} cannot be read without pickle ({exc})") from None
        except UNREADABLE_NPZ as exc:  # a damaged member of the zip
            raise ValueError(f"{self.path}: key {key!r} is damaged ({type(exc).__name__}: {exc})") from None

    def _read_stored(self, key: str) -> np.ndarray | None:
        """An uncompressed member (a matrix of scores, ``compress=False``) as an array over its
        bytes in the file, without numpy's copies; ``None`` for other members.

        numpy reads a member through :mod:`zipfile` in chunks of bytes that it then copies into
        freshly allocated memory, with a CRC over every byte: 0.8-0.95 CPU s (mostly the kernel's
        page faults) for the 240 MB of float32 scores that every prediction job of the pipeline
        reads.  A member of at least :data:`_MAP_BYTES` is mapped copy-on-write instead (a
        writable array; a write copies only the pages it touches; reading the whole matrix costs
        about 0.04 s), a smaller one read with one ``readinto``.  The member's header was checked
        against its size by :meth:`_check_member`.
        """
        from numpy.lib import format as npy_format

        zf = self._data.zip
        member = f"{key}.npy" if f"{key}.npy" in zf.NameToInfo else key
        info = zf.NameToInfo.get(member)
        if info is None or info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            return None
        try:
            with open(self.path, "rb") as fh:
                fh.seek(info.header_offset)
                local = fh.read(30)
                if len(local) != 30 or local[:4] != b"PK\x03\x04":
                    return None
                names = int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
                start = info.header_offset + 30 + names  # the file name and extra field follow
                fh.seek(start)
                version = npy_format.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
                else:
                    return None
                if dtype.hasobject or fortran or fh.tell() - start + int(np.prod(shape)) * dtype.itemsize != info.file_size:
                    return None  # numpy's own reader decides (and _check_member has named real damage)
                offset, nbytes = fh.tell(), int(np.prod(shape)) * dtype.itemsize
                if nbytes >= _MAP_BYTES and offset % _ALIGN == 0:  # mapped copy-on-write, aligned
                    # (svbop.io.save_arrays aligns its members): pages come from the page cache as read
                    buffer = FileMapping(fh.fileno(), 0, access=mmap.ACCESS_COPY)
                    return np.ndarray(shape, dtype=dtype, buffer=buffer, offset=offset)
                arr = np.empty(shape, dtype=dtype)
                if nbytes and fh.readinto(memoryview(arr.reshape(-1)).cast("B")) != nbytes:
                    return None
                return arr
        except (OSError, ValueError, EOFError, SyntaxError, TypeError):
            return None

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

    def _check_width(self, prefix: str, shape: list[int], indices: np.ndarray, indptr: np.ndarray) -> None:
        """Check the shape a sparse matrix's ``<prefix>_shape`` claims against what the file holds.

        Its rows are backed by ``indptr`` (one entry each, plus one).  Its columns are backed by
        nothing: a width of 2^40 in a 1 kB file costs nothing to read, then terabytes wherever the
        matrix is used (a column map, a transpose, a product allocate some bytes per column).  So
        the columns may cost at most what a compressed member may inflate to (:func:`inflate_bounds`, at
        8 bytes a column: 8 million columns for any file, more for a larger one); a wider claim is
        refused here (an entry in column 2^40 - 1 does not back 2^40 columns: it is one entry).
        """
        n_rows, n_cols = shape
        if indptr.ndim != 1 or indptr.size != n_rows + 1:
            raise ValueError(f"{self.path}: {prefix}_shape claims {n_rows} rows, but {prefix}_indptr has "
                             f"{indptr.size} entries ({n_rows + 1} expected)")
        ratio, floor = inflate_bounds()
        room = int(max(floor, ratio * self._size))
        if 8 * n_cols > room:
            used = int(indices.max()) + 1 if indices.size else 0
            raise ValueError(
                f"{self.path}: {prefix}_shape claims {n_cols} columns (its entries use {used}) in a file of "
                f"{self._size} bytes: refused as a damaged or hostile header (a width costs 8 bytes a column where the "
                f"matrix is used, here at most {room >> 20} MiB; the environment variables SVBOP_INFLATE_RATIO and "
                f"SVBOP_INFLATE_FLOOR_MB raise the bound)")

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
        self._check_width(prefix, [int(v) for v in shape], parts[1], parts[2])
        try:
            X = sp.csr_matrix(parts, shape=tuple(int(v) for v in shape))
            X.check_format(full_check=True)  # indices in range, indptr non-decreasing: O(nnz), once
        except ValueError as exc:
            raise ValueError(f"{self.path}: inconsistent sparse {prefix!r} ({exc})") from None
        return X
