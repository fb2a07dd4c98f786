"""The map of the package holds by reading its source (STYLE.md): the engine's three layers
(operations -> replay -> store) import only downward, every row lock in engine/store/claims (and
the fragments of claims.sql), every status change in an engine/store/*transition* module, django_q
imported only by its adapters, the pure packages free of the database, and no import cycle in
the engine, function-level imports included. Comments are stripped before looking."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pikku_workflows"
ENGINE = PACKAGE / "engine"
LAYERS = ("operations", "replay", "store")
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)
SQL_SOURCES = sorted(PACKAGE.rglob("*.sql"))
ENGINE_MODULES = sorted(p for p in ENGINE.rglob("*.py") if p.name != "__init__.py")

LOCK = re.compile(r"select_for_update|FOR (UPDATE|SHARE|NO KEY UPDATE)")
STATUS_WRITE = re.compile(r"\.update\([^)]*\bstatus\s*=|SET\s+status\s*=", re.DOTALL)
DJANGO_Q_IMPORT = re.compile(r"^\s*(from|import) django_q", re.MULTILINE)
# Choices are the one thing a pure package takes from django.db: they are its vocabulary.
DATABASE_IMPORT = re.compile(
    r"^\s*(from|import) django\.db\b(?!\.models import TextChoices$)", re.MULTILINE
)


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


def engine_name(path: Path) -> str:
    """`operations.control` for engine/operations/control.py."""
    return ".".join(path.relative_to(ENGINE).with_suffix("").parts)


def test_layout__every_row_lock_is_taken_in_claims_or_the_broker():
    holders = {relative(p) for p in [*SOURCES, *SQL_SOURCES] if LOCK.search(code_of(p))}
    assert holders == {
        "engine/store/claims.py",
        "engine/store/claims.sql",
        "broker.py",
        "broker.sql",
    }


def test_layout__every_status_change_is_made_in_a_store_transitions_module():
    writers = {p for p in [*SOURCES, *SQL_SOURCES] if STATUS_WRITE.search(code_of(p))}
    assert writers, "the pattern finds the transitions' own writes"
    for path in writers:
        assert path.parent == ENGINE / "store" and "transition" in path.stem, relative(path)


def test_layout__only_the_queue_adapters_import_django_q():
    importers = {relative(p) for p in SOURCES if DJANGO_Q_IMPORT.search(p.read_text())}
    adapters = {"dispatch.py", "broker.py", "worker_process.py"}
    assert importers - adapters <= {relative(p) for p in (PACKAGE / "management").rglob("*.py")}


def test_layout__no_sql_text_is_built_in_engine_code():
    for path in ENGINE.rglob("*.py"):
        assert not re.search(
            r"f[\"'].*\b(SELECT|INSERT INTO|UPDATE|DELETE FROM)\b", code_of(path)
        ), relative(path)


def engine_imports(path: Path) -> set[str]:
    """The engine modules `path` imports (as `layer.module`), at module level or inside a
    function."""
    package = ["pikku_workflows", *path.relative_to(PACKAGE).parent.parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        module = [*base, *(node.module or "").split(".")] if node.module else base
        for alias in node.names:
            for candidate in (module, [*module, alias.name]):
                if candidate[:2] == ["pikku_workflows", "engine"] and len(candidate) > 3:
                    found.add(".".join(candidate[2:4]))
    return {name for name in found if (ENGINE / f"{name.replace('.', '/')}.py").exists()}


def test_layout__each_engine_layer_imports_only_the_layers_after_it():
    for path in ENGINE_MODULES:
        layer = LAYERS.index(path.relative_to(ENGINE).parts[0])
        for imported in engine_imports(path):
            assert LAYERS.index(imported.split(".")[0]) >= layer, (engine_name(path), imported)


def test_layout__every_engine_module_is_in_a_layer():
    assert {path.relative_to(ENGINE).parts[0] for path in ENGINE_MODULES} == set(LAYERS)
    assert [path.name for path in ENGINE.glob("*.py")] == ["__init__.py"]


def test_layout__the_pure_packages_import_no_database_but_text_choices():
    for package in ("graph", "approvals", "flow", "schedules"):
        for path in (PACKAGE / package).rglob("*.py"):
            assert not DATABASE_IMPORT.search(path.read_text()), relative(path)


def test_layout__the_engine_has_no_import_cycle():
    graph = {engine_name(path): engine_imports(path) for path in ENGINE_MODULES}
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
    order = re.findall(r"^- `([\w.]+)`:", described, re.MULTILINE)
    assert sorted(order) == sorted(engine_name(path) for path in ENGINE_MODULES)
    for position, module in enumerate(order):
        above = set(order[: position + 1])
        path = ENGINE / f"{module.replace('.', '/')}.py"
        assert not engine_imports(path) & above, module
