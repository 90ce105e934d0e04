"""Imports run one way: no module of svbop imports, even lazily inside a function, a module that
imports it back (the rule in the project's house style).  A circle such as
``_kernels -> linear -> io -> sets -> _kernels`` works only as long as every edge but one stays
inside a function, and breaks the day someone moves one to the top."""

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workflow" / "svbop"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """Module -> the svbop modules it imports anywhere in its text (top level or in a function).

    ``from . import x`` counts as importing ``x``, not the package itself (the package is being
    imported already when a submodule runs).
    """
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                deps.update(submodules or ([target] if target in mods else []))
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
        deps.discard(name)
        graph[name] = deps
    return graph


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "svbop.sets" in graph["svbop.io"]  # top level
    assert "svbop._kernels" in graph["svbop.sets"]  # inside SetPredictions.contains
    assert "svbop._kernels" in graph["svbop.full"]  # from . import _kernels


def test_svbop_imports_are_acyclic():
    graph = import_graph()
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import circle among svbop's modules: {' -> '.join(exc.args[1])}") from None
    assert set(order) == set(graph)


def test_bottom_layers_import_nothing_above_them():
    graph = import_graph()
    assert graph["svbop._threads"] == set()
    assert graph["svbop._memory"] == set()
    assert graph["svbop._npz"] <= {"svbop._memory"}
    assert graph["svbop._tree_kernels"] == set()
    assert graph["svbop._kernels"] <= {"svbop._threads"}
    assert graph["svbop.sets"] <= {"svbop._kernels", "svbop._npz"}


def test_every_module_imports_in_layer_order_in_a_fresh_interpreter():
    # __main__ runs the command line; the package itself is imported first by any of its modules
    order = [m for m in TopologicalSorter(import_graph()).static_order() if m != "svbop" and not m.endswith("__main__")]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    done = subprocess.run([sys.executable, "-c", code, *order], capture_output=True, text=True,
                          env={"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]


def test_job_counts_are_resolved_in_one_place():
    # every module resolves n_jobs / n_threads through svbop._threads; a second copy drifts (one
    # counted os.cpu_count(), the other the cores this process may run on)
    owners = {name for name, path in _modules().items()
              for node in ast.walk(ast.parse(path.read_text(), str(path)))
              if isinstance(node, ast.FunctionDef) and node.name in {"_n_workers", "_chunk_workers", "cpu_count"}}
    assert owners == {"svbop._threads"}


def test_chunk_workers_follow_scikit_learns_convention():
    import pytest

    from svbop._threads import _chunk_workers, cpu_count

    assert _chunk_workers(None, 10) == 1
    assert _chunk_workers(4, 2) == 2  # never more threads than chunks
    assert _chunk_workers(-1, 10_000) == cpu_count()
    assert _chunk_workers(-2, 10_000) == max(1, cpu_count() - 1)
    for bad in (0, True, 1.5, "2"):
        with pytest.raises(ValueError, match="n_jobs must be a non-zero integer or None"):
            _chunk_workers(bad, 10)
