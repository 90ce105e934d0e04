"""Where the workflow's own files are: the checkout's top level, or the copy inside the wheel.

An installed wheel carries the files ``svbop report`` runs (``Snakefile``, ``config.yaml``,
``workflow/rules``, ``workflow/scripts``, ``workflow/schemas``, ``report/templates``, ...) in the
package folder ``svbop/_workflow`` (copied there by ``setup.py``'s ``build_py`` step); a checkout
(an editable install, or ``PYTHONPATH=workflow``) uses its own top level.  Nothing here imports
anything of svbop: every module may use it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DOC_FILES", "WORKFLOW_FILES", "doc_pages", "docs_folder", "packaged_workflow", "workflow_path",
           "workflow_root"]

#: The workflow's files, relative to its root, that ``svbop report`` needs to run the pipeline
#: (folders are copied whole).  ``setup.py`` packages exactly these.
WORKFLOW_FILES = (
    "Snakefile",
    "config.yaml",
    "workflow/rules",
    "workflow/scripts",
    "workflow/schemas",
    "report/templates",
    "report/captions",
    "report/workflow.rst",
    "envs",
    "profiles",
)

#: The documentation the wheel carries beside the workflow (``svbop docs`` prints or locates it): a wheel user
#: has no checkout, so the pages the command line and the report point to travel with the package.
DOC_FILES = ("workflow/docs",)

_PACKAGE = Path(__file__).resolve().parent


def packaged_workflow() -> Path | None:
    """The wheel's copy of the workflow (``svbop/_workflow``), or None in a checkout."""
    path = _PACKAGE / "_workflow"
    return path if (path / "Snakefile").is_file() else None


def _checkout() -> Path | None:
    root = _PACKAGE.parents[1]  # <checkout>/workflow/svbop -> <checkout>
    return root if (root / "Snakefile").is_file() and (root / "workflow" / "rules").is_dir() else None


def workflow_root() -> Path:
    """The folder holding ``Snakefile`` and the files of :data:`WORKFLOW_FILES`.

    The checkout when svbop is imported from one, else the wheel's copy.

    Raises
    ------
    ValueError
        Neither is there (an install made without ``setup.py``'s build step).
    """
    root = _checkout() or packaged_workflow()
    if root is None:
        raise ValueError(f"svbop's workflow files are missing: neither {_PACKAGE.parents[1]} (a checkout) nor "
                         f"{_PACKAGE / '_workflow'} (a wheel) holds a Snakefile; reinstall svbop "
                         "from this repository's wheel (pip wheel --no-deps . -w dist, then pip install "
                         "'dist/svbop-<version>-py3-none-any.whl[report]')")
    return root


def workflow_path(relative: str) -> Path:
    """``relative`` under the checkout or the wheel's copy, whichever exists; never raises (a
    module-level default path: a missing file is named when it is opened)."""
    for root in (_checkout(), packaged_workflow()):
        if root is not None:
            return root / relative
    return _PACKAGE.parents[1] / relative


def docs_folder() -> Path:
    """The folder of svbop's documentation pages (``workflow/docs``): the checkout's, or the wheel's copy.

    Raises
    ------
    ValueError
        Neither holds it (an install made without ``setup.py``'s build step).
    """
    folder = workflow_path(DOC_FILES[0])
    if not folder.is_dir():
        raise ValueError(f"svbop's documentation is missing: {folder} does not exist; reinstall svbop "
                         "from this repository's wheel (pip wheel --no-deps . -w dist, then pip install "
                         "'dist/svbop-<version>-py3-none-any.whl[report]')")
    return folder


def doc_pages() -> dict[str, tuple[Path, str]]:
    """Each documentation page by name (``"your_model"``): its path and its title (its first heading)."""
    out = {}
    for path in sorted(docs_folder().glob("*.md")):
        first = next((line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")), "")
        out[path.stem] = (path, first.lstrip("#").strip())
    return out
