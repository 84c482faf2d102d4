"""Submit a job to a cluster and follow it: the functions behind ``elasticps submit|status|logs|
delete``, and the handle that ``elasticps.launch_job``'s cluster backend wraps.

``submit`` renders, validates, then creates the objects in order, each owned by the job's
workload (:mod:`elasticps.cluster.job_create`); if one is refused, the ones this call created
are deleted again, so a failed submission leaves nothing behind. Every object carries the
label ``elasticps.io/job=<name>``, which is how ``status``, ``logs`` and ``delete`` find a job
without its spec.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from elasticps.cluster.code_archive import CodeArchive, pack_code
from elasticps.cluster.code_store import archive_url, code_limits, publish_code
from elasticps.cluster.job_create import create_objects
from elasticps.cluster.job_secrets import CA_KEY, TOKEN_KEY, JobSecrets
from elasticps.cluster.kube_client import (
    BATCH_JOB,
    KINDS,
    POD,
    SECRET,
    VOLCANO_JOB,
    KubeClient,
)
from elasticps.cluster.manifests import dry_run_yaml, job_secrets, render
from elasticps.cluster.render.code import config_map_name
from elasticps.cluster.render.common import LABEL_JOB, LABEL_ROLE, ROLES, Names, secret_object
from elasticps.cluster.spec import Job, warn_environment
from elasticps.cluster.validate import check_manifests
from elasticps.errors import ClusterError, ConfigError
from elasticps.master.status_access import TOKEN_HEADER
from elasticps.master.status_read import MAX_STATUS_BYTES

logger = logging.getLogger(__name__)

FINAL_PHASES = frozenset({"Completed", "Failed", "Aborted", "Terminated"})
KUBECTL_PROXY = "http://localhost:8001"  # where `kubectl proxy` serves the API by default
# Deleted in this order: controllers first so they stop recreating what follows.
_DELETE_ORDER = [
    VOLCANO_JOB, BATCH_JOB, KINDS[("apps/v1", "Deployment")], KINDS[("apps/v1", "StatefulSet")],
    KINDS[("v1", "Service")], KINDS[("networking.k8s.io/v1", "NetworkPolicy")],
    KINDS[("policy/v1", "PodDisruptionBudget")],
    KINDS[("v1", "Secret")], KINDS[("v1", "ConfigMap")],
    KINDS[("rbac.authorization.k8s.io/v1", "RoleBinding")],
    KINDS[("rbac.authorization.k8s.io/v1", "Role")], KINDS[("v1", "ServiceAccount")],
    KINDS[("v1", "PersistentVolumeClaim")],
]
_INDEX_KEYS = ("batch.kubernetes.io/job-completion-index", "volcano.sh/task-index",
               "apps.kubernetes.io/pod-index")


@dataclass(frozen=True)
class PodInfo:
    """One pod of a job as ``status`` shows it."""

    name: str
    role: str
    index: int | None
    phase: str
    ready: bool
    restarts: int
    node: str | None
    created: str = ""


@dataclass(frozen=True)
class JobStatus:
    """A cluster job's status, what ``elasticps status`` prints: its phase (the Volcano Job's,
    or the trainers' Indexed Job's as :func:`batch_phase` reads it), its pods by role, and the
    master's status document (``/api/status``) when reachable."""

    job: str
    namespace: str
    backend: str
    phase: str  # Pending, Running, Completed, Failed, Aborted, Terminated...
    pods: tuple[PodInfo, ...] = ()
    master: dict[str, Any] | None = None  # the master's status document
    master_error: str | None = None  # why there is none

    @property
    def finished(self) -> bool:
        return self.phase in FINAL_PHASES

    @property
    def succeeded(self) -> bool:
        return self.phase == "Completed"

    def by_role(self) -> dict[str, list[PodInfo]]:
        out: dict[str, list[PodInfo]] = {}
        for pod in self.pods:
            out.setdefault(pod.role, []).append(pod)
        return out

    def summary(self) -> str:
        lines = [f"job {self.job} (namespace {self.namespace}, {self.backend}): {self.phase}"]
        for role, pods in sorted(self.by_role().items(), key=lambda kv: role_order(kv[0])):
            ready = sum(p.ready for p in pods)
            restarts = sum(p.restarts for p in pods)
            lines.append(f"  {role:<8} {len(pods)} pod(s), {ready} ready, {restarts} restart(s)")
            for pod in pods:
                index = "-" if pod.index is None else str(pod.index)
                lines.append(f"    {pod.name:<45} index {index:<3} {pod.phase:<10} "
                             f"{'ready' if pod.ready else 'not ready':<9} "
                             f"restarts {pod.restarts}  node {pod.node or '-'}")
        if self.master is not None:
            lines.append("  master status page: " + json.dumps(self.master, sort_keys=True))
        elif self.master_error:
            lines.append(f"  master status page unavailable: {self.master_error}")
        return "\n".join(lines)


def role_order(role: str) -> tuple[int, str]:
    order = [*ROLES, "etcd"]
    return (order.index(role) if role in order else len(order), role)


@dataclass
class SubmittedJob:
    """A submitted (or dry-run) job: ``status_url()``, ``status()``, ``logs()``, ``delete()``.
    Waiting for its end is :class:`elasticps.jobs.cluster_backend.ClusterJobHandle`'s."""

    name: str
    namespace: str
    backend: str
    client: KubeClient | None = None
    manifests: list[dict[str, Any]] = field(default_factory=list)
    job: Job | None = None
    spec_path: str = "JOB.yaml"
    code: CodeArchive | None = None  # the packed ``code:`` directory, when the spec ships one

    def code_location(self) -> str | None:
        """Where the trainers get the code from: the ConfigMap or the archive's URL."""
        if self.code is None or self.job is None:
            return None
        if self.job.code_url is None:
            return f"ConfigMap {config_map_name(self.name, self.code)}"
        return archive_url(self.job.code_url, self.code.sha256)

    @property
    def dry_run(self) -> bool:
        return self.client is None

    def yaml(self) -> str:
        """The manifests as a YAML stream; the job's Secret is never in it, only a note on how
        it is made (a dry run's Secret holds placeholders anyway)."""
        assert self.job is not None
        return dry_run_yaml(self.job, self.manifests, self.spec_path)

    def status_url(self) -> str:
        """The master's status page through the API server's service proxy. Open it with
        ``kubectl proxy`` running (a dry run assumes that, on its default port); it needs the
        job token in the ``X-Elasticps-Token`` header (``elasticps status`` sends it)."""
        host = KUBECTL_PROXY if self.client is None else self.client.host
        scheme = "" if self.job is not None and self.job.insecure else "https:"
        return (f"{host}/api/v1/namespaces/{self.namespace}/services/"
                f"{scheme}{Names.of_name(self.name).master}:http/proxy/")

    def _client(self) -> KubeClient:
        if self.client is None:
            raise ClusterError(f"job {self.name} was a dry run; nothing runs on a cluster")
        return self.client

    def status(self) -> JobStatus:
        return job_status(self._client(), self.name, self.namespace)

    def logs(self, role: str = "trainer", index: int = 0, *,
             follow: bool = False) -> Iterator[str]:
        return pod_logs(self._client(), self.name, self.namespace, role=role, index=index,
                        follow=follow)

    def delete(self) -> list[str]:
        return delete_job(self._client(), self.name, self.namespace)


def submit(job: Job, backend: str = "volcano", dry_run: bool = False, *,
           client: KubeClient | None = None, secrets: JobSecrets | None = None,
           check: bool = True, environ: Mapping[str, str] | None = None,
           spec_path: str = "JOB.yaml") -> SubmittedJob:
    """Render, validate and (unless ``dry_run``) create the job's objects.

    ``secrets`` default to fresh ones (a token, a CA, certificates); a dry run renders
    placeholders instead, so its manifests can never carry a secret. ``environ`` (default
    ``os.environ``) is where the submitter's ``PADDLE_USE_GPU`` is checked against the GPUs
    asked (a warning).
    """
    _check_cluster_job(job)
    warn_environment(job, os.environ if environ is None else environ)
    if dry_run:
        secrets = None
    elif secrets is None:
        secrets = job_secrets(job)
    code = None if job.code is None else pack_code(job.code, code_limits(job),
                                                   include=job.code_include)
    objects = render(job, backend, secrets=secrets, code=code)
    if check:
        check_manifests(objects)
    handle = SubmittedJob(job.job_name, job.plan.namespace, backend, None, objects, job,
                          spec_path, code)
    if dry_run:
        return handle
    handle.client = client if client is not None else KubeClient.from_kubeconfig()
    if code is not None and job.code_url is not None:
        # before any pod exists that would fetch it; content-addressed, so a failed
        # submission leaves nothing that needs removing
        publish_code(code, job.code_url)
    create_objects(handle.client, job, objects)
    logger.info("Submitted job %s to namespace %s (%s, %d objects); status page: %s",
                job.job_name, job.plan.namespace, backend, len(objects), handle.status_url())
    return handle


def _check_cluster_job(job: Job) -> None:
    if job.backend != "cluster":
        raise ConfigError(f"job spec field 'backend': the job's backend is {job.backend}; run "
                          "it with `elasticps run` or elasticps.launch_job, not on a cluster")
    if job.insecure:
        logger.warning("Job %s is submitted with insecure: true: no TLS on gRPC, the status "
                       "page or the job's etcd, and the token crosses the network in clear.",
                       job.job_name)


def submit_secret(job: Job, *, client: KubeClient | None = None,
                  secrets: JobSecrets | None = None) -> str:
    """Create only the job's Secret (fresh secrets unless given), for manifests applied with
    ``kubectl`` from a dry run. Returns the Secret's name; its values are never shown."""
    _check_cluster_job(job)
    client = client if client is not None else KubeClient.from_kubeconfig()
    secret = secret_object(job, secrets if secrets is not None else job_secrets(job))
    create_objects(client, job, [secret])
    logger.info("Created Secret %s of job %s in namespace %s.", secret["metadata"]["name"],
                job.job_name, job.plan.namespace)
    return str(secret["metadata"]["name"])


def _pod_index(pod: dict[str, Any]) -> int | None:
    meta = pod.get("metadata", {})
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        for key in _INDEX_KEYS:
            if key in source and str(source[key]).isdigit():
                return int(source[key])
    return None


def pod_info(pod: dict[str, Any]) -> PodInfo:
    meta = pod.get("metadata", {})
    status = pod.get("status", {})
    containers = status.get("containerStatuses") or []
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return PodInfo(
        name=meta.get("name", "?"),
        role=(meta.get("labels") or {}).get(LABEL_ROLE, "?"),
        index=_pod_index(pod),
        phase=status.get("phase", "Unknown"),
        ready=conditions.get("Ready") == "True",
        restarts=sum(int(c.get("restartCount", 0)) for c in containers),
        node=pod.get("spec", {}).get("nodeName"),
        created=meta.get("creationTimestamp", ""),
    )


def batch_phase(job: dict[str, Any]) -> str:
    """A ``batch/v1`` Job's phase in Volcano's words (Pending, Running, Completed, Failed),
    from the Job's Kubernetes ``status``."""
    status = job.get("status", {})
    conditions = {c.get("type") for c in status.get("conditions") or []
                  if c.get("status") == "True"}
    if "Complete" in conditions:
        return "Completed"
    if "Failed" in conditions:
        return "Failed"
    return "Running" if status.get("active") else "Pending"


def job_status(client: KubeClient, name: str, namespace: str) -> JobStatus:
    """The cluster job's :class:`JobStatus`: its phase, pods per role with restarts, and the
    master's ``/api/status`` when it answers."""
    volcano = client.get(VOLCANO_JOB, namespace, name)
    if volcano is not None:
        backend = "volcano"
        phase = volcano.get("status", {}).get("state", {}).get("phase") or "Pending"
    else:
        trainer_job = client.get(BATCH_JOB, namespace, Names.of_name(name).trainer)
        if trainer_job is None:
            raise ClusterError(f"no elasticps job {name!r} in namespace {namespace!r}")
        backend, phase = "kubernetes", batch_phase(trainer_job)
    pods = sorted((pod_info(p) for p in client.list(POD, namespace, f"{LABEL_JOB}={name}")),
                  key=lambda p: (role_order(p.role), p.index if p.index is not None else -1,
                                 p.name))
    master: dict[str, Any] | None = None
    master_error: str | None = None
    if any(p.role == "master" and p.ready for p in pods):
        try:
            token, tls = _status_credentials(client, name, namespace)
            body = client.proxy_get(namespace, Names.of_name(name).master, "http", "/api/status",
                                    scheme="https" if tls else "http",
                                    headers={TOKEN_HEADER: token}, limit=MAX_STATUS_BYTES)
            master = json.loads(body)
        except (ClusterError, ValueError) as exc:
            master_error = str(exc)
    else:
        master_error = "no master pod is ready yet"
    return JobStatus(name, namespace, backend, phase, tuple(pods), master, master_error)


def _status_credentials(client: KubeClient, name: str, namespace: str) -> tuple[str, bool]:
    """The job token (from the job's Secret, which the submitting user may read) and whether
    the job uses TLS; the status page refuses requests without the token."""
    secret = client.get(SECRET, namespace, Names.of_name(name).secret)
    data = (secret or {}).get("data") or {}
    if TOKEN_KEY not in data:
        raise ClusterError(f"job {name}'s Secret {Names.of_name(name).secret} has no token")
    try:
        token = base64.b64decode(data[TOKEN_KEY], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ClusterError(f"job {name}'s Secret holds a token that is not base64") from exc
    return token, CA_KEY in data


def pod_logs(client: KubeClient, name: str, namespace: str, *, role: str = "trainer",
             index: int = 0, follow: bool = False,
             tail_lines: int | None = None) -> Iterator[str]:
    """Log lines of the ``index``-th pod of ``role`` (the newest pod holding that index)."""
    if role not in (*ROLES, "etcd"):
        raise ConfigError(f"role {role!r} is not one of {', '.join((*ROLES, 'etcd'))}")
    pods = [pod_info(p) for p in client.list(
        POD, namespace, f"{LABEL_JOB}={name},{LABEL_ROLE}={role}")]
    if not pods:
        raise ClusterError(f"job {name!r} has no {role} pods in namespace {namespace!r}")
    chosen = [p for p in pods if p.index == index]
    if not chosen and all(p.index is None for p in pods):  # e.g. the master's Deployment
        ordered = sorted(pods, key=lambda p: p.name)
        chosen = ordered[index:index + 1]
    if not chosen:
        known = sorted({p.index for p in pods if p.index is not None})
        raise ClusterError(f"job {name!r} has no {role} pod with index {index}; "
                           f"indexes present: {known}")
    pod = max(chosen, key=lambda p: (p.phase == "Running", p.created))
    container = "etcd" if role == "etcd" else role
    return client.read_log(namespace, pod.name, container, follow=follow, tail_lines=tail_lines)


def delete_job(client: KubeClient, name: str, namespace: str) -> list[str]:
    """Delete every object labelled with the job; returns ``Kind/name`` of each one that was
    there. The workload goes first; what it owns may already be gone with it (the garbage
    collector's work), and is deleted here otherwise (a job applied with kubectl has no owner
    references)."""
    selector = f"{LABEL_JOB}={name}"
    found = [(kind, str(obj.get("metadata", {}).get("name", ""))) for kind in _DELETE_ORDER
             for obj in client.list(kind, namespace, selector)]
    deleted: list[str] = []
    for kind, obj_name in found:
        client.delete(kind, namespace, obj_name)  # False: gone with its owner meanwhile
        deleted.append(f"{kind.kind}/{obj_name}")
    if not deleted:
        raise ClusterError(f"no elasticps job {name!r} in namespace {namespace!r}")
    logger.info("Deleted job %s in namespace %s: %s.", name, namespace, ", ".join(deleted))
    return deleted


__all__ = ["JobStatus", "PodInfo", "SubmittedJob", "delete_job", "job_status",
           "pod_logs", "submit", "submit_secret"]
