"""Plain Kubernetes: the job as built-in objects, no scheduler plugins needed.

Objects, in creation order: ServiceAccount, trainer Job (it owns every other object once they
are created, so deleting it deletes the job), Role, RoleBinding, the job's Secret, master
Service, etcd Service + NetworkPolicy + StatefulSet + setup Job (when the job deploys its own),
master and pserver NetworkPolicies, pserver headless Service, master Deployment, pserver
StatefulSet, PodDisruptionBudgets.

* master: a Deployment of one replica. The election lock in the store makes a second master
  (during a rolling update) a harmless standby; the Service only routes to the ready leader.
* pservers: a StatefulSet (stable names ``<job>-pserver-<i>``, started in parallel). Slots are
  still claimed in the store, so a replacement pod takes whatever slot is free.
* trainers: an Indexed Job with ``backoffLimitPerIndex``: a failed trainer pod is replaced
  alone, for its own index, while the others go on; ``maxFailedIndexes`` lets up to
  ``trainers - min_trainers`` indexes give up for good. The Job completes when every index
  has exited 0, i.e. when the data is consumed. Elastic scaling: patch ``parallelism`` and
  ``completions`` together (Kubernetes >= 1.27 allows it for Indexed Jobs).
* deadlines: ``active_deadline`` is the trainer Job's ``activeDeadlineSeconds`` (past it the
  Job is Failed and its pods stopped); ``ttl_after_finished`` seconds after the Job finished
  (Complete or Failed) it is deleted, and with it, as their owner, the master, the pservers,
  etcd and every other object of the job.
"""

from __future__ import annotations

from typing import Any

from elasticps.cluster.code_archive import CodeArchive
from elasticps.cluster.job_secrets import JobSecrets
from elasticps.cluster.render.common import (
    PORT,
    Names,
    code_objects,
    common_objects,
    metadata,
    namespace,
    pod_template,
    selector,
    service_account,
    trainer_bounds,
)
from elasticps.cluster.render.disruption import disruption_budgets
from elasticps.cluster.render.etcd import etcd_objects
from elasticps.cluster.render.network import network_policies
from elasticps.cluster.spec import Job

TRAINER_INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
TRAINER_BACKOFF_PER_INDEX = 3


def stateful_pserver_hosts(job_name: str, namespace: str, count: int) -> list[str]:
    """The stable DNS names of the pserver StatefulSet's first ``count`` pods."""
    pserver = Names.of_name(job_name).pserver
    return [f"{pserver}-{i}.{pserver}.{namespace}.svc" for i in range(count)]


def pserver_hosts(job: Job) -> list[str]:
    return stateful_pserver_hosts(job.job_name, namespace(job), job.plan.pservers)


def render(job: Job, *, secrets: JobSecrets,
           code: CodeArchive | None = None) -> list[dict[str, Any]]:
    """Every object of the job, in the order they must be created (the ServiceAccount, then
    the trainer Job that owns the rest); ``code``: the packed ``code:`` directory the
    trainers unpack."""
    names = Names.of(job)
    plan = job.plan
    hosts = pserver_hosts(job)

    def template(role: str, restart_policy: str) -> dict[str, Any]:
        return pod_template(job, role, restart_policy=restart_policy, pserver_hosts=hosts,
                            trainer_index_path=TRAINER_INDEX_PATH, code=code)

    pserver_service = {
        "apiVersion": "v1", "kind": "Service", "metadata": metadata(job, names.pserver, "pserver"),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": selector(job, "pserver"),
                 "ports": [{"name": "grpc", "port": PORT, "targetPort": "grpc"}]},
    }
    master = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata(job, names.master, "master"),
        "spec": {"replicas": 1, "selector": {"matchLabels": selector(job, "master")},
                 "template": template("master", "Always")},
    }
    pservers = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": metadata(job, names.pserver, "pserver"),
        "spec": {"serviceName": names.pserver, "replicas": plan.pservers,
                 "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": selector(job, "pserver")},
                 "template": template("pserver", "Always")},
    }
    trainer_spec: dict[str, Any] = {
        "completionMode": "Indexed", "completions": plan.trainers,
        "parallelism": plan.trainers,
        "backoffLimitPerIndex": TRAINER_BACKOFF_PER_INDEX,
        "maxFailedIndexes": plan.trainers - plan.min_trainers,
        "podReplacementPolicy": "Failed",
        "ttlSecondsAfterFinished": job.ttl_after_finished,
        "template": template("trainer", "Never")}
    if job.active_deadline is not None:
        trainer_spec["activeDeadlineSeconds"] = job.active_deadline
    trainers = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {**metadata(job, names.trainer, "trainer"),
                     "annotations": trainer_bounds(job)},
        "spec": trainer_spec,
    }
    return [service_account(job), trainers, *common_objects(job, secrets),
            *code_objects(job, code), *etcd_objects(job), *network_policies(job),
            pserver_service, master, pservers, *disruption_budgets(job)]
