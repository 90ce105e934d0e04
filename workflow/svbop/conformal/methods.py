"""The pipeline's conformal method names (``results/<dataset>/predictions/conformal_<name>/``) and
the :class:`svbop.conformal.ConformalSetPredictor` each one stands for.

``<score>`` (one threshold), ``<score>_cc`` (one per class), ``<score>_clustered`` (one per cluster of
classes), ``<score>_rc3p`` (one threshold and one rank limit per class, RC3P),
``hierarchical_<n>``; a score is ``lac``, ``aps``, ``raps``, ``saps``, ``topk``, ``margin``,
or ``aps_deterministic``, ``raps_deterministic``, ``saps_deterministic`` (TorchCP's rule: the calibration
ignores that an empty set becomes the top class), ``aps_top1``, ``raps_top1`` (deterministic, calibrated
with the top class in every set: ``calibrate_top1=True``; one threshold only) (config ``methods.conformal``,
``methods.class_conditional``, ``methods.clustered``, ``methods.rc3p``, ``methods.mondrian.scores``)."""

from __future__ import annotations

from .scores import RANDOMIZED_BY_DEFAULT, RANKED_SCORES

__all__ = ["conformal_method", "risk_method", "RISK_LOSSES"]

#: The losses of the pipeline's ``methods.risk_control`` (method ``risk_<loss>_<score>``).
RISK_LOSSES = ("miscoverage", "class_cost", "hierarchical")


def conformal_method(name: str, methods: dict, seed: int) -> dict:
    """``{"score", "class_conditional", "options"}`` of the method ``name``: the predictor is
    ``ConformalSetPredictor(epsilon, score=score, class_conditional=class_conditional, empty=...,
    **options)``.  ``methods``: the config's ``methods`` (``raps.k_reg``, ``raps.lam``, ``saps.lam``);
    ``seed``: the randomised scores' and the clustered split's ``random_state``."""
    if name.startswith("hierarchical_"):
        return {"score": "hierarchical", "class_conditional": False,
                "options": {"max_nodes": int(name.removeprefix("hierarchical_"))}}
    class_conditional: bool | str = False
    base = name
    if name.endswith("_cc"):
        class_conditional, base = True, name.removesuffix("_cc")
    elif name.endswith("_clustered"):
        class_conditional, base = "clustered", name.removesuffix("_clustered")
    elif name.endswith("_rc3p"):
        class_conditional, base = "rc3p", name.removesuffix("_rc3p")
    top1 = base in ("aps_top1", "raps_top1")  # deterministic, calibrated with the top class in every set
    if top1 and class_conditional:
        raise ValueError(f"unknown conformal method {name!r} ({base} has one threshold)")
    if top1:
        base = base.removesuffix("_top1") + "_deterministic"
    score = base.removesuffix("_deterministic")
    if score not in RANKED_SCORES or (base != score and score not in RANDOMIZED_BY_DEFAULT):
        raise ValueError(f"unknown conformal method {name!r}")
    options: dict = {"calibrate_top1": True} if top1 else {}
    if score == "raps":
        options.update(k_reg=methods["raps"]["k_reg"], lam=methods["raps"]["lam"])
    elif score == "saps":
        options.update(lam=methods.get("saps", {}).get("lam", 0.2))
    if score in RANDOMIZED_BY_DEFAULT:
        options["randomized"] = base == score
    if options.get("randomized") or class_conditional == "clustered":
        options["random_state"] = int(seed)
    return {"score": score, "class_conditional": class_conditional, "options": options}


def risk_method(name: str) -> dict:
    """``{"loss", "score"}`` of the risk-control method ``risk_<loss>_<score>`` (config
    ``methods.risk_control``; the predictor is ``RiskControlSetPredictor(alpha, loss, score, ...)``)."""
    rest = name.removeprefix("risk_")
    for loss in RISK_LOSSES:
        if rest.startswith(loss + "_") and rest[len(loss) + 1 :] in RANKED_SCORES and name.startswith("risk_"):
            return {"loss": loss, "score": rest[len(loss) + 1 :]}
    raise ValueError(f"unknown risk-control method {name!r}")
