"""The local backend of :func:`elasticps.launch_job`: ``elasticps run`` in a child process.

The launcher's stdout contract is what the handle reads: the line ``status: URL`` names the
status page, the exit code says how the job ended (0, 1, 2 when a role stopped on a
configuration error, or 130 when stopped) and
``WORKDIR/summary.json`` holds the summary once it succeeded.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elasticps.cluster.spec import Job, sparse_policies_env
from elasticps.errors import ConfigError
from elasticps.jobs.api import JobHandle, JobResult

DEFAULT_WORKDIR = "elasticps-job"
STATUS_PREFIX = "status: "  # the launcher's line naming the status page


class LocalJobHandle(JobHandle):
    """A job run by ``elasticps run`` (``argv``) in a child process of this one."""

    def __init__(self, argv: Sequence[str], workdir: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.workdir = workdir
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self._url: str | None = None
        self._url_ready = threading.Event()
        self._reader = threading.Thread(target=self._pump, name="elasticps-launcher-out",
                                        daemon=True)
        self._reader.start()
        atexit.register(self.wait)  # this process does not end before its job does

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(STATUS_PREFIX) and self._url is None:
                self._url = line.removeprefix(STATUS_PREFIX).strip()
                self._url_ready.set()
            sys.stdout.write(line)
            sys.stdout.flush()
        self._url_ready.set()

    def status_url(self, timeout: float = 120.0) -> str | None:
        """The master's status page, once the launcher printed it (None if it never did)."""
        self._url_ready.wait(timeout)
        return self._url

    def wait(self, timeout: float | None = None) -> JobResult:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"the job in {self.workdir} still runs after {timeout}s") from exc
        except KeyboardInterrupt:
            self.proc.terminate()  # the launcher stops its children in order
            code = self.proc.wait()
        self._reader.join(timeout=5.0)
        return JobResult.from_exit_code(code, self.summary() if code == 0 else None)

    def summary(self) -> dict[str, Any]:
        path = self.workdir / "summary.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path} is not a readable summary: {exc}") from exc
        return doc if isinstance(doc, dict) else {}


def run_argv(job: Job, script: str, args: Sequence[str], workdir: Path) -> list[str]:
    """The ``elasticps run`` command line that runs ``job`` with ``script args``."""
    argv = [sys.executable, "-m", "elasticps", "run",
            "--trainers", str(job.plan.trainers), "--pservers", str(job.plan.pservers),
            "--workdir", str(workdir), "--job-name", job.job_name, "--mode", job.mode]
    if job.geo_steps:
        argv += ["--geo-steps", str(job.geo_steps)]
    return [*argv, script, *args]


def launch_local(job: Job, script: str | None, args: Sequence[str], *,
                 workdir: str | Path | None = None) -> LocalJobHandle:
    """Start ``job`` under ``elasticps run``; see :func:`elasticps.launch_job`."""
    if script is None:
        if not job.plan.trainer_command:
            raise ConfigError("a local job needs a script: pass it to launch_job or give the "
                              "job an entry_point")
        script, *rest = job.plan.trainer_command
        args = [*rest, *args]
    if not Path(script).is_file():
        raise ConfigError(f"a local job runs a script file under `elasticps run`, but "
                          f"{script!r} is not one")
    target = Path(workdir or DEFAULT_WORKDIR).resolve()
    policies = sparse_policies_env(job)  # the trainers read the job's tables: as on a cluster
    return LocalJobHandle(run_argv(job, script, args, target),
                          target, {"PADDLE_SPARSE_POLICIES": policies} if policies else None)
