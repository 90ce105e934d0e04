"""Pfam functional-domain encoding of protein sequences (the paper's **Proteins** features).

Following DEEPre (Li et al., 2018), Mortier et al. (2021) describe each enzyme by its 3-mer tf-idf
together with a binary vector over a fixed list of Pfam families: entry ``j`` is 1 when a domain
of family ``j`` was found in the sequence.  Domains are found by HMMER against Pfam-A outside
this project, or come with the data (the authors' Proteins split lists each enzyme's families in
its ``fund`` column); this module reads either and builds the vectors.

* :func:`read_families` -- the family list (the columns): one Pfam name or accession per line,
  e.g. the authors' ``fams.txt`` (17,929 names).
* :func:`read_domain_annotations` -- sequence id -> families found, from ``pfam_scan.pl``
  output, ``hmmscan --domtblout`` / ``--tblout`` tables or a two-column TSV.
* :func:`read_domain_column` -- row id -> families found, from a column of CSV files holding one
  list of families per row: the ``fund`` column of the authors' Proteins split
  (``TRAINVAL.csv``, ``TEST.csv``), whose rows :func:`~svbop.datasets.text.read_csv_text` reads
  with ``row_ids=True``.
* :func:`domain_encoding` -- the (n_sequences, n_families) binary CSR matrix, rows in the order
  of the given ids (``Dataset.ids``: the FASTA record ids, or the CSV row ids).

**Matching rule.**  A family is identified by its name (``Globin``, compared exactly, case
included) or by its Pfam accession (``PF00042``); an accession's version is dropped
(``PF00042.17`` -> ``PF00042``, see :func:`family_key`), so annotations from any Pfam release
match a list written with or without versions.  The HMMER outputs give both the name and the
accession of every hit, and both are kept, so a family list of names, of accessions or a mix of
the two works with them; a TSV gives whatever it holds.  Names change between Pfam releases
while accessions do not: with a list of names, annotations made with another release may miss
renamed families (the number of unmatched families is logged).

Every hit in a file counts: thresholds (e.g. ``--cut_ga``, Pfam's gathering thresholds, which
``pfam_scan.pl`` applies by default) belong to the HMMER run.
"""

from __future__ import annotations

import ast
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..datasets._files import open_text, resolve, shorten
from ..datasets.text import csv_row_id, read_csv_columns

__all__ = [
    "DOMAIN_FORMATS", "family_key", "read_families", "read_domain_annotations", "read_domain_column", "domain_encoding",
]

logger = logging.getLogger(__name__)

#: Annotation file formats read by :func:`read_domain_annotations` (besides ``"auto"``).
DOMAIN_FORMATS = ("pfam_scan", "domtblout", "tblout", "tsv")

# A Pfam-A (PF + 5 digits) or Pfam-B (PB + 6 digits) accession with an optional version.
_ACCESSION = re.compile(r"(P[FB]\d{5,6})(?:\.\d+)?")

_DESCRIBE = {
    "pfam_scan": "pfam_scan.pl output (seq id, alignment start/end, envelope start/end, hmm acc, hmm name, "
    "type, hmm start/end/length, bit score, E-value, significance, clan)",
    "domtblout": "hmmscan --domtblout table (target name, accession, tlen, query name, accession, qlen, "
    "3 full-sequence and 6 domain values, 6 coordinates, acc, description)",
    "tblout": "hmmscan --tblout table (target name, accession, query name, accession, 6 E-values/scores/biases, "
    "8 domain-number estimates, description)",
    "tsv": "two tab-separated columns: sequence id, then comma-separated family names or accessions",
}


def family_key(identifier: str) -> str:
    """The key a family is matched by: a Pfam accession without its version, or the name as is.

    Examples
    --------
    >>> family_key("PF00042.17"), family_key("PF00042"), family_key("Globin")
    ('PF00042', 'PF00042', 'Globin')
    """
    m = _ACCESSION.fullmatch(identifier)
    return m.group(1) if m else identifier


def _is_accession(key: str) -> bool:
    return _ACCESSION.fullmatch(key) is not None


def read_families(path: str | os.PathLike) -> list[str]:
    """The Pfam families that make up the columns of :func:`domain_encoding`, in file order.

    Parameters
    ----------
    path : path
        Text file (``.gz``/``.bz2``/``.xz`` allowed) with one family name or accession per
        line; surrounding white space is stripped and blank lines are skipped.

    Returns
    -------
    list of str
        The entries as written (accession versions kept; :func:`domain_encoding` drops them).

    Raises
    ------
    ValueError
        ``"<path>:<line>: ..."`` for a line with more than one word and for a family listed
        twice (also as two versions of one accession; the message names the earlier line);
        ``"<path>: ..."`` for a missing, unreadable or empty file.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such family list")
    names: list[str] = []
    line_of: dict[str, tuple[int, str]] = {}  # key -> (line, entry)
    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                words = line.split()
                if not words:
                    continue
                if len(words) > 1:
                    raise ValueError(f"{path}:{lineno}: expected one family name or accession per line, got {len(words)} words: {shorten(line)!r}")
                name = words[0]
                key = family_key(name)
                if key in line_of:
                    first, entry = line_of[key]
                    same = "" if entry == name else f" ({entry!r}; accession versions are ignored)"
                    raise ValueError(f"{path}:{lineno}: family {name!r} is listed twice, first at line {first}{same}")
                line_of[key] = (lineno, name)
                names.append(name)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    if not names:
        raise ValueError(f"{path}: no family names")
    n_acc = sum(_is_accession(family_key(n)) for n in names)
    logger.info("read %d Pfam families from %s (%d names, %d accessions)", len(names), path, len(names) - n_acc, n_acc)
    return names


# ------------------------------------------------------------------ annotation files
def _ints(tokens: list[str], *positions) -> bool:
    return all(tokens[i].isdigit() for i in positions)


def _floats(tokens: list[str], positions) -> bool:
    try:
        for i in positions:
            float(tokens[i])
    except ValueError:
        return False
    return True


# Shape of a data line of each whitespace table: does this token list fit the format?  The checks
# are mutually exclusive: pfam_scan has integer columns 1-4 (the others have names or accessions
# there), domtblout integer lengths at 2 and 5 and coordinates at 15-20, tblout floats at 4-9 and
# integer domain counts at 11-17 (where domtblout has E-values and scores).
def _is_pfam_scan(t: list[str]) -> bool:
    return len(t) >= 15 and _ints(t, 1, 2, 3, 4, 8, 9, 10)


def _is_domtblout(t: list[str]) -> bool:
    return len(t) >= 23 and _ints(t, 2, 5, 9, 10, 15, 16, 17, 18, 19, 20)


def _is_tblout(t: list[str]) -> bool:
    return len(t) >= 19 and _floats(t, range(4, 11)) and _ints(t, 11, 12, 13, 14, 15, 16, 17)


_SHAPES = {"pfam_scan": _is_pfam_scan, "domtblout": _is_domtblout, "tblout": _is_tblout}


def _is_tsv(line: str) -> bool:
    return line.count("\t") == 1


def _detect(line: str) -> str | None:
    if _is_tsv(line):
        return "tsv"
    tokens = line.split()
    for fmt, fits in _SHAPES.items():
        if fits(tokens):
            return fmt
    return None


def read_domain_annotations(path: str | os.PathLike, format: str = "auto") -> dict[str, set[str]]:
    """The Pfam families found in each sequence, from a HMMER result file.

    Parameters
    ----------
    path : path
        The annotation file (``.gz``/``.bz2``/``.xz`` allowed).  Lines starting with ``#`` and
        blank lines are skipped in every format.
    format : {"auto", "pfam_scan", "domtblout", "tblout", "tsv"}
        ``"pfam_scan"``: ``pfam_scan.pl`` output, a white-space table of 15 columns (16 with
        active sites): seq id, alignment start, alignment end, envelope start, envelope end,
        hmm acc, hmm name, type, hmm start, hmm end, hmm length, bit score, E-value,
        significance, clan.  ``"domtblout"`` / ``"tblout"``: the tables of ``hmmscan
        --domtblout`` (one line per domain) and ``--tblout`` (one line per family and
        sequence); the target (name, accession) is the family and the query name is the
        sequence.  Tables of ``hmmsearch`` (profiles as queries, sequences as targets), told by
        their ``# Program: hmmsearch`` trailer line, are read the other way round.
        ``"tsv"``: ``seq_id<TAB>fam1,fam2,...`` (names or accessions; the list may be empty; a
        sequence on several lines gets the union).  ``"auto"``: decided by the first line that
        is not blank or a comment -- exactly one tab: ``tsv``; otherwise its white-space
        separated words are matched against the column layouts above (integer coordinates and
        lengths, floating-point scores at their places; the layouts exclude each other).

    Returns
    -------
    dict of str to set of str
        Sequence id -> identifiers of the families found in it: for the HMMER formats the name
        and the accession (version dropped) of every hit, for ``tsv`` the listed entries
        (accession versions dropped).  Sequences without a hit do not appear, except in a TSV
        that lists them with no family.

    Raises
    ------
    ValueError
        ``"<path>:<line>: ..."`` for a line that does not fit the format (too few columns, a
        non-integer coordinate, ...), for a first line whose format cannot be told (with
        ``"auto"``) and, in a HMMER table, for a ``# Program:`` line of a program other than
        hmmscan or hmmsearch; ``"<path>: ..."`` for a missing or unreadable file or an unknown
        ``format``.
    """
    if format != "auto" and format not in DOMAIN_FORMATS:
        raise ValueError(f"format: {format!r} is not 'auto' or one of {list(DOMAIN_FORMATS)}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such annotation file")
    fmt = None if format == "auto" else format
    program, program_line = None, 0
    # The leading columns of every hit line; which of them name the sequence and the family is
    # settled at the end, because an hmmsearch table says so only in its trailer.
    hits: list[tuple[str, ...]] = []
    annotations: dict[str, set[str]] = {}
    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if line.startswith("#"):
                    if line.startswith("# Program:"):
                        program, program_line = line.split(":", 1)[1].strip(), lineno
                    continue
                if not line.strip():
                    continue
                if fmt is None:
                    fmt = _detect(line)
                    if fmt is None:
                        raise ValueError(
                            f"{path}:{lineno}: cannot tell the annotation format from this line (expected "
                            f"{'; or '.join(_DESCRIBE.values())}); pass format=: {shorten(line)!r}"
                        )
                    logger.debug("%s: detected format %r from line %d", path, fmt, lineno)
                if fmt == "tsv":
                    fields = line.rstrip("\r\n").split("\t")
                    seq = fields[0].strip()
                    if len(fields) != 2 or not seq or len(seq.split()) != 1:
                        raise ValueError(f"{path}:{lineno}: not a {_DESCRIBE['tsv']} line: {shorten(line)!r}")
                    found = annotations.setdefault(seq, set())
                    for entry in fields[1].split(","):
                        entry = entry.strip()
                        if not entry:
                            continue
                        if len(entry.split()) != 1:
                            raise ValueError(f"{path}:{lineno}: family {entry!r} contains white space (separate families by ','): {shorten(line)!r}")
                        found.add(family_key(entry))
                    continue
                tokens = line.split()
                if not _SHAPES[fmt](tokens):
                    raise ValueError(f"{path}:{lineno}: not a line of {_DESCRIBE[fmt]}: {shorten(line)!r}")
                hits.append(tuple(tokens[:7]))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None

    if hits:
        # Columns of (sequence, family name, family accession).
        if fmt == "pfam_scan":
            s_col, n_col, a_col = 0, 6, 5
        else:
            query = 3 if fmt == "domtblout" else 2  # query name; its accession follows it
            if program in (None, "hmmscan"):  # None: no trailer (HMMER 3.0, or cut off)
                s_col, n_col, a_col = query, 0, 1
            elif program == "hmmsearch":  # same columns, other roles: target = sequence, query = profile
                s_col, n_col, a_col = 0, query, query + 1
            else:
                raise ValueError(
                    f"{path}:{program_line}: a table of {program!r}; expected one of hmmscan (Pfam profiles "
                    f"as targets) or hmmsearch (Pfam profiles as queries)"
                )
        for t in hits:
            found = annotations.setdefault(t[s_col], set())
            found.add(family_key(t[n_col]))
            if t[a_col] != "-":
                found.add(family_key(t[a_col]))
    if fmt is None:
        logger.warning("%s: no annotation lines (only comments or blank lines)", path)
    n_pairs = sum(len(v) for v in annotations.values())
    logger.info(
        "read domain annotations from %s (%s%s): %d sequences, %d hit lines, %d (sequence, family identifier) pairs",
        path, fmt or "empty", f", {program}" if program else "", len(annotations), len(hits), n_pairs,
    )
    return annotations


# ------------------------------------------------------------------ a column of CSV files
def _family_list(cell: str) -> list[str]:
    """The families written in one CSV field: a Python list literal or comma-separated names."""
    text = cell.strip()
    if not text:
        return []
    if text[0] in "[({" or text == "set()":  # as pandas writes a list column: "['Pkinase', 'SH2']"
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ValueError("not a list literal of family names (e.g. ['Pkinase', 'SH2'])") from None
        if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of family names (strings), e.g. ['Pkinase', 'SH2']")
        entries = list(value)
    else:
        entries = text.split(",")
    out = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        if len(entry.split()) != 1:
            raise ValueError(f"family {entry!r} contains white space")
        out.append(entry)
    return out


def read_domain_column(
    root: str | os.PathLike | None,
    files: str | os.PathLike | Sequence[str | os.PathLike],
    column: str,
    *,
    sep: str = ",",
    encoding: str = "utf-8",
) -> dict[str, set[str]]:
    """The Pfam families of every row of CSV files that list them in a column (the authors' Proteins split).

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to (the dataset's raw folder).
    files : path or sequence of paths
        The CSV files (with a header; ``.gz``/``.bz2``/``.xz`` allowed), named as in the
        dataset's ``format.parts``: a row's id is :func:`~svbop.datasets.text.csv_row_id` of
        that name and its data row number, as :func:`~svbop.datasets.text.read_csv_text` gives it
        with ``row_ids=True``.
    column : str
        Header name of the column with the families (``"fund"`` in the authors' files).  A field
        is a Python list literal of names or accessions, as pandas writes a list
        (``"['Pkinase', 'SH2']"``; ``[]`` for none), or plain comma-separated ones
        (``Pkinase,SH2``); an empty field lists none.
    sep, encoding : str
        CSV field separator and text encoding, as for the reader.

    Returns
    -------
    dict of str to set of str
        Row id -> identifiers of the families listed (accession versions dropped, see
        :func:`family_key`), for every data row (an empty set when none is listed).

    Raises
    ------
    ValueError
        ``"<path>:<line>: column 'fund': ..."`` for a field that is neither a list literal of
        strings nor comma-separated names, or lists a family with white space in it; the
        reader's errors for a missing file or column or a malformed CSV record.
    """
    names = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    if not names:
        raise ValueError("files: expected at least one CSV file")
    shown = [str(n) for n in names]
    repeated = [n for i, n in enumerate(shown) if n in shown[:i]]
    if repeated:
        raise ValueError(f"files: {repeated[0]!r} is listed twice (its rows would get the same ids)")
    annotations: dict[str, set[str]] = {}
    n_empty = n_rows = 0
    for name in names:
        path = resolve(root, name, "CSV file")
        values, lines = read_csv_columns(path, [column], sep=sep, encoding=encoding)
        for row, (cell, line) in enumerate(zip(values[column], lines), start=1):
            try:
                found = {family_key(f) for f in _family_list(cell)}
            except ValueError as exc:
                raise ValueError(f"{path}:{line}: column {column!r}: {exc}: {shorten(cell)!r}") from None
            annotations[csv_row_id(name, row)] = found
            n_empty += not found
        n_rows += len(lines)
    n_pairs = sum(len(v) for v in annotations.values())
    logger.info(
        "read domain annotations from column %r of %s: %d rows, %d without a family, %d (row, family) pairs",
        column, ", ".join(str(n) for n in names), n_rows, n_empty, n_pairs,
    )
    return annotations


# ------------------------------------------------------------------ encoding
def domain_encoding(
    ids: Sequence[str],
    annotations: Mapping[str, Iterable[str]],
    families: Sequence[str],
) -> sp.csr_matrix:
    """Binary Pfam-domain vectors: entry ``(i, j)`` is 1 when family ``j`` was found in sequence ``ids[i]``.

    Parameters
    ----------
    ids : sequence of str, shape (N,)
        Sequence ids in row order (``Dataset.ids``: the FASTA record ids, or the CSV row ids), unique.
    annotations : mapping of str to iterable of str
        Sequence id -> names and/or accessions of the families found in it
        (:func:`read_domain_annotations`, :func:`read_domain_column`).
    families : sequence of str, length F
        The families of the columns (:func:`read_families`): names and/or accessions.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (N, F), float32
        Ones and zeros, rows in the order of ``ids``.  Family ``j`` is on in row ``i`` when
        :func:`family_key` of ``families[j]`` equals that of an identifier annotated to
        ``ids[i]`` (the module's matching rule).  A sequence absent from ``annotations`` gets an
        all-zero row, and identifiers matching no family are ignored; both are counted in the
        log.

    Raises
    ------
    ValueError
        For ``ids`` None (a dataset saved without ids), not 1-D or with a repeated id (the
        join would be ambiguous; the message names it), and for an empty ``families`` or one
        listing a family twice.
    """
    if ids is None:
        raise ValueError(
            "ids: None -- the dataset has no record ids; parse it again (the FASTA reader stores "
            "them, dataset format version 3)"
        )
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"ids: expected one id per row, got a single string {ids!r}")
    ids = np.asarray(ids, dtype=object) if not isinstance(ids, np.ndarray) else ids
    if ids.ndim != 1:
        raise ValueError(f"ids: expected a 1-D sequence of sequence ids, got shape {ids.shape}")
    ids = [str(v) for v in ids.tolist()]
    row_of: dict[str, int] = {}
    for i, rid in enumerate(ids):
        if row_of.setdefault(rid, i) != i:
            raise ValueError(f"ids: {rid!r} occurs at rows {row_of[rid]} and {i}; domain annotations cannot be joined to repeated ids")
    if isinstance(families, (str, bytes)) or len(families) == 0:
        raise ValueError(f"families: expected a non-empty list of family names or accessions, got {families!r}")
    col_of: dict[str, int] = {}
    for j, fam in enumerate(families):
        key = family_key(str(fam))
        if col_of.setdefault(key, j) != j:
            raise ValueError(f"families: {str(fam)!r} (entry {j}) repeats entry {col_of[key]} ({str(families[col_of[key]])!r})")
    N, F = len(ids), len(families)
    list_has_acc = any(_is_accession(k) for k in col_of)
    list_has_names = any(not _is_accession(k) for k in col_of)

    rows: list[int] = []
    cols: list[int] = []
    unmatched: set[str] = set()
    not_compared: set[str] = set()
    n_absent = 0
    for i, rid in enumerate(ids):
        found = annotations.get(rid)
        if found is None:
            n_absent += 1
            continue
        if isinstance(found, str):
            raise ValueError(f"annotations[{rid!r}]: expected a collection of family identifiers, got the string {found!r}")
        for ident in found:
            key = family_key(str(ident))
            j = col_of.get(key)
            if j is not None:
                rows.append(i)
                cols.append(j)
            elif (list_has_acc if _is_accession(key) else list_has_names):
                unmatched.add(key)
            else:
                not_compared.add(key)

    # One entry per (row, column): a family matched by both its name and its accession, or
    # found twice, must stay 1.  Sorted linear indices give CSR order directly.
    flat = np.unique(np.asarray(rows, dtype=np.int64) * F + np.asarray(cols, dtype=np.int64))
    r, c = np.divmod(flat, F)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=N))]).astype(np.int64)
    out = sp.csr_matrix((np.ones(flat.size, dtype=np.float32), c.astype(np.int32), indptr), shape=(N, F))

    n_on = int(np.count_nonzero(np.diff(indptr)))
    n_cols = int(np.unique(c).size)
    n_extra = sum(1 for k in annotations if k not in row_of)
    logger.info(
        "domain encoding: %d sequences x %d families, %d ones; %d sequences with at least one listed family, "
        "%d absent from the annotations (all-zero rows), %d annotated with no listed family; %d families used",
        N, F, out.nnz, n_on, n_absent, N - n_on - n_absent, n_cols,
    )
    if unmatched:
        shown = ", ".join(sorted(unmatched)[:5])
        # With a list of names only (or accessions only) this counts families; with a mixed list a
        # hit whose name matched may still count by its accession, so it says "identifiers".
        logger.info(
            "domain encoding: ignored %d annotated family identifiers that match no listed family (e.g. %s)",
            len(unmatched), shown,
        )
    if not_compared:
        kind = "accessions" if not list_has_acc else "names"
        logger.debug("domain encoding: %d annotated %s not compared (the family list holds none)", len(not_compared), kind)
    if n_extra:
        logger.info("domain encoding: %d annotated sequences are not among the ids (ignored)", n_extra)
    if out.nnz == 0 and N - n_absent > 0:
        logger.warning(
            "domain encoding: no annotated family is in the family list; check that both use names or "
            "accessions and the same Pfam release"
        )
    return out
