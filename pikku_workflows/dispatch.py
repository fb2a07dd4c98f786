"""The engine's only door to django-q2: enqueue orchestrator passes and queued step attempts.

Messages carry ids only; the tables are the truth and every task re-checks its claim. Inside an
open transaction the enqueue waits for the commit, so a rolled-back run is never dispatched.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
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


def orchestrator_cluster() -> str:
    """The django-q2 cluster that runs orchestrator passes: `ORCHESTRATOR_QUEUE`, or else the
    project's own cluster (`Q_CLUSTER["name"]`), whichever cluster the enqueuing process serves."""
    if pikku_settings.ORCHESTRATOR_QUEUE:
        return str(pikku_settings.ORCHESTRATOR_QUEUE)
    configured = getattr(settings, "Q_CLUSTER", {}) or {}
    return str(configured.get("cluster_name", configured.get("name", "default")))


def serves_orchestrator_cluster() -> bool:
    """True when this process is a worker of the orchestrators' cluster (or no worker at all,
    e.g. a test calling a task directly: it serves the project's own cluster)."""
    from django_q.conf import Conf

    return orchestrator_cluster() == Conf.CLUSTER_NAME


def enqueue_orchestration(run_id: Any) -> None:
    """Ask a worker for an orchestrator pass of the run (after the current commit)."""
    run_id = str(run_id)
    # Named explicitly: from a worker of another cluster (`queue=`), "the default" would be its own.
    cluster = orchestrator_cluster()
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
