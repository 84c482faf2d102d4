"""Pieces both renderers share: names, labels, the env contract per role, containers, probes,
and the objects every job gets (ServiceAccount, Role, RoleBinding, token Secret, master
Service). Pure functions of a :class:`~elasticps.cluster.spec.Job`; no I/O.

Health contract for the role processes (see docs/cluster.md):

* master and pserver listen for gRPC on ``PADDLE_PORT`` (7164 in a cluster) and register the
  standard ``grpc.health.v1.Health`` service; the overall service ``""`` reports SERVING only
  when the role can serve (master: holds the election lock; pserver: claimed its slot and
  restored its checkpoint). The token interceptor must let ``/grpc.health.v1.Health/`` calls
  through, since the kubelet sends no job token.
* Readiness probes that health service; startup and liveness probes only check that the
  port accepts connections, so a standby master or a pserver still loading its checkpoint
  is not killed.
* The master serves its HTTP status page (``/api/status``, ``/``) on ``PADDLE_HTTP_PORT``
  (8080 in a cluster); ``elasticps status`` reads it through the API server's service proxy.
* Trainers serve no RPC; their liveness is their store lease.
* Every role serves Prometheus metrics at ``:9090/metrics`` (``PADDLE_METRICS_PORT``; the
  container port is named ``metrics``) and every pod carries the usual
  ``prometheus.io/scrape|port|path`` annotations, so a Prometheus with a pod-role
  ``kubernetes_sd_config`` finds every role; the master also serves the same text at
  ``STATUS_URL/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elasticps.cluster.spec import Job, RoleResources

PORT = 7164
HTTP_PORT = 8080
METRICS_PORT = 9090  # every role's Prometheus /metrics (named "metrics", scrape-annotated)
DATA_MOUNT = "/data"
CHECKPOINT_MOUNT = "/checkpoints"
TOKEN_KEY = "token"
ROLES = ("master", "pserver", "trainer")

LABEL_JOB = "elasticps.io/job"
LABEL_ROLE = "elasticps.io/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"

# The env contract: every PADDLE_* variable each role reads, always set by the renderers.
# tests/unit/cluster checks this table covers every variable in elasticps.config.ENV_VARS.
COMMON_ENV = (
    "PADDLE_JOB_NAME", "PADDLE_ROLE", "PADDLE_STORE", "PADDLE_JOB_TOKEN", "PADDLE_HOST",
    "PADDLE_PORT", "PADDLE_NUM_PSERVERS", "PADDLE_PSERVERS", "PADDLE_TRAINER_COUNT",
    "PADDLE_NUM_GRADIENT_SERVERS", "PADDLE_PORTS_NUM", "PADDLE_PORTS_NUM_FOR_SPARSE",
    "PADDLE_USE_GPU", "PADDLE_LEASE_TTL", "PADDLE_METRICS_PORT", "PADDLE_LOG_FORMAT",
)
ROLE_ENV: dict[str, tuple[str, ...]] = {
    "master": (*COMMON_ENV, "PADDLE_HTTP_PORT"),
    "pserver": (*COMMON_ENV, "PADDLE_CHECKPOINT_URL", "PADDLE_CHECKPOINT_INTERVAL",
                "PADDLE_CHECKPOINT_KEEP"),
    "trainer": (*COMMON_ENV, "PADDLE_TRAINER_ID"),
}
# Read by no role in a real job, so never rendered: the local launcher's work directory (a
# cluster job's scripts take their paths from `data:`/`checkpoint:`).
NOT_RENDERED_ENV = ("PADDLE_WORKDIR",)
# Set only when the spec has a `data:` location.
OPTIONAL_ROLE_ENV: dict[str, tuple[str, ...]] = {
    "master": ("PADDLE_DATA",), "pserver": (), "trainer": ("PADDLE_DATA",),
}
# Defaults written explicitly so a pod's environment documents itself.
_DEFAULT_VALUES = {
    "PADDLE_PORTS_NUM": "1", "PADDLE_PORTS_NUM_FOR_SPARSE": "0", "PADDLE_LEASE_TTL": "10",
    "PADDLE_CHECKPOINT_INTERVAL": "60", "PADDLE_CHECKPOINT_KEEP": "3",
    "PADDLE_LOG_FORMAT": "text",
}
# The usual annotations a Prometheus scrape config keys on (kubernetes_sd pod role).
SCRAPE_ANNOTATIONS = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                      "prometheus.io/path": "/metrics"}


@dataclass(frozen=True)
class Names:
    """Every object name a job uses, derived from the job name in one place."""

    job: str
    master: str
    pserver: str
    trainer: str
    etcd: str
    token_secret: str
    service_account: str

    @classmethod
    def of(cls, job: Job) -> Names:
        return cls.of_name(job.job_name)

    @classmethod
    def of_name(cls, n: str) -> Names:
        return cls(job=n, master=f"{n}-master", pserver=f"{n}-pserver", trainer=f"{n}-trainer",
                   etcd=f"{n}-etcd", token_secret=f"{n}-token", service_account=f"{n}-runner")


def namespace(job: Job) -> str:
    return job.plan.namespace


def labels(job: Job, role: str | None = None) -> dict[str, str]:
    out = {LABEL_MANAGED_BY: "elasticps", LABEL_JOB: job.job_name}
    if role is not None:
        out[LABEL_ROLE] = role
    return out


def selector(job: Job, role: str) -> dict[str, str]:
    return {LABEL_JOB: job.job_name, LABEL_ROLE: role}


def metadata(job: Job, name: str, role: str | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": namespace(job), "labels": labels(job, role)}


def etcd_hosts(job: Job) -> list[str]:
    names = Names.of(job)
    return [f"{names.etcd}-{i}.{names.etcd}.{namespace(job)}.svc"
            for i in range(job.etcd_spec.replicas)]


def store_url(job: Job) -> str:
    """PADDLE_STORE: the job's own etcd members, or the endpoints the spec gives."""
    if not job.etcd_spec.deploy:
        return job.etcd_spec.store_url_for_endpoints
    return "etcd://" + ",".join(f"{host}:2379" for host in etcd_hosts(job))


def role_env(job: Job, role: str, *, pserver_hosts: list[str],
             trainer_index_path: str) -> list[dict[str, Any]]:
    """The container environment of one role: the env contract filled in, then the user's env.

    ``trainer_index_path`` is the downward-API field that holds the trainer's index (an
    annotation the controller sets: Indexed Job or Volcano task index).
    """
    plan = job.plan
    names = Names.of(job)
    values: dict[str, str] = {
        "PADDLE_JOB_NAME": job.job_name,
        "PADDLE_ROLE": role,
        "PADDLE_STORE": store_url(job),
        "PADDLE_PORT": str(PORT),
        "PADDLE_NUM_PSERVERS": str(plan.pservers),
        "PADDLE_PSERVERS": ",".join(pserver_hosts),
        "PADDLE_TRAINER_COUNT": str(plan.trainers),
        "PADDLE_NUM_GRADIENT_SERVERS": str(plan.trainers),
        "PADDLE_USE_GPU": "true" if plan.use_gpu else "false",
        "PADDLE_HTTP_PORT": str(HTTP_PORT),
        "PADDLE_METRICS_PORT": str(METRICS_PORT),
        "PADDLE_CHECKPOINT_URL": (job.checkpoint_storage.location_in_pod(CHECKPOINT_MOUNT)
                                  if job.checkpoint_storage else CHECKPOINT_MOUNT),
        **_DEFAULT_VALUES,
    }
    if job.data_storage is not None:
        values["PADDLE_DATA"] = job.data_storage.location_in_pod(DATA_MOUNT)
    for key, value in job.env.items():  # the spec checked that only tunable PADDLE_* appear
        values[key] = value
    wanted = [*ROLE_ENV[role], *OPTIONAL_ROLE_ENV[role]]
    user_keys = [key for key in job.env if key not in wanted]
    env: list[dict[str, Any]] = []
    for key in [*wanted, *user_keys]:
        if key == "PADDLE_JOB_TOKEN":
            env.append({"name": key, "valueFrom": {"secretKeyRef": {
                "name": names.token_secret, "key": TOKEN_KEY}}})
        elif key == "PADDLE_HOST":
            env.append({"name": key, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        elif key == "PADDLE_TRAINER_ID":
            env.append({"name": key, "valueFrom": {"fieldRef": {
                "fieldPath": trainer_index_path}}})
        elif key in values:
            env.append({"name": key, "value": values[key]})
    return env


def _resources(res: RoleResources) -> dict[str, dict[str, str]]:
    quantities = res.quantities()
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _server_probes() -> dict[str, Any]:
    return {
        "startupProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 5,
                         "failureThreshold": 60},
        "livenessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 10,
                          "failureThreshold": 3},
        "readinessProbe": {"grpc": {"port": PORT}, "periodSeconds": 5, "failureThreshold": 3},
    }


def role_container(job: Job, role: str, env: list[dict[str, Any]]) -> dict[str, Any]:
    command = ["elasticps", role]
    if role == "trainer":
        command += list(job.plan.trainer_command)
    container: dict[str, Any] = {
        "name": role,
        "image": job.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": env,
        "resources": _resources(getattr(job.plan, role)),
    }
    metrics = {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}
    if role in ("master", "pserver"):
        ports = [{"name": "grpc", "containerPort": PORT, "protocol": "TCP"}]
        if role == "master":
            ports.append({"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"})
        container["ports"] = [*ports, metrics]
        container.update(_server_probes())
    else:
        container["ports"] = [metrics]
    mounts = []
    if role in ("master", "trainer") and job.data_storage and job.data_storage.claim:
        mounts.append({"name": "data", "mountPath": DATA_MOUNT, "readOnly": True})
    if role == "pserver" and (job.checkpoint_storage is None or job.checkpoint_storage.claim):
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _volumes(job: Job, role: str) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = []
    data = job.data_storage
    if role in ("master", "trainer") and data is not None and data.claim:
        volumes.append({"name": "data", "persistentVolumeClaim": {
            "claimName": data.claim, "readOnly": True}})
    ckpt = job.checkpoint_storage
    if role == "pserver":
        if ckpt is None:
            # Survives container restarts (the common crash) but not the pod's deletion.
            volumes.append({"name": "checkpoints", "emptyDir": {}})
        elif ckpt.claim:
            volumes.append({"name": "checkpoints", "persistentVolumeClaim": {
                "claimName": ckpt.claim}})
    return volumes


def pod_template(job: Job, role: str, *, restart_policy: str, pserver_hosts: list[str],
                 trainer_index_path: str) -> dict[str, Any]:
    """A pod template for one role; only the master mounts a service-account token."""
    env = role_env(job, role, pserver_hosts=pserver_hosts,
                   trainer_index_path=trainer_index_path)
    spec: dict[str, Any] = {
        "serviceAccountName": Names.of(job).service_account,
        "automountServiceAccountToken": role == "master",
        "enableServiceLinks": False,  # no FOO_SERVICE_HOST flood in the role's environment
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 30,
        "containers": [role_container(job, role, env)],
    }
    volumes = _volumes(job, role)
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": {"labels": labels(job, role), "annotations": dict(SCRAPE_ANNOTATIONS)},
            "spec": spec}


def common_objects(job: Job, token: str) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, token Secret and master Service, in creation order."""
    names = Names.of(job)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": metadata(job, names.service_account),
         "automountServiceAccountToken": False},
        # Least privilege: the master may read pods (to show them on its status page); no
        # other role mounts the token, and nothing may write.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": metadata(job, names.service_account),
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": metadata(job, names.service_account),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": names.service_account},
         "subjects": [{"kind": "ServiceAccount", "name": names.service_account,
                       "namespace": namespace(job)}]},
        {"apiVersion": "v1", "kind": "Secret", "metadata": metadata(job, names.token_secret),
         "type": "Opaque", "stringData": {TOKEN_KEY: token}},
        {"apiVersion": "v1", "kind": "Service", "metadata": metadata(job, names.master, "master"),
         "spec": {"selector": selector(job, "master"), "ports": [
             {"name": "grpc", "port": PORT, "targetPort": "grpc", "protocol": "TCP"},
             {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}]}},
    ]
