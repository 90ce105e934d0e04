r"""Conformal test martingales: an alarm when a stream stops being exchangeable,
:class:`ExchangeabilityMartingale`.

Vovk, Nouretdinov and Gammerman, *Testing exchangeability on-line* (ICML 2003); Vovk, Gammerman and
Shafer, *Algorithmic Learning in a Random World* (2nd ed. 2022), chapter 8; crepes' ``martingales``.

A betting martingale turns a stream of p-values ``p_1, p_2, ...`` into a capital
``S_n = prod_{t <= n} f_t(p_t)``, where each betting function ``f_t >= 0`` (chosen from the past
p-values only) integrates to 1 on [0, 1].  When the p-values are independent and uniform (the
smoothed online conformal p-values of an exchangeable stream are, :func:`svbop.conformal.online_p_values`),
``E[f_t(p_t) | past] = 1``: ``S`` is a non-negative martingale with ``S_0 = 1``, and **Ville's
inequality** gives ``P(sup_n S_n >= 1/delta) <= delta``.  The alarm at ``1/delta`` is a test of
exchangeability of level ``delta``, valid at every step however long the stream is watched.

* ``"simple_jumper"`` (ALRW Algorithm 8.1, crepes' ``SimpleJumper``): three (or more) accounts bet
  with ``f_e(p) = 1 + e (p - 1/2)``, ``e`` in ``epsilons`` (default ``-1, 0, 1``); after every step a
  share ``jump`` of the total capital is redistributed equally among them, so the martingale
  follows a changing direction of the shift (small p-values: labels less conforming than before;
  large ones: more).
* ``"power"``: the mixture over ``e`` in a grid of (0, 1) (``G`` midpoints ``(k - 1/2)/G``, equal
  weights) of the power martingales ``prod_t e p_t^(e - 1)`` (Vovk et al. 2003).  Each has
  ``int_0^1 e p^(e-1) dp = 1``; a finite mixture of martingales is one, so the grid is no
  approximation of the guarantee.  It bets on small p-values only (a stream whose labels become
  less conforming: a shift that hurts the model), and grows faster than the jumper there.

Everything is computed in log space (``log_path_``): the capital can pass ``1e308`` without
overflowing, and ``run`` returns ``exp`` of it (``inf`` beyond the largest float).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["ExchangeabilityMartingale", "MARTINGALES"]

#: The betting schemes of :class:`ExchangeabilityMartingale`.
MARTINGALES = ("simple_jumper", "power")


@njit(nogil=True, cache=True)
def _jumper_log_path(p, eps, jump):
    """The simple jumper's log capital after each p-value (ALRW Algorithm 8.1 in log space)."""
    m = eps.size
    logc = np.full(m, -math.log(m))
    out = np.empty(p.size)
    log_keep = math.log1p(-jump)
    log_share = math.log(jump / m)
    for t in range(p.size):
        top = -np.inf
        for j in range(m):
            f = 1.0 + eps[j] * (p[t] - 0.5)
            logc[j] += math.log(f) if f > 0 else -np.inf
            if logc[j] > top:
                top = logc[j]
        if top == -np.inf:
            total = -np.inf
        else:
            acc = 0.0
            for j in range(m):
                acc += math.exp(logc[j] - top)
            total = top + math.log(acc)
        out[t] = total
        for j in range(m):  # mix: (1 - J) C_j + (J / m) S
            a = log_keep + logc[j]
            b = log_share + total
            hi = max(a, b)
            logc[j] = hi if hi == -np.inf else hi + math.log(math.exp(a - hi) + math.exp(b - hi))
    return out


def _power_log_path(p: np.ndarray, grid: int, block: int = 4096) -> np.ndarray:
    """log of ``(1/G) sum_k prod_{t' <= t} e_k p_t'^(e_k - 1)`` for every ``t``."""
    e = (np.arange(grid) + 0.5) / grid
    with np.errstate(divide="ignore"):
        cum = np.cumsum(np.log(p))  # <= 0; -inf after a p-value of 0
    t = np.arange(1, p.size + 1, dtype=np.float64)
    out = np.empty(p.size)
    for a in range(0, p.size, block):  # (rows x G) at a time
        L = t[a : a + block, None] * np.log(e) + (e - 1.0) * cum[a : a + block, None]
        top = L.max(axis=1)
        with np.errstate(invalid="ignore", under="ignore"):  # the tiny terms of the mixture: 0
            s = np.exp(L - top[:, None]).sum(axis=1)
        out[a : a + block] = np.where(np.isinf(top), top, top + np.log(s)) - math.log(grid)
    return out


class ExchangeabilityMartingale:
    """A conformal test martingale over a stream of p-values, with an alarm at ``1/delta``.

    Parameters
    ----------
    method : {"simple_jumper", "power"}, default "simple_jumper"
        The betting scheme (module docstring).
    delta : float, default 0.01
        The level in (0, 1): on an exchangeable stream the alarm ever sounds with probability at
        most ``delta`` (Ville's inequality).
    jump : float, default 0.01
        ``simple_jumper``: the share of the capital redistributed after each step, in (0, 1).
    epsilons : sequence of float, default (-1, 0, 1)
        ``simple_jumper``: the accounts' bets, each in [-1, 1] (crepes' default is
        ``(-1, -0.5, 0, 0.5, 1)``; Vovk's ``(-1, 0, 1)``).
    grid : int, default 100
        ``power``: how many exponents ``e`` in (0, 1) the mixture holds.

    Attributes
    ----------
    path_ : ndarray
        The capital after each p-value of the last :meth:`run` (``S_1 .. S_n``).
    log_path_ : ndarray
        Its natural logarithm (what is computed).
    alarm_ : int
        The first index ``t`` with ``S_t >= 1/delta``, or ``-1``.

    Examples
    --------
    >>> import numpy as np
    >>> from svbop.conformal import ExchangeabilityMartingale
    >>> p = np.random.default_rng(0).random(1000)            # exchangeable: uniform p-values
    >>> m = ExchangeabilityMartingale("power", delta=0.01)
    >>> path = m.run(p); m.alarm_
    -1
    >>> m.run(np.r_[p, p[:300] ** 4]) is not None and m.alarm_ > 1000   # smaller p-values from 1000 on
    True
    """

    def __init__(self, method: str = "simple_jumper", delta: float = 0.01, *, jump: float = 0.01,
                 epsilons=(-1.0, 0.0, 1.0), grid: int = 100) -> None:
        if not isinstance(method, str) or method not in MARTINGALES:
            raise ValueError(f"method must be one of {', '.join(MARTINGALES)}; got {method!r}")
        for name, value in (("delta", delta), ("jump", jump)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not 0 < value < 1:
                raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
        try:
            e = np.asarray(epsilons, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"epsilons must be numbers in [-1, 1], got {epsilons!r}") from None
        if e.size == 0 or np.isnan(e).any() or np.any(np.abs(e) > 1):
            raise ValueError(f"epsilons must be one or more numbers in [-1, 1] (a bet 1 + e (p - 1/2) >= 0),"
                             f" got {epsilons!r}")
        if isinstance(grid, (bool, np.bool_)) or not isinstance(grid, (int, np.integer)) or grid < 1:
            raise ValueError(f"grid must be an integer >= 1, got {grid!r}")
        self.method = method
        self.delta = float(delta)
        self.jump = float(jump)
        self.epsilons = tuple(e.tolist())
        self.grid = int(grid)

    @property
    def threshold(self) -> float:
        """The alarm line ``1/delta``."""
        return 1.0 / self.delta

    def run(self, p_values) -> np.ndarray:
        """The martingale's path over ``p_values`` (n,), in stream order, from ``S_0 = 1``.

        Returns the capital after each p-value (``path_``) and sets ``alarm_``.
        """
        p = np.asarray(p_values)
        if p.ndim != 1 or not (np.issubdtype(p.dtype, np.floating) or np.issubdtype(p.dtype, np.integer)) \
                or p.dtype == np.bool_:
            raise ValueError(f"p_values must be a 1-d array of numbers in [0, 1], got {p.dtype} of shape {p.shape}")
        p = p.astype(np.float64)
        bad = np.flatnonzero(~((p >= 0) & (p <= 1)))
        if bad.size:
            raise ValueError(f"p_values must lie in [0, 1]: p_values[{int(bad[0])}] = {p[bad[0]]!r}")
        if self.method == "simple_jumper":
            log_path = _jumper_log_path(p, np.asarray(self.epsilons, dtype=np.float64), self.jump)
        else:
            log_path = _power_log_path(p, self.grid)
        self.log_path_ = log_path
        with np.errstate(over="ignore"):
            self.path_ = np.exp(log_path)
        hit = np.flatnonzero(self.path_ >= 1.0 / self.delta)
        self.alarm_ = int(hit[0]) if hit.size else -1
        return self.path_
