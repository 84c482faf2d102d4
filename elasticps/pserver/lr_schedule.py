"""Learning-rate schedules: the learning rate of a step as a pure function of that step.

A step is a batch's number in the job's data order (``BatchRef.step = pass_id * pass_batches +
first_batch + seq``, numbered by the master from the dataset's row counts), never a count kept
by a pserver. So a batch gets the same learning rate on every shard, in the trainer's own dense
update (trainer/own_update.py) and in geo mode's local copy, and again when it is re-applied
after a pserver restored an older checkpoint: there is no schedule state to checkpoint or to
drift. A sync round steps at the smallest batch number it holds.

The factor of the base learning rate at step ``t`` (``W = warmup_steps``, ``s =
warmup_start_factor``, ``u = t - W``)::

    t < W:      s + (1 - s) * t / W                      (torch LinearLR, start_factor=s)
    CONSTANT:   1
    STEP:       gamma ** (u // step_size)                (torch StepLR)
    COSINE:     min + (1 - min) * (1 + cos(pi * min(u, T) / T)) / 2,   T = total_steps,
                min = min_lr / lr                        (torch CosineAnnealingLR, held at
                                                          min_lr after T instead of rising)

A warm-up followed by a decay is torch's ``SequentialLR([LinearLR, decay], milestones=[W])``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2

Kind = pserver_pb2.LRSchedule.Kind


@dataclass(frozen=True)
class Schedule:
    """A validated schedule (see the module docstring); the default is a constant rate."""

    kind: str = "CONSTANT"
    warmup_steps: int = 0
    warmup_start_factor: float = 0.0
    step_size: int = 0
    gamma: float = 1.0
    total_steps: int = 0
    min_lr: float = 0.0

    def lr(self, base_lr: float, step: int) -> float:
        """The learning rate at ``step`` (0-based) for a base rate of ``base_lr``."""
        step = max(int(step), 0)
        if step < self.warmup_steps:
            start = self.warmup_start_factor
            return base_lr * (start + (1.0 - start) * step / self.warmup_steps)
        after = step - self.warmup_steps
        if self.kind == "STEP":
            return base_lr * self.gamma ** (after // self.step_size)
        if self.kind == "COSINE":
            progress = min(after, self.total_steps) / self.total_steps
            return self.min_lr + (base_lr - self.min_lr) * (1.0 + math.cos(math.pi * progress)) / 2
        return base_lr


CONSTANT = Schedule()


def schedule_from_spec(spec: pserver_pb2.LRSchedule, base_lr: float, where: str) -> Schedule:
    """Validate a proto LRSchedule for a base rate of ``base_lr``; raise InvalidArgumentError
    starting with ``where`` (the table's schedule) and naming the field."""
    if spec.kind not in Kind.values():
        raise InvalidArgumentError(f"{where}: kind {spec.kind} is not one of "
                                   f"{', '.join(Kind.keys())}")
    kind = Kind.Name(spec.kind)
    if spec.warmup_steps < 0:
        raise InvalidArgumentError(f"{where}: warmup_steps={spec.warmup_steps} must be >= 0")
    if not 0.0 <= spec.warmup_start_factor <= 1.0:
        raise InvalidArgumentError(
            f"{where}: warmup_start_factor={spec.warmup_start_factor} must be in [0, 1]")
    if kind == "STEP":
        if spec.step_size <= 0:
            raise InvalidArgumentError(f"{where}: step_size={spec.step_size} must be > 0")
        if not 0.0 < spec.gamma <= 1.0:
            raise InvalidArgumentError(f"{where}: gamma={spec.gamma} must be in (0, 1]")
    elif spec.step_size or spec.gamma:
        raise InvalidArgumentError(f"{where}: step_size and gamma are for STEP schedules")
    if kind == "COSINE":
        if spec.total_steps <= 0:
            raise InvalidArgumentError(
                f"{where}: total_steps={spec.total_steps} must be > 0")
        if not (math.isfinite(spec.min_lr) and 0.0 <= spec.min_lr <= base_lr):
            raise InvalidArgumentError(
                f"{where}: min_lr={spec.min_lr} must be in [0, lr={base_lr}]")
    elif spec.total_steps or spec.min_lr:
        raise InvalidArgumentError(f"{where}: total_steps and min_lr are for COSINE schedules")
    return Schedule(kind=kind, warmup_steps=int(spec.warmup_steps),
                    warmup_start_factor=float(spec.warmup_start_factor),
                    step_size=int(spec.step_size), gamma=float(spec.gamma) or 1.0,
                    total_steps=int(spec.total_steps), min_lr=float(spec.min_lr))
