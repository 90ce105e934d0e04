"""Class hierarchies from the file formats of the paper's datasets, as :class:`~svbop.datasets.Hierarchy`.

=================  ==========================================================  ====================
format             one line / entry is                                         used by
=================  ==========================================================  ====================
``lshtc_paths``    a root-to-leaf path of node ids, ``1 5 8 10 92``            LSHTC1 ``cat_hier.txt``
``nested_lists``   a JSON list of class-id lists, root first, one per node     the authors' VOC 2006
                                                                               and Proteins files
``taxonomy``       a ``;``-separated path of names, root first, ending in      Bacteria (16S rRNA),
                   the class (also built from FASTA headers / CSV columns)     DBpedia l1/l2/l3
``edges``          ``parent child``, one edge per line                         user hierarchies
=================  ==========================================================  ====================

Every builder returns a tree whose leaves ``0 .. K - 1`` are the dataset's classes, in the order
of ``class_names``.  Paths that end in a class absent from the data are dropped; a class of the
data that the hierarchy does not reach is an error.  A class that is also an inner node of the
file (LSHTC: documents labelled with a category that has sub-categories) becomes a leaf below the
inner node of the same name.  Single-child chains are kept; collapsing them is the tree model's
business.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._files import open_text, resolve, separator_in
from .base import Hierarchy

__all__ = [
    "HIERARCHY_FORMATS",
    "hierarchy_from_paths",
    "hierarchy_from_nested_lists",
    "hierarchy_from_edges",
    "hierarchy_from_labels",
    "read_lshtc_paths",
    "read_nested_lists",
    "read_taxonomy",
    "read_edges",
    "read_hierarchy",
]

logger = logging.getLogger(__name__)

#: Longest ``nested_lists`` file :func:`read_nested_lists` reads (it is read whole, as JSON, into
#: Python lists of about 20 bytes per character): 64 Mi characters; the authors' files are KBs.
MAX_NESTED_LISTS_CHARS = 1 << 26

#: Hierarchy file formats understood by :func:`read_hierarchy`.
HIERARCHY_FORMATS = ("lshtc_paths", "nested_lists", "taxonomy", "edges")


def hierarchy_from_paths(
    paths: Iterable[Sequence[Any]],
    class_names: Sequence[str],
    *,
    identity: str = "label",
    where: str = "hierarchy",
    line_numbers: Sequence[int] | None = None,
) -> Hierarchy:
    """Build a class tree from root-to-leaf label paths.

    Parameters
    ----------
    paths : iterable of sequences
        Labels from the root (or a top-level node) down to a class; the last label of a path is
        a class name (compared as ``str``).  Paths ending in a label that is not in
        ``class_names`` are dropped.  A path of length 1 hangs its class below the root.
    class_names : sequence of str
        The dataset's classes; leaf ``i`` of the result is ``class_names[i]``.
    identity : {"label", "prefix"}
        ``"label"``: equal labels are the same node wherever they occur (LSHTC ids), so a node
        met with two different parents is an error.  ``"prefix"``: a node is its whole path
        prefix, so equal names at different places are different nodes (taxonomies, where e.g.
        phylum and class may both be called "Actinobacteria").
    where : str
        Name of the source (a file) for messages.
    line_numbers : sequence of int, optional
        Line of every path in ``where``, for messages; default ``1, 2, ...``.

    Returns
    -------
    Hierarchy
        Leaves ``0 .. K - 1`` are the classes; inner nodes are named by their labels (the
        artificial root, added when the paths have several top-level nodes, is ``"<root>"``).

    Raises
    ------
    ValueError
        For an unknown ``identity``, an empty path or label, a class reached by two different
        paths, a node with two parents (``identity="label"``), or classes that no path reaches
        (the message names the first of them).
    """
    if identity not in ("label", "prefix"):
        raise ValueError(f"identity: expected 'label' or 'prefix', got {identity!r}")
    names = [str(c) for c in class_names]
    index = {c: i for i, c in enumerate(names)}
    if len(index) != len(names):
        raise ValueError(f"class_names: repeated class name {_first_repeat(names)!r}")
    K = len(names)

    inner_of: dict[Any, int] = {}  # node key -> inner node number (0-based, offset by K later)
    inner_parent: list[int] = []  # parent inner number, -1 for top level
    inner_name: list[str] = []
    inner_line: list[int] = []
    class_parent = np.full(K, -2, dtype=np.int64)  # -2: not reached yet, -1: top level
    class_line = np.zeros(K, dtype=np.int64)
    n_dropped = 0
    dropped_example: str | None = None
    for i, path in enumerate(paths):
        line = int(line_numbers[i]) if line_numbers is not None else i + 1
        labels = [str(v).strip() for v in path]
        if not labels or any(v == "" for v in labels):
            raise ValueError(f"{where}:{line}: empty path or empty label in {labels!r}")
        c = index.get(labels[-1])
        if c is None:
            n_dropped += 1
            dropped_example = dropped_example or f"{' > '.join(labels)} (line {line})"
            continue
        parent = -1
        for label in labels[:-1]:
            # a "prefix" node is its parent node and its label: the same as its whole path
            # prefix, at a constant cost per level (a tuple of the prefix costs its length)
            key = label if identity == "label" else (parent, label)
            node = inner_of.get(key)
            if node is None:
                node = inner_of[key] = len(inner_parent)
                inner_parent.append(parent)
                inner_name.append(label)
                inner_line.append(line)
            elif inner_parent[node] != parent:
                old = inner_parent[node]
                raise ValueError(
                    f"{where}:{line}: node {label!r} has parent {_name(inner_name, parent)!r} here but "
                    f"{_name(inner_name, old)!r} on line {inner_line[node]}; a class hierarchy must be a tree"
                )
            parent = node
        if class_parent[c] == -2:
            class_parent[c], class_line[c] = parent, line
        elif class_parent[c] != parent:
            raise ValueError(
                f"{where}:{line}: class {names[c]!r} is reached by a different path than on line "
                f"{class_line[c]}; every class needs exactly one place in the tree"
            )
    missing = np.flatnonzero(class_parent == -2)
    if missing.size:
        shown = ", ".join(repr(names[m]) for m in missing[:5])
        raise ValueError(
            f"{where}: {missing.size} of {K} classes are not in the hierarchy, e.g. {shown}"
        )
    if n_dropped:
        logger.info("%s: pruned %d paths whose class is not in the data, e.g. %s", where, n_dropped, dropped_example)
    if identity == "label":
        # A class that is also an inner node (its path ends where another path goes on) holds
        # the documents of that category itself: it becomes a leaf below its namesake.
        for c, name in enumerate(names):
            node = inner_of.get(name)
            if node is not None and class_parent[c] == inner_parent[node]:
                class_parent[c] = node
    return _assemble(class_parent, inner_parent, names, inner_name)


def _assemble(class_parent: np.ndarray, inner_parent: list[int], names: list[str], inner_name: list[str]) -> Hierarchy:
    """The :class:`Hierarchy` of classes hung below inner nodes (``-1``: top level), the inner
    nodes numbered after the classes; several top-level nodes get a root ``"<root>"``."""
    K = len(names)
    n_inner = len(inner_parent)
    inner_parent_arr = np.asarray(inner_parent, dtype=np.int64).reshape(-1)
    tops = np.flatnonzero(inner_parent_arr == -1)
    top_classes = np.flatnonzero(class_parent == -1)
    if tops.size == 1 and top_classes.size == 0:
        root = K + int(tops[0])
        extra_names: list[str] = []
    else:  # several top-level nodes: add a root above them
        root = K + n_inner
        extra_names = ["<root>"]
    parent = np.empty(K + n_inner + len(extra_names), dtype=np.int64)
    parent[:K] = np.where(class_parent >= 0, class_parent + K, root)
    parent[K : K + n_inner] = np.where(inner_parent_arr >= 0, inner_parent_arr + K, root)
    parent[root] = -1
    return Hierarchy(parent, n_classes=K, node_names=names + inner_name + extra_names)


def _name(names: list[str], node: int) -> str:
    return "<top level>" if node < 0 else names[node]


def _first_repeat(values: Sequence[str]) -> str:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return ""


def hierarchy_from_nested_lists(
    node_sets: Sequence[Sequence[int]],
    class_names: Sequence[str],
    *,
    ids: str = "position",
    where: str = "hierarchy",
) -> Hierarchy:
    """Build a class tree from nested class sets (the authors' ``*_hierarchy_full.txt`` files).

    Every entry is the set of class ids below one node, root first; a node's parent is the
    smallest other set that contains it (the sets must be laminar: any two are disjoint or
    nested).  A class id is a leaf below the smallest non-singleton set holding it.

    Parameters
    ----------
    node_sets : sequence of sequences of int
        Class ids per node.
    class_names : sequence of str
        The dataset's classes (leaf ``i`` of the result).
    ids : {"position", "name"}
        ``"position"``: id ``j`` is ``class_names[j - 1]`` (the authors' 1-based class
        numbers, e.g. one-hot column ``j - 1``).  ``"name"``: ``str(j)`` is a class name.
    where : str
        Name of the source for messages.

    Raises
    ------
    ValueError
        If an entry is empty or not a list of integers, the sets are not laminar, ids are out of
        range, or a class of the data is in no set.
    """
    if ids not in ("position", "name"):
        raise ValueError(f"ids: expected 'position' or 'name', got {ids!r}")
    names = [str(c) for c in class_names]
    K = len(names)
    index = {c: i for i, c in enumerate(names)}
    sets: list[frozenset[int]] = []
    seen: dict[frozenset[int], int] = {}
    unknown_ids: set[str] = set()
    n_empty = 0
    for e, entry in enumerate(node_sets):
        if not isinstance(entry, (list, tuple)) or not entry or not all(isinstance(v, int) and not isinstance(v, bool) for v in entry):
            raise ValueError(f"{where}: entry {e} is not a non-empty list of integer class ids: {str(entry)[:80]}")
        if ids == "position":
            bad = [v for v in entry if not 1 <= v <= K]
            if bad:
                raise ValueError(f"{where}: entry {e} holds class id {bad[0]}, outside 1..{K} (the number of classes)")
            members = frozenset(v - 1 for v in entry)
        else:
            members = frozenset(index[str(v)] for v in entry if str(v) in index)
            unknown_ids.update(str(v) for v in entry if str(v) not in index)
            if not members:
                n_empty += 1
                continue
        if members in seen:
            continue
        seen[members] = len(sets)
        sets.append(members)
    if unknown_ids:
        logger.info(
            "%s: pruned %d class ids that are not classes of the data (e.g. %s) and %d nodes left without a class",
            where, len(unknown_ids), ", ".join(sorted(unknown_ids)[:5]), n_empty,
        )
    covered = frozenset().union(*sets) if sets else frozenset()
    missing = [names[c] for c in range(K) if c not in covered]
    if missing:
        raise ValueError(f"{where}: {len(missing)} of {K} classes are in no node, e.g. {missing[:5]}")

    inner = [s for s in sets if len(s) > 1]
    inner.sort(key=len, reverse=True)
    # Sets containing each class, largest first (so the last one is the smallest).
    holding: list[list[int]] = [[] for _ in range(K)]
    for n, s in enumerate(inner):
        for c in s:
            holding[c].append(n)
    n_inner = len(inner)
    parent_inner = np.full(n_inner, -1, dtype=np.int64)
    for n, s in enumerate(inner):
        c = next(iter(s))
        larger = [m for m in holding[c] if len(inner[m]) > len(s)]
        if larger:
            m = larger[-1]
            if not s <= inner[m]:
                raise ValueError(f"{where}: node sets are not nested: {sorted(s)[:10]} overlaps {sorted(inner[m])[:10]} without being inside it")
            parent_inner[n] = m
    # Laminar family: the sets holding a class are exactly its smallest set and that set's ancestors.
    depth = np.zeros(n_inner, dtype=np.int64)
    for n in range(n_inner):  # parents come first (sorted by size, decreasing)
        depth[n] = depth[parent_inner[n]] + 1 if parent_inner[n] >= 0 else 0
    for c in range(K):
        if holding[c] and len(holding[c]) != depth[holding[c][-1]] + 1:
            chain = [sorted(inner[m])[:10] for m in holding[c]]
            raise ValueError(f"{where}: node sets are not nested: class {names[c]!r}'s sets {chain} overlap without one inside the other")
    roots = np.flatnonzero(parent_inner == -1)
    if roots.size > 1:
        bad = inner[int(roots[1])]
        raise ValueError(f"{where}: node {sorted(bad)[:10]} is inside no larger node; the first entry must hold every class")
    parent = np.empty(K + max(n_inner, 1), dtype=np.int64)
    if n_inner == 0:  # a single class: a root above it
        parent[:K], parent[K] = K, -1
        return Hierarchy(parent, n_classes=K, node_names=names + ["<root>"])
    for c in range(K):
        parent[c] = K + holding[c][-1] if holding[c] else K
    parent[K:] = np.where(parent_inner >= 0, parent_inner + K, -1)
    inner_names = ["{" + ",".join(names[c] for c in sorted(s)[:3]) + (",..." if len(s) > 3 else "") + "}" for s in inner]
    return Hierarchy(parent, n_classes=K, node_names=names + inner_names)


def hierarchy_from_edges(
    edges: Iterable[tuple[str, str]],
    class_names: Sequence[str],
    *,
    where: str = "hierarchy",
    line_numbers: Sequence[int] | None = None,
) -> Hierarchy:
    """Build a class tree from ``(parent, child)`` label pairs.

    Classes are matched by label; a class that also has children becomes a leaf below the inner
    node of the same label.  Parts of the graph that reach no class of the data are dropped.
    The work is linear in the number of edges however deep the tree: every node is walked up
    from once (parent pointers, no per-class copy of the path).

    Raises
    ------
    ValueError
        If a node has two parents, the edges form a cycle, or a class is in no edge.
    """
    parent_of: dict[str, str] = {}
    line_of: dict[str, int] = {}
    for i, (p, c) in enumerate(edges):
        line = int(line_numbers[i]) if line_numbers is not None else i + 1
        p, c = str(p).strip(), str(c).strip()
        if not p or not c:
            raise ValueError(f"{where}:{line}: empty node label")
        if p == c:
            raise ValueError(f"{where}:{line}: node {c!r} is its own parent")
        if c in parent_of and parent_of[c] != p:
            raise ValueError(
                f"{where}:{line}: node {c!r} has parent {p!r} here but {parent_of[c]!r} on line {line_of[c]}; "
                "a class hierarchy must be a tree"
            )
        parent_of[c], line_of[c] = p, line
    names = [str(c) for c in class_names]
    if len(set(names)) != len(names):
        raise ValueError(f"class_names: repeated class name {_first_repeat(names)!r}")
    K = len(names)
    # Walk up from every class until a node numbered by an earlier walk (or the top): each node
    # is walked once, so the work is linear in the edges, however deep the tree.  Nodes are
    # numbered root first along every walk, in class order (the order hierarchy_from_paths
    # gives the same tree).
    inner_of: dict[str, int] = {}
    inner_parent: list[int] = []
    inner_name: list[str] = []
    class_parent = np.full(K, -2, dtype=np.int64)  # -2: in no edge
    for c, name in enumerate(names):
        if name not in parent_of:
            continue  # reported as missing below
        chain: list[str] = []
        on_chain = {name}
        node = parent_of[name]
        while node not in inner_of:
            if node in on_chain:
                last = chain[-1] if chain else name
                raise ValueError(f"{where}:{line_of[last]}: the edges form a cycle through {node!r}")
            chain.append(node)
            on_chain.add(node)
            if node not in parent_of:
                break
            node = parent_of[node]
        top = inner_of[node] if node in inner_of else -1
        for label in reversed(chain):
            inner_of[label] = len(inner_parent)
            inner_parent.append(top)
            inner_name.append(label)
            top = inner_of[label]
        class_parent[c] = inner_of[parent_of[name]]
    missing = np.flatnonzero(class_parent == -2)
    if missing.size:
        shown = ", ".join(repr(names[m]) for m in missing[:5])
        raise ValueError(f"{where}: {missing.size} of {K} classes are not in the hierarchy, e.g. {shown}")
    # A class that also has children becomes a leaf below the inner node of the same label.
    for c, name in enumerate(names):
        node = inner_of.get(name)
        if node is not None:
            class_parent[c] = node
    kept = set(inner_of).union(names)
    pruned = [node for node in dict.fromkeys([*parent_of, *parent_of.values()]) if node not in kept]
    if pruned:
        shown = ", ".join(repr(n) for n in pruned[:5])
        logger.info("%s: pruned %d nodes that lead to no class of the data, e.g. %s", where, len(pruned), shown)
    return _assemble(class_parent, inner_parent, names, inner_name)


def hierarchy_from_labels(class_names: Sequence[str], *, sep: str = ".", where: str = "hierarchy.from_label") -> Hierarchy:
    """A class tree from the levels written in the class names themselves (EC numbers ``1.2.3.4``).

    Every class ``a<sep>b<sep>c`` hangs below the node ``a<sep>b``, which hangs below ``a``; the
    nodes are named by their whole prefix (so ``2`` under ``1`` is ``1.2``, not ``2``).  A class
    that is also a prefix of another class (``1.2`` and ``1.2.3``) becomes a leaf below the inner
    node of the same name.  Several top-level prefixes get a common root ``"<root>"``.  A tree
    that comes out one level deep (no class name holds ``sep``) is logged as a WARNING that names
    the separator the names do hold, if any.

    Parameters
    ----------
    class_names : sequence of str
        The dataset's classes (leaf ``i`` of the result).
    sep : str
        Separator of the levels.
    where : str
        Config key, for messages.

    Raises
    ------
    ValueError
        For an empty ``sep`` or a class name with an empty level (``1..2``, ``.1``).
    """
    if not isinstance(sep, str) or not sep:
        raise ValueError(f"{where}.sep: expected a non-empty separator, got {sep!r}")
    names = [str(c) for c in class_names]
    if len(set(names)) != len(names):
        raise ValueError(f"class_names: repeated class name {_first_repeat(names)!r}")
    K = len(names)
    # A node is (its parent node, its level): the whole prefix without copying it, so a name of
    # L levels costs O(L), not O(L^2).  Its name is the prefix, up to _PREFIX_NAME_CHARS.
    inner_of: dict[tuple[int, str], int] = {}
    inner_parent: list[int] = []
    inner_name: list[str] = []
    inner_chars: list[int] = []  # length of the whole prefix
    inner_level: list[int] = []  # 1 for the top level
    class_parent = np.empty(K, dtype=np.int64)
    class_key: list[tuple[int, str]] = []
    for c, name in enumerate(names):
        levels = name.split(sep)
        if any(not level.strip() for level in levels):
            raise ValueError(f"{where}: class {name!r} has an empty level between separators {sep!r}")
        parent = -1
        for level in levels[:-1]:
            node = inner_of.get((parent, level))
            if node is None:
                node = inner_of[parent, level] = len(inner_parent)
                chars = len(level) if parent < 0 else inner_chars[parent] + len(sep) + len(level)
                if chars <= _PREFIX_NAME_CHARS:
                    label = level if parent < 0 else inner_name[parent] + sep + level
                else:  # a prefix too long to copy into every node's name
                    label = f"...{sep}{level} (level {1 if parent < 0 else inner_level[parent] + 1})"
                inner_parent.append(parent)
                inner_name.append(label)
                inner_chars.append(chars)
                inner_level.append(1 if parent < 0 else inner_level[parent] + 1)
            parent = node
        class_parent[c] = parent
        class_key.append((parent, levels[-1]))
    # A class that is also a prefix of another class becomes a leaf below its namesake.
    for c in range(K):
        node = inner_of.get(class_key[c])
        if node is not None:
            class_parent[c] = node
    tree = _assemble(class_parent, inner_parent, names, inner_name)
    if tree.n_classes > 1 and int(tree.depth().max()) == 1:
        _warn_flat(class_names, sep, where)
    return tree


#: Longest prefix :func:`hierarchy_from_labels` writes whole into an inner node's name; a longer
#: one is named by its last level and its depth (``"...<sep>x (level 30000)"``), so the names of a
#: deep tree cost memory linear, not quadratic, in the class names' length.
_PREFIX_NAME_CHARS = 1000

#: Separators of levels that class names are often written with (suggested by the flat warning).
LEVEL_SEPARATORS = (".", "/", ":", ">", "|", ";", ",", "-", "_")


def _warn_flat(class_names: Sequence[str], sep: str, where: str) -> None:
    """Warn that no class name holds ``sep``, so every class hangs below the root; suggest the
    separator the names do hold, if any."""
    names = [str(c) for c in class_names]
    found, n = separator_in(names, [c for c in LEVEL_SEPARATORS if c != sep])
    if found is not None:
        example = next(c for c in names if found in c)
        hint = (f"{n} of {len(names)} class names hold {found!r} (e.g. {example!r}): if that separates the levels, "
                f"set `from_label: {{sep: {json.dumps(found)}}}`")
    else:
        hint = "set from_label.sep to the separator of the levels in the class names, or give a hierarchy file"
    logger.warning(
        "%s: no class name contains the separator %r, so the hierarchy is flat (one level deep: all %d classes "
        "hang directly below the root, which a tree model cannot use); %s", where, sep, len(names), hint,
    )


# ------------------------------------------------------------------------- files
def read_lshtc_paths(path: str | os.PathLike) -> tuple[list[list[str]], list[int]]:
    """Root-to-leaf paths of an LSHTC ``cat_hier.txt`` (whitespace-separated node ids per line).

    Returns
    -------
    paths : list of list of str
    line_numbers : list of int
        The line of every path (blank lines are skipped).
    """
    paths, lines = [], []
    with open_text(path) as fh:
        for n, raw in enumerate(fh, start=1):
            fields = raw.split()
            if not fields:
                continue
            bad = [f for f in fields if not f.isdigit()]
            if bad:
                raise ValueError(f"{path}:{n}: expected integer node ids, found {bad[0]!r}")
            paths.append(fields)
            lines.append(n)
    if not paths:
        raise ValueError(f"{path}: no paths (empty file)")
    return paths, lines


def read_nested_lists(path: str | os.PathLike) -> list[list[int]]:
    """The node sets of an authors' ``*_hierarchy_full.txt`` file (a JSON list of lists of ints)."""
    with open_text(path) as fh:
        text = fh.read(MAX_NESTED_LISTS_CHARS + 1)
    if len(text) > MAX_NESTED_LISTS_CHARS:
        raise ValueError(f"{path}: longer than {MAX_NESTED_LISTS_CHARS} characters, the most a nested_lists file "
                         "is read whole")
    # A list of lists of ints nests 2 deep; JSON's parser recurses once per level, so a file
    # nested 100,000 deep would exhaust the stack: count the brackets first (linear, no recursion).
    raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    depth = 0
    for lo in range(0, raw.size, 1 << 22):  # in blocks: a few bytes of work memory per character
        block = raw[lo : lo + (1 << 22)]
        step = ((block == ord("[")) | (block == ord("{"))).astype(np.int32)
        step -= ((block == ord("]")) | (block == ord("}"))).astype(np.int32)
        nesting = depth + np.cumsum(step)
        if int(nesting.max()) > 2:
            at = lo + int(np.argmax(nesting > 2))
            line = 1 + int(np.count_nonzero(raw[:at] == ord("\n")))
            raise ValueError(f"{path}:{line}: nested deeper than a list of lists of class ids (3 or more brackets deep)")
        depth = int(nesting[-1])
    try:
        sets = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not a nested list ({exc.msg}, column {exc.colno})") from None
    if not isinstance(sets, list) or not sets:
        raise ValueError(f"{path}: expected a non-empty JSON list of class-id lists")
    return sets


def read_taxonomy(path: str | os.PathLike, *, sep: str = ";") -> tuple[list[list[str]], list[int]]:
    """Paths of a taxonomy file: one ``sep``-separated path per line, root first, ending in the class."""
    paths, lines = [], []
    with open_text(path) as fh:
        for n, raw in enumerate(fh, start=1):
            raw = raw.strip()
            if not raw or raw.startswith("#"):
                continue
            levels = [v.strip() for v in raw.split(sep)]
            if any(not v for v in levels):
                raise ValueError(f"{path}:{n}: empty taxonomy level in {raw[:80]!r}")
            paths.append(levels)
            lines.append(n)
    return paths, lines


def read_edges(path: str | os.PathLike, *, sep: str | None = None) -> tuple[list[tuple[str, str]], list[int]]:
    """``(parent, child)`` pairs of an edge-list file: two fields per line (whitespace or ``sep``).

    A one-character ``sep`` (``","``, ``"\\t"``, ``";"``) is read as a CSV writer writes it: a name holding the
    separator or a quote is quoted (``"cats, big",lion``), ``""`` inside quotes is one quote."""
    import csv

    edges, lines = [], []
    with open_text(path) as fh:
        for n, raw in enumerate(fh, start=1):
            if n == 1:
                raw = raw.removeprefix("\ufeff")  # a spreadsheet's byte order mark
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            if sep is not None and len(sep) == 1:
                try:
                    fields = [f.strip() for f in next(csv.reader([raw.rstrip("\r\n")], delimiter=sep, strict=True))]
                except csv.Error as exc:
                    raise ValueError(f"{path}:{n}: not a {sep!r}-separated line ({exc}): {raw.strip()[:80]!r}") from None
            else:
                fields = [f.strip() for f in raw.rstrip("\n").split(sep)] if sep else raw.split()
            if len(fields) != 2:
                raise ValueError(f"{path}:{n}: expected 'parent child', got {len(fields)} fields: {raw.strip()[:80]!r}")
            edges.append((fields[0], fields[1]))
            lines.append(n)
    return edges, lines


def read_hierarchy(
    root: str | os.PathLike | None, spec: Mapping[str, Any], class_names: Sequence[str], *, where: str = "hierarchy"
) -> Hierarchy:
    """The hierarchy a dataset's config describes, over ``class_names``.

    Parameters
    ----------
    root : path or None
        Folder that ``spec["file"]`` is relative to.
    spec : mapping
        ``format`` (one of :data:`HIERARCHY_FORMATS`), ``file``, and per format: ``ids``
        (nested_lists: ``"position"`` or ``"name"``), ``sep`` (taxonomy, edges); or
        ``{"from_label": {"sep": "."}}``: the levels written in the class names
        (:func:`hierarchy_from_labels`; a WARNING when no name holds ``sep``, so the tree is flat).
    where : str
        Config key of ``spec``, for messages (e.g. ``"datasets.enzymes.hierarchy"``).

    Raises
    ------
    ValueError
        For an unknown format or option, an unreadable file, or a tree that does not fit the
        classes; messages name the file and line.
    """
    spec = dict(spec)
    if "from_label" in spec:
        options = spec.pop("from_label")
        if spec:
            raise ValueError(f"{where}.{sorted(spec)[0]}: not with from_label (the hierarchy comes from the labels, not a file)")
        options = dict(options or {})
        unknown = sorted(set(options) - {"sep"})
        if unknown:
            raise ValueError(f"{where}.from_label.{unknown[0]}: unknown option (known: sep)")
        tree = hierarchy_from_labels(class_names, sep=options.get("sep", "."), where=f"{where}.from_label")
        logger.info("hierarchy from the class names (levels split at %r): %d nodes over %d classes, depth %d",
                    options.get("sep", "."), tree.n_nodes, tree.n_classes, int(tree.depth().max()))
        return tree
    fmt = spec.pop("format", None)
    if fmt not in HIERARCHY_FORMATS:
        raise ValueError(f"{where}.format: {fmt!r} is not one of {list(HIERARCHY_FORMATS)}")
    if "file" not in spec:
        raise ValueError(f"{where}.file: missing (the {fmt} file to read)")
    path = resolve(root, spec.pop("file"), "hierarchy file")
    if not stat.S_ISREG(os.stat(path).st_mode):  # /dev/zero never ends, a FIFO may never answer
        raise ValueError(f"{path}: not a regular file (the {fmt} hierarchy file)")
    allowed = {"lshtc_paths": set(), "nested_lists": {"ids"}, "taxonomy": {"sep"}, "edges": {"sep"}}[fmt]
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown option for format {fmt!r} (known: {sorted(allowed) or 'none'})")
    where = str(path)
    if fmt == "lshtc_paths":
        paths, lines = read_lshtc_paths(path)
        tree = hierarchy_from_paths(paths, class_names, identity="label", where=where, line_numbers=lines)
    elif fmt == "nested_lists":
        tree = hierarchy_from_nested_lists(read_nested_lists(path), class_names, ids=spec.get("ids", "position"), where=where)
    elif fmt == "taxonomy":
        paths, lines = read_taxonomy(path, sep=spec.get("sep", ";"))
        tree = hierarchy_from_paths(paths, class_names, identity="prefix", where=where, line_numbers=lines)
    else:
        edges, lines = read_edges(path, sep=spec.get("sep"))
        tree = hierarchy_from_edges(edges, class_names, where=where, line_numbers=lines)
    logger.info("%s: hierarchy with %d nodes over %d classes, depth %d", path, tree.n_nodes, tree.n_classes, int(tree.depth().max()))
    return tree
