"""``elasticps stop``: stop a local job the way Ctrl-C in its terminal would.

It sends SIGTERM to the job's launcher (found through ``WORKDIR/job.json``, and checked to be
the same process by its start time), which stops every child (SIGTERM, then SIGKILL after its
``--grace``), saves the status page and exits; then it waits for the launcher to be gone. The
exit code says what happened: :data:`STOPPED`, :data:`NOT_RUNNING` (nothing to stop: the job
had ended, or never started), :data:`STILL_RUNNING` (the launcher outlived ``timeout``); a
work directory that holds no job is an error (1, like every ConfigError).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterator

from elasticps.errors import ConfigError
from elasticps.launch.local_job import LocalJob

STOPPED = 0
NOT_RUNNING = 3
STILL_RUNNING = 4


def stop_job(job: LocalJob, timeout: float, say: Callable[[str], None]) -> int:
    if not job.launcher_alive() or job.launcher_pid is None:
        say(f"elasticps stop: job {job.job_name} in {job.workdir} is not running "
            f"({job.state()}); nothing to stop")
        return NOT_RUNNING
    pid = job.launcher_pid
    with _exit_watch(pid) as exited:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass  # it ended on its own just now: exited() says so at once
        except PermissionError as exc:
            raise ConfigError(f"job {job.job_name}'s launcher (pid {pid}) is another user's "
                              "process; only its owner can stop it") from exc
        say(f"elasticps stop: asked the launcher of job {job.job_name} (pid {pid}) to stop; "
            f"waiting up to {timeout:g}s for it and every process of the job to exit")
        if not exited(timeout):
            say(f"elasticps stop: job {job.job_name}'s launcher (pid {pid}) still runs after "
                f"{timeout:g}s; wait longer (--timeout) or end it with `kill -KILL {pid}` (its "
                "processes then stop by themselves)")
            return STILL_RUNNING
    say(f"elasticps stop: job {job.job_name} stopped ({job.state()}); every process of the "
        f"job has exited. Its page: elasticps ui --workdir {job.workdir}")
    return STOPPED


@contextlib.contextmanager
def _exit_watch(pid: int) -> Iterator[Callable[[float], bool]]:
    """Yields ``exited(timeout) -> bool``. A pidfd, opened before the signal is sent, follows
    this very process (a pid reused meanwhile cannot fool it); where there is none (not
    Linux), the pid is polled."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        yield lambda timeout: _poll_exit(pid, timeout)
        return
    try:
        yield lambda timeout: bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _poll_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)  # no pidfd: nothing to wait on but the pid
    return False
