"""Reader for the IDX format of **MNIST** (one of the paper's image datasets).

An IDX file is a 4-byte magic number ``0x00 0x00 <dtype code> <ndim>``, then ``ndim`` big-endian
unsigned 32-bit dimensions, then the values in C order, big-endian.  MNIST ships four such
files: ``train-images-idx3-ubyte`` (60000 x 28 x 28 uint8), ``train-labels-idx1-ubyte``
(60000 uint8), and the ``t10k-`` pair for the 10000 test images; they are usually gzipped.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Mapping, Sequence

import numpy as np

from ..io import inflate_problem
from ._files import describe_parts, is_compressed, open_binary, part_array, part_list, resolve
from .base import Dataset

__all__ = ["IDX_DTYPES", "read_idx", "read_mnist_idx"]

logger = logging.getLogger(__name__)

#: IDX type code -> numpy dtype (big-endian as stored).
IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (plain, or compressed ``.gz`` / ``.bz2`` / ``.xz``).

    Parameters
    ----------
    path : path
        The file.

    Returns
    -------
    ndarray
        Shape given by the header, values in native byte order (``uint8`` for MNIST).

    Raises
    ------
    ValueError
        ``"<path>: ..."`` for a missing file, a bad magic number, an unknown type code, or a
        data size that differs from the one the header announces (truncated or extra bytes);
        the message says what was expected and what was found.  The header is checked against
        the file's size (compressed: against the decompression bound of
        :func:`svbop.io.inflate_bounds`) before the array is allocated.
    """
    path = resolve(None, path)
    try:
        with open_binary(path) as fh:
            magic = fh.read(4)
            if len(magic) < 4:
                raise ValueError(f"{path}: too short for an IDX file ({len(magic)} bytes, the magic number needs 4)")
            if magic[0] != 0 or magic[1] != 0:
                raise ValueError(f"{path}: not an IDX file (magic number starts with 0x{magic[0]:02x} 0x{magic[1]:02x}, expected 0x00 0x00)")
            code, ndim = magic[2], magic[3]
            if code not in IDX_DTYPES:
                known = ", ".join(f"0x{c:02x}" for c in IDX_DTYPES)
                raise ValueError(f"{path}: unknown IDX type code 0x{code:02x} (expected one of {known})")
            if ndim == 0:
                raise ValueError(f"{path}: IDX header declares 0 dimensions (expected at least 1)")
            head = fh.read(4 * ndim)
            if len(head) < 4 * ndim:
                raise ValueError(f"{path}: truncated IDX header: {ndim} dimensions need {4 * ndim} bytes, found {len(head)}")
            dims = struct.unpack(f">{ndim}I", head)
            dtype = IDX_DTYPES[code]
            expected = dtype.itemsize
            for n in dims:  # Python ints: 10**9 x 28 x 28 x 8 does not overflow
                expected *= n
            shape = " x ".join(map(str, dims))
            size = path.stat().st_size
            # Check the header against the file before allocating what it announces.
            if not is_compressed(path):
                found = size - 4 - 4 * ndim
                if found != expected:
                    raise ValueError(
                        f"{path}: the IDX header announces {shape} values of {dtype.name} = {expected} bytes of data, "
                        f"found {found} bytes ({'truncated' if found < expected else 'extra bytes at the end'})"
                    )
            else:
                problem = inflate_problem(expected, size)
                if problem is not None:
                    raise ValueError(f"{path}: the IDX header announces {shape} values of {dtype.name} = {expected} "
                                     f"bytes of data; {problem}")
            data = bytearray(expected)  # writable, so the array needs no copy
            view, got = memoryview(data), 0
            while got < expected:
                n = fh.readinto(view[got:])
                if not n:
                    break
                got += n
            extra = len(fh.read(1 << 20)) if got == expected else 0
            if got != expected or extra:
                found = got + extra + len(fh.read())  # the rest, to say how much there is (bounded)
                raise ValueError(
                    f"{path}: the IDX header announces {shape} values of {dtype.name} = {expected} bytes of data, "
                    f"found {found} bytes ({'truncated' if found < expected else 'extra bytes at the end'})"
                )
    except (OSError, EOFError) as exc:  # a corrupt .gz, an unreadable file
        raise ValueError(f"{path}: cannot read ({exc})") from None
    return np.frombuffer(data, dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="), copy=False)


def read_mnist_idx(
    root: str | os.PathLike | None,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    class_names: Sequence[str] | None = None,
) -> Dataset:
    """Read MNIST-style image and label IDX files into an image dataset.

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to.
    parts : mapping of str to [images_file, labels_file]
        E.g. ``{"train": ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"],
        "test": ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]}``.
    class_names : sequence of str, optional
        Names of the classes, label ``j`` being ``class_names[j]`` (Fashion-MNIST: ``["T-shirt/top",
        "Trouser", ...]``); labels must then be below ``len(class_names)``.  Default: the digits
        ``"0" .. "9"``.

    Returns
    -------
    Dataset
        ``X`` uint8 images of shape (N, H, W) (28 x 28 for MNIST), kept as stored;
        ``x_kind`` ``"images"``; ``class_names`` as given or ``"0" .. "9"`` (all of them, present or not);
        ``y`` the digits; ``part`` per row; ``name`` empty.

    Raises
    ------
    ValueError
        For a part that does not list exactly two files, an unreadable IDX file (see
        :func:`read_idx`), images that are not a 3-D uint8 array or have another size than the
        other parts', labels that are not 1-D uint8 or exceed 9, or a count mismatch between
        images and labels (naming both files).
    """
    plist = part_list(parts)
    if class_names is not None:
        if isinstance(class_names, (str, bytes)) or not len(class_names):
            raise ValueError(f"class_names: expected a non-empty list of names, got {class_names!r}")
        class_names = [str(c) for c in class_names]
        if len(set(class_names)) != len(class_names):
            twice = next(c for c in class_names if class_names.count(c) > 1)
            raise ValueError(f"class_names: {twice!r} is listed twice")
    names_out = class_names if class_names is not None else [str(d) for d in range(10)]
    images, labels, names, counts = [], [], [], []
    for part, files in plist:
        if len(files) != 2:
            raise ValueError(f"parts[{part!r}]: expected [images_file, labels_file], got {files!r}")
        img_path, lab_path = resolve(root, files[0]), resolve(root, files[1])
        img, lab = read_idx(img_path), read_idx(lab_path)
        if img.ndim != 3 or img.dtype != np.uint8:
            raise ValueError(f"{img_path}: expected uint8 images of shape (N, H, W), found {img.dtype} of shape {img.shape}")
        if lab.ndim != 1 or lab.dtype != np.uint8:
            raise ValueError(f"{lab_path}: expected uint8 labels of shape (N,), found {lab.dtype} of shape {lab.shape}")
        if img.shape[0] != lab.shape[0]:
            raise ValueError(f"{img_path}: holds {img.shape[0]} images but {lab_path} holds {lab.shape[0]} labels")
        if images and img.shape[1:] != images[0].shape[1:]:
            raise ValueError(f"{img_path}: images of {img.shape[1]} x {img.shape[2]}, but {plist[0][1][0]} has {images[0].shape[1]} x {images[0].shape[2]}")
        big = np.flatnonzero(lab >= len(names_out))
        if big.size:
            what = "a digit 0..9" if class_names is None else f"an index into the {len(names_out)} class_names"
            raise ValueError(f"{lab_path}: label {int(lab[big[0]])} of image {int(big[0])} (of {img_path}) is not {what}")
        images.append(img)
        labels.append(lab)
        names.append(part)
        counts.append(lab.shape[0])
    X = images[0] if len(images) == 1 else np.concatenate(images)
    y = np.concatenate(labels).astype(np.int64)
    description = f"IDX images and labels (MNIST format) read from {describe_parts(plist)}; X uint8 {X.shape[1]} x {X.shape[2]}"
    logger.debug("read_mnist_idx: %d images of %s", X.shape[0], X.shape[1:])
    return Dataset(
        name="", X=X, y=y, class_names=names_out, description=description,
        x_kind="images", part=part_array(names, counts),
    )
