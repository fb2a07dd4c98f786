"""How the admin shows runs: durations, badges, JSON, errors, run links and what a run waits on.

Small functions of values (no queries), shared by the list, the run page and the confirmation
pages.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..step_keys import compensated_step_key, handled_step_key, suspend_reason
from ..waiting import AdmissionReason, WaitingKind, waiting_for_a_worker

ADMIN_CSS = "pikku_workflows/admin.css"
ADMIN_JS = "pikku_workflows/admin.js"
EMPTY = "-"


def format_duration(delta: timedelta) -> str:
    """`850 ms`, `4.2 s`, `12 s`, `3 min 5 s`, `2 h 3 min`, `4 d 2 h`."""
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 1:
        return f"{int(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def format_moment(at: datetime | str, now: datetime | None = None) -> SafeString:
    """`in 4.0 s` or `3 min ago`, with the exact time as a tooltip."""
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    now = now or timezone.now()
    distance = abs(at - now)
    # "in 1 h", not "in 59 min 59 s" a moment after a one-hour timer was set.
    for at_least, unit in ((timedelta(minutes=10), 60), (timedelta(seconds=10), 1)):
        if distance >= at_least:
            distance = timedelta(seconds=round(distance.total_seconds() / unit) * unit)
            break
    relative = (
        f"in {format_duration(distance)}" if at >= now else f"{format_duration(distance)} ago"
    )
    exact = timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S %Z")
    return format_html('<time datetime="{}" title="{}">{}</time>', at.isoformat(), exact, relative)


def status_badge(status: str, label: str | None = None) -> SafeString:
    label = label if label is not None else status.capitalize()
    return format_html('<span class="pikku-badge pikku-status-{}">{}</span>', status, label)


def pretty_json(value: Any, tag: str = "pre") -> SafeString | str:
    """`value` as indented JSON in a <pre>; `tag="code"` where a <pre> is not allowed (a <p>)."""
    if value is None:
        return EMPTY
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return format_html('<{} class="pikku-json">{}</{}>', tag, text, tag)


def pretty_error(error: Any, omit: tuple[str, ...] = ()) -> SafeString | str:
    """An error dict as people read it: code and message first, then the other fields (less
    `omit`), and the traceback folded away in a <details>. Anything else is shown as JSON."""
    if not error:
        return EMPTY
    if not isinstance(error, dict) or not isinstance(error.get("message", ""), str):
        return pretty_json(error)
    shown_first = ("code", "message", "traceback", *omit)
    rest = {k: v for k, v in error.items() if k not in shown_first}
    parts = [
        format_html(
            '<div class="pikku-error-head"><code class="pikku-error-code">{}</code> '
            '<span class="pikku-error-message">{}</span></div>',
            error.get("code") or "ERROR",
            error.get("message", ""),
        )
    ]
    if rest:
        parts.append(
            format_html(
                '<dl class="pikku-error-fields">{}</dl>',
                format_html_join("", "<dt>{}</dt><dd>{}</dd>", _error_fields(rest)),
            )
        )
    traceback = error.get("traceback")
    if isinstance(traceback, str) and traceback:
        parts.append(
            format_html(
                '<details class="pikku-traceback"><summary>Traceback</summary>'
                '<pre class="pikku-json">{}</pre></details>',
                traceback,
            )
        )
    return format_html(
        '<div class="pikku-error">{}</div>', format_html_join("", "{}", [(p,) for p in parts])
    )


def _error_fields(fields: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (key, value if isinstance(value, str) else json.dumps(value, default=str))
        for key, value in fields.items()
    ]


def short_id(value: uuid.UUID | str) -> str:
    return str(value)[:8]


def run_change_url(admin_site: admin.AdminSite, run_id: uuid.UUID | str) -> str:
    return reverse(f"{admin_site.name}:pikku_workflows_workflowrun_change", args=[run_id])


def run_link(admin_site: admin.AdminSite, run_id: uuid.UUID | str) -> SafeString:
    return format_html(
        '<a class="pikku-run-link" href="{}" title="{}">{}</a>',
        run_change_url(admin_site, run_id),
        str(run_id),
        short_id(run_id),
    )


# Who may send the signal a run waits for (docs/security-and-limits.md), as its tooltip says.
SIGNAL_SENDERS = (
    "Sent with pw.send_signal or POST runs/<id>/signals/<name>/ by the run's starter or a "
    "holder of “Can send signals to workflow runs”"
)
# What the run list calls each kind of wait, in plain words (leases are the engine's business).
WAIT_LABELS: dict[str, str] = {WaitingKind.STEP: "queued", WaitingKind.LEASE: "worker lost"}


def describe_waiting(
    admin_site: admin.AdminSite,
    waiting: dict[str, Any] | None,
    now: datetime | None = None,
    *,
    since: datetime | None = None,
    workers_seen: bool = True,
) -> SafeString | str:
    """The `waiting_on` of a run summary as a line of HTML: its kind, its step, and when or whom.
    `since`: when the step it waits on started running, if it runs; `workers_seen`: whether a
    pikku_worker was seen lately (a run waiting for its pass says so when none was)."""
    if not waiting:
        return EMPTY
    kind = str(waiting.get("kind", ""))
    if kind == WaitingKind.PASS:
        return format_html(
            '<span class="pikku-wait pikku-wait-{}">{}</span>',
            kind,
            waiting_for_a_worker(workers_seen),
        )
    label = WAIT_LABELS.get(kind, kind)
    detail: SafeString | str = ""
    if kind in (WaitingKind.TIMER, WaitingKind.RETRY) and waiting.get("until"):
        prefix = f"attempt {waiting['attempt']} " if waiting.get("attempt") else ""
        detail = format_html("{}{}", prefix, format_moment(waiting["until"], now))
    elif kind == WaitingKind.STEP and waiting.get("lease_expires_at"):
        label = "running"
        if since is not None:
            detail = f"for {format_duration((now or timezone.now()) - since)}"
    elif kind == WaitingKind.STEP:
        detail = "waiting for a worker"
    elif kind == WaitingKind.LEASE and waiting.get("lease_expires_at"):
        detail = format_html(
            "its worker went silent {}; another worker runs it again",
            format_moment(waiting["lease_expires_at"], now),
        )
    elif kind == WaitingKind.CHILD and waiting.get("child_run_id"):
        detail = format_html("run {}", run_link(admin_site, waiting["child_run_id"]))
    elif kind == WaitingKind.SUSPEND:
        detail = waiting.get("reason") or ""
    elif kind == WaitingKind.ADMISSION:
        detail = admission_detail(admin_site, waiting, now)
    elif kind == WaitingKind.SIGNAL:
        detail = format_html(
            '<span title="{}">{}</span>', SIGNAL_SENDERS, waiting.get("signal", "")
        )
    elif kind == WaitingKind.APPROVAL and waiting.get("until"):
        detail = format_html("due {}", format_moment(waiting["until"], now))
    step_key = waiting.get("step_key")
    return format_html(
        '<span class="pikku-wait pikku-wait-{}">{}</span>{}{}',
        kind,
        label,
        format_html(' <code class="pikku-step-key">{}</code>', step_key) if step_key else "",
        format_html(' <span class="pikku-wait-detail">{}</span>', detail) if detail else "",
    )


def admission_detail(
    admin_site: admin.AdminSite, waiting: dict[str, Any], now: datetime | None = None
) -> SafeString:
    """Why a queued run waits, in words: "key tenant:7 is full, held by run 1a2b…", and until
    when a time holds it."""
    reason = AdmissionReason(waiting.get("reason", AdmissionReason.CONCURRENCY))
    held = waiting.get("held_by")
    holders = format_html_join(", ", "run {}", ((run_link(admin_site, pk),) for pk in held or []))
    key = waiting.get("key")
    return format_html(
        "{}{}{}{}",
        format_html("key <code>{}</code>: ", key) if key else "",
        reason.label,
        format_html(", held by {}", holders) if held else "",
        format_html(", not before {}", format_moment(waiting["until"], now))
        if waiting.get("until")
        else "",
    )


def describe_step_key(step_key: str) -> SafeString:
    """A step key as what it is: the body's own key, or the engine's (`charge:onError` is the
    on_error handler of `charge`, `charge:compensate` undoes it; `__suspend:<reason>` is a
    `wf.suspend(reason)`)."""
    reason = suspend_reason(step_key)
    if reason is not None:
        return format_html(
            '<span class="pikku-engine-key" title="{}">wf.suspend</span> <q>{}</q>',
            step_key,
            reason,
        )
    handled = handled_step_key(step_key)
    if handled is not None:
        return format_html(
            '<span class="pikku-engine-key" title="{}">on_error of</span> '
            '<code class="pikku-step-key">{}</code>',
            step_key,
            handled,
        )
    undone = compensated_step_key(step_key)
    if undone is not None:
        return format_html(
            '<span class="pikku-engine-key" title="{}">compensation of</span> '
            '<code class="pikku-step-key">{}</code>',
            step_key,
            undone,
        )
    return format_html('<code class="pikku-step-key">{}</code>', step_key)
