"""Optimizers that run on the pservers (``from elasticps.optim import Adagrad``): specs a
trainer or a sparse layer names, not ``torch.optim`` objects."""

from elasticps.trainer.optim import SGD, Adagrad, Adam, Momentum, OptimizerSpec

__all__ = ["SGD", "Adagrad", "Adam", "Momentum", "OptimizerSpec"]
