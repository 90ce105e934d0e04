"""What the command line writes and reads (issue 36, classes 4 and 5).

Writes: no output may resolve to any input (however named: ``..`` through a folder that does
not exist yet, a symbolic or hard link), and temporary files are created exclusively under a
random name, so a link planted at a guessable name redirects nothing.  Reads: every input is a
regular file (``/dev/zero`` never ends, a FIFO may never answer) and a set-predictions file's
``n_classes`` is checked before anything is allocated for it.  Calls that could exhaust memory on
the code before these checks run in a child process with a bounded address space.
"""

from __future__ import annotations

import os
import re
import resource
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from watched import run_watched

import svbop
from svbop.cli import main
from svbop.io import atomic_path, load_sets, save_sets
from svbop.sets import MAX_N_CLASSES, SetPredictions

SVBOP_ROOT = str(Path(svbop.__file__).resolve().parents[1])


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _inputs(tmp_path):
    """Probabilities, calibration probabilities and labels, and a hierarchy over 3 classes."""
    P = np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]])
    np.savetxt(tmp_path / "probs.csv", P, delimiter=",")
    np.savetxt(tmp_path / "cal.csv", np.tile(P, (4, 1)), delimiter=",")
    (tmp_path / "y_cal.txt").write_text("0\n1\n2\n" * 4)
    (tmp_path / "tree.txt").write_text("r a\na 0\na 1\nr 2\n")
    return {name: tmp_path / name for name in ("probs.csv", "cal.csv", "y_cal.txt", "tree.txt")}


def _conformal(files, out):
    return ["predict", files["probs.csv"], "-m", "conformal", "--epsilon", "0.2", "--calibration", files["cal.csv"],
            "--calibration-labels", files["y_cal.txt"], "-o", out]


def _hierarchical(files, out):
    return ["predict", files["probs.csv"], "-m", "hierarchical", "-u", "fbeta:beta=1", "--hierarchy",
            files["tree.txt"], "-o", out]


# --- class 4: outputs --------------------------------------------------------------------------


@pytest.mark.parametrize("target, command, option", [
    ("cal.csv", _conformal, "--calibration"),
    ("y_cal.txt", _conformal, "--calibration-labels"),
    ("tree.txt", _hierarchical, "--hierarchy"),
    ("probs.csv", _hierarchical, "probs"),
])
def test_output_naming_any_input_is_refused_and_the_input_kept(tmp_path, capsys, target, command, option):
    files = _inputs(tmp_path)
    before = files[target].read_bytes()
    out = tmp_path / "sub" / ".." / target  # sub/ does not exist
    code, err = _run(capsys, *command(files, out))
    assert code == 2, err
    assert f"--output is the input file ({option})" in err and err.count("\n") == 1
    assert files[target].read_bytes() == before
    assert not (tmp_path / "sub").exists()  # refused before any folder is made


def test_output_through_a_missing_folder_and_dotdot_is_resolved_before_folders_are_made(tmp_path, capsys):
    files = _inputs(tmp_path)
    before = files["probs.csv"].read_bytes()
    code, err = _run(capsys, "predict", files["probs.csv"], "-u", "fbeta:beta=1", "-o", tmp_path / "new" / ".." / "probs.csv")
    assert code == 2 and "--output is the input file (probs)" in err
    assert files["probs.csv"].read_bytes() == before and not (tmp_path / "new").exists()
    # an output that is no input is written where the resolved path says, without new/
    assert main(["predict", str(files["probs.csv"]), "-u", "fbeta:beta=1", "-o",
                 str(tmp_path / "new" / ".." / "sets.csv")]) == 0
    assert (tmp_path / "sets.csv").read_text().splitlines() == ["0 1", "1", "2"]
    assert not (tmp_path / "new").exists()


def test_output_that_is_a_link_or_hard_link_to_an_input_is_refused(tmp_path, capsys):
    files = _inputs(tmp_path)
    os.symlink(files["y_cal.txt"], tmp_path / "link.csv")
    os.link(files["cal.csv"], tmp_path / "hard.csv")
    for out, option in ((tmp_path / "link.csv", "--calibration-labels"), (tmp_path / "hard.csv", "--calibration")):
        code, err = _run(capsys, *_conformal(files, out))
        assert code == 2 and f"--output is the input file ({option})" in err, err
    assert files["y_cal.txt"].read_text() == "0\n1\n2\n" * 4


def test_a_link_planted_at_the_old_temporary_name_redirects_nothing(tmp_path, capsys):
    files = _inputs(tmp_path)
    out_dir, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out_dir.mkdir()
    elsewhere.mkdir()
    for name in ("sets.npz", "sets.csv"):  # the names the writer used: .tmp<pid>.<name>
        os.symlink(elsewhere / f"victim-{name}", out_dir / f".tmp{os.getpid()}.{name}")
        assert main(["predict", str(files["probs.csv"]), "-u", "fbeta:beta=1", "-o", str(out_dir / name)]) == 0
        assert not (elsewhere / f"victim-{name}").exists()
        assert (out_dir / f".tmp{os.getpid()}.{name}").is_symlink()  # left alone
        assert load_sets(out_dir / name).to_list() == [[0, 1], [1], [2]]
    assert sorted(p.name for p in out_dir.iterdir() if not p.is_symlink()) == ["sets.csv", "sets.npz"]


def test_atomic_path_creates_its_temporary_file_exclusively_with_the_usual_mode(tmp_path):
    target = tmp_path / "a" / "x.npz"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".tmp") and tmp.name.endswith(".x.npz")
        assert tmp.is_file() and not tmp.is_symlink()  # already created, so nothing can be planted there
        np.savez(tmp, a=np.arange(3))
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "y.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no leftover, no y.txt


# --- class 5: inputs ---------------------------------------------------------------------------


def _crafted_sets(path, n_classes, indices=(0, 1), indptr=(0, 1, 2)):
    np.savez(path, indices=np.asarray(indices, dtype=np.int64), indptr=np.asarray(indptr, dtype=np.int64),
             n_classes=n_classes)


def _child(argv, tmp_path):
    """``svbop <argv>`` in a child process limited to 2 GB of address space: exit code, stderr."""
    code = f"import sys; from svbop.cli import main; sys.exit(main({[str(a) for a in argv]!r}))"
    limit = 2 << 30

    def bound():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    run = run_watched([sys.executable, "-c", code], preexec_fn=bound, env={**os.environ, "PYTHONPATH": SVBOP_ROOT},
                         cwd=tmp_path)
    return run.returncode, run.stderr


@pytest.mark.parametrize("n_classes", [10**15, 2**63 - 1, -5, 0])
def test_evaluate_refuses_a_crafted_n_classes_in_one_line(tmp_path, n_classes):
    _crafted_sets(tmp_path / "sets.npz", np.int64(n_classes))
    (tmp_path / "y.txt").write_text("0\n1\n")
    code, err = _child(["evaluate", "sets.npz", "y.txt", "-u", "fbeta:beta=1"], tmp_path)
    assert code == 2, err[-2000:]
    assert err == f"svbop: error: sets.npz: n_classes = {n_classes} is not a number of classes in 1..{MAX_N_CLASSES}\n"


def test_set_predictions_load_checks_n_classes_type_and_data(tmp_path):
    path = tmp_path / "s.npz"
    for bad, what in ((np.float64(3.0), "float64 of shape ()"), (np.array([3, 3]), "int64 of shape (2,)")):
        _crafted_sets(path, bad)
        with pytest.raises(ValueError, match=re.escape(f"{path}: n_classes must be one integer, got {what}")):
            SetPredictions.load(path)
    _crafted_sets(path, np.int64(2), indices=(0, 5))  # a class index not below n_classes
    with pytest.raises(ValueError, match=r"invalid set predictions \(class indices must be in 0\.\.1\)"):
        SetPredictions.load(path)
    # a large but allowed n_classes costs memory for the classes that occur, not the declared ones
    _crafted_sets(path, np.int64(MAX_N_CLASSES), indices=(3, 4, 4), indptr=(0, 1, 3))
    with pytest.raises(ValueError, match=r"set 1 holds class 4 twice"):
        SetPredictions.load(path)
    save_sets(path, SetPredictions.from_sets([[2, 0], []], 3))
    assert SetPredictions.load(path).to_list() == [[2, 0], []]


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_predict_refuses_a_hierarchy_that_is_not_a_regular_file(tmp_path, kind):
    files = _inputs(tmp_path)
    if kind == "fifo":
        os.mkfifo(tmp_path / "tree.fifo")
        tree = tmp_path / "tree.fifo"
    else:
        tree = Path("/dev/zero")
    code, err = _child(["predict", files["probs.csv"], "-m", "hierarchical", "-u", "fbeta:beta=1",
                        "--hierarchy", tree, "-o", tmp_path / "s.npz"], tmp_path)
    assert code == 2 and err == f"svbop: error: {tree}: --hierarchy is not a regular file\n", err[-2000:]


def test_every_input_of_the_cli_must_be_a_regular_file(tmp_path, capsys):
    files = _inputs(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    fifo = tmp_path / "fifo"
    save_sets(tmp_path / "s.npz", SetPredictions.from_sets([[0], [1]], 3))
    (tmp_path / "y.txt").write_text("0\n1\n")
    cases = [
        (["predict", fifo, "-u", "fbeta:beta=1", "-o", tmp_path / "o.npz"], "probs"),
        (_conformal({**files, "cal.csv": fifo}, tmp_path / "o.npz"), "--calibration"),
        (_conformal({**files, "y_cal.txt": "/dev/zero"}, tmp_path / "o.npz"), "--calibration-labels"),
        (["evaluate", fifo, tmp_path / "y.txt"], "sets"),
        (["evaluate", tmp_path / "s.npz", "/dev/zero"], "labels"),
        (["check-config", tmp_path], "files"),  # a folder (a FIFO would block the code before the check)
        (["check-config", files["tree.txt"], "--schema", tmp_path], "--schema"),
    ]
    for argv, option in cases:
        code, err = _run(capsys, *argv)
        assert code == 2 and err.endswith(f": {option} is not a regular file\n"), (argv, err)


# --- class 4: the library's other writers with a guessable name --------------------------------


def test_the_partial_download_is_never_written_through_a_link(tmp_path):
    from svbop.download import _open_part

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    part = tmp_path / "data.bin.part"
    os.symlink(victim, part)
    for mode in ("wb", "ab"):
        with pytest.raises(ValueError, match=r"data\.bin\.part: cannot write the partial download"):
            _open_part(part, mode)
    part.unlink()
    os.link(victim, part)
    for mode in ("wb", "ab"):
        with pytest.raises(ValueError, match=r"data\.bin\.part: not a plain file of its own"):
            _open_part(part, mode)
    assert victim.read_bytes() == b"precious"
    part.unlink()
    with _open_part(part, "wb") as fh:
        fh.write(b"abc")
    with _open_part(part, "ab") as fh:  # a resumed download appends
        fh.write(b"def")
    assert part.read_bytes() == b"abcdef"


def test_the_raw_folder_is_built_beside_a_planted_link_not_through_it(tmp_path):
    from svbop.archives import build_raw_folder

    downloads, elsewhere = tmp_path / "downloads", tmp_path / "elsewhere"
    downloads.mkdir()
    elsewhere.mkdir()
    (downloads / "a.csv").write_text("1\n")
    (tmp_path / "data").mkdir()
    os.symlink(elsewhere, tmp_path / "data" / f".tmp{os.getpid()}.raw")  # the old temporary name
    raw = build_raw_folder(downloads, tmp_path / "data" / "raw", ["a.csv"])
    assert (raw / "a.csv").read_text() == "1\n" and not raw.is_symlink()
    assert list(elsewhere.iterdir()) == []
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(raw.stat().st_mode) == 0o777 & ~mask
