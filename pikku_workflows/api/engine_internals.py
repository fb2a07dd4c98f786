"""The engine internals the API uses beyond `import pikku_workflows as pw`, imported here only,
so that an engine rename is a one-line change: the summary builder (one run's summary from rows
read in bulk, for the list) and the operation rules (which statuses each operation accepts, as
the admin offers them too)."""

from __future__ import annotations

from ..engine.control import OPERATION_RULES, Rule
from ..engine.reads import summarize

__all__ = ["OPERATION_RULES", "Rule", "summarize"]
