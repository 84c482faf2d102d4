"""Where a cluster job keeps its pservers, and the JSON Patches that change their count.

- Volcano: the Volcano Job's ``pserver`` task. Its ``replicas`` and ``minAvailable`` move
  together, and the job's ``minAvailable`` (``1 + pservers + min_trainers``) by as much:
  Volcano's admission webhook refuses a task whose ``minAvailable`` exceeds its replicas and a
  job whose ``minAvailable`` exceeds all replicas. The webhook refuses any change to a task's
  pod template, so the pservers' ``PADDLE_NUM_PSERVERS`` stays the submitted count: the
  ``pserver/layout`` store key, which outranks it, carries the new one.
- Kubernetes: the ``<job>-pserver`` StatefulSet's ``replicas``. Growing it from 0 also sets
  ``PADDLE_NUM_PSERVERS`` and ``PADDLE_PSERVERS`` in its pod template to the new count (the
  layout key outranks them too; this keeps ``kubectl describe`` true). The pods are created
  from the new template: none is left to roll.

Every patch starts with ``test`` ops holding the values just read, so a concurrent change
(another scaler, a person with kubectl) makes it fail whole (422) rather than interleave.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elasticps.cluster.kube_client import KINDS, VOLCANO_JOB, Kind, KubeClient
from elasticps.cluster.render.common import Names
from elasticps.cluster.render.kubernetes import stateful_pserver_hosts
from elasticps.errors import ClusterError

STATEFUL_SET = KINDS[("apps/v1", "StatefulSet")]
_PSERVER_ENV = ("PADDLE_NUM_PSERVERS", "PADDLE_PSERVERS")


@dataclass(frozen=True)
class PServerWorkload:
    """The object that holds a job's pserver count, as read."""

    backend: str  # "volcano" | "kubernetes"
    kind: Kind
    name: str  # the object's name
    namespace: str
    job_name: str
    replicas: int
    template: dict[str, Any]  # the pserver pod template
    obj: dict[str, Any]  # the whole object, for the patches' test ops
    task_index: int = -1  # Volcano: the pserver task's index in spec.tasks

    @property
    def label(self) -> str:
        return (f"Volcano Job {self.name!r} task pserver" if self.backend == "volcano"
                else f"StatefulSet {self.name!r}")


def _pserver_task(volcano: dict[str, Any], name: str) -> tuple[int, dict[str, Any]]:
    for i, task in enumerate((volcano.get("spec") or {}).get("tasks") or []):
        if isinstance(task, dict) and task.get("name") == "pserver":
            return i, task
    raise ClusterError(f"Volcano Job {name!r} has no pserver task")


def locate_pservers(client: KubeClient, job_name: str, namespace: str) -> PServerWorkload:
    """The pserver workload of job ``job_name``, either backend; ClusterError if none."""
    volcano = client.get(VOLCANO_JOB, namespace, job_name)
    if volcano is not None:
        index, task = _pserver_task(volcano, job_name)
        return PServerWorkload("volcano", VOLCANO_JOB, job_name, namespace, job_name,
                               int(task.get("replicas", 0)), task.get("template") or {},
                               volcano, index)
    kind = STATEFUL_SET
    name = Names.of_name(job_name).pserver
    stateful = client.get(kind, namespace, name)
    if stateful is None:
        raise ClusterError(f"no elasticps job {job_name!r} in namespace {namespace!r} (neither "
                           f"a Volcano Job {job_name!r} nor a StatefulSet {name!r})")
    spec = stateful.get("spec") or {}
    return PServerWorkload("kubernetes", kind, name, namespace, job_name,
                           int(spec.get("replicas", 0)), spec.get("template") or {}, stateful)


def _volcano_ops(w: PServerWorkload, target: int) -> list[dict[str, Any]]:
    spec = w.obj.get("spec") or {}
    task = spec["tasks"][w.task_index]
    path = f"/spec/tasks/{w.task_index}"
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"{path}/name", "value": "pserver"},
        {"op": "test", "path": f"{path}/replicas", "value": task.get("replicas")},
        {"op": "replace", "path": f"{path}/replicas", "value": target}]
    if "minAvailable" in task:
        old_min = int(task["minAvailable"])
        ops += [{"op": "test", "path": f"{path}/minAvailable", "value": old_min},
                {"op": "replace", "path": f"{path}/minAvailable", "value": target}]
        if "minAvailable" in spec:
            job_min = int(spec["minAvailable"])
            total = sum(int(t.get("replicas", 0)) for t in spec["tasks"]) - w.replicas + target
            ops += [{"op": "test", "path": "/spec/minAvailable", "value": job_min},
                    {"op": "replace", "path": "/spec/minAvailable",
                     "value": min(total, max(0, job_min - old_min + target))}]
    return ops


def _env_ops(w: PServerWorkload, target: int) -> list[dict[str, Any]]:
    """Set the pserver count in the StatefulSet's template, where the renderer put it."""
    containers = (w.template.get("spec") or {}).get("containers") or []
    if not containers:
        return []
    values = {"PADDLE_NUM_PSERVERS": str(target),
              "PADDLE_PSERVERS": ",".join(stateful_pserver_hosts(w.job_name, w.namespace,
                                                                 target))}
    ops: list[dict[str, Any]] = []
    for i, item in enumerate(containers[0].get("env") or []):
        if item.get("name") in _PSERVER_ENV and "value" in item \
                and item["value"] != values[item["name"]]:
            path = f"/spec/template/spec/containers/0/env/{i}"
            ops += [{"op": "test", "path": f"{path}/name", "value": item["name"]},
                    {"op": "replace", "path": f"{path}/value", "value": values[item["name"]]}]
    return ops


def replica_patch(w: PServerWorkload, target: int) -> list[dict[str, Any]]:
    """The JSON Patch that asks ``w`` for ``target`` pservers, conditional on what was read;
    growing a StatefulSet from 0 also sets the count in its template."""
    if w.backend == "volcano":
        return _volcano_ops(w, target)
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/spec/replicas", "value": w.replicas},
        {"op": "replace", "path": "/spec/replicas", "value": target}]
    if w.replicas == 0 and target > 0:
        ops += _env_ops(w, target)
    return ops


def scale_pservers(client: KubeClient, job_name: str, namespace: str, *, expect: int,
                   target: int) -> PServerWorkload:
    """Re-read the workload, check it still asks for ``expect`` pservers, patch it to
    ``target``; returns the workload as read. ClusterError names a mismatch."""
    w = locate_pservers(client, job_name, namespace)
    if w.replicas != expect:
        raise ClusterError(f"{w.label} of job {job_name} asks for {w.replicas} pserver(s), "
                           f"not {expect}: someone else changed it meanwhile")
    client.patch(w.kind, namespace, w.name, replica_patch(w, target))
    return w


__all__ = ["PServerWorkload", "locate_pservers", "replica_patch", "scale_pservers"]
