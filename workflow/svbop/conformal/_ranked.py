"""Compiled kernels of the ranked scores: the set of a row as a boolean mask, and a mask as sets in
ranked order.

Every score of :data:`svbop.conformal.scores.RANKED_SCORES` is non-decreasing along the ranking of
a row (classes by decreasing normalised probability, ties by class index), so the set
``{c : s(x, c) <= q_c}`` lies within the prefix of ranks whose score is at most ``max_c q_c``.
:func:`ranked_mask_walk` walks the ranking that far (the rule in its plainest form, the tests'
reference): the first ranks by selection, the rest after one stable sort of the row.  Its scores are
the same float64 operations, in the same order, as :func:`svbop.conformal.scores._ranked_scores` (a
sequential cumulative sum along the ranking).  :func:`ranked_mask` gives the same sets without
sorting a row (a radix select over the values' bit patterns), and :func:`margin_mask` the margin
sets from a row's two largest values.
"""

from __future__ import annotations

import functools

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


#: Buckets of a histogram of bit patterns, at most (:func:`_n_buckets`).
_NB_MAX = 256
#: Candidates at most this many are sorted by insertion; more (a refinement that stalls on equal
#: values), by numpy's sort.
_INSERTION = 64
#: The bit pattern of ``+inf``: the bits of a finite ``|x|`` lie below it, of NaN and infinity at or above.
_INF_BITS = 0x7FF0000000000000
#: The bits of ``|x|``: all but the sign.
_ABS = 0x7FFFFFFFFFFFFFFF


@njit(**_JIT)
def _n_buckets(K):
    """Buckets of the histogram of a row of ``K`` classes: at least two a class, 16 to 256 (most
    buckets stay empty, as values crowd on a logarithmic scale; finer ones leave fewer classes to
    bucket again)."""
    nb = 16
    while nb < _NB_MAX and nb < 2 * K:
        nb *= 2
    return nb


@njit(**_JIT)
def _as_float(bits, ib, fb):
    """The float64 of the bit pattern ``bits`` (``ib``, ``fb``: one int64 and its float64 view)."""
    ib[0] = bits
    return fb[0]


@njit(**_JIT)
def _quotient_block(xm, t, ib, fb):
    """``(x_lo, x_hi)``: the undivided values ``x >= 0`` with ``x / t == xm / t`` in float64, an
    interval around ``xm`` (a quotient rounds monotonically).  A class's divided value is above
    ``xm``'s exactly when its undivided value is above ``x_hi``, and equal to it when it lies in
    ``[x_lo, x_hi]``.  Found on the bit patterns by galloping then bisecting (a handful of
    divisions)."""
    if t == 1.0:
        return xm, xm
    vm = xm / t
    fb[0] = xm
    b0 = ib[0]
    good, step = b0, 1  # x_hi: the largest bits whose quotient is at most vm
    while True:
        bad = b0 + step
        if bad >= _INF_BITS or _as_float(bad, ib, fb) / t > vm:
            break
        good = bad
        step *= 2
    while bad - good > 1:
        mid = good + (bad - good) // 2
        if _as_float(mid, ib, fb) / t > vm:
            bad = mid
        else:
            good = mid
    x_hi = _as_float(good, ib, fb)
    good, step = b0, 1  # x_lo: the smallest bits whose quotient is at least vm
    while True:
        bad = b0 - step
        if bad < 0:
            bad = -1
            break
        if _as_float(bad, ib, fb) / t < vm:
            break
        good = bad
        step *= 2
    while good - bad > 1:
        mid = bad + (good - bad) // 2
        if _as_float(mid, ib, fb) / t < vm:
            bad = mid
        else:
            good = mid
    return _as_float(good, ib, fb), x_hi


@njit(**_JIT)
def _value_bounds(code, O, n, hi, lo, inv_t, v1, v2):
    """Bounds ``(lower, upper)`` on the LAC or margin scores of ranks ``O + 1 .. O + n``, whose
    undivided values lie in ``[lo, hi]``.  Divided by multiplying with ``inv_t = 1 / t``: within a
    unit of rounding, far inside the margin they are used with."""
    return (_score(code, O + 1, hi * inv_t, 0.0, v1, v2, 0.0, 0, 0.0),
            _score(code, O + n, lo * inv_t, 0.0, v1, v2, 0.0, 0, 0.0))


@njit(**_JIT)
def _classify(cnt, mass, NB, S, hb, code, O, C, qmax, rel, t, inv_t, v1, v2, u, k_reg, lam, ib, fb):
    """Which buckets of a histogram (bucket ``k``: the bits in ``(hb - (k + 1) 2^S, hb - k 2^S]``, the
    last one down to 0) lie wholly in the set, which may hold its boundary and which lie wholly out:
    ``(first, last, O, C)``, buckets ``< first`` in, ``first .. last`` undecided (none when
    ``last < first``), ``> last`` out; ``O`` and ``C`` the ranks and undivided mass above ``first``
    (given: those above the histogram).  A bucket is in when its scores' upper bound is below ``q``
    by more than rounding, out when their lower bound is above it by more than rounding.

    The scores by mass or rank bound an empty bucket by its neighbours' ranks, which decides
    nothing wrongly: their loops do not branch on empty buckets."""
    if code == APS:  # by mass: cum - u v lies between the mass above a rank and up to it; the
        # margin taken twice, of q, so that the bounds compare undivided masses
        wide = 2.0 * rel * max(1.0, abs(qmax)) if abs(qmax) < np.inf else 0.0
        lim_in, lim_out = (qmax - wide) * t, (qmax + wide) * t
        first = NB
        for k in range(NB):
            C1 = C + mass[k]
            if C1 > lim_in:
                first = k
                break
            O += cnt[k]
            C = C1
        last = first - 1
        C2 = C
        for k in range(first, NB):
            if C2 > lim_out:
                break
            last = k
            C2 += mass[k]
        return first, last, O, C
    if code == RAPS:
        pen = lam
        first = NB
        for k in range(NB):
            O1 = O + cnt[k]
            C1 = C + mass[k]
            up = C1 * inv_t + pen * max(0, O1 - k_reg)
            if up + rel * max(1.0, abs(up)) > qmax:
                first = k
                break
            O, C = O1, C1
        last = first - 1
        O2, C2 = O, C
        for k in range(first, NB):
            low = C2 * inv_t + pen * max(0, O2 + 1 - k_reg)
            if low - rel * max(1.0, abs(low)) > qmax:
                break
            last = k
            O2 += cnt[k]
            C2 += mass[k]
        return first, last, O, C
    if code == SAPS or code == TOPK:  # by rank
        first = NB
        for k in range(NB):
            O1 = O + cnt[k]
            up = _score(code, O1, v1, 0.0, v1, v2, u, k_reg, lam)  # rank 1's value is v1
            if up + rel * max(1.0, abs(up)) > qmax:
                first = k
                break
            O = O1
        last = first - 1
        O2 = O
        for k in range(first, NB):
            low = _score(code, O2 + 1, v1, 0.0, v1, v2, u, k_reg, lam)
            if low - rel * max(1.0, abs(low)) > qmax:
                break
            last = k
            O2 += cnt[k]
        return first, last, O, C
    hi_k, lo_k = 0.0, 0.0  # LAC and margin: by the buckets' values
    first = NB
    for k in range(NB):
        nk = cnt[k]
        if nk == 0:
            continue
        hi_k = _as_float(hb - (k << S), ib, fb)
        lo_k = _as_float(max(0, hb - ((k + 1) << S) + 1), ib, fb) if k < NB - 1 else 0.0
        up = _value_bounds(code, O, nk, hi_k, lo_k, inv_t, v1, v2)[1]
        if up + rel * max(1.0, abs(up)) > qmax:
            first = k
            break
        O += nk
    last = first - 1
    O2 = O
    for k in range(first, NB):
        nk = cnt[k]
        if nk == 0:
            continue
        hi_k = _as_float(hb - (k << S), ib, fb)
        lo_k = _as_float(max(0, hb - ((k + 1) << S) + 1), ib, fb) if k < NB - 1 else 0.0
        low = _value_bounds(code, O2, nk, hi_k, lo_k, inv_t, v1, v2)[0]
        if low - rel * max(1.0, abs(low)) > qmax:
            break
        last = k
        O2 += nk
    return first, last, O, C


@njit(**_JIT)
def _shift(span, NB):
    """The smallest ``S`` with ``span >> S < NB``: buckets of ``2^S`` bit patterns."""
    S = 0
    while (span >> S) >= NB:
        S += 1
    return S


@njit(**_JIT)
def _block_sum(x, lo, n):
    """numpy's sum of at most 128 contiguous values: in order below 8, else eight running sums."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += x[lo + i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = 8
    end = n - n % 8
    while i < end:
        r0 += x[lo + i]
        r1 += x[lo + i + 1]
        r2 += x[lo + i + 2]
        r3 += x[lo + i + 3]
        r4 += x[lo + i + 4]
        r5 += x[lo + i + 5]
        r6 += x[lo + i + 6]
        r7 += x[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[lo + i]
        i += 1
    return res


@njit(**_JIT)
def _halves(n):
    """Where numpy's pairwise sum splits ``n > 128`` values: half, rounded down to a multiple of 8."""
    n2 = n // 2
    return n2 - n2 % 8


@njit(**_JIT)
def pairwise_sum(x, stack, partial):
    """``x.sum()`` as numpy sums a contiguous float64 row, bit for bit (its ``pairwise_sum``: blocks of
    at most 128 values by :func:`_block_sum`, halves summed apart above that; the caller checks the
    match, :func:`kernel_sums_are_numpys`).  The halving walked with an explicit stack (``stack``:
    int64 ``(3, 64)``, rows: a node's start, size and state; ``partial``: float64 ``(64,)``, a left
    half's sum): numba's cache cannot hold a recursive function."""
    n = x.size
    if n <= 128:
        return _block_sum(x, 0, n)
    sp = 0
    stack[0, 0], stack[1, 0] = 0, n
    while True:
        while stack[1, sp] > 128:  # down the left halves (state 1: waiting for the left half's sum)
            stack[2, sp] = 1
            stack[0, sp + 1], stack[1, sp + 1] = stack[0, sp], _halves(stack[1, sp])
            sp += 1
        v = _block_sum(x, stack[0, sp], stack[1, sp])
        sp -= 1
        while sp >= 0 and stack[2, sp] == 2:  # up through the nodes whose both halves are summed
            v = partial[sp] + v
            sp -= 1
        if sp < 0:
            return v
        partial[sp] = v  # a left half's sum: on to the right half (state 2)
        stack[2, sp] = 2
        n2 = _halves(stack[1, sp])
        stack[0, sp + 1], stack[1, sp + 1] = stack[0, sp] + n2, stack[1, sp] - n2
        sp += 1


@njit(**_JIT)
def row_sums(X):
    """``X.sum(axis=1)`` of a C-contiguous float64 matrix by :func:`pairwise_sum`."""
    stack = np.empty((3, 64), dtype=np.int64)
    partial = np.empty(64)
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        out[i] = pairwise_sum(X[i], stack, partial)
    return out


@functools.lru_cache(maxsize=None)
def kernel_sums_are_numpys() -> bool:
    """Whether :func:`row_sums` equals this numpy's ``X.sum(axis=1)`` bit for bit, on rows of the
    lengths where its algorithm changes (checked once a process): the kernels then sum each row as
    they read it; otherwise they are given numpy's sums."""
    rng = np.random.default_rng(0)
    for K in (1, 3, 7, 8, 9, 15, 16, 17, 100, 127, 128, 129, 136, 255, 256, 257, 1000, 1001, 4097):
        X = np.exp(rng.standard_normal((16, K)) * 3.0)
        if not np.array_equal(row_sums(X), X.sum(axis=1)):
            return False
    return True


@njit(**_JIT)
def _sorted_copy(vals, g, out):
    """``vals[:g]`` sorted increasing into ``out[:g]`` (insertion for a few, numpy's sort for more)."""
    if g > _INSERTION:
        out[:g] = np.sort(vals[:g])
        return
    for j in range(g):
        v = vals[j]
        k = j
        while k > 0 and out[k - 1] > v:
            out[k] = out[k - 1]
            k -= 1
        out[k] = v


@njit(**_JIT)
def _extreme_bits(b, lo_b, hi_b, largest):
    """The largest (``largest``) or smallest bits of ``|x|`` in ``[lo_b, hi_b]`` over the row's bits
    ``b`` (-1, or ``_INF_BITS``, when none)."""
    r = -1 if largest else _INF_BITS
    w = np.uint64(hi_b - lo_b)
    for c in range(b.size):  # vectorised: one unsigned comparison
        a = b[c] & _ABS
        inside = np.uint64(a - lo_b) <= w
        if largest:
            r = max(r, a if inside else -1)
        else:
            r = min(r, a if inside else _INF_BITS)
    return r


@njit(**_JIT)
def ranked_mask(X, total, code, q_row, q_class, k_class, k_reg, lam, U, top1, mask):
    """``mask[i, c] = s(x_i, c) <= min(q_row[i], q_class[c])`` for the rows of ``Xn = X / total[:, None]``
    (``X`` float64 and C-contiguous; each row divided as it is read, the same values as dividing the
    matrix); ``total`` of size 0: each row's sum computed here, numpy's bit for bit
    (:func:`pairwise_sum`).  ``q_class`` of size 0: no per-class thresholds.  ``k_class`` (size
    ``K``, or 0 for none): a class is kept only at a rank ``o(c) <= k_class[c]`` (RC3P's rank
    limits).  A row with no class kept gets its top-ranked class when ``top1``.  ``q_row`` already
    holds the tolerance of the comparison.  Every entry of ``mask`` is written.  Returns ``-1``, or
    the first row that holds a negative value, NaN or infinity, or no mass (the rows from it on are
    not computed).

    The sets are :func:`ranked_mask_walk`'s, bit for bit, without sorting a row.  Scores are
    non-decreasing along the ranking, so a set is the ``m`` first ranks, found as a radix select
    finds an order statistic.  One pass counts the row's classes (and sums their values, for APS
    and RAPS) in buckets of their bit patterns, a logarithmic scale of the values: the 64 octaves
    below the row's sum (the last bucket holds all below).  Bounds on the scores of each bucket's
    ranks (:func:`_classify`) say which buckets lie wholly in the set and which wholly out; the
    classes in between are gathered and bucketed again, between their own extreme bit patterns,
    while they are many, then sorted and walked.  The set is then the values at least rank
    ``m``'s; where the values of ranks ``m`` and ``m + 1`` divide to the same float64, the values
    above that one and the tied ones of lowest class index (:func:`_quotient_block`).

    The cumulative scores (APS, RAPS) walked there start from the mass of the buckets above, a
    sum in another order than the walk's; where the scores of ranks ``m`` and ``m + 1`` are
    within rounding of ``q`` (``(4 K + 8)`` units of ``2**-53`` of their size), the row is walked
    instead.  With per-class thresholds or rank limits the ``m + 1`` first ranks are sorted and
    walked (only the set's prefix is sorted)."""
    n, K = X.shape
    own_total = total.size == 0
    per_class, ranked, k_max, qc = _limits(q_class, k_class, K)
    cumulative = code == APS or code == RAPS
    rel = (4.0 * K + 8.0) * 2.220446049250313e-16
    NB = _n_buckets(K)
    S0 = 58  # the first histogram: NB / 64 buckets an octave (2^52 bit patterns)
    nb = NB
    while nb > 1:
        nb >>= 1
        S0 -= 1
    cnt = np.zeros(NB, dtype=np.int64)
    mass = np.zeros(NB)
    keys = np.empty(K, dtype=np.int64)
    cand = np.empty(K)  # the undecided classes' values, and their bits
    cbits = cand.view(np.int64)
    srt = np.empty(K)
    ids = np.empty(K, dtype=np.int64)
    row = np.empty(K)
    ib = np.empty(1, dtype=np.int64)
    fb = ib.view(np.float64)
    stack = np.empty((3, 64), dtype=np.int64)  # pairwise_sum's
    partial = np.empty(64)
    B = X.view(np.int64)
    for i in range(n):
        x = X[i]
        b = B[i]
        mask_i = mask[i]
        if own_total:  # numpy's sum of the row (a block of at most 128 values: no call)
            t = _block_sum(x, 0, K) if K <= 128 else pairwise_sum(x, stack, partial)
        else:
            t = total[i]
        if not (t > 0.0 and t < np.inf):  # NaN, infinity or no mass
            return i
        fb[0] = t
        hb0 = ib[0]  # the sum's bits: at least every value's (a sum of non-negative values)
        # the histogram: each class's bucket, the largest bits, and a negative value, NaN or infinity
        # in one vectorised pass, then the counts (and masses)
        top, neg = 0, False
        for c in range(K):
            v = b[c]
            a = v & _ABS
            top = max(top, a)
            neg |= (v != a) & (a != 0)  # a negative value (a negative zero is zero)
            keys[c] = min(max(hb0 - a, 0) >> S0, NB - 1)  # max: a bad value's bits may pass the sum's
        if top >= _INF_BITS or neg:
            return i
        cnt[:] = 0
        if cumulative:
            mass[:] = 0.0
            for c in range(K):
                k = keys[c]
                cnt[k] += 1
                mass[k] += x[c]
        else:
            for c in range(K):
                cnt[keys[c]] += 1
        x1 = _as_float(top, ib, fb)
        v1 = x1 / t
        u = U[i]
        qmax = min(q_row[i], qc) if per_class else q_row[i]
        v2 = 0.0
        if code == MARGIN:
            j1 = 0
            for c in range(K):
                if b[c] & _ABS == top:
                    j1 = c
                    break
            x2 = 0.0
            for c in range(K):
                if c != j1 and x[c] > x2:
                    x2 = x[c]
            v2 = x2 / t
        decided = qmax == qmax  # a NaN threshold: the walk decides
        m = 0
        x_m, x_n = -1.0, -1.0  # the undivided values of ranks m and m + 1 (-1: none)
        if decided:
            O, C = 0, 0.0  # the ranks, and their undivided mass, wholly in the set
            inv_t = 1.0 / t
            in_b, out_b = _INF_BITS, -1  # bits above in_b: in the set; at most out_b: out of it
            in_min, out_max = _INF_BITS, -1  # the bits of the smallest value in and the largest out, once
            # a level past the first has seen them (its classes in lie below all earlier ones)
            hb, S = hb0, S0
            g = K
            level = 0
            while True:
                if level > 0:  # the undecided classes' histogram, between their extreme bits
                    hb = in_b
                    S = _shift(in_b - out_b - 1, NB)
                    cnt[:] = 0
                    mass[:] = 0.0
                    for j in range(g):
                        k = min((hb - (cbits[j] & _ABS)) >> S, NB - 1)
                        cnt[k] += 1
                        mass[k] += cand[j]
                first, last, O, C = _classify(cnt, mass, NB, S, hb, code, O, C, qmax, rel, t, inv_t, v1, v2, u, k_reg,
                                              lam, ib, fb)
                in_b, out_b = (hb - (first << S) if first < NB else out_b,
                               hb - ((last + 1) << S) if last < NB - 1 else out_b)
                g_before = g
                g = 0
                if level == 0 and in_b > out_b:  # one unsigned comparison (two would branch
                    w = np.uint64(in_b - out_b - 1)  # unpredictably where the boundary halves a row)
                    for c in range(K):
                        if np.uint64((b[c] & _ABS) - out_b - 1) <= w:
                            cand[g] = x[c]
                            g += 1
                if level > 0:  # few classes: the extremes either side too
                    lvl_in, lvl_out = _INF_BITS, -1
                    for j in range(g_before):
                        a = cbits[j] & _ABS
                        if a > in_b:
                            lvl_in = min(lvl_in, a)
                        elif a <= out_b:
                            lvl_out = max(lvl_out, a)
                        else:
                            cand[g] = cand[j]
                            g += 1
                    if lvl_in < _INF_BITS:
                        in_min = lvl_in
                    if lvl_out >= 0:
                        out_max = lvl_out
                level += 1
                if g <= 16 or g == g_before or in_b <= out_b + 1:  # few left, or equal values
                    break
            # the undecided classes (ranks O + 1 .. O + g), sorted and walked
            _sorted_copy(cand, g, srt)
            m = -1
            o, cum = O, C
            s_m, s_n = -np.inf, np.inf
            for a_ in range(g):
                v = srt[g - 1 - a_]
                o += 1
                nc = cum + v
                if cumulative:  # within rounding of the walk's scores anyway (checked below): multiply
                    s = _score(code, o, v * inv_t, nc * inv_t, v1, v2, u, k_reg, lam)
                else:  # the walk's divided values, exactly
                    s = _score(code, o, v / t, 0.0, v1, v2, u, k_reg, lam)
                if s > qmax:
                    m = o - 1
                    x_n, s_n = v, s
                    break
                cum = nc
                x_m, s_m = v, s
            if m < 0:
                m = o
            if m == O and m >= 1:  # rank m: the smallest value in
                if in_min == _INF_BITS:
                    in_min = _extreme_bits(b, in_b + 1, _INF_BITS - 1, False)
                x_m = _as_float(in_min, ib, fb)
            if m == O + g and m < K:  # rank m + 1: the largest value out
                if out_max < 0:
                    out_max = _extreme_bits(b, 0, out_b, True)
                x_n = _as_float(out_max, ib, fb)
            if cumulative:  # scores computed here must be clear of q by more than rounding
                if m > O:
                    decided = s_m <= qmax - rel * max(1.0, abs(s_m))
                if decided and m < O + g:
                    decided = s_n > qmax + rel * max(1.0, abs(s_n))
            if m > k_max:  # the walk stops at the largest rank limit
                m = k_max
                decided = decided and not cumulative  # rank m's score was not computed: the walk checks it
                if m >= 1:
                    x_m = -np.partition(-x, m - 1)[m - 1]
                    x_n = x_m  # the ranks after it are not the set's: the values decide
        if not decided:  # near q, or a NaN threshold: the walk decides
            for c in range(K):  # the divided row: the walk's values
                row[c] = x[c] / t
            mask_i[:] = False
            _walk_row(row, code, q_row[i], qmax, q_class, k_class, per_class, ranked, k_max, u, k_reg, lam, top1,
                      mask_i, ids, 0)
            continue
        if not per_class:
            if m == 0:
                mask_i[:] = False
                if top1:  # the top-ranked class: the first whose divided value is the largest
                    x_lo1 = _quotient_block(x1, t, ib, fb)[0]
                    for c in range(K):
                        if x[c] >= x_lo1:
                            mask_i[c] = True
                            break
            elif m >= K:
                mask_i[:] = True
            elif x_n / t == x_m / t:  # ranks m and m + 1 tied: the values above, then by class index
                x_lo, x_hi = _quotient_block(x_m, t, ib, fb)
                above = 0
                for c in range(K):  # branch-free: the comparison is unpredictable
                    big = x[c] > x_hi
                    mask_i[c] = big
                    above += big
                need = m - above
                for c in range(K):
                    if need == 0:
                        break
                    xc = x[c]
                    if xc >= x_lo and xc <= x_hi:
                        mask_i[c] = True
                        need -= 1
            else:
                for c in range(K):  # vectorised
                    mask_i[c] = x[c] >= x_m
            continue
        # per-class thresholds or rank limits: sort and walk the first m + 1 ranks only (m when capped)
        for c in range(K):
            row[c] = x[c] / t
        mask_i[:] = False
        if m >= K:
            n_ids = 0  # every rank: the walk sorts the row
        elif m >= 1 and x_n == x_m:
            n_ids = _gather_ranked(row, x_m / t, ids)
        else:
            n_ids = _gather_ranked(row, x_n / t, ids)
        _walk_row(row, code, q_row[i], qmax, q_class, k_class, per_class, ranked, k_max, u, k_reg, lam, top1,
                  mask_i, ids, n_ids)
    return -1


@njit(**_JIT)
def _margin_cut(x1, v1, q, t, ib, fb):
    """The smallest undivided value ``x`` in ``[0, x1]`` whose margin score ``v1 - x / t`` (float64,
    as :func:`_score`) is at most ``q`` (``inf`` when none): the score does not increase with ``x``,
    so a class other than the top one is kept exactly when its value is at least this one.  Found on
    the bit patterns from the guess ``(v1 - q) t``, galloping then bisecting (a handful of divisions)."""
    fb[0] = x1
    b_hi = ib[0]
    if not (v1 - x1 / t <= q):  # not even the largest value (a negative or NaN threshold)
        return np.inf
    if v1 - 0.0 / t <= q:
        return 0.0
    guess = min(max((v1 - q) * t, 0.0), x1)
    fb[0] = guess
    b0 = ib[0]
    if v1 - guess / t <= q:  # b0 is in: step down to one that is out
        good, step = b0, 1
        while True:
            bad = b0 - step
            if bad <= 0 or not (v1 - _as_float(bad, ib, fb) / t <= q):
                bad = max(bad, 0)
                break
            good = bad
            step *= 2
    else:  # b0 is out: step up to one that is in
        bad, step = b0, 1
        while True:
            good = b0 + step
            if good >= b_hi or v1 - _as_float(good, ib, fb) / t <= q:
                good = min(good, b_hi)
                break
            bad = good
            step *= 2
    while good - bad > 1:  # bad out, good in
        mid = bad + (good - bad) // 2
        if v1 - _as_float(mid, ib, fb) / t <= q:
            good = mid
        else:
            bad = mid
    return _as_float(good, ib, fb)


@njit(**_JIT)
def margin_mask(X, total, q_row, q_class, top1, mask):
    """The margin sets ``{c : s(x_i, c) <= min(q_row[i], q_class[c])}`` of the rows of
    ``X / total[:, None]`` (each row divided as it is read, the same values as dividing the matrix),
    without a ranking: the score of the top class is ``v2 - v1``, of any other ``v1 - v`` (``v1``,
    ``v2`` the row's two largest divided values; the same float64 operations as :func:`_score`).
    One threshold a row: a class is kept when its undivided value is at least
    :func:`_margin_cut`'s (one comparison a class, no division); per-class thresholds compare every
    class's score.  ``total`` of size 0: each row's sum computed here (:func:`pairwise_sum`);
    ``q_class`` of size 0: no per-class thresholds.  Every entry of ``mask`` is written.  Returns
    ``-1``, or the first row that holds a negative value, NaN or infinity, or no mass."""
    n, K = X.shape
    own_total = total.size == 0
    per_class = q_class.size == K
    ib = np.empty(1, dtype=np.int64)
    fb = ib.view(np.float64)
    stack = np.empty((3, 64), dtype=np.int64)  # pairwise_sum's
    partial = np.empty(64)
    B = X.view(np.int64)
    for i in range(n):
        x = X[i]
        b = B[i]
        mask_i = mask[i]
        if own_total:  # numpy's sum of the row (a block of at most 128 values: no call)
            t = _block_sum(x, 0, K) if K <= 128 else pairwise_sum(x, stack, partial)
        else:
            t = total[i]
        if not (t > 0.0 and t < np.inf):  # NaN, infinity or no mass
            return i
        top, neg = 0, False
        for c in range(K):  # vectorised: the largest bits, and a negative value, NaN or infinity
            v = b[c]
            a = v & _ABS
            top = max(top, a)
            neg |= (v != a) & (a != 0)  # a negative zero is zero
        if top >= _INF_BITS or neg:
            return i
        x1 = _as_float(top, ib, fb)
        v1 = x1 / t
        x_lo1 = _quotient_block(x1, t, ib, fb)[0]
        j1 = 0
        for c in range(K):  # the top-ranked class: the first whose divided value is the largest
            if x[c] >= x_lo1:
                j1 = c
                break
        x2 = 0.0
        for c in range(K):
            x2 = max(x2, x[c] if c != j1 else 0.0)
        v2 = x2 / t
        q = q_row[i]
        kept = 0
        if per_class:
            for c in range(K):
                s = (v2 - v1) if c == j1 else (v1 - x[c] / t)
                keep = s <= min(q, q_class[c])
                mask_i[c] = keep
                kept += keep
        else:
            cut = _margin_cut(x1, v1, q, t, ib, fb)
            for c in range(K):  # vectorised
                keep = x[c] >= cut
                mask_i[c] = keep
                kept += keep
            kept -= mask_i[j1]
            mask_i[j1] = v2 - v1 <= q
            kept += mask_i[j1]
        if kept == 0 and top1:
            mask_i[j1] = True
    return -1


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
