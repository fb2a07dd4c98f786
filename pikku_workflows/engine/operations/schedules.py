"""The schedule operations: create, update, delete, read, pause, resume, trigger and
backfill (docs/schedules.md), and the upsert of the schedules declared in code.

Every definition is checked whole before anything is written (InvalidInput lists every
problem); each operation holds the schedule's row, so it waits for a timer loop firing it and
then sees the tick; each is audited with its user.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import islice, takewhile
from typing import Any

from django.db import IntegrityError, transaction

from ...conf import pikku_settings
from ...exceptions import InvalidInput, ScheduleNotFound
from ...models import WorkflowBackfill, WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from ...registry import registry
from ...schedules.choices import ManagedBy, Overlap, Reprocess, TickOutcome
from ...schedules.fire_times import fire_times
from ...schedules.preview import preview
from ...schedules.spec import ScheduleSpec, checked_note, parse_schedule
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ..store import claims, overlap_transitions, schedule_rows, schedule_transitions
from .control import cancel_run
from .runs import checked_user
from .schedule_firing import scheduled_run_key, start_scheduled_run

PREVIEW_COUNT = 10
ONE_MICROSECOND = timedelta(microseconds=1)


def create_schedule(name: str, workflow: str, *, by: Any = None, **fields: Any) -> dict[str, Any]:
    """Create the schedule `name` starting `workflow` (fields: cron, every, timezone, input,
    overlap, catch_up, catch_up_window, catch_up_max, jitter, start_at, end_at, paused,
    pause_on_failure); its dict. InvalidInput lists every problem; nothing is written."""
    spec = parse_schedule(name, workflow, fields, workflow_exists=registry.is_workflow)
    by = checked_user(by, "by")
    try:
        with transaction.atomic():
            schedule = _insert(spec, ManagedBy.ADMIN, paused=spec.paused)
            schedule_rows.audit_schedule(schedule, name, "create", user=by, payload=_payload(spec))
    except IntegrityError:
        raise InvalidInput(problems=[f"name: a schedule named {name!r} exists already"]) from None
    return get_schedule(name)


def update_schedule(name: str, *, by: Any = None, **fields: Any) -> dict[str, Any]:
    """Change fields of the schedule `name` (those `create_schedule` takes, and `workflow`);
    a schedule declared in code becomes the admin's: later deploys leave it alone."""
    by = checked_user(by, "by")
    with transaction.atomic():
        schedule = _locked(name)
        current = schedule_rows.spec_of(schedule)
        workflow = fields.pop("workflow", current.workflow)
        fields.pop("paused", None)  # pausing is pause_schedule's, with its note
        spec = parse_schedule(
            name, workflow, {**current.fields(), **fields}, workflow_exists=registry.is_workflow
        )
        columns = schedule_rows.definition_columns(spec)
        if spec.rule != current.rule or spec.jitter_ms != current.jitter_ms:
            # A new rule counts from now: no tick of the old rule is "missed" by the change.
            columns["next_nominal_at"], columns["next_fire_at"] = schedule_rows.next_tick(
                spec,
                schedule.database_now,  # type: ignore[attr-defined]
            )
        WorkflowSchedule.objects.filter(pk=schedule.pk).update(
            managed_by=ManagedBy.ADMIN, **columns
        )
        schedule_rows.audit_schedule(schedule, name, "update", user=by, payload=_payload(spec))
    return get_schedule(name)


def delete_schedule(name: str, *, by: Any = None) -> None:
    """Delete the schedule `name` with its ticks and backfills; its runs stay, but the buffered
    ones (nothing would admit them) are cancelled."""
    by = checked_user(by, "by")
    with transaction.atomic():
        schedule = _locked(name)
        for run_id in overlap_transitions.buffered_runs(schedule.pk).values_list("pk", flat=True):
            cancel_run(run_id, reason=f"its schedule {name!r} was deleted", by=by)
        schedule_rows.audit_schedule(
            None, name, "delete", user=by, payload={"workflow": schedule.workflow}
        )
        schedule.delete()


def get_schedule(name: str) -> dict[str, Any]:
    """The schedule `name` as a dict, with its next 10 fire times (UTC and local)."""
    schedule = WorkflowSchedule.objects.filter(name=name).first()
    if schedule is None:
        raise ScheduleNotFound(name)
    return schedule_dict(schedule)


def schedule_dict(schedule: WorkflowSchedule) -> dict[str, Any]:
    spec = schedule_rows.spec_of(schedule)
    after = schedule.next_nominal_at - ONE_MICROSECOND if schedule.next_nominal_at else None
    upcoming = preview(spec.rule, after, PREVIEW_COUNT) if after else []
    definition = schedule_rows.comparable_definition(spec)
    return {
        "name": schedule.name,
        "workflow": spec.workflow,
        **{key: value for key, value in spec.fields().items() if key not in ("start_at", "end_at")},
        "start_at": definition["start_at"],
        "end_at": definition["end_at"],
        "paused": schedule.paused,
        "pause_note": schedule.pause_note,
        "managed_by": schedule.managed_by,
        "code_differs": code_differs(schedule, spec),
        "next_fire_at": _iso(schedule.next_fire_at),
        "last_fired_at": _iso(schedule.last_fired_at),
        "last_outcome": schedule.last_outcome,
        "skipped_in_a_row": schedule.skipped_in_a_row,
        "next_fire_times": [moment.as_dict() for moment in upcoming],
    }


def code_differs(schedule: WorkflowSchedule, spec: ScheduleSpec | None = None) -> bool:
    """Whether the admin's edit of a schedule declared in code differs from what the code
    declared at its last deploy."""
    if schedule.managed_by != ManagedBy.ADMIN or schedule.code_definition is None:
        return False
    spec = spec or schedule_rows.spec_of(schedule)
    return schedule.code_definition != schedule_rows.comparable_definition(spec)


def pause_schedule(name: str, *, note: str = "", by: Any = None) -> dict[str, Any]:
    """Pause the schedule `name`: no tick fires until it is resumed (a quiet success when it
    is paused already)."""
    note, by = checked_note(note), checked_user(by, "by")
    with transaction.atomic():
        schedule = _locked(name)
        if schedule_transitions.set_paused(schedule.pk, True, note):
            schedule_rows.audit_schedule(schedule, name, "pause", user=by, note=note)
    return get_schedule(name)


def resume_schedule(name: str, *, by: Any = None) -> dict[str, Any]:
    """Resume the schedule `name`; the ticks it missed while paused follow its catch-up rule,
    and its oldest buffered run is admitted if none of its runs is going."""
    by = checked_user(by, "by")
    with transaction.atomic():
        schedule = _locked(name)
        if schedule_transitions.set_paused(schedule.pk, False):
            schedule_rows.audit_schedule(schedule, name, "resume", user=by)
            overlap_transitions.admit_buffered_txn(schedule.pk)
    return get_schedule(name)


def trigger_schedule(name: str, *, force: bool = False, by: Any = None) -> str | None:
    """Start a run of the schedule `name` now (its nominal time the database clock's now); None
    when `overlap="skip"` and a run of it is still going, unless `force`."""
    if not isinstance(force, bool):
        raise InvalidInput("force must be True or False.")
    by = checked_user(by, "by")
    with transaction.atomic():
        schedule = _locked(name)
        now = schedule.database_now  # type: ignore[attr-defined]
        active = WorkflowRun.objects.filter(schedule=schedule).exclude(
            status__in=TERMINAL_RUN_STATUSES
        )
        if not force and schedule.overlap == Overlap.SKIP and active.exists():
            schedule_rows.write_tick_txn(
                schedule,
                now,
                now,
                TickOutcome.SKIPPED,
                reason="triggered by hand; overlap=skip and a run is still going",
            )
            return None
        tick = schedule_rows.write_tick_txn(schedule, now, now, TickOutcome.TRIGGERED)
        run_id = start_scheduled_run(schedule, now, key=scheduled_run_key(name, now), by=by)
        if tick is not None:
            schedule_rows.set_tick_run(
                tick, run_id, TickOutcome.TRIGGERED, reason=f"triggered by {by or 'code'}"
            )
        schedule_rows.audit_schedule(
            schedule, name, "trigger", user=by, payload={"run": run_id, "force": force}
        )
    return run_id


def backfill_schedule(
    name: str,
    *,
    start: Any,
    end: Any,
    reprocess: str = "missing",
    max_active: int = 1,
    dry_run: bool = False,
    by: Any = None,
) -> dict[str, Any]:
    """Start the schedule's nominal times in [start, end) after the fact: `reprocess`
    "missing" (those without a started run), "failed" (also those whose run failed) or "all";
    at most `max_active` runs at a time, in nominal order, a batch at a time by the timer
    loop. `dry_run` writes nothing. Returns {"count", "times", "backfill"}."""
    by = checked_user(by, "by")
    schedule = WorkflowSchedule.objects.filter(name=name).first()
    if schedule is None:
        raise ScheduleNotFound(name)
    start, end = _checked_range(start, end, reprocess, max_active, dry_run)
    spec = schedule_rows.spec_of(schedule)
    times = _nominal_times(spec, start, end)
    taken = nominal_times_taken(schedule, start, end, reprocess)
    times = [moment for moment in times if moment not in taken]
    result: dict[str, Any] = {
        "count": len(times),
        "times": [t.isoformat() for t in times],
        "backfill": None,
    }
    if dry_run or not times:
        return result
    with transaction.atomic():
        backfill = WorkflowBackfill.objects.create(
            schedule=schedule,
            start=start,
            end=end,
            reprocess=reprocess,
            max_active=max_active,
            total=len(times),
            created_by=by,
        )
        schedule_rows.audit_schedule(
            schedule,
            name,
            "backfill",
            user=by,
            payload={
                "backfill": backfill.pk,
                "start": start.isoformat(),
                "end": end.isoformat(),
                "count": len(times),
                "reprocess": reprocess,
            },
        )
    result["backfill"] = backfill.pk
    return result


def nominal_times_taken(
    schedule: WorkflowSchedule, start: datetime, end: datetime, reprocess: str
) -> set[datetime]:
    """The nominal times in [start, end) that `reprocess` leaves alone: with "missing" those
    whose tick started a run, with "failed" those whose run did not fail, with "all" none."""
    if reprocess == Reprocess.ALL:
        return set()
    ticks = WorkflowScheduleTick.objects.filter(
        schedule=schedule, nominal_at__gte=start, nominal_at__lt=end, run__isnull=False
    )
    if reprocess == Reprocess.FAILED:
        ticks = ticks.exclude(run__status=RunStatus.FAILED)
    return set(ticks.values_list("nominal_at", flat=True))


def _nominal_times(spec: ScheduleSpec, start: datetime, end: datetime) -> list[datetime]:
    limit = pikku_settings.BACKFILL_MAX_TICKS
    inside = takewhile(lambda moment: moment < end, fire_times(spec.rule, start - ONE_MICROSECOND))
    times = list(islice(inside, limit + 1))
    if len(times) > limit:
        raise InvalidInput(
            problems=[
                f"end: more than BACKFILL_MAX_TICKS ({limit}) nominal times in the range; backfill a shorter one"
            ]
        )
    return times


def _checked_range(
    start: Any, end: Any, reprocess: Any, max_active: Any, dry_run: Any
) -> tuple[datetime, datetime]:
    problems = []
    moments = []
    for what, value in (("start", start), ("end", end)):
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                value = None
        if not isinstance(value, datetime) or value.tzinfo is None:
            problems.append(f"{what}: must be an aware datetime (ISO 8601 with an offset)")
        moments.append(value)
    if not problems and moments[0] >= moments[1]:
        problems.append("end: must be after start")
    if reprocess not in Reprocess.values:
        problems.append(
            f"reprocess: must be one of {', '.join(Reprocess.values)}, not {reprocess!r:.40}"
        )
    if (
        isinstance(max_active, bool)
        or not isinstance(max_active, int)
        or not 1 <= max_active <= 1000
    ):
        problems.append(
            f"max_active: must be a whole number from 1 to 1000, not {max_active!r:.40}"
        )
    if not isinstance(dry_run, bool):
        problems.append("dry_run: must be True or False")
    if problems:
        raise InvalidInput(problems=problems)
    return moments[0], moments[1]


def upsert_declared_schedules() -> int:
    """Write each schedule declared in code to its row: a new one is created, one the code
    manages follows the code, one an edit made the admin's only notes what the code declares
    now ("code differs"). The number of rows created or changed."""
    changed = 0
    for spec in registry.declared_schedules():
        with transaction.atomic():
            changed += _upsert_declared_txn(spec)
    return changed


def _upsert_declared_txn(spec: ScheduleSpec) -> int:
    declared = schedule_rows.comparable_definition(spec)
    schedule = claims.lock_schedule_txn(spec.name)
    if schedule is None:
        try:
            with transaction.atomic():
                _insert(spec, ManagedBy.CODE, paused=spec.paused, code_definition=declared)
        except IntegrityError:
            return 0  # another process upserted it at the same moment
        return 1
    if schedule.code_definition == declared:
        return 0
    columns: dict[str, Any] = {"code_definition": declared}
    if schedule.managed_by == ManagedBy.CODE:
        current = schedule_rows.spec_of(schedule)
        columns.update(schedule_rows.definition_columns(spec))
        if spec.rule != current.rule or spec.jitter_ms != current.jitter_ms:
            columns["next_nominal_at"], columns["next_fire_at"] = schedule_rows.next_tick(
                spec,
                schedule.database_now,  # type: ignore[attr-defined]
            )
    WorkflowSchedule.objects.filter(pk=schedule.pk).update(**columns)
    return 1


def _insert(
    spec: ScheduleSpec, managed_by: str, *, paused: bool, code_definition: Any = None
) -> WorkflowSchedule:
    schedule = WorkflowSchedule.objects.create(
        name=spec.name,
        managed_by=managed_by,
        paused=paused,
        code_definition=code_definition,
        **schedule_rows.definition_columns(spec),
    )
    locked = claims.lock_schedule_txn(spec.name)
    assert locked is not None
    next_nominal, next_fire = schedule_rows.next_tick(spec, locked.database_now)  # type: ignore[attr-defined]
    schedule_transitions.advance_schedule(
        schedule.pk, next_nominal_at=next_nominal, next_fire_at=next_fire
    )
    return schedule


def _locked(name: str) -> WorkflowSchedule:
    if not isinstance(name, str):
        raise ScheduleNotFound(str(name))
    schedule = claims.lock_schedule_txn(name)
    if schedule is None:
        raise ScheduleNotFound(name)
    return schedule


def _payload(spec: ScheduleSpec) -> dict[str, Any]:
    return schedule_rows.comparable_definition(spec)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
