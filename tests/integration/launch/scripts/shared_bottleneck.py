"""A user's job whose steps wait on one resource shared by every trainer (a single-threaded
feature service, say): each step holds an exclusive lock on --lock for --step-s seconds. More
trainers cannot make it faster, which is what the autoscaler must find out and undo. Otherwise a
tiny linear model over the dataset at --data, through elasticps' public API only."""

import argparse
import fcntl
import time

import torch

import elasticps as eps
from elasticps.data import FeatureConfig

ID_SPACE = 1009
SLOTS = [f"C{i}" for i in range(1, 27)]


class Tiny(torch.nn.Module):
    def __init__(self, lock: str, step_s: float) -> None:
        super().__init__()
        self.lock, self.step_s = lock, step_s
        self.embedding = eps.nn.SparseEmbedding("embedding", ID_SPACE, 2, columns=SLOTS)
        self.out = torch.nn.Linear(13 + 26 * 2, 1)

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        with open(self.lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            time.sleep(self.step_s)  # the shared resource's service time (the workload itself)
        return self.out(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1)).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--lock", required=True)
    parser.add_argument("--step-s", type=float, default=0.05)
    args = parser.parse_args()
    eps.init()
    trainer = eps.Trainer(Tiny(args.lock, args.step_s), optimizer=eps.optim.Adam(lr=1e-2))
    reader = eps.reader.cloud(args.data, batch_size=128, features=FeatureConfig(id_space=ID_SPACE))
    try:
        eps.dist_train(trainer=trainer, reader=reader, num_passes=1)
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
