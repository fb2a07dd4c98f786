"""The migration that creates the event log fills it for the runs that exist before it, in the
order the time-ordered timeline gave their events, and numbered from 0 per run."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

APP = "pikku_workflows"
BEFORE = [(APP, "0011_attempt_worker_and_kind_labels")]

pytestmark = pytest.mark.django_db(transaction=True)


def migrate(targets: list[tuple[str, str]]) -> object:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_event_log_migration__fills_the_log_of_existing_runs_in_timeline_order():
    leaf = MigrationExecutor(connection).loader.graph.leaf_nodes(APP)
    old = migrate(BEFORE)
    try:
        run_model = old.get_model(APP, "WorkflowRun")
        step_model = old.get_model(APP, "WorkflowStep")
        history_model = old.get_model(APP, "WorkflowStepHistory")
        audit_model = old.get_model(APP, "WorkflowAuditEntry")
        t0 = timezone.now() - timedelta(hours=1)
        runs = [run_model.objects.create(id=uuid.uuid4(), workflow="old") for _ in range(2)]
        for run in runs:
            charge = step_model.objects.create(id=uuid.uuid4(), run=run, step_key="charge")
            ship = step_model.objects.create(id=uuid.uuid4(), run=run, step_key="ship")
            # Created out of time order: the log follows the times, not the rows.
            history_model.objects.create(
                step=ship,
                attempt=1,
                status="succeeded",
                created_at=t0 + timedelta(seconds=3),
                running_at=t0 + timedelta(seconds=3),
                succeeded_at=t0 + timedelta(seconds=4),
            )
            history_model.objects.create(
                step=charge,
                attempt=1,
                status="failed",
                created_at=t0,
                running_at=t0 + timedelta(seconds=1),
                failed_at=t0 + timedelta(seconds=2),
            )
            audit = audit_model.objects.create(run=run, action="retry")
            audit_model.objects.filter(pk=audit.pk).update(created_at=t0 + timedelta(seconds=2.5))
    finally:
        new = migrate(leaf)
    event_model = new.get_model(APP, "WorkflowEvent")

    for run in runs:
        events = event_model.objects.filter(run_id=run.pk).order_by("seq")
        assert list(events.values_list("seq", "step_key", "event")) == [
            (0, "charge", "pending"),
            (1, "charge", "running"),
            (2, "charge", "failed"),
            (3, None, "retry"),
            (4, "ship", "pending"),
            (5, "ship", "running"),
            (6, "ship", "succeeded"),
        ]
