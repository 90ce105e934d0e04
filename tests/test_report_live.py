"""The level chosen in the browser (svbop.report.live): the needs the page embeds give the library's
own sets at every level, for LAC (ICP), deterministic APS and class-conditional LAC; and the
encoding stays within the page's budget for 10,000 rows x 100 classes."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
import pytest

from svbop import ConformalSetPredictor
from svbop.report.live import BUDGET_BYTES, LIVE_METHODS, live_data, needs, sets_at

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = (0.01, 0.03, 0.05, 0.1, 0.123, 0.2, 0.25, 0.3)


def _predictor(method: str, epsilon: float) -> ConformalSetPredictor:
    return {"icp": ConformalSetPredictor(epsilon),
            "conformal_aps_top1": ConformalSetPredictor(epsilon, score="aps", randomized=False,
                                                     calibrate_top1=True),
            "conformal_lac_cc": ConformalSetPredictor(epsilon, score="lac", class_conditional=True)}[method]


def _data(seed: int, n_cal: int, n_test: int, K: int, dtype, ties: bool):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n_cal + n_test, K)) * rng.uniform(0.5, 3, size=(n_cal + n_test, 1))
    P = np.exp(logits)
    P /= P.sum(axis=1, keepdims=True)
    if ties:  # rounded: many equal probabilities within rows and equal scores across rows
        P = np.round(P, 2) + 1e-3
        P /= P.sum(axis=1, keepdims=True)
    P = P.astype(dtype)
    y = np.array([rng.choice(K, p=p / p.sum()) for p in P.astype(np.float64)])
    return P[:n_cal], y[:n_cal], P[n_cal:], y[n_cal:]


@pytest.mark.parametrize("method", list(LIVE_METHODS))
@pytest.mark.parametrize("seed,dtype,ties", [(0, np.float64, False), (1, np.float32, False), (2, np.float64, True)])
def test_needs_give_the_library_sets_at_every_level(method, seed, dtype, ties):
    P_cal, y_cal, P_test, y_test = _data(seed, 300, 400, 7, dtype, ties)
    found = needs(method, P_cal, y_cal, P_test)
    for eps in EPSILONS:
        expected = _predictor(method, eps).fit(P_cal, y_cal).predict_mask(P_test)
        got = sets_at(found, eps)
        assert np.array_equal(got, expected), (method, eps, np.flatnonzero((got != expected).any(axis=1))[:5])


def test_class_conditional_needs_keep_every_class_of_a_class_too_small():
    """A class with fewer calibration rows than k: q_c = inf, the class in every set (the library's rule)."""
    P_cal, y_cal, P_test, _ = _data(3, 200, 100, 5, np.float64, False)
    y_cal = y_cal.copy()
    y_cal[y_cal == 4] = 3
    y_cal[:5] = 4  # 5 rows of class 4: finite q_4 only for epsilon >= 1/6
    found = needs("conformal_lac_cc", P_cal, y_cal, P_test)
    for eps in (0.05, 0.1, 0.2, 0.3):
        expected = _predictor("conformal_lac_cc", eps).fit(P_cal, y_cal).predict_mask(P_test)
        assert np.array_equal(sets_at(found, eps), expected)
        assert expected[:, 4].all() == (eps < 1 / 6)


def _decode(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype)


def test_embedded_needs_reproduce_coverage_and_size():
    """The page's arithmetic (per row: the entries it embeds, the labels' needs, the top class), done
    here on the decoded arrays, gives the library's coverage and mean size."""
    P_cal, y_cal, P_test, y_test = _data(4, 250, 300, 6, np.float32, False)
    data = live_data(P_cal, y_cal, P_test, y_test, utilities=["fbeta:beta=1"], examples=[0])
    y = _decode(data["y"], "<u2")
    for m in data["methods"]:
        ptr = _decode(m["ptr"], "<u4")
        need = _decode(m["need"], m["need_type"])
        need_y = _decode(m["need_y"], m["need_type"])
        top1 = _decode(m["top1"], m["cls_type"])
        cls = _decode(m["cls"], m["cls_type"]) if "cls" in m else None
        n_g = np.array(m["n"])
        for eps in EPSILONS:
            k = np.array([int(np.ceil((n + 1) * (1 - eps) - 1e-12)) for n in n_g])
            inf = k > n_g
            sizes, covered = [], []
            for i in range(len(y)):
                group = (lambda c: 0) if cls is None else (lambda c: c)
                s = int(inf.sum()) * (data["K"] if cls is None else 1)
                for j in range(ptr[i], ptr[i + 1]):
                    g = group(int(cls[j]) if cls is not None else 0)
                    s += (not inf[g]) and need[j] <= k[g]
                gy = group(int(y[i]))
                c = bool(inf[gy] or need_y[i] <= k[gy])
                if s == 0:
                    s, c = 1, int(y[i]) == int(top1[i])
                sizes.append(s)
                covered.append(c)
            sets = _predictor(m["method"], eps).fit(P_cal, y_cal).predict(P_test)
            assert np.mean(sizes) == sets.sizes.mean(), (m["method"], eps)
            assert np.mean(covered) == sets.contains(y_test).mean(), (m["method"], eps)


def test_ten_thousand_rows_of_a_hundred_classes_fit_the_budget():
    rng = np.random.default_rng(5)
    K = 100
    logits = rng.normal(size=(12_000, K)) * 2.5
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=p) for p in P])
    data = live_data(P[:2000], y[:2000], P[2000:], y[2000:], utilities=["fbeta:beta=1"])
    assert "too_large" not in data
    size = sum(len(v) for m in data["methods"] for v in m.values() if isinstance(v, str)) \
        + sum(len(u["size"]) + len(u["cov"]) for u in data["utilities"])
    assert size < BUDGET_BYTES
    small = live_data(P[:2000], y[:2000], P[2000:], y[2000:], budget_bytes=1000)
    assert "too_large" in small and "10,000 test rows x 100 classes" in small["too_large"]


def _render(files):
    """The section "Choose the level" alone, as the page renders it."""
    from svbop.report.live import live_context

    class Names:
        def dataset(self, d):
            return f"model {d}"

    frame = pd.DataFrame({"dataset": []})
    ctx = live_context(files, frame, [], Names(), list(files), [0.1])
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT / "report" / "templates")), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("live.html.j2").render(model={"live": ctx})


def test_the_page_says_when_the_data_are_too_large_to_embed(tmp_path):
    from svbop.report.live import write_live_data

    P_cal, y_cal, P_test, y_test = _data(6, 50, 60, 4, np.float64, False)
    write_live_data(tmp_path / "big.json", live_data(P_cal, y_cal, P_test, y_test, budget_bytes=100))
    page = _render({"big": tmp_path / "big.json"})
    assert "Too large to embed" in page and "60 test rows x 4 classes" in page
    assert 'class="live-data"' not in page


def test_class_names_cannot_break_out_of_the_embedded_data(tmp_path):
    from svbop.report.live import write_live_data

    P_cal, y_cal, P_test, y_test = _data(7, 50, 60, 3, np.float64, False)
    names = ["</script><script>alert(1)</script>", "<!--", "plain"]
    write_live_data(tmp_path / "m.json", live_data(P_cal, y_cal, P_test, y_test, utilities=["fbeta:beta=1"],
                                                   examples=[0], class_names=names))
    page = _render({"m": tmp_path / "m.json"})
    scripts = re.findall(r'<script type="application/json" class="live-data" data-dataset="m">(.*?)</script>', page, re.S)
    assert len(scripts) == 1 and "</script" not in scripts[0] and "<!--" not in scripts[0]
    assert json.loads(scripts[0])["class_names"] == names  # raw text in a <script>: no entity is decoded
    assert 'option value="fbeta:beta=1"' in page


def test_the_pages_svbop_full_is_the_librarys_with_no_cap_on_a_sets_size():
    """Issue 57 item 3: the page's SVBOP-Full is svbop.predict_sets' (what the tables show), every row's set
    size and coverage, and the example rows' classes, including rows whose set passes ten classes (the page
    used to look at each row's ten most probable classes only)."""
    from svbop import predict_sets, utility

    rng = np.random.default_rng(11)
    K = 40
    logits = rng.normal(size=(900, K)) * rng.uniform(0.2, 3, size=(900, 1))
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=p) for p in P])
    specs = ["fbeta:beta=1", "fbeta:beta=5", "credal:delta=1.6,gamma=0.6"]
    data = live_data(P[:300], y[:300], P[300:], y[300:], utilities=specs, examples=[0, 5, 17])
    large = 0
    for spec, enc in zip(specs, data["utilities"]):
        sets = predict_sets(P[300:], utility(spec, K))
        size = np.frombuffer(base64.b64decode(enc["size"]), dtype=enc["size_type"])
        cov = np.frombuffer(base64.b64decode(enc["cov"]), dtype="<u1")
        assert np.array_equal(size, sets.sizes) and np.array_equal(cov.astype(bool), sets.contains(y[300:]))
        assert enc["examples"] == [list(map(int, sets[r])) for r in (0, 5, 17)]
        large += int((sets.sizes > 10).sum())
    assert large > 20  # the rows the ten-class cap got wrong
