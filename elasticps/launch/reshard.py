"""The local launcher's resharding: change a running job's number of pservers.

``elasticps scale --workdir W --pservers M`` writes ``launcher/desired_pservers``; the launcher
follows it with :class:`PServerResharder`, a small state machine stepped by its loop:

    IDLE --desired != current--> STOPPING --every old pserver exited, slots free--> (commit)
         --> STARTING --every new slot served--> IDLE

STOPPING sends SIGTERM to every pserver (each stops serving, then writes a final checkpoint;
SIGKILL after the grace: its newest checkpoint stands and the master's reconciliation hands out
what it lost). Trainers pause meanwhile: their calls wait for the pservers as for a restart.
The commit (:func:`elasticps.pserver.reshard.commit.commit_reshard`) re-splits the checkpoints
and publishes the new layout in one store transaction; then M pservers start, restore their new
checkpoints, and trainers route their waiting calls again under the new layout. A commit that
fails changes nothing, and the old pservers are started again. The pause (the first SIGTERM to
the last new slot served) is on the job's timeline.
"""

from __future__ import annotations

import enum
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from elasticps.errors import ElasticPSError
from elasticps.launch.process import RoleProcess
from elasticps.launch.process_records import log_name
from elasticps.launch.supervisor import JobState
from elasticps.store.keys import (
    DESIRED_PSERVERS,
    JobEvent,
    decode_desired_pservers,
    pserver_slot,
    read_pserver_layout,
    record_event,
)

if TYPE_CHECKING:
    from elasticps.launch.launcher import Launch
    from elasticps.store.api import Store

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    IDLE = "idle"
    STOPPING = "stopping"  # old pservers told to stop; waiting for them and their slots
    STARTING = "starting"  # new pservers started; waiting until every slot is served


class PServerResharder:
    """Follows ``launcher/desired_pservers`` (module docstring)."""

    def __init__(self, launch: Launch, store: Callable[[], Store], checkpoint_url: str,
                 poll_s: float = 0.5) -> None:
        self.launch = launch
        self._store = store  # opened on first use, as the trainer scaler's
        self.checkpoint_url = checkpoint_url
        self.poll_s = poll_s
        self.count = launch.opts.pservers
        self.phase = Phase.IDLE
        self.target = self.count
        self._next_poll = 0.0
        self._paused_at = 0.0
        self._kill_at = 0.0
        self._stopping: list[RoleProcess] = []
        self._template = next(s for s in launch.specs if s.role == "pserver")
        self._next_index = launch.opts.pservers

    @property
    def store(self) -> Store:
        return self._store()

    def step(self) -> None:
        supervisor = self.launch.supervisor
        if supervisor.state is not JobState.RUNNING:
            return
        now = time.monotonic()
        if self.phase is Phase.IDLE:
            if now >= self._next_poll:
                self._next_poll = now + self.poll_s
                self._maybe_begin(now)
        elif self.phase is Phase.STOPPING:
            self._finish_stopping(now)
        elif self.phase is Phase.STARTING:
            self._finish_starting(now)

    def _desired(self) -> int | None:
        try:
            kv = self.store.get(DESIRED_PSERVERS)
            return None if kv is None else decode_desired_pservers(kv.value)
        except ElasticPSError as exc:
            log.warning("Job %s: cannot read %s (%s).", self.launch.job_name,
                        DESIRED_PSERVERS, exc)
            return None

    def _maybe_begin(self, now: float) -> None:
        desired = self._desired()
        supervisor = self.launch.supervisor
        if desired is None or desired == self.count:
            return
        if any(p.spec.role == "trainer" and p.poll() == 0 for p in supervisor.procs.values()):
            return  # the job is finishing (a trainer saw ALL_DONE): no resharding now
        self.target, self._paused_at = desired, now
        self._say(f"resharding {self.count} -> {desired} pservers: stopping the pservers "
                  "(each writes a final checkpoint; trainers pause)")
        self._stopping = []
        for name in [n for n, p in supervisor.procs.items() if p.spec.role == "pserver"]:
            self._stopping.append(supervisor.procs[name])
            supervisor.retire(name)
        self._kill_at = now + supervisor.grace
        self.phase = Phase.STOPPING

    def _finish_stopping(self, now: float) -> None:
        alive = [p for p in self._stopping if p.running]
        if alive:
            if now >= self._kill_at:
                for proc in alive:
                    self._say(f"{proc.spec.name} (pid {proc.pid}) ignored SIGTERM; SIGKILL")
                    proc.signal(signal.SIGKILL)
                self._kill_at = float("inf")
            return
        if any(self.store.get(pserver_slot(i)) is not None for i in range(self.count)):
            return  # a killed pserver's slot frees when its lease expires
        from elasticps.pserver.reshard.commit import commit_reshard

        try:
            result = commit_reshard(self.store, self.checkpoint_url, self.launch.opts.pservers,
                                    self.target)
        except ElasticPSError as exc:
            # The store is the truth: a commit whose answer was lost may have happened.
            layout = self._layout()
            if layout is not None and layout != self.count:
                self._say(f"resharding {self.count} -> {self.target} pservers reported {exc}, "
                          f"but the job's layout is {layout} shards; starting {layout}")
                self.count = layout
            else:
                self._say(f"resharding {self.count} -> {self.target} pservers failed and "
                          f"changed nothing: {exc}; restarting the {self.count} pservers")
                self.target = self.count
        else:
            self._say(f"resharded {result.old_shards} -> {result.new_shards} pservers "
                      f"(generation {result.generation}, {result.rows} sparse rows; read "
                      f"{result.read_s:.2f}s, wrote {result.write_s:.2f}s); starting them")
            self.count = result.new_shards
        self._start_pservers()
        self.phase = Phase.STARTING

    def _layout(self) -> int | None:
        try:
            layout = read_pserver_layout(self.store)
        except ElasticPSError as exc:
            log.warning("Job %s: cannot read the pserver layout (%s).", self.launch.job_name, exc)
            return None
        return None if layout is None else layout.shards

    def _start_pservers(self) -> None:
        supervisor = self.launch.supervisor
        template = self._template
        for _ in range(self.count):
            env = {**template.env, "PADDLE_NUM_PSERVERS": str(self.count)}
            index = self._next_index
            self._next_index += 1
            log_path = (template.log_path.with_name(log_name("pserver", index))
                        if template.log_path is not None else None)
            supervisor.add(replace(template, index=index, env=env, log_path=log_path))

    def _finish_starting(self, now: float) -> None:
        if any(self.store.get(pserver_slot(i)) is None for i in range(self.count)):
            return
        pause = now - self._paused_at
        self._say(f"{self.count} pservers serve the job again; trainers resumed after a "
                  f"{pause:.1f}s pause")
        self.phase = Phase.IDLE

    def _say(self, message: str) -> None:
        self.launch.watch.say(message)
        try:
            record_event(self.store, JobEvent("scale", "pservers", message, "launcher"))
        except ElasticPSError as exc:
            log.warning("Job %s: could not record %r: %s", self.launch.job_name, message, exc)
