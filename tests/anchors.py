"""The optional anchors of the cross-check tests (TorchCP 1.2.1, venn-abers), found where they were
installed apart from svbop: ``pip install --no-deps --target DIR torchcp==1.2.1 venn-abers``, with
``DIR`` given as ``SVBOP_ANCHORS`` (default ``/tmp/anchors``); or installed in the environment.

TorchCP's package imports torchsort, torch_geometric and transformers for its losses, graph and
LLM modules; when they are not installed, empty stand-ins take their place (last on the import path:
only names no installed package provides), which the classification code never uses.  A test that
needs an anchor calls :func:`torchcp` or :func:`venn_abers` and is skipped, with the reason, when
the anchor (or torch) is absent.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
from stand_ins import StandIns  # benchmarks/stand_ins.py (tests/conftest.py puts benchmarks/ on the path)

ANCHORS = os.environ.get("SVBOP_ANCHORS", "/tmp/anchors")


def _on_path():
    if os.path.isdir(ANCHORS) and ANCHORS not in sys.path:
        sys.path.append(ANCHORS)  # after the environment's own packages


def torchcp():
    """The ``torchcp`` package (1.2.1), or skip the calling test saying what is missing."""
    pytest.importorskip("torch", reason="torch is not installed (TorchCP needs it)")
    _on_path()
    if not any(isinstance(f, StandIns) for f in sys.meta_path):
        sys.meta_path.append(StandIns())
    try:
        module = importlib.import_module("torchcp")
    except ImportError as exc:
        pytest.skip(f"TorchCP is not installed (pip install --no-deps --target {ANCHORS} torchcp==1.2.1): {exc}")
    return module


def venn_abers():
    """The ``venn_abers`` package, or skip the calling test saying what is missing."""
    _on_path()
    try:
        return importlib.import_module("venn_abers")
    except ImportError as exc:
        pytest.skip(f"venn-abers is not installed (pip install --no-deps --target {ANCHORS} venn-abers): {exc}")
