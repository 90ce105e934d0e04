"""Lay out a dataset's raw folder from its downloads: unpack archives, link plain files.

The pipeline keeps what was downloaded (``data/<dataset>/downloads``, checksummed, never
modified) apart from what the readers see (``data/<dataset>/raw``): archives are unpacked there
and plain files are linked, so a reader's paths are the same whether a file came packed or not.

Archives come from URLs a user added, so :func:`unpack_archive` trusts none of their members and
does not rely on :mod:`tarfile`'s extraction filters (missing before Python 3.10.12/3.11.4 and
bypassed in several releases after, e.g. CVE-2025-4517's symlink chain on 3.11.7). It extracts
member by member, itself: only folders and regular files are created (modes reduced to
``rw-r--r--`` plus the owner's execute bit), each member's path is checked segment by segment
(``lstat``, never following a link) below the destination, and no symbolic link is ever created.
"""

from __future__ import annotations

import logging
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from .io import _umask

__all__ = ["ARCHIVE_SUFFIXES", "is_archive_name", "relative_path_problem", "unpack_archive", "build_raw_folder"]

logger = logging.getLogger(__name__)

#: File name endings unpacked by :func:`unpack_archive`.
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")

# Errors of a damaged, truncated or unsupported archive (decompressors raise their own, and
# bz2/gzip raise OSError subclasses: writing errors are told apart by _WriteError).
_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, NotImplementedError,
                RuntimeError, OSError)
_CHUNK = 1 << 20
_MAX_LINK_TARGET = 4096  # bytes of a zip symlink entry's target (its content)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_SEP = re.compile(r"[/\\]")
_DISK_RESERVE = 1 << 30  # bytes an archive may not take from the free disk space


def _show(name: str, width: int = 120) -> str:
    """``repr(name)``, cut to ``width`` characters (a member name can be thousands long)."""
    text = repr(name)
    return text if len(text) <= width else text[: width - 4] + "...'"


def is_archive_name(name: str) -> bool:
    """Whether ``name`` ends like an archive :func:`unpack_archive` understands."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


class _Unsafe(Exception):
    """A member that would write outside the destination, or something other than a file or folder."""

    def __init__(self, member: str, reason: str):
        super().__init__(member, reason)
        self.member, self.reason = member, reason


class _WriteError(Exception):
    """Writing a member failed (disk full, name too long, ...): not the archive's fault."""

    def __init__(self, member: str, exc: OSError):
        super().__init__(member, exc)
        self.member, self.exc = member, exc


def _member_parts(name: str) -> tuple[str, ...]:
    """A member's path as segments below the destination (``.`` and empty segments dropped).

    ``/`` and ``\\`` both separate segments, so a name is refused under either reading.
    """
    if "\x00" in name:
        raise _Unsafe(name, "its name contains a NUL character")
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", name):
        raise _Unsafe(name, "it is an absolute path")
    parts = tuple(p for p in _SEP.split(name) if p not in ("", "."))
    if ".." in parts:
        raise _Unsafe(name, "its path contains '..'")
    return parts


def _link_parts(name: str, linkname: str, base: tuple[str, ...]) -> tuple[str, ...]:
    """The member a link names, resolved as text from ``base`` (never through the file system)."""
    if not linkname or linkname.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", linkname) or "\x00" in linkname:
        raise _Unsafe(name, f"it is a link to {_show(linkname)}, an absolute or empty path")
    parts = list(base)
    for seg in _SEP.split(linkname):
        if seg == "..":
            if not parts:
                raise _Unsafe(name, f"it is a link to {_show(linkname)}, which is outside the destination")
            parts.pop()
        elif seg not in ("", "."):
            parts.append(seg)
    return tuple(parts)


class _Extractor:
    """Writes members below ``root``: folders, regular files, and links as hard links to regular
    files this archive wrote before them. Every path is walked with ``lstat`` from ``root``, so
    no symbolic link (one already in the folder, such as a linked download) is ever followed."""

    def __init__(self, root: Path, max_bytes: int):
        self.root = root
        self.files: set[tuple[str, ...]] = set()  # regular files written from this archive
        self.max_bytes, self.written = max_bytes, 0  # a bound on the bytes unpacked (the disk)

    def _folder(self, name: str, parts: tuple[str, ...]) -> Path:
        """The folder ``root/parts``, created as needed; refused if a segment is a link or a file."""
        path = self.root
        for seg in parts:
            path = path / seg
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                try:
                    os.mkdir(path, 0o755)
                except OSError as exc:
                    raise _WriteError(name, exc) from None
                continue
            except OSError as exc:
                raise _WriteError(name, exc) from None
            if stat.S_ISLNK(st.st_mode):
                raise _Unsafe(name, f"its path passes through the symbolic link {path}")
            if not stat.S_ISDIR(st.st_mode):
                raise _Unsafe(name, f"its path passes through {path}, which is not a folder")
        return path

    def _replaceable(self, name: str, path: Path) -> None:
        """Remove an earlier regular file at ``path`` (a later member replaces it, as tar does);
        refuse to replace a link or a folder."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _WriteError(name, exc) from None
        if stat.S_ISLNK(st.st_mode):
            raise _Unsafe(name, f"it would replace the symbolic link {path}")
        if not stat.S_ISREG(st.st_mode):
            raise _Unsafe(name, f"it would replace {path}, which is not a regular file")
        try:
            os.unlink(path)
        except OSError as exc:
            raise _WriteError(name, exc) from None

    def folder(self, name: str, parts: tuple[str, ...]) -> None:
        self._folder(name, parts)

    def file(self, name: str, parts: tuple[str, ...], source: BinaryIO, mode: int) -> None:
        if not parts:
            raise _Unsafe(name, "it names the destination folder itself")
        path = self._folder(name, parts[:-1]) / parts[-1]
        self._replaceable(name, path)
        self.files.discard(parts)
        mode = 0o644 | (0o111 if mode & 0o100 else 0)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | getattr(os, "O_BINARY", 0), mode)
        except OSError as exc:
            raise _WriteError(name, exc) from None
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(_CHUNK):  # a read error is the archive's (caller's except)
                self.written += len(chunk)
                if self.written > self.max_bytes:
                    raise _Unsafe(name, f"the archive unpacks to more than {self.max_bytes / (1 << 20):,.0f} MB "
                                        "(the free disk space, less 1 GB kept free)")
                try:
                    out.write(chunk)
                except OSError as exc:
                    raise _WriteError(name, exc) from None
            try:
                out.flush()
            except OSError as exc:
                raise _WriteError(name, exc) from None
        self.files.add(parts)

    def link(self, name: str, parts: tuple[str, ...], target: tuple[str, ...], linkname: str) -> None:
        if not parts:
            raise _Unsafe(name, "it names the destination folder itself")
        if target not in self.files or target == parts:
            raise _Unsafe(name, f"it is a link to {_show(linkname)}, which is not a regular file unpacked before it from "
                                "this archive (links are unpacked as copies of such files only)")
        source = self.root.joinpath(*target)
        path = self._folder(name, parts[:-1]) / parts[-1]
        self._replaceable(name, path)
        self.files.discard(parts)
        try:
            os.link(source, path, follow_symlinks=False)
        except OSError:  # no hard links on this file system: copy
            with open(source, "rb") as src:
                self.file(name, parts, src, os.lstat(source).st_mode)
        self.files.add(parts)


def _unpack_tar(archive: Path, out: _Extractor) -> int:
    n = 0
    with tarfile.open(archive) as tf:
        for member in tf:  # one pass: each member's data is read before the next header
            n += 1
            name = member.name
            parts = _member_parts(name)
            if member.isdir():
                out.folder(name, parts)
            elif member.isreg():
                with tf.extractfile(member) as src:
                    out.file(name, parts, src, member.mode)
            elif member.issym() or member.islnk():
                # a symlink's target is relative to its folder, a hard link's to the archive's root
                base = parts[:-1] if member.issym() else ()
                out.link(name, parts, _link_parts(name, member.linkname, base), member.linkname)
            else:
                kind = {tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
                        tarfile.FIFOTYPE: "a FIFO"}.get(member.type, f"of tar type {member.type!r}")
                raise _Unsafe(name, f"it is {kind}, not a regular file or folder")
    return n


def _unpack_zip(archive: Path, out: _Extractor) -> int:
    with zipfile.ZipFile(archive) as zf:
        members = zf.infolist()
        for info in members:
            name = info.filename
            parts = _member_parts(name)
            mode = info.external_attr >> 16 if info.create_system == 3 else 0  # unix mode bits
            if info.is_dir():
                out.folder(name, parts)
            elif stat.S_ISLNK(mode):
                if info.file_size > _MAX_LINK_TARGET:
                    raise _Unsafe(name, f"it is a symbolic link with a {info.file_size}-byte target")
                linkname = zf.read(info).decode("utf-8", errors="replace")
                out.link(name, parts, _link_parts(name, linkname, parts[:-1]), linkname)
            elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                raise _Unsafe(name, f"it is a special file (mode {mode:o}), not a regular file or folder")
            else:
                with zf.open(info) as src:
                    out.file(name, parts, src, mode)
    return len(members)


def unpack_archive(archive: str | os.PathLike, dest: str | os.PathLike, max_bytes: int | None = None) -> int:
    """Unpack a tar (plain, gz, bz2, xz) or zip archive into ``dest``; return the member count.

    Only folders and regular files are created, below ``dest``: a member with an absolute name,
    a ``..`` segment, a path through a symbolic link (one already in ``dest``: the archive never
    creates any) or a file that is not a folder, or one that is a device or FIFO, is refused.
    A symbolic or hard link is unpacked as a hard link (a copy where the file system has none) to
    a regular file unpacked before it from the same archive, its target read as text below
    ``dest``; any other link is refused. File modes are reduced to ``rw-r--r--`` plus the owner's
    execute bit. These checks are the module's own, on every Python version, not
    :mod:`tarfile`'s filters.

    Parameters
    ----------
    archive : path
        The archive; its kind is found from its content, not its name.
    dest : path
        The folder to unpack into (created if missing). On an error it may hold the members
        before the failing one; nothing is ever written outside it.
    max_bytes : int, optional
        The most bytes the members may add up to; more is refused while unpacking (a
        decompression bomb cannot fill the disk).  Default: the free space on ``dest``'s file
        system less 1 GB.

    Returns
    -------
    int
        The number of members.

    Raises
    ------
    ValueError
        Naming the archive: ``"unsafe member '<name>' refused (<why>)"``; a member that cannot be
        written (disk full, ...); or an archive that cannot be read (``"cannot unpack (...); the
        file may be truncated or corrupt"``), or is not a tar or zip archive.
    """
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if max_bytes is None:
        max_bytes = shutil.disk_usage(dest).free - _DISK_RESERVE
    out = _Extractor(dest.resolve(), max_bytes)
    try:
        if not archive.is_file():
            raise ValueError(f"{archive}: no such file")
        if zipfile.is_zipfile(archive):
            n = _unpack_zip(archive, out)
        elif tarfile.is_tarfile(archive):
            n = _unpack_tar(archive, out)
        else:
            raise ValueError(f"{archive}: not a tar or zip archive (or an unsupported compression)")
    except _Unsafe as exc:
        raise ValueError(f"{archive}: unsafe member {_show(exc.member)} refused ({exc.reason}); "
                         f"nothing was written outside {dest}") from None
    except _WriteError as exc:
        raise ValueError(f"{archive}: cannot write member {_show(exc.member)} into {dest} "
                         f"({type(exc.exc).__name__}: {exc.exc})") from None
    except _READ_ERRORS as exc:
        raise ValueError(f"{archive}: cannot unpack ({type(exc).__name__}: {exc}); "
                         "the file may be truncated or corrupt") from None
    logger.info("unpacked %s (%d members) into %s in %.1f s", archive, n, dest, time.perf_counter() - t0)
    return n


def relative_path_problem(path: str, strict: bool = True) -> str | None:
    """Why ``path`` is not a relative path inside a folder (None when it is), as the end of a
    sentence: absolute, a NUL character, a ``..`` segment, or (``strict``) a ``\\``, ``.`` or
    empty segment.  The config checks and :func:`build_raw_folder` use it for ``unpack`` entries."""
    if path.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", path):
        return "is an absolute path"
    if "\x00" in path:
        return "contains a NUL character"
    parts = re.split(r"[/\\]", path)
    if ".." in parts:
        return "contains a '..' segment"
    if strict and "\\" in path:
        return "contains '\\' (separate folders with '/')"
    if strict and any(p in ("", ".") for p in parts):
        return "has an empty or '.' segment"
    return None


def _plain_name(name: str) -> bool:
    """Whether ``name`` is one path segment (not ``.``, ``..`` or empty; no separator)."""
    return bool(name) and name not in (".", "..") and not _SEP.search(name) and "\x00" not in name


def _raw_entry(tmp: Path, entry: str, files: Sequence[str]) -> Path:
    """The regular file ``tmp/entry`` (a nested archive), reached without following any link."""
    parts = _SEP.split(entry)
    if problem := relative_path_problem(entry):
        raise ValueError(
            f"unpack: {entry!r} is neither one of the dataset's files nor a relative path inside the raw folder: "
            f"it {problem}"
        )
    path = tmp
    for i, seg in enumerate(parts):
        path = path / seg
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is None or stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) if i < len(parts) - 1 else stat.S_ISREG(mode)):
            raise ValueError(
                f"unpack: {entry!r} is neither a downloaded file ({', '.join(files)}) nor a file in the raw folder "
                "after unpacking the entries before it" + (" (its path is a symbolic link)" if mode is not None and
                                                           stat.S_ISLNK(mode) else "")
            )
    return path


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
        Names of the downloaded files (plain names, no ``/``).  Each is linked (relative
        symlink) into ``raw`` unless it is unpacked.
    unpack : sequence of str
        Archives to unpack into ``raw``, in order: a name in ``files`` (unpacked from
        ``downloads``) or a relative path inside ``raw`` produced by an earlier entry (a nested
        archive, unpacked into its own folder and then deleted from ``raw``).  Such a path may
        not be absolute, hold ``..``, ``.`` or empty segments, or pass through a symbolic link,
        so the only files ever deleted are regular files unpacked into the temporary folder.

    Raises
    ------
    ValueError
        If a name of ``files`` is not a plain name, an entry of ``unpack`` is neither a
        downloaded file nor a regular file in ``raw`` by then, or an archive cannot be unpacked
        (the message names it).
    """
    downloads, raw = Path(downloads), Path(raw)
    for name in files:
        if not _plain_name(name):
            raise ValueError(f"files: {name!r} is not a plain file name (no '/', '\\\\', '.' or '..')")
    raw.parent.mkdir(parents=True, exist_ok=True)
    # created exclusively under a random name: a link planted at a guessable name redirects nothing
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp.{raw.name}.", dir=raw.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's folder is private (0o700); raw/ is not
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
                nested = _raw_entry(tmp, entry, files)
                unpack_archive(nested, nested.parent)
                # unpacking creates no links, so this path is still below tmp; unlink only a file
                if stat.S_ISREG(os.lstat(nested).st_mode):
                    nested.unlink()
        if raw.exists():
            shutil.rmtree(raw)
        os.replace(tmp, raw)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return raw
