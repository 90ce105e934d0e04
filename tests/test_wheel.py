"""The practitioner's install: the wheel's report extra in a fresh virtual environment outside the
checkout, then `svbop report` from an empty folder (issue 42).

Needs the package index (pip installs the extra's dependencies): marked ``wheel`` and ``slow``, left
out of the default run; ``.ci/run`` runs it on its own (``python -m pytest -q -m wheel tests/test_wheel.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from watched import run_watched

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.wheel]


def _run(cmd, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = run_watched(cmd, env=env, **kw)  # stopped only if it hangs
    assert result.returncode == 0, (" ".join(map(str, cmd)) + "\n" + result.stdout[-3000:] + result.stderr[-3000:])
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh virtual environment with ``svbop[report]`` installed from a wheel built from this checkout."""
    base = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(ROOT)])
    wheel = next((base / "dist").glob("svbop-*.whl"))
    _run([sys.executable, "-m", "venv", str(base / "venv")])
    bin_ = base / "venv" / "bin"
    _run([bin_ / "python", "-m", "pip", "install", "-q", f"{wheel}[report]"], cwd=base)
    return bin_


def test_the_report_extra_has_no_torch_nmslib_or_liblinear(venv):
    for module in ("torch", "torchvision", "nmslib", "liblinear"):
        result = subprocess.run([venv / "python", "-c", f"import {module}"], capture_output=True, text=True)
        assert result.returncode != 0, f"{module} is installed by svbop[report]"
    located = _run([venv / "python", "-c", "import svbop._resources as r; print(r.workflow_root())"]).stdout.strip()
    assert located.endswith(os.path.join("site-packages", "svbop", "_workflow"))


def test_svbop_report_from_an_empty_folder_with_class_names(venv, tmp_path):
    rng = np.random.default_rng(3)
    K = 8
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for part, n in (("val", 400), ("test", 1200)):
        z = rng.normal(size=(n, K)) * 1.5
        P = np.exp(z - z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        y = (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
        np.save(inputs / f"{part}_logits.npy", (2 * z).astype(np.float32))
        np.save(inputs / f"{part}_labels.npy", y)
    names = [f"kind <{c}> & co" for c in range(K)]
    (inputs / "names.txt").write_text("".join(f"{n}\n" for n in names))
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _run([venv / "svbop", "report", "--test", inputs / "test_logits.npy", inputs / "test_labels.npy",
                   "--validation", inputs / "val_logits.npy", inputs / "val_labels.npy",
                   "--class-names", inputs / "names.txt", "--cores", "2", "-o", "my_report"],
                  cwd=empty)
    assert "svbop report: my_report/report.html (" in result.stdout
    out = empty / "my_report"
    assert sorted(p.name for p in empty.iterdir()) == ["my_report"]
    assert sorted(p.name for p in out.iterdir()) == [
        ".svbop", "figures", "report.html", "svbop_report.log", "svbop_report.yaml", "tables"]
    # no links where the user reads (inside .svbop the workflow links the input files, never modifying them)
    assert not any(p.is_symlink() for name in ("report.html", "tables", "figures", "svbop_report.log",
                                               "svbop_report.yaml") for p in [out / name, *(out / name).rglob("*")])
    html = (out / "report.html").read_text()
    assert 'id="calibration-model"' in html and 'id="beyond-model"' in html and '<section id="level">' in html
    assert "kind &lt;3&gt; &amp; co" in html  # the class names, escaped
    # the page about the model: its own tables, none of the paper's (issue 50)
    assert sorted(p.name for p in (out / "tables").iterdir()) == [
        "beyond_every_set.csv", "choose_sets.csv", "class_coverage_model.tsv"]
    assert "table3" not in html and "Table 3" not in html
    # the docs travel with the wheel
    docs = _run([venv / "svbop", "docs", "your_model"], cwd=empty)
    assert "svbop report" in docs.stdout
    # a bad input is refused before any work, naming the user's file
    np.save(inputs / "short_labels.npy", np.zeros(5, dtype=int))
    bad = run_watched([venv / "svbop", "report", "--test", inputs / "test_logits.npy", inputs / "short_labels.npy",
                       "-o", "other"], cwd=empty)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        f"svbop: error: {inputs / 'short_labels.npy'}: 5 labels but {inputs / 'test_logits.npy'} has 1200 rows")
    assert not (empty / "other").exists()
