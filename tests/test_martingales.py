"""Conformal test martingales, svbop.conformal.ExchangeabilityMartingale (issue 55, item 2): the
paths of crepes' and MAPIE's simple jumper and a brute-force power mixture; at most delta false
alarms over many exchangeable streams (Ville); detection of a class-frequency shift and of a
confidence shift at a known step, with the delay measured; log space (no overflow); refusals."""

import functools
import math

import numpy as np
import pytest
from bench_anchors import real_like

from svbop.conformal import ExchangeabilityMartingale, online_p_values


@functools.lru_cache(maxsize=8)
def _pool(seed, n=6000, K=10):
    """Overconfident outputs whose first half of the classes is easy (high peak) and second half
    hard: a pool to draw streams from, by class."""
    rng = np.random.default_rng(seed)
    P, y = real_like(rng, n, K, peak=(1.0, 4.0))
    Pe, ye = real_like(rng, n, K, peak=(5.0, 12.0))
    easy = ye < K // 2
    hard = y >= K // 2
    return np.concatenate([Pe[easy], P[hard]]), np.concatenate([ye[easy], y[hard]])


def _label_scores(P, y):
    return 1.0 - P[np.arange(y.size), y] / P.sum(axis=1)  # LAC


def stream(seed, n=1500, shift=None, at=750, K=10):
    """``n`` rows drawn from the pool at random (exchangeable); from row ``at`` on, ``shift="classes"``
    draws 90 % of the rows from the hard classes (label shift), ``shift="confidence"`` reports the
    probabilities at temperature 0.35 (overconfident)."""
    P, y = _pool(seed % 7, K=K)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, y.size, n)
    if shift == "classes":
        hard = np.flatnonzero(y >= K // 2)
        easy = np.flatnonzero(y < K // 2)
        later = np.where(rng.random(n - at) < 0.9, rng.choice(hard, n - at), rng.choice(easy, n - at))
        rows[at:] = later
    P, y = P[rows], y[rows]
    if shift == "confidence":
        Z = np.log(np.maximum(P[at:], 1e-300)) / 0.35
        Q = np.exp(Z - Z.max(axis=1, keepdims=True))
        P = P.copy()
        P[at:] = Q / Q.sum(axis=1, keepdims=True)
    return P, y


def _p(seed, **kw):
    P, y = stream(seed, **kw)
    return online_p_values(_label_scores(P, y), random_state=seed)


@pytest.mark.parametrize("epsilons", [(-1, 0, 1), (-1, -0.5, 0, 0.5, 1)])
def test_simple_jumper_is_crepes_simple_jumper(epsilons):
    crepes = pytest.importorskip("crepes.martingales", reason="crepes is not installed (pip install crepes)")
    p = _p(1, shift="confidence")
    ours = ExchangeabilityMartingale("simple_jumper", jump=0.02, epsilons=epsilons).run(p)
    theirs = crepes.SimpleJumper(J=0.02, bf=crepes.EpsilonBettingFunction(E=list(epsilons))).apply(p)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    index = crepes.SimpleJumper(J=0.02, bf=crepes.EpsilonBettingFunction(E=list(epsilons))).apply(p, c=100)
    m = ExchangeabilityMartingale("simple_jumper", delta=0.01, jump=0.02, epsilons=epsilons)
    m.run(p)
    assert index == _first(ours, 100) and m.alarm_ == (index if index < p.size else -1)


def _first(path, c):
    hit = np.flatnonzero(path >= c)
    return int(hit[0]) if hit.size else path.size


def test_simple_jumper_is_mapie_online_martingale_jumper():
    mapie = pytest.importorskip("mapie.exchangeability_testing.martingales", reason="MAPIE >= 1.4 is not installed")
    p = _p(2, shift="classes")
    test = mapie.OnlineMartingaleTest(jump_size=0.01, random_state=0)
    theirs = np.array([test.update_simple_jumper_martingale(float(v)) for v in p])
    np.testing.assert_allclose(ExchangeabilityMartingale("simple_jumper").run(p), theirs, rtol=1e-9)


def test_power_mixture_is_the_brute_force_mixture_of_power_martingales():
    p = np.random.default_rng(0).random(200) ** 1.5
    e = (np.arange(100) + 0.5) / 100
    brute = np.array([np.mean([np.prod(ek * p[: t + 1] ** (ek - 1)) for ek in e]) for t in range(200)])
    m = ExchangeabilityMartingale("power", grid=100)
    np.testing.assert_allclose(m.run(p), brute, rtol=1e-9)
    assert m.alarm_ == _first(brute, 100) if _first(brute, 100) < 200 else m.alarm_ == -1


def test_log_space_keeps_astronomic_capital_without_overflow():
    p = np.full(20_000, 1e-6)
    for method in ("simple_jumper", "power"):
        m = ExchangeabilityMartingale(method, delta=1e-12)
        with np.errstate(all="raise"):
            path = m.run(p)
        assert np.all(np.isfinite(m.log_path_)) and m.log_path_[-1] > 1000  # capital e^1000 and more
        assert np.isinf(path[-1]) and m.alarm_ == _first(path, 1e12) and 0 <= m.alarm_ < 100
        assert np.all(np.diff(m.log_path_) > 0)
    m = ExchangeabilityMartingale("power")  # a p-value of exactly 0: infinite evidence, not NaN
    m.run(np.r_[0.5, 0.0, 0.5])
    assert np.isposinf(m.log_path_[1]) and m.alarm_ == 1 and not np.isnan(m.log_path_).any()


@pytest.mark.parametrize("method", ["simple_jumper", "power"])
def test_false_alarms_on_exchangeable_streams_are_at_most_delta(method):
    """Ville: over 1,000 exchangeable streams of 1,000 rows (rows of real-like outputs in random
    order, online conformal p-values of the LAC score), the share that ever reaches 1/delta is at
    most delta, at delta = 0.01, 0.05 and 0.2, up to the binomial spread of 1,000 streams (the jumper
    comes close to its bound: 0.0455 at delta = 0.05 over 2,000 streams of uniform p-values)."""
    peaks = np.array([ExchangeabilityMartingale(method).run(_p(seed, n=1000)).max() for seed in range(1000)])
    for delta in (0.01, 0.05, 0.2):
        share = np.mean(peaks >= 1 / delta)
        assert share <= delta + 2.5 * math.sqrt(delta * (1 - delta) / peaks.size), (delta, share)


@pytest.mark.parametrize("shift, method, found, median", [
    ("classes", "simple_jumper", 20, 200), ("classes", "power", 18, 600), ("confidence", "simple_jumper", 20, 300)])
def test_a_shift_at_a_known_step_is_detected_and_its_delay_measured(shift, method, found, median):
    """The class frequencies (90 % hard classes: less conforming labels) or the confidence
    (temperature 0.35: the labels of the many right answers more conforming, of the wrong ones
    less) change at row 750 of 1,500.  At delta = 0.01 no stream alarms before the change, and
    the simple jumper finds both shifts in every one of 20 streams (median delay about 80 and 130
    rows); the power martingale, which bets on small p-values only and has lost capital over the
    750 exchangeable rows, finds the class shift later (about 350 rows) and misses the confidence
    shift, whose p-values grow more than they shrink.  workflow/docs/benchmarks.md has the delays."""
    delays = []
    for seed in range(20):
        m = ExchangeabilityMartingale(method, delta=0.01)
        m.run(_p(seed, shift=shift))
        assert m.alarm_ == -1 or m.alarm_ >= 750, (seed, m.alarm_)
        if m.alarm_ >= 0:
            delays.append(m.alarm_ - 750)
    assert len(delays) >= found and np.median(delays) < median, delays


def test_bad_input_is_refused_in_one_line():
    cases = [
        (lambda: ExchangeabilityMartingale("plug_in"), "method"),
        (lambda: ExchangeabilityMartingale(delta=0), "delta"),
        (lambda: ExchangeabilityMartingale(delta=1.5), "delta"),
        (lambda: ExchangeabilityMartingale(jump=1), "jump"),
        (lambda: ExchangeabilityMartingale(epsilons=(-2, 0)), "epsilons"),
        (lambda: ExchangeabilityMartingale("power", grid=0), "grid"),
        (lambda: ExchangeabilityMartingale().run([0.5, 1.2]), r"p_values\[1\]"),
        (lambda: ExchangeabilityMartingale().run([0.5, math.nan]), r"p_values\[1\]"),
        (lambda: ExchangeabilityMartingale().run(np.ones((2, 2)) / 2), "1-d"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words) as err:
            call()
        assert "\n" not in str(err.value)
