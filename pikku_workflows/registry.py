"""The registry of workflows and step functions, filled by decorators at import time (pure)."""

from __future__ import annotations

import difflib
import hashlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from types import CodeType
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .conf import pikku_settings
from .determinism import Finding, nondeterministic_calls
from .durations import parse_duration
from .exceptions import InvalidInput, LimitNotFound, StepFunctionNotFound, WorkflowNotFound
from .flow import Concurrency, Debounce, Limit, Priority, checked_limit_names, checked_priority
from .flow.limits import define
from .flow.step_rates import Rate
from .graph.definition import GraphDefinition, parse_definition, read_definition_file
from .graph.validation import function_problems, raise_problems
from .retention import parse_retention
from .schedules.declared import Schedule
from .schedules.spec import ScheduleSpec
from .step_keys import RESERVED_KEY_CHARACTERS
from .validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH, checked_text

WORKFLOW_KIND_DSL = "dsl"
WORKFLOW_KIND_GRAPH = "graph"
ASYNC_NOT_ATOMIC = (
    "atomic=True needs a sync function: Django runs the ORM calls of an async def on a thread of "
    "its own, outside the attempt's transaction."
)
# A step's timeout (per attempt) is at most a day: a step that needs longer is a child run.
MAX_STEP_TIMEOUT_MS = 86_400_000
# How many close names a "did you mean" offers, and how close they must be (difflib's ratio).
CLOSE_NAMES = 2
CLOSE_CUTOFF = 0.75


def validate_step_key(key: object) -> str:
    """A user step key is a non-empty string without `#`, `:`, `[` or `]` (reserved by the
    engine), no longer than its column."""
    checked_text(key, "A step key", max_length=KEY_MAX_LENGTH)
    assert isinstance(key, str)
    if RESERVED_KEY_CHARACTERS.search(key):
        raise InvalidInput(f"Step key {key!r} uses a reserved character (# : [ ]).")
    return key


def parse_timeout(value: Any) -> int:
    """A step's per-attempt timeout in milliseconds (at most MAX_STEP_TIMEOUT_MS)."""
    return parse_duration(value, what="timeout", limit_ms=MAX_STEP_TIMEOUT_MS)


@dataclass(frozen=True)
class StepFunctionDefinition:
    name: str
    func: Callable[..., Any]
    inline: bool = True
    queue: str | None = None
    timeout_ms: int | None = None
    # Its writes commit with its result (docs/code-workflows.md, "Exactly once").
    atomic: bool = False
    # The step function that undoes a succeeded step of this one.
    compensate: str | None = None
    # Named limits and its own rate, which space (and hold) its attempts.
    limits: tuple[str, ...] = ()
    rate: Rate | None = None

    @property
    def governed(self) -> bool:
        """Whether its attempts are admitted under limits or a rate (docs/flow-control.md)."""
        return bool(self.limits) or self.rate is not None


@dataclass(frozen=True)
class WorkflowDefinition:
    """A registered workflow. A graph (`kind` "graph") carries its parsed `graph`, its hash as
    `code_version`, and a `func` that only says graphs have no body."""

    name: str
    func: Callable[..., Any]
    planned_steps: list[str] | None = None
    kind: str = WORKFLOW_KIND_DSL
    code_version: str = field(default="")
    graph: GraphDefinition | None = None
    # What the body calls that a replay would see differently (read from its source when it
    # registers; `manage.py check` warns of each).
    nondeterminism: tuple[Finding, ...] = ()
    # How long its ended runs are kept, by status, in ms (`retention=`); the statuses it does
    # not name follow the RETENTION setting.
    retention: Mapping[str, int] = field(default_factory=dict)
    # How many runs with the same key may be admitted at once (docs/flow-control.md).
    concurrency: Concurrency | None = None
    # Which starts collapse into one queued run, and how long it waits for more.
    debounce: Debounce | None = None
    # The named limits whose rates space its starts.
    limits: tuple[str, ...] = ()
    # Seconds its queued runs go ahead of their start time (or `f(input)`).
    priority: Priority = 0
    # The schedules declared with it (`schedule=`), checked when it registered.
    schedules: tuple[ScheduleSpec, ...] = ()
    # `pw.update` names: each one's validator(input, state, payload), run in the caller.
    updates: dict[str, Callable[..., Any]] = field(default_factory=dict)


def code_fingerprint(func: Callable[..., Any]) -> str:
    """A short hash of the function's source: it changes when the workflow's code does."""
    try:
        material = inspect.getsource(func).encode()
    except (OSError, TypeError):
        material = _code_material(func.__code__).encode()
    return hashlib.sha256(material).hexdigest()[:16]


def _code_material(code: CodeType) -> str:
    # Without source (exec'd code, .pyc-only installs) hash the code object. Bytecode alone
    # misses constants and names (`"a"` -> `"b"` keeps co_code), and repr() of nested code shows
    # an address, so walk it; frozenset constants are sorted (their order follows hash seeds).
    def constant(value: object) -> str:
        if isinstance(value, CodeType):
            return _code_material(value)
        if isinstance(value, tuple):
            return f"tuple({[constant(item) for item in value]})"
        if isinstance(value, frozenset):
            return f"frozenset({sorted(constant(item) for item in value)})"
        return repr(value)

    return "\n".join([code.co_code.hex(), repr(code.co_names), *map(constant, code.co_consts)])


def _same_origin(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # The same function imported twice (a module re-imported under its dotted path) is no duplicate.
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def _same_workflow(a: WorkflowDefinition, b: WorkflowDefinition) -> bool:
    # Every graph shares one placeholder body: the same graph is the same definition hash.
    if a.graph is not None or b.graph is not None:
        return a.kind == b.kind and a.code_version == b.code_version
    return _same_origin(a.func, b.func)


def _origin(definition: WorkflowDefinition | StepFunctionDefinition) -> str:
    if isinstance(definition, WorkflowDefinition) and definition.graph is not None:
        return f"a graph definition with hash {definition.code_version}"
    return f"{definition.func.__module__}.{definition.func.__qualname__}"


class Registry:
    def __init__(self) -> None:
        self.workflows: dict[str, WorkflowDefinition] = {}
        self.step_functions: dict[str, StepFunctionDefinition] = {}
        # Which workflow declared each schedule name (two may not share one).
        self.schedule_owners: dict[str, str] = {}
        # A body that calls what a replay would see differently is refused, not only warned of
        # (`pikku_workflows.testing.strict_determinism`).
        self.refuse_nondeterminism = False
        self.limits: dict[str, Limit] = {}

    def add_workflow(self, definition: WorkflowDefinition) -> None:
        _check_name(definition.name, "workflow")
        existing = self.workflows.get(definition.name)
        if existing is not None and not _same_workflow(existing, definition):
            _raise_duplicate(existing, "workflow")
        if definition.name in self.step_functions:
            raise InvalidInput(f"{definition.name!r} is already registered as a step function.")
        for schedule in definition.schedules:
            owner = self.schedule_owners.get(schedule.name, definition.name)
            if owner != definition.name:
                raise InvalidInput(
                    f"Schedule {schedule.name!r} is declared by workflows {owner!r} and "
                    f"{definition.name!r}: give one of them another name=."
                )
        self.workflows[definition.name] = definition
        self.schedule_owners.update({spec.name: definition.name for spec in definition.schedules})

    def declared_schedules(self) -> list[ScheduleSpec]:
        """Every schedule declared in code, by name."""
        specs = [spec for definition in self.workflows.values() for spec in definition.schedules]
        return sorted(specs, key=lambda spec: spec.name)

    def add_step_function(self, definition: StepFunctionDefinition) -> None:
        _check_name(definition.name, "step function")
        existing = self.step_functions.get(definition.name)
        if existing is not None and not _same_origin(existing.func, definition.func):
            _raise_duplicate(existing, "step function")
        if definition.name in self.workflows:
            raise InvalidInput(f"{definition.name!r} is already registered as a workflow.")
        self.step_functions[definition.name] = definition

    def get_workflow(self, name: str) -> WorkflowDefinition:
        checked_text(name, "A workflow name", max_length=NAME_MAX_LENGTH)
        try:
            return self.workflows[name]
        except KeyError:
            raise WorkflowNotFound(name) from None

    @property
    def uses_concurrency(self) -> bool:
        """Whether any workflow has a concurrency rule: until one does, ending a run reads no
        slot (runs of a rule removed since still free theirs through recovery's sweep)."""
        return any(definition.concurrency for definition in self.workflows.values())

    def get_limit(self, name: str, owner: str = "") -> Limit:
        try:
            return self.limits[name]
        except KeyError:
            raise LimitNotFound(name, owner) from None

    def get_step_function(self, name: str) -> StepFunctionDefinition:
        try:
            return self.step_functions[name]
        except KeyError:
            raise StepFunctionNotFound(name) from None

    def is_workflow(self, name: str) -> bool:
        return name in self.workflows

    def close_names(self, name: str) -> list[str]:
        """The registered step functions and workflows whose names are close to `name` (a
        typo's likely meaning), closest first."""
        known = [*self.step_functions, *self.workflows]
        return difflib.get_close_matches(name, known, n=CLOSE_NAMES, cutoff=CLOSE_CUTOFF)

    def can_call(self, name: str) -> bool:
        """Whether a step may name `name`: a step function, or a workflow (a child run)."""
        return name in self.step_functions or name in self.workflows


def _check_name(name: object, what: str) -> None:
    checked_text(name, f"A {what} name", max_length=NAME_MAX_LENGTH)


def _raise_duplicate(existing: WorkflowDefinition | StepFunctionDefinition, what: str) -> None:
    raise InvalidInput(
        f"Duplicate {what} name {existing.name!r}: already registered by {_origin(existing)}."
    )


registry = Registry()


def workflow(
    name: str,
    *,
    planned_steps: Iterable[str] | None = None,
    retention: Mapping[str, Any] | None = None,
    concurrency: Concurrency | None = None,
    debounce: Debounce | None = None,
    limits: Iterable[str] = (),
    priority: Priority = 0,
    schedule: Schedule | Iterable[Schedule] | None = None,
    updates: dict[str, Callable[..., Any]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `func(wf, input)` as the workflow `name`.

    `retention` (`{"completed": "14d"}`) is how long its ended runs are kept, by status, before
    the timer loop purges them.
    `concurrency=pw.Concurrency(key=..., max_active=N, on_full=...)` admits at most N runs with
    the same key at once; the others wait `queued`, or are skipped, or replace the oldest.
    `debounce=pw.Debounce(key=..., quiet="5s", max_wait="1m")` collapses starts with the same
    key within `quiet` of each other into one queued run, the latest input winning.
    `limits=["openai"]` names limits (`pw.define_limit`) whose rates space the runs' starts.
    `priority` (whole seconds in -3600..3600, or `f(input)`) moves its queued runs ahead:
    admission order is start time less priority (docs/flow-control.md).
    `schedule` declares its schedules (one `pw.Schedule` or several; docs/schedules.md).
    `updates` maps each update name it takes (`pw.update`, `wf.receive`) to its validator
    `(input, state, payload)`.
    """
    limit_names = checked_limit_names(limits, f"Workflow {name!r}")
    priority = checked_priority(priority, name)
    steps = [validate_step_key(key) for key in planned_steps] if planned_steps is not None else None
    kept = parse_retention(retention, what=f"{name!r} retention") if retention is not None else {}
    schedules = _declared_schedules(name, schedule)
    checked_updates = _checked_updates(name, updates)
    if concurrency is not None and not isinstance(concurrency, Concurrency):
        raise InvalidInput(
            f"Workflow {name!r}: concurrency must be a pw.Concurrency(...), "
            f"not {type(concurrency).__name__}."
        )
    if debounce is not None and not isinstance(debounce, Debounce):
        raise InvalidInput(
            f"Workflow {name!r}: debounce must be a pw.Debounce(...), not {type(debounce).__name__}."
        )

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(func):
            raise InvalidInput(
                f"Workflow {name!r}: a body is a plain def (each pass replays it); make its "
                "step functions async def instead."
            )
        findings = nondeterministic_calls(func)
        if findings and registry.refuse_nondeterminism:
            raise InvalidInput(problems=[finding.describe(name) for finding in findings])
        registry.add_workflow(
            WorkflowDefinition(
                name,
                func,
                steps,
                WORKFLOW_KIND_DSL,
                code_fingerprint(func),
                nondeterminism=findings,
                retention=kept,
                concurrency=concurrency,
                debounce=debounce,
                limits=limit_names,
                priority=priority,
                schedules=schedules,
                updates=checked_updates,
            )
        )
        return func

    return register


def define_limit(
    name: str, *, rate: str | None = None, burst: int = 0, max_running: int | None = None
) -> Limit:
    """Define the limit `name`: the starts of every workflow, and the attempts of every step
    function, that name it in `limits=` are spaced to `rate` ("10/s", "600/m", "5/h", "100/d"),
    with up to `burst` more at once after a quiet spell; at most `max_running` of those step
    attempts execute at once. The rate is the default; a `WorkflowLimit` row (the admin,
    `PATCH limits/{name}/`) overrides it at run time. InvalidInput for a bad rate, burst or
    max_running."""
    limit = define(name, rate=rate, burst=burst, max_running=max_running)
    registry.limits[limit.name] = limit
    return limit


def _declared_schedules(
    workflow: str, schedule: Schedule | Iterable[Schedule] | None
) -> tuple[ScheduleSpec, ...]:
    declared = (
        [] if schedule is None else [schedule] if isinstance(schedule, Schedule) else list(schedule)
    )
    for item in declared:
        if not isinstance(item, Schedule):
            raise InvalidInput(
                f"Workflow {workflow!r}: schedule= takes pw.Schedule values, not {item!r:.60}."
            )
    specs = tuple(item.spec(workflow) for item in declared)
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise InvalidInput(
            f"Workflow {workflow!r} declares two schedules with one name: give each a name=."
        )
    return specs


def _checked_updates(
    workflow: str, updates: dict[str, Callable[..., Any]] | None
) -> dict[str, Callable[..., Any]]:
    if updates is None:
        return {}
    if not isinstance(updates, dict):
        raise InvalidInput(f"updates of {workflow!r} must be a dict of name -> validator.")
    for update, validator in updates.items():
        if not isinstance(update, str) or not update or not callable(validator):
            raise InvalidInput(
                f"updates of {workflow!r}: {update!r} must be a name with a callable validator."
            )
    return dict(updates)


def step_function(
    name: str,
    *,
    inline: bool = True,
    queue: str | None = None,
    timeout: int | str | None = None,
    atomic: bool = False,
    compensate: str | None = None,
    limits: Iterable[str] = (),
    rate: Rate | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `func(data, ctx)` as the step function `name`.

    `inline=False` runs it on a django-q2 worker (on the `queue` cluster when given), where
    `timeout` (ms, a duration string or a timedelta; at most a day) bounds each attempt: an
    alarm in the worker's main thread stops the attempt (a BaseException the function's own
    `except Exception:` cannot swallow) and records it failed with TIMEOUT. An inline run whose
    caller is not a main thread (a web request) hands such a step to a worker.

    An `async def` runs on the event loop of the pass (or the worker) that runs it; the members
    of a `wf.gather` that are async run concurrently there. Its `timeout` (allowed in-process
    too) cancels the attempt at an `await`; it cannot be `atomic`
    (docs/code-workflows.md, "Async step functions").

    `atomic=True` runs each attempt inside `transaction.atomic()` on the engine's database and
    commits its ORM writes with its result, once (docs/code-workflows.md, "Exactly once").
    `compensate` names the step function that undoes a succeeded step of this one when its run
    fails or is cancelled with `compensate=True`; it must be registered already
    (ImproperlyConfigured otherwise).

    `limits=["openai"]` names limits (`pw.define_limit`) whose rates space the attempts of every
    step and run naming them; `rate=pw.Rate(key=..., rate="2/s", burst=1)` spaces this
    function's own attempts per key. An attempt over either waits, its step pending, until the
    exact time it may start (docs/flow-control.md, "Step limits").
    """
    limit_names = checked_limit_names(limits, f"Step function {name!r}")
    if rate is not None and not isinstance(rate, Rate):
        raise InvalidInput(f"Step function {name!r}: rate= takes a pw.Rate, not {rate!r:.60}.")
    timeout_ms = parse_timeout(timeout) if timeout is not None else None
    if not isinstance(atomic, bool):
        raise InvalidInput(f"Step function {name!r}: atomic must be True or False.")
    if compensate is not None:
        _check_compensation(name, compensate)

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        is_async = inspect.iscoroutinefunction(func)
        if timeout_ms is not None and inline and not is_async:
            raise InvalidInput(
                f"Step function {name!r}: timeout is enforced only with inline=False or on an "
                "async def."
            )
        if atomic and is_async:
            raise InvalidInput(f"Step function {name!r}: {ASYNC_NOT_ATOMIC}")
        registry.add_step_function(
            StepFunctionDefinition(
                name, func, inline, queue, timeout_ms, atomic, compensate, limit_names, rate
            )
        )
        return func

    return register


def _check_compensation(name: str, compensate: object) -> None:
    checked_text(compensate, f"Step function {name!r}: compensate", max_length=NAME_MAX_LENGTH)
    if compensate in registry.step_functions:
        return
    known = difflib.get_close_matches(str(compensate), registry.step_functions, n=3)
    hint = f" Did you mean {', '.join(map(repr, known))}?" if known else ""
    raise ImproperlyConfigured(
        f"Step function {name!r}: compensate={compensate!r} names no registered step function; "
        f"register it before the step function that names it.{hint}"
    )


def graph_workflow(name: str, definition: Mapping[str, Any]) -> GraphDefinition:
    """Register the graph `definition` (JSON-serialisable; its shape is checked by `graph.definition`) as the workflow `name`.

    Its structure is validated now (InvalidInput lists every problem; more than
    `GRAPH_MAX_NODES` nodes is one); its step function names when a run first starts and in
    `manage.py check`, since functions may register later.
    """
    graph = parse_definition(definition, name=name, max_nodes=pikku_settings.GRAPH_MAX_NODES)
    registry.add_workflow(
        WorkflowDefinition(name, _graph_body, None, WORKFLOW_KIND_GRAPH, graph.hash, graph)
    )
    return graph


def graph_workflow_from_file(path: str | Path, *, name: str | None = None) -> GraphDefinition:
    """Register the graph in the JSON file `path`, named `name`, else by the file's top-level
    `name`, else by the file's stem (`onboarding.json` -> "onboarding")."""
    file_name, definition = read_definition_file(path)
    return graph_workflow(name or file_name or Path(path).stem, definition)


def graph_function_problems(graph: GraphDefinition, known: Registry) -> list[str]:
    """One problem per node whose function is neither a step function nor a workflow."""
    return function_problems(graph.nodes.values(), known.can_call)


def validate_graph_functions(graph: GraphDefinition, known: Registry, name: str = "") -> None:
    """Raise InvalidInput listing every node whose step function is not registered (the
    engine calls it when a graph run first starts; `manage.py check` reports the same)."""
    raise_problems(graph_function_problems(graph, known), name or None)


def _graph_body(wf: Any, input: Any) -> Any:
    raise InvalidInput(
        f"Workflow {wf.name!r} is a graph: the engine runs it with the graph planner, not a body."
    )


def autodiscover(extra_modules: Iterable[str] = ()) -> None:
    """Import `workflows.py` of every installed app, then each module in `extra_modules`."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("workflows")
    for module in extra_modules:
        import_module(module)
