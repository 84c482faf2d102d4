"""``elasticps scale JOB -n NS --pservers M``: reshard a cluster job through the API server.

The local launcher's sequence (:mod:`elasticps.launch.reshard`), carried out with the
cluster's controllers:

1. find the pserver workload (:mod:`elasticps.cluster.pserver_workload`) and its count N;
   refuse M outside [1, 1000] or equal to N, a job whose checkpoints live in an ``emptyDir``
   (deleted with the pods), and a reshard Job already there, all before changing anything;
2. patch the pservers to 0 and wait (bounded) until no pserver pod of the job is left: each
   gets SIGTERM and writes a final checkpoint within its grace period;
3. create the one-shot reshard Job (:mod:`elasticps.cluster.render_reshard`), which runs
   ``elasticps reshard --pservers M`` in a pod made from the pserver template, and wait
   (bounded) for it to succeed;
4. patch the pservers to M; they restore the new checkpoints and serve the new layout.

Trainers and the master are not touched: their calls wait for the pservers as for a restart,
and they route by the new layout once it is published. If the pods do not stop in time, or the
Job fails or times out, the pservers are patched back to N and the error says why (with the
tail of the reshard pod's log); the commit is one store transaction, so the job is still on its
N shards. The Job is deleted in every case (``ttlSecondsAfterFinished`` removes it should this
command die first).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elasticps.cluster.kube_client import BATCH_JOB, POD, KubeClient
from elasticps.cluster.pserver_workload import PServerWorkload, locate_pservers, scale_pservers
from elasticps.cluster.render_common import LABEL_JOB, LABEL_ROLE
from elasticps.cluster.render_reshard import (
    CONTAINER,
    LABEL_RESHARD,
    reshard_job,
    reshard_job_name,
)
from elasticps.cluster.validate import schema_problems
from elasticps.errors import ClusterError, ConfigError, ElasticPSError
from elasticps.store.keys import MAX_PSERVERS_IN_LAYOUT

log = logging.getLogger(__name__)

POLL_S = 2.0
LOG_TAIL = 20


@dataclass(frozen=True)
class ReshardTimeouts:
    stop_s: float = 300.0  # the old pserver pods to be gone (their grace period is 30s)
    slot_wait_s: float = 120.0  # in the reshard pod: the old slots' leases to expire
    job_s: float = 1800.0  # the reshard Job to succeed (it reads and writes every table)


@dataclass
class ClusterResharding:
    """One resharding of one cluster job; :meth:`run` carries it out."""

    client: KubeClient
    job_name: str
    namespace: str
    target: int
    timeouts: ReshardTimeouts = ReshardTimeouts()
    say: Callable[[str], None] = print
    sleep: Callable[[float], None] = time.sleep  # polling a remote API: nothing to wait on
    clock: Callable[[], float] = time.monotonic

    def run(self) -> int:
        """Reshard; returns the pserver count before. ClusterError/ConfigError on failure,
        with the pservers back at their old count unless the error says otherwise."""
        workload = self._checked()
        old = workload.replicas
        self._say(f"resharding {old} -> {self.target} pservers: stopping the {old} pserver(s) "
                  f"({workload.label} to 0)")
        scale_pservers(self.client, self.job_name, self.namespace, expect=old, target=0)
        try:
            self._wait_pods_gone()
            self._commit(workload, old)
        except (ElasticPSError, KeyboardInterrupt) as exc:  # Ctrl-C too: never strand it at 0
            self._restore(old, exc)
            raise
        try:
            scale_pservers(self.client, self.job_name, self.namespace, expect=0,
                           target=self.target)
        except ElasticPSError as exc:
            raise ClusterError(
                f"job {self.job_name}: the resharding to {self.target} pservers is committed, "
                f"but asking for {self.target} pserver(s) failed: {exc}. Scale {workload.label} "
                f"to {self.target} yourself; the job waits for them") from exc
        self._say(f"asked for {self.target} pserver(s); they restore the new checkpoints and "
                  "trainers resume when every shard is served")
        return old

    # -- the steps --------------------------------------------------------------------

    def _checked(self) -> PServerWorkload:
        if not 1 <= self.target <= MAX_PSERVERS_IN_LAYOUT:
            raise ConfigError(f"--pservers={self.target} must be in [1, "
                              f"{MAX_PSERVERS_IN_LAYOUT}]")
        workload = locate_pservers(self.client, self.job_name, self.namespace)
        if workload.replicas == self.target:
            raise ConfigError(f"--pservers={self.target}: job {self.job_name} already has "
                              f"{self.target} pserver(s)")
        if workload.replicas == 0:
            raise ClusterError(
                f"{workload.label} of job {self.job_name} asks for 0 pservers, as a resharding "
                "leaves it between its steps: if one was interrupted after its reshard Job "
                "succeeded, scale it to the new count yourself, else to the old one")
        _check_checkpoints_survive(workload)
        name = reshard_job_name(self.job_name, self.target)
        if self.client.get(BATCH_JOB, self.namespace, name) is not None:
            raise ClusterError(f"Job {name!r} exists in namespace {self.namespace!r}: another "
                               "resharding runs, or one left it; delete it (`kubectl delete "
                               f"job {name} -n {self.namespace}`) once it is not running")
        return workload

    def _wait_pods_gone(self) -> None:
        selector = f"{LABEL_JOB}={self.job_name},{LABEL_ROLE}=pserver"
        deadline = self.clock() + self.timeouts.stop_s
        last: list[str] | None = None
        while pods := sorted(p["metadata"]["name"] for p in
                             self.client.list(POD, self.namespace, selector)):
            if pods != last:
                self._say(f"waiting for {len(pods)} pserver pod(s) to stop and checkpoint: "
                          f"{', '.join(pods)}")
                last = pods
            if self.clock() >= deadline:
                raise ClusterError(f"pserver pod(s) {', '.join(pods)} of job {self.job_name} "
                                   f"did not stop within {self.timeouts.stop_s:g}s")
            self.sleep(POLL_S)
        self._say("every pserver pod has stopped")

    def _commit(self, workload: PServerWorkload, old: int) -> None:
        job = reshard_job(workload.template, job_name=self.job_name, namespace=self.namespace,
                          old_pservers=old, new_pservers=self.target,
                          slot_wait_s=self.timeouts.slot_wait_s, deadline_s=self.timeouts.job_s)
        try:
            problems = schema_problems([job])
        except ImportError:  # kubernetes-validate is a dev extra; the API server checks too
            problems = []
        if problems:
            raise ClusterError("the reshard Job is invalid:\n  " + "\n  ".join(problems))
        name = job["metadata"]["name"]
        self.client.create(job)
        self._say(f"created Job {name}: `elasticps reshard --pservers {self.target}` re-splits "
                  "the checkpoints and publishes the new layout")
        try:
            self._wait_job(name)
        finally:
            self._delete_job(name)

    def _wait_job(self, name: str) -> None:
        # A little past the Job's own activeDeadlineSeconds: the cluster ends it first, so a
        # timeout here means the API server stopped answering about it, not a running commit.
        deadline = self.clock() + self.timeouts.job_s + 60
        while True:
            job = self.client.get(BATCH_JOB, self.namespace, name)
            if job is None:
                raise ClusterError(f"Job {name} vanished before it finished")
            state = _job_state(job)
            if state == "succeeded":
                self._say(f"Job {name} succeeded: {self._log_tail(name, 1) or 'committed'}")
                return
            if state == "failed":
                raise ClusterError(f"Job {name} failed; nothing was committed. Its log "
                                   f"ends:\n{self._log_tail(name, LOG_TAIL) or '(no log)'}")
            if self.clock() >= deadline:
                raise ClusterError(f"Job {name} did not finish within "
                                   f"{self.timeouts.job_s + 60:g}s")
            self.sleep(POLL_S)

    def _log_tail(self, name: str, lines: int) -> str:
        """The reshard pod's last ``lines`` log lines; empty when they cannot be read."""
        try:
            pods = self.client.list(POD, self.namespace, f"{LABEL_RESHARD}={name}")
            if not pods:
                return ""
            pod = pods[-1]["metadata"]["name"]
            return "\n".join(self.client.read_log(self.namespace, pod, CONTAINER,
                                                  tail_lines=lines)).strip()
        except ElasticPSError as exc:
            log.warning("Could not read the log of Job %s: %s", name, exc)
            return ""

    def _delete_job(self, name: str) -> None:
        try:
            self.client.delete(BATCH_JOB, self.namespace, name)
        except ElasticPSError as exc:
            self._say(f"could not delete Job {name} ({exc}); it goes by itself within an hour")

    def _restore(self, old: int, cause: BaseException) -> None:
        reason = (str(cause).splitlines() or [f"{type(cause).__name__}"])[0]
        self._say(f"resharding failed ({reason}); asking for the {old} pserver(s) again")
        try:
            scale_pservers(self.client, self.job_name, self.namespace, expect=0, target=old)
        except ElasticPSError as exc:
            raise ClusterError(f"job {self.job_name}: the resharding failed ({cause}), and "
                               f"asking for its {old} pserver(s) again failed too: {exc}. "
                               f"Scale the pservers to {old} yourself") from exc

    def _say(self, message: str) -> None:
        self.say(f"elasticps scale: job {self.job_name} in namespace {self.namespace}: "
                 f"{message}")


def _job_state(job: dict[str, Any]) -> str:
    status = job.get("status") or {}
    conditions = {c.get("type") for c in status.get("conditions") or []
                  if c.get("status") == "True"}
    if "Complete" in conditions or int(status.get("succeeded") or 0) > 0:
        return "succeeded"
    if "Failed" in conditions or int(status.get("failed") or 0) > 0:
        return "failed"
    return "running"


def _check_checkpoints_survive(workload: PServerWorkload) -> None:
    """Refuse a job whose pservers checkpoint into an emptyDir: scaling them to 0 deletes it."""
    for volume in (workload.template.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == "checkpoints" and "emptyDir" in volume:
            raise ClusterError(
                f"job {workload.job_name} keeps its pserver checkpoints in an emptyDir, which "
                "is deleted with the pserver pods: a resharding starts from those checkpoints. "
                "Give the job spec `checkpoint:` a claim (pvc://CLAIM) or a storage URL")
