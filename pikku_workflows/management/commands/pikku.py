"""`manage.py pikku`: runs from a shell, for operators.

    pikku runs [--status S] [--workflow W] [--since 2h|2026-05-01] [--level top|children|all]
               [--limit N]         top-level runs unless --level says otherwise
    pikku show RUN                  summary, steps, what it waits on
    pikku timeline RUN              every attempt's events and operator actions, in order
    pikku cancel|suspend RUN --reason TEXT --as USERNAME
    pikku resume|retry RUN --as USERNAME [--reason TEXT]
    pikku fork RUN --from-step KEY --as USERNAME [--reason TEXT]
    pikku schedules list
    pikku schedules pause|resume NAME --as USERNAME [--note TEXT]
    pikku schedules trigger NAME --as USERNAME [--force]
    pikku schedules backfill NAME --start ISO --end ISO --as USERNAME [--reprocess missing|failed|all]
                             [--max-active N] [--dry-run]

RUN is a run id or its first characters (at least four). Actions are audited as the user named
by `--as` (required), who needs the action's permission, as in the admin. `--json` prints JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

import pikku_workflows as pw

from ...engine.operations.control import OPERATION_RULES
from ...engine.operations.reads import list_rows, list_summary
from ...engine.operations.rules import Rule
from ...querysets import RunLevel
from ...status import RunStatus
from ...waiting import WaitingKind, waiting_for_a_worker
from ..schedule_commands import add_schedule_arguments, run_schedule_command
from ..since import parse_since

DEFAULT_LIMIT = 50
# An action that stops a run's work asks the operator why (the others may say why).
STOPPED = frozenset({RunStatus.CANCELLED, RunStatus.SUSPENDED})


class Command(BaseCommand):
    help = (
        f"Operate workflow runs (list, show, timeline, {', '.join(OPERATION_RULES)}) and schedules."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        runs = commands.add_parser("runs", help="list runs, newest first")
        runs.add_argument("--status", choices=RunStatus.values)
        runs.add_argument("--workflow")
        runs.add_argument("--since", help="a duration back from now (2h, 3d) or a date/time")
        runs.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
        runs.add_argument(
            "--level",
            choices=RunLevel.values,
            default=RunLevel.TOP,
            help="top-level runs (the default, as in the admin), child runs, or all",
        )
        for name, what in (
            ("show", "a run's summary, steps and what it waits on"),
            ("timeline", "a run's events in order"),
        ):
            commands.add_parser(name, help=what).add_argument("run")
        for rule in OPERATION_RULES.values():
            sub = commands.add_parser(rule.action, help=f"{rule.action} a run (audited)")
            sub.add_argument("run")
            sub.add_argument("--as", dest="as_user", required=True, metavar="USERNAME")
            sub.add_argument("--reason", default="", required=rule.target in STOPPED)
            if not rule.bulk:
                sub.add_argument("--from-step", required=True, metavar="KEY")
            for flag in rule.flags:
                sub.add_argument(f"--{flag.name}", action="store_true", help=flag.help)
        for sub in commands.choices.values():
            sub.add_argument("--json", action="store_true", help="print JSON")
        add_schedule_arguments(commands)

    def handle(self, *args: Any, command: str, **options: Any) -> None:
        rule = OPERATION_RULES.get(command)
        try:
            if command == "schedules":
                result, lines = run_schedule_command(**options)
                if not options.get("json"):
                    self.stdout.write("\n".join(lines))
            else:
                result = self._act(rule, **options) if rule else self._read(command, **options)
        except pw.WorkflowError as exc:
            raise CommandError(f"{exc} [{exc.code}]") from exc
        if options.get("json"):
            self.stdout.write(json.dumps(result, indent=2, ensure_ascii=False, default=str))

    # --- reading -------------------------------------------------------------------------

    def _read(self, command: str, **options: Any) -> Any:
        reads: dict[str, Callable[..., Any]] = {
            "runs": self.do_runs,
            "show": self.do_show,
            "timeline": self.do_timeline,
        }
        return reads[command](**options)

    def do_runs(
        self,
        *,
        status: str | None,
        workflow: str | None,
        since: str | None,
        limit: int,
        level: str,
        **options: Any,
    ) -> list[dict[str, Any]]:
        from ...models import WorkflowRun

        runs = WorkflowRun.objects.at_level(level).order_by("-created_at")
        if status:
            runs = runs.filter(status=status)
        if workflow:
            runs = runs.filter(workflow=workflow)
        if since:
            runs = runs.filter(created_at__gte=parse_since(since))
        # One query: the list items come from the run rows alone (`pikku show` has the steps).
        listed = [list_summary(run) for run in list_rows(runs)[:limit]]
        if not options.get("json"):
            seen = _workers_seen()
            self._table(
                ["id", "status", "workflow", "started", "duration", "waiting on / error"],
                [_run_line(run, seen) for run in listed],
            )
        return listed

    def do_show(self, *, run: str, **options: Any) -> dict[str, Any]:
        summary = pw.get_run_status(_run_id(run))
        if not options.get("json"):
            self._summary(summary)
        return summary

    def do_timeline(self, *, run: str, **options: Any) -> list[dict[str, Any]]:
        events = pw.get_run_timeline(_run_id(run))
        if not options.get("json"):
            self._table(
                ["seq", "at", "step", "attempt", "event", "by"],
                [
                    [
                        str(e["seq"]),
                        e["at"],
                        e["step_key"] or "-",
                        str(e["attempt"] or "-"),
                        e["event"],
                        e.get("user") or "",
                    ]
                    for e in events
                ],
            )
        return events

    # --- acting --------------------------------------------------------------------------

    def _act(
        self, rule: Rule, *, run: str, as_user: str, reason: str, **options: Any
    ) -> dict[str, Any]:
        run_id = _run_id(run)
        user = _operator(as_user, rule)
        if rule.bulk:
            flags = {flag.name: options[flag.name] for flag in rule.flags}
            summary = rule.function(run_id, by=user, reason=reason, **flags)
            message = f"Run {run_id} is {summary['status']} ({rule.action} as {as_user})."
        else:
            new_id = rule.function(run_id, from_step=options["from_step"], by=user, reason=reason)
            summary = pw.get_run_status(new_id)
            message = f"Forked run {run_id} as run {new_id} (queued), as {as_user}."
        if not options.get("json"):
            self.stdout.write(self.style.SUCCESS(message))
            self._summary(summary)
        return summary

    # --- printing ------------------------------------------------------------------------

    def _summary(self, summary: dict[str, Any]) -> None:
        write = self.stdout.write
        write(f"run       {summary['id']}")
        write(f"workflow  {summary['workflow']}")
        write(f"status    {summary['status']}")
        write(
            f"started   {summary['started_at']}"
            + (f" by {summary['started_by']}" if summary["started_by"] else "")
        )
        if summary["finished_at"]:
            write(f"finished  {summary['finished_at']}")
        if summary["waiting_on"]:
            write(f"waits on  {_waiting(summary['waiting_on'], _workers_seen())}")
        if summary["error"]:
            write(f"error     {summary['error']['code']}: {summary['error']['message']}")
        if summary["output"] is not None:
            write(f"output    {json.dumps(summary['output'], ensure_ascii=False, default=str)}")
        if summary["steps"]:
            write("")
            self._table(
                ["step", "status", "attempts", "duration", "function"],
                [
                    [
                        step["key"],
                        step["status"],
                        str(step["attempts"]),
                        f"{step['duration_ms']} ms" if step["duration_ms"] is not None else "-",
                        step["function"] or "-",
                    ]
                    for step in summary["steps"]
                ],
            )

    def _table(self, header: list[str], rows: list[list[str]]) -> None:
        if not rows:
            self.stdout.write("(none)")
            return
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write(
                "  ".join(
                    str(value).ljust(width) for value, width in zip(row, widths, strict=True)
                ).rstrip()
            )


def _run_id(text: str) -> str:
    """The run `text` names: a full id, or the start of exactly one run's id."""
    from ...models import WorkflowRun
    from ...querysets import run_id_query

    query = run_id_query(text)
    if query is None:
        raise CommandError(
            f"{text!r} is not a run id (give the id, or at least its first 4 characters)."
        )
    matches = list(WorkflowRun.objects.filter(query).values_list("pk", flat=True)[:6])
    if not matches:
        raise CommandError(f"No run has an id starting with {text!r}.")
    if len(matches) > 1:
        listed = ", ".join(str(pk) for pk in matches[:5])
        raise CommandError(f"{text!r} names more than one run ({listed}…): give more of the id.")
    return str(matches[0])


def _operator(username: str, rule: Rule) -> Any:
    user_model = get_user_model()
    try:
        user = user_model._default_manager.get_by_natural_key(username)
    except user_model.DoesNotExist:
        raise CommandError(
            f"No user {username!r}: --as names the account the action is audited as."
        ) from None
    permission = f"pikku_workflows.{rule.permission}"
    if not user.has_perm(permission):
        raise CommandError(f"{username} may not {rule.action} runs ({permission}).")
    return user


def _workers_seen() -> bool:
    from ...worker_registration import timer_loop_seen

    return timer_loop_seen()


def _waiting(waiting: dict[str, Any], workers_seen: bool) -> str:
    """`timer cool-off (until=...)`, in the admin's words for a run no worker has taken."""
    if waiting["kind"] == WaitingKind.PASS:
        return waiting_for_a_worker(workers_seen)
    details = ", ".join(f"{k}={v}" for k, v in waiting.items() if k not in ("kind", "step_key"))
    step = f" {waiting['step_key']}" if waiting.get("step_key") else ""
    return f"{waiting['kind']}{step}" + (f" ({details})" if details else "")


def _run_line(run: dict[str, Any], workers_seen: bool) -> list[str]:
    started = datetime.fromisoformat(run["started_at"])
    end = datetime.fromisoformat(run["finished_at"]) if run["finished_at"] else timezone.now()
    seconds = (end - started).total_seconds()
    if run["error"] and run["status"] == RunStatus.FAILED:
        note = f"{run['error']['code']}: {run['error']['message']}"[:70]
    elif run["waiting_on"]:
        note = _waiting(run["waiting_on"], workers_seen)
    else:
        note = ""
    return [
        run["id"][:8],
        run["status"],
        run["workflow"],
        run["started_at"][:19],
        f"{seconds:.1f} s",
        note,
    ]
