"""Compiled kernel of :class:`svbop.conformal.ConditionalSetPredictor`: the cutoffs of many test
group patterns by one warm-started bounded dual simplex.

For the calibration scores ``S`` (n) and the independent columns ``A`` (r x n, rows of the
design ``(1, Phi)`` transposed), each test pattern's cutoff is ``min phi^T y`` over the optimal
multipliers ``y`` of

``G(b) = min S^T w``  s.t.  ``A w = b``, ``0 <= w <= 1``,  ``b = tau (A 1 + phi)``

(the dual of the augmented quantile regression with ``eta = tau - w``; see
:mod:`svbop.conformal.conditional`).  The patterns differ only in ``b``, so a basis optimal for
one stays dual feasible for the next (the costs ``S`` do not change) and a few dual simplex pivots
restore primal feasibility: each pattern costs a few ``O(r n)`` passes instead of a fresh linear
programme.  The smallest ``phi^T y`` over the optimal face is the left derivative of ``G`` at ``b``
in the direction ``phi``: the optimum of the right-hand side ``b - t phi`` for an infinitesimal
``t > 0``, so the primal values are compared lexicographically as ``x0 + t x1`` (``b - t phi``
stays feasible when ``b`` is: it lies between ``b`` and ``tau A 1``, which ``w = tau`` attains).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: flags of :func:`warm_cutoffs`: solved, infeasible (the cutoff is infinite), not settled (the caller
#: solves that pattern on its own)
SOLVED, INFEASIBLE, UNSETTLED = 0, 1, 2


@njit(nogil=True, cache=True)
def _inverse(M, out):
    """``out = M^{-1}`` by Gauss-Jordan with partial pivoting; False when ``M`` is (nearly) singular."""
    r = M.shape[0]
    W = M.copy()
    for i in range(r):
        for j in range(r):
            out[i, j] = 1.0 if i == j else 0.0
    for c in range(r):
        p = c
        for i in range(c + 1, r):
            if abs(W[i, c]) > abs(W[p, c]):
                p = i
        if abs(W[p, c]) < 1e-11:
            return False
        if p != c:
            for j in range(r):
                W[c, j], W[p, j] = W[p, j], W[c, j]
                out[c, j], out[p, j] = out[p, j], out[c, j]
        inv = 1.0 / W[c, c]
        for j in range(r):
            W[c, j] *= inv
            out[c, j] *= inv
        for i in range(r):
            if i != c and W[i, c] != 0.0:
                f = W[i, c]
                for j in range(r):
                    W[i, j] -= f * W[c, j]
                    out[i, j] -= f * out[c, j]
    return True


@njit(nogil=True, cache=True)
def warm_cutoffs(U, pid, S, B0, B1, phis, basis, status, max_iter, out, flag):
    """The cutoff ``min phi^T y`` of each pattern ``k`` (``b = B0[k]``, perturbation ``B1[k] = -phi``,
    ``phis[k] = phi``) into ``out[k]``, with ``flag[k]`` one of SOLVED, INFEASIBLE, UNSETTLED;
    returns how many patterns it went through (fewer than all after a basis that rounding made
    singular: that pattern is UNSETTLED, and the basis must be started anew).

    Column ``j`` of ``A`` is ``U[pid[j]]``: ``U`` (m x r) holds the calibration rows' distinct
    patterns, so a pivot's products with ``A`` cost ``O(m r + n)``, not ``O(n r)``.  ``basis`` (r
    column indices) and ``status`` (n: 0 at 0, 1 at 1, 2 basic) start dual feasible and carry each
    pattern's final basis to the next."""
    n = pid.size
    m, r = U.shape
    upper = np.zeros(r)  # A times the variables at 1
    counts = np.zeros(m)
    alphas = np.empty(m)
    w = np.empty(r)
    fits = np.empty(m)
    tol, lex_tol, piv_tol = 1e-9, 1e-12, 1e-9
    Bm = np.empty((r, r))
    Binv = np.empty((r, r))
    rhs = np.empty(r)
    x0 = np.empty(r)
    x1 = np.empty(r)
    y = np.empty(r)
    for k in range(B0.shape[0]):
        flag[k] = UNSETTLED
        out[k] = np.nan
        counts[:] = 0.0  # recomputed for every pattern: no drift from the updates below
        for j in range(n):
            if status[j] == 1:
                counts[pid[j]] += 1.0
        upper[:] = 0.0
        for u in range(m):
            if counts[u] > 0.0:
                for q in range(r):
                    upper[q] += counts[u] * U[u, q]
        fresh = False  # B^-1 is computed anew for every pattern, then updated by each pivot (O(r^2))
        for _ in range(max_iter):
            if not fresh:
                for i in range(r):
                    for q in range(r):
                        Bm[q, i] = U[pid[basis[i]], q]
                if not _inverse(Bm, Binv):
                    return k + 1  # a singular basis: the caller starts the next patterns afresh
                fresh = True
            for q in range(r):
                rhs[q] = B0[k, q] - upper[q]
            for i in range(r):
                a0 = 0.0
                a1 = 0.0
                for q in range(r):
                    a0 += Binv[i, q] * rhs[q]
                    a1 += Binv[i, q] * B1[k, q]
                x0[i] = a0
                x1[i] = a1
            for q in range(r):
                s = 0.0
                for i in range(r):
                    s += Binv[i, q] * S[basis[i]]
                y[q] = s
            # the leaving variable: the largest violation of its bounds, else a lexicographic one
            p, up, worst = -1, False, tol
            for i in range(r):
                if -x0[i] > worst:
                    p, up, worst = i, False, -x0[i]
                elif x0[i] - 1.0 > worst:
                    p, up, worst = i, True, x0[i] - 1.0
            lexical = p < 0
            if lexical:
                worst = lex_tol
                for i in range(r):
                    if abs(x0[i]) <= tol and -x1[i] > worst:
                        p, up, worst = i, False, -x1[i]
                    elif abs(x0[i] - 1.0) <= tol and x1[i] > worst:
                        p, up, worst = i, True, x1[i]
            if p < 0:  # primal feasible: optimal for b - t phi
                s = 0.0
                for q in range(r):
                    s += phis[k, q] * y[q]
                out[k] = s
                flag[k] = SOLVED
                break
            # the entering variable: the dual ratio test on row p of B^-1 A
            for u in range(m):
                a = 0.0
                f = 0.0
                for q in range(r):
                    a += Binv[p, q] * U[u, q]
                    f += y[q] * U[u, q]
                alphas[u] = a
                fits[u] = f
            enter, best, best_alpha = -1, np.inf, 0.0
            for j in range(n):
                st = status[j]
                if st == 2:
                    continue
                alpha = alphas[pid[j]]
                if abs(alpha) <= piv_tol:
                    continue
                # x_p = ... - alpha x_j: below its lower bound it must rise (x_j rises from 0 where
                # alpha < 0, falls from 1 where alpha > 0); above its upper bound, the converse
                if up == ((st == 0) == (alpha > 0)):
                    dj = S[j] - fits[pid[j]]
                    ratio = max(dj if st == 0 else -dj, 0.0) / abs(alpha)
                    if ratio < best - 1e-12 or (ratio <= best + 1e-12 and abs(alpha) > abs(best_alpha)):
                        enter, best, best_alpha = j, ratio, alpha
            if enter < 0:
                if not lexical and worst > 1e-6:
                    flag[k] = INFEASIBLE
                    out[k] = np.inf
                break  # else a rounding artefact: left to the caller
            leave = basis[p]
            status[leave] = 1 if up else 0
            if up:
                for q in range(r):
                    upper[q] += U[pid[leave], q]
            if status[enter] == 1:
                for q in range(r):
                    upper[q] -= U[pid[enter], q]
            basis[p] = enter
            status[enter] = 2
            # B^-1 of the new basis: column p of B is now A_enter (w = B^-1 A_enter, pivot on w[p])
            for i in range(r):
                s = 0.0
                for q in range(r):
                    s += Binv[i, q] * U[pid[enter], q]
                w[i] = s
            if abs(w[p]) < 1e-9:
                fresh = False  # computed anew from the basis on the next step
                continue
            inv = 1.0 / w[p]
            for q in range(r):
                Binv[p, q] *= inv
            for i in range(r):
                if i != p and w[i] != 0.0:
                    f = w[i]
                    for q in range(r):
                        Binv[i, q] -= f * Binv[p, q]
    return B0.shape[0]
