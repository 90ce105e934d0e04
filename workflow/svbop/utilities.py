"""Set-based utilities g(s) of the paper's Table 2 and their properties.

A set-based utility rewards a predicted set ``Y`` with ``u(y, Y) = g(|Y|)`` when the true class ``y``
is in ``Y`` and with 0 otherwise (the paper's Eq. 2).  The sequence ``g(1), ..., g(K)`` decides
everything: this module builds it from a spec string such as ``"fbeta:beta=1"`` and checks the
paper's four properties (Section 2.2) exactly, over every ``s`` up to ``K``.

Exactness: the families with rational values for rational parameters (precision, recall, F-beta,
credal, reject, generalised reject with an integer ``beta``) are checked in exact rational
arithmetic, so that boundary cases are decided correctly (precision and F-beta satisfy the
(1/x)-convexity inequality with *equality* for every ``s``).  The transcendental families
(exponential, logarithmic, generalised reject with a non-integer ``beta``) are evaluated with
60 significant decimal digits and compared with a tolerance of 1e-45.
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
        ``True`` when the check ran in exact rational arithmetic, ``False`` when it used
        60-digit decimals (transcendental families).
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


class Recall(Utility):
    name = "recall"
    title = "Recall"
    formula = "1"

    def _g(self, s, K):
        return np.ones_like(s, dtype=np.float64)

    def _g_exact(self, s, K):
        return Fraction(1)


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


@lru_cache(maxsize=256)
def _properties_cached(u: Utility, K: int) -> UtilityProperties:
    g = _exact_cached(u, K)
    tol = Fraction(0) if u.is_exact else _INEXACT_TOL
    strictly = all(g[i] - g[i + 1] > tol for i in range(K - 1))
    nonincreasing = all(g[i] - g[i + 1] >= -tol for i in range(K - 1))
    g1 = abs(g[0] - 1) <= tol
    lower = all(g[i] - Fraction(1, i + 1) >= -tol for i in range(K))
    positive = all(x > tol for x in g)
    # 1/g(s+1) <= (1/g(s) + 1/g(s+2))/2, multiplied by g(s) g(s+1) g(s+2) > 0.
    convex = positive and all(
        g[i] * g[i + 1] + g[i + 2] * g[i + 1] - 2 * g[i] * g[i + 2] >= -tol for i in range(K - 2)
    )
    return UtilityProperties(
        K=K,
        strictly_decreasing=strictly,
        g1_is_one=g1,
        lower_bounded_by_precision=lower,
        one_over_x_convex=convex,
        early_stop_valid=convex and nonincreasing,
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
