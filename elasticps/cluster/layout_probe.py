"""What a cluster job's ``pserver/layout`` holds, learned through the API server alone.

``elasticps scale`` talks to the Kubernetes API server and usually cannot reach the job's store
(its etcd runs inside the cluster). Whenever a resharding's outcome is in doubt (its Job failed,
vanished or timed out, or the API server stopped answering about it) the count the pservers are
started at comes from here, never from a guess: N pservers on an M-shard layout leave the
trainers waiting forever on slots nobody serves. :meth:`LayoutProbe.read`

1. makes sure no reshard pod can still commit: deletes the reshard Job and waits until every
   reshard pod of the job has ended (``Succeeded``/``Failed``; ``restartPolicy: Never``) or is
   gone;
2. takes the layout the resharding's own pod left in its termination message, if it did
   (``elasticps reshard --layout-file``: it writes the layout it committed, or found);
3. else runs the layout Job (:func:`~elasticps.cluster.render.reshard.layout_job`,
   ``elasticps reshard --show-layout`` from the pserver template: the same store, token and
   TLS) and reads its pod's termination message.

API errors are retried until one deadline; past it :class:`LayoutUnknownError` says what is missing.
Only a resharding's commit writes the layout, and none runs while the pservers are at 0 and no
reshard pod runs, so what is read stays true until the pservers are started.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from elasticps.cluster.kube_client import BATCH_JOB, POD, KubeAPIError, KubeClient
from elasticps.cluster.render.common import LABEL_JOB, LABEL_ROLE
from elasticps.cluster.render.reshard import (
    CONTAINER,
    LABEL_RESHARD,
    RESHARD_ROLE,
    layout_job,
    layout_job_name,
)
from elasticps.cluster.validate import job_schema_problems
from elasticps.errors import ClusterError, ElasticPSError
from elasticps.store.keys import MAX_PSERVERS_IN_LAYOUT, PSERVER_LAYOUT, PServerLayout

log = logging.getLogger(__name__)

T = TypeVar("T")
POLL_S = 2.0
ENDED = ("Succeeded", "Failed")


class LayoutUnknownError(ClusterError):
    """The job's layout could not be learned in time; the message says what is missing."""


def job_state(job: dict[str, Any]) -> str:
    """``succeeded``, ``failed`` or ``running``, from a ``batch/v1`` Job's status."""
    status = job.get("status") or {}
    conditions = {c.get("type") for c in status.get("conditions") or []
                  if c.get("status") == "True"}
    if "Complete" in conditions or int(status.get("succeeded") or 0) > 0:
        return "succeeded"
    if "Failed" in conditions or int(status.get("failed") or 0) > 0:
        return "failed"
    return "running"


def parse_layout(text: str) -> PServerLayout | None:
    """The layout in a termination message (``{"generation": G, "shards": S}``, G 0 before
    any resharding); None when it holds none, e.g. a pod that failed before writing it."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    shards, generation = doc.get("shards"), doc.get("generation")
    if type(shards) is not int or type(generation) is not int:
        return None
    if not 1 <= shards <= MAX_PSERVERS_IN_LAYOUT or generation < 0:
        return None
    return PServerLayout(shards, generation)


def message_of(pod: dict[str, Any]) -> str:
    """The termination message of ``pod``'s one-shot container; empty if it has none."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            terminated = (status.get("state") or {}).get("terminated") or {}
            return str(terminated.get("message") or "")
    return ""


def _name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


@dataclass
class LayoutProbe:
    """Learns one job's layout (module docstring); ``template`` is its pserver pod template."""

    client: KubeClient
    job_name: str
    namespace: str
    template: dict[str, Any]
    deadline_s: float = 300.0  # scheduling and starting one small pod, and API blips
    say: Callable[[str], None] = print
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def read(self, reshard_job: str | None) -> tuple[PServerLayout, str]:
        """The layout and where it was read, once no reshard pod runs; ``reshard_job`` (the
        resharding in doubt) is deleted first. LayoutUnknownError past the deadline."""
        deadline = self.clock() + self.deadline_s
        ended: dict[str, dict[str, Any]] = {}  # what each ended pod said: it is final
        self._until(deadline, "every reshard pod of the job to end",
                    lambda: self._reshard_pods_ended(reshard_job, ended))
        for pod in ended.values():
            if pod["metadata"].get("labels", {}).get(LABEL_RESHARD) == reshard_job \
                    and (layout := parse_layout(message_of(pod))) is not None:
                return layout, f"the termination message of reshard pod {_name(pod)}"
        return self._run_layout_job(deadline)

    # -- the steps --------------------------------------------------------------------

    def _reshard_pods_ended(self, reshard_job: str | None,
                            ended: dict[str, dict[str, Any]]) -> bool | None:
        """True once ``reshard_job`` is gone (deleted here) and every reshard pod of the job
        has ended; the ended ones are kept in ``ended``, as their Job's deletion removes them.
        A pod its Job made just before the deletion is in the next look's list."""
        selector = f"{LABEL_JOB}={self.job_name},{LABEL_ROLE}={RESHARD_ROLE}"
        layout_name = layout_job_name(self.job_name)
        pods = [p for p in self.client.list(POD, self.namespace, selector)
                if p["metadata"].get("labels", {}).get(LABEL_RESHARD) != layout_name]
        # Listed before the deletion: a Job found gone was gone before this list was taken.
        gone = reshard_job is None or not self.client.delete(BATCH_JOB, self.namespace,
                                                             reshard_job)
        ended.update((_name(p), p) for p in pods
                     if (p.get("status") or {}).get("phase") in ENDED)
        running = [_name(p) for p in pods if _name(p) not in ended]
        if running:
            self.say(f"waiting for reshard pod(s) {', '.join(running)} to end before reading "
                     "the layout")
        return True if gone and not running else None

    def _run_layout_job(self, deadline: float) -> tuple[PServerLayout, str]:
        job = layout_job(self.template, job_name=self.job_name, namespace=self.namespace,
                         deadline_s=max(1.0, deadline - self.clock()))
        problems = job_schema_problems(job)
        if problems:
            raise LayoutUnknownError("the layout Job is invalid:\n  " + "\n  ".join(problems))
        name = job["metadata"]["name"]
        self._until(deadline, f"a leftover Job {name} to be deleted",
                    lambda: None if self.client.delete(BATCH_JOB, self.namespace, name) else [])
        self._until(deadline, f"Job {name} to be created", lambda: self._create(job))
        self.say(f"created Job {name}: `elasticps reshard --show-layout` reads the job's "
                 f"{PSERVER_LAYOUT}")
        # Left behind if it never ends here: it finishes on its own and `kubectl` can read
        # its pod's termination message (ttlSecondsAfterFinished removes it an hour later).
        state = self._until(deadline, f"Job {name} to finish", lambda: self._finished(name))
        pods = self._until(deadline, f"the pod of Job {name}",
                           lambda: self.client.list(POD, self.namespace,
                                                    f"{LABEL_RESHARD}={name}") or None)
        self._delete(name)
        messages = [(p, message_of(p)) for p in pods]
        for pod, text in messages:
            if (layout := parse_layout(text)) is not None:
                return layout, f"Job {name} (pod {_name(pod)})"
        said = "; ".join(f"pod {_name(p)}: {t.strip()[:300]!r}" for p, t in messages)
        raise LayoutUnknownError(f"Job {name} {state}, and no layout is in its pod's termination "
                            f"message ({said})")

    def _create(self, job: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.client.create(job)
        except KubeAPIError as exc:
            if exc.status == 409:  # a retried create whose first answer was lost
                return {}
            raise

    def _finished(self, name: str) -> str | None:
        job = self.client.get(BATCH_JOB, self.namespace, name)
        if job is None:
            raise LayoutUnknownError(f"Job {name} vanished before it finished")
        state = job_state(job)
        return None if state == "running" else state

    def _delete(self, name: str) -> None:
        try:
            self.client.delete(BATCH_JOB, self.namespace, name)
        except ElasticPSError as exc:
            log.warning("Could not delete Job %s (%s); it goes by itself within an hour",
                        name, exc)

    def _until(self, deadline: float, what: str, step: Callable[[], T | None]) -> T:
        """``step()`` every POLL_S until it returns a value; an API error is retried, the
        API server may be briefly away. LayoutUnknownError at the deadline, with the last error."""
        last_error = ""
        while True:
            try:
                value = step()
            except LayoutUnknownError:
                raise
            except ElasticPSError as exc:
                value, last_error = None, f" (last error: {exc})"
            if value is not None:
                return value
            if self.clock() >= deadline:
                raise LayoutUnknownError(f"waited {self.deadline_s:g}s for {what}{last_error}")
            self.sleep(POLL_S)


__all__ = ["LayoutProbe", "LayoutUnknownError", "job_state", "message_of", "parse_layout"]
