"""Train a click model on a stream as it lands: test each partition, then train on it.

    elasticps run --trainers 2 --pservers 2 --workdir /tmp/online \\
        examples/online/train.py --stream /tmp/clicks

The job follows the stream's prefix (``make_stream.py`` writes one): each partition is trained
once, in order, as soon as it is committed, and the job waits for the next one until the end
marker ``_END`` is there and every partition before it is trained; then it exits 0. Every
partition is scored by the model before the model trains on it (progressive validation): the
status page charts that AUC per partition, and ``summary.json`` lists the ``partitions`` and
their ``progressive_auc``. ``--from NAME`` trains the partitions from NAME on (a backfill), then
follows. At the end the one trainer the master lets save exports the model to
``WORKDIR/model``, from which another job may start warm (``elasticps run --warm-start``).

With ``--export-dir DIR`` the job also writes versions of the model into DIR while it follows
the stream (by default one each partition trained through; the ``--export-every-*`` flags say
otherwise), each recording the partitions it trained through, for
``elasticps serve DIR --model examples/online/score.py:build``; ``summary.json`` then holds
``freshness_s``, from each partition's commit to the first version trained through it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

import elasticps as eps
from elasticps.trainer.export_flags import add_export_flags, schedule_from_flags

log = logging.getLogger("online")
USERS, ITEMS = 2000, 500  # the id spaces make_stream.py writes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stream", required=True, help="the stream's prefix (any fsspec URL)")
    p.add_argument("--from", dest="start", default="",
                   help="train the partitions whose names sort from this one on")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05, help="Adagrad on the pservers")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trainers", type=int, default=2, help="when started outside a job")
    p.add_argument("--pservers", type=int, default=2, help="when started outside a job")
    p.add_argument("--workdir", default=None, help="when started outside a job")
    add_export_flags(p)
    return p.parse_args(argv)


class ClickModel(torch.nn.Module):
    """A logit from a user and an item embedding (a factorisation machine of two fields)."""

    def __init__(self, dim: int, seed: int) -> None:
        super().__init__()
        rows = eps.nn.RowInit("uniform", 0.01, seed)
        self.user = eps.nn.SparseEmbedding("user", USERS, dim + 1, initializer=rows,
                                           columns="user")
        self.item = eps.nn.SparseEmbedding("item", ITEMS, dim + 1, initializer=rows,
                                           columns="item")
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, batch: Any) -> torch.Tensor:
        user, item = self.user(batch), self.item(batch)
        # the last column of each row is its own weight, the others meet the other field's
        return (self.bias + user[:, -1] + item[:, -1]
                + (user[:, :-1] * item[:, :-1]).sum(1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = eps.init()
    if config.role != "trainer":  # outside a job: start one running this script
        job = eps.Job(trainers=args.trainers, pservers=args.pservers, backend="local")
        handle = eps.launch_job(job, __file__, sys.argv[1:] if argv is None else argv,
                                workdir=args.workdir)
        return handle.wait().exit_code
    torch.manual_seed(args.seed)
    trainer = eps.Trainer(ClickModel(args.dim, args.seed),
                          optimizer=eps.optim.Adagrad(lr=args.lr))
    reader = eps.reader.stream(args.stream, batch_size=args.batch_size, start=args.start)
    workdir = Path(config.workdir or os.getcwd())
    schedule = schedule_from_flags(args, meta={"stream": args.stream, "dim": args.dim},
                                   root=workdir, default={"partitions": 1})
    eps.dist_train(trainer, reader, num_passes=1, export=schedule)
    if trainer.request_save_model():
        model_dir = workdir / "model"
        trainer.export(model_dir, {"user": np.arange(USERS), "item": np.arange(ITEMS)},
                       meta={"stream": args.stream})
        log.info("The model is exported to %s.", model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
