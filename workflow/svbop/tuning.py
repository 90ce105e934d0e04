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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .io import read_json_object

__all__ = [
    "AUTO",
    "DEFAULT_C_GRID",
    "DEFAULT_EPS_GRID",
    "NOT_YET",
    "TUNED_KEYS",
    "choice_text",
    "flat_grid",
    "is_tuned",
    "read_choice",
    "read_points",
    "resolve_flat",
    "score_point",
    "select_point",
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
#: ``section.key`` that the issue names but svbop does not tune yet (refused with a message).
NOT_YET = ("hf.C", "hf.eps", "hf.max_leaves", "hsg.k", "hsg.ef")

#: Probabilities are floored here before the logarithm (a class given probability 0 costs 36.8 nats, not inf).
_FLOOR = 1e-16


def is_tuned(flat: Mapping[str, Any]) -> bool:
    """Whether a dataset's ``flat`` entry asks for any value to be chosen on the validation rows."""
    return any(flat.get(key) == AUTO for key in TUNED_KEYS)


def _grid(tuning: Mapping[str, Any] | None, key: str, default: Sequence[float]) -> list[float]:
    raw = (tuning or {}).get(key)
    values = list(default) if raw is None else raw
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"tuning.{key}: expected a non-empty list of numbers > 0, got {raw!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"tuning.{key}: expected finite numbers > 0, got {v!r}")
        out.append(float(v))
    labels = [value_label(v) for v in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"tuning.{key}: a value is repeated in {out!r}")
    return sorted(out)


def value_label(value: float) -> str:
    """A grid value as it names files: ``100.0 -> "100"``, ``1e-05 -> "1e-05"`` (exact: it reads back as ``value``).

    Examples
    --------
    >>> value_label(100000.0), value_label(0.1), value_label(0.123456789)
    ('100000', '0.1', '0.123456789')
    """
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


def read_points(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """The grid points' results, one JSON file each (rule ``tune_flat_point``).

    Raises
    ------
    ValueError
        A file that is unreadable, not a JSON object, or lacks a finite number for ``C``, ``eps``
        or ``validation_log_loss`` (the message names the file and key); no files at all.
    """
    points = []
    for path in paths:
        record = read_json_object(path, "a tuning point")
        for key in _POINT_KEYS:
            v = record.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{path}: {key}: expected a finite number, got {v!r}")
        points.append(record)
    if not points:
        raise ValueError("read_points: no tuning points")
    return points


def select_point(points: Sequence[Mapping[str, Any]], tuned: Sequence[str] = ("C", "eps"),
                 score: str = "validation_log_loss") -> dict[str, Any]:
    """The point with the smallest ``score`` and, per tuned key, whether it sits at a binding edge of its grid.

    Ties (within 1e-9 relative) go to the smaller C (stronger regularisation) and then the larger
    eps (less work).

    Parameters
    ----------
    points : sequence of mappings
        Each with ``C``, ``eps`` and ``score``.
    tuned : sequence of {"C", "eps"}
        The keys that were set to ``auto`` (the others are fixed, one value).
    score : str
        The key to minimise.

    Returns
    -------
    dict
        ``C``, ``eps``, ``score`` (its name), ``value`` (its value at the chosen point),
        ``grid`` (key -> its sorted values, for the tuned keys), ``edge`` (key -> ``"smallest"``,
        ``"largest"`` or ``""``: the chosen value is the grid's smallest (largest) *and* beats the
        point next to it in that grid, the other keys equal), ``points`` (every point, sorted).
    """
    if not points:
        raise ValueError("select_point: no points")
    bad = [k for k in tuned if k not in TUNED_KEYS]
    if bad:
        raise ValueError(f"tuned: expected keys among {sorted(TUNED_KEYS)}, got {bad!r}")
    rows = sorted(({"C": float(p["C"]), "eps": float(p["eps"]), score: float(p[score])} for p in points),
                  key=lambda r: (r["C"], -r["eps"]))
    best = min(r[score] for r in rows)
    tol = 1e-9 * max(1.0, abs(best))
    chosen = next(r for r in rows if r[score] <= best + tol)
    grid = {k: sorted({r[k] for r in rows}) for k in tuned}
    edge = {}
    for k in tuned:
        values, edge[k] = grid[k], ""
        if len(values) < 2:
            continue
        others = {o: chosen[o] for o in TUNED_KEYS if o != k}
        line = {r[k]: r[score] for r in rows if all(r[o] == v for o, v in others.items())}
        for name, end, neighbour in (("smallest", values[0], values[1]), ("largest", values[-1], values[-2])):
            if chosen[k] == end and neighbour in line and chosen[score] < line[neighbour] - tol:
                edge[k] = name
    return {"C": chosen["C"], "eps": chosen["eps"], "score": score, "value": chosen[score],
            "grid": grid, "edge": edge, "points": rows}


def read_choice(path: str | os.PathLike) -> dict[str, Any]:
    """A dataset's tuning record (rule ``tune_flat``: :func:`select_point`'s dict as JSON), checked.

    Raises
    ------
    ValueError
        Unreadable file, or ``C``/``eps`` missing or not numbers > 0, naming the file.
    """
    record = read_json_object(path, "the tuning record")
    for key in TUNED_KEYS:
        v = record.get(key)
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
    return text
