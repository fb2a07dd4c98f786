"""The repository explains itself: code, tests, docs and benches cite `docs/` pages and
architecture sections, never a document outside the repo or a tracker's issue number."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = ("pikku_workflows", "tests", "project", "bench", "docs")
SUFFIXES = {".py", ".md", ".sql", ".html", ".toml", ".yaml", ".yml"}
# Spelled in pieces, so this file does not cite what it forbids.
OUTSIDE = re.compile(
    "|".join([r"\bDESIGN" + r"(\.md)?\b", r"\b[Ii]ssue" + r"s? #?\d+", r"\bmain#\d+"])
)


def cited_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml"]
    for top in CITED:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in files if p.exists()]


def test_repository__cites_nothing_outside_itself():
    citing = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in cited_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert citing == []
