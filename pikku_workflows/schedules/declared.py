"""`pw.Schedule`: a schedule declared in code beside its workflow (`@pw.workflow(schedule=)`),
checked when the workflow registers and upserted into the table at `migrate` and when a worker
starts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .spec import ScheduleSpec, parse_schedule


class Schedule:
    """A schedule of the workflow it decorates: exactly one of `cron` (5 fields) and `every`
    (a duration), in `timezone`; named after the workflow unless `name` is given. The other
    options are `create_schedule`'s."""

    def __init__(
        self,
        *,
        cron: str | None = None,
        every: int | str | timedelta | None = None,
        timezone: str = "UTC",
        name: str | None = None,
        input: Any = None,
        overlap: str = "skip",
        catch_up: str = "latest",
        catch_up_window: int | str | timedelta = "1h",
        catch_up_max: int = 100,
        jitter: int | str | timedelta | None = None,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        paused: bool = False,
        pause_on_failure: bool = False,
    ) -> None:
        self.name = name
        self.fields = {
            "cron": cron,
            "every": every,
            "timezone": timezone,
            "input": input,
            "overlap": overlap,
            "catch_up": catch_up,
            "catch_up_window": catch_up_window,
            "catch_up_max": catch_up_max,
            "jitter": jitter,
            "start_at": start_at,
            "end_at": end_at,
            "paused": paused,
            "pause_on_failure": pause_on_failure,
        }

    def spec(self, workflow: str) -> ScheduleSpec:
        """The checked definition for `workflow` (InvalidInput lists every problem)."""
        return parse_schedule(self.name or workflow, workflow, self.fields)
