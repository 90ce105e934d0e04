"""Issue 47: randomised conformal sets (APS, RAPS, SAPS) keep their coverage for any batch size.

The uniforms of the test rows were drawn by position in each ``predict`` call, so every one-row
call got the same ``u`` (the first of the stream): serving one request at a time covered 0.888 for
0.9.  Now each call draws fresh uniforms from the fitted model's generator, or, with ``row_seeds``,
each row's uniform is a function of the fit's seed and its own integer.  Over many seeded splits of
calibrated probabilities (labels drawn from them), one-row calls must cover as a batch does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from svbop.conformal import ConformalSetPredictor

EPSILON = 0.1
SPLITS = 200
N_CAL, N_TEST = 300, 50
# the fit's seed, the same for every split (as the workflow's seed is): its stream's first uniform
# is 0.977, the u every one-row call got before
SEED = 4


@pytest.fixture(scope="module")
def pool():
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.full(8, 0.5), size=40_000)
    u = rng.random(P.shape[0])[:, None]
    y = (P.cumsum(axis=1) < u).sum(axis=1).clip(max=7)  # labels drawn from P: a calibrated model
    return P, y


@pytest.mark.parametrize("config", [dict(score="aps"), dict(score="raps", k_reg=1, lam=0.05),
                                    dict(score="saps", lam=0.2)], ids=lambda c: c["score"])
def test_one_row_calls_cover_as_a_batch_does(pool, config):
    P, y = pool
    rng = np.random.default_rng(1)
    cover = {"batch": [], "one row": [], "row seeds": []}
    for split in range(SPLITS):
        rows = rng.choice(P.shape[0], N_CAL + N_TEST, replace=False)
        cal, test = rows[:N_CAL], rows[N_CAL:]
        model = ConformalSetPredictor(EPSILON, random_state=SEED, **config).fit(P[cal], y[cal])
        batch = model.predict_mask(P[test])
        single = np.vstack([model.predict_mask(P[i : i + 1]) for i in test])
        seeded = np.vstack([model.predict_mask(P[i : i + 1], row_seeds=[split * N_TEST + j])
                            for j, i in enumerate(test)])
        for key, mask in (("batch", batch), ("one row", single), ("row seeds", seeded)):
            cover[key].append(mask[np.arange(N_TEST), y[test]].mean())
    cov = {k: np.asarray(v) for k, v in cover.items()}
    for key, c in cov.items():
        se = c.std(ddof=1) / math.sqrt(SPLITS)
        assert 1 - EPSILON - 4 * se <= c.mean() <= 1 - EPSILON + 1 / (N_CAL + 1) + 4 * se, (key, c.mean(), se)
    gap = cov["one row"] - cov["batch"]
    assert abs(gap.mean()) <= 4 * gap.std(ddof=1) / math.sqrt(SPLITS), (cov["one row"].mean(), cov["batch"].mean())


def test_row_seeds_give_a_row_its_set_whatever_the_batch(pool):
    P, y = pool
    model = ConformalSetPredictor(EPSILON, score="aps", random_state=SEED).fit(P[:500], y[:500])
    ids = np.arange(1000, 1300)
    batch = model.predict(P[500:800], row_seeds=ids)
    assert np.array_equal(model.predict_mask(P[500:800], row_seeds=ids), batch.to_mask())
    one = np.vstack([model.predict_mask(P[500 + j : 501 + j], row_seeds=ids[j : j + 1]) for j in range(300)])
    assert np.array_equal(one, batch.to_mask())
    with pytest.raises(ValueError, match="row_seeds: expected 300 integers"):
        model.predict(P[500:800], row_seeds=np.zeros(300))


def test_each_call_draws_fresh_uniforms_and_a_refit_starts_the_stream_again(pool):
    P, y = pool
    model = ConformalSetPredictor(EPSILON, score="aps", random_state=SEED).fit(P[:500], y[:500])
    row = P[600:601]
    sizes = {int(model.predict_mask(row).sum()) for _ in range(200)}
    assert len(sizes) > 1  # the same row, another uniform each call
    first = model.fit(P[:500], y[:500]).predict_mask(P[500:700])
    assert np.array_equal(model.fit(P[:500], y[:500]).predict_mask(P[500:700]), first)
