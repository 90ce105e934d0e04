"""Split-conformal set prediction: ICP (LAC), APS, RAPS, class-conditional, Bayes-optimal sets with coverage.

* :func:`conformal_quantile` and :func:`conformal_sets`: the paper's inductive conformal
  prediction baseline (ICP, nonconformity ``1 - P(y|x)``), also re-exported by
  :mod:`svbop.baselines` beside the paper's other baselines.
* :class:`ConformalSetPredictor`: the LAC, APS and RAPS scores, class-conditional thresholds, and
  Bayes-optimal F-beta and credal sets calibrated to cover the true class with probability at
  least ``1 - epsilon`` (see its docstring for the definitions and the proofs).
* Group-conditional (Mondrian) calibration for every score (``fit(..., groups=...)``) and
  :class:`AdaptiveConformalSetPredictor`, adaptive conformal inference for streams (Gibbs and
  Candès 2021).  What MAPIE, crepes, TorchCP and puncc do for these, and what svbop does
  differently (explicit small/unseen-group rules; ACI's update and both ends of the level as in
  the paper), is noted in ``workflow/docs/library.md``, section "Conformal sets".

One module per concept:

=========================  ====================================================================
``scores``                 the LAC/APS/RAPS scores, ICP, the sets ``{c : s(x, c) <= q}``
``split``                  :class:`ConformalSetPredictor` (marginal calibration; the others below)
``class_conditional``      one threshold per class
``clustered``              one threshold per cluster of classes (Ding et al. 2023)
``rc3p``                   one threshold and one rank limit per class (RC3P, Shi et al. 2024)
``mondrian``               one threshold per group known at test time
``family``                 Bayes-optimal F-beta and credal sets with coverage
``adaptive``               :class:`AdaptiveConformalSetPredictor` (ACI, DtACI, PID, for streams)
``pvalues``                conformal p-values (``predict_p``, online p-values of a stream)
``martingales``            :class:`ExchangeabilityMartingale` (alarms when a stream stops being exchangeable)
``hierarchical``           hierarchy-restricted sets (``score="hierarchical"``)
``risk``                   :class:`RiskControlSetPredictor` (conformal risk control) and
                           :class:`LearnThenTest` (several losses, any shape), :func:`set_loss`
``conditional``            :class:`ConditionalSetPredictor` (coverage in overlapping groups)
``weighted``               weighted quantiles under covariate shift (``fit(..., weights=)``)
``label_shift``            class weights under label shift (:func:`estimate_label_shift`,
                           ``fit(..., class_weights=)``)
``label_noise``            sets that cover the clean label given noisy calibration labels
                           (``ConformalSetPredictor(..., label_noise=)``)
=========================  ====================================================================

The package imports only svbop's lower modules (``_prefix``, ``search``, ``metrics``, ``sets``,
``utilities``, ``hierarchical``); :mod:`svbop.baselines` imports it, never the other way.
"""

from __future__ import annotations

from ._common import _epsilon, _no_calibration_rows, _order_statistic, _score_tolerance, _with_tolerance  # noqa: F401
from .adaptive import ACI_STEP, ADAPTIVE_METHODS, DTACI_STEPS, AdaptiveConformalSetPredictor
from .family import (  # noqa: F401  (tests and svbop.baselines use these)
    _calibrate_parameter,
    _covered,
    _family_scores,
    _family_utility,
    _RankedCalibration,
)
from .mondrian import GROUPINGS, SMALL_GROUPS, GroupCalibrationWarning, min_calibration_rows, predicted_groups
from .scores import (  # noqa: F401
    CONFORMAL_SCORES,
    PREDICTOR_SCORES,
    _calibration_scores,
    _score_sets,
    conformal_quantile,
    conformal_sets,
)
from .conditional import ConditionalSetPredictor
from .risk import FWER_PROCEDURES, SET_LOSSES, LearnThenTest, RiskControlSetPredictor, SetLoss, set_loss
from .split import ConformalSetPredictor
from .pvalues import conformal_p_values, online_p_values
from .martingales import MARTINGALES, ExchangeabilityMartingale
from .label_shift import LABEL_SHIFT_METHODS, estimate_label_shift

__all__ = [
    "conformal_quantile",
    "conformal_sets",
    "ConformalSetPredictor",
    "CONFORMAL_SCORES",
    "PREDICTOR_SCORES",
    "SMALL_GROUPS",
    "GroupCalibrationWarning",
    "min_calibration_rows",
    "AdaptiveConformalSetPredictor",
    "ACI_STEP",
    "ADAPTIVE_METHODS",
    "DTACI_STEPS",
    "GROUPINGS",
    "predicted_groups",
    "RiskControlSetPredictor",
    "LearnThenTest",
    "SetLoss",
    "set_loss",
    "SET_LOSSES",
    "FWER_PROCEDURES",
    "ConditionalSetPredictor",
    "conformal_p_values",
    "online_p_values",
    "ExchangeabilityMartingale",
    "MARTINGALES",
    "estimate_label_shift",
    "LABEL_SHIFT_METHODS",
]
