"""`manage.py pikku_replay_check [--workflow NAME] [--limit N]`: replay the stored histories of
recent runs against the code deployed here, running no step, and list every run that would hit
NON_DETERMINISTIC; exit status 1 if any, so CI can refuse a deploy that would strand runs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...engine.operations.replay_check import (
    DEFAULT_LIMIT,
    NON_DETERMINISTIC,
    OK,
    REPLAYABLE_STATUSES,
    ReplayVerdict,
    check_recent_runs,
)


class Command(BaseCommand):
    help = (
        "Replay the histories of recent runs (running, suspended, failed) against the current "
        "code without running any step; list the runs that would hit NON_DETERMINISTIC and "
        "exit 1 if there are any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workflow", help="Only runs of this workflow.")
        parser.add_argument(
            "--limit",
            type=int,
            default=DEFAULT_LIMIT,
            help=f"How many of the most recent runs to check (default {DEFAULT_LIMIT}).",
        )

    def handle(self, *args: Any, workflow: str | None, limit: int, **options: Any) -> None:
        if limit < 1:
            raise CommandError("--limit must be at least 1.")
        verdicts = check_recent_runs(workflow, limit)
        for verdict in verdicts:
            if verdict.verdict != OK or options["verbosity"] > 1:
                self.stdout.write(self._line(verdict))
        broken = [v for v in verdicts if v.verdict == NON_DETERMINISTIC]
        others = [v for v in verdicts if v.verdict not in (OK, NON_DETERMINISTIC)]
        statuses = "/".join(REPLAYABLE_STATUSES)
        self.stdout.write(
            f"Checked {len(verdicts)} {statuses} run(s): {len(broken)} would hit "
            f"NON_DETERMINISTIC, {len(others)} other problem(s)."
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
