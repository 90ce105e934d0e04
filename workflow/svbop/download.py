"""Fetch data files once, resumably, and verify them by checksum.

:func:`fetch` makes one file exist with verified content, from exactly one kind of source
given in the config: ``url`` / ``urls`` (downloaded over ``http(s)://`` or copied from
``file://``, mirrors tried in order), ``path`` (a local copy the user already has, linked into
place) or ``manual`` (a page behind a login: the user puts the file in place by hand).

Downloads go to ``<dest>.part`` and are resumed with an HTTP ``Range`` request after an
interruption; transient failures are retried with exponential backoff.  A finished file is
checked against its configured ``sha256`` / ``md5`` digest (or, when none is configured, against
the digest recorded in ``<dest>.sha256`` on the first download, for the same URL or ``path``) before it is renamed onto
``dest``, so ``dest`` never holds a partial or corrupt file: a file that fails the check is moved
to ``<dest>.corrupt``.

Every mirror's answer is judged on its own: an HTML page where the file is not HTML (a login or
error page served with status 200), a body that does not start as its name says (``.gz``,
``.bz2``, ``.xz``, ``.zip``) or a checksum mismatch moves that copy aside and the next mirror is
tried; nothing is recorded for such a body.  Each file's bytes are bounded (``max_mb``, else
``size_mb`` with a margin, else :data:`DEFAULT_MAX_MB`) and each URL has an overall deadline
(``deadline``, all retries included) besides the per-read ``timeout``.

Examples
--------
>>> fetch("data/raw/mnist/train-images-idx3-ubyte.gz",          # doctest: +SKIP
...       urls=["https://mirror-a/train-images-idx3-ubyte.gz",
...             "https://mirror-b/train-images-idx3-ubyte.gz"],
...       sha256="...", where="datasets.mnist.files.train-images-idx3-ubyte.gz")
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

try:
    from tqdm.auto import tqdm as _tqdm
except ImportError:  # pragma: no cover - tqdm is optional
    _tqdm = None

__all__ = ["DownloadError", "ChecksumError", "ContentError", "DEFAULT_MAX_MB", "DEFAULT_DEADLINE",
           "SIDECAR_SUFFIXES", "file_digest", "sniff", "verify", "fetch"]

logger = logging.getLogger(__name__)

USER_AGENT = "svbop-downloader"
_HEX_DIGITS = {"sha256": 64, "md5": 32, "git_blob": 40}
_SCHEMES = ("http", "https", "file")
_RETRIED_CLIENT_STATUS = {408, 429}  # 4xx answers that are worth retrying
_GONE_STATUS = {404, 410}
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_UNSATISFIED_RANGE = re.compile(r"bytes\s+\*/(\d+)\s*$", re.IGNORECASE)

#: Bound on one file's bytes when neither ``max_mb`` nor ``size_mb`` is given (the largest file
#: of the paper's datasets is Caltech-256's tar, about 1.2 GB).
DEFAULT_MAX_MB = 8192
#: With only ``size_mb`` (an approximate size, for documentation), the bound is
#: ``size_mb * _SIZE_MARGIN + _SIZE_SLACK_MB``.
_SIZE_MARGIN, _SIZE_SLACK_MB = 1.5, 64
#: Seconds one URL may take, every retry included, when no ``deadline`` is given.
DEFAULT_DEADLINE = 3 * 3600.0
#: Files :func:`fetch` writes beside ``dest`` (``<dest><suffix>``), with what each holds: a
#: configured file name must not end so when its stem is another file of the same folder (its
#: temporary files start with ``.``, which no configured file name may).
SIDECAR_SUFFIXES = {".sha256": "its recorded sha256", ".part": "its partial download",
                    ".corrupt": "where a copy that fails its checks is moved"}

# What a file's first bytes must be, by the end of its name (compressed files and zip archives;
# plain tar has no reliable magic: v7 archives lack "ustar").
_MAGIC = (
    ((".tar.gz", ".tgz", ".gz"), (b"\x1f\x8b",), "gzip"),
    ((".tar.bz2", ".tbz2", ".bz2"), (b"BZh",), "bzip2"),
    ((".tar.xz", ".txz", ".xz"), (b"\xfd7zXZ\x00",), "xz"),
    ((".zip",), (b"PK\x03\x04", b"PK\x05\x06"), "zip"),
)
_HTML_NAMES = (".html", ".htm", ".xhtml")
_HTML_START = re.compile(rb"(\xef\xbb\xbf)?\s*(<!doctype\s+html|<html|<head|<body|<\?xml[^>]*>\s*<(!doctype\s+)?html)",
                         re.IGNORECASE)


class DownloadError(RuntimeError):
    """A file could not be obtained: network or HTTP failure after retries, a source that is no
    longer served (404/410), or a ``manual`` source whose file has not been put in place."""


class ChecksumError(ValueError):
    """A file's digest differs from the expected one; the message gives both digests and where
    the bad file was moved."""


class ContentError(DownloadError):
    """A body that is not the file: an HTML page, content that does not match the file's name,
    or more bytes than the file's bound.  Never recorded, never used; the message names the file,
    the URL and the reason."""


class _Transient(Exception):
    """A failure of one transfer attempt that is worth retrying (resuming from the .part)."""


class _Permanent(Exception):
    """A failure that retrying the same URL will not fix (try the next mirror)."""

    def __init__(self, message: str, gone: bool = False):
        super().__init__(message)
        self.gone = gone


# Failures of one attempt that are retried with backoff.  Local I/O errors (disk full,
# permissions) are not in this list and propagate at once.
_RETRIED = (
    _Transient,
    urllib.error.URLError,
    http.client.HTTPException,  # IncompleteRead, RemoteDisconnected, BadStatusLine, ...
    ConnectionError,  # ConnectionResetError, ConnectionRefusedError, BrokenPipeError
    TimeoutError,  # socket.timeout
)


# --------------------------------------------------------------------------------------------
# checksums
# --------------------------------------------------------------------------------------------


def _hasher(name: str, size: int):
    """A hashlib object for ``name``; ``"git_blob"`` is git's object id of a file's content: the
    sha1 of ``b"blob <size>\\0"`` followed by the content (so it pins the size too)."""
    if name == "git_blob":
        h = hashlib.sha1()
        h.update(b"blob %d\0" % size)
        return h
    return hashlib.new(name)


def _digests(path: Path, algorithms: Sequence[str], chunk_size: int = 1 << 20) -> dict[str, str]:
    """Hex digests of ``path`` for several algorithms, in one streamed pass."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        hashes = {name: _hasher(name, size) for name in algorithms}
        while chunk := fh.read(chunk_size):
            for h in hashes.values():
                h.update(chunk)
    return {name: h.hexdigest() for name, h in hashes.items()}


def file_digest(path: str | os.PathLike, algorithm: str = "sha256", chunk_size: int = 1 << 20) -> str:
    """Hex digest of a file, read in chunks (constant memory).

    Parameters
    ----------
    path : str or path-like
        The file.
    algorithm : str
        Any name :func:`hashlib.new` accepts (``"sha256"``, ``"md5"``, ...), or ``"git_blob"``
        (git's object id of the content: ``git hash-object <path>``).
    chunk_size : int
        Bytes read at a time.

    Returns
    -------
    str
        Lower-case hexadecimal digest.
    """
    return _digests(Path(path), [algorithm], chunk_size)[algorithm]


def sniff(head: bytes | None, name: str, content_type: str = "") -> str | None:
    """Why ``head`` (a file's first bytes) cannot be the start of a file named ``name``, or None.

    Refused: an HTML page (by ``content_type`` or by its first bytes) for a name that is not
    ``.html``/``.htm``; a compressed file or zip whose magic bytes are wrong (``.gz``, ``.tgz``,
    ``.bz2``, ``.xz``, ``.zip`` and their ``.tar.*`` forms); an empty file.

    Parameters
    ----------
    head : bytes or None
        The first bytes of the body (512 are plenty); None to judge ``content_type`` alone.
    name : str
        The file's name (its ending says what it must be).
    content_type : str
        The HTTP ``Content-Type`` of the answer, if any.

    Returns
    -------
    str or None
        The reason, for a message, or None when nothing is wrong.
    """
    lower = name.lower()
    if lower.endswith(_HTML_NAMES):
        return None
    if content_type.split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml"):
        return f"the server answered with an HTML page (Content-Type {content_type.strip()}), not the file"
    if head is None:  # the answer's headers alone
        return None
    if not head:
        return "it is empty"
    if _HTML_START.match(head[:512]):
        return "the body is an HTML page (a login, error or landing page?), not the file"
    for suffixes, magics, kind in _MAGIC:
        if lower.endswith(suffixes):
            if not head.startswith(magics):
                return f"it does not start like a {kind} file (first bytes {head[:8]!r}), as its name says it must"
            break
    return None


def _sniff_file(path: Path, name: str, content_type: str = "") -> str | None:
    with open(path, "rb") as fh:
        return sniff(fh.read(512), name, content_type)


def _max_bytes(max_mb: float | None, size_mb: float | None, where: str) -> int:
    """The bound on one file's bytes from ``max_mb`` / ``size_mb`` (see :func:`fetch`)."""
    for key, value in (("max_mb", max_mb), ("size_mb", size_mb)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"`{key}:` {_under(where)} must be a positive number of megabytes, got {value!r}")
    if max_mb is not None:
        mb = max_mb
    elif size_mb is not None:
        mb = size_mb * _SIZE_MARGIN + _SIZE_SLACK_MB
    else:
        mb = DEFAULT_MAX_MB
    return int(mb * (1 << 20))


def _key(where: str) -> str:
    """`` (config key `where`)`` or nothing, to append to a message."""
    return f" (config key `{where}`)" if where else ""


def _under(where: str) -> str:
    """Where a setting goes in the config, for advice in messages."""
    return f"under `{where}` in the config" if where else "for this file in the config"


def _expected_digest(value: str, algorithm: str, where: str) -> str:
    digest = str(value).strip().lower()
    if len(digest) != _HEX_DIGITS[algorithm] or not re.fullmatch(r"[0-9a-f]+", digest):
        raise ValueError(
            f"`{algorithm}:` {_under(where)} must be {_HEX_DIGITS[algorithm]} hexadecimal digits, got {value!r}"
        )
    return digest


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


_SOURCE_LINE = "# source: "


def _read_sidecar(sidecar: Path) -> tuple[str, str | None]:
    """The recorded digest and the source it was recorded for (None in sidecars written before
    sources were recorded: they match any source)."""
    lines = sidecar.read_text(encoding="utf-8", errors="replace").splitlines()
    text = lines[0].split() if lines else []
    digest = text[0].lower() if text else ""
    if len(digest) != 64 or not re.fullmatch(r"[0-9a-f]+", digest):
        raise ValueError(
            f"{sidecar}: not a recorded sha256 digest (expected '<64 hex digits>  <file name>'); "
            "delete it to record the digest again"
        )
    source = next((line[len(_SOURCE_LINE):].strip() for line in lines[1:] if line.startswith(_SOURCE_LINE)), None)
    return digest, source


def _write_sidecar(sidecar: Path, digest: str, name: str, source: str | None = None) -> None:
    """Write ``"<digest>  <name>\\n"`` (``sha256sum`` format) and the source line, atomically."""
    from .io import atomic_path  # created exclusively: no planted link at a guessable name

    with atomic_path(sidecar) as tmp:
        tmp.write_text(f"{digest}  {name}\n" + (f"{_SOURCE_LINE}{source}\n" if source else ""), encoding="utf-8")


def _check(
    file: Path,
    target: Path,
    *,
    sha256: str | None,
    md5: str | None,
    record: bool,
    git_blob: str | None = None,
    where: str,
    move_aside: bool,
    origin: str = "",
    source: str | None = None,
    sources: frozenset[str] | None = None,
    generated: bool = False,
) -> str:
    """Verify ``file`` as the content of ``target``; return its sha256.  ``generated``: the workflow made the
    file itself (a ``path:`` under its own ``results/``): a digest is recorded without a warning.

    The sidecar is ``<target>.sha256`` and a bad file goes to ``<target>.corrupt`` (when
    ``move_aside``; otherwise it is left where it is, e.g. a user's own copy given by ``path:``).
    A digest is recorded together with ``source`` (the URL downloaded from, or the local path);
    a recorded digest is used only while its source is one of ``sources`` (the config's current
    ones): a digest recorded for another URL or ``path:`` says nothing about this file, so it is
    replaced, with a WARNING, instead of failing the check.
    """
    if not file.is_file():
        raise ValueError(f"{file}: no such file to verify{_key(where)}")
    expected: dict[str, str] = {}
    if sha256 is not None:
        expected["sha256"] = _expected_digest(sha256, "sha256", where)
    if md5 is not None:
        expected["md5"] = _expected_digest(md5, "md5", where)
    if git_blob is not None:
        expected["git_blob"] = _expected_digest(git_blob, "git_blob", where)
    sidecar = _sidecar(target)
    recorded = not expected and sidecar.is_file()
    if recorded:
        digest, recorded_for = _read_sidecar(sidecar)
        if recorded_for is not None and sources is not None and recorded_for not in sources:
            logger.warning(
                "%s: the recorded sha256 in %s is for another source (%s; now %s)%s; recording this file's digest instead",
                target, sidecar, recorded_for, " or ".join(sorted(sources)), _key(where),
            )
            recorded = False
        else:
            expected["sha256"] = digest

    actual = _digests(file, ["sha256", *(name for name in expected if name != "sha256")])
    wrong = [name for name, digest in expected.items() if actual[name] != digest]
    if wrong:
        if move_aside:
            corrupt = target.with_name(target.name + ".corrupt")
            os.replace(file, corrupt)
            fate = f"The bad file was moved to {corrupt}; nothing was left at {target}."
        else:
            fate = f"The file was left in place (it is your own copy) and {target} was not linked to it."
        what = "; ".join(f"{name} expected {expected[name]}, actual {actual[name]}" for name in wrong)
        if recorded:
            source = f"the expected digest was recorded in {sidecar} when the file was first obtained"
            advice = (
                f"If the source legitimately changed, delete {sidecar} (or pin the new digest as "
                f"`sha256:` {_under(where)}) and rerun; otherwise rerun to obtain the file again."
            )
        else:
            source = f"the expected digest is `{wrong[0]}:` {_under(where)}"
            advice = (
                "Rerun to obtain the file again; if the mismatch persists, the source has changed: "
                f"check it and update the digest {_under(where)}."
            )
        raise ChecksumError(f"{target}{origin}: checksum mismatch: {what} ({source}). {fate} {advice}")

    if not expected and record:
        _write_sidecar(sidecar, actual["sha256"], target.name, source)
        (logger.info if generated else logger.warning)(
            "%s: no checksum configured%s; recorded sha256 %s in %s, which later runs verify against. "
            "To pin it, add `sha256: %s` %s.",
            target, _key(where), actual["sha256"], sidecar, actual["sha256"], _under(where),
        )
    return actual["sha256"]


def verify(
    path: str | os.PathLike,
    *,
    sha256: str | None = None,
    md5: str | None = None,
    git_blob: str | None = None,
    record: bool = True,
    where: str = "",
) -> str:
    """Check a file against its expected digest(s), recording a digest on first use.

    With ``sha256`` and/or ``md5`` given, each is checked.  With neither: if a sidecar
    ``<path>.sha256`` exists (a digest recorded when the file was first obtained), the file is
    checked against it; otherwise, when ``record`` is true, the sidecar is written (one line
    ``"<hex>  <filename>"``, like ``sha256sum``) and a WARNING is logged saying how to pin the
    digest in the config.  :func:`fetch` adds a line ``# source: url <URL>`` (or ``path <file>``)
    and uses a recorded digest only for the same source.

    Parameters
    ----------
    path : str or path-like
        The file to check.
    sha256, md5, git_blob : str, optional
        Expected hexadecimal digests (case and surrounding blanks ignored); ``git_blob`` is
        git's object id of the content (``git hash-object``), for files pinned by a repository's
        commit: it fixes the size and the content.
    record : bool
        Write the sidecar when no digest is known.
    where : str
        The config key path of this file (e.g. ``"datasets.mnist.files.train-images-idx3-ubyte.gz"``),
        used in messages.

    Returns
    -------
    str
        The sha256 hex digest of the file.

    Raises
    ------
    ChecksumError
        On a mismatch.  The file is first moved to ``<path>.corrupt`` (replacing an older one), so
        it is never left at ``path``; the message names both digests, the algorithm and the
        ``.corrupt`` path.
    ContentError
        With no digest configured, when the file is not what its name says (:func:`sniff`: an
        HTML page, wrong magic bytes): it is moved to ``<path>.corrupt`` and a recorded digest
        is removed, so a rerun downloads it again.
    ValueError
        When ``path`` does not exist, or a digest or the sidecar is malformed.
    """
    path = Path(path)
    if path.is_file():
        _refuse_existing(path, configured=_configured(sha256, md5, git_blob), where=where, can_download=False,
                         advice="Rerun to download it again (or put the right file at exactly {target}).")
    return _check(path, path, sha256=sha256, md5=md5, git_blob=git_blob, record=record, where=where, move_aside=True)


# --------------------------------------------------------------------------------------------
# transfers
# --------------------------------------------------------------------------------------------


def _describe(err: BaseException) -> str:
    if isinstance(err, (_Transient, _Permanent)):
        return str(err)
    if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError):
        return f"URLError: {err.reason}"
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class _Refused(_Permanent):
    """The answer is not the file (HTML, wrong magic bytes, too large): set aside, next mirror."""

    def __init__(self, message: str, keep: bool = True):
        super().__init__(message)
        self.keep = keep  # move the .part aside as .corrupt (False: delete it, e.g. too large)


class _Deadline(_Permanent):
    """The URL's overall deadline passed (the .part is kept: a rerun resumes it)."""


def _too_large(size: int, limit: int) -> _Refused:
    return _Refused(
        f"more than the {limit / (1 << 20):,.0f} MB this file may have ({size / (1 << 20):,.1f} MB announced or "
        "received; raise `max_mb:` for this file in the config if it is really that large)",
        keep=False,
    )


def _open_part(part: Path, mode: str) -> IO[bytes]:
    """``part`` opened to append (``"ab"``) or write (``"wb"``), never through a link: its name is
    predictable (a resumed download finds it there), so a symbolic link planted at it is refused
    (``O_NOFOLLOW``) and so is anything but a regular file of one link (a hard link to another
    file would be written into)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if mode == "ab" else 0)
    try:
        fd = os.open(part, flags, 0o666)
    except OSError as exc:
        raise ValueError(f"{part}: cannot write the partial download ({exc.strerror or exc}; a link there is "
                         "refused)") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise ValueError(f"{part}: not a plain file of its own (the partial download); delete it and rerun")
    if mode == "wb":
        os.ftruncate(fd, 0)  # only once it is known to be ours
    return os.fdopen(fd, mode)


def _copy(source: IO[bytes], part: Path, mode: str, initial: int, total: int | None, *,
          chunk_size: int, progress: bool, desc: str, limit: int, deadline_at: float) -> int:
    """Append (``"ab"``) or write (``"wb"``) ``source`` to ``part``; return the bytes copied.

    Reads with ``read1`` (one read of the socket at a time), so a server that trickles bytes
    cannot hold one call past the deadline by more than the socket timeout; stops with
    :class:`_Refused` before ``part`` would exceed ``limit`` bytes.
    """
    bar = None
    if progress and _tqdm is not None:
        # disable=None: drawn only when stderr is a terminal
        bar = _tqdm(total=total, initial=initial, desc=desc, unit="B", unit_scale=True,
                    unit_divisor=1024, leave=False, disable=None)
    read = getattr(source, "read1", source.read)
    received = 0
    try:
        with _open_part(part, mode) as out:
            while chunk := read(chunk_size):
                if initial + received + len(chunk) > limit:
                    raise _too_large(initial + received + len(chunk), limit)
                out.write(chunk)
                received += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
                if time.monotonic() > deadline_at:
                    raise _Deadline(f"not complete by the deadline ({initial + received} bytes so far)")
    finally:
        if bar is not None:
            bar.close()
    return received


def _copy_file_url(url: str, part: Path, *, chunk_size: int, progress: bool, desc: str, limit: int,
                   deadline_at: float) -> None:
    """Copy a ``file://`` URL into ``part`` from the start (no ranges for local files)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise _Permanent(f"file URLs on another host ({parsed.netloc}) are not supported")
    source = Path(urllib.request.url2pathname(parsed.path))
    if part.exists() and part.stat().st_size:
        logger.info("%s: file URLs are copied from the start; discarding the partial %s", url, part)
    try:
        fh = open(source, "rb")
    except OSError as err:
        raise _Permanent(f"{source}: {err.strerror or err}") from err
    with fh:
        if not os.path.isfile(source):  # /dev/zero, a FIFO: no size to trust
            total = None
        else:
            total = os.fstat(fh.fileno()).st_size
            if total > limit:
                raise _too_large(total, limit)
        received = _copy(fh, part, "wb", 0, total, chunk_size=chunk_size, progress=progress, desc=desc,
                         limit=limit, deadline_at=deadline_at)
    if total is not None and received != total:
        raise _Transient(f"copy ended early: {received} of {total} bytes")


def _download_http(url: str, part: Path, *, timeout: float, chunk_size: int, progress: bool,
                   desc: str, limit: int, deadline_at: float) -> str:
    """One attempt to complete ``part`` from an http(s) URL, resuming it when it exists; return
    the answer's Content-Type."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        logger.info("resuming %s at byte %d from %s", part, offset, url)
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        code, reason = err.code, err.reason
        content_range = (err.headers.get("Content-Range") or "") if err.headers is not None else ""
        err.close()
        if code == 416 and offset:
            match = _UNSATISFIED_RANGE.match(content_range.strip())
            if match and int(match.group(1)) == offset:
                logger.info("%s is already complete (%d bytes; the server has nothing past it)", part, offset)
                return ""
            size = match.group(1) if match else "not given"
            logger.warning("%s: HTTP 416 to a resume at byte %d (server size %s); discarding %s and starting over",
                           url, offset, size, part)
            part.unlink()
            return _download_http(url, part, timeout=timeout, chunk_size=chunk_size, progress=progress, desc=desc,
                                  limit=limit, deadline_at=deadline_at)
        if 300 <= code < 400:  # urllib follows redirects; one it gives up on is a loop or has no target
            raise _Permanent(f"HTTP {code} {reason} (a redirect that cannot be followed)") from err
        if 400 <= code < 500 and code not in _RETRIED_CLIENT_STATUS:
            raise _Permanent(f"HTTP {code} {reason}", gone=code in _GONE_STATUS) from err
        raise _Transient(f"HTTP {code} {reason}") from err

    with response:
        status = response.status
        content_type = response.headers.get("Content-Type", "") or ""
        length_header = response.headers.get("Content-Length", "").strip()
        length = int(length_header) if length_header.isdigit() else None
        if content_type and (why := sniff(None, desc, content_type)):  # refused on the header alone
            raise _Refused(why)
        if status == 206:
            content_range = response.headers.get("Content-Range", "")
            match = _CONTENT_RANGE.match(content_range.strip())
            if not match or int(match.group(1)) != offset:
                if part.exists():
                    part.unlink()
                raise _Transient(
                    f"HTTP 206 with Content-Range {content_range!r} does not continue at byte {offset}; "
                    f"discarded {part} to start over"
                )
            if match.group(3) != "*":
                total = int(match.group(3))
            else:
                total = offset + length if length is not None else None
            mode = "ab"
        else:
            if offset:
                logger.info("%s: no range support (HTTP %d to a Range request); starting %s over",
                            url, status, part)
            offset, total, mode = 0, length, "wb"
        if total is not None and total > limit:
            raise _too_large(total, limit)
        received = _copy(response, part, mode, offset, total, chunk_size=chunk_size, progress=progress, desc=desc,
                         limit=limit, deadline_at=deadline_at)

    size = offset + received
    if total is not None and size != total:
        if size > total:
            part.unlink()
            raise _Transient(f"received {size} bytes, more than the {total} announced; discarded {part}")
        raise _Transient(f"transfer ended early: {size} of {total} bytes")
    return content_type


def _transfer(url: str, part: Path, *, timeout: float, chunk_size: int, progress: bool, desc: str, limit: int,
              deadline_at: float) -> str:
    if urllib.parse.urlparse(url).scheme.lower() == "file":
        _copy_file_url(url, part, chunk_size=chunk_size, progress=progress, desc=desc, limit=limit,
                       deadline_at=deadline_at)
        return ""
    return _download_http(url, part, timeout=timeout, chunk_size=chunk_size, progress=progress, desc=desc,
                          limit=limit, deadline_at=deadline_at)


def _mirrors(url: str | None, urls: Sequence[str] | None, where: str) -> list[str]:
    if url is not None and urls is not None:
        raise ValueError(f"give `url:` or `urls:` {_under(where)}, not both")
    if urls is None:
        return [] if url is None else [url]
    if isinstance(urls, (str, bytes)) or not isinstance(urls, Sequence) or not urls:
        raise ValueError(f"`urls:` {_under(where)} must be a non-empty list of URLs, got {urls!r}")
    return list(urls)


def _set_aside(part: Path, target: Path, keep: bool) -> str:
    """Move a refused ``.part`` to ``<target>.corrupt`` (or delete it); say what happened."""
    if not part.exists():
        return ""
    if keep:
        corrupt = target.with_name(target.name + ".corrupt")
        os.replace(part, corrupt)
        return f"; moved aside to {corrupt}"
    part.unlink()
    return "; deleted"


def _download(mirrors: list[str], target: Path, *, sha256, md5, git_blob, retries: int, backoff: float,
              timeout: float, chunk_size: int, where: str, progress: bool, limit: int, deadline: float) -> None:
    part = target.with_name(target.name + ".part")
    errors: list[tuple[str, str]] = []
    mismatches: list[ChecksumError] = []  # URLs whose whole file failed its checksum
    refused = 0  # URLs whose answer was not the file (HTML, wrong magic bytes, too large)
    gone = False
    last: BaseException | None = None
    started = time.monotonic()
    for url in mirrors:
        logger.info("downloading %s -> %s", url, target)
        deadline_at = time.monotonic() + deadline
        for attempt in range(retries + 1):
            try:
                content_type = _transfer(url, part, timeout=timeout, chunk_size=chunk_size, progress=progress,
                                         desc=target.name, limit=limit, deadline_at=deadline_at)
                if why := _sniff_file(part, target.name, content_type):
                    raise _Refused(why)
            except _Refused as err:
                fate = _set_aside(part, target, err.keep)
                logger.warning("%s: %s%s; trying the next URL", url, err, fate)
                errors.append((url, f"{err}{fate}"))
                refused += 1
                last = err
                break
            except _Deadline as err:
                kept = f" (the partial download {part} is kept and resumed)" if part.exists() else ""
                message = f"{err}: gave up on this URL after {deadline:g} s{kept}"
                logger.warning("%s: %s", url, message)
                errors.append((url, message))
                last = err
                break
            except _Permanent as err:
                logger.warning("%s: %s; not retrying this URL", url, err)
                errors.append((url, str(err)))
                gone = gone or err.gone
                last = err
                break
            except _RETRIED as err:
                last = err
                if attempt == retries:
                    errors.append((url, f"{_describe(err)} (gave up after {retries + 1} attempts)"))
                    break
                delay = min(backoff * 2**attempt, max(0.0, deadline_at - time.monotonic()))
                kept = part.stat().st_size if part.exists() else 0
                resume = f" (resuming from byte {kept})" if kept else ""
                logger.warning("%s: %s; retry %d of %d in %.3g s%s",
                               url, _describe(err), attempt + 1, retries, delay, resume)
                time.sleep(delay)
            else:
                size = part.stat().st_size
                try:
                    digest = _check(part, target, sha256=sha256, md5=md5, git_blob=git_blob, record=True, where=where,
                                    move_aside=True, origin=f" (downloaded from {url})", source=f"url {url}",
                                    sources=frozenset(f"url {m}" for m in mirrors))
                except ChecksumError as err:  # this mirror's copy is bad: the next may be good
                    logger.warning("%s", err)
                    errors.append((url, "checksum mismatch; moved aside to "
                                        f"{target.with_name(target.name + '.corrupt')}"))
                    mismatches.append(err)
                    last = err
                    break
                os.replace(part, target)
                logger.info("downloaded %s: %d bytes, sha256 %s, in %.2f s",
                            target, size, digest, time.monotonic() - started)
                return

    if mismatches and len(mismatches) == len(errors):  # every URL served a file, none the right one
        if len(mismatches) == 1:
            raise mismatches[0]
        raise ChecksumError(f"no URL of {target}{_key(where)} served the file with its checksum: "
                            + " | ".join(str(m) for m in mismatches)) from last
    # one line (the report's status table and the run's summary show it whole): each URL and why
    tried = "; ".join(f"{url}: {error}" for url, error in errors)
    if gone:
        advice = (
            "The source may no longer be served there. Get the file by other means and put it at "
            f"exactly {target}, or set `path:` {_under(where)} to a local copy, then rerun."
        )
    else:
        kept = f" (the partial download {part} is kept and resumed)" if part.exists() else ""
        advice = (
            f"Check the network connection and rerun{kept}; or put the file at exactly {target}, "
            f"or set `path:` {_under(where)} to a local copy."
        )
    bad_content = refused + len(mismatches) == len(errors)  # every URL answered, none with the file
    message = f"could not download {target}{_key(where)} from {len(mirrors)} URL(s): {tried}. {advice}"
    raise (ContentError if bad_content else DownloadError)(message) from last


def _link(path: str | os.PathLike, target: Path, *, sha256, md5, git_blob, where: str) -> None:
    """Verify the user's own file and make ``target`` a symlink to its absolute path."""
    source = Path(os.path.abspath(os.path.expanduser(path)))
    if not source.exists():
        raise ValueError(f"{source}: no such file (set as `path:` {_under(where)})")
    if not source.is_file():
        raise ValueError(f"{source}: not a file (set as `path:` {_under(where)})")
    given = Path(os.path.expanduser(path))
    generated = not given.is_absolute() and given.parts[:1] == ("results",)  # the workflow's own output
    _check(source, target, sha256=sha256, md5=md5, git_blob=git_blob, record=True, where=where, move_aside=False,
           source=f"path {source}", sources=frozenset([f"path {source}"]), generated=generated)
    if target.exists() and os.path.samefile(source, target):
        return  # already linked (or the path is dest itself)
    if target.exists() or target.is_symlink():
        logger.info("replacing %s with a link to %s (set as `path:`%s)", target, source, _key(where))
    tmp = target.with_name(f".{target.name}.{os.getpid()}.link")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(source, tmp)
    os.replace(tmp, target)
    logger.info("linked %s -> %s", target, source)


def _configured(*digests: str | None) -> bool:
    """Whether any digest is configured (then the checksum, not :func:`sniff`, judges a file)."""
    return any(d is not None for d in digests)


def _refuse_existing(target: Path, *, configured: bool, where: str, can_download: bool,
                     advice: str = "Put the right file at exactly {target} and rerun.") -> bool:
    """Set an existing ``target`` aside when, with no configured digest, it is not the file
    (:func:`sniff`): an HTML page recorded by an older version must not be verified against its
    own recorded digest forever.  Return whether it was set aside (to be downloaded again)."""
    if configured or not (why := _sniff_file(target, target.name)):
        return False
    corrupt = target.with_name(target.name + ".corrupt")
    os.replace(target, corrupt)
    sidecar = _sidecar(target)
    recorded = f"; its recorded digest {sidecar} is removed" if sidecar.is_file() else ""
    if recorded:
        sidecar.unlink()
    message = f"{target}{_key(where)}: {why}; moved aside to {corrupt}{recorded}"
    if not can_download:
        raise ContentError(f"{message}. {advice.format(target=target)}")
    logger.warning("%s; downloading it again", message)
    return True


def fetch(
    dest: str | os.PathLike,
    *,
    url: str | None = None,
    urls: Sequence[str] | None = None,
    path: str | os.PathLike | None = None,
    manual: Mapping[str, str] | None = None,
    sha256: str | None = None,
    md5: str | None = None,
    git_blob: str | None = None,
    size_mb: float | None = None,
    max_mb: float | None = None,
    retries: int = 3,
    backoff: float = 1.0,
    timeout: float = 60.0,
    deadline: float = DEFAULT_DEADLINE,
    chunk_size: int = 1 << 20,
    where: str = "",
    progress: bool = True,
) -> Path:
    """Make the file ``dest`` exist with verified content, from exactly one kind of source.

    Sources (give exactly one kind):

    - ``url`` / ``urls``: download; ``urls`` is a list of mirrors tried in order, ``url`` is
      shorthand for ``[url]``.  ``http://``, ``https://`` and ``file://`` URLs work.
    - ``path``: a local file the user already has.  It is verified, then ``dest`` becomes a
      symlink to its absolute path (no copy).  A relative ``path`` is relative to the working
      directory.  A bad checksum leaves the user's file where it is.
    - ``manual``: ``{"url": <page where the user gets the file>, "note": <optional text>}`` for
      files that cannot be downloaded automatically (e.g. behind a login).  If ``dest`` exists
      it is verified; otherwise :class:`DownloadError` says where to get the file and the exact
      path to put it at.

    If ``dest`` exists already (downloaded before, or placed by hand) it is verified instead of
    downloaded again.  Parent folders are created.

    Downloads are written to ``<dest>.part``.  An existing ``.part`` (an interrupted earlier
    run) is resumed with a ``Range: bytes=<size>-`` request: a 206 answer is appended, a 200
    answer (no range support) starts over, a 416 with a complete ``.part`` counts as complete.
    A transfer that ends early or fails on the network (connection error, timeout, incomplete
    read, HTTP 5xx, 408, 429) is retried up to ``retries`` more times after
    ``backoff * 2**attempt`` seconds, resuming each time; then the next mirror is tried.  Other
    HTTP 4xx answers and missing ``file://`` files are not retried.  The finished ``.part`` is
    verified (as in :func:`verify`; with no digest configured, against or into the sidecar
    ``<dest>.sha256``) and only then renamed onto ``dest``, so ``dest`` never holds a partial or
    corrupt file.

    Each URL's answer is judged on its own, and a bad one sends the download to the next URL:
    an HTML page for a file whose name is not ``.html`` (by its Content-Type or its first
    bytes), a body whose first bytes do not match its name's compression or archive kind
    (:func:`sniff`), more bytes than the bound, or a checksum mismatch.  The refused copy is
    moved to ``<dest>.corrupt`` (one too large is deleted) and no digest is recorded for it.
    A URL that is not done by ``deadline`` seconds after its first request (retries included)
    is left for the next one, its ``.part`` kept for a rerun to resume.  An existing ``dest``
    that fails :func:`sniff` with no configured digest (an HTML page recorded by an older
    version) is set aside and downloaded again.

    Parameters
    ----------
    dest : str or path-like
        Where the file must end up.
    url : str, optional
        The one URL to download from.
    urls : sequence of str, optional
        Mirrors, tried in order.
    path : str or path-like, optional
        A local copy to link to.
    manual : mapping, optional
        ``{"url": ..., "note": ...}`` for a file the user must fetch by hand.
    sha256, md5, git_blob : str, optional
        Expected hexadecimal digests (``git_blob``: git's object id of the content, as
        ``git hash-object`` prints it).
    size_mb : float, optional
        The file's approximate size in MB (the config's documentation key): without ``max_mb``,
        the bound on its bytes is ``1.5 * size_mb + 64`` MB.
    max_mb : float, optional
        The most MB the file may have; more is refused before it is written.  Without it or
        ``size_mb``, :data:`DEFAULT_MAX_MB`.
    retries : int
        Extra attempts per URL after a transient failure.
    backoff : float
        Seconds before the first retry; doubled at each further retry.
    timeout : float
        Seconds the socket may block (connect or read) before the attempt fails.
    deadline : float
        Seconds one URL may take in all (every retry and backoff included), default
        :data:`DEFAULT_DEADLINE`; the slowest server cannot hold the job longer than this plus
        ``timeout`` per URL.
    chunk_size : int
        Bytes read and written at a time.
    where : str
        The config key path of this file (e.g. ``"datasets.mnist.files.train-images-idx3-ubyte.gz"``),
        used in messages.
    progress : bool
        Show a tqdm progress bar (only when standard error is a terminal).

    Returns
    -------
    pathlib.Path
        ``Path(dest)``.

    Raises
    ------
    DownloadError
        When every URL failed (the message lists each URL with its last error; a 404/410 says
        how to supply the file instead), or a ``manual`` file is missing.  Its subclass
        :class:`ContentError` when every URL answered with something that is not the file.
    ChecksumError
        When the file does not match its digest; it is moved to ``<dest>.corrupt`` (a ``path``
        source is left in place and not linked).
    ValueError
        When the source settings are invalid (none or several kinds, an unsupported URL scheme,
        a malformed digest) or a ``path`` source does not exist.
    """
    dest = Path(dest)
    target = Path(os.path.abspath(dest))
    mirrors = _mirrors(url, urls, where)
    kinds = [name for name, given in (("url/urls", bool(mirrors)), ("path", path is not None),
                                      ("manual", manual is not None)) if given]
    if len(kinds) != 1:
        found = " and ".join(kinds) if kinds else "none"
        raise ValueError(
            f"{target}: give exactly one kind of source (`url`/`urls`, `path` or `manual`) "
            f"{_under(where)}; got {found}"
        )
    for mirror in mirrors:
        if not isinstance(mirror, str) or urllib.parse.urlparse(mirror).scheme.lower() not in _SCHEMES:
            raise ValueError(f"unsupported URL {mirror!r}{_key(where)}: expected http://, https:// or file://")
    if manual is not None and (not isinstance(manual, Mapping) or not manual.get("url")):
        raise ValueError(f"`manual:` {_under(where)} must be a mapping with a `url` (and an optional `note`), "
                         f"got {manual!r}")
    if not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    if backoff < 0:
        raise ValueError(f"backoff must be non-negative, got {backoff!r}")
    if not deadline > 0:
        raise ValueError(f"the deadline must be a positive number of seconds {_under(where)}, got {deadline!r}")
    limit = _max_bytes(max_mb, size_mb, where)

    target.parent.mkdir(parents=True, exist_ok=True)
    if path is not None:
        _link(path, target, sha256=sha256, md5=md5, git_blob=git_blob, where=where)
        return dest
    if target.exists() and not _refuse_existing(target, configured=_configured(sha256, md5, git_blob),
                                                  where=where, can_download=bool(mirrors)):
        logger.info("%s exists; verifying it instead of downloading", target)
        placed = "placed by hand"
        _check(target, target, sha256=sha256, md5=md5, git_blob=git_blob, record=True, where=where, move_aside=True,
               source=placed, sources=frozenset([placed, *(f"url {m}" for m in mirrors)]))
        return dest
    if manual is not None:
        note = f"\nNote: {manual['note']}" if manual.get("note") else ""
        raise DownloadError(
            f"{target}{_key(where)} cannot be downloaded automatically. Get it from {manual['url']} "
            f"and put it at exactly:\n    {target}\nor set `path:` {_under(where)} to where you keep "
            f"the file, then rerun.{note}"
        )
    _download(mirrors, target, sha256=sha256, md5=md5, git_blob=git_blob, retries=retries, backoff=backoff,
              timeout=timeout, chunk_size=chunk_size, where=where, progress=progress, limit=limit, deadline=deadline)
    return dest
