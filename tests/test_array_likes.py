"""Arrays from where models live (issue 37, item 4): every public function that takes probabilities
or labels accepts torch tensors (CPU, GPU, requiring grad; float16/32/64, bfloat16), JAX arrays,
pandas DataFrames/Series and any object with ``__array__`` or ``__dlpack__``, and gives the same
sets and numbers as with the numpy array itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from watched import run_watched

import svbop
from svbop.baselines import ConformalSetPredictor
from svbop.datasets import Hierarchy
from svbop.metrics import class_conditional_coverage, coverage, size_stratified_coverage
from svbop.sets import SetPredictions

torch = pytest.importorskip("torch", reason="torch (the pipeline extra) is needed for the tensor tests")
pd = pytest.importorskip("pandas", reason="pandas (the pipeline extra) is needed for the DataFrame tests")

N, K = 240, 12
U_F1, U_CREDAL, U_LOG = "fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "log"
# leaves 0..11 under three internal nodes 12, 13, 14, under the root 15
TREE = Hierarchy(np.array([12] * 4 + [13] * 4 + [14] * 4 + [15, 15, 15, -1]), n_classes=K)


def _problem(dtype):
    """Rows of probabilities with many exact ties (small integer weights) and rows without."""
    rng = np.random.default_rng(7)
    tied = rng.integers(0, 5, size=(N // 2, K)).astype(np.float64)
    tied[:, 0] += 1  # no all-zero row
    smooth = rng.dirichlet(np.full(K, 0.3), size=N - N // 2)
    P = np.vstack([tied / tied.sum(axis=1, keepdims=True), smooth]).astype(dtype)
    y = rng.integers(0, K, size=N)
    return P, y


# --- the array-likes -------------------------------------------------------------------------------


class ArrayOnly:
    """An object that is only ``__array__`` (what a small framework or a memory map may offer)."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class DLPackOnly:
    """An object that is only DLPack (what CuPy-, MXNet- or PaddlePaddle-style tensors offer)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class OnDevice:
    """A tensor in device memory (DLPack device 2, CUDA) with torch's ``.cpu()``; counts the copies."""

    def __init__(self, a):
        self._a = a
        self.copies = 0

    def __dlpack__(self, *args, **kwargs):  # pragma: no cover - host code must never read it directly
        raise BufferError("the data is in device memory")

    def __dlpack_device__(self):
        return (2, 0)

    def cpu(self):
        self.copies += 1
        return torch.from_numpy(self._a)


def _grad(a):
    return torch.tensor(a, requires_grad=True)


# name -> (dtype of the numpy reference, wrap the probabilities, wrap the labels)
LIKES = {
    "torch_float64": (np.float64, torch.from_numpy, torch.from_numpy),
    "torch_float32": (np.float32, torch.from_numpy, torch.from_numpy),
    "torch_float16": (np.float16, torch.from_numpy, torch.from_numpy),
    "torch_requires_grad": (np.float32, _grad, lambda y: torch.from_numpy(y).to(torch.int32)),
    "pandas": (np.float64, pd.DataFrame, pd.Series),
    "array_only": (np.float32, ArrayOnly, ArrayOnly),
    "dlpack_only": (np.float64, DLPackOnly, DLPackOnly),
}


def _same(a, b):
    """Equal results: SetPredictions (sets and expected utilities), tuples, dicts, arrays, floats."""
    if isinstance(a, SetPredictions):
        assert isinstance(b, SetPredictions)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        assert a.n_classes == b.n_classes
        ea, eb = getattr(a, "expected_utility", None), getattr(b, "expected_utility", None)
        if ea is not None or eb is not None:
            np.testing.assert_array_equal(ea, eb)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, z in zip(a, b):
            _same(x, z)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _conformal(P, y, **kw):
    model = ConformalSetPredictor(epsilon=0.2, **kw).fit(P, y)
    return model.predict(P), model.quantile_


def _threshold_predictor(P, y):
    model = svbop.ThresholdSetPredictor(U_F1).fit(P, y)
    return model.predict(P), model.theta_, model.scores_


# every public function of svbop that takes probabilities (P) and/or labels (y)
PUBLIC = {
    "predict_sets_f1": lambda P, y: svbop.predict_sets(P, U_F1),
    "predict_sets_credal": lambda P, y: svbop.predict_sets(P, U_CREDAL),
    "predict_sets_log": lambda P, y: svbop.predict_sets(P, U_LOG),  # no early stop
    "top_s_sets": lambda P, y: svbop.top_s_sets(P, 3),
    "threshold_sets": lambda P, y: svbop.threshold_sets(P, 0.75),
    "tune_threshold": lambda P, y: svbop.tune_threshold(P, y, U_F1),
    "ThresholdSetPredictor": _threshold_predictor,
    "conformal_quantile": lambda P, y: svbop.conformal_quantile(P, y, 0.1),
    "conformal_sets": lambda P, y: svbop.conformal_sets(P, 0.6),
    "Conformal_lac": lambda P, y: _conformal(P, y, score="lac"),
    "Conformal_aps_mondrian": lambda P, y: _conformal(P, y, score="aps", class_conditional=True, random_state=0),
    "Conformal_raps": lambda P, y: _conformal(P, y, score="raps", k_reg=1, lam=0.05, random_state=0),
    "Conformal_fbeta": lambda P, y: _conformal(P, y, score="fbeta"),
    "predict_sets_hierarchical": lambda P, y: svbop.predict_sets_hierarchical(P, U_F1, TREE, 2, return_nodes=True),
    "top1_accuracy": lambda P, y: svbop.top1_accuracy(P, y),
    "mean_scores": lambda P, y: svbop.mean_scores(svbop.top_s_sets(P, 2), y, (U_F1, U_CREDAL), P=P),
    "svbop_stream": lambda P, y: [
        svbop.svbop(svbop.SortedProbabilities(), P[i], U_F1, K=K).classes for i in (0, 1, N - 1)
    ],
}

# metrics that take labels (and sets), not probabilities
LABELS_ONLY = {
    "set_utility": lambda sets, y: svbop.set_utility(sets, y, U_F1),
    "recall": lambda sets, y: svbop.recall(sets, y),
    "coverage": lambda sets, y: coverage(sets, y),
    "size_stratified_coverage": lambda sets, y: size_stratified_coverage(sets, y),
    "class_conditional_coverage": lambda sets, y: class_conditional_coverage(sets, y),
    "mean_scores_list_sets": lambda sets, y: svbop.mean_scores(sets.to_list(), y, (U_F1,)),
}


@pytest.mark.parametrize("fn", PUBLIC, ids=list(PUBLIC))
@pytest.mark.parametrize("like", LIKES, ids=list(LIKES))
def test_public_functions_give_the_numpy_results_for_array_likes(like, fn):
    dtype, wrap_P, wrap_y = LIKES[like]
    P, y = _problem(dtype)
    expected = PUBLIC[fn](P, y)
    if fn == "svbop_stream":  # one row at a time: the wrapper holds the whole matrix
        wrap_row = pd.Series if like == "pandas" else wrap_P
        got = [svbop.svbop(svbop.SortedProbabilities(), wrap_row(P[i].copy()), U_F1, K=K).classes
               for i in (0, 1, N - 1)]
    else:
        got = PUBLIC[fn](wrap_P(P), wrap_y(y))
    _same(expected, got)


@pytest.mark.parametrize("fn", LABELS_ONLY, ids=list(LABELS_ONLY))
@pytest.mark.parametrize("like", LIKES, ids=list(LIKES))
def test_label_arguments_accept_array_likes(like, fn):
    _, _, wrap_y = LIKES[like]
    P, y = _problem(np.float64)
    sets = svbop.predict_sets(P, U_F1)
    _same(LABELS_ONLY[fn](sets, y), LABELS_ONLY[fn](sets, wrap_y(y)))


def test_float32_tensor_gives_the_sets_of_the_same_values_in_float64():
    """float32 stays float32 in memory, but sums and scans run in float64: the sets are those of the
    float32 values read as float64, ties included."""
    P, _ = _problem(np.float32)
    t = torch.from_numpy(P)
    for u in (U_F1, U_CREDAL, U_LOG):
        _same(svbop.predict_sets(P.astype(np.float64), u).to_list(), svbop.predict_sets(t, u).to_list())


def test_bfloat16_tensor_is_read_as_float32_exactly():
    P, _ = _problem(np.float64)
    t = torch.from_numpy(P).to(torch.bfloat16)
    expected = svbop.predict_sets(t.float().numpy(), U_F1)
    _same(expected, svbop.predict_sets(t, U_F1))
    _same(expected, svbop.predict_sets(t.requires_grad_(True), U_F1))


def test_numpy_input_is_not_copied():
    from svbop._arrays import as_host_array

    P, _ = _problem(np.float64)
    assert as_host_array(P, "P") is P
    t = torch.from_numpy(P)
    assert np.shares_memory(as_host_array(t, "P"), P)  # a CPU tensor is read in place


def test_a_tensor_in_device_memory_is_copied_to_the_host_once():
    """ConformalSetPredictor.fit (many passes over P_cal inside) copies P_cal and y_cal once each."""
    P, y = _problem(np.float64)
    expected = ConformalSetPredictor(epsilon=0.2, score="fbeta").fit(P, y)
    P_dev, y_dev = OnDevice(P), OnDevice(y)
    got = ConformalSetPredictor(epsilon=0.2, score="fbeta").fit(P_dev, y_dev)
    assert (P_dev.copies, y_dev.copies) == (1, 1)
    assert got.quantile_ == expected.quantile_
    sets_dev = OnDevice(P)
    _same(expected.predict(P), got.predict(sets_dev))
    assert sets_dev.copies == 1
    P_dev, y_dev = OnDevice(P), OnDevice(y)
    svbop.mean_scores(svbop.predict_sets(P, U_F1).to_list(), y_dev, (U_F1,), P=P_dev)
    assert (P_dev.copies, y_dev.copies) == (1, 1)


def test_device_memory_without_a_way_to_the_host_is_refused_naming_the_argument():
    class Stuck:
        def __dlpack__(self, *args, **kwargs):
            raise BufferError("device memory")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(ValueError, match=r"^P_cal is in device memory .*move it to the CPU first$"):
        svbop.conformal_quantile(Stuck(), np.zeros(3, dtype=int), 0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_cuda_tensors_give_the_numpy_results():
    P, y = _problem(np.float32)
    Pc, yc = torch.from_numpy(P).cuda().requires_grad_(True), torch.from_numpy(y).cuda()
    for fn in ("predict_sets_f1", "predict_sets_log", "threshold_sets", "Conformal_aps_mondrian",
               "Conformal_fbeta", "predict_sets_hierarchical", "mean_scores"):
        _same(PUBLIC[fn](P, y), PUBLIC[fn](Pc, yc))
    sets = svbop.predict_sets(P, U_F1)
    _same(svbop.set_utility(sets, y, U_F1), svbop.set_utility(sets, yc, U_F1))


def test_jax_arrays_give_the_numpy_results():
    """jax (CPU) is in the test extra (pyproject.toml), so this runs wherever the README's test command does.

    In a fresh interpreter: JAX starts threads when imported, and a test worker that later forks
    (multiprocessing in test_linear.py, test_trees.py) could deadlock on a lock one of them held."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax (the test extra: pip install -e '.[test]') is not installed")
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_array_likes as t; t._jax_check()"
    result = run_watched([sys.executable, "-c", code])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _jax_check():
    import jax.numpy as jnp

    from svbop.calibration import TemperatureScaling, calibration_metrics, fit_temperature, outputs_to_probabilities

    P, y = _problem(np.float32)
    Pj, yj = jnp.asarray(P), jnp.asarray(y)
    assert type(Pj).__module__.startswith("jax")
    for fn in ("predict_sets_f1", "threshold_sets", "Conformal_raps", "predict_sets_hierarchical", "mean_scores"):
        _same(PUBLIC[fn](P, y), PUBLIC[fn](Pj, yj))
    # calibration (svbop.calibration: "takes ... JAX arrays"): logits as a JAX array, labels too
    z = np.log(np.maximum(P, 1e-6)).astype(np.float32) * 2.5
    zj = jnp.asarray(z)
    assert fit_temperature(zj, yj) == fit_temperature(z, y)
    np.testing.assert_array_equal(outputs_to_probabilities(zj, temperature=1.7), outputs_to_probabilities(z, temperature=1.7))
    np.testing.assert_array_equal(TemperatureScaling().fit(zj, yj).transform(zj), TemperatureScaling().fit(z, y).transform(z))
    assert calibration_metrics(Pj, yj) == calibration_metrics(P, y)


# --- what is refused, in one line naming the argument ---------------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: svbop.predict_sets(np.array([[0.5, None]], dtype=object), U_F1),
         r"^P must hold real numbers \(bool, integer or float\), got dtype object \(mixed types"),
        (lambda: svbop.top_s_sets(pd.DataFrame({"a": [0.5, 0.2], "b": ["x", "y"]}), 1),
         r"^P must hold real numbers .*got dtype object"),
        (lambda: ConformalSetPredictor(epsilon=0.1).fit(np.full((2, 2), 0.5), pd.Series(["cat", "dog"])),
         r"^y_cal must hold integer class indices, got dtype object"),
        (lambda: svbop.tune_threshold(np.full((2, 2), 0.5), np.array(["a", "b"]), U_F1),
         r"^y_val must hold integer class indices, got dtype <U1$"),
        (lambda: svbop.set_utility([[0], [1]], np.array([0, None], dtype=object), U_F1),
         r"^y must hold integer class indices, got dtype object \(mixed types"),
        (lambda: svbop.top1_accuracy(np.array([["a", "b"]]), [0]), r"^P must hold real numbers .*got dtype <U1$"),
        (lambda: svbop.predict_sets(DLPackOnly(np.array([[1 + 1j, 0]])), U_F1),
         r"^P must hold real numbers .*got dtype complex128$"),
        (lambda: svbop.predict_sets([[0.5, 0.5], [1.0]], U_F1), r"^P cannot be read as an array of numbers \(list: "),
        (lambda: svbop.threshold_sets(_StrangeTensor(), 0.5), r"^P cannot be read as an array of numbers"),
    ],
)
def test_non_numeric_inputs_are_refused_in_one_line_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message) as err:
        call()
    assert "\n" not in str(err.value)


class _StrangeTensor:
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Got unsupported ScalarType Strange\nsecond line")


def test_sparse_probabilities_are_still_refused():
    sp = pytest.importorskip("scipy.sparse")
    with pytest.raises(ValueError, match=r"^P must be a dense array; got a sparse matrix"):
        svbop.predict_sets(sp.csr_matrix(np.full((2, 2), 0.5)), U_F1)


def test_svbop_imports_none_of_torch_jax_pandas():
    """Array-likes are recognised by duck typing: using svbop on numpy never imports the frameworks."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, svbop; svbop.predict_sets(np.eye(3) + 0.1, 'fbeta:beta=1');"
            " svbop.mean_scores([[0]], [0]); print([m for m in ('torch', 'jax', 'pandas') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
