"""Tie a role process's life to the launcher that started it.

``elasticps run`` starts every role in its own session, so that a terminal's Ctrl-C reaches only
the launcher, which then stops the roles in order. The price: when the launcher itself dies
without that chance (SIGKILL, the OOM killer, a closed terminal), nothing reaches the roles and
they run on as orphans, holding ports and CPU. So the launcher starts each role with the hidden
option ``--exit-with-parent=PID`` (its own pid; not part of the ``PADDLE_*`` contract: a role
started by anything else, Kubernetes or a shell, has no launcher to follow), and ``elasticps``
calls :func:`exit_with_parent` before it dispatches to the role:

- on Linux, ``prctl(PR_SET_PDEATHSIG)``: the kernel signals us when our parent dies. It fires
  when the parent *thread* that forked us exits, so the launcher forks from one long-lived
  thread (its supervisor loop). A dying multithreaded launcher hands its children from thread
  to thread as its threads exit, and every hand-over signals again (2 deliveries from a parent
  with 5 threads, measured), while a role must see ONE SIGTERM (a trainer takes a second one as
  "stop the hard way"). So the kernel's signal is a private real-time one, relayed once as
  SIGTERM by a handler installed here;
- always, as well, a daemon thread polls ``os.getppid()`` and sends us SIGTERM once the parent
  is gone: the only way off Linux or where ``prctl`` fails, and a backstop where it works (a
  kernel signal can be lost to a signal mask inherited from whoever started the launcher, so the
  relay unblocks it, but one lost delivery would leave an orphan for good). One guard makes the
  two deliver a single SIGTERM between them.

Either way the parent may have died before the arrangement was made (we were already handed to
init or a subreaper, and no signal will ever come), so :func:`exit_with_parent` then compares
``os.getppid()`` with the pid it was given; the caller exits at once when they differ.

Roles turn SIGTERM into a graceful exit: the master resigns, a pserver writes its final
checkpoint and frees its slot, a trainer hands its task back.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)

OPTION = "--exit-with-parent"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def with_parent(argv: Sequence[str], parent_pid: int) -> tuple[str, ...]:
    """``argv`` of a ``python -m elasticps ...`` command with ``--exit-with-parent=PID`` put
    right after ``elasticps`` (it is an option of the command, not of the role). Any other
    command is returned unchanged."""
    args = tuple(argv)
    for i in range(len(args) - 1):
        if args[i] == "-m" and args[i + 1] == "elasticps":
            return (*args[:i + 2], f"{OPTION}={parent_pid}", *args[i + 2:])
    return args


def exit_with_parent(parent_pid: int, *, signum: int = signal.SIGTERM,
                     use_prctl: bool = True, poll_s: float = 0.5) -> bool:
    """Arrange for ``signum`` to reach this process once, when ``parent_pid`` is no longer its
    parent. Call it from the main thread (signal handlers live there). False when the parent
    is already gone: exit now. ``poll_s`` paces the watcher thread."""
    if os.getppid() != parent_pid:
        return False  # nothing to arrange: the caller exits (the watcher would signal it)
    once = _Once(parent_pid, signum)
    if use_prctl:
        _relay_parent_death(once)
    _watch_parent(parent_pid, once, poll_s)
    return os.getppid() == parent_pid


class _Once:
    """Sends ``signum`` to this process the first time either mechanism notices the parent is
    gone, and never again."""

    def __init__(self, parent_pid: int, signum: int) -> None:
        self.parent_pid = parent_pid
        self.signum = signum
        self._lock = threading.Lock()
        self._sent = False

    def fire(self, how: str) -> None:
        # Not blocking: the kernel's relay runs in the main thread between bytecodes and must
        # never wait on a lock the watcher thread holds at that moment.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._sent:
                return  # another hand-over inside the dying launcher, or the other mechanism
            self._sent = True
        finally:
            self._lock.release()
        log.warning("The launcher (pid %d) is gone (%s); this process stops.",
                    self.parent_pid, how)
        os.kill(os.getpid(), self.signum)


def _relay_parent_death(once: _Once) -> bool:
    """Have the kernel send a private signal when the parent dies, relayed once as the
    requested one. False where that cannot be arranged (not Linux, not the main thread, no
    prctl)."""
    if not sys.platform.startswith("linux") \
            or threading.current_thread() is not threading.main_thread():
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    private = signal.SIGRTMIN + 1  # glibc keeps the ones below SIGRTMIN; no role uses this one

    def relay(_signum: int, _frame: object) -> None:
        once.fire("kernel parent-death signal")

    previous = signal.signal(private, relay)
    # A mask is inherited through fork and exec: whoever started the launcher may have blocked
    # these, and a blocked signal stays pending for ever.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {private, once.signum})
    if prctl(_PR_SET_PDEATHSIG, int(private), 0, 0, 0) != 0:
        signal.signal(private, previous)
        log.warning("prctl(PR_SET_PDEATHSIG) failed (%s); watching the parent from a thread.",
                    os.strerror(ctypes.get_errno()))
        return False
    return True


def _watch_parent(parent_pid: int, once: _Once, poll_s: float) -> None:
    def watch() -> None:
        idle = threading.Event()  # never set: a plain wait between polls
        while os.getppid() == parent_pid:
            idle.wait(poll_s)
        once.fire("its parent pid changed")

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
