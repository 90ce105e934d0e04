"""svbop: efficient Bayes-optimal set-valued prediction in multi-class classification.

Implements Mortier, Wydmuch, Dembczynski, Hullermeier and Waegeman, "Efficient set-valued
prediction in multi-class classification", Data Mining and Knowledge Discovery 35 (2021).

Main entry points
-----------------
utility          build a set utility g(s) from a spec string ("fbeta:beta=1", ...)
predict_sets     SVBOP-Full: the Bayes-optimal set for every row of a probability matrix
predict_sets_full   SVBOP-Full from a linear model and features (no probability matrix)
predict_sets_hsg    SVBOP-HSG: classes from an HNSW index over the class weights, with doubling
predict_sets_hf     SVBOP-HF: best-first search over a probabilistic class tree
predict_sets_hierarchical   the best union of at most m nodes of a class tree (exact tree DP)
svbop            Algorithm 1 over any class provider (streaming form used by HSG / HF)
top_s_sets, threshold_sets, conformal_sets   baselines of the paper's experiments
ConformalSetPredictor   conformal sets: LAC, APS, RAPS, SAPS, top-k, margin, class-/cluster-/group-conditional, Bayes-optimal with coverage
AdaptiveConformalSetPredictor   adaptive conformal sets for a stream (coverage under drift)
set_utility, recall, mean_scores             metrics

Subpackages and modules used by the pipeline (importable on their own)
----------------------------------------------------------------------
svbop.datasets     Dataset / Hierarchy containers, bundled and synthetic data, seeded splits
svbop.features     the paper's MNIST CNN (svbop.features.cnn, needs torch) and tf-idf
svbop.linear       liblinear one-vs-rest logistic regression (-s 7), softmax probabilities
svbop.trees        probabilistic class trees (predefined, balanced 2-means) and their training
svbop.index        the HNSW index (NMSLIB) over class weight vectors
svbop.full, svbop.hsg, svbop.hf   the paper's three algorithms from models (compiled kernels)
svbop.evaluation   the paper's protocol: every method's sets under every utility
svbop.report       tables, figures and the self-contained HTML report
svbop.conformal    conformal sets (ICP, APS, RAPS, SAPS, top-k, margin; class-, cluster- and group-conditional; adaptive)
svbop.sklearn      scikit-learn estimators and set-utility scorers (`import svbop` does not import sklearn)
svbop.io, svbop.logs   atomic file writing, logs with progress
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and editors; at run time each name is imported on first use (below)
    from .baselines import ThresholdSetPredictor, threshold_sets, top_s_sets, tune_threshold
    from .conformal import AdaptiveConformalSetPredictor, ConformalSetPredictor, conformal_quantile, conformal_sets
    from .full import predict_sets_full, predict_sets_full_naive
    from .hf import predict_sets_hf
    from .hierarchical import predict_sets_hierarchical
    from .hsg import predict_sets_hsg
    from .metrics import mean_scores, recall, set_sizes, set_utility, top1_accuracy
    from .search import (
        TIE_RTOL,
        ClassProvider,
        SortedProbabilities,
        StreamResult,
        candidate_factor,
        predict_set_stream,
        predict_sets,
        svbop,
    )
    from .sets import SetPredictions
    from .sparse_outputs import SparseOutputs
    from .utilities import (
        STANDARD_UTILITIES,
        UTILITY_FAMILIES,
        Utility,
        UtilityProperties,
        utility,
        utility_table,
    )

__version__ = "0.1.0"

#: public name -> the module that defines it.  ``import svbop`` imports none of them: each module
#: (and what it needs: numba, scipy, nmslib) is imported when one of its names is first used, so a
#: pipeline job that needs only svbop.io does not pay for the compiled kernels (about 0.6 s a job).
_EXPORTS = {
    "ThresholdSetPredictor": "baselines", "threshold_sets": "baselines", "top_s_sets": "baselines",
    "tune_threshold": "baselines",
    "AdaptiveConformalSetPredictor": "conformal", "ConformalSetPredictor": "conformal",
    "conformal_quantile": "conformal", "conformal_sets": "conformal",
    "predict_sets_full": "full", "predict_sets_full_naive": "full",
    "predict_sets_hf": "hf",
    "predict_sets_hierarchical": "hierarchical",
    "predict_sets_hsg": "hsg",
    "mean_scores": "metrics", "recall": "metrics", "set_sizes": "metrics", "set_utility": "metrics",
    "top1_accuracy": "metrics",
    "TIE_RTOL": "search", "ClassProvider": "search", "SortedProbabilities": "search", "StreamResult": "search",
    "candidate_factor": "search", "predict_set_stream": "search", "predict_sets": "search", "svbop": "search",
    "SetPredictions": "sets",
    "SparseOutputs": "sparse_outputs",
    "STANDARD_UTILITIES": "utilities", "UTILITY_FAMILIES": "utilities", "Utility": "utilities",
    "UtilityProperties": "utilities", "utility": "utilities", "utility_table": "utilities",
}

__all__ = sorted(_EXPORTS)  # the public names: those imported on first use


def __getattr__(name: str):
    """A public name (or a submodule, ``svbop.datasets``), imported on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
