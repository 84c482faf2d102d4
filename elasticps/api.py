"""``elasticps.dist_train``: train inside a job, or start the job when called outside one.

Inside a launched job (``PADDLE_ROLE=trainer`` and ``PADDLE_STORE`` set) it connects, trains and
returns a handle whose ``result`` holds the training stats. Outside one, with ``job.local`` (or no
cluster configured), it re-executes the current script under ``elasticps run`` (the way torchrun
does) and returns a handle on that launcher: ``status_url()``, ``wait()``, ``summary()``. With a
cluster job it submits it through :mod:`elasticps.cluster`.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticps.config import Config, current
from elasticps.errors import ConfigError
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


class TrainerHandle:
    """Returned inside a job: this trainer's part is done when dist_train returns."""

    in_job = True

    def __init__(self, trainer: Trainer, stats: LoopStats) -> None:
        self.trainer = trainer
        self.stats = stats

    def status_url(self) -> str | None:
        from elasticps.store.keys import read_master_address

        store = self.trainer.store
        address = read_master_address(store) if store is not None else None
        return address.status_url if address else None

    def wait(self) -> int:
        return 0


class LocalJobHandle:
    """A job started by ``elasticps run`` in a child process of this one."""

    in_job = False

    def __init__(self, argv: list[str], workdir: Path) -> None:
        self.argv = argv
        self.workdir = workdir
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
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
    argv += [script, *sys.argv[1:]]
    return LocalJobHandle(argv, target)


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

    ``test_reader`` (inside a job): a held-out dataset evaluated at every pass end; its AUC and
    log loss arrive in ``EndPass.metrics`` as ``test_auc`` and ``test_logloss``."""
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
