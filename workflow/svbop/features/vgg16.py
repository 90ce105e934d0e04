"""The paper's image features for VOC 2006/2007 and Caltech-101/256: the convolutional part of VGG16.

Mortier et al. (2021) represent each image of the VOC and Caltech datasets by the output of a
VGG16 network pre-trained on ImageNet, before its fully connected layers, and fit a linear
model on top.  Here:

* every image is opened with PIL and converted to RGB (greyscale, palette, RGBA, CMYK, ... all
  work), resized to 224 x 224 (bilinear with antialiasing, PIL's resampling -- what
  ``torchvision.transforms.Resize`` does on PIL images; the aspect ratio is not kept), scaled to
  [0, 1] and normalised with the ImageNet mean (0.485, 0.456, 0.406) and standard deviation
  (0.229, 0.224, 0.225);
* ``model.features`` of torchvision's ``vgg16`` (13 convolutions with ReLUs and 5 max-pools,
  the last pool included) maps it to 512 x 7 x 7 activations, flattened to 25,088 values
  (channel-major, as ``torch.flatten``).

:func:`vgg16_model` builds the feature extractor; :func:`vgg16_features` runs it over a list of
image files in batches.  The pipeline passes ``weights=<file>``: torchvision's ImageNet state
dict ``vgg16-397923af.pth``, fetched and checksummed by the pipeline's own ``fetch`` (config
``weights: vgg16_imagenet``) and loaded from that file by :func:`load_state_dict_file` -- no
download at run time.  ``weights="DEFAULT"`` (or ``"IMAGENET1K_V1"``) lets torchvision download
the same weights into its cache (``$TORCH_HOME``), for library use outside the pipeline; with
``weights=None`` the network is randomly initialised -- such features are meaningless for
classification and serve tests only.

Needs ``torch``, ``torchvision`` and ``Pillow``; importing :mod:`svbop.features` does not import
them (the names are loaded lazily).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import logs
from .cnn import _positive_int, _resolve_device

__all__ = [
    "VGG16_FEATURE_DIM",
    "VGG16_IMAGE_SIZE",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "vgg16_model",
    "vgg16_features",
    "load_image",
    "load_state_dict_file",
]

logger = logging.getLogger(__name__)

#: Side of the square network input, in pixels.
VGG16_IMAGE_SIZE = 224
#: Length of one feature vector: 512 channels x 7 x 7 after the last max-pool.
VGG16_FEATURE_DIM = 512 * 7 * 7
#: ImageNet normalisation of torchvision's pre-trained models (RGB order).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_WEIGHT_NAMES = ("DEFAULT", "IMAGENET1K_V1")
_MEAN = np.asarray(IMAGENET_MEAN, dtype=np.float32).reshape(3, 1, 1)
_STD = np.asarray(IMAGENET_STD, dtype=np.float32).reshape(3, 1, 1)


def load_state_dict_file(path: str | os.PathLike, module: nn.Module, *, prefix: str = "") -> nn.Module:
    """Load parameters saved with ``torch.save(state_dict)`` into ``module`` (strictly).

    Parameters
    ----------
    path : path
        The file, e.g. torchvision's ``vgg16-397923af.pth`` (keys ``features.0.weight``, ...,
        ``classifier.6.bias``).  Read with ``weights_only=True``: tensors only, no pickled code.
    module : torch.nn.Module
        Receives the entries whose key starts with ``prefix`` (the prefix removed); every one of
        its parameters and buffers must be among them, with the same shape.
    prefix : str
        E.g. ``"features."`` to load VGG16's convolutional part from the whole network's file.

    Returns
    -------
    torch.nn.Module
        ``module``.

    Raises
    ------
    ValueError
        Naming the file: missing, not a torch file (truncated, another format), not a mapping of
        tensors, no key under ``prefix``, or keys / shapes that do not fit ``module``.
    """
    import pickle
    import zipfile

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such weights file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a readable torch weights file ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise ValueError(f"{path}: expected a state dict (names -> tensors), got {type(state).__name__}")
    selected = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not selected:
        shown = ", ".join(list(state)[:3])
        raise ValueError(f"{path}: no weights under {prefix!r} (the file holds e.g. {shown})")
    expected = module.state_dict()
    missing = [k for k in expected if k not in selected]
    unexpected = [k for k in selected if k not in expected]
    if missing or unexpected:
        what = f"missing {prefix}{missing[0]}" if missing else f"unexpected {prefix}{unexpected[0]}"
        raise ValueError(
            f"{path}: does not fit the network ({what}; {len(missing)} missing, {len(unexpected)} unexpected keys)"
        )
    for k, v in expected.items():
        if tuple(selected[k].shape) != tuple(v.shape):
            raise ValueError(f"{path}: {prefix}{k} has shape {tuple(selected[k].shape)}, the network needs {tuple(v.shape)}")
    module.load_state_dict(selected, strict=True)
    return module


def vgg16_model(weights: str | os.PathLike | None = "DEFAULT") -> nn.Module:
    """The convolutional part of VGG16 (``vgg16(weights=...).features``), in eval mode, on the CPU.

    Parameters
    ----------
    weights : path, {"DEFAULT", "IMAGENET1K_V1"} or None
        A path: a state dict file of the whole VGG16 (torchvision's ``vgg16-397923af.pth``, as
        the pipeline fetches it) or of its ``features.*`` part, loaded by
        :func:`load_state_dict_file` -- nothing is downloaded.  ``"DEFAULT"`` and
        ``"IMAGENET1K_V1"``: the same ImageNet weights through torchvision (downloaded on first
        use into its cache).  ``None`` initialises the network randomly from the global torch RNG
        (seed it with ``torch.manual_seed`` for reproducible random features) -- for tests only.

    Returns
    -------
    torch.nn.Module
        A ``Sequential`` mapping (n, 3, 224, 224) normalised images to (n, 512, 7, 7).

    Raises
    ------
    ValueError
        For a weights file that is missing or does not fit (see :func:`load_state_dict_file`),
        or when torchvision cannot obtain its ImageNet weights (e.g. no network and no cached
        copy; the message says where torchvision looks).
    """
    from torchvision.models import VGG16_Weights, vgg16

    if weights is None or isinstance(weights, os.PathLike) or (isinstance(weights, str) and weights not in _WEIGHT_NAMES):
        if isinstance(weights, str) and weights.lower() == "none":
            raise ValueError("weights: give None (not the string 'none') for random weights")
        model = vgg16(weights=None).features
        if weights is not None:
            load_state_dict_file(weights, model, prefix="features.")
            logger.info("VGG16 convolutional weights loaded from %s", weights)
        model.eval()
        return model
    enum = VGG16_Weights[weights]  # "DEFAULT" is an alias of IMAGENET1K_V1
    try:
        net = vgg16(weights=enum)
    except (OSError, RuntimeError) as exc:  # URLError is an OSError; a truncated file a RuntimeError
        cache = Path(torch.hub.get_dir()) / "checkpoints"
        raise ValueError(
            f"could not load the VGG16 ImageNet weights {enum} ({exc}); torchvision downloads them "
            f"from {enum.url} into {cache} -- place the file there when offline"
        ) from exc
    model = net.features
    model.eval()
    return model


def load_image(path: str | os.PathLike, size: int = VGG16_IMAGE_SIZE) -> np.ndarray:
    """One image as the network input: float32 (3, size, size), RGB, ImageNet-normalised.

    Raises
    ------
    ValueError
        ``"<path>: ..."`` when the file is missing or PIL cannot read it.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such image file") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{path}: unreadable image ({type(exc).__name__}: {exc})") from None
    arr = np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1) / np.float32(255.0)
    return (arr - _MEAN) / _STD


class _ImageFiles(torch.utils.data.Dataset):
    """Paths -> (index, image or None, error message or None); errors are raised by the caller."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        try:
            return i, load_image(self.paths[i]), None
        except ValueError as exc:
            return i, None, str(exc)


def _collate(items):
    for _, _, error in items:
        if error is not None:
            return None, None, error
    index = torch.tensor([i for i, _, _ in items], dtype=torch.int64)
    return index, torch.from_numpy(np.stack([img for _, img, _ in items])), None


def vgg16_features(
    paths: Sequence[str | os.PathLike],
    root: str | os.PathLike | None = None,
    *,
    weights: str | None = "DEFAULT",
    batch_size: int = 32,
    device=None,
    n_threads: int | None = None,
    num_workers: int = 0,
    progress: bool | Callable[[int, int], object] | None = None,
    model: nn.Module | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """VGG16 convolutional features of image files: float32 of shape (n, 25088).

    Parameters
    ----------
    paths : sequence of path
        The image files, e.g. ``Dataset.X`` of an ``image_paths`` dataset.
    root : path, optional
        Folder relative paths are taken from (the dataset's raw folder); absolute paths are
        used as they are.
    weights : path, {"DEFAULT", "IMAGENET1K_V1"} or None
        Passed to :func:`vgg16_model` (ignored when ``model`` is given): a weights file (the
        pipeline's), torchvision's download, or random.  ``None`` gives
        features of a random network, for tests only.
    batch_size : int
        Images per forward pass.  The features do not depend on it (up to float rounding).
    device : str or torch.device, optional
        Default: CUDA when available, else CPU.
    n_threads : int, optional
        ``torch.set_num_threads`` during the run (restored afterwards); default: leave as is.
    num_workers : int
        Worker processes decoding images (``torch.utils.data.DataLoader``); 0 decodes in this
        process.
    progress : bool or callable, optional
        None or True (default): a progress bar on stderr and a log line at every tenth of the
        batches, through :func:`svbop.logs.progress` (passing that function itself means the
        same); False: neither; a callable: called as ``progress(done, total)`` (numbers of
        images) after every batch instead.
    model : torch.nn.Module, optional
        A feature extractor from :func:`vgg16_model`, to reuse one network over several calls
        (e.g. a randomly initialised one).  It is moved to ``device`` and left in eval mode.
    out : ndarray, optional
        Preallocated float32 array of shape (n, 25088) to write into (e.g. an ``np.memmap``
        for a large dataset); returned.

    Returns
    -------
    ndarray of float32, shape (n, 25088)

    Raises
    ------
    ValueError
        Naming the path of a missing or unreadable image (missing files are looked for before
        the network runs), or for bad arguments.
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise ValueError("paths must be a sequence of image paths, got a single path")
    files = [Path(p) if root is None or Path(p).is_absolute() else Path(root) / p for p in paths]
    n = len(files)
    batch_size = _positive_int(batch_size, "batch_size")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
        raise ValueError(f"num_workers must be an integer >= 0, got num_workers={num_workers!r}")
    if n_threads is not None:
        n_threads = _positive_int(n_threads, "n_threads")
    if progress is None or progress is logs.progress:  # the iterator wrapper itself: the default
        progress = True
    if not isinstance(progress, bool) and not callable(progress):
        raise ValueError(f"progress must be a bool or a callable(done, total), got {type(progress).__name__}")
    if out is None:
        out = np.empty((n, VGG16_FEATURE_DIM), dtype=np.float32)
    elif out.shape != (n, VGG16_FEATURE_DIM) or out.dtype != np.float32:
        raise ValueError(f"out must be float32 of shape {(n, VGG16_FEATURE_DIM)}, got {out.dtype} {out.shape}")
    if n == 0:
        return out
    missing = [f for f in files if not f.is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more missing)" if len(missing) > 1 else ""
        raise ValueError(f"{missing[0]}: no such image file{more}")

    dev = _resolve_device(device)
    previous_threads = torch.get_num_threads()
    if n_threads is not None:
        torch.set_num_threads(n_threads)
    try:
        if model is None:
            model = vgg16_model(weights)
        model.to(dev)
        model.eval()
        loader = torch.utils.data.DataLoader(
            _ImageFiles(files),
            batch_size=batch_size,
            shuffle=False,
            num_workers=int(num_workers),
            collate_fn=_collate,
            pin_memory=dev.type == "cuda",
        )
        n_batches = len(loader)
        batches = iter(loader)
        if progress is True:
            batches = logs.progress(batches, desc="VGG16 features", total=n_batches, logger=logger)
        logger.info(
            "VGG16 features of %d images: %d batches of %d, device %s, %d threads, %d workers",
            n, n_batches, batch_size, dev, torch.get_num_threads(), num_workers,
        )  # fmt: skip
        start, done = time.perf_counter(), 0
        try:
            with torch.inference_mode():
                for index, images, error in batches:
                    if error is not None:
                        raise ValueError(error)
                    feats = model(images.to(dev, non_blocking=True))
                    idx = index.numpy()
                    out[idx] = torch.flatten(feats, 1).float().cpu().numpy()
                    done += idx.size
                    if callable(progress):
                        progress(done, n)
        finally:
            if hasattr(batches, "close"):
                batches.close()
        seconds = time.perf_counter() - start
        logger.info("VGG16 features: %d images in %.1f s (%.3f s per image)", n, seconds, seconds / n)
    finally:
        if n_threads is not None:
            torch.set_num_threads(previous_threads)
    return out
