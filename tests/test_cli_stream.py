"""``svbop stream``: adaptive conformal sets for rows in order, with the running coverage (issue 38, item 4)."""

import numpy as np
import pytest

from svbop.cli import main
from svbop.conformal import AdaptiveConformalSetPredictor
from svbop.io import load_sets


def _files(tmp_path, rng, n_cal=200, n=600, K=5):
    P = rng.dirichlet(np.ones(K), size=n_cal + n)
    y = np.minimum((P.cumsum(axis=1) < rng.random((n_cal + n, 1))).sum(axis=1), K - 1)
    np.save(tmp_path / "cal.npy", P[:n_cal])
    np.savetxt(tmp_path / "cal_y.txt", y[:n_cal], fmt="%d")
    np.savetxt(tmp_path / "stream.csv", P[n_cal:], delimiter=",")
    np.save(tmp_path / "stream_y.npy", y[n_cal:])
    return P, y


def _argv(tmp_path, *extra):
    return ["stream", str(tmp_path / "stream.csv"), str(tmp_path / "stream_y.npy"),
            "--calibration", str(tmp_path / "cal.npy"), "--calibration-labels", str(tmp_path / "cal_y.txt"),
            "--epsilon", "0.1", "-o", str(tmp_path / "sets.npz"), "--coverage", str(tmp_path / "cov.tsv"), *extra]


def test_stream_writes_the_library_sets_and_the_running_coverage(tmp_path, rng, capsys):
    P, y = _files(tmp_path, rng)
    assert main(_argv(tmp_path, "--score", "raps", "--lam", "0.02", "--step", "0.05")) == 0
    out = capsys.readouterr().out
    assert out.startswith("600 sets of adaptive conformal raps at epsilon=0.1 (step 0.05, 200 calibration rows)")
    aci = AdaptiveConformalSetPredictor(0.1, score="raps", lam=0.02, step=0.05).fit(P[:200], y[:200])
    P_stream = np.loadtxt(tmp_path / "stream.csv", delimiter=",")
    expected = aci.update(P_stream, y[200:])
    assert load_sets(tmp_path / "sets.npz") == expected
    table = np.genfromtxt(tmp_path / "cov.tsv", delimiter="\t", names=True)
    assert table.dtype.names == ("row", "alpha", "size", "covered", "running_coverage")
    np.testing.assert_array_equal(table["row"], np.arange(600))
    np.testing.assert_allclose(table["alpha"], aci.alphas_, rtol=1e-5)
    hit = expected.contains(y[200:])
    np.testing.assert_array_equal(table["covered"], hit)
    np.testing.assert_allclose(table["running_coverage"], np.cumsum(hit) / np.arange(1, 601), atol=1e-6)
    assert f"coverage {hit.mean():.4f} (target 0.9000)" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--step", "0"), "step must be a number in (0, 1], got 0.0"),
        (("--score", "credal"), "score='credal' needs gamma"),
        (("--epsilon", "1"), "significance level epsilon must be in (0, 1), got 1.0"),
    ],
)
def test_stream_refusals_are_one_line_errors(tmp_path, rng, capsys, extra, message):
    _files(tmp_path, rng)
    assert main(_argv(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_stream_refuses_to_overwrite_an_input_and_checks_the_labels(tmp_path, rng, capsys):
    _files(tmp_path, rng)
    argv = _argv(tmp_path)
    argv[argv.index("-o") + 1] = str(tmp_path / "stream.csv")
    assert main(argv) == 2
    assert "--output is the input file (probs); choose another name" in capsys.readouterr().err
    argv = _argv(tmp_path)
    argv[argv.index("--coverage") + 1] = str(tmp_path / "sub" / ".." / "cal_y.txt")
    (tmp_path / "sub").mkdir()
    assert main(argv) == 2
    assert "--coverage is the input file (--calibration-labels)" in capsys.readouterr().err
    argv[argv.index("--coverage") + 1] = str(tmp_path / "sets.npz")
    assert main(argv) == 2
    assert "--coverage is the --output file" in capsys.readouterr().err
    argv = _argv(tmp_path)
    argv[1] = "/dev/zero"
    assert main(argv) == 2
    assert "/dev/zero: probs is not a regular file" in capsys.readouterr().err
    np.save(tmp_path / "stream_y.npy", np.zeros(5, dtype=np.int64))
    assert main(_argv(tmp_path)) == 2
    assert "stream_y.npy has 5 labels but there are 600 samples" in capsys.readouterr().err
    np.save(tmp_path / "cal.npy", np.ones((200, 6)))
    assert main(_argv(tmp_path)) == 2
    assert "cal.npy: 6 classes, but" in capsys.readouterr().err


@pytest.mark.parametrize("extra, kwargs", [
    (["--score", "saps"], dict(score="saps")),
    (["--score", "topk"], dict(score="topk")),
    (["--score", "margin", "--step", "0.05"], dict(score="margin", step=0.05)),
])
def test_stream_takes_the_new_scores(tmp_path, rng, capsys, extra, kwargs):
    P, y = _files(tmp_path, rng)
    assert main(_argv(tmp_path, *extra)) == 0
    aci = AdaptiveConformalSetPredictor(0.1, **kwargs).fit(P[:200], y[:200])
    assert load_sets(tmp_path / "sets.npz") == aci.update(np.loadtxt(tmp_path / "stream.csv", delimiter=","), y[200:])
