"""Optimizer specs. They run on the pservers, not in the trainer: each spec maps to the
``OptimizerSpec`` message that a table is declared with.

``elasticps.optim.Adam(lr=1e-3)`` reads like ``torch.optim.Adam`` but owns no parameters: the
pservers keep the optimizer state next to the rows (per-row state for sparse tables; sparse
tables use lazy Adam, which steps only the rows a batch touched).

``schedule=`` makes the learning rate a function of the step (lr_schedule.py): the batch's
number in the job's data order, as the master numbers batches, so every shard and the trainer
agree on it and it survives restarts::

    elasticps.optim.AdamW(lr=1e-3, weight_decay=0.01,
                          schedule=elasticps.optim.Cosine(total_steps=10_000, warmup_steps=500))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elasticps.errors import ConfigError
from elasticps.proto import pserver_pb2
from elasticps.trainer.lr_schedule import Cosine, Schedule, StepDecay, Warmup


def _check(name: str, value: float, *, minimum: float = 0.0, strict: bool = False) -> None:
    ok = math.isfinite(value) and (value > minimum if strict else value >= minimum)
    if not ok:
        bound = ">" if strict else ">="
        raise ConfigError(f"optimizer option {name}={value!r} must be finite and {bound} {minimum}")


@dataclass(frozen=True)
class OptimizerSpec:
    """Common options: learning rate, L2 weight decay, per-push gradient clipping by norm."""

    lr: float = 0.01
    weight_decay: float = 0.0
    clip_norm: float = 0.0
    schedule: Schedule | None = None  # the learning rate by step (default: lr throughout)

    def __post_init__(self) -> None:
        _check("lr", self.lr, strict=True)
        _check("weight_decay", self.weight_decay)
        _check("clip_norm", self.clip_norm)
        if self.schedule is not None:
            if not isinstance(self.schedule, Schedule):
                raise ConfigError(f"schedule={self.schedule!r} must be an elasticps.optim "
                                  "schedule (Warmup, StepDecay, Cosine)")
            self.schedule.check(self.lr)

    def to_proto(self) -> pserver_pb2.OptimizerSpec:
        spec = pserver_pb2.OptimizerSpec(
            kind=self._kind(), lr=self.lr, weight_decay=self.weight_decay,
            clip_norm=self.clip_norm,
        )
        for name, value in self._extra().items():
            setattr(spec, name, value)
        if self.schedule is not None:
            spec.schedule.CopyFrom(self.schedule.to_proto())
        return spec

    def _kind(self) -> pserver_pb2.OptimizerSpec.Kind.ValueType:
        raise NotImplementedError

    def _extra(self) -> dict[str, float]:
        return {}


@dataclass(frozen=True)
class SGD(OptimizerSpec):
    """``w -= lr * g``."""

    def _kind(self) -> pserver_pb2.OptimizerSpec.Kind.ValueType:
        return pserver_pb2.OptimizerSpec.SGD


@dataclass(frozen=True)
class Momentum(OptimizerSpec):
    """``v = momentum * v + g; w -= lr * v``."""

    momentum: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("momentum", self.momentum)

    def _kind(self) -> pserver_pb2.OptimizerSpec.Kind.ValueType:
        return pserver_pb2.OptimizerSpec.MOMENTUM

    def _extra(self) -> dict[str, float]:
        return {"momentum": self.momentum}


@dataclass(frozen=True)
class Adagrad(OptimizerSpec):
    """``s += g^2; w -= lr * g / (sqrt(s) + eps)``."""

    eps: float = 1e-10
    initial_accumulator: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("eps", self.eps)
        _check("initial_accumulator", self.initial_accumulator)

    def _kind(self) -> pserver_pb2.OptimizerSpec.Kind.ValueType:
        return pserver_pb2.OptimizerSpec.ADAGRAD

    def _extra(self) -> dict[str, float]:
        return {"eps": self.eps, "initial_accumulator": self.initial_accumulator}


@dataclass(frozen=True)
class Adam(OptimizerSpec):
    """Adam (Kingma & Ba); lazy on sparse tables: untouched rows keep their state."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value < 1.0):
                raise ConfigError(f"optimizer option {name}={value!r} must be in [0, 1)")
        _check("eps", self.eps, strict=True)

    def _kind(self) -> pserver_pb2.OptimizerSpec.Kind.ValueType:
        return pserver_pb2.OptimizerSpec.ADAM

    def _extra(self) -> dict[str, float]:
        return {"beta1": self.beta1, "beta2": self.beta2, "eps": self.eps}


@dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW`` (whose default decay, 0.01,
    it shares): ``w *= 1 - lr * weight_decay`` before each Adam step; lazy on sparse tables."""

    weight_decay: float = 0.01

    def _kind(self) -> pserver_pb2.OptimizerSpec.Kind.ValueType:
        return pserver_pb2.OptimizerSpec.ADAMW


__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "Cosine", "Momentum", "OptimizerSpec", "Schedule",
           "StepDecay", "Warmup"]
