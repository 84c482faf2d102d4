"""The local launcher: ``elasticps run`` supervises a whole job on one machine.

Names load on first use: ``elasticps`` imports :mod:`.parent_watch` in every process it
starts, and the launcher (grpc, the job CA, the progress view) must not come with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elasticps.launch.launcher import Launch, LaunchOptions, run_job
    from elasticps.launch.supervisor import JobState, Supervisor

_WHERE = {"Launch": "launcher", "LaunchOptions": "launcher", "run_job": "launcher",
          "JobState": "supervisor", "Supervisor": "supervisor"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'elasticps.launch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"elasticps.launch.{module}"), name)
    globals()[name] = value
    return value


__all__ = ["JobState", "Launch", "LaunchOptions", "Supervisor", "run_job"]
