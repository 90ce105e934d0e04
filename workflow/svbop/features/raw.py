"""The source's own features as model inputs (precomputed features: ALOI.BIN, ``.npz`` files)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["raw_features"]


def raw_features(dataset) -> np.ndarray | sp.csr_matrix:
    """``dataset.X`` as a 2-D feature matrix: CSR stays CSR, dense arrays become float32 rows.

    Images ``(N, H, W)`` / ``(N, C, H, W)`` are flattened to ``(N, H*W[*C])``.

    Raises
    ------
    ValueError
        For string inputs (texts, sequences, image paths): they need a feature extractor
        (``features.kind`` tfidf or vgg16), named in the message.
    """
    if dataset.x_kind in ("text", "sequences", "image_paths"):
        hint = "vgg16" if dataset.x_kind == "image_paths" else "tfidf"
        raise ValueError(
            f"dataset {dataset.name!r} holds {dataset.x_kind}, not features: use features.kind {hint!r} instead of 'raw'"
        )
    X = dataset.X
    if sp.issparse(X):
        return sp.csr_matrix(X)
    X = np.asarray(X)
    return np.ascontiguousarray(X.reshape(X.shape[0], -1), dtype=np.float32)
