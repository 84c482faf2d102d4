"""The local launcher's supervisor: a small state machine stepped by a loop (or by a test).

States::

    RUNNING --every trainer exited 0----------------> STOPPING --all exited--> SUCCEEDED
    RUNNING --a trainer failed / restarts exhausted-> STOPPING --all exited--> FAILED
    RUNNING --stop() (Ctrl-C, SIGTERM)--------------> STOPPING --all exited--> INTERRUPTED

While RUNNING, a master or pserver that exits is restarted (as Kubernetes restarts a pod), with
a short backoff, at most ``max_restarts`` times per process. The backoff grows with consecutive
quick exits only: a process that ran for ``stable_after`` seconds before it exited is restarted
at once (a master killed every minute must not wait 10 s each time, as it would if the backoff
grew with its lifetime restart count). A restartable trainer is restarted
only when a signal killed it (0 = it saw ALL_DONE; any other code is an error in the script,
which fails the job with that trainer's log, as torchrun does by default). Trainers can be
added (:meth:`Supervisor.add`) and retired (:meth:`Supervisor.retire`: SIGTERM, a graceful
leave; its exit no longer counts). A child of any role that exits with
:data:`~elasticps.errors.CONFIG_EXIT_CODE` (it stopped on a configuration error: a busy port, a
missing variable) fails the job at once, restarts or not: a restart would repeat it.
STOPPING sends SIGTERM to every child's process group and SIGKILL to those still alive
after ``grace`` seconds.

:func:`decide` is pure (observations in, actions out); :meth:`Supervisor.step` observes the
children, asks :func:`decide`, and carries the actions out.
"""

from __future__ import annotations

import enum
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from elasticps.errors import CONFIG_EXIT_CODE
from elasticps.launch.process import RoleProcess, RoleSpec, describe_exit

log = logging.getLogger(__name__)


class JobState(enum.Enum):
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    @property
    def final(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED)


@dataclass(frozen=True)
class Observation:
    """What one child looks like now."""

    name: str
    role: str
    restartable: bool
    exit_code: int | None  # None while running
    restarts: int
    restart_due: bool  # its backoff has passed


@dataclass
class Decision:
    restart: list[str] = field(default_factory=list)
    fail: str | None = None  # why the job failed
    failed: str | None = None  # the child whose exit failed it
    config_error: bool = False  # it failed on a configuration error (fix it, do not retry)
    succeed: bool = False


def decide(observations: list[Observation], max_restarts: int) -> Decision:
    """What to do about the children, given what they look like (pure)."""
    decision = Decision()
    trainers = [o for o in observations if o.role == "trainer"]
    for obs in observations:
        if obs.exit_code is None:
            continue
        if obs.exit_code == CONFIG_EXIT_CODE:
            decision.fail = (f"{obs.name} stopped on a configuration error (exit code "
                             f"{obs.exit_code}); a restart would repeat it")
            decision.failed = obs.name
            decision.config_error = True
            return decision
        if obs.restartable and _should_restart(obs):
            if obs.restarts >= max_restarts:
                decision.fail = (f"{obs.name} exited ({describe_exit(obs.exit_code)}) and was "
                                 f"already restarted {obs.restarts} times")
                decision.failed = obs.name
                return decision
            if obs.restart_due:
                decision.restart.append(obs.name)
        elif obs.exit_code != 0:
            decision.fail = f"{obs.name} failed with {describe_exit(obs.exit_code)}"
            decision.failed = obs.name
            return decision
    if trainers and all(o.exit_code == 0 for o in trainers):
        decision.succeed = True
    return decision


def _should_restart(obs: Observation) -> bool:
    """Servers are restarted whatever their exit. A trainer is restarted only when something
    killed it (a signal: SIGKILL, the OOM killer); one that exited 0 is done, and one that exited
    with an error code hit an error in its script, which a restart would only repeat."""
    if obs.role != "trainer":
        return True
    return obs.exit_code is not None and obs.exit_code < 0


def restart_backoff(restarts: int) -> float:
    """Seconds to wait before a restart after ``restarts`` consecutive quick exits:
    0, 0.5, 1, 2, 4, ... 10."""
    return 0.0 if restarts == 0 else min(10.0, 0.5 * 2 ** (restarts - 1))


class Supervisor:
    """Starts the children, restarts what should be restarted, and stops everything at the end."""

    def __init__(
        self,
        specs: list[RoleSpec],
        *,
        grace: float = 10.0,
        max_restarts: int = 10,
        report: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        stable_after: float = 10.0,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"role names must be unique, got {names}")
        self.procs: dict[str, RoleProcess] = {spec.name: RoleProcess(spec) for spec in specs}
        self.grace = grace
        self.max_restarts = max_restarts
        self.report = report
        self.clock = clock
        self.stable_after = stable_after
        self._started_at: dict[str, float] = {}
        # consecutive quick exits per child: the backoff level of its next restart
        self._quick_exits: dict[str, int] = {}
        self.state = JobState.RUNNING
        self.failure: str | None = None
        self.failed_proc: RoleProcess | None = None
        self.config_error = False  # the job failed on a child's configuration error
        self._exited_at: dict[str, float] = {}
        self.retired: dict[str, RoleProcess] = {}
        self._stop_deadline: float | None = None
        self._final_state = JobState.SUCCEEDED

    def _say(self, message: str) -> None:
        log.info(message)
        if self.report is not None:
            print(f"elasticps run: {message}", file=self.report, flush=True)

    def start(self) -> None:
        for name, proc in self.procs.items():
            proc.start()
            self._started_at[name] = self.clock()

    def add(self, spec: RoleSpec, *, announce: bool = True) -> RoleProcess:
        """Start one more child (scaling up, a deferred standby); ``announce`` says so on the
        report stream."""
        if spec.name in self.procs or spec.name in self.retired:
            raise ValueError(f"a child named {spec.name} already exists")
        proc = RoleProcess(spec)
        self.procs[spec.name] = proc
        proc.start()
        self._started_at[spec.name] = self.clock()
        if announce:
            self._say(f"started {spec.name} (pid {proc.pid})")
        else:
            log.info("started %s (pid %d)", spec.name, proc.pid)
        return proc

    def retire(self, name: str) -> None:
        """Ask a child to leave (scaling down): SIGTERM, and its exit no longer counts."""
        proc = self.procs.pop(name)
        self._exited_at.pop(name, None)
        self.retired[name] = proc
        proc.signal(signal.SIGTERM)
        self._say(f"asked {name} (pid {proc.pid}) to leave")

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items() if p.pid is not None}

    def observe(self) -> list[Observation]:
        now = self.clock()
        observations = []
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                self._exited_at.setdefault(name, now)
            else:
                self._exited_at.pop(name, None)
            due = (code is not None
                   and now - self._exited_at[name] >= restart_backoff(self._backoff_level(name)))
            observations.append(Observation(name, proc.spec.role, proc.spec.restart, code,
                                            proc.restarts, due))
        return observations

    def _backoff_level(self, name: str) -> int:
        """Consecutive quick exits of ``name`` so far, 0 when its last run was stable."""
        ran = self._exited_at.get(name, self.clock()) - self._started_at.get(name, 0.0)
        return 0 if ran >= self.stable_after else self._quick_exits.get(name, 0)

    def step(self) -> JobState:
        """One iteration: look at the children and act. Returns the state after it."""
        if self.state is JobState.RUNNING:
            decision = decide(self.observe(), self.max_restarts)
            if decision.fail is not None:
                self.failure = decision.fail
                self.failed_proc = self.procs.get(decision.failed or "")
                self.config_error = decision.config_error
                self._begin_stop(JobState.FAILED)
            elif decision.succeed:
                self._begin_stop(JobState.SUCCEEDED)
            else:
                for name in decision.restart:
                    self._restart(self.procs[name])
        if self.state is JobState.STOPPING:
            self._step_stopping()
        return self.state

    def _restart(self, proc: RoleProcess) -> None:
        code = proc.poll()
        name = proc.spec.name
        proc.restarts += 1
        self._quick_exits[name] = self._backoff_level(name) + 1
        self._exited_at.pop(name, None)
        old_pid = proc.pid
        proc.start()
        self._started_at[name] = self.clock()
        self._say(f"{proc.spec.name} (pid {old_pid}) exited with {describe_exit(code or 0)}; "
                  f"restarted it as pid {proc.pid} (restart {proc.restarts})")

    def stop(self, reason: str = "stopped") -> None:
        """Stop the job (Ctrl-C): every child gets SIGTERM, then SIGKILL after the grace."""
        if self.state is JobState.RUNNING:
            self.failure = reason
            self._begin_stop(JobState.INTERRUPTED)

    def _begin_stop(self, final: JobState) -> None:
        self._final_state = final
        self.state = JobState.STOPPING
        self._stop_deadline = self.clock() + self.grace
        # Trainers first so none of them sees its master or pservers vanish mid-push.
        for proc in sorted(self.procs.values(), key=lambda p: p.spec.role != "trainer"):
            proc.signal(signal.SIGTERM)

    def _step_stopping(self) -> None:
        alive = [p for p in [*self.procs.values(), *self.retired.values()] if p.running]
        if not alive:
            self.state = self._final_state
            return
        if self._stop_deadline is not None and self.clock() >= self._stop_deadline:
            for proc in alive:
                self._say(f"{proc.spec.name} (pid {proc.pid}) ignored SIGTERM for "
                          f"{self.grace:.0f}s; sending SIGKILL")
                proc.signal(signal.SIGKILL)
            self._stop_deadline = None

    def kill_all(self) -> None:
        """Last resort (the launcher itself is dying): SIGKILL every child's group."""
        for proc in [*self.procs.values(), *self.retired.values()]:
            proc.signal(signal.SIGKILL)
