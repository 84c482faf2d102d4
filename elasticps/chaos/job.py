"""The user's job under ``elasticps run``: started, watched, stopped, and its result collected.

The launcher is started through this interpreter (``python -m elasticps run``), so it works the
same from a repository checkout or an installed wheel, in whatever directory the user is: the
script and its arguments are passed on as given, relative paths and all, like ``elasticps run``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from elasticps.chaos.options import AUTOSCALE_FLAGS, ChaosOptions
from elasticps.chaos.report import JobRun
from elasticps.errors import ConfigError
from elasticps.launch.scale import job_location

Say = Callable[[str], None]

# How often job.json is looked for while the launcher starts.
POLL_S = 0.1
# After SIGINT the launcher stops its children (SIGTERM, then SIGKILL after its --grace of 10 s).
STOP_WAIT_S = 60.0


def job_env(opts: ChaosOptions) -> dict[str, str]:
    env = {**os.environ, "PADDLE_LEASE_TTL": str(opts.lease_ttl),
           "PADDLE_CHECKPOINT_INTERVAL": str(opts.checkpoint_interval)}
    if opts.checkpoint_deltas:
        env["PADDLE_CHECKPOINT_DELTAS"] = str(opts.checkpoint_deltas)
    # Each run keeps its checkpoints in its own workdir: a checkpoint URL from the environment
    # would let the run under faults restore the fault-free run's tables.
    for name in ("PADDLE_ROLE", "PADDLE_CHECKPOINT_URL",
                 *(() if opts.checkpoint_deltas else ("PADDLE_CHECKPOINT_DELTAS",))):
        env.pop(name, None)
    return env


def launch_command(opts: ChaosOptions, workdir: Path, store: str | None = None) -> list[str]:
    """``elasticps run`` of the user's script, through this interpreter's installed package
    (on ``store``, else the launcher's embedded one)."""
    return [sys.executable, "-m", "elasticps", "run", "--trainers", str(opts.trainers),
            "--pservers", str(opts.pservers), "--workdir", str(workdir),
            *(["--store", store] if store else []),
            *(["--mode", opts.mode] if opts.mode != "async" else []),
            *(["--autoscale", "--min-trainers", "1", "--max-trainers", str(opts.trainers + 1),
               *AUTOSCALE_FLAGS] if opts.autoscale else []),
            # faults are the point: the launcher must never give up restarting a role
            "--max-restarts", "1000", str(opts.script), *opts.script_args]


class LaunchedJob:
    """The user's job under ``elasticps run`` in ``workdir``, its output in ``output``. Leaving
    the ``with`` block stops a launcher still running (SIGINT: it stops every child)."""

    def __init__(self, opts: ChaosOptions, workdir: Path, output: Path,
                 store: str | None = None) -> None:
        self.opts = opts
        self.workdir = workdir
        self.output = output
        self.store = store
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None
        self.started = 0.0

    def __enter__(self) -> LaunchedJob:
        shutil.rmtree(self.workdir, ignore_errors=True)  # a fresh store, data and checkpoints
        self.workdir.mkdir(parents=True)
        self._out = open(self.output, "wb")  # closed in __exit__
        self.started = time.monotonic()
        self.proc = subprocess.Popen(launch_command(self.opts, self.workdir, self.store),
                                     env=job_env(self.opts), stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.stop()
        finally:
            if self._out is not None:
                self._out.close()

    def stop(self) -> None:
        """SIGINT the launcher if it still runs (it stops every child); SIGKILL it if it has
        not exited ``STOP_WAIT_S`` later."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()  # the launcher we started, by its pid
            proc.wait()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the job ends first."""
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # the usual case
                self.proc.wait(timeout=seconds)

    def wait_for_location(self, deadline: float) -> tuple[str, str] | None:
        """(store URL, job name) from the launcher's ``job.json``, or None if the launcher
        wrote none by ``deadline`` (or exited first)."""
        while True:
            try:
                return job_location(str(self.workdir), None, None)
            except ConfigError:  # not written yet
                if time.monotonic() >= deadline or not self.running:
                    return None
            time.sleep(POLL_S)

    def finish(self, timeout: float, say: Say, why: str = "it ran past --job-timeout"
               ) -> JobRun:
        """Wait for the job to end (stopping it after ``timeout``, saying ``why``) and collect
        its run."""
        assert self.proc is not None, "finish() inside the with block"
        try:
            code = self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            say(f"chaos: stopping the job: {why} (output in {self.output})")
            self.stop()
            code = self.proc.returncode
        return JobRun(code, time.monotonic() - self.started, self.workdir, self.output,
                      _summary(self.workdir))


def _summary(workdir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((workdir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}  # a failed job writes none
    return doc if isinstance(doc, dict) else {}
