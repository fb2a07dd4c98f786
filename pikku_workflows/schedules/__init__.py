"""Schedules' arithmetic (pure: no queries): cron expressions and `every=` intervals in IANA
time zones with their DST rules, the checked definition of a schedule, deterministic jitter
and the catch-up rule. docs/schedules.md states the rules."""

from __future__ import annotations

from .declared import Schedule
from .fire_times import FireRule, fire_times
from .preview import next_fire_times

__all__ = ["FireRule", "Schedule", "fire_times", "next_fire_times"]
