"""`manage.py pikku_replay_check [--workflow NAME] [--status S] [--since WHEN] [--limit N]`:
replay the stored histories of recent runs against the code deployed here, running no step, and
list every run that would hit NON_DETERMINISTIC; exit status 1 if any, so CI can refuse a
deploy that would strand runs. Runs an earlier deploy already stopped with NON_DETERMINISTIC are
skipped (counted, not checked): this code cannot strand them again."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...engine.operations.replay_check import (
    DEFAULT_LIMIT,
    NON_DETERMINISTIC,
    OK,
    REPLAYABLE_STATUSES,
    ReplayVerdict,
    already_stopped,
    check_recent_runs,
)
from ..since import parse_since


class Command(BaseCommand):
    help = (
        "Replay the histories of recent runs (running, suspended, failed) against the current "
        "code without running any step; list the runs that would hit NON_DETERMINISTIC and "
        "exit 1 if there are any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workflow", help="Only runs of this workflow.")
        parser.add_argument(
            "--status",
            action="append",
            default=None,
            help=f"Only runs in this status ({', '.join(REPLAYABLE_STATUSES)}; repeat it, or "
            "separate with commas). Default: all three.",
        )
        parser.add_argument(
            "--since",
            help="Only runs started since then: a duration back from now (7d, 12h) or an ISO "
            "date or datetime (2026-01-31, 2026-01-31T08:00:00Z).",
        )
        parser.add_argument(
            "--limit",
            type=int,
            default=DEFAULT_LIMIT,
            help=f"How many of the most recent runs to check (default {DEFAULT_LIMIT}).",
        )

    def handle(self, *args: Any, workflow: str | None, limit: int, **options: Any) -> None:
        if limit < 1:
            raise CommandError("--limit must be at least 1.")
        statuses = parse_statuses(options["status"])
        since = parse_since(options["since"]) if options["since"] else None
        verdicts = check_recent_runs(workflow, limit, since=since, statuses=statuses)
        for verdict in verdicts:
            if verdict.verdict != OK or options["verbosity"] > 1:
                self.stdout.write(self._line(verdict))
        broken = [v for v in verdicts if v.verdict == NON_DETERMINISTIC]
        others = [v for v in verdicts if v.verdict not in (OK, NON_DETERMINISTIC)]
        skipped = already_stopped(workflow, since=since, statuses=statuses)
        self.stdout.write(
            f"Checked {len(verdicts)} {'/'.join(statuses)} run(s): {len(broken)} would hit "
            f"NON_DETERMINISTIC, {len(others)} other problem(s)"
            + (f"; skipped {skipped} already stopped by NON_DETERMINISTIC." if skipped else ".")
        )
        if broken:
            raise CommandError(
                f"{len(broken)} run(s) would hit NON_DETERMINISTIC on this code: deploy it behind "
                "wf.patched(...) or let those runs finish first."
            )

    def _line(self, verdict: ReplayVerdict) -> str:
        where = f" at step {verdict.step_key!r}" if verdict.step_key else ""
        detail = f": {verdict.message}" if verdict.message else ""
        line = f"{verdict.verdict}  {verdict.run_id}  {verdict.workflow} ({verdict.status}){where}{detail}"
        if verdict.verdict == NON_DETERMINISTIC:
            return self.style.ERROR(line)
        return line if verdict.verdict == OK else self.style.WARNING(line)


def parse_statuses(given: list[str] | None) -> tuple[str, ...]:
    """The statuses of `--status` (repeated or comma-separated), in the table's order."""
    if not given:
        return REPLAYABLE_STATUSES
    named = {word.strip() for value in given for word in value.split(",") if word.strip()}
    unknown = named - set(REPLAYABLE_STATUSES)
    if unknown:
        raise CommandError(
            f"--status {', '.join(sorted(unknown))}: a check replays runs that are "
            f"{', '.join(REPLAYABLE_STATUSES)}."
        )
    return tuple(status for status in REPLAYABLE_STATUSES if status in named)
