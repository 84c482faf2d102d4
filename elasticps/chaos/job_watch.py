"""Chaos's watch of a running job: its store records and its master's status API.

Nothing here looks at the machine's process table or at log files: the job says where its
processes are (``master/address``, ``master/candidate/*``, ``pserver/slot/*``, ``trainer/*``)
and how far training got (the leading master's ``/api/status``). Both sources are read while
processes die, so a read that fails is an answer ("unknown now", ``None``), not an error.
"""

from __future__ import annotations

import logging
from typing import Any

from elasticps.chaos.targets import PublishedProcesses, decode_processes
from elasticps.errors import StoreError
from elasticps.master.status_read import fetch_status
from elasticps.store.api import Store
from elasticps.store.keys import (
    MASTER_ADDRESS,
    MASTER_CANDIDATE_PREFIX,
    PSERVER_CHECKPOINT_PREFIX,
    PSERVER_SLOT_PREFIX,
    TRAINER_PREFIX,
    read_progress,
    read_pserver_layout,
)

log = logging.getLogger(__name__)


def progress_of(status: dict[str, Any] | None) -> int | None:
    """Work the master has seen finished: tasks finished plus recovery dispatches sent (a
    recovery round finishes no task until its re-run batches are done, yet is progress)."""
    if not status or status.get("counts") is None:
        return None  # no master, or one still waiting for its dataset
    return int(status.get("tasks_finished_total", 0)) + int(status.get("recoveries_total", 0))


def progressed(before: dict[str, int], now: dict[str, int] | None) -> bool:
    """Some mark grew (a trainer not seen before counts from 0): marks of processes that died
    may vanish, so no total is compared."""
    return any(value > before.get(key, 0) for key, value in (now or {}).items())


class ChaosWatch:
    """Reads one job's published processes and its master's status."""

    def __init__(self, store: Store, *, status_timeout: float = 1.0) -> None:
        self.store = store
        self.status_timeout = status_timeout

    def processes(self) -> PublishedProcesses | None:
        """The job's processes now, or None while the store cannot be read."""
        try:
            leader = self.store.get(MASTER_ADDRESS)
            candidates = self.store.get_prefix(MASTER_CANDIDATE_PREFIX)
            slots = self.store.get_prefix(PSERVER_SLOT_PREFIX)
            trainers = self.store.get_prefix(TRAINER_PREFIX)
        except StoreError as exc:
            log.debug("Chaos cannot read the job's store now: %s", exc)
            return None
        return decode_processes(leader, candidates, slots, trainers)

    def status(self, procs: PublishedProcesses | None = None) -> dict[str, Any] | None:
        """The leading master's ``/api/status``, or None while no master answers."""
        procs = procs if procs is not None else self.processes()
        if procs is None or procs.leader is None:
            return None
        return fetch_status(procs.leader.http, timeout=self.status_timeout)

    def progress(self) -> int | None:
        return progress_of(self.status())

    def progress_marks(self) -> dict[str, int] | None:
        """Progress at a finer grain than tasks, for liveness: the master's (finished tasks
        plus recovery dispatches) and each trainer's batches trained (``trainer/progress/*``,
        published every 2 s while it trains). None while neither can be read. Training
        progressed since ``before`` when any mark grew (see :func:`progressed`)."""
        marks: dict[str, int] = {}
        master = self.progress()
        if master is not None:
            marks["master"] = master
        try:
            for name, record in read_progress(self.store).items():
                marks[f"trainer {name}"] = record.batches
        except StoreError as exc:
            log.debug("Chaos cannot read the job's store now: %s", exc)
        return marks or None

    def layout(self) -> int | None:
        """The number of pserver shards of a resharded job (None: never resharded, or the
        store cannot be read now)."""
        try:
            layout = read_pserver_layout(self.store)
        except StoreError as exc:
            log.debug("Chaos cannot read the job's store now: %s", exc)
            return None
        return None if layout is None else layout.shards

    def checkpoints(self) -> set[str] | None:
        """The published checkpoints' keys (``pserver/checkpoint/<slot>/<id>``), or None
        while the store cannot be read."""
        try:
            return {kv.key for kv in self.store.get_prefix(PSERVER_CHECKPOINT_PREFIX)}
        except StoreError as exc:
            log.debug("Chaos cannot read the job's store now: %s", exc)
            return None
