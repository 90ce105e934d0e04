"""Exchangeability alarms and online coverage on streams of real-like outputs (issue 55, items 2-3):
the numbers of workflow/docs/benchmarks.md, section "Streams".

* False alarms: the share of 1,000 exchangeable streams of 1,000 rows (rows of overconfident
  real-like outputs in random order; online p-values of the LAC score) whose martingale ever
  reaches 1/delta, for svbop's simple jumper and power martingale, crepes' SimpleJumper with its
  default five accounts, and MAPIE's OnlineMartingaleTest jumper (the same path as svbop's: its
  share is svbop's) and plug-in martingale (5 streams: a kernel density of the history per row).
* Detection delays: 20 streams of 1,500 rows whose class frequencies (90 % hard classes) or
  confidence (temperature 0.35) change at row 750; the median and the largest delay to the first
  alarm at delta = 0.01, and how many streams alarmed.
* Online coverage: ACI, DtACI and PID (deterministic APS and LAC, epsilon = 0.1) on three
  class-frequency drifts and three temperature oscillations of 20,000 rows (tests/test_conformal_adaptive.py's
  ``_class_drift``): the largest distance of a window of 500 from 0.9, and the mean set size.

    python benchmarks/bench_stream.py [--mapie-plugin]     (about 2 minutes on one core; MAPIE's plug-in
    martingale takes 0.15 s a row from 200 rows of history on: --mapie-plugin adds it on 5 streams)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "tests")]

from test_conformal_adaptive import _class_drift  # noqa: E402
from test_martingales import _p  # noqa: E402

from svbop.conformal import AdaptiveConformalSetPredictor, ExchangeabilityMartingale  # noqa: E402


def _crepes():
    try:
        from crepes.martingales import SimpleJumper
    except ImportError:
        return None
    return lambda p: SimpleJumper().apply(p)


def _mapie_plugin():
    try:
        from mapie.exchangeability_testing.martingales import OnlineMartingaleTest
    except ImportError:
        return None

    def run(p):
        test = OnlineMartingaleTest(test_method="plugin_martingale", random_state=0, warn=False)
        out = []
        for v in p:
            test.pvalue_history.append(float(v))
            out.append(test.update_plugin_martingale(float(v)))
        return np.array(out)

    return run


def _temperature_drift(seed, n=20_000, K=20):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, K))
    Z[np.arange(n), rng.integers(0, K, n)] += rng.uniform(2, 8, n)
    T = np.exp(Z - Z.max(axis=1, keepdims=True))
    T /= T.sum(axis=1, keepdims=True)
    y = np.minimum((T.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    Zs = Z * 1.5 / (1.0 + 0.6 * np.sin(2 * np.pi * np.arange(n) / 4000))[:, None]
    P = np.exp(Zs - Zs.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True), y


def main() -> None:
    runners = {"svbop simple_jumper": lambda p: ExchangeabilityMartingale("simple_jumper").run(p),
               "svbop power": lambda p: ExchangeabilityMartingale("power").run(p)}
    if (c := _crepes()) is not None:
        runners["crepes SimpleJumper (5 accounts)"] = c
    plugin = _mapie_plugin() if "--mapie-plugin" in sys.argv else None  # 0.15 s a row at 200 rows of history
    print("## false alarms (share of exchangeable streams ever at or above 1/delta)")
    streams = [_p(seed, n=1000) for seed in range(1000)]
    for name, run in runners.items():
        peaks = np.array([run(p).max() for p in streams])
        print(f"{name:<36}" + "  ".join(f"delta={d:g}: {np.mean(peaks >= 1 / d):.4f}" for d in (0.01, 0.05, 0.2)))
    if plugin is not None:
        peaks = np.array([plugin(p).max() for p in streams[:5]])
        print(f"{'MAPIE plug-in (5 streams)':<36}" + "  ".join(
            f"delta={d:g}: {np.mean(peaks >= 1 / d):.4f}" for d in (0.01, 0.05, 0.2)))
    print("## detection delay at delta = 0.01 (change at row 750 of 1,500; 20 streams)")
    if plugin is not None:
        runners["MAPIE plug-in (5 streams)"] = plugin
    for shift in ("classes", "confidence"):
        ps = [_p(seed, shift=shift) for seed in range(20)]
        for name, run in runners.items():
            delays, early = [], 0
            for p in ps[:5] if name.startswith("MAPIE") else ps:
                hit = np.flatnonzero(run(p) >= 100)
                if hit.size and hit[0] < 750:
                    early += 1
                elif hit.size:
                    delays.append(int(hit[0]) - 750)
            med = f"median {np.median(delays):.0f}, max {max(delays)}" if delays else "none"
            print(f"{shift:<11}{name:<36}alarmed {len(delays)} ({med}); before the change: {early}")
    print("## online coverage (epsilon = 0.1, windows of 500 over 19,000 rows)")
    for drift, make in (("class frequencies", _class_drift), ("temperature", _temperature_drift)):
        for score in ("aps", "lac"):
            for seed in range(3):
                P, y = make(seed)
                row = []
                for method in ("aci", "dtaci", "pid"):
                    m = AdaptiveConformalSetPredictor(0.1, score=score, method=method, random_state=seed)
                    sets = m.fit(P[:1000], y[:1000]).update(P[1000:], y[1000:])
                    hit = sets.contains(y[1000:])
                    worst = np.abs(hit[:19_000].reshape(-1, 500).mean(axis=1) - 0.9).max()
                    row.append(f"{method} {worst:.3f} / {sets.sizes.mean():.2f}")
                print(f"{drift:<18}{score:<4} seed {seed}: " + "   ".join(row))


if __name__ == "__main__":
    main()
