"""A small hybrid-mode training script for the tests: a sparse embedding of each row's id into
a dense MLP, trained with Adam. After every batch it appends ``<step> <sha256> <unix time>`` of
its dense replica (values and optimizer state, as the group holds them) to
``--out/trainer-<index>-<pid>.txt``, so a test can compare the replicas of different trainers at the
same step, and find a trainer to kill. Once connected (a member of the dense group, holding its
state) it creates ``--out/ready-<index>-<pid>``. The test orders the trainers through files:
``--join-after N`` keeps the other trainers out until trainer 0 trained N batches, and
``--hold-at N`` stops trainer 0 after N batches until the test creates ``--out/go``.

    python -m elasticps run --mode hybrid --trainers 2 hybrid_script.py --data D --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections.abc import Callable
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
    parser.add_argument("--hold-at", type=int, default=0,
                        help="trainer 0 waits after this many batches until OUT/go exists")
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
        if config.trainer_id == 0 and event.batch_id + 1 == args.hold_at:
            _await(lambda: (folder / "go").exists())

    folder = Path(args.out)
    if config.trainer_id != 0 and args.join_after:
        _await(lambda: sum(len(p.read_text().splitlines())
                           for p in folder.glob("trainer-0-*.txt")) >= args.join_after)
    try:
        trainer.connect(config)
        (folder / f"ready-{config.trainer_id}-{os.getpid()}").touch()
        trainer.train(cloud(args.data, args.batch_size), 1, record)
    finally:
        trainer.close()


def _await(condition: Callable[[], bool]) -> None:
    """Poll files another process writes (there is nothing to block on) until ``condition``."""
    while not condition():
        time.sleep(0.05)


if __name__ == "__main__":
    main()
