"""The engine internals the API uses beyond `import pikku_workflows as pw`, imported here only,
so that an engine rename is a one-line change: the summary builder (one run's summary from rows
read in bulk, for the list) and the operation rules (which statuses each operation accepts)."""

from __future__ import annotations

from ..engine.operator import CANCEL, RESUME, RETRY, SUSPEND, Rule
from ..engine.summary import summarize

__all__ = ["CANCEL", "RESUME", "RETRY", "SUSPEND", "Rule", "summarize"]
