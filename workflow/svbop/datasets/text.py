"""Reader for documents in CSV files, one document and its label per row: **DBpedia**, **Proteins**.

The paper's DBpedia data is the Kaggle "DBPedia Classes" release: ``DBPEDIA_train.csv``,
``DBPEDIA_val.csv`` and ``DBPEDIA_test.csv`` with the columns ``text,l1,l2,l3``; the class is the
third level ``l3`` (219 classes) and ``l1 > l2 > l3`` is the class hierarchy.  Texts contain
commas and are quoted as usual (RFC 4180), possibly over several lines.

The authors' Proteins split (``TRAINVAL.csv`` and ``TEST.csv`` of their repository) has one enzyme
per row: ``enzyme`` (the amino-acid sequence), ``label`` (the class, 1..3485) and ``fund`` (its Pfam
domains, read by :func:`svbop.features.domains.read_domain_column`); ``row_ids=True`` gives every row
the id :func:`csv_row_id` that joins the two.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ._files import (
    MAX_LINE_BYTES, SEPARATORS, OptionHint, describe_parts, encode_labels, open_binary, part_array, part_list, resolve, separator_in,
    share, shorten,
)
from .base import Dataset

__all__ = ["csv_row_id", "read_csv_columns", "read_csv_text"]

logger = logging.getLogger(__name__)


#: Rows with several labels in the label column (``label_sep`` given): what to do with them.
MULTILABEL = ("error", "first", "skip")

#: Separators that, found in labels while ``label_sep`` is unset, suggest several labels per field.
LABEL_SEPARATORS = (";", "|", ",")


def _no_column(path: Path, column: str, header: list[str], sep: str) -> ValueError:
    """The error for a missing column; a header read as one column that holds another separator
    gets a hint naming the ``sep`` to set (a TSV file read as CSV, say)."""
    if len(header) == 1:
        found, _ = separator_in(header, [c for c in SEPARATORS if c != sep])
        if found is not None:
            return OptionHint(
                f"{path}: no column {column!r}; the header {shorten(header[0])!r} is one column and looks "
                f"{SEPARATORS[found]}-separated",
                f"sep: {json.dumps(found)}",
            )
    return ValueError(f"{path}: no column {column!r} (columns: {', '.join(header)})")


def _read_one(path: Path, columns: list, sep: str, encoding: str,
              header_line: bool = True) -> tuple[dict, list[int]]:
    """The wanted columns of one CSV file (as written, strings) and the line each record starts on.

    With ``header_line=False`` the file has no header: ``columns`` are 0-based column numbers, and
    the first record sets the number of fields every record must have.

    Parsed with :mod:`csv` in strict RFC 4180 mode: a quote inside a quoted field must be doubled,
    so a stray or unterminated quote is an error naming its line instead of a field that
    silently swallows the rows after it.  Every record must have as many fields as the header
    (an unquoted separator in a text is an error, not a dropped field); blank lines are skipped;
    a header that names a column twice is an error (which of the two would be read?).
    """
    columns_out: dict[str, list[str]] = {c: [] for c in columns}
    lines: list[int] = []
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # long texts and sequences
    try:
        with io.TextIOWrapper(open_binary(path, max_line=MAX_LINE_BYTES), encoding=encoding, newline="") as fh:
            reader = csv.reader(fh, delimiter=sep, strict=True)
            end = 0
            header: list[str] | None = None
            take: list[int] = []
            for record in reader:
                start, end = end + 1, reader.line_num
                if not record:
                    continue
                if header is None and not header_line:
                    header = [str(i) for i in range(len(record))]
                    beyond = [c for c in columns if c >= len(record)]
                    if beyond:
                        raise ValueError(
                            f"{path}:{start}: no column {beyond[0]} (header: false; this row has {len(record)} fields, "
                            f"numbered 0 to {len(record) - 1})"
                        )
                    take = list(columns)
                elif header is None:
                    header = [h.lstrip("\ufeff") if i == 0 else h for i, h in enumerate(record)]
                    seen: dict[str, int] = {}
                    for i, name in enumerate(header):
                        if name in seen:
                            raise ValueError(
                                f"{path}:{start}: the header names column {name!r} twice (fields {seen[name] + 1} and {i + 1})"
                            )
                        seen[name] = i
                    missing = [c for c in columns if c not in seen]
                    if missing:
                        raise _no_column(path, missing[0], header, sep)
                    take = [seen[c] for c in columns]
                    continue
                if len(record) != len(header):
                    raise ValueError(
                        f"{path}:{start}: {len(record)} fields, expected {len(header)} as in the "
                        f"{'header' if header_line else 'first row'} "
                        f"(an unquoted {sep!r} in a text, or a missing field?)"
                    )
                for c, i in zip(columns, take):
                    columns_out[c].append(record[i])
                lines.append(start)
    except csv.Error as exc:
        raise ValueError(f"{path}:{reader.line_num}: malformed CSV ({exc}; a quote inside a quoted field must be doubled)") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not {encoding} text ({exc})") from None
    if header is None:
        raise ValueError(f"{path}: empty file" + (" (expected a header line naming the columns)" if header_line else ""))
    return columns_out, lines


def read_csv_columns(
    path: str | os.PathLike, columns: Sequence[str], *, sep: str = ",", encoding: str = "utf-8"
) -> tuple[dict[str, list[str]], list[int]]:
    """Some columns of one CSV file with a header, parsed as :func:`read_csv_text` parses it.

    Parameters
    ----------
    path : path
        The CSV file (``.gz``/``.bz2``/``.xz`` allowed).
    columns : sequence of str
        Header names of the columns to return.
    sep, encoding : str
        As for :func:`read_csv_text`.

    Returns
    -------
    values : dict of str to list of str
        Column name -> its field in every data row, as written (blank lines skipped).
    lines : list of int
        The line on which each data row starts (the header is line 1).

    Raises
    ------
    ValueError
        As :func:`read_csv_text`: a missing column (with the ``sep`` to set when the header reads
        as one column holding another separator), a malformed record or an empty file, naming
        the file (and line).
    """
    if not isinstance(sep, str) or len(sep) != 1:
        raise ValueError(f"sep: expected a single character, got {sep!r}")
    return _read_one(Path(path), list(dict.fromkeys(columns)), sep, encoding)


def csv_row_id(name: str | os.PathLike, row: int) -> str:
    """The id of data row ``row`` (1-based, blank lines not counted) of the CSV file ``name``.

    ``name`` is the file name as the dataset's config writes it (relative to the raw folder), so
    that rows of different files never share an id.

    Examples
    --------
    >>> csv_row_id("TEST.csv", 1)
    'TEST.csv:1'
    """
    return f"{name}:{int(row)}"


def _split_labels(path: Path, labels: list[str], lines: list[int], label_sep: str | None, multilabel: str):
    """Apply ``multilabel`` to the label column.

    Returns the labels, the kept row positions (None: all), and the rows with several labels:
    their number and the first of them as ``(line, field, label kept)`` (None when there is none).
    """
    if label_sep is None:
        return labels, None, 0, None
    out, keep = [], []
    n_multi, example = 0, None
    for row, (text, line) in enumerate(zip(labels, lines)):
        parts = [p.strip() for p in text.split(label_sep)]
        parts = [p for p in parts if p]
        if len(parts) > 1:
            if multilabel == "error":
                raise ValueError(
                    f"{path}:{line}: {len(parts)} labels {text!r} (data row {row + 1}), expected one "
                    f"(set multilabel: first or skip to accept such rows)"
                )
            n_multi += 1
            if example is None:
                example = (line, text, parts[0])
            if multilabel == "skip":
                continue
        out.append(parts[0] if parts else "")
        keep.append(row)
    return out, keep, n_multi, example


def _warn_separator_in_labels(labels: np.ndarray, where) -> None:
    """Warn when labels hold a separator (``;``, ``|``, ``,``) while ``label_sep`` is unset: each
    such field becomes a class of its own (and, split into levels, a deep hierarchy of them)."""
    import pandas as pd

    series = pd.Series(labels, dtype=object)
    best, hits = None, None
    for c in LABEL_SEPARATORS:
        found = series.str.contains(c, regex=False).to_numpy(dtype=bool)
        if found.any() and (hits is None or found.sum() > hits.sum()):
            best, hits = c, found
    if best is None:
        return
    first = int(np.flatnonzero(hits)[0])
    logger.warning(
        "csv_text: %s have a label containing %r, e.g. %r at %s, and are read as %d classes of their own "
        "(label_sep is unset); if %r separates several labels, set `label_sep: %s` in the format, with multilabel: "
        "first or skip",
        share(int(hits.sum()), labels.size), best, str(labels[first]), where(first),
        np.unique(labels[hits].astype(np.str_)).size, best, json.dumps(best),
    )


def read_csv_text(
    root: str | os.PathLike | None,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    text_column: str | int,
    label_column: str | int,
    header: bool = True,
    sep: str = ",",
    encoding: str = "utf-8",
    hierarchy_columns: Sequence[str] | None = None,
    label_sep: str | None = None,
    multilabel: str = "error",
    row_ids: bool = False,
    group_column: str | int | None = None,
) -> Dataset:
    """Read documents and their labels from CSV files with a header (DBpedia).

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to.
    parts : mapping of str to list of file names
        Part name to the CSV files whose rows make it up (``.gz``/``.bz2``/``.xz`` allowed).
    text_column, label_column : str or int
        Header names of the document and of its class (``"text"`` and ``"l3"`` for DBpedia); with
        ``header=False``, their 0-based column numbers.
    header : bool
        Whether the first line of every file names the columns (default).  ``False``: every line
        is a data row, and ``text_column``, ``label_column`` and ``hierarchy_columns`` are 0-based
        column numbers (a file without a header read with ``header=True`` would lose its first row).
    sep : str
        The one-character field separator (``","``; ``"\\t"`` for TSV).
    encoding : str
        Text encoding of the files.
    hierarchy_columns : sequence of str or int, optional
        Columns holding the label path, root first, ending with ``label_column`` (DBpedia:
        ``["l1", "l2", "l3"]``).  The class hierarchy is built from them (a node is its whole
        path prefix, so equal names at different places are different nodes); every row of a
        class must give the same path.
    label_sep : str, optional
        Separator of several labels in one label field (e.g. ``";"`` for ``1.1.1.1;3.1.1.3``).
        Without it a label is taken as written; labels that then hold a ``;``, ``|`` or ``,``
        (each such field becomes a class of its own) are counted in a WARNING that suggests
        ``label_sep``.
    multilabel : {"error", "first", "skip"}
        With ``label_sep``, what to do with a row that has several labels (as libsvm's option):
        ``"error"`` raises naming the line, ``"first"`` keeps the first label written, ``"skip"``
        drops the row; both log a WARNING with the number and share of such rows and an example.
    row_ids : bool
        Give every row the id :func:`csv_row_id` of its file name (as in ``parts``) and data row
        number, to join per-row annotations to it (Proteins: the domains of the ``fund`` column,
        :func:`svbop.features.domains.read_domain_column`).  Off by default: no ids are stored.
    group_column : str or int, optional
        A column naming each row's group (its name, or its 0-based number with ``header=False``),
        for group-conditional (Mondrian) conformal sets (``methods.mondrian.by: [group_column]``).
        Its values are taken as written, whitespace-stripped; an empty one is an error.

    Returns
    -------
    Dataset
        ``X`` the documents (one ``str`` per row, as written), ``x_kind`` ``"text"``; ``y``
        indices into ``class_names``, the labels (whitespace-stripped) sorted; ``hierarchy``
        when ``hierarchy_columns`` is given; ``part`` per row; ``ids`` with ``row_ids``;
        ``groups`` with ``group_column``; ``name`` empty.

    Raises
    ------
    ValueError
        ``"<path>: no column 'x' (columns: ...)"``, or, when the header is one column holding a tab,
        ``;``, ``|`` or ``,``, an :class:`~svbop.datasets._files.OptionHint` ``"<path>: no column 'x';
        the header '...' is one column and looks tab-separated: set `sep: "\\t"`"`` (followed by
        ``under datasets.<name>.format`` when read through :func:`~svbop.datasets.read_dataset`);
        ``"<path>:<line>: ..."`` for a header naming a
        column twice, a record with another number of fields than the header, a stray or
        unterminated quote, several labels with ``multilabel="error"``;
        ``"<path>:<line>: empty label (data row <n>)"`` (also for an
        empty text, hierarchy level or group), where ``<line>`` is the physical line on which the row
        starts, the header being line 1 (quoted fields may span lines, so the data row number
        is given too); ``"<path>:<line>: class ... has the path ... here but ... at
        <path>:<line>"`` for a class reached by two paths.
    """
    if not isinstance(sep, str) or len(sep) != 1:
        raise ValueError(f"sep: expected a single character, got {sep!r}")
    if multilabel not in MULTILABEL:
        raise ValueError(f"multilabel: expected one of {list(MULTILABEL)}, got {multilabel!r}")
    if label_sep is not None and (not isinstance(label_sep, str) or not label_sep):
        raise ValueError(f"label_sep: expected a non-empty string, got {label_sep!r}")
    if not isinstance(header, bool):
        raise ValueError(f"header: expected true or false, got {header!r}")
    named = {"text_column": text_column, "label_column": label_column}
    named.update({f"hierarchy_columns[{i}]": c for i, c in enumerate(hierarchy_columns or [])})
    if group_column is not None:
        named["group_column"] = group_column
    for key, value in named.items():
        number = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        if header and not isinstance(value, str):
            raise ValueError(f"{key}: {value!r}: with a header line give the column's name (a number needs header: false)")
        if not header and not (number and value >= 0):
            raise ValueError(f"{key}: {value!r}: with header: false give a 0-based column number")
    if not header:
        text_column, label_column = int(text_column), int(label_column)
        group_column = None if group_column is None else int(group_column)
    hcols = ([str(c) if header else int(c) for c in hierarchy_columns]) if hierarchy_columns else []
    if hcols and label_sep is not None:
        raise ValueError(
            "label_sep: not with hierarchy_columns (which level would go with which label?); "
            "derive the hierarchy from the label instead (hierarchy: {from_label: {sep: ...}})"
        )
    if hcols and hcols[-1] != label_column:
        raise ValueError(f"hierarchy_columns: the last column must be label_column {label_column!r}, got {hcols!r}")
    plist = part_list(parts)
    columns = list(dict.fromkeys([text_column, label_column, *hcols, *([] if group_column is None else [group_column])]))

    import pandas as pd

    texts, labels, paths, part_names, counts, sources, lines_of, ids = [], [], [], [], [], [], [], []
    groups = []
    n_skipped = n_read = n_multi = 0
    multi_example = None
    for part, names in plist:
        for name in names:
            path = resolve(root, name)
            data, lines = _read_one(path, columns, sep, encoding, header_line=header)
            n_read += len(lines)
            data[label_column], keep, n, example = _split_labels(path, data[label_column], lines, label_sep, multilabel)
            n_multi += n
            if multi_example is None and example is not None:
                multi_example = (path, *example)
            if row_ids:  # numbered before any row is skipped, as read_csv_columns sees the file
                ids.extend(csv_row_id(name, row + 1) for row in (range(len(lines)) if keep is None else keep))
            if keep is not None and len(keep) != len(lines):
                n_skipped += len(lines) - len(keep)
                data = {c: (v if c == label_column else [v[i] for i in keep]) for c, v in data.items()}
                lines = [lines[i] for i in keep]
            df = pd.DataFrame(data, columns=columns, dtype=object)
            # Labels and levels are stripped; the first row with an empty field is an error.
            first_bad: tuple[int, str] | None = None
            checked = dict.fromkeys([label_column, *hcols, *([] if group_column is None else [group_column])])
            for col in [text_column, *checked]:
                if col != text_column:
                    df[col] = df[col].str.strip()
                empty = np.flatnonzero((df[col] == "").to_numpy())
                if empty.size and (first_bad is None or empty[0] < first_bad[0]):
                    what = ("empty text" if col == text_column else "empty label" if col == label_column
                            else f"empty hierarchy level {col!r}" if col in hcols else f"empty group (group_column {col!r})")
                    first_bad = (int(empty[0]), what)
            if first_bad is not None:
                row, what = first_bad
                raise ValueError(f"{path}:{lines[row]}: {what} (data row {row + 1})")
            texts.append(df[text_column].to_numpy(dtype=object))
            labels.append(df[label_column].to_numpy(dtype=object))
            if group_column is not None:
                groups.append(df[group_column].to_numpy(dtype=object))
            if hcols:
                frame = df[hcols].copy()
                frame["_file"], frame["_row"] = len(sources), np.arange(len(df))
                paths.append(frame)
            sources.append(path)
            lines_of.append(lines)
            part_names.append(part)
            counts.append(len(df))
    if n_skipped:
        logger.warning("csv_text: skipped %d rows with several labels, %s read (multilabel='skip')",
                       n_skipped, share(n_skipped, n_read))
    elif n_multi:
        path, line, text, kept = multi_example
        logger.warning("csv_text: %s had more than one label; kept the first (multilabel: first), e.g. %s:%d %r -> %r",
                       share(n_multi, n_read), path, line, text, kept)

    def _where(file: int, row: int) -> str:
        return f"{sources[file]}:{lines_of[file][row]}"

    all_labels = np.concatenate(labels)
    if all_labels.size == 0:
        raise ValueError(f"{sources[0]}: no rows in {describe_parts(plist)}")
    if label_sep is None:
        starts = np.cumsum([0, *counts])

        def _where_row(i: int) -> str:  # row i of all files -> "<file>:<line>"
            file = int(np.searchsorted(starts, i, side="right")) - 1
            return _where(file, i - int(starts[file]))

        _warn_separator_in_labels(all_labels, _where_row)
    class_names, y = encode_labels(all_labels.astype(np.str_))
    X = np.concatenate(texts)
    desc_files = describe_parts(plist)

    hierarchy = None
    if hcols:
        from .hierarchies import hierarchy_from_paths

        frame = pd.concat(paths, ignore_index=True)
        distinct = frame.drop_duplicates(subset=hcols)
        again = distinct[distinct.duplicated(subset=[label_column])]
        if len(again):
            second = again.iloc[0]
            first = distinct[distinct[label_column] == second[label_column]].iloc[0]
            raise ValueError(
                f"{_where(int(second['_file']), int(second['_row']))}: class {second[label_column]!r} has the path "
                f"{' > '.join(map(str, second[hcols]))} here but {' > '.join(map(str, first[hcols]))} at "
                f"{_where(int(first['_file']), int(first['_row']))}; every class needs exactly one place in the hierarchy"
            )
        by_class = dict(zip(distinct[label_column], distinct[hcols].itertuples(index=False, name=None)))
        hierarchy = hierarchy_from_paths(
            [by_class[c] for c in class_names], class_names, identity="prefix",
            where=f"{' > '.join(map(str, hcols))} of {desc_files}"
        )
        logger.info("hierarchy from columns %s: %d nodes over %d classes, depth %d",
                    " > ".join(map(str, hcols)), hierarchy.n_nodes, hierarchy.n_classes, int(hierarchy.depth().max()))

    description = (
        f"documents from CSV files {desc_files} (text column {text_column!r}, label column {label_column!r}"
        + ("" if header else ", no header line, columns numbered from 0")
        + (f", hierarchy from columns {' > '.join(map(str, hcols))}" if hcols else "")
        + (f", labels split at {label_sep!r}, multilabel={multilabel!r}" if label_sep is not None else "")
        + (f", {n_skipped} rows skipped" if n_skipped else "")
        + (", row ids '<file>:<data row>'" if row_ids else "")
        + (f", groups from column {group_column!r}" if group_column is not None else "")
        + f", sep {sep!r}, {encoding})"
    )
    logger.debug("read_csv_text: %d documents, %d classes", X.size, len(class_names))
    return Dataset(
        name="", X=X, y=y, class_names=class_names, hierarchy=hierarchy, description=description,
        x_kind="text", part=part_array(part_names, counts), ids=ids if row_ids else None,
        groups=np.concatenate(groups) if group_column is not None else None,
    )
