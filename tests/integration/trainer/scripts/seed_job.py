"""The seed's shape, public API only: one ``dist_train(..., paddle_job=Job(...))`` call that
trains inside the job and, run as ``python seed_job.py``, launches that job and follows it
through the handle it returns (``status_url()``, ``wait() -> JobResult``)."""

import argparse

import torch

import elasticps as eps
from elasticps.data import FeatureConfig

SLOTS = [f"C{i}" for i in range(1, 27)]


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = eps.nn.SparseEmbedding("embedding", 1009, 2, columns=SLOTS)
        self.out = torch.nn.Linear(13 + 26 * 2, 1)

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        return self.out(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    eps.init()
    trainer = eps.Trainer(Linear(), optimizer=eps.optim.Adam(lr=1e-2))
    reader = eps.reader.cloud(args.data, batch_size=128, features=FeatureConfig(id_space=1009))
    job = eps.dist_train(trainer=trainer, reader=reader, num_passes=1, workdir=args.workdir,
                         paddle_job=eps.Job(trainers=2, pservers=1, backend="local"))
    result = job.wait()  # inside: this trainer's part, over; outside: the whole job
    if job.in_job:
        print(f"trainer done: {result.state}, {result.summary['samples']} samples", flush=True)
        trainer.close()
        return
    print("view job status at:", job.status_url())
    print(f"job result: {result.state}, exit code {result.exit_code}, "
          f"{result.summary['samples']} samples by {result.summary['trainers']} trainers")
    raise SystemExit(result.exit_code)


if __name__ == "__main__":
    main()
