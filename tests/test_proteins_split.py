"""Proteins from the authors' own split: config.yaml's ``proteins`` entry reads ``TRAINVAL.csv`` and
``TEST.csv`` of tfmortie/svbop (columns ``enzyme``, ``fund``, ``label``), with no manual step.

The fixture is written here in that layout (synthetic sequences, 12 classes instead of 3,485, as
pandas writes a list column), under the file names the config gives them, so the config's own
``format``, ``hierarchy``, ``split`` and ``features.domains`` entries are what is tested.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import yaml

from svbop.config import SCHEMA, check_dataset, load_yaml, merge_configs, validate_config
from svbop.datasets import read_dataset
from svbop.datasets.splits import make_split
from svbop.features.domains import domain_encoding, read_domain_column, read_families
from svbop.features.tfidf import tfidf_strings
from svbop.report.status import missing_inputs
from test_workflow import ROOT

CONFIG = validate_config(load_yaml(ROOT / "config.yaml"))
ENTRY = CONFIG["datasets"]["proteins"]
K = 12
# The authors' hierarchy layout: a JSON list of the class-id sets of every node, root first.
NODES = [list(range(1, 13)), [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]
FAMILIES = ["1-cysPrx_C", "Pkinase", "SH2", "Globin", "zf-C2H2"]
# (label, families) of each row: the labels of a node share a domain, so the column is checkable.
TRAIN = [(c, ["Pkinase"] if c <= 6 else ["Globin", "zf-C2H2"] if c >= 10 else []) for c in list(range(1, 13)) * 3]
TEST = [(c, ["SH2", "Pkinase"] if c <= 3 else []) for c in (12, 2, 10, 1, 11, 3)]


def _sequence(rng, label: int) -> str:
    motif = "ACDEFGHIKLMNPQRSTVWY"[label % 20] * 3
    return "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=int(rng.integers(20, 40)))) + motif


def _write_split(folder: Path, rng) -> None:
    """TRAINVAL/TEST in the authors' layout under the config's names, plus the hierarchy and fams.txt."""
    files = {f: folder / f for f in ENTRY["files"]}
    for name, rows in (("proteins_TRAINVAL.csv", TRAIN), ("proteins_TEST.csv", TEST)):
        with open(files[name], "w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(["enzyme", "fund", "label"])
            for label, fams in rows:
                out.writerow([_sequence(rng, label), str(fams), label])  # str(list): "['SH2', 'Pkinase']"
    files["data_PROTEIN2_hierarchy_full.txt"].write_text(json.dumps(NODES, separators=(",", ":")))
    files["data_PROTEIN2_fams.txt"].write_text("\n".join(FAMILIES) + "\n")


@pytest.fixture
def raw(tmp_path, rng):
    _write_split(tmp_path, rng)
    return tmp_path


def test_the_proteins_entry_needs_no_manual_file(tmp_path):
    assert missing_inputs("proteins", ENTRY, root=tmp_path) == []
    assert all("url" in spec and "manual" not in spec for spec in ENTRY["files"].values())
    for spec in ENTRY["files"].values():
        assert "/tfmortie/svbop/4a6924323e1f7bf07c51e799c63f5ca9ef249cb8/data/PROTEIN2/" in spec["url"]
    assert ENTRY["split"]["test"] == "source" and ENTRY["format"]["parts"]["test"] == ["proteins_TEST.csv"]


def test_the_authors_split_reads_into_the_config_hierarchy_and_split(raw):
    ds = read_dataset(raw, ENTRY["format"], hierarchy=ENTRY["hierarchy"], name="proteins")
    assert ds.n_samples == len(TRAIN) + len(TEST) and ds.n_classes == K
    assert ds.part.tolist() == ["train"] * len(TRAIN) + ["test"] * len(TEST)
    # class names are the labels as written; the hierarchy finds them by name (they sort as strings)
    assert sorted(ds.class_names, key=int) == [str(c) for c in range(1, K + 1)]
    labels = [c for c, _ in TRAIN + TEST]
    assert [ds.class_names[i] for i in ds.y] == [str(c) for c in labels]
    h = ds.hierarchy
    for node in NODES[3:]:  # the leaves of each bottom node of the file share their parent
        parents = {int(h.parent[ds.class_names.index(str(c))]) for c in node}
        assert len(parents) == 1, node
        leaves = {ds.class_names[c] for c in np.flatnonzero(h.parent[:K] == parents.pop())}
        assert leaves == {str(c) for c in node}
    # the authors' TEST.csv is the test part, exactly
    split = make_split(ds.n_samples, ENTRY["split"], y=ds.y, part=ds.part, seed=0)
    assert split["test"].tolist() == list(range(len(TRAIN), len(TRAIN) + len(TEST)))
    assert set(split["train"]) | set(split["validation"]) | set(split["calibration"]) == set(range(len(TRAIN)))


def test_the_domain_column_joins_the_rows_it_was_read_with(raw):
    ds = read_dataset(raw, ENTRY["format"], hierarchy=ENTRY["hierarchy"], name="proteins")
    spec = ENTRY["features"]["domains"]
    families = read_families(raw / spec["families"])
    annotations = read_domain_column(raw, spec["from_csv"]["files"], spec["from_csv"]["column"])
    D = domain_encoding(ds.ids, annotations, families)
    expected = np.array([[f in fams for f in FAMILIES] for _, fams in TRAIN + TEST], dtype=np.float32)
    np.testing.assert_array_equal(D.toarray(), expected)
    # the paper's features: 3-mer tf-idf fitted on training rows, then the domain vector
    X = tfidf_strings(ds.X, np.flatnonzero(ds.part == "train"), analyzer="char", ngram_range=(3, 3), lowercase=False)
    full = sp.hstack([X, D], format="csr")
    assert full.shape == (ds.n_samples, X.shape[1] + len(FAMILIES))


def _commented_entry(name: str) -> dict:
    """The dataset entry config.yaml keeps commented out under ``# <name>:``, uncommented."""
    lines = (ROOT / "config.yaml").read_text().splitlines()
    start = lines.index(f"  # {name}:")
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("  #   "):
            break
        block.append(line)
    text = "\n".join(re.sub(r"^  # ", "", line) for line in block)
    return yaml.safe_load(text)


def test_the_deepre_alternative_left_in_the_config_still_validates():
    entry = _commented_entry("proteins_deepre")["proteins_deepre"]
    assert entry["features"]["domains"]["annotations"] == "proteins_pfam.domtblout"
    config = validate_config(merge_configs(load_yaml(ROOT / "config.yaml"), {"datasets": {"proteins_deepre": entry}}), SCHEMA)
    check_dataset("proteins_deepre", config["datasets"]["proteins_deepre"])
    manual = {m["file"] for m in missing_inputs("proteins_deepre", config["datasets"]["proteins_deepre"], root=ROOT / "none")}
    assert manual == {"proteins.fasta", "proteins_pfam.domtblout"}
