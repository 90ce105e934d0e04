"""SVBOP-HSG's class index: an NMSLIB HNSW graph for maximum-inner-product search over classes.

SVBOP-HSG (Mortier et al., 2021, Section 3.2) never scores all K classes of an example: it asks an
HNSW index built over the class weight vectors for the ``k`` classes with the largest one-vs-rest
scores ``w_c . x + b_c`` (a maximum-inner-product query), and doubles ``k`` while Algorithm 1 needs
more classes.  :class:`HNSWIndex` is that index, built with NMSLIB (the library the paper uses).

Bias
    The intercept is folded into the inner product: the index holds ``[w_c, b_c - m]`` (D + 1
    dimensions) and a query ``x`` is sent as ``[x, 1]``, so ``<[w_c, b_c - m], [x, 1]> = w_c . x +
    b_c - m`` and the bias can change which classes come first.  ``m = mean(b)`` (``center_bias``,
    the default) shifts every score of a query by the same amount, which changes neither the
    ranking nor the softmax, but the graph is built on inner products *between* indexed vectors,
    where a large common bias (one-vs-rest logistic models have ``b_c`` around -7 on the LSHTC1
    dry-run) adds ``b_c b_c'`` to every one and hides the weights' similarity: centring it raised
    the recall@100 of a C=10 dry-run model from 97.7 % to 99.5 % at efSearch 100 (and a helper
    found 25 % -> 80 % on another C=10 model).  :meth:`query` adds ``m`` back to its scores.
Spaces
    Dense weights use NMSLIB's ``negdotprod`` space (float32 vectors); sparse weights (the clipped
    models of DMOZ and LSHTC1, CSR) use ``negdotprod_sparse_fast`` (``DataType.SPARSE_VECTOR``,
    float32 values with int32 feature ids; the "fast" variant intersects the sparse vectors with
    SIMD instructions where NMSLIB was compiled with them; indexes saved with the older
    ``negdotprod_sparse`` space still load).  Both rank by the *negative* inner product;
    :meth:`query` negates it back into a score.  Queries are converted to the index's kind.
Sparse queries of a dense index
    NMSLIB's ``negdotprod`` space takes a query dense: every visited class costs ``D + 1``
    multiply-adds (and ``4 (D + 1)`` bytes read) however few non-zeros the query has.  For CSR
    queries of a dense index, :meth:`HNSWIndex.query` (``engine="auto"``) therefore walks NMSLIB's
    graph with svbop's own compiled search (:mod:`svbop._hnsw_kernels`: the same greedy descent and
    ``efSearch``-wide beam, over the same float32 vectors) and computes each visited inner product
    over the query's non-zeros alone.  The graph and vectors are read once from NMSLIB's saved
    index (its "optimized" layout, checked field by field).  ``engine="nmslib"`` keeps NMSLIB's
    own query (the paper's way); dense queries and sparse indexes always use it.
Precision
    NMSLIB stores the vectors and computes the inner products in float32, so the returned scores
    are float32 values (cast to float64): their error is about ``1e-7 * sum_i |w_ci x_i|``, and two
    classes whose exact scores are that close may come out in either order.  Where exact scores
    matter (the probabilities of Algorithm 1), recompute them for the returned ids from the model:
    ``model.W[ids[i]] @ x_i + model.b[ids[i]]``.
Determinism
    NMSLIB 2.1.2 draws the HNSW level of every inserted point from a *thread-local* random engine
    with a fixed seed, which its Python binding does not let one set.  Built from the calling
    thread, an index therefore depends on how many indexes that thread built before (two builds in
    one process differ).  :meth:`HNSWIndex.fit` runs NMSLIB's build in a fresh thread, so that with
    ``n_threads=1`` the graph is a function of the weights and ``M``, ``efConstruction`` and
    ``post`` alone: the same queries give the same ids and scores in every run and process.  With
    ``n_threads > 1`` the insertion order and the worker threads' engines vary and the graph (hence
    approximate results) differs from run to run.  There is no seed to set.  The saved index file is
    not byte-for-byte reproducible even then (unused link slots hold uninitialised memory); what it
    encodes is.
Files
    :meth:`HNSWIndex.save` writes three files: ``path`` (NMSLIB's graph), ``path + ".dat"``
    (NMSLIB's copy of the vectors and ids, ``saveIndex(save_data=True)``) and ``path + ".json"``
    (this module's parameters, and the size and sha256 digest of the other two);
    :meth:`HNSWIndex.load` needs all three and not the model.  It trusts none of them (the
    sidecar's digests can be recomputed by whoever crafts an index, so they only catch damage):
    it reads each file once into a private copy, checks the digest on those bytes, parses the
    copy with svbop's own readers (every field, count, level and neighbour id of the graph; every
    object, feature id and value of the data) and only then lets NMSLIB load the copy, so a
    damaged or crafted index is a ValueError naming the file, never a crash (see
    ``workflow/docs/library.md``, "What the index loader trusts").
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from ._checks import check_sparse_structure
from ._threads import _n_workers, _positive_int
from .io import atomic_path
from .linear import LinearModel

__all__ = ["HNSWIndex"]

logger = logging.getLogger(__name__)

_FORMAT = "svbop.HNSWIndex"
_FORMAT_VERSION = 3
#: Oldest version :meth:`HNSWIndex.load` reads: version 3 added the files' sizes and sha256
#: digests, verified before NMSLIB reads a byte (NMSLIB trusts its files: a damaged graph
#: loads and then crashes the interpreter on a query).
_MIN_VERSION = 3
_DENSE_SPACE = "negdotprod"
_SPARSE_SPACE = "negdotprod_sparse_fast"
#: Spaces an index file may name (version 1 used the plain sparse space).
_SPACES = (_DENSE_SPACE, _SPARSE_SPACE, "negdotprod_sparse")
#: Queries sent to NMSLIB at once (bounds the float32 copy of a batch of queries).
_QUERY_CHUNK = 4096
#: Values of a dense index's float32 query block (16 MiB): small enough to stay in cache-friendly
#: sizes, large enough that NMSLIB's batch call is not per row.
_DENSE_CHUNK_VALUES = 1 << 22
#: Rows per block of svbop's graph search given to a thread.
_OWN_BLOCK = 256
#: Query engines of :meth:`HNSWIndex.query`.
_ENGINES = ("auto", "nmslib", "svbop")
#: NMSLIB's ids are C ints.
_MAX_ID = 2**31 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Largest parameters file (``path.json``) :meth:`HNSWIndex.load` parses: it holds a few hundred
#: bytes; anything much larger is refused before the JSON parser sees it.
_MAX_INFO_BYTES = 1 << 16
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _nmslib():
    # NMSLIB logs ~70 INFO lines ("Registering at the factory ...") through the "nmslib" logger
    # when imported, and its build parameters on every build: keep that out of the pipeline's
    # logs unless the user has set the logger's level (our own log line has the parameters)
    nmslib_logger = logging.getLogger("nmslib")
    if nmslib_logger.level == logging.NOTSET:
        nmslib_logger.setLevel(logging.WARNING)
    try:
        import nmslib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("HNSWIndex needs NMSLIB's python binding: pip install nmslib") from exc
    return nmslib


def _nmslib_version() -> str:
    try:
        return metadata.version("nmslib")
    except metadata.PackageNotFoundError:  # pragma: no cover - e.g. built from a source tree
        return "unknown"


def _in_fresh_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn()`` in a new thread and return its result (re-raising its exception).

    NMSLIB's HNSW level generator is thread-local with a fixed seed; a new thread starts it afresh.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="svbop-hnsw-build")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _digest(path: Path) -> dict[str, Any]:
    """Size and sha256 of a file, as :meth:`HNSWIndex.save` records them."""
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": sha.hexdigest()}


def _copy_verified(path: Path, copy: Path, recorded: Any, info_file: Path) -> None:
    """Copy ``path`` to ``copy`` (a new file in a private folder) in one read, checking the size and
    sha256 recorded in ``info_file`` on the very bytes copied; ValueError naming the file unless
    they match.  What svbop then parses, and NMSLIB loads, is the copy: replacing or deleting
    ``path`` afterwards changes nothing."""
    if not (isinstance(recorded, dict) and _is_int(recorded.get("bytes")) and recorded["bytes"] >= 0
            and isinstance(recorded.get("sha256"), str) and _SHA256.fullmatch(recorded["sha256"])):
        raise ValueError(f"{info_file}: no size and sha256 recorded for {path.name} (got {_short(recorded)}); "
                         "rebuild the index")
    expected = recorded["bytes"]
    sha = hashlib.sha256()
    try:
        # O_NONBLOCK: a FIFO put in the file's place is refused below instead of blocking the open
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh, open(copy, "xb") as out:
            status = os.fstat(fh.fileno())
            if not stat.S_ISREG(status.st_mode):
                raise ValueError(f"{path}: not a regular file")
            size = status.st_size
            if size != expected:
                raise ValueError(f"{path}: {size} bytes, {info_file.name} records {expected}: the index is damaged or "
                                 f"not the one {info_file.name} describes; rebuild it")
            done = 0
            while done <= expected and (chunk := fh.read(min(1 << 20, expected + 1 - done))):
                done += len(chunk)
                sha.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read and copied to a private temporary folder ({exc}); the folder "
                         f"({copy.parent.parent}, see TMPDIR) needs room for the index while it loads") from None
    if done != expected:
        raise ValueError(f"{path}: {done} bytes read, {info_file.name} records {expected} (the file changed while it "
                         "was read); rebuild or reload the index")
    if sha.hexdigest() != recorded["sha256"]:
        raise ValueError(f"{path}: sha256 differs from the one {info_file.name} records: the index is damaged or not "
                         f"the one {info_file.name} describes; rebuild it")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


class _Graph(NamedTuple):
    """An NMSLIB HNSW graph in the arrays :mod:`svbop._hnsw_kernels` searches (see its notes)."""

    links0: np.ndarray
    count0: np.ndarray
    upper: np.ndarray
    upper_count: np.ndarray
    upper_ptr: np.ndarray
    vectors: np.ndarray
    ids: np.ndarray
    entry: int
    max_level: int


#: Header of NMSLIB 2.1.2's "optimized" HNSW file (``Hnsw::SaveOptimizedIndex``, written by
#: ``writeBinaryPOD`` without padding): total elements (uint32), memory per object, offset of the
#: level-0 links, offset of the data (size_t), max level (int32), entry point (uint32), maxM, maxM0
#: (size_t), distance function (enum, int32), search method (size_t); after the optimize flag (uint32).
_GRAPH_HEADER = np.dtype([("optimized", "<u4"), ("n", "<u4"), ("per_object", "<u8"), ("offset_links0", "<u8"),
                          ("offset_data", "<u8"), ("max_level", "<i4"), ("entry", "<u4"), ("maxM", "<u8"),
                          ("maxM0", "<u8"), ("dist_func", "<i4"), ("search_method", "<u8")])
#: Header of NMSLIB 2.1.2's "regular" HNSW file (``Hnsw::SaveRegularIndexBin``: the sparse spaces,
#: which have no optimized layout): the optimize flag 0, total elements (uint32), max level (int32),
#: entry point (uint32), M, maxM, maxM0 (size_t).  Then per node: its level (uint32) and, for each
#: level 0..level, a neighbour count (uint32) and the neighbours' internal ids (int32).
_REGULAR_HEADER = np.dtype([("optimized", "<u4"), ("n", "<u4"), ("max_level", "<i4"), ("entry", "<u4"),
                            ("M", "<u8"), ("maxM", "<u8"), ("maxM0", "<u8")])
#: NMSLIB's ``kNegativeDotProduct``: the custom distance of the ``negdotprod`` space.
_NEG_DOT = 4
#: The search method NMSLIB 2.1.2 records for every optimized index.
_OPTIMIZED_SEARCH = 3
#: An object's header in NMSLIB's data: id (int32), label (int32), data length (size_t).
_OBJECT_HEADER = 16
#: Bounds svbop's readers put on NMSLIB's graph: neighbours per node and level (NMSLIB's maxM0 is
#: 2 M; the schema's hsg.M is at most 32768) and levels (HNSW's levels grow with log K).
_MAX_LINKS = 1 << 16
_MAX_M = _MAX_LINKS // 2
_MAX_LEVELS = 64
#: Rows of vectors checked at once (bounds the temporary arrays of the finiteness checks).
_CHECK_ROWS = 4096


def _bad(path: Path, layout: str, what: str) -> ValueError:
    return ValueError(f"{path}: not a consistent NMSLIB 2.1 {layout} ({what}); the file is damaged or was not written "
                      "by HNSWIndex.save: rebuild the index")


def _check_upper_levels(bad: Callable[[str], ValueError], levels: np.ndarray, upper: np.ndarray,
                        upper_count: np.ndarray, n: int, width: int) -> None:
    """Counts within 0..width and neighbour ids in 0..n-1 on the upper levels, and every neighbour
    on level ``l`` itself on level ``l`` or above (HNSW's searches read its links of level ``l``)."""
    if upper_count.size and (upper_count.min() < 0 or upper_count.max() > width):
        raise bad(f"an upper-level neighbour count outside 0..{width}")
    used = np.arange(width) < upper_count[:, None]
    if not used.any():
        return
    if upper[used].min() < 0 or upper[used].max() >= n:
        raise bad("an upper-level neighbour id out of range")
    owner_start = np.repeat(np.concatenate([[0], np.cumsum(levels)[:-1]]), levels)
    row_level = np.arange(upper.shape[0]) - owner_start + 1  # the level each row of upper links
    target_level = levels[np.where(used, upper, 0)]
    if (used & (target_level < row_level[:, None])).any():
        raise bad("a neighbour on an upper level that is not itself on that level")


def _check_finite(bad: Callable[[str], ValueError], rows: np.ndarray, what: str) -> None:
    for lo in range(0, rows.shape[0], _CHECK_ROWS):
        if not np.isfinite(rows[lo : lo + _CHECK_ROWS]).all():
            raise bad(f"NaN or infinite values in {what}")


def _read_graph(path: Path, n_classes: int, n_features: int, name: Path | None = None) -> _Graph:
    """NMSLIB's saved dense HNSW index at ``path`` as a :class:`_Graph`; ValueError naming the file
    (``name``, default ``path``) and the field unless every field, count, level and neighbour id is
    consistent and every vector finite (the kernels, and NMSLIB's own search, trust them)."""
    name = path if name is None else name

    def bad(what: str) -> ValueError:
        return _bad(name, "optimized negdotprod HNSW index", what)

    size = path.stat().st_size
    if size < _GRAPH_HEADER.itemsize:
        raise bad(f"{size} bytes, shorter than its header")
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    head = raw[: _GRAPH_HEADER.itemsize].view(_GRAPH_HEADER)[0]
    n, per, off0, offd = int(head["n"]), int(head["per_object"]), int(head["offset_links0"]), int(head["offset_data"])
    maxM, maxM0, max_level, entry = int(head["maxM"]), int(head["maxM0"]), int(head["max_level"]), int(head["entry"])
    if head["optimized"] != 1:
        raise bad("saved in NMSLIB's regular layout, which holds no vectors: a sparse index's graph")
    if head["dist_func"] != _NEG_DOT:
        raise bad(f"distance function {int(head['dist_func'])}, not the negative dot product")
    if head["search_method"] != _OPTIMIZED_SEARCH:
        raise bad(f"search method {int(head['search_method'])}, not {_OPTIMIZED_SEARCH}")
    if n != n_classes:
        raise bad(f"{n} elements, the index has {n_classes} classes")
    width = _OBJECT_HEADER + 4 * (n_features + 1)
    if not (1 <= maxM <= _MAX_LINKS and 1 <= maxM0 <= _MAX_LINKS and 0 <= max_level < _MAX_LEVELS and entry < n):
        raise bad(f"maxM {maxM}, maxM0 {maxM0}, max level {max_level}, entry {entry}")
    if offd != 0 or off0 != width or per != off0 + 4 * (maxM0 + 1):
        raise bad(f"object layout: {per} bytes, links at {off0}, data at {offd}, for {n_features + 1} floats")
    start = _GRAPH_HEADER.itemsize
    end = start + n * per
    if size < end + 4 * n:
        raise bad(f"{size} bytes, shorter than {n} objects of {per} bytes")
    block = raw[start:end].reshape(n, per)
    ids = np.ascontiguousarray(block[:, :4]).view("<i4")[:, 0].astype(np.int64)
    if ids.min() < 0 or np.unique(ids).size != n:
        raise bad("object ids are not distinct non-negative integers")
    lengths = np.ascontiguousarray(block[:, 8:16]).view("<u8")[:, 0]
    if (lengths != 4 * (n_features + 1)).any():
        raise bad(f"an object's data is not {n_features + 1} float32 values")
    vectors = np.ascontiguousarray(block[:, _OBJECT_HEADER:width]).view("<f4")
    _check_finite(bad, vectors, "the vectors")
    links = np.ascontiguousarray(block[:, off0 : off0 + 4 * (maxM0 + 1)]).view("<i4")
    count0 = links[:, 0].astype(np.int64)
    links0 = np.ascontiguousarray(links[:, 1:])
    del links
    if count0.min() < 0 or count0.max() > maxM0:
        raise bad(f"a level-0 neighbour count outside 0..{maxM0}")
    used = np.arange(maxM0) < count0[:, None]
    if used.any() and (links0[used].min() < 0 or links0[used].max() >= n):
        raise bad("a level-0 neighbour id out of range")
    # the upper levels: per object a uint32 byte count, then level x (maxM + 1) int32 values
    row_bytes = 4 * (maxM + 1)
    levels = np.zeros(n, dtype=np.int64)
    tail = memoryview(raw[end:])  # about 4 bytes per object: most objects live on level 0 alone
    pos = 0
    chunks = []
    for i in range(n):
        if pos + 4 > len(tail):
            raise bad(f"ends inside object {i}'s upper levels")
        mass = int.from_bytes(tail[pos : pos + 4], "little")
        pos += 4
        if mass % row_bytes or mass // row_bytes > max_level or pos + mass > len(tail):
            raise bad(f"object {i}'s upper levels: {mass} bytes")
        if mass:
            levels[i] = mass // row_bytes
            chunks.append(np.frombuffer(tail[pos : pos + mass], dtype="<i4").reshape(-1, maxM + 1))
            pos += mass
    if pos != len(tail):
        raise bad(f"{len(tail) - pos} bytes after the last object")
    del tail
    if levels[entry] != max_level:
        raise bad(f"the entry point is on level {levels[entry]}, not the top level {max_level}")
    table = np.concatenate(chunks) if chunks else np.zeros((0, maxM + 1), dtype=np.int32)
    upper_count = table[:, 0].astype(np.int64)
    upper = np.ascontiguousarray(table[:, 1:])
    _check_upper_levels(bad, levels, upper, upper_count, n, maxM)
    upper_ptr = np.concatenate([[0], np.cumsum(levels)]).astype(np.int64)
    del raw, block
    return _Graph(links0, count0, upper, upper_count, upper_ptr, vectors, ids, entry, max_level)


def _read_regular_graph(path: Path, n_classes: int, name: Path) -> None:
    """Check NMSLIB's saved sparse-space HNSW graph at ``path`` (the regular layout: links only, the
    vectors are in the data file): ValueError naming ``name`` unless its header, every level,
    count and neighbour id are consistent (what NMSLIB's loader and search trust)."""
    def bad(what: str) -> ValueError:
        return _bad(name, "regular-layout HNSW index (a sparse space's graph)", what)

    size = path.stat().st_size
    if size < _REGULAR_HEADER.itemsize:
        raise bad(f"{size} bytes, shorter than its header")
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    head = raw[: _REGULAR_HEADER.itemsize].view(_REGULAR_HEADER)[0]
    n, max_level, entry = int(head["n"]), int(head["max_level"]), int(head["entry"])
    maxM, maxM0 = int(head["maxM"]), int(head["maxM0"])
    if head["optimized"] != 0:
        raise bad("saved in NMSLIB's optimized layout: a dense index's graph")
    if n != n_classes:
        raise bad(f"{n} elements, the index has {n_classes} classes")
    if not (1 <= maxM <= _MAX_LINKS and 1 <= maxM0 <= _MAX_LINKS and 0 <= max_level < _MAX_LEVELS and entry < n):
        raise bad(f"maxM {maxM}, maxM0 {maxM0}, max level {max_level}, entry {entry}")
    if size - _REGULAR_HEADER.itemsize < 8 * n:  # a node takes at least its level and one count
        raise bad(f"{size} bytes, too short for {n} nodes")
    words = memoryview(raw[_REGULAR_HEADER.itemsize :])
    if len(words) % 4:
        raise bad(f"{len(words)} bytes after the header, not whole 4-byte values")
    values = np.frombuffer(words, dtype="<u4")
    levels = np.zeros(n, dtype=np.int64)
    lists: list[np.ndarray] = []  # per node and level: its neighbours
    list_level: list[int] = []
    pos = 0
    total = values.size
    for i in range(n):
        if pos >= total:
            raise bad(f"ends before node {i}")
        level = int(values[pos])
        pos += 1
        if level > max_level:
            raise bad(f"node {i} is on level {level}, above the top level {max_level}")
        levels[i] = level
        for lev in range(level + 1):
            if pos >= total:
                raise bad(f"ends inside node {i}'s level {lev}")
            count = int(values[pos])
            pos += 1
            if count > (maxM0 if lev == 0 else maxM) or pos + count > total:
                raise bad(f"node {i}'s level {lev}: {count} neighbours")
            lists.append(values[pos : pos + count])
            list_level.append(lev)
            pos += count
    if pos != total:
        raise bad(f"{4 * (total - pos)} bytes after the last node")
    if levels[entry] != max_level:
        raise bad(f"the entry point is on level {levels[entry]}, not the top level {max_level}")
    if lists:
        neighbours = np.concatenate(lists).astype(np.int64)  # uint32: an int32 id < 0 is >= 2**31 here
        if neighbours.size:
            if neighbours.max() >= n:
                raise bad("a neighbour id out of range")
            need = np.repeat(np.array(list_level, dtype=np.int64), [a.size for a in lists])
            if (levels[neighbours] < need).any():
                raise bad("a neighbour on an upper level that is not itself on that level")
    del raw, words, values


#: NMSLIB's data file (``Space::WriteObjectVectorBinData``): the number of objects (size_t), then
#: per object its size in bytes (size_t) and the object: id (int32), label (int32), data length
#: (size_t), data.
def _read_data(path: Path, n_classes: int, n_features: int, space: str,
               name: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Check NMSLIB's data file of an index (``path``, named ``name`` in messages) object by object:
    the count, every object's size against its header and the file, every vector's layout for
    ``space`` (dense: ``n_features + 1`` float32 values; sparse: sorted feature ids in
    ``0..n_features``, in NMSLIB's packed blocks for ``negdotprod_sparse_fast``) and finite values.

    Returns the objects' ids and, for the dense space, their vectors (float32, (K, D + 1))."""
    def bad(what: str) -> ValueError:
        return _bad(name, f"data file of a {space} index", what)

    size = path.stat().st_size
    if size < 8:
        raise bad(f"{size} bytes, shorter than its header")
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    qty = int(raw[:8].view("<u8")[0])
    if qty != n_classes:
        raise bad(f"{qty} objects, the index has {n_classes} classes")
    if space == _DENSE_SPACE:
        length = 4 * (n_features + 1)
        stride = 8 + _OBJECT_HEADER + length
        if size != 8 + qty * stride:
            raise bad(f"{size} bytes, not {qty} objects of {n_features + 1} float32 values")
        rows = raw[8:].reshape(qty, stride)
        sizes = np.ascontiguousarray(rows[:, :8]).view("<u8")[:, 0]
        lengths = np.ascontiguousarray(rows[:, 16:24]).view("<u8")[:, 0]
        if (sizes != _OBJECT_HEADER + length).any() or (lengths != length).any():
            raise bad(f"an object is not {n_features + 1} float32 values")
        ids = np.ascontiguousarray(rows[:, 8:12]).view("<i4")[:, 0].astype(np.int64)
        if ids.min() < 0 or np.unique(ids).size != qty:
            raise bad("object ids are not distinct non-negative integers")
        vectors = rows[:, 24:].view("<f4")
        _check_finite(bad, vectors, "the vectors")
        return ids, vectors
    if size - 8 < (8 + _OBJECT_HEADER) * qty:  # before allocating anything per object
        raise bad(f"{size} bytes, too short for {qty} objects")
    ids = np.empty(qty, dtype=np.int64)
    pos = 8
    view = memoryview(raw)
    for i in range(qty):
        if pos + 8 + _OBJECT_HEADER > size:
            raise bad(f"ends inside object {i}'s header")
        obj_size = int.from_bytes(view[pos : pos + 8], "little")
        length = int.from_bytes(view[pos + 16 : pos + 24], "little")
        if obj_size != _OBJECT_HEADER + length or pos + 8 + obj_size > size:
            raise bad(f"object {i}: {obj_size} bytes recorded, data length {length}, {size - pos - 8} bytes left")
        ids[i] = int.from_bytes(view[pos + 8 : pos + 12], "little", signed=True)
        data = view[pos + 8 + _OBJECT_HEADER : pos + 8 + obj_size]
        problem = _sparse_vector_problem(data, n_features, space)
        if problem:
            raise bad(f"object {i}: {problem}")
        pos += 8 + obj_size
    if pos != size:
        raise bad(f"{size - pos} bytes after the last object")
    if ids.min() < 0 or np.unique(ids).size != qty:
        raise bad("object ids are not distinct non-negative integers")
    return ids, None


def _sparse_vector_problem(data: memoryview, n_features: int, space: str) -> str | None:
    """What is wrong with one sparse vector of NMSLIB's data file, or None.

    ``negdotprod_sparse``: (uint32 id, float32 value) pairs.  ``negdotprod_sparse_fast``
    (``PackSparseElements``): the number of blocks B (size_t), the sum of squares and its inverse
    root (float32 each), B element counts and B offsets (size_t), then per block its ids (uint16,
    the feature id with NMSLIB's block-zero shift) and values (float32).  NMSLIB's intersection
    merges the blocks by offset and the ids within a block, so both must increase strictly."""
    n = len(data)
    if space == "negdotprod_sparse":
        if n % 8:
            return f"{n} bytes, not (id, value) pairs of 8"
        pairs = np.frombuffer(data, dtype=[("id", "<u4"), ("val", "<f4")])
        fid, val = pairs["id"].astype(np.int64), pairs["val"]
    else:
        if n < 16:
            return f"{n} bytes, shorter than a packed vector's header"
        blocks = int.from_bytes(data[:8], "little")
        if blocks > (n - 16) // 16:
            return f"{blocks} blocks in {n} bytes"
        meta = np.frombuffer(data[16 : 16 + 16 * blocks], dtype="<u8")
        if blocks and meta[:blocks].max() > n:
            return f"a block of {int(meta[:blocks].max())} elements in {n} bytes"
        counts, offsets = meta[:blocks].astype(np.int64), meta[blocks:]
        if 16 + 16 * blocks + 6 * int(counts.sum()) != n:
            return f"block sizes {counts.tolist()[:5]}... do not add up to its {n} bytes"
        if blocks > 1 and (np.diff(offsets.astype(np.float64)) <= 0).any():
            return "block offsets do not increase"
        fids, vals = [], []
        at = 16 + 16 * blocks
        for count, offset in zip(counts.tolist(), offsets.tolist()):
            if count:
                local = np.frombuffer(data[at : at + 2 * count], dtype="<u2").astype(np.int64)
                if local.min() < 1 or (count > 1 and (np.diff(local) <= 0).any()) or offset % 65536:
                    return ("ids within a block are not increasing and non-zero, or a block offset is not a "
                            "multiple of 65536")
                shifted = local + offset
                fids.append((shifted // 65536) * 65535 + shifted % 65536 - 1)  # NMSLIB's addBlockZeros
                vals.append(np.frombuffer(data[at + 2 * count : at + 6 * count], dtype="<f4"))
            at += 6 * count
        fid = np.concatenate(fids) if fids else np.zeros(0, np.int64)
        val = np.concatenate(vals) if vals else np.zeros(0, np.float32)
    if fid.size:
        if fid.min() < 0 or fid.max() > n_features:
            return f"feature id {int(fid.max()) if fid.max() > n_features else int(fid.min())} outside 0..{n_features}"
        if fid.size > 1 and (np.diff(fid) <= 0).any():
            return "feature ids do not increase"
        if not np.isfinite(val).all():
            return "NaN or infinite values"
    return None


def _read_info(info_file: Path) -> dict[str, Any]:
    """The parameters file of a saved index, every field checked (ValueError naming the file)."""
    try:
        size = info_file.stat().st_size
        if size > _MAX_INFO_BYTES:
            raise ValueError(f"{info_file}: {size} bytes, more than the {_MAX_INFO_BYTES} a parameters file of "
                             "HNSWIndex.save can hold")
        info = json.loads(info_file.read_bytes().decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{info_file}: not a parameters file of HNSWIndex.save (JSON nested too deeply)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{info_file}: not a readable JSON file ({exc})") from None
    if not isinstance(info, dict) or info.get("format") != _FORMAT:
        got = info.get("format") if isinstance(info, dict) else type(info).__name__
        raise ValueError(f"{info_file}: format is {_short(got)}, expected {_FORMAT!r}")
    version = info.get("version")
    if not _is_int(version) or version > _FORMAT_VERSION:
        raise ValueError(f"{info_file}: format version {_short(version)} is not one this code reads "
                         f"({_FORMAT_VERSION})")
    if version < _MIN_VERSION:
        raise ValueError(f"{info_file}: format version {version} records no checksums of the index files, so they "
                         f"cannot be verified before NMSLIB reads them; rebuild the index (rule build_index)")
    required = ("M", "efC", "post", "K", "D", "sparse", "space", "bias_shift", "files")
    missing = [key for key in required if key not in info]
    if missing:
        raise ValueError(f"{info_file}: missing keys {missing}")

    def refuse(key: str, expected: str) -> ValueError:
        return ValueError(f"{info_file}: {key} must be {expected}, got {_short(info[key])}")

    for key, low, high in (("M", 1, _MAX_M), ("efC", 1, _MAX_ID), ("post", 0, 2), ("K", 1, _MAX_ID + 1),
                           ("D", 1, _MAX_ID - 1)):
        if not _is_int(info[key]) or not low <= info[key] <= high:
            raise refuse(key, f"an integer in {low}..{high}")
    if not isinstance(info["sparse"], bool):
        raise refuse("sparse", "true or false")
    space = info["space"]
    if not isinstance(space, str) or space not in _SPACES or (space == _DENSE_SPACE) == info["sparse"]:
        raise refuse("space", f"one of {_SPACES} matching sparse={str(info['sparse']).lower()}")
    shift = info["bias_shift"]
    if isinstance(shift, bool) or not isinstance(shift, (int, float)) or not math.isfinite(shift):
        raise refuse("bias_shift", "a finite number")
    for key, ok in (("build_seconds", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
                    ("build_threads", lambda v: _is_int(v) and v >= 1),
                    ("nmslib_version", lambda v: isinstance(v, str))):
        if info.get(key) is not None and not ok(info[key]):
            raise refuse(key, {"build_seconds": "a number", "build_threads": "a positive integer",
                               "nmslib_version": "a string"}[key] + " or null")
    if info.get("method", "hnsw") != "hnsw":
        raise refuse("method", "'hnsw'")
    files = info["files"]
    if not isinstance(files, dict):
        raise refuse("files", "a mapping of the graph's and data's sizes and digests")
    for role in ("graph", "data"):
        files.setdefault(role, None)  # refused by _copy_verified, naming the file
    return info


def _finished(ids: np.ndarray, scores: np.ndarray, short: int, k: int, ef: int, engine: str,
              start: float) -> tuple[np.ndarray, np.ndarray]:
    """A query's rows by decreasing score, ties by increasing id; warns of rows padded with id -1."""
    order = np.lexsort((ids, -scores), axis=-1)
    ids = np.take_along_axis(ids, order, axis=1)
    scores = np.take_along_axis(scores, order, axis=1)
    n = ids.shape[0]
    if short:
        logger.warning("HNSW query returned fewer than k=%d classes for %d of %d rows (ef=%d): padded with id -1",
                       k, short, n, ef)
    logger.debug("HNSW query (%s): %d rows, k=%d, ef=%d in %.3f s", engine, n, k, ef, time.perf_counter() - start)
    return ids, scores


class HNSWIndex:
    """NMSLIB HNSW index over the augmented class vectors ``[w_c, b_c]``: top-k classes by score.

    Parameters
    ----------
    M : int
        HNSW's ``M``: neighbours per node on the upper layers (``2 M`` on the bottom layer); the
        paper's default is 20.  At most 32768 (the bound :meth:`load` puts on a saved graph).
    ef_construction : int
        HNSW's ``efConstruction``: width of the candidate list while building (paper: 100).
    post : int
        NMSLIB's HNSW post-processing of the graph: 0 (none, NMSLIB's default), 1 or 2.
    n_threads : int
        Threads of the build (NMSLIB's ``indexThreadQty``); -1 means every core available to the
        process.  Only ``n_threads=1`` builds the same graph every time (see the module notes).
    center_bias : bool, default True
        Index ``b - mean(b)`` instead of ``b`` (same ranking, a better graph: see the module notes).

    Attributes
    ----------
    n_classes : int
        Number of indexed classes ``K`` (set by :meth:`fit` or :meth:`load`).
    n_features : int
        Number of features ``D`` of the weights and queries (without the bias dimension).
    sparse : bool
        Whether the index uses a sparse space (``negdotprod_sparse_fast``) rather than ``negdotprod``.
    space : str
        NMSLIB's space of the index.
    bias_shift : float
        The ``mean(b)`` subtracted from the indexed intercepts (0 without ``center_bias``).
    build_seconds : float
        Wall time of NMSLIB's part of the build (adding the vectors and ``createIndex``).
    nmslib_version : str
        Version of NMSLIB that built the index.

    Examples
    --------
    >>> index = HNSWIndex.from_model(model, M=20, ef_construction=100)   # doctest: +SKIP
    >>> ids, scores = index.query(X_test, k=100)                          # doctest: +SKIP
    """

    def __init__(self, M: int = 20, ef_construction: int = 100, post: int = 0, n_threads: int = 1,
                 center_bias: bool = True) -> None:
        self.M = _positive_int("M", M)
        if self.M > _MAX_M:
            raise ValueError(f"M must be at most {_MAX_M} (2 M links per node on level 0, at most {_MAX_LINKS} in an "
                             f"index svbop reads back), got {M!r}")
        self.ef_construction = _positive_int("ef_construction", ef_construction)
        if isinstance(post, bool) or post not in (0, 1, 2):
            raise ValueError(f"post must be 0, 1 or 2, got {post!r}")
        self.post = int(post)
        self.n_threads = _positive_int("n_threads", n_threads, allow_all=True)
        if not isinstance(center_bias, (bool, np.bool_)):
            raise ValueError(f"center_bias must be True or False, got {center_bias!r}")
        self.center_bias = bool(center_bias)
        self.space: str | None = None
        self.bias_shift = 0.0
        self.n_classes: int | None = None
        self.n_features: int | None = None
        self.sparse: bool | None = None
        self.build_seconds: float | None = None
        self.build_threads: int | None = None
        self.nmslib_version: str | None = None
        self._index: Any = None
        self._ef: int | None = None
        self._graph: _Graph | None = None  # read by load(), or on the first query svbop's search answers

    # ----------------------------------------------------------------------------------------
    # building
    # ----------------------------------------------------------------------------------------

    def fit(
        self,
        W: np.ndarray | sp.spmatrix,
        b: np.ndarray | None = None,
        *,
        classes: np.ndarray | None = None,
        sparse: bool | None = None,
    ) -> HNSWIndex:
        """Build the index over the rows of ``W`` (one class each) and intercepts ``b``.

        Parameters
        ----------
        W : array of shape (K, D) or scipy sparse matrix
            Class weight vectors.
        b : array of shape (K,), optional
            Intercepts (default zeros).
        classes : array of shape (K,) of int, optional
            The id :meth:`query` returns for each row (default ``0..K-1``); distinct, in
            ``0..2**31-1`` (NMSLIB's ids are C ints).  :meth:`from_model` passes the model's
            ``classes``.
        sparse : bool, optional
            Use the sparse space; default: when ``W`` is a scipy sparse matrix.

        Returns
        -------
        HNSWIndex
            ``self``, built.
        """
        nm = _nmslib()
        is_sparse = sp.issparse(W) if sparse is None else bool(sparse)
        if sp.issparse(W):
            check_sparse_structure(W, "W")
            W = sp.csr_matrix(W)
        else:
            W = np.asarray(W)
        if W.ndim != 2 or W.shape[0] == 0 or W.shape[1] == 0:
            raise ValueError(f"W must be a non-empty 2-d (n_classes, n_features) matrix, got shape {W.shape}")
        K, D = W.shape
        if b is None:
            b = np.zeros(K)
        b = np.asarray(b, dtype=np.float64)
        if b.shape != (K,):
            raise ValueError(f"b must have shape ({K},) to match W {W.shape}, got {b.shape}")
        if classes is None:
            ids = np.arange(K, dtype=np.int32)
        else:
            raw = np.asarray(classes)
            if raw.shape != (K,) or not np.issubdtype(raw.dtype, np.integer):
                raise ValueError(f"classes must be {K} integers (one per row of W), got {raw.dtype} {raw.shape}")
            if raw.min() < 0 or raw.max() > _MAX_ID or np.unique(raw).size != K:
                raise ValueError(f"classes must be distinct integers in 0..{_MAX_ID}")
            ids = raw.astype(np.int32)
        shift = float(np.mean(b)) if self.center_bias else 0.0
        data = self._augment(W, b - shift, is_sparse, what="W")
        space = _SPARSE_SPACE if is_sparse else _DENSE_SPACE
        threads = _n_workers("n_threads", self.n_threads)
        params = {"M": self.M, "efConstruction": self.ef_construction, "post": self.post,
                  "indexThreadQty": threads}
        logger.info(
            "HNSW %s index over %d classes x %d features (+ bias)%s: M=%d efConstruction=%d post=%d, %d thread%s",
            space, K, D, f", {data.nnz} non-zeros" if is_sparse else "", self.M, self.ef_construction,
            self.post, threads, "" if threads == 1 else "s",
        )

        def build() -> Any:
            index = self._new_index(nm, space)
            index.addDataPointBatch(data, ids)
            index.createIndex(params, print_progress=False)
            return index

        start = time.perf_counter()
        index = _in_fresh_thread(build)
        seconds = time.perf_counter() - start
        self._index, self._ef, self._graph = index, None, None
        self.n_classes, self.n_features, self.sparse = int(K), int(D), is_sparse
        self.space, self.bias_shift = space, shift
        self.build_seconds, self.build_threads = seconds, threads
        self.nmslib_version = _nmslib_version()
        logger.info("HNSW index over %d classes built in %.2f s%s", K, seconds,
                    "" if threads == 1 else " (multi-threaded: the graph differs from run to run)")
        return self

    @classmethod
    def build(
        cls,
        W: np.ndarray | sp.spmatrix,
        b: np.ndarray | None = None,
        *,
        M: int = 20,
        ef_construction: int = 100,
        post: int = 0,
        n_threads: int = 1,
        center_bias: bool = True,
        classes: np.ndarray | None = None,
        sparse: bool | None = None,
    ) -> HNSWIndex:
        """Shorthand for ``HNSWIndex(M, ef_construction, post, n_threads, center_bias).fit(W, b, ...)``."""
        return cls(M=M, ef_construction=ef_construction, post=post, n_threads=n_threads,
                   center_bias=center_bias).fit(W, b, classes=classes, sparse=sparse)

    @classmethod
    def from_model(cls, model: LinearModel, **params: Any) -> HNSWIndex:
        """The index of a :class:`~svbop.linear.LinearModel`: its ``W``, ``b`` and ``classes``.

        ``params`` are those of :meth:`build` (``M``, ``ef_construction``, ``post``,
        ``n_threads``, ``center_bias``, ``sparse``); the index is sparse when the model was clipped.
        """
        if not isinstance(model, LinearModel):
            raise ValueError(f"model must be a LinearModel, got {type(model).__name__}")
        return cls.build(model.W, model.b, classes=model.classes, **params)

    # ----------------------------------------------------------------------------------------
    # querying
    # ----------------------------------------------------------------------------------------

    def query(
        self,
        X: np.ndarray | sp.spmatrix,
        k: int,
        ef: int | None = None,
        n_threads: int = 1,
        engine: str = "auto",
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` classes with the (approximately) largest scores ``w_c . x + b_c`` per row.

        Parameters
        ----------
        X : array or scipy sparse matrix of shape (n_samples, n_features)
            Queries; converted to the index's kind (dense or CSR).
        k : int
            Classes per row, ``1 <= k <= n_classes``.
        ef : int, optional
            HNSW's ``efSearch`` (candidate list width), an integer ``>= k``; default ``k``, as in
            the paper (SVBOP-HSG sets ``efSearch`` to the current ``k``).  Larger is slower and
            closer to exact; ``ef = n_classes`` is in practice exact on small problems.  An ``ef``
            above ``n_classes`` is clipped to it: a candidate list as long as the graph already
            holds every node a search reaches, so the search and its result are the same.
        n_threads : int
            Threads of the batched query; -1 means every core.  Results do not depend on it.
        engine : {"auto", "nmslib", "svbop"}
            Who walks the graph.  ``"nmslib"``: NMSLIB's query, the query sent dense to a dense
            index (the paper's way).  ``"svbop"``: svbop's compiled search of the same graph, whose
            inner products read only the query's non-zeros; for a dense index and CSR ``X``
            (refused otherwise).  ``"auto"`` (default): ``"svbop"`` where it applies.  Both run the
            same search over the same float32 vectors; they can differ where two classes' float32
            scores tie or nearly tie (the order of the sums differs).

        Returns
        -------
        ids : ndarray of shape (n_samples, k), int64
            Class ids (``classes`` of :meth:`fit`), by decreasing score, ties by increasing id.
        scores : ndarray of shape (n_samples, k), float64
            Their scores ``w_c . x + b_c``, computed by NMSLIB in float32 (see the module notes;
            the bias shift is added back in float64).  Should NMSLIB
            return fewer than ``k`` classes for a row (it does not with ``ef >= k`` on a connected
            graph), the row is padded with id -1 and score -inf, and a warning is logged.
        """
        self._check_built()
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self.n_classes:
            raise ValueError(f"k must be an integer in 1..{self.n_classes} (the number of classes), got {k!r}")
        k = int(k)
        if ef is None:
            ef = k
        elif isinstance(ef, bool) or not isinstance(ef, (int, np.integer)) or ef < k:
            raise ValueError(f"ef must be an integer >= k = {k}, got {ef!r}")
        ef = min(int(ef), self.n_classes)  # a wider beam is the same search (see above)
        threads = _n_workers("n_threads", n_threads)
        if engine not in _ENGINES:
            raise ValueError(f"engine must be one of {_ENGINES}, got {engine!r}")
        if sp.issparse(X):
            check_sparse_structure(X, "X")
            X = sp.csr_matrix(X)
        else:
            X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-d (n_samples, n_features), got shape {X.shape}")
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, the index has {self.n_features}")
        own = not self.sparse and sp.issparse(X)
        if engine == "svbop" and not own:
            raise ValueError("engine='svbop' searches a dense index with sparse (CSR) queries; this index is "
                             f"{'sparse' if self.sparse else 'dense'} and X is {'sparse' if sp.issparse(X) else 'dense'}"
                             " (use engine='nmslib' or 'auto')")
        if own and engine != "nmslib":
            return self._query_own(X, k, ef, threads)
        n = X.shape[0]
        if ef != self._ef:
            self._index.setQueryTimeParams({"efSearch": ef})
            self._ef = ef
        ids = np.full((n, k), -1, dtype=np.int64)
        scores = np.full((n, k), -np.inf, dtype=np.float64)
        short = 0
        start = time.perf_counter()
        chunk = _QUERY_CHUNK if self.sparse else max(1, min(_QUERY_CHUNK, _DENSE_CHUNK_VALUES // (self.n_features + 1)))
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            queries = self._augment(X[lo:hi], np.ones(hi - lo), self.sparse, what="X")
            for i, (found, dist) in enumerate(self._index.knnQueryBatch(queries, k=k, num_threads=threads), lo):
                m = len(found)
                short += m < k
                ids[i, :m] = found
                scores[i, :m] = self.bias_shift - np.asarray(dist, dtype=np.float64)
        # NMSLIB returns rows by increasing distance; make the order (and ties) explicit
        return _finished(ids, scores, short, k, ef, "NMSLIB's query", start)

    def _query_own(self, X: sp.csr_matrix, k: int, ef: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`query` by svbop's search of NMSLIB's graph (dense index, CSR queries)."""
        from . import _hnsw_kernels, _kernels

        graph = self._own_graph()
        n = X.shape[0]
        start = time.perf_counter()
        xptr = X.indptr.astype(np.int64, copy=False)
        xind = X.indices.astype(np.int64, copy=False)
        xval = X.data.astype(np.float64, copy=False)
        if xval.size and not np.isfinite(xval).all():
            raise ValueError("X holds NaN or infinite values")
        found_ids = np.full((n, k), -1, dtype=np.int64)
        dist = np.full((n, k), np.inf, dtype=np.float64)
        found = np.zeros(n, dtype=np.int64)

        def task(lo: int, hi: int) -> None:
            _hnsw_kernels.search_sparse(graph.links0, graph.count0, graph.upper, graph.upper_count, graph.upper_ptr,
                                        graph.vectors, graph.entry, graph.max_level, xptr, xind, xval, k, ef, lo, hi,
                                        found_ids, dist, found)

        _kernels.run_blocks(task, n, _OWN_BLOCK, threads)
        hit = found_ids >= 0
        ids = np.where(hit, graph.ids[np.maximum(found_ids, 0)], -1)
        scores = np.where(hit, self.bias_shift - dist, -np.inf)
        return _finished(ids, scores, int(np.count_nonzero(found < k)), k, ef, "svbop's search", start)

    def _own_graph(self) -> _Graph:
        """NMSLIB's graph and vectors for svbop's search: read and checked by :meth:`load` for a
        loaded index, else once from NMSLIB's own saved copy of the index it built."""
        if self._graph is None:
            # NMSLIB's binding gives no access to the graph but through saveIndex: write it (without
            # the separate data file) to a private temporary folder, read it, remove it
            with tempfile.TemporaryDirectory(prefix="svbop-hnsw-") as folder:
                path = Path(folder) / "graph"
                self._index.saveIndex(str(path), save_data=False)
                self._graph = _read_graph(path, self.n_classes, self.n_features)
        return self._graph

    # ----------------------------------------------------------------------------------------
    # saving and loading
    # ----------------------------------------------------------------------------------------

    @staticmethod
    def files(path: str | os.PathLike) -> tuple[Path, Path, Path]:
        """The three files of a saved index: graph ``path``, vectors ``path.dat``, parameters ``path.json``."""
        path = Path(path)
        return path, path.with_name(path.name + ".dat"), path.with_name(path.name + ".json")

    def info(self) -> dict[str, Any]:
        """The parameters and facts of the built index (what :meth:`save` writes to ``path.json``)."""
        self._check_built()
        return {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "method": "hnsw",
            "space": self.space,
            "M": self.M,
            "efC": self.ef_construction,
            "post": self.post,
            "K": self.n_classes,
            "D": self.n_features,
            "sparse": self.sparse,
            "bias": "augmented: index [w_c, b_c - bias_shift], query [x, 1]",
            "bias_shift": self.bias_shift,
            "build_seconds": self.build_seconds,
            "build_threads": self.build_threads,
            "nmslib_version": self.nmslib_version,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path``, ``path.dat`` and ``path.json`` (see :meth:`files`).

        Each file is written in a private temporary folder beside it and renamed into place; the graph
        ``path`` comes last, so its presence means the other two are complete.  Parent folders are
        created.
        """
        self._check_built()
        final_index, final_data, final_info = self.files(path)
        final_index.parent.mkdir(parents=True, exist_ok=True)
        # NMSLIB opens the files by name: they are written inside a folder this process creates exclusively
        # (mkdtemp, mode 0700, a random name), so no file or link planted at a guessable name is followed
        private = Path(tempfile.mkdtemp(prefix=".tmp", suffix=".index", dir=final_index.parent))
        tmp_index, tmp_data, _ = self.files(private / final_index.name)
        try:
            self._index.saveIndex(str(tmp_index), save_data=True)
            for tmp in (tmp_index, tmp_data):
                if not tmp.is_file():
                    raise RuntimeError(f"NMSLIB's saveIndex did not write {tmp}")
            files = {"graph": _digest(tmp_index), "data": _digest(tmp_data)}
            with atomic_path(final_info) as tmp:
                tmp.write_text(json.dumps({**self.info(), "files": files}, indent=2) + "\n")
            os.replace(tmp_data, final_data)
            os.replace(tmp_index, final_index)
        finally:
            for tmp in (tmp_index, tmp_data):
                if tmp.exists():
                    tmp.unlink()
            shutil.rmtree(private, ignore_errors=True)  # our own folder; its files are gone or partial
        logger.info("saved HNSW index (%d classes) to %s (+ .dat, .json)", self.n_classes, final_index)

    @classmethod
    def load(cls, path: str | os.PathLike) -> HNSWIndex:
        """Read an index written by :meth:`save`; errors name the missing, unreadable or inconsistent file.

        Nothing in the three files is trusted: the parameters file is size-bounded and its every
        field type-checked; the graph and data files are each read once, into a private temporary
        copy, with their size and sha256 checked on the bytes copied; svbop's readers then check
        every field, count, level and neighbour id of the graph and every object and vector of
        the data (finite values, feature ids within ``D``, the space the parameters name), and
        only then does NMSLIB load the copies (a damaged or crafted index is a ValueError, never
        a crash).  The graph svbop's own search uses is the one checked here.
        """
        nm = _nmslib()
        index_file, data_file, info_file = cls.files(path)
        for file, what in ((index_file, "HNSW index graph"), (data_file, "HNSW index data, written by "
                           "saveIndex(save_data=True)"), (info_file, "HNSW index parameters")):
            if not file.is_file():
                raise ValueError(f"{file}: no such file (the {what})")
        info = _read_info(info_file)
        try:
            self = cls(M=info["M"], ef_construction=info["efC"], post=info["post"],
                       n_threads=info.get("build_threads") or 1)
        except ValueError as exc:
            raise ValueError(f"{info_file}: {exc}") from None
        self.n_classes, self.n_features, self.sparse = info["K"], info["D"], info["sparse"]
        self.space, self.bias_shift = info["space"], float(info["bias_shift"])
        self.center_bias = self.bias_shift != 0.0
        self.build_seconds = info.get("build_seconds")
        self.build_threads = info.get("build_threads")
        self.nmslib_version = info.get("nmslib_version")
        if self.nmslib_version != _nmslib_version():
            logger.warning("%s was built with NMSLIB %s, this is %s", index_file, self.nmslib_version,
                           _nmslib_version())
        K, D = self.n_classes, self.n_features
        with tempfile.TemporaryDirectory(prefix="svbop-hnsw-load-") as folder:  # private (mode 0700)
            graph_copy, data_copy, _ = cls.files(Path(folder) / "index")
            _copy_verified(index_file, graph_copy, info["files"]["graph"], info_file)
            _copy_verified(data_file, data_copy, info["files"]["data"], info_file)
            graph = None  # the graph first: its layout says whether the index is dense or sparse
            if self.sparse:
                _read_regular_graph(graph_copy, K, index_file)
            else:
                graph = _read_graph(graph_copy, K, D, index_file)
            ids, vectors = _read_data(data_copy, K, D, self.space, data_file)
            if graph is not None:
                if not np.array_equal(graph.ids, ids):
                    raise ValueError(f"{data_file}: its object ids differ from those of {index_file.name}: the files "
                                     "are not one index; rebuild it")
                for lo in range(0, K, _CHECK_ROWS):
                    if not np.array_equal(graph.vectors[lo : lo + _CHECK_ROWS], vectors[lo : lo + _CHECK_ROWS]):
                        raise ValueError(f"{data_file}: its vectors differ from those of {index_file.name}: the "
                                         "files are not one index; rebuild it")
            del ids, vectors
            index = self._new_index(nm, self.space)
            try:
                index.loadIndex(str(graph_copy), load_data=True)
            except (RuntimeError, MemoryError, ValueError, OSError) as exc:  # not expected after the checks
                raise ValueError(f"{index_file}: NMSLIB cannot load it with {data_file.name} "
                                 f"({type(exc).__name__}: {exc})") from None
        if len(index) != K:
            raise ValueError(f"{data_file}: holds {len(index)} vectors, {info_file.name} says K = {K}")
        self._index, self._graph = index, graph
        logger.info("loaded HNSW index %s: %d classes x %d features, %s", index_file, K, D,
                    "sparse" if self.sparse else "dense")
        return self

    # ----------------------------------------------------------------------------------------
    # helpers
    # ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return 0 if self.n_classes is None else self.n_classes

    def __repr__(self) -> str:
        built = (f", K={self.n_classes}, D={self.n_features}, {'sparse' if self.sparse else 'dense'}"
                 if self._index is not None else ", not built")
        return f"HNSWIndex(M={self.M}, ef_construction={self.ef_construction}, post={self.post}{built})"

    def _check_built(self) -> None:
        if self._index is None:
            raise ValueError("the index is not built: call fit / build / from_model, or load one")

    @staticmethod
    def _new_index(nm: Any, space: str) -> Any:
        kind = nm.DataType.DENSE_VECTOR if space == _DENSE_SPACE else nm.DataType.SPARSE_VECTOR
        return nm.init(method="hnsw", space=space, data_type=kind)

    @staticmethod
    def _augment(A: np.ndarray | sp.csr_matrix, last: np.ndarray, sparse: bool, what: str):
        """``[A, last]`` as float32: C-contiguous dense or CSR (sorted indices, no explicit zeros)."""
        for name, values in ((what, A.data if sp.issparse(A) else A), ("b", last)):
            if not values.size:
                continue
            if not (np.issubdtype(values.dtype, np.number) and np.all(np.isfinite(values))):
                raise ValueError(f"{name} must hold finite numbers")
            if np.max(np.abs(values)) > _FLOAT32_MAX:
                raise ValueError(f"{name} has values too large for float32 (NMSLIB's precision): "
                                 f"max |value| {np.max(np.abs(values)):.3g}")
        column = last.astype(np.float32)[:, None]
        if sparse:
            out = sp.hstack([sp.csr_matrix(A, dtype=np.float32), sp.csr_matrix(column)], format="csr")
            out.eliminate_zeros()
            out.sort_indices()
            return out
        if sp.issparse(A):  # written straight into float32 (no float64 toarray() of the whole block)
            out = np.zeros((A.shape[0], A.shape[1] + 1), dtype=np.float32)
            A = sp.csr_matrix(A)
            if not A.has_canonical_format:  # duplicate entries add up, as in toarray()
                A = A.copy()
                A.sum_duplicates()
            out[np.repeat(np.arange(A.shape[0]), np.diff(A.indptr)), A.indices] = A.data
        else:
            out = np.empty((A.shape[0], A.shape[1] + 1), dtype=np.float32)
            out[:, :-1] = A
        out[:, -1:] = column
        return out
