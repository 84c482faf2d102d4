"""Train attention over a user's history (a multi-valued column, one embedding per position)
with elasticps.

    python examples/sequence/make_data.py --out /tmp/history
    elasticps run --trainers 2 --pservers 2 --workdir /tmp/seq examples/sequence/train.py \\
        --data /tmp/history/train --test-data /tmp/history/test

The model (``model.HistoryAttention``) reads the ``history`` column with
``elasticps.nn.SparseEmbeddingSequence`` (``[B, L, dim]`` and a mask: each row's last
``--max-len`` items) and the ``candidate`` column with ``SparseEmbedding``, both from one table
on the pservers, and attends over the history with the candidate as the query. The loss and the
metrics are the binary label's defaults (BCE, AUC). The trainer the master lets save the model
exports it to WORKDIR/model and publishes the test ``auc`` (the final line), ``logloss`` and
``pass_test_auc``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import torch

import elasticps as eps
from elasticps.data import open_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from job_options import (
    add_optimizer_args,
    batches_per_pass,
    dump_initial,
    optimizers,
    test_result,
)
from model import HistoryAttention

log = logging.getLogger("sequence")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="histories and candidates (make_data.py)")
    p.add_argument("--test-data", default=None, help="held-out rows, converted like --data")
    p.add_argument("--max-len", type=int, default=20, help="history positions attended to")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    add_optimizer_args(p, optimizer="adam", lr=3e-3, sparse_optimizer="adagrad",
                       sparse_lr=0.5)
    p.add_argument("--init-scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1, help="initial values")
    p.add_argument("--shuffle", action="store_true", help="shuffle rows within chunks")
    p.add_argument("--no-prefetch", action="store_true",
                   help="no communication overlap: each step sees every earlier update")
    p.add_argument("--dump-initial", help="(tests, one trainer) write the initial parameters "
                   "to this safetensors file before training")
    return p.parse_args(argv)


def make_model(items: tuple[int, int], args: argparse.Namespace,
               sparse: eps.optim.OptimizerSpec) -> HistoryAttention:
    torch.manual_seed(args.seed)
    rows = eps.nn.RowInit("uniform", args.init_scale, args.seed)

    def sequence(table: str, id_space: int, dim: int, column: str,
                 max_len: int) -> torch.nn.Module:
        return eps.nn.SparseEmbeddingSequence(table, id_space, dim, sparse, rows, column=column,
                                              max_len=max_len)

    def embedding(table: str, id_space: int, dim: int, column: str) -> torch.nn.Module:
        return eps.nn.SparseEmbedding(table, id_space, dim, sparse, rows, columns=column)

    return HistoryAttention(items, sequence, embedding, max_len=args.max_len,
                            hidden=args.hidden)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = eps.init()
    if config.role != "trainer":
        raise SystemExit("run it in a job: elasticps run --trainers 2 --pservers 2 --workdir W "
                         "examples/sequence/train.py --data DIR --test-data TDIR")
    if args.dump_initial and config.trainer_count != 1:
        raise SystemExit("--dump-initial takes the values training starts from: one trainer")
    table = open_dataset(args.data).schema.tables["items"]
    dense, sparse = optimizers(args, args.passes * batches_per_pass(args.data, args.batch_size))
    trainer = eps.Trainer(make_model((table.id_space, table.dim), args, sparse),
                          optimizer=dense, prefetch=not args.no_prefetch)
    reader = eps.reader.cloud(args.data, batch_size=args.batch_size,
                              shuffle_seed=args.seed if args.shuffle else None)
    test_reader = eps.reader.cloud(args.test_data, batch_size=4096) if args.test_data else None

    def on_event(event: eps.events.Event) -> None:
        if isinstance(event, eps.events.EndPass):
            log.info("Pass %d done: test auc %.4f, train auc %.4f.", event.pass_id,
                     event.metrics.get("test_auc", float("nan")),
                     event.metrics.get("auc", float("nan")))

    trainer.connect(config)
    try:
        if args.dump_initial:
            dump_initial(trainer, reader, args.dump_initial)
        started = time.monotonic()
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       event_handler=on_event, test_reader=test_reader)
        if trainer.request_save_model(block_seconds=600):
            model_dir = Path(config.workdir or os.getcwd()) / "model"
            trainer.export(model_dir, meta={"model": "history_attention",
                                            "max_len": args.max_len, "hidden": args.hidden})
            result = {"model": "history_attention", "model_dir": str(model_dir),
                      "passes": args.passes, "trainer": trainer.name,
                      "train_wall_s": round(time.monotonic() - started, 3)}
            if test_reader is not None:
                result.update(test_result(trainer, ["auc", "logloss"]))
                result["headline"] = ["auc"]
            eps.publish_result(result)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
