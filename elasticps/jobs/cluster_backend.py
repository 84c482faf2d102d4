"""The cluster backend of :func:`elasticps.launch_job`: :func:`elasticps.cluster.submit.submit`,
then the job's phase polled through the Kubernetes API into a :class:`JobResult`.

A cluster job's summary is the master's status page (``/api/status`` through the API server's
service proxy) while a master serves; the document ``publish_result`` stores stays in the job's
store, which this process cannot reach, so it is not part of it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.spec import Job
from elasticps.cluster.submit import JobStatus, SubmittedJob, submit
from elasticps.jobs.api import FAILED, INTERRUPTED, SUCCEEDED, JobHandle, JobResult

logger = logging.getLogger(__name__)

POLL_INTERVAL = 5.0  # seconds between two reads of a job's phase: a remote API, nothing to wait on
# Volcano's final phases by what they mean here (a Kubernetes trainer Job ends Completed/Failed).
_STATE_OF_PHASE = {"Completed": SUCCEEDED, "Failed": FAILED, "Aborted": INTERRUPTED,
                   "Terminated": INTERRUPTED}


def result_of_phase(status: JobStatus) -> JobResult | None:
    """The result of a job whose phase is final (None while it is not): the phase as the local
    launcher's state and exit code, its master's status document (if one answered) as the
    summary."""
    state = _STATE_OF_PHASE.get(status.phase)
    if state is None:
        return None
    return JobResult.from_state(state, status.master)


class ClusterJobHandle(JobHandle):
    """A submitted job; ``submitted`` has the rest (``logs()``, ``delete()``, ``status()``)."""

    def __init__(self, submitted: SubmittedJob, poll_interval: float = POLL_INTERVAL) -> None:
        self.submitted = submitted
        self.poll_interval = poll_interval
        self.last_status: JobStatus | None = None

    def status_url(self) -> str:
        return self.submitted.status_url()

    def wait(self, timeout: float | None = None) -> JobResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.last_status = status = self.submitted.status()
            result = result_of_phase(status)
            if result is not None:
                logger.info("Job %s in namespace %s finished: %s (%s).", status.job,
                            status.namespace, status.phase, result.state)
                return result
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {status.job} is still {status.phase} after {timeout}s")
            time.sleep(self.poll_interval)

    def summary(self) -> dict[str, Any]:
        self.last_status = status = self.submitted.status()
        return dict(status.master or {})


def launch_cluster(job: Job, cluster_backend: str = "volcano",
                   kubeconfig: str | None = None) -> ClusterJobHandle:
    """Submit ``job``; see :func:`elasticps.launch_job`."""
    # No kubeconfig: submit finds the credentials itself, after the spec rendered and checked.
    client = None if kubeconfig is None else KubeClient.from_kubeconfig(kubeconfig)
    return ClusterJobHandle(submit(job, cluster_backend, client=client))
