"""Reader for the libSVM / SVMlight sparse format: **LSHTC1** and **DMOZ** of the paper.

One line per document: ``label index:value index:value ...``.  The LSHTC challenge files
(LSHTC1 and the DMOZ data of LSHTC2) use it with two quirks that :func:`read_libsvm` handles:

* feature ``0`` "is used for internal indexing and should be ignored" (e.g.
  ``29 0:202 127003:1 719094:1``): pass ``ignore_features=[0]``;
* the indices of a line are **not sorted**, which scikit-learn's ``load_svmlight_files`` rejects
  ("Feature indices ... should be sorted and unique"), so this module has its own parser.

The bulk parse is vectorised: each file is read in blocks of whole lines, the bytes are
classified and tokenised with numpy, and all numbers are converted by pandas' C parser (about
twice as fast as scikit-learn's loader on the same data, sorted).  Only when a block is found
to be malformed is the file scanned again line by line in Python, to name the first bad line.

The module also holds the small helpers shared by the readers of :mod:`svbop.datasets.idx`,
:mod:`~svbop.datasets.text`, :mod:`~svbop.datasets.fasta` and :mod:`~svbop.datasets.npz`.
"""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import scipy.sparse as sp

from .._memory import release_free_memory
from ._files import describe_parts, encode_labels, open_binary, part_array, part_list, resolve, share, shorten
from .base import Dataset

__all__ = ["read_libsvm"]

logger = logging.getLogger(__name__)

#: Bytes read per block (whole lines are parsed together; a longer line extends its block).
_BLOCK = 32 << 20


# --------------------------------------------------------------------------------------------
# libSVM
# --------------------------------------------------------------------------------------------

# Byte classes: whitespace, newline, digit, other number characters (sign, dot, exponent),
# colon, comma, anything else (not allowed).
_WS, _NL, _DIGIT, _NUMCHAR, _COLON, _COMMA, _BAD = range(7)
_CLASS = np.full(256, _BAD, dtype=np.uint8)
_CLASS[[ord(c) for c in " \t\r\x0b\x0c"]] = _WS
_CLASS[ord("\n")] = _NL
_CLASS[ord("0") : ord("9") + 1] = _DIGIT
_CLASS[[ord(c) for c in "+-.eE"]] = _NUMCHAR
_CLASS[ord(":")] = _COLON
_CLASS[ord(",")] = _COMMA
_TO_NEWLINE = bytes.maketrans(b" \t\r\x0b\x0c:,", b"\n" * 7)
_ALLOWED = bytes(np.flatnonzero(_CLASS != _BAD).astype(np.uint8))
_COMMENT = re.compile(rb"#[^\n]*")
#: A comma followed by blanks, as in ``3, 7 1:2``: read as ``3,7`` (PD-Sparse's reader, which the
#: LSHTC1 and DMOZ files come from, replaces ", " by ",").
_COMMA_BLANKS = re.compile(rb",[ \t]+")
_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_MULTILABEL = ("error", "first", "skip")
#: Feature indices must stay below this (scipy's int32 sparse indices).
_MAX_INDEX = 2**31 - 1
#: Columns read without ``n_features``: a larger feature index is refused (a damaged or hostile
#: file must not make every later step allocate per-feature buffers of its largest index).  The
#: paper's widest data (LSHTC1, DMOZ) has about 1.2 million features; ``n_features`` in the
#: dataset's ``format`` raises the bound for data that really has more.
MAX_FEATURES = 2**24
#: Values are stored as float32: a larger magnitude would become inf.
_MAX_VALUE = float(np.finfo(np.float32).max)


@dataclass
class _Parsed:
    """The rows of one file: labels (first label and count), features, and line numbers."""

    label: np.ndarray  # float64, first label of the row (nan when none)
    n_labels: np.ndarray  # int64
    line: np.ndarray  # int64, 1-based line number of the row
    nnz: np.ndarray  # int64, features per row
    index: np.ndarray  # int32, feature indices as written, sorted within rows
    value: np.ndarray  # float32


def _line_problem(line: bytes, *, zero_based: bool | None, multilabel: str, max_index: int | None,
                  implicit: bool = False) -> str | None:
    """What is wrong with one line (``None`` when nothing is): the reference check.

    ``zero_based`` False rejects index 0; ``max_index`` is the largest index allowed (from
    :data:`MAX_FEATURES` when ``implicit``, else from ``n_features``).
    """
    body = _COMMA_BLANKS.sub(b",", line.split(b"#", 1)[0])
    tokens = body.split()
    if not tokens:
        return None
    if any(tok.startswith(b"qid:") for tok in tokens[1:]):
        return "qid: tokens are not supported"
    bad = _CLASS[np.frombuffer(body, dtype=np.uint8)] == _BAD
    if bad.any():
        ch = body[int(np.flatnonzero(bad)[0]) :].decode("utf-8", "replace")[:1]
        return f"unexpected character {ch!r}"
    if b":" in tokens[0]:
        labels, features = [], tokens
    else:
        labels, features = tokens[0].split(b","), tokens[1:]
    for lab in labels:
        if not _NUMBER.fullmatch(lab):
            return f"label {lab.decode()!r} is not a number"
        v = float(lab)
        if not abs(v) < 2**53 or v != round(v):
            return f"label {lab.decode()!r} is not an integer"
    if not labels and multilabel != "skip":
        return "no label (the line starts with a feature)"
    if len(labels) > 1 and multilabel == "error":
        return f"{len(labels)} labels, expected one (use multilabel='first' or 'skip' to accept such lines)"
    seen: set[int] = set()
    for tok in features:
        if tok.count(b":") != 1:
            return f"feature {tok.decode()!r} is not index:value"
        i, v = tok.split(b":")
        if not _NUMBER.fullmatch(i):
            return f"feature index {i.decode()!r} is not a number"
        if not _NUMBER.fullmatch(v):
            return f"feature value {v.decode()!r} of index {i.decode()} is not a number"
        if not abs(float(v)) <= _MAX_VALUE:
            return f"feature value {v.decode()} of index {i.decode()} is beyond float32's range (magnitude up to {_MAX_VALUE:.4g})"
        x = float(i)
        if x < 0:
            return f"feature index {i.decode()!r} is negative"
        if not x < _MAX_INDEX or x != round(x):
            return f"feature index {i.decode()!r} is not an integer below {_MAX_INDEX}"
        idx = int(x)
        if idx == 0 and zero_based is False:
            return "feature index 0 in a one-based file (zero_based=False)"
        if max_index is not None and idx > max_index:
            if implicit:
                return (f"feature index {idx} is beyond the {MAX_FEATURES} features read without n_features (largest "
                        f"allowed index {max_index}; set n_features in the dataset's format if the data has that many)")
            return f"feature index {idx} is beyond n_features (largest allowed index {max_index})"
        if idx in seen:
            return f"feature index {idx} appears twice"
        seen.add(idx)
    return None


def _raise_at(path: Path, suspect: int, reason: str, **check) -> NoReturn:
    """Rescan ``path`` line by line up to line ``suspect`` and raise at its first bad line.

    If no earlier line fails the reference check, line ``suspect`` is blamed with ``reason``.
    """
    text = b""
    with open_binary(path) as fh:
        for lineno, text in enumerate(fh, start=1):
            problem = _line_problem(text, **check)
            if problem is not None:
                shown = shorten(text.decode("utf-8", "replace"))
                raise ValueError(f"{path}:{lineno}: {problem}: {shown!r}")
            if lineno >= suspect:
                break
    shown = shorten(text.decode("utf-8", "replace"))
    raise ValueError(f"{path}:{suspect}: {reason}: {shown!r}")


def _blocks(path: Path) -> Iterator[tuple[int, bytes]]:
    """The file's bytes in blocks of whole lines, each ending with a newline, with the line
    number of each block's first line.

    A line longer than a block is gathered in pieces; a piece with a byte no libSVM line may
    hold (binary data, a decompression bomb of zeros) is refused at once, before the rest of
    its line is read.
    """
    pending: list[bytes] = []
    line = 1
    with open_binary(path) as fh:
        while True:
            block = fh.read(_BLOCK)
            if not block:
                break
            cut = block.rfind(b"\n")
            if cut < 0:
                bad = block.translate(None, _ALLOWED)
                if bad:
                    shown = shorten(b"".join(pending[:1]).decode("utf-8", "replace") or block[:80].decode("utf-8", "replace"))
                    raise ValueError(f"{path}:{line}: unexpected character {bad[:1]!r} in a line of more than "
                                     f"{sum(map(len, pending)) + len(block)} bytes: {shown!r}")
                pending.append(block)
                continue
            data = b"".join([*pending, block[: cut + 1]]) if pending else block[: cut + 1]
            yield line, data
            line += data.count(b"\n")
            pending = [block[cut + 1 :]] if cut + 1 < len(block) else []
    if pending:
        yield line, b"".join(pending) + b"\n"


def _parse_block(data: bytes, first_line: int, path: Path, check: dict) -> _Parsed:
    """Vectorised parse of whole lines; ``first_line`` is the file line number of its first line.

    Detects every problem the reference check :func:`_line_problem` reports (then rescans to
    name the first bad line); the numbers themselves are converted by pandas' C parser.
    """
    if b"#" in data:
        data = _COMMENT.sub(b"", data)  # newlines stay, so line numbers do too
    if b"," in data:
        data = _COMMA_BLANKS.sub(b",", data)  # "3, 7" is "3,7" (newlines stay)
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)

    def fail(line: int, reason: str) -> NoReturn:
        _raise_at(path, first_line + int(line), reason, **check)

    if data.translate(None, _ALLOWED):  # some byte is not allowed
        fail(np.searchsorted(newlines, np.argmax(_CLASS[buf] == _BAD)), "unexpected character")
    ws = buf <= 32  # the only allowed bytes <= 32 are the whitespace ones
    is_start = np.empty_like(ws)
    is_start[0] = not ws[0]
    np.greater(ws[:-1], ws[1:], out=is_start[1:])
    starts = np.flatnonzero(is_start)
    if starts.size == 0:
        return _empty()
    # Colons and commas per token (a token's segment runs to the next token; whitespace has none).
    is_colon, is_comma = buf == 58, buf == 44
    colons, commas = np.flatnonzero(is_colon), np.flatnonzero(is_comma)
    bounds = np.append(starts, buf.size)
    n_colon = np.diff(np.searchsorted(colons, bounds))
    n_comma = np.diff(np.searchsorted(commas, bounds))
    tok_line = np.searchsorted(newlines, starts)
    first = np.empty(starts.size, dtype=bool)
    first[0] = True
    np.not_equal(tok_line[1:], tok_line[:-1], out=first[1:])
    is_label = first & (n_colon == 0)
    suspects = []
    bad_tok = ~is_label & ((n_colon != 1) | (n_comma != 0))
    if bad_tok.any():
        suspects.append(tok_line[np.argmax(bad_tok)])
    # A colon needs something on both sides; a comma separates non-empty labels.
    bad_colon = ws[colons - 1] | ws[colons + 1]  # [-1] is the block's final newline
    if bad_colon.any():
        suspects.append(np.searchsorted(newlines, colons[np.argmax(bad_colon)]))
    bad_comma = ws[commas - 1] | ws[commas + 1] | is_comma[commas - 1] | is_comma[commas + 1]
    if bad_comma.any():
        suspects.append(np.searchsorted(newlines, commas[np.argmax(bad_comma)]))
    if suspects:
        fail(min(suspects), "malformed token")
    del ws, is_start, is_colon, is_comma

    counts = 1 + n_colon + n_comma
    expected = int(counts.sum())
    import pandas as pd

    try:
        numbers = pd.read_csv(
            io.BytesIO(data.translate(_TO_NEWLINE)), header=None, names=["v"], dtype=np.float64,
            engine="c", na_filter=False, skip_blank_lines=True,
        )["v"].to_numpy()
    except (ValueError, pd.errors.ParserError) as exc:
        fail(tok_line[-1], f"malformed number ({exc})")
    if numbers.size != expected:
        fail(tok_line[-1], f"expected {expected} numbers in the block, parsed {numbers.size}")
    offset = np.cumsum(counts) - counts

    # Labels must be integers (all of them, also the extra labels of a multi-label line).
    lab_tok = np.flatnonzero(is_label)
    n_lab = 1 + n_comma[lab_tok]
    lab_of = np.repeat(lab_tok, n_lab)
    lab_val = numbers[offset[lab_of] + (np.arange(lab_of.size) - np.repeat(np.cumsum(n_lab) - n_lab, n_lab))]
    not_int = ~(np.abs(lab_val) < 2.0**53) | (lab_val != np.round(lab_val))
    if not_int.any():
        suspects.append(tok_line[lab_of[np.argmax(not_int)]])
    # Feature indices must be non-negative integers that fit scipy's int32 indices.
    feat = np.flatnonzero(~is_label)
    idx_val = numbers[offset[feat]]
    bad_idx = ~((idx_val >= 0) & (idx_val < _MAX_INDEX)) | (idx_val != np.round(idx_val))
    if bad_idx.any():
        suspects.append(tok_line[feat[np.argmax(bad_idx)]])
    # Values must fit float32 (they are stored so; 1e39 would silently become inf).
    too_big = ~(np.abs(numbers[offset[feat] + 1]) <= _MAX_VALUE)
    if too_big.any():
        suspects.append(tok_line[feat[np.argmax(too_big)]])
    if suspects:
        fail(min(suspects), "bad label, feature index or value")

    row_tok = np.flatnonzero(first)
    has_label = is_label[row_tok]
    label = np.where(has_label, numbers[offset[row_tok]], np.nan)
    n_labels = np.where(has_label, 1 + n_comma[row_tok], 0).astype(np.int64)
    nnz = np.bincount(np.cumsum(first)[feat] - 1, minlength=row_tok.size).astype(np.int64)
    lines = first_line + tok_line[row_tok].astype(np.int64)
    index = idx_val.astype(np.int32)
    value = numbers[offset[feat] + 1].astype(np.float32)
    del numbers, idx_val

    # Sort the indices within rows (LSHTC files are unsorted) and reject repeated indices.
    indptr = np.concatenate([[0], np.cumsum(nnz)])
    X = sp.csr_matrix((value, index, indptr), shape=(row_tok.size, int(index.max()) + 1 if index.size else 1))
    X.has_sorted_indices = False
    X.sort_indices()
    index = X.indices.astype(np.int32, copy=False)
    same = index[1:] == index[:-1]
    bounds = indptr[1:-1]
    same[bounds[(bounds >= 1) & (bounds <= same.size)] - 1] = False  # a row's first entry vs the previous row's last
    if same.any():
        row = int(np.searchsorted(indptr, np.argmax(same) + 1, side="right") - 1)
        fail(lines[row] - first_line, "repeated feature index")
    return _Parsed(label, n_labels, lines, nnz, index, X.data.astype(np.float32, copy=False))


def _empty() -> _Parsed:
    empty = np.zeros(0, dtype=np.int64)
    return _Parsed(np.zeros(0), empty, empty, empty, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32))


def _row_of_entry(p: _Parsed, entry: int) -> int:
    """The row holding feature entry ``entry`` of a parsed file."""
    return int(np.searchsorted(np.cumsum(p.nnz), entry, side="right"))


def _parse_file(path: Path, check: dict) -> _Parsed:
    """Parse one file and apply the checks that need whole rows (labels, index range)."""
    parsed: list[_Parsed] = []
    for line, data in _blocks(path):
        parsed.append(_parse_block(data, line, path, check))
    if not parsed:
        p = _empty()
    elif len(parsed) == 1:
        p = parsed[0]
    else:
        fields = {}
        for f in _Parsed.__dataclass_fields__:  # field by field, each block's part freed once joined
            fields[f] = np.concatenate([getattr(q, f) for q in parsed])
            for q in parsed:
                setattr(q, f, None)
        p = _Parsed(**fields)
        del parsed
        release_free_memory()  # the blocks' arrays, freed above, sit in the heap below malloc's mmap threshold
    # Rows with other than one label, when they are not to be skipped.
    if check["multilabel"] == "error":
        odd = np.flatnonzero(p.n_labels != 1)
    elif check["multilabel"] == "first":
        odd = np.flatnonzero(p.n_labels == 0)
    else:
        odd = np.zeros(0, dtype=np.int64)
    bad_rows = [int(odd[0])] if odd.size else []
    # Index range, when the index base (and so the largest index) is known already.
    if p.index.size and check["zero_based"] is False:
        zero = np.flatnonzero(p.index == 0)
        if zero.size:
            bad_rows.append(_row_of_entry(p, int(zero[0])))
    if p.index.size and check["max_index"] is not None:
        over = np.flatnonzero(p.index > check["max_index"])
        if over.size:
            bad_rows.append(_row_of_entry(p, int(over[0])))
    if bad_rows:
        _raise_at(path, int(p.line[min(bad_rows)]), "bad row", **check)
    return p


def read_libsvm(
    root: str | os.PathLike | None,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    ignore_features: Sequence[int] = (),
    zero_based: bool | str = "auto",
    multilabel: str = "error",
    n_features: int | None = None,
) -> Dataset:
    """Read libSVM / SVMlight files (LSHTC1, DMOZ) into a sparse dataset.

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to (absolute names are used as they are).
    parts : mapping of str to list of file names
        Part name (``"train"``, ``"validation"``, ``"test"``, ...) to the files whose rows make
        it up, concatenated in order; parts in mapping order.  ``.gz``, ``.bz2`` and ``.xz`` are
        decompressed.
    ignore_features : sequence of int
        Feature indices, as written in the files, to drop (``[0]`` for the LSHTC files, whose
        feature 0 is internal).  The files are then read zero-based: file index ``j`` is column
        ``j`` before the ignored columns are removed; the other columns keep their order (so
        with ``[0]``, file index ``j`` ends up in column ``j - 1``).
    zero_based : bool or "auto"
        Whether file index ``j`` is column ``j`` (True) or ``j - 1`` (False, index 0 is then an
        error).  ``"auto"`` (scikit-learn's rule): zero-based when any file holds index 0.
    multilabel : {"error", "first", "skip"}
        What to do with a line that has several labels (``3,7 1:2``) or none: ``"error"``
        raises, ``"first"`` keeps the first label written (a line without a label is still an
        error), ``"skip"`` drops the row; both log a WARNING with the number and share of such
        rows.  Blanks after a
        comma are allowed (``3, 7 1:2`` is ``3,7 1:2``, as PD-Sparse's reader takes it).
    n_features : int, optional
        Number of columns before ``ignore_features`` are removed (in the zero- or one-based
        column numbering above); a larger index is an error.  Default: the largest index seen,
        which may not exceed :data:`MAX_FEATURES` (2**24; a larger index is an error naming the
        file and line: a damaged file must not size every later step's buffers).

    Returns
    -------
    Dataset
        ``X`` a CSR matrix of **float32** values (half the memory of float64; term counts and
        tf-idf weights need no more precision), sorted indices; ``y`` indices into
        ``class_names``, the integer labels sorted numerically (as ``str``); ``x_kind``
        ``"sparse"``; ``part`` per row; ``name`` empty.

    Raises
    ------
    ValueError
        ``"<path>:<line>: <what is wrong>: '<the line>'"`` for a malformed line (unexpected
        character, a token that is not ``index:value``, a non-numeric value, a non-integer
        label, a negative or repeated index, several labels with ``multilabel="error"``, an
        index beyond ``n_features``), ``"<path>: no such file"`` for a missing file, and for
        bad options.

    Notes
    -----
    Blank lines and ``#`` comments are skipped; ``qid:`` tokens are not supported.  Indices
    may appear in any order within a line (they are sorted), but not twice.  Labels and
    indices are read as numbers and must have integer values (``7`` or ``7.0``); indices must
    be below 2**31 - 1 (scipy's int32 sparse indices).  Speed: about 30 MB of text per second
    on one core (a 290 MB LSHTC-style file in 10 s, 1 GB of memory for its 32 M entries).
    """
    if multilabel not in _MULTILABEL:
        raise ValueError(f"multilabel: expected one of {list(_MULTILABEL)}, got {multilabel!r}")
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"zero_based: expected True, False or 'auto', got {zero_based!r}")
    ignore = sorted({int(i) for i in ignore_features})
    if any(i < 0 for i in ignore) or any(int(i) != i for i in ignore_features):
        raise ValueError(f"ignore_features: expected non-negative feature indices, got {list(ignore_features)!r}")
    if ignore:
        if zero_based is False:
            raise ValueError("ignore_features: needs zero_based=True or 'auto' (ignored indices are file indices)")
        zero_based = True
    if n_features is not None and (int(n_features) != n_features or n_features < 1):
        raise ValueError(f"n_features: expected a positive integer, got {n_features!r}")
    plist = part_list(parts)

    cap = int(n_features) if n_features is not None else MAX_FEATURES
    max_index = cap - 1 if zero_based is True else (cap if zero_based is False else None)
    check = {"zero_based": None if zero_based == "auto" else bool(zero_based), "multilabel": multilabel,
             "max_index": max_index, "implicit": n_features is None}
    files: list[tuple[str, Path, _Parsed]] = []
    for part, names in plist:
        for name in names:
            path = resolve(root, name)
            files.append((part, path, _parse_file(path, check)))

    # Rows with other than one label (the other modes raised in _parse_file).
    n_skipped = 0
    if multilabel == "skip":
        for k, (part, path, p) in enumerate(files):
            keep = p.n_labels == 1
            if not keep.all():
                n_skipped += int((~keep).sum())
                entries = np.repeat(keep, p.nnz)
                files[k] = (part, path, _Parsed(p.label[keep], p.n_labels[keep], p.line[keep], p.nnz[keep], p.index[entries], p.value[entries]))
        if n_skipped:
            logger.warning("libsvm: skipped %d rows with several labels or none, %s read (multilabel='skip')",
                           n_skipped, share(n_skipped, sum(p.n_labels.size for _, _, p in files) + n_skipped))
    elif multilabel == "first":
        n_multi = sum(int((p.n_labels > 1).sum()) for _, _, p in files)
        if n_multi:
            path, p = next((path, p) for _, path, p in files if (p.n_labels > 1).any())
            line = int(p.line[np.flatnonzero(p.n_labels > 1)[0]])
            in_files = ", ".join(str(path) for _, path, p in files if (p.n_labels > 1).any())
            logger.warning("libsvm: %s had more than one label; kept the first (multilabel: first), in %s, e.g. %s:%d",
                           share(n_multi, sum(p.n_labels.size for _, _, p in files)), in_files, path, line)

    # Index base, width, index range.
    if zero_based == "auto":
        zero_based = any(p.index.size and int(p.index.min()) == 0 for _, _, p in files)
    shift = 0 if zero_based else 1
    width = max((int(p.index.max()) + 1 - shift for _, _, p in files if p.index.size), default=0)
    if width > cap:  # only possible with zero_based="auto" (else _parse_file raised)
        limit = cap - 1 + shift
        for _, path, p in files:
            over = np.flatnonzero(p.index > limit)
            if over.size:
                row = _row_of_entry(p, int(over[0]))
                _raise_at(path, int(p.line[row]), "index beyond n_features", **{**check, "max_index": limit})
    if n_features is not None:
        width = int(n_features)
    width = max(width, 1)

    # Assemble one CSR matrix, dropping the ignored columns (no array of the width is made).
    ignored = np.asarray([i for i in ignore if i < width], dtype=np.int64)
    n_cols = width - ignored.size
    # The entries go straight into the final arrays, each file's freed once copied: the matrix exists
    # about once, not twice (at 10^8 non-zeros that is a gigabyte).
    if ignore:
        keeps = [~np.isin(p.index - np.int32(shift) if shift else p.index, ignored) for _, _, p in files]
        total = sum(int(k.sum()) for k in keeps)
    else:
        keeps, total = [None] * len(files), sum(p.index.size for _, _, p in files)
    data, indices, indptrs, done = np.empty(total, dtype=np.float32), np.empty(total, dtype=np.int32), [np.zeros(1, dtype=np.int64)], 0
    for k, (_, _, p) in enumerate(files):
        ptr = np.concatenate([[0], np.cumsum(p.nnz)])
        col = p.index - np.int32(shift) if shift else p.index
        val = p.value
        if ignore:
            kept = keeps[k]
            ptr = np.concatenate([[0], np.cumsum(kept)])[ptr]
            col = col[kept]
            col, val = (col - np.searchsorted(ignored, col)).astype(np.int32), val[kept]
        indices[done:done + col.size] = col
        data[done:done + col.size] = val
        p.index = p.value = None
        del col, val
        indptrs.append(ptr[1:] + done)
        done += int(ptr[-1])
    n_rows = sum(p.nnz.size for _, _, p in files)
    X = sp.csr_matrix((data, indices, np.concatenate(indptrs)), shape=(n_rows, n_cols))
    X.has_sorted_indices = True
    release_free_memory()  # the blocks' parsed arrays, freed above, would stay resident in the heap

    labels = np.concatenate([p.label for _, _, p in files]).astype(np.int64)
    if labels.size == 0:
        raise ValueError(f"{files[0][1]}: no rows in {describe_parts(plist)}")
    class_names, y = encode_labels(labels)
    part = part_array([f[0] for f in files], [f[2].nnz.size for f in files])
    dropped = f", ignored feature indices {ignore}" if ignore else ""
    description = (
        f"libSVM sparse features read from {describe_parts(plist)} "
        f"({'zero' if zero_based else 'one'}-based indices{dropped}, multilabel={multilabel!r}"
        f"{f', {n_skipped} rows skipped' if n_skipped else ''}); X float32 CSR, {n_cols} columns"
    )
    logger.debug("read_libsvm: %d rows, %d columns, %d classes", X.shape[0], n_cols, len(class_names))
    return Dataset(name="", X=X, y=y, class_names=class_names, description=description, x_kind="sparse", part=part)
