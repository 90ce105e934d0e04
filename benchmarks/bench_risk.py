"""Issue 48, items 1-3: fit + predict_mask time of risk control, Learn-then-Test, conditional sets over
overlapping groups and weighted sets, beside plain split-conformal LAC in the same run.

    PYTHONPATH=workflow python benchmarks/bench_risk.py [--repeat 3] [--n 5000]

Data: ``n`` calibration and ``n`` test rows, softmax of Gaussian logits (scale 3: peaked, as a trained
model's), labels drawn from the probabilities, K = 100 and 1,000; a random tree with branching 10 for
the hierarchical loss; three overlapping groups for the conditional sets; weights exp(x) of a
Gaussian covariate.  Median of ``repeat`` runs, one process, wall time.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _timing import median_time  # noqa: E402

from svbop.conformal import (  # noqa: E402
    ConditionalSetPredictor,
    ConformalSetPredictor,
    LearnThenTest,
    RiskControlSetPredictor,
    set_loss,
)
from svbop.datasets.base import Hierarchy  # noqa: E402


def data(rng, n, K):
    Z = rng.standard_normal((n, K)) * 3.0
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = np.minimum((P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    return P, y


def tree(K, branching=10):
    """Leaves 0..K-1 grouped by ``branching`` level by level up to one root."""
    parent, level, next_id = [], list(range(K)), K
    parent = [-1] * K
    while len(level) > 1:
        up = []
        for i in range(0, len(level), branching):
            for node in level[i : i + branching]:
                parent[node] = next_id
            parent.append(-1)
            up.append(next_id)
            next_id += 1
        level = up
    return Hierarchy(np.array(parent), n_classes=K)


def _mapie_conditional(Pc, yc, Pt, Phi, n, K):
    """MAPIE 1.6's exact conditional cutoffs, one test row at a time (its cvxpy set-up is for the kernel
    part only, which the finite feature map never uses: skipped)."""
    import mapie.conditional_conformal_prediction as mcc
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Given(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.arange(K)
            return self

        def predict_proba(self, X):
            return X[:, :K]

        def predict(self, X):
            return X[:, :K].argmax(axis=1)

    Xc = np.concatenate([Pc, Phi[:n]], axis=1)
    Xt = np.concatenate([Pt, Phi[n : n + Pt.shape[0]]], axis=1)
    mcc.setup_cvx_problem = lambda *a, **k: None
    model = mcc.ConditionalSplitConformalClassifier(
        feature_map=lambda x: np.concatenate([np.ones((x.shape[0], 1)), x[:, K:]], axis=1),
        estimator=Given().fit(Xc, yc), confidence_level=0.9, conformity_score="lac", prefit=True)
    model.conformalize(Xc, yc)
    return model.predict_set(Xt)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--mapie", action="store_true", help="also MAPIE's ConditionalSplitConformalClassifier (K = 100)")
    args = ap.parse_args()
    rng = np.random.default_rng(48)
    print(f"load average {os.getloadavg()[0]:.1f}; n = {args.n} calibration and test rows; seconds, median of "
          f"{args.repeat}")
    for K in (100, 1000):
        P, y = data(rng, 2 * args.n, K)
        Pc, yc, Pt = P[: args.n], y[: args.n], P[args.n :]
        x = rng.standard_normal(2 * args.n)
        w = np.exp(x)
        Phi = np.stack([x > 0, P.max(axis=1) > 0.5, rng.random(2 * args.n) < 0.3], axis=1)
        h = tree(K)
        cases = {
            "split conformal LAC (reference)": lambda: ConformalSetPredictor(0.1).fit(Pc, yc).predict_mask(Pt),
            "risk control, miscoverage": lambda: RiskControlSetPredictor(0.1).fit(Pc, yc).predict_mask(Pt),
            "risk control, class cost": lambda: RiskControlSetPredictor(
                0.1, "class_cost", cost=np.linspace(0.5, 1.5, K)).fit(Pc, yc).predict_mask(Pt),
            "risk control, hierarchical": lambda: RiskControlSetPredictor(
                0.05, "hierarchical", hierarchy=h).fit(Pc, yc).predict_mask(Pt),
            "risk control, callable (bisection)": lambda: RiskControlSetPredictor(
                0.1, lambda m, yy: (~m[np.arange(yy.size), yy]).astype(float)).fit(Pc, yc).predict_mask(Pt),
            "Learn-then-Test, 2 losses": lambda: LearnThenTest(
                ["miscoverage", set_loss("size_above", max_size=10)], [0.4, 0.5]).fit(Pc, yc).predict_mask(Pt),
            "weighted LAC": lambda: ConformalSetPredictor(0.1).fit(Pc, yc, weights=w[: args.n]).predict_mask(
                Pt, weights=w[args.n :]),
            "weighted LAC, class-conditional": lambda: ConformalSetPredictor(0.1, class_conditional=True).fit(
                Pc, yc, weights=w[: args.n]).predict_mask(Pt, weights=w[args.n :]),
            "conditional, 3 overlapping groups": lambda: ConditionalSetPredictor(0.1).fit(
                Pc, yc, Phi[: args.n]).predict_mask(Pt, Phi[args.n :]),
        }
        if K == 100 and args.mapie:
            cases["MAPIE conditional, 200 test rows"] = lambda: _mapie_conditional(Pc, yc, Pt[:200], Phi, args.n, K)
            cases["svbop conditional, 200 test rows"] = lambda: ConditionalSetPredictor(0.1).fit(
                Pc, yc, Phi[: args.n]).predict_mask(Pt[:200], Phi[args.n : args.n + 200])
        for name, f in cases.items():
            try:
                t, _ = median_time(f, args.repeat)
                print(f"K={K:>5}  {name:<38} {t:8.3f}")
            except ValueError as exc:
                print(f"K={K:>5}  {name:<38} refused: {exc}")


if __name__ == "__main__":
    main()
