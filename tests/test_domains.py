"""Pfam functional-domain encoding (the Proteins features) and the record ids it joins on.

Fixtures in ``tests/fixtures/formats/domains`` are hand-written in the layouts of pfam_scan.pl
output and of ``hmmscan --domtblout`` / ``--tblout`` (and an ``hmmsearch --tblout``); all of them
describe the same hits on the records of ``enzymes.fasta``:

    PIT1  Pou, Homeobox        HBA    Globin          BCL2   Bcl-2, BH4
    IGHG1 C1-set (twice; not in families.txt)         NODOM  no hits
    EXTRA Globin (a sequence that is not in the FASTA file)

The CSV files of the domain-column tests are written per test, in the layout of the authors'
Proteins split (``enzyme,fund,label``).
"""

from __future__ import annotations

import gzip
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import need_shared_data
from svbop.datasets import base
from svbop.datasets.base import Dataset, encode_strings
from svbop.datasets.fasta import read_fasta
from svbop.features.domains import (
    DOMAIN_FORMATS,
    domain_encoding,
    family_key,
    read_domain_annotations,
    read_domain_column,
    read_families,
)
from svbop.io import save_arrays

DOMAINS = Path(__file__).resolve().parent / "fixtures" / "formats" / "domains"
FILES = {"pfam_scan": "pfam_scan.txt", "domtblout": "hmmscan.domtblout", "tblout": "hmmscan.tblout", "tsv": "domains.tsv"}

PIT1, HBA, BCL2, IGHG1, NODOM, EXTRA = (
    "sp|P28069|PIT1_HUMAN", "sp|P69905|HBA_HUMAN", "sp|P10415|BCL2_HUMAN", "sp|P01857|IGHG1_HUMAN",
    "sp|Q9XXX0|NODOM_HUMAN", "sp|P99999|EXTRA_HUMAN",
)
FASTA_IDS = [HBA, BCL2, IGHG1, PIT1, NODOM]
FAMILIES = ["Globin", "PF00452.13", "BH4", "Pou", "Homeobox"]  # Bcl-2 by its accession (older version)
# Rows in FASTA order, columns in families.txt order.
EXPECTED = np.array(
    [
        [1, 0, 0, 0, 0],  # HBA: Globin
        [0, 1, 1, 0, 0],  # BCL2: Bcl-2 (matched by accession PF00452.19 ~ PF00452.13), BH4
        [0, 0, 0, 0, 0],  # IGHG1: C1-set only, not listed
        [0, 0, 0, 1, 1],  # PIT1: Pou, Homeobox
        [0, 0, 0, 0, 0],  # NODOM: no annotation
    ],
    dtype=np.float32,
)


def error_of(func, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        func(*args, **kwargs)
    return str(info.value)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ families
def test_family_key_drops_accession_versions_only():
    assert family_key("PF00042.22") == family_key("PF00042") == "PF00042"
    assert family_key("PB000123.4") == "PB000123"
    assert family_key("Globin") == "Globin"
    assert family_key("DUF1.2") == "DUF1.2"  # a name with a dot stays as it is
    assert family_key("pf00042.22") == "pf00042.22"  # accessions are upper case


def test_read_families_skips_blank_lines_and_keeps_entries_as_written():
    assert read_families(DOMAINS / "families.txt") == FAMILIES


def test_read_families_gzip(tmp_path):
    path = tmp_path / "fams.txt.gz"
    path.write_bytes(gzip.compress(b"Globin\n  BH4  \r\n"))
    assert read_families(path) == ["Globin", "BH4"]


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("Globin\nBH4\n\nGlobin\n", 4, "family 'Globin' is listed twice, first at line 1"),
        ("PF00042.22\nPF00042.17\n", 2, "family 'PF00042.17' is listed twice, first at line 1 ('PF00042.22'; accession versions are ignored)"),
        ("Globin\nPF00042.22 Globin\n", 2, "expected one family name or accession per line, got 2 words"),
    ],
)
def test_read_families_errors_name_file_and_line(tmp_path, text, line, what):
    path = write(tmp_path, "fams.txt", text)
    assert error_of(read_families, path).startswith(f"{path}:{line}: {what}")


def test_read_families_empty_and_missing(tmp_path):
    path = write(tmp_path, "fams.txt", "\n  \n")
    assert error_of(read_families, path) == f"{path}: no family names"
    assert error_of(read_families, tmp_path / "absent.txt") == f"{tmp_path / 'absent.txt'}: no such family list"


@pytest.mark.realdata
def test_real_family_list_of_the_authors():
    folder = need_shared_data("proteins-hierarchy", "the authors' Proteins hierarchy and Pfam family list")
    names = read_families(folder / "data_PROTEIN2_fams.txt")
    assert len(names) == 17929 and len(set(names)) == 17929
    assert names[0] == "1-cysPrx_C" and names[-1] == "ZZ"
    assert not any(family_key(n).startswith("PF") and family_key(n) != n for n in names)


# ------------------------------------------------------------------------------ annotation files
def test_pfam_scan_output_gives_names_and_accessions():
    ann = read_domain_annotations(DOMAINS / FILES["pfam_scan"])
    assert ann == {
        PIT1: {"Pou", "PF00157", "Homeobox", "PF00046"},
        HBA: {"Globin", "PF00042"},
        BCL2: {"Bcl-2", "PF00452", "BH4", "PF02180"},
        IGHG1: {"C1-set", "PF07654"},
        EXTRA: {"Globin", "PF00042"},
    }


@pytest.mark.parametrize("fmt", ["domtblout", "tblout"])
def test_hmmscan_tables_give_the_same_annotations_as_pfam_scan(fmt):
    assert read_domain_annotations(DOMAINS / FILES[fmt]) == read_domain_annotations(DOMAINS / FILES["pfam_scan"])


def test_tsv_lists_names_or_accessions_and_joins_repeated_sequences():
    ann = read_domain_annotations(DOMAINS / FILES["tsv"])
    assert ann == {
        PIT1: {"Pou", "Homeobox"},
        HBA: {"Globin"},
        BCL2: {"PF00452", "BH4"},
        IGHG1: {"C1-set"},  # listed on two lines, one of them empty
        EXTRA: {"Globin"},
    }


@pytest.mark.parametrize("fmt", DOMAIN_FORMATS)
def test_auto_detection_agrees_with_the_explicit_format(fmt, caplog):
    with caplog.at_level(logging.INFO, logger="svbop.features.domains"):
        auto = read_domain_annotations(DOMAINS / FILES[fmt])
    assert auto == read_domain_annotations(DOMAINS / FILES[fmt], format=fmt)
    assert f"({fmt}" in caplog.text


def test_hmmsearch_table_is_read_with_the_roles_swapped():
    ann = read_domain_annotations(DOMAINS / "hmmsearch.tblout")
    full = read_domain_annotations(DOMAINS / FILES["pfam_scan"])
    assert ann == {k: full[k] for k in (PIT1, HBA, BCL2)}


def test_a_table_of_another_program_is_refused(tmp_path):
    text = (DOMAINS / "hmmscan.tblout").read_text().replace("# Program:         hmmscan", "# Program:         phmmer")
    path = write(tmp_path, "phmmer.tblout", text)
    line = text.splitlines().index("# Program:         phmmer") + 1
    assert error_of(read_domain_annotations, path).startswith(f"{path}:{line}: a table of 'phmmer'")


def test_annotation_files_may_be_compressed(tmp_path):
    path = tmp_path / "pfam_scan.txt.gz"
    with open(DOMAINS / FILES["pfam_scan"], "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert read_domain_annotations(path) == read_domain_annotations(DOMAINS / FILES["pfam_scan"])


def test_only_comments_give_no_annotations(tmp_path, caplog):
    path = write(tmp_path, "empty.txt", "# pfam_scan.pl, no hits\n\n")
    with caplog.at_level(logging.WARNING, logger="svbop.features.domains"):
        assert read_domain_annotations(path) == {}
    assert "no annotation lines" in caplog.text


def _with_line(fmt: str, bad: str, at: int = 1) -> tuple[str, int]:
    """The fixture of ``fmt`` with its ``at``-th data line replaced by ``bad``, and that line's number."""
    lines = (DOMAINS / FILES[fmt]).read_text().splitlines(keepends=True)
    data = [i for i, s in enumerate(lines) if s.strip() and not s.startswith("#")]
    lines[data[at]] = bad + "\n"
    return "".join(lines), data[at] + 1


@pytest.mark.parametrize(
    "fmt, bad, what",
    [
        ("pfam_scan", "sp|X|Y    12    x97      9     98 PF07654.15  C1-set  Domain     2    86    89     72.3   9.9e-20   1 CL0011",
         "not a line of pfam_scan.pl output"),
        ("pfam_scan", "sp|X|Y    12    97      9     98 PF07654.15  C1-set  Domain", "not a line of pfam_scan.pl output"),
        ("domtblout", "C1-set  PF07654.15    89 sp|X|Y -   98   9.9e-20   72.3   0.2   1   2", "not a line of hmmscan --domtblout table"),
        ("tblout", "C1-set  PF07654.15 sp|X|Y -   9.9e-20   72.3   0.2   9.9e-20   72.3   0.2   1.4   2   0   0   2   2   x   1 desc",
         "not a line of hmmscan --tblout table"),
        ("tsv", "sp|X|Y\tGlobin\tBH4", "not a two tab-separated columns"),
        ("tsv", "sp|X|Y\tGlobin, Bcl 2", "family 'Bcl 2' contains white space"),
    ],
)
def test_malformed_lines_are_named(tmp_path, fmt, bad, what):
    text, line = _with_line(fmt, bad)
    path = write(tmp_path, "bad.txt", text)
    for format in ("auto", fmt):
        assert error_of(read_domain_annotations, path, format=format).startswith(f"{path}:{line}: {what}")


def test_undetectable_format_and_wrong_explicit_format(tmp_path):
    path = write(tmp_path, "x.txt", "# comment\n\nseq1 Globin BH4\n")
    assert error_of(read_domain_annotations, path).startswith(f"{path}:3: cannot tell the annotation format")
    msg = error_of(read_domain_annotations, DOMAINS / FILES["pfam_scan"], format="domtblout")
    assert msg.startswith(f"{DOMAINS / FILES['pfam_scan']}:11: not a line of hmmscan --domtblout table")
    assert "format: 'xml' is not 'auto'" in error_of(read_domain_annotations, path, format="xml")
    assert error_of(read_domain_annotations, tmp_path / "absent") == f"{tmp_path / 'absent'}: no such annotation file"


# ------------------------------------------------------------------------------ encoding
def test_encoding_known_answer_on_a_tiny_example(caplog):
    families = ["Globin", "PF00452", "BH4"]
    annotations = {
        "s2": ["BH4", "PF00452.19", "Bcl-2"],  # Bcl-2 matched by accession; its name is not in the list
        "s1": {"Globin", "PF00042"},  # the list is mixed, so the unlisted accession PF00042 counts as ignored
        "s4": {"Ig_3"},  # annotated, but with no listed family
        "other": {"Globin"},  # not among the ids
    }
    with caplog.at_level(logging.INFO, logger="svbop.features.domains"):
        X = domain_encoding(["s1", "s2", "s3", "s4"], annotations, families)
    assert isinstance(X, sp.csr_matrix) and X.dtype == np.float32 and X.shape == (4, 3)
    assert X.has_sorted_indices
    np.testing.assert_array_equal(X.toarray(), [[1, 0, 0], [0, 1, 1], [0, 0, 0], [0, 0, 0]])
    assert "1 absent from the annotations" in caplog.text
    assert "1 annotated with no listed family" in caplog.text
    assert "ignored 3 annotated family identifiers that match no listed family (e.g. Bcl-2, Ig_3, PF00042)" in caplog.text
    assert "1 annotated sequences are not among the ids" in caplog.text


def test_a_list_of_names_does_not_count_accessions_as_ignored(caplog):
    with caplog.at_level(logging.DEBUG, logger="svbop.features.domains"):
        domain_encoding(["a"], {"a": {"Globin", "PF00042", "Ig_3", "PF13927"}}, ["Globin", "BH4"])
    assert "ignored 1 annotated family identifiers that match no listed family (e.g. Ig_3)" in caplog.text
    assert "2 annotated accessions not compared (the family list holds none)" in caplog.text


def test_a_family_found_by_name_and_accession_counts_once():
    X = domain_encoding(["a"], {"a": ["PF00042.1", "Globin", "PF00042"]}, ["PF00042", "Globin"])
    assert X.toarray().tolist() == [[1.0, 1.0]] and X.nnz == 2
    X = domain_encoding(["a", "b"], {"a": ["PF00042.1", "PF00042.2"]}, ["x", "PF00042.9"])
    assert X.toarray().tolist() == [[0.0, 1.0], [0.0, 0.0]]


def test_encoding_matches_a_dense_oracle(rng):
    families = [f"fam{j}" if j % 3 else f"PF{j:05d}" for j in range(40)]
    ids = [f"seq{i}" for i in range(60)]
    oracle = np.zeros((60, 40), dtype=np.float32)
    annotations = {}
    for i in rng.permutation(60)[:45]:
        cols = rng.choice(40, size=rng.integers(0, 6), replace=True)
        names = [families[j] if families[j].startswith("fam") else f"{families[j]}.{rng.integers(1, 30)}" for j in cols]
        annotations[ids[i]] = set(names) | {"unlisted"}
        oracle[i, cols] = 1
    np.testing.assert_array_equal(domain_encoding(ids, annotations, families).toarray(), oracle)


def test_encoding_of_every_format_on_the_fasta_fixture():
    ds = read_fasta(DOMAINS, {"all": ["enzymes.fasta"]}, label="regex", label_regex=r"\|(\w+)_HUMAN")
    families = read_families(DOMAINS / "families.txt")
    for fmt, name in FILES.items():
        X = domain_encoding(ds.ids, read_domain_annotations(DOMAINS / name), families)
        np.testing.assert_array_equal(X.toarray(), EXPECTED, err_msg=fmt)


def test_encoding_errors():
    assert "the dataset has no record ids" in error_of(domain_encoding, None, {}, ["Globin"])
    assert error_of(domain_encoding, ["a", "b", "a"], {}, ["Globin"]).startswith("ids: 'a' occurs at rows 0 and 2")
    assert "ids: expected a 1-D" in error_of(domain_encoding, np.array([["a"], ["b"]]), {}, ["Globin"])
    assert "families: expected a non-empty list" in error_of(domain_encoding, ["a"], {}, [])
    assert error_of(domain_encoding, ["a"], {}, ["PF00001.2", "x", "PF00001"]) == (
        "families: 'PF00001' (entry 2) repeats entry 0 ('PF00001.2')"
    )
    assert "annotations['a']: expected a collection" in error_of(domain_encoding, ["a"], {"a": "Globin"}, ["Globin"])


def test_encoding_of_proteins_size_is_fast():
    """N ~ 20,000 sequences, 17,929 families, a few domains each: linear work, well under a second."""
    import time

    rng = np.random.default_rng(0)
    F, N = 17929, 20000
    families = [f"fam{j}" for j in range(F)]
    picks = rng.integers(0, F, size=(N, 4))
    annotations = {f"s{i}": {families[j] for j in picks[i]} for i in range(N)}
    t0 = time.perf_counter()
    X = domain_encoding([f"s{i}" for i in range(N)], annotations, families)
    assert time.perf_counter() - t0 < 5
    assert X.shape == (N, F) and X.nnz == sum(len(set(p)) for p in picks.tolist())


# ------------------------------------------------------------------------------ record ids
def test_fasta_reader_keeps_record_ids_in_row_order():
    ds = read_fasta(DOMAINS, {"all": ["enzymes.fasta"]}, label="regex", label_regex=r"\|(\w+)_HUMAN")
    assert ds.ids.dtype == object and ds.ids.tolist() == FASTA_IDS
    assert all(type(v) is str for v in ds.ids)


def test_fasta_ids_across_parts_and_header_forms(tmp_path):
    write(tmp_path, "a.fasta", ">x1\tBacteria; A\nACGT\n>  x2 described\tBacteria; B\nACGT\n")
    write(tmp_path, "b.fasta", ">x3\tBacteria; A\nAC\n")
    ds = read_fasta(tmp_path, {"train": ["a.fasta"], "test": ["b.fasta"]})
    assert ds.ids.tolist() == ["x1", "x2", "x3"] and ds.part.tolist() == ["train", "train", "test"]


def test_fasta_header_without_id_is_an_error(tmp_path):
    write(tmp_path, "bad.fasta", ">a\tX; Y\nACGT\n> \nACGT\n")
    msg = error_of(read_fasta, tmp_path, {"all": ["bad.fasta"]}, label="regex", label_regex="(.*)")
    assert msg == f"{tmp_path / 'bad.fasta'}:3: header has no record id (nothing after '>')"


def test_repeated_fasta_ids_are_kept_with_a_warning_naming_both_records(tmp_path, caplog):
    write(tmp_path, "a.fasta", ">a\tX; Y\nACGT\n")
    write(tmp_path, "b.fasta", ">b\tX; Y\nAC\n>a\tX; Y\nAC\n")
    with caplog.at_level(logging.WARNING):
        ds = read_fasta(tmp_path, {"train": ["a.fasta"], "test": ["b.fasta"]})
    assert ds.ids.tolist() == ["a", "b", "a"]
    assert f"{tmp_path / 'b.fasta'}:3: record id 'a' repeats the one at {tmp_path / 'a.fasta'}:1" in caplog.text
    assert "1 id(s) occur more than once, e.g. 'a' at rows 0 and 2" in caplog.text
    # ... and the join refuses them
    assert error_of(domain_encoding, ds.ids, {}, ["Globin"]).startswith("ids: 'a' occurs at rows 0 and 2")


def test_dataset_ids_validation():
    X = np.zeros((3, 2))
    with pytest.raises(ValueError, match="ids: has 2 ids but there are 3 rows"):
        Dataset("d", X, np.array([0, 1, 1]), ["a", "b"], ids=["r1", "r2"])
    with pytest.raises(ValueError, match=r"ids: expected a 1-D array .* got shape \(3, 1\)"):
        Dataset("d", X, np.array([0, 1, 1]), ["a", "b"], ids=np.array([["r1"], ["r2"], ["r3"]]))
    with pytest.raises(ValueError, match="ids: expected one id per row, got a single string"):
        Dataset("d", X, np.array([0, 1, 1]), ["a", "b"], ids="r1")
    ds = Dataset("d", X, np.array([0, 1, 1]), ["a", "b"], ids=np.array([b"r1", b"r2", b"r3"]))
    assert ds.ids.dtype == object and ds.ids.tolist() == ["r1", "r2", "r3"]
    assert Dataset("d", X, np.array([0, 1, 1]), ["a", "b"]).ids is None


@pytest.mark.parametrize("x_kind", ["sequences", "sparse"])
def test_dataset_round_trip_with_ids(tmp_path, x_kind):
    ids = ["sp|P1|A_HUMAN", "ünïcode id", ""]
    X = ["ACGT", "MKV", "GG"] if x_kind == "sequences" else sp.random(3, 4, density=0.5, format="csr", random_state=0)
    ds = Dataset("p", X, np.array([0, 1, 0]), ["a", "b"], x_kind=x_kind, part=np.array(["train", "test", "test"]), ids=ids)
    path = ds.save(tmp_path / "p.npz")
    with np.load(path, allow_pickle=False) as data:  # stored pickle-free, as UTF-8 bytes + offsets
        assert int(data["format_version"]) == 5 and data["ids_bytes"].dtype == np.uint8
    back = Dataset.load(path)
    assert back.ids.dtype == object and back.ids.tolist() == ids
    assert back.part.tolist() == ["train", "test", "test"]
    # and without ids nothing is stored
    Dataset("p", X, np.array([0, 1, 0]), ["a", "b"], x_kind=x_kind).save(tmp_path / "q.npz")
    with np.load(tmp_path / "q.npz") as data:
        assert "ids_bytes" not in data.files
    assert Dataset.load(tmp_path / "q.npz").ids is None


def test_a_version_2_file_still_loads_without_ids(tmp_path):
    # The version-2 layout, written key by key as Dataset.save did before ids existed.
    text_bytes, text_offsets = encode_strings(["ACGT", "MKV"])
    save_arrays(
        tmp_path / "v2.npz",
        format_version=np.array(2, dtype=np.int64),
        name=np.array("old", dtype=np.str_),
        description=np.array("saved by version 2", dtype=np.str_),
        synthetic=np.array(False),
        y=np.array([1, 0], dtype=np.int64),
        class_names=np.array(["1.1.1.1", "2.7.11.1"], dtype=np.str_),
        x_kind=np.array("sequences"),
        X_format=np.array("text"),
        X_text_bytes=text_bytes,
        X_text_offsets=text_offsets,
        part=np.array(["all", "all"]),
    )
    ds = Dataset.load(tmp_path / "v2.npz")
    assert ds.ids is None and ds.X.tolist() == ["ACGT", "MKV"] and ds.y.tolist() == [1, 0]
    assert ds.name == "old" and ds.part.tolist() == ["all", "all"]
    assert base.FORMAT_VERSION == 5


def test_newer_version_and_broken_ids_are_refused(tmp_path):
    path = Dataset("p", ["AC", "GT"], np.array([0, 1]), ["a", "b"], ids=["r1", "r2"]).save(tmp_path / "p.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    save_arrays(tmp_path / "v6.npz", **{**arrays, "format_version": np.array(6)})
    assert "format_version 6 is newer than this library's 5" in error_of(Dataset.load, tmp_path / "v6.npz")
    save_arrays(tmp_path / "cut.npz", **{**arrays, "ids_offsets": np.array([0, 2, 99])})
    assert f"{tmp_path / 'cut.npz'}: unreadable ids" in error_of(Dataset.load, tmp_path / "cut.npz")
    del arrays["ids_offsets"]
    save_arrays(tmp_path / "half.npz", **arrays)
    assert "missing key 'ids_offsets'" in error_of(Dataset.load, tmp_path / "half.npz")


# ------------------------------------------------------------------------------ a column of CSV files
# The authors' Proteins split lists each enzyme's families in its `fund` column, as pandas writes
# a list ("['Pkinase', 'SH2']"); rows are joined by the reader's row ids (`<file>:<data row>`).
def _csv(tmp_path: Path, name: str, rows: list[str], header: str = "enzyme,fund,label") -> Path:
    return write(tmp_path, name, header + "\n" + "".join(r + "\n" for r in rows))


def test_domain_column_reads_list_literals_plain_lists_and_empty_fields(tmp_path, caplog):
    _csv(tmp_path, "TRAINVAL.csv", ['MKVAA,"[\'Pkinase\', \'SH2\']",3', "MKVGG,[],1", "", 'MKV,"PF00042.17, Globin",2'])
    _csv(tmp_path, "TEST.csv", ['MAA,"(\'BH4\',)",3', "MAC,,1", 'MAD,"{\'Globin\'}",2'])
    with caplog.at_level(logging.INFO, logger="svbop.features.domains"):
        ann = read_domain_column(tmp_path, ["TRAINVAL.csv", "TEST.csv"], "fund")
    assert ann == {
        "TRAINVAL.csv:1": {"Pkinase", "SH2"}, "TRAINVAL.csv:2": set(), "TRAINVAL.csv:3": {"PF00042", "Globin"},
        "TEST.csv:1": {"BH4"}, "TEST.csv:2": set(), "TEST.csv:3": {"Globin"},
    }
    assert "column 'fund' of TRAINVAL.csv, TEST.csv: 6 rows, 2 without a family, 6 (row, family) pairs" in caplog.text


def test_domain_column_joins_the_csv_reader_rows_and_encodes(tmp_path):
    from svbop.datasets.text import read_csv_text

    _csv(tmp_path, "a.csv", ['MKV,"[\'Globin\']",1', 'MKA,"[\'BH4\', \'Pou\']",2'])
    _csv(tmp_path, "b.csv", ['MKC,"[\'Homeobox\', \'unlisted\']",2'])
    ds = read_csv_text(tmp_path, {"train": ["a.csv"], "test": ["b.csv"]}, text_column="enzyme", label_column="label", row_ids=True)
    X = domain_encoding(ds.ids, read_domain_column(tmp_path, ["a.csv", "b.csv"], "fund"), ["Globin", "BH4", "Pou", "Homeobox"])
    np.testing.assert_array_equal(X.toarray(), [[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]])


@pytest.mark.parametrize(
    "field, what",
    [
        ("\"['Pkinase', 3]\"", "expected a list of family names (strings)"),
        ("\"{'a': 'b'}\"", "expected a list of family names (strings)"),
        ("\"['Pkinase'\"", "not a list literal of family names"),
        ("\"[__import__('os')]\"", "not a list literal of family names"),
        ("\"" + "[" * 5000 + "\"", "not a list literal of family names"),
        ("\"['Pkinase', 'Bcl 2']\"", "family 'Bcl 2' contains white space"),
        ("\"Pkinase, Bcl 2\"", "family 'Bcl 2' contains white space"),
    ],
)
def test_domain_column_bad_fields_name_file_line_and_column(tmp_path, field, what):
    path = _csv(tmp_path, "TEST.csv", ["MKV,[],1", "", f"MKA,{field},2"])
    assert error_of(read_domain_column, tmp_path, "TEST.csv", "fund").startswith(f"{path}:4: column 'fund': {what}")


def test_domain_column_missing_file_column_and_repeated_file(tmp_path):
    path = _csv(tmp_path, "TEST.csv", ["MKV,[],1"], header="enzyme,domains,label")
    assert error_of(read_domain_column, tmp_path, ["TEST.csv"], "fund") == f"{path}: no column 'fund' (columns: enzyme, domains, label)"
    assert error_of(read_domain_column, tmp_path, ["absent.csv"], "fund") == f"{tmp_path / 'absent.csv'}: no such CSV file"
    assert "files: 'TEST.csv' is listed twice" in error_of(read_domain_column, tmp_path, ["TEST.csv", "TEST.csv"], "domains")
    assert "files: expected at least one CSV file" in error_of(read_domain_column, tmp_path, [], "fund")
