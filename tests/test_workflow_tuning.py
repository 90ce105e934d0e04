"""The pipeline's `auto` hyper-parameters (rules/tune.smk) and a user's override of a built-in dataset's files."""

import json
import tarfile
from pathlib import Path


from test_workflow import _copy_workflow, _read_tsv, _snakemake

# One tiny synthetic dataset whose flat C is chosen from three values, the 2-means tree's l from two
# (C: auto, one value) and HSG's ef from two (k: auto, one value); kept small: each point is a job.
TUNED = """
run: [synthetic]
utilities: ["fbeta:beta=1"]
utility_table: {K: [10]}
tuning: {C_grid: [0.001, 1.0, 1000.0], hf_C_grid: [10.0], max_leaves_grid: [3, 6], hsg_k_grid: [2],
         hsg_ef_grid: [4, 16]}
report:
  illustrations: {}
datasets:
  synthetic:
    title: "Tiny synthetic"
    source:
      synthetic: {n_classes: 12, branching: [3, 4], n_samples: 360, n_features: 500}
    split: {validation: 0.2, calibration: 0.15, test: 0.25}
    features: {kind: tfidf}
    flat: {C: auto, parts: 2}
    hsg: {enabled: true, M: 4, efC: 10, k: auto, ef: auto}
    hf: {enabled: true, trees: [kmeans], C: auto, max_leaves: auto}
"""


def _workdir(path: Path, text: str) -> Path:
    path.mkdir()
    _copy_workflow(path)
    (path / "tiny.yaml").write_text(text)
    return path


def test_auto_runs_one_job_per_grid_point_and_its_choice_reaches_table5(tmp_path):
    workdir = _workdir(tmp_path / "w", TUNED)
    result = _snakemake("--cores", "2", "results/tables/table5_vs_paper.csv", "--configfile", "tiny.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    results = workdir / "results"
    # one job per grid point, each with its time and memory in results/benchmarks
    for label in ("0.001", "1", "1000"):
        assert (results / "synthetic" / "tuning" / "flat" / f"C_{label}_eps_0.1.json").is_file()
        bench = _read_tsv(results / "benchmarks" / "tune_flat_point" / f"synthetic_C_{label}_eps_0.1.tsv")
        assert float(bench[0]["s"]) > 0 and "max_rss" in bench[0]
    points = _read_tsv(results / "synthetic" / "tuning" / "flat.tsv")
    assert len(points) == 3
    best = min(points, key=lambda r: float(r["validation_log_loss"]))
    assert [r["chosen"] for r in points].count("True") == 1 and best["chosen"] == "True"
    choice = json.loads((results / "synthetic" / "tuning" / "flat.json").read_text())
    assert choice["C"] == float(best["C"]) and choice["score"] == "validation_log_loss"
    # the flat model was trained with the chosen C, and says where it came from
    info = json.loads((results / "synthetic" / "models" / "flat.json").read_text())
    assert info["C"] == choice["C"] and info["tuning"]["grid"]["C"] == [0.001, 1.0, 1000.0]
    # Table 5 shows it, with the grid and any edge
    t5 = (results / "tables" / "table5_vs_paper.csv").read_text()
    assert f"auto: chose {choice['C']:g} from grid 0.001, 1, 1000" in t5
    assert (choice["edge"]["C"] != "") == ("may lie beyond the grid" in t5)
    # hf: {C, max_leaves: auto}: one job per point of the 2-means tree, and the tree built with the chosen l
    hf = json.loads((results / "synthetic" / "tuning" / "hf_kmeans.json").read_text())
    hf_points = _read_tsv(results / "synthetic" / "tuning" / "hf_kmeans.tsv")
    assert len(hf_points) == 2 and hf["score"] == "validation_log_loss"
    assert hf["max_leaves"] == int(float(min(hf_points, key=lambda r: float(r["validation_log_loss"]))["max_leaves"]))
    for label in ("3", "6"):
        assert (results / "benchmarks" / "tune_hf_point" / f"synthetic_kmeans_C_10_eps_0.1_max_leaves_{label}.tsv").is_file()
        assert (results / "logs" / "tune_hf_point" / f"synthetic_kmeans_C_10_eps_0.1_max_leaves_{label}.log").is_file()
    tree = json.loads((results / "synthetic" / "models" / "tree_kmeans.json").read_text())
    model = json.loads((results / "synthetic" / "models" / "hf_kmeans.json").read_text())
    assert tree["max_leaves"] == hf["max_leaves"] and model["C"] == 10.0 and model["tuning"]["grid"]["max_leaves"] == [3, 6]
    assert f"kmeans tree: auto: chose {hf['max_leaves']} from grid 3, 6" in t5
    # hsg: {k, ef: auto}: one job per (k, ef) with the one index; the chosen values reach the test predictions
    hsg = json.loads((results / "synthetic" / "tuning" / "hsg.json").read_text())
    hsg_points = _read_tsv(results / "synthetic" / "tuning" / "hsg.tsv")
    assert [(r["k"], r["ef"]) for r in hsg_points] == [("2", "4"), ("2", "16")]
    for label in ("k_2_ef_4", "k_2_ef_16"):
        assert (results / "benchmarks" / "tune_hsg_point" / f"synthetic_{label}.tsv").is_file()
    within = [r for r in hsg_points if r["within"] == "True"]
    assert hsg["reached"] == bool(within) and hsg["utility"] == "fbeta_1"
    assert hsg["ef"] == (int(within[0]["ef"]) if within else 16)  # the cheapest within the tolerance
    timing = json.loads((results / "synthetic" / "predictions" / "svbop_hsg" / "fbeta_1.json").read_text())
    assert (timing["k"], timing["ef"]) == (hsg["k"], hsg["ef"])
    assert f"auto: chose {hsg['ef']} from grid 4, 16" in t5


def test_the_paper_datasets_keep_table5_values_and_plan_no_tuning(tmp_path):
    workdir = _workdir(tmp_path / "w", "run: [dbpedia, lshtc1]\nmissing_data: skip\n")
    result = _snakemake("-n", "--cores", "2", "--configfile", "tiny.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tune_flat" not in result.stdout + result.stderr


def test_a_configfile_entry_for_a_builtin_dataset_replaces_its_files(tmp_path):
    archive = tmp_path / "101_ObjectCategories.tar.gz"
    folder = tmp_path / "101_ObjectCategories" / "cats"
    folder.mkdir(parents=True)
    (folder / "a.jpg").write_bytes(b"not really")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder.parent, arcname="101_ObjectCategories")
    override = f"""
run: [caltech101]
datasets:
  caltech101:
    files:
      101_ObjectCategories.tar.gz: {{path: {archive}}}
    unpack: [101_ObjectCategories.tar.gz]
    format: {{parts: {{all: [101_ObjectCategories]}}}}
"""
    workdir = _workdir(tmp_path / "w", override)
    result = _snakemake("-n", "--cores", "2", "--configfile", "tiny.yaml", cwd=workdir)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "data/caltech101/downloads/101_ObjectCategories.tar.gz" in text
    assert "caltech-101.zip" not in text  # the built-in file is no longer planned for download
    assert "datasets.caltech101.files: the --configfile's file list replaces config.yaml's" in text
