"""``elasticps.dist_train``, the seed's one call, is a facade over two functions.

* Inside a launched job (``PADDLE_ROLE=trainer`` and ``PADDLE_STORE`` set) it trains: it
  connects, calls :meth:`Trainer.train` and returns a :class:`TrainerHandle` (``stats``).
* Outside one it launches the job with :func:`elasticps.launch_job`: a local job (the
  default, ``Job(backend="local")``) re-runs the current script with its arguments under
  ``elasticps run`` (the way torchrun does); a cluster job is submitted.

Either way it returns a :class:`~elasticps.jobs.api.JobHandle`: ``status_url()``,
``summary()`` and ``wait() -> JobResult``. Code that knows which side it is on calls
:meth:`Trainer.train` or :func:`elasticps.launch_job` itself.

``elasticps.publish_result(doc)`` makes a script's own document the job's result (the launcher
copies it into ``WORKDIR/summary.json``); without it the trainers publish the last pass's metrics
(``elasticps/trainer/result.py``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from elasticps.cluster.spec import Job
from elasticps.config import Config, current
from elasticps.errors import ConfigError
from elasticps.jobs.api import SUCCEEDED, JobHandle, JobResult, launch_job
from elasticps.store import open_store
from elasticps.store.keys import publish_result as put_result
from elasticps.store.keys import read_master_address
from elasticps.trainer.events import Event
from elasticps.trainer.export_schedule import ExportSchedule
from elasticps.trainer.step_worker import LoopStats
from elasticps.trainer.trainer import Trainer


class TrainerHandle(JobHandle):
    """What ``dist_train`` returns inside a job: this trainer's part is over when it returns
    (a failure raised in ``dist_train``), so ``wait()`` returns at once and ``summary()`` is
    this trainer's loop statistics; the job's own summary is the launcher's."""

    in_job = True

    def __init__(self, trainer: Trainer, stats: LoopStats) -> None:
        self.trainer = trainer
        self.stats = stats

    def status_url(self) -> str | None:
        store = self.trainer.store
        address = read_master_address(store) if store is not None else None
        return address.status_url if address else None

    def wait(self, timeout: float | None = None) -> JobResult:
        return JobResult(SUCCEEDED, 0, self.summary())

    def summary(self) -> dict[str, Any]:
        return dataclasses.asdict(self.stats)


def _launch_from_script(job: Job, workdir: str | None) -> JobHandle:
    """The job, launched from outside: a local one re-runs this very script and arguments."""
    if job.backend != "local":
        return launch_job(job, workdir=workdir)  # a workdir is refused there: pods have none
    script = sys.argv[0]
    if not script or not Path(script).is_file():
        raise ConfigError("dist_train outside a job re-runs the current script under "
                          f"`elasticps run`, but sys.argv[0]={script!r} is not a script file")
    return launch_job(job, script, sys.argv[1:], workdir=workdir)


def dist_train(
    trainer: Trainer,
    reader: Any,
    num_passes: int = 1,
    event_handler: Callable[[Event], None] | None = None,
    job: Job | None = None,
    *,
    workdir: str | None = None,
    config: Config | None = None,
    test_reader: Any = None,
    paddle_job: Job | None = None,
    export: ExportSchedule | None = None,
) -> JobHandle:
    """Train (inside a job) or launch the job (outside one): a facade, see the module docstring.

    ``job`` (``paddle_job``, the seed's name, is the same argument): an
    :class:`elasticps.Job`; outside a job, None means ``Job(backend="local")``. ``workdir``: a
    local job's work directory (default ``./elasticps-job``). ``test_reader`` (inside a job): a
    held-out dataset evaluated at every pass end; its metrics (by label kind) arrive in
    ``EndPass.metrics`` as ``test_auc``, ``test_logloss``..., and the last pass's become the
    job's result unless the script publishes its own. ``export`` (inside a job): an
    :class:`elasticps.ExportSchedule`, versions of the model exported while training."""
    if paddle_job is not None:
        if job is not None:
            raise ConfigError("give dist_train job= or paddle_job= (the same argument), not both")
        job = paddle_job
    if job is not None and not isinstance(job, Job):
        raise ConfigError(f"dist_train's job is an elasticps.Job, not {type(job).__name__}")
    config = config or current()
    if config.role == "trainer" and config.store is not None:
        if trainer.params is None:
            trainer.connect(config)
        stats = trainer.train(reader, num_passes, event_handler, test_reader=test_reader,
                              export=export)
        return TrainerHandle(trainer, stats)
    if config.role is not None:
        raise ConfigError(f"dist_train runs in trainers only, not in PADDLE_ROLE={config.role}")
    return _launch_from_script(job if job is not None else Job(backend="local"), workdir)


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
