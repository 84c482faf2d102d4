"""A small CTR job the Prometheus test watches stall and fail. Its trainer waits at three gates
the test opens (files in GATE): at the start of pass 0 for GATE/go (so Prometheus scrapes the
whole pass), at the end of pass 0 for GATE/resume (the job stalls), and once the master has
failed the job for GATE/exit (so the failed master is still there to scrape). Each wait is
announced with a file (ready, stalled, failed). Public API only."""

import argparse
import time
from pathlib import Path

import torch

import elasticps as eps
from elasticps.data import FeatureConfig
from elasticps.errors import FailedPreconditionError

ID_SPACE = 1009
SLOTS = [f"C{i}" for i in range(1, 27)]


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = eps.nn.SparseEmbedding("embedding", ID_SPACE, 4, columns=SLOTS)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(13 + 26 * 4, 8), torch.nn.ReLU(),
                                       torch.nn.Linear(8, 1))

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        return self.mlp(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1))


def wait_at(gate: Path, reached: str, opens: str, detail: str = "") -> None:
    (gate / reached).write_text(detail)
    deadline = time.monotonic() + 120
    while not (gate / opens).exists():  # the test opens it; nothing else to wait on
        if time.monotonic() > deadline:
            raise SystemExit(f"the test never opened {opens}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--gate", required=True)
    args = parser.parse_args()
    eps.init()
    gate = Path(args.gate)

    def on_event(event: object) -> None:
        if isinstance(event, eps.events.BeginPass) and event.pass_id == 0:
            wait_at(gate, "ready", "go")
        if isinstance(event, eps.events.EndPass) and event.pass_id == 0:
            wait_at(gate, "stalled", "resume")

    torch.manual_seed(1)
    trainer = eps.Trainer(Model(), optimizer=eps.optim.Adam(lr=1e-2))
    reader = eps.reader.cloud(args.data, batch_size=64, features=FeatureConfig(id_space=ID_SPACE))
    try:
        eps.dist_train(trainer=trainer, reader=reader, num_passes=2, event_handler=on_event)
    except FailedPreconditionError as exc:  # the master failed the job
        wait_at(gate, "failed", "exit", str(exc))
        raise SystemExit(1) from exc
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
