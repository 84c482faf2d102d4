"""Train a two-tower retriever with in-batch (and sampled) negatives on elasticps.

    python examples/two_tower/make_data.py --out /tmp/retrieval
    elasticps run --trainers 2 --pservers 2 --workdir /tmp/tt examples/two_tower/train.py \\
        --data /tmp/retrieval/train --test-data /tmp/retrieval/test

The model (``model.TwoTower``) embeds the user and the item (one sparse table each, on the
pservers) and scores every user of a batch against every item of it, plus ``--negatives``
sampled items: its output is ``[B, B + negatives]``, which no label kind describes, so the
trainer gets the loss and the metric from the script (``loss_fn=in_batch_softmax``,
``metrics=InBatchRecall``): the softmax over each row's candidates, and recall@1 and @10 of a
row's own item among them, every pass, on the training batches and on ``--test-data`` read in
batches of ``--test-batch-size``. The trainer the master lets save the model exports it to
WORKDIR/model and publishes ``recall_at_10`` and ``mean_rank`` (the final line),
``recall_at_1`` and their values per pass.
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
from model import TwoTower, in_batch_softmax

log = logging.getLogger("two_tower")
METRICS = ["recall_at_10", "recall_at_1", "mean_rank"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="user-item pairs (make_data.py's train)")
    p.add_argument("--test-data", default=None, help="held-out pairs, converted like --data")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--out", type=int, default=16, help="width of the towers' outputs")
    p.add_argument("--negatives", type=int, default=0,
                   help="items sampled per batch as extra negatives (training only)")
    p.add_argument("--temperature", type=float, default=0.1)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--test-batch-size", type=int, default=256,
                   help="the test batches: recall@k ranks among their items")
    add_optimizer_args(p, optimizer="adamw", lr=3e-3, sparse_optimizer="adagrad",
                       sparse_lr=0.05)
    p.add_argument("--init-scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1, help="initial values and sampling")
    p.add_argument("--shuffle", action="store_true", help="shuffle rows within chunks")
    p.add_argument("--no-prefetch", action="store_true",
                   help="no communication overlap: each step sees every earlier update")
    p.add_argument("--dump-initial", help="(tests, one trainer) write the initial parameters "
                   "to this safetensors file before training")
    return p.parse_args(argv)


def make_model(tables: dict[str, tuple[int, int]], args: argparse.Namespace,
               sparse: eps.optim.OptimizerSpec) -> TwoTower:
    torch.manual_seed(args.seed)
    rows = eps.nn.RowInit("uniform", args.init_scale, args.seed)

    def embedding(table: str, id_space: int, dim: int, column: str) -> torch.nn.Module:
        return eps.nn.SparseEmbedding(table, id_space, dim, sparse, rows, columns=column)

    return TwoTower(tables, embedding, hidden=args.hidden, out=args.out,
                    negatives=args.negatives, temperature=args.temperature, seed=args.seed)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = eps.init()
    if config.role != "trainer":
        raise SystemExit("run it in a job: elasticps run --trainers 2 --pservers 2 --workdir W "
                         "examples/two_tower/train.py --data DIR --test-data TDIR")
    if args.dump_initial and config.trainer_count != 1:
        raise SystemExit("--dump-initial takes the values training starts from: one trainer")
    schema = open_dataset(args.data).schema
    tables = {name: (t.id_space, t.dim) for name, t in schema.tables.items()}
    dense, sparse = optimizers(args, args.passes * batches_per_pass(args.data, args.batch_size))
    trainer = eps.Trainer(make_model(tables, args, sparse), loss_fn=in_batch_softmax,
                          metrics=lambda: eps.metrics.InBatchRecall(ks=(1, 10)),
                          optimizer=dense, prefetch=not args.no_prefetch)
    reader = eps.reader.cloud(args.data, batch_size=args.batch_size,
                              shuffle_seed=args.seed if args.shuffle else None)
    test_reader = (eps.reader.cloud(args.test_data, batch_size=args.test_batch_size)
                   if args.test_data else None)

    def on_event(event: eps.events.Event) -> None:
        if isinstance(event, eps.events.EndPass):
            m = event.metrics
            log.info("Pass %d done: test recall@10 %.4f, recall@1 %.4f; train recall@10 %.4f "
                     "over %d rows.", event.pass_id, m.get("test_recall_at_10", float("nan")),
                     m.get("test_recall_at_1", float("nan")), m.get("recall_at_10", float("nan")),
                     int(m.get("samples", 0)))

    trainer.connect(config)
    try:
        if args.dump_initial:
            dump_initial(trainer, reader, args.dump_initial)
        started = time.monotonic()
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       event_handler=on_event, test_reader=test_reader)
        if trainer.request_save_model(block_seconds=600):
            model_dir = Path(config.workdir or os.getcwd()) / "model"
            trainer.export(model_dir, meta={"model": "two_tower", "hidden": args.hidden,
                                            "out": args.out, "temperature": args.temperature})
            result = {"model": "two_tower", "model_dir": str(model_dir), "passes": args.passes,
                      "train_wall_s": round(time.monotonic() - started, 3),
                      "trainer": trainer.name}
            if test_reader is not None:
                result.update(test_result(trainer, METRICS))
                result["headline"] = ["recall_at_10", "mean_rank"]
            eps.publish_result(result)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
