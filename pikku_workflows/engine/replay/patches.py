"""Patch markers (`wf.patched`, `wf.deprecate_patch`): a code change that would make replay ask
for other steps goes behind a patch, so runs whose history passed that point on older code keep
the old branch while runs that reach it on the new code take the new one.

A run takes the new branch when it reaches the patch with no recorded step ahead of it (nothing
recorded that this pass has not replayed yet): a marker step `__patch:<id>` is recorded, and
every later pass finds it. A run whose history holds steps this pass has not reached yet passed
the patch on code without it: False, and nothing is recorded.
"""

from __future__ import annotations

from ...status import StepKind, StepStatus
from ...step_keys import PATCH_PREFIX, handled_step_key, is_patch_marker_key, patch_marker_key
from ...validation import KEY_MAX_LENGTH, checked_text
from .attempts import create_next_step
from .replay_pass import ReplayPass


def patch_key(patch_id: str) -> str:
    checked_text(patch_id, "A patch id", max_length=KEY_MAX_LENGTH - len(PATCH_PREFIX))
    return patch_marker_key(patch_id)


def run_patched(rp: ReplayPass, patch_id: str, *, record: bool = True) -> bool:
    """Whether this run takes the patch's new branch; the same answer for every call in a pass.
    `record=False` (the replay check) decides without writing the marker."""
    key = patch_key(patch_id)
    if key in rp.patches:
        return rp.patches[key]
    if key in rp.steps:
        decision = True
    elif history_ahead(rp):
        decision = False
    else:
        if record:
            _record_marker(rp, key, patch_id)
        decision = True
    rp.patches[key] = decision
    return decision


def history_ahead(rp: ReplayPass) -> bool:
    """Whether the run recorded steps this pass has not replayed yet: it is replaying what
    older code did past this point. Patch markers are not steps of the body (code that dropped
    a patch leaves its markers behind), and an `on_error` handler belongs to its step."""
    for key in rp.steps:
        if key in rp.reached or is_patch_marker_key(key):
            continue
        if handled_step_key(key) in rp.reached:
            continue
        return True
    return False


def _record_marker(rp: ReplayPass, key: str, patch_id: str) -> None:
    marker = {"patch": patch_id}
    rp.steps[key] = create_next_step(
        rp,
        key,
        status=StepStatus.SUCCEEDED,
        kind=StepKind.PATCH,
        data=marker,
        result=marker,
        retries=0,
        attempt_limit=1,
        from_step_key=rp.last_key,
    )
