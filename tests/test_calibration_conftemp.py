"""Conformal temperature scaling, ``calibrate: conftemp`` (issue 55, item 6): the ConfTS loss and its
Adam descent against TorchCP 1.2.1's own (``ConfTSLoss`` with the hard quantile, ``torch.optim.Adam``)
on the same logits, the loss's fall toward T = 0 that makes the descent's length matter, the
pipeline's ``calibrate_parts(method="conftemp")``, and the refusals."""

import numpy as np
import pytest

import anchors
from digits_outputs import digits_logits
from svbop.calibration import CALIBRATION_METHODS, _confts_curve, calibrate_parts, fit_conformal_temperature


def _rows():
    Z, y = digits_logits()
    order = np.random.default_rng(0).permutation(y.size)
    return Z[order], y[order]


def test_loss_and_descent_equal_torchcp():
    anchors.torchcp()
    import torch
    from torchcp.classification.loss.confts import ConfTSLoss
    from torchcp.classification.predictor import SplitPredictor
    from torchcp.classification.score import APS

    Z, y = _rows()
    predictor = SplitPredictor(score_function=APS(score_type="softmax", randomized=False), model=None)
    theirs = ConfTSLoss(predictor=predictor, alpha=0.1, fraction=0.5, soft_qunatile=False)
    z, labels = torch.tensor(Z, dtype=torch.float64), torch.tensor(y)
    ours = _confts_curve(Z, y, "logits", 0.1, 0.5)
    for T in (0.5, 1.0, 1.7, 3.0):
        assert ours(T)[0] == pytest.approx(float(theirs(z / T, labels)), rel=1e-12)
    for start in (1.0, 2.5):
        T = torch.nn.Parameter(torch.tensor(start, dtype=torch.float64))
        opt = torch.optim.Adam([T])  # TorchCP's ConfTSTrainer: Adam's defaults
        for _ in range(100):
            opt.zero_grad()
            theirs(z / T, labels).backward()
            opt.step()
        assert fit_conformal_temperature(Z, y, init_temperature=start) == pytest.approx(T.item(), rel=1e-9)


def test_the_loss_falls_toward_zero_temperature():
    """Every APS score tends to 1 as T -> 0: the loss has no interior minimiser on these outputs."""
    Z, y = _rows()
    loss = _confts_curve(Z, y, "logits", 0.1, 0.5)
    values = [loss(T)[0] for T in (0.01, 0.1, 0.5, 1.0, 2.0, 5.0)]
    assert values == sorted(values) and values[0] < 1e-4


def test_calibrate_parts_conftemp():
    Z, y = _rows()
    assert "conftemp" in CALIBRATION_METHODS
    parts = {"validation": Z[:700], "test": Z[700:]}
    labels = {"validation": y[:700], "test": y[700:]}
    probs, record = calibrate_parts(parts, labels, method="conftemp")
    _, nll = calibrate_parts(parts, labels, method="temperature")
    assert record["method"] == "conftemp" and record["fitted_on"] == "validation"
    expect = fit_conformal_temperature(Z[:700], y[:700], init_temperature=nll["temperature"])
    assert record["temperature"] == pytest.approx(expect, rel=1e-12)
    assert abs(record["temperature"] - nll["temperature"]) <= 100 * 1e-3 + 1e-9  # 100 steps of at most lr
    assert probs["test"].shape == (y.size - 700, 10)


@pytest.mark.parametrize("kw, message", [
    (dict(epsilon=0), r"epsilon must be in \(0, 1\)"),
    (dict(fraction=1.0), r"fraction must be in \(0, 1\)"),
    (dict(steps=-1), "steps must be an integer >= 0"),
    (dict(lr=0.0), "lr must be a finite number > 0"),
    (dict(init_temperature=1000.0), "init_temperature must lie within bounds"),
])
def test_refusals_are_one_line(kw, message):
    Z, y = _rows()
    with pytest.raises(ValueError, match=message) as e:
        fit_conformal_temperature(Z, y, **kw)
    assert "\n" not in str(e.value)


def test_too_few_rows_are_refused():
    Z, y = _rows()
    with pytest.raises(ValueError, match="6 rows are too few for ConfTS"):
        fit_conformal_temperature(Z[:6], y[:6])
