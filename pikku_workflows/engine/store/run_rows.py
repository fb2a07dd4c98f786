"""Inserting run rows, with the workflow version they run (a graph's definition stored in it)."""

from __future__ import annotations

import json
import secrets
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ... import events
from ...conf import pikku_settings
from ...exceptions import ConcurrencySkipped
from ...flow import Debounce, run_priority
from ...models import WorkflowRun, WorkflowVersion
from ...observability.tracing import caller_traceparent
from ...querysets import DatabaseNow
from ...registry import WorkflowDefinition, registry
from ...serialization import describe_error
from ...sql import Statements
from ...status import RunStatus
from ...waiting import WaitingKind
from .admission_transitions import Admission, admission_for, save_slot_txn, take_slot_txn
from .debounce_transitions import Debouncing, debouncing_for, join_debounced_run
from .leases import run_lease_until
from .rate_transitions import start_time
from .tables import engine_names
from .transitions import on_postgresql

# How many times a start tries to join or open its key's debounce window (each miss is a window
# that opened and was admitted between its two statements).
WINDOW_RACES = 5

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
    admitted: bool = False,
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

    With `admitted`, the caller has admitted the run already (a successor taking over its
    predecessor's slots, `fields` giving its key and priority): no rule or rate applies.
    A `buffered` run (a schedule's tick while its run before is going) is born queued, outside
    any rule or rate: the schedule admits it when that run ends (`overlap_transitions`).
    """
    run, version, admission = _new_run(
        workflow, input, lease_holder, admitted=admitted, buffered=buffered, inline=inline, **fields
    )
    if not (admitted or buffered):
        run.not_before = start_time(workflow)
    _insert(run, version, admission, None, buffered)
    events.announce_run_started(run)
    return run


def start_run_row(
    workflow: str,
    input: Any,
    *,
    inline: bool,
    lease_holder: str | None = None,
    debounce: bool = True,
    **fields: Any,
) -> tuple[WorkflowRun, bool]:
    """The run row of a start (`start_workflow`): `create_run_row`'s, except under a debounce
    rule, where the start joins the queued run its key's window holds (returned with True, only
    its id and status loaded; debounce_transitions) or opens the window: a new run, queued until
    `quiet` has passed, without asking its concurrency rule yet (returned with False). Rates
    are taken only by a start that opens a window. InvalidInput, before anything is written,
    when a key function fails on `input`. `debounce=False`: `create_run_row`'s, whatever the
    rule."""
    debouncing = debouncing_for(workflow, input) if debounce else None
    if debouncing is None:
        return create_run_row(
            workflow, input, inline=inline, lease_holder=lease_holder, **fields
        ), False
    run, version, _ = _new_run(workflow, input, None, inline=inline, **fields)
    run.debounce_key = debouncing.key
    # A start whose window another start opened between its join and its insert joins that
    # one; past a few such races (each window admitted as it opened), it gives up loudly.
    for _ in range(WINDOW_RACES):
        joined = join_debounced_run(debouncing, run)
        if joined is not None:
            return _joined_run(joined), True
        if run.not_before is None:
            run.not_before = start_time(workflow)
        if _insert(run, version, None, debouncing, buffered=False):
            events.announce_run_started(run)
            return run, False
    raise DatabaseError(f"No debounce window of {workflow!r} key {debouncing.key!r} held still.")


def _new_run(
    workflow: str,
    input: Any,
    lease_holder: str | None = None,
    *,
    admitted: bool = False,
    buffered: bool = False,
    **fields: Any,
) -> tuple[WorkflowRun, WorkflowVersion, Admission | None]:
    """The unsaved run (and the version row it runs) a start of `workflow` would insert;
    InvalidInput for a key or priority function that fails on `input`. An `admitted` run's
    caller gives its key and priority in `fields`; a `buffered` one asks no rule."""
    definition = registry.get_workflow(workflow)
    admission = None if admitted or buffered else admission_for(workflow, input)
    flow_fields = {} if admitted else _flow_fields(definition, admission, input)
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
        lease_holder=lease_holder,
        random_seed=secrets.randbits(63),
        **{"traceparent": caller_traceparent(), **flow_fields, **fields},
    )
    return run, version, admission


def _insert(
    run: WorkflowRun,
    version: WorkflowVersion,
    admission: Admission | None,
    debouncing: Debouncing | None,
    buffered: bool,
) -> bool:
    """Insert `run` (False: a debounce window of its key was open, and nothing was written)."""
    lease_seconds = None if run.lease_holder is None else pikku_settings.RUN_LEASE_SECONDS
    if on_postgresql():
        inserted = _insert_in_one_statement(
            run, version, lease_seconds, admission, debouncing, buffered
        )
    else:
        with transaction.atomic():
            inserted = _insert_with_the_orm(run, version, admission, debouncing, buffered)
    run.lease_expires_at = None
    if run.status == RunStatus.QUEUED:
        run.lease_holder = None
    return inserted


def _joined_run(run_id: Any) -> WorkflowRun:
    """The run a start joined, as far as the start knows it (its other fields load on use)."""
    return WorkflowRun.from_db(connection.alias, ["id", "status"], [run_id, RunStatus.QUEUED])


def _flow_fields(
    definition: WorkflowDefinition, admission: Admission | None, input: Any
) -> dict[str, Any]:
    """What flow control gives a new run: its concurrency key and its priority (the time its
    limits' rates let it start is taken apart: a start joining a debounce window takes none)."""
    return {
        "concurrency_key": admission.key if admission else None,
        "priority": run_priority(definition.priority, definition.name, input),
    }


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
        run, version, _ = _new_run(**fields)
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
    debouncing: Debouncing | None,
    buffered: bool,
) -> bool:
    params = {**_column_values(run), "lease_seconds": lease_seconds, "buffered": buffered}
    params |= {f"version_{name}": value for name, value in _column_values(version).items()}
    params |= _admission_params(admission)
    params |= {
        "debounce_quiet_ms": debouncing.rule.quiet_ms if debouncing else None,
        "debounce_max_wait_ms": debouncing.rule.max_wait_ms if debouncing else None,
    }
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["insert_run"], params)
        inserted = cursor.fetchone()
    if inserted is None:
        return False
    run.status, run.refused_slot = inserted  # type: ignore[attr-defined]
    if run.status == RunStatus.CANCELLED and admission is not None:
        run.error = skipped_error(admission)
    run._state.adding, run._state.db = False, connection.alias  # as `save()` leaves it
    return True


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
    run: WorkflowRun,
    version: WorkflowVersion,
    admission: Admission | None,
    debouncing: Debouncing | None,
    buffered: bool,
) -> bool:
    WorkflowVersion.objects.bulk_create([version], ignore_conflicts=True)
    run.refused_slot = False  # type: ignore[attr-defined]
    if debouncing is not None:
        _open_window(run, debouncing.rule)
    held = run.not_before is not None and run.not_before > timezone.now()
    if debouncing is not None or buffered or held:
        run.status, run.lease_holder, run.waiting_on = RunStatus.QUEUED, None, WaitingKind.ADMISSION
        run.save(force_insert=True)
        return True
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
    return True


def _open_window(run: WorkflowRun, rule: Debounce) -> None:
    # SQLite (one writer at a time): insert_run's window arithmetic on this process's clock.
    now = timezone.now()
    quiet_ends = now + timedelta(milliseconds=rule.quiet_ms)
    run.not_before = max(run.not_before, quiet_ends) if run.not_before else quiet_ends
    if rule.max_wait_ms is not None:
        run.debounce_deadline = now + timedelta(milliseconds=rule.max_wait_ms)


def _column_values(instance: Any) -> dict[str, Any]:
    """Each concrete column's value as the ORM would write it (`pre_save` stamps times)."""
    return {
        field.column: field.get_db_prep_save(field.pre_save(instance, add=True), connection)
        for field in instance._meta.concrete_fields
    }
