"""Set-based utilities g(s) of the paper's Table 2 and their properties.

A set-based utility rewards a predicted set ``Y`` with ``u(y, Y) = g(|Y|)`` when the true class ``y``
is in ``Y`` and with 0 otherwise (the paper's Eq. 2).  The sequence ``g(1), ..., g(K)`` decides
everything: this module builds it from a spec string such as ``"fbeta:beta=1"`` and checks the
paper's four properties (Section 2.2) exactly, over every ``s`` up to ``K``.

Exactness and cost: every registered family's properties are decided in closed form, from its
parameters and ``K`` with a handful of exact evaluations whatever ``K`` is (the proofs are in
comments next to each family's ``_closed_form``), so ``properties(K)`` costs microseconds even at
``K = 2,000,000`` and is exact (precision and F-beta satisfy the (1/x)-convexity inequality with
*equality* for every ``s``).  A family without closed forms (a subclass of :class:`Utility`) is
checked by :func:`_checked_properties`: a vectorised float64 test over every ``s`` with an error
bound, falling back to ``_g_exact`` only where the float margin is within that bound.  Exact
values are rationals for the rational families (precision, recall, F-beta, credal, reject,
generalised reject with an integer ``beta`` up to 1000) and 60-digit decimals compared with a
tolerance of 1e-45 for the transcendental ones (exponential, logarithmic, generalised reject with
another ``beta``), where such a check is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import lru_cache
from typing import Callable, ClassVar, Mapping

import numpy as np

__all__ = [
    "Utility",
    "UtilityProperties",
    "utility",
    "UTILITY_FAMILIES",
    "STANDARD_UTILITIES",
]

#: Spec strings of the utilities shown by ``svbop utilities`` and the paper's Figure 1.
STANDARD_UTILITIES = (
    "precision",
    "recall",
    "fbeta:beta=1",
    "fbeta:beta=5",
    "credal:delta=1.6,gamma=0.6",
    "credal:delta=2.2,gamma=1.2",
    "exp:delta=1",
    "log",
    "reject:alpha=0.3",
    "genreject:alpha=0.5,beta=2",
)

_DECIMAL_DIGITS = 60
_INEXACT_TOL = Fraction(1, 10**45)
_RANGE_TOL = 1e-12  # float rounding allowed when checking 0 <= g(s) <= 1


@dataclass(frozen=True)
class UtilityProperties:
    """The paper's four properties of a utility for a given number of classes ``K``.

    Attributes
    ----------
    K : int
        Number of classes the sequence ``g(1..K)`` was checked for.
    strictly_decreasing : bool
        ``g(s) > g(s+1)`` for every ``s < K``.
    g1_is_one : bool
        ``g(1) = 1``.
    lower_bounded_by_precision : bool
        ``g(s) >= 1/s`` for every ``s <= K``.
    one_over_x_convex : bool
        The paper's Definition 1: ``g > 0`` and ``1/g(s+1) <= (1/g(s) + 1/g(s+2)) / 2`` for every
        ``s <= K-2``.  A sequence that touches zero is not (1/x)-convex (``1/g`` is undefined).
    early_stop_valid : bool
        Whether Theorem 2's early stop is exact: ``g`` positive, non-increasing and
        (1/x)-convex.  Non-increasing (rather than strictly decreasing) suffices because a
        (1/x)-convex sequence that drops once keeps dropping.
    exact : bool
        ``True`` when the family's values are rationals, so that every comparison is exact;
        ``False`` for the transcendental families, whose closed forms are exact too but whose few
        evaluated terms, where any are needed, are 60-digit decimals compared within 1e-45.
    """

    K: int
    strictly_decreasing: bool
    g1_is_one: bool
    lower_bounded_by_precision: bool
    one_over_x_convex: bool
    early_stop_valid: bool
    exact: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "K": self.K,
            "strictly_decreasing": self.strictly_decreasing,
            "g1_is_one": self.g1_is_one,
            "lower_bounded_by_precision": self.lower_bounded_by_precision,
            "one_over_x_convex": self.one_over_x_convex,
            "early_stop_valid": self.early_stop_valid,
            "exact": self.exact,
        }


@dataclass(frozen=True)
class _ParamSpec:
    name: str
    default: str | None = None
    check: Callable[[Fraction], bool] = lambda v: True
    requirement: str = ""


@dataclass(frozen=True, eq=False)
class Utility:
    """A set-based utility ``u(y, Y) = g(|Y|) * [y in Y]``.

    Build one with :func:`utility` from a spec string.  Subclasses implement one family each.

    Parameters
    ----------
    params : mapping of str to Fraction
        The family's parameters, as exact rationals (spec strings are parsed exactly, so
        ``delta=2.2`` is 11/5).
    K : int or None
        Number of classes, when the utility depends on it or should be bound to it.
    """

    params: Mapping[str, Fraction]
    K: int | None = None
    _raw: Mapping[str, str] = field(default_factory=dict, repr=False)

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    formula: ClassVar[str] = ""
    param_specs: ClassVar[tuple[_ParamSpec, ...]] = ()
    needs_K: ClassVar[bool] = False

    # --- to be provided by the families -----------------------------------------------------
    def _g(self, s: np.ndarray, K: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _g_exact(self, s: int, K: int) -> Fraction:  # pragma: no cover - abstract
        raise NotImplementedError

    def _closed_form(self, K: int) -> dict[str, bool]:
        """Properties decided from the parameters and ``K`` alone (keys of ``_PROPERTY_KEYS``);
        the others are checked term by term by :func:`_checked_properties`."""
        return {}

    def _g_error(self, s: np.ndarray, K: int, g: np.ndarray) -> np.ndarray:
        """A bound on ``|_g(s, K) - g(s)|`` (the float64 values against the exact ones).

        The default, 64 units in the last place of each value plus the smallest subnormal, fits
        a formula of a few correctly rounded operations without cancellation; a family whose
        float values are less accurate must override it (a bound too small can decide a
        property wrongly; one too large only costs exact evaluations)."""
        return 64 * np.spacing(np.abs(g)) + 5e-324

    @property
    def is_exact(self) -> bool:
        """Whether :meth:`properties` is decided in exact rational arithmetic."""
        return True

    # --- public API ----------------------------------------------------------------------------
    @property
    def spec(self) -> str:
        """Canonical spec string, e.g. ``"credal:delta=2.2,gamma=1.2"``."""
        if not self.param_specs:
            return self.name
        body = ",".join(f"{p.name}={self._raw[p.name]}" for p in self.param_specs)
        return f"{self.name}:{body}"

    @property
    def label(self) -> str:
        """Short label as in the paper's tables, e.g. ``"fbeta_1"``, ``"credal_2.2_1.2"``."""
        if not self.param_specs:
            return self.name
        return "_".join([self.name] + [self._raw[p.name] for p in self.param_specs])

    def __repr__(self) -> str:
        k = "" if self.K is None else f", K={self.K}"
        return f"svbop.utility({self.spec!r}{k})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Utility) and (self.spec, self.K) == (other.spec, other.K)

    def __hash__(self) -> int:
        return hash((self.spec, self.K))

    def with_K(self, K: int) -> "Utility":
        """Return the same utility bound to ``K`` classes (checks the values are in [0, 1])."""
        return type(self)(params=self.params, K=_check_K(K), _raw=self._raw)

    def resolve_K(self, K: int | None = None) -> int:
        """The number of classes to use: ``K`` if given, else the bound one; both must agree."""
        if K is not None:
            K = _check_K(K)
            if self.K is not None and self.K != K:
                raise ValueError(
                    f"K mismatch: utility {self.spec!r} is bound to K={self.K} but K={K} was given"
                )
            return K
        if self.K is None:
            raise ValueError(f"utility {self.spec!r} needs K (the number of classes); none was given")
        return self.K

    def values(self, K: int | None = None) -> np.ndarray:
        """``g(1), ..., g(K)`` as a float64 array of shape ``(K,)``."""
        K = self.resolve_K(K)
        return _values_cached(self, K).copy()

    def __call__(self, s: int | np.ndarray, K: int | None = None) -> np.ndarray | float:
        """Evaluate ``g(s)`` for set size(s) ``s`` in ``1..K``."""
        if K is None and self.K is None and not self.needs_K:
            s_arr = np.asarray(s)
            if np.any(s_arr < 1):
                raise ValueError(f"set sizes must be >= 1, got min {s_arr.min()}")
            out = self._g(s_arr.astype(np.float64), 0)
            return float(out) if np.ndim(out) == 0 else out
        g = _values_cached(self, self.resolve_K(K))
        s_arr = np.asarray(s)
        if np.any((s_arr < 1) | (s_arr > g.size)):
            raise ValueError(f"set sizes must be in 1..{g.size}, got {s}")
        out = g[s_arr - 1]
        return float(out) if np.ndim(out) == 0 else out

    def exact_values(self, K: int | None = None) -> list[Fraction]:
        """``g(1..K)`` as exact rationals (60-digit approximations for transcendental families)."""
        K = self.resolve_K(K)
        return list(_exact_cached(self, K))

    def properties(self, K: int | None = None) -> UtilityProperties:
        """Check the paper's four properties (and early-stop validity) over ``s = 1..K``."""
        return _properties_cached(self, self.resolve_K(K))


def _check_K(K: object) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or int(K) < 1:
        raise ValueError(f"K (number of classes) must be a positive integer, got {K!r}")
    return int(K)


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


# --- the eight families --------------------------------------------------------------------


class Precision(Utility):
    name = "precision"
    title = "Precision"
    formula = "1/s"

    def _g(self, s, K):
        return 1.0 / s

    def _g_exact(self, s, K):
        return Fraction(1, s)

    def _closed_form(self, K):
        # 1/s > 1/(s+1) > 0; g(1) = 1; g(s) = 1/s; 1/g(s) = s is linear: equality in Definition 1.
        return dict(strictly=True, nonincreasing=True, g1=True, lower=True, positive=True, convex=True)


class Recall(Utility):
    name = "recall"
    title = "Recall"
    formula = "1"

    def _g(self, s, K):
        return np.ones_like(s, dtype=np.float64)

    def _g_exact(self, s, K):
        return Fraction(1)

    def _closed_form(self, K):
        # constant 1: decreasing only vacuously (K = 1); 1 >= 1/s; 1/g constant, so convex.
        return dict(strictly=K == 1, nonincreasing=True, g1=True, lower=True, positive=True, convex=True)


class FBeta(Utility):
    name = "fbeta"
    title = "F-beta measure"
    formula = "(1+beta^2)/(s+beta^2)"
    param_specs = (_ParamSpec("beta", "1", lambda v: v >= 0, "beta >= 0"),)

    def _g(self, s, K):
        b = float(self.params["beta"])
        b2 = b * b  # inf for beta > 1.3e154: g is then recall's 1
        return 1.0 - (s - 1.0) / (s + b2)  # = (1 + b2) / (s + b2), without inf / inf

    def _g_exact(self, s, K):
        b2 = self.params["beta"] ** 2
        return (1 + b2) / (s + b2)

    def _closed_form(self, K):
        # With b = beta^2 >= 0 (a finite rational): g(s) - g(s+1) = (1+b)/((s+b)(s+1+b)) > 0;
        # g(1) = 1; g(s) - 1/s = b (s-1) / (s (s+b)) >= 0; 1/g(s) = (s+b)/(1+b) is linear in s, so
        # Definition 1 holds with equality for every K.
        return dict(strictly=True, nonincreasing=True, g1=True, lower=True, positive=True, convex=True)


class Credal(Utility):
    name = "credal"
    title = "Credal utility"
    formula = "delta/s - gamma/s^2"
    param_specs = (_ParamSpec("delta"), _ParamSpec("gamma"))

    def _g(self, s, K):
        d, g = float(self.params["delta"]), float(self.params["gamma"])
        return d / s - g / (s * s)

    def _g_exact(self, s, K):
        return self.params["delta"] / s - self.params["gamma"] / (s * s)

    def _closed_form(self, K):
        # g(s) = (d s - c) / s^2 with d = delta, c = gamma (exact rationals).
        d, c = self.params["delta"], self.params["gamma"]
        # g > 0 on 1..K iff the linear d s - c is > 0 at both ends.
        positive = d - c > 0 and d * K - c > 0
        # g(s) - g(s+1) = h(s) / (s^2 (s+1)^2) with h(s) = d s^2 + (d - 2c) s - c.  The minimum of h
        # over the integers of [1, K-1] is at an end, or (d > 0: a convex parabola) at an integer
        # next to its vertex (2c - d) / (2d): h is evaluated exactly at those at most four points.
        h = lambda s: d * s * s + (d - 2 * c) * s - c  # noqa: E731
        points = {1, K - 1}
        if d > 0:
            v = (2 * c - d) / (2 * d)
            points |= {v.__floor__(), v.__ceil__()}
        hmin = min((h(s) for s in points if 1 <= s <= K - 1), default=None)
        # g(s) >= 1/s iff (d - 1) s - c >= 0: linear in s, so at s = 1 and s = K.
        lower = d - 1 - c >= 0 and (d - 1) * K - c >= 0
        # Where g > 0 on [1, K], 1/g(s) = s^2 / (d s - c) is convex in the real s: for d != 0 it is
        # s/d + c/d^2 + (c/d)^2 / (d s - c), a line plus a positive multiple of the reciprocal of a
        # positive linear function; for d = 0 (then c < 0) it is -s^2/c.  A convex function meets
        # Definition 1 at every s (the midpoint inequality), so positive implies convex.
        return dict(
            strictly=hmin is None or hmin > 0,
            nonincreasing=hmin is None or hmin >= 0,
            g1=d - c == 1,
            lower=lower,
            positive=positive,
            convex=True,
        )


class Exponential(Utility):
    name = "exp"
    title = "Exponential utility"
    formula = "1 - exp(-delta/s)"
    param_specs = (_ParamSpec("delta", None, lambda v: v > 0, "delta > 0"),)

    @property
    def is_exact(self) -> bool:
        return False

    def _g(self, s, K):
        return -np.expm1(-float(self.params["delta"]) / s)

    def _g_exact(self, s, K):
        with localcontext() as ctx:
            ctx.prec = _DECIMAL_DIGITS
            return Fraction(1 - (-_dec(self.params["delta"]) / s).exp())

    def _closed_form(self, K):
        # g(s) = phi(delta/s) with phi(y) = 1 - exp(-y), delta > 0: positive and strictly decreasing
        # in s; g(1) = 1 - exp(-delta) < 1 = 1/1, so g(1) != 1 and g(1) < 1/s at s = 1.
        # Convexity: 1/g(s) = f(s) = F(delta/s), F(y) = 1/(1 - exp(-y)).  f'(s) = -y^2 F'(y) / delta
        # with y = delta/s, and y^2 F'(y) = -(z / sinh z)^2 with z = y/2, increasing in y because
        # z/sinh z decreases for z > 0; y decreases as s grows, so f' increases: f is convex in s,
        # and a convex function meets Definition 1 at every s.
        return dict(strictly=True, nonincreasing=True, g1=False, lower=False, positive=True, convex=True)


class Logarithmic(Utility):
    name = "log"
    title = "Logarithmic utility"
    formula = "log(1 + 1/s)"

    @property
    def is_exact(self) -> bool:
        return False

    def _g(self, s, K):
        return np.log1p(1.0 / s)

    def _g_exact(self, s, K):
        with localcontext() as ctx:
            ctx.prec = _DECIMAL_DIGITS
            return Fraction((1 + Decimal(1) / s).ln())

    def _closed_form(self, K):
        # g(s) = log(1 + 1/s): positive, strictly decreasing, g(1) = log 2 < 1 (so g(1) != 1 and
        # g(1) < 1/1).  1/g(s) = f(s) = F(1/s) with F(y) = 1/log(1 + y): f'(s) = -y^2 F'(y) with
        # y = 1/s, and y^2 F'(y) = -(2 sinh(t/2) / t)^2 with t = log(1 + y), decreasing in y because
        # sinh(u)/u increases for u > 0; as s grows y falls, so f' falls: f is strictly concave, and
        # Definition 1 fails strictly at every s.  It holds vacuously for K <= 2.
        return dict(strictly=True, nonincreasing=True, g1=False, lower=False, positive=True, convex=K <= 2)


class Reject(Utility):
    name = "reject"
    title = "Reject option"
    formula = "1 if s=1; 1-alpha if s=K; 0 otherwise"
    param_specs = (_ParamSpec("alpha", None, lambda v: 0 <= v <= 1, "0 <= alpha <= 1"),)
    needs_K = True

    def _g(self, s, K):
        out = np.zeros_like(s, dtype=np.float64)
        out[s == K] = 1.0 - float(self.params["alpha"])
        out[s == 1] = 1.0
        return out

    def _g_exact(self, s, K):
        if s == 1:
            return Fraction(1)
        return 1 - self.params["alpha"] if s == K else Fraction(0)

    def _closed_form(self, K):
        # g = (1, 0, ..., 0, 1 - alpha): up to K = 3 the values themselves (three terms), beyond
        # that the same as K = 3, since the zeros in the middle decide every property.
        return _term_properties([self._g_exact(s, K) for s in (1, 2, K)] if K > 3 else self.exact_values(K), 0)


class GeneralisedReject(Utility):
    name = "genreject"
    title = "Generalised reject option"
    formula = "1 - alpha*((s-1)/(K-1))^beta"
    param_specs = (
        _ParamSpec("alpha", None, lambda v: 0 <= v <= 1, "0 <= alpha <= 1"),
        _ParamSpec("beta", None, lambda v: v > 0, "beta > 0"),
    )
    needs_K = True

    @property
    def is_exact(self) -> bool:
        return self.params["beta"].denominator == 1 and self.params["beta"] <= _MAX_EXACT_POWER

    def _g(self, s, K):
        if K == 1:
            return np.ones_like(s, dtype=np.float64)
        a, b = float(self.params["alpha"]), float(self.params["beta"])
        return 1.0 - a * ((s - 1.0) / (K - 1.0)) ** b

    def _g_exact(self, s, K):
        if K == 1 or s == 1:
            return Fraction(1)
        a, b = self.params["alpha"], self.params["beta"]
        x = Fraction(s - 1, K - 1)
        if b.denominator == 1 and b <= _MAX_EXACT_POWER:
            return 1 - a * x ** int(b)
        with localcontext() as ctx:
            ctx.prec = _DECIMAL_DIGITS
            return 1 - a * Fraction(_dec(x) ** _dec(b))

    def _closed_form(self, K):
        # g(s) = 1 - a x_s^b with x_s = (s-1)/(K-1) in [0, 1], 0 <= a <= 1, b > 0 (exact rationals).
        a, b = self.params["alpha"], self.params["beta"]
        if K <= 4:  # four terms at most: evaluate them
            return _term_properties(self.exact_values(K), 0 if self.is_exact else _INEXACT_TOL)
        # x_s^b increases with s: strictly decreasing iff a > 0; g(1) = 1; g > 0 iff g(K) = 1 - a > 0.
        # g(s) >= 1/s: equality at s = 1; for s >= 2 it reads a psi(s) <= (K-1)^b with
        # psi(s) = s (s-1)^(b-1), whose log-derivative (b s - 1) / (s (s-1)) changes sign at most
        # once, from - to +: psi's maximum over [2, K] is at s = 2 (psi = 2) or s = K
        # (a K (K-1)^(b-1) <= (K-1)^b iff a K <= K - 1).  2 a <= (K-1)^b holds when b >= 1 (K >= 5);
        # otherwise it is one comparison of two numbers (g(2) >= 1/2, the same inequality).
        tol = 0 if self.is_exact else _INEXACT_TOL
        g = [self._g_exact(s, K) for s in (1, 2, 3, 4)] if b < 1 else None  # the terms needed below
        lower = a * K <= K - 1 and (b >= 1 or g[1] - Fraction(1, 2) >= -tol)
        # Convexity (where g > 0): 1/g(s) = f(x_s) with f(x) = 1/(1 - a x^b), and f''(x) has the sign
        # of (b - 1) + a (1 + b) x^b: f is convex on [0, 1] for b >= 1.  For b < 1 it is concave on
        # [0, x0] and convex beyond, x0 = ((1-b) / (a (1+b)))^(1/b): a triple of grid points lying
        # in [0, x0] breaks Definition 1 (the first does if any does: x0 >= x_3) and triples
        # starting at or beyond x0 meet it, so only the triples centred at s = 2 and s = 3 can
        # decide: they are checked term by term.
        positive = a < 1
        convex = True
        if positive and b < 1:
            convex = all(g[i] * g[i + 1] + g[i + 2] * g[i + 1] - 2 * g[i] * g[i + 2] >= -tol for i in (0, 1))
        return dict(strictly=a > 0, nonincreasing=True, g1=True, lower=lower, positive=positive, convex=convex)


#: Registered families by spec name.
UTILITY_FAMILIES: dict[str, type[Utility]] = {
    cls.name: cls
    for cls in (Precision, Recall, FBeta, Credal, Exponential, Logarithmic, Reject, GeneralisedReject)
}

# --- construction from a spec string -------------------------------------------------------

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
#: Parameters must be double-precision numbers: 0, or a magnitude in [smallest normal, largest].
_FLOAT_MIN, _FLOAT_MAX = Decimal(repr(float(np.finfo(np.float64).tiny))), Decimal(repr(float(np.finfo(np.float64).max)))
#: Integer exponents up to this are raised exactly (rationals); larger ones through decimals.
_MAX_EXACT_POWER = 1000


def _canonical_number(text: str) -> str:
    d = Decimal(text).normalize()
    fixed = format(d, "f")
    return fixed if len(fixed) <= 24 else format(d, "e")  # labels name files: 1e-300, not 300 zeros


def utility(spec: str | Utility, K: int | None = None) -> Utility:
    """Build a set utility from a spec string.

    Parameters
    ----------
    spec : str or Utility
        ``"name"`` or ``"name:key=value,key=value"``.  Names: ``precision``, ``recall``,
        ``fbeta`` (``beta``, default 1), ``credal`` (``delta``, ``gamma``), ``exp`` (``delta``),
        ``log``, ``reject`` (``alpha``), ``genreject`` (``alpha``, ``beta``).  A
        :class:`Utility` is returned as is (bound to ``K`` if given).
    K : int, optional
        Number of classes.  Required by ``reject`` and ``genreject`` before values can be
        computed; when given, the values ``g(1..K)`` are checked to lie in [0, 1].

    Returns
    -------
    Utility

    Raises
    ------
    ValueError
        Unknown family, malformed spec, unknown/missing/duplicate parameter, a parameter out of
        its domain, or values of ``g`` outside [0, 1].

    Examples
    --------
    >>> u = utility("fbeta:beta=1")
    >>> u(np.array([1, 2, 3]))
    array([1.        , 0.66666667, 0.5       ])
    >>> utility("credal:delta=2.2,gamma=1.2", K=100).properties().one_over_x_convex
    True
    """
    if isinstance(spec, Utility):
        return spec if K is None or spec.K == K else spec.with_K(spec.resolve_K(K))
    if not isinstance(spec, str):
        raise ValueError(f"utility spec must be a string like 'fbeta:beta=1', got {spec!r}")
    text = spec.strip()
    name, colon, body = text.partition(":")
    name = name.strip().lower()
    if name not in UTILITY_FAMILIES:
        raise ValueError(
            f"unknown utility {name!r} in spec {spec!r}; known: {', '.join(UTILITY_FAMILIES)}"
        )
    cls = UTILITY_FAMILIES[name]
    given: dict[str, str] = {}
    if body.strip():
        for item in body.split(","):
            key, eq, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not key or not value:
                raise ValueError(
                    f"malformed utility spec {spec!r}: expected 'name:key=value,...', got item {item!r}"
                )
            if key in given:
                raise ValueError(f"duplicate parameter {key!r} in utility spec {spec!r}")
            given[key] = value
    elif colon:
        raise ValueError(f"malformed utility spec {spec!r}: nothing after ':'")
    known = {p.name for p in cls.param_specs}
    for key in given:
        if key not in known:
            expected = ", ".join(sorted(known)) or "no parameters"
            raise ValueError(
                f"unknown parameter {key!r} for utility {name!r} in spec {spec!r} (expected: {expected})"
            )
    params: dict[str, Fraction] = {}
    raw: dict[str, str] = {}
    for p in cls.param_specs:
        if p.name not in given:
            if p.default is None:
                raise ValueError(f"utility {name!r} needs parameter {p.name!r} (spec {spec!r})")
            given[p.name] = p.default
        value = given[p.name]
        if not _NUMBER.match(value):
            raise ValueError(
                f"parameter {p.name!r} of utility spec {spec!r} is not a finite number: {value!r}"
            )
        decimal = Decimal(value)  # exact and instant, also for 1e999999999
        if decimal != 0 and not _FLOAT_MIN <= decimal.copy_abs() <= _FLOAT_MAX:
            raise ValueError(
                f"parameter {p.name}={value} of utility spec {spec!r} is not a double-precision number: "
                f"need 0 or a magnitude between {float(_FLOAT_MIN):.3g} and {float(_FLOAT_MAX):.3g}"
            )
        frac = Fraction(decimal)
        if not p.check(frac):
            raise ValueError(
                f"parameter {p.name}={value} of utility spec {spec!r} is out of range: need {p.requirement}"
            )
        params[p.name] = frac
        raw[p.name] = _canonical_number(value)
    u = cls(params=params, K=None, _raw=raw)
    # Fail early on parameters that leave g outside [0, 1]: over 1..K, or a default range.
    _check_range(u, K if K is not None else (None if cls.needs_K else 1000))
    return u if K is None else u.with_K(K)


def _check_range(u: Utility, K: int | None) -> None:
    if K is None:
        return
    g = u._g(np.arange(1, K + 1, dtype=np.float64), K)
    bad = np.flatnonzero(~((g >= -_RANGE_TOL) & (g <= 1 + _RANGE_TOL)))
    if bad.size:
        s = int(bad[0]) + 1
        raise ValueError(
            f"utility {u.spec!r} leaves [0, 1] at set size s={s}: g({s})={g[bad[0]]!r}"
            f" (for K={K}); choose parameters with 0 <= g(s) <= 1"
        )


@lru_cache(maxsize=256)
def _values_cached(u: Utility, K: int) -> np.ndarray:
    _check_range(u, K)
    # clip float rounding (2.2 - 1.2 = 1.0000000000000002) back into [0, 1]
    g = np.clip(u._g(np.arange(1, K + 1, dtype=np.float64), K), 0.0, 1.0)
    g.setflags(write=False)
    return g


@lru_cache(maxsize=64)
def _exact_cached(u: Utility, K: int) -> tuple[Fraction, ...]:
    _check_range(u, K)
    return tuple(u._g_exact(s, K) for s in range(1, K + 1))


#: The facts :class:`UtilityProperties` is made of (``convex`` is Definition 1's inequality alone,
#: which counts only where ``positive``).
_PROPERTY_KEYS = ("strictly", "nonincreasing", "g1", "lower", "positive", "convex")


def _term_properties(g, tol) -> dict[str, bool]:
    """The properties of the exact values ``g = (g(1), ..., g(K))``, term by term (``tol`` 0 for
    rationals, 1e-45 for 60-digit decimals)."""
    n = len(g)
    return dict(
        strictly=all(g[i] - g[i + 1] > tol for i in range(n - 1)),
        nonincreasing=all(g[i] - g[i + 1] >= -tol for i in range(n - 1)),
        g1=abs(g[0] - 1) <= tol,
        lower=all(g[i] - Fraction(1, i + 1) >= -tol for i in range(n)),
        positive=all(x > tol for x in g),
        # 1/g(s+1) <= (1/g(s) + 1/g(s+2))/2, multiplied by g(s) g(s+1) g(s+2) > 0.
        convex=all(g[i] * g[i + 1] + g[i + 2] * g[i + 1] - 2 * g[i] * g[i + 2] >= -tol for i in range(n - 2)),
    )


def _checked_properties(u: Utility, K: int, keys) -> dict[str, bool]:
    """The properties ``keys`` of ``u`` over ``s = 1..K`` for a family without closed forms.

    Each is a sign condition on a quantity per ``s`` (a difference of consecutive values, ``g(s) -
    1/s``, ``g(s)``, Definition 1's ``g(s) g(s+1) + g(s+2) g(s+1) - 2 g(s) g(s+2)``).  The quantity
    is computed for every ``s`` at once in float64 with a bound on its error, from ``u._g_error``
    and the rounding of the few operations; where the float value is further from the condition's
    threshold than that bound, its sign decides; only the other ``s`` are evaluated with
    ``u._g_exact`` (rationals, or 60-digit decimals within 1e-45).  A failure anywhere decides a
    property before any exact evaluation.
    """
    tol = Fraction(0) if u.is_exact else _INEXACT_TOL
    ftol = float(tol)
    eps = np.finfo(np.float64).eps
    s = np.arange(1, K + 1, dtype=np.float64)
    g = np.asarray(u._g(s, K), dtype=np.float64)
    e = np.asarray(u._g_error(s, K, g), dtype=np.float64) * (1 + 1e-6)
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(e))):
        e = np.where(np.isfinite(g) & np.isfinite(e), e, np.inf)
        g = np.where(np.isfinite(g), g, 0.0)
    exact: dict[int, Fraction] = {}

    def ex(i: int) -> Fraction:  # g(i + 1), evaluated once
        if i not in exact:
            exact[i] = u._g_exact(i + 1, K)
        return exact[i]

    def holds(value, err, threshold, strict, exact_value) -> bool:
        """Whether ``value > threshold`` (``>=``) for every entry, the exact value where unsure."""
        err = err * (1 + 4 * eps) + 1e-300  # the rounding of the bound itself, and underflow
        sure_no = value + err < threshold if not strict else value + err <= threshold
        if sure_no.any():
            return False
        unsure = np.flatnonzero(~(value - err > threshold))
        t = tol if threshold > 0 else -tol if threshold < 0 else Fraction(0)
        for i in unsure.tolist():
            v = exact_value(i)
            if not (v > t if strict else v >= t):
                return False
        return True

    out: dict[str, bool] = {}
    d = g[:-1] - g[1:]
    ed = e[:-1] + e[1:] + eps * np.abs(d)  # the values' errors and the subtraction's rounding
    if "strictly" in keys:
        out["strictly"] = holds(d, ed, ftol, True, lambda i: ex(i) - ex(i + 1))
    if "nonincreasing" in keys:
        out["nonincreasing"] = holds(d, ed, -ftol, False, lambda i: ex(i) - ex(i + 1))
    if "g1" in keys:
        out["g1"] = abs(ex(0) - 1) <= tol
    if "lower" in keys:
        f = g - 1 / s
        out["lower"] = holds(f, e + eps / s + eps * np.abs(f), -ftol, False, lambda i: ex(i) - Fraction(1, i + 1))
    if "positive" in keys:
        out["positive"] = holds(g, e, ftol, True, ex)
    if "convex" in keys:
        a, b, c = g[:-2], g[1:-1], g[2:]
        ea, eb, ec = e[:-2], e[1:-1], e[2:]
        q = a * b + c * b - 2 * a * c
        aa, ab, ac = np.abs(a), np.abs(b), np.abs(c)
        eq = ab * (ea + ec) + (aa + ac) * eb + 2 * (aa * ec + ac * ea) + eb * (ea + ec) + 2 * ea * ec
        eq += 4 * eps * (aa * ab + ac * ab + 2 * aa * ac)
        out["convex"] = holds(
            q, eq, -ftol, False, lambda i: ex(i) * ex(i + 1) + ex(i + 2) * ex(i + 1) - 2 * ex(i) * ex(i + 2)
        )
    return out


@lru_cache(maxsize=256)
def _properties_cached(u: Utility, K: int) -> UtilityProperties:
    p = dict(u._closed_form(K))
    if "positive" not in p:
        p.update(_checked_properties(u, K, ["positive"]))
    # Definition 1's inequality counts only where g > 0
    missing = [k for k in _PROPERTY_KEYS if k not in p and (k != "convex" or p["positive"])]
    if missing:
        p.update(_checked_properties(u, K, missing))
    convex = bool(p["positive"] and p.get("convex", False))
    return UtilityProperties(
        K=K,
        strictly_decreasing=bool(p["strictly"]),
        g1_is_one=bool(p["g1"]),
        lower_bounded_by_precision=bool(p["lower"]),
        one_over_x_convex=convex,
        early_stop_valid=convex and bool(p["nonincreasing"]),
        exact=u.is_exact,
    )


def _term_by_term_properties(u: Utility, K: int) -> UtilityProperties:
    """The properties from every exact value ``g(1..K)``: the definition itself, whose cost grows
    with ``K`` (and with the size of the rationals); the reference the closed forms are tested
    against."""
    p = _term_properties(_exact_cached(u, K), Fraction(0) if u.is_exact else _INEXACT_TOL)
    convex = p["positive"] and p["convex"]
    return UtilityProperties(
        K=K,
        strictly_decreasing=p["strictly"],
        g1_is_one=p["g1"],
        lower_bounded_by_precision=p["lower"],
        one_over_x_convex=convex,
        early_stop_valid=convex and p["nonincreasing"],
        exact=u.is_exact,
    )


def utility_table(specs=STANDARD_UTILITIES, K: int = 100) -> list[dict[str, object]]:
    """Rows ``{spec, title, formula, g(1), g(K), <properties>}`` for the given utilities."""
    rows = []
    for spec in specs:
        u = utility(spec, K=K)
        g = u.values()
        row: dict[str, object] = {"spec": u.spec, "label": u.label, "title": u.title, "formula": u.formula}
        row["g(1)"] = float(g[0])
        row["g(K)"] = float(g[-1])
        row.update(u.properties().as_dict())
        rows.append(row)
    return rows
