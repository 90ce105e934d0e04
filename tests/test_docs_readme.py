"""The README tells the truth: its commands are CI's, its code prints what it shows, its links resolve.

The README is the newcomer's page (at most 250 lines); the reference lives in workflow/README.md
and workflow/docs/. These tests keep the two commands the README gives equal to what ``.ci/run``
runs, run the README's python blocks (each followed by the output it claims, compared as the
scikit-learn page's are), and check that every relative link and image of the documentation
points at a file of the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_docs_sklearn import page_blocks, run_page, same_output

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, ROOT / "workflow" / "README.md", *sorted((ROOT / "workflow" / "docs").glob("*.md"))]
_BASH = re.compile(r"```bash\n(.*?)```", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _readme_commands() -> list[str]:
    return [block.strip() for block in _BASH.findall(README.read_text())]


def test_the_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= 250, f"README.md has {n} lines; the reference belongs in workflow/README.md or workflow/docs/"


def test_ci_runs_the_readmes_install_and_test_commands():
    commands = _readme_commands()
    install = next(c for c in commands if "pip install" in c and " -e " in c and "snakemake" in c)
    test = next(c for c in commands if c.startswith("python -m pytest"))
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == test, "the last command of .ci/run must be the README's test command, verbatim"
    pip_install = install.split("&&")[0].strip()
    assert any(line.replace(" --quiet", "") == pip_install for line in ci), (
        f".ci/run must install the project as the README does ({pip_install})")


def test_the_readmes_python_blocks_print_what_they_show():
    pytest.importorskip("sklearn")
    text = README.read_text()
    blocks = page_blocks(text)
    assert blocks, "the README shows no python example"
    outputs = run_page(text)
    for (code, claimed, _), printed in zip(blocks, outputs):
        if claimed is None:
            assert not printed, f"a README block prints output it does not show:\n{code}"
        else:
            assert same_output(printed, claimed), f"the README shows\n{claimed}\nbut the block prints\n{printed}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_the_documentation_resolves(page):
    text = page.read_text()
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md":
            headings = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                        for h in re.findall(r"^#+ (.*)$", resolved.read_text(), re.M)}
            if anchor not in headings:
                broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


_BY_NAME = re.compile(r"""pip install\s+(?:-U\s+|--upgrade\s+)?["']?svbop(?:\[|["'\s]|$)""", re.M)


def test_nothing_tells_a_user_to_install_svbop_by_name():
    """svbop is not on the package index: an install by name fails, and would install whatever a stranger
    registers under the name. Every page, the wheel's messages and the CLI's help name a checkout or a wheel."""
    sources = [*DOCS, *sorted((ROOT / "workflow" / "svbop").rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in sources for m in _BY_NAME.finditer(p.read_text())]
    assert not found, found


def test_the_readmes_report_install_is_the_wheel_of_this_version():
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    block = next(c for c in _readme_commands() if "svbop report" in c)
    lines = [ln.split("#")[0].strip() for ln in block.splitlines()]
    assert lines[0] == "pip wheel --no-deps . -w dist"
    assert lines[1] == f'pip install "dist/svbop-{version}-py3-none-any.whl[report]"'
    # the timings below it were taken on two cores: the command shown says so (the default is one)
    assert "--cores 2" in lines[2]
    your_model = (ROOT / "workflow" / "docs" / "your_model.md").read_text()
    assert f"dist/svbop-{version}-py3-none-any.whl[report]" in your_model
