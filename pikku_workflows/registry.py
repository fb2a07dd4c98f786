"""The registry of workflows and step functions, filled by decorators at import time (pure)."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import import_module
from types import CodeType
from typing import Any

from .durations import parse_duration
from .exceptions import InvalidInput, StepFunctionNotFound, WorkflowNotFound
from .step_keys import RESERVED_KEY_CHARACTERS

WORKFLOW_KIND_DSL = "dsl"


def validate_step_key(key: object) -> str:
    """A user step key is a non-empty string without `#`, `:`, `[` or `]` (reserved by the engine)."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidInput(f"A step key must be a non-empty string, not {key!r}.")
    if RESERVED_KEY_CHARACTERS.search(key):
        raise InvalidInput(f"Step key {key!r} uses a reserved character (# : [ ]).")
    return key


@dataclass(frozen=True)
class StepFunctionDefinition:
    name: str
    func: Callable[..., Any]
    inline: bool = True
    queue: str | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    func: Callable[..., Any]
    planned_steps: list[str] | None = None
    kind: str = WORKFLOW_KIND_DSL
    code_version: str = field(default="")


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


class Registry:
    def __init__(self) -> None:
        self.workflows: dict[str, WorkflowDefinition] = {}
        self.step_functions: dict[str, StepFunctionDefinition] = {}

    def add_workflow(self, definition: WorkflowDefinition) -> None:
        self._check_name(definition.name, definition.func, self.workflows, "workflow")
        if definition.name in self.step_functions:
            raise InvalidInput(f"{definition.name!r} is already registered as a step function.")
        self.workflows[definition.name] = definition

    def add_step_function(self, definition: StepFunctionDefinition) -> None:
        self._check_name(definition.name, definition.func, self.step_functions, "step function")
        if definition.name in self.workflows:
            raise InvalidInput(f"{definition.name!r} is already registered as a workflow.")
        self.step_functions[definition.name] = definition

    @staticmethod
    def _check_name(name: object, func: Callable[..., Any], table: dict, what: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput(f"A {what} name must be a non-empty string, not {name!r}.")
        existing = table.get(name)
        if existing is not None and not _same_origin(existing.func, func):
            raise InvalidInput(
                f"Duplicate {what} name {name!r}: already registered by "
                f"{existing.func.__module__}.{existing.func.__qualname__}."
            )

    def get_workflow(self, name: str) -> WorkflowDefinition:
        try:
            return self.workflows[name]
        except KeyError:
            raise WorkflowNotFound(name) from None

    def get_step_function(self, name: str) -> StepFunctionDefinition:
        try:
            return self.step_functions[name]
        except KeyError:
            raise StepFunctionNotFound(name) from None

    def is_workflow(self, name: str) -> bool:
        return name in self.workflows


registry = Registry()


def workflow(
    name: str, *, planned_steps: Iterable[str] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `func(wf, input)` as the workflow `name`."""
    steps = [validate_step_key(key) for key in planned_steps] if planned_steps is not None else None

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        registry.add_workflow(
            WorkflowDefinition(name, func, steps, WORKFLOW_KIND_DSL, code_fingerprint(func))
        )
        return func

    return register


def step_function(
    name: str, *, inline: bool = True, queue: str | None = None, timeout: int | str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `func(data, ctx)` as the step function `name`.

    `inline=False` runs it on a django-q2 worker (on the `queue` cluster when given), where
    `timeout` (ms or a duration string) bounds each attempt.
    """
    timeout_ms = parse_duration(timeout) if timeout is not None else None
    if timeout_ms is not None and inline:
        raise InvalidInput(f"Step function {name!r}: timeout is enforced only with inline=False.")

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        registry.add_step_function(StepFunctionDefinition(name, func, inline, queue, timeout_ms))
        return func

    return register


def autodiscover(extra_modules: Iterable[str] = ()) -> None:
    """Import `workflows.py` of every installed app, then each module in `extra_modules`."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("workflows")
    for module in extra_modules:
        import_module(module)
