"""A small CTR job whose one trainer trains a pass, then fails in its own code (a step after
training raises), so a test can look at a failed job's page. Public API only."""

import argparse

import torch

import elasticps as eps
from elasticps.data import FeatureConfig

ID_SPACE = 1009
SLOTS = [f"C{i}" for i in range(1, 27)]


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = eps.nn.SparseEmbedding("embedding", ID_SPACE, 4, columns=SLOTS)
        self.mlp = torch.nn.Linear(13 + 26 * 4, 1)

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        return self.mlp(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1))


def check_the_export(rows: int) -> None:
    raise ValueError(f"the export holds {rows} rows; the scorer needs at least one")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    args = parser.parse_args()
    eps.init()
    torch.manual_seed(1)
    trainer = eps.Trainer(Model(), optimizer=eps.optim.Adam(lr=1e-2))
    reader = eps.reader.cloud(args.data, batch_size=64, features=FeatureConfig(id_space=ID_SPACE))
    try:
        eps.dist_train(trainer=trainer, reader=reader, num_passes=1)
        trainer.report_stage("checking the export")
        check_the_export(0)
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
