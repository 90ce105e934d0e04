"""Helpers shared by the format readers: files under a root, (compressed) text, parts and labels."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import zlib
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import IO

import numpy as np

from ..io import file_kind, inflate_bounds, inflate_problem

__all__ = [
    "resolve", "open_binary", "is_compressed", "open_text", "part_list", "encode_labels", "describe_parts",
    "part_array", "shorten", "OptionHint", "SEPARATORS", "separator_in", "share", "MAX_LINE_BYTES", "regular_file",
    "read_text_lines",
]

_OPENERS = {".gz": gzip.GzipFile, ".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}
#: Largest piece a line is read in (so that the decompression bound is checked within a long line).
_LINE_PIECE = 1 << 20
#: Longest line a text file may have (bytes, decompressed): a text reader stops with a ValueError
#: at the first longer line, so that a file with no line breaks (binary data, ``/dev/zero`` behind a
#: link) is refused after 64 MiB instead of read until memory runs out.  A scores CSV line of
#: 100,000 classes is about 2 MB.
MAX_LINE_BYTES = 64 << 20


def regular_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` when it is a regular file (links followed); else a one-line ValueError naming it.

    A FIFO would block the reader forever and a device (``/dev/zero``) never ends: both are refused
    before anything is opened.
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read this {what} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path}: is {file_kind(mode)}, not a regular file (the {what} must be a file)")
    return path


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

    For a compressed file (``source`` the compressed file under the decompressor) it also counts
    the inflated bytes and stops with a ValueError as soon as they break the decompression bound
    (:func:`svbop.io.inflate_bounds`) against the compressed bytes read so far: a decompression
    bomb is refused after a bounded amount of data, not when memory runs out.
    """

    def __init__(self, raw: IO[bytes], path: Path, source: IO[bytes] | None = None, max_line: int | None = None) -> None:
        super().__init__()
        self._raw, self._path, self._source = raw, path, source
        self._inflated = 0
        self._bounds = inflate_bounds() if source is not None else (0.0, 0)
        self._max_line = max_line
        self._run = 0  # bytes since the last line break
        self._lines = 0  # line breaks read so far

    def _check_line(self, data) -> None:
        """Refuse a line longer than ``max_line`` bytes as soon as that many bytes pass without a break."""
        cut = data.rfind(b"\n")
        if cut < 0:
            self._run += len(data)
        else:
            self._lines += data.count(b"\n")
            self._run = len(data) - cut - 1
        if self._run > self._max_line:
            raise ValueError(f"{self._path}: line {self._lines + 1} is longer than {self._max_line >> 20} MiB (no line break "
                             f"in {self._run:,} bytes): not a text file of lines")

    def _call(self, method, *args):
        try:
            out = method(*args)
        except READ_ERRORS as exc:
            kind = self._path.suffix.lower() if self._path.suffix.lower() in _OPENERS else "file"
            what = f"corrupt or truncated {kind} file" if kind != "file" else "unreadable file"
            raise ValueError(f"{self._path}: {what} ({type(exc).__name__}: {exc})") from None
        if self._source is not None:
            self._inflated += out if isinstance(out, int) else len(out)
            if self._inflated > self._bounds[1]:  # cheap test first: most files stay below the floor
                problem = inflate_problem(self._inflated, self._source.tell(), self._bounds)
                if problem is not None:
                    raise ValueError(f"{self._path}: {problem}")
        if self._max_line is not None and not isinstance(out, int):
            self._check_line(out)
        return out

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if (size is None or size < 0) and (self._source is not None or self._max_line is not None):
            pieces = []  # in pieces, so that the bound is checked while reading
            while piece := self._call(self._raw.read, _LINE_PIECE):
                pieces.append(piece)
            return b"".join(pieces)
        return self._call(self._raw.read, -1 if size is None else size)

    def read1(self, size: int = -1) -> bytes:
        if (size is None or size < 0) and (self._source is not None or self._max_line is not None):
            size = _LINE_PIECE
        return self._call(getattr(self._raw, "read1", self._raw.read), size)

    def readinto(self, buffer) -> int:
        if self._max_line is not None:
            data = self.read(len(memoryview(buffer).cast("B")))
            memoryview(buffer).cast("B")[: len(data)] = data
            return len(data)
        return self._call(self._raw.readinto, buffer)

    def readline(self, size: int | None = -1) -> bytes:
        size = -1 if size is None else size
        if self._source is None and self._max_line is None:
            return self._call(self._raw.readline, size)
        pieces: list[bytes] = []  # a long line in pieces, so that the bound is checked within it
        got = 0
        while size < 0 or got < size:
            want = _LINE_PIECE if size < 0 else min(_LINE_PIECE, size - got)
            piece = self._call(self._raw.readline, want)
            pieces.append(piece)
            got += len(piece)
            if len(piece) < want or piece.endswith(b"\n"):
                break
        return b"".join(pieces)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
            if self._source is not None:
                self._source.close()
        super().close()


def open_binary(path: str | os.PathLike, max_line: int | None = None) -> IO[bytes]:
    """Open a file for reading bytes, decompressing ``.gz``, ``.bz2`` and ``.xz`` by extension.

    Only a regular file is opened: a FIFO, a device or a folder raises ``ValueError("<path>: is a
    FIFO (named pipe), not a regular file ...")`` without blocking (it is opened non-blocking and
    checked before the first read).  Read errors (a truncated or mislabelled compressed file) raise
    ``ValueError("<path>: ...")``, and so does decompressed data that breaks the decompression bound
    of :func:`svbop.io.inflate_bounds` (more than ``SVBOP_INFLATE_RATIO`` times the compressed
    bytes read so far, beyond ``SVBOP_INFLATE_FLOOR_MB``), and, with ``max_line``, a line (of the
    decompressed bytes) longer than ``max_line`` bytes.
    """
    path = Path(path)
    opener = _OPENERS.get(path.suffix.lower())
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if isinstance(exc, IsADirectoryError):
            raise ValueError(f"{path}: is a folder, not a regular file") from None
        raise ValueError(f"{path}: cannot open ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path}: is {file_kind(mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        source = open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    if opener is None:
        return _NamedErrors(source, path, max_line=max_line)
    try:
        raw = opener(fileobj=source) if opener is gzip.GzipFile else opener(source)
    except READ_ERRORS as exc:
        source.close()
        raise ValueError(f"{path}: cannot open ({type(exc).__name__}: {exc})") from None
    return _NamedErrors(raw, path, source, max_line=max_line)


def is_compressed(path: str | os.PathLike) -> bool:
    """Whether :func:`open_binary` decompresses ``path`` (by its extension)."""
    return Path(path).suffix.lower() in _OPENERS


def open_text(path: str | os.PathLike, encoding: str = "utf-8", max_line: int | None = MAX_LINE_BYTES) -> IO[str]:
    """Open a (possibly compressed) text file; undecodable bytes raise with the file named by the caller.

    A line longer than ``max_line`` bytes (:data:`MAX_LINE_BYTES`) raises a ValueError naming the file
    and the line (``None``: no bound).
    """
    return io.TextIOWrapper(open_binary(path, max_line=max_line), encoding=encoding, newline=None)


def read_text_lines(path: str | os.PathLike, what: str = "value") -> list[str]:
    """The lines of a UTF-8 text file (possibly compressed), without their line breaks (``\\n``,
    ``\\r\\n`` or ``\\r``); trailing empty lines dropped.

    Raises
    ------
    ValueError
        ``"<path>: line <n>: not UTF-8 text (byte 0xe9 ...); the <what> file must be UTF-8"``, a line
        longer than :data:`MAX_LINE_BYTES`, or any error of :func:`open_binary` (not a regular file...).
    """
    path = Path(path)
    with open_binary(path, max_line=MAX_LINE_BYTES) as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}: line {line}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start:,}); "
                         f"the {what} file must be UTF-8") from None
    text = text.removeprefix("\ufeff")  # the byte order mark a spreadsheet's "UTF-8 CSV" starts with
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def undecodable_line(path: str | os.PathLike, encoding: str = "utf-8") -> tuple[int, int] | None:
    """``(line number, offending byte)`` of the first line of ``path`` that is not ``encoding``, or None."""
    import codecs

    decoder = codecs.getincrementaldecoder(encoding)()
    with open_binary(path, max_line=MAX_LINE_BYTES) as fh:
        for i, raw in enumerate(fh, 1):
            try:
                decoder.decode(raw)
            except UnicodeDecodeError as exc:
                return i, raw[exc.start] if exc.start < len(raw) else 0
    return None


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


#: Characters that separate fields or labels in the wild, and their names for messages.
SEPARATORS = {"\t": "tab", ";": "semicolon", "|": "pipe", ",": "comma"}


def separator_in(texts: Sequence[str], candidates: Sequence[str] = tuple(SEPARATORS)) -> tuple[str | None, int]:
    """The candidate separator found in the most of ``texts``, and in how many (``(None, 0)``: none).

    Ties go to the earlier candidate.

    Examples
    --------
    >>> separator_in(["a;b", "c", "d;e,f"])
    (';', 2)
    """
    best, best_n = None, 0
    for c in candidates:
        n = sum(c in t for t in texts)
        if n > best_n:
            best, best_n = c, n
    return best, best_n


def share(n: int, total: int) -> str:
    """``"66 of 1,000 rows (6.6 %)"``: a count, its total and the percentage, for log lines."""
    return f"{n:,} of {total:,} rows ({100.0 * n / max(total, 1):.1f} %)"


class OptionHint(ValueError):
    """A parse error whose likely fix is a reader option: the message ends in the option to set.

    ``str(error)`` is ``"<message>: set `<setting>`"`` followed by ``" under <where>"`` once the
    config key is known: :func:`svbop.datasets.read_dataset` sets ``where`` to the dataset's
    ``format`` key (``datasets.<name>.format``), so a user reads which key of which entry to edit.

    Parameters
    ----------
    message : str
        What is wrong, naming the file.
    setting : str
        The option as it would be written in the config, e.g. ``sep: "\\t"``.
    where : str, optional
        The config key the option goes under.
    """

    def __init__(self, message: str, setting: str, where: str | None = None) -> None:
        super().__init__(message)
        self.message, self.setting, self.where = message, setting, where

    def __str__(self) -> str:
        return f"{self.message}: set `{self.setting}`" + (f" under {self.where}" if self.where else "")
