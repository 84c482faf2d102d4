"""The parameter-value oracle's training script: every trainer of ``elasticps chaos --oracle``
runs it under ``elasticps run`` (it is a user script like any other; it ships in the package so
an installed wheel has it).

A counting model whose gradients do not depend on the parameters, trained with plain SGD
(lr 1): each batch subtracts exactly 1 from its loss per row it holds and per shard, so

- sparse table ``oracle`` (dim 1, zeros on first touch) has one row per (pass, dataset row,
  shard), id ``(pass * rows + row) * shards + shard`` (on that shard: ``id % shards``), and each
  application of the batch holding that row, in that pass, adds exactly 1 to it;
- dense parameter ``counter`` has one element per shard (``np.array_split`` gives each shard one)
  and each application of any batch on that shard adds exactly 1 to it.

In sync mode a round applies the mean of its batches' gradients (1/r each for r batches), so
there the counting table trains with Adagrad (lr 1, eps 0) instead of SGD: a fresh row's first
step is exactly 1 whatever r, a second step adds strictly less than 1 (see
:mod:`elasticps.chaos.oracle`); the dense counter stays on SGD and counts rounds.

So the final parameters count the applications of every batch on every shard, whatever the
trainers, the master and the pservers went through: :mod:`elasticps.chaos.oracle` reads them
from the shards' checkpoints and checks every count is exactly 1. The dataset
(:func:`~elasticps.chaos.oracle.write_oracle_data`) holds each row's own index as a passthrough
id column ``row``; which pass a batch belongs to comes from the trainer's ``BeginPass`` event
(a task, and every prefetch, stays within one pass).

On a stream (``--stream PREFIX --rows N``) it trains ``elasticps.reader.stream(PREFIX)``, one
pass over partitions as they land, whose ``row`` columns number the stream's N rows.

    python -m elasticps run --pservers 2 elasticps/chaos/oracle_script.py --data D --passes 3
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from elasticps.config import init
from elasticps.data.batch import Batch, TensorBatch
from elasticps.data.manifest import read_manifest
from elasticps.trainer.dataset_reader import cloud
from elasticps.trainer.events import BeginPass, Event
from elasticps.trainer.optim import SGD, Adagrad, OptimizerSpec
from elasticps.trainer.sparse import RowInit, SparseLayer, numpy_batch
from elasticps.trainer.stream_reader import stream
from elasticps.trainer.trainer import Trainer

TABLE = "oracle"
ROW_COLUMN = "row"
COUNTER = "counter"


class PassClock:
    """The pass the trainer works on, from its BeginPass events."""

    def __init__(self) -> None:
        self.pass_id = 0

    def __call__(self, event: Event) -> None:
        if isinstance(event, BeginPass):
            self.pass_id = event.pass_id


class CountingRows(SparseLayer):
    """Looks up, for each row of a batch, its own row on every shard (ids in the docstring)."""

    def __init__(self, rows: int, passes: int, shards: int, clock: PassClock,
                 optimizer: OptimizerSpec) -> None:
        super().__init__(TABLE, passes * rows * shards, 1, optimizer=optimizer,
                         initializer=RowInit("zeros"))
        self.rows, self.shards, self.clock = rows, shards, clock

    def ids_for(self, batch: Batch) -> np.ndarray | None:
        row = np.asarray(batch.ids[ROW_COLUMN], dtype=np.int64)
        base = (self.clock.pass_id * self.rows + row) * self.shards
        return (base[:, None] + np.arange(self.shards, dtype=np.int64)).reshape(-1)

    def forward(self, x: TensorBatch | Batch) -> torch.Tensor:
        batch = numpy_batch(x)
        assert batch is not None, "the oracle's layer reads batches"
        rows, positions = self._lookup(batch, None)
        return rows.index_select(0, positions).view(len(batch), self.shards)


class CountingModel(torch.nn.Module):
    """Output row i = the sum of row i's counting rows, plus (row 0 only) the counters' sum."""

    def __init__(self, rows: int, passes: int, shards: int, clock: PassClock,
                 optimizer: OptimizerSpec | None = None) -> None:
        super().__init__()
        self.rows = CountingRows(rows, passes, shards, clock, optimizer or SGD(lr=1.0))
        self.counter = torch.nn.Parameter(torch.zeros(shards))

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        per_row = self.rows(batch).sum(1)
        first = torch.nn.functional.pad(self.counter.sum().reshape(1), (0, len(per_row) - 1))
        return per_row + first


def counting_optimizer(mode: str) -> OptimizerSpec:
    """The counting table's optimizer: one whose first step on a row is exactly 1 in ``mode``."""
    # eps 0: the first step is -g / sqrt(g * g) = 1 exactly for any g < 0 (g = -1/r in sync).
    return Adagrad(lr=1.0, eps=0.0) if mode == "sync" else SGD(lr=1.0)


def counting_loss(output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """-sum: every count's gradient is exactly -1, so SGD with lr 1 adds exactly 1."""
    return -output.sum()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="a dataset from write_oracle_data")
    data.add_argument("--stream", help="a stream of write_oracle_data partitions")
    parser.add_argument("--rows", type=int, default=0, help="with --stream: the stream's rows")
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    if args.stream and (args.rows < 1 or args.passes != 1):
        parser.error("--stream needs --rows N (the stream's rows) and one pass")
    config = init()
    rows = args.rows if args.stream else read_manifest(args.data).num_rows
    clock = PassClock()
    model = CountingModel(rows, args.passes, config.pserver_count, clock,
                          counting_optimizer(config.mode))
    trainer = Trainer(model, counting_loss, SGD(lr=1.0), label_kind="float")
    try:
        trainer.connect(config)
        reader = (stream(args.stream, args.batch_size) if args.stream
                  else cloud(args.data, args.batch_size))
        trainer.train(reader, args.passes, clock)
    finally:
        trainer.close()  # a trainer scaled away hands its task back at once


if __name__ == "__main__":
    main()
