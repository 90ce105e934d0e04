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
        ({"methods": {"raps": {"k_reg": 1e23}}}, "methods.raps.k_reg", "expected a value <= 2147483647"),
        ({"methods": {"raps": {"k_reg": 2**63}}}, "methods.raps.k_reg", "expected a value <= 2147483647"),
        ({"methods": {"credal": {"gamma": math.inf}}}, "methods.credal.gamma", "expected a finite number, got inf"),
        ({"methods": {"credal": {"gamma": math.nan}}}, "methods.credal.gamma", "expected a finite number, got nan"),
        ({"methods": {"credal": {"gamma": 5e-324}}}, "methods.credal.gamma", "5e-324 is a subnormal number"),
        ({"datasets": {"digits": {"hsg": {"ef": 10**12}}}}, "datasets.digits.hsg.ef", "expected a value <= 2147483647"),
        ({"datasets": {"digits": {"hsg": {"ef": 1e12}}}}, "datasets.digits.hsg.ef", "expected a value <= 2147483647"),
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
