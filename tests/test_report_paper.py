"""The paper's numbers beside ours: the packaged paper tables, Tables 1/3/4/5 compared, the status of
every dataset, the claims checked, and their place in the HTML report (offline, no pipeline run)."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import svbop
from conftest import REPORT_SECTIONS
from svbop.report import build_report, table3
from svbop.report.compare import (
    ALGORITHMS,
    check_claims,
    read_train_seconds,
    table2_vs_paper,
    table3_vs_paper,
    table4_vs_paper,
    table5_vs_paper,
)
from svbop.report.paper import PAPER_DIR, canonical_paper_name, paper_datasets, paper_table, table4_long
from svbop.report.status import dataset_status, missing_inputs, paper_link, status_view

SHARED_PAPER = Path(__file__).resolve().parents[2] / "shared" / "paper"
UTILITIES = ["credal:delta=1.6,gamma=0.6", "fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "fbeta:beta=5"]
LABELS = [svbop.utility(u).label for u in UTILITIES]


def test_the_packaged_paper_tables_are_the_shared_ones():
    for name in ("table1_datasets", "table3_utilities", "table4_algorithms", "table5_hyperparameters"):
        packaged = (PAPER_DIR / f"{name}.csv").read_bytes()
        if SHARED_PAPER.is_dir():
            assert packaged == (SHARED_PAPER / f"{name}.csv").read_bytes(), name
        assert packaged.count(b"\n") > 5
    assert paper_datasets()[0] == "MNIST" and paper_datasets()[-1] == "LSHTC1" and len(paper_datasets()) == 11
    # one spelling per dataset: Table 5 writes "Dmoz", Table 1 "DMOZ"
    assert canonical_paper_name("Dmoz") == canonical_paper_name("dmoz") == "DMOZ"
    assert set(paper_table("table5")["dataset"]) <= set(paper_datasets())
    assert set(paper_table("table3")["dataset"]) <= set(paper_datasets())
    long = table4_long()
    wide = paper_table("table4")
    assert len(long) == 2 * len(wide)
    row = long[(long.dataset == "LSHTC1") & (long.algorithm == "HSG") & (long.utility == "credal_2.2_1.2")].iloc[0]
    src = wide[(wide.dataset == "LSHTC1") & (wide.algorithm == "HSG")].iloc[0]
    assert row["t_test_ms"] == src["credal_2_2_1_2_t_test_ms"] and row["recall_pct"] == src["credal_2_2_1_2_recall_pct"]
    with pytest.raises(ValueError, match="unknown table"):
        paper_table("table2")


# --- a run that mirrors the paper: metrics built from the paper's own numbers, shifted -------


def _metrics_from_paper(dataset: str, paper_name: str, shift: float) -> pd.DataFrame:
    p = paper_table("table3")
    p = p[p["dataset"] == paper_name]
    wide = p.pivot_table(index=["method", "param"], columns="eval_utility", values="utility_pct").reset_index()
    rows = []
    for r in wide.to_dict("records"):
        row = {"dataset": dataset, "method": r["method"], "param": r["param"], "n_test": 100,
               "recall_pct": 90.0, "mean_size": 1.5, "top1_pct": 80.0}
        row |= {f"{lab}_pct": r[lab] + shift for lab in LABELS}
        rows.append(row)
    return pd.DataFrame(rows)


def test_table3_vs_paper_pairs_every_cell_with_the_paper():
    metrics = _metrics_from_paper("lshtc_like", "LSHTC1", shift=0.25)
    links = {"lshtc_like": ("LSHTC1", "stand-in")}
    t = table3_vs_paper(metrics, links)
    assert len(t) == 13 * 4 and t["paper"].notna().all()
    assert np.allclose(t["diff"], 0.25) and np.allclose(t["ours"] - t["paper"], t["diff"])
    assert set(t["relation"]) == {"stand-in"}
    # the paper's value is the CSV's own, looked up by method, param and evaluation utility
    csv = paper_table("table3").set_index(["dataset", "method", "param", "eval_utility"])["utility_pct"]
    for r in t.itertuples():
        assert r.paper == csv[("LSHTC1", r.method, r.param, r.eval_utility)]
    # a dataset outside the paper has no paper values
    other = table3_vs_paper(metrics.assign(dataset="mine"), {})
    assert other["paper"].isna().all() and (other["paper_dataset"] == "").all()


def test_table2_vs_paper_follows_the_paper_order_and_marks_what_was_not_run():
    summaries = [
        {"dataset": "mnist_copy", "title": "MNIST copy", "synthetic": False, "description": "", "features": "cnn",
         "K": 10, "D": 32, "N_train": 25200, "N_validation": 4200, "N_calibration": 4200, "N_test": 8400,
         "top1_pct": 99.0, "train_seconds": 1.0},
        {"dataset": "toy", "title": "Toy", "synthetic": True, "description": "", "features": "raw",
         "K": 3, "D": 2, "N_train": 5, "N_validation": 1, "N_calibration": 1, "N_test": 2,
         "top1_pct": 50.0, "train_seconds": 1.0},
    ]
    t = table2_vs_paper(summaries, {"mnist_copy": ("MNIST", "same")})
    assert list(t["paper_dataset"])[:11] == paper_datasets()
    mnist = t.iloc[0]
    assert mnist["dataset"] == "mnist_copy" and mnist["N_train"] == 33600 == mnist["N_train_paper"]
    assert (mnist["K"], mnist["D"], mnist["N_test"]) == (mnist["K_paper"], mnist["D_paper"], mnist["N_test_paper"])
    assert (t["dataset"].iloc[1:11] == "").all() and t["K"].iloc[1:11].isna().all()
    assert t.iloc[-1]["dataset"] == "toy" and pd.isna(t.iloc[-1]["K_paper"])


def test_table4_vs_paper_takes_each_measure_from_its_metrics_row():
    labels = ["fbeta_1", "credal_2.2_1.2"]
    rows = []
    methods = ("svbop_full_naive", "svbop_full", "svbop_hsg", "svbop_hf_predefined", "svbop_hf_kmeans")
    for i, method in enumerate(methods):
        for j, lab in enumerate(labels):
            rows.append({"dataset": "d", "method": method, "param": lab, "n_test": 10, "recall_pct": 50 + i + j,
                         "mean_size": 1 + i / 10, "top1_pct": 40 + i, "t_test_ms": 2.0 / (i + 1),
                         "fbeta_1_pct": 30 + i + j, "credal_2.2_1.2_pct": 35 + i + j,
                         "index_recall_pct": 97.5 if method == "svbop_hsg" else np.nan})
    metrics = pd.DataFrame(rows)
    t = table4_vs_paper(metrics, {"d": {"svbop_full_naive": 10.0, "svbop_full": 10.0, "svbop_hsg": 12.0}},
                        {"d": ("LSHTC1", "stand-in")})
    assert list(t["algorithm"]) == ["Full", "Full_svbop", "HSG", "HF_p", "HF_c"] * 2
    for r in t.itertuples():
        src = metrics[(metrics.method == ALGORITHMS[r.algorithm]) & (metrics.param == r.utility)].iloc[0]
        assert r.utility_pct == src[f"{r.utility}_pct"] and r.recall_pct == src["recall_pct"]
        assert r.set_size == src["mean_size"] and r.t_test_ms == src["t_test_ms"] and r.top1_pct == src["top1_pct"]
        # the paper's speed-up reproduced (over Full as the paper runs it) and over svbop's Full
        assert r.speedup_vs_full_naive == pytest.approx(2.0 / src["t_test_ms"])
        assert r.speedup_vs_full == pytest.approx(1.0 / src["t_test_ms"])
        assert (r.index_recall_pct == 97.5) if r.algorithm == "HSG" else np.isnan(r.index_recall_pct)
    paper = table4_long().set_index(["dataset", "algorithm", "utility"])
    for r in t.itertuples():
        if r.algorithm == "Full_svbop":  # not in the paper
            assert np.isnan(r.t_test_ms_paper) and np.isnan(r.speedup_vs_full_paper)
            continue
        assert r.t_test_ms_paper == paper.loc[("LSHTC1", r.algorithm, r.utility), "t_test_ms"]
        assert r.speedup_vs_full_paper == pytest.approx(
            paper.loc[("LSHTC1", "Full", r.utility), "t_test_ms"] / r.t_test_ms_paper)
    assert list(t["t_train_s"][:3]) == [10.0, 10.0, 12.0] and np.isnan(t["t_train_s"].iloc[3])


def test_read_train_seconds_adds_the_files_of_each_method(tmp_path):
    (tmp_path / "flat.json").write_text(json.dumps({"train_seconds": 3.5}))
    (tmp_path / "hnsw.json").write_text(json.dumps({"build_seconds": 1.25}))
    (tmp_path / "bad.json").write_text(json.dumps({"seconds": 1}))
    got = read_train_seconds({"d": {"svbop_full": [tmp_path / "flat.json"],
                                    "svbop_hsg": [tmp_path / "flat.json", tmp_path / "hnsw.json"]}})
    assert got == {"d": {"svbop_full": 3.5, "svbop_hsg": 4.75}}
    with pytest.raises(ValueError, match="bad.json"):
        read_train_seconds({"d": {"x": [tmp_path / "bad.json"]}})


def test_table5_comes_from_the_config_used():
    datasets = {
        "big": {"stand_in_for": "LSHTC1", "flat": {"C": 10, "eps": 0.1},
                "hsg": {"enabled": True, "M": 20, "efC": 100, "k": 100},
                "hf": {"enabled": False, "C": 50, "eps": 0.1, "max_leaves": 100, "kmeans_eps": 0.001}},
    }
    links = {d: paper_link(c) for d, c in datasets.items()}
    t = table5_vs_paper(datasets, ["big"], links).iloc[0]
    assert (t["full_C"], t["hsg_M"], t["hsg_k"]) == (10, 20, 100)
    assert t["hf_C"] is None  # HF not enabled
    paper = paper_table("table5").set_index("dataset").loc["LSHTC1"]
    assert t["full_C_paper"] == paper["full_C"] and t["hf_max_leaves_paper"] == paper["hf_max_leaves"]
    with pytest.raises(ValueError, match="not one of the paper's datasets"):
        paper_link({"paper": "CIFAR-10"})


def test_missing_inputs_and_the_status_of_every_dataset(tmp_path):
    (tmp_path / "data" / "here" / "downloads").mkdir(parents=True)
    (tmp_path / "data" / "here" / "downloads" / "a.csv").write_text("x")
    (tmp_path / "local.bin").write_text("x")
    datasets = {
        "here": {"paper": "DBpedia", "files": {"a.csv": {"manual": {"url": "https://example.org/a"}}}},
        "gated": {"paper": "dbpedia", "files": {"b.csv": {"manual": {"url": "https://example.org/b", "note": "login"}}}},
        "lost": {"stand_in_for": "Bacteria", "files": {"c.fa": {"path": "nowhere/c.fa"}, "d": {"path": "local.bin"}}},
        "web": {"paper": "LSHTC1", "files": {"e.tar": {"url": "https://example.org/e.tar"}}},
        "builtin": {"source": {"builtin": "digits"}},
    }
    missing = {d: missing_inputs(d, cfg, root=tmp_path) for d, cfg in datasets.items()}
    assert missing["here"] == [] and missing["web"] == [] and missing["builtin"] == []
    (gated,) = missing["gated"]
    assert gated["url"] == "https://example.org/b" and gated["where"].endswith("data/gated/downloads/b.csv")
    (lost,) = missing["lost"]
    assert lost["file"] == "c.fa" and lost["where"] == str(tmp_path / "nowhere/c.fa")
    status = dataset_status(datasets, ["here", "gated", "lost", "web"], {d: m for d, m in missing.items() if m})
    by = status.set_index("dataset")
    assert by.loc["here", "status"] == "run" and by.loc["web", "status"] == "run"
    assert by.loc["gated", "status"] == "not run: data missing"
    assert "https://example.org/b" in by.loc["gated", "detail"] and "data/gated/downloads/b.csv" in by.loc["gated", "detail"]
    assert by.loc["lost", "relation"] == "stand-in" and "nowhere/c.fa" in by.loc["lost", "detail"]
    assert by.loc["builtin", "status"] == "not run: not in run"
    # every paper dataset appears: those with no configured dataset as "not configured"
    assert set(paper_datasets()) <= set(status["paper_dataset"]) | set(status["title"])
    assert (status[status["dataset"] == ""]["status"] == "not configured").all()
    assert "MNIST" in set(status[status["dataset"] == ""]["title"])


def _claims_metrics(full_gap: float) -> pd.DataFrame:
    rows = []
    for d, K, icp_size in (("small", 10, 1.2), ("large", 1000, 300.0)):
        for lab in LABELS:
            rows.append({"dataset": d, "method": "svbop_full", "param": lab, "mean_size": 1.5, "t_test_ms": 1.0,
                         **{f"{u}_pct": 80.0 + (full_gap if u == lab else 0.0) for u in LABELS}})
            rows.append({"dataset": d, "method": "threshold", "param": lab, "mean_size": 2.0,
                         **{f"{u}_pct": 80.0 for u in LABELS}})
        rows.append({"dataset": d, "method": "svbop_full_naive", "param": "fbeta_1", "mean_size": 1.5, "t_test_ms": 4.0,
                     **{f"{u}_pct": 80.0 + (full_gap if u == "fbeta_1" else 0.0) for u in LABELS}})
        rows.append({"dataset": d, "method": "svbop_hsg", "param": "fbeta_1", "mean_size": 1.5, "t_test_ms": 0.5,
                     "agreement_with_full_pct": 99.0, **{f"{u}_pct": 79.5 for u in LABELS}})
        rows.append({"dataset": d, "method": "svbop_hf_kmeans", "param": "fbeta_1", "mean_size": 1.5, "t_test_ms": 0.1,
                     **{f"{u}_pct": 70.0 for u in LABELS}})
        rows.append({"dataset": d, "method": "top_s", "param": "1", "mean_size": 1.0, **{f"{u}_pct": 79.0 for u in LABELS}})
        rows.append({"dataset": d, "method": "icp", "param": "0.01", "mean_size": icp_size, **{f"{u}_pct": 10.0 for u in LABELS}})
    df = pd.DataFrame(rows)
    for c in ("n_test", "recall_pct", "top1_pct"):
        df[c] = 1.0
    return df


def test_claims_are_tested_with_their_numbers():
    summaries = [{"dataset": "small", "K": 10, "N_test": 5000}, {"dataset": "large", "K": 1000, "N_test": 5000}]
    claims = {c["claim"].split()[0] + str(i): c for i, c in enumerate(check_claims(_claims_metrics(+0.5), summaries))}
    verdicts = [c["verdict"] for c in claims.values()]
    assert verdicts == ["supported", "supported", "supported", "supported", "not testable"]
    assert "8 of 8" in claims["SVBOP-Full0"]["evidence"][0]
    assert any("0.500 ms/sample vs 4.000 (Full as in the paper, 8.00x) and 1.000 (svbop's Full, 2.00x)" in e
               for e in claims["SVBOP-HSG1"]["evidence"])
    # every claim says on what it was judged
    assert all("small (real data not in the paper; K = 10; 5,000 test rows)" in c["context"]
               for c in list(claims.values())[:4])
    assert "as the paper runs it" in claims["SVBOP-HSG1"]["context"]
    assert "large (K = 1000) 300.00" in claims["ICP3"]["evidence"][0]
    # a threshold beating SVBOP-Full on its own utility is named, with both numbers
    worse = check_claims(_claims_metrics(-0.5), summaries)[0]
    assert worse["verdict"] == "contradicted"
    assert any("SVBOP-Full 79.50 < threshold" in e and "80.00" in e for e in worse["evidence"])
    # nothing to compare with: not testable, with the reason
    only = _claims_metrics(0.5)
    only = only[only["method"].isin(["svbop_full", "threshold"]) & (only["dataset"] == "small")]
    c = check_claims(only, summaries[:1])
    assert [x["verdict"] for x in c[1:]] == ["not testable"] * 4
    # HF with a predefined hierarchy: judged on the biological datasets only, the others listed
    m = _claims_metrics(0.5)
    hf_p = m[m["method"] == "svbop_hf_kmeans"].assign(method="svbop_hf_predefined")
    hf_p["fbeta_1_pct"] = [85.0, 60.0]  # beats Full (80.5) on "small", not on "large"
    m = pd.concat([m, hf_p])
    c5 = check_claims(m, summaries, links={"small": ("Bacteria", "stand-in"), "large": ("LSHTC1", "same")})[4]
    assert c5["verdict"] == "supported"
    assert c5["evidence"][0].startswith("small (biological), fbeta_1: Full 80.50") and "HF_p best" in c5["evidence"][0]
    assert "large, fbeta_1" in c5["evidence"][1] and "HF_p not best" in c5["evidence"][1]


def test_the_report_puts_the_paper_beside_each_number(tmp_path):
    metrics = pd.concat([_metrics_from_paper("lshtc_like", "LSHTC1", 0.25), _metrics_from_paper("voc", "VOC 2006", -1.0)])
    summaries = [
        {"dataset": d, "title": d, "synthetic": False, "description": "", "features": "tfidf", "K": K, "D": 5,
         "N_train": 10, "N_validation": 1, "N_calibration": 1, "N_test": 4, "top1_pct": 50.0, "train_seconds": 1.0}
        for d, K in (("lshtc_like", 12166), ("voc", 10))
    ]
    config = {"utilities": UTILITIES, "run": ["lshtc_like", "voc", "gated"],
              "datasets": {"lshtc_like": {"stand_in_for": "LSHTC1"}, "voc": {"paper": "VOC 2006"},
                           "gated": {"paper": "DBpedia", "files": {"x.csv": {"manual": {"url": "https://example.org/x"}}}}},
              "report": {"illustrations": {"text_top": {"dataset": "gated"}}}}
    not_run = {"gated": missing_inputs("gated", config["datasets"]["gated"], root=tmp_path)}
    out = build_report(tmp_path / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
                       utilities=UTILITIES, not_run=not_run, downloads={"table3_vs_paper.csv": "tables/table3_vs_paper.csv"})
    html = Path(out).read_text()
    for section in REPORT_SECTIONS:
        assert f'<section id="{section}">' in html, section
    # Table 3: after each of our utility cells, the paper's value and the difference, from the CSV
    paired = table3_vs_paper(read_metrics_frame(metrics), {"lshtc_like": ("LSHTC1", "stand-in"), "voc": ("VOC 2006", "same")})
    block = html[html.index('class="table3" data-dataset="voc"'):]
    block = block[: block.index("</table>")]
    cells = re.findall(r'<td class="paper[^"]*">([^<]*)</td>', block)
    t = table3(metrics, "voc", UTILITIES)
    expected = []
    for method, param in t.attrs["keys"]:
        for lab in LABELS:
            r = paired[(paired.dataset == "voc") & (paired.method == method) & (paired.param == param) & (paired.eval_utility == lab)].iloc[0]
            expected.append(f"{r.paper:.2f} ({r['diff']:+.2f})")
    assert cells == expected and all(c.endswith("(-1.00)") for c in cells)
    # the dataset without data is listed with the file, the place and the URL; so is its illustration
    assert re.search(r'data-dataset="gated" data-status="not run: data missing"', html)
    assert "https://example.org/x" in html and "data/gated/downloads/x.csv" in html
    ill = html[html.index('id="illustration-text_top"'):]
    assert "not run" in ill[:800] and "gated" in ill[:800]
    assert 'href="tables/table3_vs_paper.csv"' in html
    assert html.count("stand-in") >= 2
    # the banner: what this run compares with the paper, and what only for reference
    banner = re.search(r'<div class="banner banner-some" id="compared"[^>]*>(.*?)</div>', html, re.S).group(1)
    banner = " ".join(banner.split())
    assert "Compared with the paper</strong>: voc (the paper's VOC 2006), beside the paper's numbers" in banner
    assert "stand-ins, for reference only</strong>" in banner and "lshtc_like for LSHTC1" in banner
    assert "9 of the paper's 11 datasets have nothing of this run to compare with" in banner
    assert "followed by the paper's value" in html and "the paper's value below each where it has one" in html


def read_metrics_frame(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(param=df["param"].astype(str))


def test_speed_claims_say_against_which_full_and_at_what_scale():
    """HSG and HF beat the paper's Full (all K probabilities sorted) but not svbop's: the verdict says
    exactly that, and that it rests on synthetic data; datasets with too few test rows are not judged."""
    m = _claims_metrics(0.5)
    m.loc[m["method"] == "svbop_full", "t_test_ms"] = 0.05  # faster than HSG (0.5) and HF (0.1)
    summaries = [{"dataset": "small", "K": 10, "N_test": 300, "synthetic": True},
                 {"dataset": "large", "K": 1000, "N_test": 400, "synthetic": True}]
    c = check_claims(m, summaries)
    assert [x["verdict"] for x in c] == ["not judged: too few test rows"] * 4 + ["not testable"]
    assert c[1]["evidence"] == ["small, large could judge it but have fewer than 1,000 test rows"]
    assert c[1]["context"].endswith("not judged, fewer than 1,000 test rows: small (300), large (400)")
    summaries = [{**s, "N_test": 5000} for s in summaries]
    c = check_claims(m, summaries)
    expected = ("supported against the paper's SVBOP-Full; contradicted against svbop's SVBOP-Full "
                "(judged on synthetic data only)")
    assert c[1]["verdict"] == c[2]["verdict"] == expected
    assert "small (synthetic; K = 10; 5,000 test rows), large (synthetic; K = 1,000; 5,000 test rows)" in c[1]["context"]
    # one real dataset among them: no qualifier; the small synthetic one is left out and named
    summaries = [{"dataset": "small", "K": 10, "N_test": 300, "synthetic": True}, {"dataset": "large", "K": 1000, "N_test": 5000}]
    links = {"large": ("LSHTC1", "stand-in")}
    c = check_claims(m, summaries, links=links)
    assert c[1]["verdict"] == "supported against the paper's SVBOP-Full; contradicted against svbop's SVBOP-Full"
    assert "large (stand-in for LSHTC1; K = 1,000; 5,000 test rows)" in c[1]["context"]
    assert "small (" not in c[1]["context"].split("not judged")[0]
    assert c[1]["context"].endswith("not judged, fewer than 1,000 test rows: small (300)")
    assert not any("small" in e for e in c[1]["evidence"])


def test_claims_treat_ties_as_ties():
    """Compared as shown (two decimals): SVBOP-Full at 100.00 beside a Top-1 at 100.00 is a tie, not a
    loss; HF_p equal to Full decides nothing; a test time equal at three decimals is no slower."""
    summaries = [{"dataset": "small", "K": 10, "N_test": 5000}, {"dataset": "large", "K": 1000, "N_test": 5000}]
    m = _claims_metrics(0.0)
    for u in LABELS:  # every method scores 100 (a perfect classifier); Full just below, within rounding
        m[f"{u}_pct"] = 100.0
    m.loc[m["method"] == "svbop_full", [f"{u}_pct" for u in LABELS]] = 99.996
    m.loc[m["method"] == "svbop_hf_kmeans", "t_test_ms"] = 0.0504  # = svbop's Full at three decimals
    m.loc[m["method"] == "svbop_full", "t_test_ms"] = 0.05
    hf_p = m[m["method"] == "svbop_hf_kmeans"].assign(method="svbop_hf_predefined")
    m = pd.concat([m, hf_p])
    c = check_claims(m, summaries, links={"small": ("Bacteria", "stand-in")})
    assert c[0]["verdict"] == "supported"
    assert "in 8 of 8 (dataset, utility) cases, 8 of them ties (equal at 2 decimals, as shown)" in c[0]["evidence"][0]
    assert c[2]["verdict"] == "supported"  # HF ties svbop's Full: no slower
    assert c[4]["verdict"] == "tied (1 of 1)" and "ties for best" in c[4]["evidence"][0]


def test_the_domain_decides_what_is_biological():
    """Claim 5 judges the datasets whose domain is biological: the config key domain, not only stand_in_for."""
    from svbop.report.status import dataset_domain

    assert dataset_domain({"stand_in_for": "Bacteria"}) == "biological"
    assert dataset_domain({"paper": "VOC 2006"}) == "images" and dataset_domain({"features": {"kind": "cnn"}}) == "images"
    assert dataset_domain({"paper": "LSHTC1"}) == "text" and dataset_domain({}) == "other"
    assert dataset_domain({"domain": "biological", "paper": "LSHTC1"}) == "biological"
    with pytest.raises(ValueError, match="domain: 'fish'"):
        dataset_domain({"domain": "fish"})
    summaries = [{"dataset": "small", "K": 10, "N_test": 5000}, {"dataset": "large", "K": 1000, "N_test": 5000}]
    m = _claims_metrics(0.5)
    hf_p = m[m["method"] == "svbop_hf_kmeans"].assign(method="svbop_hf_predefined")
    hf_p["fbeta_1_pct"] = [85.0, 60.0]
    m = pd.concat([m, hf_p])
    datasets = {"small": {"domain": "biological"}, "large": {"stand_in_for": "LSHTC1"}}
    c5 = check_claims(m, summaries, domains={d: dataset_domain(c) for d, c in datasets.items()})[4]
    assert c5["verdict"] == "supported" and c5["evidence"][0].startswith("small (biological)")


def test_the_status_view_lists_the_runs_datasets_and_collapses_the_rest_even_manual_ones(tmp_path):
    datasets = {
        "ran": {"title": "Ran", "paper": "MNIST"},
        "broken": {"title": "Broken"},
        "gated": {"title": "Gated", "files": {"x.csv": {"manual": {"url": "https://example.org/x"}}}},
        "kaggle": {"title": "Kaggle", "paper": "DBpedia",
                   "files": {f"{p}.csv": {"manual": {"url": "https://example.org/k", "note": "login"}} for p in ("a", "b")}},
        "local": {"title": "Local", "files": {"c.fa": {"path": "nowhere/c.fa"}}},
        "plain": {"title": "Plain", "paper": "VOC 2006"},
    }
    missing = {d: missing_inputs(d, cfg, root=tmp_path) for d, cfg in datasets.items()}
    run = ["ran", "broken", "gated"]
    status = dataset_status(datasets, run, {"gated": missing["gated"]}, {"broken": "fetch failed: HTTP 404"}, missing=missing)
    view = status_view(status, missing)
    # a row per dataset of run only
    assert [(r["dataset"], r["state"]) for r in view["rows"]] == [
        ("ran", "ran"), ("broken", "failed"), ("gated", "data missing")]
    (group,) = view["rows"][2]["files"]
    assert group["files"] == ["x.csv"] and group["folder"].endswith("data/gated/downloads/")
    # the others on one line, also the one whose files are fetched by hand (flagged) and an absent local copy
    assert [(r["dataset"], r["manual"]) for r in view["not_in_run"]] == [("kaggle", True), ("local", False), ("plain", False)]
    assert len(view["not_configured"]) == 11 - 3  # the paper's datasets no entry covers (MNIST, DBpedia, VOC 2006 are)
    assert view["counts"] == {"ran": 1, "failed": 1, "data missing": 1, "not in run": 3, "not configured": 8,
                              "by hand": 1}
    detail = status.set_index("dataset").loc["kaggle", "detail"]
    assert detail.startswith("first put a.csv at ") and "add kaggle to run:" in detail


def test_orange_marks_a_difference_only_on_the_papers_own_datasets(tmp_path):
    """>= 5 points off the paper (Table 3) or another size (Table 2): orange on the paper's own
    dataset; a stand-in is not expected to match, so it is not marked."""
    metrics = pd.concat([_metrics_from_paper("lshtc_like", "LSHTC1", 6.0), _metrics_from_paper("voc", "VOC 2006", 6.0)])
    summaries = [
        {"dataset": d, "title": d, "synthetic": False, "description": "", "features": "tfidf", "K": K, "D": 5,
         "N_train": 10, "N_validation": 1, "N_calibration": 1, "N_test": 4, "top1_pct": 50.0, "train_seconds": 1.0}
        for d, K in (("lshtc_like", 12166), ("voc", 10))
    ]
    config = {"utilities": UTILITIES, "run": ["lshtc_like", "voc"],
              "datasets": {"lshtc_like": {"stand_in_for": "LSHTC1"}, "voc": {"paper": "VOC 2006"}}}
    html = build_report(tmp_path / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
                        utilities=UTILITIES).read_text()

    def block(start: str) -> str:
        b = html[html.index(start):]
        return b[: b.index("</table>")]

    assert "far" in block('class="table3" data-dataset="voc"')
    assert "far" not in block('class="table3" data-dataset="lshtc_like"')
    rows = dict(re.findall(r'<tr data-dataset="(voc|lshtc_like)" data-paper="[^"]*">(.*?)</tr>', block('class="table2-paper"'), re.S))
    assert "differs" in rows["voc"] and "differs" not in rows["lshtc_like"]  # D = 5, the paper's is not


def test_an_illustration_of_a_dataset_not_in_run_names_the_files_to_fetch_by_hand(tmp_path):
    """The status lists a manual dataset outside run on one line; the empty panel it would fill
    still says which file to put where before adding it to run."""
    config = {"utilities": UTILITIES, "run": ["voc"],
              "datasets": {"voc": {"paper": "VOC 2006"},
                           "gated": {"title": "Gated texts", "files": {"x.csv": {"manual": {"url": "https://example.org/x"}}}}},
              "report": {"illustrations": {"text_top": {"dataset": "gated"}}}}
    summaries = [{"dataset": "voc", "title": "voc", "synthetic": False, "description": "", "features": "vgg16", "K": 10,
                  "D": 5, "N_train": 10, "N_validation": 1, "N_calibration": 1, "N_test": 4, "top1_pct": 50.0,
                  "train_seconds": 1.0}]
    missing = {d: missing_inputs(d, cfg, root=tmp_path) for d, cfg in config["datasets"].items()}
    html = build_report(tmp_path / "report.html", summaries=summaries, metrics=_metrics_from_paper("voc", "VOC 2006", 0.0),
                        figures=None, config=config, utilities=UTILITIES, missing=missing).read_text()
    status = html[html.index('<section id="status">'):html.index('<section id="utilities">')]
    assert re.findall(r'<tr data-dataset="([^"]*)"', status) == ["voc"]
    assert "<code>gated</code><sup>*</sup>" in status and "x.csv" not in status
    panel = html[html.index('id="illustration-text_top"'):][:1500]
    assert "Gated texts was not run" in panel and "<code>x.csv</code>" in panel and "https://example.org/x" in panel


def _smk_functions(path: Path, names: list[str], namespace: dict) -> dict:
    """The named top-level functions of a Snakemake file (plain Python defs), run in ``namespace``."""
    text = path.read_text()
    for name in names:
        m = re.search(rf"^def {name}\(.*?(?=^\S)", text, re.S | re.M)
        assert m, f"{path}: no def {name}"
        exec(m.group(0), namespace)
    return namespace


def test_training_time_includes_every_model_a_method_needs(tmp_path):
    """A dataset whose features are a CNN's hidden layer: the CNN's training is part of every
    method's training time (Table 4) and of the dataset's (summary.json); the features job's own
    time is a separate number."""
    from svbop.evaluation import dataset_summary, read_seconds

    root = Path(__file__).resolve().parents[1]
    config = {"datasets": {"digits": {"features": {"kind": "cnn"}, "hsg": {"enabled": True}, "hf": {"enabled": False}},
                           "voc": {"features": {"kind": "vgg16"}, "hsg": {"enabled": False}, "hf": {"enabled": False}}}}
    ns = _smk_functions(root / "workflow/rules/common.smk",
                        ["is_model_outputs", "svbop_methods", "cnn_history", "features_benchmark", "train_time_files"],
                        {"config": config, "MODEL_OUTPUTS": []})
    files = ns["train_time_files"]("digits")
    assert set(files) == {"svbop_full", "svbop_full_naive", "svbop_hsg"}
    assert all(fs[0] == "results/digits/features/cnn_history.tsv" for fs in files.values())
    assert ns["train_time_files"]("voc") == {m: ["results/voc/models/flat.json"] for m in ("svbop_full", "svbop_full_naive")}
    assert ns["features_benchmark"]("voc") == "results/benchmarks/features_vgg16/voc.tsv"
    # the files: the CNN's epochs, the flat model's JSON, Snakemake's benchmark of the features job
    (tmp_path / "cnn_history.tsv").write_text("epoch\tval_loss\tseconds\n1\t0.5\t20.0\n2\t0.4\t37.0\n")
    (tmp_path / "flat.json").write_text(json.dumps({"train_seconds": 0.1}))
    (tmp_path / "hnsw.json").write_text(json.dumps({"build_seconds": 2.0}))
    (tmp_path / "bench.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n61.5\t0:01:01\t300\t120.0\n")
    assert read_seconds(tmp_path / "cnn_history.tsv") == 57.0 and read_seconds(tmp_path / "bench.tsv") == 61.5
    got = read_train_seconds({"digits": {"svbop_full": [tmp_path / "cnn_history.tsv", tmp_path / "flat.json"],
                                         "svbop_hsg": [tmp_path / "cnn_history.tsv", tmp_path / "flat.json",
                                                       tmp_path / "hnsw.json"]}})
    assert got == {"digits": {"svbop_full": pytest.approx(57.1), "svbop_hsg": pytest.approx(59.1)}}
    (tmp_path / "empty.tsv").write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match=r"empty\.tsv: no rows with a 'seconds'"):
        read_seconds(tmp_path / "empty.tsv")
    # the dataset's summary: training = CNN + liblinear, the features' time apart
    summary = dataset_summary(dataset="digits", title="Digits", n_classes=2, n_features=32,
                              split={p: np.arange(3) for p in ("train", "validation", "calibration", "test")},
                              P_test=np.eye(2)[[0, 1, 0]], y_test=np.array([0, 1, 0]), features="cnn",
                              train_parts={"cnn": 57.0, "flat": 0.1}, features_seconds=4.5)
    assert summary["train_seconds"] == pytest.approx(57.1) and summary["features_seconds"] == 4.5
    assert summary["train_seconds_parts"] == {"cnn": 57.0, "flat": 0.1}


def test_the_report_shows_training_with_the_cnn_and_the_features_time_apart(tmp_path):
    metrics = _claims_metrics(0.5).assign(n_test=5000)
    summaries = [
        {"dataset": d, "title": d.capitalize(), "synthetic": False, "description": "", "features": f, "K": K, "D": 5,
         "N_train": 10, "N_validation": 1, "N_calibration": 1, "N_test": 5000, "top1_pct": 50.0, "train_seconds": t,
         "train_seconds_parts": parts, "features_seconds": fs}
        for d, f, K, t, parts, fs in (("small", "cnn", 10, 57.1, {"cnn": 57.0, "flat": 0.1}, 4.5),
                                      ("large", "vgg16", 1000, 3.0, {"flat": 3.0}, 812.34))
    ]
    config = {"utilities": UTILITIES, "run": ["small", "large"],
              "datasets": {"small": {"features": {"kind": "cnn"}}, "large": {"features": {"kind": "vgg16"}}}}
    html = build_report(tmp_path / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
                        utilities=UTILITIES, train_seconds={"large": {"svbop_hsg": 9.0}}).read_text()
    run = html[html.index('<table class="run-datasets">'):]
    run = run[:run.index("</table>")]
    assert re.search(r'train-seconds">57.1 <small>\(CNN 57.0, liblinear 0.1\)</small>', run)
    assert 'features-seconds">4.5<' in run and 'features-seconds">812.3<' in run
    t4 = html[html.index('id="table4-large"'):]
    assert re.search(r'<small class="t-features" data-seconds="812\.3">t<sub>features</sub> 812\.3 s</small>', t4[:600])
    t = table4_vs_paper(metrics, {"large": {"svbop_hsg": 9.0}}, {}, features_seconds={"large": 812.34})
    assert (t[t.dataset == "large"]["t_features_s"] == 812.34).all() and t[t.dataset == "small"]["t_features_s"].isna().all()


def test_table4_shows_the_median_test_time_with_its_spread_and_the_load(tmp_path):
    metrics = _claims_metrics(0.5).assign(n_test=5000)
    timed = metrics["method"].str.startswith("svbop_")
    metrics.loc[timed, "t_test_ms_min"] = metrics.loc[timed, "t_test_ms"] * 0.5
    metrics.loc[timed, "t_test_ms_max"] = metrics.loc[timed, "t_test_ms"] * 3
    metrics.loc[timed, "t_test_repeats"] = 3
    metrics.loc[timed, "load_start"], metrics.loc[timed, "load_end"], metrics.loc[timed, "cpu_count"] = 1.25, 3.5, 2
    metrics.loc[(metrics.dataset == "small") & timed, ["t_test_ms_min", "t_test_ms_max"]] = np.nan  # an old run's
    metrics.loc[(metrics.dataset == "small") & timed, ["t_test_repeats", "load_start", "load_end", "cpu_count"]] = np.nan
    t = table4_vs_paper(metrics, {}, {})
    hsg = t[(t.dataset == "large") & (t.algorithm == "HSG")].iloc[0]
    assert (hsg.t_test_ms, hsg.t_test_ms_min, hsg.t_test_ms_max, hsg.t_test_repeats) == (0.5, 0.25, 1.5, 3)
    assert (hsg.load_start, hsg.load_end, hsg.cpu_count) == (1.25, 3.5, 2)
    config = {"utilities": UTILITIES, "run": ["small", "large"], "datasets": {"small": {}, "large": {}}}
    summaries = [{"dataset": d, "title": d.capitalize(), "synthetic": False, "description": "", "features": "", "K": K, "D": 5,
                  "N_train": 10, "N_validation": 1, "N_calibration": 1, "N_test": 5000, "top1_pct": 50.0,
                  "train_seconds": 1.0}
                 for d, K in (("small", 10), ("large", 1000))]
    html = build_report(tmp_path / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
                        utilities=UTILITIES).read_text()
    large = html[html.index('id="table4-large"'):]
    large = large[:large.index("</p>")]
    row = large[large.index('data-algorithm="HSG"'):]
    assert re.search(r'data-ours="0\.500"[^>]*data-spread="0\.250–1\.500">0\.500<small class="spread">0\.250–1\.500</small>',
                     row)
    note = large[large.index('<p class="timing-note"'):]
    assert "median of 3 timed calls after one warm-up" in note and "load average 1.25–3.50" in note and "on 2 CPUs" in note
    small = html[html.index('id="table4-small"'):html.index('id="table4-large"')]
    assert "data-spread" not in small and "one timed call per algorithm" in small and "machine load unknown" in small


def test_the_scaling_figure_is_shown_in_table4_only_when_given(tmp_path):
    from svbop.report.figures import read_scaling

    metrics = _claims_metrics(0.5).assign(n_test=5000)
    config = {"utilities": UTILITIES, "run": ["large"], "datasets": {"large": {}}}
    summaries = [{"dataset": "large", "title": "Large", "synthetic": False, "description": "", "features": "", "K": 1000, "D": 5,
                  "N_train": 10, "N_validation": 1, "N_calibration": 1, "N_test": 5000, "top1_pct": 50.0,
                  "train_seconds": 1.0}]
    algorithms = {name: {"ms_per_row": ms, "ms_min": ms * 0.9, "ms_max": ms * 1.1, "ratio_to_full": ms / 0.1}
                  for name, ms in (("bare scoring", 0.08), ("Full (svbop)", 0.1), ("Full (paper)", 5.0), ("HF", 0.3))}
    scaling = {"meta": {"date": "2026-11-24 15:00 UTC", "cpu": "Test CPU", "threads": 1, "load_start": [1.5, 1, 1],
                        "load_end": [2.0, 1, 1]},
               "results": [{"K": K, "algorithms": {**algorithms, "HSG": {"skipped": "too slow"}}} for K in (1000, 10000)],
               "beats_full_from_K": {"HSG": None, "HF": 10000}}
    path = tmp_path / "scaling.json"
    path.write_text(json.dumps(scaling))
    html = build_report(tmp_path / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
                        utilities=UTILITIES, scaling=path).read_text()
    fig = html[html.index('id="scaling"'):]
    fig = unescape(fig[:fig.index("</figure>")])
    assert html.index('id="table4-large"') < html.index('id="scaling"') < html.index('id="claims"')
    assert "svbop's own measurement, beyond the paper" in fig and 'src="data:image/png;base64,' in fig
    assert "HF faster than svbop's Full from K = 10,000" in fig and "HSG not faster than svbop's Full at any K run" in fig
    assert "Test CPU" in fig and "1-minute load 1.50 at the start, 2.00 at the end" in fig
    html = build_report(tmp_path / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
                        utilities=UTILITIES).read_text()
    assert 'id="scaling"' not in html and "beyond the paper</strong> (not in the paper; synthetic" not in html
    # issue 49: trained models beside the random ones (dashed), and said in the caption
    trained = [{"K": 100000, "algorithms": {"HF": {"ms_per_row": 0.25, "ms_min": 0.2, "ms_max": 0.3}}}]
    path.write_text(json.dumps({**scaling, "trained": trained}))
    html = build_report(tmp_path / "report.html", summaries=summaries, metrics=metrics, figures=None, config=config,
                        utilities=UTILITIES, scaling=path).read_text()
    assert "trained HF (dashed): 0.25 ms per row at K = 100,000" in unescape(html)
    path.write_text(json.dumps({**scaling, "trained": [{"K": 1, "algorithms": {"HF": {"ms_per_row": -1}}}]}))
    with pytest.raises(ValueError, match=r"trained\[0\]\.algorithms\['HF'\]\.ms_per_row must be a positive"):
        read_scaling(path)
    path.write_text(json.dumps({**scaling, "results": [{"K": "many", "algorithms": {}}]}))
    with pytest.raises(ValueError, match=r"scaling\.json: results\[0\] needs an integer 'K'"):
        read_scaling(path)
    with pytest.raises(ValueError, match=r"nothere\.json: no such file"):
        read_scaling(tmp_path / "nothere.json")
