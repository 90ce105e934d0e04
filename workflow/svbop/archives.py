"""Lay out a dataset's raw folder from its downloads: unpack archives, link plain files.

The pipeline keeps what was downloaded (``data/<dataset>/downloads``, checksummed, never
modified) apart from what the readers see (``data/<dataset>/raw``): archives are unpacked there
and plain files are linked, so a reader's paths are the same whether a file came packed or not.
"""

from __future__ import annotations

import logging
import os
import shutil
import tarfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ARCHIVE_SUFFIXES", "is_archive_name", "unpack_archive", "build_raw_folder"]

logger = logging.getLogger(__name__)

#: File name endings unpacked by :func:`unpack_archive`.
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")


def is_archive_name(name: str) -> bool:
    """Whether ``name`` ends like an archive :func:`unpack_archive` understands."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def unpack_archive(archive: str | os.PathLike, dest: str | os.PathLike) -> int:
    """Unpack a tar (plain, gz, bz2, xz) or zip archive into ``dest``; return the member count.

    Members that would land outside ``dest`` (absolute paths, ``..``), links pointing outside it
    and device files are refused (tar's ``"data"`` filter; the same check for zip).

    Raises
    ------
    ValueError
        If the file is not a readable archive, is truncated, or holds an unsafe member; the
        message names the archive.
    """
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                root = dest.resolve()
                for info in zf.infolist():
                    target = (dest / info.filename).resolve()
                    if root != target and root not in target.parents:
                        raise ValueError(f"{archive}: member {info.filename!r} would be written outside {dest}")
                zf.extractall(dest)
                n = len(zf.infolist())
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tf:
                members = tf.getmembers()
                tf.extractall(dest, members=members, filter="data")
                n = len(members)
        else:
            raise ValueError(f"{archive}: not a tar or zip archive (or an unsupported compression)")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise ValueError(f"{archive}: cannot unpack ({type(exc).__name__}: {exc}); the file may be truncated") from None
    logger.info("unpacked %s (%d members) into %s in %.1f s", archive, n, dest, time.perf_counter() - t0)
    return n


def build_raw_folder(
    downloads: str | os.PathLike,
    raw: str | os.PathLike,
    files: Sequence[str],
    unpack: Sequence[str] = (),
) -> Path:
    """Make ``raw`` hold every file of ``downloads`` (linked) and the contents of the archives.

    Parameters
    ----------
    downloads : path
        Folder of the downloaded files.
    raw : path
        Folder to create; it is built under a temporary name and renamed when complete, so an
        interrupted run leaves no half-built folder.
    files : sequence of str
        Names of the downloaded files.  Each is linked (relative symlink) into ``raw`` unless
        it is unpacked.
    unpack : sequence of str
        Archives to unpack into ``raw``, in order: a name in ``files`` (unpacked from
        ``downloads``) or a path inside ``raw`` produced by an earlier entry (a nested archive,
        unpacked into its own folder and then deleted from ``raw``).

    Raises
    ------
    ValueError
        If an entry of ``unpack`` is neither a downloaded file nor a path in ``raw`` by then,
        or an archive cannot be unpacked (the message names it).
    """
    downloads, raw = Path(downloads), Path(raw)
    tmp = raw.with_name(f".tmp{os.getpid()}.{raw.name}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        to_unpack = list(unpack)
        for name in files:
            if name not in to_unpack:
                src = downloads / name
                if not src.exists():
                    raise ValueError(f"{src}: no such file (a file of this dataset has not been downloaded)")
                os.symlink(os.path.relpath(src.resolve(), tmp.resolve()), tmp / name)
        for entry in to_unpack:
            if entry in files:
                unpack_archive(downloads / entry, tmp)
            else:
                nested = tmp / entry
                if not nested.is_file():
                    raise ValueError(
                        f"unpack: {entry!r} is neither a downloaded file ({', '.join(files)}) nor a file "
                        f"in the raw folder after unpacking the entries before it"
                    )
                unpack_archive(nested, nested.parent)
                nested.unlink()
        if raw.exists():
            shutil.rmtree(raw)
        os.replace(tmp, raw)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return raw
