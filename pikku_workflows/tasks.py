"""django-q2 entry points (public dotted paths). They take ids only and are idempotent."""

from __future__ import annotations


def orchestrate(run_id: str) -> None:
    """Run an orchestrator pass of the run (a no-op for settled or suspended runs)."""
    from .engine.operations.step_execution import run_pass

    run_pass(run_id)


def execute_step(run_id: str, step_key: str) -> None:
    """Claim and run one attempt of a queued step (a no-op when there is nothing to claim)."""
    from .engine.operations.step_execution import execute_queued_step

    execute_queued_step(run_id, step_key)
