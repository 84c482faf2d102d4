"""A small hybrid-mode training script for the tests: a sparse embedding of each row's id into
a dense MLP, trained with Adam. After every batch it appends ``<step> <sha256> <unix time>`` of
its dense replica (values and optimizer state, as the group holds them) to
``--out/trainer-<index>-<pid>.txt``, so a test can compare the replicas of different trainers at the
same step, and find a trainer to kill.

    python -m elasticps run --mode hybrid --trainers 2 hybrid_script.py --data D --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import torch

from elasticps.config import init
from elasticps.trainer.dataset_reader import cloud
from elasticps.trainer.events import EndIteration, Event
from elasticps.trainer.hybrid.params import HybridParams
from elasticps.trainer.optim import Adam
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.trainer import Trainer


class Model(torch.nn.Module):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.emb = SparseEmbedding("rows", rows, 4, columns="row")
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))

    def forward(self, batch: object) -> torch.Tensor:
        return self.mlp(self.emb(batch)).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--join-after", type=int, default=0,
                        help="trainers other than trainer 0 join once it recorded this many "
                        "batches (so they join a live group)")
    args = parser.parse_args()
    config = init()
    torch.manual_seed(os.getpid())  # every trainer starts from other values: the group agrees
    trainer = Trainer(Model(args.rows), torch.nn.functional.mse_loss, Adam(lr=0.01),
                      label_kind="float")
    out = Path(args.out) / f"trainer-{config.trainer_id}-{os.getpid()}.txt"

    def record(event: Event) -> None:
        if not isinstance(event, EndIteration):
            return
        params = trainer.params
        assert isinstance(params, HybridParams)
        assert params.group is not None
        with params.group.lock:
            step = params.group.replica.step
            digest = hashlib.sha256(params.group.replica.pack()[1].tobytes()).hexdigest()
        with out.open("a") as lines:
            lines.write(f"{step} {digest} {time.time()}\n")

    if config.trainer_id != 0 and args.join_after:
        _await_lines(Path(args.out), "trainer-0-*.txt", args.join_after)
    try:
        trainer.connect(config)
        trainer.train(cloud(args.data, args.batch_size), 1, record)
    finally:
        trainer.close()


def _await_lines(folder: Path, pattern: str, lines: int) -> None:
    """Poll the file another trainer writes (there is nothing to block on) until it is long
    enough."""
    while sum(len(p.read_text().splitlines()) for p in folder.glob(pattern)) < lines:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
