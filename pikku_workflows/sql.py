"""Named SQL statements: `-- name: <name>` blocks in a `.sql` file beside the module that runs
them (procrastinate's `queries.sql`), each led by a comment that is its contract.

A block's text names tables and columns as `{run}`, `{step}`... (quoted from the models'
`_meta`, never from caller values) and may compose other blocks in as `{block_name}`
(fragments, e.g. the run lock of `engine/store/claims.sql` that a transition takes). Parameters are
named (`%(run_id)s`) and passed at execution, never formatted in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from django.db import connection
from django.db.models import Model

_BLOCK_START = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    name: str
    contract: str  # the comment lines right after the name line
    body: str  # the SQL (its own comments kept), with its `{placeholders}` still in


def parse_blocks(text: str) -> dict[str, Block]:
    """The named blocks of one `.sql` file's text."""
    blocks: dict[str, Block] = {}
    starts = list(_BLOCK_START.finditer(text))
    for start, end in zip(starts, [*starts[1:], None], strict=True):
        lines = text[start.end() : end.start() if end else len(text)].strip("\n").splitlines()
        leading = 0
        while leading < len(lines) and lines[leading].startswith("--"):
            leading += 1
        contract = " ".join(line[2:].strip() for line in lines[:leading])
        body = "\n".join(lines[leading:]).strip()
        blocks[start.group(1)] = Block(start.group(1), contract, body)
    return blocks


def without_comments(sql: str) -> str:
    """The statement as the database parses it: `--` comments removed (for tests that pin a
    clause by its words, not by a comment that mentions them)."""
    return "\n".join(re.sub(r"--.*$", "", line) for line in sql.splitlines())


def quoted_table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


class Statements:
    """The blocks of some `.sql` files, composed on first use: tables and columns from
    `names()` (called once, after the apps are ready), fragments from the files themselves or
    from `fragments()` (blocks another module supplies, e.g. dispatch's queue message)."""

    def __init__(
        self,
        *paths: Path,
        names: Callable[[], Mapping[str, str]],
        fragments: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self._paths = paths
        self._names = names
        self._fragments = fragments
        self._composed: dict[str, str] = {}

    @cached_property
    def blocks(self) -> dict[str, Block]:
        blocks: dict[str, Block] = {}
        for path in self._paths:
            blocks.update(parse_blocks(path.read_text()))
        return blocks

    @cached_property
    def _substitutions(self) -> dict[str, str]:
        return {**self._names(), **self._fragments()}

    def __getitem__(self, name: str) -> str:
        """The block `name`, ready to execute."""
        if name not in self._composed:
            self._composed[name] = self._compose(name, ())
        return self._composed[name]

    def _compose(self, name: str, within: tuple[str, ...]) -> str:
        if name in within:
            raise ValueError(f"SQL block {name!r} includes itself: {' -> '.join(within)}")
        body = self.blocks[name].body
        referenced = set(re.findall(r"(?<!\{)\{(\w+)\}(?!\})", body))
        values = {
            ref: self._compose(ref, (*within, name)) if ref in self.blocks else self._lookup(ref)
            for ref in referenced
        }
        return body.format_map(values)

    def _lookup(self, ref: str) -> str:
        try:
            return self._substitutions[ref]
        except KeyError:
            raise KeyError(f"SQL placeholder {{{ref}}} names no table, column or block") from None
