"""Shared fixtures: a registry restored after each test, users, and the database vendor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from pikku_workflows.registry import registry


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (running on the SQLite fallback)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated_registry() -> Iterator[None]:
    """Workflows a test registers disappear after it; the autodiscovered ones stay."""
    workflows = dict(registry.workflows)
    step_functions = dict(registry.step_functions)
    yield
    registry.workflows.clear()
    registry.workflows.update(workflows)
    registry.step_functions.clear()
    registry.step_functions.update(step_functions)
