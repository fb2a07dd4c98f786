"""`manage.py pikku_purge [--older-than 30d] [--status S] [--workflow NAME] [--batch N]
[--max-seconds S] [--dry-run]`: `pw.purge_runs` from a shell or cron, with the same options;
prints what went (or, with `--dry-run`, what would go) by table."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import InvalidInput
from ...retention import PURGEABLE_STATUSES


class Command(BaseCommand):
    help = (
        "Delete ended runs older than a cutoff (by when they ended), with every row naming "
        "them, in short batches; held runs and runs with a tree still going stay."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than", default="30d", help="Runs that ended longer ago (default 30d)."
        )
        parser.add_argument(
            "--status",
            action="append",
            default=None,
            help=f"Only runs in this status ({', '.join(PURGEABLE_STATUSES)}; repeat it, or "
            "separate with commas). Default: all three.",
        )
        parser.add_argument("--workflow", help="Only runs of this workflow.")
        parser.add_argument(
            "--batch", type=int, default=None, help="Runs per transaction (PURGE_BATCH)."
        )
        parser.add_argument(
            "--max-seconds", type=float, default=None, help="Stop starting batches after this."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Delete nothing; print what would go."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from ...engine.operations.purge import purge_runs

        statuses = [
            status.strip()
            for given in options["status"] or [",".join(PURGEABLE_STATUSES)]
            for status in given.split(",")
        ]
        try:
            counts = purge_runs(
                older_than=options["older_than"],
                statuses=statuses,
                workflow=options["workflow"],
                batch=options["batch"],
                max_seconds=options["max_seconds"],
                dry_run=options["dry_run"],
            )
        except InvalidInput as exc:
            raise CommandError(exc.message) from exc
        self._report(counts, options["dry_run"])

    def _report(self, counts: dict[str, Any], dry_run: bool) -> None:
        verb = "Would purge" if dry_run else "Purged"
        self.stdout.write(f"{verb} {counts['runs']} runs in {counts['batches']} batches.")
        for table, rows in counts["rows"].items():
            self.stdout.write(f"  {table}: {rows}")
        if counts["skipped"]:
            self.stdout.write(f"Kept {counts['skipped']} run trees (held, still going, or busy).")
        if counts["tombstones_expired"]:
            self.stdout.write(f"Forgot {counts['tombstones_expired']} tombstones.")
        if counts["busy"]:
            self.stdout.write("Stopped: another purge is running.")
        elif counts["more"]:
            self.stdout.write("Stopped at --max-seconds: more runs are due.")
