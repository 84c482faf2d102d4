"""A trainer's ``job/progress/<name>`` record: its training figures and its stage.

The training loop publishes the figures every couple of seconds; a script (or the trainer
itself, around a test-set evaluation) says what it does outside training with a *stage*
(``writing data``, ``exporting``, ``scoring``...), published at once, so the launcher's
progress line and the status page say it instead of showing a stalled 0 samples/s. A record
published while the trainer is not training carries 0 samples/s.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from elasticps.errors import ConfigError
from elasticps.store.keys import MAX_STAGE, TrainerProgress, publish_progress
from elasticps.trainer.step_worker import LoopStats

log = logging.getLogger(__name__)


class ProgressRecord:
    """Keeps the last figures and the stage; :meth:`publish` writes them (best effort)."""

    def __init__(self, store: Any, name: str, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.name = name
        self.clock = clock
        self.stats: LoopStats | None = None
        self.stage: str | None = None

    def set_stage(self, stage: str | None) -> None:
        """Say what the trainer does now (None: training, or nothing to say) and publish it."""
        if stage is not None and (not isinstance(stage, str) or not stage.strip()
                                  or len(stage) > MAX_STAGE):
            raise ConfigError(f"a trainer's stage is a few words (1 to {MAX_STAGE} characters), "
                              f"not {stage!r}")
        self.stage = stage.strip() if stage is not None else None
        self.publish(self.stats, training=False)

    @contextmanager
    def during(self, stage: str) -> Iterator[None]:
        """``stage`` while the block runs, then back to the stage before it."""
        before = self.stage
        self.set_stage(stage)
        try:
            yield
        finally:
            self.set_stage(before)

    def publish(self, stats: LoopStats | None, *, training: bool = True) -> None:
        self.stats = stats
        if self.store is None:
            return
        stats = stats or LoopStats()
        try:
            publish_progress(self.store, self.name, TrainerProgress(
                stats.pass_id, stats.samples, stats.batches, stats.loss_ewma, stats.train_s,
                stats.tasks, stats.timers, stats.samples_per_s if training else 0.0,
                self.clock(), {p: _finite(m) for p, m in stats.metrics_by_pass.items()},
                self.stage))
        except Exception as exc:  # progress is cosmetic; the store may be briefly down
            log.debug("Trainer %s could not publish progress: %s", self.name, exc)


def _finite(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a pass's metrics that JSON can carry (NaN and Inf are left out)."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
