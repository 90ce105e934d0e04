"""Reader for documents in CSV files, one document and its label per row: **DBpedia**.

The paper's DBpedia data is the Kaggle "DBPedia Classes" release: ``DBPEDIA_train.csv``,
``DBPEDIA_val.csv`` and ``DBPEDIA_test.csv`` with the columns ``text,l1,l2,l3``; the class is the
third level ``l3`` (219 classes) and ``l1 > l2 > l3`` is the class hierarchy.  Texts contain
commas and are quoted as usual (RFC 4180), possibly over several lines.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ._files import describe_parts, encode_labels, open_binary, part_array, part_list, resolve
from .base import Dataset

__all__ = ["read_csv_text"]

logger = logging.getLogger(__name__)


def _line_of_row(path: Path, row: int, sep: str, encoding: str) -> int:
    """The physical line (1-based, the header is line 1) on which data row ``row`` (0-based) starts.

    Rescans the file with the :mod:`csv` module, which follows quoted fields over line breaks
    as pandas does; blank lines are skipped by both.
    """
    with io.TextIOWrapper(open_binary(path), encoding=encoding, newline="") as fh:
        reader = csv.reader(fh, delimiter=sep)
        n, end = -1, 0  # n: data row number of the next non-blank record (-1 = the header)
        for record in reader:
            start, end = end + 1, reader.line_num
            if not record:
                continue
            if n == row:
                return start
            n += 1
    return end  # not reached for a row that pandas read


def _where(path: Path, row: int, sep: str, encoding: str) -> str:
    return f"{path}:{_line_of_row(path, row, sep, encoding)}"


def _read_one(path: Path, columns: list[str], sep: str, encoding: str):
    """The wanted columns of one CSV file as a DataFrame of str (no NA conversion)."""
    import pandas as pd

    try:
        header = pd.read_csv(path, sep=sep, encoding=encoding, nrows=0, engine="c").columns
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r} (columns: {', '.join(map(str, header))})")
        # All columns are read (no usecols): pandas then rejects a row with too many fields,
        # e.g. an unquoted comma in a text, instead of silently dropping the extra field.
        frame = pd.read_csv(path, sep=sep, encoding=encoding, dtype=str, keep_default_na=False, na_filter=False, engine="c")
        return frame[columns]
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty file (expected a header line naming the columns)") from None
    except pd.errors.ParserError as exc:
        raise ValueError(f"{path}: {str(exc).strip()}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not {encoding} text ({exc})") from None


def read_csv_text(
    root: str | os.PathLike | None,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    text_column: str,
    label_column: str,
    sep: str = ",",
    encoding: str = "utf-8",
    hierarchy_columns: Sequence[str] | None = None,
) -> Dataset:
    """Read documents and their labels from CSV files with a header (DBpedia).

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to.
    parts : mapping of str to list of file names
        Part name to the CSV files whose rows make it up (``.gz``/``.bz2``/``.xz`` allowed).
    text_column, label_column : str
        Header names of the document and of its class (``"text"`` and ``"l3"`` for DBpedia).
    sep : str
        The one-character field separator (``","``; ``"\\t"`` for TSV).
    encoding : str
        Text encoding of the files.
    hierarchy_columns : sequence of str, optional
        Columns holding the label path, root first, ending with ``label_column`` (DBpedia:
        ``["l1", "l2", "l3"]``).  The class hierarchy is built from them (a node is its whole
        path prefix, so equal names at different places are different nodes); every row of a
        class must give the same path.

    Returns
    -------
    Dataset
        ``X`` the documents (one ``str`` per row, as written), ``x_kind`` ``"text"``; ``y``
        indices into ``class_names``, the labels (whitespace-stripped) sorted; ``hierarchy``
        when ``hierarchy_columns`` is given; ``part`` per row; ``name`` empty.

    Raises
    ------
    ValueError
        ``"<path>: no column 'x' (columns: ...)"``; pandas' parse errors prefixed with the path
        (pandas names the line); ``"<path>:<line>: empty label (data row <n>)"`` (also for an
        empty text or hierarchy level), where ``<line>`` is the physical line on which the row
        starts, the header being line 1 (quoted fields may span lines, so the data row number
        is given too); ``"<path>:<line>: class ... has the path ... here but ... at
        <path>:<line>"`` for a class reached by two paths.
    """
    if not isinstance(sep, str) or len(sep) != 1:
        raise ValueError(f"sep: expected a single character, got {sep!r}")
    hcols = [str(c) for c in hierarchy_columns] if hierarchy_columns else []
    if hcols and hcols[-1] != label_column:
        raise ValueError(f"hierarchy_columns: the last column must be label_column {label_column!r}, got {hcols!r}")
    plist = part_list(parts)
    columns = list(dict.fromkeys([text_column, label_column, *hcols]))

    texts, labels, paths, part_names, counts, sources = [], [], [], [], [], []
    for part, names in plist:
        for name in names:
            path = resolve(root, name)
            df = _read_one(path, columns, sep, encoding)
            # Labels and levels are stripped; the first row with an empty field is an error.
            first_bad: tuple[int, str] | None = None
            for col in [text_column, *dict.fromkeys([label_column, *hcols])]:
                if col != text_column:
                    df[col] = df[col].str.strip()
                empty = np.flatnonzero((df[col] == "").to_numpy())
                if empty.size and (first_bad is None or empty[0] < first_bad[0]):
                    what = "empty text" if col == text_column else "empty label" if col == label_column else f"empty hierarchy level {col!r}"
                    first_bad = (int(empty[0]), what)
            if first_bad is not None:
                row, what = first_bad
                raise ValueError(f"{_where(path, row, sep, encoding)}: {what} (data row {row + 1})")
            texts.append(df[text_column].to_numpy(dtype=object))
            labels.append(df[label_column].to_numpy(dtype=object))
            if hcols:
                frame = df[hcols].copy()
                frame["_file"], frame["_row"] = len(sources), np.arange(len(df))
                paths.append(frame)
            sources.append(path)
            part_names.append(part)
            counts.append(len(df))

    all_labels = np.concatenate(labels)
    if all_labels.size == 0:
        raise ValueError(f"{sources[0]}: no rows in {describe_parts(plist)}")
    class_names, y = encode_labels(all_labels.astype(np.str_))
    X = np.concatenate(texts)
    desc_files = describe_parts(plist)

    hierarchy = None
    if hcols:
        import pandas as pd

        from .hierarchies import hierarchy_from_paths

        frame = pd.concat(paths, ignore_index=True)
        distinct = frame.drop_duplicates(subset=hcols)
        again = distinct[distinct.duplicated(subset=[label_column])]
        if len(again):
            second = again.iloc[0]
            first = distinct[distinct[label_column] == second[label_column]].iloc[0]
            f1, f2 = sources[int(first["_file"])], sources[int(second["_file"])]
            raise ValueError(
                f"{_where(f2, int(second['_row']), sep, encoding)}: class {second[label_column]!r} has the path "
                f"{' > '.join(second[hcols])} here but {' > '.join(first[hcols])} at "
                f"{_where(f1, int(first['_row']), sep, encoding)}; every class needs exactly one place in the hierarchy"
            )
        by_class = dict(zip(distinct[label_column], distinct[hcols].itertuples(index=False, name=None)))
        hierarchy = hierarchy_from_paths(
            [by_class[c] for c in class_names], class_names, identity="prefix", where=f"{' > '.join(hcols)} of {desc_files}"
        )

    description = (
        f"documents from CSV files {desc_files} (text column {text_column!r}, label column {label_column!r}"
        + (f", hierarchy from columns {' > '.join(hcols)}" if hcols else "")
        + f", sep {sep!r}, {encoding})"
    )
    logger.debug("read_csv_text: %d documents, %d classes", X.size, len(class_names))
    return Dataset(
        name="", X=X, y=y, class_names=class_names, hierarchy=hierarchy, description=description,
        x_kind="text", part=part_array(part_names, counts),
    )
