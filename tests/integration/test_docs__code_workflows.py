"""The examples of docs/code-workflows.md run: the `python` blocks of each `##` section, in
order, as one module (written to a file and imported, so the determinism check can read the
bodies' source, as it reads a project's `workflows.py`)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "code-workflows.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def sections() -> dict[str, str]:
    """Section title -> its python blocks, joined in order."""
    found: dict[str, str] = {}
    for part in re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)[1:]:
        title, _, text = part.partition("\n")
        blocks = BLOCK.findall(text)
        if blocks:
            found[title.strip()] = "\n\n".join(blocks)
    return found


def test_docs__each_section_of_the_page_has_an_example():
    assert set(sections()) == {
        "Parallel steps",
        "Async step functions",
        "Determinism",
        "Exactly once",
        "Compensation",
    }


@pytest.mark.parametrize("title", sorted(sections()))
def test_docs__the_section_s_example_runs(title, tmp_path, monkeypatch):
    name = "docs_example_" + re.sub(r"\W+", "_", title.lower())
    (tmp_path / f"{name}.py").write_text(sections()[title])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module(name)  # its assertions are the test
    finally:
        sys.modules.pop(name, None)
