"""Inserting run rows, with the workflow version they run (a graph's definition stored in it)."""

from __future__ import annotations

import json
import secrets
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ... import events
from ...conf import pikku_settings
from ...exceptions import ConcurrencySkipped
from ...flow import run_priority
from ...models import WorkflowRun, WorkflowVersion
from ...observability.tracing import caller_traceparent
from ...querysets import DatabaseNow
from ...registry import registry
from ...serialization import describe_error
from ...sql import Statements
from ...status import RunStatus
from ...waiting import WaitingKind
from .admission_transitions import Admission, admission_for, save_slot_txn, take_slot_txn
from .leases import run_lease_until
from .rate_transitions import start_time
from .tables import engine_names
from .transitions import on_postgresql

STATEMENTS = Statements(
    Path(__file__).with_name("run_rows.sql"),
    Path(__file__).with_name("claims.sql"),
    names=engine_names,
)


def create_run_row(
    workflow: str,
    input: Any,
    *,
    inline: bool,
    lease_holder: str | None = None,
    buffered: bool = False,
    **fields: Any,
) -> WorkflowRun:
    """Insert a running run of a registered workflow and upsert its version row.

    With `lease_holder` the run is born leased to that holder (an inline start drives its first
    pass at once, without reading and leasing the row it has just written). On PostgreSQL this
    is one statement; elsewhere one short transaction. The run's `lease_expires_at` is left
    unknown in memory: the database computed it.

    A run of a workflow with a concurrency rule is admitted in the same statement, which locks
    its key's count row until the transaction ends: its `status` says whether it was
    (running), waits (queued) or was skipped (cancelled), and `refused_slot` whether its rule
    refused it (a rate's wait is not a refusal); only an admitted run is born leased.
    InvalidInput, before anything is written, when the rule's key function fails on `input`;
    LimitNotFound when a limit the workflow names is not defined. The rates of its limits are
    taken first (one statement each): a run they hold is queued until `not_before`.

    A `buffered` run (a schedule's tick while its run before is going) is born queued, outside
    any rule or rate: the schedule admits it when that run ends (`overlap_transitions`).
    """
    definition = registry.get_workflow(workflow)
    admission = None if buffered else admission_for(workflow, input)
    priority = run_priority(definition.priority, workflow, input)
    not_before = None if buffered else start_time(workflow)
    run, version = _new_run(
        workflow,
        input,
        priority=priority,
        inline=inline,
        lease_holder=lease_holder,
        concurrency_key=admission.key if admission else None,
        not_before=not_before,
        **fields,
    )
    lease_seconds = None if lease_holder is None else pikku_settings.RUN_LEASE_SECONDS
    if on_postgresql():
        _insert_in_one_statement(run, version, lease_seconds, admission, buffered)
    else:
        with transaction.atomic():
            _insert_with_the_orm(run, version, admission, buffered)
    run.lease_expires_at = None
    if run.status == RunStatus.QUEUED:
        run.lease_holder = None
    events.announce_run_started(run)
    return run


def _new_run(
    workflow: str, input: Any, *, priority: int, **fields: Any
) -> tuple[WorkflowRun, WorkflowVersion]:
    """A running run of `workflow` (not saved), and the version row it runs."""
    definition = registry.get_workflow(workflow)
    # Versions are recorded when a run starts, never at import: ready() must not query. A graph
    # run goes on from its stored definition whatever is registered later (engine/replay/versions.py).
    graph = definition.graph
    version = WorkflowVersion(
        name=definition.name,
        graph_hash=definition.code_version,
        code_version=definition.code_version,
        kind=definition.kind,
        definition=graph.source if graph else {"planned_steps": definition.planned_steps},
    )
    run = WorkflowRun(
        workflow=definition.name,
        status=RunStatus.RUNNING,
        input=input,
        graph_hash=graph.hash if graph else "",
        code_version=definition.code_version,
        planned_steps=definition.planned_steps,
        random_seed=secrets.randbits(63),
        priority=priority,
        **{"traceparent": caller_traceparent(), **fields},
    )
    return run, version


def admits_without_a_statement(workflow: str) -> bool:
    """Whether a new run of `workflow` is admitted at once without reading anything: no
    concurrency rule, no limit's rate (`run_rows_json` may then build it)."""
    definition = registry.get_workflow(workflow)
    return definition.concurrency is None and not definition.limits


def run_rows_json(runs: list[dict[str, Any]]) -> tuple[dict[str, str], list[WorkflowRun]]:
    """The named parameters `runs` and `versions` of a statement that inserts many running runs
    at once (`schedule_rows.sql` `insert_fired_ticks`): each of `runs` is the keyword arguments
    of a run of a workflow that `admits_without_a_statement`, JSON rows of the run table and of
    its distinct versions; and the runs (`announce_runs_started` once inserted)."""
    rows, versions, built = [], {}, []
    for fields in runs:
        definition = registry.get_workflow(fields["workflow"])
        priority = run_priority(definition.priority, definition.name, fields["input"])
        run, version = _new_run(**fields, priority=priority)
        rows.append(_json_columns(run))
        versions[version.name, version.graph_hash] = _json_columns(version)
        built.append(run)
    params = {"runs": json.dumps(rows), "versions": json.dumps(list(versions.values()))}
    return params, built


def announce_runs_started(runs: list[WorkflowRun], inserted: set[Any]) -> None:
    """Announce (at commit) each of `runs` whose id is in `inserted`, as `create_run_row` does."""
    for run in runs:
        if run.pk in inserted:
            run._state.adding, run._state.db = False, connection.alias
            events.announce_run_started(run)


def _json_columns(instance: Any) -> dict[str, Any]:
    """Each concrete column's value as JSON (what `jsonb_populate_recordset` reads)."""
    columns = {}
    for field in instance._meta.concrete_fields:
        value = field.pre_save(instance, add=True)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, uuid.UUID):
            value = str(value)
        columns[field.column] = value
    return columns


def _insert_in_one_statement(
    run: WorkflowRun,
    version: WorkflowVersion,
    lease_seconds: float | None,
    admission: Admission | None,
    buffered: bool,
) -> None:
    params = {**_column_values(run), "lease_seconds": lease_seconds, "buffered": buffered}
    params |= {f"version_{name}": value for name, value in _column_values(version).items()}
    params |= _admission_params(admission)
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["insert_run"], params)
        run.status, run.refused_slot = cursor.fetchone()  # type: ignore[attr-defined]
    if run.status == RunStatus.CANCELLED and admission is not None:
        run.error = skipped_error(admission)
    run._state.adding, run._state.db = False, connection.alias  # as `save()` leaves it


def _admission_params(admission: Admission | None) -> dict[str, Any]:
    return {
        "rule": admission.rule_name if admission else None,
        "max_active": admission.rule.max_active if admission else 0,
        "status_when_full": admission.status_when_full if admission else RunStatus.QUEUED,
        "error_when_full": json.dumps(skipped_error(admission)) if admission else None,
        "run_cancelled": RunStatus.CANCELLED,
        "run_queued": RunStatus.QUEUED,
        "waiting_admission": WaitingKind.ADMISSION,
    }


def skipped_error(admission: Admission) -> dict[str, Any]:
    """The error a run skipped by its concurrency rule is recorded with."""
    why = ConcurrencySkipped(
        f"Skipped: {admission.rule.max_active} run(s) of {admission.workflow!r} with key "
        f'{admission.key!r} were active (on_full="skip").'
    )
    return describe_error(why, traceback=False)


def _insert_with_the_orm(
    run: WorkflowRun, version: WorkflowVersion, admission: Admission | None, buffered: bool
) -> None:
    WorkflowVersion.objects.bulk_create([version], ignore_conflicts=True)
    run.refused_slot = False  # type: ignore[attr-defined]
    if buffered or (run.not_before is not None and run.not_before > timezone.now()):
        run.status, run.lease_holder, run.waiting_on = RunStatus.QUEUED, None, WaitingKind.ADMISSION
        run.save(force_insert=True)
        return
    admitted = admission is None or take_slot_txn(admission)
    if not admitted:
        run.refused_slot = True  # type: ignore[attr-defined]
        assert admission is not None
        run.status, run.lease_holder = admission.status_when_full, None
        run.waiting_on = WaitingKind.ADMISSION
        if run.status == RunStatus.CANCELLED:
            run.error, run.finished_at = skipped_error(admission), DatabaseNow()
            run.waiting_on = None
    if run.lease_holder is not None:
        run.lease_expires_at = run_lease_until()
    run.save(force_insert=True)
    if admitted and admission is not None:
        save_slot_txn(admission, run.pk)


def _column_values(instance: Any) -> dict[str, Any]:
    """Each concrete column's value as the ORM would write it (`pre_save` stamps times)."""
    return {
        field.column: field.get_db_prep_save(field.pre_save(instance, add=True), connection)
        for field in instance._meta.concrete_fields
    }
