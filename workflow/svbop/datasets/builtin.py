"""Small datasets that ship with installed libraries (no download needed)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import Dataset

__all__ = ["load_digits", "from_source"]

logger = logging.getLogger(__name__)


def load_digits() -> Dataset:
    """The handwritten digits bundled with scikit-learn, as 8 x 8 images in [0, 1].

    1797 images of the digits 0-9 (the test part of the UCI "Optical Recognition of
    Handwritten Digits" data, 4 x 4 blocks of a 32 x 32 bitmap counted, giving pixels 0..16),
    read offline from scikit-learn's package data.

    Returns
    -------
    Dataset
        ``X`` float32 of shape (1797, 8, 8) holding ``pixel / 16``; ``y`` int64 in 0..9;
        ``class_names`` ``"0" .. "9"``; name ``"digits"``; no hierarchy.

    Raises
    ------
    ImportError
        If scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits as _sk_load_digits
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("load_digits needs scikit-learn (pip install scikit-learn)") from exc
    bunch = _sk_load_digits()
    X = (np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0)).astype(np.float32)
    y = np.asarray(bunch.target, dtype=np.int64)
    logger.debug("loaded scikit-learn digits: %s images", X.shape[0])
    return Dataset(
        name="digits",
        X=X,
        y=y,
        class_names=[str(d) for d in range(10)],
        description=(
            "Handwritten digits 0-9 as 8x8 grey-level images scaled to [0, 1] (pixel / 16): "
            "the UCI Optical Recognition of Handwritten Digits data set (Alpaydin and Kaynak, "
            "1998), as bundled with scikit-learn (sklearn.datasets.load_digits)."
        ),
        synthetic=False,
    )


def from_source(name: str, source: Mapping[str, Any], *, seed: int = 0) -> Dataset:
    """Build a dataset from a pipeline ``source`` spec (one kind per spec).

    Parameters
    ----------
    name : str
        Name given to the dataset (the config key).
    source : mapping with exactly one key
        ``{"builtin": "digits"}``, or ``{"synthetic": {...}}`` whose value holds keyword
        arguments of :func:`~svbop.datasets.make_hierarchical_text` (its ``seed`` wins over
        the ``seed`` argument).
    seed : int
        Seed for generated data when the spec gives none.

    Raises
    ------
    ValueError
        For an unknown kind, builtin name or synthetic parameter (named in the message).
    """
    from .synthetic import make_hierarchical_text

    if not isinstance(source, Mapping) or len(source) != 1:
        raise ValueError(f"source: expected a mapping with exactly one kind ('builtin' or 'synthetic'), got {source!r}")
    (kind, spec), = source.items()
    if kind == "builtin":
        loaders = {"digits": load_digits}
        if spec not in loaders:
            raise ValueError(f"source.builtin: unknown dataset {spec!r} (known: {sorted(loaders)})")
        dataset = loaders[spec]()
    elif kind == "synthetic":
        params = dict(spec or {})
        params.setdefault("seed", seed)
        if "branching" in params:
            params["branching"] = tuple(params["branching"])
        try:
            dataset = make_hierarchical_text(**params)
        except TypeError as exc:
            raise ValueError(f"source.synthetic: {exc}") from None
    else:
        raise ValueError(f"source: unknown kind {kind!r} (use 'builtin' or 'synthetic')")
    dataset.name = str(name)
    return dataset
