"""The engine's only door to django-q2: enqueue orchestrator passes and queued step attempts.

Messages carry ids only; the tables are the truth and every task re-checks its claim. Inside an
open transaction the enqueue waits for the commit, so a rolled-back run is never dispatched.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from .conf import pikku_settings
from .exceptions import WorkflowDispatchException

logger = logging.getLogger(__name__)

ORCHESTRATE_TASK = "pikku_workflows.tasks.orchestrate"
EXECUTE_STEP_TASK = "pikku_workflows.tasks.execute_step"


def _enqueue(task: str, *args: Any, cluster: str | None) -> None:
    from django_q.tasks import async_task

    options: dict[str, Any] = {"task_name": f"{task.rsplit('.', 1)[1]}:{args[-1]}"}
    if cluster:
        options["cluster"] = cluster
    try:
        async_task(task, *args, q_options=options)
    except Exception as exc:
        raise WorkflowDispatchException(f"Could not enqueue {task}{args}: {exc}") from exc


def enqueue_orchestration(run_id: Any) -> None:
    """Ask a worker for an orchestrator pass of the run (after the current commit)."""
    run_id = str(run_id)
    cluster = pikku_settings.ORCHESTRATOR_QUEUE
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        transaction.on_commit(lambda: _enqueue_logged(ORCHESTRATE_TASK, run_id, cluster=cluster))
    else:
        _enqueue(ORCHESTRATE_TASK, run_id, cluster=cluster)


def enqueue_step(run_id: Any, step_key: str, queue: str | None) -> None:
    """Ask a worker to execute a queued step; raises WorkflowDispatchException on failure."""
    _enqueue(EXECUTE_STEP_TASK, str(run_id), step_key, cluster=queue)


def _enqueue_logged(task: str, *args: Any, cluster: str | None) -> None:
    # After commit nobody can catch the error; recovery relays the run from the tables.
    try:
        _enqueue(task, *args, cluster=cluster)
    except WorkflowDispatchException:
        logger.warning("pikku_workflows: %s%s not enqueued; recovery will relay it", task, args)
