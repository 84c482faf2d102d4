"""Creating a job's objects on the API server so that one delete removes them all.

Every object of a job is owned (``metadata.ownerReferences``) by its workload: the Volcano
Job, or on plain Kubernetes the trainers' Job. Deleting that one object (``kubectl delete``,
or its ``ttlSecondsAfterFinished``) lets Kubernetes' garbage collector delete everything else:
pods, the master and pservers, etcd and its volume claims, Services, NetworkPolicies,
PodDisruptionBudgets, the ConfigMap of the code, RBAC and the job's Secret.

An owner reference needs the owner's uid, which only the API server knows once the owner
exists. So the rendered objects come in this order (render/volcano.py, render/kubernetes.py):
the ServiceAccount (no pod of the job is admitted without it), then the owner, then the rest.
This module creates the ServiceAccount, the owner, reads the uid from the API server's answer,
adds the reference to the ServiceAccount with a JSON Patch, and creates every later object with
the reference already in it. The owner's pods may start before their Secret or ConfigMap
exists: the kubelet waits for them.

A refused request deletes what this call created (newest first) and raises ClusterError.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from elasticps.cluster.kube_client import KubeAPIError, KubeClient, kind_of
from elasticps.cluster.render.common import LABEL_ROLE
from elasticps.cluster.spec import Job
from elasticps.errors import ClusterError

logger = logging.getLogger(__name__)

_OWNER_KINDS = {("batch.volcano.sh/v1alpha1", "Job"), ("batch/v1", "Job")}


def owner_index(objects: list[dict[str, Any]]) -> int | None:
    """Where the job's workload (the owner of the rest) is in ``objects``: the Volcano Job, or
    the trainers' batch Job; None when there is none (a Secret created alone)."""
    for index, obj in enumerate(objects):
        kind = (obj.get("apiVersion"), obj.get("kind"))
        if kind == ("batch.volcano.sh/v1alpha1", "Job"):
            return index
        if kind == ("batch/v1", "Job") and \
                obj["metadata"].get("labels", {}).get(LABEL_ROLE) == "trainer":
            return index
    return None


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """The reference to ``owner`` as the API server returned it (with its uid). Not a
    controller reference and no ``blockOwnerDeletion``: the owner's controller does not manage
    these objects, and blocking would need the finalizers permission on the owner."""
    meta = owner["metadata"]
    if not meta.get("uid"):
        raise ClusterError(f"the API server returned {owner.get('kind')} {meta.get('name')!r} "
                           "without a uid; cannot make the job's objects owned by it")
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
            "uid": meta["uid"]}


def owned(obj: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` owned by ``reference``'s object."""
    out = copy.deepcopy(obj)
    out["metadata"]["ownerReferences"] = [dict(reference)]
    return out


def create_objects(client: KubeClient, job: Job, objects: list[dict[str, Any]]) -> None:
    """Create ``objects`` in order, each one after the owner with an owner reference to it and
    the ones before it patched to get one; on a refusal, remove what was created."""
    at = owner_index(objects)
    created: list[dict[str, Any]] = []
    reference: dict[str, Any] | None = None
    try:
        for index, obj in enumerate(objects):
            sent = obj if reference is None else owned(obj, reference)
            answer = client.create(sent)
            created.append(sent)
            if index == at:
                reference = owner_reference(answer)
                for earlier in objects[:at]:
                    _add_owner(client, earlier, reference)
    except ClusterError as exc:
        undone = _roll_back(client, created)
        note = f" (removed the {undone} object(s) this submission had created)" if undone else ""
        if isinstance(exc, KubeAPIError) and exc.status == 409:
            raise ClusterError(
                f"job {job.job_name} already exists in namespace {job.plan.namespace}{note}: "
                f"{exc}. Delete it first with `elasticps delete {job.job_name} "
                f"-n {job.plan.namespace}` or choose another job_name."
            ) from exc
        raise ClusterError(f"submitting job {job.job_name} failed{note}: {exc}") from exc


def _add_owner(client: KubeClient, obj: dict[str, Any], reference: dict[str, Any]) -> None:
    meta = obj["metadata"]
    client.patch(kind_of(obj), meta["namespace"], meta["name"],
                 [{"op": "add", "path": "/metadata/ownerReferences", "value": [reference]}])


def _roll_back(client: KubeClient, created: list[dict[str, Any]]) -> int:
    undone = 0
    for obj in reversed(created):
        meta = obj["metadata"]
        try:
            client.delete(kind_of(obj), meta["namespace"], meta["name"])
            undone += 1
        except ClusterError as exc:
            logger.warning("Could not remove %s/%s after a failed submission: %s",
                           obj["kind"], meta["name"], exc)
    return undone


__all__ = ["create_objects", "owned", "owner_index", "owner_reference"]
