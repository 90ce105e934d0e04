"""Reader for labelled sequences in FASTA files: the paper's **Bacteria** (16S rRNA) data.

A record is a header line ``>...`` followed by sequence lines.  The class comes from the header:
either a taxonomy in one of its tab-separated fields, as in the 16S rRNA "gold" file
(``>7000004128189528<TAB>Acidothermus cellulolyticus 11B, ...<TAB>...<TAB>Bacteria;
Actinobacteria; Actinobacteria; Actinomycetales; Acidothermaceae; Acidothermus``, the class
being the genus, the last level, and the levels above it its place in the class hierarchy), or a
regular expression (e.g. an EC number or a family name in protein headers).  Each record's id,
the first word of its header (``sp|P12345|AATM_RABIT`` in ``>sp|P12345|AATM_RABIT Aspartate
...``, the name HMMER and pfam_scan.pl report it under), is kept in ``Dataset.ids``.

FASTA files are small next to the other datasets, so they are parsed line by line in Python.
"""

from __future__ import annotations

import logging
import os
import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ._files import describe_parts, encode_labels, open_text, part_array, part_list, resolve, shorten
from .base import Dataset

__all__ = ["DEFAULT_ALPHABET", "read_fasta"]

logger = logging.getLogger(__name__)

#: Characters allowed in sequences by default: all ASCII letters (the IUPAC nucleotide and amino
#: acid codes, either case) and ``*`` (stop), ``-`` and ``.`` (gaps).  Digits and other symbols are
#: rejected.
DEFAULT_ALPHABET = string.ascii_letters + "*-."


def _records(path: Path, alphabet: str | None):
    """Yield ``(header line number, header without '>', sequence)`` of each record."""
    bad = re.compile(f"[^{re.escape(alphabet)}]") if alphabet is not None else None
    header, header_line, chunks = None, 0, []
    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if line.startswith(">"):
                    if header is not None:
                        if not chunks:
                            raise ValueError(f"{path}:{header_line}: record {shorten('>' + header)!r} has an empty sequence")
                        yield header_line, header, "".join(chunks).upper()
                    header, header_line, chunks = line[1:].rstrip("\r\n"), lineno, []
                    continue
                seq = "".join(line.split())
                if not seq:
                    continue
                if header is None:
                    raise ValueError(f"{path}:{lineno}: sequence line before the first header ('>' line): {shorten(line)!r}")
                if bad is not None:
                    m = bad.search(seq)
                    if m:
                        raise ValueError(
                            f"{path}:{lineno}: character {m.group()!r} is not a sequence letter "
                            f"(alphabet: {shorten(alphabet, 40)!r}): {shorten(line)!r}"
                        )
                chunks.append(seq)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    if header is not None:
        if not chunks:
            raise ValueError(f"{path}:{header_line}: record {shorten('>' + header)!r} has an empty sequence")
        yield header_line, header, "".join(chunks).upper()


def read_fasta(
    root: str | os.PathLike | None,
    parts: Mapping[str, Sequence[str | os.PathLike]],
    *,
    label: str = "taxonomy",
    label_regex: str | None = None,
    taxonomy_field: int = -1,
    taxonomy_sep: str = ";",
    level: int = -1,
    hierarchy: bool = True,
    alphabet: str | None = DEFAULT_ALPHABET,
) -> Dataset:
    """Read labelled sequences (DNA, RNA or protein) from FASTA files.

    Parameters
    ----------
    root : path or None
        Folder the file names are relative to.
    parts : mapping of str to list of file names
        Part name to the FASTA files whose records make it up (``.gz``/``.bz2``/``.xz`` allowed).
    label : {"taxonomy", "regex"}
        Where the class comes from.  ``"taxonomy"``: the header's tab-separated field
        ``taxonomy_field`` holds a ``taxonomy_sep``-separated taxonomy, root first (levels are
        whitespace-stripped; one trailing separator is allowed); the class is level ``level``
        and its path is the levels up to it.  ``"regex"``: ``label_regex`` is searched in the
        header (without ``>``); the group named ``label``, else group 1, is the class.
    label_regex : str, optional
        The regular expression for ``label="regex"``; it needs a group.
    taxonomy_field : int
        Index of the tab-separated header field holding the taxonomy (default: the last).  Counted
        from the end (negative), it must not reach the first field, which holds the record id: a
        header without a tab has no taxonomy.
    taxonomy_sep : str
        Separator of the taxonomy levels.
    level : int
        Taxonomy level that is the class (Python indexing: ``-1`` the last, ``5`` the sixth).
    hierarchy : bool
        With ``label="taxonomy"``, build the class hierarchy from the taxonomy paths (a node
        is its whole path prefix, so a name repeated across levels, e.g. phylum and class
        "Actinobacteria", makes distinct nodes).  Ignored for regex labels.
    alphabet : str or None
        Characters allowed in sequences (compared before upper-casing); ``None`` accepts any.

    Returns
    -------
    Dataset
        ``X`` the sequences (line breaks and whitespace removed, upper-cased), ``x_kind``
        ``"sequences"``; ``y`` indices into ``class_names``, the labels sorted; ``hierarchy``
        (taxonomy labels with ``hierarchy=True``); ``part`` per row; ``ids`` the record ids
        (the first whitespace-separated word of each header, without ``>``; a repeated id is
        logged as a warning naming both records); ``name`` empty.

    Raises
    ------
    ValueError
        ``"<path>:<line>: ..."`` for a sequence line before the first header, a header without
        an id (nothing but white space after ``>``) or without sequence, a character outside
        ``alphabet``, a header the regex does not match or whose taxonomy field is missing (a
        negative ``taxonomy_field`` that lands on the first field, the record id's, as in a
        header ``>s1`` with no tab, is missing too), too short for ``level`` or has an empty level, and for a class whose taxonomy path differs
        between two records (naming both lines).
    """
    if label not in ("taxonomy", "regex"):
        raise ValueError(f"label: expected 'taxonomy' or 'regex', got {label!r}")
    regex = None
    if label == "regex":
        if not label_regex:
            raise ValueError("label_regex: required with label='regex'")
        try:
            regex = re.compile(label_regex)
        except re.error as exc:
            raise ValueError(f"label_regex: not a regular expression ({exc}): {label_regex!r}") from None
        if regex.groups == 0:
            raise ValueError(f"label_regex: needs a group (named 'label', or group 1) for the class: {label_regex!r}")
    if not taxonomy_sep:
        raise ValueError("taxonomy_sep: must not be empty")
    plist = part_list(parts)

    seqs: list[str] = []
    labels: list[str] = []
    ids: list[str] = []
    where_id: dict[str, tuple[Path, int]] = {}  # id -> (file, line) of its first record
    repeated: list[tuple[str, Path, int]] = []
    part_names, counts = [], []
    path_of: dict[str, tuple[tuple[str, ...], Path, int]] = {}  # class -> (path, file, line)
    for part, names in plist:
        n_part = 0
        for name in names:
            path = resolve(root, name)
            for line, header, seq in _records(path, alphabet):
                words = header.split(maxsplit=1)
                if not words:
                    raise ValueError(f"{path}:{line}: header has no record id (nothing after '>')")
                rid = words[0]
                if rid in where_id:
                    repeated.append((rid, path, line))
                else:
                    where_id[rid] = (path, line)
                if regex is not None:
                    m = regex.search(header)
                    if m is None:
                        raise ValueError(f"{path}:{line}: header does not match label_regex {label_regex!r}: {shorten('>' + header)!r}")
                    cls = m.group("label") if "label" in regex.groupindex else m.group(1)
                    cls = (cls or "").strip()
                    if not cls:
                        raise ValueError(f"{path}:{line}: label_regex matches an empty label: {shorten('>' + header)!r}")
                else:
                    fields = header.split("\t")
                    if not -len(fields) <= taxonomy_field < len(fields):
                        raise ValueError(
                            f"{path}:{line}: header has {len(fields)} tab-separated fields, no field {taxonomy_field} "
                            f"(taxonomy_field): {shorten('>' + header)!r}"
                        )
                    if taxonomy_field < 0 and taxonomy_field % len(fields) == 0:
                        # counted from the end, the field is the record id's: no taxonomy in this header
                        raise ValueError(
                            f"{path}:{line}: header has no taxonomy field (only {len(fields)} tab-separated field(s), the "
                            f"first being the record id; taxonomy_field={taxonomy_field}): {shorten('>' + header)!r}"
                        )
                    field = fields[taxonomy_field]
                    levels = [s.strip() for s in field.split(taxonomy_sep)]
                    if len(levels) > 1 and levels[-1] == "":
                        levels.pop()  # a trailing separator
                    if any(s == "" for s in levels):
                        raise ValueError(f"{path}:{line}: empty taxonomy level in {field.strip()!r}")
                    if not -len(levels) <= level < len(levels):
                        raise ValueError(
                            f"{path}:{line}: taxonomy has {len(levels)} levels, no level {level}: {shorten(field.strip())!r}"
                        )
                    lineage = tuple(levels[: (level % len(levels)) + 1])
                    cls = lineage[-1]
                    seen = path_of.get(cls)
                    if seen is None:
                        path_of[cls] = (lineage, path, line)
                    elif seen[0] != lineage:
                        raise ValueError(
                            f"{path}:{line}: class {cls!r} has the taxonomy {'; '.join(lineage)} here but "
                            f"{'; '.join(seen[0])} at {seen[1]}:{seen[2]}; every class needs exactly one place in the hierarchy"
                        )
                seqs.append(seq)
                labels.append(cls)
                ids.append(rid)
                n_part += 1
        part_names.append(part)
        counts.append(n_part)

    if not seqs:
        raise ValueError(f"{describe_parts(plist)}: no FASTA records")
    if repeated:
        rid, path, line = repeated[0]
        first_path, first_line = where_id[rid]
        logger.warning(
            "%s:%d: record id %r repeats the one at %s:%d (%d repeated record(s) in all); ids "
            "should be unique to join annotations such as domains to records",
            path, line, rid, first_path, first_line, len(repeated),
        )
    class_names, y = encode_labels(np.asarray(labels, dtype=np.str_))
    desc_files = describe_parts(plist)
    tree = None
    if label == "taxonomy" and hierarchy:
        from .hierarchies import hierarchy_from_paths

        tree = hierarchy_from_paths(
            [path_of[c][0] for c in class_names], class_names, identity="prefix", where=f"taxonomies of {desc_files}"
        )
    how = (
        f"label = group of {label_regex!r} in the header" if regex is not None
        else f"label = taxonomy level {level} of header field {taxonomy_field} (sep {taxonomy_sep!r})"
        + (", hierarchy from the taxonomy" if tree is not None else "")
    )
    X = np.empty(len(seqs), dtype=object)
    X[:] = seqs
    logger.debug("read_fasta: %d sequences, %d classes", X.size, len(class_names))
    return Dataset(
        name="", X=X, y=y, class_names=class_names, hierarchy=tree,
        description=f"sequences from FASTA files {desc_files}; {how}",
        x_kind="sequences", part=part_array(part_names, counts), ids=ids,
    )
