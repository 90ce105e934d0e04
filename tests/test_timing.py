"""Test-time measurement of the set predictors (svbop.timing): warm-up, record, JSON round trip."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from svbop import timing as timing_module
from svbop.timing import REPEAT_KEYS, TIMING_KEYS, Timing, read_timing, time_predictions, timing_record, write_timing


def test_time_predictions_warms_up_on_one_row_then_times_one_call():
    calls = []

    def predict(rows):
        calls.append(rows.shape[0])
        return rows.sum()

    X = sp.random(7, 5, density=0.5, format="csr", random_state=0)
    result, timing = time_predictions(predict, X)
    assert calls == [1, 7]  # the untimed warm-up on the first row, then every row
    assert result == pytest.approx(X.sum())
    assert len(timing.wall) == 1 and timing.seconds > 0 and timing.cpu_seconds >= 0
    calls.clear()
    time_predictions(predict, np.ones((3, 2)), warmup=False)
    assert calls == [3]
    calls.clear()
    time_predictions(predict, np.ones((0, 2)))  # no rows: nothing to warm up on
    assert calls == [0]


def test_timing_record_means_of_statistics_and_parameters():
    record = timing_record("svbop_hsg", "fbeta_1", 4, 0.002, 0.0019, threads=1,
                           stats={"queries": np.array([1, 1, 2, 1]), "scored": np.array([5, 5, 10, 6])}, k=5, ef=None)
    assert list(record)[: len(TIMING_KEYS)] == list(TIMING_KEYS)
    assert record["ms_per_sample"] == pytest.approx(0.5)
    assert record["mean_queries"] == 1.25 and record["mean_scored"] == 6.5
    assert record["k"] == 5 and record["ef"] is None and record["threads"] == 1
    with pytest.raises(ValueError, match="n_test must be at least 1"):
        timing_record("svbop_full", "fbeta_1", 0, 0.1, 0.1)
    with pytest.raises(ValueError, match="'expanded' has shape"):
        timing_record("svbop_hf_kmeans", "fbeta_1", 3, 0.1, 0.1, stats={"expanded": np.ones(2)})


def test_time_predictions_repeats_and_records_the_median_the_spread_and_the_load(monkeypatch):
    """Table 4's times are the median of `repeats` calls after one warm-up, with their spread and
    the load average before and after (a clock that advances by known steps: no timed test)."""
    calls = []
    ticks = iter([0.0, 0.3, 1.0, 1.1, 2.0, 2.2])  # three timed calls of 0.3, 0.1 and 0.2 s
    loads = iter([(1.5, 1.0, 0.5), (2.5, 1.2, 0.6)])
    monkeypatch.setattr(timing_module.time, "perf_counter", lambda: next(ticks))
    monkeypatch.setattr(timing_module.os, "getloadavg", lambda: next(loads))
    monkeypatch.setattr(timing_module.os, "cpu_count", lambda: 2)
    result, timing = time_predictions(lambda rows: calls.append(rows.shape[0]) or "sets", np.ones((10, 2)), repeats=3)
    assert calls == [1, 10, 10, 10] and result == "sets"  # one warm-up row, then 3 timed calls of all rows
    assert timing.wall == pytest.approx((0.3, 0.1, 0.2)) and timing.seconds == pytest.approx(0.2)  # the median
    record = timing_record("svbop_full", "fbeta_1", 10, timing)
    assert list(record)[: len(TIMING_KEYS)] == list(TIMING_KEYS)
    assert record["repeats"] == 3 and record["seconds"] == pytest.approx(0.2)
    assert record["ms_per_sample"] == pytest.approx(20.0)
    assert record["ms_per_sample_min"] == pytest.approx(10.0) and record["ms_per_sample_max"] == pytest.approx(30.0)
    assert record["seconds_each"] == pytest.approx([0.3, 0.1, 0.2])
    assert record["load_start"] == [1.5, 1.0, 0.5] and record["load_end"] == [2.5, 1.2, 0.6] and record["cpu_count"] == 2
    assert set(REPEAT_KEYS) <= set(record)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="repeats must be a positive integer"):
            time_predictions(lambda rows: None, np.ones((2, 2)), repeats=bad)
    with pytest.raises(ValueError, match="cpu_seconds comes from the Timing"):
        timing_record("svbop_full", "fbeta_1", 10, timing, 0.1)
    with pytest.raises(ValueError, match="cpu_seconds is needed"):
        timing_record("svbop_full", "fbeta_1", 10, 0.1)


def test_read_timing_keeps_old_single_measurements_and_names_bad_repeat_keys(tmp_path):
    old = tmp_path / "old.json"  # as svbop wrote them before it timed repeats
    old.write_text(json.dumps({"method": "svbop_hsg", "utility": "fbeta_1", "n_test": 4, "seconds": 0.002,
                               "cpu_seconds": 0.002, "ms_per_sample": 0.5, "threads": 1, "k": 100}))
    got = read_timing(old)
    assert got["repeats"] == 1 and got["ms_per_sample_min"] == got["ms_per_sample_max"] == 0.5
    assert got["load_start"] is None and got["cpu_count"] is None and got["k"] == 100
    timing = Timing((0.2, 0.1, 0.4), (0.2, 0.1, 0.4), (1.0, 1.0, 1.0), (2.0, 1.0, 1.0), 2)
    record = timing_record("svbop_full", "fbeta_1", 100, timing)
    path = tmp_path / "new.json"
    write_timing(path, record)
    assert read_timing(path) == record
    for change, message in (({"repeats": 0}, "key 'repeats' must be a positive integer"),
                            ({"ms_per_sample_min": 9.0}, "'ms_per_sample_min' 9.0 <= 'ms_per_sample'"),
                            ({"seconds_each": [0.1]}, "'seconds_each' must be a list of 3"),
                            ({"load_end": "high"}, "'load_end' must be the 1, 5 and 15-minute load averages"),
                            ({"cpu_count": 0}, "'cpu_count' must be a positive integer")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**record, **change}))
        with pytest.raises(ValueError, match=f"bad.json: .*{message.replace('(', '.').replace(')', '.')}") as info:
            read_timing(bad)
        assert "\n" not in str(info.value)
    bad.write_text(json.dumps({k: v for k, v in record.items() if k != "load_start"}))
    with pytest.raises(ValueError, match="bad.json: missing key 'load_start'"):
        read_timing(bad)


def test_write_and_read_timing_round_trip_and_errors(tmp_path):
    record = timing_record("svbop_full", "fbeta_1", 10, 0.01, 0.01)
    path = tmp_path / "predictions/svbop_full/fbeta_1.json"
    write_timing(path, record)
    assert read_timing(path) == {**record, "repeats": 1, "ms_per_sample_min": 1.0, "ms_per_sample_max": 1.0,
                                 "seconds_each": [0.01], "load_start": None, "load_end": None, "cpu_count": None}
    assert not list(path.parent.glob(".tmp*"))  # written atomically
    with pytest.raises(ValueError, match="no such file"):
        read_timing(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        read_timing(bad)
    bad.write_text(json.dumps({k: v for k, v in record.items() if k != "cpu_seconds"}))
    with pytest.raises(ValueError, match="bad.json: missing key 'cpu_seconds'"):
        read_timing(bad)
    bad.write_text(json.dumps({**record, "ms_per_sample": 0}))
    with pytest.raises(ValueError, match="bad.json: key 'ms_per_sample' must be a positive number"):
        read_timing(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        read_timing(bad)


def test_rule_costs_sums_jobs_per_dataset_and_rule(tmp_path):
    from svbop.timing import rule_costs

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    files = {
        "train_flat_part/syn_0.tsv": (10.0, 300.0, 9.5),
        "train_flat_part/syn_1.tsv": (12.0, 500.0, 11.0),
        "train_flat_part/syn_big_0.tsv": (100.0, 9000.0, 99.0),  # another dataset whose name extends "syn"
        "score_flat/syn.tsv": (3.0, 1200.0, 2.0),
        "tables/tables.tsv": (1.0, 80.0, 0.5),
        "score_flat/other.tsv": (7.0, 70.0, 7.0),  # not asked for: left out
    }
    for name, (s, rss, cpu) in files.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(header + f"{s}\t0:00:{int(s):02d}\t{rss}\t1\t1\t1\t0\t0\t50\t{cpu}\n")
    costs = rule_costs(tmp_path, ["syn", "syn_big"]).set_index(["dataset", "rule"])
    assert set(costs.index) == {("syn", "train_flat_part"), ("syn", "score_flat"), ("syn_big", "train_flat_part"), ("", "tables")}
    part = costs.loc[("syn", "train_flat_part")]
    assert (part.jobs, part.wall_s, part.max_job_wall_s, part.cpu_s, part.peak_rss_mb) == (2, 22.0, 12.0, 20.5, 500.0)
    assert costs.loc[("syn_big", "train_flat_part")].peak_rss_mb == 9000.0
    (tmp_path / "score_flat" / "bad.tsv").write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match="bad.tsv: not a Snakemake benchmark file"):
        rule_costs(tmp_path, ["bad"])
