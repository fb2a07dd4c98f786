"""The fold of the run counts (models/run_counts.py): the changes the run table's triggers
append, added to the counts and removed, so the counts' readers sum a few rows. Each recovery
pass folds (the timer loop's, every RECOVERY_INTERVAL_SECONDS, and `manage.py pikku_recover`);
a reader never waits for it (it adds the changes not folded yet)."""

from __future__ import annotations

from pathlib import Path

from django.db import connection, transaction

from ...sql import Statements
from .tables import engine_names

STATEMENTS = Statements(Path(__file__).with_name("run_counts.sql"), names=engine_names)


def fold_run_count_changes() -> None:
    """Fold every committed change into the counts: one statement on PostgreSQL; on SQLite,
    whose writers take turns, two in one transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["fold_run_count_changes"])
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(STATEMENTS["add_run_count_changes"])
        cursor.execute(STATEMENTS["delete_run_count_changes"])
