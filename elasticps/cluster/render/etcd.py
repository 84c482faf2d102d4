"""The etcd a job deploys for itself (both backends): a headless Service, a NetworkPolicy that
admits only the job's own pods, a StatefulSet of 1/3/5/7 members with stable DNS names, and a
setup Job that limits the job's etcd user to the job's prefix.

Members bootstrap statically (``--initial-cluster`` lists every member's stable name), start in
parallel so a quorum can form, and keep their data on a PVC per member (deleted with the
StatefulSet) unless ``etcd.storage`` is null, in which case an emptyDir is used. With several
members they go to different nodes (render/placement.py) and a PodDisruptionBudget keeps a
quorum through node drains (render/disruption.py). Every member's pod carries the Prometheus
scrape annotations for etcd's own ``/metrics`` on the metrics port.

Unless the job is insecure, clients and peers speak TLS only, with certificates from the job's
CA (``--client-cert-auth``, ``--peer-client-cert-auth``): a pod without the job's certificate
cannot even connect. ``<job>-etcd-setup`` (``elasticps store setup-auth``, as etcd's root user)
then creates the job's user, whose role may read and write only ``/elasticps/<job>/``, and
enables auth; etcd takes the user from each client certificate's common name. Probes use the
plaintext metrics port (``/health``), which serves no keys.
"""

from __future__ import annotations

from typing import Any

from elasticps.cluster.job_secrets import CA_KEY, ETCD_ROOT, ETCD_SERVER
from elasticps.cluster.render.common import (
    LABEL_JOB,
    TLS_MOUNT,
    Names,
    etcd_hosts,
    labels,
    metadata,
    namespace,
    secret_volume,
    selector,
)
from elasticps.cluster.render.placement import add_priority, spread_over_nodes
from elasticps.cluster.render.security import container_security_context, pod_security_context
from elasticps.cluster.spec import Job
from elasticps.identity import CA_FILE, CERT_FILE, KEY_FILE, store_user

CLIENT_PORT = 2379
PEER_PORT = 2380
METRICS_PORT = 2381
DATA_DIR = "/var/run/etcd"
ETCD_TLS = "/etc/etcd/tls"
SCRAPE_ANNOTATIONS = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                      "prometheus.io/path": "/metrics"}


def etcd_objects(job: Job) -> list[dict[str, Any]]:
    if not job.etcd_spec.deploy:
        return []
    objects = [_service(job), _network_policy(job), _statefulset(job)]
    if not job.insecure:
        objects.append(_setup_job(job))
    return objects


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
    # Only this job's pods may open the client port, only members the peer port; the kubelet
    # probes /health on the metrics port, which serves no keys.
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(job, Names.of(job).etcd, "etcd"),
        "spec": {
            "podSelector": {"matchLabels": selector(job, "etcd")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {LABEL_JOB: job.job_name}}}],
                 "ports": [{"protocol": "TCP", "port": CLIENT_PORT}]},
                {"from": [{"podSelector": {"matchLabels": selector(job, "etcd")}}],
                 "ports": [{"protocol": "TCP", "port": PEER_PORT}]},
                {"ports": [{"protocol": "TCP", "port": METRICS_PORT}]},
            ],
        },
    }


def _tls_args(job: Job) -> list[str]:
    if job.insecure:
        return []
    return [f"--{side}{flag}" for side in ("", "peer-") for flag in (
        "client-cert-auth", f"trusted-ca-file={ETCD_TLS}/{CA_FILE}",
        f"cert-file={ETCD_TLS}/{CERT_FILE}", f"key-file={ETCD_TLS}/{KEY_FILE}")]


def _statefulset(job: Job) -> dict[str, Any]:
    spec = job.etcd_spec
    name = Names.of(job).etcd
    domain = f"{name}.{namespace(job)}.svc"
    scheme = "http" if job.insecure else "https"
    initial_cluster = ",".join(f"{name}-{i}={scheme}://{name}-{i}.{domain}:{PEER_PORT}"
                               for i in range(spec.replicas))
    container: dict[str, Any] = {
        "name": "etcd",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["etcd"],
        "args": [
            "--name=$(POD_NAME)",
            f"--data-dir={DATA_DIR}/data",
            f"--listen-client-urls={scheme}://0.0.0.0:{CLIENT_PORT}",
            f"--advertise-client-urls={scheme}://$(POD_NAME).{domain}:{CLIENT_PORT}",
            f"--listen-peer-urls={scheme}://0.0.0.0:{PEER_PORT}",
            f"--initial-advertise-peer-urls={scheme}://$(POD_NAME).{domain}:{PEER_PORT}",
            f"--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}",
            f"--initial-cluster={initial_cluster}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={name}",
            *_tls_args(job),
        ],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "client", "containerPort": CLIENT_PORT, "protocol": "TCP"},
                  {"name": "peer", "containerPort": PEER_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                      "limits": {"cpu": "500m", "memory": "512Mi"}},
        # /health fails while there is no leader: fine for readiness, fatal for liveness.
        "readinessProbe": {"httpGet": {"path": "/health", "port": "metrics"},
                           "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": "client"}, "periodSeconds": 10,
                          "failureThreshold": 6},
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
        "securityContext": container_security_context(read_only_root=True),
    }
    if not job.insecure:
        container["volumeMounts"].append({"name": "tls", "mountPath": ETCD_TLS,
                                          "readOnly": True})
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
    }
    add_priority(pod_spec, job.priority_class)
    if spec.replicas > 1:
        pod_spec["topologySpreadConstraints"] = spread_over_nodes(selector(job, "etcd"),
                                                                  required=True)
    sts_spec: dict[str, Any] = {
        "serviceName": name,
        "replicas": spec.replicas,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": selector(job, "etcd")},
        "template": {"metadata": {"labels": labels(job, "etcd"),
                                  "annotations": dict(SCRAPE_ANNOTATIONS)},
                     "spec": pod_spec},
    }
    volumes = [] if job.insecure else [secret_volume(job, {
        CA_KEY: CA_FILE, f"{ETCD_SERVER}.crt": CERT_FILE, f"{ETCD_SERVER}.key": KEY_FILE})]
    if spec.storage is None:
        volumes.append({"name": "data", "emptyDir": {}})
    if volumes:
        pod_spec["volumes"] = volumes
    if spec.storage is not None:
        sts_spec["volumeClaimTemplates"] = [{
            "metadata": {"name": "data", "labels": labels(job, "etcd")},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": spec.storage}}},
        }]
        sts_spec["persistentVolumeClaimRetentionPolicy"] = {
            "whenDeleted": "Delete", "whenScaled": "Retain"}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": metadata(job, name, "etcd"), "spec": sts_spec}


def _setup_job(job: Job) -> dict[str, Any]:
    """A Job that, as etcd's root user, limits the job's user to the job's prefix and turns
    auth on; it waits for etcd (and is retried by Kubernetes) and is idempotent."""
    endpoints = ",".join(f"{host}:{CLIENT_PORT}" for host in etcd_hosts(job))
    container = {
        "name": "etcd-setup",
        "image": job.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["elasticps", "store", "--store", f"etcd://{endpoints}?tls={TLS_MOUNT}",
                    "--job", job.job_name, "setup-auth", "--user", store_user(job.job_name)],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": "100m", "memory": "128Mi"}},
        "volumeMounts": [{"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True}],
        "securityContext": container_security_context(read_only_root=True),
    }
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "OnFailure",
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [secret_volume(job, {
            CA_KEY: CA_FILE, f"{ETCD_ROOT}.crt": CERT_FILE, f"{ETCD_ROOT}.key": KEY_FILE})],
    }
    add_priority(pod_spec, job.priority_class)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": metadata(job, Names.of(job).etcd_setup, "etcd-setup"),
        "spec": {
            "backoffLimit": 20,
            "template": {"metadata": {"labels": labels(job, "etcd-setup")}, "spec": pod_spec},
        },
    }
