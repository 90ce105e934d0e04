"""Class hierarchies from files, the read_dataset dispatcher, splits by source part, archives."""

import io
import tarfile
import zipfile

import numpy as np
import pytest

from conftest import need_shared_data
from svbop.archives import build_raw_folder, unpack_archive
from svbop.datasets import (
    hierarchy_from_edges,
    hierarchy_from_nested_lists,
    hierarchy_from_paths,
    make_split,
    read_dataset,
    read_hierarchy,
)
from svbop.datasets.hierarchies import read_lshtc_paths, read_nested_lists


def _parent_name(tree, node):
    return tree.node_names[tree.parent[node]]


# ------------------------------------------------------------------------------ paths
def test_lshtc_paths_with_a_class_that_is_also_an_inner_node(tmp_path):
    # 5823 labels documents and has a sub-category 5897: the class becomes a leaf below node 5823.
    (tmp_path / "cat_hier.txt").write_text("1 2 3\n1 2 4\n1 5823 5897\n1 5823\n7 8\n")
    classes = ["3", "4", "5897", "5823", "8"]
    tree = read_hierarchy(tmp_path, {"format": "lshtc_paths", "file": "cat_hier.txt"}, classes)
    assert tree.n_classes == 5
    assert [_parent_name(tree, c) for c in range(5)] == ["2", "2", "5823", "5823", "7"]
    assert tree.node_names[tree.root] == "<root>"  # two top-level nodes (1 and 7) get a root above
    assert tree.depth()[:5].tolist() == [3, 3, 3, 3, 2]


def test_paths_drop_classes_absent_from_the_data_and_need_every_class():
    paths = [["a", "b", "x"], ["a", "b", "y"], ["a", "c", "z"]]
    tree = hierarchy_from_paths(paths, ["x", "y"])
    assert tree.n_nodes == 4 and tree.node_names[tree.root] == "a"  # c and z are gone
    with pytest.raises(ValueError, match=r"1 of 3 classes are not in the hierarchy, e.g. 'w'"):
        hierarchy_from_paths(paths, ["x", "y", "w"])


def test_label_identity_refuses_a_node_with_two_parents():
    with pytest.raises(ValueError, match=r"cat_hier:2: node 'b' has parent 'c' here but 'a' on line 1"):
        hierarchy_from_paths([["a", "b", "x"], ["c", "b", "y"]], ["x", "y"], where="cat_hier")


def test_prefix_identity_keeps_equal_names_apart():
    paths = [["Bacteria", "Actinobacteria", "Actinobacteria", "G1"], ["Bacteria", "Firmicutes", "Actinobacteria", "G2"]]
    tree = hierarchy_from_paths(paths, ["G1", "G2"], identity="prefix")
    # Two different "Actinobacteria" class-level nodes (one per phylum) plus the phylum itself.
    assert tree.parent[0] != tree.parent[1]
    assert tree.node_names.count("Actinobacteria") == 3
    with pytest.raises(ValueError, match="class 'G1' is reached by a different path than on line 1"):
        hierarchy_from_paths(paths + [["Bacteria", "Firmicutes", "G1"]], ["G1", "G2"], identity="prefix")


def test_taxonomy_and_edge_files(tmp_path):
    (tmp_path / "tax.txt").write_text("# domain; genus\nBacteria; Firmicutes; G1\nBacteria; Firmicutes; G2\nBacteria; Other; G3\n")
    tree = read_hierarchy(tmp_path, {"format": "taxonomy", "file": "tax.txt"}, ["G1", "G2", "G3"])
    assert [_parent_name(tree, c) for c in range(3)] == ["Firmicutes", "Firmicutes", "Other"]
    (tmp_path / "edges.tsv").write_text("root\tanimal\nanimal\tcat\nanimal\tdog\nroot\tcar\n")
    tree = read_hierarchy(tmp_path, {"format": "edges", "file": "edges.tsv", "sep": "\t"}, ["cat", "dog", "car"])
    assert [_parent_name(tree, c) for c in range(3)] == ["animal", "animal", "root"]
    (tmp_path / "bad_edges.txt").write_text("root animal\nanimal cat extra\n")
    with pytest.raises(ValueError, match=r"bad_edges.txt:2: expected 'parent child', got 3 fields"):
        read_hierarchy(tmp_path, {"format": "edges", "file": "bad_edges.txt"}, ["cat"])
    with pytest.raises(ValueError, match="node 'b' has parent 'c' here but 'a' on line 1"):
        hierarchy_from_edges([("a", "b"), ("c", "b")], ["b"])
    with pytest.raises(ValueError, match="cycle"):
        hierarchy_from_edges([("a", "b"), ("b", "a"), ("a", "x")], ["x"])


def test_hierarchy_file_errors_name_file_and_line(tmp_path):
    (tmp_path / "cat_hier.txt").write_text("1 2 3\n1 2 x4\n")
    with pytest.raises(ValueError, match=r"cat_hier.txt:2: expected integer node ids, found 'x4'"):
        read_lshtc_paths(tmp_path / "cat_hier.txt")
    (tmp_path / "nested.txt").write_text("[[1,2,3],\n[1,2],[3]\n[1],[2]]")
    with pytest.raises(ValueError, match=r"nested.txt:3: not a nested list"):
        read_nested_lists(tmp_path / "nested.txt")
    with pytest.raises(ValueError, match=r"hierarchy.format: 'xml' is not one of"):
        read_hierarchy(tmp_path, {"format": "xml", "file": "nested.txt"}, ["a"])
    with pytest.raises(ValueError, match=r"missing.txt: no such hierarchy file"):
        read_hierarchy(tmp_path, {"format": "taxonomy", "file": "missing.txt"}, ["a"])
    with pytest.raises(ValueError, match=r"hierarchy.sep: unknown option for format 'lshtc_paths'"):
        read_hierarchy(tmp_path, {"format": "lshtc_paths", "file": "cat_hier.txt", "sep": ";"}, ["3"])


# ------------------------------------------------------------------------ nested lists
def test_nested_lists_as_in_the_authors_voc2006_file():
    sets = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1, 2, 3, 4], [5, 6, 7, 8, 9, 10], [1, 2], [3, 4], [5],
            [6, 7, 8, 9, 10], [1], [2], [3], [4], [6, 7], [8, 9, 10], [6], [7], [8, 9], [10], [8], [9]]
    names = [f"c{j}" for j in range(1, 11)]
    tree = hierarchy_from_nested_lists(sets, names)
    assert tree.n_nodes == 10 + 9  # 10 classes and 9 inner sets
    children = {tree.node_names[n]: sorted(tree.node_names[c] for c in tree.children()[n]) for n in range(10, 19)}
    assert children["{c5,c6,c7,...}"] == ["c5", "{c6,c7,c8,...}"]
    # Every class's ancestors are exactly the sets that contain it.
    for c in range(10):
        ancestors = set(tree.path(c)[:-1].tolist())
        holding = {n for n in range(10, 19) if c + 1 in _members(tree, n)}
        assert ancestors == holding


def _members(tree, node):
    indptr, indices = tree.children_csr()
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n < tree.n_classes:
            out.add(n + 1)
        stack.extend(indices[indptr[n] : indptr[n + 1]].tolist())
    return out


def test_nested_lists_errors():
    with pytest.raises(ValueError, match="are not nested"):
        hierarchy_from_nested_lists([[1, 2, 3], [1, 2], [2, 3]], ["a", "b", "c"])
    with pytest.raises(ValueError, match="class id 4, outside 1..3"):
        hierarchy_from_nested_lists([[1, 2, 4]], ["a", "b", "c"])
    with pytest.raises(ValueError, match="inside no larger node"):
        hierarchy_from_nested_lists([[1, 2], [3, 4], [1], [2], [3], [4]], ["a", "b", "c", "d"])
    with pytest.raises(ValueError, match=r"1 of 3 classes are in no node, e.g. \['c'\]"):
        hierarchy_from_nested_lists([[1, 2], [1], [2]], ["a", "b", "c"])
    tree = hierarchy_from_nested_lists([[7, 9]], ["7", "9"], ids="name")
    assert tree.n_nodes == 3


# --------------------------------------------------------------------------- real data
@pytest.mark.realdata
def test_real_lshtc1_dryrun_hierarchy_covers_every_class_of_the_data():
    folder = need_shared_data("lshtc1-dryrun")
    ds = read_dataset(
        folder,
        {"kind": "libsvm", "ignore_features": [0],
         "parts": {"train": ["Task2_Train_RDFData_Test_CrawlData__train.txt"],
                   "test": ["Task2_Train_RDFData_Test_CrawlData__test.txt"]}},
        hierarchy={"format": "lshtc_paths", "file": "cat_hier.txt"},
        name="lshtc1_dryrun",
    )
    assert ds.n_classes == 1139 and ds.hierarchy.n_classes == 1139
    depth = ds.hierarchy.depth()[: ds.n_classes]
    assert depth.min() >= 2 and depth.max() <= 6


@pytest.mark.realdata
def test_real_proteins_hierarchy_has_3485_leaf_classes():
    folder = need_shared_data("proteins-hierarchy")
    sets = read_nested_lists(folder / "data_PROTEIN2_hierarchy_full.txt")
    ids = sorted({v for s in sets for v in s})
    assert ids == list(range(1, 3486))
    tree = hierarchy_from_nested_lists(sets, [str(i) for i in ids])
    assert tree.n_classes == 3485
    children = tree.children()
    leaves = [n for n in range(tree.n_nodes) if children[n].size == 0]
    assert leaves == list(range(3485))
    assert len(sets[0]) == 3485 and tree.root == 3485  # the first entry is the root


@pytest.mark.realdata
def test_real_voc2006_hierarchy_over_the_split_classes():
    folder = need_shared_data("voc2006-split")
    tree = read_hierarchy(folder, {"format": "nested_lists", "file": "data_VOC2006_hierarchy_full.txt"}, [str(j) for j in range(10)])
    assert tree.n_classes == 10 and tree.n_nodes == 19
    assert tree.depth()[:10].tolist() == [3, 3, 3, 3, 2, 4, 4, 5, 5, 4]


# ------------------------------------------------------------------------------ splits
def test_split_takes_the_source_test_part_and_stratifies_the_rest():
    part = np.array(["train"] * 80 + ["test"] * 20)
    y = np.tile(np.arange(4), 25)
    s = make_split(100, {"test": "source", "validation": 0.1, "calibration": 8}, seed=3, y=y, part=part)
    assert s["test"].tolist() == list(range(80, 100))
    assert len(s["validation"]) == 10 and len(s["calibration"]) == 8 and len(s["train"]) == 62
    assert np.all(np.concatenate([s["train"], s["validation"], s["calibration"]]) < 80)
    assert set(y[s["train"]]) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="'source' needs the source's parts"):
        make_split(100, {"test": "source"})
    with pytest.raises(ValueError, match=r"the source has no 'test' rows \(its parts: \['all'\]\)"):
        make_split(3, {"test": "source"}, part=np.array(["all"] * 3))


def test_split_subsample_keeps_the_asked_rows_as_in_the_paper_mnist_recipe():
    y = np.repeat(np.arange(10), 700)  # 7,000 rows; keep 4,200 = 60%, then 80/20
    s = make_split(7000, {"subsample": 4200, "test": 0.2}, seed=0, y=y)
    used = np.concatenate(list(s.values()))
    assert used.size == 4200 and np.unique(used).size == 4200
    assert len(s["test"]) == 840 and len(s["train"]) == 3360
    assert np.all(np.bincount(y[used], minlength=10) == 420)  # stratified subsample
    assert make_split(7000, {"subsample": 4200, "test": 0.2}, seed=0, y=y)["test"].tolist() == s["test"].tolist()


# ---------------------------------------------------------------------------- archives
def test_raw_folder_unpacks_nested_archives_and_links_plain_files(tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as tf:
        data = b"hello"
        info = tarfile.TarInfo("101_ObjectCategories/cat/image_0001.jpg")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(downloads / "caltech-101.zip", "w") as zf:
        zf.writestr("caltech-101/101_ObjectCategories.tar.gz", inner.getvalue())
    (downloads / "labels.csv").write_text("a,b\n")
    raw = build_raw_folder(downloads, tmp_path / "raw", ["caltech-101.zip", "labels.csv"],
                           ["caltech-101.zip", "caltech-101/101_ObjectCategories.tar.gz"])
    assert (raw / "caltech-101/101_ObjectCategories/cat/image_0001.jpg").read_bytes() == b"hello"
    assert not (raw / "caltech-101/101_ObjectCategories.tar.gz").exists()
    assert (raw / "labels.csv").is_symlink() and (raw / "labels.csv").read_text() == "a,b\n"
    with pytest.raises(ValueError, match="neither a downloaded file"):
        build_raw_folder(downloads, tmp_path / "raw2", ["labels.csv"], ["nothing.tar"])
    assert not (tmp_path / "raw2").exists()


def test_unpack_refuses_truncated_and_unsafe_archives(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"x" * 100000
        info = tarfile.TarInfo("big.bin")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    (tmp_path / "cut.tar.gz").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ValueError, match=r"cut.tar.gz: cannot unpack"):
        unpack_archive(tmp_path / "cut.tar.gz", tmp_path / "out")
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zf:
        zf.writestr("../escape.txt", "no")
    with pytest.raises(ValueError, match="outside"):
        unpack_archive(tmp_path / "evil.zip", tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()
    (tmp_path / "plain.txt").write_text("not an archive")
    with pytest.raises(ValueError, match="not a tar or zip archive"):
        unpack_archive(tmp_path / "plain.txt", tmp_path / "out")


def test_read_dataset_names_unknown_kinds_and_options(tmp_path):
    with pytest.raises(ValueError, match=r"datasets.x.format.kind: 'arff' is not one of"):
        read_dataset(tmp_path, {"kind": "arff", "parts": {"train": ["a"]}}, where="datasets.x.format")
    with pytest.raises(ValueError, match=r"datasets.x.format.colour: unknown option for kind 'libsvm'"):
        read_dataset(tmp_path, {"kind": "libsvm", "parts": {"train": ["a"]}, "colour": 1}, where="datasets.x.format")
    with pytest.raises(ValueError, match=r"format.parts: expected a mapping"):
        read_dataset(tmp_path, {"kind": "libsvm"})


# ------------------------------------------------------------------ a flat from_label hierarchy
def test_from_label_hierarchy_one_level_deep_warns_and_names_the_separator_the_names_hold(tmp_path, caplog):
    classes = ["Arts/Music", "Arts/Film", "Science/Physics", "Sports"]
    with caplog.at_level("WARNING"):
        tree = read_hierarchy(tmp_path, {"from_label": {"sep": "."}}, classes, where="datasets.mine.hierarchy")
    assert int(tree.depth().max()) == 1
    assert ("datasets.mine.hierarchy.from_label: no class name contains the separator '.', so the hierarchy is flat "
            "(one level deep: all 4 classes hang directly below the root, which a tree model cannot use); "
            "3 of 4 class names hold '/' (e.g. 'Arts/Music'): if that separates the levels, set "
            '`from_label: {sep: "/"}`') in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        read_hierarchy(tmp_path, {"from_label": {"sep": "."}}, ["alpha", "beta"])
    assert "the hierarchy is flat" in caplog.text and "set from_label.sep to the separator" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):  # the separator that the names hold: a real tree, no warning
        tree = read_hierarchy(tmp_path, {"from_label": {"sep": "/"}}, classes)
    assert int(tree.depth().max()) == 2 and "flat" not in caplog.text


def test_from_label_errors_name_the_datasets_hierarchy_key(tmp_path):
    with pytest.raises(ValueError, match=r"^datasets\.mine\.hierarchy\.from_label\.depth: unknown option"):
        read_hierarchy(tmp_path, {"from_label": {"depth": 2}}, ["a"], where="datasets.mine.hierarchy")
    np.savez(tmp_path / "d.npz", X=np.eye(3), y=np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"^datasets\.x\.hierarchy\.from_label\.sep: expected a non-empty"):
        read_dataset(tmp_path, {"kind": "npz", "parts": {"all": ["d.npz"]}}, hierarchy={"from_label": {"sep": ""}},
                     where="datasets.x.format")


# ------------------------------------------------------------------ pruning classes
def test_keep_classes_prunes_leaves_and_inner_nodes_left_without_a_class():
    tree = hierarchy_from_paths([["a", "b", "x"], ["a", "b", "y"], ["a", "c", "z"], ["d", "w"]], ["w", "x", "y", "z"])
    kept = tree.keep_classes([1, 3])  # x and z: b and c keep one child each, d goes
    assert kept.n_classes == 2 and kept.node_names[:2] == ["x", "z"]
    assert sorted(kept.node_names[2:]) == ["<root>", "a", "b", "c"]
    assert [kept.node_names[n] for n in kept.path(0)] == ["<root>", "a", "b", "x"]
    assert [kept.node_names[n] for n in kept.path(1)] == ["<root>", "a", "c", "z"]
    with pytest.raises(ValueError, match=r"class ids must be in 0\.\.3, got 4"):
        tree.keep_classes([0, 4])
    with pytest.raises(ValueError, match="non-empty"):
        tree.keep_classes([])
