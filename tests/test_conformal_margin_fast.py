"""Margin sets from each row's two largest probabilities (issue 48 item 7): the compiled pass equals
the definition ``{c : s(x, c) <= q}`` computed in full, ties and per-class and per-group thresholds
included."""

import numpy as np

import svbop
from svbop.conformal._common import _with_tolerance


def _brute(P, q):
    """Every class's margin score (the largest other probability minus its own), against q."""
    Pn = P / P.sum(axis=1, keepdims=True)
    K = P.shape[1]
    S = np.empty_like(Pn)
    for c in range(K):
        S[:, c] = np.delete(Pn, c, axis=1).max(axis=1) - Pn[:, c]
    return S <= _with_tolerance(q, K) if np.ndim(q) else S <= _with_tolerance(float(q), K)


def test_margin_masks_equal_the_scores_of_every_class(rng):
    P = rng.dirichlet(np.ones(7), 3000)
    P[:300] = np.round(P[:300], 1) + 1e-3  # ties, the top class among them
    y = np.array([rng.choice(7, p=p / p.sum()) for p in P])
    for kwargs in ({}, {"class_conditional": True}, {"empty": "keep"}):
        p = svbop.ConformalSetPredictor(0.1, score="margin", **kwargs).fit(P[:1500], y[:1500])
        mask = p.predict_mask(P[1500:])
        expected = _brute(P[1500:], p.quantiles_ if kwargs.get("class_conditional") else p.quantile_)
        if p.empty == "top1":
            none = ~expected.any(axis=1)
            expected[np.flatnonzero(none), P[1500:][none].argmax(axis=1)] = True
        np.testing.assert_array_equal(mask, expected)
        np.testing.assert_array_equal(p.predict(P[1500:]).to_mask(), mask)
    # one threshold per group (Mondrian): each row against its group's
    g = rng.integers(0, 3, 3000)
    p = svbop.ConformalSetPredictor(0.1, score="margin", empty="keep").fit(P[:1500], y[:1500], groups=g[:1500])
    mask = p.predict_mask(P[1500:], groups=g[1500:])
    for k, label in enumerate(p.groups_):
        rows = np.flatnonzero(g[1500:] == label)
        np.testing.assert_array_equal(mask[rows], _brute(P[1500:][rows], p.group_quantiles_[k]))
