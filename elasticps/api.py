"""``elasticps.dist_train``: train inside a job, or start the job when called outside one.

Inside a launched job (``PADDLE_ROLE=trainer`` and ``PADDLE_STORE`` set) it connects, trains and
returns a handle whose ``result`` holds the training stats. Outside one, with ``job.local`` (or no
cluster configured), it re-executes the current script under ``elasticps run`` (the way torchrun
does) and returns a handle on that launcher: ``status_url()``, ``wait()``, ``summary()``. With a
cluster job it submits it through :mod:`elasticps.cluster`.

``elasticps.publish_result(doc)`` makes a script's own document the job's result (the launcher
copies it into ``WORKDIR/summary.json``); without it the trainers publish the last pass's metrics
(``elasticps/trainer/result.py``).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticps.cluster.spec import Job, sparse_policies_env
from elasticps.config import Config, current
from elasticps.errors import ConfigError
from elasticps.store import open_store
from elasticps.store.keys import publish_result as put_result
from elasticps.store.keys import read_master_address
from elasticps.trainer.events import Event
from elasticps.trainer.step_worker import LoopStats
from elasticps.trainer.trainer import Trainer


@dataclass
class LocalJob:
    """The job spec fields the local launcher uses (``elasticps.cluster.spec.Job`` has them all)."""

    trainers: int = 1
    pservers: int = 1
    job_name: str | None = None
    local: bool = True
    mode: str = "async"  # async, sync or geo (elasticps run --mode)
    geo_steps: int | None = None


class TrainerHandle:
    """Returned inside a job: this trainer's part is done when dist_train returns."""

    in_job = True

    def __init__(self, trainer: Trainer, stats: LoopStats) -> None:
        self.trainer = trainer
        self.stats = stats

    def status_url(self) -> str | None:
        store = self.trainer.store
        address = read_master_address(store) if store is not None else None
        return address.status_url if address else None

    def wait(self) -> int:
        return 0


class LocalJobHandle:
    """A job started by ``elasticps run`` in a child process of this one."""

    in_job = False

    def __init__(self, argv: list[str], workdir: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.argv = argv
        self.workdir = workdir
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self._url: str | None = None
        self._url_ready = threading.Event()
        self._reader = threading.Thread(target=self._pump, name="elasticps-launcher-out",
                                        daemon=True)
        self._reader.start()
        atexit.register(self.wait)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("status: ") and self._url is None:
                self._url = line.removeprefix("status: ").strip()
                self._url_ready.set()
            sys.stdout.write(line)
            sys.stdout.flush()
        self._url_ready.set()

    def status_url(self, timeout: float = 120.0) -> str | None:
        """The master's status page, once the launcher printed it."""
        self._url_ready.wait(timeout)
        return self._url

    def wait(self) -> int:
        """Wait for the job; its launcher's exit code (0 = succeeded)."""
        try:
            code = self.proc.wait()
        except KeyboardInterrupt:
            self.proc.terminate()  # the launcher stops its children in order
            code = self.proc.wait()
        self._reader.join(timeout=5.0)
        return code

    def summary(self) -> dict[str, Any] | None:
        path = self.workdir / "summary.json"
        if not path.exists():
            return None
        doc = json.loads(path.read_text())
        return doc if isinstance(doc, dict) else None


def _launch_locally(job: Any, workdir: str | None) -> LocalJobHandle:
    script = sys.argv[0]
    if not script or not Path(script).is_file():
        raise ConfigError("dist_train outside a job re-runs the current script under "
                          f"`elasticps run`, but sys.argv[0]={script!r} is not a script file")
    target = Path(workdir or getattr(job, "workdir", None) or "elasticps-job").resolve()
    sizes = getattr(job, "plan", job)  # cluster Job: resolved counts live in its plan
    argv = [sys.executable, "-m", "elasticps", "run",
            "--trainers", str(getattr(sizes, "trainers", 1) or 1),
            "--pservers", str(getattr(sizes, "pservers", 1) or 1),
            "--workdir", str(target)]
    name = getattr(job, "job_name", None)
    if name:
        argv += ["--job-name", str(name)]
    argv += ["--mode", str(getattr(job, "mode", "async") or "async")]
    if getattr(job, "geo_steps", None):
        argv += ["--geo-steps", str(job.geo_steps)]
    argv += [script, *sys.argv[1:]]
    # A cluster Job's tables: reach the local trainers as they would a cluster's.
    policies = sparse_policies_env(job) if isinstance(job, Job) else ""
    return LocalJobHandle(argv, target,
                          {"PADDLE_SPARSE_POLICIES": policies} if policies else None)


def dist_train(
    trainer: Trainer,
    reader: Any,
    num_passes: int = 1,
    event_handler: Callable[[Event], None] | None = None,
    job: Any = None,
    *,
    workdir: str | None = None,
    config: Config | None = None,
    test_reader: Any = None,
) -> TrainerHandle | LocalJobHandle | Any:
    """Train (inside a job) or start the job (outside one); see the module docstring.

    ``test_reader`` (inside a job): a held-out dataset evaluated at every pass end; its metrics
    (by label kind) arrive in ``EndPass.metrics`` as ``test_auc``, ``test_logloss``..., and the
    last pass's become the job's result unless the script publishes its own."""
    config = config or current()
    if config.role == "trainer" and config.store is not None:
        if trainer.params is None:
            trainer.connect(config)
        stats = trainer.train(reader, num_passes, event_handler, test_reader=test_reader)
        return TrainerHandle(trainer, stats)
    if config.role is not None:
        raise ConfigError(f"dist_train runs in trainers only, not in PADDLE_ROLE={config.role}")
    if job is None or getattr(job, "local", True):
        return _launch_locally(job or LocalJob(), workdir)
    from elasticps.cluster.submit import submit

    return submit(job)


def _json_ready(value: Any, where: str) -> Any:
    """``value`` with NaN and infinities as null (JSON has none); other non-JSON values are a
    ConfigError naming where they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"result key {key!r} at {where} is not a string")
            out[key] = _json_ready(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_json_ready(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if value is None or isinstance(value, str | int | bool):
        return value
    if hasattr(value, "item") and callable(value.item):  # a numpy or torch scalar
        return _json_ready(value.item(), where)
    raise ConfigError(f"result value at {where} is a {type(value).__name__}, not a JSON value")


def publish_result(doc: Mapping[str, Any], *, config: Config | None = None) -> None:
    """Make ``doc`` (a JSON-like mapping) the job's result: ``elasticps run`` copies it into
    ``WORKDIR/summary.json`` when the job ends. It replaces any result published before (the
    trainers' automatic one included) and is never replaced by the automatic one. Call it from
    one trainer, e.g. the one :meth:`Trainer.request_save_model` chose. NaN becomes null."""
    config = config or current()
    if config.store is None:
        raise ConfigError("publish_result runs inside a job (PADDLE_STORE is not set)")
    if not isinstance(doc, Mapping):
        raise ConfigError(f"a job result is a mapping, not {type(doc).__name__}")
    ready = _json_ready(doc, "result")
    with open_store(config.store, config.job_name) as store:
        put_result(store, ready)
