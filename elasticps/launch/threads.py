"""How ``elasticps run`` splits this machine's cores between the roles it starts: a pure
decision (:func:`plan_threads`), carried out as each role's ``OMP_NUM_THREADS``.

A trainer's intra-op threads (torch reads ``OMP_NUM_THREADS`` when it starts) do the model's
compute; a pserver is one Python process whose work (the optimizer over numpy arrays, protobuf)
runs on about one core whatever its thread count, and whose numpy needs no thread pool. So
one core per pserver is kept for the pservers and the trainers share the rest, in every mode.
``geo`` and ``hybrid`` keep their core although their pservers are less busy: a geo trainer
with a second OpenMP thread on two cores measured 2x slower (an OpenMP team that wants every
core waits for any other thread that runs: the trainer's own RPCs, the store's watch, other
processes), and a hybrid trainer with two threads on two cores trained no faster than with
one (26.5k against 26.7k samples/s, ``benchmarks/ctr_throughput.py``) for half again the CPU
per sample (0.049 against 0.032 s per 1,000 samples).
Every pserver and master gets one thread.

The cores are the ones this process may run on (``sched_getaffinity``: ``taskset``, a cpuset),
not every core of the machine, as torch counts them for its own default: a job started on 8 of
16 cores plans for 8.

As torchrun does, an ``OMP_NUM_THREADS`` the launcher's own environment sets is what every
role gets; ``--trainer-threads`` and ``--pserver-threads`` set one role's count whatever the
environment says. The plan is made once, for the job's first counts: a trainer added later
(``elasticps scale``, ``--autoscale``) gets the same count as the first ones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from elasticps.errors import ConfigError

THREADS_VAR = "OMP_NUM_THREADS"

# Cores one pserver keeps out of the trainers' share, by training mode. A mode not listed
# (one newer than this table) is treated as the busiest: a core per pserver.
PSERVER_CORES: Mapping[str, int] = {"async": 1, "sync": 1, "geo": 1, "hybrid": 1}


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), where the OS says; else every
    core of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class ThreadPlan:
    """Intra-op threads per process of each role, and how they were chosen."""

    cpus: int
    trainer: int
    pserver: int
    master: int
    reason: str  # one phrase: where the counts came from

    def env(self, role: str) -> dict[str, str]:
        """The environment that carries the plan to one process of ``role``."""
        counts = {"trainer": self.trainer, "pserver": self.pserver, "master": self.master}
        return {THREADS_VAR: str(counts[role])}

    def line(self, job_name: str) -> str:
        """What the launcher prints at start."""
        return (f"elasticps run: job {job_name} on {self.cpus} cores: each trainer "
                f"{_threads(self.trainer)}, each pserver {_threads(self.pserver)} "
                f"({self.reason}; --trainer-threads N / --pserver-threads M set them)")

    def summary(self) -> dict[str, int]:
        return {"cpus": self.cpus, "trainer": self.trainer, "pserver": self.pserver}


def plan_threads(cpus: int, trainers: int, pservers: int, mode: str, *,
                 trainer_threads: int | None = None, pserver_threads: int | None = None,
                 env: Mapping[str, str] | None = None) -> ThreadPlan:
    """The threads of each role's processes on a machine of ``cpus`` cores."""
    for flag, value in (("--trainer-threads", trainer_threads),
                        ("--pserver-threads", pserver_threads)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag}={value} must be >= 1")
    from_env = _env_threads(env or {})
    if from_env is not None:
        trainer_default = pserver_default = master = from_env
        reason = f"{THREADS_VAR}={from_env} from the environment"
    else:
        kept = pservers * PSERVER_CORES.get(mode, 1)
        trainer_default = max(1, (cpus - kept) // trainers)
        pserver_default = master = 1
        reason = (f"{mode} mode: {kept} core(s) kept for {pservers} pserver(s), the other "
                  f"{max(0, cpus - kept)} shared by {trainers} trainer(s)" if kept else
                  f"{mode} mode: the pservers do little, {trainers} trainer(s) share every core")
    if trainer_threads is not None or pserver_threads is not None:
        reason += "; " + ", ".join(f"{flag} given" for flag, value in (
            ("--trainer-threads", trainer_threads), ("--pserver-threads", pserver_threads))
            if value is not None)
    return ThreadPlan(
        cpus=cpus,
        trainer=trainer_threads if trainer_threads is not None else trainer_default,
        pserver=pserver_threads if pserver_threads is not None else pserver_default,
        master=master, reason=reason)


def _env_threads(env: Mapping[str, str]) -> int | None:
    text = env.get(THREADS_VAR)
    if text is None:
        return None
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ConfigError(f"{THREADS_VAR}={text!r} in the environment must be a whole number "
                          f">= 1 (or unset it: the launcher then splits the cores itself)")
    return threads


def _threads(count: int) -> str:
    return f"{count} thread" + ("" if count == 1 else "s")
