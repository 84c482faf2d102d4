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
                                     master (layout and format: elasticps/master/snapshot.py)
    pserver/slot/<i>                 PServerSlot {address, pid, host}, under the pserver's lease
    pserver/init/lock                InitMarker {by, what, time}: the trainer initialising the
                                     tables, under its lease
    pserver/init/done                InitMarker: the tables were initialised (or restored)
    pserver/checkpoint/<i>/<id>      a checkpoint manifest of slot i (pserver/checkpoint.py)
    trainer/<name>                   TrainerRegistration {pid, host} or {leaving: true}, under the
                                     trainer's lease; a DELETE means the trainer died
    job/progress/<trainer>           TrainerProgress {pass, samples, batches, loss, train_s, tasks,
                                     timers}, refreshed every few seconds
    job/sealed                       SealedPasses {below}: every pass below it is sealed (every
                                     shard's checkpoint held all its batches); written by the
                                     master with the pass end, read by a pserver that restarts
                                     with no checkpoint (it refuses late pushes of those passes)
    job/result                       the job's result document (any JSON object): a script's
                                     own (put), else the first finished trainer's metrics (only
                                     if absent: compare-and-set on a missing key)
    job/once/<name>/lock|done        run_once (store/once.py): owner name | the step's result
    launcher/desired_trainers        decimal integer: trainers the local launcher should run
"""

from __future__ import annotations

import json
import os
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
MASTER_STATE_PREFIX = "master/state/"
PSERVER_SLOT_PREFIX = "pserver/slot/"
PSERVER_INIT_PREFIX = "pserver/init/"
PSERVER_INIT_LOCK = "pserver/init/lock"
PSERVER_INIT_DONE = "pserver/init/done"
PSERVER_CHECKPOINT_PREFIX = "pserver/checkpoint/"
TRAINER_PREFIX = "trainer/"
PROGRESS_PREFIX = "job/progress/"
JOB_RESULT = "job/result"
SEALED_PASSES = "job/sealed"
ONCE_PREFIX = "job/once/"
DESIRED_TRAINERS = "launcher/desired_trainers"


def master_candidate(node: str) -> str:
    return f"{MASTER_CANDIDATE_PREFIX}{node}"


def pserver_slot(slot: int) -> str:
    return f"{PSERVER_SLOT_PREFIX}{slot}"


def slot_of(key: str) -> int | None:
    """The slot number of a ``pserver/slot/<i>`` key, or None for any other key."""
    if not key.startswith(PSERVER_SLOT_PREFIX):
        return None
    rest = key[len(PSERVER_SLOT_PREFIX):]
    return int(rest) if rest.isdigit() else None


def checkpoint_prefix(slot: int) -> str:
    return f"{PSERVER_CHECKPOINT_PREFIX}{slot}/"


def checkpoint_key(slot: int, checkpoint_id: str) -> str:
    return f"{checkpoint_prefix(slot)}{checkpoint_id}"


def trainer_key(name: str) -> str:
    return f"{TRAINER_PREFIX}{name}"


def trainer_of(key: str) -> str:
    """The trainer name of a ``trainer/<name>`` key."""
    return key.removeprefix(TRAINER_PREFIX)


def progress_key(trainer: str) -> str:
    return f"{PROGRESS_PREFIX}{trainer}"


def once_keys(name: str) -> tuple[str, str]:
    """(lock, done) keys of the one-time step ``name``."""
    return f"{ONCE_PREFIX}{name}/lock", f"{ONCE_PREFIX}{name}/done"


# -- value formats --------------------------------------------------------------------------


def _object(raw: bytes, key: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreValueError(f"store key {key!r} holds no JSON ({exc}): {raw[:80]!r}") from exc
    if not isinstance(doc, dict):
        raise StoreValueError(f"store key {key!r} holds {type(doc).__name__}, not a JSON object")
    return doc


def _field(doc: Mapping[str, Any], name: str, kind: type, key: str) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise StoreValueError(f"store key {key!r}: field {name!r} must be {kind.__name__}, got "
                              f"{value!r}")
    return value


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
        return cls(_field(doc, "pid", int, key), _field(doc, "host", str, key))


@dataclass(frozen=True)
class MasterAddress:
    """Where the leading master serves: gRPC for trainers, HTTP for the status page."""

    grpc: str
    http: str
    node: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    @property
    def status_url(self) -> str:
        return f"http://{self.http}/"

    def encode(self) -> bytes:
        return _encode({"grpc": self.grpc, "http": self.http, "node": self.node,
                        "pid": self.pid, "host": self.host, "status_url": self.status_url})

    @classmethod
    def decode(cls, raw: bytes, key: str = MASTER_ADDRESS) -> MasterAddress:
        doc = _object(raw, key)
        return cls(_field(doc, "grpc", str, key), _field(doc, "http", str, key),
                   _field(doc, "node", str, key), _field(doc, "pid", int, key),
                   _field(doc, "host", str, key))


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
        return cls(_field(doc, "address", str, key), _field(doc, "pid", int, key),
                   _field(doc, "host", str, key))


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
        return cls(_field(doc, "pid", int, key), _field(doc, "host", str, key), leaving)


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
        stamp = doc.get("time")
        if not isinstance(stamp, int | float) or isinstance(stamp, bool):
            raise StoreValueError(f"store key {key!r}: field 'time' must be a number")
        return cls(_field(doc, "by", str, key), _field(doc, "what", str, key), float(stamp))


@dataclass(frozen=True)
class TrainerProgress:
    """What a trainer has done so far; the launcher's progress line sums these."""

    pass_id: int = 0
    samples: int = 0
    batches: int = 0
    loss: float | None = None  # a moving average
    train_s: float = 0.0
    tasks: int = 0
    timers: Mapping[str, float] = field(default_factory=dict)  # seconds per step phase

    def encode(self) -> bytes:
        return _encode({"pass": self.pass_id, "samples": self.samples, "batches": self.batches,
                        "loss": self.loss, "train_s": self.train_s, "tasks": self.tasks,
                        "timers": dict(self.timers)})

    @classmethod
    def decode(cls, raw: bytes, key: str) -> TrainerProgress:
        doc = _object(raw, key)
        loss = doc.get("loss")
        timers = doc.get("timers") or {}
        if loss is not None and not isinstance(loss, int | float):
            raise StoreValueError(f"store key {key!r}: field 'loss' must be a number or null")
        if not isinstance(timers, dict):
            raise StoreValueError(f"store key {key!r}: field 'timers' must be an object")
        return cls(int(_number(doc, "pass", key)), int(_number(doc, "samples", key)),
                   int(_number(doc, "batches", key)), None if loss is None else float(loss),
                   float(_number(doc, "train_s", key)), int(_number(doc, "tasks", key)),
                   {str(k): float(v) for k, v in timers.items()})


def _number(doc: Mapping[str, Any], name: str, key: str) -> float:
    value = doc.get(name, 0)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise StoreValueError(f"store key {key!r}: field {name!r} must be a number, got {value!r}")
    return float(value)


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
    (:func:`publish_result` always writes) and only the first trainer to finish writes it.
    """
    written, _ = store.compare_and_set(JOB_RESULT, _encode(doc), 0)
    return written


def read_result(store: Store) -> dict[str, Any] | None:
    kv = store.get(JOB_RESULT)
    return None if kv is None else _object(kv.value, JOB_RESULT)


def encode_desired_trainers(count: int) -> bytes:
    return str(count).encode()


def decode_desired_trainers(raw: bytes) -> int:
    text = raw.decode(errors="replace").strip()
    if not text.isdigit():
        raise StoreValueError(f"store key {DESIRED_TRAINERS!r} holds {text[:40]!r}, not a "
                              "whole number of trainers")
    return int(text)
