"""The transfer Job of ``elasticps data upload DIR pvc://CLAIM``, as manifests (pure).

Three objects: a Secret holding the per-transfer token, a NetworkPolicy, and a ``batch/v1``
Job whose one pod mounts the claim read-write and runs ``elasticps data receive`` (see
:mod:`elasticps.data.receive`) into ``<mount>/<path in the claim>/<namespace>/<name>``, the
layout of the fsspec route. The pod mounts no service-account token, runs as the image's
non-root user with ``fsGroup`` so the claim is writable (the Pod Security "restricted"
profile's context: render/security.py), and is ready when the receiver answers ``/healthz``.
The NetworkPolicy admits connections to the receiver's port alone (from the API server's pod
proxy and the kubelet's probe, neither of them a pod, so from any source) and lets the pod
open none: it has nothing to fetch, and a receiver that is broken into cannot reach out.
``backoffLimit: 0`` (a failed receiver is reported, not retried: the CLI reruns the whole
transfer), ``activeDeadlineSeconds`` bounds how long it may hold the claim, and
``ttlSecondsAfterFinished`` removes it should the CLI not delete it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from elasticps.cluster.render.common import LABEL_MANAGED_BY
from elasticps.cluster.render.security import container_security_context, pod_security_context
from elasticps.data.receive import DEFAULT_IDLE_TIMEOUT, RECEIVER_PORT

CLAIM_MOUNT = "/mnt/claim"
TOKEN_DIR = "/etc/elasticps-transfer"
TOKEN_KEY = "token"
LABEL_TRANSFER = "elasticps.io/transfer"
ACTIVE_DEADLINE = 24 * 3600
TTL_AFTER_FINISHED = 600
RESOURCES = {"cpu": "500m", "memory": "256Mi"}  # streams in 1 MiB blocks; never more


@dataclass(frozen=True)
class Transfer:
    """One upload into a claim: the objects' name, where, and the image that receives."""

    name: str
    namespace: str
    claim: str
    directory: str  # the dataset directory inside the claim: PATH/NAMESPACE/NAME
    image: str

    @property
    def mount_dir(self) -> str:
        return f"{CLAIM_MOUNT}/{self.directory}"


def transfer_name(dataset: str, suffix: str) -> str:
    """``upload-<dataset>-<suffix>``: a DNS-1123 label short enough for the Job's pods."""
    stem = re.sub(r"[^a-z0-9-]+", "-", dataset.lower()).strip("-")[:30].strip("-")
    return f"upload-{stem or 'dataset'}-{suffix}"


def _metadata(transfer: Transfer) -> dict[str, Any]:
    return {"name": transfer.name, "namespace": transfer.namespace,
            "labels": {LABEL_MANAGED_BY: "elasticps",
                       "app.kubernetes.io/component": "transfer",
                       LABEL_TRANSFER: transfer.name}}


def transfer_objects(transfer: Transfer, token: str) -> list[dict[str, Any]]:
    """The Secret with ``token``, the NetworkPolicy and the receiving Job, in creation
    order."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": _metadata(transfer),
              "type": "Opaque", "stringData": {TOKEN_KEY: token}}
    container = {
        "name": "receive",
        "image": transfer.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["elasticps", "data", "receive", "--dir", transfer.mount_dir,
                    "--port", str(RECEIVER_PORT), "--token-file", f"{TOKEN_DIR}/{TOKEN_KEY}",
                    "--idle-timeout", str(int(DEFAULT_IDLE_TIMEOUT))],
        "ports": [{"name": "http", "containerPort": RECEIVER_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                           "periodSeconds": 2, "failureThreshold": 3},
        "resources": {"requests": dict(RESOURCES), "limits": dict(RESOURCES)},
        "securityContext": container_security_context(read_only_root=True),
        "volumeMounts": [{"name": "claim", "mountPath": CLAIM_MOUNT},
                         {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True}],
    }
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(transfer),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": ACTIVE_DEADLINE,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
            "template": {
                "metadata": {"labels": dict(_metadata(transfer)["labels"])},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": pod_security_context(),
                    "containers": [container],
                    "volumes": [
                        {"name": "claim",
                         "persistentVolumeClaim": {"claimName": transfer.claim}},
                        {"name": "token", "secret": {"secretName": transfer.name,
                                                     "defaultMode": 0o440}},
                    ],
                },
            },
        },
    }
    return [secret, _network_policy(transfer), job]


def _network_policy(transfer: Transfer) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _metadata(transfer),
        "spec": {"podSelector": {"matchLabels": {LABEL_TRANSFER: transfer.name}},
                 "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"ports": [{"protocol": "TCP", "port": RECEIVER_PORT}]}],
                 "egress": []},
    }


__all__ = ["CLAIM_MOUNT", "LABEL_TRANSFER", "TOKEN_DIR", "Transfer", "transfer_name",
           "transfer_objects"]
