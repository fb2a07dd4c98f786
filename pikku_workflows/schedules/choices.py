"""The vocabulary of schedules: overlap and catch-up policies, tick outcomes, who manages a
schedule, and a backfill's reprocess rule and status."""

from __future__ import annotations

from django.db.models import TextChoices


class Overlap(TextChoices):
    """What a tick does while a run the schedule started is not finished."""

    SKIP = "skip", "Skip the tick"
    ALLOW_ALL = "allow_all", "Start another run"
    CANCEL_OTHER = "cancel_other", "Cancel the running one, then start"
    BUFFER_ONE = "buffer_one", "Keep one run queued (later ticks skip)"
    BUFFER_ALL = "buffer_all", "Queue each run, in tick order"


# Overlaps whose ticks wait as queued runs, admitted one at a time as the schedule's run ends.
BUFFERING_OVERLAPS = (Overlap.BUFFER_ONE, Overlap.BUFFER_ALL)
# The most runs a buffer_all schedule keeps queued: a tick beyond is dropped.
MAX_BUFFERED_RUNS = 1000


class CatchUp(TextChoices):
    """What ticks missed within the catch-up window do once the schedule fires again."""

    LATEST = "latest", "Start the newest"
    ALL = "all", "Start each (up to catch_up_max)"
    NONE = "none", "Start none"


class TickOutcome(TextChoices):
    STARTED = "started", "Started"
    SKIPPED = "skipped", "Skipped (a run was still going)"
    BUFFERED = "buffered", "Buffered (queued until the run before ends)"
    DROPPED = "dropped", "Dropped (the buffer was full)"
    MISSED = "missed", "Missed"
    BACKFILL = "backfill", "Backfill"
    TRIGGERED = "triggered", "Triggered by hand"


class ManagedBy(TextChoices):
    CODE = "code", "Code"
    ADMIN = "admin", "Admin or API"


class Reprocess(TextChoices):
    """Which nominal times of a backfill's range get a run."""

    MISSING = "missing", "Those without a started run"
    FAILED = "failed", "Those without a run, or whose run failed"
    ALL = "all", "All"


class BackfillStatus(TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
