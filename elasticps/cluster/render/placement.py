"""Where pods may go: topology spread of the pservers and of etcd's members, and the priority
class every pod carries when the spec names one.

* pservers: spread over nodes, and zones where there are, as a preference
  (``ScheduleAnyway``): losing one node then stops one shard, not all of them; a cluster with
  fewer nodes than pservers still places them all.
* etcd members: one per node as a rule (``DoNotSchedule``, ``maxSkew: 1``), so one node lost
  keeps the quorum; zones as a preference. Nodes a member could not run on anyway (taints it
  does not tolerate, a node cordoned) are not counted (``nodeTaintsPolicy: Honor``), so a
  cordoned node does not hold the next member back. On a one-node cluster every member goes
  to that node (one domain has no skew).
"""

from __future__ import annotations

from typing import Any

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _constraint(topology_key: str, match_labels: dict[str, str],
                when_unsatisfiable: str) -> dict[str, Any]:
    return {"maxSkew": 1, "topologyKey": topology_key,
            "whenUnsatisfiable": when_unsatisfiable,
            "labelSelector": {"matchLabels": dict(match_labels)},
            "nodeTaintsPolicy": "Honor"}


def spread_over_nodes(match_labels: dict[str, str], *, required: bool) -> list[dict[str, Any]]:
    """``topologySpreadConstraints`` for the pods ``match_labels`` selects: over nodes (a rule
    when ``required``, else a preference), and over zones as a preference."""
    return [_constraint(HOSTNAME, match_labels,
                        "DoNotSchedule" if required else "ScheduleAnyway"),
            _constraint(ZONE, match_labels, "ScheduleAnyway")]


def add_priority(pod_spec: dict[str, Any], priority_class: str | None) -> None:
    """Give a pod spec the spec's priority class (in place), when it names one."""
    if priority_class is not None:
        pod_spec["priorityClassName"] = priority_class
