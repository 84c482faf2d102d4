"""NetworkPolicies of the master and pserver pods (the etcd's is in ``render/etcd.py``).

Only the job's own pods (label ``elasticps.io/job=<job>``) may open the gRPC port. Two ports are
open to any source, because their callers are not pods:

* the plaintext health port, probed by the kubelet; it answers SERVING or NOT_SERVING and
  serves nothing else;
* the master's status page, reached by the API server's service proxy (``elasticps status``);
  it requires the job token and is served over TLS;
* the Prometheus metrics port, scraped by a Prometheus that is not one of the job's pods; it
  serves counts and timings, no secrets.

Trainers serve nothing, so they need no policy of their own here. A NetworkPolicy is enforced
only where the cluster's network plugin implements them; mutual TLS does not depend on it.
"""

from __future__ import annotations

from typing import Any

from elasticps.cluster.render.common import (
    HEALTH_PORT,
    HTTP_PORT,
    LABEL_JOB,
    METRICS_PORT,
    PORT,
    Names,
    metadata,
    selector,
)
from elasticps.cluster.spec import Job


def _policy(job: Job, name: str, role: str, open_ports: list[int]) -> dict[str, Any]:
    ingress: list[dict[str, Any]] = [
        {"from": [{"podSelector": {"matchLabels": {LABEL_JOB: job.job_name}}}],
         "ports": [{"protocol": "TCP", "port": PORT}]},
        {"ports": [{"protocol": "TCP", "port": port} for port in open_ports]},
    ]
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(job, name, role),
        "spec": {"podSelector": {"matchLabels": selector(job, role)},
                 "policyTypes": ["Ingress"], "ingress": ingress},
    }


def network_policies(job: Job) -> list[dict[str, Any]]:
    """One policy for the master's pods and one for the pservers'."""
    names = Names.of(job)
    return [_policy(job, names.master, "master", [HEALTH_PORT, HTTP_PORT, METRICS_PORT]),
            _policy(job, names.pserver, "pserver", [HEALTH_PORT, METRICS_PORT])]
