"""Conformal sets of outputs held in dask arrays (svbop.conformal.dask, issue 54 item 6): the same
quantile and sets as the single process, on a LocalCluster of process workers whose memory stays
bounded by their block."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

dask = pytest.importorskip("dask", reason="dask is not installed (pip install -e '.[dask]'): the dask path is"
                                          " untested")
distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install -e '.[dask]')")
import dask.array as da  # noqa: E402

from svbop import ConformalSetPredictor  # noqa: E402
from svbop.conformal import LearnThenTest, RiskControlSetPredictor  # noqa: E402
from svbop.conformal.dask import npy_rows, order_statistic  # noqa: E402


def _outputs(n, K, seed, peak=0.3):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(K, peak), size=n)
    y = np.array([rng.choice(K, p=p) for p in P])
    return P, y


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


SCORES = [
    ("lac", {}),
    ("aps", {}),  # randomised by default
    ("raps", {"k_reg": 2, "lam": 0.05, "randomized": False}),
    ("saps", {}),
    ("topk", {"randomized": True}),
    ("margin", {}),
]


@pytest.mark.parametrize("score,kw", SCORES[:2], ids=[s for s, _ in SCORES[:2]])
def test_dask_fit_and_sets_equal_the_single_process_on_a_local_cluster(client, score, kw):
    _same_as_one_process(score, kw)


@pytest.mark.parametrize("score,kw", SCORES[2:], ids=[s for s, _ in SCORES[2:]])
def test_dask_fit_and_sets_equal_the_single_process_on_threads(score, kw):
    with dask.config.set(scheduler="threads"):
        _same_as_one_process(score, kw)


def _same_as_one_process(score, kw):
    P, y = _outputs(3000, 17, 1)
    cal, test = slice(0, 2000), slice(2000, None)
    one = ConformalSetPredictor(0.1, score=score, random_state=7, **kw).fit(P[cal], y[cal])
    # irregular row blocks, the classes split in two column blocks (joined per row by the dask path)
    Pd = da.from_array(P, chunks=((300, 700, 1000, 999, 1), (9, 8)))
    yd = da.from_array(y, chunks=400)
    many = ConformalSetPredictor(0.1, score=score, random_state=7, **kw).fit(Pd[cal], yd[cal])
    assert many.quantile_ == one.quantile_  # the exact order statistic, bit for bit
    assert many.seed_ == one.seed_ and many.n_classes_ == 17
    lazy = many.predict_mask(Pd[test])
    assert isinstance(lazy, da.Array) and lazy.dtype == bool and lazy.chunks[0] == (999, 1)
    np.testing.assert_array_equal(lazy.compute(), one.predict_mask(P[test]))
    # the next call of each draws the next uniforms of the model's stream: still equal
    assert many.predict(Pd[test]) == one.predict(P[test])
    seeds = np.arange(1000) * 7919 + 3
    np.testing.assert_array_equal(many.predict_mask(Pd[test], row_seeds=da.from_array(seeds, chunks=250)).compute(),
                                  one.predict_mask(P[test], row_seeds=seeds))


def test_groups_and_weights_of_a_dask_array_give_the_single_process_sets():
    from svbop.conformal.mondrian import GroupCalibrationWarning

    P, y = _outputs(2000, 8, 10)
    g = np.arange(2000) % 3
    w = np.exp(np.random.default_rng(1).normal(size=2000) * 0.3)
    with dask.config.set(scheduler="synchronous"):
        grouped = ConformalSetPredictor(0.1, score="aps", random_state=4).fit(P[:1000], y[:1000], groups=g[:1000])
        with pytest.warns(GroupCalibrationWarning, match="1 group"):  # group 3: not seen in fit
            want = grouped.predict_mask(P[1000:], groups=g[1000:] + (g[1000:] == 2))
        grouped = ConformalSetPredictor(0.1, score="aps", random_state=4).fit(P[:1000], y[:1000], groups=g[:1000])
        with pytest.warns(GroupCalibrationWarning):
            got = grouped.predict_mask(da.from_array(P[1000:], chunks=300),
                                       groups=da.from_array(g[1000:] + (g[1000:] == 2), chunks=100)).compute()
        np.testing.assert_array_equal(got, want)
        weighted, twin = (ConformalSetPredictor(0.1, score="raps", lam=0.1, random_state=5)
                          .fit(P[:1000], y[:1000], weights=w[:1000]) for _ in range(2))  # randomised: a call each
        np.testing.assert_array_equal(
            weighted.predict_mask(da.from_array(P[1000:], chunks=128), weights=w[1000:]).compute(),
            twin.predict_mask(P[1000:], weights=w[1000:]))
        assert weighted.predict(da.from_array(P[1000:], chunks=128), weights=da.from_array(w[1000:], chunks=99)) == \
            twin.predict(P[1000:], weights=w[1000:])


def test_hierarchical_sets_and_their_nodes_of_a_dask_array():
    from svbop.datasets.base import Hierarchy

    h = Hierarchy(np.array([8, 8, 10, 10, 10, 8, 8, 10, 9, 11, 11, -1]), n_classes=8)
    P, y = _outputs(900, 8, 11)
    with dask.config.set(scheduler="synchronous"):
        one = ConformalSetPredictor(0.1, score="hierarchical", hierarchy=h, max_nodes=2).fit(P[:600], y[:600])
        many = ConformalSetPredictor(0.1, score="hierarchical", hierarchy=h, max_nodes=2).fit(
            da.from_array(P[:600], chunks=70), y[:600])
        assert many.quantile_ == one.quantile_
        sets, nodes = many.predict(da.from_array(P[600:], chunks=64), return_nodes=True)
        want_sets, want_nodes = one.predict(P[600:], return_nodes=True)
        assert sets == want_sets and len(nodes) == 300
        assert all(np.array_equal(a, b) for a, b in zip(nodes, want_nodes))


def test_randomised_sets_do_not_depend_on_the_chunking():
    P, y = _outputs(2500, 12, 2)
    masks = []
    with dask.config.set(scheduler="synchronous"):
        for cal, test in ((1500, 1000), (97, 31), (((1000, 1, 499), 12), 250), (((1, 1, 1498), 12), ((1, 999), 12))):
            m = ConformalSetPredictor(0.1, score="aps", random_state=3).fit(da.from_array(P[:1500], chunks=cal),
                                                                         y[:1500])
            mask = m.predict_mask(da.from_array(P[1500:], chunks=test))
            masks.append((m.quantile_, mask.compute(), mask.compute()))  # computing twice: the same sets
    for q, a, b in masks:
        assert q == masks[0][0]
        np.testing.assert_array_equal(a, masks[0][1])
        np.testing.assert_array_equal(b, a)
    one = ConformalSetPredictor(0.1, score="aps", random_state=3).fit(P[:1500], y[:1500])
    np.testing.assert_array_equal(one.predict_mask(P[1500:]), masks[0][1])


def test_order_statistic_is_exact_on_ties_infinities_and_signed_zeros():
    rng = np.random.default_rng(0)
    with dask.config.set(scheduler="synchronous"):
        for seed in range(8):
            rng = np.random.default_rng(seed)
            n = int(rng.integers(1, 4000))
            x = np.round(rng.normal(size=n), int(rng.integers(0, 6)))  # heavy ties at low precision
            x[rng.random(n) < 0.05] = np.inf
            x[rng.random(n) < 0.05] = -np.inf
            x[rng.random(n) < 0.05] = 0.0
            x[rng.random(n) < 0.05] = -0.0
            xd = da.from_array(x, chunks=int(rng.integers(1, n + 1)))
            for k in {1, n, int(rng.integers(1, n + 1)), (n + 1) // 2}:
                want = np.partition(x, k - 1)[k - 1]
                for gather in (1, 7, 1 << 20):  # 1: radix passes down to a single key
                    assert order_statistic(xd, k, max_gather=gather) == want
        same = da.from_array(np.full(1000, 0.25), chunks=64)
        assert order_statistic(same, 500, max_gather=1) == 0.25
        with pytest.raises(ValueError, match=r"^k must be an integer in 1\.\.1000"):
            order_statistic(same, 0)


def test_fit_on_dask_refuses_what_needs_every_row_in_one_process():
    P, y = _outputs(200, 5, 3)
    Pd = da.from_array(P, chunks=50)
    with pytest.raises(ValueError, match=r"^fit on a dask array supports the marginal threshold scores, not groups"):
        ConformalSetPredictor(0.1).fit(Pd, y, groups=y % 2)
    with pytest.raises(ValueError, match=r"not score='fbeta'"):
        ConformalSetPredictor(0.1, score="fbeta").fit(Pd, y)
    with pytest.raises(ValueError, match=r"not class_conditional=True"):
        ConformalSetPredictor(0.1, class_conditional=True).fit(Pd, y)
    with pytest.raises(ValueError, match=r"^y_cal: expected 200 values \(one per row of P\), got shape \(199,\)"):
        ConformalSetPredictor(0.1).fit(Pd, y[:-1])
    with pytest.raises(ValueError, match=r"^P_cal must be 2-D"):
        ConformalSetPredictor(0.1).fit(da.from_array(P[0], chunks=2), y[:1])
    with pytest.raises(ValueError, match=r"^P_cal has no rows"):
        ConformalSetPredictor(0.1).fit(Pd[:0], y[:0])
    fitted = ConformalSetPredictor(0.1).fit(P, y)
    with pytest.raises(ValueError, match=r"^P has 4 classes but the predictor was calibrated on 5"):
        fitted.predict_mask(Pd[:, :4])
    with pytest.raises(ValueError, match=r"^ConformalSetPredictor is not fitted"):
        ConformalSetPredictor(0.1).predict_mask(Pd)


def test_a_bad_row_in_a_dask_block_names_the_block_and_the_row():
    P, y = _outputs(200, 5, 4)
    P[130, 2] = np.nan
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(ValueError, match=r"^P_cal rows 100:150 \(one dask block; rows below count from 100\): "
                                             r".*row 30"):
            ConformalSetPredictor(0.1).fit(da.from_array(P, chunks=50), y)
        fitted = ConformalSetPredictor(0.1).fit(P[:100], y[:100])
        with pytest.raises(ValueError, match=r"^P rows 100:150 .*row 30"):
            fitted.predict_mask(da.from_array(P, chunks=50)).compute()
        y[10] = 5
        with pytest.raises(ValueError, match=r"^P_cal rows 0:50 .*y_cal"):
            ConformalSetPredictor(0.1).fit(da.from_array(P[:100], chunks=50), y[:100])


def test_risk_control_sets_of_a_dask_array_equal_the_single_process():
    P, y = _outputs(1500, 9, 5)
    rc = RiskControlSetPredictor(0.1, score="aps").fit(P[:1000], y[:1000])
    Pd = da.from_array(P[1000:], chunks=120)
    with dask.config.set(scheduler="synchronous"):
        mask = rc.predict_mask(Pd)
        assert isinstance(mask, da.Array)
        np.testing.assert_array_equal(mask.compute(), rc.predict_mask(P[1000:]))
        assert rc.predict(Pd) == rc.predict(P[1000:])
        with pytest.raises(ValueError, match=r"^RiskControlSetPredictor\.fit on a dask array takes loss='miscoverage'"
                                             r" on a dask matrix .*not loss 'class_cost'"):
            RiskControlSetPredictor(0.1, loss="class_cost", cost=np.ones(9)).fit(da.from_array(P, chunks=100), y)
        with pytest.raises(ValueError, match=r"^LearnThenTest\.fit takes numpy-like arrays only"):
            LearnThenTest().fit(da.from_array(P, chunks=100), y)


@pytest.mark.parametrize("n,alpha", [(1000, 0.1), (40, 0.02), (9, 0.1), (30, 0.99), (500, 0.5)])
def test_risk_control_fit_on_dask_gives_the_single_process_lambda(n, alpha):
    P, y = _outputs(n, 6, 9)
    P[: n // 3] = np.round(P[: n // 3], 1) + 0.01  # tied scores
    with dask.config.set(scheduler="synchronous"):
        for score in ("lac", "aps"):
            one = RiskControlSetPredictor(alpha, score=score).fit(P, y)
            many = RiskControlSetPredictor(alpha, score=score).fit(da.from_array(P, chunks=7),
                                                                   da.from_array(y, chunks=5))
            assert (many.lambda_, many.calibration_risk_, many.B_, many.n_classes_) == \
                (one.lambda_, one.calibration_risk_, one.B_, one.n_classes_)
            np.testing.assert_array_equal(many.predict_mask(da.from_array(P, chunks=50)).compute(), one.predict_mask(P))


def _peak_rss_reset():
    with open("/proc/self/clear_refs", "w") as fh:  # Linux: VmHWM := VmRSS
        fh.write("5")
    return _status("VmRSS")


def _status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS is read from Linux's /proc")
def test_each_worker_holds_a_block_not_the_array(client, tmp_path):
    n, K, rows = 120_000, 100, 4000  # 96 MB of float64; blocks of 3.2 MB
    rng = np.random.default_rng(6)
    P = rng.dirichlet(np.full(K, 0.2), size=n)
    y = (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    path = tmp_path / "P.npy"
    np.save(path, P)
    one = ConformalSetPredictor(0.1, score="aps", random_state=1).fit(P[:40_000], y[:40_000])
    sizes_one = one.predict_mask(P[40_000:]).sum(axis=1)
    Pd = npy_rows(path, rows)
    many = ConformalSetPredictor(0.1, score="aps", random_state=1)
    client.run(lambda: __import__("svbop.conformal.dask"))  # imports (and numba's cached kernels) out of the peak
    many.fit(Pd[:40_000], y[:40_000])  # warm-up: every kernel loaded in both workers
    many.predict_mask(Pd[:2 * rows]).sum().compute()
    base = client.run(_peak_rss_reset)
    many.fit(Pd[:40_000], y[:40_000])
    sizes = many.predict_mask(Pd[40_000:]).sum(axis=1).compute()  # the (n, K) mask never gathered
    peak = client.run(_status, "VmHWM")
    assert many.quantile_ == one.quantile_
    np.testing.assert_array_equal(sizes, sizes_one)
    grew = {w: peak[w] - base[w] for w in peak}
    print({w: f"{g / 2**20:.1f} MiB" for w, g in grew.items()}, f"of an array of {P.nbytes / 2**20:.0f} MiB")
    assert len(grew) == 2 and all(g < P.nbytes / 4 for g in grew.values()), (grew, P.nbytes)


def test_svbop_imports_without_dask():
    code = ("import sys; sys.modules['dask'] = None; import svbop, svbop.conformal;"
            " from svbop.conformal import dask as d;"
            " import numpy as np; assert not d.is_dask_array(np.ones(2));"
            " m = svbop.ConformalSetPredictor(0.1).fit(np.eye(3) * 0.9 + 0.05, [0, 1, 2]); m.predict(np.eye(3))")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("score,kw", [("lac", {}), ("aps", {}), ("topk", {"randomized": True})],
                         ids=["lac", "aps", "topk"])
def test_top_k_outputs_in_dask_blocks_give_the_single_process_sets(score, kw):
    from svbop import SparseOutputs
    from svbop.conformal.dask import SparseBlocks

    P, y = _outputs(1200, 40, 8)
    ind = np.argsort(-P, axis=1, kind="stable")[:, :6]
    val = np.take_along_axis(P, ind, axis=1)
    top = SparseOutputs(ind, val, 40)
    blocks = SparseBlocks(da.from_array(ind, chunks=(150, 3)), da.from_array(val, chunks=(100, 6)), 40)
    with dask.config.set(scheduler="synchronous"):
        one = ConformalSetPredictor(0.1, score=score, random_state=2, **kw).fit(top.take(np.arange(800)), y[:800])
        many = ConformalSetPredictor(0.1, score=score, random_state=2, **kw).fit(blocks[:800], y[:800])
        assert many.quantile_ == one.quantile_
        test = top.take(np.arange(800, 1200))
        np.testing.assert_array_equal(many.predict_mask(blocks[800:]).compute(), one.predict_mask(test))
        assert many.predict(blocks[800:]) == one.predict(test)
        with pytest.raises(ValueError, match=r"^SparseBlocks takes no groups"):
            many.predict_mask(blocks[800:], groups=np.zeros(400, dtype=int))
        with pytest.raises(ValueError, match=r"^k = 6 classes per row but the model has K = 5 classes"):
            SparseBlocks(blocks.indices, blocks.values, 5)
        bad = ind.copy()
        bad[810, 1] = bad[810, 0]
        with pytest.raises(ValueError, match=r"^P rows 800:900 \(one dask block; rows below count from 800\): row 10 of"
                                             r" indices names class \d+ twice"):
            many.predict_mask(SparseBlocks(da.from_array(bad, chunks=100), blocks.values, 40)).compute()
