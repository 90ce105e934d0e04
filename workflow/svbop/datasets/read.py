"""One entry point from a dataset's config (``format`` + ``hierarchy``) to a :class:`Dataset`.

Every reader has the signature ``read_<kind>(root, parts, **options) -> Dataset``: ``parts`` maps
a part name of the source (``train``, ``test``, ...) to the files (relative to ``root``) whose
rows make it up.  :func:`read_dataset` picks the reader named by ``format["kind"]``, passes the
other keys as options, attaches the hierarchy when one is configured, and names the dataset.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Callable

from ._files import OptionHint
from .base import Dataset

__all__ = ["FORMATS", "get_reader", "read_dataset"]

logger = logging.getLogger(__name__)

#: Format kind -> (module, reader function) under :mod:`svbop.datasets`.
FORMATS: dict[str, tuple[str, str]] = {
    "libsvm": ("libsvm", "read_libsvm"),
    "mnist_idx": ("idx", "read_mnist_idx"),
    "csv_text": ("text", "read_csv_text"),
    "fasta": ("fasta", "read_fasta"),
    "image_folder": ("images", "read_image_folder"),
    "voc": ("images", "read_voc"),
    "image_list": ("images", "read_image_list"),
    "npz": ("npz", "read_npz"),
    "model_outputs": ("outputs", "read_model_outputs"),
}


def get_reader(kind: str, where: str = "format") -> Callable[..., Dataset]:
    """The reader function of a format kind (see :data:`FORMATS`); ``where`` names the config key."""
    if kind not in FORMATS:
        raise ValueError(f"{where}.kind: {kind!r} is not one of {sorted(FORMATS)}")
    module, func = FORMATS[kind]
    return getattr(importlib.import_module(f"{__package__}.{module}"), func)


def read_dataset(
    root: str | os.PathLike,
    format: Mapping[str, Any],
    *,
    hierarchy: Mapping[str, Any] | None = None,
    name: str = "",
    where: str = "format",
) -> Dataset:
    """Parse a dataset's raw files into a :class:`Dataset`.

    Parameters
    ----------
    root : path
        Folder holding the raw files (the pipeline's ``data/<dataset>/raw``).
    format : mapping
        ``kind`` (a key of :data:`FORMATS`), ``parts`` (part name -> list of files) and the
        reader's options, e.g. ``{"kind": "libsvm", "parts": {"train": ["train.txt"]},
        "ignore_features": [0]}``.
    hierarchy : mapping, optional
        ``{"format": ..., "file": ..., ...}`` or ``{"from_label": {"sep": "."}}`` for
        :func:`~svbop.datasets.hierarchies.read_hierarchy`; it replaces a hierarchy the reader
        built (e.g. from FASTA taxonomies).
    name : str
        Name given to the dataset.
    where : str
        Config key of ``format``, for messages (e.g. ``"datasets.lshtc1.format"``).

    Raises
    ------
    ValueError
        For an unknown kind or option (the message names the config key and the known
        options), a missing required option or ``parts``, or any parse error of the reader (which
        names file and line); an error whose fix is an option of the reader
        (:class:`~svbop.datasets._files.OptionHint`, e.g. ``set `sep: "\\t"```) names the key
        it goes under, ``where``.
    """
    from .hierarchies import read_hierarchy

    spec = dict(format)
    kind = spec.pop("kind", None)
    if kind is None:
        raise ValueError(f"{where}.kind: missing (one of {sorted(FORMATS)})")
    reader = get_reader(kind, where)
    parts = spec.pop("parts", None)
    if not isinstance(parts, Mapping) or not parts:
        raise ValueError(f"{where}.parts: expected a mapping of part name to a list of files, got {parts!r}")
    if kind == "model_outputs":  # split name -> {scores: FILE, labels: FILE}
        parts = {str(k): dict(v) if isinstance(v, Mapping) else v for k, v in parts.items()}
    else:
        parts = {str(k): [str(f) for f in ([v] if isinstance(v, (str, os.PathLike)) else v)] for k, v in parts.items()}
    params = inspect.signature(reader).parameters
    known = [p for p in params if p not in ("root", "parts")]
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown option for kind {kind!r} (known: {', '.join(known) or 'none'})")
    required = [p for p in known if params[p].default is inspect.Parameter.empty and p not in spec]
    if required:
        raise ValueError(f"{where}.{required[0]}: missing (kind {kind!r} needs {', '.join(required)})")
    t0 = time.perf_counter()
    try:
        dataset = reader(root, parts, **spec)
    except OptionHint as exc:  # the option to set goes under this dataset's format key
        exc.where = where
        raise
    if hierarchy:
        key = f"{where[: -len('.format')]}.hierarchy" if where.endswith(".format") else "hierarchy"
        dataset.hierarchy = read_hierarchy(root, hierarchy, dataset.class_names, where=key)
    dataset.name = str(name)
    logger.info(
        "read %s (%s): %d rows, %d classes, X %s, parts %s, in %.1f s",
        name or "dataset", kind, dataset.n_samples, dataset.n_classes, dataset.X.shape,
        {p: int((dataset.part == p).sum()) for p in parts} if dataset.part is not None else "-",
        time.perf_counter() - t0,
    )
    return dataset
