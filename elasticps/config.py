"""The environment contract: every ``PADDLE_*`` variable elasticps reads, in one place.

The seed's names (``PADDLE_PSERVERS``, ``PADDLE_TRAINER_ID``, ...) keep their meaning; the
PaddleCloud spellings ``PADDLE_INIT_<X>`` are accepted as aliases of ``PADDLE_<X>``. Everything
elasticps added uses the same prefix. :func:`load_config` reads the environment, applies keyword
overrides (keywords win) and returns a frozen, validated :class:`Config`. A malformed value raises
:class:`~elasticps.errors.ConfigError` naming the variable and the value; nothing is defaulted
silently.

To add a variable: add a field to :class:`Config` and one :class:`EnvVar` row to ``ENV_VARS``;
the README's table is generated from the same rows by ``elasticps env``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticps.errors import ConfigError, shown
from elasticps.private_files import check_owned

ROLES = ("master", "pserver", "trainer")
# Upper bounds of a job (the job spec checks the same ones): a typo of a few zeros should be
# refused with a message, not become a million processes or a lease that never expires.
MAX_TRAINERS = 10_000
MAX_PSERVERS = 1_000
MAX_LEASE_TTL = 600
MAX_CHECKPOINT_KEEP = 1_000
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


def _parse_int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        text = text.strip()
        if len(text) > 40:  # int() of a huge digit string is slow; no bound needs 40 digits
            raise ValueError("is not an integer of at most 40 digits")
        try:
            value = int(text, 10)
        except ValueError:
            raise ValueError("is not an integer") from None
        if value < minimum:
            raise ValueError(f"must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be <= {maximum}")
        return value

    return parse


def _parse_float(minimum: float, maximum: float = math.inf) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError("is not a number") from None
        if not value >= minimum:  # also rejects NaN
            raise ValueError(f"must be >= {minimum}")
        if value > maximum:
            raise ValueError(f"must be <= {maximum:g}")
        return value

    return parse


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("is not a boolean (use true/false, 1/0, yes/no)")


def _parse_csv(text: str) -> tuple[str, ...]:
    items = tuple(part.strip() for part in text.split(",") if part.strip())
    for item in items:
        if any(ch.isspace() for ch in item):
            raise ValueError(f"entry {shown(item)} contains whitespace")
    return items


_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]{0,31}\Z")


def _parse_schemes(text: str) -> tuple[str, ...]:
    schemes = tuple(item.lower() for item in _parse_csv(text))
    for scheme in schemes:
        if not _SCHEME.match(scheme):
            raise ValueError(f"entry {shown(scheme)} is not a URL scheme (e.g. file, s3, gs)")
    return schemes


def _parse_role(text: str) -> str:
    role = text.strip().lower()
    if role not in ROLES:
        raise ValueError(f"is not one of {', '.join(ROLES)}")
    return role


_JOB_NAME_RULE = ("a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters, "
                  "starting and ending with a letter or digit; no spaces or newlines)")


def _parse_job_name(text: str) -> str:
    # Not stripped: the name is a store prefix and part of object names and log lines, so a
    # name with a newline or a space is refused, never quietly changed into another one.
    if len(text) > 63 or not _DNS1123.match(text):
        raise ValueError(f"is not {_JOB_NAME_RULE}")
    return text


def check_job_name(name: object) -> str:
    """``name`` if it is a job name (:data:`_JOB_NAME_RULE`), else a ConfigError naming it.
    Every way a name enters (a job spec, the command line, ``PADDLE_JOB_NAME``, a store's key
    prefix) is checked by this rule."""
    if not isinstance(name, str) or len(name) > 63 or not _DNS1123.match(name):
        raise ConfigError(f"job name {shown(name)} is not {_JOB_NAME_RULE}")
    return name


def _parse_store_url(text: str) -> str:
    url = text.strip()
    if not (url.startswith("etcd://") or url.startswith("file://")):
        raise ValueError("must start with etcd:// or file://")
    return url


def _parse_str(text: str) -> str:
    return text.strip()


# The keys a table's policy may set (elasticps.trainer.row_policy gives them their meaning).
POLICY_KEYS = frozenset({"admit_after", "admit_probability", "evict", "ttl_passes",
                         "ttl_seconds", "max_rows", "score_decay", "delete_threshold",
                         "nonclk_coeff", "click_coeff"})


def _parse_sparse_policies(text: str) -> str:
    """``{"table": {"admit_after": 2, "evict": "lru", ...}, ...}`` as canonical JSON ("" for
    none); the values' ranges are checked where they are used (row_policy)."""
    if not text.strip():
        return ""
    try:
        policies = json.loads(text)
    except ValueError:
        raise ValueError("is not JSON") from None
    if not isinstance(policies, dict):
        raise ValueError("must be a JSON object of {table: {setting: value}}")
    for table, settings in policies.items():
        if not isinstance(settings, dict):
            raise ValueError(f"table {shown(table)}: must map settings to values")
        unknown = sorted(set(settings) - POLICY_KEYS)
        if unknown:
            raise ValueError(f"table {shown(table)}: unknown setting(s) {unknown}; known: "
                             f"{sorted(POLICY_KEYS)}")
        for key, value in settings.items():
            if not (value is None or isinstance(value, str | int | float)):
                raise ValueError(f"table {shown(table)}: {key}={shown(value)} is not a number "
                                 "or string")
    return json.dumps(policies, sort_keys=True, separators=(",", ":"))


MAX_GEO_STEPS = 100_000
MODES = ("async", "sync", "geo", "hybrid")  # how trainers' updates reach the pservers
# (docs/architecture.md). hybrid: the dense parameters are replicated on the trainers and
# averaged by all-reduce; only sparse rows go through the pservers (elasticps/trainer/hybrid/).
MAX_DENSE_TIMEOUT = 3600
DENSE_GRAD_DTYPES = ("float32", "bfloat16")  # how a push's dense part travels
COMPUTE_DTYPES = ("float32", "bfloat16")  # what a trainer's forward and backward compute in

# PADDLE_MAX_CONCURRENT_RPCS when unset. An async or geo pserver's calls wait in gRPC's queue for
# its 16 workers with their requests unread, so admitting more of them costs no request memory
# (workers x receive limit bounds that), while refusing one costs both ends the part of its body
# sent before the refusal, and the trainer sends it again: at 256 simulated trainers against one
# pserver, 128 admitted calls cost 28 % more pserver CPU per pushed row than 1024
# (benchmarks/scale_sim.py, docs/pserver.md). 1024 admits ~340 trainers' three calls each (a
# sparse pull, a dense pull, a push). A sync pserver runs every admitted call on a thread of its
# own with its request read, and the master's calls are small: they keep 128.
DEFAULT_MAX_CONCURRENT_RPCS = 128
ASYNC_PSERVER_MAX_CONCURRENT_RPCS = 1024


def default_max_concurrent_rpcs(role: str, mode: str) -> int:
    """The calls a ``role`` server runs or queues at once unless PADDLE_MAX_CONCURRENT_RPCS is
    set."""
    if role == "pserver" and mode != "sync":
        return ASYNC_PSERVER_MAX_CONCURRENT_RPCS
    return DEFAULT_MAX_CONCURRENT_RPCS


def _parse_mode(text: str) -> str:
    mode = text.strip().lower() or "async"
    if mode not in MODES:
        raise ValueError(f"is not one of {', '.join(MODES)}")
    return mode


def _parse_dtype(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        dtype = text.strip().lower() or "float32"
        if dtype not in choices:
            raise ValueError(f"is not one of {', '.join(choices)}")
        return dtype
    return parse


def _parse_log_format(text: str) -> str:
    fmt = text.strip().lower() or "text"
    if fmt not in ("text", "json"):
        raise ValueError("is not one of text, json")
    return fmt


@dataclass(frozen=True)
class EnvVar:
    """One row of the environment contract."""

    name: str
    field: str
    parse: Callable[[str], Any]
    doc: str
    seed: bool = False  # named by the seed discussions; has a PADDLE_INIT_ alias
    secret: bool = False  # never printed (`elasticps env --check` masks it)


ENV_VARS: tuple[EnvVar, ...] = (
    # The seed's contract.
    EnvVar("PADDLE_PSERVERS", "pservers", _parse_csv,
           "Comma-separated pserver hosts (informational: pservers are found through the store).",
           seed=True),
    EnvVar("PADDLE_TRAINER_ID", "trainer_id", _parse_int(0, 10 * MAX_TRAINERS),
           "This trainer's index, 0-based.", seed=True),
    EnvVar("PADDLE_TRAINER_COUNT", "trainer_count", _parse_int(1, MAX_TRAINERS),
           "Number of trainers the job starts with.", seed=True),
    EnvVar("PADDLE_NUM_GRADIENT_SERVERS", "num_gradient_servers", _parse_int(1, MAX_TRAINERS),
           "Number of processes pushing gradients (the trainers), as in Paddle v1.", seed=True),
    EnvVar("PADDLE_PORTS_NUM_FOR_SPARSE", "ports_num_for_sparse", _parse_int(0),
           "Extra ports per pserver for sparse traffic (accepted for compatibility; one gRPC "
           "port carries both).", seed=True),
    EnvVar("PADDLE_PORT", "port", _parse_int(0, 65535),
           "Port a server role binds (0 = any free port, published through the store).",
           seed=True),
    EnvVar("PADDLE_PORTS_NUM", "ports_num", _parse_int(1),
           "Ports per pserver (accepted for compatibility).", seed=True),
    EnvVar("PADDLE_USE_GPU", "use_gpu", _parse_bool,
           "Train on the GPU.", seed=True),
    # elasticps additions.
    EnvVar("PADDLE_STORE", "store", _parse_store_url,
           "Coordination store: etcd://host:2379[,host2:2379] or file:///path/job.db."),
    EnvVar("PADDLE_JOB_NAME", "job_name", _parse_job_name,
           "Job name (DNS-1123 label); every store key lives under /elasticps/<job>/."),
    EnvVar("PADDLE_ROLE", "role", _parse_role, "Role of this process: master, pserver or trainer."),
    EnvVar("PADDLE_JOB_TOKEN", "token", _parse_str,
           "Per-job RPC token; every call must carry it.", secret=True),
    EnvVar("PADDLE_JOB_TOKEN_FILE", "token_file", _parse_str,
           "File holding the job token, read at start in place of PADDLE_JOB_TOKEN (a file "
           "is not in the process's environment, so children do not inherit it); it must be "
           "the user's (or root's) and writable by nobody else. `elasticps run` gives its "
           "roles WORKDIR/token (0600)."),
    EnvVar("PADDLE_NUM_PSERVERS", "num_pservers", _parse_int(1, MAX_PSERVERS),
           "Number of pserver slots N (job config, fixed for the job's life)."),
    EnvVar("PADDLE_HOST", "host", _parse_str,
           "Address this process advertises to its peers (pod IP in a cluster)."),
    EnvVar("PADDLE_DATA", "data", _parse_str,
           "Dataset URL (a directory made by `elasticps data`)."),
    EnvVar("PADDLE_CHECKPOINT_URL", "checkpoint_url", _parse_str,
           "fsspec URL where pservers write checkpoints."),
    EnvVar("PADDLE_CHECKPOINT_INTERVAL", "checkpoint_interval", _parse_float(0.1, 86_400),
           "Seconds between pserver checkpoints."),
    EnvVar("PADDLE_CHECKPOINT_KEEP", "checkpoint_keep", _parse_int(1, MAX_CHECKPOINT_KEEP),
           "Checkpoints kept per pserver slot."),
    EnvVar("PADDLE_SPARSE_POLICIES", "sparse_policies", _parse_sparse_policies,
           "Trainers: admission/eviction per sparse table, JSON {table: {admit_after, "
           "admit_probability, evict, ttl_passes, ttl_seconds, max_rows, score_decay, "
           "delete_threshold, nonclk_coeff, click_coeff}}; replaces what the "
           "model's layers declare for those tables (rendered from a job spec's tables:)."),
    EnvVar("PADDLE_CHECKPOINT_DELTAS", "checkpoint_deltas", _parse_int(0, 1000),
           "Incremental pserver checkpoints between two full ones (0 = every checkpoint is "
           "full): a delta holds only the sparse rows pushed since the previous checkpoint."),
    EnvVar("PADDLE_LEASE_TTL", "lease_ttl", _parse_int(1, MAX_LEASE_TTL),
           "Seconds a store lease lives without keepalive; bounds failure detection."),
    EnvVar("PADDLE_WORKDIR", "workdir", _parse_str,
           "Directory the local launcher gave the job (logs, generated data, exported model)."),
    EnvVar("PADDLE_HTTP_PORT", "http_port", _parse_int(0, 65535),
           "Port the master's HTTP status page binds (0 = any free port, published with "
           "the master's address)."),
    EnvVar("PADDLE_METRICS_PORT", "metrics_port", _parse_int(0, 65535),
           "Port every role serves Prometheus metrics on at /metrics (0 = any free port; each "
           "process publishes its URL in the store)."),
    EnvVar("PADDLE_LOG_FORMAT", "log_format", _parse_log_format,
           "Log line format: text (naming job, role and node) or json (one object per line)."),
    EnvVar("PADDLE_HTTP_HOST", "http_host", _parse_str,
           "Address the master's status page binds: loopback by default; any other address "
           "serves it over TLS and requires the job token."),
    EnvVar("PADDLE_TLS_DIR", "tls_dir", _parse_str,
           "Directory with this process's TLS identity: ca.crt (the job's CA), tls.crt, "
           "tls.key. Required unless PADDLE_INSECURE is true."),
    EnvVar("PADDLE_INSECURE", "insecure", _parse_bool,
           "Run without TLS (the token travels in clear; clients cannot verify servers)."),
    EnvVar("PADDLE_HEALTH_PORT", "health_port", _parse_int(0, 65535),
           "Plaintext port serving only grpc.health.v1, for kubelet probes (0 = none: health "
           "is served on PADDLE_PORT only)."),
    EnvVar("PADDLE_MAX_MESSAGE_MB", "max_message_mb", _parse_int(1, 2047),
           "Largest request a pserver accepts, in MiB: size it to the largest push or dense "
           "initialisation of a shard (the master accepts at most 4 MiB)."),
    EnvVar("PADDLE_PSERVER_MEMORY_MB", "pserver_memory_mb", _parse_int(0, 1 << 24),
           "Memory cap of one pserver's tables in MiB (0 = none): a push that needs more, when "
           "eviction cannot make room, is refused with RESOURCE_EXHAUSTED."),
    EnvVar("PADDLE_MAX_IDS_PER_REQUEST", "max_ids_per_request", _parse_int(1, 1 << 27),
           "Most ids of one table in one pserver pull or push (bounds how long a push holds "
           "the shard lock)."),
    EnvVar("PADDLE_MAX_TABLES", "max_tables", _parse_int(1, 100_000),
           "Most tables a job may declare."),
    EnvVar("PADDLE_MAX_CONCURRENT_RPCS", "max_concurrent_rpcs", _parse_int(1, 100_000),
           "Calls a master or pserver runs or queues at once; more are refused unread "
           "(RESOURCE_EXHAUSTED) and the clients retry them with backoff. Default: 128 for the "
           "master and sync pservers, 1024 for async and geo pservers (their queued calls hold "
           "no thread and no request)."),
    EnvVar("PADDLE_TRAINING_MODE", "mode", _parse_mode,
           "How trainers update the pservers: async (each batch's gradients applied as they "
           "come), sync (every step's gradients of all training trainers averaged, then applied "
           "once), geo (trainers train a local copy and push parameter deltas) or hybrid "
           "(dense parameters replicated on the trainers and averaged by all-reduce every "
           "step; sparse rows through the pservers as in async)."),
    EnvVar("PADDLE_GEO_STEPS", "geo_steps", _parse_int(1, MAX_GEO_STEPS),
           "geo mode: local steps a trainer takes between two pushes of its deltas."),
    EnvVar("PADDLE_DENSE_GRAD_DTYPE", "dense_grad_dtype", _parse_dtype(DENSE_GRAD_DTYPES),
           "How a trainer sends its dense gradients (and geo deltas): float32, or bfloat16 "
           "(half the bytes; each value rounded to the nearest bfloat16, the same rounding in "
           "the trainer's own replica of the update)."),
    EnvVar("PADDLE_COMPUTE_DTYPE", "compute_dtype", _parse_dtype(COMPUTE_DTYPES),
           "What a trainer's forward and backward passes compute in: float32, or bfloat16 "
           "(torch.autocast: products in bfloat16 on CPUs with AMX or AVX-512 BF16 and on "
           "GPUs; parameters, gradients and optimizer state stay float32)."),
    EnvVar("PADDLE_DENSE_TIMEOUT", "dense_timeout", _parse_float(1, MAX_DENSE_TIMEOUT),
           "hybrid mode: seconds a trainer waits in one collective of the dense group, or for "
           "the members of a new generation to arrive, before it ends that generation and "
           "forms another (a dead trainer is dropped sooner: when its lease expires)."),
    EnvVar("PADDLE_DATA_SCHEMES", "data_schemes", _parse_schemes,
           "URL schemes a dataset and its chunks may use (default: file; add e.g. s3,gs)."),
    EnvVar("PADDLE_STREAM_POLL_S", "stream_poll_s", _parse_float(0.05, 3600),
           "Master: most seconds between two listings of a stream's prefix (the interval "
           "doubles from 0.2 s while nothing lands): a partition is appended within about "
           "this long of its commit."),
    EnvVar("PADDLE_STREAM_PERIOD_S", "stream_period_s", _parse_float(1, 366 * 86_400),
           "Pservers: the partition time a stream's sparse tables count as one pass, for "
           "ttl_passes and score_decay (default 86400: they decay once a day of data, as "
           "day-over-day training does)."),
    EnvVar("PADDLE_WARM_START", "warm_start", _parse_str,
           "Trainers: a model export (or a model directory, whose LATEST names its newest "
           "version) the job's tables start from when they are first initialised (elasticps "
           "run --warm-start); pservers restored from checkpoints keep what they hold."),
)

ALIAS_PREFIX = "PADDLE_INIT_"


def alias_of(var: EnvVar) -> str | None:
    """The ``PADDLE_INIT_<X>`` spelling of a seed variable, or None."""
    return ALIAS_PREFIX + var.name.removeprefix("PADDLE_") if var.seed else None


@dataclass(frozen=True)
class Config:
    """Validated configuration of one elasticps process. Frozen: build a new one to change it."""

    pservers: tuple[str, ...] = ()
    trainer_id: int = 0
    trainer_count: int = 1
    num_gradient_servers: int = 1
    ports_num_for_sparse: int = 0
    port: int = 7164
    ports_num: int = 1
    use_gpu: bool = False
    store: str | None = None
    job_name: str = "elasticps"
    role: str | None = None
    token: str = ""
    token_file: str | None = None
    num_pservers: int | None = None
    host: str = "127.0.0.1"
    data: str | None = None
    checkpoint_url: str | None = None
    checkpoint_interval: float = 60.0
    checkpoint_keep: int = 3
    checkpoint_deltas: int = 0
    sparse_policies: str = ""  # canonical JSON; see sparse_policy_settings
    lease_ttl: int = 5
    http_port: int = 0
    workdir: str | None = None
    metrics_port: int = 0
    log_format: str = "text"
    http_host: str = "127.0.0.1"
    tls_dir: str | None = None
    insecure: bool = False
    health_port: int = 0
    max_message_mb: int = 256
    pserver_memory_mb: int = 0
    max_ids_per_request: int = 1 << 20
    max_tables: int = 1000
    max_concurrent_rpcs: int | None = None  # unset: default_max_concurrent_rpcs(role, mode)
    data_schemes: tuple[str, ...] = ("file",)
    mode: str = "async"
    geo_steps: int = 10
    dense_grad_dtype: str = "float32"
    compute_dtype: str = "float32"
    dense_timeout: float = 60.0
    stream_poll_s: float = 2.0
    stream_period_s: float = 86_400.0
    warm_start: str | None = None

    def call_limit(self, role: str) -> int:
        """Calls a ``role`` server of this process runs or queues at once."""
        if self.max_concurrent_rpcs is not None:
            return self.max_concurrent_rpcs
        return default_max_concurrent_rpcs(role, self.mode)

    @property
    def pserver_count(self) -> int:
        """N pserver slots: PADDLE_NUM_PSERVERS, else len(PADDLE_PSERVERS), else 1."""
        if self.num_pservers is not None:
            return self.num_pservers
        return max(1, len(self.pservers))

    @property
    def sparse_policy_settings(self) -> dict[str, dict[str, Any]]:
        """PADDLE_SPARSE_POLICIES as {table: {setting: value}} (empty: the layers decide)."""
        return json.loads(self.sparse_policies) if self.sparse_policies else {}

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces this config in a child process."""
        env: dict[str, str] = {}
        for var in ENV_VARS:
            value = getattr(self, var.field)
            if value is None:
                continue
            if isinstance(value, bool):
                env[var.name] = "true" if value else "false"
            elif isinstance(value, tuple):
                env[var.name] = ",".join(value)
            else:
                env[var.name] = str(value)
        return env


_FIELDS = {f.name for f in dataclasses.fields(Config)}
_BY_FIELD = {var.field: var for var in ENV_VARS}


def _read_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for var in ENV_VARS:
        found: list[tuple[str, str]] = []
        for name in (var.name, alias_of(var)):
            if name is not None and name in env:
                found.append((name, env[name]))
        if not found:
            continue
        if len(found) == 2 and found[0][1].strip() != found[1][1].strip():
            raise ConfigError(
                f"{found[0][0]}={shown(found[0][1])} and its alias "
                f"{found[1][0]}={shown(found[1][1])} disagree; set only one of them"
            )
        name, raw = found[0]
        try:
            values[var.field] = var.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"environment variable {name}={shown(raw)} {exc}") from exc
    return values


def _check_override(field: str, value: Any) -> Any:
    """Validate a keyword override with the same parser the env var uses."""
    var = _BY_FIELD.get(field)
    if var is None or value is None:
        return value
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    try:
        return var.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{field}={shown(value)} (env {var.name}) {exc}") from exc


def load_config(env: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """Build a :class:`Config` from ``env`` (default ``os.environ``); keyword arguments win."""
    unknown = sorted(set(overrides) - _FIELDS)
    if unknown:
        raise ConfigError(
            f"unknown configuration option(s) {', '.join(unknown)}; "
            f"known options are {', '.join(sorted(_FIELDS))}"
        )
    values = _read_env(os.environ if env is None else env)
    for field, value in overrides.items():
        values[field] = _check_override(field, value)
    if values.get("token_file"):
        values["token"] = _token_from_file(values["token_file"], values.get("token"))
    elif env is None and not values.get("token"):
        values["token"] = _held_token  # taken out of os.environ by hold_env_token()
    # PADDLE_TRAINER_ID may exceed PADDLE_TRAINER_COUNT: trainers added to an elastic job
    # get ids past the starting count.
    return Config(**values)


def listen_error(what: str, host: str, port: int, setting: str, exc: OSError) -> ConfigError:
    """Why ``what`` (a page, an endpoint) cannot listen on ``host:port``, naming the setting
    the port came from: a busy port is a configuration error, which a restart would repeat."""
    return ConfigError(f"{what} cannot listen on {host}:{port} (port {port} from {setting}): "
                       f"{exc.strerror or exc}; stop what holds the port or choose another "
                       "(0 = any free port)")


MAX_TOKEN_BYTES = 1024  # servers refuse longer tokens unread (rpc/server.py)


def _token_from_file(path: str, given: str | None) -> str:
    """The token in PADDLE_JOB_TOKEN_FILE; PADDLE_JOB_TOKEN may be set too only if equal. A
    file that another user owns or can write is refused: they would choose the token."""
    check_owned(Path(path), "PADDLE_JOB_TOKEN_FILE")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"environment variable PADDLE_JOB_TOKEN_FILE={shown(path)}: cannot read "
                          f"it: {exc.strerror}") from exc
    if len(raw) > MAX_TOKEN_BYTES:
        raise ConfigError(f"environment variable PADDLE_JOB_TOKEN_FILE={shown(path)}: the file "
                          f"holds more than {MAX_TOKEN_BYTES} bytes, too many for a token")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"environment variable PADDLE_JOB_TOKEN_FILE={shown(path)}: the file "
                          "is not UTF-8 text") from None
    if not token:
        raise ConfigError(f"environment variable PADDLE_JOB_TOKEN_FILE={shown(path)}: the file "
                          "is empty")
    if given and given != token:
        raise ConfigError("PADDLE_JOB_TOKEN and the token in PADDLE_JOB_TOKEN_FILE "
                          f"({path}) disagree; set only one of them")
    return token


# PADDLE_JOB_TOKEN as this process was given it, once hold_env_token() took it out of
# os.environ; load_config() of os.environ still finds it.
_held_token = ""


def hold_env_token() -> None:
    """Take PADDLE_JOB_TOKEN out of ``os.environ`` and keep it for this process alone.

    A trainer runs the user's script in its own process; whatever the script starts inherits
    ``os.environ``, and none of it needs the token. Configs loaded from the environment
    afterwards still have it."""
    global _held_token
    token = os.environ.pop("PADDLE_JOB_TOKEN", "").strip()
    if token:
        _held_token = token


_current: Config | None = None


def init(**overrides: Any) -> Config:
    """Read ``PADDLE_*`` from the environment, apply keyword overrides, and remember the result.

    ``elasticps.init(use_gpu=False)`` is the seed's entry point; it returns the frozen config.
    """
    global _current
    _current = load_config(**overrides)
    return _current


def current() -> Config:
    """The config set by :func:`init`, or one read from the environment now."""
    return _current if _current is not None else load_config()


def user_namespace(env: Mapping[str, str] | None = None) -> str:
    """The Kubernetes namespace for cluster jobs: ``USER_NAMESPACE`` (the seed's name), else
    ``"default"``. Not a ``PADDLE_*`` variable: it belongs to the submitting user, not a role."""
    value = (os.environ if env is None else env).get("USER_NAMESPACE", "").strip()
    return value or "default"
