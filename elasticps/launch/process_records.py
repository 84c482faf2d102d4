"""Which log file holds which role of a local job: ``WORKDIR/processes.json``.

The launcher names a role's log file by the order it started the processes
(``pserver-1.log`` is the second pserver process it started), but a person asks for a role:
``pserver-0`` is whichever process serves shard 0 (the first to claim a slot takes slot 0,
whatever its start order), ``master`` is whichever master leads the election. The launcher
records both halves of the mapping, and ``elasticps logs`` reads them::

    {"processes": {"<pid>": {"role": "pserver", "index": 1, "log": "pserver-1.log",
                             "serves": "pserver-0"}},
     "serving": {"master": <pid>, "pserver-0": <pid>, "pserver-1": <pid>}}

``processes`` holds every process the launcher started (a restart adds its new pid, with the
same log); ``serves`` is what that process was last seen serving. ``serving`` maps a role name
to the pid last seen serving it, read from the store (``master/address`` and
``pserver/slot/<i>``, which carry the holder's pid) about once a second while the job runs.
A name keeps its last holder once the store forgets it (the job ended): that is the process
whose log a person wants after the end.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticps.errors import ElasticPSError
from elasticps.launch.process import RoleProcess
from elasticps.private_files import replace_private
from elasticps.store.api import Store
from elasticps.store.keys import PSERVER_SLOT_PREFIX, PServerSlot, read_master_address, slot_of

log = logging.getLogger(__name__)

RECORDS_FILE = "processes.json"


def log_name(role: str, index: int) -> str:
    """The launcher's log file of the ``index``-th process of ``role`` it started."""
    return "master.log" if role == "master" and index == 0 else f"{role}-{index}.log"


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    role: str
    index: int
    log: str  # its file's name in WORKDIR/logs
    serves: str | None = None  # "master" or "pserver-K", as last seen


@dataclass(frozen=True)
class ProcessRecords:
    """What the records file says (empty for a job whose launcher wrote none)."""

    processes: dict[int, ProcessRecord]
    serving: dict[str, int]

    @classmethod
    def read(cls, workdir: Path) -> ProcessRecords:
        try:
            doc = json.loads((workdir / RECORDS_FILE).read_text())
            processes = {int(pid): ProcessRecord(int(pid), str(p["role"]), int(p["index"]),
                                                 Path(str(p["log"])).name, p.get("serves"))
                         for pid, p in doc["processes"].items()}
            serving = {str(name): int(pid) for name, pid in doc["serving"].items()}
        except FileNotFoundError:
            return cls({}, {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("%s is unreadable (%s); roles are found by file name only.",
                        workdir / RECORDS_FILE, exc)
            return cls({}, {})
        return cls(processes, serving)

    def log_of(self, name: str) -> str | None:
        """The log file of the process last seen serving ``name``."""
        pid = self.serving.get(name)
        record = self.processes.get(pid) if pid is not None else None
        return record.log if record is not None else None

    def serves_by_log(self) -> dict[str, str]:
        """Log file -> what its newest process that served something served."""
        out: dict[str, str] = {}
        for record in sorted(self.processes.values(), key=lambda r: r.pid):
            if record.serves:
                out[record.log] = record.serves
        return out


def serving_pids(store: Store, host: str | None = None) -> dict[str, int]:
    """Role name -> pid of the process on this ``host`` that serves it now, from the store."""
    host = host or socket.gethostname()
    serving: dict[str, int] = {}
    leader = read_master_address(store)
    if leader is not None and leader.host == host:
        serving["master"] = leader.pid
    for kv in store.get_prefix(PSERVER_SLOT_PREFIX):
        slot = slot_of(kv.key)
        if slot is None:
            continue
        holder = PServerSlot.decode(kv.value, kv.key)
        if holder.host == host:
            serving[f"pserver-{slot}"] = holder.pid
    return serving


class RecordsWriter:
    """The launcher's side: stepped by its loop, it notes new pids at every step and who serves
    what every ``poll_s`` seconds, and rewrites the file (atomically) when either changed."""

    def __init__(self, workdir: Path, store: Callable[[], Store], *,
                 poll_s: float = 1.0) -> None:
        self.path = workdir / RECORDS_FILE
        self._store = store  # the job's store, opened on first use (the launcher's)
        self.poll_s = poll_s
        self._next_poll = 0.0
        self.processes: dict[int, dict[str, Any]] = {}
        self.serving: dict[str, int] = {}

    def step(self, procs: Iterable[RoleProcess]) -> None:
        changed = self._note_processes(procs)
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + self.poll_s
            changed = self._note_serving() or changed
        if changed:
            self._write()

    def _note_processes(self, procs: Iterable[RoleProcess]) -> bool:
        changed = False
        for proc in procs:
            pid, spec = proc.pid, proc.spec
            if pid is None or pid in self.processes or spec.log_path is None:
                continue
            self.processes[pid] = {"role": spec.role, "index": spec.index,
                                   "log": spec.log_path.name}
            changed = True
        return changed

    def _note_serving(self) -> bool:
        try:
            seen = serving_pids(self._store())
        except ElasticPSError as exc:
            log.debug("Cannot read who serves the job's roles now: %s", exc)
            return False
        changed = False
        for name, pid in seen.items():
            if self.serving.get(name) != pid:
                self.serving[name] = pid
                changed = True
            record = self.processes.get(pid)
            if record is not None and record.get("serves") != name:
                record["serves"] = name
                changed = True
        return changed

    def _write(self) -> None:
        doc = {"processes": {str(pid): rec for pid, rec in self.processes.items()},
               "serving": self.serving}
        try:
            replace_private(self.path, (json.dumps(doc, indent=1, sort_keys=True)
                                        + "\n").encode())
        except OSError as exc:  # the job runs on; `elasticps logs` falls back to file names
            log.warning("Cannot write %s: %s", self.path, exc)
