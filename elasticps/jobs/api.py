"""The interface of a launched job, the same for every backend.

:func:`launch_job` starts ``job`` where its ``backend`` says and returns a :class:`JobHandle`:
``status_url()``, ``summary()`` and ``wait() -> JobResult``. A :class:`JobResult` means one
thing everywhere: how the job ended, with the exit code ``elasticps run`` would have ended with.

Training inside a job is another function (:func:`elasticps.dist_train`, which is only a facade
over the two).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticps.cluster.spec import Job
from elasticps.errors import ConfigError

# How a job ended: ``elasticps run``'s final states, which a cluster job's phase maps onto.
SUCCEEDED, FAILED, INTERRUPTED = "succeeded", "failed", "interrupted"
STATES = (SUCCEEDED, FAILED, INTERRUPTED)
EXIT_INTERRUPTED = 130  # what `elasticps run` exits with when it was stopped (SIGINT/SIGTERM)
EXIT_CODE = {SUCCEEDED: 0, FAILED: 1, INTERRUPTED: EXIT_INTERRUPTED}  # by state


@dataclass(frozen=True)
class JobResult:
    """How a job ended.

    ``state`` is ``succeeded``, ``failed`` or ``interrupted`` (stopped before its end);
    ``exit_code`` is what ``elasticps run`` exits with for it: 0, 1 (2 when a role stopped on a
    configuration error), or 130;
    ``summary`` is the job's summary document (``WORKDIR/summary.json`` for a local job; ``{}``
    when there is none, as after a failure).
    """

    state: str
    exit_code: int
    summary: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ConfigError(f"a job result's state is one of {', '.join(STATES)}, "
                              f"not {self.state!r}")
        if (self.exit_code == 0) != (self.state == SUCCEEDED):
            raise ConfigError(f"a job result with state {self.state} cannot have exit code "
                              f"{self.exit_code}")

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCEEDED

    @classmethod
    def from_state(cls, state: str, summary: dict[str, Any] | None = None) -> JobResult:
        """The result of a job that ended in ``state``, with the exit code it means."""
        if state not in EXIT_CODE:
            raise ConfigError(f"a job result's state is one of {', '.join(STATES)}, "
                              f"not {state!r}")
        return cls(state, EXIT_CODE[state], dict(summary or {}))

    @classmethod
    def from_exit_code(cls, code: int, summary: dict[str, Any] | None = None) -> JobResult:
        """The result of a job whose launcher exited with ``code``."""
        state = SUCCEEDED if code == 0 else INTERRUPTED if code == EXIT_INTERRUPTED else FAILED
        return cls(state, code, dict(summary or {}))


class JobHandle(ABC):
    """A job started by :func:`launch_job` (or, inside a job, this trainer's part of it)."""

    #: True for the handle ``dist_train`` returns inside a job (this trainer's part is over).
    in_job: bool = False

    @abstractmethod
    def status_url(self) -> str | None:
        """The master's status page, or None where it is not known (yet)."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> JobResult:
        """Block until the job ends and say how; ``TimeoutError`` if it still runs after
        ``timeout`` seconds (the job goes on)."""

    @abstractmethod
    def summary(self) -> dict[str, Any]:
        """The job's summary document so far (``{}`` when there is none yet)."""


def launch_job(job: Job, script: str | None = None, args: Sequence[str] = (), *,
               workdir: str | Path | None = None, cluster_backend: str = "volcano",
               kubeconfig: str | None = None) -> JobHandle:
    """Start ``job`` where ``job.backend`` says; the handle follows it.

    * ``backend="local"``: ``elasticps run`` in a child process of this one runs ``script``
      with ``args`` (default: the job's ``entry_point``) in ``workdir`` (default
      ``./elasticps-job``); the launcher's output goes to this process's stdout.
    * ``backend="cluster"``: :func:`elasticps.cluster.submit.submit` creates the job's objects
      with ``cluster_backend`` (``volcano`` or ``kubernetes``, as ``elasticps submit
      --backend``) on the cluster ``kubeconfig`` names (default: ``$KUBECONFIG``,
      ``~/.kube/config``, else the in-cluster service account); the job runs its
      ``entry_point``, so ``script``, ``args`` and ``workdir`` must not be given.
    """
    # Each backend is imported only when a job of its kind starts: the cluster's pulls in
    # the Kubernetes client, which a local job (and every trainer) does without.
    if job.backend == "local":
        if kubeconfig is not None:
            raise ConfigError("a local job runs on this machine: kubeconfig is for cluster jobs")
        from elasticps.jobs.local_backend import launch_local

        return launch_local(job, script, args, workdir=workdir)
    if script is not None or args or workdir is not None:
        raise ConfigError("a cluster job runs its entry_point in its own pods: give the script, "
                          "its arguments and the data there (entry_point, data), not to "
                          "launch_job")
    from elasticps.jobs.cluster_backend import launch_cluster

    return launch_cluster(job, cluster_backend, kubeconfig)
