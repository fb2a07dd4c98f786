"""Reading a workflow body's source for what a replay would see differently: the clock, random
numbers, new uuids and the environment (docs/code-workflows.md, "Determinism"). The registry
reads each body as it registers; `manage.py check` warns of what it found, naming the line.

Pure: it parses source text and imports nothing it reads. Names resolve through the imports of
the body's module and of the body itself (`from datetime import datetime as dt` makes
`dt.now()` a `datetime.datetime.now` call); nested functions and lambdas count as the body.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# What each call is, resolved to its full dotted name, and what a body uses instead.
REPLAY_SAFE: dict[str, str] = {
    "datetime.datetime.now": "wf.now()",
    "datetime.datetime.utcnow": "wf.now()",
    "datetime.datetime.today": "wf.now()",
    "datetime.date.today": "wf.now().date()",
    "django.utils.timezone.now": "wf.now()",
    "time.time": "wf.now().timestamp()",
    "time.time_ns": "wf.now().timestamp()",
    "uuid.uuid1": "wf.uuid7()",
    "uuid.uuid4": "wf.uuid4()",
    "os.getenv": "a setting, or the run's input",
}
# Every use of these (a read, not only a call).
READS = {"os.environ": "a setting, or the run's input"}
# Every call into these modules.
MODULES = {"random": "wf.random()"}


@dataclass(frozen=True)
class Finding:
    """One call in a body that a replay would see differently: `name` as resolved
    (`datetime.datetime.now`), where it is, and what to use instead."""

    name: str
    filename: str
    line: int
    instead: str

    def describe(self, workflow: str) -> str:
        return (
            f"Workflow {workflow!r} uses {self.name} at {self.filename}:{self.line}: a replay "
            f"gets another value than the first pass did. Use {self.instead} instead."
        )


def nondeterministic_calls(func: Callable[..., Any]) -> tuple[Finding, ...]:
    """What `func`'s body calls that a replay would see differently, in source order; nothing
    when its source cannot be read (compiled or built at run time)."""
    try:
        lines, first_line = inspect.getsourcelines(func)
        filename = inspect.getsourcefile(func) or "<unknown>"
        module = inspect.getmodule(func)
        module_source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return ()
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
        module_tree = ast.parse(module_source)
    except SyntaxError:
        return ()
    aliases = _imports(module_tree.body) | _imports(ast.walk(tree))
    findings: dict[tuple[int, str], Finding] = {}
    for node, name, instead in _uses(tree, aliases):
        line = first_line + node.lineno - 1
        findings.setdefault((line, name), Finding(name, filename, line, instead))
    return tuple(sorted(findings.values(), key=lambda found: (found.line, found.name)))


def _imports(nodes: Any) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from the import statements among `nodes`
    (a module's top level, or every node of a body)."""
    aliases: dict[str, str] = {}
    for node in _statements(nodes):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _statements(nodes: Any) -> Iterator[ast.AST]:
    """`nodes`, with the statements nested in a module's `if`/`try` blocks (guarded imports)."""
    for node in nodes:
        yield node
        if isinstance(node, ast.If | ast.Try):
            blocks = [node.body, node.orelse, getattr(node, "finalbody", [])]
            blocks += [handler.body for handler in getattr(node, "handlers", [])]
            for block in blocks:
                yield from _statements(block)


def _uses(tree: ast.AST, aliases: dict[str, str]) -> Iterator[tuple[ast.expr, str, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _resolved(node.func, aliases)
            if name in REPLAY_SAFE:
                yield node, f"{name}()", REPLAY_SAFE[name]
            elif name is not None and name.split(".")[0] in MODULES and "." in name:
                yield node, f"{name}()", MODULES[name.split(".")[0]]
        elif isinstance(node, ast.Attribute | ast.Name):
            name = _resolved(node, aliases)
            if name in READS:
                yield node, name, READS[name]


def _resolved(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The dotted name an expression like `dt.datetime.now` stands for, through the imports;
    None for anything else (a call's result, a subscript, a name no import made)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])
