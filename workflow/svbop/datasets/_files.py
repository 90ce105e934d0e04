"""File helpers shared by the format readers: resolve names under a root, open (compressed) text."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
from pathlib import Path
from typing import IO

__all__ = ["resolve", "open_binary", "open_text"]

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


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a file for reading bytes, decompressing ``.gz``, ``.bz2`` and ``.xz`` by extension."""
    path = Path(path)
    opener = _OPENERS.get(path.suffix.lower())
    return opener(path, "rb") if opener else open(path, "rb")


def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> IO[str]:
    """Open a (possibly compressed) text file; undecodable bytes raise with the file named by the caller."""
    return io.TextIOWrapper(open_binary(path), encoding=encoding, newline=None)
