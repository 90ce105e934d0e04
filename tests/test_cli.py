import numpy as np

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


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    np.save(tmp_path / "p.npy", np.array([[0.5, -0.5]]))
    assert main(["predict", str(tmp_path / "p.npy"), "-u", "fbeta", "-o", str(tmp_path / "s.npz")]) == 2
    assert "negative probability" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "p.npy"), "-u", "nope", "-o", str(tmp_path / "s.npz")]) == 2
    assert "unknown utility 'nope'" in capsys.readouterr().err
