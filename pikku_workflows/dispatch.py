"""The engine's only door to django-q2: enqueue orchestrator passes and queued step attempts,
or build a step's message for the engine to write in the statement that writes the step.

Messages carry ids only; the tables are the truth and every task re-checks its claim. Inside an
open transaction the enqueue waits for the commit, so a rolled-back run is never dispatched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from .conf import pikku_settings
from .exceptions import WorkflowDispatchException
from .outages import outages
from .sql import Statements, quoted_table

ORCHESTRATE_TASK = "pikku_workflows.tasks.orchestrate"
EXECUTE_STEP_TASK = "pikku_workflows.tasks.execute_step"


@dataclass(frozen=True)
class QueueMessage:
    """A django-q2 message as its ORM broker stores it (`django_q_ormq`: key, payload, lock)."""

    key: str
    payload: str
    lock: datetime

    def params(self) -> dict[str, Any]:
        """The named parameters of the `queue_message` fragment."""
        from .broker import WAKE_CHANNEL

        return {
            "queue_key": self.key,
            "queue_payload": self.payload,
            "queue_lock": self.lock,
            "wake_channel": WAKE_CHANNEL,
        }


def _queue_names() -> dict[str, str]:
    from django_q.models import OrmQ

    return {"queue": quoted_table(OrmQ)}


STATEMENTS = Statements(Path(__file__).with_name("dispatch.sql"), names=_queue_names)


def queue_fragments() -> dict[str, str]:
    """The fragments of the queue table the engine composes into its one-statement dispatch."""
    return {
        "queue_message": STATEMENTS["queue_message"],
        "queue_messages": STATEMENTS["queue_messages"],
        "queue_run_messages": STATEMENTS["queue_run_messages"],
    }


def run_messages_params(run_ids: list[Any]) -> dict[str, Any]:
    """The named parameters of the `queue_run_messages` fragment: an orchestrator pass of each
    of `run_ids`, in that order; for callers that checked `queue_in_engine_database()`."""
    from .broker import WAKE_CHANNEL

    rows = []
    for run_id in run_ids:
        message = orchestration_message(run_id)
        rows.append({"run_id": str(run_id), "key": message.key, "payload": message.payload})
    return {
        "run_messages": json.dumps(rows),
        "queue_lock": timezone.now(),
        "wake_channel": WAKE_CHANNEL,
    }


def messages_params(messages: dict[Any, QueueMessage]) -> dict[str, Any]:
    """The named parameters of the `queue_messages` fragment: `messages` by their step's id,
    in the order they are to run."""
    from .broker import WAKE_CHANNEL

    rows = [
        {"step_id": str(step_id), "key": message.key, "payload": message.payload}
        for step_id, message in messages.items()
    ]
    return {
        "queue_messages": json.dumps(rows),
        "queue_lock": timezone.now(),
        "wake_channel": WAKE_CHANNEL,
    }


class _CapturingBroker:
    """Takes the signed package django-q2 builds instead of storing it, so that the engine can
    insert it in the same statement as the step it runs."""

    def __init__(self, list_key: str) -> None:
        self.list_key = list_key
        self.payload: str | None = None

    def enqueue(self, payload: str) -> str:
        self.payload = payload
        return "(in the engine's statement)"


def _enqueue(task: str, *args: Any, cluster: str | None, broker: Any = None) -> None:
    from django_q.tasks import async_task

    options: dict[str, Any] = {"task_name": f"{task.rsplit('.', 1)[1]}:{args[-1]}"}
    if cluster:
        options["cluster"] = cluster
    if broker is not None:
        options["broker"] = broker
    try:
        async_task(task, *args, q_options=options)
    except Exception as exc:
        raise WorkflowDispatchException(f"Could not enqueue {task}{args}: {exc}") from exc


def queue_in_engine_database() -> bool:
    """True when django-q2's queue is the ORM table in the engine's database (the ORM broker or
    a subclass such as `pikku_workflows.broker`, not in `sync` mode): a message can then be
    written in the same transaction as the rows it refers to."""
    from django_q.brokers.orm import ORM
    from django_q.conf import Conf

    if Conf.SYNC or (Conf.ORM or DEFAULT_DB_ALIAS) != DEFAULT_DB_ALIAS:
        return False
    if Conf.BROKER_CLASS:
        return issubclass(import_string(Conf.BROKER_CLASS), ORM)
    # django-q2 picks broker_class, then IronMQ, then SQS, then the ORM.
    return bool(Conf.ORM) and not (Conf.IRON_MQ or Conf.SQS)


def step_message(run_id: Any, step_key: str, queue: str | None) -> QueueMessage:
    """The message `enqueue_step` would send, built by django-q2 but not stored; for callers
    that checked `queue_in_engine_database()`. Raises WorkflowDispatchException like it."""
    from django_q.conf import Conf

    captured = _CapturingBroker(queue or Conf.CLUSTER_NAME)
    _enqueue(EXECUTE_STEP_TASK, str(run_id), step_key, cluster=queue, broker=captured)
    if captured.payload is None:
        raise WorkflowDispatchException(f"django-q2 sent no message for step {step_key!r}")
    return QueueMessage(captured.list_key, captured.payload, timezone.now())


def orchestration_message(run_id: Any) -> QueueMessage:
    """The message `enqueue_orchestration` would send, built by django-q2 but not stored."""
    cluster = orchestrator_cluster()
    captured = _CapturingBroker(cluster)
    _enqueue(ORCHESTRATE_TASK, str(run_id), cluster=cluster, broker=captured)
    if captured.payload is None:
        raise WorkflowDispatchException(f"django-q2 sent no message for run {run_id}")
    return QueueMessage(captured.list_key, captured.payload, timezone.now())


def orchestrator_cluster() -> str:
    """The django-q2 cluster that runs orchestrator passes: `ORCHESTRATOR_QUEUE`, or else the
    project's own cluster (`Q_CLUSTER["name"]`), whichever cluster the enqueuing process serves."""
    if pikku_settings.ORCHESTRATOR_QUEUE:
        return str(pikku_settings.ORCHESTRATOR_QUEUE)
    return default_cluster()


def default_cluster() -> str:
    """The project's own django-q2 cluster (`Q_CLUSTER["name"]`): where a step function without
    `queue=` runs."""
    configured = getattr(settings, "Q_CLUSTER", {}) or {}
    return str(configured.get("cluster_name", configured.get("name", "default")))


def step_cluster(queue: str | None) -> str:
    """The cluster a step function registered with `queue=` runs on."""
    return queue or default_cluster()


@dataclass(frozen=True)
class WorkerMessage:
    """What this process knows of the queue message it is handling: its worker's cluster and
    django-q2's time limit for the message (None: unbounded)."""

    cluster: str
    timeout_seconds: float | None


def current_worker_message() -> WorkerMessage:
    from django_q.conf import Conf

    timeout = Conf.TIMEOUT if Conf.TIMEOUT and Conf.TIMEOUT > 0 else None
    return WorkerMessage(Conf.CLUSTER_NAME, timeout)


def serves_orchestrator_cluster() -> bool:
    """True when this process is a worker of the orchestrators' cluster (or no worker at all,
    e.g. a test calling a task directly: it serves the project's own cluster)."""
    from django_q.conf import Conf

    return orchestrator_cluster() == Conf.CLUSTER_NAME


def enqueue_orchestration(run_id: Any) -> None:
    """Ask a worker for an orchestrator pass of the run (after the current commit); raises
    WorkflowDispatchException when the queue refuses it outside a transaction."""
    run_id = str(run_id)
    # Named explicitly: from a worker of another cluster (`queue=`), "the default" would be its own.
    cluster = orchestrator_cluster()
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        transaction.on_commit(lambda: _enqueue_logged(ORCHESTRATE_TASK, run_id, cluster=cluster))
    else:
        _enqueue(ORCHESTRATE_TASK, run_id, cluster=cluster)


def enqueue_orchestration_with_run(run_id: Any) -> None:
    """`enqueue_orchestration` for a run inserted in the open transaction: with the queue in the
    engine's database its message is written in that transaction (the run and its message
    commit together, in one commit); otherwise after the commit."""
    if queue_in_engine_database() and transaction.get_connection().in_atomic_block:
        _enqueue(ORCHESTRATE_TASK, str(run_id), cluster=orchestrator_cluster())
    else:
        enqueue_orchestration(run_id)


def prompt_orchestration(run_id: Any) -> None:
    """`enqueue_orchestration` for callers whose own work is already recorded (a child that
    ended, a cancel that committed): a refused message is logged, not raised; recovery finds the
    run from the tables and relays it."""
    try:
        enqueue_orchestration(run_id)
    except WorkflowDispatchException as exc:
        outages.failed(f"enqueuing a pass of run {run_id} (recovery will relay it)", exc)


def enqueue_step(run_id: Any, step_key: str, queue: str | None) -> None:
    """Ask a worker to execute a queued step; raises WorkflowDispatchException on failure."""
    _enqueue(EXECUTE_STEP_TASK, str(run_id), step_key, cluster=queue)


def _enqueue_logged(task: str, *args: Any, cluster: str | None) -> None:
    # After commit nobody can catch the error; recovery relays the run from the tables.
    try:
        _enqueue(task, *args, cluster=cluster)
    except WorkflowDispatchException as exc:
        outages.failed(f"enqueuing {task}{args} (recovery will relay it)", exc)
