"""Runs to purge: ended through the engine, then aged on the database clock; and the rows a
purge must leave behind none of."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import ForeignKey

import pikku_workflows as pw
from pikku_workflows.engine.store.purge_rows import purge_plan
from pikku_workflows.models import WorkflowRun
from pikku_workflows.querysets import DatabaseNow


def register_shop() -> None:
    """`retention.order` (two steps and a child `retention.invoice`) and `retention.broken`,
    which fails."""
    pw.step_function("retention.pack")(lambda data, ctx: {"packed": data})

    @pw.workflow("retention.invoice")
    def invoice(wf, input):
        return wf.do("number", "retention.pack", input)

    @pw.workflow("retention.order")
    def order(wf, input):
        wf.do("pack", "retention.pack", input)
        wf.do("label", "retention.pack", input)
        return wf.do("invoice", "retention.invoice", input)

    @pw.workflow("retention.broken")
    def broken(wf, input):
        wf.do("pack", "retention.pack", input)
        raise RuntimeError("no stock")


def ended_order(n: int = 0, **options: Any) -> str:
    run_id = pw.start_workflow("retention.order", {"n": n}, inline=True, **options)
    assert WorkflowRun.objects.get(pk=run_id).status == "completed"
    return run_id


def age(run_id: Any, *, days: float, field: str = "finished_at") -> None:
    """The run and its tree ended (or were created, `field`) `days` ago by the database clock."""
    tree = [run_id]
    while tree:
        WorkflowRun.objects.filter(pk__in=tree).update(
            **{field: DatabaseNow() - timedelta(days=days)}
        )
        tree = list(WorkflowRun.objects.filter(parent_run_id__in=tree).values_list("pk", flat=True))


def rows_naming(run_ids: list[Any]) -> dict[str, int]:
    """For every foreign key the purge plan follows, the rows still naming one of `run_ids` (or
    a row that names one of them, and so on), by key."""
    plan = purge_plan()
    alive: dict[Any, set[Any]] = {WorkflowRun: set(map(str, run_ids))}
    found = {}
    for model in plan.doomed:
        for reference in plan.references:
            if reference.target is not model:
                continue
            assert isinstance(reference.field, ForeignKey)
            naming = reference.model._base_manager.filter(
                **{f"{reference.field.attname}__in": list(alive[model])}
            ).values_list("pk", flat=True)
            found[str(reference)] = len(naming)
            alive.setdefault(reference.model, set()).update(map(str, naming))
    return {key: count for key, count in found.items() if count}
