"""svbop predict's issue-48 methods: --method risk, --method conditional, conformal --weights."""

import numpy as np
import pytest

from svbop.cli import main
from svbop.conformal import ConditionalSetPredictor, ConformalSetPredictor, RiskControlSetPredictor
from svbop.io import load_sets


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(5), size=300)
    y = rng.integers(0, 5, 300)
    np.save(tmp_path / "cal.npy", P[:200])
    np.save(tmp_path / "caly.npy", y[:200])
    np.save(tmp_path / "test.npy", P[200:])
    w = np.exp(P[:, 0])
    np.savetxt(tmp_path / "wc.txt", w[:200])
    np.savetxt(tmp_path / "w.txt", w[200:])
    np.savetxt(tmp_path / "cost.txt", np.arange(1, 6))
    Phi = (P[:, :2] > 0.2).astype(int)
    np.savetxt(tmp_path / "phic.txt", Phi[:200], fmt="%d")
    np.savetxt(tmp_path / "phi.csv", Phi[200:], fmt="%d", delimiter=",")
    (tmp_path / "tree.txt").write_text("r a\nr b\na 0\na 1\na 2\nb 3\nb 4\n")
    return tmp_path, P, y, w, Phi


def _predict(tmp_path, capsys, *extra):
    code = main(["predict", str(tmp_path / "test.npy"), "-o", str(tmp_path / "out.npz"), "--calibration",
                 str(tmp_path / "cal.npy"), "--calibration-labels", str(tmp_path / "caly.npy"), *map(str, extra)])
    return code, capsys.readouterr()


def test_the_new_methods_write_the_library_sets(files, capsys):
    d, P, y, w, Phi = files
    code, _ = _predict(d, capsys, "-m", "risk", "--alpha", 0.5, "--loss", "class_cost", "--cost", d / "cost.txt",
                       "--score", "aps")
    assert code == 0
    ref = RiskControlSetPredictor(0.5, "class_cost", "aps", cost=np.arange(1.0, 6)).fit(P[:200], y[:200])
    np.testing.assert_array_equal(load_sets(d / "out.npz").to_mask(), ref.predict_mask(P[200:]))
    assert _predict(d, capsys, "-m", "risk", "--alpha", 0.05, "--loss", "hierarchical", "--hierarchy",
                    d / "tree.txt")[0] == 0
    assert _predict(d, capsys, "-m", "conditional", "--epsilon", 0.1, "--group-columns", d / "phi.csv",
                    "--calibration-group-columns", d / "phic.txt")[0] == 0
    ref = ConditionalSetPredictor(0.1).fit(P[:200], y[:200], Phi[:200])
    np.testing.assert_array_equal(load_sets(d / "out.npz").to_mask(), ref.predict_mask(P[200:], Phi[200:]))
    assert _predict(d, capsys, "-m", "conformal", "--epsilon", 0.1, "--weights", d / "w.txt",
                    "--calibration-weights", d / "wc.txt")[0] == 0
    ref = ConformalSetPredictor(0.1).fit(P[:200], y[:200], weights=w[:200])
    np.testing.assert_array_equal(load_sets(d / "out.npz").to_mask(), ref.predict_mask(P[200:], weights=w[200:]))


@pytest.mark.parametrize("extra, message", [
    (("-m", "conformal", "--epsilon", 0.1, "--weights", "w.txt"), "--weights and --calibration-weights go together"),
    (("-m", "risk", "--alpha", 0.1, "--cost", "cost.txt"), "--cost is for --loss class_cost, not --loss miscoverage"),
    (("-m", "risk", "--alpha", 0.1, "--loss", "class_cost"), "--loss class_cost needs --cost"),
    (("-m", "risk", "--epsilon", 0.1, "--alpha", 0.1), "--epsilon is for --method conformal or conditional, not risk"),
    (("-m", "conditional", "--epsilon", 0.1, "--group-columns", "phi.csv", "--calibration-group-columns", "phi.csv"),
     "--calibration-group-columns has 100 rows but .*cal.npy has 200"),
    (("-m", "risk", "--alpha", 0.1, "--score", "fbeta"), "score must be one of"),
])
def test_refusals_name_the_option(files, capsys, extra, message):
    d = files[0]
    extra = [d / e if isinstance(e, str) and e.endswith((".txt", ".csv")) else e for e in extra]
    code, out = _predict(d, capsys, *extra)
    assert code == 2
    assert len(out.err.strip().splitlines()) == 1
    import re

    assert re.search(message, out.err), out.err
