"""`svbop report` checks every option and reads every input file in its own process before the
workflow starts: a refusal is the last line, names the option or the user's own file (and row), shows
no traceback and no Snakemake text, and nothing is written (the output folder is not even made)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from svbop.cli import main

K = 5


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Valid test scores (probabilities) and labels, in the current folder."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(K), size=40)
    np.save("p.npy", P)
    np.save("z.npy", np.log(P).astype(np.float32))
    np.save("y.npy", np.arange(40) % K)
    return tmp_path


def _refused(capsys, *argv):
    code = main(["report", *argv, "-o", "out"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not os.path.exists("out"), "a refused run wrote its output folder"
    assert "Traceback" not in err and "Snakemake" not in err and "WorkflowError" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("value, shown", [("nan", "nan"), ("-1", "-1.0"), ("0", "0.0"), ("1", "1.0"), ("inf", "inf")])
def test_epsilon_outside_0_1_is_refused_naming_the_option(files, capsys, value, shown):
    assert _refused(capsys, "--test", "p.npy", "y.npy", "--epsilon", value) == (
        f"svbop: error: --epsilon: {shown} is not in (0, 1) (the significance level: 0.1 asks for 90 % coverage)")


@pytest.mark.parametrize("cores", ["0", "-1"])
def test_cores_below_one_is_refused(files, capsys, cores):
    assert _refused(capsys, "--test", "p.npy", "y.npy", "--cores", cores) == (
        f"svbop: error: --cores: {cores}; expected a whole number >= 1")


def test_name_that_is_not_a_word_is_refused(files, capsys):
    assert _refused(capsys, "--test", "p.npy", "y.npy", "--name", "../x").startswith("svbop: error: --name: '../x';")


@pytest.mark.parametrize("which", ["scores", "labels", "groups"])
def test_object_dtype_npy_is_refused_naming_the_file(files, capsys, which):
    np.save("obj.npy", np.array([[1, 2]] * 40, dtype=object), allow_pickle=True)
    args = {"scores": ["--test", "obj.npy", "y.npy"], "labels": ["--test", "p.npy", "obj.npy"],
            "groups": ["--test", "p.npy", "y.npy", "--test-groups", "obj.npy"]}[which]
    line = _refused(capsys, *args)
    assert line.startswith("svbop: error: obj.npy") and "dtype object" in line and "never pickles" in line


def test_class_names_of_the_wrong_count_are_refused_naming_the_file(files, capsys):
    (files / "names.txt").write_text("a\nb\nc\nd\n")
    assert _refused(capsys, "--test", "p.npy", "y.npy", "--class-names", "names.txt") == (
        "svbop: error: names.txt: 4 class names but the scores have 5 columns (one name per class, in the scores' "
        "column order)")


def test_probabilities_that_do_not_sum_to_one_are_refused_naming_the_users_file_and_row(files, capsys):
    P = np.load("p.npy")
    P[3] *= 1.3
    np.save("bad.npy", P)
    line = _refused(capsys, "--test", "bad.npy", "y.npy", "--outputs", "probabilities")
    assert line.startswith("svbop: error: bad.npy: row 3 sums to 1.3, not 1")


def test_labels_outside_the_classes_and_row_counts_are_refused(files, capsys):
    np.save("y9.npy", np.r_[np.zeros(39, int), 9])
    line = _refused(capsys, "--test", "p.npy", "y9.npy")
    assert line.startswith("svbop: error: y9.npy") and "9" in line
    np.save("y39.npy", np.zeros(39, int))
    assert _refused(capsys, "--test", "p.npy", "y39.npy") == "svbop: error: y39.npy: 39 labels but p.npy has 40 rows"


def test_a_fifo_and_a_device_are_refused_without_reading_them(files, capsys):
    os.mkfifo("fifo.npy")
    os.symlink("/dev/zero", "zero.csv")
    # a reader that opened the FIFO would block forever: a watchdog writer unblocks it, failing the test
    opened = threading.Timer(20, lambda: open("fifo.npy", "w").close())
    opened.daemon = True
    opened.start()
    try:
        assert _refused(capsys, "--test", "fifo.npy", "y.npy") == (
            "svbop: error: --test: fifo.npy: is a FIFO (named pipe), not a regular file; give the file itself")
        assert _refused(capsys, "--test", "zero.csv", "y.npy") == (
            "svbop: error: --test: zero.csv: is a character device, not a regular file; give the file itself")
        assert _refused(capsys, "--test", "p.npy", "y.npy", "--class-names", "fifo.npy") == (
            "svbop: error: --class-names: fifo.npy: is a FIFO (named pipe), not a regular file; give the file itself")
    finally:
        opened.cancel()


def test_groups_flags_are_named_as_given(files, capsys):
    assert _refused(capsys, "--test", "p.npy", "y.npy", "--test-groups", "nosuch.txt") == (
        "svbop: error: --test-groups: nosuch.txt: no such file or directory")
    assert _refused(capsys, "--test", "p.npy", "y.npy", "--validation-groups", "y.npy") == (
        "svbop: error: --validation-groups: there is no --validation (groups are given for the parts given)")


def test_a_missing_file_is_named_with_its_flag(files, capsys):
    assert _refused(capsys, "--test", "p.npy", "y.npy", "--validation", "nope.npy", "y.npy") == (
        "svbop: error: --validation: nope.npy: no such file or directory")


def test_check_inputs_decides_logits_or_probabilities(files):
    from svbop.report.run import check_inputs

    assert check_inputs(test=("p.npy", "y.npy")) == ("probabilities", K, 40)
    assert check_inputs(test=("z.npy", "y.npy")) == ("logits", K, 40)
    assert check_inputs(test=("z.npy", "y.npy"), validation=("p.npy", "y.npy"), outputs="logits") == ("logits", K, 80)
