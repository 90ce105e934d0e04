r"""Conformal risk control and Learn-then-Test: sets that bound the expected value of a loss other
than miscoverage.

* :class:`RiskControlSetPredictor` (Angelopoulos, Bates, Fisch, Lei, Schuster, *Conformal risk
  control*, ICLR 2024): ``E[loss] <= alpha`` on a new row, for a loss that is non-increasing as the
  sets grow.
* :class:`LearnThenTest` (Angelopoulos, Bates, Candès, Jordan, Lei 2021, *Learn then test*):
  ``P(risk_j <= level_j for every loss j) >= 1 - delta`` over the calibration rows, for any losses,
  monotone or not, several at once.
* :func:`set_loss`: the losses both take by name (``"miscoverage"``, ``"class_cost"``,
  ``"hierarchical"``, ``"size_above"``), or any callable ``loss(mask, y) -> (n,)``.

Both predict the nested sets ``C_lambda(x) = {c : s(x, c) <= lambda}`` of a ranked score
(``"lac"``, ``"aps"``, ``"raps"``, ``"saps"``, ``"topk"``, ``"margin"``, deterministic: the scores
of :class:`svbop.conformal.ConformalSetPredictor` with ``randomized=False``), compared with the
set kernels' tolerance.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy.stats import binom

from .._prefix import DEFAULT_CHUNK_BYTES, as_score_matrix, row_stats
from ..metrics import check_labels
from ..sets import SetPredictions
from ._common import _check_level, _no_calibration_rows  # noqa: F401  (_check_level: shared with the dask path)
from .dask import is_dask_array
from ._matrix import score_matrix, threshold_mask
from .lazy import is_lazy, lazy_mask
from .scores import RANKED_SCORES, _calibration_scores, _mask_sets

__all__ = ["RiskControlSetPredictor", "LearnThenTest", "SetLoss", "set_loss", "hoeffding_bentkus_p_values",
           "SET_LOSSES", "FWER_PROCEDURES", "P_VALUES"]

#: The p-values of :class:`LearnThenTest`: Hoeffding-Bentkus (any loss in ``[0, B]``), and its binary
#: form (losses that are 0 or ``B``, the exact binomial tail: MAPIE's ``binary=True``).
P_VALUES = ("hoeffding_bentkus", "binary_bentkus")

#: The losses named by a string (``set_loss(name, ...)``).
SET_LOSSES = ("miscoverage", "class_cost", "hierarchical", "size_above")
#: Learn-then-Test's family-wise error procedures.
FWER_PROCEDURES = ("fixed_sequence", "bonferroni")


class SetLoss:
    """A loss of a set and its label: ``loss(mask, y) -> (n,)`` values in ``[0, bound]``.

    ``monotone``: known to be non-increasing as a set grows (``None``: unknown, checked on the
    calibration rows).  ``binary``: known to take only the values 0 and ``bound`` (``None``:
    unknown, checked on the calibration rows by :class:`LearnThenTest`).  The named losses also
    compute their exact step function along the nested sets (``steps``), without building any mask.
    """

    def __init__(self, name: str, fn, bound: float, monotone: bool | None, steps=None,
                 label_only: bool = False, binary: bool | None = None) -> None:
        self.name = name
        self.binary = binary
        self.fn = fn
        self.bound = float(bound)
        self.monotone = monotone
        self.steps = steps
        #: ``steps`` needs only the label's score of each row (``steps(s_label, y)``), not every class's
        self.label_only = label_only

    def __call__(self, mask: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.fn(mask, y)

    def __repr__(self) -> str:
        return f"SetLoss({self.name!r}, bound={self.bound:g})"


def set_loss(loss="miscoverage", *, cost=None, hierarchy=None, max_size=None, bound=None) -> SetLoss:
    """The loss ``loss`` as a :class:`SetLoss`.

    Parameters
    ----------
    loss : str or callable or SetLoss
        * ``"miscoverage"``: 1 when the label is not in the set (bound 1);
        * ``"class_cost"`` with ``cost`` (one non-negative cost per class): the cost of the label
          when it is missed (bound ``max(cost)``);
        * ``"hierarchical"`` with ``hierarchy`` (a :class:`svbop.datasets.Hierarchy` over the
          classes, as every hierarchy reader of :mod:`svbop.datasets` returns): 0 when the label is
          in the set, else the tree distance (edges) from the label to the nearest class of the
          set divided by the largest distance between two classes (an empty set: 1); bound 1;
        * ``"size_above"`` with ``max_size``: 1 when the set has more than ``max_size`` classes
          (bound 1; it *grows* with the sets: for :class:`LearnThenTest`, not risk control);
        * a callable ``loss(mask, y) -> (n,)`` (``mask`` the ``(n, K)`` boolean sets), values in
          ``[0, bound]`` (``bound`` default 1).
    """
    if isinstance(loss, SetLoss):
        return loss
    if callable(loss):
        if cost is not None or hierarchy is not None or max_size is not None:
            raise ValueError("cost, hierarchy and max_size are for the named losses, not a callable loss")
        B = 1.0 if bound is None else _bound(bound)
        return SetLoss(getattr(loss, "__name__", "callable"), loss, B, None)
    if not isinstance(loss, str) or loss not in SET_LOSSES:
        raise ValueError(f"loss must be one of {', '.join(SET_LOSSES)} or a callable loss(mask, y), got {loss!r}")
    if bound is not None:
        raise ValueError(f"bound is for a callable loss; loss={loss!r} states its own")
    given = {"cost": cost, "hierarchy": hierarchy, "max_size": max_size}
    wanted = {"class_cost": "cost", "hierarchical": "hierarchy", "size_above": "max_size"}.get(loss)
    extra = [k for k, v in given.items() if v is not None and k != wanted]
    if extra:
        raise ValueError(f"loss={loss!r} takes no {extra[0]}")
    if wanted is not None and given[wanted] is None:
        raise ValueError(f"loss={loss!r} needs {wanted}=")
    if loss == "miscoverage":
        return SetLoss("miscoverage", _miscoverage, 1.0, True, _miscoverage_steps, label_only=True, binary=True)
    if loss == "class_cost":
        c = np.asarray(cost, dtype=np.float64)
        if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or np.any(c < 0):
            raise ValueError(f"cost must be one finite, non-negative cost per class, got {np.asarray(cost)!r:.80}")
        return SetLoss("class_cost", lambda m, y: _class_cost(m, y, c), float(c.max()), True,
                       lambda s, y: _class_cost_steps(s, y, c), label_only=True,
                       binary=bool(np.all((c == 0) | (c == c.max()))))
    if loss == "size_above":
        if isinstance(max_size, (bool, np.bool_)) or not isinstance(max_size, (int, np.integer)) or max_size < 0:
            raise ValueError(f"max_size must be an integer >= 0, got {max_size!r}")
        m = int(max_size)
        return SetLoss(f"size_above_{m}", lambda mask, y: (mask.sum(axis=1) > m).astype(np.float64), 1.0, False,
                       lambda S, y: _size_above_steps(S, m), binary=True)
    from ..datasets.base import Hierarchy

    if not isinstance(hierarchy, Hierarchy):
        raise ValueError(f"loss='hierarchical' needs hierarchy= (a svbop.datasets.Hierarchy whose leaves are the"
                         f" classes), got {type(hierarchy).__name__}")
    tree = _TreeDistance(hierarchy)
    return SetLoss("hierarchical", tree.loss, 1.0, True, tree.steps, binary=False)


def _bound(bound) -> float:
    if isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, float, np.integer, np.floating)) \
            or not (0 < bound < math.inf):
        raise ValueError(f"bound must be a finite number > 0, got {bound!r}")
    return float(bound)


# --- the named losses and their step functions along the nested sets ------------------------------
# steps(S, y) -> (start, at, drop): the loss of row i with the empty set is start[i]; at each
# (at[e], row) event the loss of that row falls by drop[e] (negative: rises), so the total loss at
# lambda is start.sum() - drop[at <= lambda].sum().


def _miscoverage(mask, y):
    return (~mask[np.arange(y.size), y]).astype(np.float64)


def _miscoverage_steps(s, y):
    n = y.size
    return np.ones(n), s, np.ones(n)


def _class_cost(mask, y, c):
    _check_classes(mask, c)
    return np.where(mask[np.arange(y.size), y], 0.0, c[y])


def _class_cost_steps(s, y, c):
    return c[y].astype(np.float64), s, c[y].astype(np.float64)


def _check_classes(M, c):
    if M.shape[1] != c.size:
        raise ValueError(f"cost has {c.size} entries but the sets have {M.shape[1]} classes")


def _size_above_steps(S, m):
    n, K = S.shape
    if m >= K:
        return np.zeros(n), np.empty(0), np.empty(0)
    at = np.partition(S, m, axis=1)[:, m]  # the (m+1)-th class enters: the size passes m
    return np.zeros(n), at, -np.ones(n)


class _TreeDistance:
    """Tree distances between classes (edges on the path), normalised by the largest one."""

    def __init__(self, hierarchy) -> None:
        K = hierarchy.n_classes
        depth = hierarchy.depth()
        D = int(depth[:K].max())
        anc = np.full((K, D + 1), -1, dtype=np.int64)  # anc[c, d]: the ancestor of class c at depth d
        for d in range(D + 1):
            deep = np.flatnonzero(depth[:K] >= d)
            anc[deep, d] = hierarchy.ancestors_at_depth(deep, d)
        self.K, self.depth, self.anc = K, depth[:K].astype(np.int64), anc
        self.table = None
        if K * K <= 25_000_000:  # every pair at once (int32: 100 MB at K = 5,000)
            table = np.empty((K, K), dtype=np.int32)
            for a0 in range(0, K, self._block()):
                a = np.arange(a0, min(K, a0 + self._block()))
                table[a] = self.distance(a[:, None], np.arange(K)[None, :])
            self.table = table
        self.diameter = max(1, int(table.max()) if self.table is not None else _tree_diameter(hierarchy))

    def _block(self) -> int:
        """Rows of the ``K``-wide distance blocks (about 16 M ancestor comparisons each)."""
        return max(1, (1 << 24) // max(1, self.K * self.anc.shape[1]))

    def distance(self, a, b) -> np.ndarray:
        """Edges between classes ``a`` and ``b`` (broadcast)."""
        a, b = np.broadcast_arrays(a, b)
        if getattr(self, "table", None) is not None:
            return self.table[a, b]
        common = (self.anc[a] == self.anc[b]) & (self.anc[a] >= 0)
        lca = common.sum(axis=-1) - 1
        return self.depth[a] + self.depth[b] - 2 * lca

    def _ranked_steps(self, H: "_RankedHeads", y):
        """The step function from each row's classes in the order they enter (the running minimum of
        their distances to the label falls at the scores where a nearer class enters)."""
        n = y.size
        count = np.diff(H.indptr)
        row = np.repeat(np.arange(n), count)
        if H.classes.size and H.classes.max() >= self.K:
            raise ValueError(f"the hierarchy has {self.K} classes but the scores have more")
        dist = np.empty(H.classes.size, dtype=np.int64)
        for a in range(0, dist.size, 1 << 20):  # ancestors compared a block of entries at a time
            b = min(dist.size, a + (1 << 20))
            dist[a:b] = self.distance(y[row[a:b]], H.classes[a:b])
        D = int(self.diameter)
        key = (n - row) * (D + 1) + dist  # a running minimum that restarts at every row
        run = np.minimum.accumulate(key) - (n - row) * (D + 1)
        prev = np.empty_like(run)
        prev[1:] = run[:-1]
        starts = H.indptr[:-1][count > 0]
        prev[starts] = D
        fall = np.flatnonzero(run < prev)
        return np.ones(n), H.scores[fall], (prev[fall] - run[fall]) / self.diameter

    def _rows(self, y, cols):
        """Distances from the labels ``y`` to the classes ``cols`` (one row of classes per label)."""
        return self.distance(y[:, None], cols)

    def loss(self, mask, y):
        if mask.shape[1] != self.K:
            raise ValueError(f"the hierarchy has {self.K} classes but the sets have {mask.shape[1]}")
        out = np.empty(y.size)
        D = float(self.diameter)
        for r0 in range(0, y.size, self._block()):
            r = slice(r0, min(y.size, r0 + self._block()))
            dist = self._rows(y[r], np.arange(self.K)[None, :]).astype(np.float64)
            out[r] = np.where(mask[r], dist, D).min(axis=1, initial=D) / D
        return out

    def steps(self, S, y):
        if isinstance(S, _RankedHeads):  # each row's classes as they enter, down to its label
            return self._ranked_steps(S, y)
        n, K = S.shape
        if K != self.K:
            raise ValueError(f"the hierarchy has {self.K} classes but the scores have {K}")
        ats, drops = [], []
        for r0 in range(0, n, self._block()):
            r = np.arange(r0, min(n, r0 + self._block()))
            order = np.argsort(S[r], axis=1, kind="stable")  # classes in the order they enter
            run = np.minimum.accumulate(self._rows(y[r], order), axis=1)
            prev = np.concatenate([np.full((r.size, 1), self.diameter), run[:, :-1]], axis=1)
            i, j = np.nonzero(run < prev)
            ats.append(S[r[i], order[i, j]])
            drops.append((prev[i, j] - run[i, j]) / self.diameter)
        return np.ones(n), np.concatenate(ats), np.concatenate(drops)


class _RankedHeads:
    """Each calibration row's classes in the order its nested sets take them in, down to its label, and
    their scores (from a tree: :func:`svbop.conformal.lazy.lazy_ranked_heads`)."""

    def __init__(self, indptr, classes, scores) -> None:
        self.indptr, self.classes, self.scores = indptr, classes, scores
        self.ndim = 1  # as the label scores: no (n, K) matrix


def _tree_diameter(hierarchy) -> int:
    """The largest distance (edges) between two classes (leaves) of a tree, in one pass up its levels."""
    depth = hierarchy.depth().astype(np.int64)
    K = hierarchy.n_classes
    parent = np.asarray(hierarchy.parent, dtype=np.int64)
    deepest = np.where(np.arange(parent.size) < K, depth, -1)  # the deepest class below each node
    best = 0
    for d in range(int(depth.max()), 0, -1):
        level = np.flatnonzero((depth == d) & (deepest >= 0))
        if level.size == 0:
            continue
        p, h = parent[level], deepest[level]
        order = np.lexsort((-h, p))  # by parent, deepest first
        p, h = p[order], h[order]
        first = np.concatenate([[True], p[1:] != p[:-1]])
        starts = np.flatnonzero(first)
        top1 = h[starts]
        has2 = np.concatenate([starts[1:], [p.size]]) - starts > 1
        top2 = np.where(has2, h[np.minimum(starts + 1, p.size - 1)], -1)
        pp = p[starts]
        both = has2
        if both.any():
            best = max(best, int((top1[both] + top2[both] - 2 * depth[pp[both]]).max()))
        deepest[pp] = np.maximum(deepest[pp], top1)
    return best


def _total_losses(start, at, drop, lambdas):
    """The total loss over the rows at every ``lambdas`` (sorted), from the step function."""
    order = np.argsort(at, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(drop[order])])
    return start.sum() - cum[np.searchsorted(at[order], lambdas, side="right")]


# --- checks shared by both predictors ---------------------------------------------------------------


def _check_score(score, k_reg, lam):
    if not isinstance(score, str) or score not in RANKED_SCORES:
        raise ValueError(f"score must be one of {', '.join(RANKED_SCORES)}; got {score!r}")
    if isinstance(k_reg, (bool, np.bool_)) or not isinstance(k_reg, (int, np.integer)) or k_reg < 0:
        raise ValueError(f"k_reg must be an integer >= 0, got {k_reg!r}")
    if lam is None:
        lam = 0.2 if score == "saps" else 0.0
    if isinstance(lam, (bool, np.bool_)) or not isinstance(lam, (int, float, np.integer, np.floating)) \
            or not 0 <= lam < math.inf:
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    if score not in ("raps", "saps") and (lam != 0 or k_reg != 1):
        raise ValueError(f"k_reg and lam are for score 'raps' (and lam for 'saps'); score={score!r} takes neither")
    if score == "saps" and lam == 0:
        raise ValueError("lam, the SAPS weight of a rank, must be > 0")
    return int(k_reg), float(lam)


def _check_empty(empty):
    if empty not in ("keep", "top1"):
        raise ValueError(f"empty must be 'keep' or 'top1', got {empty!r}")
    return empty


def _loss_values(loss: SetLoss, mask, y, name: str) -> np.ndarray:
    v = np.asarray(loss(mask, y), dtype=np.float64)
    if v.shape != (y.size,):
        raise ValueError(f"{name} returned shape {v.shape}; a loss returns one value per row, shape ({y.size},)")
    bad = np.flatnonzero(~((v >= 0) & (v <= loss.bound)))
    if bad.size:
        raise ValueError(f"{name} returned {v[bad[0]]!r} for calibration row {bad[0]}: a loss must lie in"
                         f" [0, {loss.bound:g}] (its bound B)")
    return v


class _NestedSets:
    """What both predictors share: the score, its nested sets, and predict/predict_mask."""

    def _predict_lazy(self, P) -> SetPredictions:
        """The sets of a tree's probabilities or of top-k outputs (:mod:`svbop.conformal.lazy`)."""
        from .lazy import lazy_sets

        if not hasattr(self, "lambda_"):
            raise ValueError(f"{type(self).__name__} is not fitted: call fit(P_cal, y_cal) first")
        if P.shape[1] != self.n_classes_:
            raise ValueError(f"P has {P.shape[1]} classes but the predictor was calibrated on {self.n_classes_}")
        return lazy_sets(P, self.lambda_, None, self.score, self.k_reg, self.lam, None, self.empty)

    def _predict_check(self, P):
        if not hasattr(self, "lambda_"):
            raise ValueError(f"{type(self).__name__} is not fitted: call fit(P_cal, y_cal) first")
        P = as_score_matrix(P, "P")
        if P.shape[1] != self.n_classes_:
            raise ValueError(f"P has {P.shape[1]} classes but the predictor was calibrated on {self.n_classes_}")
        return P

    def predict_mask(self, P, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
        """The sets ``{c : s(x, c) <= lambda_}`` as an ``(n, K)`` boolean array (a dask array ``P``: a lazy
        dask array chunked by its rows, :mod:`svbop.conformal.dask`)."""
        from .scores import _mask_chunks

        if is_dask_array(P):
            from .dask import predict_mask as dask_predict_mask

            return dask_predict_mask(self, P, chunk_bytes=chunk_bytes)
        if is_lazy(P):  # refused past MAX_MASK_BYTES (svbop.conformal.lazy)
            return lazy_mask(self._predict_lazy(P), *P.shape, type(P).__name__)
        P = self._predict_check(P)
        mask = np.zeros(P.shape, dtype=bool)
        if self.lambda_ == -math.inf:  # the empty sets (the top class with empty="top1")
            if self.empty == "top1" and P.shape[0]:
                mask[np.arange(P.shape[0]), np.argmax(P, axis=1)] = True
            return mask
        for row0, part, _ in _mask_chunks(P, self.score, self.lambda_, None, self.k_reg, self.lam, None, self.empty,
                                          chunk_bytes):
            mask[row0 : row0 + part.shape[0]] = part
        return mask

    def predict(self, P, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SetPredictions:
        """The sets of :meth:`predict_mask`, classes in decreasing probability."""
        if is_dask_array(P):  # block by block, then joined
            from .dask import predict as dask_predict

            return dask_predict(self, P, chunk_bytes=chunk_bytes)
        if is_lazy(P):
            return self._predict_lazy(P)
        P = self._predict_check(P)
        if self.lambda_ == -math.inf:
            mask = self.predict_mask(P)
            return SetPredictions.from_sets([np.flatnonzero(m) for m in mask], P.shape[1])
        return _mask_sets(P, self.score, self.lambda_, None, self.k_reg, self.lam, None, self.empty, chunk_bytes)

    def _calibration(self, P_cal, y_cal, chunk_bytes, losses):
        """The calibration rows' scores: every class's (``(n, K)``), or only the label's (``(n,)``)
        when every loss needs only those."""
        if is_dask_array(P_cal):  # (as_score_matrix would gather it silently)
            raise ValueError(f"{type(self).__name__}.fit takes numpy-like arrays only; P_cal is a dask array: compute"
                             " it first (P_cal.compute())")
        if is_lazy(P_cal):  # a tree's probabilities or top-k outputs: no n x K matrix
            return self._lazy_calibration(P_cal, y_cal, losses)
        P_cal = as_score_matrix(P_cal, "P_cal")
        y_cal = check_labels(y_cal, P_cal.shape, "y_cal")
        _no_calibration_rows(P_cal)
        for loss in losses:
            if loss.name == "class_cost":
                loss(np.zeros((0, P_cal.shape[1]), dtype=bool), np.zeros(0, dtype=np.int64))  # its classes
        if all(loss.label_only for loss in losses):
            if self.score == "lac":
                S = 1.0 - P_cal[np.arange(y_cal.size), y_cal] / row_stats(P_cal, 0, "P_cal")[1]
            else:
                S = _calibration_scores(P_cal, y_cal, self.score, self.k_reg, self.lam, chunk_bytes)
        else:
            S = score_matrix(P_cal, self.score, self.k_reg, self.lam, None, chunk_bytes, "P_cal")
        self.n_classes_ = P_cal.shape[1]
        return S, y_cal

    def _lazy_calibration(self, src, y_cal, losses):
        """The label's scores (losses of the label alone), or each row's ranking down to its label with the
        scores (the hierarchical distance), from a lazy source (:mod:`svbop.conformal.lazy`)."""
        from .lazy import lazy_calibration_scores, lazy_ranked_heads

        n, K = src.shape
        if n == 0:
            raise ValueError(f"P_cal has no rows (shape {src.shape}): the calibration set is empty")
        y_cal = check_labels(y_cal, src.shape, "y_cal")
        for loss in losses:
            if loss.name == "class_cost":
                loss(np.zeros((0, K), dtype=bool), np.zeros(0, dtype=np.int64))  # its classes
        self.n_classes_ = K
        if all(loss.label_only for loss in losses):
            return lazy_calibration_scores(src, y_cal, self.score, self.k_reg, self.lam), y_cal
        other = [loss.name for loss in losses if not loss.label_only and loss.name != "hierarchical"]
        if other:
            raise ValueError(f"{type(src).__name__}: loss {other[0]!r} needs every class's score (an n x K matrix):"
                             " give a dense P_cal, or losses of the label (miscoverage, class_cost) or hierarchical")
        if len(losses) > 1:
            raise ValueError(f"{type(src).__name__}: the hierarchical loss alone (with a tree's probabilities)")
        return _RankedHeads(*lazy_ranked_heads(src, y_cal, self.score, self.k_reg, self.lam)), y_cal

    def _losses_at(self, loss: SetLoss, S, y, lambdas, name, binary: list | None = None) -> np.ndarray:
        """Total loss over the calibration rows at each of ``lambdas`` (sorted); a callable loss
        appends to ``binary`` (when given) whether every value it returned was 0 or its bound."""
        if loss.steps is not None:
            if S.ndim == 2 and loss.label_only:
                return _total_losses(*loss.steps(S[np.arange(y.size), y], y), lambdas)
            return _total_losses(*loss.steps(S, y), lambdas)
        totals = np.empty(len(lambdas))
        for i, t in enumerate(lambdas):
            v = _loss_values(loss, threshold_mask(S, t, False), y, name)
            if binary is not None:
                binary.append(bool(np.all((v == 0) | (v == loss.bound))))
            totals[i] = v.sum()
        return totals


class RiskControlSetPredictor(_NestedSets):
    r"""Conformal risk control (Angelopoulos et al., ICLR 2024): sets with ``E[loss] <= alpha``.

    The sets are the nested family ``C_lambda(x) = {c : s(x, c) <= lambda}`` of a ranked score;
    ``L_i(lambda) = loss(C_lambda(x_i), y_i)`` must be non-increasing in ``lambda`` and lie in
    ``[0, B]``.  ``fit`` picks

    ``lambda_ = inf{lambda : (n/(n+1)) R_n(lambda) + B/(n+1) <= alpha}``,  ``R_n`` the mean loss of
    the ``n`` calibration rows,

    by an exact search over the candidate values (the calibration rows' scores, where ``R_n``
    changes; ``-inf``, the empty sets, first).  For a test row exchangeable with the calibration
    rows, ``E[L_{n+1}(lambda_)] <= alpha`` (Theorem 1 of the paper), the expectation over the
    calibration and test rows; it needs ``L(every class) <= alpha`` (true of the named losses,
    whose loss is 0 on the full set, and checked on the calibration rows for a callable).  When no
    finite ``lambda`` qualifies (too few rows: ``B/(n+1) > alpha``), ``lambda_ = inf``: every class.

    With ``loss="miscoverage"`` this is split-conformal prediction: ``lambda_`` is the
    ``ceil((n+1)(1-alpha))``-th smallest label score, the threshold of
    :class:`svbop.conformal.ConformalSetPredictor` (``randomized=False``, ``empty="keep"``).

    Parameters
    ----------
    alpha : float in (0, 1)
        The level of the expected loss.
    loss : str, callable or SetLoss
        See :func:`set_loss`: ``"miscoverage"``, ``"class_cost"`` (``cost=``), ``"hierarchical"``
        (``hierarchy=``) or a callable ``loss(mask, y) -> (n,)`` in ``[0, B]`` (``B`` default 1).
        A loss that rises on the calibration rows as the sets grow is refused (``ValueError``):
        use :class:`LearnThenTest`.  A callable loss is evaluated at every ``lambda`` of a bisection
        over the candidate values and on a grid of 17 of them, and each row's loss must not rise
        between any two of them.
    score : {"lac", "aps", "raps", "saps", "topk", "margin"}
        The deterministic scores of :class:`svbop.conformal.ConformalSetPredictor`.
    empty : {"keep", "top1"}
        ``"keep"`` (default): an empty set stays empty, as calibrated.  ``"top1"``: it becomes the
        top class, the family's set at a larger ``lambda`` for that row: the loss can only fall.

    Attributes
    ----------
    lambda_ : float
        The threshold.
    B_ : float
        The loss's bound.
    calibration_risk_ : float
        ``R_n(lambda_)``, the mean calibration loss at the threshold.
    """

    def __init__(self, alpha: float, loss="miscoverage", score: str = "lac", *, cost=None, hierarchy=None,
                 B=None, k_reg: int = 1, lam=None, empty: str = "keep") -> None:
        self.loss_ = set_loss(loss, cost=cost, hierarchy=hierarchy, bound=B)
        _check_level(alpha, "alpha", self.loss_.bound)
        if self.loss_.monotone is False:
            raise ValueError(f"loss {self.loss_.name!r} grows with the sets (it is not non-increasing in lambda): "
                             "conformal risk control does not apply; use LearnThenTest")
        self.k_reg, self.lam = _check_score(score, k_reg, lam)
        self.alpha, self.loss, self.score, self.cost, self.hierarchy, self.B = alpha, loss, score, cost, hierarchy, B
        self.empty = _check_empty(empty)

    def fit(self, P_cal, y_cal, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> "RiskControlSetPredictor":
        """Choose ``lambda_`` on the calibration probabilities ``P_cal`` (n, K) and labels ``y_cal`` (a dask
        array with ``loss="miscoverage"``: :func:`svbop.conformal.dask.fit_risk`, the same ``lambda_``)."""
        if is_dask_array(P_cal):
            from .dask import fit_risk

            return fit_risk(self, P_cal, y_cal, chunk_bytes=chunk_bytes)
        S, y = self._calibration(P_cal, y_cal, chunk_bytes, [self.loss_])
        n, loss = y.size, self.loss_
        B = loss.bound
        alpha = _check_level(self.alpha, "alpha", B)
        # (n/(n+1)) R_n + B/(n+1) <= alpha  <=>  total loss <= alpha (n+1) - B, in exact arithmetic
        budget = alpha * (n + 1) - Fraction(B)
        limit = float(budget) * (1 + 8 * np.finfo(np.float64).eps) if budget > 0 else float(budget)
        if loss.steps is not None:
            start, at, drop = loss.steps(S, y)  # S: the label's scores when the loss needs only those
            lambdas = np.concatenate([[-math.inf], np.unique(at)])
            totals = _total_losses(start, at, drop, lambdas)
        else:
            lambdas, totals = self._search_callable(S, y, limit)
        ok = np.flatnonzero(totals <= limit)
        if ok.size:
            j = int(ok[0])
            self.lambda_, self.calibration_risk_ = float(lambdas[j]), float(totals[j]) / n
        else:
            self.lambda_ = math.inf
            full = _loss_values(loss, np.ones(S.shape, dtype=bool), y, self._name()) if loss.steps is None \
                else np.zeros(n)
            if np.any(full > float(alpha)):
                raise ValueError(f"loss {loss.name!r} exceeds alpha={self.alpha} even on the full set for some"
                                 f" calibration row (e.g. row {int(np.argmax(full > float(alpha)))}): no lambda"
                                 " controls it")
            self.calibration_risk_ = float(full.mean())
        self.B_ = B
        return self

    def _name(self) -> str:
        return f"loss {self.loss_.name!r}"

    def _search_callable(self, S, y, limit):
        """Bisection over the sorted candidate values for a callable loss (its total is non-increasing
        in lambda, checked row by row at every lambda evaluated)."""
        cand = np.concatenate([[-math.inf], np.unique(S)])
        evaluated: dict[int, np.ndarray] = {}

        def at(j):
            if j not in evaluated:
                evaluated[j] = _loss_values(self.loss_, threshold_mask(S, cand[j], False), y, self._name())
            return evaluated[j]

        for j in np.unique(np.linspace(0, cand.size - 1, 17).round().astype(np.int64)).tolist():
            at(j)
        lo, hi = 0, cand.size - 1
        if at(hi).sum() > limit:
            lo = hi + 1
        else:
            while lo < hi:
                mid = (lo + hi) // 2
                if at(mid).sum() <= limit:
                    hi = mid
                else:
                    lo = mid + 1
        keys = sorted(evaluated)
        L = np.stack([evaluated[k] for k in keys])
        rises = np.diff(L, axis=0) > 1e-12 * max(1.0, self.loss_.bound)
        if rises.any():
            step, row = np.argwhere(rises)[0]
            a, b = cand[keys[step]], cand[keys[step + 1]]
            raise ValueError(
                f"{self._name()} is not non-increasing in lambda (as the sets grow): on calibration row {row} it rises"
                f" from {L[step, row]:.6g} at lambda={a:.6g} to {L[step + 1, row]:.6g} at lambda={b:.6g};"
                " conformal risk control needs a monotone loss: use LearnThenTest")
        if lo > cand.size - 1:
            return np.array([math.inf]), np.array([math.inf])
        return np.array([cand[lo]]), np.array([at(lo).sum()])


def hoeffding_bentkus_p_values(risk: np.ndarray, n: int, level: float, *, binary: bool = False) -> np.ndarray:
    r"""Hoeffding-Bentkus p-values of ``H0: risk > level`` from mean losses ``risk`` in [0, 1] of
    ``n`` rows (Bates et al. 2021, Angelopoulos et al. 2021):
    ``min(exp(-n h(min(risk, level), level)), e P(Binomial(n, level) <= ceil(n risk)))``,
    ``h(a, b) = a log(a/b) + (1-a) log((1-a)/(1-b))``.

    ``binary=True``: every loss is 0 or 1, so ``n risk`` is a count, Binomial(n, risk) under the
    null's boundary, and the Bentkus term is the exact binomial tail without the factor ``e``:
    ``P(Binomial(n, level) <= n risk)`` (section 3.2 of Learn then Test; MAPIE's ``binary=True``).
    The count is ``n risk`` rounded to the nearest integer (MAPIE takes the ``ceil`` of the float
    product, one more than the count when it rounds up: a larger p-value)."""
    risk = np.asarray(risk, dtype=np.float64)
    r = np.minimum(risk, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(r > 0, r * np.log(r / level), 0.0) + np.where(r < 1, (1 - r) * np.log((1 - r) / (1 - level)), 0.0)
    hoeffding = np.exp(-n * h)
    if binary:
        bentkus = binom.cdf(np.rint(n * risk), n, level)
    else:
        bentkus = math.e * binom.cdf(np.ceil(n * risk - 1e-9), n, level)
    return np.minimum(1.0, np.minimum(hoeffding, bentkus))


class LearnThenTest(_NestedSets):
    r"""Learn-then-Test (Angelopoulos, Bates, Candès, Jordan, Lei 2021): a threshold with every
    loss's risk below its level, with probability at least ``1 - delta`` over the calibration rows.

    For each ``lambda`` of a grid fixed before the data are seen (``lambdas``; default: for LAC and
    APS 101 points evenly over ``[0, 1]`` and 100 log-spaced towards 1, ``1 - 10^-5 .. 0``; 201 points
    evenly over ``[-1, 1]`` for margin and ``[0, 1 + lam K]`` for RAPS and SAPS; the ranks ``1..K``
    for top-k), the null hypothesis ``H_lambda``: *some* loss
    ``j`` has risk ``E[L_j(lambda)] > level_j``.  Its p-value is the largest over the losses of
    the Hoeffding-Bentkus p-value (:func:`hoeffding_bentkus_p_values`, losses divided by their
    bounds).  The family-wise error rate over the grid is controlled at ``delta`` by

    * ``procedure="fixed_sequence"``: the lambdas are tested from the largest (the largest sets)
      down, each at level ``delta``, stopping at the first not rejected (the order is fixed before
      the data are seen, so the FWER is at most ``delta``; powerful when every risk falls as the
      sets grow);
    * ``procedure="bonferroni"``: every lambda at level ``delta / len(lambdas)`` (any losses: a
      loss that grows with the sets, such as ``"size_above"``, fails at the largest sets, where
      the fixed sequence starts and would stop at once).

    ``procedure=None`` (default) is ``"fixed_sequence"`` when every loss is known to be
    non-increasing (the named losses but ``"size_above"``), else ``"bonferroni"``; the procedure
    used is ``procedure_``.

    ``p_value=None`` (default) is ``"binary_bentkus"`` when every loss takes only the values 0 and
    its bound on the calibration rows (miscoverage, ``size_above``, a ``class_cost`` of one cost, a
    callable that returned nothing else), the exact binomial tail (``binary=True`` of
    :func:`hoeffding_bentkus_p_values`), else ``"hoeffding_bentkus"``; the p-value used is
    ``p_value_``.  ``"binary_bentkus"`` asked of a loss with other values is refused at ``fit``.

    Every rejected ``lambda`` has all its risks below their levels, jointly with probability at
    least ``1 - delta``; ``lambda_`` is the smallest of them (the smallest sets), ``valid_lambdas_``
    all of them.  The losses need not be monotone (``"size_above"`` grows with the sets).  When no
    ``lambda`` is rejected, ``fit`` raises ``ValueError``.

    Example: miscoverage at most 0.1 and the share of sets above 10 classes at most 0.2::

        LearnThenTest(losses=["miscoverage", set_loss("size_above", max_size=10)], levels=[0.1, 0.2])
    """

    def __init__(self, losses=("miscoverage",), levels=(0.1,), delta: float = 0.1, score: str = "lac", *,
                 procedure: str | None = None, lambdas=None, k_reg: int = 1, lam=None,
                 empty: str = "keep", p_value: str | None = None) -> None:
        if isinstance(losses, (str, SetLoss)) or callable(losses):
            losses = [losses]
        losses = list(losses)
        levels = [levels] if np.ndim(levels) == 0 else list(levels)
        if not losses:
            raise ValueError("losses is empty: give at least one loss")
        if len(levels) != len(losses):
            raise ValueError(f"levels has {len(levels)} entries but there are {len(losses)} losses: one level per loss")
        self.losses_ = [set_loss(v) for v in losses]
        for j, lv in enumerate(levels):
            _check_level(lv, f"levels[{j}]", self.losses_[j].bound)
        _check_level(delta, "delta")
        if procedure is not None and procedure not in FWER_PROCEDURES:
            raise ValueError(f"procedure must be None or one of {', '.join(FWER_PROCEDURES)}, got {procedure!r}")
        if p_value is not None and p_value not in P_VALUES:
            raise ValueError(f"p_value must be None or one of {', '.join(P_VALUES)}, got {p_value!r}")
        self.p_value = p_value
        self.k_reg, self.lam = _check_score(score, k_reg, lam)
        if lambdas is not None:
            lambdas = np.unique(np.asarray(lambdas, dtype=np.float64))
            if lambdas.size == 0 or np.isnan(lambdas).any():
                raise ValueError("lambdas must be a non-empty list of numbers (not NaN)")
        self.losses, self.levels, self.delta, self.score, self.procedure = losses, levels, delta, score, procedure
        self.lambdas = lambdas
        self.empty = _check_empty(empty)

    def _grid(self, K: int) -> np.ndarray:
        if self.lambdas is not None:
            return self.lambdas
        if self.score == "topk":
            return np.arange(1, K + 1, dtype=np.float64)
        if self.score in ("lac", "aps"):  # evenly over [0, 1], and log-spaced towards 1 (a peaked model's sets)
            return np.unique(np.concatenate([np.linspace(0.0, 1.0, 101), 1.0 - np.logspace(-5, 0, 100)]))
        lo, hi = (-1.0, 1.0) if self.score == "margin" else (0.0, 1.0 + self.lam * K)
        return np.linspace(lo, hi, 201)

    def fit(self, P_cal, y_cal, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> "LearnThenTest":
        """Test every ``lambda`` of the grid on the calibration rows; ``lambda_`` the smallest valid."""
        S, y = self._calibration(P_cal, y_cal, chunk_bytes, self.losses_)
        n = y.size
        grid = self._grid(self.n_classes_)
        risks = np.empty((len(self.losses_), grid.size))
        binary = []
        for j, loss in enumerate(self.losses_):
            seen = [] if loss.binary is None else None
            risks[j] = self._losses_at(loss, S, y, grid, f"loss {loss.name!r}", seen) / n / loss.bound
            binary.append(all(seen) if seen is not None else bool(loss.binary))
        p_value = self.p_value
        if p_value is None:
            p_value = "binary_bentkus" if all(binary) else "hoeffding_bentkus"
        elif p_value == "binary_bentkus" and not all(binary):
            name = self.losses_[binary.index(False)].name
            raise ValueError(f"p_value='binary_bentkus' needs losses of 0 or their bound; loss {name!r} takes other"
                             " values: use p_value='hoeffding_bentkus' (or None)")
        self.p_value_ = p_value
        levels = np.array([float(lv) for lv in self.levels])
        p = np.max([hoeffding_bentkus_p_values(risks[j], n, levels[j] / self.losses_[j].bound,
                                               binary=p_value == "binary_bentkus")
                    for j in range(levels.size)], axis=0)
        delta = float(_check_level(self.delta, "delta"))
        procedure = self.procedure
        if procedure is None:
            procedure = "fixed_sequence" if all(v.monotone for v in self.losses_) else "bonferroni"
        self.procedure_ = procedure
        if procedure == "bonferroni":
            valid = p <= delta / grid.size
        else:
            valid = np.zeros(grid.size, dtype=bool)
            for i in range(grid.size - 1, -1, -1):  # from the largest sets down
                if p[i] > delta:
                    break
                valid[i] = True
        self.p_values_, self.risks_ = p, risks * np.array([v.bound for v in self.losses_])[:, None]
        self.lambdas_ = grid
        if not valid.any():
            raise ValueError(
                f"no lambda of the grid ({grid.size} values in [{grid[0]:.4g}, {grid[-1]:.4g}]) is certified at"
                f" delta={self.delta} by {procedure} (smallest p-value {p.min():.3g}): raise the levels or"
                " delta, or add calibration rows")
        self.valid_lambdas_ = grid[valid]
        self.lambda_ = float(self.valid_lambdas_.min())
        return self
