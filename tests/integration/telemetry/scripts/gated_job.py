"""A small CTR job whose trainers wait at the end of pass 0 until the test opens a gate, so a
test can look at a job that is surely running: each trainer writes GATE/<trainer id>.reached at
its first EndPass, then waits for GATE/open (the test creates it). Public API only."""

import argparse
import os
import time
from pathlib import Path

import torch

import elasticps as eps
from elasticps.data import FeatureConfig

ID_SPACE = 1009
SLOTS = [f"C{i}" for i in range(1, 27)]


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = eps.nn.SparseEmbedding("embedding", ID_SPACE, 4, columns=SLOTS)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(13 + 26 * 4, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        return self.mlp(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--gate", required=True)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    config = eps.init()
    gate = Path(args.gate)

    def on_event(event: object) -> None:
        if isinstance(event, eps.events.EndPass) and event.pass_id == 0:
            (gate / f"{config.trainer_id}.reached").write_text(str(os.getpid()))
            deadline = time.monotonic() + 240
            while not (gate / "open").exists():  # the test opens it; nothing else to wait on
                if time.monotonic() > deadline:
                    raise SystemExit("the test never opened the gate")
                time.sleep(0.05)

    torch.manual_seed(1)
    features = FeatureConfig(id_space=ID_SPACE)
    trainer = eps.Trainer(Model(), optimizer=eps.optim.Adam(lr=1e-2))
    reader = eps.reader.cloud(args.data, batch_size=64, features=features)
    test_reader = eps.reader.cloud(args.data + "/test", batch_size=1000, features=features)
    try:
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       test_reader=test_reader, event_handler=on_event)
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
