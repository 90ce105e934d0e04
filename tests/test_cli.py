import numpy as np
import pytest

from svbop.cli import main
from svbop.io import load_sets


def test_utilities_command_prints_the_property_table(capsys):
    assert main(["utilities", "--K", "100"]) == 0
    out = capsys.readouterr().out
    assert "K=100" in out
    line = next(l for l in out.splitlines() if l.startswith("credal:delta=2.2,gamma=1.2"))
    assert line.split()[-5:] == ["yes", "yes", "yes", "yes", "yes"]
    line = next(l for l in out.splitlines() if l.startswith("log "))
    assert line.split()[-2:] == ["no", "no"]


def test_predict_and_evaluate_commands(tmp_path, capsys):
    P = np.array([[0.5, 0.3, 0.2], [0.9, 0.05, 0.05]])
    np.savetxt(tmp_path / "p.csv", P, delimiter=",")
    assert main(["predict", str(tmp_path / "p.csv"), "-u", "fbeta:beta=1", "-o", str(tmp_path / "s.npz")]) == 0
    assert load_sets(tmp_path / "s.npz").to_list() == [[0, 1], [0]]
    (tmp_path / "y.txt").write_text("1\n2\n")
    assert main(["evaluate", str(tmp_path / "s.npz"), str(tmp_path / "y.txt"), "-u", "fbeta:beta=1"]) == 0
    out = capsys.readouterr().out
    assert "recall_pct\t50.0000" in out and "fbeta_1_pct\t33.3333" in out
    # the coverage metrics too: class 1's row is covered, class 2's is not; sizes 2 and 1
    assert "coverage_pct\t50.0000" in out and "class_coverage_worst_pct\t0.0000" in out
    assert "singleton_pct\t50.0000" in out and "empty_pct\t0.0000" in out


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    np.save(tmp_path / "p.npy", np.array([[0.5, -0.5]]))
    assert main(["predict", str(tmp_path / "p.npy"), "-u", "fbeta", "-o", str(tmp_path / "s.npz")]) == 2
    assert "negative probability" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "p.npy"), "-u", "nope", "-o", str(tmp_path / "s.npz")]) == 2
    assert "unknown utility 'nope'" in capsys.readouterr().err


def _run(capsys, *argv):
    """Exit code and stderr of one CLI call; a traceback would fail the test."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    return code, err


def _good_probs(tmp_path):
    np.savez(tmp_path / "good.npz", probs=np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1]]))
    return tmp_path / "good.npz"


def test_corrupt_npz_is_refused_naming_the_file(tmp_path, capsys):
    good = _good_probs(tmp_path)
    data = good.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.npz").write_bytes(b"this is not a zip archive")
    (tmp_path / "y.txt").write_text("0\n1\n")
    for name in ("truncated.npz", "garbage.npz"):
        path = tmp_path / name
        code, err = _run(capsys, "predict", path, "-u", "fbeta:beta=1", "-o", tmp_path / "s.npz")
        assert code == 2 and err.startswith(f"svbop: error: {path}: not") and err.count("\n") == 1
        code, err = _run(capsys, "evaluate", path, tmp_path / "y.txt")
        assert code == 2 and err.startswith(f"svbop: error: {path}: not") and err.count("\n") == 1
    assert not (tmp_path / "s.npz").exists()


@pytest.mark.parametrize("spec", ["fbeta:beta=1e400", "genreject:alpha=0.5,beta=1e-400", "credal:delta=1e999999999,gamma=1"])
def test_parameters_beyond_double_precision_are_refused_naming_the_parameter(tmp_path, capsys, spec):
    code, err = _run(capsys, "predict", _good_probs(tmp_path), "-u", spec, "-o", tmp_path / "s.npz")
    assert code == 2 and "is not a double-precision number" in err and spec.split(":")[1].split("=")[0] in err
    code, err = _run(capsys, "utilities", "--spec", spec, "--K", 10)
    assert code == 2 and "is not a double-precision number" in err


def test_huge_but_representable_parameters_give_the_limit_not_an_overflow():
    from svbop import utility

    # F-beta tends to recall (g = 1) as beta grows; beta^2 overflows a double but g does not
    u = utility("fbeta:beta=1e300", K=50)
    assert np.all(u.values() == 1.0) and u.properties().g1_is_one
    # generalised reject with a huge integer beta: g(1) = 1, then 1 - alpha only at s = K (decimals, not a 10^300 power)
    g = utility("genreject:alpha=0.5,beta=1e300", K=50).values()
    assert g[0] == 1.0 and g[-1] == 0.5
    assert utility("genreject:alpha=0.5,beta=1e300", K=50).properties().g1_is_one
    # g(1) stays 1 for the tiniest representable beta (it was 0.5 when beta underflowed to 0)
    assert utility("genreject:alpha=0.5,beta=1e-300", K=10).values()[0] == 1.0


def test_empty_probability_files_are_refused(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    np.save(tmp_path / "rows0.npy", np.zeros((0, 3)))
    for name in ("empty.txt", "rows0.npy"):
        code, err = _run(capsys, "predict", tmp_path / name, "-u", "fbeta:beta=1", "-o", tmp_path / "s.npz")
        assert code == 2 and f"{tmp_path / name}: empty matrix" in err
    assert not (tmp_path / "s.npz").exists()


def test_predict_refuses_to_overwrite_its_input(tmp_path, capsys):
    path = tmp_path / "p.txt"
    path.write_text("0.5 0.5\n0.2 0.8\n")
    code, err = _run(capsys, "predict", path, "-u", "fbeta:beta=1", "-o", path)
    assert code == 2 and "--output is the input file" in err
    assert path.read_text() == "0.5 0.5\n0.2 0.8\n"


def test_a_class_repeated_in_a_set_is_an_error_not_counted_twice(tmp_path, capsys):
    from svbop.sets import SetPredictions

    (tmp_path / "sets.txt").write_text("0 0\n1\n")
    (tmp_path / "y.txt").write_text("0\n1\n")
    code, err = _run(capsys, "evaluate", tmp_path / "sets.txt", tmp_path / "y.txt", "-u", "fbeta:beta=1")
    assert code == 2 and f"{tmp_path / 'sets.txt'}, line 1: class 0 appears twice" in err
    SetPredictions(np.array([2, 1, 2]), np.array([0, 3]), 3).save(tmp_path / "sets.npz")
    code, err = _run(capsys, "evaluate", tmp_path / "sets.npz", tmp_path / "y.txt")
    assert code == 2 and "set 0 holds class 2 twice" in err


def test_missing_and_unreadable_label_files_are_named(tmp_path, capsys):
    from svbop.sets import SetPredictions

    SetPredictions.from_sets([[0], [1]], 2).save(tmp_path / "s.npz")
    code, err = _run(capsys, "evaluate", tmp_path / "s.npz", tmp_path / "nope.txt")
    assert code == 2 and "nope.txt: no such file" in err
    (tmp_path / "y.npy").write_bytes(b"junk")
    code, err = _run(capsys, "evaluate", tmp_path / "s.npz", tmp_path / "y.npy")
    assert code == 2 and "y.npy: not a readable label file" in err


# --- svbop predict --method conformal | hierarchical ---------------------------------------------


def _conformal_files(tmp_path, n_cal=200, n_test=50, K=6, seed=0):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(K) * 0.5, size=n_cal + n_test)
    y = np.array([rng.choice(K, p=p) for p in P])
    np.save(tmp_path / "cal.npy", P[:n_cal])
    np.savetxt(tmp_path / "y_cal.txt", y[:n_cal], fmt="%d")
    np.savetxt(tmp_path / "test.csv", P[n_cal:], delimiter=",")
    return P[:n_cal], y[:n_cal], np.loadtxt(tmp_path / "test.csv", delimiter=",")


@pytest.mark.parametrize("options, kwargs", [
    ([], {}),
    (["--score", "aps"], {"score": "aps", "random_state": 0}),
    (["--score", "aps", "--seed", "7"], {"score": "aps", "random_state": 7}),
    (["--score", "raps", "--k-reg", "2", "--lam", "0.1", "--empty", "keep", "--deterministic"],
     {"score": "raps", "k_reg": 2, "lam": 0.1, "empty": "keep", "randomized": False}),
    (["--score", "aps", "--class-conditional"], {"score": "aps", "class_conditional": True, "random_state": 0}),
    (["--score", "saps", "--lam", "0.3", "--clustered"],
     {"score": "saps", "lam": 0.3, "class_conditional": "clustered", "random_state": 0}),
    (["--score", "topk"], {"score": "topk"}),
    (["--score", "topk", "--randomized", "--seed", "3"], {"score": "topk", "randomized": True, "random_state": 3}),
    (["--score", "lac", "--rc3p"], {"score": "lac", "class_conditional": "rc3p"}),
    (["--score", "margin", "--class-conditional", "--empty", "keep"],
     {"score": "margin", "class_conditional": True, "empty": "keep"}),
    (["--score", "fbeta"], {"score": "fbeta"}),
    (["--score", "credal", "--gamma", "1.2"], {"score": "credal", "gamma": 1.2}),
])
def test_predict_conformal_equals_the_library_predictor(tmp_path, capsys, options, kwargs):
    from svbop import ConformalSetPredictor

    P_cal, y_cal, P = _conformal_files(tmp_path)
    code, err = _run(capsys, "predict", tmp_path / "test.csv", "--method", "conformal", "--epsilon", "0.1",
                     "--calibration", tmp_path / "cal.npy", "--calibration-labels", tmp_path / "y_cal.txt",
                     *options, "-o", tmp_path / "s.npz")
    assert code == 0, err
    expected = ConformalSetPredictor(0.1, **kwargs).fit(P_cal, y_cal).predict(P)
    assert load_sets(tmp_path / "s.npz") == expected


def test_predict_conformal_on_a_hand_computed_example(tmp_path, capsys):
    # LAC scores 1 - P(y|x) of the calibration rows: 0.3, 0.6, 0.4, 0.8; epsilon 0.5: k = ceil(5 * 0.5) = 3,
    # q = 0.6, so a test set keeps the classes with P >= 0.4
    np.savetxt(tmp_path / "cal.txt", [[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.3, 0.6, 0.1], [0.2, 0.3, 0.5]])
    (tmp_path / "y.txt").write_text("0\n1\n1\n0\n")
    np.savetxt(tmp_path / "p.txt", [[0.5, 0.3, 0.2], [0.45, 0.55, 0.0], [0.34, 0.33, 0.33]])
    code, err = _run(capsys, "predict", tmp_path / "p.txt", "-m", "conformal", "--epsilon", "0.5", "--calibration",
                     tmp_path / "cal.txt", "--calibration-labels", tmp_path / "y.txt", "-o", tmp_path / "s.txt",
                     "--empty", "keep")
    assert code == 0, err
    assert load_sets(tmp_path / "s.txt", n_classes=3).to_list() == [[0], [1, 0], []]


def test_predict_method_options_are_checked_with_one_line_errors(tmp_path, capsys):
    _conformal_files(tmp_path)
    test, out = tmp_path / "test.csv", tmp_path / "s.npz"
    cal = ["--calibration", tmp_path / "cal.npy", "--calibration-labels", tmp_path / "y_cal.txt"]
    cases = [
        (["-o", out], "--method bayes needs --utility"),
        (["-m", "conformal", *cal, "-o", out], "--method conformal needs --epsilon"),
        (["-m", "conformal", "--epsilon", "0.1", "-o", out], "--method conformal needs --calibration"),
        (["-u", "fbeta", "--epsilon", "0.1", "-o", out], "--epsilon is for --method conformal or conditional, not bayes"),
        (["-u", "fbeta", "--max-nodes", "2", "-o", out], "--max-nodes is for --method conformal or hierarchical, not bayes"),
        (["-m", "conformal", "--epsilon", "0.1", *cal, "-u", "fbeta", "-o", out],
         "--utility is for --method bayes or hierarchical, not conformal"),
        (["-m", "conformal", "--epsilon", "1.5", *cal, "-o", out], "epsilon must be in (0, 1)"),
        (["-m", "conformal", "--epsilon", "0.1", *cal, "--lam", "0.5", "-o", out], "k_reg and lam are RAPS parameters"),
        (["-m", "conformal", "--epsilon", "0.1", "--score", "credal", *cal, "-o", out], "score='credal' needs gamma"),
        (["-m", "hierarchical", "-u", "fbeta", "-o", out], "--method hierarchical needs --hierarchy"),
    ]
    for argv, message in cases:
        code, err = _run(capsys, "predict", test, *argv)
        assert code == 2 and message in err and err.count("\n") == 1, (argv, err)
    assert not out.exists()
    # calibration files that do not fit: named
    np.save(tmp_path / "cal4.npy", np.full((3, 4), 0.25))
    np.savetxt(tmp_path / "y3.txt", [0, 1, 7], fmt="%d")
    code, err = _run(capsys, "predict", test, "-m", "conformal", "--epsilon", "0.1", "--calibration",
                     tmp_path / "cal4.npy", "--calibration-labels", tmp_path / "y_cal.txt", "-o", out)
    assert code == 2 and f"{tmp_path / 'cal4.npy'}: 4 classes, but {test} has 6" in err
    code, err = _run(capsys, "predict", test, "-m", "conformal", "--epsilon", "0.1", "--calibration",
                     tmp_path / "cal.npy", "--calibration-labels", tmp_path / "y3.txt", "-o", out)
    assert code == 2 and "y3.txt has 3 labels but there are 200 samples" in err and err.count("\n") == 1


EDGES = "r a\nr b\na 0\na 1\na 2\nb 3\nb 4\nb 5\n"  # root r > a: {0, 1, 2}, b: {3, 4, 5}


@pytest.mark.parametrize("max_nodes", [1, 2, 6])
def test_predict_hierarchical_equals_the_library_function(tmp_path, capsys, max_nodes):
    import svbop
    from svbop.datasets import read_hierarchy

    _, _, P = _conformal_files(tmp_path)
    (tmp_path / "tree.txt").write_text(EDGES)
    code, err = _run(capsys, "predict", tmp_path / "test.csv", "-m", "hierarchical", "-u", "fbeta:beta=1",
                     "--hierarchy", tmp_path / "tree.txt", "--max-nodes", max_nodes, "-o", tmp_path / "s.npz")
    assert code == 0, err
    tree = read_hierarchy(None, {"format": "edges", "file": tmp_path / "tree.txt"}, [str(c) for c in range(6)])
    expected = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", tree, max_nodes)
    assert load_sets(tmp_path / "s.npz") == expected
    if max_nodes == 6:
        assert expected == svbop.predict_sets(P, "fbeta:beta=1")


def test_predict_hierarchical_on_a_hand_computed_example(tmp_path, capsys):
    # F1 on one node: {0} 0.4; a = {0, 1, 2} 0.7 * 2/4 = 0.35; r = everything 2/7 -> {0};
    # second row: {3} 0.3, b = {3, 4, 5} 0.8 * 2/4 = 0.4 -> b
    np.savetxt(tmp_path / "p.txt", [[0.4, 0.2, 0.1, 0.1, 0.1, 0.1], [0.1, 0.05, 0.05, 0.3, 0.25, 0.25]])
    (tmp_path / "tree.txt").write_text(EDGES)
    code, err = _run(capsys, "predict", tmp_path / "p.txt", "-m", "hierarchical", "-u", "fbeta:beta=1",
                     "--hierarchy", tmp_path / "tree.txt", "-o", tmp_path / "s.txt")
    assert code == 0, err
    assert [sorted(s) for s in load_sets(tmp_path / "s.txt", n_classes=6).to_list()] == [[0], [3, 4, 5]]


def test_predict_hierarchical_refuses_bad_trees_in_one_line(tmp_path, capsys):
    _conformal_files(tmp_path)
    test, out = tmp_path / "test.csv", tmp_path / "s.npz"
    (tmp_path / "five.txt").write_text("r a\na 0\na 1\na 2\nr 3\nr 4\n")  # no leaf for column 5
    (tmp_path / "tree.txt").write_text(EDGES)
    (tmp_path / "cycle.txt").write_text(EDGES + "0 r\n")
    cases = [
        (["--hierarchy", tmp_path / "nope.txt"], "nope.txt: no such hierarchy file"),
        (["--hierarchy", tmp_path / "five.txt"], "five.txt"),
        (["--hierarchy", tmp_path / "tree.txt", "--max-nodes", "0"], "--max-nodes must be >= 1, got 0"),
        (["--hierarchy", tmp_path / "tree.txt", "--hierarchy-format", "nested_lists"], "tree.txt"),
    ]
    for argv, message in cases:
        code, err = _run(capsys, "predict", test, "-m", "hierarchical", "-u", "fbeta:beta=1", *argv, "-o", out)
        assert code == 2 and message in err and err.count("\n") == 1, (argv, err)
    assert not out.exists()


@pytest.mark.parametrize("options, message", [
    (["--score", "lac", "--deterministic"], "--deterministic is for --score aps, raps or saps"),
    (["--score", "aps", "--class-conditional", "--clustered"], "--class-conditional, --clustered and --rc3p: give one"),
    (["--score", "aps", "--rc3p", "--clustered"], "--class-conditional, --clustered and --rc3p: give one"),
    (["--score", "margin", "--randomized"], "--randomized is for --score topk"),
    (["--score", "saps", "--lam", "0"], "lam, the SAPS weight of a rank, must be > 0"),
    (["--score", "fbeta", "--clustered"], "class_conditional='clustered' is for score"),
])
def test_predict_conformal_refuses_the_new_options_misused(tmp_path, capsys, options, message):
    _conformal_files(tmp_path)
    code, err = _run(capsys, "predict", tmp_path / "test.csv", "--method", "conformal", "--epsilon", "0.1",
                     "--calibration", tmp_path / "cal.npy", "--calibration-labels", tmp_path / "y_cal.txt",
                     *options, "-o", tmp_path / "s.npz")
    assert code == 2 and message in err and err.count("\n") == 1


def test_seed_option_is_for_conformal_only(tmp_path, capsys):
    _conformal_files(tmp_path)
    code, err = _run(capsys, "predict", tmp_path / "test.csv", "--method", "bayes", "-u", "fbeta:beta=1",
                     "--seed", "3", "-o", tmp_path / "s.npz")
    assert code == 2 and "--seed is for --method conformal, not bayes" in err
