"""The graph pass: a graph run's orchestrator pass, in the place of a body.

It plans from the run's steps (the pure planner of `pikku_workflows.graph`), starts every node
instance the plan fires through the same step paths as `wf.do` (a queued node dispatched to a
worker, an in-process one run here, a workflow started as a child run, an approval opened as by
`wf.approval`; attempts, retries, leases and fencing as for any step), drives the instances in flight that this pass can move, and plans
again, until the run completes, fails, or waits on something outside the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...conf import pikku_settings
from ...control_flow import RunParked
from ...exceptions import ApprovalExpired, GraphRunFailed, StepFailed
from ...graph import Fire, GraphDefinition, Planner, SettledItems
from ...models import WorkflowStep
from ...retry import RetryPolicy
from ...status import StepKind
from .approval_steps import approval_at
from .graph_steps import node_states, read_graph_steps
from .replay_pass import ReplayPass
from .steps import StepCall, drive_call, leaves_the_pass, named_call, queue_new_step
from .versions import run_graph_definition
from .workflow import Workflow, engine_statements


def run_graph(rp: ReplayPass, read: bool, wf: Workflow, trigger: Any) -> Any:
    """The body of every graph run: returns the run's output once the plan completes; raises
    GraphRunFailed on the plan's failure, RunParked while it waits (VersionNotFound when the
    definition it started on is no longer stored). `read`: the pass's caller did not know the
    steps; they are read here, once the definition says which for_each nodes to count."""
    with engine_statements():
        definition = run_graph_definition(rp.run)
        settled: dict[str, SettledItems] = {}
        if read:
            steps, settled = read_graph_steps(rp.run.pk, definition)
            rp.steps.update(steps)
        return _GraphPass(rp, definition, trigger, settled).run()


class _GraphPass:
    """One pass over a graph run. `parked`: instances this pass already found waiting on
    something outside it (a worker, a timer, a child run); they are not driven again."""

    def __init__(
        self,
        rp: ReplayPass,
        definition: GraphDefinition,
        trigger: Any,
        settled: dict[str, SettledItems],
    ) -> None:
        self.rp = rp
        self.definition = definition
        self.trigger = trigger
        self.settled = settled
        self.parked: set[str] = set()

    def run(self) -> Any:
        steps = node_states(self.rp.steps.values())
        max_items = pikku_settings.MAX_FAN_OUT
        planner = Planner(
            self.definition, self.trigger, steps, max_items=max_items, settled_items=self.settled
        )
        while True:
            decided = planner.plan()
            if decided.failure is not None:
                raise GraphRunFailed(decided.failure)
            if decided.completed:
                return decided.output
            waiting = [key for key in decided.in_flight if key not in self.parked]
            if decided.fire:
                self._start(decided.fire, last_of_pass=not waiting)
            elif waiting:
                self._drive_in_flight(waiting)
            else:
                raise RunParked(decided.in_flight[0] if decided.in_flight else "")
            # Only the instances this round started or drove can have moved.
            moved = [fire.key for fire in decided.fire] + list(decided.in_flight)
            planner.record(node_states(self.rp.steps[key] for key in moved if key in self.rp.steps))

    def _start(self, fires: tuple[Fire, ...], *, last_of_pass: bool) -> None:
        """Start every fired instance: queued ones first, each recorded pending and handed to
        the queue (their workers start while this pass opens approvals and runs the in-process
        ones, in parallel).

        When nothing else is left for this pass, the last queued instance goes the way of any
        `wf.do`: run in place when the pass runs on a worker of its cluster with budget left,
        else the single-statement dispatch, which may hand the run lease back in the same write
        (so it must be the pass's last write) and ends the pass.
        """
        approvals = [(f.key, f.from_key, f.approval) for f in fires if f.approval is not None]
        calls = [self._fire_call(fire) for fire in fires if fire.approval is None]
        queued = [call for call in calls if leaves_the_pass(self.rp, call)]
        local = [call for call in calls if not leaves_the_pass(self.rp, call)]
        alone = not local and not approvals and last_of_pass
        last = queued.pop() if queued and alone else None
        for call in queued:
            self._drive(call, queue_new_step)
        for key, from_key, options in approvals:
            self._approval(key, from_key, options)
        for call in local:
            self._drive(call)
        if last is not None:
            self._drive(last)

    def _drive_in_flight(self, keys: list[str]) -> None:
        """Move what this pass can of the instances in flight: a due retry, a lapsed lease, a
        pending step whose message was lost, a child run that ended, an approval re-armed by
        retry_run (a pending one only parks again)."""
        for key in keys:
            step = self.rp.steps[key]
            if step.kind == StepKind.APPROVAL:
                self._approval(key, step.from_step_key, step.data or {})
            else:
                self._drive(self._recorded_call(step))

    def _drive(
        self, call: StepCall, start: Callable[[ReplayPass, StepCall], Any] = drive_call
    ) -> None:
        try:
            start(self.rp, call)
        except RunParked:
            self.parked.add(call.key)
        except StepFailed:
            pass  # exhausted: the next plan fails the node (after its on_error handler)

    def _approval(self, key: str, from_key: str | None, options: dict[str, Any]) -> None:
        """An approval node's instance, through the steps of `wf.approval`: its step keeps the
        options it was opened with. The outcome's status is the branch it took."""
        try:
            approval_at(self.rp, key, from_key, options, data=options)
        except RunParked:
            self.parked.add(key)
        except ApprovalExpired:
            pass  # expired with on_expire "fail": the next plan fails the node

    def _fire_call(self, fire: Fire) -> StepCall:
        node = self.definition.node(fire.node)
        assert node.function is not None
        policy = node.retry_policy(pikku_settings.DEFAULT_STEP_RETRIES)
        return named_call(fire.key, fire.from_key, node.function, fire.input, policy)

    def _recorded_call(self, step: WorkflowStep) -> StepCall:
        """The call an instance was recorded with: its function, data and retry options as
        stored (a node's options changed in a newer definition do not reach running rows)."""
        policy = RetryPolicy.from_stored(step.retries, step.retry_delay)
        name = step.function_name or ""
        return named_call(step.step_key, step.from_step_key, name, step.data, policy)
