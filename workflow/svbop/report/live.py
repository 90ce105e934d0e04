"""The level chosen in the browser: what the page embeds so that its own script computes, at any
``epsilon`` from 0.01 to 0.30, the same sets as the library.

For each of three conformal methods whose sets are ``{c : s(x, c) <= q_c}`` with ``q_c`` an order
statistic of calibration scores,

=================================  ========================================================
``icp``                            LAC, one threshold (the paper's ICP: ``1 - P/total``)
``conformal_aps_top1``             APS without randomisation, one threshold, calibrated with the top
                                   class in every set (``calibrate_top1=True``)
``conformal_lac_cc``               LAC, one threshold per class (class-conditional)
=================================  ========================================================

a class of a test row is in the set at level ``epsilon`` exactly when the ``k``-th smallest
calibration score of its group (the class's own rows for ``_cc``, every row otherwise), with
``k = ceil((n + 1)(1 - epsilon))`` computed exactly, is at least the row's score of that class
(``q = inf``, every class, when ``k > n``).  So each test score is embedded as the smallest ``k``
that keeps it (its *need*), computed here with the library's own arithmetic: the scores of
:mod:`svbop.conformal.scores`, the same comparison (with :func:`svbop.conformal._with_tolerance`
where the library widens ``q``), ties kept together.  The page then needs only integer
comparisons, and its coverage and mean size equal the library's at every ``epsilon``, bit for bit.
A set left empty becomes the row's top class (the library's ``empty="top1"``).  Only the needs a
level in the range can reach are embedded (a class beyond ``k(0.01)`` is in no set of the range,
unless its group's ``q`` is ``inf``, which the page knows from the group's size).

The Bayes-optimal sets of each utility (SVBOP-Full, which depend on no level) are the library's own
(:func:`svbop.predict_sets` on the same test rows, as the pipeline's SVBOP-Full): each row's set size and
whether it holds the true class are embedded per utility, and each example row's classes, so the page's
SVBOP-Full equals the tables' for the same utility, with no cap on a set's size.

Everything is base64 of little-endian arrays; :func:`live_data` refuses (returns ``too_large``)
when the encoding would pass ``budget_bytes``, and the page then says what it shows instead.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["EPSILON_RANGE", "LIVE_METHODS", "BUDGET_BYTES", "live_data", "needs", "sets_at", "bayes_sets"]

#: The levels the page's control offers.
EPSILON_RANGE = (0.01, 0.30)
#: The methods the page computes at any level: key -> display name.
LIVE_METHODS = {
    "icp": "LAC (ICP), one threshold",
    "conformal_aps_top1": "APS (deterministic, top class kept), one threshold",
    "conformal_lac_cc": "LAC, one threshold per class",
}
#: Their short names (the figure's legend, the example rows' columns).
LIVE_SHORT = {"icp": "LAC (ICP)", "conformal_aps_top1": "APS (deterministic)", "conformal_lac_cc": "class-conditional LAC"}
#: The most the embedded data may take (base64 characters, every model of the page together).
BUDGET_BYTES = 7_500_000


def _k(n: int, epsilon) -> int:
    """``ceil((n + 1)(1 - epsilon))`` in exact arithmetic, ``epsilon`` read as the conformal
    predictors read it (:func:`svbop.conformal._common._epsilon`: its decimal text)."""
    from ..conformal._common import _epsilon

    return math.ceil((n + 1) * (1 - _epsilon(epsilon)))


def _b64(a: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode("ascii")


def _uint(maximum: int) -> str:
    return "<u2" if maximum < 2**16 else "<u4"


def _normalised(P: np.ndarray) -> np.ndarray:
    """Rows divided by their sums, as :func:`svbop.conformal._common._normalised_chunks` does."""
    from .._prefix import DEFAULT_CHUNK_BYTES
    from ..conformal._common import _normalised_chunks

    out = np.empty(P.shape, dtype=np.float64)
    for row0, Xn in _normalised_chunks(P, "P", DEFAULT_CHUNK_BYTES):
        out[row0: row0 + Xn.shape[0]] = Xn
    return out


def _need(sorted_cal: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The smallest ``k`` (1-based) with ``scores <= sorted_cal[k - 1]``; ``len + 1`` when none."""
    return np.searchsorted(sorted_cal, scores, side="left") + 1


def needs(method: str, P_cal, y_cal, P_test) -> dict[str, np.ndarray]:
    """Each test score's need under ``method`` (a key of :data:`LIVE_METHODS`).

    Returns
    -------
    dict
        ``need`` (n_test, K) int64: the smallest ``k`` whose threshold keeps the class (``n_g + 1``:
        none); ``group`` (K,) the threshold group of each class (all 0 for one threshold);
        ``n`` (G,) each group's calibration rows; ``top1`` (n_test,) the class an empty set becomes.
    """
    from ..conformal import _calibration_scores, _with_tolerance
    from ..conformal.scores import _lac_scores
    from .._prefix import row_stats

    P_cal = np.asarray(P_cal)
    P_test = np.asarray(P_test)
    y_cal = np.asarray(y_cal, dtype=np.int64)
    K = P_test.shape[1]
    if method == "icp":  # conformal_quantile and conformal_sets: 1 - P/total, no tolerance
        cal = np.sort(_lac_scores(P_cal, y_cal))
        _, total = row_stats(np.ascontiguousarray(P_test), 0, "P_test")
        S = 1.0 - P_test.astype(np.float64) / total[:, None]
        return {"need": _need(cal, S), "group": np.zeros(K, np.int64), "n": np.array([cal.size]),
                "top1": np.argmax(P_test, axis=1)}
    Xn = _normalised(P_test)
    if method == "conformal_aps_top1":  # the cumulative mass along the ranking (0 for the top class), q widened
        from ..conformal.scores import _calibration_label_ranks

        cal = _calibration_scores(P_cal, y_cal, "aps", 1, 0.0, 1 << 26)
        cal[_calibration_label_ranks(P_cal, y_cal, 1 << 26) == 1] = 0.0  # calibrate_top1=True
        cal = np.sort(cal)
        order = np.argsort(-Xn, axis=1, kind="stable")  # decreasing, ties by class index
        cum = np.cumsum(np.take_along_axis(Xn, order, axis=1), axis=1)
        cum[:, 0] = 0.0  # the top class is in every set
        ranked = _need(_with_tolerance(cal, K), cum)
        need = np.empty_like(ranked)
        np.put_along_axis(need, order, ranked, axis=1)
        return {"need": need, "group": np.zeros(K, np.int64), "n": np.array([cal.size]),
                "top1": order[:, 0]}
    if method == "conformal_lac_cc":  # one threshold per class: 1 - Xn, q_c widened
        s = _calibration_scores(P_cal, y_cal, "lac", 1, 0.0, 1 << 26)
        counts = np.bincount(y_cal, minlength=K)
        need = np.empty(P_test.shape, dtype=np.int64)
        S = 1.0 - Xn
        for c in range(K):
            cal = _with_tolerance(np.sort(s[y_cal == c]), K) if counts[c] else np.zeros(0)
            need[:, c] = _need(cal, S[:, c])
        return {"need": need, "group": np.arange(K), "n": counts, "top1": np.argmax(Xn, axis=1)}
    raise ValueError(f"unknown live method {method!r}; expected one of {', '.join(LIVE_METHODS)}")


def sets_at(found: dict[str, np.ndarray], epsilon) -> np.ndarray:
    """The sets at ``epsilon`` as an (n_test, K) mask, from :func:`needs` (what the page computes)."""
    n_g = found["n"]
    k = np.array([_k(int(n), epsilon) for n in n_g])
    infinite = (k > n_g)[found["group"]]
    mask = infinite[None, :] | (found["need"] <= k[found["group"]][None, :])
    empty = ~mask.any(axis=1)
    mask[np.flatnonzero(empty), found["top1"][empty]] = True
    return mask


def bayes_sets(P_test, spec: str):
    """SVBOP-Full's sets of the utility ``spec`` on the test rows: :func:`svbop.predict_sets`, as the pipeline's
    rule ``predict_svbop_full_probabilities`` computes them (the page embeds their sizes and coverage)."""
    from ..search import predict_sets
    from ..utilities import utility

    P_test = np.asarray(P_test)
    return predict_sets(P_test, utility(spec, K=P_test.shape[1]))


def _encode_method(method: str, found: dict[str, np.ndarray], y: np.ndarray) -> dict[str, object]:
    """The needs a level in :data:`EPSILON_RANGE` can reach, row by row, and the labels' needs."""
    n_g = found["n"]
    group = found["group"]
    kmax = np.array([min(_k(int(n), EPSILON_RANGE[0]), int(n)) for n in n_g])  # reachable at a finite q
    need = found["need"]
    keep = need <= kmax[group][None, :]
    rows, cls = np.nonzero(keep)  # row-major: each row's entries together
    ptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=need.shape[0]))])
    big = int(max(int(n_g.max()) + 1 if n_g.size else 1, 1))
    one = group.max() == 0 if group.size else True
    out = {"method": method, "name": LIVE_METHODS[method], "short": LIVE_SHORT[method], "one_threshold": bool(one),
           "n": [int(v) for v in n_g], "need_type": _uint(big), "cls_type": _uint(need.shape[1]),
           "ptr": _b64(ptr, "<u4"), "need": _b64(need[rows, cls], _uint(big)),
           "need_y": _b64(need[np.arange(y.size), y], _uint(big)), "top1": _b64(found["top1"], _uint(need.shape[1]))}
    if not one:
        out["cls"] = _b64(cls, _uint(need.shape[1]))
    return out


def live_data(P_cal, y_cal, P_test, y_test, *, utilities: Sequence[str] = (), examples: Sequence[int] = (),
              class_names: Sequence[str] | None = None, budget_bytes: int = BUDGET_BYTES) -> dict[str, object]:
    """What the page embeds for one model (JSON-ready).

    Parameters
    ----------
    P_cal, y_cal : arrays
        The calibration rows' probabilities (as the pipeline's sets were calibrated on) and labels.
    P_test, y_test : arrays
        The test rows'.
    utilities : sequence of str
        Utility specs: ``g(s)`` for ``s = 1..K`` is embedded for each (mean utility of every set,
        and the Bayes-optimal sets, in the page).
    examples : sequence of int
        Test rows whose sets the page lists (their classes ranked, and their probabilities).
    class_names : sequence of str, optional
    budget_bytes : int
        The most the encoding may take; beyond it, ``{"too_large": <why>}`` and nothing else.
    """
    from ..utilities import utility

    P_test = np.asarray(P_test)
    y = np.asarray(y_test, dtype=np.int64)
    n, K = P_test.shape
    out: dict[str, object] = {"n_test": int(n), "K": int(K), "n_calibration": int(len(y_cal)),
                              "epsilon_range": list(EPSILON_RANGE), "y": _b64(y, _uint(K)), "methods": []}
    # at least a few bytes per test score before any need is computed (an int64 matrix per method)
    if n * K * 2 > 4 * budget_bytes:
        return {"too_large": f"{n:,} test rows x {K:,} classes are too many to embed in the page "
                             f"(at most {budget_bytes / 1e6:g} MB)"}
    size = 0
    for method in LIVE_METHODS:
        enc = _encode_method(method, needs(method, P_cal, y_cal, P_test), y)
        size += sum(len(v) for v in enc.values() if isinstance(v, str))
        if size > budget_bytes:
            return {"too_large": f"{n:,} test rows x {K:,} classes need more than {budget_bytes / 1e6:g} MB "
                                 "embedded in the page"}
        out["methods"].append(enc)
    Xn = _normalised(P_test)
    out["utilities"] = []
    for spec in utilities:
        u = utility(spec, K)
        sets = bayes_sets(P_test, spec)
        enc = {"spec": spec, "label": u.label, "g": [float(v) for v in u.values(K)],
               "size_type": _uint(K + 1), "size": _b64(sets.sizes, _uint(K + 1)),
               "cov": _b64(sets.contains(y), "<u1"),
               "examples": [[int(c) for c in sets[int(r)]] for r in examples]}
        size += len(enc["size"]) + len(enc["cov"])
        if size > budget_bytes:
            return {"too_large": f"{n:,} test rows x {K:,} classes need more than {budget_bytes / 1e6:g} MB "
                                 "embedded in the page"}
        out["utilities"].append(enc)
    out["examples"] = []
    for r in examples:
        rank = np.argsort(-Xn[r], kind="stable")
        out["examples"].append({"row": int(r), "truth": int(y[r]), "ranked": [int(c) for c in rank],
                                "p": [round(float(Xn[r, c]), 4) for c in rank[:50]]})
    out["class_names"] = [str(c) for c in class_names] if class_names is not None else None
    return out


def write_live_data(path, data: dict) -> None:
    """``results/<dataset>/live.json`` (written whole, atomically)."""
    import json

    from ..io import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n")


def live_context(files, frame, labels: Sequence[str], names, order: Sequence[str], epsilons: Sequence[float]):
    """The page's section "Choose the level": per dataset, its embedded data (JSON text safe inside a
    ``<script>``) and the points of every method at the run's levels (grey in the page's figure).

    Parameters
    ----------
    files : mapping
        dataset -> its ``live.json`` (:func:`live_data`).
    frame : DataFrame
        Every kind of set (:func:`svbop.report.beyond.read_beyond`).
    labels, names, order
        The run's utility labels, display names and datasets in the page's order.
    epsilons : sequence of float
        The run's levels (the control starts at the smallest ... largest ε, 1 - ε the lowest coverage asked).
    """
    import json
    from pathlib import Path

    from markupsafe import Markup

    from .beyond import beyond_table
    from .model import plain_name
    from .names import utility_name

    files = dict(files or {})
    if not files:
        return None
    out = []
    utilities: list[dict[str, str]] = []
    for d in order:
        if d not in files:
            continue
        data = json.loads(Path(files[d]).read_text())
        entry: dict[str, object] = {"id": d, "title": names.dataset(d), "too_large": data.get("too_large")}
        if not entry["too_large"]:
            for u in data.get("utilities", []):
                if u["spec"] not in [v["spec"] for v in utilities]:
                    utilities.append({"spec": u["spec"], "label": plain_name(utility_name(u["spec"]))})
            table = beyond_table(frame, d, labels) if d in set(frame["dataset"].astype(str)) else None
            points = [] if table is None else [
                {"name": plain_name(m), "key": k, "coverage": float(c), "size": float(s)}
                for m, k, c, s in zip(table["method"], table["key"], table["coverage_pct"], table["mean_size"])
                if c == c and s == s]
            data["title"] = entry["title"]
            data["points"] = points
            text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
            entry["json"] = Markup(text.replace("<", "\\u003c"))  # nothing in it can end the <script>
        out.append(entry)
    eps = [float(e) for e in epsilons if EPSILON_RANGE[0] <= float(e) <= EPSILON_RANGE[1]]
    start = f"{max(eps) if eps else 0.1:.2f}"
    return {"datasets": out, "utilities": utilities, "start": start, "range": [f"{e:.2f}" for e in EPSILON_RANGE]}
