"""The stream section of ``svbop report --ordered`` and ``svbop stream --method/--martingale`` (issue 55,
item 7, the stream part): the martingale's alarm after a known change and not before, the windowed
coverage of ACI, DtACI and PID, the section on the page with its figure, and bad input refused in
one line before any work (a time column out of order first)."""

import numpy as np
import pytest
from test_martingales import stream

from svbop.cli import main
from svbop.conformal import AdaptiveConformalSetPredictor, ExchangeabilityMartingale, online_p_values
from svbop.report.stream import add_stream_section, check_times, stream_summary


@pytest.fixture(scope="module")
def shifted():
    """1,000 calibration rows, then 3,000 test rows whose class frequencies change at test row 1,500."""
    P_cal, y_cal = stream(2, n=1000)
    P, y = stream(1, n=3000, shift="classes", at=1500)
    return P_cal, y_cal, P, y


def test_summary_alarms_after_the_change_and_windows_every_method(shifted):
    P_cal, y_cal, P, y = shifted
    s = stream_summary(P_cal, y_cal, P, y, epsilon=0.1, window=500)
    assert 1500 <= s["alarms"]["simple_jumper"] < 1800
    assert s["alarms"]["power"] == -1 or s["alarms"]["power"] >= 1500
    for method in ("aci", "dtaci", "pid"):
        hit = s["coverage"][method]
        assert hit.size == 3000 and s["windows"][method].size == 3000 - 499
        np.testing.assert_allclose(s["windows"][method][0], hit[:500].mean())
        assert abs(hit.mean() - 0.9) < 0.02 and s["worst"][method] < 0.05 and s["size"][method] > 1
    # the same numbers as the library's parts
    p = online_p_values(np.concatenate([1 - P_cal[np.arange(1000), y_cal] / P_cal.sum(axis=1),
                                        1 - P[np.arange(3000), y] / P.sum(axis=1)]), n_initial=1000, random_state=0)
    np.testing.assert_allclose(s["martingales"]["simple_jumper"], ExchangeabilityMartingale().run(p))
    pid = AdaptiveConformalSetPredictor(0.1, method="pid").fit(P_cal, y_cal).update(P, y)
    np.testing.assert_array_equal(s["coverage"]["pid"], pid.contains(y))


def test_the_section_goes_on_the_page_with_its_figure_and_replaces_itself(shifted, tmp_path):
    P_cal, y_cal, P, y = shifted
    page = tmp_path / "report.html"
    page.write_text("<html><body><h1>report</h1></body></html>", encoding="utf-8")
    s = stream_summary(P_cal, y_cal, P, y)
    add_stream_section(page, s)
    add_stream_section(page, s)  # a rerun: one section
    text = page.read_text(encoding="utf-8")
    assert text.count('<section id="stream"') == 1 and text.index("<section") < text.index("</body>")
    assert f"First alarm: test row {s['alarms']['simple_jumper']:,}" in text
    assert 'src="data:image/png;base64,' in text and (tmp_path / "figures" / "stream.png").stat().st_size > 10_000
    for name in ("ACI", "DtACI", "PID"):
        assert name in text
    add_stream_section(page, stream_summary(P_cal, y_cal, P, y, offset=600))  # a stream after 600 file rows
    assert f"First alarm: test row {s['alarms']['simple_jumper'] + 600:,}" in page.read_text(encoding="utf-8")


def test_times_out_of_order_are_refused_naming_the_row():
    check_times(np.array([1.0, 2.0, 2.0, 5.0]), 4)
    check_times(np.array(["2024-05-01T10:00", "2024-05-01T11:00"]), 2)
    cases = [(np.array([1.0, 3.0, 2.0]), 3, "not in order: row 2"),
             (np.array(["2024-05-02", "2024-05-01"]), 2, "not in order: row 1"),
             (np.array([1.0, np.nan]), 2, "row 1 has no time"),
             (np.array([1.0, 2.0]), 3, "2 times for 3 test rows"),
             (np.array(["soon", "later"]), 2, "numbers or ISO dates")]
    for t, n, words in cases:
        with pytest.raises(ValueError, match=words) as err:
            check_times(t, n)
        assert "\n" not in str(err.value)


def _report_files(tmp_path, shifted, times):
    P_cal, y_cal, P, y = shifted
    np.save(tmp_path / "test.npy", P)
    np.save(tmp_path / "test_y.npy", y)
    np.savetxt(tmp_path / "times.txt", times, fmt="%s")
    return ["report", "--test", str(tmp_path / "test.npy"), str(tmp_path / "test_y.npy"), "-o", str(tmp_path / "out")]


def test_report_refuses_bad_stream_input_before_any_work(shifted, tmp_path, capsys):
    argv = _report_files(tmp_path, shifted, np.r_[np.arange(2000), np.arange(1000)])
    cases = [([*argv, "--ordered", "--test-times", str(tmp_path / "times.txt")], "not in order: row 2000"),
             ([*argv, "--test-times", str(tmp_path / "times.txt")], "--test-times is for --ordered"),
             ([*argv, "--ordered", "--stream-window", "1"], "--stream-window must be an integer >= 2"),
             ([*argv, "--ordered", "--stream-window", "5000"], "fewer than one window of 5000")]
    for call, words in cases:
        assert main(call) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
        assert not (tmp_path / "out").exists()  # nothing was started


def test_stream_command_runs_dtaci_and_pid_and_the_martingale(shifted, tmp_path, capsys):
    P_cal, y_cal, P, y = shifted
    np.save(tmp_path / "cal.npy", P_cal)
    np.save(tmp_path / "cal_y.npy", y_cal)
    np.save(tmp_path / "s.npy", P)
    np.save(tmp_path / "s_y.npy", y)
    base = ["stream", str(tmp_path / "s.npy"), str(tmp_path / "s_y.npy"), "--calibration", str(tmp_path / "cal.npy"),
            "--calibration-labels", str(tmp_path / "cal_y.npy"), "--epsilon", "0.1", "-o", str(tmp_path / "sets.npz"),
            "--coverage", str(tmp_path / "cov.tsv")]
    assert main([*base, "--method", "pid", "--martingale", "simple_jumper"]) == 0
    out = capsys.readouterr().out
    table = np.genfromtxt(tmp_path / "cov.tsv", delimiter="\t", names=True)
    assert table.dtype.names[-2:] == ("p_value", "martingale")
    first = int(np.flatnonzero(table["martingale"] >= 100)[0])
    assert f"first alarm at row {first}" in out and first >= 1500
    pid = AdaptiveConformalSetPredictor(0.1, method="pid").fit(P_cal, y_cal).update(P, y)
    np.testing.assert_array_equal(table["covered"], pid.contains(y))
    assert main([*base, "--method", "dtaci", "--seed", "3"]) == 0
    dtaci = AdaptiveConformalSetPredictor(0.1, method="dtaci", random_state=3).fit(P_cal, y_cal).update(P, y)
    np.testing.assert_array_equal(np.genfromtxt(tmp_path / "cov.tsv", delimiter="\t", names=True)["size"],
                                  dtaci.sizes)
    capsys.readouterr()
    for extra, words in ((["--martingale", "power", "--delta", "2"], "delta must be a number in (0, 1)"),
                         (["--method", "pid", "--score", "fbeta"], "ranked scores")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_predict_writes_the_p_values_of_its_sets(tmp_path, capsys):
    """svbop predict --method conformal --p-values: every class's p-value; the set at epsilon is the
    classes above it (randomised APS too: the p-values use the uniforms of the sets written)."""
    from svbop.io import load_sets

    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.ones(6) * 0.5, size=700)
    y = rng.integers(0, 6, 700)
    np.save(tmp_path / "cal.npy", P[:300])
    np.save(tmp_path / "cal_y.npy", y[:300])
    np.save(tmp_path / "test.npy", P[300:])
    base = ["predict", str(tmp_path / "test.npy"), "-m", "conformal", "--epsilon", "0.1", "--calibration",
            str(tmp_path / "cal.npy"), "--calibration-labels", str(tmp_path / "cal_y.npy"),
            "-o", str(tmp_path / "sets.npz"), "--p-values", str(tmp_path / "p.npy")]
    for extra in ([], ["--score", "aps"], ["--class-conditional"], ["--score", "aps", "--smoothed"]):
        assert main([*base, *extra]) == 0
        p = np.load(tmp_path / "p.npy")
        mask = load_sets(tmp_path / "sets.npz").to_mask()
        assert p.shape == (400, 6)
        if "--smoothed" in extra:
            assert np.all(mask[p > 0.1])  # smoothed sets lie within the sets
        else:  # the set: the classes above 0.1; where none is, the top class ("top1") or nothing
            some = (p > 0.1).any(axis=1)
            np.testing.assert_array_equal(mask[some], (p > 0.1)[some])
            assert np.all(mask[~some].sum(axis=1) <= 1)
    capsys.readouterr()
    for extra, words in ((["--score", "fbeta"], "--p-values is for the ranked scores"),
                         (["--rc3p"], "not with --rc3p"),
                         (["--p-values", str(tmp_path / "p.txt")], "writes a .npy file")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    base_no_p = base[:-2]
    assert main([*base_no_p, "--smoothed"]) == 2 and "--smoothed is for --p-values" in capsys.readouterr().err


def test_the_stream_section_reads_in_a_browser(shifted, tmp_path):
    """Headless Chromium (tests/browser.py) sees the section, its heading, its table of the three
    methods and its figure loaded, with no text or figure font under 10 px."""
    from browser import chromium_executable, inspect_page, unreadable

    if chromium_executable() is None:
        pytest.skip("Chromium is not installed (apt-get install chromium, or set SVBOP_CHROMIUM)")
    P_cal, y_cal, P, y = shifted
    page = tmp_path / "report.html"
    page.write_text("<!doctype html><html><head><meta charset=\"utf-8\"><title>r</title></head>"
                    "<body><h1>report</h1></body></html>", encoding="utf-8")
    add_stream_section(page, stream_summary(P_cal, y_cal, P, y))
    seen = inspect_page(page)
    assert "stream" in seen["sections"] and "Stream: the test rows in order" in seen["headings"]
    table = next(t for t in seen["tables"] if t["class"] == "stream-methods")
    assert table["rows"] == 3 and table["visible"]
    assert not seen["broken_images"] and not seen["errors"]
    assert unreadable(seen) == []
