"""Reader for precomputed feature matrices in ``.npz`` files.

For datasets of the paper whose inputs are features computed elsewhere rather than raw files:
the **Proteins** data (functional-domain encodings of the EC-number classes) and image datasets
whose VGG16 features were extracted by another tool (Caltech-101/256, VOC 2006/2007).  A file
holds ``X`` dense, or CSR as written by :func:`svbop.io.matrix_arrays` (``X_data``,
``X_indices``, ``X_indptr``, ``X_shape``), labels ``y`` and optionally ``class_names``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from ..io import NpzReader
from ._files import describe_parts, encode_labels, part_array, part_list, resolve
from .base import Dataset

__all__ = ["read_npz"]

logger = logging.getLogger(__name__)


def read_npz(
    root: str | os.PathLike | None,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    x_key: str = "X",
    y_key: str = "y",
    class_names_key: str | None = "class_names",
    class_names: Sequence[str] | None = None,
) -> Dataset:
    """Read precomputed features and labels from ``.npz`` files (no pickles).

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to.
    parts : mapping of str to list of file names
        Part name to the ``.npz`` files whose rows make it up.
    x_key : str
        Name of the features: a dense 2-D array ``x_key``, or a CSR matrix stored as
        ``x_key_data``, ``x_key_indices``, ``x_key_indptr``, ``x_key_shape``.
    y_key : str
        Name of the labels: a 1-D array of integers or strings, one per row.
    class_names_key : str or None
        Name of an optional array of class names.  When the files hold it, they must all hold
        the same list; the labels are then indices into it (or names from it) and the classes
        keep its order, absent classes included.  Without it the classes are the sorted union
        of the labels (integers numerically, strings lexicographically).
    class_names : sequence of str, optional
        The class names from the config, for files that hold none (labels are then indices into
        it, or names from it, as with stored names); files that hold names must hold these.

    Returns
    -------
    Dataset
        ``X`` as stored (dtype kept): a dense array (``x_kind`` ``"dense"``) or, when any file
        holds a sparse matrix, CSR (``"sparse"``); ``y``; ``class_names``; ``part`` per row;
        ``name`` empty.

    Raises
    ------
    ValueError
        Naming the file: a missing key, ``X`` not 2-D, a column count that differs from the
        first file's, labels not 1-D or not one per row, float labels that are not integers,
        labels outside ``class_names``, files that disagree on ``class_names``, or files that
        mix integer and string labels.
    """
    plist = part_list(parts)
    if class_names is not None:
        if isinstance(class_names, (str, bytes)) or not len(class_names):
            raise ValueError(f"class_names: expected a non-empty list of names, got {class_names!r}")
        class_names = [str(c) for c in class_names]
        if len(set(class_names)) != len(class_names):
            raise ValueError(f"class_names: {next(c for c in class_names if class_names.count(c) > 1)!r} is listed twice")
    mats, labels, part_names, counts, sources = [], [], [], [], []
    stored_names: list[str] | None = None
    for part, names in plist:
        n_part = 0
        for name in names:
            path = resolve(root, name)
            with NpzReader(path, "features file") as data:
                X = data.matrix(x_key)
                y = np.asarray(data[y_key])
                has_names = bool(class_names_key) and class_names_key in data
                names_here = [str(c) for c in np.asarray(data[class_names_key]).reshape(-1).tolist()] if has_names else None
            if class_names is not None:
                if names_here is not None and names_here != class_names:
                    raise ValueError(f"{path}: {class_names_key!r} differs from the configured class_names")
                names_here = class_names
            if X.ndim != 2:
                raise ValueError(f"{path}: {x_key!r} has shape {X.shape}; expected a 2-D (n_samples, n_features) matrix")
            if mats and X.shape[1] != mats[0].shape[1]:
                raise ValueError(f"{path}: {x_key!r} has {X.shape[1]} columns but {sources[0]} has {mats[0].shape[1]}")
            if y.ndim != 1 or y.shape[0] != X.shape[0]:
                raise ValueError(f"{path}: {y_key!r} has shape {y.shape}; expected one label per row of {x_key!r} ({X.shape[0]},)")
            if y.dtype.kind == "f":
                if y.size and not np.all(y == np.round(y)):
                    raise ValueError(f"{path}: {y_key!r} holds non-integer numbers (e.g. {y[y != np.round(y)][0]!r})")
                y = y.astype(np.int64)
            elif y.dtype.kind == "b":
                y = y.astype(np.int64)
            elif y.dtype.kind not in "iuUS":
                raise ValueError(f"{path}: {y_key!r} has dtype {y.dtype}; expected integer or string labels")
            if y.dtype.kind == "S":
                y = y.astype(np.str_)
            if sources and (names_here is None) != (stored_names is None):
                raise ValueError(f"{path}: {'holds' if names_here is not None else 'lacks'} {class_names_key!r}, unlike {sources[0]}")
            if names_here is not None:
                if stored_names is not None and names_here != stored_names:
                    raise ValueError(f"{path}: {class_names_key!r} differs from the one of {sources[0]}")
                stored_names = names_here
                y = _to_indices(y, names_here, path, y_key)
            elif labels and (y.dtype.kind == "U") != (labels[0].dtype.kind == "U"):
                raise ValueError(f"{path}: {y_key!r} holds {'string' if y.dtype.kind == 'U' else 'integer'} labels, unlike {sources[0]}")
            mats.append(X)
            labels.append(y)
            sources.append(path)
            n_part += X.shape[0]
        part_names.append(part)
        counts.append(n_part)

    if any(sp.issparse(m) for m in mats):
        X = sp.vstack([sp.csr_matrix(m) for m in mats], format="csr")
        kind = "sparse"
    else:
        X = mats[0] if len(mats) == 1 else np.concatenate(mats)
        kind = "dense"
    y = np.concatenate(labels)
    if stored_names is not None:
        class_names = stored_names
    else:
        if y.size == 0:
            raise ValueError(f"{sources[0]}: no rows (and no {class_names_key!r} to name the classes)")
        class_names, y = encode_labels(y)
    description = f"precomputed features read from {describe_parts(plist)} (keys {x_key!r}, {y_key!r}); X {kind} {X.dtype}"
    logger.debug("read_npz: %s rows, %d classes", X.shape, len(class_names))
    return Dataset(
        name="", X=X, y=y, class_names=class_names, description=description, x_kind=kind,
        part=part_array(part_names, counts),
    )


def _to_indices(y: np.ndarray, class_names: list[str], path, y_key: str) -> np.ndarray:
    """Labels given as indices into ``class_names`` or as names from it, as int64 indices."""
    K = len(class_names)
    if y.dtype.kind == "U":
        names = np.asarray(class_names, dtype=np.str_)
        order = np.argsort(names, kind="stable")
        pos = np.minimum(np.searchsorted(names[order], y), K - 1)
        missing = np.flatnonzero(names[order][pos] != y)
        if missing.size:
            i = int(missing[0])
            raise ValueError(f"{path}: label {str(y[i])!r} (row {i}) is not in the file's class names")
        return order[pos].astype(np.int64)
    bad = np.flatnonzero((y < 0) | (y >= K))
    if bad.size:
        raise ValueError(f"{path}: {y_key!r} holds {int(y[bad[0]])} (row {int(bad[0])}), not an index into its {K} class names")
    return y.astype(np.int64)
