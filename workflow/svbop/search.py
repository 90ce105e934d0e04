"""Bayes-optimal set prediction: the paper's Algorithm 1 (SVBOP), batched and streaming.

For a utility ``u(y, Y) = g(|Y|) [y in Y]`` the expected utility of a set is ``g(|Y|) P(Y|x)``
(Eq. 3), so the optimum is a prefix of the classes sorted by decreasing probability (Theorem 1).
Algorithm 1 grows that prefix one class at a time and keeps the best; when ``g`` is
(1/x)-convex it stops at the first decrease (Theorem 2), otherwise it must look at all ``K``
prefixes.

* :func:`predict_sets` is SVBOP-Full for a whole matrix of probabilities at once: vectorised over
  rows, in cache-sized chunks, and sorting only the classes that can matter (see
  :mod:`svbop._prefix`).
* :func:`predict_set_stream` / :func:`svbop` run Algorithm 1 on classes pulled one at a time from a
  provider (the paper's ``initPrediction`` / ``getNextClass``), the form SVBOP-HSG and SVBOP-HF
  plug into.

Ties and rounding.  Algorithm 1 replaces the best prefix by a later one of *equal* expected
utility, so among optimal prefixes the largest wins.  Computed utilities carry rounding errors
(a uniform row gives ``U(s) = s p / s`` only up to a few ulps), so two prefixes whose expected
utilities agree to a relative ``tie_rtol`` (default ``1e-9``) count as equal: a prefix is
accepted when ``U(s) >= (1 - tie_rtol) * max_{j <= s} U(j)``.  Comparing with the running maximum,
not with the previous prefix, keeps near-ties from drifting.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ._arrays import as_host_array
from ._prefix import DEFAULT_CHUNK_BYTES, SortedHeads, as_score_matrix, geometric_widening, prefix_search
from .sets import SetPredictions
from .utilities import Utility, utility

__all__ = [
    "TIE_RTOL",
    "predict_sets",
    "candidate_factor",
    "ClassProvider",
    "SortedProbabilities",
    "StreamResult",
    "predict_set_stream",
    "svbop",
]

#: Relative tolerance under which two expected utilities are a tie (see module docstring).
TIE_RTOL = 1e-9


def candidate_factor(g: np.ndarray, tie_rtol: float = TIE_RTOL) -> float:
    """Smallest ``f`` such that no class with ``P(c|x) < f * max_c P(c|x)`` can be in the optimum.

    Valid for utilities where Theorem 2's early stop is exact.  A class ``q`` at sorted position
    ``s + 1`` is accepted only if ``g(s+1)(C_s + q) >= (1 - rho) g(s) C_s`` with ``C_s`` the mass
    of the first ``s`` classes.  With ``r(s) = (1 - rho) g(s) / g(s+1) - 1`` and
    ``C_s >= p_1 + (s-1) q`` this needs ``q >= p_1 r / (1 - (s-1) r)``; the minimum over ``s`` is
    the factor.  F-beta gives ``1/(1+beta^2)``, precision ``1`` (only ties with the mode).

    Returns 0 when no bound exists (every class may be needed).
    """
    g = np.asarray(g, dtype=np.float64)
    if g.size < 2:
        return 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (1.0 - tie_rtol) * g[:-1] / g[1:] - 1.0
        s = np.arange(1, g.size, dtype=np.float64)
        denom = 1.0 - (s - 1.0) * r
        h = np.where(r <= 0, 0.0, np.where(denom > 0, r / denom, np.inf))
    f = float(np.min(h))
    if np.isinf(f):  # no second class can ever be accepted: only ties with the mode
        return 1.0
    # a little below the bound, so that the scan's certificate settles every row at once
    return min(1.0, f * (1.0 - 1e-6))


def utility_for(u: Utility | str, n_classes: int, tie_rtol: float, owner: str = "model"):
    """Check a utility and a tie tolerance against a model of ``n_classes``; return
    ``(u, g, early)``: the utility, ``g(1..K)`` as float64 and whether Theorem 2's stop is exact."""
    u = utility(u)
    K = u.resolve_K(n_classes)
    if K != n_classes:
        raise ValueError(f"utility is for K={K} classes, the {owner} has {n_classes}")
    if not (0 <= tie_rtol < 1):
        raise ValueError(f"tie_rtol must be in [0, 1), got {tie_rtol!r}")
    g = np.ascontiguousarray(u.values(K), dtype=np.float64)
    return u, g, bool(u.properties(K).early_stop_valid)


def _scan(V: np.ndarray, counts: np.ndarray, g: np.ndarray, tie_rtol: float):
    """Algorithm 1 on sorted prefixes: cumulative mass, utilities, running best, acceptance."""
    W = V.shape[1]
    valid = np.arange(W) < counts[:, None]
    cum = np.cumsum(V, axis=1)
    U = np.where(valid, cum * g[:W], -np.inf)
    best = np.maximum.accumulate(U, axis=1)
    ok = U >= (1.0 - tie_rtol) * best
    return cum, U, best, ok, valid


class _Algorithm1:
    """Decision rule of :func:`predict_sets` for :func:`svbop._prefix.prefix_search`."""

    def __init__(self, g: np.ndarray, early_stop: bool, tie_rtol: float):
        self.g = np.concatenate([g, np.zeros(g.size + 8)])  # padded: widths may exceed K
        self.gK = g
        self.early_stop = early_stop
        self.rho = tie_rtol

    def __call__(self, heads: SortedHeads, t: np.ndarray, total: np.ndarray, K: int):
        c = heads.counts
        ar = np.arange(c.size)
        cum, U, best, ok, valid = _scan(heads.values, c, self.g, self.rho)
        last = c - 1
        if self.early_stop:
            fail = valid & ~ok
            has_fail = fail.any(axis=1)
            size = np.where(has_fail, fail.argmax(axis=1), c)
            # Every class left out is < t: if even t cannot make prefix c+1 acceptable, the scan
            # stops at c (Theorem 2 then rules out all longer prefixes).
            nxt = self.g[np.minimum(c, K - 1)] * (cum[ar, last] + t)
            settled = has_fail | (c >= K) | (nxt < (1.0 - self.rho) * best[ar, last])
        else:
            size = ok.shape[1] - np.argmax(ok[:, ::-1], axis=1)
            settled = c >= K
            open_ = np.flatnonzero(~settled)
            if open_.size:
                settled[open_] = self._bound_settles(
                    c[open_], cum[open_, last[open_]], t[open_], total[open_], best[open_, last[open_]], K
                )
        value = U[ar, size - 1] / total
        return settled, size, value

    def _bound_settles(self, c, C, t, total, best, K):
        """Non-convex g: no prefix longer than ``c`` can reach ``best`` (with mass < t per class)."""
        j = np.arange(K)
        mass = np.minimum(total[:, None], C[:, None] + (j + 1 - c[:, None]) * t[:, None])
        bound = np.where(j >= c[:, None], self.gK * mass, -np.inf).max(axis=1)
        return bound < (1.0 - self.rho) * best


def predict_sets(
    P,
    u: Utility | str,
    *,
    tie_rtol: float = TIE_RTOL,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    n_jobs: int | None = None,
) -> SetPredictions:
    """Bayes-optimal set for every row of a probability matrix (SVBOP-Full inference).

    Parameters
    ----------
    P : array-like of shape (n_samples, n_classes)
        Class probabilities ``P(c|x)``, or any non-negative scores proportional to them per row
        (e.g. unnormalised ``exp(w.x + b)``): the sets are the same.  A numpy array, or a torch
        tensor (CPU or GPU: copied to the host once), JAX array, pandas DataFrame or any object
        with ``__array__`` or ``__dlpack__``, with the same sets as its numpy array.  float32
        stays float32 (sums and scans run in float64), float16 becomes float64.
    u : Utility or str
        The set utility, e.g. ``svbop.utility("fbeta:beta=1")`` or the spec string itself.
    tie_rtol : float, default 1e-9
        Relative tolerance under which expected utilities tie (a tie goes to the larger set, as
        in Algorithm 1).
    chunk_bytes : int
        Memory bound: rows are processed in chunks of about this many bytes of ``P``.
    n_jobs : int or None
        Threads processing chunks in parallel (scikit-learn convention: ``None``/1 one thread,
        -1 all cores).

    Returns
    -------
    SetPredictions
        Set ``i`` holds the chosen classes in decreasing probability (ties: lower class index
        first); ``.expected_utility[i]`` is ``g(|Y|) P(Y|x)`` with ``P`` normalised per row.

    Notes
    -----
    Exact for every utility: Theorem 2's early stop is used only when ``u`` is positive,
    non-increasing and (1/x)-convex for this ``K`` (checked exactly by
    :meth:`Utility.properties`).  Otherwise all ``K`` prefixes are in play; a row is settled
    early only when the bound ``g(s') min(1, C_s + (s'-s) t)`` proves no longer prefix can win.

    Examples
    --------
    >>> import numpy as np, svbop
    >>> P = np.array([[0.5, 0.3, 0.2], [0.9, 0.05, 0.05]])
    >>> sets = svbop.predict_sets(P, "fbeta:beta=1")
    >>> sets.to_list()
    [[0, 1], [0]]
    """
    P_arr = as_score_matrix(P, "P")
    K = P_arr.shape[1]
    u = utility(u)
    K = u.resolve_K(K)
    if not (0 <= tie_rtol < 1):
        raise ValueError(f"tie_rtol must be in [0, 1), got {tie_rtol!r}")
    g = u.values(K)
    early = u.properties(K).early_stop_valid
    f = candidate_factor(g, tie_rtol) if early else 0.0
    first = lambda X, rowmax, total: rowmax * (f if f > 0 else 1e-2)  # noqa: E731
    sets, value = prefix_search(
        P_arr,
        _Algorithm1(g, early, tie_rtol),
        first,
        geometric_widening(1 / 16, rounds=3),
        name="P",
        chunk_bytes=chunk_bytes,
        n_jobs=n_jobs,
    )
    sets.expected_utility = value
    return sets


# --- streaming form ------------------------------------------------------------------------------


class ClassProvider(Protocol):
    """A probabilistic classifier that delivers classes one at a time (the paper's ``PC``).

    ``init_prediction(x)`` prepares the query for one instance; ``get_next_class()`` returns the
    next ``(class, probability)`` pair in decreasing probability, or ``None`` when exhausted.
    Probabilities may be unnormalised scores (then the stream's ``total`` is unknown).
    """

    def init_prediction(self, x) -> None: ...

    def get_next_class(self) -> tuple[int, float] | None: ...


class SortedProbabilities:
    """SVBOP-Full's provider (Algorithms 2 and 3): all ``P(c|x)``, sorted, popped in order.

    ``init_prediction`` takes the probability vector of one instance.
    """

    def __init__(self) -> None:
        self._order = np.empty(0, dtype=np.int64)
        self._p = np.empty(0)
        self._next = 0

    def init_prediction(self, x) -> None:
        p = as_host_array(x, "x").astype(np.float64, copy=False)  # numpy, torch, JAX, pandas
        if p.ndim != 1:
            raise ValueError(f"SortedProbabilities.init_prediction takes one row, got shape {p.shape}")
        self._order = np.argsort(-p, kind="stable")
        self._p = p
        self._next = 0

    def get_next_class(self) -> tuple[int, float] | None:
        if self._next >= self._order.size:
            return None
        c = int(self._order[self._next])
        self._next += 1
        return c, float(self._p[c])


@dataclass(frozen=True)
class StreamResult:
    """Outcome of Algorithm 1 on a stream of classes.

    Attributes
    ----------
    classes : ndarray of int
        The chosen set, in the order the classes were delivered.
    expected_utility : float
        ``g(|Y|) * mass(Y) / total`` (with ``total = 1`` when the stream's total is unknown,
        i.e. in the units of the delivered scores).
    n_pulled : int
        How many classes were pulled from the provider before stopping.
    """

    classes: np.ndarray
    expected_utility: float
    n_pulled: int


def predict_set_stream(
    classes: Iterable[tuple[int, float]],
    u: Utility | str,
    K: int | None = None,
    *,
    total: float | None = None,
    require_sorted: bool = True,
    tie_rtol: float = TIE_RTOL,
) -> StreamResult:
    """Algorithm 1 on ``(class, probability)`` pairs pulled lazily from ``classes``.

    Parameters
    ----------
    classes : iterable of (int, float)
        Classes in decreasing probability (or proportional scores).  Pulled one at a time; the
        iteration stops as soon as the answer is certain, so a lazy provider does less work.
    u : Utility or str
        The set utility.
    K : int, optional
        Number of classes (needed when ``u`` depends on ``K`` and to decide early stopping).
    total : float, optional
        Sum of all ``K`` scores, when known (1 for probabilities).  Lets non-(1/x)-convex
        utilities stop early and scales the reported expected utility.
    require_sorted : bool, default True
        Raise ``ValueError`` if a delivered probability exceeds the previous one.  Approximate
        providers whose order is not guaranteed can pass ``False``: the result is then what
        Algorithm 1 returns on the classes in the order they came.
    tie_rtol : float
        Tie tolerance, as in :func:`predict_sets`.

    Returns
    -------
    StreamResult
    """
    u = utility(u)
    if K is None:
        K = u.K
    if K is None:
        raise ValueError("predict_set_stream needs K (the number of classes)")
    K = u.resolve_K(K)
    g = u.values(K)
    early = u.properties(K).early_stop_valid
    # suffix maxima of g: an upper bound of g over all longer prefixes
    g_suffix = np.maximum.accumulate(g[::-1])[::-1]
    chosen: list[int] = []
    best_size, best_u, running_max = 0, 0.0, -np.inf
    mass, prev, n = 0.0, np.inf, 0
    it: Iterator[tuple[int, float]] = iter(classes)
    for c, p in it:
        p = float(p)
        if not (p >= 0) or not np.isfinite(p):
            raise ValueError(f"stream delivered class {c} with invalid probability {p!r}")
        if require_sorted and p > prev:
            raise ValueError(
                f"stream is not in decreasing order: class {c} has {p!r} after {prev!r}"
                " (pass require_sorted=False to accept it)"
            )
        if n >= K:
            raise ValueError(f"stream delivered more than K={K} classes")
        prev = p
        n += 1
        chosen.append(int(c))
        mass += p
        U = g[n - 1] * mass
        if U >= (1.0 - tie_rtol) * running_max:
            best_size, best_u = n, U
            running_max = max(running_max, U)
        elif early:
            break
        if n < K and total is not None and not early:
            if g_suffix[n] * total < (1.0 - tie_rtol) * running_max:
                break
    if n == 0:
        raise ValueError("stream delivered no class")
    scale = 1.0 if total is None else float(total)
    return StreamResult(np.asarray(chosen[:best_size], dtype=np.int64), best_u / scale, n)


def svbop(provider: ClassProvider, x, u: Utility | str, K: int | None = None, **kwargs) -> StreamResult:
    """The paper's Algorithm 1 with a class provider: ``init_prediction(x)``, then pull classes.

    Keyword arguments go to :func:`predict_set_stream`.
    """
    provider.init_prediction(x)

    def pull():
        while (item := provider.get_next_class()) is not None:
            yield item

    return predict_set_stream(pull(), u, K, **kwargs)
