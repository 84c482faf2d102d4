"""How the trainer calls the model with a batch.

By default ``model(batch)`` with the :class:`~elasticps.data.batch.TensorBatch`. A ``feed`` maps
the batch to any forward signature: it returns a tuple or list of positional arguments, a
mapping of keyword arguments, or one value passed as the only argument::

    feed=lambda b: (b.dense, b.ids["user"])          # model(dense, user_ids)
    feed=lambda b: {"x": b.dense, "batch": b}        # model(x=..., batch=...)

Labels and weights never go through the feed: the trainer takes them from the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from elasticps.data.batch import TensorBatch

Feed = Callable[[TensorBatch], Any]


def call_model(model: torch.nn.Module, feed: Feed | None, batch: TensorBatch) -> torch.Tensor:
    if feed is None:
        return model(batch)
    args = feed(batch)
    if isinstance(args, Mapping):
        return model(**args)
    if isinstance(args, tuple | list):
        return model(*args)
    return model(args)
