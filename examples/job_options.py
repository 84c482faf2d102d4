"""What the two_tower, multitask and sequence examples share: their optimizer and
learning-rate schedule flags, the initial values a parity test starts from, and the result.

    --optimizer adamw --lr 3e-3 --weight-decay 0.01        dense parameters (on the pservers)
    --sparse-optimizer adagrad --sparse-lr 0.05            embedding tables (lazy, per row)
    --schedule cosine --warmup-steps 50                    both, by the batch's number

A schedule's steps are the job's batches (``passes x batches per pass``, counted from the
dataset's chunks as the master counts them): ``cosine`` decays to ``--min-lr-factor`` of the
rate over the steps after the warm-up, ``step`` halves the rate every ``--step-size`` steps,
``warmup`` only warms up.
"""

from __future__ import annotations

import argparse
from typing import Any

import elasticps as eps
from elasticps.data import open_dataset
from elasticps.data.batch_plan import batches_in_chunks

OPTIMIZERS = {"sgd": eps.optim.SGD, "adagrad": eps.optim.Adagrad, "adam": eps.optim.Adam,
              "adamw": eps.optim.AdamW, "momentum": eps.optim.Momentum}
SCHEDULES = ("none", "warmup", "step", "cosine")


def add_optimizer_args(p: argparse.ArgumentParser, *, optimizer: str, lr: float,
                       sparse_optimizer: str, sparse_lr: float, schedule: str = "none",
                       warmup_steps: int = 0) -> None:
    group = p.add_argument_group("optimizers (they run on the pservers)")
    group.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default=optimizer,
                       help="for the dense parameters")
    group.add_argument("--lr", type=float, default=lr)
    group.add_argument("--weight-decay", type=float, default=0.0,
                       help="decoupled for adamw, L2 for the others")
    group.add_argument("--sparse-optimizer", choices=sorted(OPTIMIZERS),
                       default=sparse_optimizer, help="for the embedding tables")
    group.add_argument("--sparse-lr", type=float, default=sparse_lr)
    group.add_argument("--schedule", choices=SCHEDULES, default=schedule,
                       help="the learning rate by step (both optimizers)")
    group.add_argument("--warmup-steps", type=int, default=warmup_steps)
    group.add_argument("--step-size", type=int, default=100, help="--schedule step")
    group.add_argument("--min-lr-factor", type=float, default=0.0,
                       help="--schedule cosine: the last rate, as a fraction of the first")


def batches_per_pass(url: str, batch_size: int) -> int:
    """One pass's batches, as the master numbers them (a chunk of r rows: ceil(r / batch))."""
    return batches_in_chunks([c.num_rows for c in open_dataset(url).chunks], batch_size)


def schedule(args: argparse.Namespace, lr: float, total_steps: int) -> eps.optim.Schedule | None:
    warmup = {"warmup_steps": args.warmup_steps, "warmup_start_factor": 0.1}
    if args.schedule == "warmup":
        return eps.optim.Warmup(args.warmup_steps, start_factor=0.1)
    if args.schedule == "step":
        return eps.optim.StepDecay(step_size=args.step_size, gamma=0.5, **warmup)
    if args.schedule == "cosine":
        return eps.optim.Cosine(total_steps=max(total_steps - args.warmup_steps, 1),
                                min_lr=lr * args.min_lr_factor, **warmup)
    return None


def optimizers(args: argparse.Namespace, total_steps: int
               ) -> tuple[eps.optim.OptimizerSpec, eps.optim.OptimizerSpec]:
    """(dense, sparse) optimizer specs from the flags; ``total_steps``: the job's batches."""

    def make(kind: str, lr: float, decay: float) -> eps.optim.OptimizerSpec:
        spec: Any = OPTIMIZERS[kind]
        return spec(lr=lr, weight_decay=decay, schedule=schedule(args, lr, total_steps))

    return (make(args.optimizer, args.lr, args.weight_decay),
            make(args.sparse_optimizer, args.sparse_lr, 0.0))


def dump_initial(trainer: eps.Trainer, reader: Any, path: str) -> None:
    """The values training starts from: dense parameters and every row the data reads."""
    from safetensors.numpy import save_file

    tensors = dict(trainer.pull_dense())
    for table, ids in trainer.table_ids(reader).items():
        tensors[f"sparse/{table}/ids"], tensors[f"sparse/{table}/rows"] = trainer.pull_rows(
            table, ids)
    save_file(tensors, path)


def test_result(trainer: eps.Trainer, names: list[str]) -> dict[str, Any]:
    """The last pass's test metrics under their names, each one's value per pass
    (``pass_test_<name>``), and ``headline`` (what ``elasticps run``'s final line shows)."""
    passes = trainer.stats.pass_metrics if trainer.stats is not None else []
    last = passes[-1] if passes else {}
    doc: dict[str, Any] = {name: last.get(f"test_{name}") for name in names}
    doc.update({f"pass_test_{name}": [m.get(f"test_{name}") for m in passes] for name in names})
    doc["test_rows"] = int(last.get("test_samples", 0))
    doc["headline"] = names
    return doc
