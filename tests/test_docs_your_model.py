"""workflow/docs/your_model.md's commands, run as written (its bash blocks, in order, in a fresh folder):
the synthetic logits, then `svbop report`, whose page shows the temperature the logits were made with."""

from __future__ import annotations

import json
import re

import pytest
from test_workflow import ROOT
from watched import run_watched

pytest.importorskip("snakemake", reason="snakemake is not installed (pip install -e '.[pipeline]')")

DOC = ROOT / "workflow" / "docs" / "your_model.md"


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_the_commands_it_promises():
    blocks = _bash_blocks()
    assert len(blocks) == 2 and blocks[1].startswith("svbop report --test test_logits.npy")


def test_the_commands_of_your_model_md_build_the_report(tmp_path):
    outputs = []
    for block in _bash_blocks():
        result = run_watched(["bash", "-e", "-c", block], cwd=tmp_path)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        outputs.append(result.stdout + result.stderr)
    text = outputs[-1]
    assert "svbop report: --outputs auto: the test scores are logits" in text
    assert re.search(r"svbop report: my_report/report\.html \(\d+ s\)", text)
    page = tmp_path / "my_report" / "report.html"
    assert page.is_file() and 'id="calibration-model"' in page.read_text()
    record = json.loads((tmp_path / "my_report" / ".svbop" / "results" / "model" / "calibration.json").read_text())
    assert abs(record["temperature"] - 2.5) / 2.5 < 0.15  # 1,000 validation rows
    # the output folder holds what the user reads, the workflow's files are in one hidden folder
    assert sorted(p.name for p in (tmp_path / "my_report").iterdir()) == [
        ".svbop", "figures", "report.html", "svbop_report.log", "svbop_report.yaml", "tables"]
    assert not any(p.is_symlink() for p in (tmp_path / "my_report").iterdir())
    # everything the command wrote is inside the folders the page names
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["my_report", "val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy"])
