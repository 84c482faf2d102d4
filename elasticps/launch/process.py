"""One role process of a local job: spawned in its own process group, logged to a file that
only its owner can read (0600, in a 0700 directory).

Each child gets a new session (``start_new_session``), so a terminal's Ctrl-C reaches only the
launcher, which then stops the children in order; signals go to the child's whole group so a
role's own helpers die with it. Because no signal of the launcher's group reaches them, each
``elasticps`` child is also told the launcher's pid (``--exit-with-parent``, see
:mod:`elasticps.launch.parent_watch`) and stops gracefully when the launcher dies, even by
SIGKILL. The parent-death signal follows the *thread* that forked the child, so children must
be started from one long-lived thread: the supervisor loop's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from elasticps.errors import CONFIG_EXIT_CODE
from elasticps.launch.parent_watch import with_parent
from elasticps.private_files import make_private_dir, open_private


@dataclass(frozen=True)
class RoleSpec:
    """How to run one role process. ``restart``: bring it back when it exits (as Kubernetes
    restarts a pserver or master pod); otherwise its exit is final."""

    role: str
    index: int
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    restart: bool = False

    @property
    def name(self) -> str:
        """``master`` (the first master process), ``master 1`` (a standby), ``pserver 0``..."""
        return self.role if self.role == "master" and self.index == 0 \
            else f"{self.role} {self.index}"


def describe_exit(code: int) -> str:
    """``exit code 1`` or ``signal SIGKILL``."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    if code == CONFIG_EXIT_CODE:
        return f"exit code {code}, a configuration error"
    return f"exit code {code}"


class RoleProcess:
    """A running (or finished) child. Not thread-safe: the supervisor loop owns it."""

    def __init__(self, spec: RoleSpec) -> None:
        self.spec = spec
        self.popen: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.exit_code: int | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def start(self) -> None:
        log = None
        if self.spec.log_path is not None:
            make_private_dir(self.spec.log_path.parent)
            # The child owns it after Popen. 0600: a log may hold the user's data.
            log = os.fdopen(open_private(self.spec.log_path, os.O_WRONLY | os.O_APPEND), "ab")
            if self.restarts:
                log.write(f"\n===== restart {self.restarts} of {self.spec.name} =====\n".encode())
                log.flush()
        try:
            self.popen = subprocess.Popen(
                list(with_parent(self.spec.argv, os.getpid())),
                env=self.spec.env,
                stdin=subprocess.DEVNULL,
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if log is not None:
                log.close()
        self.exit_code = None
        self.started_at = time.monotonic()

    def poll(self) -> int | None:
        """The exit code once the process has ended (negative: killed by that signal)."""
        if self.popen is None:
            return self.exit_code
        if self.exit_code is None:
            self.exit_code = self.popen.poll()
        return self.exit_code

    @property
    def running(self) -> bool:
        return self.popen is not None and self.poll() is None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the child's process group (it leads its own session)."""
        if self.popen is None or self.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def log_tail(self, lines: int = 30) -> str:
        if self.spec.log_path is None or not self.spec.log_path.exists():
            return ""
        with open(self.spec.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])
