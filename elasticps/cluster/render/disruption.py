"""PodDisruptionBudgets: how many of a job's pods a node drain (or any eviction through the
API) may take at once. Both backends render the same ones.

* pservers: one at a time (``maxUnavailable: 1``): each evicted pserver stops its shard until
  its replacement restored the checkpoint, and the trainers wait for it.
* trainers: ``min_trainers`` stay (the job goes on with that many; more may be evicted).
* etcd, when it has several members: a quorum stays (``minAvailable: replicas // 2 + 1``).
  A single member gets none: a budget could only forbid draining its node for good.
* The master gets none: it is one pod whose replacement takes the election lock and goes on
  from the store, and a budget of one pod would block every drain of its node.
"""

from __future__ import annotations

from typing import Any

from elasticps.cluster.render.common import Names, metadata, selector
from elasticps.cluster.spec import Job


def _budget(job: Job, name: str, role: str, rule: dict[str, int]) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": metadata(job, name, role),
            "spec": {**rule, "selector": {"matchLabels": selector(job, role)}}}


def disruption_budgets(job: Job) -> list[dict[str, Any]]:
    """The job's PodDisruptionBudgets, in creation order."""
    names = Names.of(job)
    budgets = [_budget(job, names.pserver, "pserver", {"maxUnavailable": 1}),
               _budget(job, names.trainer, "trainer", {"minAvailable": job.plan.min_trainers})]
    members = job.etcd_spec.replicas
    if job.etcd_spec.deploy and members > 1:
        budgets.append(_budget(job, names.etcd, "etcd", {"minAvailable": members // 2 + 1}))
    return budgets
