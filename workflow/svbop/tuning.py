"""Hyper-parameters chosen on the validation rows, as the paper did (its appendix: "for Liblinear ...
we tuned two parameters: C ... and epsilon_l"; the values it chose are its Table 5).

A dataset's ``flat: {C: auto}`` (and/or ``eps: auto``) trains one flat model per point of a grid
(config ``tuning: {C_grid: [...], eps_grid: [...]}``; defaults :data:`DEFAULT_C_GRID`,
:data:`DEFAULT_EPS_GRID`) on the training rows, one pipeline job per point, and keeps the point
whose model has the smallest **validation log-loss** (mean negative log-probability of the true
class, :func:`validation_log_loss`).  Why that score: every SVBOP set is the Bayes-optimal set of
the *probabilities* it is given (the paper's Section 3), so the flat model should be the best
probability estimator it can be, and log-loss is the proper scoring rule that L2-regularised
logistic regression itself minimises; it needs no set, so one model serves every utility of the
run (the paper too trains one flat model per dataset for all utilities), and it is cheap: one
pass over the validation rows per point.

Warm start: liblinear-official (2.50) has ``parameter.init_sol`` only for its primal solvers
(-s 0, 2, 11); the paper's dual solver -s 7 refuses it ("Initial-solution specification supported
only for solvers L2R_LR, L2R_L2LOSS_SVC, and L2R_L2LOSS_SVR"), and liblinear's own C search (-C)
is likewise only for -s 0 and 2.  The points are therefore trained cold, each its own job, so a
cluster runs them in parallel.

A value chosen at the smallest or largest value of its grid that scores better than its neighbour
in the grid is flagged (``"smallest"``/``"largest"``), as the threshold baseline's theta is
(:func:`svbop.evaluation.read_threshold_tuning`): the best value may lie beyond the grid.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .io import read_json_object

__all__ = [
    "AUTO",
    "DEFAULT_C_GRID",
    "DEFAULT_EPS_GRID",
    "DEFAULT_HF_C_GRID",
    "DEFAULT_HF_EPS_GRID",
    "DEFAULT_HSG_EF_GRID",
    "DEFAULT_HSG_K_GRID",
    "DEFAULT_HSG_TOLERANCE",
    "DEFAULT_MAX_LEAVES_GRID",
    "FLAT_AXES",
    "HF_AXES",
    "HF_TUNED_KEYS",
    "HSG_TUNED_KEYS",
    "MAX_GRID_VALUES",
    "MAX_GRID_INTEGER",
    "MAX_TUNING_POINTS",
    "tuning_points",
    "NOT_YET",
    "TUNED_KEYS",
    "choice_text",
    "effective_ef",
    "flat_grid",
    "full_validation_utility",
    "hf_grid",
    "hsg_grid",
    "is_hf_tuned",
    "is_hsg_tuned",
    "is_tuned",
    "parse_point_label",
    "point_label",
    "read_choice",
    "read_points",
    "resolve_flat",
    "resolve_hf",
    "resolve_hsg",
    "score_hf_point",
    "score_hsg_point",
    "score_point",
    "select_hsg_point",
    "select_point",
    "tree_keys",
    "validation_log_loss",
    "value_label",
]

#: The value that asks for a hyper-parameter to be chosen on the validation rows.
AUTO = "auto"
#: liblinear's C, one value per decade: the paper's flat models used 100 to 1,000,000 (Table 5).
DEFAULT_C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0, 1000000.0)
#: liblinear's stopping tolerance: the paper's Table 5 has 0.1 throughout.
DEFAULT_EPS_GRID = (0.01, 0.1, 1.0)
#: The flat model's keys ``auto`` may stand for -> their grid's key under ``tuning``.
TUNED_KEYS = {"C": "C_grid", "eps": "eps_grid"}
#: The flat model's grid axes -> the tie order of :func:`select_point` (+1: smaller first, -1: larger first).
FLAT_AXES = {"C": 1, "eps": -1}
#: ``section.key`` that svbop does not choose on the validation rows (``auto`` refused with a message):
#: the HNSW graph's M and efConstruction shape the index, which is built once per dataset.
NOT_YET = ("hsg.M", "hsg.efC")

#: The most values one grid of ``tuning`` may hold (the schema's ``maxItems``): each is one job or more.
MAX_GRID_VALUES = 64
#: The largest integer a grid of integers (``hsg_k_grid``, ``hsg_ef_grid``, ``max_leaves_grid``) may
#: hold: the cap of the fixed keys they stand for (``hsg.k``, ``hsg.ef``, ``hf.max_leaves``).
MAX_GRID_INTEGER = 2**31 - 1
#: The most grid points (one job each) one tuned model may ask for: the flat model, each tree, HSG.
MAX_TUNING_POINTS = 1024

#: Probabilities are floored here before the logarithm (a class given probability 0 costs 36.8 nats, not inf).
_FLOOR = 1e-16


def is_tuned(flat: Mapping[str, Any]) -> bool:
    """Whether a dataset's ``flat`` entry asks for any value to be chosen on the validation rows."""
    return any(flat.get(key) == AUTO for key in TUNED_KEYS)


def _grid(tuning: Mapping[str, Any] | None, key: str, default: Sequence[float], integer: bool = False,
          minimum: int = 1) -> list[float]:
    raw = (tuning or {}).get(key)
    values = list(default) if raw is None else raw
    what = f"integers >= {minimum}" if integer else "numbers > 0"
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"tuning.{key}: expected a non-empty list of {what}, got {raw!r}")
    if len(values) > MAX_GRID_VALUES:
        raise ValueError(f"tuning.{key}: {len(values):,} values; a grid holds at most {MAX_GRID_VALUES} (one job or "
                         "more each)")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"tuning.{key}: expected finite {what}, got {v!r}")
        if integer and (v != int(v) or v < minimum):
            raise ValueError(f"tuning.{key}: expected {what}, got {v!r}")
        if integer and v > MAX_GRID_INTEGER:
            raise ValueError(f"tuning.{key}: {v!r} is above {MAX_GRID_INTEGER} (the cap of the key it tunes)")
        out.append(int(v) if integer else float(v))
    labels = [value_label(v) for v in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"tuning.{key}: a value is repeated in {out!r}")
    return sorted(out)


def value_label(value: float | None) -> str:
    """A grid value as it names files: ``100.0 -> "100"``, ``1e-05 -> "1e-05"`` (exact: it reads back as ``value``).

    Examples
    --------
    >>> value_label(100000.0), value_label(0.1), value_label(0.123456789), value_label(None)
    ('100000', '0.1', '0.123456789', 'none')
    """
    if value is None:
        return "none"
    text = f"{float(value):g}"
    return text if float(text) == float(value) else repr(float(value))


def flat_grid(flat: Mapping[str, Any], tuning: Mapping[str, Any] | None = None) -> list[dict[str, float]]:
    """The grid points ``{"C": ..., "eps": ...}`` a dataset's ``flat`` entry asks for (empty: nothing is auto).

    A key set to ``"auto"`` runs over its grid (``tuning.C_grid`` / ``tuning.eps_grid``, defaults
    :data:`DEFAULT_C_GRID`, :data:`DEFAULT_EPS_GRID`); a number stays fixed.  Both auto: every pair.

    Raises
    ------
    ValueError
        A grid that is empty, repeats a value or holds something other than a finite number > 0,
        or a fixed value that is not such a number.
    """
    if not is_tuned(flat):
        return []
    axes = {}
    for key, grid_key in TUNED_KEYS.items():
        value = flat.get(key)
        if value == AUTO:
            axes[key] = _grid(tuning, grid_key, DEFAULT_C_GRID if key == "C" else DEFAULT_EPS_GRID)
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"flat.{key}: expected a number > 0 or 'auto', got {value!r}")
        else:
            axes[key] = [float(value)]
    return [{"C": c, "eps": e} for c in axes["C"] for e in axes["eps"]]


def validation_log_loss(P: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log-probability of the true class, in nats (probabilities floored at 1e-16).

    Parameters
    ----------
    P : array of shape (n, K)
        Class probabilities of the validation rows.
    y : array of shape (n,)
        Their classes, ``0..K-1``.

    Examples
    --------
    >>> round(validation_log_loss(np.array([[0.5, 0.5], [0.9, 0.1]]), np.array([0, 0])), 4)
    0.3992
    """
    P = np.asarray(P, dtype=np.float64)
    y = np.asarray(y)
    if P.ndim != 2 or y.ndim != 1 or P.shape[0] != y.shape[0] or P.shape[0] == 0:
        raise ValueError(f"P must be (n, K) and y (n,) with n > 0, got {P.shape} and {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= P.shape[1]:
        raise ValueError(f"y must hold integer classes in 0..{P.shape[1] - 1}")
    p = P[np.arange(y.size), y]
    if not np.all(np.isfinite(p)):
        raise ValueError("P holds NaN or infinite probabilities")
    return float(-np.mean(np.log(np.maximum(p, _FLOOR))))


def score_point(X_train: Any, y_train: np.ndarray, X_val: Any, y_val: np.ndarray, n_classes: int, *, C: float,
                eps: float, bias: float = 1.0, clip: float | None = None, n_jobs: int = 1,
                progress: bool = True) -> dict[str, Any]:
    """Train the flat model at one grid point on the training rows and score it on the validation rows.

    The model is :func:`svbop.linear.train_ovr` (liblinear -s 7, one-vs-rest), its probabilities
    :meth:`~svbop.linear.LinearModel.predict_proba` as the pipeline's ``score_flat`` computes them.
    ``progress`` logs every tenth of the classes (a large C trains slowly: the dual solver needs
    more iterations).

    Returns
    -------
    dict
        ``C``, ``eps``, ``validation_log_loss`` (:func:`validation_log_loss`), ``validation_top1``
        (share of rows whose most probable class is right), ``train_seconds``, ``n_train``, ``n_validation``.
    """
    import time

    from .linear import train_ovr

    start = time.perf_counter()
    model = train_ovr(X_train, y_train, n_classes, C=C, eps=eps, bias=bias, clip=clip, n_jobs=n_jobs, progress=progress)
    seconds = time.perf_counter() - start
    P = model.predict_proba(X_val)
    y_val = np.asarray(y_val)
    return {"C": float(C), "eps": float(eps), "validation_log_loss": validation_log_loss(P, y_val),
            "validation_top1": float(np.mean(np.argmax(P, axis=1) == y_val)), "train_seconds": seconds,
            "n_train": int(np.asarray(y_train).shape[0]), "n_validation": int(y_val.shape[0])}


_POINT_KEYS = ("C", "eps", "validation_log_loss")


def read_points(paths: Iterable[str | os.PathLike], keys: Iterable[str] = _POINT_KEYS,
                nullable: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The grid points' results, one JSON file each (rules ``tune_flat_point``, ``tune_hf_point``, ``tune_hsg_point``).

    Parameters
    ----------
    keys : iterable of str
        What each point must hold as a finite number (default: the flat model's ``C``, ``eps``
        and ``validation_log_loss``).
    nullable : iterable of str
        Keys that may also be null (HSG's ``ef``).

    Raises
    ------
    ValueError
        A file that is unreadable, not a JSON object, or lacks a finite number for one of
        ``keys`` (the message names the file and key); no files at all.
    """
    nullable = set(nullable)
    points = []
    for path in paths:
        record = read_json_object(path, "a tuning point")
        for key in keys:
            v = record.get(key)
            if v is None and key in nullable:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{path}: {key}: expected a finite number, got {v!r}")
        points.append(record)
    if not points:
        raise ValueError("read_points: no tuning points")
    return points


def select_point(points: Sequence[Mapping[str, Any]], tuned: Sequence[str] = ("C", "eps"),
                 score: str = "validation_log_loss", axes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The point with the smallest ``score`` and, per tuned key, whether it sits at a binding edge of its grid.

    Ties (within 1e-9 relative) go to the first point in the order of ``axes``: for the flat
    model the smaller C (stronger regularisation) and then the larger eps (less work).

    Parameters
    ----------
    points : sequence of mappings
        Each with every key of ``axes`` and ``score``.
    tuned : sequence of str
        The keys that were set to ``auto`` (the others are fixed, one value).
    score : str
        The key to minimise.
    axes : mapping, optional
        The grid's keys -> ``+1`` (ties prefer the smaller value) or ``-1`` (the larger), in the
        order ties are broken; default :data:`FLAT_AXES` (``C``, ``eps``); :data:`HF_AXES` for a tree.

    Returns
    -------
    dict
        Each key of ``axes`` (its chosen value), ``score`` (its name), ``value`` (its value at the
        chosen point), ``grid`` (key -> its sorted values, for the tuned keys), ``edge`` (key ->
        ``"smallest"``, ``"largest"`` or ``""``: the chosen value is the grid's smallest (largest)
        *and* beats the point next to it in that grid, the other keys equal), ``points`` (every
        point, sorted).
    """
    axes = dict(FLAT_AXES if axes is None else axes)
    if not points:
        raise ValueError("select_point: no points")
    bad = [k for k in tuned if k not in axes]
    if bad:
        raise ValueError(f"tuned: expected keys among {sorted(axes)}, got {bad!r}")
    rows = sorted(({**{k: float(p[k]) for k in axes}, score: float(p[score])} for p in points),
                  key=lambda r: tuple(sign * r[k] for k, sign in axes.items()))
    best = min(r[score] for r in rows)
    tol = 1e-9 * max(1.0, abs(best))
    chosen = next(r for r in rows if r[score] <= best + tol)
    grid = {k: sorted({r[k] for r in rows}) for k in tuned}
    edge = {}
    for k in tuned:
        values, edge[k] = grid[k], ""
        if len(values) < 2:
            continue
        others = {o: chosen[o] for o in axes if o != k}
        line = {r[k]: r[score] for r in rows if all(r[o] == v for o, v in others.items())}
        for name, end, neighbour in (("smallest", values[0], values[1]), ("largest", values[-1], values[-2])):
            if chosen[k] == end and neighbour in line and chosen[score] < line[neighbour] - tol:
                edge[k] = name
    return {**{k: chosen[k] for k in axes}, "score": score, "value": chosen[score],
            "grid": grid, "edge": edge, "points": rows}


def read_choice(path: str | os.PathLike, keys: Iterable[str] = tuple(TUNED_KEYS),
                nullable: Iterable[str] = ()) -> dict[str, Any]:
    """A tuning record (rules ``tune_flat``, ``tune_hf``, ``tune_hsg``: :func:`select_point`'s or
    :func:`select_hsg_point`'s dict as JSON), checked.

    Parameters
    ----------
    keys : iterable of str
        The values the record must hold, each a number > 0 (default: the flat model's ``C``, ``eps``).
    nullable : iterable of str
        Keys whose value may also be null (HSG's ``ef``: each query's k).

    Raises
    ------
    ValueError
        Unreadable file, or a key missing or not a number > 0, naming the file.
    """
    record = read_json_object(path, "the tuning record")
    nullable = set(nullable)
    for key in keys:
        v = record.get(key)
        if v is None and key in nullable:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{path}: {key}: expected a number > 0, got {v!r}")
    if not isinstance(record.get("grid"), dict) or not isinstance(record.get("edge", {}), dict):
        raise ValueError(f"{path}: grid and edge must be objects")
    return record


def resolve_flat(flat: Mapping[str, Any], tuned: Sequence[str | os.PathLike] | str | os.PathLike | None) -> dict[str, Any]:
    """``flat`` with every ``auto`` replaced by the value the tuning record ``tuned`` chose.

    ``tuned`` is the record's path, or a list of zero or one paths (a rule's optional input).

    Raises
    ------
    ValueError
        ``flat`` has an ``auto`` and no record is given, or the record cannot be read.
    """
    paths = [] if tuned is None else [tuned] if isinstance(tuned, (str, os.PathLike)) else list(tuned)
    out = dict(flat)
    if not is_tuned(out):
        return out
    if len(paths) != 1:
        raise ValueError(f"flat: {', '.join(k for k in TUNED_KEYS if out.get(k) == AUTO)} is 'auto' "
                         f"but {len(paths)} tuning records were given (expected 1)")
    record = read_choice(paths[0])
    for key in TUNED_KEYS:
        if out.get(key) == AUTO:
            out[key] = float(record[key])
    return out


def choice_text(record: Mapping[str, Any], key: str) -> str:
    """``"auto: chose 100 from grid 0.01, 0.1, ..., 1e+06"`` (with the edge, where the choice sits at one).

    Examples
    --------
    >>> choice_text({"C": 10.0, "grid": {"C": [1.0, 10.0, 100.0]}, "edge": {"C": ""}}, "C")
    'auto: chose 10 from grid 1, 10, 100'
    >>> choice_text({"C": 100.0, "grid": {"C": [1.0, 10.0, 100.0]}, "edge": {"C": "largest"}}, "C")
    'auto: chose 100 from grid 1, 10, 100 (the largest value: the best may lie beyond the grid)'
    """
    grid = ", ".join(f"{float(v):g}" for v in record["grid"][key])
    text = f"auto: chose {float(record[key]):g} from grid {grid}"
    edge = (record.get("edge") or {}).get(key) or ""
    if edge:
        text += f" (the {edge} value: the best may lie beyond the grid)"
    if record.get("reached") is False:
        text += (f" (no point came within {float(record['tolerance']):g} of SVBOP-Full's validation utility: "
                 "the most accurate point)")
    return text


def point_label(point: Mapping[str, Any], keys: Sequence[str]) -> str:
    """A grid point as it names its file: ``{"C": 10.0, "eps": 0.1} -> "C_10_eps_0.1"`` (:func:`parse_point_label` reads it back).

    Examples
    --------
    >>> point_label({"k": 10, "ef": None}, ("k", "ef"))
    'k_10_ef_none'
    """
    return "_".join(f"{key}_{value_label(point[key])}" for key in keys)


def parse_point_label(label: str, keys: Sequence[str], integer: Iterable[str] = ()) -> dict[str, Any]:
    """The point a :func:`point_label` names (``integer`` keys as ints; ``none`` as None).

    Raises
    ------
    ValueError
        ``label`` is not ``<key>_<value>`` for each of ``keys`` in order.

    Examples
    --------
    >>> parse_point_label("C_10_eps_0.1_max_leaves_20", ("C", "eps", "max_leaves"), integer=("max_leaves",))
    {'C': 10.0, 'eps': 0.1, 'max_leaves': 20}
    """
    pattern = "_".join(f"{re.escape(key)}_(none|[0-9][0-9.e+-]*)" for key in keys)
    match = re.fullmatch(pattern, label)
    if not match:
        raise ValueError(f"tuning point {label!r}: expected {'_'.join(f'{k}_<value>' for k in keys)}")
    integer = set(integer)
    out: dict[str, Any] = {}
    for key, text in zip(keys, match.groups()):
        out[key] = None if text == "none" else int(float(text)) if key in integer else float(text)
    return out


# --- SVBOP-HF's trees: hf: {C: auto, eps: auto, max_leaves: auto} ------------------------------

#: The trees' keys ``auto`` may stand for -> their grid's key under ``tuning``.
HF_TUNED_KEYS = {"C": "hf_C_grid", "eps": "hf_eps_grid", "max_leaves": "max_leaves_grid"}
#: liblinear's C of the tree nodes: as the flat model's (the paper's trees used 50 to 1e9, Table 5).
DEFAULT_HF_C_GRID = DEFAULT_C_GRID
#: liblinear's stopping tolerance of the tree nodes (the paper: 0.1 throughout).
DEFAULT_HF_EPS_GRID = DEFAULT_EPS_GRID
#: l, the most classes below a 2-means node that is not split further (the paper: 20 and 100).
DEFAULT_MAX_LEAVES_GRID = (5, 10, 20, 50, 100, 200)
#: A tree's grid axes -> tie order (smaller C; larger eps; larger l: fewer internal nodes, a smaller model).
HF_AXES = {"C": 1, "eps": -1, "max_leaves": -1}


def tree_keys(tree: str) -> tuple[str, ...]:
    """The keys of ``hf`` that shape a tree of kind ``tree``: a predefined tree ignores ``max_leaves``."""
    if tree not in ("predefined", "kmeans"):
        raise ValueError(f"tree: expected 'predefined' or 'kmeans', got {tree!r}")
    return ("C", "eps", "max_leaves") if tree == "kmeans" else ("C", "eps")


def is_hf_tuned(hf: Mapping[str, Any], tree: str) -> bool:
    """Whether a dataset's ``hf`` entry asks for a value of the ``tree`` model to be chosen on the validation rows."""
    return any(hf.get(key) == AUTO for key in tree_keys(tree))


def hf_grid(hf: Mapping[str, Any], tuning: Mapping[str, Any] | None, tree: str) -> list[dict[str, Any]]:
    """The grid points of one tree model (empty: nothing of it is auto).

    Points are ``{"C", "eps", "max_leaves"}`` for a 2-means tree and ``{"C", "eps"}`` for the
    predefined tree (its shape is the hierarchy's: ``max_leaves`` plays no part, so ``auto`` there
    adds no point).  Grids: ``tuning.hf_C_grid``, ``hf_eps_grid``, ``max_leaves_grid`` (defaults
    :data:`DEFAULT_HF_C_GRID`, :data:`DEFAULT_HF_EPS_GRID`, :data:`DEFAULT_MAX_LEAVES_GRID`).

    Raises
    ------
    ValueError
        A bad grid (see :func:`flat_grid`; ``max_leaves_grid`` holds integers >= 2), or a fixed value
        that is not a number > 0 (``max_leaves``: an integer >= 2).
    """
    keys = tree_keys(tree)
    if not is_hf_tuned(hf, tree):
        return []
    defaults = {"C": DEFAULT_HF_C_GRID, "eps": DEFAULT_HF_EPS_GRID, "max_leaves": DEFAULT_MAX_LEAVES_GRID}
    axes = {}
    for key in keys:
        value, integer = hf.get(key), key == "max_leaves"
        if value == AUTO:
            axes[key] = _grid(tuning, HF_TUNED_KEYS[key], defaults[key], integer=integer, minimum=2)
        elif (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
              or (integer and (value != int(value) or value < 2))):
            raise ValueError(f"hf.{key}: expected {'an integer >= 2' if integer else 'a number > 0'} or 'auto', got {value!r}")
        else:
            axes[key] = [int(value) if integer else float(value)]
    points: list[dict[str, Any]] = [{}]
    for key in keys:
        points = [{**p, key: v} for p in points for v in axes[key]]
    return points


def score_hf_point(X_train: Any, y_train: np.ndarray, X_val: Any, y_val: np.ndarray, n_classes: int, *, tree: str,
                   C: float, eps: float, max_leaves: int | None = None, hierarchy: Any = None,
                   kmeans_eps: float = 1e-3, bias: float = 1.0, clip: float | None = None, seed: int = 0,
                   n_jobs: int = 1, progress: bool = False) -> dict[str, Any]:
    """Build one tree, train its node classifiers on the training rows, and score it on the validation rows.

    The score is the **validation log-loss** (:func:`validation_log_loss`) of the tree model's class
    probabilities, each the product of the node probabilities along its path
    (:meth:`svbop.trees.TreeModel.predict_proba`).  The justification is the flat model's: the sets
    SVBOP-HF returns are the Bayes-optimal sets of exactly these probabilities (the paper's Section
    3.3: Algorithm 1 on the tree's classes in decreasing probability), so the best tree for every
    utility of the run is the best probability estimator, and log-loss is the proper scoring rule
    each node's logistic regression minimises.

    Parameters
    ----------
    tree : {"predefined", "kmeans"}
        The hierarchy's own tree (:func:`svbop.trees.tree_from_hierarchy` of ``hierarchy``), or
        hierarchical balanced 2-means on the training rows' class profiles
        (:func:`svbop.trees.balanced_kmeans_tree` with ``max_leaves``, ``kmeans_eps``, ``seed``),
        as rule ``build_tree`` builds them.
    C, eps, bias, clip
        The node classifiers' liblinear parameters (:func:`svbop.trees.train_tree`) and the
        weight clipping of rule ``train_tree_part``.

    Returns
    -------
    dict
        ``C``, ``eps`` (and ``max_leaves`` for a 2-means tree), ``validation_log_loss``,
        ``validation_top1``, ``internal_nodes``, ``build_seconds``, ``train_seconds``, ``n_train``,
        ``n_validation``.
    """
    import time

    from .trees import balanced_kmeans_tree, train_tree, tree_from_hierarchy

    keys = tree_keys(tree)
    start = time.perf_counter()
    if tree == "predefined":
        if hierarchy is None:
            raise ValueError("tree 'predefined' needs the dataset's class hierarchy (hierarchy=None)")
        shape = tree_from_hierarchy(hierarchy)
    else:
        if max_leaves is None:
            raise ValueError("tree 'kmeans' needs max_leaves")
        shape = balanced_kmeans_tree(X_train, y_train, n_classes, max_leaves=int(max_leaves), eps=kmeans_eps, seed=seed)
    built = time.perf_counter()
    model = train_tree(X_train, y_train, shape, C=C, eps=eps, bias=bias, n_jobs=n_jobs, progress=progress)
    if clip is not None:
        model = model.clip(clip)
    trained = time.perf_counter()
    P = model.predict_proba(X_val)
    y_val = np.asarray(y_val)
    point: dict[str, Any] = {"C": float(C), "eps": float(eps)}
    if "max_leaves" in keys:
        point["max_leaves"] = int(max_leaves)
    return {**point, "validation_log_loss": validation_log_loss(P, y_val),
            "validation_top1": float(np.mean(np.argmax(P, axis=1) == y_val)),
            "internal_nodes": int(shape.n_nodes - shape.n_classes), "build_seconds": built - start,
            "train_seconds": trained - built, "n_train": int(np.asarray(y_train).shape[0]),
            "n_validation": int(y_val.shape[0])}


def _paths(tuned: Sequence[str | os.PathLike] | str | os.PathLike | None) -> list:
    return [] if tuned is None else [tuned] if isinstance(tuned, (str, os.PathLike)) else list(tuned)


def resolve_hf(hf: Mapping[str, Any], tree: str, tuned: Sequence[str | os.PathLike] | str | os.PathLike | None) -> dict[str, Any]:
    """``hf`` with every ``auto`` of the ``tree`` model replaced by the value its tuning record chose.

    ``tuned`` is the record's path (``results/<dataset>/tuning/hf_<tree>.json``), or a list of zero
    or one paths.  A predefined tree has no ``max_leaves``: an ``auto`` there becomes None.

    Raises
    ------
    ValueError
        ``hf`` has an ``auto`` for this tree and no record is given, or the record cannot be read.
    """
    keys = tree_keys(tree)
    out = dict(hf)
    if tree == "predefined" and out.get("max_leaves") == AUTO:
        out["max_leaves"] = None
    if not is_hf_tuned(out, tree):
        return out
    paths = _paths(tuned)
    if len(paths) != 1:
        raise ValueError(f"hf ({tree} tree): {', '.join(k for k in keys if out.get(k) == AUTO)} is 'auto' "
                         f"but {len(paths)} tuning records were given (expected 1)")
    record = read_choice(paths[0], keys)
    for key in keys:
        if out.get(key) == AUTO:
            out[key] = int(record[key]) if key == "max_leaves" else float(record[key])
    return out


# --- SVBOP-HSG's queries: hsg: {k: auto, ef: auto} ---------------------------------------------

#: HSG's query-time keys ``auto`` may stand for -> their grid's key under ``tuning``.
HSG_TUNED_KEYS = {"k": "hsg_k_grid", "ef": "hsg_ef_grid"}
#: k, the classes of SVBOP-HSG's first query (the paper: 10 to 200, Table 5).
DEFAULT_HSG_K_GRID = (5, 10, 20, 50, 100, 200)
#: HNSW's efSearch (the paper: ef = k throughout; a query uses max(ef, k)).
DEFAULT_HSG_EF_GRID = (10, 20, 50, 100, 200, 500)
#: How far below SVBOP-Full's mean validation utility (absolute, utilities in [0, 1]) HSG may be.
DEFAULT_HSG_TOLERANCE = 0.001


def is_hsg_tuned(hsg: Mapping[str, Any]) -> bool:
    """Whether a dataset's ``hsg`` entry asks for ``k`` or ``ef`` to be chosen on the validation rows."""
    return any(hsg.get(key) == AUTO for key in HSG_TUNED_KEYS)


def effective_ef(point: Mapping[str, Any]) -> int:
    """efSearch of the point's first query: ``max(ef, k)`` (``ef`` None: ``k``, as the paper)."""
    ef = point.get("ef")
    return int(point["k"]) if ef is None else max(int(ef), int(point["k"]))


def hsg_grid(hsg: Mapping[str, Any], tuning: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The grid points ``{"k", "ef"}`` a dataset's ``hsg`` entry asks for (empty: neither is auto).

    Every query of SVBOP-HSG uses ``max(ef, its k)`` (:func:`svbop.hsg.predict_sets_hsg`), so an
    ``auto`` ef below a point's k is the same search as ``ef = k``: it is run once, as ``ef = k``
    (the paper's own setting).  A fixed ``ef: null`` stays null (each query's k).

    Raises
    ------
    ValueError
        A bad grid (integers >= 1, see :func:`flat_grid`), or a fixed value that is not an integer >= 1.
    """
    if not is_hsg_tuned(hsg):
        return []
    axes = {}
    for key, grid_key in HSG_TUNED_KEYS.items():
        value = hsg.get(key)
        if value == AUTO:
            axes[key] = _grid(tuning, grid_key, DEFAULT_HSG_K_GRID if key == "k" else DEFAULT_HSG_EF_GRID, integer=True)
        elif value is None and key == "ef":
            axes[key] = [None]
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"hsg.{key}: expected an integer >= 1 or 'auto', got {value!r}")
        else:
            axes[key] = [value]
    points, seen = [], set()
    for k in axes["k"]:
        for ef in axes["ef"]:
            if hsg.get("ef") == AUTO:
                ef = max(ef, k)
            if (k, ef) not in seen:
                seen.add((k, ef))
                points.append({"k": k, "ef": ef})
    return points


def full_validation_utility(model: Any, X_val: Any, y_val: np.ndarray, u: Any, n_jobs: int = 1) -> float:
    """SVBOP-Full's mean utility on the validation rows (:func:`svbop.full.predict_sets_full`): HSG's target."""
    from .full import predict_sets_full
    from .metrics import set_utility

    return float(np.mean(set_utility(predict_sets_full(model, X_val, u, n_jobs=n_jobs), y_val, u)))


def score_hsg_point(model: Any, index: Any, X_val: Any, y_val: np.ndarray, u: Any, *, k: int, ef: int | None,
                    engine: str = "auto", n_jobs: int = 1) -> dict[str, Any]:
    """SVBOP-HSG's sets of the validation rows at one ``(k, ef)``, scored by their mean utility under ``u``.

    The index is the pipeline's one (rule ``build_index``, M and efC fixed): k and ef are query-time
    parameters, so a point queries it and never rebuilds it.

    Returns
    -------
    dict
        ``k``, ``ef``, ``validation_utility`` (mean of :func:`svbop.metrics.set_utility`),
        ``mean_size``, ``mean_queries`` and ``mean_scored`` (index queries and classes delivered per
        row), ``seconds`` (the prediction's wall time, one run: a rough cost), ``index_recall``
        (:func:`svbop.hsg.index_recall` at this k, ef), ``n_validation``.
    """
    import time

    from .hsg import index_recall, predict_sets_hsg
    from .metrics import set_utility

    y_val = np.asarray(y_val)
    start = time.perf_counter()
    sets, stats = predict_sets_hsg(model, index, X_val, u, k=k, ef=ef, engine=engine, n_jobs=n_jobs, return_stats=True)
    seconds = time.perf_counter() - start
    return {"k": int(k), "ef": None if ef is None else int(ef),
            "validation_utility": float(np.mean(set_utility(sets, y_val, u))),
            "mean_size": float(sets.sizes.mean()), "mean_queries": float(stats["queries"].mean()),
            "mean_scored": float(stats["scored"].mean()), "seconds": seconds,
            "index_recall": index_recall(model, index, X_val, k, ef, engine=engine), "n_validation": int(y_val.shape[0])}


def select_hsg_point(points: Sequence[Mapping[str, Any]], reference: float, tolerance: float = DEFAULT_HSG_TOLERANCE,
                     tuned: Sequence[str] = ("k", "ef")) -> dict[str, Any]:
    """The cheapest ``(k, ef)`` whose SVBOP-HSG validation utility is within ``tolerance`` of SVBOP-Full's.

    Why not the best utility, as for the models: k and ef do not change the probabilities, only how
    many of the most probable classes the index finds; a larger k or ef searches more of the graph,
    so it is never less accurate and always slower, and the most accurate point is simply the
    largest.  The paper tuned them for the time it reports at an accuracy close to SVBOP-Full's
    (its Table 4).  So the point kept is the cheapest, in the order (efSearch of the first query
    ``max(ef, k)``, then ``k``), whose mean utility on the validation rows is at least SVBOP-Full's
    on the same rows minus ``tolerance`` (absolute; utilities lie in [0, 1]).  When no point
    reaches it, the most accurate point is kept and the record says so (``reached: false``).

    Parameters
    ----------
    points : sequence of mappings
        Each with ``k``, ``ef`` (int or None: each query's k) and ``validation_utility``
        (:func:`score_hsg_point`).
    reference : float
        SVBOP-Full's mean utility on the same rows (:func:`full_validation_utility`).
    tolerance : float, default :data:`DEFAULT_HSG_TOLERANCE`
    tuned : sequence of {"k", "ef"}
        The keys set to ``auto``.

    Returns
    -------
    dict
        ``k``, ``ef``, ``score`` (``"validation_utility"``), ``value`` (its value at the chosen
        point), ``reference``, ``tolerance``, ``reached``, ``grid`` (key -> sorted values of the
        tuned keys), ``edge`` (key -> ``"smallest"`` where the chosen value is its grid's smallest,
        so a cheaper value may reach the tolerance too (for ef: only above the chosen k, since a
        smaller ef is the same search); ``"largest"`` where no point reached the tolerance and the
        value is its grid's largest; else ``""``), ``points`` (every point in cost order, with
        ``gap`` to the reference and ``within``).
    """
    if not points:
        raise ValueError("select_hsg_point: no points")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tuning.hsg_tolerance: expected a finite number >= 0, got {tolerance!r}")
    if not math.isfinite(reference):
        raise ValueError(f"reference: expected a finite mean utility, got {reference!r}")
    bad = [k for k in tuned if k not in HSG_TUNED_KEYS]
    if bad:
        raise ValueError(f"tuned: expected keys among {sorted(HSG_TUNED_KEYS)}, got {bad!r}")
    slack = 1e-12  # the same sets can differ in the last bits of their mean
    rows = []
    for p in points:
        r = {"k": int(p["k"]), "ef": None if p.get("ef") is None else int(p["ef"]),
             "validation_utility": float(p["validation_utility"])}
        r["gap"] = reference - r["validation_utility"]
        r["within"] = bool(r["gap"] <= tolerance + slack)
        rows.append(r)
    rows.sort(key=lambda r: (effective_ef(r), r["k"]))
    within = [r for r in rows if r["within"]]
    reached = bool(within)
    if reached:
        chosen = within[0]
    else:
        best = max(r["validation_utility"] for r in rows)
        chosen = next(r for r in rows if r["validation_utility"] >= best - slack)
    grid = {key: sorted({r[key] for r in rows if r[key] is not None}) for key in tuned}
    edge = {}
    for key in tuned:
        values, edge[key] = grid[key], ""
        if len(values) < 2 or chosen[key] is None:
            continue
        if reached and chosen[key] == values[0] and (key == "k" or chosen["ef"] > chosen["k"]):
            edge[key] = "smallest"
        elif not reached and chosen[key] == values[-1]:
            edge[key] = "largest"
    return {"k": chosen["k"], "ef": chosen["ef"], "score": "validation_utility", "value": chosen["validation_utility"],
            "reference": float(reference), "tolerance": float(tolerance), "reached": reached,
            "grid": grid, "edge": edge, "points": rows}


def resolve_hsg(hsg: Mapping[str, Any], tuned: Sequence[str | os.PathLike] | str | os.PathLike | None) -> dict[str, Any]:
    """``hsg`` with ``k``/``ef`` ``auto`` replaced by the values its tuning record chose (``results/<dataset>/tuning/hsg.json``).

    Raises
    ------
    ValueError
        ``hsg`` has an ``auto`` and no record is given, or the record cannot be read.
    """
    out = dict(hsg)
    if not is_hsg_tuned(out):
        return out
    paths = _paths(tuned)
    if len(paths) != 1:
        raise ValueError(f"hsg: {', '.join(k for k in HSG_TUNED_KEYS if out.get(k) == AUTO)} is 'auto' "
                         f"but {len(paths)} tuning records were given (expected 1)")
    record = read_choice(paths[0], HSG_TUNED_KEYS, nullable=("ef",))
    for key in HSG_TUNED_KEYS:
        if out.get(key) == AUTO:
            out[key] = None if record[key] is None else int(record[key])
    return out


def tuning_points(dataset: Mapping[str, Any], tuning: Mapping[str, Any] | None) -> dict[str, int]:
    """How many grid points (jobs) each tuned model of a dataset's entry asks for: ``{"flat": 27,
    "hf kmeans": 162, "hsg": 36}`` (models with nothing ``auto`` left out).

    Raises
    ------
    ValueError
        A bad grid or fixed value (:func:`flat_grid`, :func:`hf_grid`, :func:`hsg_grid`), or a model
        whose points exceed :data:`MAX_TUNING_POINTS`, naming the grids that multiply.
    """
    out = {}
    hf = dataset.get("hf") or {}
    models = [("flat", TUNED_KEYS, lambda: flat_grid(dataset.get("flat") or {}, tuning), dataset.get("flat") or {})]
    for tree in (hf.get("trees") or ("kmeans",)) if hf else ():
        keys = {k: HF_TUNED_KEYS[k] for k in tree_keys(tree)}
        models.append((f"hf {tree}", keys, lambda tree=tree: hf_grid(hf, tuning, tree), hf))
    models.append(("hsg", HSG_TUNED_KEYS, lambda: hsg_grid(dataset.get("hsg") or {}, tuning), dataset.get("hsg") or {}))
    for name, keys, grid, entry in models:
        points = grid()
        if not points:
            continue
        if len(points) > MAX_TUNING_POINTS:
            grids = [f"tuning.{g}" for k, g in keys.items() if entry.get(k) == AUTO]
            raise ValueError(f"{', '.join(grids)}: {name} would be tuned over {len(points):,} points (one job each); at "
                             f"most {MAX_TUNING_POINTS:,} per model: shorten the grids")
        out[name] = len(points)
    return out
