"""The paper's image recipe: a small CNN whose 32-unit hidden layer is the feature vector.

Mortier et al. (2021), appendix "Experimental setup", for MNIST: "a convolutional neural network
with three consecutive convolutional, batchnorm and max-pool layers, followed by a fully connected dense
layer with 32 hidden units.  ReLU activations, categorical cross-entropy loss, Adam with learning
rate 1e-3.  The number of epochs is set to 100 and early stopping is applied with a patience of
five."  The hidden representation (after its ReLU) is then given to a liblinear logistic
regression, which supplies the conditional class probabilities.

* :class:`SmallCNN` -- ``len(channels)`` x [Conv2d 3x3 (padding 1) -> BatchNorm2d -> ReLU ->
  MaxPool2d(2)] -> flatten -> Linear(hidden) -> ReLU -> Linear(n_classes).
* :func:`train_cnn` -- Adam + cross-entropy, early stopping on the validation loss; the state of
  the best epoch (lowest validation loss) is restored at the end.  Seeded and deterministic on CPU.
* :func:`extract_features` -- the hidden activations, ``float32`` of shape ``(n, hidden)``.
* :func:`save_cnn` / :func:`load_cnn` -- a plain checkpoint (state dict, constructor arguments,
  metadata) that ``torch.load(path, weights_only=True)`` reads; no pickled classes.

Images are numpy arrays of shape ``(n, H, W)`` (one channel) or ``(n, C, H, W)``, already scaled
(e.g. pixel values / 255, or / 16 for scikit-learn's digits); both sides must be at least
``2 ** len(channels)`` pixels (8 for the default three blocks: 8 -> 4 -> 2 -> 1).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..io import atomic_path
from ..logs import progress
from ..metrics import check_labels

__all__ = [
    "SmallCNN",
    "CNNTrainingResult",
    "train_cnn",
    "extract_features",
    "save_cnn",
    "load_cnn",
    "CHECKPOINT_FORMAT",
]

logger = logging.getLogger(__name__)

#: Value of the ``"format"`` entry of checkpoints written by :func:`save_cnn`.
CHECKPOINT_FORMAT = "svbop.features.cnn.SmallCNN/1"


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")
    return int(value)


def _as_images(X, name: str = "X") -> np.ndarray:
    """Return ``X`` as a C-contiguous float32 array of shape (n, C, H, W); uint8 pixels (as MNIST's
    idx files hold them) are scaled to [0, 1]."""
    arr = np.asarray(X)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must be a real-valued image array, got dtype {arr.dtype}")
    if arr.ndim == 3:
        arr = arr[:, None, :, :]
    elif arr.ndim != 4:
        raise ValueError(f"{name} must have shape (n, H, W) or (n, C, H, W), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} holds no images (shape {arr.shape})")
    if arr.dtype == np.uint8:
        arr = arr.astype(np.float32) / np.float32(255.0)
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _resolve_device(device) -> torch.device:
    """``None`` -> CUDA when available, else CPU; otherwise a valid :class:`torch.device`."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was asked for but CUDA is not available")
    return dev


def _model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


# --------------------------------------------------------------------------------------------
# The network
# --------------------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    """Convolution / batchnorm / max-pool blocks followed by one hidden dense layer.

    Parameters
    ----------
    in_channels : int
        Channels of the input images (1 for MNIST).
    n_classes : int
        Number of output classes (>= 2).
    image_size : (int, int)
        Height and width of the input images; each at least ``2 ** len(channels)``.
    channels : sequence of int
        Output channels of the convolution blocks (the paper uses three blocks).
    hidden : int
        Units of the dense hidden layer, i.e. the dimension of :meth:`features` (32 in the paper).

    Attributes
    ----------
    config : dict
        The constructor arguments (plain Python values), as stored by :func:`save_cnn`.
    meta : dict
        Free-form metadata: empty for a new network, the saved metadata after :func:`load_cnn`.
    """

    def __init__(
        self,
        in_channels: int,
        n_classes: int,
        image_size: tuple[int, int],
        channels: Sequence[int] = (32, 64, 128),
        hidden: int = 32,
    ) -> None:
        super().__init__()
        in_channels = _positive_int(in_channels, "in_channels")
        n_classes = _positive_int(n_classes, "n_classes", 2)
        hidden = _positive_int(hidden, "hidden")
        if isinstance(channels, (str, bytes)) or not isinstance(channels, Sequence) or len(channels) == 0:
            raise ValueError(f"channels must be a non-empty sequence of integers, got channels={channels!r}")
        channels = tuple(_positive_int(c, "channels[]") for c in channels)
        if not isinstance(image_size, Sequence) or len(image_size) != 2:
            raise ValueError(f"image_size must be (height, width), got image_size={image_size!r}")
        height, width = (_positive_int(s, "image_size[]") for s in image_size)
        smallest = 2 ** len(channels)
        if height < smallest or width < smallest:
            raise ValueError(
                f"image_size={(height, width)} is too small for {len(channels)} max-pool blocks: "
                f"both sides must be at least {smallest}"
            )
        #: Free-form metadata; :func:`load_cnn` fills it from the checkpoint.
        self.meta: dict[str, Any] = {}
        self.config: dict[str, Any] = {
            "in_channels": in_channels,
            "n_classes": n_classes,
            "image_size": (height, width),
            "channels": channels,
            "hidden": hidden,
        }
        blocks: list[nn.Module] = []
        previous, h, w = in_channels, height, width
        for c in channels:
            blocks += [
                nn.Conv2d(previous, c, kernel_size=3, padding=1),
                nn.BatchNorm2d(c),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            previous, h, w = c, h // 2, w // 2
        self.conv = nn.Sequential(*blocks)
        self.dense = nn.Sequential(nn.Flatten(), nn.Linear(previous * h * w, hidden), nn.ReLU(inplace=True))
        self.classifier = nn.Linear(hidden, n_classes)

    @property
    def hidden(self) -> int:
        """Dimension of the feature vector."""
        return self.config["hidden"]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Hidden activations (after the ReLU), shape ``(N, hidden)``."""
        return self.dense(self.conv(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits, shape ``(N, n_classes)``."""
        return self.classifier(self.features(x))

    def check_input(self, X: np.ndarray, name: str = "X") -> None:
        """Raise ValueError unless ``X`` (n, C, H, W) matches the channels and size of the network."""
        expected = (self.config["in_channels"], *self.config["image_size"])
        if tuple(X.shape[1:]) != expected:
            raise ValueError(
                f"{name} has images of shape (C, H, W) = {tuple(X.shape[1:])} but the network expects {expected}"
            )


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@dataclass
class CNNTrainingResult:
    """Outcome of :func:`train_cnn`.

    Attributes
    ----------
    model : SmallCNN
        The network with the weights of ``best_epoch`` restored, in eval mode.
    history : list of dict
        One entry per epoch run: ``epoch`` (1-based), ``train_loss`` (mean cross-entropy over the
        epoch's mini-batches, weighted by batch size), ``val_loss``, ``val_accuracy`` (eval
        mode, after the epoch) and ``seconds`` (wall time of the epoch, evaluation included).
    best_epoch : int
        Epoch with the lowest validation loss (first one on ties).
    stopped_early : bool
        True when early stopping ended training before ``max_epochs``.
    """

    model: SmallCNN
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    stopped_early: bool = False

    @property
    def n_epochs(self) -> int:
        """Number of epochs run."""
        return len(self.history)

    @property
    def best(self) -> dict[str, float]:
        """The history entry of the best epoch."""
        return self.history[self.best_epoch - 1]

    @property
    def seconds(self) -> float:
        """Total training time (sum of the epoch times)."""
        return float(sum(h["seconds"] for h in self.history))


def _evaluate(model: nn.Module, X: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device):
    """Mean cross-entropy and accuracy in eval mode."""
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, X.shape[0], batch_size):
            xb = X[start : start + batch_size].to(device)
            yb = y[start : start + batch_size].to(device)
            logits = model(xb)
            total_loss += float(nn.functional.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(dim=1) == yb).sum())
    n = X.shape[0]
    return total_loss / n, correct / n


def train_cnn(
    X_train,
    y_train,
    X_val,
    y_val,
    *,
    n_classes: int,
    hidden: int = 32,
    channels: Sequence[int] = (32, 64, 128),
    max_epochs: int = 100,
    patience: int = 5,
    lr: float = 1e-3,
    batch_size: int = 64,
    seed: int = 0,
    n_threads: int | None = None,
    device=None,
) -> CNNTrainingResult:
    """Train a :class:`SmallCNN` with Adam and cross-entropy, early stopping on validation loss.

    After each epoch the validation loss is computed (eval mode); the state with the lowest one
    is kept.  Training stops after ``patience`` consecutive epochs without a strictly lower
    validation loss (so the last epoch is ``best_epoch + patience``), or at ``max_epochs``; the
    best state is restored either way.

    Parameters
    ----------
    X_train, X_val : array-like of shape (n, H, W) or (n, C, H, W)
        Scaled images (float).  Both must have the same (C, H, W).
    y_train, y_val : array-like of shape (n,)
        Integer class indices in ``0 .. n_classes - 1``.
    n_classes : int
        Number of classes.
    hidden : int
        Units of the hidden dense layer (the feature dimension).
    channels : sequence of int
        Output channels of the convolution blocks.
    max_epochs : int
        Upper bound on the number of epochs (100 in the paper).
    patience : int
        Epochs without improvement of the validation loss before stopping (5 in the paper).
    lr : float
        Adam learning rate.
    batch_size : int
        Mini-batch size for training (evaluation uses batches of 512).
    seed : int
        Seeds the weight initialisation (a forked torch RNG, so the global torch RNG is left
        untouched) and the per-epoch shuffling.  Same seed, data and thread count on CPU ->
        identical weights.
    n_threads : int, optional
        ``torch.set_num_threads`` during training (restored afterwards); default: leave as is.
        The weights depend (in the last bits) on the thread count.  For small inputs such as
        8x8 digits one thread is as fast as two, and much faster when the cores are shared:
        torch's OpenMP threads spin-wait, so with other busy processes on a 2-core machine two
        threads were measured 15-30x slower than one.
    device : str or torch.device, optional
        Default: CUDA when available, else CPU.

    Returns
    -------
    CNNTrainingResult
    """
    X_train = _as_images(X_train, "X_train")
    X_val = _as_images(X_val, "X_val")
    if X_val.shape[1:] != X_train.shape[1:]:
        raise ValueError(
            f"X_val has images of shape {X_val.shape[1:]} but X_train has {X_train.shape[1:]} (C, H, W)"
        )
    n_classes = _positive_int(n_classes, "n_classes", 2)
    y_train = check_labels(y_train, (X_train.shape[0], n_classes), "y_train")
    y_val = check_labels(y_val, (X_val.shape[0], n_classes), "y_val")
    max_epochs = _positive_int(max_epochs, "max_epochs")
    patience = _positive_int(patience, "patience")
    batch_size = _positive_int(batch_size, "batch_size")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got seed={seed!r}")
    if not (isinstance(lr, (int, float, np.floating)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number, got lr={lr!r}")
    if n_threads is not None:
        n_threads = _positive_int(n_threads, "n_threads")
    dev = _resolve_device(device)

    previous_threads = torch.get_num_threads()
    if n_threads is not None:
        torch.set_num_threads(n_threads)
    try:
        fork_devices = [dev.index or 0] if dev.type == "cuda" else []
        with torch.random.fork_rng(devices=fork_devices):
            torch.manual_seed(int(seed))
            model = SmallCNN(X_train.shape[1], n_classes, X_train.shape[2:], channels=channels, hidden=hidden)
        model.to(dev)
        return _fit(model, X_train, y_train, X_val, y_val, max_epochs, patience, float(lr), batch_size, int(seed), dev)
    finally:
        if n_threads is not None:
            torch.set_num_threads(previous_threads)


def _fit(model, X_train, y_train, X_val, y_val, max_epochs, patience, lr, batch_size, seed, dev):
    Xt, yt = torch.from_numpy(X_train), torch.from_numpy(y_train)
    Xv, yv = torch.from_numpy(X_val), torch.from_numpy(y_val)
    n = Xt.shape[0]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    shuffler = np.random.default_rng(seed)
    logger.info(
        "training %s (%d parameters) on %d images %s, validating on %d; device %s, %d threads; "
        "max %d epochs, patience %d, batch %d, lr %g, seed %d",
        type(model).__name__,
        sum(p.numel() for p in model.parameters()),
        n,
        tuple(X_train.shape[1:]),
        Xv.shape[0],
        dev,
        torch.get_num_threads(),
        max_epochs,
        patience,
        batch_size,
        lr,
        seed,
    )
    history: list[dict[str, float]] = []
    best_loss, best_epoch, best_state = math.inf, 0, None
    stopped_early = False
    epochs = progress(range(1, max_epochs + 1), desc="CNN epochs", logger=logger, every=1.0)
    try:
        for epoch in epochs:
            start = time.perf_counter()
            model.train()
            order = torch.from_numpy(shuffler.permutation(n))
            total = 0.0
            for i in range(0, n, batch_size):
                idx = order[i : i + batch_size]
                xb, yb = Xt[idx].to(dev), yt[idx].to(dev)
                optimizer.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(model(xb), yb)
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * idx.numel()
            val_loss, val_acc = _evaluate(model, Xv, yv, 512, dev)
            seconds = time.perf_counter() - start
            history.append(
                {
                    "epoch": epoch,
                    "train_loss": total / n,
                    "val_loss": val_loss,
                    "val_accuracy": val_acc,
                    "seconds": seconds,
                }
            )
            improved = val_loss < best_loss
            if improved:
                best_loss, best_epoch = val_loss, epoch
                best_state = copy.deepcopy(model.state_dict())
            logger.info(
                "epoch %d/%d: train loss %.4f, val loss %.4f, val accuracy %.4f, %.1f s%s",
                epoch,
                max_epochs,
                total / n,
                val_loss,
                val_acc,
                seconds,
                " (best)" if improved else f" (best: epoch {best_epoch})",
            )
            if not math.isfinite(total):
                logger.warning("epoch %d: the training loss is not finite; stopping", epoch)
                stopped_early = epoch < max_epochs
                break
            if epoch - best_epoch >= patience and epoch < max_epochs:
                stopped_early = True
                break
    finally:
        epochs.close()
    if best_state is None:
        raise ValueError("training never produced a finite validation loss (check the inputs and lr)")
    model.load_state_dict(best_state)
    model.eval()
    logger.info(
        "CNN: %d epochs in %.1f s%s; best epoch %d (val loss %.4f, val accuracy %.4f)",
        len(history),
        sum(h["seconds"] for h in history),
        ", stopped early" if stopped_early else "",
        best_epoch,
        history[best_epoch - 1]["val_loss"],
        history[best_epoch - 1]["val_accuracy"],
    )
    return CNNTrainingResult(model=model, history=history, best_epoch=best_epoch, stopped_early=stopped_early)


# --------------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------------


def extract_features(model: SmallCNN, X, *, batch_size: int = 512, device=None) -> np.ndarray:
    """Hidden-layer activations of ``model`` for images ``X``.

    Parameters
    ----------
    model : SmallCNN
        A trained network (its train/eval mode is restored afterwards).
    X : array-like of shape (n, H, W) or (n, C, H, W)
        Images scaled like the training images.
    batch_size : int
        Images per forward pass.
    device : str or torch.device, optional
        Where to compute; default: the device the model's parameters are on.  The model is moved
        there (and stays there).

    Returns
    -------
    ndarray of shape (n, hidden), float32
    """
    if not isinstance(model, SmallCNN):
        raise ValueError(f"model must be a SmallCNN, got {type(model).__name__}")
    X = _as_images(X, "X")
    model.check_input(X, "X")
    batch_size = _positive_int(batch_size, "batch_size")
    dev = _model_device(model) if device is None else _resolve_device(device)
    model.to(dev)
    was_training = model.training
    model.eval()
    out = np.empty((X.shape[0], model.hidden), dtype=np.float32)
    Xt = torch.from_numpy(X)
    try:
        with torch.no_grad():
            for start in range(0, X.shape[0], batch_size):
                feats = model.features(Xt[start : start + batch_size].to(dev))
                out[start : start + feats.shape[0]] = feats.float().cpu().numpy()
    finally:
        model.train(was_training)
    return out


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------

_META_SCALARS = (type(None), bool, int, float, str)


def _plain(value, where: str):
    """Convert ``value`` to what ``torch.load(weights_only=True)`` reads back, or raise ValueError."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, _META_SCALARS):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where} has a non-string key {k!r}; checkpoint metadata needs string keys")
            out[k] = _plain(v, f"{where}[{k!r}]")
        return out
    raise ValueError(
        f"{where} = {value!r} of type {type(value).__name__} cannot be stored in a weights-only "
        "checkpoint (use numbers, strings, lists, dicts or arrays)"
    )


def save_cnn(path: str | os.PathLike, result_or_model: CNNTrainingResult | SmallCNN, **meta) -> Path:
    """Write a checkpoint atomically: state dict, constructor arguments and metadata.

    The file is a plain dict (``format``, ``config``, ``state_dict``, ``meta`` and, for a
    :class:`CNNTrainingResult`, ``history``, ``best_epoch``, ``stopped_early``) of tensors and
    Python scalars / lists / dicts, so ``torch.load(path, weights_only=True)`` reads it.

    Parameters
    ----------
    path : path
        Output file (conventionally ``.pt``); parent folders are created.
    result_or_model : CNNTrainingResult or SmallCNN
    **meta
        Extra metadata (numbers, strings, lists, dicts, arrays), e.g. ``dataset="mnist"``.

    Returns
    -------
    Path
        ``path``.
    """
    if isinstance(result_or_model, CNNTrainingResult):
        model = result_or_model.model
        training = {
            "history": _plain(result_or_model.history, "history"),
            "best_epoch": int(result_or_model.best_epoch),
            "stopped_early": bool(result_or_model.stopped_early),
        }
    elif isinstance(result_or_model, SmallCNN):
        model, training = result_or_model, {}
    else:
        raise ValueError(
            f"result_or_model must be a CNNTrainingResult or a SmallCNN, got {type(result_or_model).__name__}"
        )
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": _plain(model.config, "config"),
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "meta": _plain(meta, "meta"),
        **training,
    }
    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    logger.info("saved %s to %s", type(model).__name__, path)
    return path


def load_cnn(path: str | os.PathLike, *, device=None) -> SmallCNN:
    """Read a checkpoint written by :func:`save_cnn` (weights only; no code is unpickled).

    Parameters
    ----------
    path : path
    device : str or torch.device, optional
        Where to put the model; default: CUDA when available, else CPU.

    Returns
    -------
    SmallCNN
        In eval mode.  ``model.meta`` holds the saved metadata, plus ``history``,
        ``best_epoch`` and ``stopped_early`` when a training result was saved.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    dev = _resolve_device(device)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors come in many types
        raise ValueError(f"{path}: not a readable weights-only torch checkpoint ({exc})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path}: not a SmallCNN checkpoint (format {found!r}, expected {CHECKPOINT_FORMAT!r})")
    config = dict(payload["config"])
    config["image_size"] = tuple(config["image_size"])
    config["channels"] = tuple(config["channels"])
    model = SmallCNN(**config)
    model.load_state_dict(payload["state_dict"])
    model.meta = dict(payload.get("meta", {}))
    for key in ("history", "best_epoch", "stopped_early"):
        if key in payload:
            model.meta[key] = payload[key]
    model.to(dev)
    model.eval()
    return model
