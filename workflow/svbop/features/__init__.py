"""Feature extraction for the paper's experiments: a small CNN for images, tf-idf for text.

* :mod:`svbop.features.cnn` -- the MNIST recipe of Mortier et al. (2021): three
  convolution / batchnorm / max-pool blocks and a 32-unit dense layer trained with Adam and early
  stopping; the 32-unit hidden representation feeds a linear model afterwards.  Needs ``torch``.
* :mod:`svbop.features.tfidf` -- tf-idf weighting fitted on the training rows only.  Needs
  ``scikit-learn``.

Names are imported lazily, so ``import svbop.features`` pulls in neither torch nor
scikit-learn; the first use of a name imports its module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "CNNTrainingResult",
    "SmallCNN",
    "extract_features",
    "load_cnn",
    "save_cnn",
    "train_cnn",
    "tfidf_features",
    "tfidf_texts",
]

_LAZY = {
    "CNNTrainingResult": "cnn",
    "SmallCNN": "cnn",
    "extract_features": "cnn",
    "load_cnn": "cnn",
    "save_cnn": "cnn",
    "train_cnn": "cnn",
    "tfidf_features": "tfidf",
    "tfidf_texts": "tfidf",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .cnn import CNNTrainingResult, SmallCNN, extract_features, load_cnn, save_cnn, train_cnn
    from .tfidf import tfidf_features, tfidf_texts


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
