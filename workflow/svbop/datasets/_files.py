"""Helpers shared by the format readers: files under a root, (compressed) text, parts and labels."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import zlib
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import IO

import numpy as np

__all__ = ["resolve", "open_binary", "open_text", "part_list", "encode_labels", "describe_parts", "part_array", "shorten"]

_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def resolve(root: str | os.PathLike | None, name: str | os.PathLike, what: str = "file") -> Path:
    """``root / name`` (``name`` as is when absolute or ``root`` is None); it must exist.

    Raises
    ------
    ValueError
        ``"<path>: no such <what>"`` when it does not exist.
    """
    path = Path(name)
    if root is not None and not path.is_absolute():
        path = Path(root) / path
    if not path.exists():
        raise ValueError(f"{path}: no such {what}")
    return path


#: What reading a damaged file raises: a .gz that is not gzip (BadGzipFile, an OSError) or ends
#: early (EOFError), corrupt deflate / bz2 / xz data, an I/O error.
READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


class _NamedErrors(io.BufferedIOBase):
    """A binary stream whose read errors become a ValueError naming the file.

    The decompressors of :mod:`gzip`, :mod:`bz2` and :mod:`lzma` raise ``EOFError`` or
    ``BadGzipFile`` without the file's name, mid-way through a read; every reader reads through
    this wrapper, so a truncated or mislabelled file is reported as ``"<path>: ..."``.
    """

    def __init__(self, raw: IO[bytes], path: Path) -> None:
        super().__init__()
        self._raw, self._path = raw, path

    def _call(self, method, *args):
        try:
            return method(*args)
        except READ_ERRORS as exc:
            kind = self._path.suffix.lower() if self._path.suffix.lower() in _OPENERS else "file"
            what = f"corrupt or truncated {kind} file" if kind != "file" else "unreadable file"
            raise ValueError(f"{self._path}: {what} ({type(exc).__name__}: {exc})") from None

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self._call(self._raw.read, -1 if size is None else size)

    def read1(self, size: int = -1) -> bytes:
        return self._call(getattr(self._raw, "read1", self._raw.read), size)

    def readinto(self, buffer) -> int:
        return self._call(self._raw.readinto, buffer)

    def readline(self, size: int | None = -1) -> bytes:
        return self._call(self._raw.readline, -1 if size is None else size)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a file for reading bytes, decompressing ``.gz``, ``.bz2`` and ``.xz`` by extension.

    Read errors (a truncated or mislabelled compressed file) raise ``ValueError("<path>: ...")``.
    """
    path = Path(path)
    opener = _OPENERS.get(path.suffix.lower())
    try:
        raw = opener(path, "rb") if opener else open(path, "rb")
    except OSError as exc:
        raise ValueError(f"{path}: cannot open ({exc.strerror or exc})") from None
    return _NamedErrors(raw, path)


def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> IO[str]:
    """Open a (possibly compressed) text file; undecodable bytes raise with the file named by the caller."""
    return io.TextIOWrapper(open_binary(path), encoding=encoding, newline=None)


# --------------------------------------------------------------------------------------------
# Parts and labels
# --------------------------------------------------------------------------------------------


def part_list(parts: Mapping[str, Sequence[str | os.PathLike]]) -> list[tuple[str, list[str | os.PathLike]]]:
    """``parts`` as a list of ``(part name, file names)``; a single name stands for a one-item list.

    Raises
    ------
    ValueError
        If ``parts`` is not a non-empty mapping or a part lists no file.
    """
    if not isinstance(parts, Mapping) or not parts:
        raise ValueError(f"parts: expected a non-empty mapping of part name to a list of files, got {parts!r}")
    out = []
    for part, names in parts.items():
        if isinstance(names, (str, os.PathLike)):
            names = [names]
        names = list(names)
        if not names:
            raise ValueError(f"parts[{part!r}]: lists no files")
        out.append((str(part), names))
    return out


def encode_labels(labels: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Sorted class names and class indices of raw labels.

    Integer labels are sorted numerically and then written as ``str``; string labels are
    sorted lexicographically (by code point).

    Returns
    -------
    class_names : list of str
    y : ndarray of int64
    """
    labels = np.asarray(labels)
    if labels.dtype.kind in "OS":
        labels = labels.astype(np.str_)
    uniq, y = np.unique(labels, return_inverse=True)
    return [str(v) for v in uniq.tolist()], y.astype(np.int64).reshape(-1)


def describe_parts(parts: list[tuple[str, list]]) -> str:
    """``"train: a.txt, b.txt; test: c.txt"`` (file names as given in the config)."""
    return "; ".join(f"{part}: {', '.join(str(n) for n in names)}" for part, names in parts)


def part_array(names: list[str], counts: list[int]) -> np.ndarray:
    """The part name of every row: ``names[i]`` repeated ``counts[i]`` times."""
    if not names:
        return np.zeros(0, dtype=np.str_)
    return np.repeat(np.asarray(names, dtype=np.str_), np.asarray(counts, dtype=np.int64))


def shorten(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters (``...`` marks a cut), for error messages."""
    text = text.rstrip("\r\n")
    return text if len(text) <= width else text[: width - 3] + "..."
