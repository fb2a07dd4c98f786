"""`manage.py pikku schedules ...`: list schedules, and pause, resume, trigger or backfill one
as an operator (audited as the user `--as` names, who needs `change_workflowschedule`)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

import pikku_workflows as pw

CHANGE = "pikku_workflows.change_workflowschedule"


def add_schedule_arguments(commands: Any) -> None:
    schedules = commands.add_parser("schedules", help="list and operate schedules")
    actions = schedules.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")
    actions.add_parser("list", help="every schedule: next fire (local and UTC), last outcome")
    for name, what in (
        ("pause", "pause a schedule (audited)"),
        ("resume", "resume a schedule (audited)"),
        ("trigger", "start a run of a schedule now (audited)"),
        ("backfill", "start a schedule's nominal times in [--start, --end) (audited)"),
    ):
        sub: CommandParser = actions.add_parser(name, help=what)
        sub.add_argument("name")
        sub.add_argument("--as", dest="as_user", required=True, metavar="USERNAME")
        if name == "pause":
            sub.add_argument("--note", default="")
        if name == "trigger":
            sub.add_argument("--force", action="store_true", help="even with a run going")
        if name == "backfill":
            sub.add_argument("--start", required=True, help="ISO 8601 with an offset")
            sub.add_argument("--end", required=True, help="ISO 8601 with an offset")
            sub.add_argument("--reprocess", default="missing", choices=["missing", "failed", "all"])
            sub.add_argument("--max-active", type=int, default=1)
            sub.add_argument("--dry-run", action="store_true", help="count only")
    for sub in actions.choices.values():
        sub.add_argument("--json", action="store_true", help="print JSON")


def run_schedule_command(schedule_command: str, **options: Any) -> tuple[Any, list[str]]:
    """The command's result (for --json) and the lines it prints otherwise."""
    if schedule_command == "list":
        return _list()
    user = _operator(options["as_user"])
    name = options["name"]
    if schedule_command == "pause":
        result = pw.pause_schedule(name, note=options["note"], by=user)
        return result, [f"Schedule {name} is paused ({options['as_user']})."]
    if schedule_command == "resume":
        result = pw.resume_schedule(name, by=user)
        return result, [f"Schedule {name} is resumed; next fire {result['next_fire_at']}."]
    if schedule_command == "trigger":
        run_id = pw.trigger_schedule(name, force=options["force"], by=user)
        said = (
            f"Started run {run_id}."
            if run_id
            else "Not started: a run of it is still going (overlap=skip); --force starts one."
        )
        return {"run_id": run_id}, [said]
    result = pw.backfill_schedule(
        name,
        start=options["start"],
        end=options["end"],
        reprocess=options["reprocess"],
        max_active=options["max_active"],
        dry_run=options["dry_run"],
        by=user,
    )
    verb = "would start" if options["dry_run"] else f"backfill {result['backfill']} starts"
    return result, [f"{verb} {result['count']} runs of {name}."]


def _list() -> tuple[list[dict[str, Any]], list[str]]:
    from ..engine.operations.schedules import schedule_dict
    from ..models import WorkflowSchedule

    listed = [schedule_dict(schedule) for schedule in WorkflowSchedule.objects.order_by("name")]
    lines = []
    for item in listed:
        upcoming = item["next_fire_times"][0] if item["next_fire_times"] else None
        when = f"{upcoming['local']} ({upcoming['utc']} UTC)" if upcoming else "-"
        state = "paused" if item["paused"] else "active"
        rule = item["cron"] or f"every {item['every']} ms"
        lines.append(
            f"{item['name']}  {item['workflow']}  {rule}  {state}  next {when}  last {item['last_outcome'] or '-'}"
        )
    return listed, lines or ["(none)"]


def _operator(username: str) -> Any:
    user_model = get_user_model()
    try:
        user = user_model._default_manager.get_by_natural_key(username)
    except user_model.DoesNotExist:
        raise CommandError(
            f"No user {username!r}: --as names the account the action is audited as."
        ) from None
    if not user.has_perm(CHANGE):
        raise CommandError(f"{username} may not operate schedules ({CHANGE}).")
    return user
