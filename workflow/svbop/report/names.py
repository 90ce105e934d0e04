"""What the report shows for the pipeline's keys: one place for every display name.

The pipeline names things by keys (datasets ``synthetic1000``, utilities ``credal_1.6_0.6``,
methods ``svbop_full``, Table 4's algorithms ``HF_p``); the report shows the paper's names
(dataset titles from the config, ``u_{δ=1.6,γ=0.6}``, ``SVBOP-Full``, ``SVBOP-HF_{p}``) and the
paper's numbering of its tables and figures.  A subscript is written ``_{...}``;
:func:`html_name` turns it into ``<sub>`` (the figures use matplotlib mathtext instead).  Keys
stay in files, code blocks and ``data-*`` attributes.

Examples
--------
>>> utility_name("fbeta:beta=1"), utility_name("credal_2.2_1.2")
('u_{F1}', 'u_{δ=2.2,γ=1.2}')
>>> method_name("svbop_hf_predefined", "fbeta_1"), algorithm_name("HF_c")
('SVBOP-HF_{p}-u_{F1}', 'SVBOP-HF_{c} (2-means)')
>>> paper_caption("datasets")
'Table 2: the datasets'
>>> DisplayNames({"synthetic1000": "Synthetic text, K=1000"}).dataset("synthetic1000")
'Synthetic text, K=1000'
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from markupsafe import Markup, escape

from ..utilities import UTILITY_FAMILIES, utility

__all__ = [
    "ALGORITHM_NAMES",
    "PAPER_ITEMS",
    "DisplayNames",
    "algorithm_name",
    "html_name",
    "method_name",
    "paper_caption",
    "paper_ref",
    "utility_label",
    "utility_name",
]

#: The paper's tables and figures, numbered as the paper numbers them (its ``\\caption``s in LaTeX
#: order): item -> (kind, number, short caption).  The pipeline's files follow the same numbering
#: (``results/tables/table2_*`` hold Table 2, the datasets).
PAPER_ITEMS = {
    "utilities_table": ("Table", 1, "the utilities g(s)"),
    "datasets": ("Table", 2, "the datasets"),
    "baselines": ("Table", 3, "SVBOP-Full vs. thresholding, top-s and ICP"),
    "algorithms": ("Table", 4, "SVBOP-Full vs. SVBOP-HSG vs. SVBOP-HF"),
    "hyperparameters": ("Table", 5, "hyper-parameters (appendix)"),
    "utilities_figure": ("Figure", 1, "the utilities g(s), K = 100"),
    "illustrations": ("Figure", 2, "set-valued predictions on MNIST, VOC 2006 and DBpedia"),
    "genreject": ("Figure", 3, "the generalised reject option g_{α,β} (appendix)"),
}

#: Table 4's algorithms (keys of :data:`svbop.report.compare.ALGORITHMS`) -> display names.
ALGORITHM_NAMES = {
    "Full": "SVBOP-Full (as in the paper)",
    "Full_svbop": "SVBOP-Full (svbop)",
    "HSG": "SVBOP-HSG",
    "HF_p": "SVBOP-HF_{p} (predefined)",
    "HF_c": "SVBOP-HF_{c} (2-means)",
}

_GREEK = {"delta": "δ", "gamma": "γ", "alpha": "α", "beta": "β"}
_SUB = re.compile(r"_\{([^}]*)\}")


def paper_ref(item: str) -> str:
    """``"datasets"`` -> ``"Table 2"`` (see :data:`PAPER_ITEMS`)."""
    if item not in PAPER_ITEMS:
        raise ValueError(f"paper_ref: unknown item {item!r} (known: {', '.join(PAPER_ITEMS)})")
    kind, number, _ = PAPER_ITEMS[item]
    return f"{kind} {number}"


def paper_caption(item: str) -> str:
    """``"datasets"`` -> ``"Table 2: the datasets"``."""
    return f"{paper_ref(item)}: {PAPER_ITEMS[item][2]}"


def html_name(text: object) -> Markup:
    """Escape a display name and turn its ``_{...}`` subscripts into ``<sub>``."""
    return Markup(_SUB.sub(r"<sub>\1</sub>", str(escape(str(text)))))


def utility_label(spec_or_label: str) -> str:
    """The paper's label of a utility: ``"fbeta:beta=1"`` -> ``"fbeta_1"``; labels pass through."""
    try:
        return utility(spec_or_label).label
    except ValueError:
        return str(spec_or_label)


def _label_params(label: str) -> tuple[str, dict[str, str]] | None:
    """``"credal_1.6_0.6"`` -> ``("credal", {"delta": "1.6", "gamma": "0.6"})``; None if unknown."""
    family, *values = str(label).split("_")
    cls = UTILITY_FAMILIES.get(family)
    if cls is None or len(values) != len(cls.param_specs):
        return None
    return family, {p.name: v for p, v in zip(cls.param_specs, values)}


def utility_name(spec_or_label: str) -> str:
    """Readable name in the paper's notation, subscript as ``_{...}`` (``u_{F1}``, ``u_{δ=2.2,γ=1.2}``)."""
    parsed = _label_params(utility_label(spec_or_label))
    if parsed is None:
        return f"u_{{{spec_or_label}}}"
    family, p = parsed

    def kv(*names: str) -> str:
        return ",".join(f"{_GREEK[n]}={p[n]}" for n in names)

    sub = {
        "precision": lambda: "P",
        "recall": lambda: "R",
        "fbeta": lambda: f"F{p.get('beta')}",
        "credal": lambda: kv("delta", "gamma"),
        "exp": lambda: f"exp,{kv('delta')}",
        "log": lambda: "log",
        "reject": lambda: f"rej,{kv('alpha')}",
        "genreject": lambda: kv("alpha", "beta"),
    }[family]()
    return f"u_{{{sub}}}"


def method_name(method: str, param: object) -> str:
    """Display name of a Table 3 row, e.g. ``SVBOP-Full-u_{F1}``, ``Top-3``, ``ICP_{ε=0.10}``."""
    param = "" if param is None or (isinstance(param, float) and math.isnan(param)) else str(param)
    svbop = {"svbop_full": "SVBOP-Full", "svbop_full_naive": "SVBOP-Full (as in the paper)",
             "svbop_hsg": "SVBOP-HSG", "svbop_hf_predefined": "SVBOP-HF_{p}", "svbop_hf_kmeans": "SVBOP-HF_{c}",
             "threshold": "Threshold"}
    if method in svbop:
        return f"{svbop[method]}-{utility_name(param)}" if param else svbop[method]
    if method == "top_s":
        return f"Top-{param}" if param else "Top-s"
    if method == "icp":
        return f"ICP_{{ε={param}}}" if param else "ICP"
    # beyond the paper (svbop.evaluation.beyond_method)
    eps = f"_{{ε={param}}}" if param else ""
    if method.startswith("conformal_hierarchical_"):
        n = method.removeprefix("conformal_hierarchical_")
        return f"Conformal hierarchy ≤ {n} node{'s' if n != '1' else ''}{eps}"
    if method.startswith("conformal_"):
        score = method.removeprefix("conformal_")
        kind = next((k for k in _KIND_NAMES if score.endswith(k)), "")
        score = score.removesuffix(kind) if kind else score
        return f"{_KIND_NAMES.get(kind, '')}{_score_name(score)}{eps}"
    if method.startswith("mondrian_"):
        score, _, by = method.removeprefix("mondrian_").partition("_")
        return f"Mondrian {_score_name(score)} by {by.replace('_', ' ')}{eps}"
    if method.startswith("risk_"):  # conformal risk control, param = alpha
        for loss in ("miscoverage", "class_cost", "hierarchical"):
            if method.startswith(f"risk_{loss}_"):
                score = method.removeprefix(f"risk_{loss}_")
                return f"Risk control, {loss.replace('_', ' ')}, {_score_name(score)}" + (f"_{{α={param}}}" if param else "")
    if method.startswith("weighted_"):  # conformal under covariate shift (weights of the rows)
        score = method.removeprefix("weighted_")
        kind = "_cc" if score.endswith("_cc") else ""
        return f"Weighted {_KIND_NAMES.get(kind, '').lower()}{_score_name(score.removesuffix(kind))}{eps}"
    if method.startswith("label_shift_"):  # conformal under label shift (class weights estimated from the test rows)
        return f"Label-shift {_score_name(method.removeprefix('label_shift_'))}{eps}"
    if method.startswith("conditional_"):  # coverage in every one of the user's overlapping groups
        return f"Conditional {_score_name(method.removeprefix('conditional_'))} over groups{eps}"
    if method.startswith("coverage_"):
        family = method.removeprefix("coverage_")
        return f"SVBOP-{_FAMILY_NAMES.get(family, family)}-coverage{eps}"
    if method.startswith("hierarchical_"):
        n = method.removeprefix("hierarchical_")
        return f"Hierarchy ≤ {n} node{'s' if n != '1' else ''}" + (f"-{utility_name(param)}" if param else "")
    return f"{method} {param}".strip()


#: Conformal scores and utility families of the methods beyond the paper, as the report names them.
_SCORE_NAMES = {"lac": "LAC", "aps": "APS", "raps": "RAPS", "saps": "SAPS", "topk": "Top-k", "margin": "Margin"}
#: Suffixes of the conformal methods' calibrations (svbop.conformal.methods) and their names.
_KIND_NAMES = {"_cc": "Class-conditional ", "_clustered": "Clustered ", "_rc3p": "RC3P "}


def _score_name(score: str) -> str:
    """``APS`` (randomised, the default), ``APS (deterministic)``, ``APS (deterministic, top class kept)``
    (calibrated with the top class in every set), ``Top-k``, ..."""
    if score.endswith("_top1"):
        base = score.removesuffix("_top1")
        return f"{_SCORE_NAMES.get(base, base.upper())} (deterministic, top class kept)"
    base = score.removesuffix("_deterministic")
    name = _SCORE_NAMES.get(base, base.upper())
    return f"{name} (deterministic)" if base != score else name
_FAMILY_NAMES = {"fbeta": "u_{Fβ}", "credal": "u_{δ,γ}"}


def algorithm_name(key: str) -> str:
    """Display name of one of Table 4's algorithms (``HF_p`` -> ``SVBOP-HF_{p} (predefined)``)."""
    return ALGORITHM_NAMES.get(str(key), str(key))


class DisplayNames:
    """Every display name of one report: dataset titles (from the config or the summaries) and
    the fixed names of utilities, methods and algorithms.

    Parameters
    ----------
    titles : mapping of str to str, optional
        Dataset key -> title; an unknown key is shown as is.
    """

    def __init__(self, titles: Mapping[str, str] | None = None):
        self.titles = {str(k): str(v) for k, v in dict(titles or {}).items() if v}

    def dataset(self, key: object) -> str:
        return self.titles.get(str(key), str(key))

    @staticmethod
    def utility(label: str) -> str:
        return utility_name(label)

    @staticmethod
    def method(method: str, param: object = None) -> str:
        return method_name(method, param)

    @staticmethod
    def algorithm(key: str) -> str:
        return algorithm_name(key)
