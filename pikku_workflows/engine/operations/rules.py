"""What an operator action is, as every adapter offers it: a `Rule` (its function, permission
and the statuses it accepts) with its yes/no `Flag`s. The rows themselves live beside the
functions they name, in `control`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...status import RunStatus


@dataclass(frozen=True)
class Flag:
    """A yes/no option an operation's function takes by `name` (False unless asked for): the
    admin's confirmation page shows it as a checkbox, the API's route as a boolean in its body,
    the `pikku` command as `--<name>`."""

    name: str
    label: str
    help: str


@dataclass(frozen=True)
class Rule:
    """An operator action as every adapter offers it: the engine `function` that does it, the
    model `permission` (codename) it needs, and its status rule: it takes a run in one of
    `sources` to `target` (None: the run keeps its status, as a fork's source does). `past`
    words its outcome ("cancelled"); `caution` is what an operator should know before saying yes.

    A `bulk` operation's function takes `(run_id, *, reason, by)` and returns the run's summary,
    so it applies to many runs at once; the one that is not (fork) also takes a step key and
    returns the new run's id. Its `flags` are the yes/no options its function also takes.
    """

    action: str
    target: str | None
    sources: frozenset[str]
    past: str
    function: Callable[..., Any]
    permission: str
    bulk: bool = True
    caution: str = ""
    flags: tuple[Flag, ...] = ()

    @property
    def requirement(self) -> str:
        """The rule in words, for a refusal: "only running or suspended runs can be cancelled"."""
        named = [status for status in RunStatus.values if status in self.sources]
        statuses = " or ".join([", ".join(named[:-1]), named[-1]] if len(named) > 2 else named)
        return f"only {statuses} runs can be {self.past}"

    def ineligibility(self, status: str) -> str | None:
        """None when a run in `status` is eligible; otherwise why not (a preview for the admin's
        confirmation page and the bulk API: the engine still decides each run)."""
        if status in self.sources:
            return None
        if status == self.target:
            return f"already {status}"
        return f"{status}: {self.requirement}"


# apply_txn(run pk, status before) does the operation's writes inside the transaction.
Apply = Callable[[uuid.UUID, str], None]
