import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svbop
from conftest import brute_force_best, naive_algorithm1

RHO = svbop.TIE_RTOL


def _num(lo, hi):
    return st.floats(lo, hi, allow_nan=False).map(lambda v: f"{v:.4f}")


@st.composite
def utilities(draw):
    family = draw(st.sampled_from(["precision", "recall", "fbeta", "credal", "exp", "log", "reject", "genreject"]))
    if family == "fbeta":
        return f"fbeta:beta={draw(_num(0, 10))}"
    if family == "credal":
        gamma = float(draw(_num(0, 2)))
        delta = gamma + float(draw(_num(0, 1)))
        # keep g <= 1 for every s: max of delta*x - gamma*x^2 over x in (0, 1]
        x = min(1.0, delta / (2 * gamma)) if gamma > 0 else 1.0
        if delta * x - gamma * x * x > 1:
            delta = gamma + 1
        return f"credal:delta={delta:.4f},gamma={gamma:.4f}"
    if family == "exp":
        return f"exp:delta={draw(_num(0.01, 5))}"
    if family == "reject":
        return f"reject:alpha={draw(_num(0, 1))}"
    if family == "genreject":
        return f"genreject:alpha={draw(_num(0, 1))},beta={draw(st.sampled_from(['0.05', '0.2', '0.5', '1', '2', '7.5']))}"
    return family


@st.composite
def probability_rows(draw, K):
    kind = draw(st.sampled_from(["random", "ties", "zeros", "onehot", "uniform"]))
    if kind == "uniform":
        return np.full(K, 1.0 / K)
    if kind == "onehot":
        p = np.zeros(K)
        p[draw(st.integers(0, K - 1))] = 1.0
        return p
    if kind == "ties":
        values = draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]), min_size=K, max_size=K))
    elif kind == "zeros":
        values = draw(st.lists(st.sampled_from([0.0, 0.0, 1e-3]) | st.floats(0, 1), min_size=K, max_size=K))
    else:
        values = draw(st.lists(st.floats(1e-6, 1.0), min_size=K, max_size=K))
    p = np.asarray(values, dtype=np.float64)
    if p.sum() == 0:
        p[draw(st.integers(0, K - 1))] = 1.0
    return p / p.sum()


@st.composite
def problems(draw):
    K = draw(st.integers(1, 10))
    rows = draw(st.lists(probability_rows(K), min_size=1, max_size=4))
    return np.vstack(rows), draw(utilities())


def _expected(p, s_set, g):
    return g[len(s_set) - 1] * p[s_set].sum() / p.sum()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_predict_sets_equals_brute_force_over_all_subsets(problem):
    P, spec = problem
    K = P.shape[1]
    u = svbop.utility(spec, K=K)
    g = u.values()
    sets = svbop.predict_sets(P, u)
    for p, chosen, eu in zip(P, sets, sets.expected_utility):
        best, best_by_size = brute_force_best(p, g)
        assert chosen.size >= 1
        # optimal (ties within the documented relative tolerance)
        assert _expected(p, chosen, g) >= best * (1 - RHO) - 1e-15
        assert eu == pytest.approx(_expected(p, chosen, g), rel=1e-12, abs=1e-15)
        # a top-|Y| set, listed in decreasing probability
        outside = np.setdiff1d(np.arange(K), chosen)
        assert np.all(np.diff(p[chosen]) <= 0)
        if outside.size:
            assert p[chosen].min() >= p[outside].max()
        # Algorithm 1's tie rule: no larger set is as good
        for s in range(chosen.size + 1, K + 1):
            assert best_by_size[s - 1] < best * (1 - RHO) + 1e-13


@settings(max_examples=200, deadline=None)
@given(problems(), st.lists(st.floats(1e-3, 1e3), min_size=4, max_size=4))
def test_unnormalised_scores_give_the_same_sets(problem, scales):
    P, spec = problem
    u = svbop.utility(spec, K=P.shape[1])
    scaled = P * np.asarray(scales)[: P.shape[0], None]
    # Same classes; their order may differ where scaling rounds two probabilities to a tie.
    np.testing.assert_array_equal(svbop.predict_sets(scaled, u).to_mask(), svbop.predict_sets(P, u).to_mask())


@settings(max_examples=200, deadline=None)
@given(problems())
def test_streaming_algorithm1_matches_the_batched_search(problem):
    P, spec = problem
    K = P.shape[1]
    u = svbop.utility(spec, K=K)
    batched = svbop.predict_sets(P, u)
    provider = svbop.SortedProbabilities()
    for p, expected, eu in zip(P, batched, batched.expected_utility):
        result = svbop.svbop(provider, p, u, K, total=p.sum())
        np.testing.assert_array_equal(result.classes, expected)
        assert result.expected_utility == pytest.approx(eu, rel=1e-12, abs=1e-15)
        unknown_total = svbop.svbop(provider, p, u, K)
        np.testing.assert_array_equal(unknown_total.classes, expected)


@pytest.mark.parametrize(
    "spec",
    [
        "fbeta:beta=1",
        "fbeta:beta=5",
        "credal:delta=1.6,gamma=0.6",
        "credal:delta=2.2,gamma=1.2",
        "precision",
        "exp:delta=2",
        "log",
        "recall",
        "reject:alpha=0.3",
        "genreject:alpha=0.6,beta=0.3",
        "genreject:alpha=0.5,beta=2",
    ],
)
@pytest.mark.parametrize("temperature", [0.3, 1.0, 3.0])
def test_predict_sets_equals_naive_algorithm1_at_larger_K(spec, temperature, rng):
    K = 700
    Z = rng.standard_normal((60, K)) * temperature
    Z[:5] = 0.0  # uniform rows
    Z[5:10, :3] += 20  # three nearly tied leaders
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    u = svbop.utility(spec, K=K)
    early = u.properties().early_stop_valid
    sets = svbop.predict_sets(P, u, chunk_bytes=64 * K)  # many small chunks
    for p, got in zip(P, sets):
        np.testing.assert_array_equal(got, naive_algorithm1(p, u.values(), early))
    # float32 input gives the same answer as its float64 copy
    P32 = P.astype(np.float32)
    assert svbop.predict_sets(P32, u) == svbop.predict_sets(P32.astype(np.float64), u)


def test_softmax_probabilities_and_exp_scores_give_the_same_sets(rng):
    Z = rng.standard_normal((500, 300)) * 2
    expZ = np.exp(Z)
    P = expZ / expZ.sum(axis=1, keepdims=True)
    for spec in ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "genreject:alpha=0.5,beta=0.5"]:
        assert svbop.predict_sets(expZ, spec) == svbop.predict_sets(P, spec)


def test_known_answers():
    P = np.array([[0.5, 0.3, 0.2], [0.9, 0.05, 0.05], [0.1, 0.1, 0.8]])
    # F1: include next iff p_{s+1} >= C_s / (s+1)
    assert svbop.predict_sets(P, "fbeta:beta=1").to_list() == [[0, 1], [0], [2]]
    # recall never penalises size: the whole set (tie rule keeps growing)
    assert svbop.predict_sets(P, "recall").to_list() == [[0, 1, 2], [0, 1, 2], [2, 0, 1]]
    # reject option: singleton unless (1 - alpha) beats the mode
    assert svbop.predict_sets(P, "reject:alpha=0.4").to_list() == [[0, 1, 2], [0], [2]]
    # precision on a uniform row: singleton and full set tie, Algorithm 1 keeps the larger
    assert svbop.predict_sets(np.full((1, 4), 0.25), "precision").to_list() == [[0, 1, 2, 3]]


def test_ties_in_unnormalised_scores_go_to_the_larger_set():
    # proportional to (0.5, 0.25, 0.25): F1 gives U = 0.5 for s = 1, 2, 3 (all tie)
    sets = svbop.predict_sets(np.array([[2.0, 1.0, 1.0]]), "fbeta:beta=1")
    assert sets.to_list() == [[0, 1, 2]]
    assert sets.expected_utility[0] == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize(
    "P, message",
    [
        (np.array([[0.5, np.nan]]), "row 0 contains NaN"),
        (np.array([[0.5, 0.5], [0.2, -0.1]]), "row 1 has a negative probability"),
        (np.array([[0.0, 0.0]]), "row 0 is all zeros"),
        (np.array([[np.inf, 1.0]]), "row 0 contains an infinite value"),
        (np.array([0.5, 0.5]), "must be 2-D"),
        (np.zeros((2, 0)), "no classes"),
        (np.array([["a", "b"]]), "real numbers"),
    ],
)
def test_bad_probabilities_raise_value_errors(P, message):
    with pytest.raises(ValueError, match=message):
        svbop.predict_sets(P, "fbeta:beta=1")


def test_K_mismatch_and_unknown_utility_raise():
    with pytest.raises(ValueError, match="K mismatch"):
        svbop.predict_sets(np.full((1, 3), 1 / 3), svbop.utility("fbeta", K=4))
    with pytest.raises(ValueError, match="unknown utility"):
        svbop.predict_sets(np.full((1, 3), 1 / 3), "f2")


def test_stream_stops_early_and_checks_order():
    u = svbop.utility("fbeta:beta=1")
    pulled = []

    def stream():
        for c, p in [(4, 0.7), (2, 0.2), (9, 0.05), (1, 0.05)]:
            pulled.append(c)
            yield c, p

    result = svbop.predict_set_stream(stream(), u, K=10, total=1.0)
    assert result.classes.tolist() == [4]
    assert result.n_pulled == 2 and pulled == [4, 2]  # Theorem 2: one look past the optimum
    with pytest.raises(ValueError, match="not in decreasing order"):
        svbop.predict_set_stream([(0, 0.2), (1, 0.5)], u, K=2)
    unsorted = svbop.predict_set_stream([(0, 0.2), (1, 0.5)], u, K=2, require_sorted=False)
    assert unsorted.classes.tolist() == [0, 1]


def test_stream_non_convex_utility_uses_the_total_to_stop():
    u = svbop.utility("reject:alpha=0.3", K=1000)
    stream = ((c, p) for c, p in enumerate([0.8] + [0.2 / 999] * 999))
    result = svbop.predict_set_stream(stream, u, total=1.0)
    assert result.classes.tolist() == [0] and result.n_pulled == 1


def test_candidate_factor_matches_the_analytic_bound_for_fbeta():
    for beta in [1, 2, 5]:
        g = svbop.utility(f"fbeta:beta={beta}").values(20)
        assert svbop.candidate_factor(g, tie_rtol=0) == pytest.approx(1 / (1 + beta**2), rel=1e-5)


def test_threads_and_chunk_sizes_do_not_change_the_answer(rng):
    P = np.exp(rng.standard_normal((300, 500)) * 2)
    P[::7, 10:13] = P[::7, [10]]  # exact ties across chunk boundaries
    reference = svbop.predict_sets(P, "credal:delta=2.2,gamma=1.2")
    for chunk_bytes, n_jobs in [(500 * 8, 2), (500 * 8 * 33, -1), (1, None)]:
        got = svbop.predict_sets(P, "credal:delta=2.2,gamma=1.2", chunk_bytes=chunk_bytes, n_jobs=n_jobs)
        assert got == reference
        np.testing.assert_allclose(got.expected_utility, reference.expected_utility, rtol=1e-12)
    with pytest.raises(ValueError, match="n_jobs must be a non-zero integer"):
        svbop.predict_sets(P, "fbeta", n_jobs=0)
