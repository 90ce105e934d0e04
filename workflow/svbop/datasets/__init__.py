"""Datasets for set-valued prediction experiments: containers, readers, hierarchies, splits.

Containers      Dataset, Hierarchy (raw inputs, labels, class names, optional class tree)
Reading         read_dataset (config ``format`` -> Dataset), one module per file format:
                libsvm (LIBSVM / LSHTC), idx (MNIST), text (CSV text + label), fasta (sequences
                with taxonomy), images (image folders, Pascal VOC, image lists), npz (features)
Hierarchies     read_hierarchy, hierarchy_from_paths / _nested_lists / _edges
Offline data    load_digits, make_hierarchical_text, from_source ({builtin: ...} / {synthetic: ...})
Splits          make_split, save_split, load_split (seeded, stratified, or the source's own parts),
                drop_small_classes (``split.small_classes: drop``)
"""

from __future__ import annotations

from .base import X_KINDS, Dataset, Hierarchy
from .builtin import from_source, load_digits
from .hierarchies import (
    HIERARCHY_FORMATS,
    hierarchy_from_edges,
    hierarchy_from_labels,
    hierarchy_from_nested_lists,
    hierarchy_from_paths,
    read_hierarchy,
)
from .read import FORMATS, get_reader, read_dataset
from .splits import drop_small_classes, load_split, make_split, save_split, split_parts
from .synthetic import balanced_tree, make_hierarchical_text, random_tree

__all__ = [
    "FORMATS",
    "HIERARCHY_FORMATS",
    "X_KINDS",
    "Dataset",
    "Hierarchy",
    "balanced_tree",
    "from_source",
    "get_reader",
    "hierarchy_from_edges",
    "hierarchy_from_labels",
    "hierarchy_from_nested_lists",
    "hierarchy_from_paths",
    "load_digits",
    "load_split",
    "drop_small_classes",
    "make_hierarchical_text",
    "random_tree",
    "make_split",
    "read_dataset",
    "read_hierarchy",
    "save_split",
    "split_parts",
]
