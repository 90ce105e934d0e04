"""Reader for a trained model's outputs on held-out rows (``format.kind: model_outputs``).

Most people who need set-valued predictions already have a model: a fine-tuned network, a
gradient-boosting model, an LLM classifier.  Its probabilities (or logits) on held-out rows are
all that every set of this project needs: SVBOP-Full, the threshold and top-s baselines,
conformal sets, Bayes-optimal sets with a coverage guarantee and hierarchy-restricted sets depend
on ``P(c|x)`` alone (the paper's own framing).  This reader turns such files into a
:class:`~svbop.datasets.Dataset` whose ``X`` is the ``(n, K)`` matrix of scores (float64),
``y`` the labels and ``part`` the split each row was given for (``validation``,
``calibration``, ``test`` or ``all``); :func:`split_model_outputs` deals the parts that were not
given out of ``all`` (or out of ``test``), seeded and stratified.

Files
-----
scores
    ``.npy``; ``.npz`` (its only array, or ``scores_key``); ``.csv`` / ``.tsv`` (K numeric
    columns; with ``label_column`` the labels are that column of the same file, and with a
    header line the score columns' names are the class names unless ``class_names`` is given).
labels
    ``.npy`` (integers or names), or a text file with one integer or class name per line.
    Omitted when ``label_column`` is set.
groups (optional)
    Each row's group, for group-conditional (Mondrian) conformal sets: ``.npy`` (integers or
    strings) or one value per line, row-aligned with the scores; or ``group_column``, a column
    of CSV/TSV scores files.
weights (optional)
    Each row's likelihood ratio ``w(x) = dP_test(x) / dP_cal(x)`` (covariate shift, Tibshirani et
    al. 2019), for weighted conformal sets: a 1-D ``.npy`` of numbers or one number per line,
    row-aligned with the scores; finite and >= 0.
group columns (optional)
    Group indicator columns (a row may be in several groups, or in none), for sets covering within
    every group (Gibbs, Cherian, Candès 2023): a 2-D ``.npy`` of 0/1 (or booleans), or a CSV/TSV
    file of 0/1 columns with a header line naming the groups (one line per score row).
class names
    ``class_names`` (a list in the config) or ``class_names_file`` (one name per line); labels
    given as names need one of them (or a CSV header).

Every check names the file, and the row or column where it applies: NaN or inf; with
``outputs: probabilities``, a negative value or a row not summing to 1 within
:func:`sum_tolerance` of its dtype (:data:`SUM_TOLERANCE`; float16's ``2 eps``; float16 rows are
renormalised when read) (the message suggests ``outputs: logits`` when the values look like
logits); a different K than another part's; labels outside ``0 .. K - 1`` or unknown names; a
row count that differs from the labels'; an empty part.  ``.npy`` and ``.npz`` headers are
checked against the file's size before anything is allocated, and object (pickle) arrays are
refused.  Only regular files are opened (a FIFO would block, ``/dev/zero`` never ends); text files
(CSV/TSV scores, labels, groups, class names) must be UTF-8, with lines of at most
:data:`~svbop.datasets._files.MAX_LINE_BYTES` bytes.  Labels are checked in their own type before
any cast (a message shows ``1e+20`` as the file has it); text labels are ASCII integers or class
names.  A CSV header names every column once (pandas would rename a second ``a`` to ``a.1``).

:func:`check_model_outputs` makes every one of these checks on the files of the parts without
building the dataset (what ``svbop report`` runs before its workflow starts).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .._blocks import row_blocks
from .._npz import NpzReader
from ..io import load_npy
from . import _files
from ._files import open_binary, read_text_lines, regular_file, resolve, undecodable_line
from .base import Dataset

__all__ = ["OUTPUT_KINDS", "OUTPUT_PARTS", "SUM_TOLERANCE", "check_model_outputs", "detect_outputs", "part_rows",
           "read_model_outputs", "split_model_outputs", "split_origin", "sum_tolerance"]

logger = logging.getLogger(__name__)

#: What a model's scores are (``format.outputs``).
OUTPUT_KINDS = ("probabilities", "logits")
#: The parts a ``model_outputs`` dataset may give (``format.parts``).
OUTPUT_PARTS = ("validation", "calibration", "test", "all")
#: How far a row of probabilities may sum from 1.
SUM_TOLERANCE = 1e-6


def sum_tolerance(dtype, n_classes: int) -> float:
    """How far from 1 a row of probabilities stored as ``dtype`` may sum: :data:`SUM_TOLERANCE`, or,
    for a dtype too coarse to hold it (float16, 11 bits), ``2 eps + K * (its smallest subnormal)``:
    rounding each probability to the dtype moves the row's sum by at most ``eps / 2`` of it (and a
    subnormal by half its spacing), so probabilities computed in float32 and stored as float16 pass."""
    dt = np.dtype(dtype)
    if dt.kind != "f":
        return SUM_TOLERANCE
    info = np.finfo(dt)
    return max(SUM_TOLERANCE, 2 * float(info.eps) + int(n_classes) * float(info.smallest_subnormal))
_BLOCK = 8192


def _user_file(root, name, what: str) -> Path:
    """``root / name``, which must be a regular file: a FIFO would hang the reader and a device
    (``/dev/zero``) never ends, so both are refused before anything is opened."""
    return regular_file(resolve(root, name, what), what)


def _read_names(path: Path) -> list[str]:
    names = read_text_lines(path, "class names")
    if not names:
        raise ValueError(f"{path}: no class names (expected one per line)")
    empty = [i for i, n in enumerate(names) if not n.strip()]
    if empty:
        raise ValueError(f"{path}: line {empty[0] + 1}: empty class name")
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise ValueError(f"{path}: class name {dup!r} is listed twice")
    return names


def _read_csv(path: Path, *, header: bool, sep: str | None, label_column, group_column=None):
    """Scores, the label column (or None), the group column (or None) of a CSV/TSV file, and the
    score columns' names when it has a header."""
    import pandas as pd

    if sep is None:
        sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    try:  # the header is read as a row: pandas would rename a repeated name (a, a.1) without a word
        with open_binary(path, max_line=_files.MAX_LINE_BYTES) as fh:
            frame = pd.read_csv(fh, sep=sep, header=None, dtype=str, keep_default_na=False, skip_blank_lines=True,
                                encoding="utf-8")
    except UnicodeDecodeError:
        where = undecodable_line(path)
        at = f"line {where[0]}: " if where else ""
        byte = f" (byte {where[1]:#04x})" if where else ""
        raise ValueError(f"{path}: {at}not UTF-8 text{byte}; the scores file must be UTF-8") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{path}: not a readable {'tab' if sep == chr(9) else repr(sep)}-separated file "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if header:
        columns = [str(c) for c in frame.iloc[0].tolist()] if len(frame) else []
        frame = frame.iloc[1:]
        seen: dict[str, int] = {}
        for j, c in enumerate(columns):
            if not c.strip():
                raise ValueError(f"{path}: column {j + 1} has no name in the header (an index column? write the file "
                                 "without it, e.g. DataFrame.to_csv(index=False))")
            if c in seen:
                raise ValueError(f"{path}: the header names {c!r} twice (columns {seen[c] + 1} and {j + 1}); every "
                                 "column needs a name of its own")
            seen[c] = j
    else:
        columns = [str(c) for c in frame.columns]
    taken = {}  # option -> column index, resolved before any column is dropped
    for option, column in (("label_column", label_column), ("group_column", group_column)):
        if column is None:
            continue
        if header:
            if str(column) not in columns:
                raise ValueError(f"{path}: no column {str(column)!r} ({option}); its columns: "
                                 f"{', '.join(columns[:8])}{', ...' if len(columns) > 8 else ''}")
            taken[option] = columns.index(str(column))
        else:
            if isinstance(column, bool) or not isinstance(column, (int, np.integer)):
                raise ValueError(f"{path}: {option} must be a 0-based column number when header is false, "
                                 f"got {column!r}")
            if not 0 <= int(column) < len(columns):
                raise ValueError(f"{path}: {option} {column} is outside its {len(columns)} columns (0-based)")
            taken[option] = int(column)
    if len(set(taken.values())) < len(taken):
        raise ValueError(f"{path}: label_column and group_column name the same column {label_column!r}")
    labels = frame.iloc[:, taken["label_column"]].to_numpy(dtype=str) if "label_column" in taken else None
    groups = None
    if "group_column" in taken:
        groups = np.char.strip(frame.iloc[:, taken["group_column"]].to_numpy(dtype=str))
        empty = np.flatnonzero(groups == "")
        if empty.size:
            raise ValueError(f"{path}: line {int(empty[0]) + 1 + (1 if header else 0)}: empty group (group_column "
                             f"{group_column!r})")
    if taken:
        frame = frame.drop(columns=frame.columns[sorted(taken.values())])
        columns = [c for j, c in enumerate(columns) if j not in taken.values()]
    values = np.empty(frame.shape, dtype=np.float64)
    for j in range(frame.shape[1]):
        col = frame.iloc[:, j]
        try:
            values[:, j] = col.astype(np.float64).to_numpy()
        except ValueError:
            num = pd.to_numeric(col, errors="coerce")
            bad = int(np.flatnonzero(num.isna().to_numpy())[0])
            line = bad + 1 + (1 if header else 0)
            raise ValueError(f"{path}: line {line}, column {columns[j] if header else j}: {col.iloc[bad]!r} is not a "
                             f"number (set label_column if this column holds the labels)") from None
    return values, labels, groups, (columns if header else None)


def _read_scores(path: Path, *, scores_key: str | None, header: bool, sep: str | None, label_column,
                 group_column=None):
    """Scores, labels (or None), groups (or None) and column names (or None) of a scores file."""
    suffix = path.suffix.lower()
    if suffix in (".npy", ".npz"):
        for option, column, other in (("label_column", label_column, "labels"), ("group_column", group_column, "groups")):
            if column is not None:
                raise ValueError(f"{path}: {option} needs a CSV/TSV scores file; give the part a {other} file")
    if suffix == ".npy":
        return load_npy(path, "scores file"), None, None, None
    if suffix == ".npz":
        with NpzReader(path, "scores file") as data:
            keys = sorted(data.files)
            if scores_key is None:
                if len(keys) != 1:
                    raise ValueError(f"{path}: holds {len(keys)} arrays ({', '.join(keys[:8])}); set scores_key to the scores' name")
                scores_key = keys[0]
            elif scores_key not in data:
                raise ValueError(f"{path}: no array {scores_key!r} (scores_key); it holds {', '.join(keys[:8])}")
            return np.asarray(data[scores_key]), None, None, None
    if suffix in (".csv", ".tsv", ".txt", ".tab"):
        return _read_csv(path, header=header, sep=sep, label_column=label_column, group_column=group_column)
    raise ValueError(f"{path}: scores must be .npy, .npz, .csv or .tsv (got {suffix or 'no extension'})")


def _read_lines(path: Path, what: str) -> np.ndarray:
    """One value per line (stripped; trailing empty lines dropped); an empty one is refused naming its line."""
    lines = read_text_lines(path, what + "s")
    empty = [i for i, v in enumerate(lines) if not v.strip()]
    if empty:
        raise ValueError(f"{path}: line {empty[0] + 1}: empty {what}")
    return np.asarray([v.strip() for v in lines], dtype=np.str_)


def _read_labels(path: Path) -> np.ndarray:
    if path.suffix.lower() == ".npy":
        y = load_npy(path, "labels file")
        if y.ndim != 1:
            raise ValueError(f"{path}: labels have shape {y.shape}; expected one label per row (1-D)")
        return y
    return _read_lines(path, "label")


def _read_groups(path: Path) -> np.ndarray:
    """One group per row: a 1-D ``.npy`` of integers or strings, or a text file of one value per line."""
    if path.suffix.lower() == ".npy":
        g = load_npy(path, "groups file")
        if g.ndim != 1:
            raise ValueError(f"{path}: groups have shape {g.shape}; expected one group per row (1-D)")
        if g.dtype.kind not in "iuUSb":
            raise ValueError(f"{path}: groups have dtype {g.dtype}; expected integers or strings")
        g = np.asarray(_as_text(g, path, "group"), dtype=np.str_) if g.dtype.kind == "S" else g.astype(np.str_)
        g = np.char.strip(g)
        empty = np.flatnonzero(g == "")
        if empty.size:
            raise ValueError(f"{path}: row {int(empty[0])}: empty group")
        return g
    return _read_lines(path, "group")


def _read_weights(path: Path) -> np.ndarray:
    """One finite, non-negative likelihood ratio per row: a 1-D ``.npy`` of numbers, or one number per line."""
    if path.suffix.lower() == ".npy":
        w = load_npy(path, "weights file")
        if w.ndim != 1:
            raise ValueError(f"{path}: weights have shape {w.shape}; expected one weight per row (1-D)")
        if w.dtype.kind not in "iuf":
            raise ValueError(f"{path}: weights have dtype {w.dtype}; expected numbers")
        w = w.astype(np.float64)
        where = "row {}"
    else:
        lines = _read_lines(path, "weight")
        w = np.empty(lines.size, dtype=np.float64)
        for i, v in enumerate(lines.tolist()):
            try:
                w[i] = float(v)
            except ValueError:
                raise ValueError(f"{path}: line {i + 1}: {v[:40]!r} is not a number (one weight per line)") from None
        where = "line {}"
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{path}: {where.format(i if where == 'row {}' else i + 1)}: weight {w[i]!r} is not a finite "
                         "likelihood ratio >= 0")
    if w.size and not (w > 0).any():
        raise ValueError(f"{path}: every weight is 0; the likelihood ratios must not all vanish")
    return w


def _read_group_columns(path: Path) -> tuple[np.ndarray, list[str]]:
    """Group indicator columns: a 2-D ``.npy`` of 0/1 (or booleans; 1-D is one group), or a CSV/TSV
    file of 0/1 columns whose first line names them; ``(bool (n, G), names)``."""
    if path.suffix.lower() == ".npy":
        A = load_npy(path, "group columns file")
        if A.ndim == 1:
            A = A[:, None]
        if A.ndim != 2 or A.shape[1] == 0:
            raise ValueError(f"{path}: group columns have shape {A.shape}; expected (rows, groups) of 0/1")
        if A.dtype.kind not in "iufb":
            raise ValueError(f"{path}: group columns have dtype {A.dtype}; expected 0/1 numbers or booleans")
        bad = np.argwhere((A != 0) & (A != 1))
        if bad.size:
            i, j = (int(v) for v in bad[0])
            raise ValueError(f"{path}: row {i}, column {j}: {A[i, j].item()!r} is not 0 or 1 (group indicators)")
        return A.astype(bool), [f"group_{j}" for j in range(A.shape[1])]
    rows, lines, sep = _read_delimited(path, "group columns")
    if not rows:
        raise ValueError(f"{path}: empty; expected a header line naming the groups, then one line of 0/1 per row")
    names = [v.strip() for v in rows[0]]
    if any(not v for v in names) or len(set(names)) != len(names):
        raise ValueError(f"{path}: line {lines[0]}: expected the groups' names, each once and non-empty (a header line)")
    if all(v in ("0", "1") for v in names):
        raise ValueError(f"{path}: line {lines[0]}: {sep.join(rows[0])[:40]!r} looks like data; the first line names "
                         "the groups")
    A = np.zeros((len(rows) - 1, len(names)), dtype=bool)
    for i, (record, line) in enumerate(zip(rows[1:], lines[1:])):
        values = [v.strip() for v in record]
        if len(values) != len(names):
            raise ValueError(f"{path}: line {line}: {len(values)} values but the header names {len(names)} groups "
                             f"({'tab' if sep == chr(9) else repr(sep)}-separated)")
        bad = [j for j, v in enumerate(values) if v not in ("0", "1")]
        if bad:
            raise ValueError(f"{path}: line {line}, column {names[bad[0]]!r}: {values[bad[0]][:40]!r} is not 0 or 1 "
                             "(group indicators)")
        A[i] = [v == "1" for v in values]
    return A, names


#: The field separators of a CSV/TSV file a user writes, tried in this order when the file's suffix
#: does not say (``.tsv``/``.tab``: a tab): a comma, a tab, a semicolon (a spreadsheet's CSV in locales
#: whose decimal mark is a comma).
DELIMITERS = (",", "\t", ";")


def _read_delimited(path: Path, what: str) -> tuple[list[list[str]], list[int], str]:
    """The records of a CSV/TSV file (with the line each ends on), parsed as :mod:`csv` parses the dialect every common writer uses
    (fields quoted with ``"`` when they hold the separator, a quote or a line break; ``""`` inside
    quotes is one quote; a UTF-8 byte order mark ignored), and the separator found: the suffix's
    (``.tsv``/``.tab``), else the first of :data:`DELIMITERS` that splits the header and the first
    record into the same number of fields (more than one), else a comma.  Blank records are dropped.

    Raises
    ------
    ValueError
        Not UTF-8 (naming the line), or malformed quoting (naming the record).
    """
    import csv
    import io

    text = "\n".join(read_text_lines(path, what)).removeprefix("\ufeff")

    def parse(sep: str) -> tuple[list[list[str]], list[int]]:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, quotechar='"', doublequote=True,
                            skipinitialspace=True, strict=True)
        rows, lines = [], []
        try:
            for r in reader:
                if r and any(v.strip() for v in r):
                    rows.append(r)
                    lines.append(reader.line_num)
        except csv.Error as exc:
            raise ValueError(f"{path}: line {reader.line_num}: not a {'tab' if sep == chr(9) else repr(sep)}-"
                             f"separated {what} file ({exc})") from None
        return rows, lines

    if path.suffix.lower() in (".tsv", ".tab"):
        return (*parse("\t"), "\t")
    for sep in DELIMITERS:
        try:
            rows, lines = parse(sep)
        except ValueError:
            continue
        if rows and len(rows[0]) > 1 and (len(rows) == 1 or len(rows[1]) == len(rows[0])):
            return rows, lines, sep
    return (*parse(","), ",")


def _is_int_text(v: str) -> bool:
    """Whether ``v`` is a decimal integer written in ASCII digits (``'²'`` and ``'٣'`` are not labels)."""
    return v.isascii() and v.lstrip("-").isdigit() and v.count("-") <= 1 and not v.endswith("-")


def _as_text(y: np.ndarray, path: Path, what: str) -> list[str]:
    """String (``U``) or byte-string (``S``, decoded as UTF-8) values as a list of str; bytes that are
    not UTF-8 are refused naming the row."""
    if y.dtype.kind == "U":
        return y.tolist()
    out = []
    for i, v in enumerate(y.tolist()):
        try:
            out.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError(f"{path}: row {i}: {what} {v!r} is not UTF-8 text") from None
    return out


def _out_of_range(path: Path, i: int, shown: str, K: int) -> ValueError:
    return ValueError(f"{path}: row {i}: label {shown} is outside 0..{K - 1}")


def _labels_to_indices(y: np.ndarray, K: int, names: list[str] | None, path: Path) -> np.ndarray:
    """Labels as int64 in 0..K-1: integers (or integer strings) directly, names via ``names``.

    The range is checked in the labels' own type before any cast, so a message shows the value as
    the file gives it (``1e+20``, ``18446744073709551615``), never what a cast made of it.
    """
    if y.dtype.kind not in "fiuSU":  # bool, object (never unpickled: refused on load), complex, dates...
        raise ValueError(f"{path}: labels have dtype {y.dtype}; expected integers or class names")
    if y.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{path}: row {i}: label {float(y[i])!r} is not an integer class index")
        out = np.flatnonzero((y < 0) | (y >= K))
        if out.size:
            i = int(out[0])
            raise _out_of_range(path, i, repr(float(y[i])), K)
        return y.astype(np.int64)
    if y.dtype.kind in "iu":
        out = np.flatnonzero((y < 0) | (y >= K)) if y.dtype.kind == "i" else np.flatnonzero(y >= K)
        if out.size:
            i = int(out[0])
            raise _out_of_range(path, i, str(int(y[i])), K)
        return y.astype(np.int64)
    values = _as_text(y, path, "label")
    index = {n: i for i, n in enumerate(names)} if names is not None else None
    numeric_names = names is not None and any(_is_int_text(n) for n in names)
    if index is None:  # a name among the labels is named before any number's range
        i = next((i for i, v in enumerate(values) if not _is_int_text(v)), None)
        if i is not None:
            raise ValueError(f"{path}: row {i}: label {values[i]!r} is a name but the classes have none; give class_names "
                             f"(or class_names_file) in the scores' column order")
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        j = index.get(v) if index is not None else None
        if j is None:
            if not _is_int_text(v) or numeric_names:
                if index is not None:
                    raise ValueError(f"{path}: row {i}: label {v!r} is not one of the {K} class names")
                raise ValueError(f"{path}: row {i}: label {v!r} is a name but the classes have none; give class_names "
                                 f"(or class_names_file) in the scores' column order")
            j = int(v)
            if not 0 <= j < K:
                raise _out_of_range(path, i, v, K)
        out[i] = j
    return out


def check_outputs(S: np.ndarray, outputs: str, where: str) -> None:
    """Refuse non-finite scores and, for probabilities, negative values and rows not summing to 1."""
    for lo, _, block in row_blocks(S, _BLOCK):  # mapped pages given back block by block (svbop._blocks)
        block = np.asarray(block)  # in its own dtype: no float64 copy of a float32 matrix
        if block.dtype.kind == "f" and not np.isfinite(block).all():
            finite = np.isfinite(block)
            r, c = (int(v) for v in np.argwhere(~finite)[0])
            raise ValueError(f"{where}: row {lo + r}, column {c}: {float(block[r, c])} (scores must be finite)")
        if outputs != "probabilities":
            continue
        if block.min() < 0:
            block = block.astype(np.float64)
            r, c = (int(v) for v in np.argwhere(block < 0)[0])
            raise ValueError(f"{where}: row {lo + r}, column {c}: negative probability {block[r, c]:.6g}"
                             f"{_logit_hint(block)}")
        sums = np.add.reduce(block, axis=1, dtype=np.float64)
        tol = sum_tolerance(block.dtype, block.shape[1])
        off = np.abs(sums - 1.0) > tol
        if off.any():
            r = int(np.flatnonzero(off)[0])
            within = f"{tol:g}" if tol == SUM_TOLERANCE else f"{tol:.3g}, for {block.dtype} values"
            raise ValueError(f"{where}: row {lo + r} sums to {sums[r]:.9g}, not 1 (within {within})"
                             f"{_logit_hint(block.astype(np.float64))}")


def _logit_hint(block: np.ndarray) -> str:
    if block.min() < 0 or block.max() > 1 or np.abs(block.sum(axis=1) - 1).max() > 0.1:
        return "; these look like logits (unnormalised scores): set outputs: logits"
    return "; renormalise the rows, or set outputs: logits if they are scores"


def read_model_outputs(
    root: str | os.PathLike | None,
    parts: Mapping[str, object],
    *,
    outputs: str,
    scores_key: str | None = None,
    label_column: str | int | None = None,
    header: bool = True,
    sep: str | None = None,
    class_names: Sequence[str] | None = None,
    class_names_file: str | None = None,
    group_column: str | int | None = None,
) -> Dataset:
    """Read a model's scores and labels, part by part, into one :class:`Dataset`.

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to.
    parts : mapping
        Split name (``validation``, ``calibration``, ``test`` or ``all``) to
        ``{"scores": file, "labels": file}`` (``labels`` omitted with ``label_column``), and
        optionally ``"groups": file``: each row's group (a 1-D ``.npy`` of integers or strings,
        or one value per line), for group-conditional (Mondrian) conformal sets; every part
        gives one, or none does.  Likewise ``"weights": file`` (each row's likelihood ratio) and
        ``"group_columns": file`` (group indicator columns, the same groups in every part).
    outputs : {"probabilities", "logits"}
        What the scores are.  Probabilities must be non-negative rows summing to 1.
    scores_key : str, optional
        The array of an ``.npz`` scores file that holds several.
    label_column : str or int, optional
        CSV/TSV scores: the column holding the labels (its name, or its 0-based number when
        ``header`` is false).
    header : bool
        CSV/TSV scores: whether the first line names the columns.
    sep : str, optional
        CSV/TSV field separator (default: tab for ``.tsv``, comma otherwise).
    class_names, class_names_file : optional
        The classes' names in the scores' column order (a list, or a file of one name per line).
    group_column : str or int, optional
        CSV/TSV scores: the column holding each row's group (its name, or its 0-based number
        when ``header`` is false), instead of ``groups`` files.

    Returns
    -------
    Dataset
        ``X`` the (n, K) float64 scores (beyond :data:`STACK_IN_MEMORY_BYTES`, the scores' float
        type, mapped from a temporary file), ``x_kind`` ``"dense"``, ``y``, ``class_names``, ``part``;
        ``groups`` (str per row) with ``group_column`` or ``groups`` files; ``weights`` and
        ``group_columns``/``group_column_names`` with ``weights`` and ``group_columns`` files.

    Raises
    ------
    ValueError
        In one line naming the file, and the row, line or column where it applies (see the
        module's docstring); for groups: ``"<file>: no column 'x' (group_column); ..."``,
        ``"<file>: line <n>: empty group"``, ``"<file>: <m> groups but <scores> has <n> rows"``,
        ``"parts.<part>.groups: missing (...)"`` when only some parts give groups.
    """
    parts_read = _read_parts(root, parts, outputs=outputs, scores_key=scores_key, label_column=label_column,
                             header=header, sep=sep, class_names=class_names, class_names_file=class_names_file,
                             group_column=group_column)
    K, names, part_names, outputs = parts_read.K, parts_read.names, parts_read.part_names, parts_read.outputs
    blocks = parts_read.blocks
    # float16 probabilities: each row divided by its sum (float16 cannot hold a sum of 1 within 1e-6)
    normalise = outputs == "probabilities" and any(sum_tolerance(S.dtype, K) > SUM_TOLERANCE for S, _ in blocks)
    X = _stack_scores([S for S, _ in blocks], K, normalise=normalise)
    y = np.concatenate(parts_read.labels)
    groups = parts_read.groups
    given = [p for p, g in zip(part_names, groups) if g is not None]
    part = np.repeat(np.asarray(part_names, dtype=np.str_), [b[0].shape[0] for b in blocks])
    description = (f"a model's {outputs} on held-out rows (model_outputs): "
                   + "; ".join(f"{p}: {b[0].shape[0]:,} rows from {Path(str(b[1])).name}" for p, b in zip(part_names, blocks)))
    logger.info("model outputs: %d rows, %d classes (%s), parts %s", X.shape[0], K, outputs,
                {p: int(b[0].shape[0]) for p, b in zip(part_names, blocks)})
    w, phi = parts_read.weights, parts_read.group_columns
    return Dataset(name="", X=X, y=y, class_names=names or [str(c) for c in range(K)], description=description,
                   x_kind="dense", part=part, groups=np.concatenate(groups).astype(object) if given else None,
                   weights=np.concatenate(w) if w and w[0] is not None else None,
                   group_columns=np.concatenate(phi) if phi and phi[0] is not None else None,
                   group_column_names=parts_read.group_column_names)


#: Scores up to this many bytes (as float64) are stacked into one float64 matrix in memory; larger
#: ones into a temporary file (see :func:`_stack_scores`).
STACK_IN_MEMORY_BYTES = 512 * 1024 * 1024


def _stack_scores(parts: list[np.ndarray], K: int, *, normalise: bool = False) -> np.ndarray:
    """The parts' scores one under the other.

    Up to :data:`STACK_IN_MEMORY_BYTES` a float64 matrix in memory.  Beyond, scores larger than
    memory (10**6 rows x 1,000 classes of float32 logits: 4 GB): a read-only map of a temporary
    file (removed from its folder at once; the space is freed when the map is closed), written
    block by block, in the scores' own float type when every part is float32 (the same values;
    float64 otherwise), so the process holds one block of rows (:mod:`svbop._blocks`); a single
    part of that type (a mapped ``.npy``) is used as it is.  ``normalise``: every row divided by its
    sum (float16 probabilities, whose rows sum to 1 only within float16's precision).
    """
    import tempfile

    n = sum(S.shape[0] for S in parts)
    if n * K * 8 <= STACK_IN_MEMORY_BYTES:
        X = np.empty((n, K), dtype=np.float64)
        lo = 0
        for S in parts:
            for a, b, block in row_blocks(S):
                X[lo + a: lo + b] = block
                if normalise:
                    X[lo + a: lo + b] /= X[lo + a: lo + b].sum(axis=1, keepdims=True)
            lo += S.shape[0]
        return X
    dtype = np.dtype(np.float32) if all(S.dtype == np.float32 for S in parts) else np.dtype(np.float64)
    if normalise:
        dtype = np.dtype(np.float64)
    if len(parts) == 1 and parts[0].dtype == dtype and parts[0].flags.c_contiguous and not normalise:
        return parts[0]  # one part (a mapped .npy): used as it is, no copy
    with tempfile.TemporaryFile(prefix="svbop_scores_") as fh:  # unlinked: nothing is left behind
        for S in parts:
            for _, _, block in row_blocks(S):
                block = np.ascontiguousarray(block, dtype=dtype)
                if normalise:
                    block = block / block.sum(axis=1, keepdims=True)
                fh.write(memoryview(block.reshape(-1)).cast("B"))
        fh.flush()
        return np.memmap(fh, dtype=dtype, mode="r", shape=(n, K))  # the map keeps the file alive


def check_model_outputs(
    parts: Mapping[str, object],
    *,
    outputs: str = "auto",
    root: str | os.PathLike | None = None,
    scores_key: str | None = None,
    label_column: str | int | None = None,
    header: bool = True,
    sep: str | None = None,
    class_names: Sequence[str] | None = None,
    class_names_file: str | os.PathLike | None = None,
    group_column: str | int | None = None,
) -> dict[str, object]:
    """Read and check every file of a model's outputs completely, without building the dataset.

    The checks of :func:`read_model_outputs`, all of them, before any work is started on the files
    (``svbop report`` calls it before the workflow runs): every file is a regular file (a FIFO or a
    device is refused before it is opened) and text files are UTF-8 with lines of at most
    :data:`~svbop.datasets._files.MAX_LINE_BYTES` bytes; ``.npy``/``.npz`` headers are checked against
    the file's size and object (pickle) arrays are refused; scores are a 2-D numeric matrix with
    ``K >= 2`` columns, the same ``K`` in every part, finite, and, for probabilities, non-negative
    rows summing to 1; labels are integers in ``0 .. K - 1`` or class names, one per score row;
    groups are one non-empty value per score row, in every part or none; class names are ``K``
    distinct non-empty names.  Memory: the files' arrays, no float64 copy of the scores.

    Parameters
    ----------
    parts : mapping
        Part name (``validation``, ``calibration``, ``test``, ``all``) to ``{"scores": path,
        "labels": path, "groups": path}`` (``groups`` optional), as for :func:`read_model_outputs`.
    outputs : {"auto", "probabilities", "logits"}
        ``auto``: ``probabilities`` when every row of the test scores (the ``all`` scores without
        a test part) is finite, non-negative and sums to 1 within :data:`SUM_TOLERANCE`, else
        ``logits``; the other parts are then checked as that.
    root, scores_key, label_column, header, sep, class_names, class_names_file, group_column
        As for :func:`read_model_outputs`.  Paths are used as given (``root`` None), so the
        messages name the user's own paths.

    Returns
    -------
    dict
        ``outputs`` (as resolved), ``n_classes``, ``class_names`` (list, or None when the files
        give none), ``rows`` (part name -> row count), ``groups`` (whether groups are given),
        ``weights`` (whether weights are given), ``group_columns`` (the group columns' names, or
        None) and ``group_counts`` (part name -> rows in each group column).

    Raises
    ------
    ValueError
        One line naming the file (as given) and the row, line or column where it applies, or the
        option (``outputs``, ``parts.<part>.<key>``, ``class_names``) at fault.
    """
    got = _read_parts(root, parts, outputs=outputs, scores_key=scores_key, label_column=label_column, header=header,
                      sep=sep, class_names=class_names, class_names_file=class_names_file, group_column=group_column)
    return {"outputs": got.outputs, "n_classes": got.K, "class_names": got.names,
            "rows": {p: int(b[0].shape[0]) for p, b in zip(got.part_names, got.blocks)},
            "groups": any(g is not None for g in got.groups),
            "weights": any(w is not None for w in got.weights),
            "group_columns": got.group_column_names,
            "group_counts": {p: c.sum(axis=0).astype(int).tolist() for p, c in zip(got.part_names, got.group_columns)
                             if c is not None}}


def detect_outputs(S: np.ndarray) -> str:
    """``"probabilities"`` when every row of ``S`` is finite, non-negative and sums to 1 within
    :func:`sum_tolerance` of its dtype (float16 probabilities are probabilities), else ``"logits"``
    (in blocks of rows: no float64 copy of the matrix)."""
    S = np.asarray(S)
    if S.ndim != 2 or S.size == 0 or S.dtype.kind not in "fiu":
        return "logits"
    for _, _, block in row_blocks(S, _BLOCK):  # mapped pages given back block by block
        if block.dtype.kind == "f" and not np.isfinite(block).all():
            return "logits"
        if block.min() < 0:
            return "logits"
        if np.abs(np.add.reduce(block, axis=1, dtype=np.float64) - 1.0).max() > sum_tolerance(block.dtype,
                                                                                               block.shape[1]):
            return "logits"
    return "probabilities"


class _Parts:
    """What :func:`_read_parts` read: per part its scores, labels (int64 in 0..K-1) and groups."""

    def __init__(self, outputs, K, names, part_names, blocks, labels, groups):
        self.outputs, self.K, self.names, self.part_names = outputs, K, names, part_names
        self.blocks, self.labels, self.groups = blocks, labels, groups


def _read_parts(root, parts, *, outputs, scores_key, label_column, header, sep, class_names, class_names_file,
                group_column) -> _Parts:
    """Every file of every part read and checked (the work of :func:`read_model_outputs` and
    :func:`check_model_outputs`); ``outputs="auto"`` is resolved on the test (or all) scores."""
    if outputs not in OUTPUT_KINDS and outputs != "auto":
        raise ValueError(f"outputs: expected one of {', '.join(OUTPUT_KINDS)} (or auto), got {outputs!r}")
    if not isinstance(parts, Mapping) or not parts:
        raise ValueError(f"parts: expected a mapping of split name ({', '.join(OUTPUT_PARTS)}) to files")
    unknown = [p for p in parts if p not in OUTPUT_PARTS]
    if unknown:
        raise ValueError(f"parts.{unknown[0]}: not a split name (one of {', '.join(OUTPUT_PARTS)})")
    if "test" not in parts and "all" not in parts:
        raise ValueError("parts: give test (the rows every reported number is computed on) or all")
    names = None
    if class_names is not None and class_names_file is not None:
        raise ValueError("class_names, class_names_file: give one of them, not both")
    if class_names is not None:
        names = [str(c) for c in class_names]
        if len(set(names)) != len(names):
            raise ValueError(f"class_names: {next(c for c in names if names.count(c) > 1)!r} is listed twice")
    elif class_names_file is not None:
        names_path = _user_file(root, class_names_file, "class names file")
        names = _read_names(names_path)
    blocks, labels, groups, part_names, first = [], [], [], [], None
    weights, columns = [], []  # per part: weights (or None), (indicators, names, file) (or None)
    header_names = None
    for part, spec in parts.items():
        if isinstance(spec, (str, os.PathLike)):
            spec = {"scores": spec}
        if not isinstance(spec, Mapping) or "scores" not in spec:
            raise ValueError(f"parts.{part}: expected {{scores: FILE, labels: FILE}}, got {spec!r}")
        extra = sorted(set(spec) - {"scores", "labels", "groups", "weights", "group_columns"})
        if extra:
            raise ValueError(f"parts.{part}.{extra[0]}: unknown key (known: scores, labels, groups, weights, "
                             "group_columns)")
        if "groups" in spec and group_column is not None:
            raise ValueError(f"parts.{part}: both group_column and a groups file; give one")
        spath = _user_file(root, spec["scores"], "scores file")
        S, y_col, g_col, cols = _read_scores(spath, scores_key=scores_key, header=bool(header), sep=sep,
                                             label_column=label_column, group_column=group_column)
        if S.ndim != 2:
            raise ValueError(f"{spath}: scores have shape {S.shape}; expected a 2-D (n_rows, n_classes) matrix")
        if S.dtype.kind not in "fiu" or S.dtype.kind == "b":
            raise ValueError(f"{spath}: scores have dtype {S.dtype}; expected numbers")
        if S.shape[0] == 0:
            raise ValueError(f"{spath}: no rows (part {part!r} is empty)")
        if S.shape[1] < 2:
            raise ValueError(f"{spath}: {S.shape[1]} column; expected one score per class (K >= 2)")
        if first is not None and S.shape[1] != first[1]:
            raise ValueError(f"{spath}: {S.shape[1]} classes (columns) but {first[0]} has {first[1]}")
        if first is None:
            first = (spath, S.shape[1])
        if cols is not None:
            if header_names is not None and cols != header_names:
                raise ValueError(f"{spath}: its column names differ from those of {first[0]}")
            header_names = cols
        if outputs != "auto":
            check_outputs(S, outputs, str(spath))
        if y_col is not None:
            if "labels" in spec:
                raise ValueError(f"parts.{part}: both label_column and a labels file; give one")
            y_raw, lpath = y_col, spath
        else:
            if "labels" not in spec:
                raise ValueError(f"parts.{part}.labels: missing (or set label_column for a CSV/TSV scores file)")
            lpath = _user_file(root, spec["labels"], "labels file")
            y_raw = _read_labels(lpath)
        if len(y_raw) != S.shape[0]:
            raise ValueError(f"{lpath}: {len(y_raw)} labels but {spath} has {S.shape[0]} rows")
        if "groups" in spec:
            gpath = _user_file(root, spec["groups"], "groups file")
            g_col = _read_groups(gpath)
            if len(g_col) != S.shape[0]:
                raise ValueError(f"{gpath}: {len(g_col)} groups but {spath} has {S.shape[0]} rows")
        groups.append(g_col)
        w_col = phi = None
        if "weights" in spec:
            wpath = _user_file(root, spec["weights"], "weights file")
            w_col = _read_weights(wpath)
            if w_col.size != S.shape[0]:
                raise ValueError(f"{wpath}: {w_col.size} weights but {spath} has {S.shape[0]} rows")
        weights.append(w_col)
        if "group_columns" in spec:
            cpath = _user_file(root, spec["group_columns"], "group columns file")
            phi = _read_group_columns(cpath)
            if phi[0].shape[0] != S.shape[0]:
                raise ValueError(f"{cpath}: {phi[0].shape[0]} rows of group columns but {spath} has {S.shape[0]} rows")
            if columns and columns[0] is not None and phi[1] != columns[0][1]:
                raise ValueError(f"{cpath}: groups {phi[1]} differ from those of {columns[0][2]} ({columns[0][1]}); "
                                 "every part names the same groups, in the same order")
        columns.append(None if phi is None else (*phi, cpath))
        blocks.append((S, lpath, y_raw, spath))
        part_names.append(part)
    K = first[1]
    if outputs == "auto":
        source = next((p for p in ("test", "all") if p in part_names), part_names[0])
        outputs = detect_outputs(blocks[part_names.index(source)][0])
        for p, (S, _, _, spath) in zip(part_names, blocks):
            if not (p == source and outputs == "probabilities"):  # detect_outputs made these very checks
                check_outputs(S, outputs, str(spath))
    if names is None and header_names is not None and not all(c.isdigit() for c in header_names):
        names = header_names
    if names is not None and len(names) != K:
        if class_names_file is not None:
            raise ValueError(f"{names_path}: {len(names)} class names but the scores have {K} columns (one name per class, in "
                             "the scores' column order)")
        raise ValueError(f"class_names: {len(names)} names but the scores have {K} columns")
    labels = [_labels_to_indices(np.asarray(y_raw), K, names, lpath) for _, lpath, y_raw, _ in blocks]
    given = [p for p, g in zip(part_names, groups) if g is not None]
    if given and len(given) != len(part_names):
        missing = next(p for p, g in zip(part_names, groups) if g is None)
        raise ValueError(f"parts.{missing}.groups: missing (parts.{given[0]} gives groups: give every part a groups "
                         f"file, or none)")
    for key, values in (("weights", weights), ("group_columns", columns)):
        given = [p for p, v in zip(part_names, values) if v is not None]
        if given and len(given) != len(part_names):
            missing = next(p for p, v in zip(part_names, values) if v is None)
            raise ValueError(f"parts.{missing}.{key}: missing (parts.{given[0]} gives {key}: give every part a "
                             f"{key} file, or none)")
    got = _Parts(outputs, K, names, part_names, [(b[0], b[3]) for b in blocks], labels, groups)
    got.weights = weights
    got.group_columns = [None if c is None else c[0] for c in columns]
    got.group_column_names = columns[0][1] if columns and columns[0] is not None else None
    return got


def part_rows(size: object, pool: int) -> int:
    """The rows a split part of ``size`` takes of ``pool`` rows: a count as it is, a fraction rounded
    half up (:func:`split_model_outputs`, and ``split.calibration: auto``'s search)."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return int(size)
    return int(np.floor(float(size) * pool + 0.5))


def split_model_outputs(y: np.ndarray, part: np.ndarray, sizes: Mapping[str, object], *, seed: int = 0) -> dict[str, np.ndarray]:
    """Validation, calibration and test rows of a model's outputs (no training rows).

    The parts the files give are used as they are.  A missing ``validation`` or ``calibration``
    is drawn (seeded, stratified by class) from the ``all`` rows, or from the ``test`` rows when
    there is no ``all``, with the size ``sizes`` gives it (a fraction of those rows, or a count);
    rows of ``all`` left over go to ``test`` when no ``test`` file was given (no model is trained
    here, so no rows are kept for training).  The test rows are never used to fit anything.
    """
    from .splits import _stratified_order

    y = np.asarray(y)
    part = np.asarray(part).astype(np.str_)
    given = set(part.tolist())
    rng = np.random.default_rng(seed)
    out = {key: np.flatnonzero(part == key).astype(np.int64) for key in ("validation", "calibration", "test")}
    pool_name = "all" if "all" in given else "test"
    pool = np.flatnonzero(part == pool_name)
    order = _stratified_order(pool, y, rng)
    taken = 0
    for key in ("validation", "calibration"):
        if key in given:
            continue
        size = sizes.get(key, 0.1)
        if isinstance(size, str):
            raise ValueError(f"split.{key}: {size!r}, but the model outputs give no {key} part")
        n = part_rows(size, pool.size)
        if taken + n >= pool.size:
            raise ValueError(f"split.{key}: {n} rows leave none of the {pool.size} {pool_name} rows for the test")
        out[key] = np.sort(order[taken: taken + n])
        taken += n
    rest = np.sort(order[taken:])
    if pool_name == "test":
        out["test"] = rest
    elif "test" not in given:
        out["test"] = rest
    elif rest.size:
        logger.warning("model outputs: %d rows of 'all' are in no part (test was given by its own file)", rest.size)
    if out["test"].size == 0:
        raise ValueError("split: no test rows")
    out["train"] = np.zeros(0, dtype=np.int64)
    return out


def split_origin(part: np.ndarray, split: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Where each split's rows came from, for the report: ``{"calibration": "200 rows split off test"}``."""
    part = np.asarray(part).astype(np.str_)
    out = {}
    for key in ("validation", "calibration", "test"):
        rows = np.asarray(split[key])
        if rows.size == 0:
            out[key] = "none"
            continue
        srcs, counts = np.unique(part[rows], return_counts=True)
        pieces = []
        for s, c in zip(srcs.tolist(), counts.tolist()):
            pieces.append(f"{c:,} rows from its own file" if s == key else f"{c:,} rows split off {s} (seeded, stratified)")
        out[key] = "; ".join(pieces)
    return out
