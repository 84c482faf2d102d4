"""The one-shot Jobs of a cluster resharding, made from the job's pserver pod template (pure).

``elasticps scale JOB --pservers M`` creates it once every pserver pod is gone; its one pod
runs ``elasticps reshard --pservers M`` (:mod:`elasticps.pserver.reshard.layout_change`) with
everything a pserver has that the commit needs: the image, the environment (store URL, job
token, checkpoint URL, PADDLE_NUM_PSERVERS), the TLS volume with the pserver's certificate
(the job's etcd admits it), the checkpoint volume, the service account and security context.
What a serving pserver needs and a one-shot commit must not have is dropped: ports, probes
(a liveness probe on a port nobody opens would kill it), scrape annotations.

The pod is labelled ``elasticps.io/role: reshard``, not ``pserver``: the pserver Service, the
pserver NetworkPolicy and the wait for "no pserver pod left" must not count it; the job label
stays, so the job's etcd NetworkPolicy admits it and ``elasticps delete`` removes it.

Both pods write the layout they leave (``--layout-file``) to their termination message, which
the API server shows in the pod's status: ``elasticps scale`` cannot reach the job's store. The
layout Job (``<job>-layout``) only runs ``elasticps reshard --show-layout``: it is how ``scale``
learns whether a resharding committed when the reshard Job's own answer was lost.

Memory: the commit holds every old shard's state and every new shard's at once, about twice
the model, where one pserver holds 1/N of it. The pod keeps the pserver's requests (it fits
where a pserver did) and its memory limit is the pserver's times ``old + new`` shards.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from elasticps.cluster.quantity import format_memory, parse_memory
from elasticps.cluster.render.common import LABEL_JOB, LABEL_MANAGED_BY, LABEL_ROLE

RESHARD_ROLE = "reshard"
LABEL_RESHARD = "elasticps.io/reshard"  # the Job's name, on the Job and its pod
CONTAINER = "reshard"
TTL_AFTER_FINISHED = 3600  # seconds: a Job `scale` could not delete still goes away
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's file for the termination message
_SERVING_ONLY = ("ports", "startupProbe", "livenessProbe", "readinessProbe")


def reshard_job_name(job_name: str, pservers: int) -> str:
    """``<job>-reshard-<M>``: one resharding to M at a time; a second one finds it."""
    return f"{job_name}-reshard-{pservers}"


def layout_job_name(job_name: str) -> str:
    """``<job>-layout``: it changes nothing, so one leftover is simply replaced."""
    return f"{job_name}-layout"


def _labels(job_name: str, name: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: "elasticps", LABEL_JOB: job_name, LABEL_ROLE: RESHARD_ROLE,
            LABEL_RESHARD: name}


def _memory_limit(resources: dict[str, Any], shards: int) -> dict[str, Any]:
    limits = dict(resources.get("limits") or {})
    if "memory" in limits:
        # a quantity we cannot parse is not ours to fix: the API server accepted it
        with contextlib.suppress(ValueError):
            limits["memory"] = format_memory(parse_memory(limits["memory"]) * shards)
    return {**resources, "limits": limits} if limits else dict(resources)


def _container(pserver: dict[str, Any], command: list[str], shards: int) -> dict[str, Any]:
    container = {k: v for k, v in copy.deepcopy(pserver).items() if k not in _SERVING_ONLY}
    container["name"] = CONTAINER
    container["command"] = command
    container.pop("args", None)
    # the defaults, said outright: a template that chose FallbackToLogsOnError would mix a log
    # tail into the one thing `scale` parses
    container["terminationMessagePath"] = TERMINATION_LOG
    container["terminationMessagePolicy"] = "File"
    if "resources" in container:
        container["resources"] = _memory_limit(container["resources"], shards)
    return container


def _one_shot_job(pserver_template: dict[str, Any], *, job_name: str, namespace: str,
                  name: str, command: list[str], shards: int,
                  deadline_s: float) -> dict[str, Any]:
    spec = copy.deepcopy(pserver_template.get("spec") or {})
    containers = spec.get("containers") or []
    if not containers:
        raise ValueError(f"the pserver pod template of job {job_name} has no container")
    spec["containers"] = [_container(containers[0], command, shards)]
    spec["restartPolicy"] = "Never"  # a failed commit changed nothing: report, not retry
    labels = _labels(job_name, name)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"backoffLimit": 0,
                 "activeDeadlineSeconds": max(1, int(deadline_s)),
                 "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
                 "template": {"metadata": {"labels": dict(labels)}, "spec": spec}},
    }


def reshard_job(pserver_template: dict[str, Any], *, job_name: str, namespace: str,
                old_pservers: int, new_pservers: int, slot_wait_s: float,
                deadline_s: float) -> dict[str, Any]:
    """The ``batch/v1`` Job that commits a resharding of ``job_name`` from ``old_pservers``
    to ``new_pservers``; ``deadline_s`` bounds its run on the cluster's side."""
    command = ["elasticps", "reshard", "--pservers", str(new_pservers),
               "--wait", f"{slot_wait_s:g}", "--layout-file", TERMINATION_LOG]
    return _one_shot_job(pserver_template, job_name=job_name, namespace=namespace,
                         name=reshard_job_name(job_name, new_pservers), command=command,
                         shards=old_pservers + new_pservers, deadline_s=deadline_s)


def layout_job(pserver_template: dict[str, Any], *, job_name: str, namespace: str,
               deadline_s: float) -> dict[str, Any]:
    """The ``batch/v1`` Job whose pod reads ``job_name``'s ``pserver/layout`` and leaves it
    in its termination message; a pserver's memory is plenty."""
    command = ["elasticps", "reshard", "--show-layout", "--layout-file", TERMINATION_LOG]
    return _one_shot_job(pserver_template, job_name=job_name, namespace=namespace,
                         name=layout_job_name(job_name), command=command, shards=1,
                         deadline_s=deadline_s)


__all__ = ["CONTAINER", "LABEL_RESHARD", "RESHARD_ROLE", "TERMINATION_LOG", "layout_job",
           "layout_job_name", "reshard_job", "reshard_job_name"]
