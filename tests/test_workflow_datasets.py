"""The pipeline's acquisition stage: the paper's 11 datasets plan, and a user adds datasets by config."""

import functools
import hashlib
import http.server
import threading
from pathlib import Path

import numpy as np
import pytest

from test_workflow import _copy_workflow, _read_tsv, _snakemake


def _workdir(path: Path) -> Path:
    path.mkdir()
    return _copy_workflow(path)

PAPER_DATASETS = (
    "mnist", "voc2006", "voc2007", "caltech101", "caltech256", "aloi_bin", "dbpedia", "bacteria",
    "proteins", "dmoz", "lshtc1",
)


MANUAL = {
    "bacteria": ("bacteria_16S.fasta",),
}


def test_default_config_plans_all_eleven_datasets(tmp_path):
    workdir = _workdir(tmp_path / "w")
    # without the manual downloads, those datasets are skipped, each named with its file, page and reason
    result = _snakemake("-n", "--cores", "4", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout + result.stderr
    for name, files in MANUAL.items():
        assert f"Not running dataset '{name}' (missing_data: skip)" in text
        assert f"results/{name}/metrics.tsv" not in text
        for file in files:
            assert f"data/{name}/downloads/{file}" in text
    assert "no public copy" in text and "results/report.html" in text
    assert "Shell command: None" not in text  # script jobs have no shell command to print (#29)
    # DBpedia needs no login: its three files are downloaded like the others
    assert "Not running dataset 'dbpedia'" not in text and "data/dbpedia/downloads/DBPEDIA_train.csv" in text
    stop = _snakemake("-n", "--cores", "4", "--config", "missing_data=stop", cwd=workdir)
    assert stop.returncode != 0 and "config: run: 'bacteria': missing bacteria_16S.fasta" in stop.stdout + stop.stderr
    # once the files are in place, all eleven are planned through to their metrics
    for name, files in MANUAL.items():
        (workdir / "data" / name / "downloads").mkdir(parents=True)
        for file in files:
            (workdir / "data" / name / "downloads" / file).write_text("placeholder\n")
    result = _snakemake("-n", "--cores", "4", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout + result.stderr
    assert "Not running dataset" not in text
    for name in PAPER_DATASETS:
        assert f"data/{name}/downloads/" in text, f"{name}: no download planned"
        assert f"results/{name}/metrics.tsv" in text, f"{name}: not planned through to its metrics"
        assert f"results/{name}/models/flat.npz" in text, f"{name}: no flat model planned"
    # the five largest datasets also get SVBOP-HSG's index and SVBOP-HF's trees (Table 4)
    for name in ("aloi_bin", "bacteria", "proteins", "dmoz", "lshtc1"):
        assert f"results/{name}/indexes/hnsw.bin" in text, f"{name}: no HNSW index planned"
        assert f"results/{name}/models/hf_kmeans.npz" in text, f"{name}: no balanced 2-means tree planned"
    for name in ("bacteria", "proteins"):
        assert f"results/{name}/models/hf_predefined.npz" in text, f"{name}: no predefined tree planned"
    assert "results/proteins/features/tfidf.npz" in text and "results/lshtc1/models/flat/part_15.npz" in text
    assert "results/report.html" in text


def _libsvm_files(folder: Path, rng) -> None:
    """Three well separated classes in 12 features (1-based libsvm indices), a train and a test file."""
    centres = rng.normal(0.0, 3.0, size=(3, 12))
    for name, n in (("train.svm", 240), ("test.svm", 90)):
        y = rng.integers(0, 3, size=n)
        X = centres[y] + rng.normal(0.0, 1.0, size=(n, 12))
        lines = [f"{10 * (c + 1)} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x)) for c, x in zip(y, X)]
        (folder / name).write_text("\n".join(lines) + "\n")


def _fasta_file(path: Path, rng) -> None:
    """Four genera in two families; each genus's sequences share a motif."""
    taxa = {
        "Alpha": "Bacteria; Firmicutes; Bacilli; Bacillales; Bacillaceae; Alpha",
        "Beta": "Bacteria; Firmicutes; Bacilli; Bacillales; Bacillaceae; Beta",
        "Gamma": "Bacteria; Proteobacteria; Gammaproteobacteria; Enterobacterales; Enterobacteriaceae; Gamma",
        "Delta": "Bacteria; Proteobacteria; Gammaproteobacteria; Enterobacterales; Enterobacteriaceae; Delta",
    }
    motifs = {g: "".join(rng.choice(list("ACGT"), size=12)) for g in taxa}
    records = []
    for i in range(160):
        genus = list(taxa)[i % 4]
        background = "".join(rng.choice(list("ACGT"), size=60))
        seq = background[:24] + motifs[genus] + background[24:] + motifs[genus]
        records.append(f">seq{i}\tsome organism {i}\t{i}|16s_rRNA\t{taxa[genus]}\n{seq[:50]}\n{seq[50:]}\n")
    path.write_text("".join(records))


def _genes_entry(path: Path, extra: str) -> str:
    """Config entry `mygenes`: the FASTA file of `_fasta_file` by path, 3-4-mer tf-idf, plus `extra`."""
    return f"""  mygenes:
    files:
      genes.fasta: {{path: "{path}"}}
    format: {{kind: fasta, parts: {{all: [genes.fasta]}}, label: taxonomy}}
    split: {{test: 0.25, validation: 0.1, calibration: 0.1}}
    features: {{kind: tfidf, analyzer: char, ngram_range: [3, 4], lowercase: false}}
    {extra}"""


@pytest.fixture
def http_folder(tmp_path):
    """A local HTTP server (127.0.0.1) serving tmp_path/served."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def added_datasets(tmp_path_factory):
    """One run of four datasets added by config entries only, no code (one pipeline run, shared by
    the tests below): ``mysvm``, libsvm files downloaded over HTTP from 127.0.0.1 (one with a pinned
    checksum); ``mygenes``, a FASTA file given by local path, with both kinds of tree; ``mybins``,
    random binning features and an HNSW index; ``myenzymes``, protein 3-mers with Pfam domains."""
    tmp_path = tmp_path_factory.mktemp("added")
    rng = np.random.default_rng(7)
    served = tmp_path / "served"
    served.mkdir()
    _libsvm_files(served, rng)
    local = tmp_path / "mine"
    local.mkdir()
    _fasta_file(local / "genes.fasta", rng)
    _libsvm_files(local, np.random.default_rng(11))
    _enzymes(local, np.random.default_rng(11))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    train_sha = hashlib.sha256((served / "train.svm").read_bytes()).hexdigest()
    workdir = _workdir(tmp_path / "work")
    (workdir / "mine.yaml").write_text(f"""
run: [mysvm, mygenes, mybins, myenzymes]
utilities: ["fbeta:beta=1", "fbeta:beta=5"]
utility_table: {{K: [10]}}
datasets:
  mysvm:
    files:
      train.svm: {{url: "{base}/train.svm", sha256: {train_sha}}}
      test.svm: {{url: "{base}/test.svm"}}
    format: {{kind: libsvm, parts: {{train: [train.svm], test: [test.svm]}}}}
    split: {{test: source, validation: 0.1, calibration: 0.1}}
    features: {{kind: raw}}
{_genes_entry(local / "genes.fasta", "flat: {C: 10}")}
    hf: {{enabled: true, trees: [predefined, kmeans], C: 10, max_leaves: 2, parts: 2}}
  mybins:
    files:
      train.svm: {{path: "{local / 'train.svm'}"}}
      test.svm: {{path: "{local / 'test.svm'}"}}
    format: {{kind: libsvm, parts: {{train: [train.svm], test: [test.svm]}}}}
    split: {{test: source, validation: 0.1, calibration: 0.1}}
    features: {{kind: binning, n_grids: 30}}
    flat: {{parts: 3}}
    hsg: {{enabled: true, M: 4, efC: 10, k: 2}}
  myenzymes:
    files:
      enzymes.fasta: {{path: "{local / 'enzymes.fasta'}"}}
      pfam.tsv: {{path: "{local / 'pfam.tsv'}"}}
      families.txt: {{path: "{local / 'families.txt'}"}}
    format: {{kind: fasta, parts: {{all: [enzymes.fasta]}}, label: regex, label_regex: "EC=(?P<label>[0-9.]+)"}}
    split: {{test: 0.25, validation: 0.1, calibration: 0.1}}
    features:
      kind: tfidf
      analyzer: char
      ngram_range: [3, 3]
      lowercase: false
      domains: {{families: families.txt, annotations: pfam.tsv}}
    hf: {{enabled: true, trees: [kmeans], max_leaves: 2}}
""")
    targets = [
        "results/mysvm/metrics.tsv", "results/mygenes/metrics.tsv",
        "results/mybins/indexes/hnsw.bin", "results/mybins/scores/flat.npz",
        "results/mygenes/models/hf_predefined.npz", "results/mygenes/models/hf_kmeans.npz",
        "results/myenzymes/models/hf_kmeans.npz", "results/myenzymes/scores/flat.npz",
    ]
    try:
        result = _snakemake(*targets, "--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir, served, local


def test_datasets_added_by_config_run_to_metrics(added_datasets):
    """A libsvm dataset downloaded over HTTP (one file with a pinned checksum) and a FASTA file
    given by local path: config entries only, no code, through to the metrics tables."""
    workdir, served, _ = added_datasets
    from svbop.datasets import Dataset, load_split

    svm = Dataset.load(workdir / "data/mysvm/dataset.npz")
    assert svm.class_names == ["10", "20", "30"] and svm.X.shape == (330, 12)
    split = load_split(workdir / "data/mysvm/split.npz")
    assert len(split["test"]) == 90 and np.all(split["test"] >= 240)  # the source's own test file
    # No checksum was known for test.svm: the first download's is recorded beside it.
    sidecar = workdir / "data/mysvm/downloads/test.svm.sha256"
    assert sidecar.read_text().split()[0] == hashlib.sha256((served / "test.svm").read_bytes()).hexdigest()

    genes = Dataset.load(workdir / "data/mygenes/dataset.npz")
    assert genes.x_kind == "sequences" and sorted(genes.class_names) == ["Alpha", "Beta", "Delta", "Gamma"]
    tree = genes.hierarchy
    alpha, gamma = genes.class_names.index("Alpha"), genes.class_names.index("Gamma")
    # One domain, so it is the root: phylum; class; order; family; genus lie below it.
    assert tree.depth()[alpha] == 5 and tree.node_names[tree.root] == "Bacteria"
    assert tree.node_names[tree.path(gamma)[1]] == "Proteobacteria"
    for name in ("mysvm", "mygenes"):
        rows = {(r["method"], r["param"]): r for r in _read_tsv(workdir / f"results/{name}/metrics.tsv")}
        assert float(rows["top_s", "1"]["recall_pct"]) > 80, f"{name}: the classes are easy to tell apart"
        assert float(rows["svbop_full", "fbeta_5"]["recall_pct"]) >= float(rows["top_s", "1"]["recall_pct"])
    assert (workdir / "results/logs/fetch/mysvm/train.svm.log").stat().st_size > 0


def test_manual_source_stops_naming_url_and_exact_path(tmp_path):
    workdir = _workdir(tmp_path / "work")
    (workdir / "manual.yaml").write_text("""
run: [gated]
datasets:
  gated:
    files:
      data.csv: {manual: {url: "https://example.org/behind-a-login"}}
    format: {kind: csv_text, parts: {train: [data.csv]}, text_column: text, label_column: label}
""")
    result = _snakemake("data/gated/dataset.npz", "--cores", "1", "--configfile", "manual.yaml", cwd=workdir)
    assert result.returncode != 0
    log = (workdir / "results/logs/fetch/gated/data.csv.log").read_text()
    expected = str((workdir / "data/gated/downloads/data.csv").resolve())
    assert "https://example.org/behind-a-login" in log and expected in log


def test_corrupt_download_is_rejected_by_the_pipeline(tmp_path, http_folder):
    served, base = http_folder
    (served / "x.svm").write_text("1 1:1\n2 2:1\n")
    workdir = _workdir(tmp_path / "work")
    (workdir / "bad.yaml").write_text(f"""
run: [bad]
datasets:
  bad:
    files:
      x.svm: {{url: "{base}/x.svm", sha256: "{'0' * 64}"}}
    format: {{kind: libsvm, parts: {{train: [x.svm]}}}}
""")
    result = _snakemake("data/bad/dataset.npz", "--cores", "1", "--configfile", "bad.yaml", cwd=workdir)
    assert result.returncode != 0
    assert not (workdir / "data/bad/downloads/x.svm").exists()
    assert (workdir / "data/bad/downloads/x.svm.corrupt").exists()
    log = (workdir / "results/logs/fetch/bad/x.svm.log").read_text()
    assert "0" * 64 in log and hashlib.sha256(b"1 1:1\n2 2:1\n").hexdigest() in log


def _enzymes(folder: Path, rng) -> None:
    """Protein records with an EC number in the header; each class has its own Pfam family, and a
    random tenth of the records lack their annotation."""
    amino = list("ACDEFGHIKLMNPQRSTVWY")
    families = [f"Fam{c}" for c in range(4)] + ["Unused_1"]
    fasta, tsv = [], ["# id<TAB>families"]
    for i in range(120):
        c = i % 4
        fasta.append(f">enz{i} EC=1.1.{c}.{c + 1}\n{''.join(rng.choice(amino, size=60))}\n")
        if rng.random() > 0.1:
            tsv.append(f"enz{i}\tFam{c}")
    (folder / "enzymes.fasta").write_text("".join(fasta))
    (folder / "pfam.tsv").write_text("\n".join(tsv) + "\n")
    (folder / "families.txt").write_text("\n".join(families) + "\n")


def test_binning_domains_trees_and_index_from_config(added_datasets):
    """Random binning features, Pfam domains appended to protein 3-mers, a predefined taxonomy tree
    (single-child chains collapsed), 2-means trees and HNSW indexes: config entries only."""
    workdir, _, local = added_datasets
    from svbop.datasets import Dataset, load_split
    from svbop.index import HNSWIndex
    from svbop.io import load_matrix
    from svbop.trees import TreeModel

    # random binning: one non-zero per grid on every training row, and the classes stay separable
    bins = load_matrix(workdir / "results/mybins/features/binning.npz")
    train = load_split(workdir / "data/mybins/split.npz")["train"]
    assert bins.shape[0] == 330 and np.all(np.diff(bins[train].indptr) == 30)
    with np.load(workdir / "results/mybins/scores/flat.npz") as scores:
        assert np.mean(scores["P_test"].argmax(axis=1) == scores["y_test"]) > 0.8
    assert HNSWIndex.load(workdir / "results/mybins/indexes/hnsw.bin").n_classes == 3

    # the taxonomy: root Bacteria -> 2 phyla (each a chain down to its family) -> 2 genera each
    predefined = TreeModel.load(workdir / "results/mygenes/models/hf_predefined.npz")
    assert predefined.tree.n_nodes == 4 + 3
    kmeans = TreeModel.load(workdir / "results/mygenes/models/hf_kmeans.npz")
    assert kmeans.tree.n_nodes == 4 + 3  # 4 classes, max_leaves 2: root and two halves

    # the enzymes: 3-mer tf-idf, then one binary column per listed Pfam family
    enzymes = Dataset.load(workdir / "data/myenzymes/dataset.npz")
    X = load_matrix(workdir / "results/myenzymes/features/tfidf.npz")
    domains = X[:, -5:].toarray()
    annotated = {line.split("\t")[0] for line in (local / "pfam.tsv").read_text().splitlines()[1:]}
    for row, (record, label) in enumerate(zip(enzymes.ids, enzymes.y)):
        family = int(enzymes.class_names[label].split(".")[2])
        expected = np.zeros(5)
        if record in annotated:
            expected[family] = 1.0
        np.testing.assert_array_equal(domains[row], expected)
    with np.load(workdir / "results/myenzymes/scores/flat.npz") as scores:
        assert np.mean(scores["P_test"].argmax(axis=1) == scores["y_test"]) > 0.8


def _good_and_broken(base: str) -> str:
    """A config of two datasets: `good` (libsvm over HTTP) and `broken` (its URL is a 404)."""
    return f"""
run: [good, broken]
utilities: ["fbeta:beta=1"]
baselines: {{top_s: [1], icp_epsilon: [0.1]}}
utility_table: {{K: [10]}}
datasets:
  good:
    title: "Good libsvm"
    files:
      train.svm: {{url: "{base}/train.svm"}}
      test.svm: {{url: "{base}/test.svm"}}
    format: {{kind: libsvm, parts: {{train: [train.svm], test: [test.svm]}}}}
    split: {{test: source, validation: 0.1, calibration: 0.1}}
    features: {{kind: raw}}
  broken:
    title: "Broken mirror"
    files:
      data.svm: {{url: "{base}/gone.svm"}}
    format: {{kind: libsvm, parts: {{all: [data.svm]}}}}
    features: {{kind: raw}}
"""


def test_a_failed_download_fails_the_run_but_the_report_shows_the_others(tmp_path, http_folder):
    """One unreachable file among the datasets: the run exits non-zero, the report is built from the
    dataset that finished and lists the failed one with its reason; fixing the source and rerunning
    runs only the failed dataset's jobs."""
    import re

    served, base = http_folder
    _libsvm_files(served, np.random.default_rng(3))
    workdir = _workdir(tmp_path / "work")
    (workdir / "mine.yaml").write_text(_good_and_broken(base))
    result = _snakemake("--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert "svbop: dataset 'broken' failed: fetch data.svm failed" in text
    assert not (workdir / "results/report.html").exists()  # only rule report_html writes it
    html = (workdir / "results/report.partial.html").read_text()
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r'<tr data-dataset="(good|broken)" data-status="([^"]+)">(.*?)</tr>', html, re.S)}
    assert rows["good"][0] == "run" and rows["broken"][0] == "failed"
    assert "HTTP 404" in rows["broken"][1] and f"{base}/gone.svm" in rows["broken"][1]
    assert "results/logs/fetch/broken/data.svm.log" in rows["broken"][1]
    assert 'id="table3-good"' in html and 'id="table3-broken"' not in html  # the good dataset's tables
    record = workdir / "results/status/failed/broken/fetch.data.svm.json"
    assert "HTTP 404" in record.read_text()
    good_metrics = (workdir / "results/good/metrics.tsv").stat().st_mtime

    (served / "gone.svm").write_bytes((served / "train.svm").read_bytes())  # the mirror is back
    result = _snakemake("--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not record.exists()
    assert (workdir / "results/good/metrics.tsv").stat().st_mtime == good_metrics  # not redone
    html = (workdir / "results/report.html").read_text()
    assert 'data-status="failed"' not in html and 'id="table3-broken"' in html
    assert not (workdir / "results/report.partial.html").exists()


def test_killed_during_prediction_reruns_without_extra_flags(tmp_path, http_folder):
    """SIGKILL mid-prediction: `snakemake --unlock` and a plain rerun complete.  A kill between a job's
    outputs (a prediction writes sets and timing) leaves an output Snakemake marks incomplete, which
    needs --rerun-incomplete: the default profile sets it, and is now where Snakemake finds it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    served, base = http_folder
    _libsvm_files(served, np.random.default_rng(4))
    workdir = _workdir(tmp_path / "work")
    (workdir / "mine.yaml").write_text(_good_and_broken(base).replace("run: [good, broken]", "run: [good]"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "mine.yaml"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.time() + 3000  # ten times what it takes here, under load
    logs = workdir / "results/logs"
    while time.time() < deadline and proc.poll() is None and not list(logs.glob("predict_*/*.log")):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=600)
    assert list(logs.glob("predict_*/*.log")), "the run never reached prediction"
    assert _snakemake("--unlock", "--configfile", "mine.yaml", cwd=workdir).returncode == 0
    result = _snakemake("--cores", "2", "--configfile", "mine.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout + result.stderr
    assert "Using workflow specific profile profiles/default" in text  # rerun-incomplete, keep-going
    assert "IncompleteFilesException" not in text
    assert (workdir / "results/report.html").exists()


def test_vgg16_weights_come_through_the_pipelines_fetch(tmp_path, http_folder):
    """VGG16's weights: fetched from a (local) URL with a pinned sha256 into data/pretrained/,
    features computed from that file and nothing downloaded behind the pipeline's back (TORCH_HOME
    stays empty); a corrupt copy is refused."""
    import os

    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from PIL import Image
    from torchvision.models import vgg16

    served, base = http_folder
    torch.manual_seed(0)
    convolutional = vgg16(weights=None).features  # torchvision's layout, random values, 59 MB
    torch.save({f"features.{k}": v for k, v in convolutional.state_dict().items()}, served / "vgg16-test.pth")
    sha256 = hashlib.sha256((served / "vgg16-test.pth").read_bytes()).hexdigest()
    import tarfile

    images = tmp_path / "images"
    rng = np.random.default_rng(0)
    for label in ("cats", "dogs"):
        (images / label).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(images / label / f"{i}.png")
    with tarfile.open(tmp_path / "images.tar", "w") as tar:
        tar.add(images, arcname="images")
    workdir = _workdir(tmp_path / "work")
    (workdir / "mine.yaml").write_text(f"""
run: [pics]
weights:
  vgg16_imagenet: {{url: "{base}/vgg16-test.pth", sha256: {sha256}}}
datasets:
  pics:
    files:
      images.tar: {{path: "{tmp_path / 'images.tar'}"}}
    unpack: [images.tar]
    format: {{kind: image_folder, parts: {{all: [images]}}}}
    features: {{kind: vgg16, batch_size: 2}}
""")
    env = {**os.environ, "TORCH_HOME": str(tmp_path / "torch_home")}
    result = _snakemake("results/pics/features/vgg16.npz", "--cores", "2", "--configfile", "mine.yaml", cwd=workdir, env=env)
    assert result.returncode == 0, result.stderr[-5000:]
    fetched = workdir / "data/pretrained/vgg16_imagenet.pth"
    assert hashlib.sha256(fetched.read_bytes()).hexdigest() == sha256
    assert "weights loaded from" in (workdir / "results/logs/features_vgg16/pics.log").read_text()
    assert not (tmp_path / "torch_home").exists()
    from svbop.datasets import Dataset
    from svbop.features.vgg16 import vgg16_features
    from svbop.io import load_matrix

    X = load_matrix(workdir / "results/pics/features/vgg16.npz")
    dataset = Dataset.load(workdir / "data/pics/dataset.npz")
    expected = vgg16_features(dataset.X, workdir / "data/pics/raw", model=convolutional.eval(), progress=False)
    assert X.shape == (4, 25088)
    np.testing.assert_allclose(X, expected, rtol=1e-4, atol=1e-5)  # the served weights, not torchvision's

    # a corrupt copy on the server is refused by the checksum: no weights file, no features
    data = (served / "vgg16-test.pth").read_bytes()
    (served / "vgg16-test.pth").write_bytes(data[:-64] + bytes(64))
    fetched.unlink()
    (workdir / "results/pics/features/vgg16.npz").unlink()
    result = _snakemake("results/pics/features/vgg16.npz", "--cores", "2", "--configfile", "mine.yaml", cwd=workdir, env=env)
    assert result.returncode != 0
    assert not fetched.exists() and fetched.with_name("vgg16_imagenet.pth.corrupt").exists()
    assert sha256 in (workdir / "results/logs/fetch_weights/vgg16_imagenet.log").read_text()
    assert not (workdir / "results/pics/features/vgg16.npz").exists()
    assert (workdir / "results/status/failed/_weights/vgg16_imagenet.json").exists()
