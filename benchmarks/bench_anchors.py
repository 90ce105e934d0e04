"""svbop's conformal sets beside TorchCP's, in one run on the same float64 probabilities (issue 43).

For LAC, randomised APS, randomised RAPS, class-conditional LAC, margin, randomised top-k and
RC3P (LAC; issue 48), at K = 100 (5,000 calibration
/ 5,000 test rows) and K = 1,000 (10,000 / 10,000), times

* svbop: ``ConformalSetPredictor(...).fit(P_cal, y_cal)`` then ``predict_mask(P_test)`` (and
  ``predict``, the ranked sets, for scale);
* TorchCP 1.2: ``calculate_threshold(logits, labels, alpha)`` then ``predict_with_logits(logits)``
  (its calibrate + predict from logits) with ``logits = log(P)`` as float64 tensors, so that its
  softmax gives back the same probabilities;

on one thread each (``torch.set_num_threads(1)``, numpy's BLAS limited to 1 thread; svbop's
kernels are single-threaded), median of ``--repeat`` runs, and prints the times, their ratio
(TorchCP / svbop: above 1 means svbop is faster), and the mean coverage and set size of both
(the randomised sets differ row by row: their uniforms are not the same draws).

The outputs are those of an overconfident classifier, CIFAR-100-like (tests/test_conformal_scores.py's
``_real_like``: one peaked logit per row, labels drawn from the softmax, probabilities sharpened).

TorchCP is optional (``pip install --no-deps torchcp``: it needs torch, which svbop's features
already use).  Its package imports torchsort, torch_geometric and transformers for its other
modules (losses, graphs, LLMs); when they are not installed, empty stand-ins are put in their place,
which the classification predictors never use.

    python benchmarks/bench_anchors.py [--repeat 5] [--sizes 100:5000:5000 1000:10000:10000]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from threadpoolctl import threadpool_limits

import svbop
from _timing import median_time
from stand_ins import StandIns


def real_like(rng, n, K, sharpen=1.5, peak=(4.0, 14.0)):
    """Outputs of an overconfident classifier, CIFAR-100-like (with the default ``peak``: 86 % top-1 at
    K = 100, LAC sets of about 3 classes, deterministic APS covering 99.9 %): one logit per row raised by
    ``uniform(*peak)``, labels drawn from the softmax of the logits, probabilities from the softmax of the
    logits times ``sharpen``.  Also the tests' outputs (``tests/test_conformal_scores.py``, ``..._rc3p.py``)."""
    Z = rng.standard_normal((n, K))
    Z[np.arange(n), rng.integers(0, K, n)] += rng.uniform(*peak, n)
    T = np.exp(Z - Z.max(axis=1, keepdims=True))
    T /= T.sum(axis=1, keepdims=True)
    y = np.minimum((T.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    Zs = Z * sharpen
    P = np.exp(Zs - Zs.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True), y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--sizes", nargs="*", default=["100:5000:5000", "1000:10000:10000"],
                    help="K:calibration rows:test rows")
    ap.add_argument("--methods", nargs="*", default=None,
                    help="only the methods whose name contains one of these words (e.g. margin)")
    args = ap.parse_args()
    sys.meta_path.append(StandIns())
    import torch

    torch.set_num_threads(1)
    from torchcp.classification.predictor import ClassConditionalPredictor, RC3PPredictor, SplitPredictor
    from torchcp.classification.score import APS, LAC, RAPS, TOPK, Margin

    eps = args.epsilon
    print(f"epsilon {eps}; median of {args.repeat}; one thread; {os.uname().machine}, "
          f"load {os.getloadavg()[0]:.2f} at start")
    methods = [
        ("LAC", dict(score="lac"), lambda: SplitPredictor(LAC())),
        ("APS (randomised)", dict(score="aps", random_state=0), lambda: SplitPredictor(APS(randomized=True))),
        ("RAPS k_reg=2 lam=0.01 (randomised)", dict(score="raps", k_reg=2, lam=0.01, random_state=0),
         lambda: SplitPredictor(RAPS(penalty=0.01, kreg=2, randomized=True))),
        ("LAC class-conditional", dict(score="lac", class_conditional=True),
         lambda: ClassConditionalPredictor(LAC())),
        ("margin", dict(score="margin"), lambda: SplitPredictor(Margin())),
        ("top-k (randomised)", dict(score="topk", randomized=True, random_state=0),
         lambda: SplitPredictor(TOPK(randomized=True))),
        ("LAC RC3P", dict(score="lac", class_conditional="rc3p", empty="keep"), lambda: RC3PPredictor(LAC())),
    ]
    if args.methods:
        methods = [m for m in methods if any(w.lower() in m[0].lower() for w in args.methods)]
    with threadpool_limits(1):
        for size in args.sizes:
            K, n_cal, n_test = map(int, size.split(":"))
            P, y = real_like(np.random.default_rng(0), n_cal + n_test, K)
            P_cal, y_cal, P_test, y_test = P[:n_cal], y[:n_cal], P[n_cal:], y[n_cal:]
            L_cal = torch.from_numpy(np.log(np.maximum(P_cal, 1e-300)))
            L_test = torch.from_numpy(np.log(np.maximum(P_test, 1e-300)))
            t_cal = torch.from_numpy(y_cal)
            print(f"\nK = {K}, {n_cal} calibration / {n_test} test rows")
            print(f"{'method':38s} {'svbop fit+mask':>14s} {'fit+predict':>12s} {'TorchCP':>10s} {'ratio':>6s}"
                  f" {'cov svbop':>9s} {'cov TCP':>8s} {'|S| svbop':>9s} {'|S| TCP':>8s}")
            for name, kw, make in methods:
                def ours(kw=kw):
                    return svbop.ConformalSetPredictor(eps, **kw).fit(P_cal, y_cal).predict_mask(P_test)

                def ours_sets(kw=kw):
                    return svbop.ConformalSetPredictor(eps, **kw).fit(P_cal, y_cal).predict(P_test)

                def theirs(make=make):
                    torch.manual_seed(0)
                    predictor = make()
                    predictor.num_classes = K  # RC3PPredictor reads it (its calibrate sets it)
                    predictor.calculate_threshold(L_cal, t_cal, eps)
                    return predictor.predict_with_logits(L_test)

                ours(), theirs()  # compile and warm up
                t_ours, mask = median_time(ours, args.repeat)
                t_sets, _ = median_time(ours_sets, args.repeat)
                t_theirs, S = median_time(theirs, args.repeat)
                S = S.numpy() if hasattr(S, "numpy") else np.array([[c in s for c in range(K)] for s in S])
                cov = lambda m: m[np.arange(n_test), y_test].mean()  # noqa: E731
                print(f"{name:38s} {t_ours * 1e3:11.1f} ms {t_sets * 1e3:9.1f} ms {t_theirs * 1e3:7.1f} ms"
                      f" {t_theirs / t_ours:6.2f} {cov(mask):9.4f} {cov(S):8.4f} {mask.sum(1).mean():9.2f}"
                      f" {S.sum(1).mean():8.2f}")
    print(f"\nload {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
