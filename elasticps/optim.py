"""Optimizers and learning-rate schedules that run where the optimizer runs (``from
elasticps.optim import AdamW, Cosine``): specs a trainer or a sparse layer names, not
``torch.optim`` objects."""

from elasticps.trainer.optim import (
    SGD,
    Adagrad,
    Adam,
    AdamW,
    Cosine,
    Momentum,
    OptimizerSpec,
    Schedule,
    StepDecay,
    Warmup,
)

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "Cosine", "Momentum", "OptimizerSpec", "Schedule",
           "StepDecay", "Warmup"]
