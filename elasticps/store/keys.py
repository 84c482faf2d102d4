"""Every key a job keeps in the store, its value format and its parser: the layout in one place.

Keys are relative to the job's prefix (``/elasticps/<job>/``, :func:`elasticps.store.job_prefix`).
Values are UTF-8 JSON objects unless noted. A value that does not parse raises
:class:`~elasticps.errors.StoreValueError` naming the key, so a corrupt or foreign value is never
mistaken for a real one::

    master/election                  leader's node name (bytes), under the leader's lease; the
                                     lock's create_revision is the fencing token (store/election.py)
    master/address                   MasterAddress {grpc, http, node, pid, host}, under the
                                     leader's lease: it vanishes with the leader
    master/candidate/<node>          ProcessInfo {pid, host}: a master process in the election
                                     (leader or standby), under its own lease
    master/state/...                 the task queue's own records, written and read only by the
                                     master (layout and format: elasticps/master/snapshot.py;
                                     a stream's stream and partition/<k> records:
                                     elasticps/master/stream_records.py)
    pserver/slot/<i>                 PServerSlot {address, pid, host}, under the pserver's lease
    pserver/init/lock                InitMarker {by, what, time}: the trainer initialising the
                                     tables, under its lease
    pserver/init/done                InitMarker: the tables were initialised (or restored)
    pserver/checkpoint/<i>/<id>      a checkpoint manifest of slot i (pserver/checkpoint/files.py)
    pserver/layout                   PServerLayout {shards, generation}: the job's shard count
                                     after a resharding (absent before the first); written only
                                     by the resharding's commit (pserver/reshard/commit.py)
    trainer/<name>                   TrainerRegistration {pid, host} or {leaving: true}, under the
                                     trainer's lease; a DELETE means the trainer died
    hybrid/member/<name>             MemberInfo {pid, host, port, device}: a trainer taking part
                                     in the dense group (hybrid mode), under its own lease; port
                                     is its rendezvous store (a torch.distributed.TCPStore),
                                     device where it computes (cpu, cuda/<GPU uuid>)
    hybrid/group                     GroupRecord {generation, members, host, port, prefix,
                                     backend}: the dense group's current generation (its
                                     members in rank order, where they meet, gloo or nccl);
                                     changed only by compare-and-set (trainer/hybrid/)
    hybrid/checkpoint/<id>           a dense checkpoint's manifest (trainer/hybrid/
                                     checkpoints.py); <id> is the state's generation (8
                                     digits) then its step (12)
    job/progress/<trainer>           TrainerProgress {pass, samples, batches, loss, train_s, tasks,
                                     timers, samples_per_s, time, pass_metrics, stage}, refreshed
                                     every few seconds and whenever the trainer's stage changes
    job/events/<time_ns>-<tag>       JobEvent {time, kind, subject, message, source}: the job's
                                     timeline (restarts, failovers, recoveries, scale steps...)
    job/history                      the status page's document (JSON object with "series" and
                                     "events" lists), written by the leading master so the page
                                     outlives the job and a new leader continues its charts
    metrics/<role>/<name>            MetricsEndpoint {role, name, url, pid, host}: where a
                                     process serves Prometheus metrics, under its own lease
    job/sealed                       SealedPasses {below}: every pass below it is sealed (every
                                     shard's checkpoint held all its batches); written by the
                                     master with the pass end, read by a pserver that restarts
                                     with no checkpoint (it refuses late pushes of those passes)
    job/result                       the job's result document (any JSON object): a script's
                                     own (put), else the first finished trainer's metrics (only
                                     if absent: compare-and-set on a missing key)
    job/once/<name>/lock|done        run_once (store/once.py): owner name | the step's result
    job/scores/<partition>//<task>   TaskScores {partition, time, trainer, buckets, positives,
                                     negatives}: a finished stream task's rows as scored before
                                     they were trained on (trainer/progressive.py), summed per
                                     partition by master/progressive.py; <task> is 8 digits
    job/freshness/<version>          ExportFreshness {version, published_at, partitions: {name:
                                     commit time}}: the stream partitions a scheduled version
                                     was the first to have trained through, and when each was
                                     committed (trainer/stream_exports.py); <version> is 12
                                     digits; the launcher sums them into summary.json
    job/tables/<name>/lock           InitMarker: the trainer writing a table trained from memory
                                     as a dataset (trainer/table_reader.py), under its lease
    job/tables/<name>/done           TableDataset {url, fingerprint, by}: where it was written
    launcher/desired_trainers        decimal integer: trainers the local launcher should run
    launcher/desired_pservers        decimal integer: pservers the local launcher should reshard
                                     the job onto (`elasticps scale --pservers`)
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elasticps.errors import StoreValueError
from elasticps.store.api import Store

# -- key names ------------------------------------------------------------------------------

MASTER_ELECTION = "master/election"
MASTER_ADDRESS = "master/address"
MASTER_CANDIDATE_PREFIX = "master/candidate/"
MASTER_STATE_PREFIX = "master/state/"  # below it: elasticps/master/snapshot.py's records
MASTER_STATE_DATASET = f"{MASTER_STATE_PREFIX}dataset"
MASTER_STATE_CHUNKS_PREFIX = f"{MASTER_STATE_PREFIX}chunks/"
MASTER_STATE_META = f"{MASTER_STATE_PREFIX}meta"
MASTER_STATE_TASK_PREFIX = f"{MASTER_STATE_PREFIX}task/"
MASTER_STATE_FAILED_PREFIX = f"{MASTER_STATE_PREFIX}failed/"
MASTER_STATE_ACCOUNTING_PREFIX = f"{MASTER_STATE_PREFIX}accounting/"
MASTER_STATE_STREAM = f"{MASTER_STATE_PREFIX}stream"
MASTER_STATE_PARTITION_PREFIX = f"{MASTER_STATE_PREFIX}partition/"
PSERVER_SLOT_PREFIX = "pserver/slot/"
PSERVER_INIT_PREFIX = "pserver/init/"
PSERVER_INIT_LOCK = "pserver/init/lock"
PSERVER_INIT_DONE = "pserver/init/done"
PSERVER_CHECKPOINT_PREFIX = "pserver/checkpoint/"
PSERVER_LAYOUT = "pserver/layout"
TRAINER_PREFIX = "trainer/"
HYBRID_PREFIX = "hybrid/"
HYBRID_MEMBER_PREFIX = "hybrid/member/"
HYBRID_GROUP = "hybrid/group"
HYBRID_CHECKPOINT_PREFIX = "hybrid/checkpoint/"
PROGRESS_PREFIX = "job/progress/"
JOB_RESULT = "job/result"
SEALED_PASSES = "job/sealed"
ONCE_PREFIX = "job/once/"
TABLES_PREFIX = "job/tables/"
DESIRED_TRAINERS = "launcher/desired_trainers"
DESIRED_PSERVERS = "launcher/desired_pservers"
EVENTS_PREFIX = "job/events/"
JOB_HISTORY = "job/history"
JOB_SCORES_PREFIX = "job/scores/"
FRESHNESS_PREFIX = "job/freshness/"
METRICS_PREFIX = "metrics/"


def master_candidate(node: str) -> str:
    return f"{MASTER_CANDIDATE_PREFIX}{node}"


MASTER_TASK_ID_DIGITS = 8
MASTER_TASK_RANGE_DIGITS = 4  # task keys are read in ranges sharing their first 4 digits
MASTER_TASKS_PER_RANGE = 10 ** (MASTER_TASK_ID_DIGITS - MASTER_TASK_RANGE_DIGITS)


def master_chunks_part_key(part: int) -> str:
    return f"{MASTER_STATE_CHUNKS_PREFIX}{part:06d}"


def master_task_key(task_id: int) -> str:
    return f"{MASTER_STATE_TASK_PREFIX}{task_id:0{MASTER_TASK_ID_DIGITS}d}"


def master_task_range(task_id: int) -> str:
    """The prefix of the task keys sharing ``task_id``'s first
    :data:`MASTER_TASK_RANGE_DIGITS` digits (a range of :data:`MASTER_TASKS_PER_RANGE`)."""
    first = task_id // MASTER_TASKS_PER_RANGE
    return f"{MASTER_STATE_TASK_PREFIX}{first:0{MASTER_TASK_RANGE_DIGITS}d}"


def master_partition_key(index: int) -> str:
    """A stream's ``index``-th appended partition (numbered like the tasks)."""
    return f"{MASTER_STATE_PARTITION_PREFIX}{index:0{MASTER_TASK_ID_DIGITS}d}"


def master_partition_range(index: int) -> str:
    """The prefix of the partition keys sharing ``index``'s first digits (a range of
    :data:`MASTER_TASKS_PER_RANGE`, as :func:`master_task_range`)."""
    first = index // MASTER_TASKS_PER_RANGE
    return f"{MASTER_STATE_PARTITION_PREFIX}{first:0{MASTER_TASK_RANGE_DIGITS}d}"


def master_failed_key(pass_id: int, task_id: int) -> str:
    return f"{MASTER_STATE_FAILED_PREFIX}{pass_id:06d}-{task_id:0{MASTER_TASK_ID_DIGITS}d}"


def master_accounting_key(pass_id: int) -> str:
    return f"{MASTER_STATE_ACCOUNTING_PREFIX}{pass_id:06d}"


def pserver_slot(slot: int) -> str:
    return f"{PSERVER_SLOT_PREFIX}{slot}"


def slot_of(key: str) -> int | None:
    """The slot number of a ``pserver/slot/<i>`` key, or None for any other key."""
    if not key.startswith(PSERVER_SLOT_PREFIX):
        return None
    return _whole(key[len(PSERVER_SLOT_PREFIX):], limit=6)


def checkpoint_prefix(slot: int) -> str:
    return f"{PSERVER_CHECKPOINT_PREFIX}{slot}/"


def checkpoint_key(slot: int, checkpoint_id: str) -> str:
    return f"{checkpoint_prefix(slot)}{checkpoint_id}"


def trainer_key(name: str) -> str:
    return f"{TRAINER_PREFIX}{name}"


def trainer_of(key: str) -> str:
    """The trainer name of a ``trainer/<name>`` key."""
    return key.removeprefix(TRAINER_PREFIX)


def hybrid_member_key(name: str) -> str:
    return f"{HYBRID_MEMBER_PREFIX}{name}"


def hybrid_member_of(key: str) -> str | None:
    """The trainer name of a ``hybrid/member/<name>`` key, or None for any other key."""
    if not key.startswith(HYBRID_MEMBER_PREFIX):
        return None
    return key[len(HYBRID_MEMBER_PREFIX):] or None


def progress_key(trainer: str) -> str:
    return f"{PROGRESS_PREFIX}{trainer}"


def metrics_key(role: str, name: str) -> str:
    return f"{METRICS_PREFIX}{role}/{name}"


def once_keys(name: str) -> tuple[str, str]:
    """(lock, done) keys of the one-time step ``name``."""
    return f"{ONCE_PREFIX}{name}/lock", f"{ONCE_PREFIX}{name}/done"


def table_prefix(name: str) -> str:
    """The keys of the in-memory table ``name`` written as a dataset: ``lock`` and ``done``."""
    return f"{TABLES_PREFIX}{name}/"


def table_keys(name: str) -> tuple[str, str]:
    """(lock, done) keys of the in-memory table ``name`` written as a dataset."""
    return f"{table_prefix(name)}lock", f"{table_prefix(name)}done"


# -- value formats --------------------------------------------------------------------------


MAX_VALUE_BYTES = 1 << 20  # the store's own bound on a value
MAX_TEXT = 256  # names, hosts, node names: longer is not ours
MAX_MESSAGE = 4096  # an event's message (a failed task's reason is cut to fit)
MAX_STAGE = 60  # a trainer's stage: a few words the progress line shows whole
_ADDRESS = re.compile(r"^[A-Za-z0-9._:\[\]-]{1,253}:[0-9]{1,5}\Z")


def _object(raw: bytes, key: str) -> dict[str, Any]:
    if not isinstance(raw, bytes | bytearray) or len(raw) > MAX_VALUE_BYTES:
        raise StoreValueError(f"store key {key!r} holds no value of at most 1 MiB")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StoreValueError(f"store key {key!r} holds no JSON ({exc!s:.80}): "
                              f"{bytes(raw[:80])!r}") from exc
    if not isinstance(doc, dict):
        raise StoreValueError(f"store key {key!r} holds {type(doc).__name__}, not a JSON object")
    return doc


def _field(doc: Mapping[str, Any], name: str, kind: type, key: str) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise StoreValueError(f"store key {key!r}: field {name!r} must be {kind.__name__}, got "
                              f"{value!r:.80}")
    return value


def _text(doc: Mapping[str, Any], name: str, key: str, limit: int = MAX_TEXT) -> str:
    value: str = _field(doc, name, str, key)
    if len(value) > limit:
        raise StoreValueError(f"store key {key!r}: field {name!r} is longer than {limit} "
                              "characters")
    return value


def _address(doc: Mapping[str, Any], name: str, key: str) -> str:
    """A ``host:port`` a client will dial: a bounded host name or IP and a port number."""
    value: str = _field(doc, name, str, key)
    if not _ADDRESS.match(value) or not 0 < int(value.rsplit(":", 1)[1]) < 65536:
        raise StoreValueError(f"store key {key!r}: field {name!r} is not host:port: "
                              f"{value!r:.80}")
    return value


def _finite(doc: Mapping[str, Any], name: str, key: str, default: float = 0) -> float:
    """A JSON number that is finite (json accepts NaN and Infinity)."""
    value = doc.get(name, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or (
            isinstance(value, int) and abs(value) > 2 ** 63) or not math.isfinite(value):
        raise StoreValueError(f"store key {key!r}: field {name!r} must be a finite number, got "
                              f"{value!r:.80}")
    return float(value)


def _whole(text: str, limit: int = 18) -> int | None:
    """A plain decimal number of at most ``limit`` ASCII digits, else None."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= limit else None


def _encode(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


@dataclass(frozen=True)
class ProcessInfo:
    """Which process holds a key: enough for an operator (or ``elasticps chaos``) to find it."""

    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    def encode(self) -> bytes:
        return _encode({"pid": self.pid, "host": self.host})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> ProcessInfo:
        doc = _object(raw, key)
        return cls(_field(doc, "pid", int, key), _text(doc, "host", key))


@dataclass(frozen=True)
class MemberInfo:
    """A member of hybrid mode's dense group: its process and the ``host:port`` of the
    rendezvous store it serves (a generation whose rank 0 it is meets there)."""

    port: int
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    device: str = "cpu"  # where it computes: "cpu", or "cuda/<the GPU's uuid>"

    def encode(self) -> bytes:
        return _encode({"pid": self.pid, "host": self.host, "port": self.port,
                        "device": self.device})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> MemberInfo:
        doc = _object(raw, key)
        port = _field(doc, "port", int, key)
        if not 0 < port < 65536:
            raise StoreValueError(f"store key {key!r}: port={port} must be in [1, 65535]")
        return cls(port, _field(doc, "pid", int, key), _text(doc, "host", key),
                   _text(doc, "device", key))


@dataclass(frozen=True)
class MasterAddress:
    """Where the leading master serves: gRPC for trainers, HTTP for the status page."""

    grpc: str
    http: str
    node: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    http_scheme: str = "http"  # "https" where the page needs the token (not on loopback)

    @property
    def status_url(self) -> str:
        return f"{self.http_scheme}://{self.http}/"

    def encode(self) -> bytes:
        return _encode({"grpc": self.grpc, "http": self.http, "node": self.node,
                        "pid": self.pid, "host": self.host, "http_scheme": self.http_scheme,
                        "status_url": self.status_url})

    @classmethod
    def decode(cls, raw: bytes, key: str = MASTER_ADDRESS) -> MasterAddress:
        doc = _object(raw, key)
        scheme = doc.get("http_scheme", "http")
        if scheme not in ("http", "https"):
            raise StoreValueError(f"store key {key!r}: field 'http_scheme' must be http or "
                                  f"https, got {scheme!r:.80}")
        return cls(_address(doc, "grpc", key), _address(doc, "http", key),
                   _text(doc, "node", key), _field(doc, "pid", int, key),
                   _text(doc, "host", key), scheme)


def read_master_address(store: Store) -> MasterAddress | None:
    """The leader's published address, or None while no master leads."""
    kv = store.get(MASTER_ADDRESS)
    return None if kv is None else MasterAddress.decode(kv.value)


@dataclass(frozen=True)
class PServerSlot:
    """The process serving one pserver slot."""

    address: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    def encode(self) -> bytes:
        return _encode({"address": self.address, "pid": self.pid, "host": self.host})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> PServerSlot:
        doc = _object(raw, key)
        return cls(_address(doc, "address", key), _field(doc, "pid", int, key),
                   _text(doc, "host", key))


MAX_PSERVERS_IN_LAYOUT = 1000


@dataclass(frozen=True)
class PServerLayout:
    """How many shards the job's tables are split into now, and how often that changed. Absent
    until the first resharding: the job then has the count it was started with, generation 0.
    Written only by a resharding's commit (:mod:`elasticps.pserver.reshard.split`)."""

    shards: int
    generation: int

    def encode(self) -> bytes:
        return _encode({"shards": self.shards, "generation": self.generation})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> PServerLayout:
        doc = _object(raw, key)
        shards, generation = _field(doc, "shards", int, key), _field(doc, "generation", int, key)
        if not 1 <= shards <= MAX_PSERVERS_IN_LAYOUT or generation < 1:
            raise StoreValueError(f"store key {key!r}: shards={shards} must be in [1, "
                                  f"{MAX_PSERVERS_IN_LAYOUT}] and generation={generation} >= 1")
        return cls(shards, generation)


def read_pserver_layout(store: Store) -> PServerLayout | None:
    """The job's pserver layout, None before its first resharding."""
    kv = store.get(PSERVER_LAYOUT)
    return None if kv is None else PServerLayout.decode(kv.value, PSERVER_LAYOUT)


@dataclass(frozen=True)
class TrainerRegistration:
    """A live trainer (``leaving=False``) or one handing its tasks back on the way out."""

    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    leaving: bool = False

    def encode(self) -> bytes:
        if self.leaving:
            return _encode({"leaving": True, "pid": self.pid, "host": self.host})
        return _encode({"pid": self.pid, "host": self.host})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> TrainerRegistration:
        doc = _object(raw, key)
        leaving = doc.get("leaving", False)
        if not isinstance(leaving, bool):
            raise StoreValueError(f"store key {key!r}: field 'leaving' must be bool, got "
                                  f"{leaving!r}")
        return cls(_field(doc, "pid", int, key), _text(doc, "host", key), leaving)


MAX_GROUP_MEMBERS = 10_000  # config.MAX_TRAINERS: a record naming more is not ours
GROUP_BACKENDS = ("gloo", "nccl")
_PREFIX = re.compile(r"^[0-9a-f]{16,64}\Z")


@dataclass(frozen=True)
class GroupRecord:
    """One generation of hybrid mode's dense group: the trainers in it, in rank order, and the
    rendezvous store (``host:port``, a ``torch.distributed.TCPStore``) where they meet under
    ``prefix``, a random hex string known only through this record."""

    generation: int
    members: tuple[str, ...]
    host: str
    port: int
    prefix: str
    backend: str = "gloo"  # the torch.distributed backend every member uses: gloo or nccl

    def rank_of(self, name: str) -> int | None:
        return self.members.index(name) if name in self.members else None

    def encode(self) -> bytes:
        return _encode({"generation": self.generation, "members": list(self.members),
                        "host": self.host, "port": self.port, "prefix": self.prefix,
                        "backend": self.backend})

    @classmethod
    def decode(cls, raw: bytes, key: str = HYBRID_GROUP) -> GroupRecord:
        doc = _object(raw, key)
        generation, port = _field(doc, "generation", int, key), _field(doc, "port", int, key)
        members = doc.get("members")
        if (not isinstance(members, list) or not 0 < len(members) <= MAX_GROUP_MEMBERS
                or not all(isinstance(m, str) and 0 < len(m) <= MAX_TEXT for m in members)
                or len(set(members)) != len(members)):
            raise StoreValueError(f"store key {key!r}: field 'members' must be a list of 1 to "
                                  f"{MAX_GROUP_MEMBERS} distinct names")
        prefix, backend = _text(doc, "prefix", key), _text(doc, "backend", key)
        if generation < 1 or not 0 < port < 65536 or not _PREFIX.match(prefix):
            raise StoreValueError(f"store key {key!r}: generation={generation} must be >= 1, "
                                  f"port={port} in [1, 65535] and the prefix hex")
        if backend not in GROUP_BACKENDS:
            raise StoreValueError(f"store key {key!r}: backend={backend!r:.40} is not one of "
                                  f"{', '.join(GROUP_BACKENDS)}")
        return cls(generation, tuple(members), _text(doc, "host", key), port, prefix, backend)


def read_group_record(store: Store) -> tuple[GroupRecord | None, int]:
    """Hybrid mode's current group generation and the record's mod_revision (0: none yet)."""
    kv = store.get(HYBRID_GROUP)
    return (None, 0) if kv is None else (GroupRecord.decode(kv.value), kv.mod_revision)


@dataclass(frozen=True)
class InitMarker:
    """Who took the table-initialisation lock, or who saw the tables initialised."""

    by: str
    what: str  # "lock", "initialised" or "restored"
    time: float = field(default_factory=time.time)

    def encode(self) -> bytes:
        return _encode({"by": self.by, "what": self.what, "time": self.time})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> InitMarker:
        doc = _object(raw, key)
        if "time" not in doc:
            raise StoreValueError(f"store key {key!r}: field 'time' must be a number")
        return cls(_text(doc, "by", key), _text(doc, "what", key), _finite(doc, "time", key))


@dataclass(frozen=True)
class TableDataset:
    """Where a table trained from memory was written as a dataset, and the fingerprint of the
    table (its values, schema and chunking) that every trainer's own table must match."""

    url: str
    fingerprint: str
    by: str

    def encode(self) -> bytes:
        return _encode({"url": self.url, "fingerprint": self.fingerprint, "by": self.by})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> TableDataset:
        doc = _object(raw, key)
        return cls(_text(doc, "url", key, limit=4096), _text(doc, "fingerprint", key),
                   _text(doc, "by", key))


@dataclass(frozen=True)
class TrainerProgress:
    """What a trainer has done so far; the launcher's progress line and the status page read it.

    ``pass_metrics`` maps a pass id (as a string) to the metrics of that pass's ``EndPass``
    (``cost``, ``auc``, ``test_auc``...); ``time`` is the wall-clock time of the record, so a
    reader can tell how long ago the trainer was last seen. ``stage`` says what the trainer does
    when it is not training (``writing data``, ``evaluating``, ``exporting``...): None while it
    trains or has said nothing.
    """

    pass_id: int = 0
    samples: int = 0
    batches: int = 0
    loss: float | None = None  # a moving average
    train_s: float = 0.0
    tasks: int = 0
    timers: Mapping[str, float] = field(default_factory=dict)  # seconds per step phase
    samples_per_s: float = 0.0  # over the last publishing interval
    time: float = 0.0  # unix seconds when published (0: an older record without it)
    pass_metrics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    stage: str | None = None  # what it does outside training; at most MAX_STAGE characters

    def encode(self) -> bytes:
        return _encode({"pass": self.pass_id, "samples": self.samples, "batches": self.batches,
                        "loss": self.loss, "train_s": self.train_s, "tasks": self.tasks,
                        "timers": dict(self.timers), "samples_per_s": self.samples_per_s,
                        "time": self.time,
                        "pass_metrics": {p: dict(m) for p, m in self.pass_metrics.items()},
                        "stage": self.stage})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> TrainerProgress:
        doc = _object(raw, key)
        timers = doc.get("timers") or {}
        if not isinstance(timers, dict) or len(timers) > 64:
            raise StoreValueError(f"store key {key!r}: field 'timers' must be an object of at "
                                  "most 64 timers")
        return cls(int(_finite(doc, "pass", key)), int(_finite(doc, "samples", key)),
                   int(_finite(doc, "batches", key)),
                   None if doc.get("loss") is None else _finite(doc, "loss", key),
                   _finite(doc, "train_s", key), int(_finite(doc, "tasks", key)),
                   {str(k)[:MAX_TEXT]: _finite(timers, k, key) for k in timers},
                   _finite(doc, "samples_per_s", key), _finite(doc, "time", key),
                   _pass_metrics(doc.get("pass_metrics") or {}, key),
                   None if doc.get("stage") is None else _text(doc, "stage", key, MAX_STAGE))


# Metrics of one pass, train and test: per-label metrics of up to 16 labels fit.
MAX_PASS_METRICS = 256


def _pass_metrics(value: Any, key: str) -> dict[str, dict[str, float]]:
    """``{pass: {metric: number}}``; a null metric (NaN when published) is left out."""
    if not isinstance(value, dict) or len(value) > 10_000 or not all(
            isinstance(m, dict) and len(m) <= MAX_PASS_METRICS for m in value.values()):
        raise StoreValueError(f"store key {key!r}: field 'pass_metrics' must map passes to "
                              f"objects of at most {MAX_PASS_METRICS} metrics")
    return {str(p)[:MAX_TEXT]: {str(k)[:MAX_TEXT]: float(v) for k, v in m.items()
                                if isinstance(v, int | float) and not isinstance(v, bool)
                                and math.isfinite(v)}
            for p, m in value.items()}


@dataclass(frozen=True)
class SealedPasses:
    """Every pass below ``below`` is sealed: reconciled with every shard's checkpoint."""

    below: int

    def encode(self) -> bytes:
        return _encode({"below": self.below})

    @classmethod
    def decode(cls, raw: bytes, key: str = SEALED_PASSES) -> SealedPasses:
        return cls(_field(_object(raw, key), "below", int, key))


def read_sealed_below(store: Store) -> int:
    """The first pass not sealed yet (0 when none is)."""
    kv = store.get(SEALED_PASSES)
    return 0 if kv is None else SealedPasses.decode(kv.value).below


def publish_progress(store: Store, trainer: str, progress: TrainerProgress) -> None:
    store.put(progress_key(trainer), progress.encode())


def read_progress(store: Store) -> dict[str, TrainerProgress]:
    """Every trainer's last progress, by trainer name; a malformed record is left out."""
    out: dict[str, TrainerProgress] = {}
    for kv in store.get_prefix(PROGRESS_PREFIX):
        try:
            out[kv.key.removeprefix(PROGRESS_PREFIX)] = TrainerProgress.decode(kv.value, kv.key)
        except StoreValueError:
            continue  # progress is informational: one bad record must not hide the others
    return out


def publish_result(store: Store, doc: Mapping[str, Any]) -> None:
    """Write the job's result document (the launcher copies it into ``summary.json``)."""
    store.put(JOB_RESULT, _encode(doc))


def publish_result_if_absent(store: Store, doc: Mapping[str, Any]) -> bool:
    """Write the job's result document only if there is none yet; False if there was one.

    The trainers' automatic result uses this, so it never replaces a script's own
    (:func:`publish_result` always writes) and only the first trainer to finish writes it,
    with one exception: an automatic result (``result_by``) whose trainer trained nothing in
    the last pass (no ``train_samples``: another trainer took every task of it) gives way to
    one whose trainer did, so that the job's training metrics do not depend on which trainer
    finished first.
    """
    encoded = _encode(doc)
    written, current = store.compare_and_set(JOB_RESULT, encoded, 0)
    while not written and current is not None and _trained(doc):
        there = _object(current.value, JOB_RESULT)
        if "result_by" not in there or _trained(there):
            return False  # a script's own, or an automatic one with training metrics
        written, current = store.compare_and_set(JOB_RESULT, encoded, current.mod_revision)
    return written


def _trained(doc: Mapping[str, Any]) -> bool:
    samples = doc.get("train_samples")
    return isinstance(samples, (int, float)) and samples > 0


def task_scores_prefix(partition: str) -> str:
    """The keys of one partition's task scores (a partition's name never holds ``//``)."""
    return f"{JOB_SCORES_PREFIX}{partition}//"


def publish_task_scores(store: Store, partition: str, task_id: int,
                        doc: Mapping[str, Any]) -> None:
    """Write a finished stream task's scores (a later run of the same task replaces them)."""
    store.put(f"{task_scores_prefix(partition)}{task_id:0{MASTER_TASK_ID_DIGITS}d}", _encode(doc))


def read_task_scores(store: Store, partition: str) -> dict[int, dict[str, Any]]:
    """One partition's task scores by task id (a value that does not parse raises
    StoreValueError naming its key)."""
    prefix = task_scores_prefix(partition)
    out: dict[int, dict[str, Any]] = {}
    for kv in store.get_prefix(prefix):
        tail = kv.key.rsplit("/", 1)[-1]
        if not tail.isdigit():
            raise StoreValueError(f"store key {kv.key!r}: not a task's scores")
        out[int(tail)] = _object(kv.value, kv.key)
    return out


def publish_freshness(store: Store, version: int, doc: Mapping[str, Any]) -> None:
    """Write what version ``version`` of the job's model directory first trained through."""
    store.put(f"{FRESHNESS_PREFIX}{version:012d}", _encode(doc))


def read_freshness(store: Store) -> list[dict[str, Any]]:
    """Every version's freshness record, oldest first (a value that does not parse raises
    StoreValueError naming its key)."""
    return [_object(kv.value, kv.key) for kv in sorted(store.get_prefix(FRESHNESS_PREFIX),
                                                       key=lambda kv: kv.key)]


def read_result(store: Store) -> dict[str, Any] | None:
    kv = store.get(JOB_RESULT)
    return None if kv is None else _object(kv.value, JOB_RESULT)


def encode_desired_trainers(count: int) -> bytes:
    return str(count).encode()


def encode_desired_pservers(count: int) -> bytes:
    return str(count).encode()


def decode_desired_pservers(raw: bytes) -> int:
    text = raw[:64].decode(errors="replace").strip()
    count = _whole(text, limit=4) if len(raw) <= 64 else None
    if count is None or count < 1:
        raise StoreValueError(f"store key {DESIRED_PSERVERS!r} holds {text[:40]!r}, not a "
                              "whole number of pservers >= 1 (at most 4 digits)")
    return count


def decode_desired_trainers(raw: bytes) -> int:
    text = raw[:64].decode(errors="replace").strip()
    count = _whole(text, limit=6) if len(raw) <= 64 else None
    if count is None:
        raise StoreValueError(f"store key {DESIRED_TRAINERS!r} holds {text[:40]!r}, not a "
                              "whole number of trainers (at most 6 digits)")
    return count


# -- the job's timeline, its status page and its metrics endpoints ---------------------------

EVENT_KINDS = ("failover", "restart", "recovery", "reconciled", "scale", "trainer",
               "task_failed", "pass", "job")


@dataclass(frozen=True)
class JobEvent:
    """One entry of the job's timeline. ``kind`` is one of :data:`EVENT_KINDS`; ``subject``
    names what it happened to (``pserver-0``, ``trainer-1``, ``task 7``...)."""

    kind: str
    subject: str
    message: str
    source: str = ""  # who recorded it (a master node, a pserver, the scale command)
    time: float = field(default_factory=time.time)

    def encode(self) -> bytes:
        # Cut to what decode accepts: a long failure reason must not make the event unreadable.
        return _encode({"time": self.time, "kind": self.kind,
                        "subject": self.subject[:MAX_TEXT], "message": self.message[:MAX_MESSAGE],
                        "source": self.source[:MAX_TEXT]})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> JobEvent:
        doc = _object(raw, key)
        kind = _field(doc, "kind", str, key)
        if kind not in EVENT_KINDS:
            raise StoreValueError(f"store key {key!r}: unknown event kind {kind!r}")
        return cls(kind, _text(doc, "subject", key), _text(doc, "message", key, MAX_MESSAGE),
                   _text(doc, "source", key), _finite(doc, "time", key))

    def as_dict(self) -> dict[str, Any]:
        return {"time": self.time, "kind": self.kind, "subject": self.subject,
                "message": self.message, "source": self.source}


def record_event(store: Store, event: JobEvent) -> None:
    """Append ``event`` to the timeline (keys sort by time; a random tag keeps them apart)."""
    stamp = int(event.time * 1e9)
    store.put(f"{EVENTS_PREFIX}{stamp:020d}-{os.urandom(3).hex()}", event.encode())


def read_events(store: Store, limit: int = 500) -> list[JobEvent]:
    """The newest ``limit`` events, oldest first; malformed records are left out."""
    out: list[JobEvent] = []
    for kv in store.get_prefix(EVENTS_PREFIX)[-limit:]:
        try:
            out.append(JobEvent.decode(kv.value, kv.key))
        except StoreValueError:
            continue  # the timeline is informational: one bad record must not hide the others
    return out


def trim_events(store: Store, keep: int) -> int:
    """Delete all but the newest ``keep`` events; returns how many were deleted."""
    keys = [kv.key for kv in store.get_prefix(EVENTS_PREFIX)]
    for key in keys[:-keep] if len(keys) > keep else []:
        store.delete(key)
    return max(0, len(keys) - keep)


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as null, at any depth (JSON has none: a diverged
    loss must not make the status page unservable)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def encode_history(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(json_safe(doc), sort_keys=True, allow_nan=False).encode()


def decode_history(raw: bytes, key: str = JOB_HISTORY) -> dict[str, Any]:
    """The status page's saved document: an object with ``series`` and ``events`` lists."""
    doc = _object(raw, key)
    for name in ("series", "events"):
        if not isinstance(doc.get(name), list):
            raise StoreValueError(f"store key {key!r}: field {name!r} must be a list")
    return doc


def read_history(store: Store) -> dict[str, Any] | None:
    kv = store.get(JOB_HISTORY)
    return None if kv is None else decode_history(kv.value)


@dataclass(frozen=True)
class MetricsEndpoint:
    """Where one process of the job serves its Prometheus metrics."""

    role: str
    name: str
    url: str  # http://host:port/metrics
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    @property
    def key(self) -> str:
        return metrics_key(self.role, self.name)

    def encode(self) -> bytes:
        return _encode({"role": self.role, "name": self.name, "url": self.url,
                        "pid": self.pid, "host": self.host})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> MetricsEndpoint:
        doc = _object(raw, key)
        url = _text(doc, "url", key, limit=2048)
        if not url.startswith(("http://", "https://")):
            raise StoreValueError(f"store key {key!r}: field 'url' must be an http(s) URL")
        return cls(_text(doc, "role", key), _text(doc, "name", key), url,
                   _field(doc, "pid", int, key), _text(doc, "host", key))


def read_metrics_endpoints(store: Store) -> list[MetricsEndpoint]:
    """Every published metrics endpoint, by key order; malformed records are left out."""
    out: list[MetricsEndpoint] = []
    for kv in store.get_prefix(METRICS_PREFIX):
        try:
            out.append(MetricsEndpoint.decode(kv.value, kv.key))
        except StoreValueError:
            continue
    return out
