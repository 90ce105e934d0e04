"""Speed of conformal hierarchy-restricted sets (`svbop.conformal.hierarchical`) beside
`svbop.predict_sets_hierarchical`, APS and, when given, the authors' C++ (`setvaluedprediction`).

For K = 1,000 and 10,000 classes: a random class tree (``bench_hierarchical.random_tree``, random
recursive splits into 2 to ``--branching`` parts, no single-child chains so that the authors' tree
builder takes it), probabilities and labels drawn from them (calibrated).  Probabilities:

* ``--probabilities tree`` (default): logits that follow the tree (:func:`tree_probabilities`,
  temperature 0.15: at K = 1,000 the top class is right for about 40 % of the rows, APS sets at
  epsilon = 0.1 hold about 20 classes, 3-node sets about 40 and 10-node sets about 21);
* ``--probabilities independent``: softmax of independent Gaussian scores at temperatures 0.1,
  0.15 and 0.2 (``bench_hierarchical.make_probabilities``; the tree then says nothing about the
  probabilities, and the hierarchy-restricted sets are large: 1 node is the root).  In one run on
the same matrices, one thread, it times:

* ``HierarchicalConformalScore(h, c).fit_quantile`` on ``--cal`` rows and ``predict`` on ``--test``
  rows, for ``c`` = 1, 3 and 10 (coverage, mean set size and nodes are printed too);
* ``svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, c)`` on the test rows (Bayes-optimal,
  no guarantee: the reference for the tree DP's speed);
* ``svbop.ConformalSetPredictor(epsilon, score="aps")`` fit and predict (the unrestricted score);
* with ``--authors-module-dir DIR`` (a directory holding a ``svp_cpp`` extension built from
  github.com/tfmortie/setvaluedprediction; this project ships none of it): their
  ``calibrate_csvphf`` and ``predict_set_csvphf`` (``rand=False, lambda=0``, the same ``c``) on the
  first ``--authors-rows`` rows.  Their model computes probabilities itself (a hierarchical softmax
  with one linear layer per inner node), so each row's probabilities are handed to it as the
  input ``x = log P(node | parent)`` with one-hot weights: their model then reproduces ``P`` (in
  float32).  Printed: ms per row, and how often their calibration score equals ours (it differs
  where their ``m_k`` is not monotone, see the module's notes).

Prints ms per row (best of ``--repeat`` for svbop; one pass for the authors' code, which is slow),
after a warm-up call that compiles.  The machine's load average is printed: benchmarks on a shared
machine vary with it.

    python benchmarks/bench_hierarchical_conformal.py [--K 1000 10000] [--cal 1000] [--test 1000]
        [--authors-module-dir /tmp/svpbuild --authors-rows 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import svbop  # noqa: E402
from bench_hierarchical import make_probabilities, random_tree  # noqa: E402
from svbop.conformal.hierarchical import HierarchicalConformalScore, hierarchical_scores  # noqa: E402


def draw_labels(P: np.ndarray, seed: int) -> np.ndarray:
    u = np.random.default_rng(seed).random(P.shape[0])
    return np.minimum((np.cumsum(P, axis=1) < u[:, None]).sum(axis=1), P.shape[1] - 1)


def tree_probabilities(n: int, h, temperature: float, seed: int = 0, chunk: int = 250) -> np.ndarray:
    """Softmax of logits that follow the tree: every node draws a Gaussian effect of standard
    deviation ``4 * 2**-depth`` per row, a class's logit is the sum of the effects on its path
    (divided by ``temperature``): classes of a subtree rise and fall together, coarse levels most."""
    rng = np.random.default_rng(seed)
    depth = h.depth()
    order = np.argsort(depth, kind="stable")  # parents before children
    order = order[h.parent[order] >= 0]
    scale = 4.0 * 2.0 ** -depth.astype(np.float64)
    K = h.n_classes
    out = np.empty((n, K))
    for lo in range(0, n, chunk):
        E = rng.standard_normal((min(chunk, n - lo), h.n_nodes)) * scale
        for v in order:
            E[:, v] += E[:, h.parent[v]]
        Z = E[:, :K] / temperature
        Z -= Z.max(axis=1, keepdims=True)
        np.exp(Z, out=Z)
        Z /= Z.sum(axis=1, keepdims=True)
        out[lo : lo + Z.shape[0]] = Z
    return out


def best_of(repeat: int, fn):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


# --- the authors' code, fed with our probabilities ----------------------------------------------


class Authors:
    """An ``svp_cpp.SVP`` whose hierarchical softmax reproduces given probabilities."""

    def __init__(self, module_dir: str, h) -> None:
        import torch

        sys.path.insert(0, module_dir)
        import svp_cpp  # a build of github.com/tfmortie/setvaluedprediction's svp/csrc

        self.torch = torch
        K, n_nodes = h.n_classes, h.n_nodes
        children = h.children()
        leaves = [[] for _ in range(n_nodes)]
        for v in range(K):
            for a in h.path(v):
                leaves[a].append(v)
        # ancestors before descendants (their builder descends into the child holding a label set)
        order, stack = [], [h.root]
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(reversed(children[v].tolist()))
        self.order = order
        self.pos = {v: i for i, v in enumerate(order)}  # node -> input feature
        hstruct = [sorted(leaves[v]) for v in order]
        self.model = svp_cpp.SVP(n_nodes, K, 0.0, hstruct)
        self.model.eval()
        # children of each inner node in insertion (hstruct) order; the estimator is registered
        # under the last child's label set and position
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for v in order:
                ch = children[v]
                if ch.size == 0:
                    continue
                ch = sorted(ch.tolist(), key=lambda c: self.pos[c])
                last = ch[-1]
                label = "".join(f"{c} " for c in hstruct[self.pos[last]]) + str(self.pos[last])
                W = params[f"{label}.1.weight"]
                W.zero_()
                for i, c in enumerate(ch):
                    W[i, self.pos[c]] = 1.0
                params[f"{label}.1.bias"].zero_()
        self.parent = h.parent

    def inputs(self, P: np.ndarray):
        """``x[i, pos[v]] = log P(v | parent(v))`` (node masses from the leaves up)."""
        n = P.shape[0]
        mass = np.zeros((n, self.parent.size))
        mass[:, : P.shape[1]] = P
        for v in reversed(self.order):  # descendants before ancestors
            if self.parent[v] >= 0:
                mass[:, self.parent[v]] += mass[:, v]
        cond = np.ones_like(mass)
        has = self.parent >= 0
        cond[:, has] = mass[:, has] / np.maximum(mass[:, self.parent[has]], 1e-300)
        X = np.log(np.maximum(cond, 1e-30))[:, self.order]
        return self.torch.tensor(X, dtype=self.torch.float32)

    def calibrate(self, P, y, c):
        X = self.inputs(P)
        return np.asarray(self.model.calibrate_csvphf(X, self.torch.tensor(y), 0.1, False, 0.0, 1, c))

    def predict(self, P, q, c):
        return self.model.predict_set_csvphf(self.inputs(P), q, False, 0.0, 1, c)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--K", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--c", type=int, nargs="+", default=[1, 3, 10])
    ap.add_argument("--cal", type=int, default=1000)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--branching", type=int, default=8)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.1, 0.15, 0.2])
    ap.add_argument("--probabilities", choices=["independent", "tree"], default="tree")
    ap.add_argument("--tree-temperature", type=float, default=0.15)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--authors-module-dir", default=None)
    ap.add_argument("--authors-rows", type=int, default=20)
    args = ap.parse_args(argv)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (shared machine), numpy {np.__version__}, "
          f"probabilities {args.probabilities} (temperature "
          f"{args.tree_temperature if args.probabilities == 'tree' else args.temperatures}), "
          f"epsilon {args.epsilon}, {args.cal} calibration and {args.test} test rows")
    # warm-up: compile the kernels
    h0 = random_tree(20, branching=4, chain=0.0, seed=1)
    P0 = make_probabilities(10, 20, seed=1)
    y0 = draw_labels(P0, 1)
    HierarchicalConformalScore(h0, 2).fit_quantile(P0, y0, 0.2).predict(P0, return_nodes=True)
    svbop.predict_sets_hierarchical(P0, "fbeta:beta=1", h0, 2, return_nodes=True)
    svbop.ConformalSetPredictor(0.2, score="aps").fit(P0, y0).predict(P0)
    print("K\tmethod\tc\tfit ms/row\tpredict ms/row\tcoverage\tmean size\tmean nodes")
    for K in args.K:
        h = random_tree(K, branching=args.branching, chain=0.0, seed=K)
        if args.probabilities == "tree":
            P = tree_probabilities(args.cal + args.test, h, args.tree_temperature, seed=K)
        else:
            P = make_probabilities(args.cal + args.test, K, temperatures=tuple(args.temperatures), seed=K)
        y = draw_labels(P, K)
        Pc, yc, Pt, yt = P[: args.cal], y[: args.cal], P[args.cal :], y[args.cal :]
        n_c, n_t = args.cal, args.test

        def cover(sets):
            return np.mean([yt[i] in s for i, s in enumerate(sets)])

        t_fit, aps = best_of(args.repeat, lambda: svbop.ConformalSetPredictor(args.epsilon, score="aps").fit(Pc, yc))
        t_pred, sets = best_of(args.repeat, lambda: aps.predict(Pt))
        print(f"{K}\tAPS\t-\t{1e3 * t_fit / n_c:.3f}\t{1e3 * t_pred / n_t:.3f}\t{cover(sets):.3f}\t"
              f"{np.mean(sets.sizes):.1f}\t-", flush=True)
        authors = None
        if args.authors_module_dir:
            try:
                authors = Authors(args.authors_module_dir, h)
            except Exception as e:  # report and go on: the comparison is optional
                print(f"# authors' code could not run: {type(e).__name__}: {e}")
        for c in args.c:
            hc = HierarchicalConformalScore(h, c)
            t_fit, _ = best_of(args.repeat, lambda: hc.fit_quantile(Pc, yc, args.epsilon))
            t_pred, (sets, nodes) = best_of(args.repeat, lambda: hc.predict(Pt, return_nodes=True))
            print(f"{K}\thierarchical conformal\t{c}\t{1e3 * t_fit / n_c:.3f}\t{1e3 * t_pred / n_t:.3f}\t"
                  f"{cover(sets):.3f}\t{np.mean(sets.sizes):.1f}\t{np.mean(nodes.sizes):.2f}", flush=True)
            t_h, (hs, hn) = best_of(
                args.repeat, lambda: svbop.predict_sets_hierarchical(Pt, "fbeta:beta=1", h, c, return_nodes=True)
            )
            print(f"{K}\tpredict_sets_hierarchical F1\t{c}\t-\t{1e3 * t_h / n_t:.3f}\t{cover(hs):.3f}\t"
                  f"{np.mean(hs.sizes):.1f}\t{np.mean(hn.sizes):.2f}", flush=True)
            if authors is not None:
                m = min(args.authors_rows, n_c, n_t)
                t = time.perf_counter()
                theirs = authors.calibrate(Pc[:m], yc[:m], c)
                t_fit = time.perf_counter() - t
                ours = hierarchical_scores(Pc[:m], yc[:m], h, c)
                agree = np.mean(np.abs(theirs - ours) <= 1e-5)
                t = time.perf_counter()
                tsets = authors.predict(Pt[:m], hc.quantile_, c)
                t_pred = time.perf_counter() - t
                tcov = np.mean([int(yt[i]) in set(s) for i, s in enumerate(tsets)])
                print(f"{K}\tauthors' C++ (first {m} rows)\t{c}\t{1e3 * t_fit / m:.3f}\t{1e3 * t_pred / m:.3f}\t"
                      f"{tcov:.3f}\t{np.mean([len(s) for s in tsets]):.1f}\t-\t"
                      f"(on these rows: calibration scores equal to ours within 1e-5: {agree:.2f}; "
                      f"our mean size {np.mean(sets.sizes[:m]):.1f}, our coverage {cover(sets[:m]):.3f})", flush=True)


if __name__ == "__main__":
    main()
