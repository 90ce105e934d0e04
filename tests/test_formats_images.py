"""Image dataset readers: class folders (Caltech), Pascal VOC XML, CSV image lists (VOC 2006).

The fixtures are tiny folders written to tmp_path (the readers never open the pixels, so the
image files are empty); the VOC 2006 lists are the paper authors' real split CSVs when
../shared/data is present.
"""

from __future__ import annotations

import gzip
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from svbop.datasets import Dataset
from svbop.datasets.images import (
    VOC2006_CLASSES,
    VOC2007_CLASSES,
    read_image_folder,
    read_image_list,
    read_voc,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
VOC2006_SPLIT = SHARED_DATA / "voc2006-split"


def _touch(path: Path, data: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_class_lists():
    assert len(VOC2006_CLASSES) == 10 and list(VOC2006_CLASSES) == sorted(VOC2006_CLASSES)
    assert len(VOC2007_CLASSES) == 20 and list(VOC2007_CLASSES) == sorted(VOC2007_CLASSES)
    assert set(VOC2006_CLASSES) < set(VOC2007_CLASSES)


# --------------------------------------------------------------------------------------------
# read_image_folder
# --------------------------------------------------------------------------------------------


@pytest.fixture
def caltech101(tmp_path):
    top = tmp_path / "101_ObjectCategories"
    for name in ("image_0002.jpg", "image_0001.jpg", "image_0003.JPG"):
        _touch(top / "accordion" / name)
    for name in ("image_0001.jpg", "image_0002.png"):
        _touch(top / "Faces" / name)
    _touch(top / "BACKGROUND_Google" / "image_0001.jpg")
    _touch(top / "accordion" / ".DS_Store")  # hidden: skipped
    _touch(top / "accordion" / "notes.txt")  # not an image: skipped
    _touch(top / "Faces" / "Thumbs.db")
    _touch(top / "README.txt")  # loose file next to the class folders: ignored
    (top / ".hidden_class").mkdir()  # hidden folder: not a class
    return tmp_path


def test_image_folder_reads_caltech101_layout(caltech101, caplog):
    with caplog.at_level(logging.INFO, logger="svbop.datasets.images"):
        d = read_image_folder(caltech101, {"all": ["101_ObjectCategories"]}, exclude=["BACKGROUND_Google"])
    assert isinstance(d, Dataset) and d.x_kind == "image_paths" and d.name == ""
    assert d.class_names == ["Faces", "accordion"]  # sorted (upper case first)
    assert d.X.dtype == object and all(isinstance(x, str) for x in d.X)
    assert d.X.tolist() == [
        "101_ObjectCategories/Faces/image_0001.jpg",
        "101_ObjectCategories/Faces/image_0002.png",
        "101_ObjectCategories/accordion/image_0001.jpg",
        "101_ObjectCategories/accordion/image_0002.jpg",
        "101_ObjectCategories/accordion/image_0003.JPG",
    ]
    assert d.y.tolist() == [0, 0, 1, 1, 1]
    assert d.part.tolist() == ["all"] * 5
    assert all((caltech101 / x).is_file() for x in d.X)
    assert "101_ObjectCategories" in d.description and "BACKGROUND_Google" in d.description
    assert "ignored 1 file(s)" in caplog.text


def test_image_folder_parts_take_the_union_of_classes_and_round_trip(tmp_path):
    for cls, n in (("a", 2), ("b", 1)):
        for i in range(n):
            _touch(tmp_path / "train" / cls / f"{i}.png")
    for cls in ("b", "c"):
        _touch(tmp_path / "test" / cls / "x.bmp")
    d = read_image_folder(tmp_path, {"train": ["train"], "test": [tmp_path / "test"]})  # absolute name too
    assert d.class_names == ["a", "b", "c"]
    assert d.X.tolist() == ["train/a/0.png", "train/a/1.png", "train/b/0.png", "test/b/x.bmp", "test/c/x.bmp"]
    assert d.y.tolist() == [0, 0, 1, 1, 2]
    assert d.part.tolist() == ["train"] * 3 + ["test"] * 2
    d.name = "toy"
    back = Dataset.load(d.save(tmp_path / "toy.npz"))
    assert back.x_kind == "image_paths" and back.X.tolist() == d.X.tolist() and back.part.tolist() == d.part.tolist()


def test_image_folder_caltech256_skips_stray_files_and_nested_folders(tmp_path, caplog):
    top = tmp_path / "256_ObjectCategories"
    _touch(top / "001.ak47" / "001_0001.jpg")
    _touch(top / "056.dog" / "056_0001.jpg")
    _touch(top / "056.dog" / "greg" / "056_0002.jpg")  # nested folder: not read
    _touch(top / "198.spider" / "198_0001.jpg")
    _touch(top / "198.spider" / "RENAME2")  # no image extension: skipped
    _touch(top / "257.clutter" / "257_0001.jpg")
    with caplog.at_level(logging.INFO, logger="svbop.datasets.images"):
        d = read_image_folder(tmp_path, {"all": ["256_ObjectCategories"]}, exclude=["257.clutter"])
    assert d.class_names == ["001.ak47", "056.dog", "198.spider"]
    assert d.X.tolist() == [
        "256_ObjectCategories/001.ak47/001_0001.jpg",
        "256_ObjectCategories/056.dog/056_0001.jpg",
        "256_ObjectCategories/198.spider/198_0001.jpg",
    ]
    assert "skipped 1 non-image file(s) and 1 nested folder(s)" in caplog.text
    # a custom extension list
    d = read_image_folder(tmp_path, {"all": ["256_ObjectCategories"]}, extensions=[".JPG"])
    assert "257.clutter" in d.class_names and d.n_samples == 4


def test_image_folder_errors(caltech101, tmp_path):
    parts = {"all": ["101_ObjectCategories"]}
    with pytest.raises(ValueError, match=r"excluded class folder 'BACKGROUND_Gogle' does not exist \(a typo\?\); similar class names: BACKGROUND_Google"):
        read_image_folder(caltech101, parts, exclude=["BACKGROUND_Gogle"])
    with pytest.raises(ValueError, match=r"101_ObjectCategories/nothing: no such folder"):
        read_image_folder(caltech101, {"all": ["101_ObjectCategories/nothing"]})
    with pytest.raises(ValueError, match=r"README.txt: not a folder"):
        read_image_folder(caltech101, {"all": ["101_ObjectCategories/README.txt"]})
    with pytest.raises(ValueError, match=r"accordion: no class sub-folders"):
        read_image_folder(caltech101, {"all": ["101_ObjectCategories/accordion"]})
    (caltech101 / "101_ObjectCategories" / "empty_class").mkdir()
    _touch(caltech101 / "101_ObjectCategories" / "empty_class" / "readme.txt")
    with pytest.raises(ValueError, match=r"101_ObjectCategories/empty_class: class folder 'empty_class' holds no images"):
        read_image_folder(caltech101, parts)
    with pytest.raises(ValueError, match=r"parts\['all'\]: lists no files"):
        read_image_folder(caltech101, {"all": []})
    with pytest.raises(ValueError, match="parts: expected a non-empty mapping"):
        read_image_folder(caltech101, {})


# --------------------------------------------------------------------------------------------
# read_voc
# --------------------------------------------------------------------------------------------

_XML = """<annotation>
\t<folder>VOC2007</folder>
\t<filename>{id}.jpg</filename>
\t<source><database>The VOC2007 Database</database></source>
\t<size><width>353</width><height>500</height><depth>3</depth></size>
\t<segmented>0</segmented>
{objects}</annotation>
"""
_OBJECT = """\t<object>
\t\t<name>{name}</name>
\t\t<pose>Unspecified</pose>
\t\t<truncated>0</truncated>
\t\t<difficult>{difficult}</difficult>
\t\t<bndbox><xmin>8</xmin><ymin>12</ymin><xmax>352</xmax><ymax>498</ymax></bndbox>
\t</object>
"""


def _voc(tmp_path, annotations: dict[str, list[tuple[str, int]]], sets: dict[str, list[str]]) -> Path:
    year = tmp_path / "VOCdevkit" / "VOC2007"
    for image_id, objects in annotations.items():
        body = "".join(_OBJECT.format(name=n, difficult=d) for n, d in objects)
        _touch(year / "Annotations" / f"{image_id}.xml", _XML.format(id=image_id, objects=body).encode())
        _touch(year / "JPEGImages" / f"{image_id}.jpg")
    for name, ids in sets.items():
        _touch(year / "ImageSets" / "Main" / f"{name}.txt", "".join(f"{i}\n" for i in ids).encode())
    return year


VOC_ANN = {
    "000005": [("chair", 0), ("chair", 0), ("chair", 1)],
    "000007": [("car", 0)],
    "000009": [("horse", 0), ("person", 1), ("person", 0)],  # two classes
    "000012": [("car", 0)],
    "000016": [("bicycle", 1)],  # only a difficult object
    "000017": [("person", 0), ("horse", 0)],
}
VOC_PARTS = {"train": ["VOCdevkit/VOC2007/ImageSets/Main/trainval.txt"], "test": ["VOCdevkit/VOC2007/ImageSets/Main/test.txt"]}


@pytest.fixture
def voc(tmp_path):
    _voc(tmp_path, VOC_ANN, {"trainval": ["000005", "000007", "000009", "000016"], "test": ["000012", "000017"]})
    return tmp_path


def test_voc_keeps_single_label_images(voc, caplog):
    with caplog.at_level(logging.INFO, logger="svbop.datasets.images"):
        d = read_voc(voc, VOC_PARTS)
    assert d.x_kind == "image_paths" and d.name == ""
    assert d.class_names == ["bicycle", "car", "chair"]
    assert d.X.tolist() == [
        "VOCdevkit/VOC2007/JPEGImages/000005.jpg",
        "VOCdevkit/VOC2007/JPEGImages/000007.jpg",
        "VOCdevkit/VOC2007/JPEGImages/000016.jpg",
        "VOCdevkit/VOC2007/JPEGImages/000012.jpg",
    ]
    assert d.y.tolist() == [2, 1, 0, 1]
    assert d.part.tolist() == ["train", "train", "train", "test"]
    assert all((voc / x).is_file() for x in d.X)
    assert "dropped 2 of 6 images showing more than one class" in caplog.text
    assert "trainval.txt" in d.description and "test.txt" in d.description


def test_voc_without_difficult_objects(voc, caplog):
    with caplog.at_level(logging.INFO, logger="svbop.datasets.images"):
        d = read_voc(voc, VOC_PARTS, include_difficult=False)
    # 000009 is single-label (horse, person) only with its difficult person; 000016 loses its only object
    assert d.class_names == ["car", "chair"]
    assert [Path(x).stem for x in d.X] == ["000005", "000007", "000012"]
    assert "dropped 1 of 6 images without non-difficult objects" in caplog.text


def test_voc_multi_label_gives_one_row_per_class_and_fixed_class_names(voc):
    d = read_voc(voc, VOC_PARTS, single_label=False, class_names=VOC2007_CLASSES)
    assert d.class_names == list(VOC2007_CLASSES)
    got = [(Path(x).stem, d.class_names[c], p) for x, c, p in zip(d.X, d.y, d.part)]
    assert got == [
        ("000005", "chair", "train"),
        ("000007", "car", "train"),
        ("000009", "horse", "train"),
        ("000009", "person", "train"),
        ("000016", "bicycle", "train"),
        ("000012", "car", "test"),
        ("000017", "horse", "test"),
        ("000017", "person", "test"),
    ]
    with pytest.raises(ValueError, match=r"000005.xml: object class 'chair' is not in class_names \(2 classes\)"):
        read_voc(voc, VOC_PARTS, class_names=["car", "bicycle"])


def test_voc_errors(tmp_path):
    year = _voc(tmp_path, VOC_ANN, {"trainval": ["000005", "000099"], "bad": ["000007 1"]})
    set_file = year / "ImageSets" / "Main" / "trainval.txt"
    with pytest.raises(ValueError, match=re.escape(f"{set_file}:2: image id '000099' has no annotation")):
        read_voc(tmp_path, {"train": [set_file]})
    with pytest.raises(ValueError, match=r"bad.txt:1: expected one image id per line, got '000007 1'"):
        read_voc(tmp_path, {"train": ["VOCdevkit/VOC2007/ImageSets/Main/bad.txt"]})
    with pytest.raises(ValueError, match=r"Main/missing.txt: no such image-set file"):
        read_voc(tmp_path, {"train": ["VOCdevkit/VOC2007/ImageSets/Main/missing.txt"]})

    # malformed XML: the error names the file and the line of the parse error
    broken = year / "Annotations" / "000007.xml"
    broken.write_text("<annotation>\n<object>\n<name>car</name>\n</objec>\n</annotation>\n")
    _touch(year / "ImageSets" / "Main" / "one.txt", b"000007\n")
    with pytest.raises(ValueError, match=re.escape(f"{broken}:4: malformed XML")):
        read_voc(tmp_path, {"train": ["VOCdevkit/VOC2007/ImageSets/Main/one.txt"]})
    broken.write_text("<annotation><object><pose>Left</pose></object></annotation>")
    with pytest.raises(ValueError, match=r"000007.xml: an <object> has no <name>"):
        read_voc(tmp_path, {"train": ["VOCdevkit/VOC2007/ImageSets/Main/one.txt"]})


# --------------------------------------------------------------------------------------------
# read_image_list
# --------------------------------------------------------------------------------------------

_AUTHORS = "/home/data/tfmortier/Research/CAHMCC/data/VOC2006/PNGImages"


def _csv(path: Path, rows: list[tuple[str, str]], header: str = "full_path,marginal_labels") -> Path:
    lines = [header] + [f'{p},"{lab}"' for p, lab in rows]
    _touch(path, ("\n".join(lines) + "\n").encode())
    return path


def test_image_list_onehot_with_class_names(tmp_path):
    _csv(tmp_path / "lists" / "train.csv", [(f"{_AUTHORS}/000006.png", "[0, 0, 1]"), (f"{_AUTHORS}/000017.png", "[1, 0, 0]")])
    with gzip.open(tmp_path / "lists" / "test.csv.gz", "wt") as f:
        f.write(f'full_path,marginal_labels\n{_AUTHORS}/000001.png,"[0, 1, 0]"\n\n')
    parts = {"train": ["lists/train.csv"], "test": ["lists/test.csv.gz"]}
    d = read_image_list(tmp_path, parts, image_dir="VOC2006/PNGImages", class_names=["bicycle", "bus", "car"])
    assert d.x_kind == "image_paths" and d.name == ""
    assert d.X.tolist() == ["VOC2006/PNGImages/000006.png", "VOC2006/PNGImages/000017.png", "VOC2006/PNGImages/000001.png"]
    assert d.y.tolist() == [2, 0, 1] and d.class_names == ["bicycle", "bus", "car"]
    assert d.part.tolist() == ["train", "train", "test"]
    assert "train.csv" in d.description and "onehot" in d.description
    # without class names the positions name the classes; without image_dir the file name is kept alone
    d = read_image_list(tmp_path, parts)
    assert d.class_names == ["0", "1", "2"] and d.X[0] == "000006.png"


def test_image_list_name_labels_and_other_columns(tmp_path):
    path = tmp_path / "list.csv"
    path.write_text("id,file,label\n1,C:\\imgs\\a.jpg,dog\n2,b.jpg,cat\n3,sub/c.jpg,dog\n")
    d = read_image_list(tmp_path, {"all": ["list.csv"]}, path_column="file", label_column="label", label_format="name")
    assert d.class_names == ["cat", "dog"] and d.y.tolist() == [1, 0, 1]
    assert d.X.tolist() == ["a.jpg", "b.jpg", "c.jpg"]
    d = read_image_list(tmp_path, {"all": ["list.csv"]}, path_column="file", label_column="label", label_format="name", class_names=["dog", "cat", "cow"])
    assert d.y.tolist() == [0, 1, 0] and d.n_classes == 3
    with pytest.raises(ValueError, match=r"list.csv:3: class 'cat' is not in class_names"):
        read_image_list(tmp_path, {"all": ["list.csv"]}, path_column="file", label_column="label", label_format="name", class_names=["dog"])


@pytest.mark.parametrize(
    "rows, message",
    [
        ([("a.png", "[0, 1]"), ("b.png", "[1, 1]")], r"t.csv:3: expected exactly one 1 in the one-hot label, got 2"),
        ([("a.png", "[0, 2]")], r"t.csv:2: one-hot entries must be 0 or 1, got '2'"),
        ([("a.png", "[0, 0]")], r"t.csv:2: expected exactly one 1 in the one-hot label, got 0"),
        ([("a.png", "0, 1")], r"t.csv:2: expected a one-hot list"),
        ([("a.png", "[0, 1]"), ("b.png", "[0, 0, 1]")], r"t.csv:3: one-hot label has 3 entries, expected 2 \(from .*t.csv:2\)"),
        ([("a.png", "[0, x]")], r"t.csv:2: one-hot entries must be 0 or 1, got 'x'"),
        ([("", "[0, 1]")], r"t.csv:2: empty image path"),
    ],
)
def test_image_list_bad_labels(tmp_path, rows, message):
    _csv(tmp_path / "t.csv", rows)
    with pytest.raises(ValueError, match=message):
        read_image_list(tmp_path, {"train": ["t.csv"]})


def test_image_list_file_errors(tmp_path):
    _csv(tmp_path / "t.csv", [("a.png", "[0, 1]")])
    with pytest.raises(ValueError, match=r"t.csv:2: one-hot label has 2 entries, expected 3 \(from class_names\)"):
        read_image_list(tmp_path, {"train": ["t.csv"]}, class_names=["x", "y", "z"])
    with pytest.raises(ValueError, match=r"t.csv:1: no column 'path' \(columns: full_path, marginal_labels\)"):
        read_image_list(tmp_path, {"train": ["t.csv"]}, path_column="path")
    with pytest.raises(ValueError, match="label_format"):
        read_image_list(tmp_path, {"train": ["t.csv"]}, label_format="index")
    with pytest.raises(ValueError, match="no such file"):
        read_image_list(tmp_path, {"train": ["missing.csv"]})
    (tmp_path / "fields.csv").write_text('full_path,marginal_labels\na.png,"[0, 1]",extra\n')
    with pytest.raises(ValueError, match=r"fields.csv:2: expected 2 fields \(as in the header\), got 3"):
        read_image_list(tmp_path, {"train": ["fields.csv"]})
    (tmp_path / "header.csv").write_text("full_path,marginal_labels\n")
    with pytest.raises(ValueError, match=r"header.csv: no rows after the header"):
        read_image_list(tmp_path, {"train": ["header.csv"]})
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"empty.csv: empty file"):
        read_image_list(tmp_path, {"train": ["empty.csv"]})


@pytest.mark.realdata
def test_image_list_reads_the_authors_voc2006_split():
    if not VOC2006_SPLIT.is_dir():
        pytest.skip("real data absent: ../shared/data/voc2006-split (see ../shared/data/README.md)")
    parts = {"train": ["data_VOC2006_TRAINVAL.csv"], "test": ["data_VOC2006_TEST.csv"]}
    d = read_image_list(VOC2006_SPLIT, parts, image_dir="PNGImages", class_names=VOC2006_CLASSES)
    assert d.n_classes == 10 and d.class_names == list(VOC2006_CLASSES)
    n_train, n_test = int(np.sum(d.part == "train")), int(np.sum(d.part == "test"))
    assert (n_train, n_test) == (1398, 1477)
    for part in ("train", "test"):
        assert set(d.y[d.part == part].tolist()) == set(range(10)), f"a class is missing from {part}"
    assert d.X[0] == "PNGImages/000006.png"
    assert all(re.fullmatch(r"PNGImages/\d{6}\.png", x) for x in d.X)
    assert len(set(d.X[d.part == "train"]) & set(d.X[d.part == "test"])) == 0  # disjoint parts
