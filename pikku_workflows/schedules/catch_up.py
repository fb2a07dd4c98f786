"""Which due ticks start a run when a schedule fires: the newest on time; after an outage or
a pause, the catch-up rule (`latest`, `all` up to `catch_up_max`, `none`) inside the window;
everything older is missed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from .choices import CatchUp

# A tick fired this late is still on time (the loop was busy, not down): it is no catch-up.
ON_TIME_WITHIN = timedelta(seconds=60)


def ticks_to_start(
    due: Sequence[datetime],
    now: datetime,
    *,
    catch_up: str,
    window: timedelta,
    catch_up_max: int,
) -> list[bool]:
    """For each due nominal time (ascending, all <= now): whether it starts a run (else it is
    missed)."""
    if not due:
        return []
    on_time = now - due[-1] <= ON_TIME_WITHIN
    late = due[:-1] if on_time else due
    in_window = [now - nominal <= window for nominal in late]
    chosen = [False] * len(late)
    candidates = [index for index, inside in enumerate(in_window) if inside]
    if catch_up == CatchUp.LATEST and not on_time:
        chosen_indexes = candidates[-1:]
    elif catch_up == CatchUp.ALL:
        chosen_indexes = candidates[len(candidates) - catch_up_max :] if catch_up_max else []
    else:
        chosen_indexes = []
    for index in chosen_indexes:
        chosen[index] = True
    return [*chosen, True] if on_time else chosen
