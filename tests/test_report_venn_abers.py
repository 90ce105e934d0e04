"""`svbop report --calibrate venn_abers` end to end (issue 48 items 5 and 6): the pipeline calibrates the
model's probabilities with one-vs-rest Venn-Abers fitted on the validation rows, the page says so, and
the table of every kind of set shows CovGap, SSCV and WSC beside the worst class (slow: a whole run)."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
from watched import run_watched

K = 5


@pytest.mark.slow
def test_svbop_report_with_venn_abers(tmp_path):
    rng = np.random.default_rng(0)
    for part, n in (("val", 400), ("cal", 400), ("test", 800)):
        z = rng.normal(size=(n, K)) * 1.5
        P = np.exp(z - z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        np.save(tmp_path / f"{part}_logits.npy", 3 * z)  # over-confident logits
        np.save(tmp_path / f"{part}_labels.npy", (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1))
    out = tmp_path / "out"
    result = run_watched(  # stopped only if it hangs
        [sys.executable, "-m", "svbop", "report", "--name", "va", "--calibrate", "venn_abers",
         *(a for part, flag in (("test", "--test"), ("val", "--validation"), ("cal", "--calibration"))
           for a in (flag, str(tmp_path / f"{part}_logits.npy"), str(tmp_path / f"{part}_labels.npy"))),
         "--cores", "2", "-o", str(out)],
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    page = next(p for p in out.rglob("report.html")).read_text()
    assert "calibrate: venn_abers" in page and "Venn-Abers" in page
    record = json.loads(next(out.rglob("calibration.json")).read_text()) if list(out.rglob("calibration.json")) \
        else None
    if record is not None:
        assert record["method"] == "venn_abers"
        assert record["test"]["after"]["ece"] < record["test"]["before"]["ece"]
    table = re.search(r'<table class="beyond".*?</table>', page, re.S).group(0)
    header = re.findall(r"<th>(.*?)</th>", re.search(r"<thead>.*?</thead>", table, re.S).group(0))
    assert [h for h in header if h in ("worst class %", "CovGap %", "SSCV %", "WSC %")] == \
        ["worst class %", "CovGap %", "SSCV %", "WSC %"]
    # a number for every method with sets (a dash for one that could not be calibrated: no sets)
    wsc = re.findall(r'<td class="num wsc">([^<]*)</td>', table)
    assert wsc and all(re.fullmatch(r"[0-9.]+|–", v) for v in wsc) and sum(v != "–" for v in wsc) > len(wsc) / 2
    covgap = re.findall(r'<td class="num covgap">([^<]*)</td>', table)
    assert any(re.fullmatch(r"[0-9.]+", v) for v in covgap)
