"""A user's training script, as `elasticps chaos` gets it: elasticps' public API only, no
imports from the repository. A linear model over the 13 dense features and the 26 hashed ids
(one 4-wide table on the pservers), trained on the dataset at --data for --passes passes."""

import argparse

import torch

import elasticps as eps
from elasticps.data import FeatureConfig

ID_SPACE = 1009
DIM = 4
BATCH_SIZE = 128


SLOTS = [f"C{i}" for i in range(1, 27)]  # the Criteo layout's 26 id columns


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = eps.nn.SparseEmbedding("embedding", ID_SPACE, DIM, columns=SLOTS)
        self.out = torch.nn.Linear(13 + 26 * DIM, 1)

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        return self.out(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1)).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="a dataset from `elasticps data synth`")
    parser.add_argument("--passes", type=int, default=1)
    args = parser.parse_args()
    eps.init()
    torch.manual_seed(1)
    trainer = eps.Trainer(Tiny(), optimizer=eps.optim.Adam(lr=1e-2))  # loss: by the label kind
    reader = eps.reader.cloud(args.data, batch_size=BATCH_SIZE,
                              features=FeatureConfig(id_space=ID_SPACE))
    try:
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes)
    finally:
        trainer.close()  # a trainer scaled away hands its task back at once


if __name__ == "__main__":
    main()
