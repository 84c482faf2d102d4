"""Train a multi-task model (a binary, a float and a class label, one head each) on elasticps.

    python examples/multitask/make_data.py --out /tmp/shop      # and convert it (see there)
    elasticps run --trainers 2 --pservers 2 --workdir /tmp/mt examples/multitask/train.py \\
        --data /tmp/shop/data --test-data /tmp/shop/test-data --weights click=1,dwell=0.5,topic=1

The dataset's schema declares several labels of mixed kinds; the model
(``model.MultiTaskModel``) returns ``{label: output}`` and the trainer trains one head per
label (``elasticps.Trainer(heads={label: weight})``): each head's loss is its kind's (BCE with
logits, mean squared error, cross-entropy), the batch's loss their weighted sum, and each head
reports its kind's metrics under its name. After the last pass the trainer the master lets save
the model exports it to WORKDIR/model and publishes ``click_auc``, ``dwell_rmse`` and
``topic_accuracy`` (the final line), the heads' other metrics, and their values per pass.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

import elasticps as eps
from elasticps.data import open_dataset
from elasticps.data.schema import Schema

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from job_options import (
    add_optimizer_args,
    batches_per_pass,
    dump_initial,
    optimizers,
    test_result,
)
from model import MultiTaskModel

log = logging.getLogger("multitask")
HEADLINE = {"binary": "auc", "float": "rmse", "class": "accuracy"}
OTHERS = {"binary": "logloss", "float": "mae", "class": "perplexity"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a dataset whose schema has several labels")
    p.add_argument("--test-data", default=None, help="held-out rows, converted --like --data")
    p.add_argument("--weights", default="",
                   help="each head's weight in the loss, label=w,... (default: every label, 1)")
    p.add_argument("--hidden", default="64,32", help="the shared MLP's layer sizes")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    # A cosine decay settles the float head, which two asynchronous trainers at a constant
    # Adam rate kept moving (test RMSE 0.52, 0.77, 0.60 by pass in one run).
    add_optimizer_args(p, optimizer="adam", lr=3e-3, sparse_optimizer="adagrad",
                       sparse_lr=0.1, schedule="cosine", warmup_steps=20)
    p.add_argument("--init-scale", type=float, default=0.05,
                   help="embedding rows start uniform in [-s, s]")
    p.add_argument("--seed", type=int, default=1, help="initial values")
    p.add_argument("--shuffle", action="store_true", help="shuffle rows within chunks")
    p.add_argument("--no-prefetch", action="store_true",
                   help="no communication overlap: each step sees every earlier update")
    p.add_argument("--dump-initial", help="(tests, one trainer) write the initial parameters "
                   "to this safetensors file before training")
    return p.parse_args(argv)


def head_weights(text: str, schema: Schema) -> dict[str, float]:
    if not text:
        return {label.name: 1.0 for label in schema.labels}
    weights = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        weights[name.strip()] = float(value)
    return weights


def make_model(schema: Schema, args: argparse.Namespace,
               sparse: eps.optim.OptimizerSpec) -> MultiTaskModel:
    torch.manual_seed(args.seed)
    rows = eps.nn.RowInit("uniform", args.init_scale, args.seed)

    def embedding(table: str, id_space: int, dim: int, columns: Any) -> torch.nn.Module:
        return eps.nn.SparseEmbedding(table, id_space, dim, sparse, rows, columns=columns)

    return MultiTaskModel(schema, embedding,
                          hidden=[int(h) for h in args.hidden.split(",") if h])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = eps.init()
    if config.role != "trainer":
        raise SystemExit("run it in a job: elasticps run --trainers 2 --pservers 2 --workdir W "
                         "examples/multitask/train.py --data DIR --test-data TDIR")
    if args.dump_initial and config.trainer_count != 1:
        raise SystemExit("--dump-initial takes the values training starts from: one trainer")
    schema = open_dataset(args.data).schema
    weights = head_weights(args.weights, schema)
    dense, sparse = optimizers(args, args.passes * batches_per_pass(args.data, args.batch_size))
    trainer = eps.Trainer(make_model(schema, args, sparse), optimizer=dense, heads=weights,
                          prefetch=not args.no_prefetch)
    reader = eps.reader.cloud(args.data, batch_size=args.batch_size,
                              shuffle_seed=args.seed if args.shuffle else None)
    test_reader = eps.reader.cloud(args.test_data, batch_size=4096) if args.test_data else None
    kinds = {label.name: label.kind for label in schema.labels if label.name in weights}
    headline = [f"{name}_{HEADLINE[kind]}" for name, kind in kinds.items()]

    def on_event(event: eps.events.Event) -> None:
        if isinstance(event, eps.events.EndPass):
            log.info("Pass %d done: %s.", event.pass_id, ", ".join(
                f"test {name} {event.metrics.get('test_' + name, float('nan')):.4f}"
                for name in headline))

    trainer.connect(config)
    try:
        if args.dump_initial:
            dump_initial(trainer, reader, args.dump_initial)
        started = time.monotonic()
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       event_handler=on_event, test_reader=test_reader)
        if trainer.request_save_model(block_seconds=600):
            model_dir = Path(config.workdir or os.getcwd()) / "model"
            trainer.export(model_dir, meta={"model": "multitask", "hidden": args.hidden,
                                            "weights": weights})
            result: dict[str, Any] = {"model": "multitask", "model_dir": str(model_dir),
                                      "passes": args.passes, "weights": weights,
                                      "train_wall_s": round(time.monotonic() - started, 3),
                                      "trainer": trainer.name}
            if test_reader is not None:
                others = [f"{name}_{OTHERS[kind]}" for name, kind in kinds.items()]
                result.update(test_result(trainer, headline + others))
                result["headline"] = headline
            eps.publish_result(result)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
