"""``elasticps scale JOB -n NS --pservers M``: reshard a cluster job through the API server.

The local launcher's sequence (:mod:`elasticps.launch.reshard`), carried out with the
cluster's controllers:

1. find the pserver workload (:mod:`elasticps.cluster.pserver_workload`) and its count N;
   refuse M outside [1, 1000] or equal to N, a job whose checkpoints live in an ``emptyDir``
   (deleted with the pods), and a reshard Job already there, all before changing anything;
2. patch the pservers to 0 and wait (bounded) until no pserver pod of the job is left: each
   gets SIGTERM and writes a final checkpoint within its grace period;
3. create the one-shot reshard Job (:mod:`elasticps.cluster.render.reshard`), which runs
   ``elasticps reshard --pservers M`` in a pod made from the pserver template, and wait
   (bounded) for it to succeed;
4. patch the pservers to the shard count of the job's layout: M once the Job succeeded.

Trainers and the master are not touched: their calls wait for the pservers as for a restart,
and they route by the new layout once it is published.

The pservers must come back at the count the layout in the job's store says, and this command
cannot read the store. Before the Job is created (pods that do not stop in time, Ctrl-C)
nothing can have committed and N come back. From its creation on, any failure (the Job failed,
vanished or timed out, the API server stopped answering) may follow a commit, so the layout is
read through the API server (:mod:`elasticps.cluster.layout_probe`) and the pservers patched to
its count, M or N; if it cannot be read they stay at 0 and the error says what is known and
how to go on. The same command run on a job whose pservers are at 0 reads the layout first
and carries on from there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elasticps.cluster.kube_client import BATCH_JOB, POD, KubeAPIError, KubeClient
from elasticps.cluster.layout_probe import (
    LayoutProbe,
    LayoutUnknownError,
    job_state,
    message_of,
    parse_layout,
)
from elasticps.cluster.pserver_workload import PServerWorkload, locate_pservers, scale_pservers
from elasticps.cluster.render.common import LABEL_JOB, LABEL_ROLE
from elasticps.cluster.render.reshard import (
    CONTAINER,
    LABEL_RESHARD,
    layout_job_name,
    reshard_job,
    reshard_job_name,
)
from elasticps.cluster.validate import job_schema_problems
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
    layout_s: float = 300.0  # reading the layout when in doubt: a small pod, API blips


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
        """Reshard; returns the pserver count before (the layout's, for pservers found at 0).
        ClusterError/ConfigError on failure, with the pservers at the layout's count unless
        the error says otherwise."""
        workload = self._checked()
        if workload.replicas == 0:
            old = self._resume(workload)
            if old == self.target:
                return old
            self._say(f"resharding {old} -> {self.target} pservers (they are stopped already)")
        else:
            old = workload.replicas
            self._say(f"resharding {old} -> {self.target} pservers: stopping the {old} "
                      f"pserver(s) ({workload.label} to 0)")
            scale_pservers(self.client, self.job_name, self.namespace, expect=old, target=0)
        try:
            self._wait_pods_gone()
            job = self._reshard_job(workload, old)
        except (ElasticPSError, KeyboardInterrupt) as exc:  # Ctrl-C too: never strand it at 0
            self._restore(old, exc)  # no reshard Job yet: nothing can have committed
            raise
        shards, failure = self._commit(job, workload, old)
        if shards != self.target:
            self._restore(shards, failure or ClusterError("the layout is not the new one"))
            raise ClusterError(
                f"job {self.job_name}: resharding {old} -> {self.target} pservers: "
                f"{failure or 'the reshard Job succeeded'}\nThe job's pserver layout is "
                f"{shards} shards: " + ("nothing was committed" if shards == old else
                                        "not the new count") +
                f"; asked for {shards} pserver(s)") from failure
        self._start(workload)
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
        _check_checkpoints_survive(workload)
        name = reshard_job_name(self.job_name, self.target)
        if self.client.get(BATCH_JOB, self.namespace, name) is not None:
            raise ClusterError(f"Job {name!r} exists in namespace {self.namespace!r}: another "
                               "resharding runs, or one left it; delete it (`kubectl delete "
                               f"job {name} -n {self.namespace}`) once it is not running")
        return workload

    def _resume(self, workload: PServerWorkload) -> int:
        """Pservers found at 0 (a resharding interrupted, or stopped by hand): the layout
        says how many shards the job has; with the target already, ask for them."""
        self._say(f"{workload.label} asks for 0 pservers; reading the job's pserver layout "
                  "before anything else")
        try:
            layout, source = self._probe(workload).read(None)
        except (LayoutUnknownError, KeyboardInterrupt) as exc:
            raise ClusterError(
                f"job {self.job_name}: {workload.label} asks for 0 pservers and the job's "
                f"pserver layout could not be read ({_first_line(exc)}); nothing was changed. "
                f"Run this command again once the API server answers, or scale "
                f"{workload.label} to the layout's shard count yourself") from exc
        self._say(f"the job's pserver layout is {layout.shards} shards (generation "
                  f"{layout.generation}, read from {source})")
        if layout.shards == self.target:
            self._start(workload)
        return layout.shards

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

    def _reshard_job(self, workload: PServerWorkload, old: int) -> dict[str, Any]:
        job = reshard_job(workload.template, job_name=self.job_name, namespace=self.namespace,
                          old_pservers=old, new_pservers=self.target,
                          slot_wait_s=self.timeouts.slot_wait_s, deadline_s=self.timeouts.job_s)
        problems = job_schema_problems(job)
        if problems:
            raise ClusterError("the reshard Job is invalid:\n  " + "\n  ".join(problems))
        return job

    def _commit(self, job: dict[str, Any], workload: PServerWorkload,
                old: int) -> tuple[int, ElasticPSError | None]:
        """Run the reshard Job; the layout's shard count afterwards and what went wrong.
        ClusterError, the pservers left at 0, when the layout cannot be learned."""
        name = job["metadata"]["name"]
        try:
            try:
                self.client.create(job)
            except KubeAPIError as exc:
                if exc.status not in (0, 409) and exc.status < 500:
                    return old, exc  # refused (403, 422, ...): no Job, no commit
                raise
            self._say(f"created Job {name}: `elasticps reshard --pservers {self.target}` "
                      "re-splits the checkpoints and publishes the new layout")
            confirmed = self._wait_job(name)
        except ElasticPSError as exc:
            return self._settle(name, workload, old, exc), exc
        except KeyboardInterrupt as exc:
            self._delete_job(name)
            raise self._unknown(workload, old, exc, "interrupted before it was read") from exc
        self._delete_job(name)
        return confirmed, None

    def _wait_job(self, name: str) -> int:
        """Once the Job succeeded: the shard count its pod wrote, else M (it exits 0 only with
        the layout at M)."""
        # A little past the Job's own activeDeadlineSeconds: the cluster ends it first, so a
        # timeout here means the API server stopped answering about it, not a running commit.
        deadline = self.clock() + self.timeouts.job_s + 60
        while True:
            job = self.client.get(BATCH_JOB, self.namespace, name)
            if job is None:
                raise ClusterError(f"Job {name} vanished before it finished")
            state = job_state(job)
            if state == "succeeded":
                self._say(f"Job {name} succeeded: {self._log_tail(name, 1) or 'committed'}")
                return self._confirmed(name)
            if state == "failed":
                raise ClusterError(f"Job {name} failed. Its log ends:\n"
                                   f"{self._log_tail(name, LOG_TAIL) or '(no log)'}")
            if self.clock() >= deadline:
                raise ClusterError(f"Job {name} did not finish within "
                                   f"{self.timeouts.job_s + 60:g}s")
            self.sleep(POLL_S)

    def _confirmed(self, name: str) -> int:
        try:
            pods = self.client.list(POD, self.namespace, f"{LABEL_RESHARD}={name}")
        except ElasticPSError as exc:
            log.warning("Could not read the pod of Job %s: %s", name, exc)
            pods = []
        for pod in pods:
            if (layout := parse_layout(message_of(pod))) is not None:
                return layout.shards
        return self.target

    def _settle(self, name: str, workload: PServerWorkload, old: int,
                cause: ElasticPSError) -> int:
        """After a failure once the Job was created: the layout's shard count, read."""
        self._say(f"resharding failed ({_first_line(cause)}); reading the job's pserver "
                  "layout to learn whether it was committed")
        try:
            layout, source = self._probe(workload).read(name)
        except (LayoutUnknownError, KeyboardInterrupt) as exc:
            self._delete_job(name)  # whatever else is unknown, it must not commit later
            raise self._unknown(workload, old, cause, _first_line(exc)) from cause
        verdict = ("the resharding was committed" if layout.shards == self.target else
                   "nothing was committed" if layout.shards == old else "")
        self._say(f"the job's pserver layout is {layout.shards} shards (generation "
                  f"{layout.generation}, read from {source})" +
                  (f": {verdict}" if verdict else ""))
        return layout.shards

    def _probe(self, workload: PServerWorkload) -> LayoutProbe:
        return LayoutProbe(self.client, self.job_name, self.namespace, workload.template,
                           deadline_s=self.timeouts.layout_s, say=self._say, sleep=self.sleep,
                           clock=self.clock)

    def _unknown(self, workload: PServerWorkload, old: int, cause: BaseException,
                 why: str) -> ClusterError:
        name = reshard_job_name(self.job_name, self.target)
        layout = layout_job_name(self.job_name)
        return ClusterError(
            f"job {self.job_name}: resharding {old} -> {self.target} pservers: "
            f"{_first_line(cause)}. Whether Job {name} committed the new layout is not known: "
            f"the job's pserver layout could not be read ({why}). The pservers are left at 0 "
            f"({workload.label}): {old} of them on a {self.target}-shard layout, or "
            f"{self.target} on a {old}-shard one, would leave the trainers waiting forever. "
            f"Once the API server answers, run `elasticps scale {self.job_name} -n "
            f"{self.namespace} --pservers {self.target}` again: with the pservers at 0 it "
            f"reads the layout first and goes on from it. Or scale {workload.label} yourself "
            f"to the shards that Job {layout} reads if this command created it (only once no "
            "reshard pod ran; it is left to finish): `kubectl get pods -n "
            f"{self.namespace} -l {LABEL_RESHARD}={layout} -o "
            "jsonpath='{..state.terminated.message}'`")

    def _start(self, workload: PServerWorkload) -> None:
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

    def _restore(self, count: int, cause: BaseException) -> None:
        self._say(f"resharding failed ({_first_line(cause)}); asking for {count} pserver(s)")
        try:
            scale_pservers(self.client, self.job_name, self.namespace, expect=0, target=count)
        except ElasticPSError as exc:
            raise ClusterError(f"job {self.job_name}: the resharding failed ({cause}), and "
                               f"asking for {count} pserver(s) failed too: {exc}. The job's "
                               f"layout has {count} shards: scale the pservers to {count} "
                               "yourself") from exc

    def _say(self, message: str) -> None:
        self.say(f"elasticps scale: job {self.job_name} in namespace {self.namespace}: "
                 f"{message}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _check_checkpoints_survive(workload: PServerWorkload) -> None:
    """Refuse a job whose pservers checkpoint into an emptyDir: scaling them to 0 deletes it."""
    for volume in (workload.template.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == "checkpoints" and "emptyDir" in volume:
            raise ClusterError(
                f"job {workload.job_name} keeps its pserver checkpoints in an emptyDir, which "
                "is deleted with the pserver pods: a resharding starts from those checkpoints. "
                "Give the job spec `checkpoint:` a claim (pvc://CLAIM) or a storage URL")
