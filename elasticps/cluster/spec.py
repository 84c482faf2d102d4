"""The job spec: one model for ``job.yaml`` files and ``elasticps.Job(...)`` objects.

A :class:`Job` holds what the user wrote; its :attr:`Job.plan` holds what will run (counts and
per-role resources with every default and derivation applied). Construction validates
everything: a bad value raises :class:`~elasticps.errors.ConfigError` whose message starts
with ``job spec field '<name>'``; a suspicious but legal value (GPUs asked while
``PADDLE_USE_GPU`` says false, or the opposite) emits a :class:`JobSpecWarning`.

Derivation rules (documented in docs/cluster.md):

* ``trainers`` defaults to ``num_gpus`` when GPUs are asked, else 1.
* ``trainer_gpu``/``trainer_cpu``/``trainer_mem`` default to the job-wide beginner values
  ``num_gpus``/``num_cpus``/``memory`` divided evenly among the trainers; when those are not
  given either, each trainer gets no GPU, one CPU and 1Gi.
* ``pservers`` defaults to ``max(1, ceil(trainers / 2))``.
* ``min_trainers`` defaults to 1 (the job keeps going while one trainer works) and
  ``max_trainers`` to ``trainers``; ``1 <= min_trainers <= trainers <= max_trainers``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticps.cluster.quantity import (
    format_cpu,
    format_memory,
    parse_cpu,
    parse_duration,
    parse_memory,
)
from elasticps.cluster.spec_env import check_env, check_secret_env, secret_names
from elasticps.config import (
    MAX_GEO_STEPS,
    MAX_PSERVERS,
    MAX_TRAINERS,
    MODES,
    load_config,
    user_namespace,
)
from elasticps.errors import ConfigError, shown
from elasticps.trainer.row_policy import policy_from_settings
from elasticps.user_yaml import load_user_yaml
from elasticps.version import __version__

DEFAULT_IMAGE = f"elasticps/elasticps:{__version__}"
DEFAULT_ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_TRAINER_CPU = 1000  # millicores, when neither trainer_cpu nor num_cpus is given
DEFAULT_TRAINER_MEM = 2**30  # bytes, when neither trainer_mem nor memory is given
# Longest suffix we append is "-pserver" / "-trainer" plus StatefulSet/Job pod suffixes; 40
# keeps every derived object, pod and label value within Kubernetes' 63-character limits.
MAX_JOB_NAME = 40
BACKENDS = ("local", "cluster")  # Job.backend: `elasticps run` on this machine, or `submit`

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*\Z")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://\S+\Z")
_HOST_PORT = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?:(?P<port>[0-9]{1,5})\Z")
_PYTHON = re.compile(r"^python[0-9.]*\Z")

# Upper bounds: a value past them is a typo (or an attempt to exhaust a shared cluster), and
# is refused naming the field. Counts share elasticps.config's bounds.
MAX_GPUS_PER_POD = 64
MAX_CPU_MILLIS_PER_POD = 1024 * 1000  # 1024 cores
MAX_MEMORY_PER_POD = 16 * 2**40  # 16Ti
MAX_ETCD_STORAGE = 2**40  # 1Ti per member
MAX_ENTRY_POINT = 4096
MAX_CODE_INCLUDE = 100  # code_include patterns
MAX_CODE_LIMIT = 8 * 2**30  # code_limit: what an init container may fetch and unpack
MAX_ACTIVE_DEADLINE = 365 * 86400
MAX_TTL_AFTER_FINISHED = 30 * 86400
DEFAULT_TTL_AFTER_FINISHED = 86400



class JobSpecWarning(UserWarning):
    """A job spec that is legal but probably not what the user meant."""


def _fail(name: str, reason: str) -> ConfigError:
    return ConfigError(f"job spec field '{name}': {reason}")


def _count(name: str, value: object, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"must be a whole number, got {shown(value)}")
    if value < minimum:
        raise _fail(name, f"must be >= {minimum}, got {value}")
    if value > maximum:
        raise _fail(name, f"must be <= {maximum}, got {value}")
    return value


def _cpu(name: str, value: object, maximum: int = MAX_CPU_MILLIS_PER_POD) -> int:
    try:
        millis = parse_cpu(value)
    except ValueError as exc:
        raise _fail(name, str(exc)) from exc
    if millis > maximum:
        raise _fail(name, f"{shown(value)} is more than {format_cpu(maximum)} cores")
    return millis


def _memory(name: str, value: object, maximum: int = MAX_MEMORY_PER_POD) -> int:
    try:
        nbytes = parse_memory(value)
    except ValueError as exc:
        raise _fail(name, str(exc)) from exc
    if nbytes > maximum:
        raise _fail(name, f"{shown(value)} is more than {format_memory(maximum)}")
    return nbytes


def _dns_label(name: str, value: object, max_len: int = 63) -> str:
    if not isinstance(value, str) or len(value) > max_len or not _DNS1123_LABEL.match(value):
        raise _fail(
            name,
            f"{shown(value)} is not a DNS-1123 label (lowercase letters, digits and '-', "
            f"at most {max_len} characters, starting and ending with a letter or digit)",
        )
    return value


def _dns_subdomain(name: str, value: object) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise _fail(name, f"{shown(value)} is not a DNS-1123 subdomain (lowercase letters, "
                          "digits, '-' and '.', at most 253 characters)")
    return value


def _duration(name: str, value: object, minimum: int, maximum: int) -> int:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise _fail(name, str(exc)) from exc
    if not minimum <= seconds <= maximum:
        raise _fail(name, f"{shown(value)} is {seconds:,} seconds; it must be from {minimum:,} to "
                          f"{maximum:,}")
    return seconds


def _reject_unknown(prefix: str, data: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        shown = ", ".join(f"'{prefix}{key}'" for key in unknown)
        raise ConfigError(
            f"job spec field {shown}: unknown key; known keys are {', '.join(sorted(known))}"
        )


@dataclass(frozen=True)
class Storage:
    """A data or checkpoint location: a PersistentVolumeClaim or an fsspec URL.

    Written as ``pvc://CLAIM[/SUB/PATH]`` (the claim is mounted into the pods and the roles see
    a local path under the mount point) or as a URL (``s3://...``, ``gs://...``, ``file:///...``)
    or absolute path inside the image, passed to the roles unchanged.
    """

    claim: str | None = None
    sub_path: str = ""
    url: str | None = None

    @classmethod
    def parse(cls, name: str, value: object) -> Storage:
        if isinstance(value, Storage):
            return value
        if isinstance(value, Mapping):
            _reject_unknown(f"{name}.", value, {"claim", "path", "url"})
            if ("claim" in value) == ("url" in value):
                raise _fail(name, "give exactly one of 'claim' (a PVC name) or 'url'")
            if "url" in value:
                return cls.parse(name, value["url"])
            sub = value.get("path", "")
            return cls.parse(name, f"pvc://{value['claim']}/{sub}".rstrip("/"))
        if not isinstance(value, str) or not value.strip():
            raise _fail(name, f"must be 'pvc://CLAIM[/PATH]' or a URL, got {shown(value)}")
        text = value.strip()
        if text.startswith("pvc://"):
            claim, _, sub = text.removeprefix("pvc://").partition("/")
            if len(claim) > 253 or not _DNS1123_SUBDOMAIN.match(claim):
                raise _fail(name, f"PVC name {shown(claim)} is not a DNS-1123 subdomain")
            parts = [part for part in sub.split("/") if part]
            if any(part in (".", "..") for part in parts):
                raise _fail(name, f"path {shown(sub)} inside the PVC must not contain '.' or '..'")
            return cls(claim=claim, sub_path="/".join(parts))
        if _URL.match(text) or text.startswith("/"):
            return cls(url=text)
        raise _fail(name, f"{shown(text)} is neither 'pvc://CLAIM[/PATH]', a URL nor an "
                          "absolute path")

    def location_in_pod(self, mount_path: str) -> str:
        """What the roles are told: a path under the mount point, or the URL itself."""
        if self.claim is None:
            assert self.url is not None
            return self.url
        return f"{mount_path}/{self.sub_path}" if self.sub_path else mount_path

    def __str__(self) -> str:
        if self.claim is None:
            return self.url or ""
        return f"pvc://{self.claim}/{self.sub_path}".rstrip("/")


@dataclass(frozen=True)
class EtcdSpec:
    """The job's store: an etcd the job deploys for itself, or an existing one."""

    deploy: bool = True
    endpoints: tuple[str, ...] = ()
    replicas: int = 1
    image: str = DEFAULT_ETCD_IMAGE
    storage: str | None = "1Gi"  # PVC size per member; None = emptyDir (lost with the pod)

    @classmethod
    def parse(cls, value: object) -> EtcdSpec:
        if value is None:
            return cls()
        if isinstance(value, EtcdSpec):
            return value
        if not isinstance(value, Mapping):
            raise _fail("etcd", f"must be a mapping like {{deploy: true}} or "
                                f"{{endpoints: [host:2379]}}, got {shown(value)}")
        _reject_unknown("etcd.", value, {"deploy", "endpoints", "replicas", "image", "storage"})
        raw_endpoints = value.get("endpoints") or ()
        if isinstance(raw_endpoints, str):
            raw_endpoints = raw_endpoints.removeprefix("etcd://").split(",")
        if not isinstance(raw_endpoints, Sequence):
            raise _fail("etcd.endpoints",
                        f"must be a list of host:port, got {shown(raw_endpoints)}")
        endpoints = tuple(str(item).strip().removeprefix("etcd://") for item in raw_endpoints)
        deploy = value.get("deploy", not endpoints)
        if not isinstance(deploy, bool):
            raise _fail("etcd.deploy", f"must be true or false, got {shown(deploy)}")
        if deploy and endpoints:
            raise _fail("etcd", "give either deploy: true or endpoints, not both")
        if not deploy and not endpoints:
            raise _fail("etcd.endpoints", "required when etcd.deploy is false")
        for endpoint in endpoints:
            match = _HOST_PORT.match(endpoint)
            if match is None or not 1 <= int(match["port"]) <= 65535:
                raise _fail("etcd.endpoints", f"{shown(endpoint)} is not host:port")
        replicas = _count("etcd.replicas", value.get("replicas", 1), 1, 7)
        if replicas % 2 == 0 or replicas > 7:
            raise _fail("etcd.replicas", f"must be 1, 3, 5 or 7 (an odd quorum), got {replicas}")
        image = value.get("image", DEFAULT_ETCD_IMAGE)
        if not isinstance(image, str) or not _IMAGE.match(image):
            raise _fail("etcd.image", f"{shown(image)} is not an image reference")
        storage = value.get("storage", "1Gi")
        if storage is not None:
            storage = format_memory(_memory("etcd.storage", storage, MAX_ETCD_STORAGE))
        return cls(deploy=deploy, endpoints=endpoints, replicas=replicas, image=image,
                   storage=storage)

    @property
    def store_url_for_endpoints(self) -> str:
        return "etcd://" + ",".join(self.endpoints)


@dataclass(frozen=True)
class RoleResources:
    """Requests (= limits, so pods get the Guaranteed QoS class) of one role's pods."""

    cpu_millis: int
    memory_bytes: int
    gpus: int = 0

    def quantities(self) -> dict[str, str]:
        values = {"cpu": format_cpu(self.cpu_millis), "memory": format_memory(self.memory_bytes)}
        if self.gpus:
            values[GPU_RESOURCE] = str(self.gpus)
        return values


@dataclass(frozen=True)
class JobPlan:
    """What will run, after defaults and derivations."""

    namespace: str
    trainers: int
    min_trainers: int
    max_trainers: int
    pservers: int
    master: RoleResources
    pserver: RoleResources
    trainer: RoleResources
    use_gpu: bool
    trainer_command: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    """A training job for a cluster (``backend="cluster"``, the default) or for this machine
    (``backend="local"``: ``elasticps.launch_job`` runs it under ``elasticps run``).

    Beginners give ``num_gpus``/``num_cpus``/``memory`` for the whole job; the advanced
    per-role fields win where given. See docs/cluster.md for every field. ``local`` is a
    deprecated alias: ``local=True`` means ``backend="local"`` (with a DeprecationWarning);
    after construction ``job.local`` is always ``job.backend == "local"``.
    """

    entry_point: str | Sequence[str] = ""
    job_name: str = "elasticps-job"
    image: str = DEFAULT_IMAGE
    namespace: str | None = None
    num_gpus: int = 0
    num_cpus: int | float | str | None = None
    memory: str | int | None = None
    trainers: int | None = None
    trainer_cpu: int | float | str | None = None
    trainer_gpu: int | None = None
    trainer_mem: str | int | None = None
    min_trainers: int | None = None
    max_trainers: int | None = None
    pservers: int | None = None
    pserver_cpu: int | float | str = 1
    pserver_mem: str | int = "1Gi"
    master_cpu: int | float | str = "500m"
    master_mem: str | int = "512Mi"
    data: Storage | str | None = None
    # The trainers' code, shipped by `submit` (see cluster/code_archive.py); None: it is in
    # the image. A relative path in a job.yaml is relative to that file.
    code: str | Path | None = None
    # Where `submit` puts the packed code for the trainers' init container to fetch (any
    # fsspec URL the cluster can read), instead of a ConfigMap; and how big it may be then.
    code_url: str | None = None
    code_limit: str | int | None = None
    # Patterns (of a path in `code`, or a file name) of files to ship although they look like
    # credentials (.env, .aws/credentials, *.pem: cluster/code_archive.py leaves them out).
    code_include: Sequence[str] = ()
    checkpoint: Storage | str | None = None
    env: Mapping[str, Any] = field(default_factory=dict)
    # Names of env: entries that are secrets whatever their names (one ending in _KEY, _SECRET,
    # _TOKEN or _PASSWORD is one anyway): they reach the pods only through the job's Secret.
    secret_env: Sequence[str] = ()
    # Admission/eviction per sparse table, {table: {admit_after, admit_probability, evict,
    # ttl_passes, ttl_seconds, max_rows}}: replaces what the model's layers declare for those
    # tables; rendered as the trainers' PADDLE_SPARSE_POLICIES.
    tables: Mapping[str, Any] = field(default_factory=dict)
    etcd: EtcdSpec | Mapping[str, Any] | None = None
    queue: str = "default"
    # The PriorityClass of every pod (the cluster's admin makes them); None: the default one.
    priority_class: str | None = None
    # How long the job may run (seconds, or "90m", "12h", "7d"); None: no limit.
    active_deadline: int | str | None = None
    # How long a finished job's objects are kept (for its logs and status) before they are
    # deleted, all of them: they are owned by the job's workload (docs/cluster.md).
    ttl_after_finished: int | str = DEFAULT_TTL_AFTER_FINISHED
    # Where the job runs: "cluster" (`elasticps submit`) or "local" (`elasticps run`).
    backend: str | None = None
    local: bool | None = None  # deprecated alias of backend="local"; see the class docstring
    # No TLS anywhere (gRPC, the status page, the job's etcd): only for a cluster network you
    # trust; every role warns at start. `elasticps submit --insecure` sets it.
    insecure: bool = False
    # How trainers update the pservers: async, sync, geo or hybrid (docs/architecture.md);
    # geo_steps: a geo trainer's local steps between two pushes of its deltas (default 10).
    mode: str = "async"
    geo_steps: int | None = None
    plan: JobPlan = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise in place once, here
        _dns_label("job_name", self.job_name, MAX_JOB_NAME)
        namespace = self.namespace if self.namespace is not None else user_namespace()
        set_(self, "namespace", _dns_label("namespace", namespace))
        if not isinstance(self.image, str) or not _IMAGE.match(self.image):
            raise _fail("image", f"{shown(self.image)} is not an image reference")
        _dns_label("queue", self.queue)
        if self.priority_class is not None:
            _dns_subdomain("priority_class", self.priority_class)
        set_(self, "active_deadline", None if self.active_deadline is None
             else _duration("active_deadline", self.active_deadline, 1, MAX_ACTIVE_DEADLINE))
        # at least a minute: whoever polls the job (launch_job's wait) must see its phase
        set_(self, "ttl_after_finished", _duration("ttl_after_finished",
                                                   self.ttl_after_finished, 60,
                                                   MAX_TTL_AFTER_FINISHED))
        backend = _backend(self.backend, self.local)
        set_(self, "backend", backend)
        set_(self, "local", backend == "local")
        if not isinstance(self.insecure, bool):
            raise _fail("insecure", f"must be true or false, got {shown(self.insecure)}")
        set_(self, "data", None if self.data is None else Storage.parse("data", self.data))
        set_(self, "code", _code_dir(self.code))
        set_(self, "code_url", _code_url(self.code_url, self.code))
        set_(self, "code_limit", _code_limit(self.code_limit, self.code_url))
        set_(self, "code_include", _code_include(self.code_include, self.code))
        set_(self, "checkpoint",
             None if self.checkpoint is None else Storage.parse("checkpoint", self.checkpoint))
        set_(self, "etcd", EtcdSpec.parse(self.etcd))
        set_(self, "env", check_env(self.env))
        set_(self, "secret_env", check_secret_env(self.secret_env, self.env))
        set_(self, "tables", _check_tables(self.tables))
        if self.mode not in MODES:
            raise _fail("mode", f"{shown(self.mode)} is not one of {', '.join(MODES)}")
        if self.geo_steps is not None:
            _count("geo_steps", self.geo_steps, 1, MAX_GEO_STEPS)
            if self.mode != "geo":
                raise _fail("geo_steps", f"is for mode: geo (this job's mode is {self.mode})")
        set_(self, "plan", self._make_plan(namespace))

    def _make_plan(self, namespace: str) -> JobPlan:
        # A local job runs the script given to launch_job (dist_train: the calling script), so
        # it needs no entry point.
        command = () if self.backend == "local" and not self.entry_point \
            else _trainer_command(self.entry_point)
        num_gpus = _count("num_gpus", self.num_gpus, 0, MAX_GPUS_PER_POD * MAX_TRAINERS)
        if self.num_cpus is not None:  # checked even when per-trainer values override it
            _cpu("num_cpus", self.num_cpus, MAX_CPU_MILLIS_PER_POD * MAX_TRAINERS)
        if self.memory is not None:
            _memory("memory", self.memory, MAX_MEMORY_PER_POD * MAX_TRAINERS)
        default_trainers = num_gpus if num_gpus > 0 else 1
        trainers = _count("trainers", default_trainers if self.trainers is None
                          else self.trainers, 1, MAX_TRAINERS)
        if self.trainer_gpu is not None:
            trainer_gpu = _count("trainer_gpu", self.trainer_gpu, 0, MAX_GPUS_PER_POD)
        elif num_gpus % trainers:
            raise _fail("num_gpus", f"{num_gpus} GPUs do not divide evenly among {trainers} "
                                    "trainers; set trainer_gpu")
        else:
            trainer_gpu = num_gpus // trainers
            if trainer_gpu > MAX_GPUS_PER_POD:
                raise _fail("num_gpus", f"{num_gpus} GPUs among {trainers} trainers is more "
                                        f"than {MAX_GPUS_PER_POD} per trainer")
        trainer_cpu = self._trainer_cpu(trainers)
        trainer_mem = self._trainer_mem(trainers)
        min_trainers = _count("min_trainers", 1 if self.min_trainers is None
                              else self.min_trainers, 1, MAX_TRAINERS)
        max_trainers = _count("max_trainers", trainers if self.max_trainers is None
                              else self.max_trainers, 1, MAX_TRAINERS)
        if min_trainers > max_trainers:
            raise _fail("min_trainers", f"{min_trainers} is more than max_trainers={max_trainers}")
        if min_trainers > trainers:
            raise _fail("min_trainers", f"{min_trainers} is more than trainers={trainers}")
        if trainers > max_trainers:
            raise _fail("max_trainers", f"{max_trainers} is less than trainers={trainers}")
        pservers = _count("pservers", max(1, math.ceil(trainers / 2)) if self.pservers is None
                          else self.pservers, 1, MAX_PSERVERS)
        use_gpu = self._use_gpu(trainer_gpu)
        return JobPlan(
            namespace=namespace, trainers=trainers, min_trainers=min_trainers,
            max_trainers=max_trainers, pservers=pservers,
            master=RoleResources(_cpu("master_cpu", self.master_cpu),
                                 _memory("master_mem", self.master_mem)),
            pserver=RoleResources(_cpu("pserver_cpu", self.pserver_cpu),
                                  _memory("pserver_mem", self.pserver_mem)),
            trainer=RoleResources(trainer_cpu, trainer_mem, trainer_gpu),
            use_gpu=use_gpu, trainer_command=command,
        )

    def _trainer_cpu(self, trainers: int) -> int:
        """trainer_cpu, else the job's num_cpus split evenly, else one core."""
        if self.trainer_cpu is not None:
            return _cpu("trainer_cpu", self.trainer_cpu)
        if self.num_cpus is None:
            return DEFAULT_TRAINER_CPU
        num_cpus = _cpu("num_cpus", self.num_cpus, MAX_CPU_MILLIS_PER_POD * MAX_TRAINERS)
        if num_cpus // trainers > MAX_CPU_MILLIS_PER_POD:
            raise _fail("num_cpus", f"{format_cpu(num_cpus)} CPUs among {trainers} trainers is "
                                    f"more than {format_cpu(MAX_CPU_MILLIS_PER_POD)} each")
        if num_cpus // trainers < 10:
            raise _fail("num_cpus", f"{format_cpu(num_cpus)} CPUs among {trainers} trainers "
                                    "leaves less than 10m each; raise num_cpus or set trainer_cpu")
        return num_cpus // trainers

    def _trainer_mem(self, trainers: int) -> int:
        """trainer_mem, else the job's memory split evenly (whole MiB), else 1Gi."""
        if self.trainer_mem is not None:
            return _memory("trainer_mem", self.trainer_mem)
        if self.memory is None:
            return DEFAULT_TRAINER_MEM
        memory = _memory("memory", self.memory, MAX_MEMORY_PER_POD * MAX_TRAINERS)
        share = (memory // trainers) // 2**20 * 2**20
        if share > MAX_MEMORY_PER_POD:
            raise _fail("memory", f"{format_memory(memory)} among {trainers} trainers is more "
                                  f"than {format_memory(MAX_MEMORY_PER_POD)} each")
        if share < 64 * 2**20:
            raise _fail("memory", f"{format_memory(memory)} among {trainers} trainers "
                                  "leaves less than 64Mi each; raise memory or set trainer_mem")
        return share

    def _use_gpu(self, trainer_gpu: int) -> bool:
        """PADDLE_USE_GPU for the trainers: the env's value if given, else "GPUs were asked"."""
        if "PADDLE_USE_GPU" not in self.env:
            return trainer_gpu > 0
        use_gpu = load_config(env={"PADDLE_USE_GPU": self.env["PADDLE_USE_GPU"]}).use_gpu
        warn_gpu_mismatch(self.job_name, trainer_gpu, use_gpu, "env.PADDLE_USE_GPU")
        return use_gpu

    @property
    def secret_env_names(self) -> tuple[str, ...]:
        """The env: entries that reach the pods through the job's Secret (spec_env.py)."""
        return secret_names(self.env, self.secret_env)

    @property
    def etcd_spec(self) -> EtcdSpec:
        assert isinstance(self.etcd, EtcdSpec)  # normalised by __post_init__
        return self.etcd

    @property
    def data_storage(self) -> Storage | None:
        assert self.data is None or isinstance(self.data, Storage)
        return self.data

    @property
    def checkpoint_storage(self) -> Storage | None:
        assert self.checkpoint is None or isinstance(self.checkpoint, Storage)
        return self.checkpoint

    @classmethod
    def from_dict(cls, data: object, *, source: str = "job spec") -> Job:
        """Build a job from parsed YAML/JSON; unknown keys are an error naming the key."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: the top level must be a mapping of fields, "
                              f"got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        _reject_unknown("", data, known)
        if not data.get("entry_point"):
            raise _fail("entry_point", f"is required in {source} (e.g. 'python train.py')")
        return cls(**dict(data))

    @classmethod
    def from_yaml(cls, path: str | Path) -> Job:
        """Read and validate a ``job.yaml`` file."""
        try:
            text = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read job spec {path}: {exc.strerror}") from exc
        data = load_user_yaml(text, f"job spec {path}")
        if isinstance(data, Mapping) and isinstance(data.get("code"), str) \
                and data["code"].strip():
            # relative to the spec file, so `elasticps submit dir/job.yaml` works from anywhere
            data = {**data, "code": str(Path(path).parent / data["code"].strip())}
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The fields as written (None values dropped), suitable for ``from_dict``."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not f.init or value is None or f.name == "local":  # local: backend says it
                continue
            if isinstance(value, Storage | Path):
                value = str(value)
            elif isinstance(value, EtcdSpec):
                value = ({"deploy": True, "replicas": value.replicas, "image": value.image,
                          "storage": value.storage} if value.deploy
                         else {"endpoints": list(value.endpoints)})
            elif isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


def _backend(backend: object, local: object) -> str:
    """The job's backend from ``backend`` and the deprecated ``local`` alias."""
    if local is not None and not isinstance(local, bool):
        raise _fail("local", f"must be true or false, got {shown(local)}")
    if backend is None:
        if local is not None:  # with backend too (dataclasses.replace passes both): no warning
            warnings.warn("job spec field 'local' is deprecated; write backend: local (or "
                          "backend: cluster) instead", DeprecationWarning, stacklevel=4)
        return "local" if local else "cluster"
    if backend not in BACKENDS:
        raise _fail("backend", f"{shown(backend)} is not one of {', '.join(BACKENDS)}")
    if local is not None and local != (backend == "local"):
        raise _fail("local", f"local: {str(local).lower()} contradicts backend: {backend}; "
                             "give backend only")
    return str(backend)


def warn_gpu_mismatch(job_name: str, trainer_gpu: int, use_gpu: bool, where: str) -> bool:
    """Warn (as the seed asks) when GPUs are asked but PADDLE_USE_GPU is false, or the opposite."""
    if (trainer_gpu > 0) == use_gpu:
        return False
    if trainer_gpu > 0:
        message = (f"Job {job_name} asks for {trainer_gpu} GPU(s) per trainer but {where} is "
                   "false, so the trainers will not use them.")
    else:
        message = (f"Job {job_name} asks for no GPUs but {where} is true; the trainers will "
                   "fail to find a GPU. Set num_gpus or trainer_gpu.")
    warnings.warn(message, JobSpecWarning, stacklevel=6)
    return True


def warn_environment(job: Job, environ: Mapping[str, str]) -> bool:
    """The seed's submit-time check: the submitter's PADDLE_USE_GPU against the GPUs asked."""
    if "PADDLE_USE_GPU" in job.env or "PADDLE_USE_GPU" not in environ:
        return False  # the spec's own env wins and was checked when the Job was built
    try:
        use_gpu = load_config(env={"PADDLE_USE_GPU": environ["PADDLE_USE_GPU"]}).use_gpu
    except ConfigError as exc:
        raise ConfigError(f"{exc} (in the environment of the submitting process)") from exc
    return warn_gpu_mismatch(job.job_name, job.plan.trainer.gpus, use_gpu,
                             "PADDLE_USE_GPU in this environment")


def _code_dir(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | Path) or not str(value).strip():
        raise _fail("code", f"must be a directory path, got {shown(value)}")
    if len(str(value)) > MAX_ENTRY_POINT:
        raise _fail("code", f"is longer than {MAX_ENTRY_POINT} characters")
    return str(value).strip()


def _code_url(value: object, code: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail("code_url", f"must be a URL, got {shown(value)}")
    text = value.strip().rstrip("/")
    if len(text) > MAX_ENTRY_POINT:
        raise _fail("code_url", f"is longer than {MAX_ENTRY_POINT} characters")
    if text.startswith("pvc://") or not (_URL.match(text) or text.startswith("/")):
        raise _fail("code_url", f"{shown(text)} is not a URL (s3://, gs://, file:///...) or an "
                                "absolute path that the trainers' pods can read")
    if code is None:
        raise _fail("code_url", "needs 'code': the directory whose archive goes there")
    return text


def _code_limit(value: object, code_url: str | None) -> str | None:
    if value is None:
        return None
    if code_url is None:
        raise _fail("code_limit", "applies only with 'code_url'; a ConfigMap carries at most "
                                  "1,024,000 bytes whatever the limit")
    return format_memory(_memory("code_limit", value, MAX_CODE_LIMIT))


def _code_include(value: object, code: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _fail("code_include", f"must be a list of file patterns, got {shown(value)}")
    if not value:
        return ()
    if len(value) > MAX_CODE_INCLUDE:
        raise _fail("code_include", f"has {len(value)} patterns, more than {MAX_CODE_INCLUDE}")
    for pattern in value:
        if not isinstance(pattern, str) or not pattern.strip() or len(pattern) > 256:
            raise _fail("code_include", f"entry {shown(pattern)} is not a file pattern of 1-256 "
                                        "characters")
    if code is None:
        raise _fail("code_include", "needs 'code': the directory it picks files from")
    return tuple(pattern.strip() for pattern in value)


MAX_TABLE_POLICIES = 1000  # the pservers' default PADDLE_MAX_TABLES


def _check_tables(tables: object) -> dict[str, dict[str, Any]]:
    """Each table's policy settings, checked as the trainers will apply them."""
    if not isinstance(tables, Mapping):
        raise _fail("tables", f"must be a mapping of table: {{admit_after: .., evict: .., "
                              f"max_rows: ..}}, got {shown(tables)}")
    if len(tables) > MAX_TABLE_POLICIES:
        raise _fail("tables", f"has {len(tables)} entries, more than {MAX_TABLE_POLICIES}")
    checked: dict[str, dict[str, Any]] = {}
    for name, settings in tables.items():
        where = f"tables.{name}"
        if not isinstance(name, str) or not name.strip():
            raise _fail(where, "is not a table name")
        if not isinstance(settings, Mapping):
            raise _fail(where, f"must map settings to values, got {shown(settings)}")
        try:
            policy_from_settings(name, settings)
        except ConfigError as exc:
            raise _fail(where, str(exc)) from exc
        checked[name] = dict(settings)
    return dict(sorted(checked.items()))


def sparse_policies_env(job: Job) -> str:
    """The trainers' PADDLE_SPARSE_POLICIES for the job's ``tables:`` ("" when none)."""
    if not job.tables:
        return ""
    return json.dumps(job.tables, sort_keys=True, separators=(",", ":"))


def _trainer_command(entry_point: object) -> tuple[str, ...]:
    """``python train.py --x 1`` -> ``("train.py", "--x", "1")``: what `elasticps trainer` runs."""
    if isinstance(entry_point, str | list | tuple) and sum(
            len(t) if isinstance(t, str) else 0 for t in
            ([entry_point] if isinstance(entry_point, str) else entry_point)) > MAX_ENTRY_POINT:
        raise _fail("entry_point", f"is longer than {MAX_ENTRY_POINT} characters")
    if isinstance(entry_point, str):
        try:
            tokens = shlex.split(entry_point)
        except ValueError as exc:
            raise _fail("entry_point", f"cannot be split into words: {exc}") from exc
    elif isinstance(entry_point, Sequence) and all(isinstance(t, str) for t in entry_point):
        tokens = list(entry_point)
    else:
        raise _fail("entry_point", f"must be a command string or a list, got {shown(entry_point)}")
    if tokens and _PYTHON.match(Path(tokens[0]).name):
        tokens = tokens[1:]
    if not tokens:
        raise _fail("entry_point", "is required: the training script, e.g. 'python train.py'")
    if tokens[0].startswith("-"):
        raise _fail("entry_point", f"must name a script to run, not the option {shown(tokens[0])} "
                                   "('python -m module' is not supported)")
    return tuple(tokens)
