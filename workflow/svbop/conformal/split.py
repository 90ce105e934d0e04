"""Split-conformal set prediction, :class:`ConformalSetPredictor`: every score (LAC, APS, RAPS,
F-beta, credal, hierarchical) with marginal, class-conditional or group-conditional (Mondrian)
calibration."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .._blocks import row_blocks
from .._prefix import DEFAULT_CHUNK_BYTES, as_score_matrix, row_stats
from ..metrics import check_groups as _check_groups
from ..metrics import check_labels
from ..search import predict_sets
from ..sets import SetPredictions
from ..utilities import Utility
from ._common import _NORMAL_MIN, _epsilon, _no_calibration_rows, _order_statistic, _seed, row_uniforms
from .dask import is_dask_array
from .class_conditional import _class_quantiles
from .family import _FBETA_EVERY_CLASS, _calibrate_parameter, _covered, _credal_delta_max, _family_utility, \
    _RankedCalibration
from .lazy import is_lazy, lazy_mask
from .mondrian import SMALL_GROUPS, GroupCalibrationWarning, _group_list, _merge_rows, min_calibration_rows
from .scores import PREDICTOR_SCORES, RANDOMIZED_BY_DEFAULT, RANDOMIZED_SCORES, RANKED_SCORES, \
    _calibration_label_ranks, _calibration_scores, _every_class, _mask_chunks, \
    _lac_scores, _mask_sets, _score_sets, conformal_quantile, conformal_sets

__all__ = ["ConformalSetPredictor"]

#: The default SAPS weight ``lam`` (TorchCP's; Huang et al. tune it on held-out rows).
_SAPS_LAM = 0.2

@dataclass(frozen=True)
class _Calibration:
    """One calibration's result: the threshold ``quantile`` (for ``fbeta``/``credal`` the family
    ``parameter`` and its ``utility``), per-class thresholds when class-conditional, or every class."""

    quantile: float
    quantiles: np.ndarray | None = None
    parameter: float | None = None
    utility: Utility | None = None
    every_class_: bool = False
    clusters: np.ndarray | None = None
    rank_limits: np.ndarray | None = None

    @classmethod
    def every_class(cls) -> "_Calibration":
        return cls(math.inf, every_class_=True)



class ConformalSetPredictor:
    r"""Split-conformal set predictor: LAC, APS, RAPS, SAPS, top-k, margin, class-conditional, or Bayes-optimal sets.

    Classes of a row are ranked by decreasing ``P(c|x)`` (normalised per row), ties by class
    index; ``o(c)`` is the 1-based rank.  Scores ``s(x, c)`` (large: non-conforming):

    * ``"lac"``: ``1 - P(c|x)`` (the paper's ICP; unchanged);
    * ``"aps"``: ``sum of P(c'|x)`` over the classes ``c'`` ranked at or before ``c``, ``- u P(c|x)``;
    * ``"raps"``: the APS score ``+ lam * max(0, o(c) - k_reg)``;
    * ``"saps"`` (Huang et al., ICML 2024): ``u * P_max`` for the top class, ``P_max + lam (o(c) - 2 + u)``
      below it (``P_max`` the row's largest probability);
    * ``"topk"``: the rank ``o(c)`` (the sets are the ``q`` most probable classes); randomised
      (``randomized=True``, TorchCP's default): ``o(c) - u``, so that the class of rank
      ``ceil(q)`` is kept for a share of the rows and the coverage is exact;
    * ``"margin"``: the largest probability of another class minus ``P(c|x)``.

    *Randomisation* (``randomized=True``, the default of APS, RAPS and SAPS, and available for
    top-k; Romano, Sesia and
    Candès 2020; Angelopoulos et al. 2021): ``u`` is uniform on [0, 1), one per row, drawn from
    ``random_state`` for the calibration rows and, fresh for every call, from the fitted model's
    generator for the rows of each ``predict`` call: rows predicted one at a time (a service's
    requests) get independent uniforms and cover as a batch does.  (Drawing them by position, as
    earlier versions did, gave every one-row call the same ``u``: coverage over one-row calls was
    0.888 for 0.9.)  ``row_seeds=`` (one integer per row, e.g. a request id) makes a row's ``u`` a
    function of the fit's seed and that integer instead: reproducible whatever the batch, and the
    same for :meth:`predict` and :meth:`predict_mask`.  The score of ``(x, y)`` is then continuous,
    and coverage is in ``[1 - epsilon, 1 - epsilon + 1/(n+1)]`` in expectation when sets may be
    empty (``empty="keep"``, the default of the randomised scores).  A fitted model's generator
    is not for threads that predict at once (give each its ``row_seeds``).  ``randomized=False`` is the deterministic score: APS/RAPS with ``u = 0``
    (a class is kept when the mass ranked at or before it, its own included, is within ``q``: the
    class that crosses ``q`` is left out, as in TorchCP; an empty set becomes the top class under
    the default ``empty="top1"``), top-k with ``u = 0``, SAPS with ``u = 1``: coverage at least
    ``1 - epsilon`` and, on overconfident models, far above it (why it is not the default; see
    ``workflow/docs/library.md``).  Every score is non-decreasing along the ranking for a fixed
    ``u``, so a marginal set is the prefix of the ranking up to the first class whose score
    exceeds ``q``.

    ``fit`` computes the calibration scores ``s(x_i, y_i)``, and ``q`` is their
    ``k``-th smallest with ``k = ceil((n+1)(1-epsilon))`` (exact arithmetic); **``q = inf`` when
    ``k > n``** (too few calibration rows for this ``epsilon``: every class is kept).  ``predict``
    returns ``{c : s(x, c) <= q}`` in ranked order.  With ``class_conditional=True`` (Mondrian
    conformal prediction), each class ``c`` gets its own ``q_c`` from the calibration rows with
    ``y_i = c`` and the set is ``{c : s(x, c) <= q_c}``: coverage at least ``1 - epsilon`` holds
    *for every class*; **a class with no calibration rows (or too few) has ``q_c = inf``: it is
    in every set.**  Class-conditional sets are not prefixes of the ranking in general.  An
    empty set stays empty (``empty="keep"``) or becomes the top-ranked class (``"top1"``, default:
    adding a class only raises coverage).

    Arithmetic: for APS, RAPS and class-conditional LAC, a row is divided by its float64 sum
    (numpy's ``sum``) and the cumulative sums run along the ranking, the same operations at
    calibration and at prediction, so a test point equal to a calibration point gets exactly
    that point's scores.  Scores equal in exact arithmetic can still differ in their last bits
    between two rows (a row's total mass rounds to ``1.0`` in one and ``0.9999999999999999`` in
    another), so **a class is kept when ``s(x, c) <= q + tol * max(1, |q|)``** with
    ``tol = 4 K 2**-52`` (:func:`_score_tolerance`; MAPIE compares with an absolute 1e-8): the
    last class is never dropped by rounding, and the classes the tolerance adds only raise
    coverage.  (Marginal LAC keeps the paper's implementation, :func:`conformal_quantile` and
    :func:`conformal_sets`.)

    **Bayes-optimal sets with coverage** (``score="fbeta"`` or ``"credal"``).  Let
    ``S(x; t)`` be :func:`svbop.predict_sets` for the family member with parameter ``t``
    (F-beta with ``beta = t``; credal with ``delta = t`` at the fixed ``gamma > 0``), with its
    tie rule (ties within ``tie_rtol`` go to the larger set).

    *Nestedness.*  Every ``S(x; t)`` is a prefix of the same ranking, of size
    ``m(t) = max{s : A_s(t)}`` where ``A_s(t)`` says ``U_s >= (1 - rho) U_j`` for all ``j < s``,
    ``U_s = g_t(s) C_s`` and ``C_s`` the mass of the first ``s`` classes.  For ``j < s``,

    * F-beta: ``U_s/U_j = (C_s/C_j) (j + beta^2)/(s + beta^2)``, increasing in ``beta``
      (derivative of ``(j+b)/(s+b)`` is ``(s-j)/(s+b)^2 > 0``);
    * credal, ``g(s) = delta/s - gamma/s^2``: ``U_s/U_j = (C_s j^2 / (C_j s^2)) h(delta)`` with
      ``h = (delta s - gamma)/(delta j - gamma)`` and ``h' = gamma (j - s)/(delta j - gamma)^2
      < 0`` for ``gamma > 0``: decreasing in ``delta``, so **credal sets shrink as delta grows**.
      (``gamma = 0`` makes the sets independent of ``delta``; ``gamma < 0`` reverses the
      direction: both are refused.)

    So each pairwise condition, hence each ``A_s``, holds on a closed half-line of the parameter
    (closed: the inequalities are non-strict and continuous), and ``m(t)`` is monotone:
    non-decreasing in ``beta``, non-increasing in ``delta``.  The sets are nested, and
    ``{t : y in S(x; t)} = {t : m(t) >= o(y)}`` is a closed half-line.

    *Score and calibration.*  The score of ``(x, y)`` is the end of that half-line: for F-beta
    ``V = min{beta : y in S(x; beta)}``, for credal ``V = max{delta : y in S(x; delta)}``
    (``-inf`` if no ``delta`` in ``[gamma, delta_max]`` covers ``y``; ``delta_max`` is the largest
    delta with ``0 <= g <= 1``).  ``parameter_`` is the ``k``-th smallest F-beta score (the
    ``k``-th *largest* credal score, the quantile on the other side), found without computing
    each score: it is the smallest ``beta`` (largest ``delta``) at which at least ``k``
    calibration sets contain their label, located by bisection over all float64 values of the
    parameter, which ends at two adjacent floats; the final ``parameter_`` is the end at which
    the count was evaluated as ``>= k``.  ``predict(P)`` is exactly
    ``svbop.predict_sets(P, utility_)``.

    *Coverage.*  For a test pair exchangeable with the ``n`` calibration pairs,
    ``y in S(x; parameter_)`` iff ``V <= parameter_`` (F-beta; ``>=`` for credal) by
    nestedness, and ``parameter_`` is the ``k``-th order statistic of ``V_1..V_n``.  By
    exchangeability the rank of ``V_{n+1}`` among ``V_1..V_{n+1}`` is uniform (ties broken
    at random), so ``P(V_{n+1} <= V_(k)) >= k/(n+1) >= 1 - epsilon``.  The argument is in
    exact arithmetic; the computed expected utilities round in their last bits, which can move
    a switch point of ``m(t)`` by a few ulps of ``t`` but never the count at ``parameter_``,
    which is evaluated (if the fast count and ``predict_sets`` disagree there, the bisection is
    redone counting every row with ``predict_sets`` at every step, so that the count at the
    result is always an evaluated ``>= k``).

    *Labels of probability 0.*  Such a class adds no mass, so it enters ``S(x; t)`` only through
    the tie tolerance (for F-beta near ``beta^2 ~ 1/tie_rtol``), where rounding can make its
    coverage non-monotone in ``t``.  **Its score is defined as never covered**: ``V = +inf``
    for F-beta (only the every-class member ``parameter_ = 1.4e154`` holds it), ``V = -inf``
    for credal; the bisection runs on the other rows.  Float32 probabilities (the pipeline's)
    often hold exact zeros: when more than ``n - k`` calibration labels have probability 0,
    the ``k``-th smallest F-beta score is ``+inf`` and F-beta returns every class.
    When ``k > n``: F-beta returns every class (``quantile_ = inf``,
    ``parameter_ = 1.4e154``, where ``beta^2`` overflows and ``g = 1``); credal cannot keep
    every class and ``fit`` raises ``ValueError``, as it does when even ``delta = gamma`` (the
    largest credal sets) covers fewer than ``k`` calibration rows.

    **Group-conditional (Mondrian) calibration** (``fit(P_cal, y_cal, groups=g)``, every score).
    The calibration rows are split by group and each group ``h`` gets its own calibration from
    its ``n_h`` rows alone (the same single-threshold fit as the marginal one: ``q_h``, or the
    family parameter ``t_h``); ``predict(P, groups=g_test)`` gives a row of group ``h`` the set
    ``S(x; q_h)``.  The groups must be known at test time (a metadata column, the predicted
    class, the top-level hierarchy node of the predicted class: anything computed from ``x`` or
    given beside it; not the label).

    *Coverage in every group.*  Let the test pair be exchangeable with the ``n_h`` calibration
    pairs of its group (for instance, all pairs i.i.d.: conditional on the groups, the pairs of
    group ``h`` are i.i.d. from the distribution of the pairs of group ``h``).  The proof above,
    applied to the ``n_h + 1`` scores of group ``h``, gives ``P(y in S(x) | group = h) >=
    ceil((n_h+1)(1-epsilon))/(n_h+1) >= 1 - epsilon`` for every group ``h`` separately, whatever
    the other groups (Vovk et al. 2005, Mondrian conformal prediction).  The quantile of a group
    is finite only when ``n_h >= 1/epsilon - 1`` (:func:`min_calibration_rows`: 9 rows at
    ``epsilon = 0.1``).  A smaller group gets, as ``small_groups`` says, the marginal
    calibration (``"marginal"``, the default: no per-group guarantee for that group, only a set
    of the usual size) or every class (``"full"``: coverage 1, the guarantee kept trivially); one
    :class:`GroupCalibrationWarning` names those groups and their counts.  A group not seen in
    ``fit`` gets the marginal calibration (one warning per ``predict`` call names them).
    ``class_conditional=True`` is the Mondrian calibration by the label (whose groups are not
    known at test time: each candidate class is tested against its own threshold); it is not
    combined with ``groups``.  A credal fit can fail in a group as it can marginally (too few
    rows covered even at ``delta = gamma``): the error names the group.

    Parameters
    ----------
    epsilon : float
        Significance level in (0, 1): coverage at least ``1 - epsilon``.
    score : {"lac", "aps", "raps", "saps", "topk", "margin", "fbeta", "credal", "hierarchical"}
        ``"hierarchical"``: sets that are unions of at most ``max_nodes`` nodes of ``hierarchy``
        (the authors' conformal hierarchy-restricted sets, Mortier, Javanmardi, Sale, Hullermeier and
        Waegeman, PMLR vol. 300; their CSVPHF without randomisation, with a running maximum of the
        cover masses so that the score implies coverage: :mod:`svbop.conformal.hierarchical` states
        the variant, why it departs from theirs, and proves ``P(y in C(x)) >= 1 - epsilon``).
        ``max_nodes >= K`` gives APS's sets.  Groups (Mondrian) work as for every score;
        ``predict(..., return_nodes=True)`` also returns each row's nodes.
    class_conditional : bool, "clustered" or "rc3p", default False
        One threshold per class, or per cluster of classes (``"clustered"``: Ding et al. 2023, see
        :mod:`svbop.conformal.clustered`), or one threshold and one rank limit per class
        (``"rc3p"``: Shi et al., NeurIPS 2024, TorchCP's ``RC3PPredictor``; a class is kept only
        when its score is within its threshold and its rank within its limit, see
        :mod:`svbop.conformal.rc3p`); the ranked scores only (not F-beta, credal, hierarchical).
    k_reg : int, default 1
        RAPS: ranks up to ``k_reg`` are not penalised (``score="raps"`` only; any ``k_reg >= K``
        penalises nothing).
    lam : float, optional
        RAPS: penalty per rank beyond ``k_reg`` (default 0, which gives APS); SAPS: the weight of a
        rank (default 0.2, TorchCP's; must be > 0).  0 or a normal double-precision number (at
        least 2.2e-308): subnormal values are refused.
    empty : {"top1", "keep"}, optional
        What an empty set becomes (F-beta and credal sets are never empty).  Default ``"keep"`` for
        the randomised scores, ``"top1"`` otherwise.
    calibrate_top1 : bool, default False
        Deterministic APS or RAPS with one threshold and ``empty="top1"``: the top class is in every
        set, so ``True`` calibrates the score the sets are built with (0 for a row's top class, the
        APS/RAPS score below it): a calibration row whose label is its top class counts as covered
        at any ``q``, as its test twin is.  ``False`` (TorchCP's rule) calibrates the plain score,
        which ignores that the top class is always kept: on a confident model ``q`` then lands
        above many rows' top probability and the sets over-cover (ResNet-20 on CIFAR-100 at
        ``epsilon = 0.1``: 99 % coverage and 24 classes a set, against 90 % and 5.6 with ``True``).
    randomized : bool, optional
        APS, RAPS, SAPS: the randomised score (default) or the deterministic one (``False``);
        top-k: deterministic by default, ``True`` for TorchCP's randomised ``TOPK`` (``o(c) - u``).
    random_state : int, numpy Generator or RandomState, optional
        Seed of the randomised scores' uniforms and of the clustered split (a generator: one seed
        drawn from it at each ``fit``); ``None`` draws a fresh one at each ``fit`` (kept as ``seed_``).
    n_clusters : int, optional
        ``class_conditional="clustered"``: the number of clusters (default: the authors' rule).
    label_noise : float or ndarray of shape (K, K), optional
        The calibration labels are noisy: a uniform noise rate ``r`` in [0, 1) (the label replaced,
        with probability ``r``, by one drawn uniformly from the ``K`` classes) or a row-stochastic,
        invertible transition matrix ``M[k, l] = P(noisy l | clean k)``.  ``fit`` then calibrates
        to cover the *clean* label (Sesia, Wang and Tong 2024; Penso et al. 2024): see
        :mod:`svbop.conformal.label_noise`.  Marginal calibration of the ranked scores.
    gamma : float, optional
        The credal family's fixed ``gamma > 0`` (required for ``score="credal"`` only), a normal
        double-precision number (at least 2.2e-308), as the utility's parameters are.
    small_groups : {"marginal", "full"}, default "marginal"
        With ``fit(..., groups=...)``: what a group with fewer than
        :func:`min_calibration_rows` calibration rows gets (the marginal calibration, or every
        class).
    hierarchy : svbop.datasets.Hierarchy, optional
        ``score="hierarchical"`` only (required there): a class tree whose leaves are the columns.
    max_nodes : int, default 1
        ``score="hierarchical"`` only: the most nodes a set may join.

    Attributes
    ----------
    quantile_ : float
        Calibrated threshold ``q`` (for class-conditional sets: the largest ``q_c``; for
        ``fbeta``/``credal``: ``parameter_``, or ``inf`` when ``k > n``).
    quantiles_ : ndarray of shape (n_classes,)
        Per-class thresholds ``q_c`` (``class_conditional=True``, ``"clustered"`` or ``"rc3p"``).
    rank_limits_ : ndarray of int64, shape (n_classes,)
        ``class_conditional="rc3p"``: each class's rank limit ``k_c`` (``n_classes`` for a class
        without calibration rows).
    clusters_ : ndarray of shape (n_classes,)
        ``class_conditional="clustered"``: each class's cluster (``-1``: the null cluster).
    seed_ : int
        The seed of the last ``fit``'s uniforms.
    parameter_ : float
        ``fbeta``: beta; ``credal``: delta.
    utility_ : Utility
        The family member with ``parameter_`` (``fbeta``/``credal`` only).
    n_classes_ : int
        Number of classes seen in ``fit``.
    groups_ : ndarray
        The sorted group labels seen in ``fit`` (``fit(..., groups=...)`` only, as the next three).
    group_counts_ : ndarray of int
        Calibration rows of each group of ``groups_``.
    group_quantiles_ : ndarray of float
        Each group's threshold (``fbeta``/``credal``: parameter); a small group's is the marginal
        one (``small_groups="marginal"``) or ``inf`` (``"full"``).
    small_groups_ : ndarray
        The groups of ``groups_`` with too few rows for their own threshold.

    Examples
    --------
    >>> import numpy as np, svbop
    >>> rng = np.random.default_rng(0)
    >>> P = rng.dirichlet(np.ones(5), size=200); y = rng.integers(0, 5, 200)
    >>> aps = svbop.ConformalSetPredictor(0.1, score="aps", random_state=0).fit(P[:100], y[:100])
    >>> len(aps.predict(P[100:])), aps.predict_mask(P[100:]).shape
    (100, (100, 5))
    """

    def __init__(
        self,
        epsilon: float,
        score: str = "lac",
        class_conditional: bool | str = False,
        k_reg: int = 1,
        lam: float | None = None,
        empty: str | None = None,
        gamma: float | None = None,
        small_groups: str = "marginal",
        hierarchy=None,
        max_nodes: int = 1,
        randomized: bool | None = None,
        random_state: int | None = None,
        n_clusters: int | None = None,
        calibrate_top1: bool = False,
        label_noise=None,
    ) -> None:
        _epsilon(epsilon)
        if not isinstance(score, str) or score not in PREDICTOR_SCORES:
            raise ValueError(f"score must be one of {', '.join(PREDICTOR_SCORES)}; got {score!r}")
        if score == "hierarchical":
            from ..datasets.base import Hierarchy
            from .hierarchical import _max_nodes

            if not isinstance(hierarchy, Hierarchy):
                raise ValueError("score='hierarchical' needs hierarchy= (a svbop.datasets.Hierarchy whose leaves are "
                                 f"the classes), got {type(hierarchy).__name__}")
            max_nodes = _max_nodes(max_nodes)
        elif hierarchy is not None or max_nodes != 1:
            raise ValueError(f"hierarchy and max_nodes are for score='hierarchical'; score={score!r} takes neither")
        if not (isinstance(class_conditional, (bool, np.bool_)) or class_conditional in ("clustered", "rc3p")):
            raise ValueError(f"class_conditional must be True, False, 'clustered' or 'rc3p', got {class_conditional!r}")
        if class_conditional and score not in RANKED_SCORES:
            raise ValueError(f"class_conditional={class_conditional!r} is for score"
                             f" {', '.join(map(repr, RANKED_SCORES))}, not {score!r}")
        if isinstance(k_reg, (bool, np.bool_)) or not isinstance(k_reg, (int, np.integer)) or k_reg < 0:
            raise ValueError(f"k_reg must be an integer >= 0, got {k_reg!r}")
        if lam is not None and (
            isinstance(lam, (bool, np.bool_)) or not isinstance(lam, (int, float, np.integer, np.floating))
            or not (lam == 0 or _NORMAL_MIN <= lam <= np.finfo(np.float64).max)
        ):
            raise ValueError(
                f"lam must be a finite number >= 0, and 0 or at least {_NORMAL_MIN:.4g} (not subnormal), got {lam!r}"
            )
        if score == "saps":
            if k_reg != 1:
                raise ValueError(f"k_reg is a RAPS parameter; score='saps' takes lam (its weight) only, got k_reg={k_reg!r}")
            lam = _SAPS_LAM if lam is None else lam
            if lam == 0:
                raise ValueError("lam, the SAPS weight of a rank, must be > 0 (at 0 every rank below the first scores"
                                 " the same); got 0")
        elif score != "raps" and ((lam is not None and lam != 0) or k_reg != 1):
            raise ValueError(f"k_reg and lam are RAPS parameters; score={score!r} takes neither (use score='raps')")
        lam = 0.0 if lam is None else lam
        if randomized is None:
            randomized = score in RANDOMIZED_BY_DEFAULT
        if not isinstance(randomized, (bool, np.bool_)):
            raise ValueError(f"randomized must be True or False, got {randomized!r}")
        if randomized and score not in RANDOMIZED_SCORES:
            raise ValueError(f"randomized=True is for score 'aps', 'raps', 'saps' or 'topk', not {score!r}")
        if random_state is not None and not isinstance(random_state, (np.random.Generator, np.random.RandomState)) \
                and (isinstance(random_state, (bool, np.bool_)) or not isinstance(random_state, (int, np.integer))
                     or random_state < 0):
            raise ValueError(f"random_state must be None, an integer >= 0 or a numpy Generator/RandomState, got"
                             f" {random_state!r}")
        if n_clusters is not None:  # used by class_conditional="clustered" only (scikit-learn's checks set it)
            if isinstance(n_clusters, (bool, np.bool_)) or not isinstance(n_clusters, (int, np.integer)) \
                    or n_clusters < 1:
                raise ValueError(f"n_clusters must be None (the rule of Ding et al.) or an integer >= 1, got"
                                 f" {n_clusters!r}")
        if empty is None:  # randomised sets may be empty: their coverage is exact only then
            empty = "keep" if randomized else "top1"
        if empty not in ("top1", "keep"):
            raise ValueError(f"empty must be 'top1' or 'keep', got {empty!r}")
        if score == "credal":
            if gamma is None:
                raise ValueError("score='credal' needs gamma (the credal family's fixed gamma > 0)")
            if isinstance(gamma, (bool, np.bool_)) or not isinstance(gamma, (int, float, np.integer, np.floating)):
                raise ValueError(f"gamma must be a number > 0, got {gamma!r}")
            if 0 < gamma < _NORMAL_MIN:
                raise ValueError(
                    f"gamma must be a double-precision number >= {_NORMAL_MIN:.4g} (not subnormal), got {gamma!r}"
                )
            if not 0 < gamma <= np.finfo(np.float64).max:
                raise ValueError(
                    f"gamma must be finite and > 0, got {gamma!r}: at gamma = 0 the credal sets do not depend on"
                    " delta, and at gamma < 0 they grow with it (see the class docstring)"
                )
        elif gamma is not None:
            raise ValueError(f"gamma is the credal family's parameter; score={score!r} takes none")
        if not isinstance(small_groups, str) or small_groups not in SMALL_GROUPS:
            raise ValueError(f"small_groups must be 'marginal' or 'full', got {small_groups!r}")
        self.epsilon = epsilon
        self.score = score
        self.class_conditional = class_conditional if class_conditional in ("clustered", "rc3p") \
            else bool(class_conditional)
        self.k_reg = int(k_reg)
        self.lam = float(lam)
        self.empty = empty
        self.gamma = None if gamma is None else float(gamma)
        self.small_groups = small_groups
        self.hierarchy = hierarchy
        self.max_nodes = int(max_nodes)
        self.randomized = bool(randomized)
        self.random_state = random_state if random_state is None or not isinstance(random_state, (int, np.integer)) \
            else int(random_state)
        self.n_clusters = None if n_clusters is None else int(n_clusters)
        if not isinstance(calibrate_top1, (bool, np.bool_)):
            raise ValueError(f"calibrate_top1 must be True or False, got {calibrate_top1!r}")
        if calibrate_top1 and (score not in ("aps", "raps") or randomized or class_conditional or empty != "top1"):
            raise ValueError("calibrate_top1=True is for deterministic APS or RAPS with one threshold and empty='top1'"
                             f" (the top class in every set), not score={score!r} with randomized={randomized!r},"
                             f" class_conditional={class_conditional!r}, empty={empty!r}")
        self.calibrate_top1 = bool(calibrate_top1)
        from .label_noise import check_label_noise

        self.label_noise = check_label_noise(label_noise)
        if self.label_noise is not None and (score not in RANKED_SCORES or class_conditional):
            raise ValueError(f"label_noise is for the marginal calibration of the ranked scores"
                             f" {', '.join(RANKED_SCORES)}, not score={score!r} with"
                             f" class_conditional={class_conditional!r}")

    def _uniforms(self, stream: int, n: int) -> np.ndarray:
        """``n`` uniforms in [0, 1) of ``stream`` (0: calibration rows, 1: test rows, 2: the clustered
        split) from the seed of the last ``fit``: the same rows get the same draws every call."""
        return np.random.default_rng(np.random.SeedSequence(self.seed_, spawn_key=(stream,))).random(n)

    @property
    def _kernel_path(self) -> bool:
        """Whether ``predict`` computes masks with the compiled kernel and ranks each set's classes
        (every ranked score but marginal deterministic LAC, APS and RAPS, which keep the
        partial-sorting engine: it sorts only the classes a set needs, at any ``K``)."""
        return self.score in RANKED_SCORES and (
            self.randomized or self.score in ("saps", "topk", "margin") or bool(self.class_conditional)
            or getattr(self, "class_weights_", None) is not None  # label shift: one threshold per class
        )

    def fit(self, P_cal, y_cal, groups=None, *, weights=None, class_weights=None,
            chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> "ConformalSetPredictor":
        """Calibrate on held-out probabilities ``P_cal`` (n, K) and labels ``y_cal`` (n,).

        Parameters
        ----------
        P_cal : array-like of shape (n, K)
        y_cal : array-like of shape (n,)
        groups : array-like of shape (n,), optional
            Group of every calibration row (integers, strings or booleans; known at test time, e.g.
            a metadata column or the predicted class): one threshold (F-beta/credal: one
            parameter) per group, so that coverage is at least ``1 - epsilon`` *within every
            group* (Mondrian calibration; see the class docstring).  ``predict`` then needs the
            groups of its rows.
        weights : array-like of shape (n,), optional
            Covariate shift (Tibshirani et al. 2019): the likelihood ratio ``w(x_i) = dQ_X/dP_X`` of
            every calibration row (test over calibration covariates; any constant factor).  Each test
            row then gets the weighted quantile that includes its own weight at ``+inf``
            (:mod:`svbop.conformal.weighted`), and ``predict`` needs ``weights`` too.  The ranked
            scores (``lac``, ``aps``, ``raps``, ``saps``, ``topk``, ``margin``), marginal or
            ``class_conditional=True``; not with ``groups``.  ``quantile_`` (``quantiles_``) is then
            the threshold of a test row of the mean calibration weight.
        class_weights : array-like of shape (K,), optional
            Label shift (Podkopaev and Ramdas 2021): ``w(y) = q(y)/p(y)``, the test over the
            calibration class frequencies (any constant factor; estimated by
            :func:`svbop.conformal.estimate_label_shift`).  Candidate class ``c`` gets the threshold
            ``Q(w(c))``, the weighted quantile of the calibration scores weighted by ``w(y_i)`` with
            ``w(c)`` at ``+inf`` (:mod:`svbop.conformal.label_shift`): ``quantiles_``, one per class;
            ``predict`` needs nothing more.  Marginal calibration of the ranked scores, not with
            ``groups``, ``weights`` or ``label_noise`` (``class_conditional=True`` needs no weights:
            it covers every class, hence under any label shift).
        """
        if is_dask_array(P_cal):  # block by block on dask's scheduler: svbop.conformal.dask
            from .dask import fit as dask_fit

            return dask_fit(self, P_cal, y_cal, groups, weights=weights, class_weights=class_weights,
                            chunk_bytes=chunk_bytes)
        if is_lazy(P_cal):  # a tree's probabilities or top-k outputs: no n x K matrix (svbop.conformal.lazy)
            return self._fit_lazy(P_cal, y_cal, groups, weights, class_weights)
        P_cal = as_score_matrix(P_cal, "P_cal")
        y_cal = check_labels(y_cal, P_cal.shape, "y_cal")
        eps = _epsilon(self.epsilon)
        _no_calibration_rows(P_cal)
        if groups is not None:
            if self.class_conditional:
                raise ValueError(
                    f"groups cannot be combined with class_conditional={self.class_conditional!r} (one threshold per"
                    " class, or per cluster of classes, already is a Mondrian calibration by the label); pass one or"
                    " the other"
                )
            groups = _check_groups(groups, P_cal.shape[0], "groups", "P_cal")
        if weights is not None:
            weights = self._check_weighted(P_cal, groups, weights)
        if class_weights is not None or self.label_noise is not None:
            class_weights = self._check_shift_or_noise(P_cal, y_cal, groups, weights, class_weights)
        self._forget_calibration()
        if self.score in ("fbeta", "credal"):  # rows of label probability 0 skip the bisection: check all here
            rows = max(1, int(chunk_bytes) // max(1, P_cal.shape[1] * 8))
            for row0, _, X in row_blocks(P_cal, rows):  # a mapped matrix: one chunk resident
                row_stats(np.ascontiguousarray(X), row0, "P_cal")
        self.seed_ = _seed(self.random_state)  # this fit's uniforms (predict's: a fresh stream of it)
        K = P_cal.shape[1]
        U = self._uniforms(0, P_cal.shape[0]) if self.randomized else None
        if weights is not None:
            self._fit_weighted(P_cal, y_cal, weights, eps, chunk_bytes, U)
            return self
        if class_weights is not None:
            from .label_shift import label_shift_thresholds

            self.class_weights_ = class_weights
            self.quantiles_ = label_shift_thresholds(self._scores(P_cal, y_cal, chunk_bytes, U), y_cal, class_weights,
                                                     float(1 - eps))
            self.quantile_ = float(self.quantiles_.max())
            self.n_classes_ = K
            return self
        if self.label_noise is not None:
            from ._matrix import score_matrix
            from .label_noise import noise_inverse, noisy_label_threshold

            V = noise_inverse(self.label_noise, K)
            S = score_matrix(P_cal, self.score, self.k_reg, self.lam, U, chunk_bytes, "P_cal")
            self.quantile_ = noisy_label_threshold(S, y_cal, V, eps)
            self.n_classes_ = K
            return self
        if self.score in RANKED_SCORES or (groups is not None and self.score == "hierarchical"):
            s = self._scores(P_cal, y_cal, chunk_bytes, U)  # once: the thresholds and predict_p's counts
        else:
            s = None
        if groups is not None and s is not None:
            marginal = _Calibration(_order_statistic(s, eps))
        else:
            marginal = self._calibrate(P_cal, y_cal, eps, chunk_bytes, U, s)
        self.quantile_ = marginal.quantile
        for attr, value in (("quantiles_", marginal.quantiles), ("parameter_", marginal.parameter),
                            ("utility_", marginal.utility), ("clusters_", marginal.clusters),
                            ("rank_limits_", marginal.rank_limits)):
            if value is not None:
                setattr(self, attr, value)
        self.n_classes_ = K
        if groups is not None:
            self._fit_groups(P_cal, y_cal, groups, eps, marginal, chunk_bytes, s)
        if s is not None and self.score in RANKED_SCORES and self.class_conditional in (False, True):
            from .pvalues import calibration_cells  # predict_p counts against these

            cells = None if groups is None else np.unique(groups, return_inverse=True)[1].reshape(-1)
            self._p_cells = calibration_cells(self, s, y_cal, cells)
        return self

    def _check_shift_or_noise(self, P_cal, y_cal, groups, weights, class_weights):
        """Label shift (``class_weights``) and label noise: the marginal ranked scores, alone."""
        what = "class_weights (label shift)" if class_weights is not None else "label_noise"
        if class_weights is not None and self.label_noise is not None:
            raise ValueError("class_weights (label shift) cannot be combined with label_noise: pass one or the other")
        if self.score not in RANKED_SCORES:
            raise ValueError(f"{what} is for the ranked scores {', '.join(RANKED_SCORES)}, not score={self.score!r}")
        if self.class_conditional:
            raise ValueError(f"{what} is for the marginal calibration, not class_conditional="
                             f"{self.class_conditional!r} (per-class thresholds already cover under label shift)")
        for name, value in (("groups", groups), ("weights", weights)):
            if value is not None:
                raise ValueError(f"{what} cannot be combined with {name}: pass one or the other")
        if class_weights is None:
            return None
        from .label_shift import check_class_weights

        return check_class_weights(class_weights, P_cal.shape[1], y_cal)

    def _check_weighted(self, P_cal, groups, weights):
        if self.score not in RANKED_SCORES:
            raise ValueError(f"weights (covariate shift) are for the ranked scores {', '.join(RANKED_SCORES)},"
                             f" not score={self.score!r}")
        if groups is not None:
            raise ValueError("weights cannot be combined with groups: pass one or the other")
        if self.class_conditional in ("clustered", "rc3p"):
            # RC3P's rank limits are calibrated on unweighted rows: weighting the thresholds alone
            # would silently drop them (the sets of plain class-conditional), so refuse the pair
            raise ValueError(f"weights are for class_conditional=False or True, not {self.class_conditional!r}"
                             f" (no weighted {'clusters' if self.class_conditional == 'clustered' else 'rank limits'}"
                             f" are defined: give weights or class_conditional={self.class_conditional!r})")
        from .weighted import check_weights

        return check_weights(weights, P_cal.shape[0], "weights", "P_cal")

    def _fit_weighted(self, P, y, weights, eps, chunk_bytes, U) -> None:
        """Sorted calibration scores and cumulative weights (see :mod:`svbop.conformal.weighted`)."""
        from .weighted import WeightedQuantiles

        s = self._scores(P, y, chunk_bytes, U)
        K = P.shape[1]
        self._weighted = WeightedQuantiles(s, weights, float(1 - eps), y if self.class_conditional else None, K)
        mean = np.array([self._weighted.mean_weight])  # normalised: a mean of 1e306s is no overflow
        if self.class_conditional:
            self.quantiles_ = self._weighted.cell_thresholds(mean, normalised=True)[0]
            self.quantile_ = float(self.quantiles_.max())
        else:
            self.quantile_ = float(self._weighted.row_thresholds(mean, normalised=True)[0])
        self.n_classes_ = K

    def _weighted_masks(self, P, weights, chunk_bytes, row_seeds=None):
        """Yield ``(row0, mask, X)`` for the rows of ``P`` under their own weighted thresholds."""
        from ._matrix import score_matrix, threshold_mask
        from .weighted import check_weights

        w = check_weights(weights, P.shape[0], "weights", "P")
        U = self._test_uniforms(P.shape[0], row_seeds)
        if not self.class_conditional:
            yield from _mask_chunks(P, self.score, self._weighted.row_thresholds(w), None, self.k_reg, self.lam, U,
                                    self.empty, chunk_bytes)
            return
        rows = max(1, int(chunk_bytes) // max(1, P.shape[1] * 24))
        for row0 in range(0, P.shape[0], rows):
            part = slice(row0, min(P.shape[0], row0 + rows))
            S = score_matrix(P[part], self.score, self.k_reg, self.lam, None if U is None else U[part], chunk_bytes)
            Q = self._weighted.cell_thresholds(w[part])
            # the ranking's order for the sets: by decreasing probability, ties by class index
            yield row0, threshold_mask(S, Q, self.empty == "top1"), np.asarray(P[part], dtype=np.float64)

    def _weights_given(self, weights) -> bool:
        """Whether this call is a weighted one (checks that fit and predict agree)."""
        weighted = getattr(self, "_weighted", None) is not None
        if weighted and weights is None:
            raise ValueError("weights is required: the predictor was calibrated with weights (covariate shift);"
                             " pass predict(P, weights=w_test), the test rows' likelihood ratios")
        if weights is not None and not weighted:
            raise ValueError("weights given to predict but the predictor was calibrated without them: pass"
                             " fit(P_cal, y_cal, weights=w_cal) too")
        return weighted

    def _scores(self, P, y, chunk_bytes, U):
        """The calibration scores of the threshold scores (ranked and hierarchical)."""
        if self.score == "hierarchical":
            from .hierarchical import hierarchical_scores

            return hierarchical_scores(P, y, self.hierarchy, self.max_nodes, chunk_bytes=chunk_bytes)
        if self.score == "lac" and not self.class_conditional:  # conformal_quantile's arithmetic
            return _lac_scores(P, y)
        s = _calibration_scores(P, y, self.score, self.k_reg, self.lam, chunk_bytes, U)
        if getattr(self, "calibrate_top1", False):  # the top class is in every set: covered at any q
            s[_calibration_label_ranks(P, y, chunk_bytes) == 1] = 0.0
        return s

    def _calibrate(self, P, y, eps: Fraction, chunk_bytes: int, U=None, s=None) -> "_Calibration":
        """One calibration (threshold or family parameter) from the rows ``P``, ``y`` (``U``: their
        uniforms for the randomised scores).

        The single-threshold fit that the marginal, the per-class and the per-group (Mondrian)
        calibrations share: a new score adds its branch here and in :meth:`_predict_with`, and
        gets group-conditional calibration from :meth:`_fit_groups` for free.
        """
        K = P.shape[1]
        if self.score in ("fbeta", "credal"):
            return self._fit_family(P, y, eps, K, chunk_bytes)
        if self.score == "lac" and not self.class_conditional:  # s given: _lac_scores, as conformal_quantile's
            return _Calibration(conformal_quantile(P, y, eps) if s is None else _order_statistic(s, eps))
        if s is None:  # the ranked scores' s(x_i, y_i) (given when fit computed them)
            s = self._scores(P, y, chunk_bytes, U)
        if self.class_conditional == "clustered":
            from .clustered import clustered_quantiles

            quantiles, clusters = clustered_quantiles(s, y, K, eps, self.n_clusters, self._uniforms(2, y.size),
                                                      self.seed_)
            return _Calibration(float(quantiles.max()), quantiles=quantiles, clusters=clusters)
        if self.class_conditional == "rc3p":
            from .rc3p import rc3p_calibration

            quantiles, limits = rc3p_calibration(s, _calibration_label_ranks(P, y, chunk_bytes), y, K, eps)
            return _Calibration(float(quantiles.max()), quantiles=quantiles, rank_limits=limits)
        if self.class_conditional:
            quantiles = _class_quantiles(s, y, K, eps)
            return _Calibration(float(quantiles.max()), quantiles=quantiles)
        return _Calibration(_order_statistic(s, eps))

    def _fit_groups(self, P, y, groups, eps, marginal, chunk_bytes, s=None) -> None:
        """One calibration per group; groups too small for a finite quantile follow ``small_groups``.

        Threshold scores (``s``, every calibration row's score, given): every group's order
        statistic at once (one sort of the scores by group), whatever the number of groups.  The
        Bayes-optimal families: one :meth:`_calibrate` per group large enough.
        """
        labels, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        need = min_calibration_rows(eps)
        small = np.flatnonzero(counts < need)
        fallback = marginal if self.small_groups == "marginal" else _Calibration.every_class()
        if s is not None:
            q = _class_quantiles(s, inverse, labels.size, eps)
            q[small] = fallback.quantile
            cals = None
        else:
            order = np.argsort(inverse, kind="stable")
            bounds = np.concatenate([[0], np.cumsum(counts)])
            cals = []
            for j, label in enumerate(labels.tolist()):
                if counts[j] < need:
                    cals.append(fallback)
                    continue
                rows = order[bounds[j] : bounds[j + 1]]
                try:
                    cals.append(self._calibrate(P[rows], y[rows], eps, chunk_bytes))
                except ValueError as e:
                    raise ValueError(f"group {label!r} ({counts[j]} calibration rows): {e}") from None
            q = np.array([c.quantile for c in cals], dtype=np.float64)
        if small.size:
            what = "the marginal threshold" if self.small_groups == "marginal" else "every class"
            warnings.warn(
                f"{small.size} of {labels.size} group(s) have fewer calibration rows than the {need} that"
                f" epsilon={self.epsilon} needs: {_group_list(labels[small], counts[small])}; they get {what}"
                f" (small_groups={self.small_groups!r})",
                GroupCalibrationWarning,
                stacklevel=3,
            )
        self.groups_ = labels
        self.group_counts_ = counts.astype(np.int64)
        self.group_quantiles_ = q
        self.small_groups_ = labels[small]
        self._group_cals = None if cals is None else tuple(cals)
        # every group too small shares one calibration: predict handles their rows together
        self._group_small = np.zeros(labels.size, dtype=bool)
        self._group_small[small] = True

    def _bisect(self, P, y, k, lo, hi, chunk_bytes, rows=None):
        """``_calibrate_parameter`` on the once-sorted calibration rows (``rows`` of ``P`` only, when
        given); if ``predict_sets`` at the result covers fewer than ``k`` labels (rounding made the two
        scans disagree, or coverage not monotone in the last bits of the parameter), again with
        ``predict_sets`` itself, counting every row at every step: its result's count is then one
        evaluated (``>= k``)."""
        n = y.size if rows is None else rows.size
        fast = _RankedCalibration(P, y, chunk_bytes, rows)
        # F-beta is (1/x)-convex and decreasing for every beta (the paper's Section 2.2; its
        # properties hold with equality), so predict_sets stops early and so can the count
        early = self.score == "fbeta"
        t = _calibrate_parameter(lambda r, u: fast.covered(r, u, early), n, k, self.score, self.gamma, lo, hi)
        del fast
        if _covered(P, y, _family_utility(self.score, t, self.gamma), rows).sum() < k:
            at = np.arange(n) if rows is None else rows
            t = _calibrate_parameter(
                lambda r, u: _covered(P[at[r]], y[at[r]], u), n, k, self.score, self.gamma, lo, hi, verified=True
            )
        return t

    def _fit_family(self, P, y, eps, K, chunk_bytes) -> "_Calibration":
        n = y.size
        k = math.ceil((n + 1) * (1 - eps))
        # A label of probability 0 enters a Bayes-optimal set only through the tie tolerance, where
        # its coverage need not be monotone in the parameter: its score is taken as never covered
        # (F-beta: +inf; credal: -inf), and only the other rows are bisected on.
        labelled = np.flatnonzero(P[np.arange(n), y] != 0)
        rows = labelled if labelled.size < n else None  # read where they are: no copy of the rows
        if self.score == "fbeta":
            if k > labelled.size:  # the k-th smallest score is +inf: only every class covers
                quantile, parameter = math.inf, _FBETA_EVERY_CLASS
            else:
                parameter = quantile = self._bisect(P, y, k, 0.0, _FBETA_EVERY_CLASS, chunk_bytes, rows)
            return _Calibration(quantile, parameter=parameter, utility=_family_utility("fbeta", parameter, None))
        else:
            gamma = self.gamma
            if k > n:
                raise ValueError(
                    f"score='credal': {n} calibration rows are too few for epsilon={self.epsilon} (the quantile is"
                    " infinite, i.e. every class, which no credal utility predicts); add rows or raise epsilon"
                )
            delta_max = _credal_delta_max(gamma, K)
            if not (k <= labelled.size and _covered(P, y, _family_utility("credal", gamma, gamma), rows).sum() >= k):
                zeros = f" ({n - labelled.size} of them have a label of probability 0)" if labelled.size < n else ""
                raise ValueError(
                    f"score='credal' with gamma={gamma}: even the largest credal sets (delta = gamma) contain the"
                    f" label of fewer than {k} of the {n} calibration rows{zeros} needed for epsilon={self.epsilon};"
                    " use score='fbeta' or a larger epsilon"
                )
            parameter = self._bisect(P, y, k, gamma, delta_max, chunk_bytes, rows)
            return _Calibration(parameter, parameter=parameter, utility=_family_utility("credal", parameter, gamma))

    def _forget_calibration(self) -> None:
        """Drop the last fit's calibration: its thresholds, groups and weights, predict's stream of uniforms,
        and :meth:`predict_p`'s calibration cells and tau."""
        for attr in ("quantiles_", "parameter_", "utility_", "groups_", "group_counts_", "group_quantiles_",
                     "small_groups_", "_group_cals", "_group_index", "clusters_", "_weighted", "rank_limits_",
                     "class_weights_"):
            self.__dict__.pop(attr, None)
        self._test_rng = None
        self._p_cells = self._tau_rng = None

    def _lazy_refusal(self, P, groups, what: str) -> None:
        """One line when a lazy source meets what it cannot do (before any work)."""
        name = type(P).__name__
        if self.score not in RANKED_SCORES:
            raise ValueError(f"{name} gives the ranked scores ({', '.join(RANKED_SCORES)}) without the n x K matrix,"
                             f" not score={self.score!r}: {what} it with a dense P")
        if self.class_conditional not in (False, True):
            raise ValueError(f"{name} takes class_conditional=False or True, not {self.class_conditional!r}: {what} it"
                             f" with a dense P")
        if groups is not None:
            raise ValueError(f"{name} takes no groups (Mondrian calibration needs a dense P)")

    def _fit_lazy(self, src, y_cal, groups, weights, class_weights) -> "ConformalSetPredictor":
        """:meth:`fit` on a tree's probabilities or top-k outputs (:mod:`svbop.conformal.lazy`)."""
        from .lazy import lazy_calibration_scores, lazy_quantile

        self._lazy_refusal(src, groups, "calibrate")
        if class_weights is not None or getattr(self, "label_noise", None) is not None:
            raise ValueError(f"{type(src).__name__} takes no class_weights or label_noise: give a dense P")
        n, K = src.shape
        if n == 0:
            raise ValueError(f"P_cal has no rows (shape {src.shape}): the calibration set is empty")
        y_cal = check_labels(y_cal, src.shape, "y_cal")
        eps = _epsilon(self.epsilon)
        if weights is not None:
            if self.class_conditional:
                raise ValueError(f"{type(src).__name__} takes weights with class_conditional=False only (a weighted"
                                 f" threshold per test row and class is an n x K matrix)")
            from .weighted import check_weights

            weights = check_weights(weights, n, "weights", "P_cal")
        self._forget_calibration()  # predict_p's calibration cells are not kept for lazy sources
        self.seed_ = _seed(self.random_state)
        U = self._uniforms(0, n) if self.randomized else None
        self.n_classes_ = K
        if weights is None and not self.class_conditional:  # one order statistic: a tree's far labels bounded
            self.quantile_ = lazy_quantile(src, y_cal, self.score, self.k_reg, self.lam, U, eps)
            return self
        s = lazy_calibration_scores(src, y_cal, self.score, self.k_reg, self.lam, U)
        if weights is not None:
            from .weighted import WeightedQuantiles

            self._weighted = WeightedQuantiles(s, weights, float(1 - eps))
            self.quantile_ = float(self._weighted.row_thresholds(np.array([self._weighted.mean_weight]),
                                                                 normalised=True)[0])
        elif self.class_conditional:
            self.quantiles_ = _class_quantiles(s, y_cal, K, eps)
            self.quantile_ = float(self.quantiles_.max())
        return self

    def _predict_lazy(self, src, groups, weights, row_seeds) -> SetPredictions:
        """:meth:`predict` on a tree's probabilities or top-k outputs (:mod:`svbop.conformal.lazy`)."""
        from .lazy import lazy_sets

        if not hasattr(self, "quantile_"):
            raise ValueError("ConformalSetPredictor is not fitted: call fit(P_cal, y_cal) first")
        self._lazy_refusal(src, groups, "predict")
        if hasattr(self, "groups_") or getattr(self, "class_weights_", None) is not None \
                or getattr(self, "rank_limits_", None) is not None or getattr(self, "clusters_", None) is not None:
            raise ValueError(f"{type(src).__name__}: this predictor was calibrated with groups, class weights, RC3P or"
                             f" clusters, which need a dense P")
        if src.shape[1] != self.n_classes_:
            raise ValueError(f"P has {src.shape[1]} classes but the predictor was calibrated on {self.n_classes_}")
        n = src.shape[0]
        if self._weights_given(weights):
            from .weighted import check_weights

            q_row = self._weighted.row_thresholds(check_weights(weights, n, "weights", "P"))
        else:
            q_row = self.quantile_
        q_class = getattr(self, "quantiles_", None) if self.class_conditional else None
        if q_class is not None:
            q_row = math.inf
        return lazy_sets(src, q_row, q_class, self.score, self.k_reg, self.lam, self._test_uniforms(n, row_seeds),
                         self.empty)

    def _check_predict(self, P):
        if not hasattr(self, "quantile_"):
            raise ValueError("ConformalSetPredictor is not fitted: call fit(P_cal, y_cal) first")
        P = as_score_matrix(P, "P")
        if P.shape[1] != self.n_classes_:
            raise ValueError(f"P has {P.shape[1]} classes but the predictor was calibrated on {self.n_classes_}")
        return P

    def _row_calibrations(self, P, groups):
        """``None`` without groups; otherwise each row's group index into ``groups_`` (``-1``: not
        seen in ``fit``, warned about), checked."""
        grouped = hasattr(self, "groups_")
        if groups is None:
            if grouped:
                raise ValueError(
                    "groups is required: the predictor was calibrated per group (fit(P_cal, y_cal, groups=...))"
                )
            return None
        if not grouped:
            raise ValueError(
                "groups given to predict but the predictor was calibrated without groups: pass"
                " fit(P_cal, y_cal, groups=...) too"
            )
        groups = _check_groups(groups, P.shape[0], "groups", "P")
        labels, inverse = np.unique(groups, return_inverse=True)
        inverse = inverse.reshape(-1)
        where = _group_positions(self.groups_, labels)
        unseen = np.flatnonzero(where < 0)
        if unseen.size:
            counts = np.bincount(inverse, minlength=labels.size)
            warnings.warn(
                f"{unseen.size} group(s) not seen in fit: {_group_list(labels[unseen], counts[unseen])};"
                " their rows get the marginal threshold",
                GroupCalibrationWarning,
                stacklevel=3,
            )
        return where[inverse]

    def predict(self, P, groups=None, *, weights=None, return_nodes: bool = False,
                chunk_bytes: int = DEFAULT_CHUNK_BYTES, row_seeds=None):
        """Conformal sets of the rows of ``P`` (classes in decreasing probability).

        ``groups`` (one per row) is required when ``fit`` had groups, and refused otherwise: each
        row gets its group's threshold; a group not seen in ``fit`` gets the marginal one (one
        :class:`GroupCalibrationWarning` per call names them).  The randomised scores draw one
        fresh uniform per row from the fitted model's generator (seeded by ``fit``'s
        ``random_state``): every call gets new ones, so rows predicted one at a time cover as
        rows predicted in one batch do (the calls of a fitted model, in the same order, give the
        same sets).  ``row_seeds`` (one integer per row, e.g. a request id) gives each row its own
        uniform instead, a function of the fit's seed and that number: the same row and seed get
        the same set from every call, whatever the batch, and from :meth:`predict_mask`.
        """
        if not hasattr(self, "quantile_"):
            raise ValueError("ConformalSetPredictor is not fitted: call fit(P_cal, y_cal) first")
        if return_nodes and self.score != "hierarchical":
            raise ValueError(f"return_nodes is for score='hierarchical' (its sets are unions of nodes), not {self.score!r}")
        if is_dask_array(P):  # block by block on dask's scheduler, then joined: svbop.conformal.dask
            from .dask import predict as dask_predict

            kw = {"return_nodes": True} if return_nodes else {}
            return dask_predict(self, P, groups, weights=weights, chunk_bytes=chunk_bytes, row_seeds=row_seeds, **kw)
        if is_lazy(P):
            return self._predict_lazy(P, groups, weights, row_seeds)
        P = self._check_predict(P)
        if self._weights_given(weights):
            from ._ranked import mask_sets

            indices, sizes = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
            for _, mask, X in self._weighted_masks(P, weights, chunk_bytes, row_seeds):
                ind, size = mask_sets(mask, X)
                indices.append(ind)
                sizes.append(size)
            return SetPredictions(np.concatenate(indices), np.concatenate([[0], np.cumsum(np.concatenate(sizes))]),
                                  P.shape[1])
        where = self._row_calibrations(P, groups)
        if where is None:
            return self._predict_with(self._marginal(), P, chunk_bytes, return_nodes, row_seeds)
        if self.score in RANKED_SCORES:  # one pass, one threshold per row
            return _mask_sets(P, self.score, self._row_quantiles(where), None, self.k_reg, self.lam,
                              self._test_uniforms(P.shape[0], row_seeds), self.empty, chunk_bytes)
        # one call per distinct calibration: every small and unseen group's rows together
        key = self._row_keys(where)
        marginal = self._marginal()
        fallback = marginal if self.small_groups == "marginal" else _Calibration.every_class()
        order = np.argsort(key, kind="stable")
        keys, starts = np.unique(key[order], return_index=True)
        bounds = np.append(starts, key.size)
        parts, nodes = [], [None] * P.shape[0]
        for j, k in enumerate(keys.tolist()):
            rows = order[bounds[j] : bounds[j + 1]]
            cal = marginal if k == -1 else fallback if k == -2 else self._group_calibration(k)
            out = self._predict_with(cal, P[rows], chunk_bytes, return_nodes)
            if return_nodes:
                out, part_nodes = out
                for r, v in zip(rows.tolist(), part_nodes):
                    nodes[r] = v
            parts.append((rows, out))
        merged = _merge_rows(parts, P.shape[0], P.shape[1])
        return (merged, nodes) if return_nodes else merged

    def predict_p(self, P, groups=None, *, smoothed: bool = False, row_seeds=None,
                  chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
        """Conformal p-values (Vovk et al.) of every class of the rows of ``P``: an ``(n, K)`` array.

        ``p[i, c] = (1 + #{calibration scores >= s(x_i, c)}) / (n_cell + 1)``, counted in the
        cell that calibrates the row's class ``c``: all calibration rows (marginal), those of
        label ``c`` (``class_conditional=True``) or of the row's group (``groups``, Mondrian; a
        small or unseen group as ``predict`` treats it, ``small_groups="full"``: 1).  The set at
        ``epsilon`` is ``{c : p[i, c] > epsilon}``, exactly :meth:`predict`'s (the same scores, the
        same tolerance; with ``empty="top1"`` an empty one becomes the top class).
        ``smoothed=True``: ``(#{>} + tau (1 + #{=})) / (n_cell + 1)``, ``tau`` one uniform per row,
        exactly uniform for the true label (:mod:`svbop.conformal.pvalues`).  The randomised
        scores' uniforms come as :meth:`predict` draws them (fresh from the model's generator, or
        from ``row_seeds``); ``tau`` from a stream of its own (or ``row_seeds``).  The ranked
        scores, marginal, ``class_conditional=True`` or grouped; not with ``weights``.
        """
        if not hasattr(self, "quantile_"):
            raise ValueError("ConformalSetPredictor is not fitted: call fit(P_cal, y_cal) first")
        from .pvalues import predictor_p_values

        return predictor_p_values(self, P, groups, smoothed, row_seeds, chunk_bytes)

    def predict_mask(self, P, groups=None, *, weights=None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                     row_seeds=None) -> np.ndarray:
        """The sets of :meth:`predict` as an ``(n, K)`` boolean array (``mask[i, c]``: class ``c`` is in
        the set of row ``i``), computed without ranking the classes of a set (the fast path for
        LAC, APS, RAPS, SAPS, top-k and margin sets; the other scores convert :meth:`predict`'s
        sets).  The randomised scores' uniforms are drawn as :meth:`predict` draws them (fresh per
        call, or from ``row_seeds``).  A dask array ``P`` gives a lazy dask array chunked by its rows
        (:mod:`svbop.conformal.dask`: the same sets, one block of rows per task)."""
        if is_dask_array(P):
            from .dask import predict_mask as dask_predict_mask

            return dask_predict_mask(self, P, groups, weights=weights, chunk_bytes=chunk_bytes, row_seeds=row_seeds)
        if is_lazy(P):  # refused past MAX_MASK_BYTES (svbop.conformal.lazy)
            return lazy_mask(self._predict_lazy(P, groups, weights, row_seeds), *P.shape, type(P).__name__)
        P = self._check_predict(P)
        if self._weights_given(weights):
            mask = np.empty(P.shape, dtype=bool)
            for row0, part, _ in self._weighted_masks(P, weights, chunk_bytes, row_seeds):
                mask[row0 : row0 + part.shape[0]] = part
            return mask
        if self.score not in RANKED_SCORES:
            return self.predict(P, groups, chunk_bytes=chunk_bytes, row_seeds=row_seeds).to_mask()
        where = self._row_calibrations(P, groups)
        if where is None:
            cal = self._marginal()
            q_row, q_class = cal.quantile, cal.quantiles
        else:
            q_row, q_class = self._row_quantiles(where), None
        mask = np.empty(P.shape, dtype=bool)
        k_class = getattr(self, "rank_limits_", None) if where is None else None
        for row0, part, _ in _mask_chunks(P, self.score, q_row, q_class, self.k_reg, self.lam,
                                          self._test_uniforms(P.shape[0], row_seeds), self.empty, chunk_bytes, k_class,
                                          values=False, out=mask):
            if part.base is not mask:  # a path that made its own
                mask[row0 : row0 + part.shape[0]] = part
        return mask

    def _test_uniforms(self, n: int, row_seeds=None):
        """The uniforms of ``n`` rows of one predict call: fresh from the model's generator (its
        stream 1, so a first call draws what earlier versions drew by position), or from ``row_seeds``."""
        if not self.randomized:
            return None
        if row_seeds is not None:
            return row_uniforms(self.seed_, row_seeds, n)
        if getattr(self, "_test_rng", None) is None:
            self._test_rng = np.random.default_rng(np.random.SeedSequence(self.seed_, spawn_key=(1,)))
        return self._test_rng.random(n)

    def _row_quantiles(self, where: np.ndarray) -> np.ndarray:
        """Each row's threshold: its group's, or the marginal one for a group not seen in ``fit``."""
        return np.where(where >= 0, self.group_quantiles_[np.maximum(where, 0)], self.quantile_)

    def _row_keys(self, where: np.ndarray) -> np.ndarray:
        """Each row's calibration: its group's index, ``-1`` (unseen: marginal), ``-2`` (too small)."""
        key = where.copy()
        seen = where >= 0
        key[seen & self._group_small[np.maximum(where, 0)]] = -1 if self.small_groups == "marginal" else -2
        return key

    def _group_calibration(self, j: int) -> "_Calibration":
        if self._group_cals is not None:
            return self._group_cals[j]
        return _Calibration(float(self.group_quantiles_[j]))

    def _marginal(self) -> "_Calibration":
        return _Calibration(
            self.quantile_,
            quantiles=getattr(self, "quantiles_", None),
            parameter=getattr(self, "parameter_", None),
            utility=getattr(self, "utility_", None),
            rank_limits=getattr(self, "rank_limits_", None),
        )

    def _predict_with(self, cal: "_Calibration", P: np.ndarray, chunk_bytes: int, return_nodes: bool = False,
                      row_seeds=None):
        """The sets of the rows of ``P`` under one calibration (see :meth:`_calibrate`); with
        ``return_nodes`` (hierarchical score only) also each row's nodes."""
        if self.score == "hierarchical":
            from .hierarchical import hierarchical_conformal_sets

            q = math.inf if cal.every_class_ else cal.quantile
            return hierarchical_conformal_sets(P, q, self.hierarchy, self.max_nodes, empty=self.empty,
                                               return_nodes=return_nodes, chunk_bytes=chunk_bytes)
        if cal.every_class_:
            return _every_class(P, chunk_bytes)
        if self.score in ("fbeta", "credal"):
            return predict_sets(P, cal.utility, chunk_bytes=chunk_bytes)
        if self._kernel_path:
            return _mask_sets(P, self.score, cal.quantile, cal.quantiles, self.k_reg, self.lam,
                              self._test_uniforms(P.shape[0], row_seeds), self.empty, chunk_bytes, cal.rank_limits)
        if self.score == "lac" and not self.class_conditional:
            return conformal_sets(P, cal.quantile, empty=self.empty, chunk_bytes=chunk_bytes)
        q = cal.quantiles if self.class_conditional else cal.quantile
        return _score_sets(P, q, self.score, self.k_reg, self.lam, self.empty, chunk_bytes)


def _group_positions(known: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The index of each of ``labels`` in the sorted unique ``known``, ``-1`` where absent."""
    if known.size == 0 or labels.size == 0:
        return np.full(labels.size, -1, dtype=np.int64)
    try:
        pos = np.searchsorted(known, labels)
    except TypeError:  # labels of another kind than the known ones (strings against integers)
        index = {v: j for j, v in enumerate(known.tolist())}
        return np.array([index.get(v, -1) for v in labels.tolist()], dtype=np.int64)
    pos = np.minimum(pos, known.size - 1)
    hit = known[pos] == labels
    return np.where(hit, pos, -1).astype(np.int64)
