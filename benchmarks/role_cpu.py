"""CPU seconds of each role of a local job (``elasticps run``), read from ``/proc`` while it runs.

:class:`JobCpuWatch` runs beside one ``elasticps run``: every ``period`` seconds it reads
``utime + stime`` of the launcher and of every process ``WORKDIR/processes.json`` names, and the
trainers' progress records from the job's store (samples trained so far, and when). From them:

- :meth:`JobCpuWatch.whole_run`: each role's CPU seconds over its whole life (start-up, table
  set-up, training, export, scoring), the last reading of each process summed by role. A
  process's last fraction of a period before it exits is missed, so the caller passes the job's
  exact total (the launcher's ``RUSAGE_CHILDREN``, which holds every reaped role) and what the
  readings miss shows as ``unread``;
- :meth:`JobCpuWatch.while_training`: each role's CPU seconds and the samples trained between
  the first and the last progress record published mid-training (the trainers publish about
  every 2 s; a run shorter than two records has no such window: None), each role's CPU
  interpolated at the records' times. That is the steady cost of a sample, without the job's
  fixed costs; :meth:`JobCpuWatch.samples_per_s_training` is the speed over the same window.
"""

from __future__ import annotations

import bisect
import threading
import time
from pathlib import Path
from typing import Any

from thread_cpu import process_cpu  # this directory's helper, found through the script's path

from elasticps.launch.local_job import LocalJob
from elasticps.launch.process_records import ProcessRecords
from elasticps.store import open_store
from elasticps.store.keys import read_progress


class JobCpuWatch:
    """Follows one local job's processes until :meth:`stop`."""

    def __init__(self, workdir: Path, launcher_pid: int, period: float = 0.2) -> None:
        self.workdir = workdir
        self.launcher_pid = launcher_pid
        self.period = period
        self.roles: dict[int, str] = {launcher_pid: "launcher"}
        self.last_cpu: dict[int, float] = {}
        self.series: list[tuple[float, dict[int, float]]] = []  # (unix time, cpu by pid)
        self.progress: dict[float, int] = {}  # record time -> samples of every trainer
        self._store: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-cpu-watch", daemon=True)

    def start(self) -> JobCpuWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._store is not None:
            self._store.close()

    def _run(self) -> None:
        next_roles = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_roles:  # the launcher rewrites the records about once a second
                records = ProcessRecords.read(self.workdir).processes
                self.roles.update({pid: r.role for pid, r in records.items()})
                next_roles = now + 1.0
            self._read_cpu()
            self._read_progress()
            self._stop.wait(self.period)
        self._read_cpu()

    def _read_cpu(self) -> None:
        reading: dict[int, float] = {}
        for pid in self.roles:
            cpu = process_cpu(pid)  # 0.0 once the process is gone: keep its last reading
            if cpu > 0.0:
                self.last_cpu[pid] = max(cpu, self.last_cpu.get(pid, 0.0))
            if pid in self.last_cpu:
                reading[pid] = self.last_cpu[pid]
        self.series.append((time.time(), reading))

    def _read_progress(self) -> None:
        try:
            if self._store is None:
                job = LocalJob.find(self.workdir)  # written when the launcher starts
                self._store = open_store(job.store_url, job.job_name)
            records = read_progress(self._store)
        except Exception:  # not there yet, or the job has ended: try again next period
            return
        trainers = [p for p in records.values() if p.time > 0]
        if trainers and not any(p.stage for p in trainers):
            self.progress[max(p.time for p in trainers)] = sum(p.samples for p in trainers)

    def whole_run(self, job_cpu_s: float) -> dict[str, float]:
        """CPU seconds by role over the job's life, ``job`` (``job_cpu_s``) and ``unread``."""
        by_role: dict[str, float] = {}
        for pid, cpu in self.last_cpu.items():
            role = self.roles[pid]
            by_role[role] = by_role.get(role, 0.0) + cpu
        by_role["unread"] = max(0.0, job_cpu_s - sum(by_role.values()))
        by_role["job"] = job_cpu_s
        return by_role

    def while_training(self, total_samples: int) -> tuple[int, dict[str, float]] | None:
        """(samples, CPU seconds by role and ``job``) between the first and the last progress
        record published while the trainers were training; None without two such records."""
        inside = sorted((t, s) for t, s in self.progress.items() if 0 < s < total_samples)
        if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
            return None
        (t0, s0), (t1, s1) = inside[0], inside[-1]
        spent: dict[str, float] = {}
        for pid, role in self.roles.items():
            used = self._cpu_at(pid, t1) - self._cpu_at(pid, t0)
            spent[role] = spent.get(role, 0.0) + used
        spent["job"] = sum(spent.values())
        return s1 - s0, spent

    def samples_per_s_training(self, total_samples: int) -> float | None:
        """Samples per second between the same two progress records as
        :meth:`while_training`: the training loop's steady speed, without the job's fixed
        costs (its start, the pass-end checkpoint the master waits for); None without two."""
        inside = sorted((t, s) for t, s in self.progress.items() if 0 < s < total_samples)
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        (t0, s0), (t1, s1) = inside[0], inside[-1]
        return (s1 - s0) / (t1 - t0)

    def _cpu_at(self, pid: int, when: float) -> float:
        """``pid``'s CPU seconds at ``when``, linear between the two readings around it."""
        times = [t for t, _ in self.series]
        i = bisect.bisect_left(times, when)
        if i == 0 or i == len(times):
            return self.series[min(i, len(times) - 1)][1].get(pid, 0.0)
        (ta, a), (tb, b) = self.series[i - 1], self.series[i]
        ca, cb = a.get(pid, 0.0), b.get(pid, 0.0)
        return ca + (cb - ca) * (when - ta) / (tb - ta) if tb > ta else cb
