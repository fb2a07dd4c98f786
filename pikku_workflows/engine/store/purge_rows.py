"""A purge's writes: every row that names a purged run through a foreign key (and every row that
names one of those, and so on), found from the models' `_meta`, so a table added later is
covered with no change here; deleted with the run where its key cascades, its key cleared where
it is SET_NULL (a fork outlives its source); and a tombstone for each purged run
(`purge_rows.sql`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction
from django.db.models import ManyToOneRel, Model

from ...models import WorkflowRun, WorkflowRunTombstone
from ...sql import parse_blocks, quoted_table

BLOCKS = parse_blocks(Path(__file__).with_name("purge_rows.sql").read_text())
# How each vendor tests a column against the list of ids passed as %(ids)s.
AMONG_IDS = {
    "postgresql": "= ANY(%(ids)s)",
    "sqlite": "IN (SELECT value FROM json_each(%(ids)s))",
}


@dataclass(frozen=True)
class Reference:
    """A foreign key (`field` of `model`) naming rows of `target`."""

    model: type[Model]
    field: models.ForeignKey[Any, Any]
    target: type[Model]

    def __str__(self) -> str:
        return f"{self.model._meta.label}.{self.field.name}"


@dataclass(frozen=True)
class PurgePlan:
    """What purging runs touches: the tables whose rows go with them (`doomed`, runs first,
    each after every table its cascading keys name), the keys that take them (`cascades`) and
    the keys cleared on rows that stay (`clears`)."""

    doomed: tuple[type[Model], ...]
    cascades: tuple[Reference, ...]
    clears: tuple[Reference, ...]

    @property
    def references(self) -> tuple[Reference, ...]:
        return (*self.cascades, *self.clears)

    @property
    def leaves(self) -> frozenset[type[Model]]:
        """The tables whose rows no key names: deleted by their own keys, never read."""
        named = {reference.target for reference in self.references}
        return frozenset(model for model in self.doomed if model not in named)

    def cascades_of(self, model: type[Model]) -> list[Reference]:
        return [reference for reference in self.cascades if reference.model is model]


@cache
def purge_plan() -> PurgePlan:
    """The plan, read from every installed model's foreign keys into runs and, through cascades,
    into the rows that go with runs. A key whose `on_delete` is neither CASCADE, SET_NULL nor
    DO_NOTHING is ImproperlyConfigured: the purge would not know whether its rows may go."""
    cascades: list[Reference] = []
    clears: list[Reference] = []
    reached: list[type[Model]] = [WorkflowRun]
    for target in reached:
        for reference in _references_into(target):
            if not reference.field.target_field.primary_key:
                raise ImproperlyConfigured(f"{reference} names purged rows by another column.")
            on_delete = reference.field.remote_field.on_delete
            if on_delete is models.CASCADE:
                cascades.append(reference)
                if reference.model not in reached:
                    reached.append(reference.model)
            elif on_delete is models.SET_NULL:
                clears.append(reference)
            elif on_delete is not models.DO_NOTHING:
                raise ImproperlyConfigured(
                    f"{reference} names purged rows with on_delete={on_delete}: a purge "
                    "deletes CASCADE rows and clears SET_NULL keys; use one of them."
                )
    return PurgePlan(_cascade_order(reached, cascades), tuple(cascades), tuple(clears))


def _references_into(target: type[Model]) -> list[Reference]:
    # Hidden relations too: a key declared with related_name="+" still names the row.
    return [
        Reference(relation.related_model, relation.field, target)
        for relation in target._meta.get_fields(include_hidden=True)
        if isinstance(relation, ManyToOneRel)  # OneToOneRel is one too
        and isinstance(relation.field, models.ForeignKey)
        and isinstance(relation.related_model, type)
    ]


def _cascade_order(
    reached: list[type[Model]], cascades: list[Reference]
) -> tuple[type[Model], ...]:
    ordered: list[type[Model]] = []
    pending = list(reached)
    while pending:
        ready = [
            model
            for model in pending
            if all(ref.target in ordered for ref in cascades if ref.model is model)
            or model is WorkflowRun
        ]
        if not ready:
            raise ImproperlyConfigured(f"Foreign keys cascade in a cycle among {pending}.")
        ordered.extend(ready)
        pending = [model for model in pending if model not in ready]
    return tuple(ordered)


def purge_rows_txn(runs: list[dict[str, Any]]) -> dict[str, int]:
    """Inside a transaction holding the rows of `runs` (as `claims.lock_purgeable_runs_txn`
    reads them): their tombstones written, every row the plan takes with them deleted, keys
    naming them from rows that stay cleared. Returns the rows deleted, by model name.

    On PostgreSQL one statement does it all (`purge_runs`): the ids never leave the database.
    On SQLite, one statement per table and key: parents go first, each table's delete returning
    the ids its children are found by (the foreign keys are checked at commit, when none of them
    is left); a table whose rows no key names is deleted without returning anything. Clears come
    last: only rows that stay still name a purged row then."""
    assert transaction.get_connection().in_atomic_block
    if connection.vendor == "postgresql":
        return _purge_in_one_statement([row["id"] for row in runs])
    return _purge_table_by_table(runs)


def _purge_table_by_table(runs: list[dict[str, Any]]) -> dict[str, int]:
    plan = purge_plan()
    _write_tombstones(runs)
    doomed: dict[type[Model], set[Any]] = {WorkflowRun: {row["id"] for row in runs}}
    deleted: dict[type[Model], int] = {
        WorkflowRun: _run("delete_rows", WorkflowRun, doomed[WorkflowRun])
    }
    for model in plan.doomed[1:]:
        doomed[model], deleted[model] = set(), 0
        for reference in plan.cascades_of(model):
            ids = doomed[reference.target]
            if model in plan.leaves:
                deleted[model] += _run("delete_naming", model, ids, reference)
            else:
                gone = _deleted_naming(reference, ids)
                doomed[model] |= gone
                deleted[model] += len(gone)
    for reference in plan.clears:
        _run("clear_naming", reference.model, doomed[reference.target], reference)
    return {model._meta.model_name or "": count for model, count in deleted.items()}


def _purge_in_one_statement(run_ids: list[Any]) -> dict[str, int]:
    sql, counted = _one_statement()
    with connection.cursor() as cursor:
        cursor.execute(sql, {"run_ids": run_ids})
        counts = cursor.fetchone()
    rows: dict[str, int] = {}
    for model, count in zip(counted, counts, strict=True):
        rows[model] = rows.get(model, 0) + int(count)
    return rows


@cache
def _one_statement() -> tuple[str, tuple[str, ...]]:
    """`purge_runs` composed from the plan: a delete per table and cascading key, named after
    both, and a clear per key; and the model name of each delete's count, in order."""
    plan = purge_plan()
    deletes = {
        "workflowrun_rows": BLOCKS["delete_runs_cte"].body.format_map(
            {"name": "workflowrun_rows", **_names(WorkflowRun)}
        )
    }
    deleted_by: dict[type[Model], list[str]] = {WorkflowRun: ["workflowrun_rows"]}
    for model in plan.doomed[1:]:
        for reference in plan.cascades_of(model):
            name = _cte_name("deleted", len(deletes), reference)
            deletes[name] = BLOCKS["delete_naming_cte"].body.format_map(
                {
                    "name": name,
                    "named": _gone(deleted_by[reference.target]),
                    **_names(model, reference),
                }
            )
            deleted_by.setdefault(model, []).append(name)
    clears = [
        BLOCKS[
            "clear_naming_of_kept_cte" if reference.model in deleted_by else "clear_naming_cte"
        ].body.format_map(
            {
                "name": _cte_name("cleared", number, reference),
                "named": _gone(deleted_by[reference.target]),
                "deleted": _gone(deleted_by.get(reference.model, [])),
                **_names(reference.model, reference),
            }
        )
        for number, reference in enumerate(plan.clears)
    ]
    sql = BLOCKS["purge_runs"].body.format_map(
        {
            "tombstone": quoted_table(WorkflowRunTombstone),
            "run": quoted_table(WorkflowRun),
            "deletes": ",\n".join(deletes.values()),
            "clears": ",\n".join(clears),
            "counts": ", ".join(BLOCKS["count_of_cte"].body.format(name=name) for name in deletes),
        }
    )
    model_of = {name: model for model, names in deleted_by.items() for name in names}
    return sql, tuple(model_of[name]._meta.model_name or "" for name in deletes)


def _cte_name(verb: str, number: int, reference: Reference) -> str:
    """Numbered, so unique within PostgreSQL's 63 characters however long a model's names are;
    the table and key follow, cut, for whoever reads the statement."""
    return f"{verb}_{number}_{reference.model._meta.model_name}_by_{reference.field.column}"[:63]


def _gone(ctes: list[str]) -> str:
    return " UNION ALL ".join(BLOCKS["gone_from_cte"].body.format(name=name) for name in ctes)


def _names(model: type[Model], by: Reference | None = None) -> dict[str, str]:
    """`{table}`, `{pk}` and `{column}` (`by`'s key, or the primary key) of `model`, quoted."""
    pk = model._meta.pk
    assert pk is not None and pk.column is not None
    column = by.field.column if by is not None else pk.column
    return {
        "table": quoted_table(model),
        "pk": connection.ops.quote_name(pk.column),
        "column": connection.ops.quote_name(column),
    }


def _deleted_naming(reference: Reference, ids: set[Any]) -> set[Any]:
    """Delete the rows naming one of `ids` by `reference`; returns their primary keys."""
    pk = reference.model._meta.pk
    assert pk is not None
    if not ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(*_statement("delete_naming_returning", reference.model, ids, reference))
        return {pk.to_python(value) for (value,) in cursor.fetchall()}


def _write_tombstones(runs: list[dict[str, Any]]) -> None:
    WorkflowRunTombstone.objects.bulk_create(
        WorkflowRunTombstone(
            id=row["id"],
            workflow=row["workflow"],
            status=row["status"],
            finished_at=row["finished_at"],
            idempotency_key=row["idempotency_key"],
            idempotency_scope=row["idempotency_scope"],
            started_by_id=row["started_by_id"],
            purged_at=row["purged_at"],
        )
        for row in runs
    )


def _run(block: str, model: type[Model], ids: set[Any], by: Reference | None = None) -> int:
    """Run `block` over the rows of `model` named by `ids` (their primary keys; with `by`, the
    ids of the rows that key names); returns how many rows it changed."""
    if not ids:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(*_statement(block, model, ids, by))
        return int(cursor.rowcount)


def _statement(
    block: str, model: type[Model], ids: set[Any], by: Reference | None
) -> tuple[str, dict[str, Any]]:
    """`block` for `model`: `{column}` is `by`'s key (or the primary key), `%(ids)s` the ids
    of the rows `by` names (or of `model`'s own rows)."""
    sql = BLOCKS[block].body.format_map(
        {**_names(model, by), "among_ids": AMONG_IDS[connection.vendor]}
    )
    return sql, {"ids": _ids_parameter(by.target if by is not None else model, ids)}


def _ids_parameter(model: type[Model], ids: Iterable[Any]) -> Any:
    pk = model._meta.pk
    assert pk is not None
    values = [pk.get_db_prep_value(value, connection) for value in ids]
    return values if connection.vendor == "postgresql" else json.dumps(values)
