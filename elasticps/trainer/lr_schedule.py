"""Learning-rate schedule specs (``elasticps.optim.Warmup``, ``StepDecay``, ``Cosine``).

A spec is given to an optimizer spec (``elasticps.optim.AdamW(lr=1e-3, schedule=...)``) and
travels with the table's ``OptimizerSpec``; the pservers, the trainer's own dense update and
geo mode's local copy all read it through :mod:`elasticps.pserver.lr_schedule`, which holds the
formulas and the validation. A step is a batch's number in the job's data order (``pass *
batches_per_pass + the batch's number in the pass``, as the master numbers them), so one
batch gets one learning rate wherever and however often it is applied.

Each mirrors a ``torch.optim.lr_scheduler`` stepped once per batch: ``Warmup`` is ``LinearLR``
(from ``start_factor * lr`` to ``lr`` over ``steps``, then ``lr``), ``StepDecay`` is ``StepLR``,
``Cosine`` is ``CosineAnnealingLR`` (held at ``min_lr`` after ``total_steps``); the
``warmup_steps`` of the last two put a ``LinearLR`` before them (``SequentialLR``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elasticps.errors import ConfigError, InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.lr_schedule import Schedule as ScheduleRule
from elasticps.pserver.lr_schedule import schedule_from_spec

Kind = pserver_pb2.LRSchedule


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """What every schedule spec shares: an optional linear warm-up."""

    warmup_steps: int = 0
    warmup_start_factor: float = 0.0

    def to_proto(self) -> pserver_pb2.LRSchedule:
        spec = pserver_pb2.LRSchedule(warmup_steps=self.warmup_steps,
                                      warmup_start_factor=self.warmup_start_factor)
        self._decay(spec)
        return spec

    def _decay(self, spec: pserver_pb2.LRSchedule) -> None:
        spec.kind = Kind.CONSTANT

    def __post_init__(self) -> None:
        self.check(math.inf)  # the options alone; an optimizer checks min_lr against its lr

    def check(self, base_lr: float) -> None:
        """Raise ConfigError naming the bad option (the pservers' own validation)."""
        self._validated(base_lr)

    def _validated(self, base_lr: float) -> ScheduleRule:
        try:
            return schedule_from_spec(self.to_proto(), base_lr, type(self).__name__)
        except (InvalidArgumentError, ValueError, TypeError) as exc:
            raise ConfigError(str(exc)) from exc

    def lr(self, base_lr: float, step: int) -> float:
        """The learning rate at ``step`` for a base rate of ``base_lr``, as the pservers use it."""
        return self._validated(base_lr).lr(base_lr, step)


@dataclass(frozen=True, init=False)
class Warmup(Schedule):
    """A linear warm-up from ``start_factor * lr`` to ``lr`` over ``steps`` steps, then ``lr``."""

    def __init__(self, steps: int, start_factor: float = 0.0) -> None:
        super().__init__(warmup_steps=steps, warmup_start_factor=start_factor)


@dataclass(frozen=True, kw_only=True)
class StepDecay(Schedule):
    """``lr * gamma ** (t // step_size)``, ``t`` counted from the warm-up's end."""

    step_size: int = 1
    gamma: float = 0.1

    def _decay(self, spec: pserver_pb2.LRSchedule) -> None:
        spec.kind, spec.step_size, spec.gamma = Kind.STEP, self.step_size, self.gamma


@dataclass(frozen=True, kw_only=True)
class Cosine(Schedule):
    """From ``lr`` to ``min_lr`` along half a cosine over ``total_steps`` steps (counted from the
    warm-up's end), then ``min_lr``."""

    total_steps: int = 1
    min_lr: float = 0.0

    def _decay(self, spec: pserver_pb2.LRSchedule) -> None:
        spec.kind, spec.total_steps, spec.min_lr = Kind.COSINE, self.total_steps, self.min_lr
