"""Build step of the wheel: the workflow's files travel inside the package (svbop/_workflow).

``svbop report`` runs the project's Snakemake workflow; installed from a wheel, with no checkout on
the machine, it finds the workflow in ``svbop/_workflow`` (see ``workflow/svbop/_resources.py``,
whose ``WORKFLOW_FILES`` lists what is copied).  An editable install uses the checkout itself and
copies nothing.  Everything else is in ``pyproject.toml``.
"""

import ast
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _constant(name):
    """A tuple constant of workflow/svbop/_resources.py, read without importing svbop."""
    tree = ast.parse((ROOT / "workflow" / "svbop" / "_resources.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
            return ast.literal_eval(node.value)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"workflow/svbop/_resources.py: no {name}")


def _workflow_files():
    """WORKFLOW_FILES (what svbop report runs) and DOC_FILES (what svbop docs shows) of _resources.py."""
    return (*_constant("WORKFLOW_FILES"), *_constant("DOC_FILES"))


class BuildWithWorkflow(build_py):
    """``build_py``, then copy the workflow's files into ``<build>/svbop/_workflow``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install runs the checkout's own files
        dest = Path(self.build_lib) / "svbop" / "_workflow"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".snakemake")
        for name in _workflow_files():
            src = ROOT / name
            if not src.exists():
                raise RuntimeError(f"{src}: missing; the wheel needs it (svbop report runs it)")
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, target, ignore=ignore, dirs_exist_ok=True)
            else:
                shutil.copy2(src, target)


setup(cmdclass={"build_py": BuildWithWorkflow})
