"""Exports on a schedule: the option a training script passes, and the pure decisions.

::

    schedule = elasticps.ExportSchedule("/models/shop", every_batches=200, every_s=60,
                                        full_every=10, keep=2, meta={"model": "dnn"})
    elasticps.dist_train(trainer=trainer, reader=reader, num_passes=2, export=schedule)

While it trains, a trainer exports a new version of the model into the model directory
(:mod:`elasticps.trainer.model_dir`) whenever one of the schedule's counts is reached since the
last version: ``every_passes`` passes (the job's: a pass ends for every trainer together),
``every_tasks`` tasks this trainer finished, ``every_batches`` batches it trained, or
``every_partitions`` partitions of a stream trained through (every task of them finished, by
any trainer, as the master counts), or ``every_s`` seconds. Each
count is a *unit* (:data:`UNITS`) that the trainer's worker counts as it goes
(``ScheduledExports.count``), so a new kind of progress is one more unit, counted where it
happens. A version is a delta of the version before, and a full
export
once ``full_every`` deltas have followed the last full one; the newest ``keep`` chains (a full
export and its deltas) stay on disk. One trainer exports at a time: the one the master grants
the model's save (``RequestSaveModel``, held ``hold_s`` seconds and renewed at each export).
With ``final``, one more version is written when training ends: the model as every trainer
left it.

This module decides (:func:`due`, :func:`version_kind`); :mod:`.scheduled_export` acts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticps.errors import ConfigError
from elasticps.trainer.model_dir import VersionRecord

# What a trainer counts towards a version: the passes ended, the tasks it finished, the batches
# it trained, the stream partitions the job trained through. A unit here needs a field
# ``every_<unit>`` on ExportSchedule.
UNITS = ("passes", "tasks", "batches", "partitions")


@dataclass(frozen=True)
class ExportSchedule:
    """When and where a training job exports versions of its model (module docstring).

    ``meta`` goes into every version's manifest (what a scorer needs to rebuild the model:
    model options, say); the schedule adds ``version``, ``base``, ``depth``, ``position`` and
    ``committed_at``.
    """

    directory: str | os.PathLike[str]
    every_batches: int | None = None
    every_s: float | None = None
    every_tasks: int | None = None
    every_passes: int | None = None
    every_partitions: int | None = None
    full_every: int = 10
    keep: int = 2
    hold_s: float = 120.0
    final: bool = True
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.every_s is None and all(self.every(unit) is None for unit in UNITS):
            raise ConfigError("ExportSchedule needs at least one of every_s=, "
                              + ", ".join(f"every_{unit}=" for unit in UNITS))
        for unit in UNITS:
            count = self.every(unit)
            if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                      or count < 1):
                raise ConfigError(f"ExportSchedule every_{unit}={count!r} must be a whole "
                                  "number >= 1")
        _positive("every_s", self.every_s)
        _positive("hold_s", self.hold_s)
        for name in ("full_every", "keep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"ExportSchedule {name}={value!r} must be a whole number >= 1")
        if not isinstance(self.meta, Mapping):
            raise ConfigError(f"ExportSchedule meta={self.meta!r} must be a mapping")
        taken = sorted(set(self.meta) & {"version", "base", "depth", "position",
                                         "committed_at"})
        if taken:
            raise ConfigError(f"ExportSchedule meta may not set {taken}: the schedule writes "
                              "them")
        if not str(self.directory):
            raise ConfigError("ExportSchedule needs a directory")

    @property
    def path(self) -> Path:
        return Path(self.directory)

    def every(self, unit: str) -> int | None:
        """How many ``unit`` (one of :data:`UNITS`) make a version due; None: not counted."""
        if unit not in UNITS:
            raise ValueError(f"unit {unit!r} is not one of {UNITS}")
        value: int | None = getattr(self, f"every_{unit}")
        return value


def _positive(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ConfigError(f"ExportSchedule {name}={value!r} must be a number of seconds > 0")


def due(schedule: ExportSchedule, counts: Mapping[str, int], seconds: float) -> bool:
    """Whether a version is due ``counts`` (unit -> how many since) and ``seconds`` seconds
    after the last export (or the last time this trainer was refused the grant, or training
    began). Partitions count whoever trained them (a new partition trained through is a
    change); any other unit needs a batch this trainer trained since."""
    partitions = schedule.every("partitions")
    if partitions is not None and counts.get("partitions", 0) >= partitions:
        return True
    if counts.get("batches", 0) < 1:
        return False  # nothing new trained
    for unit in UNITS:
        every = schedule.every(unit)
        if every is not None and counts.get(unit, 0) >= every:
            return True
    return schedule.every_s is not None and seconds >= schedule.every_s


def version_kind(latest: VersionRecord | None, full_every: int) -> str:
    """``full`` for the first version and once ``full_every`` deltas follow the last full
    one; else ``delta`` (of ``latest``)."""
    if latest is None or latest.depth >= full_every:
        return "full"
    return "delta"
