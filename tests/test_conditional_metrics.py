"""Worst-slab coverage (WSC) and size-stratified coverage violation (SSCV), issue 48 item 6: known
answers, TorchCP 1.2.1's O(n**2) scan as a brute-force oracle, and TorchCP's own functions with
the coverage indicators passed where they belong (skipped without TorchCP)."""

import numpy as np
import pytest
from sklearn.model_selection import train_test_split
from watched import run_watched

import svbop
from svbop.metrics import (
    SSCV_STRATA,
    mean_scores,
    size_strata,
    size_stratified_coverage,
    size_stratified_coverage_violation,
    sscv,
    worst_slab_coverage,
    wsc,
)

import anchors


def _scan(X, covered, delta, M, random_state):
    """TorchCP 1.2.1's calWSC (the reference code's scan over every start, O(n**2) per direction),
    written out here with the indicators as its coverage: ``(coverage, v, a, b)``."""
    rng = np.random.default_rng(random_state)
    n = len(covered)
    V = rng.normal(size=(X.shape[1], M))
    V /= np.linalg.norm(V, axis=0)
    results = []
    for v in V.T:
        z = np.dot(X, v)
        order = np.argsort(z)
        zs, c = z[order], covered[order]
        best, ab = 1, (0, n - 1)
        for a in range(int(np.round((1.0 - delta) * n))):
            b_min = min(a + int(np.round(delta * n)), n - 1)
            cov = np.cumsum(c[a:n]) / np.arange(1, n - a + 1)
            cov[: b_min - a] = 1
            b = a + int(np.argmin(cov))
            if cov[b - a] < best:
                best, ab = cov[b - a], (a, b)
        results.append((best, v, zs[ab[0]], zs[ab[1]]))
    return min(results, key=lambda r: r[0])


def _oracle(mask, y, X, delta, M, test_fraction, random_state):
    covered = mask[np.arange(y.size), y]
    tr, te = train_test_split(np.arange(y.size), test_size=test_fraction, random_state=random_state)
    _, v, a, b = _scan(X[tr], covered[tr], delta, M, random_state)
    z = X[te] @ v
    inside = (z >= a) & (z <= b)
    return covered[te][inside].mean() if inside.any() else np.nan


def _sets(rng, n, K, X):
    y = rng.integers(0, K, n)
    mask = rng.random((n, K)) < 0.4
    mask[np.arange(n), y] = rng.random(n) < np.where(X[:, 0] > 0.5, 0.4, 0.95)  # a hole in the features
    return mask, y


def test_wsc_equals_torchcps_scan_written_out_including_ties(rng):
    for trial in range(60):
        n, d = int(rng.integers(4, 90)), int(rng.integers(1, 4))
        X = rng.normal(size=(n, d))
        if trial % 3 == 0:
            X = np.round(X)  # many equal projections
        mask, y = _sets(rng, n, 3, X)
        delta = float(rng.choice([0.02, 0.1, 0.25, 0.6, 0.95]))
        tf = float(rng.choice([0.25, 0.5, 0.75]))
        seed = int(rng.integers(10_000))
        ours = worst_slab_coverage(mask, y, X, delta=delta, M=5, test_fraction=tf, random_state=seed)
        expected = _oracle(mask, y, X, delta, 5, tf, seed)
        assert ours == expected or (np.isnan(ours) and np.isnan(expected)), (trial, n, delta, tf)


def test_wsc_known_answers():
    n = 400
    X = np.arange(n, dtype=float)[:, None]
    y = np.zeros(n, dtype=np.int64)
    everything = np.ones((n, 2), dtype=bool)
    assert worst_slab_coverage(everything, y, X) == 1.0
    # ten per cent of the rows, one block of x, always missed: the worst slab lies in the block
    mask = everything.copy()
    mask[150:190, 0] = False
    assert worst_slab_coverage(mask, y, X, delta=0.05, M=20) == 0.0
    # no start left to scan ((1 - delta) n rounds to 0): the slab spans the selection rows, and WSC is
    # the coverage of the held-out rows between their smallest and largest x
    train, test = train_test_split(np.arange(n), test_size=0.75, random_state=2020)
    within = test[(test >= train.min()) & (test <= train.max())]
    assert worst_slab_coverage(mask, y, X, delta=0.999, M=3) == mask[within, 0].mean()
    # sets as SetPredictions or lists give the same number as the mask
    sets = [[0] if m else [1] for m in mask[:, 0]]
    assert worst_slab_coverage(sets, y, X, delta=0.05, M=20) == 0.0
    assert wsc is worst_slab_coverage and sscv is size_stratified_coverage_violation


def test_wsc_finds_a_hole_that_marginal_coverage_hides(rng):
    n = 4000
    X = rng.random((n, 3))
    mask, y = _sets(rng, n, 5, X)
    marginal = mask[np.arange(n), y].mean()
    value = worst_slab_coverage(mask, y, X, M=200, random_state=3)
    assert value == worst_slab_coverage(mask, y, X, M=200, random_state=3)  # seeded
    assert marginal > 0.65 and value < 0.55  # the hole (coverage 0.4) seen on held-out rows


def test_sscv_known_answers():
    # sizes 1, 1, 2, 3, 0; covered: rows 0, 2, 3
    sets = [[0], [1], [0, 1], [2, 0, 1], []]
    y = [0, 0, 1, 2, 3]
    # strata 0-1 (rows 0, 1, 4: 1/3 covered) and 2-3 (rows 2, 3: 1); the rest empty
    assert size_stratified_coverage_violation(sets, y, 0.1) == pytest.approx(0.9 - 1 / 3)
    assert size_stratified_coverage_violation(sets, y, 0.1, stratified_size=[[2, 3]]) == pytest.approx(0.1)
    assert size_stratified_coverage_violation(sets, y, 0.5, stratified_size=[[5, 9]]) != 0  # nan: no row
    assert np.isnan(size_stratified_coverage_violation(sets, y, 0.5, stratified_size=[[5, 9]]))
    mask = svbop.SetPredictions.from_sets(sets, 4).to_mask()
    assert size_stratified_coverage_violation(mask, np.array(y), 0.1) == pytest.approx(0.9 - 1 / 3)
    assert SSCV_STRATA == ((0, 1), (2, 3), (4, 10), (11, 100), (101, 1000))
    # the one-number size-stratified coverage: with epsilon its violation (SSCV), without the worst
    # stratum; size_strata: all of them
    assert size_stratified_coverage(sets, y, 0.1) == size_stratified_coverage_violation(sets, y, 0.1)
    assert size_stratified_coverage(sets, y, epsilon=0.1, stratified_size=[[2, 3]]) == pytest.approx(0.1)
    assert size_stratified_coverage(sets, y) == 0.0  # size 0: one row, missed
    assert size_stratified_coverage(sets, y, min_count=2) == 0.5
    with pytest.raises(ValueError, match="bins and min_count are for the worst stratum's coverage"):
        size_stratified_coverage(sets, y, 0.1, bins=3)
    with pytest.raises(ValueError, match="stratified_size is for the violation"):
        size_stratified_coverage(sets, y, stratified_size=[[0, 1]])
    edges, cov, counts = size_strata(sets, y)
    assert edges.tolist() == [0, 1, 2, 3] and counts.tolist() == [1, 2, 1, 1]


@pytest.mark.parametrize("strata, match", [
    ([], "non-empty list"), ([[2, 1]], "0 <= lo <= hi"), ([[0, 2], [2, 3]], "must not overlap"),
    ([[0.5, 2]], "integer pairs"), ("ab", "integer pairs"),
])
def test_sscv_refuses_bad_strata(strata, match):
    with pytest.raises(ValueError, match=match):
        size_stratified_coverage_violation([[0]], [0], 0.1, stratified_size=strata)


def test_mean_scores_reports_sscv_beside_covgap():
    sets = [[0], [1], [0, 1], [2, 0, 1], []]
    y = [0, 0, 1, 2, 3]
    row = mean_scores(sets, y, epsilon=0.1)
    assert row["sscv_pct"] == pytest.approx(100 * (0.9 - 1 / 3))


def test_wsc_and_sscv_equal_torchcps_functions(rng):
    """TorchCP's calWSC with the indicators where they belong (its WSC passes the labels there) and
    wsc_vab on its own split; its SSCV as it is (float32: equal to 1e-6)."""
    anchors.torchcp()
    import torch
    from torchcp.classification.utils import metrics as tm

    for trial in range(4):
        n, d, K = int(rng.integers(100, 400)), int(rng.integers(1, 6)), 6
        X = rng.normal(size=(n, d))
        mask, y = _sets(rng, n, K, X)
        covered = mask[np.arange(n), y]
        delta, M, tf, seed = [0.1, 0.2][trial % 2], 15, 0.75, int(rng.integers(5000))
        Xtr, Xte, ytr, yte, ctr, cte = train_test_split(X, y, covered, test_size=tf, random_state=seed)
        _, v, a, b = tm.calWSC(Xtr, ytr, ctr, delta=delta, M=M, random_state=seed, verbose=False)
        theirs = tm.wsc_vab(Xte, yte, cte, v, a, b)
        assert worst_slab_coverage(mask, y, X, delta=delta, M=M, test_fraction=tf, random_state=seed) == theirs
        # TorchCP's order of the arguments (features, prediction_sets, labels) gives the same number
        assert worst_slab_coverage(torch.from_numpy(X), torch.from_numpy(mask), torch.from_numpy(y), delta=delta, M=M,
                                   test_fraction=tf, random_state=seed) == theirs
        expected = tm.SSCV(torch.from_numpy(mask), torch.from_numpy(y), 0.1)
        assert size_stratified_coverage_violation(mask, y, 0.1) == pytest.approx(expected, abs=1e-6)
        assert size_stratified_coverage(torch.from_numpy(mask), torch.from_numpy(y), 0.1) == pytest.approx(expected,
                                                                                                           abs=1e-6)


def test_the_report_table_carries_covgap_sscv_and_wsc(rng):
    """evaluate_beyond (results/<dataset>/beyond.tsv) gives every method CovGap and SSCV at its
    epsilon and WSC on the rows' probabilities, one slab plan shared by the methods."""
    from svbop.conformal import ConformalSetPredictor
    from svbop.evaluation import CONDITIONAL_COLUMNS, evaluate_beyond
    from svbop.metrics import covgap

    P = rng.dirichlet(np.ones(4), 1200)
    y = np.array([rng.choice(4, p=p) for p in P])
    sets = {("conformal_aps", "0.1"): ConformalSetPredictor(0.1, score="aps", random_state=0).fit(
        P[:400], y[:400]).predict(P[400:]),
        ("svbop_full", "fbeta_1"): svbop.predict_sets(P[400:], "fbeta:beta=1")}
    rows = evaluate_beyond(sets, y[400:], ["fbeta:beta=1"], dataset="d", X=P[400:])
    aps, full = rows
    assert aps["covgap_pct"] == pytest.approx(100 * covgap(sets["conformal_aps", "0.1"], y[400:], 0.1))
    assert aps["sscv_pct"] == pytest.approx(100 * sscv(sets["conformal_aps", "0.1"], y[400:], 0.1))
    for row, key in zip(rows, sets):
        assert row["wsc_pct"] == pytest.approx(100 * wsc(sets[key], y[400:], P[400:]))
    assert np.isnan(full["covgap_pct"]) and np.isnan(full["sscv_pct"])  # no coverage target
    no_x = evaluate_beyond(sets, y[400:], [], dataset="d")
    assert all(c in no_x[0] for c in CONDITIONAL_COLUMNS) and np.isnan(no_x[0]["wsc_pct"])


def test_wsc_split_is_scikit_learns_train_test_split_without_importing_it():
    """The held-out split of worst_slab_coverage draws what TorchCP's train_test_split draws, and
    svbop's report extra (no scikit-learn) can compute it."""
    model_selection = pytest.importorskip("sklearn.model_selection")
    from svbop.metrics import _shuffle_split

    for n in (2, 3, 10, 101, 4000):
        for f in (0.1, 0.5, 0.75, 0.9):
            for rs in (0, 1, 2020):
                try:
                    want = model_selection.train_test_split(np.arange(n), test_size=f, random_state=rs)
                except ValueError:
                    with pytest.raises(ValueError, match="leaves no row"):
                        _shuffle_split(n, f, rs)
                    continue
                got = _shuffle_split(n, f, rs)
                assert all(np.array_equal(a, b) for a, b in zip(want, got)), (n, f, rs)
    code = ("import sys; sys.modules['sklearn'] = None; import numpy as np, svbop; from svbop.metrics import "
            "worst_slab_coverage as w; r = np.random.default_rng(0); P = r.dirichlet(np.ones(4), 50); "
            "print(w(svbop.predict_sets(P, 'fbeta:beta=1'), r.integers(0, 4, 50), P, M=5))")
    import sys

    out = run_watched([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr[-2000:]
