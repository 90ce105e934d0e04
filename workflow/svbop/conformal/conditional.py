r"""Coverage within every one of finitely many overlapping groups (Gibbs, Cherian, Candès 2023,
*Conformal prediction with conditional guarantees*): :class:`ConditionalSetPredictor`.

The groups are indicator columns ``Phi`` (a row may be in several, or in none).  With the
function class ``F = {phi(x)^T beta}``, ``phi(x) = (1, Phi(x))`` (an intercept and the group
indicators), the paper's augmented quantile regression at level ``tau = 1 - epsilon`` fits, for a
test row ``x`` and an imputed score ``S``,

``g_S = argmin_{g in F} sum_{i <= n} rho_tau(S_i - g(x_i)) + rho_tau(S - g(x))``

(``rho_tau(r) = tau r`` for ``r >= 0``, ``(tau - 1) r`` below), and the set is
``{c : s(x, c) <= g_{s(x, c)}(x)}``.  Theorem 1 of the paper: for every group ``G`` with
``P(x in G) > 0``, ``P(y in C(x) | x in G) >= 1 - epsilon``, every group at once (and marginally:
the intercept is the group of every row).

*Computation.*  The condition ``S <= g_S(x)`` holds exactly for ``S <= S*`` with
``S* = phi(x)^T beta_inf``, ``beta_inf`` the fit with the test row's score at ``+inf``: a point
above the fit can be raised without changing it, so for ``S > g_S(x)`` the fit is ``g_inf``, and
the set of ``S`` that pass is the half-line up to ``g_inf(x)``.  With the test score at ``+inf`` its
term is ``tau (S - phi(x)^T beta)``, a constant minus ``tau phi(x)^T beta``, so ``beta_inf`` solves
the linear programme

``min sum_i tau u_i + (1 - tau) v_i - tau phi(x)^T beta``  s.t.  ``Phi_i beta + u_i - v_i = S_i``,
``u, v >= 0``,

solved in its dual form (``max S^T eta`` s.t. ``Phi^T eta = -tau phi(x)``, ``tau - 1 <= eta_i <= tau``:
``d + 1`` constraints; scipy's HiGHS dual simplex), ``beta`` the constraints' multipliers.  When the
optimal ``beta`` is not unique (``tau (n_G + 1)`` an integer for a group of ``n_G`` rows: the quantile
lies anywhere between two scores), the smallest ``phi(x)^T beta`` among the optima is taken: by
complementary slackness with the optimal ``eta`` the optimal fits are a polyhedron in ``beta`` alone
(one bound each way per group pattern), minimised by a second, ``d + 1``-variable programme.  With
disjoint groups this is exactly split-conformal's ``ceil((n_G+1)(1-epsilon))``-th smallest score of
each group, and it equals MAPIE's exact cutoff.  A group of the test row with no calibration row, or
too few for its quantile, makes the fit unbounded: ``S* = inf``, every class.  ``S*`` depends on
``x`` only through ``phi(x)``, so it is computed once per distinct
row of ``Phi_test`` (``2^d`` patterns at most for ``d`` groups).

*Many patterns.*  A fresh programme per pattern costs tens of milliseconds (2^16 patterns of 16
groups: hours).  The patterns differ only in the dual's right-hand side, so they are solved by one
bounded dual simplex, warm-started from the previous pattern's optimal basis (it stays dual
feasible), in Gray-code order (neighbours differ in one group): a few pivots of ``O(d m + n)``
each per pattern, ``m`` the calibration rows' distinct patterns (2^16 patterns over 2,000
calibration rows: about 25 s on a loaded 2-core machine).  The smallest fit over the optimal face
is that simplex's optimum for the right-hand side perturbed by ``-t phi(x)``, ``t -> 0+``
(lexicographic values).  A pattern the simplex leaves unsettled (rounding in a degenerate basis) is
solved on its own by HiGHS as above, which ``tests/test_hostile_issue56_library.py`` also checks
the simplex against.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog

from .._prefix import DEFAULT_CHUNK_BYTES, as_score_matrix
from ..metrics import check_labels
from ..sets import SetPredictions
from ._common import _epsilon, _no_calibration_rows
from .scores import _calibration_scores, _lac_scores, _mask_chunks, _mask_sets

from .._row_checks import check_group_columns

__all__ = ["ConditionalSetPredictor", "check_group_columns"]




def _lowest_on_face(X, s, eta, tau, phi) -> float:
    """The smallest ``phi^T beta`` over every optimal fit ``beta``: by complementary slackness with
    the optimal dual ``eta``, ``beta`` is optimal iff ``X_i beta <= s_i`` where ``eta_i = tau``,
    ``>= s_i`` where ``eta_i = tau - 1``, ``= s_i`` in between; rows of one pattern of ``X`` give one
    bound each way, so this programme has ``d`` variables and two constraints per pattern.
    ``inf`` if it fails (rounding can make the equalities disagree in their last bits): the caller
    keeps the fit it has."""
    tol = 1e-9
    patterns, inverse = np.unique(X, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    lo = np.full(patterns.shape[0], -np.inf)  # eta_i < tau forbids s_i > X_i beta: X_p beta >= lo_p
    hi = np.full(patterns.shape[0], np.inf)  # eta_i > tau - 1 forbids s_i < X_i beta: X_p beta <= hi_p
    below, above = eta < tau - tol, eta > tau - 1 + tol
    np.maximum.at(lo, inverse[below], s[below])
    np.minimum.at(hi, inverse[above], s[above])
    A_ub = np.concatenate([-patterns[np.isfinite(lo)], patterns[np.isfinite(hi)]])
    b_ub = np.concatenate([-lo[np.isfinite(lo)], hi[np.isfinite(hi)]])
    res = linprog(phi, A_ub=A_ub, b_ub=b_ub, bounds=(None, None), method="highs")
    return float(res.fun) if res.status == 0 else math.inf


class ConditionalSetPredictor:
    r"""Conformal sets covering at ``1 - epsilon`` within every group of ``Phi`` at once (Gibbs,
    Cherian and Candès 2023; see :mod:`svbop.conformal.conditional` for the definition, the
    guarantee and how it is computed).

    Parameters
    ----------
    epsilon : float in (0, 1)
        Miscoverage level in every group.
    score : {"lac", "aps", "raps", "saps", "topk", "margin"}
        A deterministic ranked score of :class:`svbop.conformal.ConformalSetPredictor`.
    empty : {"keep", "top1"}
        What an empty set becomes (``"top1"``, the default: the top class; adding a class only
        raises coverage).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> P = rng.dirichlet(np.ones(5), size=400); y = rng.integers(0, 5, 400)
    >>> Phi = np.stack([P[:, 0] > 0.2, P[:, 1] > 0.2], axis=1)  # two overlapping groups
    >>> cp = ConditionalSetPredictor(0.1).fit(P[:200], y[:200], Phi[:200])
    >>> cp.predict_mask(P[200:], Phi[200:]).shape
    (200, 5)
    """

    def __init__(self, epsilon: float, score: str = "lac", *, k_reg: int = 1, lam=None, empty: str = "top1") -> None:
        from .risk import _check_empty, _check_score

        _epsilon(epsilon)
        self.k_reg, self.lam = _check_score(score, k_reg, lam)
        self.epsilon, self.score, self.empty = epsilon, score, _check_empty(empty)

    def fit(self, P, y, Phi, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> "ConditionalSetPredictor":
        """Keep the calibration scores ``s(x_i, y_i)`` and group indicators ``Phi`` (n, d)."""
        P = as_score_matrix(P, "P_cal")
        y = check_labels(y, P.shape, "y_cal")
        _no_calibration_rows(P)
        Phi = check_group_columns(Phi, P.shape[0], "Phi", "P_cal")
        if self.score == "lac":
            s = _lac_scores(P, y)
        else:
            s = _calibration_scores(P, y, self.score, self.k_reg, self.lam, chunk_bytes)
        self.scores_ = s
        self.Phi_ = Phi
        self.n_classes_ = P.shape[1]
        self.n_groups_ = Phi.shape[1]
        self.group_counts_ = Phi.sum(axis=0).astype(np.int64)
        self._cache: dict[bytes, float] = {}
        self._simplex = None  # built on the first call of thresholds
        return self

    def thresholds(self, Phi_test) -> np.ndarray:
        """``S*`` of every test row: computed once per distinct row of ``Phi_test`` (module docstring)."""
        if not hasattr(self, "scores_"):
            raise ValueError("ConditionalSetPredictor is not fitted: call fit(P_cal, y_cal, Phi_cal) first")
        Phi_test = check_group_columns(Phi_test, np.shape(Phi_test)[0] if np.ndim(Phi_test) else 0, "Phi_test")
        if Phi_test.shape[1] != self.n_groups_:
            raise ValueError(f"Phi_test has {Phi_test.shape[1]} group columns but fit had {self.n_groups_}")
        patterns, inverse = np.unique(Phi_test, axis=0, return_inverse=True)
        keys = [np.packbits(row).tobytes() for row in patterns]
        todo = np.array([j for j, key in enumerate(keys) if key not in self._cache], dtype=np.int64)
        if todo.size:
            for j, value in zip(todo.tolist(), self._warm_cutoffs(patterns[todo])):
                self._cache[keys[j]] = value
        q = np.array([self._cache[key] for key in keys], dtype=np.float64)
        return q[inverse.reshape(-1)]

    def _warm_cutoffs(self, patterns: np.ndarray) -> list[float]:
        """The cutoffs of ``patterns`` (distinct rows of ``Phi_test``) by one warm-started dual
        simplex (:func:`svbop.conformal._lp_kernels.warm_cutoffs`): a basis optimal for one pattern
        is the start of the next, a few pivots each.  A pattern it leaves unsettled (rounding in a
        degenerate basis) is solved on its own by :meth:`_cutoff`."""
        from scipy.linalg import qr

        from ._lp_kernels import INFEASIBLE, SOLVED, warm_cutoffs

        tau = 1.0 - float(_epsilon(self.epsilon))
        if getattr(self, "_simplex", None) is None:  # (a predictor pickled before the simplex has none)
            X = np.concatenate([np.ones((self.scores_.size, 1)), self.Phi_.astype(np.float64)], axis=1)
            R, piv = qr(X, mode="r", pivoting=True)
            diag = np.abs(np.diag(R))
            rank = int(np.sum(diag > max(X.shape) * np.finfo(float).eps * diag[0] * 16))
            cols = np.sort(piv[:rank])
            # every column of X is X[:, cols] @ C[:, j]: a test pattern off that relation makes the
            # constraints inconsistent (an unbounded fit: the cutoff is infinite)
            C = np.linalg.lstsq(X[:, cols], X, rcond=None)[0]
            A = np.ascontiguousarray(X[:, cols].T)  # r x n
            U, pid = np.unique(A.T, axis=0, return_inverse=True)  # the calibration rows' distinct patterns
            self._simplex = [cols, C, np.ascontiguousarray(U), pid.reshape(-1).astype(np.int64), A.sum(axis=1),
                             *self._start_basis(A)]
        cols, C, U, pid, N = self._simplex[:5]
        phi = np.concatenate([np.ones((patterns.shape[0], 1)), patterns.astype(np.float64)], axis=1)
        consistent = np.all(np.abs(phi[:, cols] @ C - phi) <= 1e-7, axis=1)
        consistent &= ~np.any(patterns & (self.group_counts_ == 0), axis=1)
        out = np.full(patterns.shape[0], math.inf)
        which = np.flatnonzero(consistent)
        if 0 < patterns.shape[1] < 63:  # in Gray-code order: neighbours differ in few groups, so few pivots
            code = patterns[which].astype(np.int64) @ (np.int64(1) << np.arange(patterns.shape[1], dtype=np.int64))
            shift = 1
            while shift < 64:
                code ^= code >> shift
                shift *= 2
            which = which[np.argsort(code, kind="stable")]
        phis = np.ascontiguousarray(phi[which][:, cols])
        values, flags = np.empty(which.size), np.empty(which.size, dtype=np.int8)
        start = 0
        basis, status = (a.copy() for a in self._simplex[5:])  # this call's own: threads may share the predictor
        while start < which.size:
            start += warm_cutoffs(U, pid, self.scores_, tau * (N + phis[start:]), -phis[start:], phis[start:], basis,
                                  status, max(1000, 4 * self.scores_.size), values[start:], flags[start:])
            if start < which.size:  # rounding made the basis singular: start the next patterns afresh
                basis, status = self._start_basis(np.ascontiguousarray(U[pid].T))
        self._simplex[5:] = [basis, status]  # the next call starts where this one ended
        out[which] = values
        for k in np.flatnonzero((flags != SOLVED) & (flags != INFEASIBLE)):
            out[which[k]] = self._cutoff(patterns[which[k]])
        return out.tolist()

    def _start_basis(self, A: np.ndarray) -> list[np.ndarray]:
        """A dual feasible start of the simplex over the constraint columns ``A`` (r x n, rank r):
        ``r`` independent columns as the basis, every other variable at the bound its reduced cost
        asks for (0 when non-negative, else 1)."""
        from scipy.linalg import qr

        basis = np.sort(qr(A, mode="r", pivoting=True)[1][: A.shape[0]]).astype(np.int64)
        y = np.linalg.solve(A[:, basis].T, self.scores_[basis])
        status = np.where(self.scores_ - A.T @ y >= 0, 0, 1).astype(np.int8)
        status[basis] = 2
        return [basis, status]

    def _cutoff(self, row: np.ndarray) -> float:
        """``S* = phi^T beta_inf`` for the test pattern ``row`` (the smallest over the optimal face)."""
        tau = 1.0 - float(_epsilon(self.epsilon))
        used = np.flatnonzero(row)
        if np.any(self.group_counts_[used] == 0):
            return math.inf  # a group of the test row without a calibration row: unbounded
        s = self.scores_
        n = s.size
        X = np.concatenate([np.ones((n, 1)), self.Phi_.astype(np.float64)], axis=1)
        keep = np.flatnonzero(X.any(axis=0))  # a column without a calibration row has no effect here
        X = X[:, keep]
        phi = np.concatenate([[1.0], row.astype(np.float64)])[keep]
        # the dual: max S^T eta s.t. X^T eta = -tau phi, tau - 1 <= eta_i <= tau (d constraints, n box
        # variables); beta is the multiplier of the equality constraints
        res = linprog(-s, A_eq=X.T, b_eq=-tau * phi, bounds=(tau - 1.0, tau), method="highs-ds",
                      options={"presolve": False})  # presolve costs more than it saves on d + 1 rows
        if res.status == 2:  # infeasible dual = unbounded fit: too few rows in a group of the test row
            return math.inf
        if res.status != 0:
            raise ValueError(f"the augmented quantile regression failed: {res.message}")
        beta = -res.eqlin.marginals
        return min(float(phi @ beta), _lowest_on_face(X, s, res.x, tau, phi))

    def _check_test(self, P, Phi_test):
        if not hasattr(self, "scores_"):
            raise ValueError("ConditionalSetPredictor is not fitted: call fit(P_cal, y_cal, Phi_cal) first")
        P = as_score_matrix(P, "P")
        if P.shape[1] != self.n_classes_:
            raise ValueError(f"P has {P.shape[1]} classes but the predictor was calibrated on {self.n_classes_}")
        Phi_test = check_group_columns(Phi_test, P.shape[0], "Phi_test", "P")
        return P, self.thresholds(Phi_test)

    def predict_mask(self, P, Phi_test, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
        """The sets ``{c : s(x, c) <= S*(x)}`` as an ``(n, K)`` boolean array."""
        P, q = self._check_test(P, Phi_test)
        mask = np.empty(P.shape, dtype=bool)
        for row0, part, _ in _mask_chunks(P, self.score, q, None, self.k_reg, self.lam, None, self.empty, chunk_bytes):
            mask[row0 : row0 + part.shape[0]] = part
        return mask

    def predict(self, P, Phi_test, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SetPredictions:
        """The sets of :meth:`predict_mask`, classes in decreasing probability."""
        P, q = self._check_test(P, Phi_test)
        return _mask_sets(P, self.score, q, None, self.k_reg, self.lam, None, self.empty, chunk_bytes)
