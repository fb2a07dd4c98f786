"""Process plumbing for `pikku_worker`: forked django-q2 processes die with their parent, hand
back their step leases when terminated, and count the steps they run for the worker's row."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any

from django.db import connections

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
# How long a terminated process spends handing back leases and waiting for its own children.
RELEASE_SECONDS = 5
# How long a terminated worker lets the step it runs in place finish (the next one goes to the
# queue) before it hands that step's lease back too and exits.
HANDOVER_SECONDS = 10
# Forked processes counting their steps in flight: (pid, count) pairs in shared memory, so the
# main process can sum them; a slot whose process died is free again (its count with it).
STEP_COUNT_SLOTS = 256
_main_pid = 0
_forking_pid = 0
_step_counts: Any = None
_own_slot: int | None = None


def arrange_forked_children() -> None:
    """From now on every fork of this process closes DB connections first (a socket must not be
        shared across processes), the child dies with its parent and releases leases on SIGTERM, and
        the processes log a database or queue outage once between them, and recovery's hold on running
    steps in place (while it takes work over) reaches them all."""
    global _main_pid, _step_counts
    from .engine.replay.queued import in_place_hold
    from .engine.store.leases import heartbeat
    from .outages import outages

    outages.share_across_forks()
    in_place_hold.share_across_forks()
    _main_pid = os.getpid()
    _step_counts = multiprocessing.Array("q", 2 * STEP_COUNT_SLOTS)
    heartbeat.count_steps = _count_steps
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def steps_in_flight() -> int:
    """The attempts this worker's processes run now (0 before `arrange_forked_children`)."""
    if _step_counts is None:
        return 0
    with _step_counts.get_lock():
        pairs = list(zip(_step_counts[0::2], _step_counts[1::2], strict=True))
    return sum(max(count, 0) for pid, count in pairs if pid and _alive(pid))


def _before_fork() -> None:
    global _forking_pid
    _forking_pid = os.getpid()
    connections.close_all()
    if _forking_pid != _main_pid and threading.current_thread() is threading.main_thread():
        # django-q2's sentinel restores SIG_DFL for SIGTERM after we set our handler in it. Dying
        # at once on a SIGTERM sent to the whole process group, it would SIGKILL (parent-death
        # signal) its workers before they hand their step leases back: let it wait for them.
        signal.signal(signal.SIGTERM, _release_leases_and_exit)


def _after_fork_in_child() -> None:
    _die_with(_forking_pid)
    signal.signal(signal.SIGTERM, _release_leases_and_exit)
    _take_step_count_slot()


def _take_step_count_slot() -> None:
    global _own_slot
    _own_slot = None
    if _step_counts is None:
        return
    with _step_counts.get_lock():
        for slot in range(STEP_COUNT_SLOTS):
            pid = _step_counts[2 * slot]
            if not pid or not _alive(pid):
                _step_counts[2 * slot], _step_counts[2 * slot + 1] = os.getpid(), 0
                _own_slot = slot
                return


def _count_steps(delta: int) -> None:
    if _step_counts is not None and _own_slot is not None:
        with _step_counts.get_lock():
            _step_counts[2 * _own_slot + 1] += delta


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _die_with(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
        return
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def _stop_dying_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 0)


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(1)
    os._exit(1)


def _release_leases_and_exit(signum: int, frame: Any) -> None:
    # Our parent may end first (a SIGTERM to the whole process group reaches it too): its death
    # must not SIGKILL us mid-release. We exit within HANDOVER_SECONDS + RELEASE_SECONDS.
    _stop_dying_with_parent()
    # The handler returns at once: the message this process handles goes on to the end of the
    # step it runs, and hands the next one to the queue; a thread exits the process after.
    threading.Thread(target=_hand_over_and_exit, args=(signum,), daemon=True).start()


def _hand_over_and_exit(signum: int) -> None:
    from .engine.replay.queued import shut_down_gracefully
    from .engine.store.leases import heartbeat

    deadline = time.monotonic() + HANDOVER_SECONDS + RELEASE_SECONDS
    shut_down_gracefully(HANDOVER_SECONDS)
    # Release from this thread (its own connection): the main one may be mid-query.
    held = heartbeat.hand_back_steps()
    if held:
        releaser = threading.Thread(target=_release, args=(held,), daemon=True)
        releaser.start()
        releaser.join(RELEASE_SECONDS)
    # The sentinel: its workers got the signal too; exiting first would SIGKILL them mid-release.
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(128 + signum)


def _release(held: list[tuple[Any, int]]) -> None:
    from .engine.store.leases import release_step_leases

    try:
        release_step_leases(held)
    except Exception:
        logger.exception("pikku_workflows: could not release step leases on shutdown")
    finally:
        connections.close_all()
