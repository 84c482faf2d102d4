"""The chaos harness: run the CTR demo under the local launcher while SIGKILLing its processes.

One invocation runs the job twice with the same seed and arguments: fault-free first (the
baseline AUC), then under chaos. The chaos loop waits until training is under way, then
repeatedly picks a role with a seeded RNG (master, pserver, trainer; optionally a scale step),
picks one live process of that role among the launcher's children, SIGKILLs it, and measures

A master kill always hits the leader (the launcher keeps a hot standby that takes over), and
waits first until the standby is campaigning, so every master kill measures a takeover.

- **serving again**: master — a new leader published ``master/address``; pserver — the slot was
  claimed by a new process; trainer — a new trainer (the restarted process) registered;
- **throughput back**: the master's finished-task count moved past its value at the kill.

It waits for both (or a timeout) before the next kill, so recoveries are measured one at a time.
The job is sized from K so that K kills fit before it ends: ``rows`` starts at
``ROWS_PER_KILL * K`` (at least 120,000); when the fault-free run trained for less than
``TRAIN_S_PER_KILL * K`` seconds, the rows are scaled up to that and the fault-free run is
repeated at the new size (the AUCs compare equal jobs). If the chaos job still ends first, the
report says so (``kills_short``) and ``elasticps chaos`` exits non-zero.
At the end it reads the outcome (launcher exit code), the AUC (``summary.json``) and the
exactly-once accounting (:mod:`elasticps.chaos.accounting`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticps.chaos.accounting import job_accounting
from elasticps.launch.monitor import fetch_status
from elasticps.launch.scale import JOB_FILE, set_desired_trainers
from elasticps.store import Store, open_store
from elasticps.store.keys import (
    PSERVER_SLOT_PREFIX,
    TRAINER_PREFIX,
    PServerSlot,
    TrainerRegistration,
    read_master_address,
)

ROLES = ("master", "pserver", "trainer")
# Rows of training data per planned kill: one kill cycle (gap + recovery) is ~5 s here and the
# demo trains ~2,500 rows/s under chaos on a loaded 2-core machine, so twice that margin.
ROWS_PER_KILL = 12_000
MIN_ROWS = 120_000
# Fault-free training seconds per planned kill: one kill cycle (gap + recovery) takes ~5 s of
# wall time, during part of which training is paused; 4.5 s of work per kill leaves a margin.
TRAIN_S_PER_KILL = 4.5
REPO = Path(__file__).resolve().parents[2]


@dataclass
class ChaosOptions:
    kills: int = 20
    seed: int = 1
    workdir: Path = Path("chaos-run")
    trainers: int = 2
    pservers: int = 2
    rows: int | None = None  # None: sized from kills (see job_rows)
    passes: int = 3
    scale: bool = True  # also scale trainers up and down between kills
    extra_args: list[str] = field(default_factory=list)  # passed to examples/ctr/train.py
    lease_ttl: int = 2
    checkpoint_interval: float = 3.0
    recovery_timeout: float = 60.0
    gap: tuple[float, float] = (0.3, 1.5)  # seconds between a recovery and the next kill
    skip_baseline: bool = False
    job_timeout: float = 1800.0


@dataclass
class Kill:
    role: str
    pid: int
    at: float
    serving_s: float | None = None
    throughput_s: float | None = None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _role_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as handle:
            if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
    except OSError:
        return None
    for i, arg in enumerate(argv[:-1]):
        if arg == b"elasticps":
            # the first word after `elasticps` that is not an option (`-v`) is the command
            command = next((a.decode() for a in argv[i + 1:] if not a.startswith(b"-")), None)
            return command if command in ROLES else None
    return None


def live_roles(launcher_pid: int) -> dict[str, list[int]]:
    """The launcher's role children by role (each leads its own session: direct children)."""
    roles: dict[str, list[int]] = {r: [] for r in ROLES}
    for child in _children(launcher_pid):
        role = _role_of(child)
        if role is not None:
            roles[role].append(child)
    return roles


def job_rows(opts: ChaosOptions) -> int:
    """Training rows: as given, else enough for ``opts.kills`` kill cycles before the end."""
    return opts.rows if opts.rows is not None else max(MIN_ROWS, ROWS_PER_KILL * opts.kills)


def leader_pid(node: str | None, pids: list[int]) -> int | None:
    """The master process among ``pids`` whose node name (``master-<host>-<pid>``) leads."""
    if node is None:
        return None
    return next((pid for pid in pids if node.endswith(f"-{pid}")), None)


def launch_cmd(opts: ChaosOptions, workdir: Path) -> list[str]:
    return [sys.executable, "-m", "elasticps", "run", "--trainers", str(opts.trainers),
            "--pservers", str(opts.pservers), "--workdir", str(workdir), "--max-restarts", "1000",
            str(REPO / "examples" / "ctr" / "train.py"), "--rows", str(job_rows(opts)),
            "--passes", str(opts.passes), "--seed", str(opts.seed), *opts.extra_args]


def job_env(opts: ChaosOptions) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_LEASE_TTL": str(opts.lease_ttl),
           # frequent checkpoints: a restarted pserver loses seconds of pushes, not a pass
           "PADDLE_CHECKPOINT_INTERVAL": str(opts.checkpoint_interval)}
    env.pop("PADDLE_ROLE", None)
    return env


def run_fault_free(opts: ChaosOptions) -> dict[str, Any]:
    workdir = opts.workdir / "fault-free"
    shutil.rmtree(workdir, ignore_errors=True)  # a fresh store, data and checkpoints
    started = time.monotonic()
    with open(opts.workdir / "fault-free.out", "wb") as out:
        code = subprocess.run(launch_cmd(opts, workdir), env=job_env(opts), stdout=out,
                              stderr=subprocess.STDOUT, timeout=opts.job_timeout,
                              check=False).returncode
    summary = _summary(workdir)
    samples, rate = summary.get("samples"), summary.get("samples_per_sec")
    train_s = float(samples) / float(rate) if samples and rate else None
    return {"exit_code": code, "auc": summary.get("auc"), "wall_s": time.monotonic() - started,
            "train_s": train_s, "rows": job_rows(opts)}


def plan_rows(opts: ChaosOptions, train_s: float | None) -> int | None:
    """Rows that make the fault-free job train ``TRAIN_S_PER_KILL * kills`` seconds, or None
    when the current size already does (or nothing is known)."""
    if opts.rows is not None or not train_s or opts.kills == 0:
        return None
    needed = TRAIN_S_PER_KILL * opts.kills
    if train_s >= needed:
        return None
    return int(-(-job_rows(opts) * needed / train_s // 10_000) * 10_000)  # round up


def _summary(workdir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((workdir / "summary.json").read_text()))
    except (OSError, ValueError):
        return {}


class ChaosRun:
    def __init__(self, opts: ChaosOptions) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.workdir = opts.workdir / "chaos"
        self.kills: list[Kill] = []
        self.scales: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.store: Store | None = None
        self._job = ""

    # -- observations -----------------------------------------------------------------------

    def _status(self) -> dict[str, Any] | None:
        assert self.store is not None
        try:
            address = read_master_address(self.store)
        except Exception:  # the store may be busy; treat as "unknown now"
            return None
        if address is None:
            return None
        return fetch_status(address.http, timeout=1.0)

    def _progress(self) -> int | None:
        status = self._status()
        if not status or status.get("counts") is None:
            return None
        return int(status.get("tasks_finished_total", 0)) + int(status.get("recoveries_total", 0))

    def _finished(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def _master_node(self) -> str | None:
        assert self.store is not None
        try:
            address = read_master_address(self.store)
        except Exception:
            return None
        return None if address is None else address.node

    def _slots(self) -> dict[str, int]:
        assert self.store is not None
        try:
            return {kv.key: PServerSlot.decode(kv.value, kv.key).pid
                    for kv in self.store.get_prefix(PSERVER_SLOT_PREFIX)}
        except Exception:
            return {}

    def _trainers(self) -> set[str]:
        assert self.store is not None
        try:
            return {kv.key for kv in self.store.get_prefix(TRAINER_PREFIX)
                    if not TrainerRegistration.decode(kv.value, kv.key).leaving}
        except Exception:
            return set()

    # -- the loop ---------------------------------------------------------------------------

    def _wait(self, predicate: Any, timeout: float) -> float | None:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if predicate():
                return time.monotonic() - start
            if self._finished():
                return None
            time.sleep(0.05)  # polling interval of an observer, not synchronisation
        return None

    def _standby_ready(self, leader: int, pids: list[int]) -> bool:
        """Some master process other than the leader is campaigning (per its log)."""
        standbys = [pid for pid in pids if pid != leader]
        if not standbys:
            return False
        text = ""
        for path in (self.workdir / "logs").glob("master*.log"):
            try:
                text += path.read_text(errors="replace")[-200_000:]
            except OSError:
                continue
        return any(f"-{pid} of job {self._job} campaigns" in text for pid in standbys)

    def _pick(self, role: str, pids: list[int]) -> int | None:
        """The process to kill: the leader for the master role (once a standby waits)."""
        if role != "master":
            return self.rng.choice(sorted(pids))
        leader = leader_pid(self._master_node(), pids)
        if leader is None:
            return None
        self._wait(lambda: self._standby_ready(leader, live_roles(self._launcher_pid())["master"]),
                   30.0)
        return leader if leader in live_roles(self._launcher_pid())["master"] else None

    def _launcher_pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _kill_one(self, role: str, pids: list[int]) -> None:
        picked = self._pick(role, pids)
        if picked is None:
            return
        pid = picked
        before_master = self._master_node()
        before_slots = self._slots()
        before_trainers = self._trainers()
        before_progress = self._progress() or 0
        at = time.monotonic()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        kill = Kill(role, pid, time.time())
        self.kills.append(kill)
        timeout = self.opts.recovery_timeout
        if role == "master":
            def serving() -> bool:
                node = self._master_node()
                return node is not None and node != before_master and self._status() is not None
        elif role == "pserver":
            slot = next((k for k, v in before_slots.items() if v == pid), None)

            def serving() -> bool:
                now = self._slots()
                return slot is None or (slot in now and now[slot] != pid)
        else:
            def serving() -> bool:  # the restarted trainer registered (a new name)
                return bool(self._trainers() - before_trainers)
        waited = self._wait(serving, timeout)
        kill.serving_s = None if waited is None else time.monotonic() - at
        waited = self._wait(lambda: (self._progress() or 0) > before_progress, timeout)
        kill.throughput_s = None if waited is None else time.monotonic() - at
        print(f"chaos: kill {len(self.kills)}/{self.opts.kills}: {role} pid {pid}; serving "
              f"again after {_fmt(kill.serving_s)}, throughput back after "
              f"{_fmt(kill.throughput_s)}", flush=True)

    def _scale(self) -> None:
        store_url, job = _job(self.workdir)
        target = self.rng.choice([max(1, self.opts.trainers - 1), self.opts.trainers + 1,
                                  self.opts.trainers])
        set_desired_trainers(store_url, job, target)
        self.scales.append({"at": time.time(), "trainers": target})
        print(f"chaos: scaled trainers to {target}", flush=True)
        # Let the step finish before the next kill: a trainer that is leaving is not replaced,
        # so killing it would measure nothing but the recovery timeout.
        self._wait(lambda: len(live_roles(self._launcher_pid())["trainer"]) == target,
                   self.opts.recovery_timeout)

    def run(self) -> dict[str, Any]:
        opts = self.opts
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(opts.workdir / "chaos.out", "wb") as out:
            self.proc = subprocess.Popen(launch_cmd(opts, self.workdir), env=job_env(opts),
                                         stdout=out, stderr=subprocess.STDOUT)
            try:
                self._wait(lambda: (self.workdir / JOB_FILE).exists(), 120)
                store_url, self._job = _job(self.workdir)
                self.store = open_store(store_url, self._job)
                # Training is under way once a task finished.
                self._wait(lambda: (self._progress() or 0) > 0, 600)
                while (len(self.kills) < opts.kills and not self._finished()
                       and not (self._status() or {}).get("done")):
                    time.sleep(self.rng.uniform(*opts.gap))  # a random gap between faults
                    roles = live_roles(self.proc.pid)
                    choices = [r for r in ROLES if roles[r]]
                    if opts.scale and self.rng.random() < 0.15:
                        self._scale()
                        continue
                    if not choices:
                        continue
                    role = self.rng.choice(choices)
                    self._kill_one(role, roles[role])
                code = self.proc.wait(timeout=opts.job_timeout)
            finally:
                if self.proc.poll() is None:
                    self.proc.send_signal(signal.SIGINT)
                    self.proc.wait(timeout=120)
        accounting = job_accounting(self.store, str(self.workdir / "checkpoints"),
                                    opts.pservers) if self.store else {}
        if self.store is not None:
            self.store.close()
        summary = _summary(self.workdir)
        return {"exit_code": code, "auc": summary.get("auc"), "summary": summary,
                "accounting": accounting, "wall_s": time.monotonic() - started}


def _job(workdir: Path) -> tuple[str, str]:
    doc = json.loads((workdir / JOB_FILE).read_text())
    return str(doc["store"]), str(doc["job_name"])


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _stats(values: list[float | None]) -> dict[str, float | int | None]:
    done = [v for v in values if v is not None]
    return {"n": len(values), "recovered": len(done),
            "median_s": round(statistics.median(done), 3) if done else None,
            "max_s": round(max(done), 3) if done else None}


def run_chaos(opts: ChaosOptions) -> dict[str, Any]:
    opts.workdir.mkdir(parents=True, exist_ok=True)
    baseline = None if opts.skip_baseline else run_fault_free(opts)
    rows = plan_rows(opts, baseline["train_s"] if baseline else None)
    if baseline is not None and rows is not None:
        print(f"chaos: the fault-free job trained {baseline['train_s']:.1f}s; {opts.kills} kills "
              f"need ~{TRAIN_S_PER_KILL * opts.kills:.0f}s: resizing it to {rows} rows and "
              "running the fault-free job again", flush=True)
        opts = dataclasses.replace(opts, rows=rows)
        baseline = run_fault_free(opts)
    chaos = ChaosRun(opts)
    result = chaos.run()
    accounting = result["accounting"]
    kills = {role: sum(1 for k in chaos.kills if k.role == role) for role in ROLES}
    auc, auc_ff = result["auc"], baseline["auc"] if baseline else None
    short = max(0, opts.kills - len(chaos.kills))
    return {
        "kills": kills,
        "kills_total": len(chaos.kills),
        "kills_planned": opts.kills,
        "kills_short": short,
        "kills_short_reason": None if not short else (
            f"the job ended after {len(chaos.kills)} of {opts.kills} kills; give it more work "
            f"(--rows, now {job_rows(opts)}, or --passes, now {opts.passes})"),
        "rows": job_rows(opts),
        "outcome": "succeeded" if result["exit_code"] == 0 else "failed",
        "auc": auc,
        "auc_fault_free": auc_ff,
        "auc_delta": None if auc is None or auc_ff is None else round(auc - auc_ff, 5),
        "duplicates": accounting.get("duplicates"),
        "missing": accounting.get("missing"),
        "expected_batches": accounting.get("expected_batches"),
        "recovery": {role: {"serving": _stats([k.serving_s for k in chaos.kills
                                               if k.role == role]),
                            "throughput": _stats([k.throughput_s for k in chaos.kills
                                                  if k.role == role])}
                     for role in ROLES},
        "scales": chaos.scales,
        "kill_log": [vars(k) for k in chaos.kills],
        "accounting": accounting,
        "wall_s": {"chaos": round(result["wall_s"], 1),
                   "fault_free": round(baseline["wall_s"], 1) if baseline else None},
        "restarts": result["summary"].get("restarts"),
        "seed": opts.seed,
    }
