"""``elasticps run``: one job on this machine, the way torchrun runs one on a node.

It checks WORKDIR first (no other user may own or write it, or what the job keeps in it:
:mod:`elasticps.launch.workdir`; a new one is created 0700), then creates the embedded store
``file://WORKDIR/store.db`` (unless ``--store etcd://...``), a fresh job token in
``WORKDIR/token`` (0600; the roles read it through ``PADDLE_JOB_TOKEN_FILE``, so it is in no
process's environment), a fresh job CA with one certificate per role (``WORKDIR/tls/<role>/``:
0600 files in 0700 directories; the CA key is never written; none with ``--insecure``), and starts
``elasticps master`` (plus ``--standby-masters`` hot standbys that wait in the election, started
once the job trains: :mod:`elasticps.launch.standby`),
M x ``elasticps pserver`` and N x ``elasticps trainer SCRIPT ARGS`` as child processes. Every
server binds its own port (``PADDLE_PORT=0``) and publishes it in the store; nobody hands ports
around. Logs go to ``WORKDIR/logs/<role>[-<i>].log`` (0600, in a 0700 directory). At the end
it writes ``WORKDIR/summary.json``. A role that stops on a configuration error (a busy
``PADDLE_HTTP_PORT``) fails the job at once, and ``elasticps run`` exits 2.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from elasticps.autoscale_policy import AutoscaleConfig
from elasticps.config import load_config
from elasticps.errors import ConfigError, ElasticPSError
from elasticps.launch import job_registry
from elasticps.launch.autoscaler import Autoscaler
from elasticps.launch.final_metrics import final_lines, headline_metric, passes_trained
from elasticps.launch.job_watch import LauncherWatch, ReportStream
from elasticps.launch.local_job import STATUS_FILE, LocalJob, failure_record, write_job_file
from elasticps.launch.process import RoleSpec
from elasticps.launch.process_records import RecordsWriter, log_name
from elasticps.launch.reshard import PServerResharder
from elasticps.launch.standby import STANDBY_BOUND_S, DeferredStandbys
from elasticps.launch.supervisor import JobState, Supervisor
from elasticps.launch.threads import ThreadPlan, plan_threads, usable_cores
from elasticps.launch.workdir import TOKEN_FILE, prepare_workdir, write_token
from elasticps.private_files import make_private_dir, replace_private
from elasticps.rpc.job_ca import write_job_identities
from elasticps.store.api import Store
from elasticps.store.keys import DESIRED_TRAINERS, decode_desired_trainers
from elasticps.telemetry.logfmt import set_context

log = logging.getLogger(__name__)

# `elasticps run`'s exit status when a role stopped on a configuration error (argparse's for
# a bad command line): the job failed for something to fix, not something that broke.
CONFIG_ERROR_EXIT = 2


@dataclass
class LaunchOptions:
    script: str
    script_args: list[str] = field(default_factory=list)
    trainers: int = 1
    pservers: int = 1
    store: str | None = None
    workdir: str | None = None
    job_name: str | None = None
    grace: float = 10.0
    max_restarts: int = 10
    # Extra master processes that block in the election: one takes over within the lease TTL
    # when the leader dies, instead of the launcher's restart (a fresh interpreter) doing it.
    standby_masters: int = 1
    log_format: str | None = None  # the roles' log lines: text or json (PADDLE_LOG_FORMAT)
    python: str = sys.executable
    # No TLS: every role is told PADDLE_INSECURE=true and warns; the token travels in clear.
    insecure: bool = False
    # Add and remove trainers by backlog, throughput and idle CPU (None: a fixed count).
    autoscale: AutoscaleConfig | None = None
    mode: str | None = None  # PADDLE_TRAINING_MODE of every role (None: the env's, or async)
    geo_steps: int | None = None  # PADDLE_GEO_STEPS (geo mode; None: the default)
    # Intra-op threads of each trainer / pserver process (None: launch/threads.py decides).
    trainer_threads: int | None = None
    pserver_threads: int | None = None
    # PADDLE_WARM_START: an export (or model directory) the tables start from when first made.
    warm_start: str | None = None
    # PADDLE_COMPUTE_DTYPE of the trainers (None: the environment's, or float32).
    compute_dtype: str | None = None


def default_job_name(script: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", Path(script).stem.lower()).strip("-")[:40] or "job"
    return f"{stem}-{secrets.token_hex(3)}"


def _validate(opts: LaunchOptions) -> None:
    if opts.trainers < 1:
        raise ConfigError(f"--trainers={opts.trainers} must be >= 1")
    if opts.pservers < 1:
        raise ConfigError(f"--pservers={opts.pservers} must be >= 1")
    if opts.autoscale is not None and not (
            opts.autoscale.min_trainers <= opts.trainers <= opts.autoscale.max_trainers):
        raise ConfigError(f"--trainers={opts.trainers} must be within --min-trainers="
                          f"{opts.autoscale.min_trainers} and --max-trainers="
                          f"{opts.autoscale.max_trainers}")
    if opts.standby_masters < 0:
        raise ConfigError(f"--standby-masters={opts.standby_masters} must be >= 0")
    if not Path(opts.script).is_file():
        raise ConfigError(f"script {opts.script!r} does not exist or is not a file")
    if opts.warm_start is not None and not Path(opts.warm_start).is_dir():
        raise ConfigError(f"--warm-start {opts.warm_start!r} is not a directory (an export or "
                          "a model directory)")
    if opts.store is not None and not opts.store.startswith(("etcd://", "file://")):
        raise ConfigError(f"--store={opts.store!r} must start with etcd:// or file://")


def build_specs(opts: LaunchOptions, workdir: Path, store_url: str, job_name: str,
                base_env: dict[str, str]) -> list[RoleSpec]:
    """The role processes of the job, with the environment contract filled in. The token is
    not in it: the roles read ``WORKDIR/token`` (``PADDLE_JOB_TOKEN_FILE``, written before they
    start), and a token of the launcher's own shell is not the job's."""
    base_env = {k: v for k, v in base_env.items()
                if k not in ("PADDLE_JOB_TOKEN", "PADDLE_JOB_TOKEN_FILE")}
    config = load_config(
        env=base_env, store=store_url, job_name=job_name,
        num_pservers=opts.pservers, trainer_count=opts.trainers,
        num_gradient_servers=opts.trainers, port=0, workdir=str(workdir),
        checkpoint_url=base_env.get("PADDLE_CHECKPOINT_URL") or str(workdir / "checkpoints"),
        **({"log_format": opts.log_format} if opts.log_format else {}),
        insecure=opts.insecure, **({"mode": opts.mode} if opts.mode else {}),
        **({"geo_steps": opts.geo_steps} if opts.geo_steps is not None else {}),
        **({"warm_start": str(Path(opts.warm_start).resolve())} if opts.warm_start else {}),
        **({"compute_dtype": opts.compute_dtype} if opts.compute_dtype else {}),
    )
    env = {**base_env, **config.to_env(), "PADDLE_JOB_TOKEN_FILE": str(workdir / TOKEN_FILE)}
    env.pop("PADDLE_TLS_DIR", None)  # each role gets its own identity below
    # Never in a child's environment, where the user's script would hand it on.
    env.pop("PADDLE_JOB_TOKEN", None)

    def role_env(role: str) -> dict[str, str]:
        tls = {} if opts.insecure else {"PADDLE_TLS_DIR": str(tls_dir(workdir, role))}
        return {**env, **tls, "PADDLE_ROLE": role}

    # Like torchrun: one machine shared by several processes must not run every process's
    # OpenMP pool at full width (spin-waiting threads on busy cores slow torch down 5-10x).
    threads = thread_plan(opts, config.mode, base_env)
    logs = workdir / "logs"
    cli = (opts.python, "-m", "elasticps", "-v")  # INFO logs into the role log files
    # Every master process campaigns; the first to win leads, the others are hot standbys.
    specs = [RoleSpec("master", i, (*cli, "master"),
                      {**role_env("master"), **threads.env("master")},
                      logs / log_name("master", i), restart=True)
             for i in range(1 + opts.standby_masters)]
    for i in range(opts.pservers):
        specs.append(RoleSpec("pserver", i, (*cli, "pserver"),
                              {**role_env("pserver"), **threads.env("pserver")},
                              logs / log_name("pserver", i), restart=True))
    for i in range(opts.trainers):
        specs.append(trainer_spec(opts, workdir,
                                  {**role_env("trainer"), **threads.env("trainer")}, i))
    return specs


def thread_plan(opts: LaunchOptions, mode: str, base_env: dict[str, str]) -> ThreadPlan:
    """How this job's processes split the machine's cores (launch/threads.py)."""
    return plan_threads(usable_cores(), opts.trainers, opts.pservers, mode,
                        trainer_threads=opts.trainer_threads,
                        pserver_threads=opts.pserver_threads, env=base_env)


def tls_dir(workdir: Path, role: str) -> Path:
    """Where ``elasticps run`` keeps ``role``'s TLS identity."""
    return workdir / "tls" / role


def trainer_spec(opts: LaunchOptions, workdir: Path, env: dict[str, str], index: int) -> RoleSpec:
    """Trainer ``index``; restarted when it dies (it rejoins as a new trainer), not when it
    exits 0 (it saw ALL_DONE)."""
    script = str(Path(opts.script).resolve())
    return RoleSpec(
        "trainer", index, (opts.python, "-m", "elasticps", "-v", "trainer", script,
                        *opts.script_args),
        {**env, "PADDLE_ROLE": "trainer", "PADDLE_TRAINER_ID": str(index),
         # a trainer added by scaling has an id beyond the initial count
         "PADDLE_TRAINER_COUNT": str(max(index + 1, int(env.get("PADDLE_TRAINER_COUNT", "1"))))},
        workdir / "logs" / log_name("trainer", index), restart=True)


class Launch:
    """A launched job: supervisor + watch + the loop that steps them."""

    def __init__(self, opts: LaunchOptions, *, out: TextIO | None = None,
                 err: TextIO | None = None) -> None:
        _validate(opts)
        self.opts = opts
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.workdir = Path(opts.workdir or f"elasticps-{int(time.time())}").resolve()
        self.job_name = opts.job_name or default_job_name(opts.script)
        load_config(job_name=self.job_name)  # validates the name (DNS-1123)
        self.store_url = opts.store or f"file://{self.workdir / 'store.db'}"
        self.token = secrets.token_hex(16)
        base_env = dict(os.environ)
        for key in [k for k in base_env if k in ("PADDLE_ROLE", "PADDLE_TRAINER_ID")]:
            del base_env[key]
        self.specs = build_specs(opts, self.workdir, self.store_url, self.job_name, base_env)
        self.threads = thread_plan(opts, self.specs[0].env["PADDLE_TRAINING_MODE"], base_env)
        self.trainer_env = {k: v for k, v in self.specs[-1].env.items()
                            if k not in ("PADDLE_TRAINER_ID",)}
        self.watch = LauncherWatch(self.store_url, self.job_name, out=self.out, err=self.err)
        # The standby masters start once the job trains (standby.py); the rest start at once.
        standbys = [s for s in self.specs if s.role == "master" and s.index > 0]
        self.supervisor = Supervisor([s for s in self.specs if s.name not in
                                      {standby.name for standby in standbys}],
                                     grace=opts.grace,
                                     max_restarts=opts.max_restarts,
                                     report=ReportStream(self.watch))  # type: ignore[arg-type]
        self.scaler = TrainerScaler(self)
        self.resharder = PServerResharder(
            self, self.scaler.store, self.specs[-1].env.get("PADDLE_CHECKPOINT_URL", ""))
        # which log holds which role (`elasticps logs pserver-0`: the process serving shard 0)
        self.records = RecordsWriter(self.workdir, self.scaler.store)
        self.standbys = DeferredStandbys(
            standbys, self.supervisor, self.scaler.store, job_name=self.job_name,
            bound_s=float(self.specs[0].env.get("PADDLE_LEASE_TTL", STANDBY_BOUND_S)))
        self.autoscaler = None if opts.autoscale is None else Autoscaler(
            opts.autoscale, self.watch.latest, self.scaler.store, self.watch.say)
        set_context(job=self.job_name)
        self._wake = threading.Event()
        self.started = 0.0

    def request_stop(self, reason: str) -> None:
        self.supervisor.stop(reason)
        self._wake.set()

    def run(self) -> int:
        prepare_workdir(self.workdir)  # before anything is written or started
        make_private_dir(self.workdir / "logs")
        write_token(self.workdir, self.token)
        print(f"elasticps run: job {self.job_name}, store {self.store_url}, "
              f"logs in {self.workdir / 'logs'}", file=self.err, flush=True)
        print(self.threads.line(self.job_name), file=self.err, flush=True)
        if self.opts.insecure:
            from elasticps.rpc.credentials import INSECURE_WARNING  # grpc: only for the warning

            print(f"elasticps run: WARNING: job {self.job_name} {INSECURE_WARNING}.",
                  file=self.err, flush=True)
        else:
            write_job_identities(self.workdir / "tls", self.job_name)
        previous = self._install_signals()
        self.started = time.monotonic()
        (self.workdir / STATUS_FILE).unlink(missing_ok=True)  # a previous job's, if any
        write_job_file(self.workdir, self.store_url, self.job_name)
        job_registry.register(self.workdir, self.job_name)  # for `elasticps list`
        try:
            self.supervisor.start()
            self.records.step(self.supervisor.procs.values())
            self.watch.start()
            while not self.supervisor.step().final:
                if self.autoscaler is not None and self.supervisor.state is JobState.RUNNING:
                    asked = self.scaler.desired  # None until someone wrote the key
                    self.autoscaler.step(self.opts.trainers if asked is None else asked)
                self.scaler.step()
                self.standbys.step()
                self.resharder.step()
                self.records.step(self.supervisor.procs.values())
                self._wake.wait(0.2)
                self._wake.clear()
        except BaseException:
            self.supervisor.kill_all()
            raise
        finally:
            self.scaler.close()
            self.watch.stop()
            self._restore_signals(previous)
        self.watch.join(timeout=5.0)
        return self._finish(time.monotonic() - self.started)

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def handler(signum: int, frame: FrameType | None) -> None:
            self.request_stop(f"received {signal.Signals(signum).name}")

        return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    def _finish(self, wall_s: float) -> int:
        state = self.supervisor.state
        self._save_page(state, wall_s)
        if state is JobState.SUCCEEDED:
            summary = self._summary(wall_s)
            for line in final_lines(summary):
                print(line, file=self.out, flush=True)
            print(f"elasticps run: job {self.job_name} succeeded in {wall_s:.1f}s; summary in "
                  f"{self.workdir / 'summary.json'}", file=self.err, flush=True)
            return 0
        if state is JobState.INTERRUPTED:
            print(f"elasticps run: job {self.job_name} stopped ({self.supervisor.failure}); "
                  "every child has exited", file=self.err, flush=True)
            return 130
        proc = self.supervisor.failed_proc
        print(f"elasticps run: job {self.job_name} failed: {self.supervisor.failure}",
              file=self.err, flush=True)
        if proc is not None and proc.spec.log_path is not None:
            print(f"--- last lines of {proc.spec.log_path} ---\n{proc.log_tail()}",
                  file=self.err, flush=True)
        if self.supervisor.config_error:
            print(f"elasticps run: job {self.job_name} stopped on a configuration error "
                  f"(above); fix it and run again", file=self.err, flush=True)
            return CONFIG_ERROR_EXIT
        return 1

    def _save_page(self, state: JobState, wall_s: float) -> None:
        """``WORKDIR/status.json``, which ``elasticps ui|status`` read once the job is over."""
        job = LocalJob(self.workdir, self.store_url, self.job_name)
        restarts = {p.spec.name: p.restarts for p in self.supervisor.procs.values()
                    if p.restarts}
        proc = self.supervisor.failed_proc
        failure = None if proc is None else failure_record(
            proc.spec.name, self.supervisor.failure, proc.spec.log_path, proc.log_tail(200))
        try:
            path = job.save_final(state.value, self.supervisor.failure,
                                  {"wall_s": round(wall_s, 3), "restarts": restarts},
                                  failure=failure)
        except (OSError, ValueError, ElasticPSError) as exc:
            log.warning("Job %s: could not save its status page: %s", self.job_name, exc)
            return
        if path is not None:
            print(f"elasticps run: the job's status page stays available: elasticps ui "
                  f"--workdir {self.workdir}", file=self.err, flush=True)

    def _summary(self, wall_s: float) -> dict[str, Any]:
        from elasticps.master.progressive import stream_scores  # numpy: only at the job's end
        from elasticps.store import open_store
        from elasticps.store.keys import read_freshness, read_progress, read_result
        from elasticps.trainer.stream_exports import freshness_summary

        summary: dict[str, Any] = {"job_name": self.job_name, "wall_s": round(wall_s, 3),
                                   "trainers": self.opts.trainers, "pservers": self.opts.pservers,
                                   "threads": self.threads.summary(),
                                   "restarts": {p.spec.name: p.restarts
                                                for p in self.supervisor.procs.values()
                                                if p.restarts}}
        try:
            with open_store(self.store_url, self.job_name) as store:
                result = read_result(store) or {}
                progress = read_progress(store)
                scores = stream_scores(store)
                freshness = read_freshness(store)
        except Exception as exc:  # the job succeeded; a missing summary detail is not fatal
            log.warning("Job %s: could not read results from the store: %s", self.job_name, exc)
            result, progress, scores, freshness = {}, {}, None, []
        if scores is not None:  # a stream: its partitions and their progressive validation
            summary["partitions"] = [s.partition for s in scores]
            summary["progressive_auc"] = [s.auc for s in scores]
            summary["progressive_rows"] = [s.rows for s in scores]
            # commit of each partition -> publication of the first version trained through it
            summary["freshness_s"] = freshness_summary(freshness)
        samples = sum(p.samples for p in progress.values())
        train_s = max((p.train_s for p in progress.values()), default=0.0)
        summary["samples"] = samples
        summary["trainer_timers"] = {name: dict(p.timers) for name, p in progress.items()}
        summary["samples_per_sec"] = round(samples / train_s, 1) if train_s > 0 else None
        if self.autoscaler is not None:
            summary["autoscale"] = [asdict(r) for r in self.autoscaler.records]
        summary.update(result)
        # A script's own result may not say how many passes it trained; the trainers did.
        summary.setdefault("passes", passes_trained(progress))
        summary.setdefault(headline_metric(summary) or "auc", None)
        summary.setdefault("best_auc", None)
        replace_private(self.workdir / "summary.json",
                        (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())
        return summary


class TrainerScaler:
    """Follows ``launcher/desired_trainers`` in the store (written by ``elasticps scale``):
    starts trainers when it grows, retires the newest ones (SIGTERM, graceful) when it shrinks."""

    def __init__(self, launch: Launch, poll_s: float = 0.5) -> None:
        self.launch = launch
        self.poll_s = poll_s
        self._store: Any = None
        self._next_poll = 0.0
        self._next_index = launch.opts.trainers
        self.desired: int | None = None

    def _active(self) -> list[str]:
        procs = self.launch.supervisor.procs
        return [name for name, p in procs.items()
                if p.spec.role == "trainer" and p.poll() != 0]

    def store(self) -> Store:
        """The job's store, opened on first use (the launcher creates it before the roles)."""
        if self._store is None:
            from elasticps.store import open_store

            self._store = open_store(self.launch.store_url, self.launch.job_name)
        return self._store

    def step(self) -> None:
        now = time.monotonic()
        if now < self._next_poll or self.launch.supervisor.state is not JobState.RUNNING:
            return
        self._next_poll = now + self.poll_s
        try:
            kv = self.store().get(DESIRED_TRAINERS)
            if kv is None:
                return
            desired = decode_desired_trainers(kv.value)
        except ElasticPSError as exc:
            log.debug("Job %s: cannot read %s (%s).", self.launch.job_name, DESIRED_TRAINERS, exc)
            return
        self.desired = desired
        active = self._active()
        launch = self.launch
        if any(launch.supervisor.procs[n].poll() == 0 for n in launch.supervisor.procs
               if launch.supervisor.procs[n].spec.role == "trainer"):
            return  # the job is finishing (a trainer saw ALL_DONE): no scaling now
        while len(active) < desired:
            spec = trainer_spec(launch.opts, launch.workdir, launch.trainer_env,
                                self._next_index)
            self._next_index += 1
            launch.supervisor.add(spec)
            active.append(spec.name)
        for name in sorted(active, key=lambda n: launch.supervisor.procs[n].spec.index,
                           reverse=True)[:max(0, len(active) - desired)]:
            launch.supervisor.retire(name)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def run_job(opts: LaunchOptions) -> int:
    return Launch(opts).run()
