"""The etcd a job deploys for itself (both backends): a headless Service, a NetworkPolicy that
admits only the job's own pods, and a StatefulSet of 1/3/5/7 members with stable DNS names.

Members bootstrap statically (``--initial-cluster`` lists every member's stable name), start in
parallel so a quorum can form, and keep their data on a PVC per member (deleted with the
StatefulSet) unless ``etcd.storage`` is null, in which case an emptyDir is used.
"""

from __future__ import annotations

from typing import Any

from elasticps.cluster.render_common import Names, labels, metadata, namespace, selector
from elasticps.cluster.spec import Job

CLIENT_PORT = 2379
PEER_PORT = 2380
DATA_DIR = "/var/run/etcd"


def etcd_objects(job: Job) -> list[dict[str, Any]]:
    if not job.etcd_spec.deploy:
        return []
    return [_service(job), _network_policy(job), _statefulset(job)]


def _service(job: Job) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(job, Names.of(job).etcd, "etcd"),
        "spec": {
            "clusterIP": "None",
            # Members must resolve each other before any is ready, or bootstrap never ends.
            "publishNotReadyAddresses": True,
            "selector": selector(job, "etcd"),
            "ports": [{"name": "client", "port": CLIENT_PORT, "targetPort": "client"},
                      {"name": "peer", "port": PEER_PORT, "targetPort": "peer"}],
        },
    }


def _network_policy(job: Job) -> dict[str, Any]:
    # etcd here runs without TLS or auth; only this job's pods may talk to it.
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(job, Names.of(job).etcd, "etcd"),
        "spec": {
            "podSelector": {"matchLabels": selector(job, "etcd")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"elasticps.io/job": job.job_name}}}],
                 "ports": [{"protocol": "TCP", "port": CLIENT_PORT}]},
                {"from": [{"podSelector": {"matchLabels": selector(job, "etcd")}}],
                 "ports": [{"protocol": "TCP", "port": PEER_PORT}]},
            ],
        },
    }


def _statefulset(job: Job) -> dict[str, Any]:
    spec = job.etcd_spec
    name = Names.of(job).etcd
    domain = f"{name}.{namespace(job)}.svc"
    initial_cluster = ",".join(f"{name}-{i}=http://{name}-{i}.{domain}:{PEER_PORT}"
                               for i in range(spec.replicas))
    container: dict[str, Any] = {
        "name": "etcd",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["etcd"],
        "args": [
            "--name=$(POD_NAME)",
            f"--data-dir={DATA_DIR}/data",
            f"--listen-client-urls=http://0.0.0.0:{CLIENT_PORT}",
            f"--advertise-client-urls=http://$(POD_NAME).{domain}:{CLIENT_PORT}",
            f"--listen-peer-urls=http://0.0.0.0:{PEER_PORT}",
            f"--initial-advertise-peer-urls=http://$(POD_NAME).{domain}:{PEER_PORT}",
            f"--initial-cluster={initial_cluster}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={name}",
        ],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "client", "containerPort": CLIENT_PORT, "protocol": "TCP"},
                  {"name": "peer", "containerPort": PEER_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                      "limits": {"cpu": "500m", "memory": "512Mi"}},
        # /health fails while there is no leader: fine for readiness, fatal for liveness.
        "readinessProbe": {"httpGet": {"path": "/health", "port": "client"},
                           "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": "client"}, "periodSeconds": 10,
                          "failureThreshold": 6},
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
    }
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    sts_spec: dict[str, Any] = {
        "serviceName": name,
        "replicas": spec.replicas,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": selector(job, "etcd")},
        "template": {"metadata": {"labels": labels(job, "etcd")}, "spec": pod_spec},
    }
    if spec.storage is None:
        pod_spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    else:
        sts_spec["volumeClaimTemplates"] = [{
            "metadata": {"name": "data", "labels": labels(job, "etcd")},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": spec.storage}}},
        }]
        sts_spec["persistentVolumeClaimRetentionPolicy"] = {
            "whenDeleted": "Delete", "whenScaled": "Retain"}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": metadata(job, name, "etcd"), "spec": sts_spec}
