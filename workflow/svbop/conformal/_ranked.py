"""Compiled kernels of the ranked scores: the set of a row as a boolean mask, and a mask as sets in
ranked order.

Every score of :data:`svbop.conformal.scores.RANKED_SCORES` is non-decreasing along the ranking of
a row (classes by decreasing normalised probability, ties by class index), so the set
``{c : s(x, c) <= q_c}`` lies within the prefix of ranks whose score is at most ``max_c q_c``.  The
kernel walks the ranking only that far: the first ranks by selection (one pass over the row per
rank, no sort: sets are usually a few classes), and the rest, if the walk goes on, after one
stable sort of the row.  Scores are the same float64 operations, in the same order, as
:func:`svbop.conformal.scores._ranked_scores` (a sequential cumulative sum along the ranking).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"nogil": True, "cache": True}

#: Integer codes of the scores in the kernels.
LAC, APS, RAPS, SAPS, TOPK, MARGIN = range(6)
CODES = {"lac": LAC, "aps": APS, "raps": RAPS, "saps": SAPS, "topk": TOPK, "margin": MARGIN}

#: Ranks found by selection before the row is sorted once.
_SELECT = 16


@njit(**_JIT)
def _score(code, o, v, cum, v1, v2, u, k_reg, lam):
    """The score of the class of rank ``o`` (1-based) of value ``v``; ``cum`` the mass of ranks
    ``1..o``, ``v1``/``v2`` the two largest values, ``u`` the row's uniform (0 for deterministic
    APS/RAPS/top-k, 1 for deterministic SAPS)."""
    if code == LAC:
        return 1.0 - v
    if code == APS:
        return cum - u * v
    if code == RAPS:
        return (cum - u * v) + lam * max(0, o - k_reg)
    if code == SAPS:
        if o == 1:
            return u * v1
        return v1 + lam * ((o - 2) + u)
    if code == TOPK:  # u = 0: deterministic; randomised: o - u (TorchCP's TOPK)
        return float(o) - u
    # MARGIN: the largest other probability minus the class's own
    if o == 1:
        return v2 - v1
    return v1 - v


@njit(**_JIT)
def _walk_row(row, code, q_i, qmax, q_class, k_class, per_class, ranked, k_max, u, k_reg, lam, top1, mask_i,
              ids, n_ids):
    """The set of one row by walking its ranking (the exact rule every path below reproduces):
    rank by rank, ``cum`` the sequential sum of the values so far, stop at the first score above
    ``qmax``; a walked class is kept unless its own threshold (``q_class``) or rank limit
    (``k_class``) excludes it.  ``ids[:n_ids]``: a prefix of the ranking already known (classes in
    ranked order), walked first; past it the first ranks are found by selection (one pass over the
    row per rank) and the rest after one stable sort of the row.  Returns the number kept (before
    ``top1``)."""
    K = row.size
    j1 = 0
    for c in range(1, K):
        if row[c] > row[j1]:
            j1 = c
    v1 = row[j1]
    v2 = 0.0
    if code == MARGIN:
        for c in range(K):
            if c != j1 and row[c] > v2:
                v2 = row[c]
    lastv, lastj = np.inf, -1
    cum = 0.0
    kept = 0
    order = np.empty(0, dtype=np.int64)
    for o in range(1, k_max + 1):
        if o <= n_ids:
            j = ids[o - 1]
        elif o <= _SELECT:  # the next class of the ranking: the largest value after (lastv, lastj)
            j = -1
            for c in range(K):
                x = row[c]
                if x < lastv or (x == lastv and c > lastj):
                    if j < 0 or x > row[j]:
                        j = c
        else:
            if order.size == 0:
                order = np.argsort(-row, kind="mergesort")  # decreasing, ties by class index
            j = order[o - 1]
        v = row[j]
        cum += v
        s = _score(code, o, v, cum, v1, v2, u, k_reg, lam)
        if s > qmax:
            break
        if not per_class or (s <= min(q_i, q_class[j]) and (not ranked or o <= k_class[j])):
            mask_i[j] = True
            kept += 1
        lastv, lastj = v, j
    if kept == 0 and top1:
        mask_i[j1] = True
    return kept


@njit(**_JIT)
def _limits(q_class, k_class, K):
    """What the per-class thresholds and rank limits of a call are: ``(per_class, ranked, k_max, qc)``,
    whether there is one threshold per class, one rank limit per class, the largest rank limit (``K``
    without), and the largest per-class threshold (``-inf`` without)."""
    qc = -np.inf
    for c in range(q_class.size):
        if q_class[c] > qc:
            qc = q_class[c]
    return q_class.size == K, k_class.size == K, _k_max(k_class, K), qc


@njit(**_JIT)
def _k_max(k_class, K):
    k_max = K
    if k_class.size == K:
        k_max = 0
        for c in range(K):
            if k_class[c] > k_max:
                k_max = k_class[c]
    return k_max


@njit(**_JIT)
def ranked_mask_walk(Xn, code, q_row, q_class, k_class, k_reg, lam, U, top1, mask):
    """:func:`ranked_mask` by walking every row's ranking (:func:`_walk_row`): the reference of the
    tests, and the rule in its plainest form."""
    n, K = Xn.shape
    per_class, ranked, k_max, qc = _limits(q_class, k_class, K)
    ids = np.empty(0, dtype=np.int64)
    for i in range(n):
        qmax = min(q_row[i], qc) if per_class else q_row[i]
        _walk_row(Xn[i], code, q_row[i], qmax, q_class, k_class, per_class, ranked, k_max, U[i], k_reg, lam, top1,
                  mask[i], ids, 0)


#: Segments of the selection at most this long are sorted and walked.
_SMALL = 24


@njit(**_JIT)
def _prefix_length(buf, t, code, q, v1, v2, u, k_reg, lam):
    """How many ranks of a row have a score at most ``q`` (the scores are non-decreasing along the
    ranking), found by selection on ``buf`` (the row's values, reordered in place) with no sort:
    a three-way partition about a pivot splits the values above, equal to and below it; the mass
    above gives the scores at the tied ranks, which say on which side the boundary lies.

    ``buf`` holds the row undivided, ``t`` its sum: a value ``x`` is scored as ``x / t`` (the divided
    row's value, bit for bit), a mass as the undivided sum over ``t``.

    Returns ``(m, cum_m, v_m, cum_n, v_n)``: ``m``, the undivided mass and value of rank ``m`` and of
    rank ``m + 1`` (``v_n = -1`` when ``m = K``).  The masses are sums in another order than the
    walk's sequential ones of divided values (the scores of the cumulative scores, APS and RAPS, are
    then within rounding of the walk's: the caller checks the margin); the other scores do not use
    them and are exact."""
    K = buf.size
    lo, hi = 0, K
    rank_off = 0  # ranks above the segment [lo, hi), which holds ranks rank_off + 1 .. rank_off + hi - lo
    cum_off = 0.0
    v_last = -1.0  # value of rank rank_off
    v_after = -1.0  # value of rank rank_off + (hi - lo) + 1 (-1: none)
    while True:
        w = hi - lo
        if w <= _SMALL:
            seg = np.sort(buf[lo:hi])  # increasing; walked from its end
            cum = cum_off
            for a in range(w):
                v = seg[w - 1 - a]
                o = rank_off + a + 1
                nxt = cum + v
                if _score(code, o, v / t, nxt / t, v1, v2, u, k_reg, lam) > q:
                    return rank_off + a, cum, v_last, nxt, v
                cum = nxt
                v_last = v
            if v_after < 0.0:
                return rank_off + w, cum, v_last, cum, -1.0
            return rank_off + w, cum, v_last, cum + v_after, v_after
        # pivot: median of three, moved to the front; then a branch-free partition of the rest into
        # [> p | <= p] that counts the values equal to p (ties are rare: compacted when present)
        i_a, i_b, i_c = lo, lo + w // 2, hi - 1
        if buf[i_a] > buf[i_b]:
            i_a, i_b = i_b, i_a
        if buf[i_b] > buf[i_c]:
            i_b = i_c
            if buf[i_a] > buf[i_b]:
                i_b = i_a
        p = buf[i_b]
        buf[i_b] = buf[lo]
        buf[lo] = p
        st = lo + 1
        G = 0.0
        ties = 0
        for i in range(lo + 1, hi):
            x = buf[i]
            big = x > p
            buf[i] = buf[st]
            buf[st] = x
            st += big
            G += x if big else 0.0
            ties += x == p
        # [p | > p | <= p] -> [> p | p | <= p]
        buf[lo] = buf[st - 1]
        buf[st - 1] = p
        gt = st - 1
        lt = st
        if ties:  # the other values equal to p next to it: [> p | p ... p | < p]
            for i in range(st, hi):
                x = buf[i]
                eq = x == p
                buf[i] = buf[lt]
                buf[lt] = x
                lt += eq
        g = gt - lo
        e = lt - gt
        o1 = rank_off + g + 1
        if _score(code, o1, p / t, (cum_off + G + p) / t, v1, v2, u, k_reg, lam) > q:
            if g == 0:  # the boundary is right above the tied block
                return rank_off, cum_off, v_last, cum_off + p, p
            hi = gt
            v_after = p
            continue
        oe = rank_off + g + e
        if _score(code, oe, p / t, (cum_off + G + e * p) / t, v1, v2, u, k_reg, lam) <= q:
            rank_off = oe
            cum_off = cum_off + G + e * p
            v_last = p
            lo = lt
            if lo == hi:
                if v_after < 0.0:
                    return rank_off, cum_off, v_last, cum_off, -1.0
                return rank_off, cum_off, v_last, cum_off + v_after, v_after
            continue
        # the boundary is inside the tied block: ranks o1 .. o1 + j - 1 in (non-decreasing scores)
        base = cum_off + G
        jlo, jhi = 1, e - 1  # s(o1) <= q < s(oe): the largest j in [1, e - 1] with s(rank_off + g + j) <= q
        while jlo < jhi:
            mid = (jlo + jhi + 1) // 2
            if _score(code, rank_off + g + mid, p / t, (base + mid * p) / t, v1, v2, u, k_reg, lam) <= q:
                jlo = mid
            else:
                jhi = mid - 1
        return rank_off + g + jlo, base + jlo * p, p, base + (jlo + 1) * p, p


@njit(**_JIT)
def _top_ranks(x, t, m, v_m, mask_i):
    """Mark the ``m >= 1`` first ranks of the row ``x / t`` (``v_m`` the divided value of rank ``m``):
    every value above ``v_m``, then the tied ones of lowest class index."""
    K = x.size
    above = 0
    for c in range(K):  # branch-free: the comparison is unpredictable
        big = x[c] / t > v_m
        mask_i[c] = big
        above += big
    need = m - above
    for c in range(K):
        if need == 0:
            break
        if x[c] / t == v_m:
            mask_i[c] = True
            need -= 1


@njit(**_JIT)
def _gather_ranked(row, v_min, ids):
    """The classes of ``row`` of value at least ``v_min`` (a prefix of the ranking) into ``ids``,
    in ranked order (decreasing, ties by class index); returns their number."""
    K = row.size
    n = 0
    for c in range(K):
        if row[c] >= v_min:
            ids[n] = c
            n += 1
    vals = np.empty(n)
    for t in range(n):
        vals[t] = -row[ids[t]]
    order = np.argsort(vals, kind="mergesort")
    tmp = ids[:n].copy()
    for t in range(n):
        ids[t] = tmp[order[t]]
    return n


@njit(**_JIT)
def ranked_mask(X, total, code, q_row, q_class, k_class, k_reg, lam, U, top1, mask):
    """``mask[i, c] = s(x_i, c) <= min(q_row[i], q_class[c])`` for the rows of ``Xn = X / total[:, None]``
    (float64; each row divided as it is read, the same values as dividing the matrix); ``q_class`` of
    size 0: no per-class thresholds.  ``k_class`` (size ``K``, or 0 for
    none): a class is kept only at a rank ``o(c) <= k_class[c]`` (RC3P's rank limits).  A row with
    no class kept gets its top-ranked class when ``top1``.  ``q_row`` already holds the tolerance
    of the comparison.

    The sets are :func:`ranked_mask_walk`'s, bit for bit, without sorting a row: the number ``m``
    of ranks whose score is at most ``q`` is found by selection (:func:`_prefix_length`), and the
    set is the ``m`` largest values (ties by class index).  The cumulative scores (APS, RAPS) are
    then sums in another order than the walk's; where the scores of ranks ``m`` and ``m + 1`` are
    within rounding of ``q`` (``(4 K + 8)`` units of ``2**-53`` of their size), the row is walked
    instead.  With per-class thresholds or rank limits the ``m + 1`` first ranks are sorted and
    walked (only the set's prefix is sorted)."""
    n, K = X.shape
    per_class, ranked, k_max, qc = _limits(q_class, k_class, K)
    cumulative = code == APS or code == RAPS
    rel = (4.0 * K + 8.0) * 2.220446049250313e-16
    buf = np.empty(K)
    ids = np.empty(K, dtype=np.int64)
    row = np.empty(K)
    for i in range(n):
        t = total[i]
        x = X[i]
        j1 = 0
        x1 = -1.0
        for c in range(K):  # one pass: the undivided row copied to select in, its top class
            xc = x[c]
            buf[c] = xc
            if xc > x1:
                x1 = xc
                j1 = c
        v1 = x1 / t
        u = U[i]
        qmax = min(q_row[i], qc) if per_class else q_row[i]
        v2 = 0.0
        if code == MARGIN:
            x2 = 0.0
            for c in range(K):
                if c != j1 and x[c] > x2:
                    x2 = x[c]
            v2 = x2 / t
        m, cum_m, x_m, cum_n, x_n = _prefix_length(buf, t, code, qmax, v1, v2, u, k_reg, lam)
        v_m, v_n = x_m / t, x_n / t
        decided = True
        capped = m > k_max  # the walk stops at the largest rank limit
        if capped:
            m = k_max
            decided = not cumulative  # rank m's score was not computed: the walk checks it
        elif cumulative:
            if m >= 1:
                s = _score(code, m, v_m, cum_m / t, v1, v2, u, k_reg, lam)
                decided = s <= qmax - rel * max(1.0, abs(s))
            if decided and m < K:
                s = _score(code, m + 1, v_n, cum_n / t, v1, v2, u, k_reg, lam)
                decided = s > qmax + rel * max(1.0, abs(s))
        if not decided or not (qmax == qmax) or per_class:
            for c in range(K):  # the divided row: the walk's values
                row[c] = x[c] / t
        if not decided or not (qmax == qmax):  # near q, or a NaN threshold: the walk decides
            _walk_row(row, code, q_row[i], qmax, q_class, k_class, per_class, ranked, k_max, u, k_reg, lam, top1,
                      mask[i], ids, 0)
            continue
        if capped and m >= 1:  # the value of rank k_max: selected
            buf[:] = x
            v_m = -np.partition(-buf, m - 1)[m - 1] / t
        if not per_class:
            if m >= 1:
                _top_ranks(x, t, m, v_m, mask[i])
            elif top1:
                mask[i, j1] = True
            continue
        # per-class thresholds or rank limits: sort and walk the first m + 1 ranks only (m when capped)
        if m >= K:
            n_ids = 0  # every rank: the walk sorts the row
        elif capped:
            n_ids = _gather_ranked(row, v_m, ids) if m >= 1 else 0
        else:
            n_ids = _gather_ranked(row, v_n, ids)
        _walk_row(row, code, q_row[i], qmax, q_class, k_class, per_class, ranked, k_max, u, k_reg, lam, top1,
                  mask[i], ids, n_ids)


@njit(**_JIT)
def margin_mask(Xn, q_row, q_class, top1, mask):
    """The margin sets ``{c : s(x_i, c) <= min(q_row[i], q_class[c])}`` without a ranking: the
    score of the top class is ``v2 - v1``, of any other ``v1 - v`` (``v1``, ``v2`` the row's two
    largest values), so one pass finds ``v1`` and ``v2`` and a second compares (the same float64
    operations as :func:`_score`).  ``q_class`` of size 0: no per-class thresholds."""
    n, K = Xn.shape
    per_class = q_class.size == K
    for i in range(n):
        row = Xn[i]
        j1 = 0
        v1 = row[0]
        v2 = 0.0
        for c in range(1, K):
            x = row[c]
            if x > v1:
                v2 = v1
                v1 = x
                j1 = c
            elif x > v2:
                v2 = x
        q = q_row[i]
        kept = 0
        for c in range(K):
            s = (v2 - v1) if c == j1 else (v1 - row[c])
            qc = min(q, q_class[c]) if per_class else q
            if s <= qc:
                mask[i, c] = True
                kept += 1
        if kept == 0 and top1:
            mask[i, j1] = True


@njit(**_JIT)
def mask_sets(mask, X):
    """The classes of each row of ``mask`` in ranked order of ``X`` (decreasing, ties by class
    index): the ``indices`` and ``sizes`` of a :class:`svbop.SetPredictions`."""
    n, K = mask.shape
    sizes = np.zeros(n, dtype=np.int64)
    for i in range(n):
        sizes[i] = mask[i].sum()
    indices = np.empty(sizes.sum(), dtype=np.int64)
    at = 0
    for i in range(n):
        m = sizes[i]
        if m == 0:
            continue
        ids = np.empty(m, dtype=np.int64)
        vals = np.empty(m)
        k = 0
        for c in range(K):
            if mask[i, c]:
                ids[k] = c
                vals[k] = -X[i, c]
                k += 1
        order = np.argsort(vals, kind="mergesort")
        for k in range(m):
            indices[at + k] = ids[order[k]]
        at += m
    return indices, sizes
