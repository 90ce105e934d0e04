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
    :meth:`HNSWIndex.load` needs all three and not the model, and verifies both digests before
    NMSLIB reads the files, so a damaged index is a ValueError naming the file, never a crash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

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
#: NMSLIB's ids are C ints.
_MAX_ID = 2**31 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


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


def _verify(path: Path, recorded: Any, info_file: Path) -> None:
    """Raise ValueError naming ``path`` unless its size and sha256 are those recorded."""
    if not (isinstance(recorded, dict) and isinstance(recorded.get("bytes"), int)
            and isinstance(recorded.get("sha256"), str)):
        raise ValueError(f"{info_file}: no size and sha256 recorded for {path.name} (got {recorded!r}); rebuild the index")
    size = path.stat().st_size
    if size != recorded["bytes"]:
        raise ValueError(f"{path}: {size} bytes, {info_file.name} records {recorded['bytes']}: the index is damaged or "
                         f"not the one {info_file.name} describes; rebuild it")
    if _digest(path)["sha256"] != recorded["sha256"]:
        raise ValueError(f"{path}: sha256 differs from the one {info_file.name} records: the index is damaged or not "
                         f"the one {info_file.name} describes; rebuild it")


class HNSWIndex:
    """NMSLIB HNSW index over the augmented class vectors ``[w_c, b_c]``: top-k classes by score.

    Parameters
    ----------
    M : int
        HNSW's ``M``: neighbours per node on the upper layers (``2 M`` on the bottom layer); the
        paper's default is 20.
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
        self._index, self._ef = index, None
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
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` classes with the (approximately) largest scores ``w_c . x + b_c`` per row.

        Parameters
        ----------
        X : array or scipy sparse matrix of shape (n_samples, n_features)
            Queries; converted to the index's kind (dense or CSR).
        k : int
            Classes per row, ``1 <= k <= n_classes``.
        ef : int, optional
            HNSW's ``efSearch`` (candidate list width), ``>= k``; default ``k``, as in the paper
            (SVBOP-HSG sets ``efSearch`` to the current ``k``).  Larger is slower and closer to
            exact; ``ef = n_classes`` is in practice exact on small problems.
        n_threads : int
            Threads of NMSLIB's batched query; -1 means every core.  Results do not depend on it.

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
        ef = int(ef)
        threads = _n_workers("n_threads", n_threads)
        if sp.issparse(X):
            X = sp.csr_matrix(X)
        else:
            X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-d (n_samples, n_features), got shape {X.shape}")
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, the index has {self.n_features}")
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
        order = np.lexsort((ids, -scores), axis=-1)
        ids = np.take_along_axis(ids, order, axis=1)
        scores = np.take_along_axis(scores, order, axis=1)
        if short:
            logger.warning("HNSW query returned fewer than k=%d classes for %d of %d rows (ef=%d): padded with id -1",
                           k, short, n, ef)
        logger.debug("HNSW query: %d rows, k=%d, ef=%d in %.3f s", n, k, ef, time.perf_counter() - start)
        return ids, scores

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

        Each file is written under a temporary name beside it and renamed into place; the graph
        ``path`` comes last, so its presence means the other two are complete.  Parent folders are
        created.
        """
        self._check_built()
        final_index, final_data, final_info = self.files(path)
        final_index.parent.mkdir(parents=True, exist_ok=True)
        tmp_index, tmp_data, _ = self.files(final_index.with_name(f".tmp{os.getpid()}.{final_index.name}"))
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
        logger.info("saved HNSW index (%d classes) to %s (+ .dat, .json)", self.n_classes, final_index)

    @classmethod
    def load(cls, path: str | os.PathLike) -> HNSWIndex:
        """Read an index written by :meth:`save`; errors name the missing or unreadable file."""
        nm = _nmslib()
        index_file, data_file, info_file = cls.files(path)
        for file, what in ((index_file, "HNSW index graph"), (data_file, "HNSW index data, written by "
                           "saveIndex(save_data=True)"), (info_file, "HNSW index parameters")):
            if not file.is_file():
                raise ValueError(f"{file}: no such file (the {what})")
        try:
            info = json.loads(info_file.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{info_file}: not a readable JSON file ({exc})") from None
        if not isinstance(info, dict) or info.get("format") != _FORMAT:
            got = info.get("format") if isinstance(info, dict) else type(info).__name__
            raise ValueError(f"{info_file}: format is {got!r}, expected {_FORMAT!r}")
        version = info.get("version")
        if not isinstance(version, int) or version > _FORMAT_VERSION:
            raise ValueError(f"{info_file}: format version {version!r} is not one this code reads ({_FORMAT_VERSION})")
        if version < _MIN_VERSION:
            raise ValueError(f"{info_file}: format version {version} records no checksums of the index files, so they "
                             f"cannot be verified before NMSLIB reads them; rebuild the index (rule build_index)")
        missing = [key for key in ("M", "efC", "post", "K", "D", "sparse", "files") if key not in info]
        if missing:
            raise ValueError(f"{info_file}: missing keys {missing}")
        for key, what in ((key, info.get(key)) for key in ("M", "efC", "post", "K", "D")):
            if isinstance(what, bool) or not isinstance(what, int) or what < 0 or (key in ("K", "D") and what < 1):
                raise ValueError(f"{info_file}: {key} must be a non-negative integer, got {what!r}")
        if info["K"] > _MAX_ID + 1:
            raise ValueError(f"{info_file}: K = {info['K']} is beyond NMSLIB's ids")
        for file, role in ((index_file, "graph"), (data_file, "data")):
            _verify(file, info["files"].get(role) if isinstance(info["files"], dict) else None, info_file)
        try:
            self = cls(M=info["M"], ef_construction=info["efC"], post=info["post"],
                       n_threads=info.get("build_threads") or 1)
        except ValueError as exc:
            raise ValueError(f"{info_file}: {exc}") from None
        self.n_classes, self.n_features, self.sparse = int(info["K"]), int(info["D"]), bool(info["sparse"])
        space = info.get("space", _SPARSE_SPACE if self.sparse else _DENSE_SPACE)
        if space not in _SPACES or (space == _DENSE_SPACE) == self.sparse:
            raise ValueError(f"{info_file}: space {space!r} is not one of {_SPACES} matching sparse={self.sparse}")
        shift = info.get("bias_shift", 0.0)  # version 1 indexed b itself
        if not isinstance(shift, (int, float)) or not math.isfinite(shift):
            raise ValueError(f"{info_file}: bias_shift must be a finite number, got {shift!r}")
        self.space, self.bias_shift, self.center_bias = space, float(shift), shift != 0.0
        self.build_seconds = info.get("build_seconds")
        self.build_threads = info.get("build_threads")
        self.nmslib_version = info.get("nmslib_version")
        if self.nmslib_version != _nmslib_version():
            logger.warning("%s was built with NMSLIB %s, this is %s", index_file, self.nmslib_version,
                           _nmslib_version())
        index = self._new_index(nm, self.space)
        try:
            index.loadIndex(str(index_file), load_data=True)
        except RuntimeError as exc:
            raise ValueError(f"{index_file}: NMSLIB cannot load it with {data_file.name} ({exc})") from None
        if len(index) != self.n_classes:
            raise ValueError(f"{data_file}: holds {len(index)} vectors, {info_file.name} says K = {self.n_classes}")
        self._index = index
        logger.info("loaded HNSW index %s: %d classes x %d features, %s", index_file, self.n_classes,
                    self.n_features, "sparse" if self.sparse else "dense")
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
