"""Readers for image datasets: the rows are image files, the features come later (VGG16).

Every reader has the signature ``read_<kind>(root, parts, **options) -> Dataset`` and returns a
:class:`~svbop.datasets.base.Dataset` with ``x_kind="image_paths"``: ``X`` holds one image path
per row, relative to ``root`` (POSIX separators), ``y`` the class indices, ``part`` the name of the
part each row came from.  The pixels are not read here; :func:`svbop.features.vgg16.vgg16_features`
opens the images (and names any missing or unreadable file).

Formats and the datasets of the paper (Mortier et al., 2021) that use them:

* :func:`read_image_folder` -- one sub-folder per class: **Caltech-101**
  (``101_ObjectCategories/<class>/image_0001.jpg``; exclude ``BACKGROUND_Google``) and
  **Caltech-256** (``256_ObjectCategories/001.ak47/001_0001.jpg``; exclude ``257.clutter``).
* :func:`read_voc` -- the Pascal VOC 2007+ devkit layout (image-set files, one XML annotation
  per image): **VOC 2007**, keeping the images with a single object class.
* :func:`read_image_list` -- a CSV of image paths and one-hot (or named) labels: **VOC 2006**,
  with the paper authors' own single-label split (``data_VOC2006_TRAINVAL.csv`` /
  ``data_VOC2006_TEST.csv``).  VOC 2006 annotations are not XML, so :func:`read_voc` does not
  apply to them.
"""

from __future__ import annotations

import csv
import difflib
import logging
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ._files import open_text, part_list, resolve
from .base import Dataset

__all__ = [
    "IMAGE_EXTENSIONS",
    "VOC2006_CLASSES",
    "VOC2007_CLASSES",
    "read_image_folder",
    "read_image_list",
    "read_voc",
]

logger = logging.getLogger(__name__)

#: File name endings (compared case-insensitively) that :func:`read_image_folder` takes as images.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff")

#: The 10 classes of Pascal VOC 2006, alphabetical (the order of the VOC 2006 devkit), i.e. the
#: positions of the one-hot labels in the paper authors' VOC 2006 CSVs.
VOC2006_CLASSES = ("bicycle", "bus", "car", "cat", "cow", "dog", "horse", "motorbike", "person", "sheep")

#: The 20 classes of Pascal VOC 2007 (and later), alphabetical as in the devkit.
VOC2007_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
    "tvmonitor",
)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _relative(path: Path, root: str | os.PathLike | None) -> str:
    """``path`` relative to ``root`` as a POSIX string (with ``..`` when it lies outside ``root``).

    Without a root the path is kept as it is.
    """
    if root is None:
        return Path(path).as_posix()
    return Path(os.path.relpath(path, root)).as_posix()


def _check_class_names(class_names, where: str = "class_names") -> list[str] | None:
    if class_names is None:
        return None
    if isinstance(class_names, (str, bytes)):
        raise ValueError(f"{where}: expected a list of class names, got the single string {class_names!r}")
    names = [str(c) for c in class_names]
    if not names:
        raise ValueError(f"{where}: expected at least one class name")
    seen: set[str] = set()
    for c in names:
        if c in seen:
            raise ValueError(f"{where}: class name {c!r} is listed twice")
        seen.add(c)
    return names


def _dataset(paths: list[str], labels: list[int], part_of: list[str], class_names: list[str], description: str) -> Dataset:
    X = np.empty(len(paths), dtype=object)
    X[:] = paths
    return Dataset(
        name="",
        X=X,
        y=np.asarray(labels, dtype=np.int64),
        class_names=class_names,
        description=description,
        x_kind="image_paths",
        part=np.asarray(part_of, dtype=np.str_),
    )


def _part_counts(part_of: list[str], parts: list[tuple[str, list]]) -> str:
    counts = {p: 0 for p, _ in parts}
    for p in part_of:
        counts[p] += 1
    return ", ".join(f"{p} {n}" for p, n in counts.items())


# --------------------------------------------------------------------------------------------
# One folder per class (Caltech-101, Caltech-256)
# --------------------------------------------------------------------------------------------


def read_image_folder(
    root: str | os.PathLike,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    exclude: Sequence[str] = (),
    extensions: Sequence[str] = IMAGE_EXTENSIONS,
) -> Dataset:
    """Images stored as ``<folder>/<class>/<image>``, one sub-folder per class.

    Used for Caltech-101 (``101_ObjectCategories``, ``exclude=["BACKGROUND_Google"]``) and
    Caltech-256 (``256_ObjectCategories``, ``exclude=["257.clutter"]``).

    Parameters
    ----------
    root : path
        Folder the names in ``parts`` are relative to (absolute names are used as they are).
    parts : mapping of str to list of path
        Part name (``"train"``, ``"test"``, ...) -> folders whose sub-folders are the classes.
        The rows of a part follow its folders in order, then the classes (sorted), then the
        files (sorted by name).
    exclude : sequence of str
        Class folders to leave out.  Each must exist in at least one of the folders read (a
        name that exists nowhere is most likely a typo).
    extensions : sequence of str
        File name endings, compared case-insensitively, that count as images; other files
        (e.g. Caltech-256's stray ``RENAME2``) and hidden files (``.``-prefixed) are skipped.

    Returns
    -------
    Dataset
        ``x_kind="image_paths"``; ``X`` = image paths relative to ``root``; ``class_names`` = the
        sorted union of the class folders over all parts; ``part`` per row; ``name`` empty.

    Raises
    ------
    ValueError
        ``"<path>: ..."`` when a folder is missing or not a folder, has no class sub-folders,
        a class folder holds no images, or an excluded name exists in none of the folders (the
        message lists similar class names).

    Notes
    -----
    Files lying directly in a folder (next to the class folders) and folders nested inside a
    class folder are ignored and counted in the log.
    """
    parts_ = part_list(parts)
    if isinstance(exclude, (str, bytes)):
        exclude = [exclude]
    excluded = {str(e) for e in exclude}
    if isinstance(extensions, (str, bytes)):
        extensions = [extensions]
    exts = tuple(str(e).lower() for e in extensions)
    if not exts or any(not e for e in exts):
        raise ValueError(f"extensions: expected non-empty file name endings such as '.jpg', got {list(extensions)!r}")

    # folder -> [(class, [image paths])], listed once per folder
    listing: list[tuple[str, Path, list[tuple[str, list[Path]]]]] = []
    seen_excluded: set[str] = set()
    all_classes: set[str] = set()
    for part, names in parts_:
        for name in names:
            folder = resolve(root, name, "folder")
            if not folder.is_dir():
                raise ValueError(f"{folder}: not a folder (expected one sub-folder per class)")
            class_dirs, loose = [], 0
            with os.scandir(folder) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir():
                        if entry.name in excluded:
                            seen_excluded.add(entry.name)
                        else:
                            class_dirs.append(entry.name)
                    else:
                        loose += 1
            class_dirs.sort()
            if loose:
                logger.info("%s: ignored %d file(s) lying next to the class folders", folder, loose)
            if not class_dirs:
                raise ValueError(f"{folder}: no class sub-folders (expected <class>/<image> files)")
            classes = []
            skipped, nested = 0, 0
            for cls in class_dirs:
                images = []
                with os.scandir(folder / cls) as it:
                    for entry in it:
                        if entry.name.startswith("."):
                            continue
                        if entry.is_dir():
                            nested += 1
                        elif entry.name.lower().endswith(exts):
                            images.append(entry.name)
                        else:
                            skipped += 1
                if not images:
                    raise ValueError(
                        f"{folder / cls}: class folder {cls!r} holds no images (extensions {', '.join(exts)})"
                    )
                images.sort()
                classes.append((cls, [folder / cls / f for f in images]))
            if skipped or nested:
                logger.info(
                    "%s: skipped %d non-image file(s) and %d nested folder(s) inside the class folders",
                    folder, skipped, nested,
                )  # fmt: skip
            all_classes.update(cls for cls, _ in classes)
            listing.append((part, folder, classes))

    missing = sorted(excluded - seen_excluded)
    if missing:
        where = ", ".join(str(f) for _, f, _ in listing)
        bad = missing[0]
        close = difflib.get_close_matches(bad, sorted(all_classes), n=5, cutoff=0.5)
        hint = f"; similar class names: {', '.join(close)}" if close else ""
        raise ValueError(f"{where}: excluded class folder {bad!r} does not exist (a typo?){hint}")

    class_names = sorted(all_classes)
    index = {c: i for i, c in enumerate(class_names)}
    paths, labels, part_of = [], [], []
    summary = []
    for part, folder, classes in listing:
        n = 0
        for cls, files in classes:
            paths.extend(_relative(f, root) for f in files)
            labels.extend([index[cls]] * len(files))
            n += len(files)
        part_of.extend([part] * n)
        summary.append(f"{part}: {_relative(folder, root)} ({len(classes)} classes, {n} images)")
    description = "image folders, one sub-folder per class; " + "; ".join(summary)
    if excluded:
        description += f"; excluded {', '.join(sorted(excluded))}"
    logger.info("read %d images of %d classes (%s)", len(paths), len(class_names), _part_counts(part_of, parts_))
    return _dataset(paths, labels, part_of, class_names, description)


# --------------------------------------------------------------------------------------------
# Pascal VOC 2007+ (XML annotations)
# --------------------------------------------------------------------------------------------


def _voc_objects(xml_path: Path, include_difficult: bool) -> list[str]:
    """Class names of the objects annotated in one VOC XML file (in file order, repeats kept)."""
    try:
        tree = ET.parse(xml_path)
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        where = f"{xml_path}:{line}" if line else f"{xml_path}"
        raise ValueError(f"{where}: malformed XML ({exc})") from None
    names = []
    for obj in tree.getroot().findall("object"):
        name = (obj.findtext("name") or "").strip()
        if not name:
            raise ValueError(f"{xml_path}: an <object> has no <name>")
        difficult = (obj.findtext("difficult") or "0").strip()
        if difficult not in ("0", "1"):
            raise ValueError(f"{xml_path}: object {name!r} has <difficult>{difficult}</difficult>, expected 0 or 1")
        if difficult == "1" and not include_difficult:
            continue
        names.append(name)
    return names


def read_voc(
    root: str | os.PathLike,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    single_label: bool = True,
    include_difficult: bool = True,
    class_names: Sequence[str] | None = None,
) -> Dataset:
    """Pascal VOC 2007+ images with the object classes of their XML annotations as labels.

    Used for VOC 2007.  Each name in a part is an image-set file such as
    ``VOCdevkit/VOC2007/ImageSets/Main/trainval.txt`` (one image id per line).  The devkit year
    folder is the set file's great-grandparent (``VOCdevkit/VOC2007``); the annotation of image
    ``<id>`` is ``<year>/Annotations/<id>.xml`` and its image ``<year>/JPEGImages/<id>.jpg``.

    Parameters
    ----------
    root : path
        Folder the names in ``parts`` are relative to (absolute names are used as they are).
    parts : mapping of str to list of path
        Part name -> image-set files; rows follow the files and their lines in order.
    single_label : bool
        True (the paper: "drop images with more than one label"): keep only the images whose
        objects all carry one class name; their count is logged.  False: one row per (image,
        class) pair, so an image showing a cat and a dog appears twice, once per label.
    include_difficult : bool
        Whether objects flagged ``<difficult>1</difficult>`` count.  Images left without any
        object are dropped (and counted in the log).
    class_names : sequence of str, optional
        The classes in label order (e.g. :data:`VOC2007_CLASSES`); an object class outside it is
        an error.  Default: the sorted names seen in the kept images.

    Returns
    -------
    Dataset
        ``x_kind="image_paths"``; ``X`` = ``<year>/JPEGImages/<id>.jpg`` relative to ``root``.

    Raises
    ------
    ValueError
        ``"<set file>:<line>: ..."`` for a line that is not a single image id or an id without
        annotation file; ``"<xml>:<line>: malformed XML ..."`` for an unparsable annotation;
        ``"<xml>: ..."`` for an object without name or a class not in ``class_names``.
        Image files are not checked here; feature extraction names a missing one.
    """
    parts_ = part_list(parts)
    given = _check_class_names(class_names)
    # rows as (part, image path, [class names])
    rows: list[tuple[str, str, list[str], Path]] = []
    dropped_multi, dropped_empty, n_images = 0, 0, 0
    for part, names in parts_:
        for name in names:
            set_file = resolve(root, name, "image-set file")
            year_dir = set_file.parent.parent.parent
            ann_dir, img_dir = year_dir / "Annotations", year_dir / "JPEGImages"
            with open_text(set_file) as f:
                try:
                    lines = list(enumerate(f, start=1))
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{set_file}: not UTF-8 text ({exc})") from None
            for lineno, line in lines:
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 1:
                    raise ValueError(
                        f"{set_file}:{lineno}: expected one image id per line, got {line.strip()!r} "
                        "(use the Main/<set>.txt files, not the per-class <class>_<set>.txt ones)"
                    )
                image_id = fields[0]
                xml_path = ann_dir / f"{image_id}.xml"
                if not xml_path.is_file():
                    raise ValueError(f"{set_file}:{lineno}: image id {image_id!r} has no annotation ({xml_path} does not exist)")
                objects = _voc_objects(xml_path, include_difficult)
                n_images += 1
                labels = sorted(set(objects))
                if not labels:
                    dropped_empty += 1
                    continue
                if single_label and len(labels) > 1:
                    dropped_multi += 1
                    continue
                rows.append((part, _relative(img_dir / f"{image_id}.jpg", root), labels, xml_path))

    if given is not None:
        class_list = given
        known = set(given)
        for _, _, labels, xml_path in rows:
            for c in labels:
                if c not in known:
                    raise ValueError(f"{xml_path}: object class {c!r} is not in class_names ({len(given)} classes)")
    else:
        class_list = sorted({c for _, _, labels, _ in rows for c in labels})
        if not class_list:
            raise ValueError(f"{', '.join(str(n) for _, ns in parts_ for n in ns)}: no image with a labelled object")
    index = {c: i for i, c in enumerate(class_list)}
    paths, y, part_of = [], [], []
    for part, path, labels, _ in rows:
        for c in labels:
            paths.append(path)
            y.append(index[c])
            part_of.append(part)
    if dropped_multi:
        logger.info("VOC: dropped %d of %d images showing more than one class (single_label=True)", dropped_multi, n_images)
    if dropped_empty:
        logger.info(
            "VOC: dropped %d of %d images without %sobjects", dropped_empty, n_images,
            "" if include_difficult else "non-difficult ",
        )  # fmt: skip
    sets = "; ".join(f"{part}: {', '.join(_relative(resolve(root, n), root) for n in ns)}" for part, ns in parts_)
    description = (
        f"Pascal VOC image sets ({sets}); {n_images} images, "
        + (f"{dropped_multi} with more than one class dropped" if single_label else "one row per (image, class)")
        + ("" if include_difficult else ", difficult objects ignored")
    )
    logger.info("read %d rows of %d classes (%s)", len(paths), len(class_list), _part_counts(part_of, parts_))
    return _dataset(paths, y, part_of, class_list, description)


# --------------------------------------------------------------------------------------------
# CSV lists of images (the authors' VOC 2006 split)
# --------------------------------------------------------------------------------------------


def _onehot(value: str, where: str) -> list[int]:
    text = value.strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"{where}: expected a one-hot list such as '[0, 1, 0]', got {value!r}")
    inner = text[1:-1].strip()
    items = [s.strip() for s in inner.split(",")] if inner else []
    out = []
    for s in items:
        try:
            v = float(s)
        except ValueError:
            v = None
        if v not in (0.0, 1.0):
            raise ValueError(f"{where}: one-hot entries must be 0 or 1, got {s!r} in {value!r}")
        out.append(int(v))
    if sum(out) != 1:
        raise ValueError(f"{where}: expected exactly one 1 in the one-hot label, got {sum(out)} in {value!r}")
    return out


def read_image_list(
    root: str | os.PathLike,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    path_column: str = "full_path",
    label_column: str = "marginal_labels",
    label_format: str = "onehot",
    image_dir: str | os.PathLike = "",
    class_names: Sequence[str] | None = None,
) -> Dataset:
    """Images listed in CSV files with a header row: an image path column and a label column.

    Used for VOC 2006 with the paper authors' split (``data_VOC2006_TRAINVAL.csv``,
    ``data_VOC2006_TEST.csv``: ``full_path,marginal_labels`` with rows like
    ``/home/.../PNGImages/000006.png,"[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]"``), read with
    ``class_names=VOC2006_CLASSES`` and ``image_dir`` pointing at the ``PNGImages`` folder.

    Parameters
    ----------
    root : path
        Folder the names in ``parts`` and ``image_dir`` are relative to.
    parts : mapping of str to list of path
        Part name -> CSV files (UTF-8, optionally ``.gz``/``.bz2``/``.xz``); rows in file order.
    path_column, label_column : str
        Header names of the image path and label columns.
    label_format : {"onehot", "name"}
        ``"onehot"``: the label is a list like ``[0, 1, 0]`` with exactly one 1, the same length
        on every row; the class is the position of the 1.  ``"name"``: the label is a class name.
    image_dir : path
        The image path of a row is ``image_dir / basename(<path column>)`` -- only the file name
        of the listed path is kept, since the authors' absolute paths point at their machine.
    class_names : sequence of str, optional
        ``"onehot"``: one name per one-hot position (length must match); default ``"0" .. "K-1"``.
        ``"name"``: the classes in label order (a label outside it is an error); default the
        sorted names seen.

    Returns
    -------
    Dataset
        ``x_kind="image_paths"``; ``X`` = ``image_dir/<file name>`` relative to ``root``.

    Raises
    ------
    ValueError
        ``"<csv>:<line>: ..."`` for a missing column, a row with the wrong number of fields, an
        empty path, or a bad label; ``"<csv>: ..."`` for a file without rows.  Image files are
        not checked here; feature extraction names a missing one.
    """
    if label_format not in ("onehot", "name"):
        raise ValueError(f"label_format: expected 'onehot' or 'name', got {label_format!r}")
    parts_ = part_list(parts)
    given = _check_class_names(class_names)
    img_dir = Path(image_dir)
    if root is not None and not img_dir.is_absolute():
        img_dir = Path(root) / img_dir
    width = len(given) if (given is not None and label_format == "onehot") else None
    width_from = "class_names" if width is not None else None

    rows: list[tuple[str, str, int | str, str]] = []  # part, path, label, where
    files_read = []
    for part, names in parts_:
        for name in names:
            path = resolve(root, name, "file")
            files_read.append(path)
            n_rows = 0
            with open_text(path) as f:
                reader = csv.reader(f)
                try:
                    header = next(reader, None)
                    if header is None:
                        raise ValueError(f"{path}: empty file (expected a header row with {path_column!r} and {label_column!r})")
                    header = [h.strip() for h in header]
                    for col in (path_column, label_column):
                        if col not in header:
                            raise ValueError(f"{path}:1: no column {col!r} (columns: {', '.join(header)})")
                    i_path, i_label = header.index(path_column), header.index(label_column)
                    for row in reader:
                        where = f"{path}:{reader.line_num}"
                        if not row or (len(row) == 1 and not row[0].strip()):
                            continue
                        if len(row) != len(header):
                            raise ValueError(f"{where}: expected {len(header)} fields (as in the header), got {len(row)}")
                        base = row[i_path].strip().replace("\\", "/").rsplit("/", 1)[-1]
                        if not base:
                            raise ValueError(f"{where}: empty image path in column {path_column!r}")
                        if label_format == "onehot":
                            vec = _onehot(row[i_label], where)
                            if width is None:
                                width, width_from = len(vec), where
                            elif len(vec) != width:
                                raise ValueError(
                                    f"{where}: one-hot label has {len(vec)} entries, expected {width} (from {width_from})"
                                )
                            label: int | str = vec.index(1)
                        else:
                            label = row[i_label].strip()
                            if not label:
                                raise ValueError(f"{where}: empty class name in column {label_column!r}")
                            if given is not None and label not in given:
                                raise ValueError(f"{where}: class {label!r} is not in class_names ({len(given)} classes)")
                        rows.append((part, _relative(img_dir / base, root), label, where))
                        n_rows += 1
                except csv.Error as exc:
                    raise ValueError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
            if n_rows == 0:
                raise ValueError(f"{path}: no rows after the header")

    if label_format == "onehot":
        class_list = given if given is not None else [str(k) for k in range(width or 0)]
        y = [int(lab) for _, _, lab, _ in rows]
    else:
        class_list = given if given is not None else sorted({str(lab) for _, _, lab, _ in rows})
        index = {c: i for i, c in enumerate(class_list)}
        y = [index[str(lab)] for _, _, lab, _ in rows]
    paths = [p for _, p, _, _ in rows]
    part_of = [p for p, _, _, _ in rows]
    description = (
        "image list CSVs ("
        + "; ".join(f"{part}: {', '.join(_relative(resolve(root, n), root) for n in ns)}" for part, ns in parts_)
        + f"), images under {_relative(img_dir, root)}, {label_format} labels"
    )
    logger.info("read %d images of %d classes (%s)", len(paths), len(class_list), _part_counts(part_of, parts_))
    return _dataset(paths, y, part_of, class_list, description)
