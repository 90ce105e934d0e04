"""Conformal masks at K = 1,000 (issue 58): every ranked score's ``predict_mask`` beside LAC's, MAPIE's
and TorchCP's, in one run on the same float64 probabilities.

For every ranked score of ``svbop.ConformalSetPredictor`` (LAC, APS, RAPS, SAPS, top-k, margin;
randomised and deterministic) times ``predict_mask(P_test)`` of a fitted predictor (``predict``
alone) and ``fit`` + ``predict_mask`` (``fit+predict``), and the same for the anchors on the scores
they share:

* MAPIE 1.6 (``SplitConformalClassifier(prefit=True)`` over an estimator whose ``predict_proba`` is
  the identity): ``conformalize`` + ``predict_set`` for ``lac``, ``aps`` (its default: the last label
  included, deterministic) and ``top_k``;
* TorchCP 1.2 (``SplitPredictor``; ``logits = log(P)`` as float64 tensors): ``calculate_threshold``
  + ``predict_with_logits`` for LAC, APS, RAPS, SAPS, TOPK (randomised, its default, and
  deterministic) and Margin.

One thread each (``torch.set_num_threads(1)``, BLAS limited to 1 thread), median of ``--repeat``
runs, the calls of all methods interleaved repeat by repeat so that a change of load touches all.
Prints the times, svbop's ratio to its own LAC, and the anchors' time over svbop's.  The outputs are
``bench_anchors.real_like``'s (an overconfident CIFAR-like classifier).  MAPIE's RAPS splits the
calibration rows itself (a stratified split that needs two rows of every class): not compared.

    python benchmarks/bench_masks.py [--classes 1000] [--cal 3000] [--test 3000] [--repeat 3] [--no-anchors]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

import svbop
from bench_anchors import real_like
from stand_ins import StandIns

#: (name, svbop keywords, MAPIE conformity score or None, TorchCP score factory name and keywords or None)
SCORES = [
    ("lac", dict(score="lac"), "lac", ("LAC", {})),
    ("aps deterministic", dict(score="aps", randomized=False), "aps", ("APS", dict(randomized=False))),
    ("aps randomised", dict(score="aps", random_state=0), None, ("APS", dict(randomized=True))),
    ("raps k_reg=2 lam=0.01 deterministic", dict(score="raps", k_reg=2, lam=0.01, randomized=False), None,
     ("RAPS", dict(penalty=0.01, kreg=2, randomized=False))),
    ("raps k_reg=2 lam=0.01 randomised", dict(score="raps", k_reg=2, lam=0.01, random_state=0), None,
     ("RAPS", dict(penalty=0.01, kreg=2, randomized=True))),
    ("saps lam=0.2 deterministic", dict(score="saps", lam=0.2, randomized=False), None,
     ("SAPS", dict(weight=0.2, randomized=False))),
    ("saps lam=0.2 randomised", dict(score="saps", lam=0.2, random_state=0), None,
     ("SAPS", dict(weight=0.2, randomized=True))),
    ("topk deterministic", dict(score="topk"), "top_k", ("TOPK", dict(randomized=False))),
    ("topk randomised", dict(score="topk", randomized=True, random_state=0), None, ("TOPK", dict(randomized=True))),
    ("margin", dict(score="margin"), None, ("Margin", {})),
]


def _mapie(P_cal, y_cal, P_test, score):
    from mapie.classification import SplitConformalClassifier
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Identity(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.arange(X.shape[1])
            return self

        def predict_proba(self, X):
            return X

        def predict(self, X):
            return X.argmax(axis=1)

    est = Identity().fit(P_cal, y_cal)

    def fit():  # conformalize may be called once per model: a new one each time
        model = SplitConformalClassifier(estimator=est, confidence_level=0.9, conformity_score=score, prefit=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.conformalize(P_cal, y_cal)

    fitted = fit()
    predict = lambda: fitted.predict_set(P_test)[1][:, :, 0]  # noqa: E731
    return fit, predict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--cal", type=int, default=3000)
    ap.add_argument("--test", type=int, default=3000)
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-anchors", action="store_true", help="svbop only")
    args = ap.parse_args()
    K, eps = args.classes, args.epsilon
    P, y = real_like(np.random.default_rng(0), args.cal + args.test, K)
    P_cal, y_cal, P_test = P[: args.cal], y[: args.cal], P[args.cal :]
    anchors = not args.no_anchors
    if anchors:
        sys.meta_path.append(StandIns())
        import torch
        import torchcp.classification.score as tcp_scores
        from torchcp.classification.predictor import SplitPredictor

        torch.set_num_threads(1)
        L_cal = torch.from_numpy(np.log(np.maximum(P_cal, 1e-300)))
        L_test = torch.from_numpy(np.log(np.maximum(P_test, 1e-300)))
        t_cal = torch.from_numpy(y_cal)
    print(f"K = {K}, {args.cal} calibration / {args.test} test rows, epsilon {eps}; median of {args.repeat};"
          f" one thread; {os.uname().machine}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} at start")
    calls = {}  # (name, who, what) -> callable
    for name, kw, mapie_score, tcp in SCORES:
        model = svbop.ConformalSetPredictor(eps, **kw).fit(P_cal, y_cal)
        calls[name, "svbop", "predict"] = lambda m=model: m.predict_mask(P_test)
        calls[name, "svbop", "fit+predict"] = \
            lambda kw=kw: svbop.ConformalSetPredictor(eps, **kw).fit(P_cal, y_cal).predict_mask(P_test)
        if anchors and mapie_score is not None:
            fit, predict = _mapie(P_cal, y_cal, P_test, mapie_score)
            calls[name, "MAPIE", "predict"] = predict
            calls[name, "MAPIE", "fit+predict"] = lambda fit=fit: fit().predict_set(P_test)[1][:, :, 0]
        if anchors and tcp is not None:
            make = lambda tcp=tcp: SplitPredictor(getattr(tcp_scores, tcp[0])(**tcp[1]))  # noqa: E731
            torch.manual_seed(0)
            fitted = make()
            fitted.calculate_threshold(L_cal, t_cal, eps)
            calls[name, "TorchCP", "predict"] = lambda p=fitted: p.predict_with_logits(L_test)

            def tcp_both(make=make):
                p = make()
                p.calculate_threshold(L_cal, t_cal, eps)
                return p.predict_with_logits(L_test)

            calls[name, "TorchCP", "fit+predict"] = tcp_both
    times = {key: [] for key in calls}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in calls.values():  # compile and warm up
            f()
        for _ in range(args.repeat):
            for key, f in calls.items():
                t0 = time.perf_counter()
                f()
                times[key].append(time.perf_counter() - t0)
    med = {key: statistics.median(v) for key, v in times.items()}
    lac = med["lac", "svbop", "predict"]
    print(f"{'score':38s} {'svbop predict':>13s} {'/ LAC':>6s} {'fit+predict':>12s} {'MAPIE':>16s}"
          f" {'TorchCP':>16s}   (anchor time / svbop's, predict and fit+predict)")
    for name, *_ in SCORES:
        p, fp = med[name, "svbop", "predict"], med[name, "svbop", "fit+predict"]
        cols = []
        for who in ("MAPIE", "TorchCP"):
            if (name, who, "predict") in med:
                cols.append(f"{med[name, who, 'predict'] / p:6.2f} {med[name, who, 'fit+predict'] / fp:6.2f}x  ")
            else:
                cols.append(f"{'-':>16s}")
        print(f"{name:38s} {p * 1e3:10.1f} ms {p / lac:6.2f} {fp * 1e3:9.1f} ms {cols[0]:>16s} {cols[1]:>16s}")
    print(f"load {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
