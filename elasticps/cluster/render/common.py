"""Pieces both renderers share: names, labels, the env contract per role, containers, probes,
and the objects every job gets (ServiceAccount, Role, RoleBinding, the job's Secret, master
Service). Pure functions of a :class:`~elasticps.cluster.spec.Job`; no I/O.

Health contract for the role processes (see docs/cluster.md):

* master and pserver listen for gRPC on ``PADDLE_PORT`` (7164 in a cluster), mutual TLS only
  (unless the job is insecure), and register the standard ``grpc.health.v1.Health`` service;
  the overall service ``""`` reports SERVING only when the role can serve (master: holds the
  election lock; pserver: claimed its slot and restored its checkpoint).
* The kubelet's gRPC probes speak plaintext and send no token, so each also serves that one
  health service, and nothing else, in plaintext on ``PADDLE_HEALTH_PORT`` (7165).
* Readiness probes that health port; startup and liveness probes only check that the gRPC
  port accepts connections, so a standby master or a pserver still loading its checkpoint
  is not killed.
* The master serves its status page (``/api/status``, ``/``) on ``PADDLE_HTTP_PORT`` (8080 in a
  cluster) over HTTPS with its certificate, to requests carrying the job token;
  ``elasticps status`` reads it through the API server's service proxy.
* Trainers serve no RPC; their liveness is their store lease.
* Every role serves Prometheus metrics at ``:9090/metrics`` (``PADDLE_METRICS_PORT``; the
  container port is named ``metrics``) and every pod carries the usual
  ``prometheus.io/scrape|port|path`` annotations, so a Prometheus with a pod-role
  ``kubernetes_sd_config`` finds every role. The metrics port is plain HTTP without a token
  (counts and timings, no secrets), as Prometheus scrapes it; the master also serves the same
  text at ``STATUS_URL/metrics``, behind the token.

Each role's pods mount their own three items of the job's Secret (CA certificate, role
certificate, key) read-only at ``/etc/elasticps/tls`` (``PADDLE_TLS_DIR``), and the job token
as the file ``/etc/elasticps/token/token`` (``PADDLE_JOB_TOKEN_FILE``): a file is not in the
process's environment, so the user's script and its children do not inherit it. The spec's
secret ``env:`` entries come from the same Secret through ``secretKeyRef``; every other entry
is a plain value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elasticps.cluster.code_archive import CodeArchive
from elasticps.cluster.job_secrets import CA_KEY, TOKEN_KEY, JobSecrets, env_key
from elasticps.cluster.render.code import add_code, code_config_map, config_map_name
from elasticps.cluster.render.placement import add_priority, spread_over_nodes
from elasticps.cluster.render.security import container_security_context, pod_security_context
from elasticps.cluster.spec import Job, RoleResources, sparse_policies_env
from elasticps.config import Config, default_max_concurrent_rpcs
from elasticps.identity import CA_FILE, CERT_FILE, KEY_FILE

PORT = 7164
HTTP_PORT = 8080
METRICS_PORT = 9090  # every role's Prometheus /metrics (named "metrics", scrape-annotated)
HEALTH_PORT = 7165
DATA_MOUNT = "/data"
CHECKPOINT_MOUNT = "/checkpoints"
TLS_MOUNT = "/etc/elasticps/tls"
TOKEN_MOUNT = "/etc/elasticps/token"
TOKEN_FILE = f"{TOKEN_MOUNT}/{TOKEN_KEY}"
SECRET_FILE_MODE = 0o400
ROLES = ("master", "pserver", "trainer")

LABEL_JOB = "elasticps.io/job"
LABEL_ROLE = "elasticps.io/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"

# The env contract: every PADDLE_* variable each role reads, always set by the renderers.
# tests/unit/cluster checks this table covers every variable in elasticps.config.ENV_VARS.
COMMON_ENV = (
    "PADDLE_JOB_NAME", "PADDLE_ROLE", "PADDLE_STORE", "PADDLE_JOB_TOKEN_FILE", "PADDLE_HOST",
    "PADDLE_PORT", "PADDLE_NUM_PSERVERS", "PADDLE_PSERVERS", "PADDLE_TRAINER_COUNT",
    "PADDLE_NUM_GRADIENT_SERVERS", "PADDLE_PORTS_NUM", "PADDLE_PORTS_NUM_FOR_SPARSE",
    "PADDLE_USE_GPU", "PADDLE_LEASE_TTL", "PADDLE_METRICS_PORT", "PADDLE_LOG_FORMAT",
    "PADDLE_INSECURE",
)
ROLE_ENV: dict[str, tuple[str, ...]] = {
    "master": (*COMMON_ENV, "PADDLE_HTTP_PORT", "PADDLE_HTTP_HOST", "PADDLE_HEALTH_PORT",
               "PADDLE_DATA_SCHEMES", "PADDLE_MAX_CONCURRENT_RPCS"),
    "pserver": (*COMMON_ENV, "PADDLE_CHECKPOINT_URL", "PADDLE_CHECKPOINT_INTERVAL",
                "PADDLE_CHECKPOINT_KEEP", "PADDLE_HEALTH_PORT", "PADDLE_MAX_MESSAGE_MB",
                "PADDLE_PSERVER_MEMORY_MB", "PADDLE_MAX_IDS_PER_REQUEST", "PADDLE_MAX_TABLES",
                "PADDLE_CHECKPOINT_DELTAS", "PADDLE_MAX_CONCURRENT_RPCS", "PADDLE_TRAINING_MODE"),
    "trainer": (*COMMON_ENV, "PADDLE_TRAINER_ID", "PADDLE_DATA_SCHEMES", "PADDLE_TRAINING_MODE",
                "PADDLE_GEO_STEPS", "PADDLE_DENSE_GRAD_DTYPE", "PADDLE_DENSE_TIMEOUT"),
}
# A hybrid job's trainers checkpoint the dense replica (trainer/hybrid/checkpoints.py) where
# the pservers do, when that is storage every pod shares (a claim or a URL; the pservers'
# default emptyDir is each pod's own, useless to another trainer).
DENSE_CHECKPOINT_ENV = ("PADDLE_CHECKPOINT_URL", "PADDLE_CHECKPOINT_INTERVAL",
                        "PADDLE_CHECKPOINT_KEEP")
# Never rendered: the local launcher's work directory (a cluster job's scripts take their
# paths from `data:`/`checkpoint:`), and the token itself (pods read it from a file).
NOT_RENDERED_ENV = ("PADDLE_WORKDIR", "PADDLE_JOB_TOKEN")
# PADDLE_DATA is set only when the spec has a `data:` location; PADDLE_TLS_DIR unless the job
# is insecure.
OPTIONAL_ROLE_ENV: dict[str, tuple[str, ...]] = {
    "master": ("PADDLE_DATA", "PADDLE_TLS_DIR"), "pserver": ("PADDLE_TLS_DIR",),
    "trainer": ("PADDLE_DATA", "PADDLE_TLS_DIR", "PADDLE_SPARSE_POLICIES", *DENSE_CHECKPOINT_ENV),
}
# Rendered only when the spec's `env:` sets them (a stream's polling and partition-time pass,
# a warm start, mixed precision): the role that reads each.
SPEC_ENV_ONLY: dict[str, tuple[str, ...]] = {
    "master": ("PADDLE_STREAM_POLL_S",), "pserver": ("PADDLE_STREAM_PERIOD_S",),
    "trainer": ("PADDLE_WARM_START", "PADDLE_COMPUTE_DTYPE"),
}
# Defaults written explicitly so a pod's environment documents itself.
_DEFAULT_VALUES = {
    "PADDLE_PORTS_NUM": "1", "PADDLE_PORTS_NUM_FOR_SPARSE": "0", "PADDLE_LEASE_TTL": "10",
    "PADDLE_CHECKPOINT_INTERVAL": "60", "PADDLE_CHECKPOINT_KEEP": "3",
    "PADDLE_LOG_FORMAT": "text",
    "PADDLE_MAX_MESSAGE_MB": "256",
    "PADDLE_PSERVER_MEMORY_MB": "0", "PADDLE_MAX_IDS_PER_REQUEST": "1048576",
    "PADDLE_MAX_TABLES": "1000", "PADDLE_CHECKPOINT_DELTAS": "0",
    "PADDLE_DENSE_GRAD_DTYPE": "float32", "PADDLE_DENSE_TIMEOUT": "60",
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
    etcd_setup: str
    secret: str
    service_account: str

    @classmethod
    def of(cls, job: Job) -> Names:
        return cls.of_name(job.job_name)

    @classmethod
    def of_name(cls, n: str) -> Names:
        return cls(job=n, master=f"{n}-master", pserver=f"{n}-pserver", trainer=f"{n}-trainer",
                   etcd=f"{n}-etcd", etcd_setup=f"{n}-etcd-setup", secret=f"{n}-secrets",
                   service_account=f"{n}-runner")


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


# The spec's trainer bounds, on the object that holds the trainer count: `elasticps scale` and
# the cluster autoscaler read them there (cluster/trainer_scale.py), without the spec file.
MIN_TRAINERS_ANNOTATION = "elasticps.io/min-trainers"
MAX_TRAINERS_ANNOTATION = "elasticps.io/max-trainers"


def trainer_bounds(job: Job) -> dict[str, str]:
    return {MIN_TRAINERS_ANNOTATION: str(job.plan.min_trainers),
            MAX_TRAINERS_ANNOTATION: str(job.plan.max_trainers)}


def etcd_hosts(job: Job) -> tuple[str, ...]:
    """DNS names of the job's own etcd members (none when it uses an existing etcd)."""
    if not job.etcd_spec.deploy:
        return ()
    names = Names.of(job)
    return tuple(f"{names.etcd}-{i}.{names.etcd}.{namespace(job)}.svc"
                 for i in range(job.etcd_spec.replicas))


def store_url(job: Job) -> str:
    """PADDLE_STORE: the job's own etcd members (over TLS with the role's certificate, unless
    the job is insecure), or the endpoints the spec gives."""
    if not job.etcd_spec.deploy:
        return job.etcd_spec.store_url_for_endpoints
    url = "etcd://" + ",".join(f"{host}:2379" for host in etcd_hosts(job))
    return url if job.insecure else f"{url}?tls={TLS_MOUNT}"


def data_schemes(job: Job) -> str:
    """PADDLE_DATA_SCHEMES: local files, plus the scheme of the spec's data URL if it has one."""
    schemes = ["file"]
    data = job.data_storage
    if data is not None and data.url and "://" in data.url:
        scheme = data.url.split("://", 1)[0].lower()
        if scheme not in schemes:
            schemes.append(scheme)
    return ",".join(schemes)


def role_env(job: Job, role: str, *, pserver_hosts: list[str],
             trainer_index_path: str) -> list[dict[str, Any]]:
    """The container environment of one role: the env contract filled in, then the user's env.

    ``trainer_index_path`` is the downward-API field that holds the trainer's index (an
    annotation the controller sets: Indexed Job or Volcano task index).
    """
    plan = job.plan
    values: dict[str, str] = {
        "PADDLE_JOB_NAME": job.job_name,
        "PADDLE_ROLE": role,
        "PADDLE_STORE": store_url(job),
        "PADDLE_JOB_TOKEN_FILE": TOKEN_FILE,
        "PADDLE_PORT": str(PORT),
        "PADDLE_NUM_PSERVERS": str(plan.pservers),
        "PADDLE_PSERVERS": ",".join(pserver_hosts),
        "PADDLE_TRAINER_COUNT": str(plan.trainers),
        "PADDLE_NUM_GRADIENT_SERVERS": str(plan.trainers),
        "PADDLE_USE_GPU": "true" if plan.use_gpu else "false",
        "PADDLE_HTTP_PORT": str(HTTP_PORT),
        "PADDLE_METRICS_PORT": str(METRICS_PORT),
        "PADDLE_HTTP_HOST": "0.0.0.0",  # the API server's proxy comes in on the pod's address
        "PADDLE_HEALTH_PORT": str(HEALTH_PORT),
        "PADDLE_INSECURE": "true" if job.insecure else "false",
        "PADDLE_DATA_SCHEMES": data_schemes(job),
        "PADDLE_TRAINING_MODE": job.mode,
        "PADDLE_GEO_STEPS": str(job.geo_steps or Config.geo_steps),
        "PADDLE_CHECKPOINT_URL": (job.checkpoint_storage.location_in_pod(CHECKPOINT_MOUNT)
                                  if job.checkpoint_storage else CHECKPOINT_MOUNT),
        **_DEFAULT_VALUES,
        # The role's own (the master and sync pservers 128, async and geo pservers 1024).
        "PADDLE_MAX_CONCURRENT_RPCS": str(default_max_concurrent_rpcs(role, job.mode)),
    }
    if job.data_storage is not None:
        values["PADDLE_DATA"] = job.data_storage.location_in_pod(DATA_MOUNT)
    if not job.insecure:
        values["PADDLE_TLS_DIR"] = TLS_MOUNT
    if job.tables:
        values["PADDLE_SPARSE_POLICIES"] = sparse_policies_env(job)
    for key, value in job.env.items():  # the spec checked that only tunable PADDLE_* appear
        values[key] = value
    optional = [k for k in OPTIONAL_ROLE_ENV[role] if k in values]
    if role == "trainer" and not dense_checkpoints(job):
        optional = [k for k in optional if k not in DENSE_CHECKPOINT_ENV]
    wanted = [*ROLE_ENV[role], *optional]
    user_keys = [key for key in job.env if key not in wanted]
    env: list[dict[str, Any]] = []
    for key in [*wanted, *user_keys]:
        if key in job.secret_env_names:
            env.append(user_env_entry(job, key))
        elif key == "PADDLE_HOST":
            env.append({"name": key, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        elif key == "PADDLE_TRAINER_ID":
            env.append({"name": key, "valueFrom": {"fieldRef": {
                "fieldPath": trainer_index_path}}})
        elif key in values:
            env.append({"name": key, "value": values[key]})
    return env


def dense_checkpoints(job: Job) -> bool:
    """Whether the trainers write dense checkpoints: hybrid mode, on shared checkpoint storage."""
    return job.mode == "hybrid" and job.checkpoint_storage is not None


def user_env_entry(job: Job, name: str) -> dict[str, Any]:
    """The container env entry of the spec's ``env:`` entry ``name``: a secret one only as a
    reference to the job's Secret, never its value."""
    if name in job.secret_env_names:
        return {"name": name, "valueFrom": {"secretKeyRef": {
            "name": Names.of(job).secret, "key": env_key(name)}}}
    return {"name": name, "value": job.env[name]}


def user_env(job: Job) -> list[dict[str, Any]]:
    """The spec's whole ``env:`` as container entries (what the code-fetch init container
    gets: storage credentials, and nothing of the job's own secrets)."""
    return [user_env_entry(job, name) for name in job.env]


def _resources(res: RoleResources) -> dict[str, dict[str, str]]:
    quantities = res.quantities()
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _server_probes() -> dict[str, Any]:
    return {
        "startupProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 5,
                         "failureThreshold": 60},
        "livenessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 10,
                          "failureThreshold": 3},
        "readinessProbe": {"grpc": {"port": HEALTH_PORT}, "periodSeconds": 5,
                           "failureThreshold": 3},
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
        "securityContext": container_security_context(),
    }
    metrics = {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}
    if role in ("master", "pserver"):
        ports = [{"name": "grpc", "containerPort": PORT, "protocol": "TCP"},
                 {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}]
        if role == "master":
            ports.append({"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"})
        container["ports"] = [*ports, metrics]
        container.update(_server_probes())
    else:
        container["ports"] = [metrics]
    mounts = []
    if role in ("master", "trainer") and job.data_storage and job.data_storage.claim:
        mounts.append({"name": "data", "mountPath": DATA_MOUNT, "readOnly": True})
    if _mounts_checkpoints(job, role):
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
    if not job.insecure:
        mounts.append({"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True})
    mounts.append({"name": "token", "mountPath": TOKEN_MOUNT, "readOnly": True})
    container["volumeMounts"] = mounts
    return container


def secret_volume(job: Job, items: dict[str, str], name: str = "tls") -> dict[str, Any]:
    """A volume of some items of the job's Secret (key -> file name), owner-read-only."""
    return {"name": name, "secret": {
        "secretName": Names.of(job).secret, "defaultMode": SECRET_FILE_MODE,
        "items": [{"key": key, "path": path} for key, path in items.items()]}}


def _volumes(job: Job, role: str) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = []
    if not job.insecure:  # only this role's own key: a trainer cannot pose as a pserver
        volumes.append(secret_volume(job, {CA_KEY: CA_FILE, f"{role}.crt": CERT_FILE,
                                           f"{role}.key": KEY_FILE}))
    volumes.append(secret_volume(job, {TOKEN_KEY: TOKEN_KEY}, name="token"))
    data = job.data_storage
    if role in ("master", "trainer") and data is not None and data.claim:
        volumes.append({"name": "data", "persistentVolumeClaim": {
            "claimName": data.claim, "readOnly": True}})
    ckpt = job.checkpoint_storage
    if _mounts_checkpoints(job, role):
        if ckpt is None:
            # Survives container restarts (the common crash) but not the pod's deletion.
            volumes.append({"name": "checkpoints", "emptyDir": {}})
        elif ckpt.claim:
            volumes.append({"name": "checkpoints", "persistentVolumeClaim": {
                "claimName": ckpt.claim}})
    return volumes


def _mounts_checkpoints(job: Job, role: str) -> bool:
    """Pservers mount the checkpoint volume (a claim, else an emptyDir); a hybrid job's
    trainers mount its claim too (a URL needs no mount)."""
    ckpt = job.checkpoint_storage
    if role == "pserver":
        return ckpt is None or bool(ckpt.claim)
    return role == "trainer" and dense_checkpoints(job) and ckpt is not None and bool(ckpt.claim)


def pod_template(job: Job, role: str, *, restart_policy: str, pserver_hosts: list[str],
                 trainer_index_path: str, code: CodeArchive | None = None) -> dict[str, Any]:
    """A pod template for one role; only the master mounts a service-account token. With
    ``code``, trainers unpack it into their working directory first."""
    env = role_env(job, role, pserver_hosts=pserver_hosts,
                   trainer_index_path=trainer_index_path)
    spec: dict[str, Any] = {
        "serviceAccountName": Names.of(job).service_account,
        "automountServiceAccountToken": role == "master",
        "enableServiceLinks": False,  # no FOO_SERVICE_HOST flood in the role's environment
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 30,
        "securityContext": pod_security_context(),
        "containers": [role_container(job, role, env)],
        "volumes": _volumes(job, role),
    }
    add_priority(spec, job.priority_class)
    if role == "pserver":
        spec["topologySpreadConstraints"] = spread_over_nodes(selector(job, role),
                                                              required=False)
    if code is not None and role == "trainer":
        add_code(job, code, spec, user_env(job))
    return {"metadata": {"labels": labels(job, role), "annotations": dict(SCRAPE_ANNOTATIONS)},
            "spec": spec}


def secret_object(job: Job, secrets: JobSecrets) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata(job, Names.of(job).secret),
            "type": "Opaque", "stringData": dict(secrets.values)}


def code_objects(job: Job, code: CodeArchive | None) -> list[dict[str, Any]]:
    """The ConfigMap with the user's code, when the spec ships it that way (``code: DIR``
    without ``code_url``)."""
    if code is None or job.code_url is not None:  # code_url: fetched from storage instead
        return []
    return [code_config_map(metadata(job, config_map_name(job.job_name, code), "trainer"), code)]


def service_account(job: Job) -> dict[str, Any]:
    """The job's ServiceAccount, created before the workload: without it no pod of the job is
    admitted."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": metadata(job, Names.of(job).service_account),
            "automountServiceAccountToken": False}


def common_objects(job: Job, secrets: JobSecrets) -> list[dict[str, Any]]:
    """Role, RoleBinding, the job's Secret and master Service, in creation order."""
    names = Names.of(job)
    return [
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
        secret_object(job, secrets),
        {"apiVersion": "v1", "kind": "Service", "metadata": metadata(job, names.master, "master"),
         "spec": {"selector": selector(job, "master"), "ports": [
             {"name": "grpc", "port": PORT, "targetPort": "grpc", "protocol": "TCP"},
             {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}]}},
    ]
