"""The Snakemake workflow: lint, schema validation, and a real run in a scratch copy."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("snakemake", reason="snakemake is not installed (pip install -e '.[pipeline]')")


def _snakemake(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def workdir(tmp_path):
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "workflow", tmp_path / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "envs", tmp_path / "envs")
    return tmp_path


def test_lint_is_clean():
    result = _snakemake("--lint")
    assert result.returncode == 0, result.stderr
    assert "Lints for" not in result.stdout + result.stderr


def test_workflow_runs_and_writes_the_utility_tables(workdir):
    result = _snakemake("--cores", "1", cwd=workdir)
    assert result.returncode == 0, result.stderr
    table = (workdir / "results/tables/utility_properties_K100.tsv").read_text().splitlines()
    header = table[0].split("\t")
    row = dict(zip(header, next(l for l in table if l.startswith("fbeta:beta=1")).split("\t")))
    assert row["one_over_x_convex"] == "True" and row["K"] == "100"
    assert (workdir / "results/logs/utility_properties/K100.log").exists()
    again = _snakemake("--cores", "1", "-n", cwd=workdir)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.parametrize(
    "extra, message",
    [
        ("utilitys:\n  - fbeta\n", "utilitys"),
        ("utility_table:\n  K: [ten]\n", "ten"),
    ],
)
def test_schema_rejects_misspelt_keys_and_wrong_types(workdir, extra, message):
    (workdir / "bad.yaml").write_text(extra)
    result = _snakemake("-n", "--configfile", "bad.yaml", cwd=workdir)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
