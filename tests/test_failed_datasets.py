"""A dataset whose acquisition fails is reported as failed, with its reason, beside the others."""

from __future__ import annotations

import json
import re

import pytest

from svbop.report.status import (
    WEIGHTS_OWNER,
    dataset_logs,
    dataset_status,
    describe_failure,
    failure_path,
    failure_recorded,
    failures,
    log_failure,
)
from test_report import SUMMARIES, UTILITIES, inputs, figure_png  # noqa: F401  (fixtures)


def test_a_failing_job_records_why_and_still_fails(tmp_path):
    record = failure_path("mine", "fetch.a.svm", root=tmp_path)
    with pytest.raises(ValueError, match="HTTP 404"):
        with failure_recorded(record, stage="fetch a.svm", log="results/logs/fetch/mine/a.svm.log"):
            raise ValueError("could not download a.svm:\n  http://127.0.0.1/a.svm: HTTP 404 File not found")
    data = json.loads(record.read_text())
    assert data["stage"] == "fetch a.svm" and data["error"] == "ValueError" and "HTTP 404" in data["reason"]
    # the next attempt succeeds: the record goes away
    with failure_recorded(record, stage="fetch a.svm"):
        pass
    assert not record.exists()
    # a killed job is not a failed dataset
    with pytest.raises(KeyboardInterrupt):
        with failure_recorded(record, stage="fetch a.svm"):
            raise KeyboardInterrupt
    assert not record.exists()
    with pytest.raises(ValueError, match="without '/'"):
        failure_path("a/b", "x")


def test_failures_collects_each_datasets_records_and_its_weights(tmp_path):
    for owner, job, stage in [("pics", "prepare_dataset", "prepare_dataset"), (WEIGHTS_OWNER, "vgg16_imagenet", "fetch_weights vgg16_imagenet"),
                              ("text", "unpack_dataset", "unpack_dataset")]:
        with pytest.raises(OSError):
            with failure_recorded(failure_path(owner, job, root=tmp_path), stage=stage, log=f"{job}.log"):
                raise OSError(f"{job} broke")
    found = failures(["pics", "text", "fine"], root=tmp_path, weights={"pics": "vgg16_imagenet"})
    assert set(found) == {"pics", "text"}
    assert [r["stage"] for r in found["pics"]] == ["fetch_weights vgg16_imagenet", "prepare_dataset"]
    line = describe_failure(found["text"])
    assert line == "unpack_dataset failed: unpack_dataset broke (OSError; log: unpack_dataset.log)"


def test_a_failed_job_without_record_is_found_in_its_log(tmp_path):
    logs = tmp_path / "results/logs"
    (logs / "train_flat").mkdir(parents=True)
    (logs / "train_flat/mnist.log").write_text("2024-01-01 00:00:00,000 CRITICAL root: failed: out of memory\nTraceback ...\n")
    (logs / "predict_top_s").mkdir()
    (logs / "predict_top_s/mnist_shared_1.log").write_text("x CRITICAL root: failed: not mine\n")
    (logs / "predict_top_s/mnist_1.log").write_text("all fine\n")
    mine = dataset_logs("mnist", ["mnist", "mnist_shared"], root=tmp_path)
    assert {p.name for p in mine} == {"mnist.log", "mnist_1.log"}
    assert [log_failure(p) for p in mine if log_failure(p)] == ["out of memory"]


def test_status_and_report_show_a_failed_dataset_with_its_reason(inputs, tmp_path):  # noqa: F811
    from svbop.report import build_report

    datasets = {"digits": {"title": "Digits"}, "synth1000": {"title": "Synthetic"}, "broken": {"title": "Broken mirror"}}
    run = ["digits", "synth1000", "broken"]
    reason = "fetch data.svm failed: could not download data.svm: http://127.0.0.1/gone.svm: HTTP 404 (DownloadError)"
    status = dataset_status(datasets, run, failed={"broken": reason}).set_index("dataset")
    assert status.loc["broken", "status"] == "failed" and status.loc["broken", "detail"] == reason
    assert status.loc["digits", "status"] == "run"
    out = build_report(
        tmp_path / "report.html", summaries=inputs["summaries"], metrics=inputs["metrics"], figures={"utilities": inputs["figure"]},
        config={"utilities": UTILITIES, "run": run, "datasets": datasets}, utilities=UTILITIES, created="2024-01-02",
        failed={"broken": reason},
    )
    html = out.read_text()
    row = re.search(r'<tr data-dataset="broken" data-status="failed">(.*?)</tr>', html, re.S).group(1)
    assert 'class="badge failed"' in row and "HTTP 404" in row
    assert 'data-failed="1"' in html
    for s in SUMMARIES:  # the datasets that finished keep their tables
        assert f'id="table3-{s["dataset"]}"' in html
