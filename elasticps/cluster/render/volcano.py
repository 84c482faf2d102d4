"""Volcano: one ``batch.volcano.sh/v1alpha1`` Job with tasks master / pserver / trainer.

* Gang scheduling: ``minAvailable = 1 + pservers + min_trainers``; nothing starts until the
  master, every pserver and ``min_trainers`` trainers can all be placed.
* Per-task policies, not job-wide ones: a pod that fails or is evicted is restarted alone
  (``RestartPod``); the job is never restarted because one pod died, unlike the old CTR demo
  (``PodEvicted -> RestartJob``). The master and pservers use ``restartPolicy: OnFailure``, so
  an ordinary crash restarts the container in place and keeps its emptyDir checkpoints.
  Trainers use ``Never``: a script that raises fails its pod, which Volcano replaces and
  counts; past ``maxRetry`` replacements (:data:`RESTARTS_PER_POD` per pod of the job) the
  job is Failed rather than crash-looping for ever.
* Deadlines: with ``active_deadline`` the master's pod gets ``activeDeadlineSeconds``; the
  kubelet fails it when that passes (its crashes restart in place, so nothing else fails it)
  and the master task's ``PodFailed -> TerminateJob`` ends the whole job. The job is deleted
  ``ttl_after_finished`` seconds after it finished, and every other object of the job with it
  (they are owned by it: :mod:`elasticps.cluster.job_create`).
* ``TaskCompleted`` of the trainer task (every trainer exited 0) completes the job, which
  stops the master and pservers.
* Plugins: ``svc`` for stable pod DNS names (``<job>-pserver-<i>.<job>``; network policy off so
  the API server can proxy the master's status page) and ``env`` (``VC_TASK_INDEX``).
  Discovery itself goes through the store; the trainer index comes from the
  ``volcano.sh/task-index`` annotation.

The job's Secret, RBAC, the master Service, the NetworkPolicies, the PodDisruptionBudgets and
the job's etcd are plain objects next to it, owned by it once created. Creation order: the
ServiceAccount (pods cannot be admitted without it), the Volcano Job, then the rest.
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
    service_account,
    trainer_bounds,
)
from elasticps.cluster.render.disruption import disruption_budgets
from elasticps.cluster.render.etcd import etcd_objects
from elasticps.cluster.render.network import network_policies
from elasticps.cluster.spec import Job

TRAINER_INDEX_PATH = "metadata.annotations['volcano.sh/task-index']"
API_VERSION = "batch.volcano.sh/v1alpha1"

RESTARTS_PER_POD = 3  # maxRetry: this many replacements per pod of the job, in all

_RESTART_FAILED_POD = {"events": ["PodFailed", "PodEvicted"], "action": "RestartPod"}
# With a deadline, the master's pod fails only when it passed (its crashes restart in place).
_MASTER_DEADLINE = [{"event": "PodEvicted", "action": "RestartPod"},
                    {"event": "PodFailed", "action": "TerminateJob"}]


def pserver_hosts(job: Job) -> list[str]:
    return [f"{job.job_name}-pserver-{i}.{job.job_name}" for i in range(job.plan.pservers)]


def _task(job: Job, role: str, replicas: int, min_available: int,
          policies: list[dict[str, Any]], code: CodeArchive | None) -> dict[str, Any]:
    template = pod_template(job, role,
                            restart_policy="Never" if role == "trainer" else "OnFailure",
                            pserver_hosts=pserver_hosts(job),
                            trainer_index_path=TRAINER_INDEX_PATH, code=code)
    if role == "master" and job.active_deadline is not None:
        template["spec"]["activeDeadlineSeconds"] = job.active_deadline
    return {"name": role, "replicas": replicas, "minAvailable": min_available,
            "policies": policies, "template": template}


def restart_budget(job: Job) -> int:
    """``maxRetry``: the pod replacements the whole job may take before it is Failed."""
    return RESTARTS_PER_POD * (1 + job.plan.pservers + job.plan.max_trainers)


def volcano_job(job: Job, code: CodeArchive | None = None) -> dict[str, Any]:
    plan = job.plan
    master_policies = ([dict(p) for p in _MASTER_DEADLINE] if job.active_deadline is not None
                       else [dict(_RESTART_FAILED_POD)])
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": job.queue,
        "minAvailable": 1 + plan.pservers + plan.min_trainers,
        "maxRetry": restart_budget(job),
        "ttlSecondsAfterFinished": job.ttl_after_finished,
        "plugins": {"svc": ["--publish-not-ready-addresses=true",
                            "--disable-network-policy=true"],
                    "env": []},
        "tasks": [
            _task(job, "master", 1, 1, master_policies, code),
            _task(job, "pserver", plan.pservers, plan.pservers,
                  [dict(_RESTART_FAILED_POD)], code),
            _task(job, "trainer", plan.trainers, plan.min_trainers,
                  [dict(_RESTART_FAILED_POD),
                   {"event": "TaskCompleted", "action": "CompleteJob"}], code),
        ],
    }
    if job.priority_class is not None:  # the PodGroup's priority, beside each pod's
        spec["priorityClassName"] = job.priority_class
    return {"apiVersion": API_VERSION, "kind": "Job",
            "metadata": {**metadata(job, Names.of(job).job), "annotations": trainer_bounds(job)},
            "spec": spec}


def render(job: Job, *, secrets: JobSecrets,
           code: CodeArchive | None = None) -> list[dict[str, Any]]:
    """Every object of the job, in the order they must be created (the ServiceAccount, then
    the Volcano Job that owns the rest); ``code``: the packed ``code:`` directory the
    trainers unpack."""
    return [service_account(job), volcano_job(job, code), *common_objects(job, secrets),
            *code_objects(job, code), *etcd_objects(job), *network_policies(job),
            *disruption_budgets(job)]
