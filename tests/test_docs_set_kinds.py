"""The page comparing the kinds of sets (workflow/docs/set_kinds.md) runs and prints what it shows.

As for the scikit-learn page (tests/test_docs_sklearn.py): every ```python block runs, in order, in
one namespace, and the ```text block after it must be what it prints (numbers may differ by one
unit of their last printed digit).  ``python tests/test_docs_set_kinds.py`` reruns the page and
rewrites its output blocks.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from test_docs_sklearn import page_blocks, same_output

PAGE = Path(__file__).resolve().parents[1] / "workflow" / "docs" / "set_kinds.md"


def run_page(text: str) -> list[str]:
    """What each python block of the page prints, run in order in one namespace."""
    namespace: dict = {"__name__": "__set_kinds_page__"}
    outputs = []
    for code, _, _ in page_blocks(text):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, str(PAGE), "exec"), namespace)
        outputs.append(buf.getvalue())
    return outputs


def test_the_set_kinds_page_runs_and_prints_what_it_shows():
    text = PAGE.read_text()
    blocks = page_blocks(text)
    assert len(blocks) >= 5, "the page should hold its example as ```python blocks"
    for (code, claimed, _), got in zip(blocks, run_page(text)):
        if claimed is None:
            assert got == "", f"this block prints but the page shows no output for it:\n{code}"
        else:
            assert same_output(got, claimed), f"the page shows\n{claimed}\nbut the code prints\n{got}\nfor\n{code}"


def _update_page() -> None:
    text = PAGE.read_text()
    blocks = page_blocks(text)
    outputs = run_page(text)
    for (code, claimed, span), got in reversed(list(zip(blocks, outputs))):
        if span is not None:
            text = text[: span[0]] + got + text[span[1] :]
        elif got:
            raise SystemExit(f"a block prints but has no ```text block after it:\n{code}")
    PAGE.write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(PAGE.parents[1]))
    _update_page()
