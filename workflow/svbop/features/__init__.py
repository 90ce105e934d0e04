"""Feature extraction for the paper's experiments: CNNs for images, tf-idf for text and sequences.

* :mod:`svbop.features.cnn` -- the MNIST recipe of Mortier et al. (2021): three
  convolution / batchnorm / max-pool blocks and a 32-unit dense layer trained with Adam and early
  stopping; the 32-unit hidden representation feeds a linear model afterwards.  Needs ``torch``.
* :mod:`svbop.features.raw` -- a dataset's own numeric inputs as a feature matrix.
* :mod:`svbop.features.vgg16` -- the convolutional part of an ImageNet VGG16 (25,088 values per
  image) for the VOC and Caltech image datasets.  Needs ``torch``, ``torchvision``, ``Pillow``.
* :mod:`svbop.features.tfidf` -- tf-idf weighting fitted on the training rows only: of term
  counts, of documents (word n-grams) and of DNA / protein sequences (k-mers).  Needs
  ``scikit-learn``.
* :mod:`svbop.features.domains` -- the binary Pfam functional-domain encoding of protein
  sequences (read from HMMER / pfam_scan output), appended to the Proteins 3-mers.
* :mod:`svbop.features.binning` -- random binning features of the Laplacian kernel (Rahimi and
  Recht), the paper's ALOI.BIN representation computed from plain ALOI.

Names are imported lazily, so ``import svbop.features`` pulls in neither torch nor
scikit-learn; the first use of a name imports its module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "CNNTrainingResult",
    "RandomBinning",
    "SmallCNN",
    "domain_encoding",
    "extract_features",
    "load_cnn",
    "random_binning_features",
    "raw_features",
    "read_domain_annotations",
    "read_families",
    "save_cnn",
    "train_cnn",
    "tfidf_features",
    "tfidf_strings",
    "tfidf_texts",
    "vgg16_features",
    "vgg16_model",
]

_LAZY = {
    "CNNTrainingResult": "cnn",
    "RandomBinning": "binning",
    "domain_encoding": "domains",
    "random_binning_features": "binning",
    "read_domain_annotations": "domains",
    "read_families": "domains",
    "SmallCNN": "cnn",
    "extract_features": "cnn",
    "load_cnn": "cnn",
    "raw_features": "raw",
    "save_cnn": "cnn",
    "train_cnn": "cnn",
    "tfidf_features": "tfidf",
    "tfidf_strings": "tfidf",
    "tfidf_texts": "tfidf",
    "vgg16_features": "vgg16",
    "vgg16_model": "vgg16",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .binning import RandomBinning, random_binning_features
    from .domains import domain_encoding, read_domain_annotations, read_families
    from .cnn import CNNTrainingResult, SmallCNN, extract_features, load_cnn, save_cnn, train_cnn
    from .raw import raw_features
    from .tfidf import tfidf_features, tfidf_strings, tfidf_texts
    from .vgg16 import vgg16_features, vgg16_model


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
