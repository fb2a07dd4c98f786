"""`--since` of the management commands: a duration back from now (`2h`, `7d`) or an ISO date
(midnight) or date/time, in the current time zone unless it names one."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from ..durations import parse_duration
from ..exceptions import InvalidInput


def parse_since(text: str) -> datetime:
    """The moment `--since TEXT` names (CommandError when it names none)."""
    try:
        return timezone.now() - timedelta(milliseconds=parse_duration(text, what="--since"))
    except InvalidInput:
        pass
    moment = parse_datetime(text)
    if moment is None and (day := parse_date(text)) is not None:
        moment = datetime(day.year, day.month, day.day)
    if moment is None:
        raise CommandError(f"--since {text!r}: give a duration (2h, 3d) or a date (2026-05-01).")
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)
