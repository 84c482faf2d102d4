"""A user's training script (public API) that also reports where the job token can be seen:
in its process's environment as the launcher gave it (/proc/self/environ), in os.environ while
the script runs, and in the environment of a program the script starts."""

import argparse
import os
import subprocess
import sys

import torch

import elasticps as eps
from elasticps.data import FeatureConfig

ID_SPACE = 101
SLOTS = [f"C{i}" for i in range(1, 27)]
NAME = "PADDLE_JOB_TOKEN"


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = eps.nn.SparseEmbedding("embedding", ID_SPACE, 2, columns=SLOTS)
        self.out = torch.nn.Linear(13 + 26 * 2, 1)

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        return self.out(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1))


def report_token() -> None:
    with open("/proc/self/environ", "rb") as handle:
        given = any(entry.startswith(NAME.encode() + b"=") for entry in handle.read().split(b"\0"))
    child = subprocess.run([sys.executable, "-c", f"import os; print({NAME!r} in os.environ)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"token given: {given}; in os.environ: {NAME in os.environ}; in a child: {child}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    args = parser.parse_args()
    report_token()
    eps.init()
    trainer = eps.Trainer(Linear(), optimizer=eps.optim.Adam(lr=1e-2))
    reader = eps.reader.cloud(args.data, batch_size=128, features=FeatureConfig(id_space=ID_SPACE))
    try:
        eps.dist_train(trainer=trainer, reader=reader, num_passes=1)
    finally:
        trainer.close()
    report_token()


if __name__ == "__main__":
    main()
