"""Datasets for set-valued prediction experiments.

Dataset, Hierarchy          containers (raw inputs, labels, class names, optional class tree)
load_digits                 scikit-learn's bundled 8x8 handwritten digits (offline)
from_source                 a dataset from a pipeline source spec ({builtin: digits} / {synthetic: {...}})
make_hierarchical_text      seeded synthetic bag-of-words data with a known class tree
make_split, save_split, load_split   seeded (stratified) train/validation/calibration/test splits
"""

from __future__ import annotations

from .base import Dataset, Hierarchy
from .builtin import from_source, load_digits
from .splits import load_split, make_split, save_split
from .synthetic import balanced_tree, make_hierarchical_text

__all__ = [
    "Dataset",
    "Hierarchy",
    "balanced_tree",
    "from_source",
    "load_digits",
    "load_split",
    "make_hierarchical_text",
    "make_split",
    "save_split",
]
