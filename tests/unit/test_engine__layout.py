"""The map of the package holds by reading its source (STYLE.md): every row lock in
engine/claims.py (and the fragments of claims.sql), every status change in engine/transitions.py
(and transitions.sql), django_q imported only by its adapters, and no import cycle in the
engine, function-level imports included. Comments are stripped before looking."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pikku_workflows"
ENGINE = PACKAGE / "engine"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)
SQL_SOURCES = sorted(PACKAGE.rglob("*.sql"))

LOCK = re.compile(r"select_for_update|FOR (UPDATE|SHARE|NO KEY UPDATE)")
STATUS_WRITE = re.compile(r"\.update\([^)]*\bstatus\s*=|SET\s+status\s*=", re.DOTALL)
DJANGO_Q_IMPORT = re.compile(r"^\s*(from|import) django_q", re.MULTILINE)


def code_of(path: Path) -> str:
    """The source with comments and docstrings gone (what runs, not what is said about it)."""
    if path.suffix == ".sql":
        return "\n".join(re.sub(r"--.*$", "", line) for line in path.read_text().splitlines())
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant)


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


def test_layout__every_row_lock_is_taken_in_claims_or_the_broker():
    holders = {relative(p) for p in [*SOURCES, *SQL_SOURCES] if LOCK.search(code_of(p))}
    assert holders == {"engine/claims.py", "engine/claims.sql", "broker.py", "broker.sql"}


def test_layout__every_status_change_is_made_in_transitions():
    writers = {relative(p) for p in [*SOURCES, *SQL_SOURCES] if STATUS_WRITE.search(code_of(p))}
    assert writers == {"engine/transitions.py", "engine/transitions.sql"}


def test_layout__only_the_queue_adapters_import_django_q():
    importers = {relative(p) for p in SOURCES if DJANGO_Q_IMPORT.search(p.read_text())}
    adapters = {"dispatch.py", "broker.py", "worker_process.py"}
    assert importers - adapters <= {relative(p) for p in (PACKAGE / "management").rglob("*.py")}


def test_layout__no_sql_text_is_built_in_engine_code():
    for path in ENGINE.glob("*.py"):
        assert not re.search(
            r"f[\"'].*\b(SELECT|INSERT INTO|UPDATE|DELETE FROM)\b", code_of(path)
        ), relative(path)


def engine_imports(path: Path) -> set[str]:
    """The engine modules `path` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "pikku_workflows.engine."
        ):
            found.add(node.module.split(".")[2])
    return {name for name in found if (ENGINE / f"{name}.py").exists()}


def test_layout__the_engine_has_no_import_cycle():
    graph = {path.stem: engine_imports(path) for path in ENGINE.glob("*.py")}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done:
            return
        if module in visiting:
            pytest.fail(f"import cycle: {' -> '.join([*visiting, module])}")
        visiting.append(module)
        for imported in sorted(graph[module]):
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_layout__the_engine_package_maps_its_modules_each_above_what_it_imports():
    described = (ENGINE / "__init__.py").read_text()
    order = re.findall(r"^- `(\w+)`:", described, re.MULTILINE)
    modules = {path.stem for path in ENGINE.glob("*.py")} - {"__init__"}
    assert sorted(order) == sorted(modules)
    for position, module in enumerate(order):
        above = set(order[: position + 1])
        assert not engine_imports(ENGINE / f"{module}.py") & above, module
