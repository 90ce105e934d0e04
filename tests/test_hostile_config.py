"""Config values that are numbers but not usable ones (issue 36, class 8): NaN, infinities,
subnormals and integers past what the code can hold are refused by ``svbop check-config`` (and
the Snakefile's :func:`svbop.config.validate_config`) before any job, in one line naming the key."""

from __future__ import annotations

import math

import pytest

from svbop.cli import main
from svbop.config import ConfigError, load_yaml, merge_configs, validate_config
from test_workflow import ROOT

BASE = load_yaml(ROOT / "config.yaml")


def _refusal(extra: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(merge_configs(BASE, extra))
    message = str(info.value)
    assert "\n" not in message and message.startswith("config: "), message
    return message


@pytest.mark.parametrize(
    "extra, key, why",
    [
        ({"methods": {"epsilon": [0.1, math.nan]}}, "methods.epsilon[1]", "expected a finite number, got nan"),
        ({"methods": {"raps": {"lam": math.inf}}}, "methods.raps.lam", "expected a finite number, got inf"),
        ({"methods": {"raps": {"lam": math.nan}}}, "methods.raps.lam", "expected a finite number, got nan"),
        ({"methods": {"raps": {"lam": 1e-320}}}, "methods.raps.lam", "1e-320 is a subnormal number"),
        # a float is no integer, whatever its value (issue 47: seed: 2.0 failed later in SeedSequence)
        ({"methods": {"raps": {"k_reg": 1e23}}}, "methods.raps.k_reg", "expected integer, got 1e+23"),
        ({"methods": {"raps": {"k_reg": 2**63}}}, "methods.raps.k_reg", "expected a value <= 2147483647"),
        ({"methods": {"credal": {"gamma": math.inf}}}, "methods.credal.gamma", "expected a finite number, got inf"),
        ({"methods": {"credal": {"gamma": math.nan}}}, "methods.credal.gamma", "expected a finite number, got nan"),
        ({"methods": {"credal": {"gamma": 5e-324}}}, "methods.credal.gamma", "5e-324 is a subnormal number"),
        ({"datasets": {"digits": {"hsg": {"ef": 10**12}}}}, "datasets.digits.hsg.ef", "expected a value <= 2147483647"),
        ({"datasets": {"digits": {"hsg": {"ef": 1e12}}}}, "datasets.digits.hsg.ef", "expected one of: integer, null"),
        ({"datasets": {"digits": {"hsg": {"M": 10**6}}}}, "datasets.digits.hsg.M", "expected a value <= 32768"),
        ({"baselines": {"icp_epsilon": [-math.inf]}}, "baselines.icp_epsilon[0]", "expected a finite number"),
        ({"datasets": {"digits": {"flat": {"C": math.nan}}}}, "datasets.digits.flat.C", "expected a finite number"),
    ],
)
def test_unusable_numbers_are_refused_naming_the_key(extra, key, why):
    message = _refusal(extra)
    assert message.startswith(f"config: {key}: {why}"), message


def test_check_config_refuses_them_from_yaml_before_any_job(tmp_path, capsys):
    """The values as a user writes them in YAML (``.nan``, ``.inf``, ``1.0e+23``), through the CLI."""
    for text, key in (
        ("methods: {epsilon: [.nan]}\n", "methods.epsilon[0]"),
        ("methods: {raps: {lam: .inf}}\n", "methods.raps.lam"),
        ("methods: {raps: {lam: 1.0e-320}}\n", "methods.raps.lam"),
        ("methods: {raps: {k_reg: 1.0e+23}}\n", "methods.raps.k_reg"),
        ("methods: {credal: {gamma: 5.0e-324}}\n", "methods.credal.gamma"),
        ("methods: {credal: {gamma: -.inf}}\n", "methods.credal.gamma"),
        ("datasets: {digits: {hsg: {ef: 1000000000000}}}\n", "datasets.digits.hsg.ef"),
    ):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        assert main(["check-config", str(ROOT / "config.yaml"), str(bad)]) == 2, text
        err = capsys.readouterr().err
        assert err.startswith(f"svbop: error: config: {key}: "), err
        assert err.count("\n") == 1, err


def test_usable_edges_still_pass():
    """0 (no RAPS penalty), the smallest normal double, the largest bounds and a large finite number."""
    config = validate_config(merge_configs(BASE, {
        "methods": {"raps": {"lam": 0.0, "k_reg": 2**31 - 1}, "credal": {"gamma": 2.2250738585072014e-308},
                    "epsilon": [1e-300, 0.5]},
        "datasets": {"digits": {"hsg": {"ef": 2**31 - 1, "M": 32768}, "flat": {"C": 1e300}}},
    }))
    assert config["methods"]["raps"]["lam"] == 0.0


# ------------------------------------------------------------------------------------------------
# Issue 44: tuning grids are bounded like the keys they tune; utility strings are parsed
# ------------------------------------------------------------------------------------------------


def _check_config_error(tmp_path, capsys, text: str) -> str:
    """``svbop check-config config.yaml <text>``'s one-line error (exit status 2)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["check-config", str(ROOT / "config.yaml"), str(bad)]) == 2, text
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


@pytest.mark.parametrize("grid", ["C_grid", "eps_grid", "hf_C_grid", "hf_eps_grid", "max_leaves_grid", "hsg_k_grid",
                                  "hsg_ef_grid"])
def test_a_tuning_grid_of_100000_points_is_refused_by_the_schema(grid):
    """A 100,000-point C_grid passed check-config and would have planned 100,000 jobs."""
    values = list(range(2, 100_002))
    assert _refusal({"tuning": {grid: values}}) == f"config: tuning.{grid}: 100,000 values; at most 64 are allowed"


def test_a_long_threshold_grid_and_many_node_budgets_are_refused_too():
    assert _refusal({"baselines": {"threshold_grid": [i / 2000 for i in range(1, 2001)]}}) == (
        "config: baselines.threshold_grid: 2,000 values; at most 1000 are allowed")
    assert _refusal({"methods": {"hierarchical": {"max_nodes": list(range(1, 100))}}}) == (
        "config: methods.hierarchical.max_nodes: 99 values; at most 64 are allowed")


def test_a_long_list_with_unique_items_is_checked_in_linear_time():
    """jsonschema's own uniqueItems fell back to comparing every pair (minutes for 100,000 values):
    the refusal of a long list, and of a repeated value, come at once (quadratically, this list is
    2 * 10**10 comparisons: hours)."""
    assert _refusal({"tuning": {"C_grid": [float(i) for i in range(1, 200_001)]}}) == (
        "config: tuning.C_grid: 200,000 values; at most 64 are allowed")
    assert _refusal({"tuning": {"C_grid": [1, 2.0, 1.0]}}) == "config: tuning.C_grid: [1, 2.0, 1.0] has non-unique elements"
    assert _refusal({"baselines": {"top_s": [1, 2]}, "datasets": {"digits": {"hf": {"trees": ["kmeans", "kmeans"]}}}}) == (
        "config: datasets.digits.hf.trees: ['kmeans', 'kmeans'] has non-unique elements")


@pytest.mark.parametrize("grid, fixed", [("hsg_k_grid", "k"), ("hsg_ef_grid", "ef")])
def test_an_integer_grid_has_the_cap_of_its_fixed_key(grid, fixed):
    """hsg_k_grid: [10**12] was accepted while a fixed hsg.k is capped at 2**31 - 1: same cap now."""
    assert _refusal({"tuning": {grid: [5, 10**12]}}) .startswith(
        f"config: tuning.{grid}[1]: expected a value <= 2147483647")
    assert _refusal({"datasets": {"digits": {"hsg": {fixed: 10**12}}}}).startswith(
        f"config: datasets.digits.hsg.{fixed}: expected a value <= 2147483647")
    validate_config(merge_configs(BASE, {"tuning": {grid: [5, 2**31 - 1]}}))  # the cap itself passes


def test_max_leaves_and_its_grid_share_the_cap():
    assert _refusal({"tuning": {"max_leaves_grid": [10**12]}}).startswith(
        "config: tuning.max_leaves_grid[0]: expected a value <= 2147483647")
    assert _refusal({"datasets": {"digits": {"hf": {"max_leaves": 10**12}}}}).startswith(
        "config: datasets.digits.hf.max_leaves: ")


def test_check_config_refuses_the_grids_from_yaml(tmp_path, capsys):
    """(5,000 values: PyYAML alone takes about 40 s to parse 100,000 twice.)"""
    err = _check_config_error(tmp_path, capsys, "tuning: {C_grid: [" + ", ".join(str(10.0**(i / 1000)) for i in range(5_000))
                              + "]}\n")
    assert err == "svbop: error: config: tuning.C_grid: 5,000 values; at most 64 are allowed", err
    err = _check_config_error(tmp_path, capsys, "tuning: {hsg_k_grid: [1000000000000]}\n")
    assert err == "svbop: error: config: tuning.hsg_k_grid[0]: expected a value <= 2147483647, got 1000000000000", err


def test_one_models_points_are_bounded_where_grids_multiply(tmp_path, capsys):
    """Two grids of 64 values each pass the schema, but C x eps = 4,096 jobs for one flat model."""
    text = ("tuning: {C_grid: [" + ", ".join(str(2.0**i) for i in range(64)) + "], eps_grid: ["
            + ", ".join(str(2.0**-i) for i in range(1, 65)) + "]}\n"
            "datasets: {digits: {flat: {C: auto, eps: auto}}}\nrun: [digits]\n")
    err = _check_config_error(tmp_path, capsys, text)
    assert err == ("svbop: error: config: tuning.C_grid, tuning.eps_grid: flat would be tuned over 4,096 points (one job "
                   "each); at most 1,024 per model: shorten the grids (datasets.digits)"), err
    ok = tmp_path / "ok.yaml"
    ok.write_text(text.replace("eps: auto", "eps: 0.1"))
    assert main(["check-config", str(ROOT / "config.yaml"), str(ok)]) == 0


def test_the_library_refuses_a_grid_past_the_bounds_too():
    from svbop.tuning import MAX_GRID_VALUES, flat_grid, hsg_grid

    with pytest.raises(ValueError, match=r"^tuning\.C_grid: 65 values; a grid holds at most 64 \(one job or more each\)$"):
        flat_grid({"C": "auto", "eps": 0.1}, {"C_grid": [float(i) for i in range(1, MAX_GRID_VALUES + 2)]})
    with pytest.raises(ValueError, match=r"^tuning\.hsg_k_grid: 1000000000000 is above 2147483647 \(the cap of the key it "
                                         r"tunes\)$"):
        hsg_grid({"k": "auto", "ef": None}, {"hsg_k_grid": [10**12]})


@pytest.mark.parametrize("text, key, why", [
    ('methods: {hierarchical: {utilities: ["fbeta:beta=-1"]}}\n', "methods.hierarchical.utilities[0]",
     "parameter beta=-1 of utility spec 'fbeta:beta=-1' is out of range: need beta >= 0"),
    ('methods: {hierarchical: {utilities: ["fbeta:beta=1", "nosuch"]}}\n', "methods.hierarchical.utilities[1]",
     "unknown utility 'nosuch' in spec 'nosuch'; known: precision, recall, fbeta, credal, exp, log, reject, genreject"),
    ('utilities: ["fbeta:beta=1", "credal:delta=1,gamma=9"]\n', "utilities[1]",
     "utility 'credal:delta=1,gamma=9' leaves [0, 1] at set size s=1"),
    ('report: {illustrations: {entropy: {utilities: ["nosuch"]}}}\n', "report.illustrations.entropy.utilities[0]",
     "unknown utility 'nosuch'"),
    ('report: {illustrations: {image_top: {utility: "fbeta:beta=-2"}}}\n', "report.illustrations.image_top.utility",
     "parameter beta=-2 of utility spec"),
    ('report: {illustrations: {text_top: {utility: "nosuch"}}}\n', "report.illustrations.text_top.utility",
     "unknown utility 'nosuch'"),
])
def test_check_config_parses_every_utility_string(tmp_path, capsys, text, key, why):
    """check-config accepted methods.hierarchical.utilities "fbeta:beta=-1" and "nosuch" (the Snakefile
    refused them only when it planned the jobs)."""
    err = _check_config_error(tmp_path, capsys, text)
    assert err.startswith(f"svbop: error: config: {key}: {why}"), err


def test_a_fifo_given_as_a_config_file_is_refused_without_blocking(tmp_path):
    """load_yaml (the Snakefile's and check-config's reader) opened a FIFO and waited for a writer."""
    import os

    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as info:
        load_yaml(fifo)
    assert str(info.value) == f"{fifo}: is a FIFO (named pipe), not a regular file (a config file must be a file)"
