"""``elasticps list``: the elasticps jobs of a namespace, with phase, trainers and age.

A job is found by its workload, labelled ``app.kubernetes.io/managed-by=elasticps``: a Volcano
Job, or (plain Kubernetes) the Indexed Job of its trainers. Trainers are shown as running /
wanted, counted from the namespace's elasticps pods in one list call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from elasticps.cluster.kube_client import BATCH_JOB, POD, VOLCANO_JOB, KubeClient
from elasticps.cluster.render.common import LABEL_JOB, LABEL_MANAGED_BY, LABEL_ROLE
from elasticps.cluster.submit import batch_phase


@dataclass(frozen=True)
class JobSummary:
    """One line of ``elasticps list``."""

    name: str
    backend: str
    phase: str
    trainers_wanted: int
    trainers_running: int
    created: str

    def age(self, now: datetime) -> str:
        return format_age(self.created, now)


def format_age(created: str, now: datetime) -> str:
    """``kubectl``-style age of an RFC 3339 timestamp: ``45s``, ``12m``, ``5h``, ``3d``."""
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _trainer_task_replicas(job: dict[str, Any]) -> int:
    for task in job.get("spec", {}).get("tasks") or []:
        if task.get("name") == "trainer":
            return int(task.get("replicas", 0))
    return 0


def list_jobs(client: KubeClient, namespace: str) -> list[JobSummary]:
    """Every elasticps job in ``namespace``, sorted by name."""
    managed = f"{LABEL_MANAGED_BY}=elasticps"
    running: dict[str, int] = {}
    for pod in client.list(POD, namespace, f"{managed},{LABEL_ROLE}=trainer"):
        meta = pod.get("metadata", {})
        if pod.get("status", {}).get("phase") == "Running":
            job = (meta.get("labels") or {}).get(LABEL_JOB, "")
            running[job] = running.get(job, 0) + 1
    found: list[JobSummary] = []
    for job in client.list(VOLCANO_JOB, namespace, managed):
        meta = job.get("metadata", {})
        name = meta.get("name", "?")
        phase = job.get("status", {}).get("state", {}).get("phase") or "Pending"
        found.append(JobSummary(name, "volcano", phase, _trainer_task_replicas(job),
                                running.get(name, 0), meta.get("creationTimestamp", "")))
    for job in client.list(BATCH_JOB, namespace, f"{managed},{LABEL_ROLE}=trainer"):
        meta = job.get("metadata", {})
        name = (meta.get("labels") or {}).get(LABEL_JOB, meta.get("name", "?"))
        found.append(JobSummary(name, "kubernetes", batch_phase(job),
                                int(job.get("spec", {}).get("parallelism", 0)),
                                running.get(name, 0), meta.get("creationTimestamp", "")))
    return sorted(found, key=lambda j: j.name)


def format_table(jobs: list[JobSummary], now: datetime | None = None) -> str:
    """The jobs as aligned columns, like ``kubectl get``."""
    now = now or datetime.now(UTC)
    rows = [("NAME", "BACKEND", "PHASE", "TRAINERS", "AGE")]
    rows += [(j.name, j.backend, j.phase, f"{j.trainers_running}/{j.trainers_wanted}",
              j.age(now)) for j in jobs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


__all__ = ["JobSummary", "format_age", "format_table", "list_jobs"]
