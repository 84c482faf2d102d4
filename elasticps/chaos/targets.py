"""Which processes a chaos run may kill, decided from what the job itself published.

Every role process of a job announces itself in the store (:mod:`elasticps.store.keys`): the
leading master in ``master/address``, every master in the election under
``master/candidate/<node>``, each pserver under ``pserver/slot/<i>`` and each trainer under
``trainer/<name>``, all with the process's pid and host. :class:`PublishedProcesses` is those
records at one moment; the functions below are pure decisions over them, so they are tested
without a job:

- :func:`targets_of`: the processes of a role that may be signalled. Only a pid published for
  *this* host is ever a target (a pid means nothing on another machine, and a job on a shared
  store may span several), and never a pid already killed once: its record outlives it by up to
  the lease TTL, and by then the kernel may have given the number to an unrelated process.
- :func:`standby_ready`: a master other than the leader is in the election, so a leader kill
  measures a takeover rather than a cold restart.
- :func:`serving_again`: the role is back after a kill (a new leader, the slot claimed by a new
  process, a new trainer registered).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import TypeVar

from elasticps.errors import StoreValueError
from elasticps.store.api import KeyValue
from elasticps.store.keys import (
    MASTER_ADDRESS,
    MASTER_CANDIDATE_PREFIX,
    MasterAddress,
    ProcessInfo,
    PServerSlot,
    TrainerRegistration,
    slot_of,
    trainer_of,
)

log = logging.getLogger(__name__)

ROLES = ("master", "pserver", "trainer")
T = TypeVar("T")


@dataclass(frozen=True)
class PublishedProcesses:
    """The job's published processes at one moment (records that did not parse are left out)."""

    leader: MasterAddress | None = None
    candidates: Mapping[str, ProcessInfo] = field(default_factory=dict)  # by master node name
    slots: Mapping[int, PServerSlot] = field(default_factory=dict)  # by slot number
    trainers: Mapping[str, TrainerRegistration] = field(default_factory=dict)  # by name

    def active_trainers(self, spent: Set[int] = frozenset()) -> set[str]:
        """Trainers registered and not leaving, less those whose process we already killed."""
        return {name for name, reg in self.trainers.items()
                if not reg.leaving and reg.pid not in spent}


@dataclass(frozen=True)
class Target:
    """One process to SIGKILL. ``name`` is what must change for the role to serve again: the
    leader's node name, the pserver's slot number, or the trainer's registered name."""

    role: str
    pid: int
    name: str

    def describe(self) -> str:
        what = {"master": "leader", "pserver": "slot", "trainer": "trainer"}[self.role]
        return f"{self.role} pid {self.pid} ({what} {self.name})"


def decode_processes(leader: KeyValue | None, candidates: Iterable[KeyValue],
                     slots: Iterable[KeyValue], trainers: Iterable[KeyValue]
                     ) -> PublishedProcesses:
    """A :class:`PublishedProcesses` from raw store records. A record that does not parse is
    skipped (and logged): a foreign or corrupt value must never become a pid we signal."""
    address = _decoded(leader, lambda kv: MasterAddress.decode(kv.value, MASTER_ADDRESS))
    masters: dict[str, ProcessInfo] = {}
    for kv in candidates:
        info = _decoded(kv, lambda kv: ProcessInfo.decode(kv.value, kv.key))
        if info is not None:
            masters[kv.key.removeprefix(MASTER_CANDIDATE_PREFIX)] = info
    servers: dict[int, PServerSlot] = {}
    for kv in slots:
        slot = slot_of(kv.key)
        server = _decoded(kv, lambda kv: PServerSlot.decode(kv.value, kv.key))
        if slot is not None and server is not None:
            servers[slot] = server
    workers: dict[str, TrainerRegistration] = {}
    for kv in trainers:
        registration = _decoded(kv, lambda kv: TrainerRegistration.decode(kv.value, kv.key))
        if registration is not None:
            workers[trainer_of(kv.key)] = registration
    return PublishedProcesses(address, masters, servers, workers)


def _decoded(kv: KeyValue | None, decode: Callable[[KeyValue], T]) -> T | None:
    if kv is None:
        return None
    try:
        return decode(kv)
    except StoreValueError as exc:
        log.warning("Chaos skips a store record it cannot read: %s", exc)
        return None


def targets_of(procs: PublishedProcesses, role: str, host: str,
               spent: Set[int] = frozenset()) -> list[Target]:
    """The processes of ``role`` that may be killed now, in a stable order (by pid)."""
    published: list[tuple[Target, str]]  # each process with the host it runs on
    if role == "master":  # only the leader: killing a standby measures nothing
        leader = procs.leader
        published = [] if leader is None else [(Target(role, leader.pid, leader.node),
                                                 leader.host)]
    elif role == "pserver":
        published = [(Target(role, s.pid, str(i)), s.host) for i, s in procs.slots.items()]
    elif role == "trainer":  # a leaving trainer is already on its way out
        published = [(Target(role, r.pid, name), r.host) for name, r in procs.trainers.items()
                     if not r.leaving]
    else:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    return sorted((t for t, on in published if on == host and t.pid not in spent),
                  key=lambda t: t.pid)


def standby_ready(procs: PublishedProcesses, spent: Set[int] = frozenset()) -> bool:
    """A master other than the leader is in the election (and is not one we killed: a dead
    candidate's record lingers until its lease expires)."""
    if procs.leader is None:
        return False
    return any(node != procs.leader.node and info.pid not in spent
               for node, info in procs.candidates.items())


def serving_again(target: Target, before: PublishedProcesses, now: PublishedProcesses
                  ) -> bool:
    """The killed process's role is served again (the master's status page answering is
    checked by the caller: that is I/O)."""
    if target.role == "master":
        return now.leader is not None and now.leader.node != target.name
    if target.role == "pserver":
        server = now.slots.get(int(target.name))
        return server is not None and server.pid != target.pid
    # A restarted trainer registers under a new name (the name carries the pid).
    return bool(now.active_trainers() - before.active_trainers())
