"""The paper's experimental protocol on one dataset: every method's sets scored under every utility.

Rows follow the paper's CSV vocabulary (``../shared/paper/table3_utilities.csv``): ``method`` is
``svbop_full`` / ``threshold`` (``param`` = the utility label it optimises or was tuned for),
``top_s`` (``param`` = s) or ``icp`` (``param`` = epsilon, e.g. ``"0.10"``).  The approximate
SVBOP methods of the paper's Table 4 are ``svbop_hsg``, ``svbop_hf_predefined`` (SVBOP-HF on the
dataset's hierarchy) and ``svbop_hf_kmeans`` (on a balanced 2-means tree), ``param`` the utility
label; :func:`timing_columns` adds their test time and their agreement with SVBOP-Full.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Iterable, Mapping

import numpy as np

from .io import read_json_object
from .metrics import check_labels, group_coverage, mean_scores, set_agreement, top1_accuracy
from .sets import SetPredictions
from .utilities import Utility, utility

__all__ = ["BEYOND_COLUMNS", "BEYOND_PAPER_METHODS", "CONDITIONAL_COLUMNS",
           "METHODS", "PAPER_FULL", "SVBOP_METHODS", "SUMMARY_KEYS",
           "beyond_method", "calibration_record", "dataset_summary", "evaluate_beyond", "evaluate_methods",
           "not_calibrated_text", "read_calibration", "read_seconds", "risk_record", "test_risk", "promise_record", "label_shift_record", "check_promise", "read_threshold_tuning", "target_coverage_pct", "timing_columns",
           "unreachable_record"]

#: Methods of the paper's Tables 3 and 4, in the order the report lists them.
METHODS = ("svbop_full", "svbop_full_naive", "svbop_hsg", "svbop_hf_predefined", "svbop_hf_kmeans", "threshold",
           "top_s", "icp")

#: The SVBOP methods (``param`` = utility label), whose prediction jobs are timed.  ``svbop_full_naive``
#: is SVBOP-Full with the paper's cost model (all K probabilities, sorted; same sets as ``svbop_full``).
SVBOP_METHODS = METHODS[:5]

#: The paper's SVBOP-Full as it runs it, the reference of the paper's speed-ups.
PAPER_FULL = "svbop_full_naive"

#: The paper's methods that the report's section "Beyond the paper" shows beside the methods beyond
#: it (SVBOP-HSG and SVBOP-HF approximate SVBOP-Full, whose sets are shown).
BEYOND_PAPER_METHODS = ("svbop_full", "threshold", "top_s", "icp")

#: Methods beyond the paper (the pipeline's config ``methods:``): ``conformal_<score>`` (``aps``,
#: ``raps``, ``saps``, ``topk``, ``margin``, ``aps_deterministic``, ...; ``<score>_cc`` for one
#: threshold per class and ``<score>_clustered`` per cluster of classes, ``lac`` too;
#: ``hierarchical_<max_nodes>``: conformal unions of at most that many nodes; see
#: :mod:`svbop.conformal.methods`) and ``coverage_<family>`` (``fbeta``, ``credal``) with ``param`` =
#: epsilon, ``hierarchical_<max_nodes>`` with ``param`` = the utility label the sets optimise;
#: ``weighted_<name>`` (a conformal method under covariate shift, :mod:`svbop.conformal.weighted`) and
#: ``conditional_<score>`` (coverage in every group, :mod:`svbop.conformal.conditional`), ``param`` = epsilon;
#: ``label_shift_<name>`` (a conformal method under label shift, :mod:`svbop.conformal.label_shift`).
_SCORES = r"(aps|raps|saps)(_deterministic)?|(aps|raps)_top1|topk|margin"
_BEYOND = re.compile(rf"(conformal_((lac|{_SCORES})_(cc|clustered|rc3p)|{_SCORES}|hierarchical_[1-9][0-9]*)"
                     r"|coverage_(fbeta|credal)|hierarchical_[1-9][0-9]*"
                     r"|mondrian_(lac|aps|raps|saps|topk|margin)_(predicted_class|predicted_top_node|group_column)"
                     r"|risk_(miscoverage|class_cost|hierarchical)_(lac|aps|raps|saps|topk|margin)"
                     rf"|weighted_((lac|{_SCORES})_cc|lac|{_SCORES})"
                     r"|conditional_(lac|aps|raps|saps|topk|margin)"
                     rf"|label_shift_(lac|{_SCORES}))\Z")

#: Columns of ``results/<dataset>/beyond.tsv`` (:func:`evaluate_beyond`), before one
#: ``<label>_pct`` per utility and the optional ``calibrated``.
BEYOND_COLUMNS = ("dataset", "method", "param", "n_test", "target_coverage_pct", "coverage_pct",
                  "class_coverage_worst_pct", "ssc_worst_pct", "singleton_pct", "empty_pct", "mean_size")


def beyond_method(method: str) -> bool:
    """Whether ``method`` names a method beyond the paper (see :data:`BEYOND_COLUMNS`)."""
    return bool(_BEYOND.match(method))


def target_coverage_pct(method: str, param: str) -> float:
    """The coverage a method guarantees, in percent: 100 (1 - epsilon) for ICP and the conformal and
    coverage methods (``param`` = epsilon), NaN for the others."""
    if method == "icp" or method.startswith(("conformal_", "coverage_", "mondrian_", "risk_miscoverage_",
                                            "weighted_", "conditional_", "label_shift_")):
        try:
            return 100.0 * (1.0 - float(param))
        except ValueError:
            raise ValueError(f"{method}: param {param!r} is not an epsilon") from None
    return float("nan")


#: Keys of a dataset summary (:func:`dataset_summary`, ``results/{dataset}/summary.json``).
SUMMARY_KEYS = (
    "dataset", "title", "synthetic", "description", "features", "K", "D",
    "N_train", "N_validation", "N_calibration", "N_test", "top1_pct", "train_seconds",
)


def evaluate_methods(
    sets: Mapping[tuple[str, str], SetPredictions],
    y,
    utilities: list[Utility | str],
    *,
    dataset: str,
    extra: Mapping[tuple[str, str], Mapping[str, object]] | None = None,
) -> list[dict]:
    """Score the test sets of several methods.

    Parameters
    ----------
    sets : mapping of (method, param) to SetPredictions
        One entry per method, all for the same ``n`` test rows.
    y : array of int, shape (n,)
        True classes of the test rows.
    utilities : list of Utility or str
        Every method is evaluated under each (column ``<label>_pct``, mean utility in percent).
    dataset : str
        Written into each row.
    extra : mapping of (method, param) to dict, optional
        Further columns per method (e.g. the tuned ``theta`` of a threshold method, or the
        :func:`timing_columns` of the SVBOP methods); a column a method lacks is left empty.

    Returns
    -------
    list of dict
        One row per method, in the order of ``sets``: ``dataset, method, param, n_test,
        recall_pct, mean_size, top1_pct`` (the first class of each set), ``<label>_pct``...
    """
    rows = []
    for (method, param), predicted in sets.items():
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r} (expected one of {METHODS})")
        scores = mean_scores(predicted, y, utilities)
        row = {"dataset": dataset, "method": method, "param": str(param), "n_test": int(scores.pop("n"))}
        row.update(scores)
        row.update((extra or {}).get((method, param), {}))
        rows.append(row)
        # a lazy mapping (svbop.io.SetFiles) reads each method's sets when asked: let these go
        # before the next are read (one conformal method's sets can take GBs)
        del predicted, scores
    return rows


def evaluate_beyond(
    sets: Mapping[tuple[str, str], SetPredictions],
    y,
    utilities: list[Utility | str],
    *,
    dataset: str,
    extra: Mapping[tuple[str, str], Mapping[str, object]] | None = None,
    unreachable: Iterable[tuple[str, str]] = (),
    groups: Mapping[str, np.ndarray] | None = None,
    group_names: Mapping[str, np.ndarray] | None = None,
    X=None,
) -> list[dict]:
    """Score every kind of set on the test rows: utilities, coverage and set sizes.

    The table of the report's section "Beyond the paper" (``results/<dataset>/beyond.tsv``).

    Parameters
    ----------
    sets : mapping of (method, param) to SetPredictions
        The paper's methods of :data:`BEYOND_PAPER_METHODS` and the methods beyond it
        (:func:`beyond_method`), all for the same ``n`` test rows; read one at a time when the
        mapping is lazy (:class:`svbop.io.SetFiles`).
    y : array of int, shape (n,)
        True classes of the test rows.
    utilities : list of Utility or str
        Every method is evaluated under each (column ``<label>_pct``).
    dataset : str
        Written into each row.
    extra : mapping of (method, param) to dict, optional
        Further columns per method (e.g. ``calibrated``: :func:`read_calibration`).
    unreachable : iterable of (method, param), optional
        Methods of ``sets`` that could not be calibrated (a credal family that reaches no
        coverage of 1 - epsilon: :func:`unreachable_record`): their sets are not read, and their
        row has no numbers (NaN), only ``extra``'s (the reason, in ``calibrated``).
    groups : mapping of str to array, optional
        Groupings of the test rows (``{"predicted_class": ...}``): every method gets
        ``worst_group_<name>_pct``, the smallest coverage of a group (Mondrian methods guarantee
        ``1 - epsilon`` in each), and ``n_groups_<name>``.
    group_names : mapping of str to array of str, optional
        For groupings of ``groups`` given as integer codes into names (``{"group_column": names}``,
        a column of the user's data): every method also gets ``group_coverage_<name>``, the
        coverage of each group, as JSON ``[[group name, test rows, coverage %], ...]`` in the
        order of the names (bounded by the number of groups, which the data bound).
    X : array-like of shape (n, d), optional
        A representation of the test rows (the report passes their probabilities) for ``wsc_pct``.
        Every method gets :data:`CONDITIONAL_COLUMNS`: ``covgap_pct`` and ``sscv_pct``
        (:func:`svbop.metrics.covgap` and :func:`svbop.metrics.size_stratified_coverage_violation` at
        the method's epsilon; NaN for a method without a coverage target) and ``wsc_pct``
        (:func:`svbop.metrics.worst_slab_coverage` on ``X`` with TorchCP's defaults, one split and
        one set of directions shared by every method; NaN without ``X``).

    Returns
    -------
    list of dict
        One row per method, in the order of ``sets``: the columns of :data:`BEYOND_COLUMNS`
        (``coverage_pct``: test rows whose set holds the true class; ``class_coverage_worst_pct``:
        the smallest coverage of a class among the test rows' classes; ``ssc_worst_pct``: the
        smallest coverage of a set size; ``target_coverage_pct``: :func:`target_coverage_pct`),
        then ``<label>_pct`` per utility and the ``extra`` columns.

    Raises
    ------
    ValueError
        A method that is neither the paper's of :data:`BEYOND_PAPER_METHODS` nor beyond it.
    """
    rows = []
    unreachable = set(unreachable)
    labels = [f"{utility(u).label}_pct" for u in utilities]
    plan = None
    if X is not None:
        from .metrics import _SlabPlan

        plan = _SlabPlan(X, len(y))
    for key in sets:
        method, param = key
        if method not in BEYOND_PAPER_METHODS and not beyond_method(method):
            raise ValueError(f"unknown method {method!r} (expected one of {BEYOND_PAPER_METHODS}, conformal_<score>, "
                             "coverage_<family> or hierarchical_<max_nodes>)")
        if key in unreachable:
            scores = dict.fromkeys(["n", *BEYOND_COLUMNS[5:], *labels], float("nan"))
            scores["n"] = len(y)
        else:  # a lazy mapping (svbop.io.SetFiles) reads the sets here, and lets them go before the next
            scores = mean_scores(sets[key], y, utilities)
        row = {"dataset": dataset, "method": method, "param": str(param), "n_test": int(scores["n"]),
               "target_coverage_pct": target_coverage_pct(method, str(param))}
        row.update((c, scores[c]) for c in BEYOND_COLUMNS[5:])
        row.update((lab, scores[lab]) for lab in labels)
        row.update(_conditional_columns(None if key in unreachable else sets[key], y, row["target_coverage_pct"], plan))
        for name, g in (groups or {}).items():
            if key in unreachable:
                worst, per_group = float("nan"), None
            else:
                codes, cov, counts = group_coverage(sets[key], y, g)
                worst = 100.0 * float(np.nanmin(cov))
                per_group = zip(codes.tolist(), counts.tolist(), (100.0 * cov).tolist())
            row[f"worst_group_{name}_pct"] = worst
            row[f"n_groups_{name}"] = int(np.unique(np.asarray(g)).size)
            if name in (group_names or {}):
                named = np.asarray(group_names[name]).astype(str)
                row[f"group_coverage_{name}"] = "" if per_group is None else json.dumps(
                    [[str(named[c]), int(n), round(float(v), 4)] for c, n, v in per_group], ensure_ascii=False)
        row.update((extra or {}).get(key, {}))
        rows.append(row)
        del scores
    return rows


#: The conditional-coverage columns :func:`evaluate_beyond` adds when given ``X``, in percent.
CONDITIONAL_COLUMNS = ("covgap_pct", "sscv_pct", "wsc_pct")


def _conditional_columns(sets, y, target_pct: float, plan) -> dict[str, float]:
    """CovGap, SSCV (at the method's epsilon; NaN without a target) and WSC (NaN without ``plan``),
    in percent."""
    from .metrics import _hits_and_sizes, covgap, size_stratified_coverage_violation

    out = dict.fromkeys(CONDITIONAL_COLUMNS, float("nan"))
    if sets is None:
        return out
    if target_pct == target_pct:
        eps = round(1.0 - target_pct / 100.0, 12)
        out["covgap_pct"] = 100.0 * covgap(sets, y, eps)
        out["sscv_pct"] = 100.0 * size_stratified_coverage_violation(sets, y, eps)
    if plan is not None:
        hit, _ = _hits_and_sizes(sets, y)
        out["wsc_pct"] = 100.0 * plan.coverage(hit)
    return out


def calibration_record(predictor, *, method: str, epsilon: float, n_calibration: int) -> dict[str, object]:
    """What a conformal method calibrated, as JSON (the file beside its sets).

    Parameters
    ----------
    predictor : svbop.baselines.ConformalSetPredictor
        Fitted.
    method : str
        Its method name (e.g. ``conformal_aps_cc``, ``coverage_fbeta``).
    epsilon : float
        Its significance level.
    n_calibration : int
        Calibration rows it was fitted on.

    Returns
    -------
    dict
        ``method``, ``epsilon``, ``n_calibration``, and ``parameter`` (the calibrated parameter of
        a utility family: beta or delta) or ``quantile`` (the score's threshold, ``"inf"`` when
        the calibration rows are too few for it); with one threshold per class (``quantiles_``),
        ``quantile_min``, ``quantile_median``, ``quantile_max`` over the classes' finite
        thresholds and ``classes_unbounded``, the number of infinite ones.
    """
    record: dict[str, object] = {"method": method, "epsilon": float(epsilon), "n_calibration": int(n_calibration)}
    parameter = getattr(predictor, "parameter_", None)
    if parameter is not None:
        record["parameter"] = float(parameter)
        return record
    per_class = getattr(predictor, "quantiles_", None) if getattr(predictor, "class_conditional", False) else None
    if per_class is None:
        q = float(predictor.quantile_)
        record["quantile"] = q if math.isfinite(q) else "inf"
        return record
    from .conformal import min_calibration_rows

    q = np.asarray(per_class, dtype=np.float64)
    finite = q[np.isfinite(q)]
    record.update(
        quantile_min=float(finite.min()) if finite.size else "inf",
        quantile_median=float(np.median(finite)) if finite.size else "inf",
        quantile_max=float(finite.max()) if finite.size else "inf",
        # classes with too few calibration rows for their (n_c + 1)(1 - epsilon)-th score: every set holds them
        classes_unbounded=int(q.size - finite.size),
        n_classes=int(q.size),
        rows_needed_per_class=int(min_calibration_rows(epsilon)),
    )
    return record


def unreachable_record(*, method: str, epsilon: float, n_calibration: int, reason: str) -> dict[str, object]:
    """The calibration record of a method that no parameter calibrates to coverage ``1 - epsilon``
    (a credal family whose largest sets cover too few calibration rows): ``method``, ``epsilon``,
    ``n_calibration`` and ``unreachable``, the reason (one line)."""
    return {"method": method, "epsilon": float(epsilon), "n_calibration": int(n_calibration),
            "unreachable": " ".join(str(reason).split())}


def risk_record(predictor, *, method: str, n_calibration: int) -> dict[str, object]:
    """What a risk-control method calibrated (:class:`svbop.conformal.RiskControlSetPredictor`), as JSON:
    ``method``, ``alpha``, ``loss``, ``bound`` (B), ``lambda`` (``"inf"``/``"-inf"`` at the ends),
    ``calibration_risk`` and ``n_calibration``; ``cost`` for the class-cost loss."""
    lam = float(predictor.lambda_)
    record: dict[str, object] = {
        "method": method, "alpha": float(predictor.alpha), "loss": predictor.loss_.name, "bound": predictor.B_,
        "lambda": lam if math.isfinite(lam) else ("inf" if lam > 0 else "-inf"),
        "calibration_risk": float(predictor.calibration_risk_), "n_calibration": int(n_calibration)}
    if predictor.cost is not None:
        record["cost"] = [float(c) for c in predictor.cost]
    return record


def test_risk(record: Mapping[str, object], sets: SetPredictions, y, hierarchy=None) -> dict[str, object]:
    """The promise of a risk-control method checked on the test rows: ``{"target_risk": alpha,
    "test_risk": mean loss of its sets}`` (``record``: its :func:`risk_record`; ``hierarchy`` for the
    hierarchical loss)."""
    from .conformal import set_loss

    name = str(record["loss"])
    loss = set_loss(name, cost=record.get("cost"), hierarchy=hierarchy if name == "hierarchical" else None)
    y = np.asarray(y)
    return {"target_risk": float(record["alpha"]), "test_risk": float(loss(sets.to_mask(), y).mean())}


def promise_record(*, method: str, epsilon: float, y_cal, weights=None, group_columns=None,
                   group_names=None) -> dict[str, object]:
    """What a weighted or conditional conformal method calibrated on, as JSON (the file beside its sets).

    ``promise`` is ``"weighted"`` (covariate shift, :mod:`svbop.conformal.weighted`: ``n_effective``,
    Kish's effective calibration size ``(sum w)^2 / sum w^2``, beside ``n_calibration``) or
    ``"conditional"`` (overlapping groups, :mod:`svbop.conformal.conditional`: ``groups``, each
    group's name and calibration rows ``n_calibration``).
    """
    n = int(np.asarray(y_cal).shape[0])
    record: dict[str, object] = {"method": method, "epsilon": float(epsilon), "n_calibration": n}
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        record["promise"] = "weighted"
        from .conformal.weighted import effective_size

        record["n_effective"] = effective_size(w)
    else:
        A = np.asarray(group_columns, dtype=bool)
        names = list(group_names) if group_names is not None else [f"group_{j}" for j in range(A.shape[1])]
        record["promise"] = "conditional"
        record["groups"] = [{"name": str(g), "n_calibration": int(c)} for g, c in zip(names, A.sum(axis=0))]
    return record


def label_shift_record(*, method: str, epsilon: float, y_cal, estimator: str, class_weights,
                       quantiles) -> dict[str, object]:
    """What a label-shift conformal method calibrated on, as JSON (the file beside its sets): the
    estimator, the class weights ``w(y)``, the calibration class frequencies ``p(y)`` and the estimated
    test ones ``q(y) = p(y) w(y)`` (normalised), and each class's threshold (``None``: every row keeps it).
    """
    y_cal = np.asarray(y_cal)
    w = np.asarray(class_weights, dtype=np.float64)
    p = np.bincount(y_cal, minlength=w.size) / max(1, y_cal.size)
    q = p * w
    q = q / q.sum() if q.sum() > 0 else q
    return {"method": method, "epsilon": float(epsilon), "promise": "label_shift", "estimator": str(estimator),
            "n_calibration": int(y_cal.size), "weights": w.tolist(), "calibration_freq": p.tolist(),
            "estimated_test_freq": q.tolist(),
            "quantiles": [float(v) if np.isfinite(v) else None for v in np.asarray(quantiles, dtype=np.float64)]}


def check_promise(record: Mapping[str, object], sets: SetPredictions, y, *, weights=None,
                  group_columns=None) -> dict[str, object]:
    """The promise of a weighted or conditional method (its :func:`promise_record`) checked on the test rows.

    Weighted (``weights``: the test rows' likelihood ratios): coverage under the target distribution,
    estimated, for test rows drawn as the calibration rows are, by the weighted test coverage
    ``sum_i w_i 1[y_i in C(x_i)] / sum_i w_i`` (importance weighting: ``E_cal[w 1[y in C(x)]] =
    P_target(y in C(x))``), against ``1 - epsilon``; ``n_effective`` of the test weights says how many
    rows that estimate is worth; ``coverage_pct``, the plain test coverage, is the check when the test
    rows are themselves drawn from the target distribution.
    Conditional (``group_columns``: the test rows' indicators): the coverage in every group, with its
    test rows (NaN where a group has none), against ``1 - epsilon`` in each.
    Label shift (:func:`label_shift_record`): the test rows are the shifted distribution, so the check
    is their plain coverage ``coverage_pct``; ``test_freq``, their class frequencies, shows how well
    the weights were estimated.

    Returns
    -------
    dict
        ``target_pct``; weighted: ``weighted_coverage_pct``, ``coverage_pct``, ``n_effective``; conditional:
        ``groups`` (``[{"name", "n", "n_calibration", "coverage_pct"}]``) and ``worst_group``
        (the name of the lowest coverage, None when no group has test rows).
    """
    covered = sets.contains(np.asarray(y)).astype(np.float64)
    target = 100.0 * (1.0 - float(record["epsilon"]))
    if record["promise"] == "label_shift":  # the test rows are the shifted distribution: their plain coverage
        K = len(record["weights"])
        observed = np.bincount(np.asarray(y), minlength=K) / max(1, len(y))
        return {"target_pct": target, "coverage_pct": float(100.0 * covered.mean()) if covered.size else float("nan"),
                "test_freq": observed.tolist()}
    if record["promise"] == "weighted":
        from .conformal.weighted import effective_size

        w = np.asarray(weights, dtype=np.float64)
        top = float(w.max()) if w.size else 0.0
        w = w / top if top > 0 else w  # likelihood ratios up to a constant: no overflow in the sums
        total = w.sum()
        return {"target_pct": target, "coverage_pct": float(100.0 * covered.mean()) if covered.size else float("nan"),
                "weighted_coverage_pct": float(100.0 * (w @ covered) / total) if total > 0 else float("nan"),
                "n_effective": effective_size(w)}
    A = np.asarray(group_columns, dtype=bool)
    n = A.sum(axis=0)
    hits = covered @ A
    groups = [{"name": g["name"], "n": int(n[j]), "n_calibration": int(g["n_calibration"]),
               "coverage_pct": float(100.0 * hits[j] / n[j]) if n[j] else float("nan")}
              for j, g in enumerate(record["groups"])]
    seen = [g for g in groups if g["n"]]
    return {"target_pct": target, "groups": groups,
            "worst_group": min(seen, key=lambda g: g["coverage_pct"])["name"] if seen else None}


def read_calibration(path: str | os.PathLike) -> dict[str, object]:
    """The ``calibrated`` column of :func:`evaluate_beyond` from a :func:`calibration_record` file.

    Returns
    -------
    dict
        ``{"calibrated": text, "reached": bool}``; ``reached`` is False for an
        :func:`unreachable_record` (text ``"not reachable: <reason>"``) and for one threshold per class
        where a class has too few calibration rows for a finite one (:func:`not_calibrated_text`: its
        sets would hold that class on every row, so they are not a result). Texts: ``"beta = 2.31"`` /
        ``"delta = 1.87"`` for a coverage method, ``"q = 0.934"`` for one threshold,
        ``"q = 0.81..1 (median 0.93)"`` for one per class, ``"one q per group: ..."`` for Mondrian sets
        (naming the groups too small for their own threshold and the rows a group needs).

    Raises
    ------
    ValueError
        The file is missing, not JSON, or has neither a parameter nor a quantile (naming the file).
    """
    record = read_json_object(path, "the calibration record")
    if "lambda" in record and "alpha" in record:  # risk control: its threshold and the calibration rows' risk
        return {"calibrated": f"lambda = {float(record['lambda']):.4g} ({record['loss']} on the calibration rows "
                              f"{float(record['calibration_risk']):.4g}, alpha {float(record['alpha']):g})",
                "reached": True}
    if record.get("promise") == "weighted":  # covariate shift: one weighted quantile per test row
        return {"calibrated": f"weighted quantile per test row (effective calibration rows "
                              f"{float(record['n_effective']):,.0f} of {int(record['n_calibration']):,})",
                "reached": True}
    if record.get("promise") == "label_shift":  # one weighted threshold per candidate class
        w = np.asarray(record["weights"], dtype=np.float64)
        return {"calibrated": f"one q per class, label-shift weights by {str(record['estimator']).upper()} "
                              f"({w.min():.3g}..{w.max():.3g})", "reached": True}
    if record.get("promise") == "conditional":  # one cutoff per pattern of the test row's groups
        small = min(record["groups"], key=lambda g: g["n_calibration"])
        return {"calibrated": f"augmented quantile regression over {len(record['groups'])} groups (fewest "
                              f"calibration rows: {small['name']}, {small['n_calibration']:,})",
                "reached": True}
    if "unreachable" in record:
        return {"calibrated": f"not reachable: {record['unreachable']}", "reached": False}
    try:
        if "parameter" in record:
            name = "delta" if str(record.get("method", "")).endswith("credal") else "beta"
            return {"calibrated": f"{name} = {float(record['parameter']):.4g}", "reached": True}
        if "by" in record:  # Mondrian: one threshold per group (the marginal one for small groups)
            by = str(record["by"]).replace("_", " ")
            from .conformal import min_calibration_rows

            small = int(record.get("small_groups", 0))
            text = f"one q per group: {int(record['n_groups'])} groups by {by}"
            if small:  # those groups' rows get the one marginal threshold: no coverage guarantee within them
                need = min_calibration_rows(float(record["epsilon"]))
                text += (f" ({small} group{'s' if small != 1 else ''} with fewer than {need} calibration rows, the "
                         f"fewest a group needs at epsilon {float(record['epsilon']):g}: they get the marginal "
                         f"q = {float(record['quantile']):.4g}, "
                         "without coverage guaranteed within them)")
            return {"calibrated": text, "reached": True}
        if "quantile" in record:
            return {"calibrated": f"q = {float(record['quantile']):.4g}", "reached": True}
        lo, mid, hi = (float(record[k]) for k in ("quantile_min", "quantile_median", "quantile_max"))
        unbounded = int(record.get("classes_unbounded", 0))
    except KeyError:
        raise ValueError(f"{path}: neither 'parameter', 'quantile' nor 'quantile_min/median/max'") from None
    except (TypeError, ValueError):
        raise ValueError(f"{path}: the calibrated values are not numbers") from None
    if unbounded:  # q = inf for these classes: every set would hold them, whatever the row
        return {"calibrated": not_calibrated_text(record), "reached": False}
    return {"calibrated": f"q = {lo:.4g}..{hi:.4g} (median {mid:.4g})", "reached": True}


def not_calibrated_text(record: Mapping[str, object]) -> str:
    """Why a class-conditional method could not be calibrated, from its :func:`calibration_record`:
    ``"not calibrated: 86 of 100 classes have fewer than 9 calibration rows, the fewest a class needs for
    a finite threshold at epsilon 0.1 (...)"``."""
    from .conformal import min_calibration_rows

    eps = float(record["epsilon"])
    need = int(record.get("rows_needed_per_class") or min_calibration_rows(eps))
    unbounded = int(record.get("classes_unbounded", 0))
    K = record.get("n_classes")
    of = f"{unbounded} of {int(K)}" if K is not None else f"{unbounded}"
    cls = "class has" if unbounded == 1 and K is None else "classes have"
    return (f"not calibrated: {of} {cls} fewer than {need} calibration rows, the fewest a class needs for a finite "
            f"threshold at epsilon {eps:g} (with fewer, q = inf: every set would hold that class); give at least "
            f"{need} calibration rows per class")


def timing_columns(
    sets: Mapping[tuple[str, str], SetPredictions],
    timings: Mapping[tuple[str, str], Mapping[str, object]],
    *,
    reference: str = "svbop_full",
    paper_reference: str = PAPER_FULL,
) -> dict[tuple[str, str], dict[str, float]]:
    """Test-time columns of the timed methods, for :func:`evaluate_methods`'s ``extra``.

    Parameters
    ----------
    sets : mapping of (method, param) to SetPredictions
        Test sets of every method (as for :func:`evaluate_methods`).
    timings : mapping of (method, param) to dict
        Timing records (:func:`svbop.timing.read_timing`) of the timed methods; must include
        ``(reference, param)`` for every other timed method's ``param``.
    reference : str, default "svbop_full"
        The exact method the others are compared with.
    paper_reference : str, default "svbop_full_naive"
        SVBOP-Full with the paper's cost model: where it was timed for the same ``param``, every
        other timed method also gets ``speedup_vs_full_naive`` (the paper's speed-up).

    Returns
    -------
    dict
        Per timed method: ``t_test_ms`` (test time per sample in ms, the paper's Table 4: the
        median of the timed repeats), ``t_test_ms_min`` and ``t_test_ms_max`` (the fastest and
        slowest repeat), ``t_test_repeats``, ``load_start`` and ``load_end`` (the 1-minute load
        average before and after; NaN in a record of one measurement, which does not know it) and
        ``cpu_count`` (NaN likewise); for
        the other methods also ``agreement_with_full_pct`` (percentage of test rows whose set
        equals the reference's for the same ``param``) and ``speedup_vs_full`` (reference's
        ``t_test_ms`` over the method's), and ``speedup_vs_full_naive`` (``paper_reference``'s
        over the method's) where that was timed; ``index_recall_pct`` where the record has it
        (SVBOP-HSG: recall@k of its index).

    Raises
    ------
    ValueError
        A timed method has no sets, or its reference has no sets or timing.
    """
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, record in timings.items():
        method, param = key
        if key not in sets:
            raise ValueError(f"timing for {method} {param} but no sets")
        ms = float(record["ms_per_sample"])
        out[key] = {"t_test_ms": ms, **_spread_columns(record)}
        if record.get("index_recall_pct") is not None:  # SVBOP-HSG: its index's recall@k
            out[key]["index_recall_pct"] = float(record["index_recall_pct"])
        if method == reference:
            continue
        ref = (reference, param)
        if ref not in sets or ref not in timings:
            raise ValueError(f"{method} {param}: no {reference} sets and timing for {param!r} to compare with")
        out[key]["agreement_with_full_pct"] = 100.0 * set_agreement(sets[key], sets[ref])
        out[key]["speedup_vs_full"] = float(timings[ref]["ms_per_sample"]) / ms
        paper_ref = (paper_reference, param)
        if method != paper_reference and paper_ref in timings:
            out[key]["speedup_vs_full_naive"] = float(timings[paper_ref]["ms_per_sample"]) / ms
    return out


def _spread_columns(record: Mapping[str, object]) -> dict[str, float]:
    """The repeats, spread and load of a timing record (:func:`svbop.timing.read_timing`; none
    for a record without ``repeats``)."""
    if "repeats" not in record:
        return {}
    ms = float(record["ms_per_sample"])

    def first(load: object) -> float:
        return float(load[0]) if isinstance(load, (list, tuple)) and load else math.nan

    count = record.get("cpu_count")
    return {"t_test_ms_min": float(record.get("ms_per_sample_min", ms)),
            "t_test_ms_max": float(record.get("ms_per_sample_max", ms)),
            "t_test_repeats": float(record.get("repeats", 1)),
            "load_start": first(record.get("load_start")), "load_end": first(record.get("load_end")),
            "cpu_count": math.nan if count is None else float(count)}


def dataset_summary(
    *,
    dataset: str,
    title: str,
    n_classes: int,
    n_features: int | None,
    split: Mapping[str, np.ndarray],
    P_test,
    y_test,
    synthetic: bool = False,
    description: str = "",
    features: str = "",
    train_seconds: float | None = None,
    train_parts: Mapping[str, float] | None = None,
    features_seconds: float | None = None,
) -> dict:
    """One row of the paper's Table 2 (K, D, N_train, N_test), with the held-out parts and accuracy.

    ``train_seconds`` is the training time of every model the flat model's probabilities need;
    given ``train_parts`` instead (e.g. ``{"cnn": 57.0, "flat": 0.1}``: the CNN whose hidden
    layer is the features, then liblinear), it is their sum, and the parts are kept as
    ``train_seconds_parts``.  ``features_seconds``: the time spent computing the features
    (beyond any model training counted in ``train_seconds``), kept as ``features_seconds``.
    ``n_features`` None: the dataset is a model's outputs (no features of ours; ``D`` is None).
    """
    y_test = check_labels(y_test, np.shape(P_test), "y_test")
    parts = {str(k): float(v) for k, v in (train_parts or {}).items()}
    if train_seconds is None and parts:
        train_seconds = sum(parts.values())
    extra = {"train_seconds_parts": parts} if parts else {}
    if features_seconds is not None:
        extra["features_seconds"] = float(features_seconds)
    return {
        "dataset": dataset,
        "title": title,
        "synthetic": bool(synthetic),
        "description": description,
        "features": features,
        "K": int(n_classes),
        "D": None if n_features is None else int(n_features),
        **{f"N_{part}": int(len(split[part])) for part in ("train", "validation", "calibration", "test")},
        "top1_pct": 100.0 * top1_accuracy(P_test, y_test),
        "train_seconds": None if train_seconds is None else float(train_seconds),
        **extra,
    }


def read_threshold_tuning(path: str | os.PathLike) -> dict[str, object]:
    """The tuned theta of a threshold method, from its tuning file, and whether it sits at the edge of the grid.

    Parameters
    ----------
    path : path
        The tab-separated file of rule ``predict_threshold``: one row per theta of the grid with
        ``theta``, ``validation_utility_pct`` and ``chosen`` (``True`` on the tuned one).

    Returns
    -------
    dict
        ``theta`` (float) and ``theta_edge``: ``"smallest"`` or ``"largest"`` when the tuned theta
        is the grid's smallest (or largest) value *and* scores better on the validation rows than
        its neighbour in the grid, so that the best theta may lie beyond the grid; ``""``
        otherwise (also when the smallest theta only ties with larger ones: ties go to the
        smallest theta, and there the grid decided nothing).  These are columns of
        ``metrics.tsv`` (:func:`evaluate_methods`'s ``extra``).

    Raises
    ------
    ValueError
        The file is missing or unreadable, lacks a column, has a value that is not a number, or
        has not exactly one chosen row (the message names the file and the row).
    """
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path}: cannot read the threshold tuning file ({exc})") from None
    if not rows:
        raise ValueError(f"{path}: no rows (expected one per theta of the grid)")
    for col in ("theta", "validation_utility_pct", "chosen"):
        if col not in rows[0]:
            raise ValueError(f"{path}: missing column {col!r}")
    thetas, scores = [], []
    for i, row in enumerate(rows, start=2):
        try:
            thetas.append(float(row["theta"]))
            scores.append(float(row["validation_utility_pct"]))
        except (TypeError, ValueError):
            raise ValueError(f"{path}: row {i}: theta and validation_utility_pct must be numbers, got "
                             f"{row['theta']!r}, {row['validation_utility_pct']!r}") from None
        if not (math.isfinite(thetas[-1]) and math.isfinite(scores[-1])):
            raise ValueError(f"{path}: row {i}: theta and validation_utility_pct must be finite")
    chosen = [i for i, row in enumerate(rows) if str(row["chosen"]).strip() == "True"]
    if len(chosen) != 1:
        raise ValueError(f"{path}: expected exactly one row with chosen True, found {len(chosen)}")
    i = chosen[0]
    theta = thetas[i]
    order = sorted(range(len(thetas)), key=thetas.__getitem__)
    edge = ""
    if len(order) > 1:
        tol = 1e-7 * max(1.0, abs(scores[i]))  # the tuning's own tie tolerance (1e-9 of a utility in [0, 1])
        for name, end, neighbour in (("smallest", order[0], order[1]), ("largest", order[-1], order[-2])):
            if i == end and scores[i] > scores[neighbour] + tol:
                edge = name
    return {"theta": theta, "theta_edge": edge}


def read_seconds(path: str | os.PathLike) -> float:
    """Seconds a pipeline job spent, from one of its files.

    * a model's JSON (``models/flat.json``, ``indexes/hnsw.json``, ...): its ``train_seconds`` or
      ``build_seconds``;
    * the CNN's training history (``features/cnn_history.tsv``): the sum of its ``seconds``
      column (one row per epoch);
    * a Snakemake benchmark file (``results/benchmarks/<rule>/<job>.tsv``): its ``s`` column, the
      job's wall-clock seconds (the mean of its rows when the job was repeated).

    Raises
    ------
    ValueError
        The file is missing, unreadable, or has none of these fields (the message names the file).
    """
    name = os.fspath(path)
    try:
        with open(path, newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}: cannot read the time it records ({exc})") from None
    if name.endswith(".json"):
        try:
            info = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}: not valid JSON ({exc})") from None
        key = next((k for k in ("train_seconds", "build_seconds") if isinstance(info, dict) and k in info), None)
        if key is None:
            raise ValueError(f"{name}: neither 'train_seconds' nor 'build_seconds'")
        values, how = [info[key]], sum
    else:
        rows = list(csv.DictReader(text.splitlines(), delimiter="\t"))
        fields = rows[0].keys() if rows else ()
        if "seconds" in fields:
            values, how = [r["seconds"] for r in rows], sum
        elif "s" in fields:
            values, how = [r["s"] for r in rows], lambda v: sum(v) / len(v)
        else:
            raise ValueError(f"{name}: no rows with a 'seconds' (training history) or 's' (Snakemake benchmark) column")
    try:
        numbers = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name}: seconds are not numbers: {values[:3]!r}") from None
    if not all(math.isfinite(v) and v >= 0 for v in numbers):
        raise ValueError(f"{name}: seconds must be finite and >= 0, got {numbers[:3]!r}")
    return float(how(numbers))
