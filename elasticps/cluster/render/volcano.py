"""Volcano: one ``batch.volcano.sh/v1alpha1`` Job with tasks master / pserver / trainer.

* Gang scheduling: ``minAvailable = 1 + pservers + min_trainers``; nothing starts until the
  master, every pserver and ``min_trainers`` trainers can all be placed.
* Per-task policies, not job-wide ones: a pod that fails or is evicted is restarted alone
  (``RestartPod``); the job is never restarted because one pod died, unlike the old CTR demo
  (``PodEvicted -> RestartJob``). Containers use ``restartPolicy: OnFailure``, so an ordinary
  crash restarts the container in place and keeps its emptyDir checkpoints.
* ``TaskCompleted`` of the trainer task (every trainer exited 0) completes the job, which
  stops the master and pservers.
* Plugins: ``svc`` for stable pod DNS names (``<job>-pserver-<i>.<job>``; network policy off so
  the API server can proxy the master's status page) and ``env`` (``VC_TASK_INDEX``).
  Discovery itself goes through the store; the trainer index comes from the
  ``volcano.sh/task-index`` annotation.

The job's Secret, RBAC, the master Service, the NetworkPolicies and the job's etcd are plain
objects next to it.
"""

from __future__ import annotations

from typing import Any

from elasticps.cluster.code_archive import CodeArchive
from elasticps.cluster.job_secrets import JobSecrets
from elasticps.cluster.render.common import (
    Names,
    code_objects,
    common_objects,
    metadata,
    pod_template,
    trainer_bounds,
)
from elasticps.cluster.render.etcd import etcd_objects
from elasticps.cluster.render.network import network_policies
from elasticps.cluster.spec import Job

TRAINER_INDEX_PATH = "metadata.annotations['volcano.sh/task-index']"
API_VERSION = "batch.volcano.sh/v1alpha1"

_RESTART_FAILED_POD = {"events": ["PodFailed", "PodEvicted"], "action": "RestartPod"}


def pserver_hosts(job: Job) -> list[str]:
    return [f"{job.job_name}-pserver-{i}.{job.job_name}" for i in range(job.plan.pservers)]


def _task(job: Job, role: str, replicas: int, min_available: int,
          policies: list[dict[str, Any]], code: CodeArchive | None) -> dict[str, Any]:
    return {
        "name": role,
        "replicas": replicas,
        "minAvailable": min_available,
        "policies": policies,
        "template": pod_template(job, role, restart_policy="OnFailure",
                                 pserver_hosts=pserver_hosts(job),
                                 trainer_index_path=TRAINER_INDEX_PATH, code=code),
    }


def volcano_job(job: Job, code: CodeArchive | None = None) -> dict[str, Any]:
    plan = job.plan
    return {
        "apiVersion": API_VERSION, "kind": "Job",
        "metadata": {**metadata(job, Names.of(job).job), "annotations": trainer_bounds(job)},
        "spec": {
            "schedulerName": "volcano",
            "queue": job.queue,
            "minAvailable": 1 + plan.pservers + plan.min_trainers,
            "plugins": {"svc": ["--publish-not-ready-addresses=true",
                                "--disable-network-policy=true"],
                        "env": []},
            "tasks": [
                _task(job, "master", 1, 1, [dict(_RESTART_FAILED_POD)], code),
                _task(job, "pserver", plan.pservers, plan.pservers,
                      [dict(_RESTART_FAILED_POD)], code),
                _task(job, "trainer", plan.trainers, plan.min_trainers,
                      [dict(_RESTART_FAILED_POD),
                       {"event": "TaskCompleted", "action": "CompleteJob"}], code),
            ],
        },
    }


def render(job: Job, *, secrets: JobSecrets,
           code: CodeArchive | None = None) -> list[dict[str, Any]]:
    """Every object of the job, in the order they must be created; ``code``: the packed
    ``code:`` directory the trainers unpack."""
    return [*common_objects(job, secrets), *code_objects(job, code), *etcd_objects(job),
            *network_policies(job), volcano_job(job, code)]
