"""elasticps: elastic, fault-tolerant parameter-server training for PyTorch models.

The public surface lives here; everything else is internal and may change. Names that need
torch (``Trainer``, ``nn``, ``dist_train``...) or the Kubernetes client are imported on first
use, so server roles start without loading torch, and ``Job``, ``launch_job`` and the handles
without either.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from elasticps.config import Config, init, load_config
from elasticps.errors import ElasticPSError
from elasticps.version import __version__

if TYPE_CHECKING:
    from elasticps import events, metrics, nn, optim, reader
    from elasticps.api import dist_train, publish_result
    from elasticps.cluster.spec import Job
    from elasticps.jobs.api import JobHandle, JobResult, launch_job
    from elasticps.trainer.export_schedule import ExportSchedule
    from elasticps.trainer.heads import Head
    from elasticps.trainer.trainer import Trainer

_LAZY: dict[str, tuple[str, str | None]] = {
    "Trainer": ("elasticps.trainer.trainer", "Trainer"),
    "Head": ("elasticps.trainer.heads", "Head"),
    "ExportSchedule": ("elasticps.trainer.export_schedule", "ExportSchedule"),
    "dist_train": ("elasticps.api", "dist_train"),
    "publish_result": ("elasticps.api", "publish_result"),
    "Job": ("elasticps.cluster.spec", "Job"),
    "launch_job": ("elasticps.jobs.api", "launch_job"),
    "JobHandle": ("elasticps.jobs.api", "JobHandle"),
    "JobResult": ("elasticps.jobs.api", "JobResult"),
    "nn": ("elasticps.nn", None),
    "metrics": ("elasticps.metrics", None),
    "optim": ("elasticps.optim", None),
    "events": ("elasticps.events", None),
    "reader": ("elasticps.reader", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'elasticps' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


__all__ = ["Config", "ElasticPSError", "ExportSchedule", "Head", "Job", "JobHandle", "JobResult",
           "Trainer", "__version__", "dist_train", "events", "init", "launch_job", "load_config",
           "metrics", "nn", "optim", "publish_result", "reader"]
