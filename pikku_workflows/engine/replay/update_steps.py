"""What `wf.receive` and `wf.reply` do during a replay: a receive is a wait for the update's
signal at the engine's own key (`__receive:<name>`, so its reaches replay like any wait); a reply
records the answer once. A replay's replies find their updates among the run's answered ones,
read once per pass, and write nothing: a pass of a run with a thousand answered updates makes
one query for them, not a thousand."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ...exceptions import InvalidInput
from ...serialization import NotStorableJson, round_trip
from ...updates import Update
from ...validation import NAME_MAX_LENGTH, checked_text
from ..store.update_transitions import (
    answered_update_ids,
    complete_update,
    receive_channel,
    update_signal_name,
)
from .attempts import record_kept
from .replay_pass import ReplayPass
from .signal_steps import wait_at


def run_receive(rp: ReplayPass, name: str, timeout: int | str | timedelta | None) -> Update:
    checked_text(name, "An update name", max_length=NAME_MAX_LENGTH)
    wakes = receive_channel(rp.run.pk)
    message = wait_at(rp, f"__receive:{name}", update_signal_name(name), timeout, wakes=wakes)
    return Update(message["id"], message["name"], message["payload"], message["by"])


def run_reply(rp: ReplayPass, message: Update, result: Any) -> None:
    if not isinstance(message, Update):
        raise InvalidInput(f"wf.reply answers what wf.receive returned, not {message!r:.60}.")
    try:
        result = round_trip(result, name="result")
    except NotStorableJson as exc:
        raise InvalidInput(f"The answer to update {message.id!r}: {exc}") from exc
    record_kept(rp)
    if rp.answered_updates is None:
        rp.answered_updates = answered_update_ids(rp.run.pk)
    if message.id not in rp.answered_updates:
        complete_update(rp.run.pk, message.id, result)
        rp.answered_updates.add(message.id)
