"""The Snakemake workflow: lint, schema validation, and real runs on a tiny configuration."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from conftest import REPORT_SECTIONS
import pytest
from watched import run_watched

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("snakemake", reason="snakemake is not installed (pip install -e '.[pipeline]')")

# Both quickstart datasets, shrunk: a few CNN epochs on the digits, 24 synthetic classes with
# every model kind (flat in 2 parts, both trees in 2 parts, the HNSW index).
TINY = """
run: [digits, synthetic]
utilities: ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "fbeta:beta=5"]
utility_table: {K: [10]}
report:
  illustrations:
    entropy: {dataset: digits}
    image_top: {dataset: digits}
    text_top: {dataset: synthetic}
datasets:
  digits:
    stand_in_for: MNIST
    features: {max_epochs: 4, channels: [8, 16, 16]}
  synthetic:
    title: "Tiny synthetic"
    stand_in_for: LSHTC1
    source:
      synthetic: {n_classes: 24, branching: [2, 3, 4], n_samples: 720, n_features: 2000}
    split: {validation: 0.15, calibration: 0.15, test: 0.25}
    features: {kind: tfidf}
    flat: {C: 10.0, parts: 2}
    hsg: {enabled: true, M: 8, efC: 50, k: 5}
    hf: {enabled: true, trees: [predefined, kmeans], C: 10.0, max_leaves: 4, parts: 2}
"""


def _snakemake(*args, cwd=ROOT, **kwargs):
    return run_watched([sys.executable, "-m", "snakemake", *args], cwd=cwd, **kwargs)  # stopped only if it hangs


def _copy_workflow(dest: Path) -> Path:
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("workflow", "envs", "report", "profiles"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore)
    (dest / "tiny.yaml").write_text(TINY)
    return dest


@pytest.fixture
def workdir(tmp_path):
    return _copy_workflow(tmp_path)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One complete run of the tiny configuration, shared by the tests that read its outputs."""
    workdir = _copy_workflow(tmp_path_factory.mktemp("run"))
    result = _snakemake("--cores", "2", "--configfile", "tiny.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def _read_tsv(path):
    lines = Path(path).read_text().splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def _planned_rules(workdir, *args):
    """Rule names of the jobs a dry run would execute."""
    result = _snakemake("-n", "--cores", "2", "--configfile", "tiny.yaml", "--quiet", "rules", *args, cwd=workdir)
    assert result.returncode == 0, result.stderr
    text = result.stdout + result.stderr
    if "Nothing to be done" in text:
        return set()
    rules = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            rules.add(parts[0])
    return rules


def test_lint_is_clean():
    result = _snakemake("--lint")
    assert result.returncode == 0, result.stderr
    assert "Lints for" not in result.stdout + result.stderr


def test_slurm_profile_plans_the_workflow():
    result = _snakemake("--profile", "workflow/profiles/slurm", "-n")
    assert result.returncode == 0, result.stderr
    assert "report_html" in result.stdout + result.stderr


def test_tiny_run_writes_report_and_sane_metrics(finished_run):
    workdir = finished_run
    html = (workdir / "results/report.html").read_text()
    assert "<table" in html and "data:image/png;base64," in html
    assert "synthetic" in html.lower()
    assert (workdir / "results/tables/table3_utilities.csv").exists()
    for dataset in ("digits", "synthetic"):
        summary = json.loads((workdir / f"results/{dataset}/summary.json").read_text())
        rows = {(r["method"], r["param"]): r for r in _read_tsv(workdir / f"results/{dataset}/metrics.tsv")}
        # SVBOP-Full (ours and as in the paper) and threshold per utility, top-1/3/5, ICP x2; on
        # synthetic also SVBOP-HSG and SVBOP-HF on both trees per utility
        assert len(rows) == 3 + 3 + 3 + 3 + 2 + (3 * 3 if dataset == "synthetic" else 0)
        accuracy = summary["top1_pct"]
        assert accuracy > 50, f"{dataset}: the flat model should learn something (top-1 {accuracy:.1f}%)"
        # The first class of an SVBOP-Full set is the most probable class: its hit rate is the accuracy.
        for label in ("fbeta_1", "credal_2.2_1.2", "fbeta_5"):
            assert float(rows["svbop_full", label]["top1_pct"]) == pytest.approx(accuracy, abs=1e-9)
        assert float(rows["top_s", "1"]["recall_pct"]) == pytest.approx(accuracy, abs=1e-9)
        # A larger beta rewards larger sets: recall and size grow with F-beta's beta.
        f1, f5 = rows["svbop_full", "fbeta_1"], rows["svbop_full", "fbeta_5"]
        assert float(f5["recall_pct"]) >= float(f1["recall_pct"])
        assert float(f5["mean_size"]) > float(f1["mean_size"])
        # SVBOP-Full is Bayes-optimal for the utility it optimises: with a calibrated model it is at
        # least as good as top-1 under that utility (both are evaluated on the same test rows).
        assert float(f1["fbeta_1_pct"]) >= float(rows["top_s", "1"]["fbeta_1_pct"]) - 1.0
        assert float(rows["top_s", "5"]["mean_size"]) == 5.0
        assert summary["N_test"] == int(rows["top_s", "1"]["n_test"])
    logs = list((workdir / "results/logs").rglob("*.log"))
    assert len(logs) >= 20 and all(log.stat().st_size > 0 for log in logs)
    assert (workdir / "results/benchmarks/train_flat/synthetic.tsv").exists()


def test_tiny_run_trains_flat_parts_trees_and_index_consistently(finished_run):
    from svbop.datasets import Dataset, load_split
    from svbop.index import HNSWIndex
    from svbop.io import load_matrix
    from svbop.linear import LinearModel, class_parts, train_ovr
    from svbop.trees import TreeModel, load_tree

    results = finished_run / "results/synthetic"
    dataset = Dataset.load(finished_run / "data/synthetic/dataset.npz")
    split = load_split(finished_run / "data/synthetic/split.npz")
    X = load_matrix(results / "features/tfidf.npz")
    flat = LinearModel.load(results / "models/flat.npz")
    # the two part jobs merge into exactly the model one job trains on the same rows
    whole = train_ovr(X[split["train"]], dataset.y[split["train"]], 24, C=10.0, eps=0.1, progress=False)
    assert np.array_equal(flat.W, whole.W) and np.array_equal(flat.b, whole.b)
    infos = [json.loads((results / f"models/flat/part_{i}.json").read_text()) for i in range(2)]
    assert [i["n_classes"] for i in infos] == [r.size for r in class_parts(24, 2)]
    test = X[split["test"]]
    for tree in ("predefined", "kmeans"):
        structure = load_tree(results / f"models/tree_{tree}.npz")
        model = TreeModel.load(results / f"models/hf_{tree}.npz")
        np.testing.assert_array_equal(model.tree.parent, structure.parent)
        P = model.predict_proba(test)
        np.testing.assert_allclose(P.sum(axis=1), 1.0)
        assert np.mean(P.argmax(axis=1) == dataset.y[split["test"]]) > 0.5
    # the predefined tree is the synthetic 2 x 3 x 4 hierarchy: 1 + 2 + 6 internal nodes
    assert load_tree(results / "models/tree_predefined.npz").n_nodes == 24 + 9
    index = HNSWIndex.load(results / "indexes/hnsw.bin")
    ids, scores = index.query(test, k=5, ef=24)
    exact = flat.decision_function(test)
    np.testing.assert_array_equal(ids[:, 0], exact.argmax(axis=1))
    np.testing.assert_allclose(scores[:, 0], exact.max(axis=1), rtol=1e-4, atol=1e-4)


UTILITY_LABELS = {"fbeta_1": "fbeta:beta=1", "credal_2.2_1.2": "credal:delta=2.2,gamma=1.2", "fbeta_5": "fbeta:beta=5"}
APPROXIMATE = ("svbop_hsg", "svbop_hf_predefined", "svbop_hf_kmeans")


def test_tiny_run_times_svbop_full_hsg_and_hf_and_compares_them_with_full(finished_run):
    import svbop
    from svbop.datasets import load_split
    from svbop.io import load_matrix, load_sets
    from svbop.linear import LinearModel
    from svbop.metrics import set_agreement
    from svbop.timing import TIMING_KEYS
    from svbop.trees import TreeModel

    for dataset, kind in (("digits", "cnn"), ("synthetic", "tfidf")):
        results = finished_run / f"results/{dataset}"
        rows = {(r["method"], r["param"]): r for r in _read_tsv(results / "metrics.tsv")}
        methods = ("svbop_full", "svbop_full_naive", *APPROXIMATE[: 3 if dataset == "synthetic" else 0])
        assert not {m for m, _ in rows if m.startswith("svbop_")} - set(methods)
        X = load_matrix(results / f"features/{kind}.npz")[load_split(finished_run / f"data/{dataset}/split.npz")["test"]]
        flat = LinearModel.load(results / "models/flat.npz")
        for label, spec in UTILITY_LABELS.items():
            for method in methods:
                row = rows[method, label]
                timing = json.loads((results / f"predictions/{method}/{label}.json").read_text())
                assert set(TIMING_KEYS) <= set(timing), f"{method} {label}: {sorted(timing)}"
                assert (timing["method"], timing["utility"], timing["threads"]) == (method, label, 1)
                assert timing["n_test"] == int(row["n_test"]) == X.shape[0]
                assert timing["seconds"] > 0 and timing["cpu_seconds"] >= 0
                assert timing["ms_per_sample"] == pytest.approx(1000 * timing["seconds"] / timing["n_test"])
                assert float(row["t_test_ms"]) == pytest.approx(timing["ms_per_sample"]) and float(row["t_test_ms"]) > 0
                # the median of timing: repeats (3 by default) calls, their spread and the load around them
                assert timing["repeats"] == 3 == len(timing["seconds_each"]) and float(row["t_test_repeats"]) == 3
                assert timing["seconds"] == pytest.approx(sorted(timing["seconds_each"])[1])
                assert timing["ms_per_sample_min"] <= timing["ms_per_sample"] <= timing["ms_per_sample_max"]
                assert float(row["t_test_ms_max"]) == pytest.approx(timing["ms_per_sample_max"])
                assert len(timing["load_start"]) == len(timing["load_end"]) == 3 and timing["cpu_count"] >= 1
                if method == "svbop_full":
                    assert row.get("agreement_with_full_pct", "") == row.get("speedup_vs_full", "") == ""
                    continue
                agreement = float(row["agreement_with_full_pct"])
                assert 0 <= agreement <= 100
                full_sets = load_sets(results / f"predictions/svbop_full/{label}.npz")
                own = load_sets(results / f"predictions/{method}/{label}.npz")
                assert agreement == pytest.approx(100 * set_agreement(own, full_sets))
                assert float(row["speedup_vs_full"]) == pytest.approx(
                    float(rows["svbop_full", label]["t_test_ms"]) / float(row["t_test_ms"]), rel=1e-6
                )
                if method == "svbop_full_naive":  # the paper's cost model, the same sets
                    assert own == full_sets and agreement == 100.0
                    continue
                assert float(row["speedup_vs_full_naive"]) == pytest.approx(
                    float(rows["svbop_full_naive", label]["t_test_ms"]) / float(row["t_test_ms"]), rel=1e-6
                )
            # SVBOP-Full from the model and features: the sets of the exact search on the probabilities
            saved = load_sets(results / f"predictions/svbop_full/{label}.npz")
            assert saved == svbop.predict_sets(flat.predict_proba(X), spec), f"{dataset} {label}"
            if dataset != "synthetic":
                continue
            hsg = json.loads((results / f"predictions/svbop_hsg/{label}.json").read_text())
            assert hsg["k"] == 5 and hsg["ef"] is None
            assert 0 < hsg["index_recall_pct"] <= 100
            assert float(rows["svbop_hsg", label]["index_recall_pct"]) == pytest.approx(hsg["index_recall_pct"])
            assert hsg["mean_queries"] >= 1 and hsg["mean_scored"] >= 5
            for tree in ("predefined", "kmeans"):
                hf = json.loads((results / f"predictions/svbop_hf_{tree}/{label}.json").read_text())
                assert hf["mean_expanded"] >= 1 and hf["mean_pulled"] >= 1
                # SVBOP-HF is exact with respect to its tree: the Bayes-optimal sets of the tree's probabilities
                model = TreeModel.load(results / f"models/hf_{tree}.npz")
                saved = load_sets(results / f"predictions/svbop_hf_{tree}/{label}.npz")
                assert saved == svbop.predict_sets(model.predict_proba(X), spec), f"{tree} {label}"
    assert (finished_run / "results/benchmarks/predict_svbop_hsg/synthetic_fbeta_1.tsv").exists()
    assert (finished_run / "results/benchmarks/predict_svbop_hf/synthetic_kmeans_fbeta_1.tsv").exists()
    # the report's Table 3 names the new methods
    html = (finished_run / "results/report.html").read_text()
    assert "SVBOP-HSG-u" in html and "SVBOP-HF<sub>p</sub>-u" in html and "SVBOP-HF<sub>c</sub>-u" in html


def test_rerun_is_a_no_op_and_deleting_a_model_reruns_only_its_dependants(finished_run):
    workdir = finished_run
    assert _planned_rules(workdir) == set()
    # the HNSW index (its graph file; the rule writes three more beside it): rebuilt, SVBOP-HSG rerun, the
    # tables and report redone; nothing upstream of it (the flat model it indexes) and no other method
    (workdir / "results/synthetic/indexes/hnsw.bin").unlink()
    planned = _planned_rules(workdir)
    assert {"build_index", "predict_svbop_hsg", "report_html"} <= planned
    assert not planned & {"prepare_dataset", "split_dataset", "features_cnn", "features_tfidf", "plot_utilities",
                          "train_flat", "train_flat_part", "score_flat", "predict_svbop_full", "predict_svbop_hf",
                          "predict_threshold"}
    result = _snakemake("--cores", "2", "--configfile", "tiny.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    assert _planned_rules(workdir) == set()


@pytest.mark.slow  # a second whole tiny run (about 90 s); the default run keeps the cheaper kill test of
# tests/test_workflow_datasets.py (killed mid-prediction, unlock, plain rerun)
def test_killed_run_leaves_no_finished_looking_output_and_rerun_completes(workdir):
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "tiny.yaml"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.time() + 3000  # ten times what it takes here, under load
    started = workdir / "results/logs/features_cnn/digits.log"
    while time.time() < deadline and proc.poll() is None and not started.exists():
        time.sleep(0.2)
    time.sleep(1.0)  # mid-way through CNN training (and whatever else runs beside it)
    os.killpg(proc.pid, signal.SIGKILL)  # the harshest interruption: no clean-up at all
    proc.wait(timeout=600)
    assert not (workdir / "results/report.html").exists()
    for path in (workdir / "results").rglob("*.npz"):  # whatever exists is complete and readable
        with np.load(path) as data:
            [data[name] for name in data.files]
    unlock = _snakemake("--unlock", "--configfile", "tiny.yaml", cwd=workdir)
    assert unlock.returncode == 0, unlock.stderr
    result = _snakemake("--cores", "2", "--configfile", "tiny.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    assert (workdir / "results/report.html").exists()
    assert _planned_rules(workdir) == set()


@pytest.mark.parametrize(
    "extra, message",
    [
        ("utilitys:\n  - fbeta\n", "utilitys"),
        ("utility_table:\n  K: [ten]\n", "ten"),
        ("datasets:\n  digits:\n    flat: {C: high}\n", "high"),
        ("run: [digitz]\n", "digitz"),
    ],
)
def test_config_errors_name_the_key(workdir, extra, message):
    (workdir / "bad.yaml").write_text(extra)
    result = _snakemake("-n", "--configfile", "bad.yaml", cwd=workdir)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr


def test_tiny_report_has_every_section_and_its_tables_come_from_the_metrics(finished_run):
    import pandas as pd

    results = finished_run / "results"
    html = (results / "report.html").read_text()
    for section in REPORT_SECTIONS:
        assert f'<section id="{section}">' in html, section
    # every configured dataset has a status; the paper's datasets that did not run are listed as such
    status = pd.read_csv(results / "tables/dataset_status.csv", keep_default_na=False)
    by = status.set_index("title")
    assert set(status[status.dataset != ""].dataset) >= {"digits", "synthetic", "mnist", "voc2006", "lshtc1_dryrun"}
    assert status.set_index("dataset").loc["synthetic", "relation"] == "stand-in"
    assert by.loc["VOC 2006", "status"] == "not run: not in run"
    for name in ("table2_vs_paper", "table3_vs_paper", "table4_vs_paper", "table5_vs_paper"):
        assert (results / f"tables/{name}.tex").read_text().lstrip().startswith("\\begin{tabular}"), name
        assert f'href="tables/{name}.csv"' in html
    # Table 3 against the paper: our column is the metrics file's, the paper's the packaged CSV's
    t3 = pd.read_csv(results / "tables/table3_vs_paper.csv", dtype={"param": str})
    for dataset in ("digits", "synthetic"):
        metrics = pd.read_csv(results / f"{dataset}/metrics.tsv", sep="\t", dtype={"param": str})
        mine = t3[t3.dataset == dataset]
        for r in mine.itertuples():
            src = metrics[(metrics.method == r.method) & (metrics.param == r.param)].iloc[0]
            assert r.ours == pytest.approx(src[f"{r.eval_utility}_pct"])
    lshtc = t3[(t3.dataset == "synthetic") & t3.paper.notna()]
    # 3 utilities: SVBOP-Full and threshold for each, top-1/3/5, ICP at 2 levels = 11 rows, 3 columns each
    assert len(lshtc) == 11 * 3 and np.allclose(lshtc.ours - lshtc.paper, lshtc["diff"])
    # Table 4: each SVBOP algorithm's measures are its metrics row's; train times its model files'
    t4 = pd.read_csv(results / "tables/table4_vs_paper.csv")
    metrics = pd.read_csv(results / "synthetic/metrics.tsv", sep="\t", dtype={"param": str})
    from svbop.report.compare import ALGORITHMS

    syn = t4[t4.dataset == "synthetic"]
    assert sorted(set(syn.algorithm)) == ["Full", "Full_svbop", "HF_c", "HF_p", "HSG"]
    for r in syn.itertuples():
        src = metrics[(metrics.method == ALGORITHMS[r.algorithm]) & (metrics.param == r.utility)].iloc[0]
        assert (r.utility_pct, r.recall_pct, r.set_size, r.t_test_ms) == pytest.approx(
            (src[f"{r.utility}_pct"], src["recall_pct"], src["mean_size"], src["t_test_ms"]))
        if r.algorithm != "Full_svbop":
            assert r.t_test_ms_paper > 0  # the paper's LSHTC1 row, beside ours
    flat = json.loads((results / "synthetic/models/flat.json").read_text())["train_seconds"]
    index = json.loads((results / "synthetic/indexes/hnsw.json").read_text())["build_seconds"]
    assert syn[syn.algorithm == "HSG"].t_train_s.iloc[0] == pytest.approx(flat + index)
    # the illustrations: digits images drawn, the sparse synthetic data is not text
    entropy = json.loads((results / "illustrations/entropy.json").read_text())
    assert entropy["status"] == "ok" and len(entropy["records"]) == 3
    H = [r["entropy_bits"] for r in entropy["records"]]
    assert H == sorted(H)
    assert json.loads((results / "illustrations/text_top.json").read_text())["status"] == "not applicable"
    assert 'id="illustration-entropy"' in html and 'alt="illustration entropy from digits"' in html


def test_tiny_report_in_a_real_browser(finished_run, tmp_path):
    from browser import chromium_executable, inspect_page, unreadable

    if chromium_executable() is None:
        pytest.skip("Chromium not installed (Debian package chromium): the report is not checked in a browser")
    seen = inspect_page(finished_run / "results/report.html", screenshot=tmp_path / "report.png")
    assert seen["broken_images"] == [] and seen["errors"] == []
    assert len(seen["images"]) >= 5
    classes = {t["class"] for t in seen["tables"] if t["rows"] > 0}
    assert {"status", "table2", "table2-paper", "table3", "table4", "claims", "table5"} <= classes
    assert set(REPORT_SECTIONS) <= set(seen["sections"])
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")
    # it reads like the paper: no LaTeX label or key in the prose, the status on one screen, legible text
    import yaml

    keys = [k for k in yaml.safe_load((finished_run / "config.yaml").read_text())["datasets"] if re.search(r"[\d_]", k)]
    assert unreadable(seen, keys=keys) == []
    assert all(im["min_font_px"] for im in seen["images"])  # every figure is svbop's and says its smallest font


def test_report_screenshot_is_a_named_target(finished_run):
    """report/screenshot.png: the first screen at 1280 x 900, only when asked for; without Chromium
    the run stops before any job and says how to install it."""
    from browser import chromium_executable

    assert "report_screenshot" not in _planned_rules(finished_run)  # not part of `all`
    env = dict(os.environ, SVBOP_CHROMIUM=str(finished_run / "no-such-chromium"))
    result = _snakemake("--cores", "1", "report/screenshot.png", "--configfile", "tiny.yaml", cwd=finished_run, env=env)
    assert result.returncode != 0 and "apt-get install chromium" in result.stdout + result.stderr
    assert (finished_run / "report/screenshot.png").exists()  # the repository's copy is left alone
    if chromium_executable() is None:
        pytest.skip("Chromium not installed (Debian package chromium): the screenshot is not taken")
    (finished_run / "report/screenshot.png").unlink()
    result = _snakemake("--cores", "1", "report/screenshot.png", "--configfile", "tiny.yaml", cwd=finished_run)
    assert result.returncode == 0, result.stderr[-3000:]
    from PIL import Image

    assert Image.open(finished_run / "report/screenshot.png").size == (1280, 900)
