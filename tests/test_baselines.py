import math

import numpy as np
import pytest

import svbop


def test_top_s_hand_computed_with_ties_broken_by_class_index():
    P = np.array([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4]])
    assert svbop.top_s_sets(P, 1).to_list() == [[1], [2]]
    assert svbop.top_s_sets(P, 2).to_list() == [[1, 2], [2, 0]]
    assert svbop.top_s_sets(P, 3).to_list() == [[1, 2, 0], [2, 0, 1]]
    for bad in (0, 4, 1.5):
        with pytest.raises(ValueError, match="top-s needs an integer s in 1..3"):
            svbop.top_s_sets(P, bad)


@pytest.mark.parametrize(
    "theta, expected",
    [(0.0, [0]), (0.5, [0]), (0.6, [0, 1]), (0.8, [0, 1]), (0.81, [0, 1, 2]), (1.0, [0, 1, 2])],
)
def test_threshold_smallest_prefix_reaching_the_mass(theta, expected):
    assert svbop.threshold_sets(np.array([[0.5, 0.3, 0.2]]), theta).to_list() == [expected]


def test_threshold_one_stops_at_the_last_nonzero_class():
    P = np.array([[0.0, 0.7, 0.0, 0.3]])
    assert svbop.threshold_sets(P, 1.0).to_list() == [[1, 3]]
    with pytest.raises(ValueError, match=r"theta must be in \[0, 1\]"):
        svbop.threshold_sets(P, 1.2)


@pytest.mark.parametrize("theta", [0.3, 0.9, 0.999])
def test_threshold_matches_a_naive_cumulative_sum_at_large_K(theta, rng):
    Z = rng.standard_normal((80, 2000)) * rng.choice([0.2, 1.0, 4.0], size=(80, 1))
    P = np.exp(Z)
    sets = svbop.threshold_sets(P, theta, chunk_bytes=2000 * 8 * 7)
    for p, got in zip(P, sets):
        order = np.argsort(-p, kind="stable")
        mass = np.cumsum(p[order]) / p.sum()
        s = int(np.argmax(mass >= theta * (1 - 1e-9))) + 1
        np.testing.assert_array_equal(got, order[:s])


def test_threshold_tuning_hand_computed():
    # the true class is always the second most probable one
    P = np.tile([0.45, 0.35, 0.2], (5, 1))
    y = np.ones(5, dtype=int)
    theta, scores = svbop.tune_threshold(P, y, "fbeta:beta=1")
    # theta <= 0.45 -> {0}: utility 0; 0.45 < theta <= 0.8 -> {0, 1}: 2/3; above -> {0,1,2}: 1/2
    np.testing.assert_allclose(scores, [0, 0, 0, 0, 2 / 3, 2 / 3, 2 / 3, 2 / 3, 0.5, 0.5])
    assert theta == 0.5
    model = svbop.ThresholdSetPredictor("fbeta:beta=1").fit(P, y)
    assert model.theta_ == 0.5 and model.predict(P[:1]).to_list() == [[0, 1]]
    with pytest.raises(ValueError, match="not fitted"):
        svbop.ThresholdSetPredictor("fbeta").predict(P)


@pytest.mark.parametrize("seed", [32, 46, 60, 75])
def test_threshold_tuning_breaks_exact_ties_despite_rounding(seed):
    # seeds where two thresholds give different sets of exactly equal mean F1 (e.g. 1 + 0 + 0 and
    # 1/3 + 2/3 + 0), which floating point rounds apart: the smaller theta must still win
    from fractions import Fraction

    rng = np.random.default_rng(seed)
    P, y = rng.dirichlet(np.full(5, 0.7), size=6), rng.integers(0, 5, 6)
    thetas = np.array(svbop.baselines.PAPER_THRESHOLDS)
    exact = []
    for t in thetas:
        sets = svbop.threshold_sets(P, t)
        exact.append(sum(Fraction(2, len(s) + 1) for s, c in zip(sets, y) if c in s))
    expected = thetas[[e == max(exact) for e in exact]].min()
    assert svbop.tune_threshold(P, y, "fbeta:beta=1")[0] == expected


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_threshold_tuning_scores_equal_those_of_the_sets_themselves_bit_for_bit(dtype, rng):
    """tune_threshold sorts each validation row once for every theta; its mean utilities must be
    exactly those of threshold_sets' own sets (ties, zeros, rows reaching theta = 1 early, several
    chunks of rows, and scores not normalised)."""
    n, K = 700, 60
    P = rng.dirichlet(np.full(K, 0.2), size=n) * rng.choice([1.0, 3.0], size=(n, 1))
    P[::7, 40:] = 0.0  # zeros: theta = 1 stops before them
    P[::5] = np.round(P[::5], 2)  # exact ties in value
    P[3] = 1.0  # every class tied
    P = P.astype(dtype)
    y = rng.integers(0, K, n)
    y[::11] = np.argmax(P[::11], axis=1)
    thetas = (0.0, 0.01, 0.3, 0.5, 0.9, 0.99, 0.999, 1.0)
    for u in ("fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "fbeta:beta=5"):
        expected = [svbop.metrics.set_utility(svbop.threshold_sets(P, t), y, u).mean() for t in thetas]
        for chunk_bytes in (K * P.itemsize * 64, 2**25):
            sizes, ranks = svbop.baselines._threshold_sizes(P, y, np.array(thetas), "P", chunk_bytes)
            for j, t in enumerate(thetas):
                sets = svbop.threshold_sets(P, t)
                np.testing.assert_array_equal(sizes[j], sets.sizes)
                np.testing.assert_array_equal(ranks < sizes[j], sets.contains(y))
        theta, scores = svbop.tune_threshold(P, y, u, thetas)
        assert scores.tolist() == expected
    with pytest.raises(ValueError, match=r"theta must be in \[0, 1\], got 1.5"):
        svbop.tune_threshold(P, y, "fbeta", (0.5, 1.5))


def test_conformal_quantile_uses_the_finite_sample_level():
    scores = np.array([0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])  # n = 9
    P = np.column_stack([1 - scores, scores])  # true class 0: nonconformity = scores
    y = np.zeros(9, dtype=int)
    # eps = 0.1: k = ceil(10 * 0.9) = 9 -> the largest score
    assert svbop.conformal_quantile(P, y, 0.1) == pytest.approx(0.8)
    # eps = 0.2: k = ceil(10 * 0.8) = 8 (exactly 8: exact arithmetic, not 8.000000000000002)
    assert svbop.conformal_quantile(P, y, 0.2) == pytest.approx(0.7)
    # too few calibration samples for eps = 0.05: k = 10 > n, every class is kept
    assert svbop.conformal_quantile(P, y, 0.05) == math.inf
    full = svbop.conformal_sets(np.array([[0.9, 0.1, 0.0]]), math.inf)
    assert full.to_list() == [[0, 1, 2]]


def test_conformal_sets_and_what_an_empty_set_becomes():
    P = np.array([[0.5, 0.3, 0.2], [0.35, 0.33, 0.32], [0.45, 0.45, 0.1]])
    # q = 0.6: keep classes with P >= 0.4
    assert svbop.conformal_sets(P, 0.6).to_list() == [[0], [0], [0, 1]]
    assert svbop.conformal_sets(P, 0.6, empty="keep").to_list() == [[0], [], [0, 1]]
    with pytest.raises(ValueError, match="empty must be"):
        svbop.conformal_sets(P, 0.6, empty="drop")
    with pytest.raises(ValueError, match="epsilon must be in"):
        svbop.ConformalSetPredictor(1.5)


def test_conformal_coverage_on_exchangeable_data():
    """Marginal coverage >= 1 - eps, and <= 1 - eps + 1/(n+1) for continuous scores.

    200 random calibration/test splits of exchangeable data (a deliberately miscalibrated model
    on labels drawn from the true distribution).  The mean coverage over splits has a standard
    error of about 0.0013 here, so the tolerance 0.006 is more than four standard errors.
    """
    rng = np.random.default_rng(7)
    n, K = 1000, 20
    Z = rng.standard_normal((n, K)) * 2
    P_true = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    y = (P_true.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1)
    P_model = np.exp(0.5 * Z + rng.standard_normal((n, K)))  # miscalibrated, unnormalised
    for eps in (0.1, 0.3):
        coverage = []
        for _ in range(200):
            perm = rng.permutation(n)
            cal, test = perm[:500], perm[500:]
            model = svbop.ConformalSetPredictor(eps, empty="keep").fit(P_model[cal], y[cal])
            coverage.append(svbop.recall(model.predict(P_model[test]), y[test]).mean())
        mean = float(np.mean(coverage))
        assert mean >= 1 - eps - 0.006
        assert mean <= 1 - eps + 1 / 501 + 0.006


def test_baselines_reject_bad_input():
    with pytest.raises(ValueError, match="y_cal has 1 labels but there are 2 samples"):
        svbop.conformal_quantile(np.full((2, 2), 0.5), [0], 0.1)
    with pytest.raises(ValueError, match=r"y_val\[0\] = 5 is not a class index"):
        svbop.tune_threshold(np.full((1, 2), 0.5), [5], "fbeta")
    with pytest.raises(ValueError, match="row 0 contains NaN"):
        svbop.threshold_sets(np.array([[np.nan, 1.0]]), 0.5)
    with pytest.raises(ValueError, match=r"P_cal: row 1 has a negative probability P\[1, 0\]"):
        svbop.conformal_quantile(np.array([[0.5, 0.5], [-0.1, 1.1]]), [0, 1], 0.1)


def test_baselines_on_float32_scores_equal_the_float64_results_without_near_ties(rng):
    """The pipeline stores probabilities in float32 (svbop.io.SCORES_DTYPE): where no two
    probabilities and no cumulative mass and threshold are within float32's rounding, every
    baseline gives the float64 sets, and reads the float32 matrix without a float64 copy."""
    n, K = 60, 200
    # distinct probabilities at least 0.5 % apart (relative): rounding creates no tie
    P = np.exp(-np.argsort(rng.random((n, K)), axis=1) * rng.uniform(0.005, 0.05, (n, 1)))
    P /= P.sum(axis=1, keepdims=True)
    P32 = P.astype(np.float32)
    y = rng.integers(0, 4, n)
    for s in (1, 3, 5):
        assert svbop.top_s_sets(P32, s) == svbop.top_s_sets(P, s)
    for theta in (0.1, 0.5, 0.9):
        mass = np.sort(np.cumsum(-np.sort(-P, axis=1), axis=1).ravel())
        gap = np.abs(mass - theta).min()
        assert gap > 1e-6  # no cumulative mass within float32's error (6e-8 relative) of theta
        assert svbop.threshold_sets(P32, theta) == svbop.threshold_sets(P, theta)
    for eps in (0.05, 0.2):
        q = svbop.conformal_quantile(P, y, eps)
        assert svbop.conformal_quantile(P32, y, eps) == pytest.approx(q, rel=1e-6)
        # the sets from the float32 quantile and scores: the same unless a probability lies at it
        assert svbop.conformal_sets(P32, svbop.conformal_quantile(P32, y, eps)) == svbop.conformal_sets(P, q)
    theta, scores = svbop.tune_threshold(P32, y, "fbeta:beta=1")
    assert theta == svbop.tune_threshold(P, y, "fbeta:beta=1")[0]
    assert svbop.ThresholdSetPredictor("fbeta:beta=1").fit(P32, y).predict(P32) == svbop.threshold_sets(P, theta)


def test_prefix_baselines_with_sets_of_every_class_equal_a_naive_computation_in_any_chunking(rng):
    """Sets of thousands of classes (conformal prediction at small epsilon, thresholds near 1) are
    assembled chunk by chunk without padding; the result does not depend on the chunking."""
    n, K = 60, 1500
    P = rng.dirichlet(np.full(K, 0.3), size=n).astype(np.float32)
    order = np.argsort(-P, axis=1, kind="stable")
    for chunk_bytes in (K * 4, K * 4 * 7, 2**25):
        every = svbop.conformal_sets(P, 1.0, chunk_bytes=chunk_bytes)
        assert every.to_list() == order.tolist()  # q = 1: every class
        top = svbop.top_s_sets(P, 1000, chunk_bytes=chunk_bytes)
        np.testing.assert_array_equal(top.indices, order[:, :1000].ravel())


def _tuning_file(path, thetas, scores, chosen):
    rows = ["theta\tvalidation_utility_pct\tchosen"]
    rows += [f"{t}\t{s}\t{t == chosen}" for t, s in zip(thetas, scores)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(
    "scores, chosen, edge",
    [
        ([70.0, 65.0, 60.0, 50.0], 0.05, "smallest"),  # best at the smallest theta, beating its neighbour
        ([70.0, 70.0, 60.0, 50.0], 0.05, ""),  # ties with its neighbour: the grid decided nothing there
        ([50.0, 60.0, 65.0, 70.0], 1.0, "largest"),
        ([50.0, 70.0, 65.0, 60.0], 0.1, ""),  # inside the grid
    ],
)
def test_threshold_tuning_says_whether_theta_sits_at_an_edge_of_the_grid(tmp_path, scores, chosen, edge):
    from svbop.evaluation import read_threshold_tuning

    path = _tuning_file(tmp_path / "fbeta_1.tsv", [0.05, 0.1, 0.5, 1.0], scores, chosen)
    assert read_threshold_tuning(path) == {"theta": chosen, "theta_edge": edge}


def test_a_broken_threshold_tuning_file_is_named(tmp_path):
    from svbop.evaluation import read_threshold_tuning

    none = _tuning_file(tmp_path / "none.tsv", [0.1, 0.2], [1.0, 2.0], chosen=0.3)
    with pytest.raises(ValueError, match=r"none\.tsv: expected exactly one row with chosen True, found 0"):
        read_threshold_tuning(none)
    bad = tmp_path / "bad.tsv"
    bad.write_text("theta\tvalidation_utility_pct\tchosen\nabc\t1\tTrue\n")
    with pytest.raises(ValueError, match=r"bad\.tsv: row 2: theta"):
        read_threshold_tuning(bad)
    (tmp_path / "cols.tsv").write_text("theta\tchosen\n0.1\tTrue\n")
    with pytest.raises(ValueError, match=r"cols\.tsv: missing column 'validation_utility_pct'"):
        read_threshold_tuning(tmp_path / "cols.tsv")
    with pytest.raises(ValueError, match="missing.tsv"):
        read_threshold_tuning(tmp_path / "missing.tsv")


def test_the_default_threshold_grid_is_fine_near_both_ends():
    """A theta tuned to the grid's edge is flagged in the report; the default grid has fine steps near
    0 and 1, so the flag is about the data and not about a grid that stops at 0.1."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    schema = yaml.safe_load((root / "workflow/schemas/config.schema.yaml").read_text())
    default = schema["properties"]["baselines"]["properties"]["threshold_grid"]["default"]
    configs = [yaml.safe_load((root / "config.yaml").read_text())]
    configs += [yaml.safe_load(p.read_text()) for p in sorted((root / "workflow/configs").glob("*.yaml"))]
    grids = [default] + [c["baselines"]["threshold_grid"] for c in configs if "threshold_grid" in (c.get("baselines") or {})]
    assert len(grids) >= 2  # the schema's default and config.yaml's
    for grid in grids:
        assert {0.01, 0.02, 0.05, 0.95, 0.98, 0.99, 1.0} <= set(grid) and grid == sorted(grid)


def test_sorted_heads_of_float32_scores_equal_those_of_the_same_values_in_float64(rng):
    """float32 rows are sorted through one packed int64 key per candidate (value bits, class); the
    heads must equal the general float64 path's on the same values: order, ties in increasing
    class index, zeros, padding, -0.0 and every threshold."""
    from svbop._prefix import sorted_heads

    for trial in range(30):
        n, K = int(rng.integers(1, 50)), int(rng.integers(1, 300))
        P = rng.dirichlet(np.full(K, 0.3), size=n).astype(np.float32)
        if trial % 3 == 0:
            P = np.round(P, 2).astype(np.float32)  # many exact ties
        if trial % 4 == 0:
            P[:, ::3] = 0.0
        if trial % 7 == 0:
            P[0, 0] = -0.0
        t = [np.zeros(n), P.max(axis=1) * rng.uniform(0, 1, n), P.max(axis=1)][trial % 3].astype(np.float32)
        got, want = sorted_heads(P, t), sorted_heads(P.astype(np.float64), t.astype(np.float64))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            for field in ("rows", "values", "classes", "counts"):
                x, y = getattr(a, field), getattr(b, field)
                assert x.dtype == y.dtype and np.array_equal(x, y), (trial, field)
