"""What `wf.receive` hands the body: one update sent with `pw.update` (pure: no queries)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Update:
    """An update the run took: `id` is its `update_id` (what `wf.reply` answers), `by` the
    username of who sent it (None for your own code)."""

    id: str
    name: str
    payload: Any
    by: str | None
