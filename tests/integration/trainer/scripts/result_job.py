"""A user's training script, public API only: a linear model over the Criteo layout's dense
features and 26 hashed id columns, trained on --data with the test split evaluated at every pass
end. With --publish, the trainer chosen to save the model evaluates the test split again after
dist_train (through a reader, and as an iterable of batches) and publishes its own result;
without it the script publishes nothing and the job's result is the trainers' automatic one."""

import argparse

import torch

import elasticps as eps
from elasticps.data import FeatureConfig, open_dataset

ID_SPACE = 1009
SLOTS = [f"C{i}" for i in range(1, 27)]


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = eps.nn.SparseEmbedding("embedding", ID_SPACE, 2, columns=SLOTS)
        self.out = torch.nn.Linear(13 + 26 * 2, 1)

    def forward(self, batch) -> torch.Tensor:  # an elasticps.data.TensorBatch
        return self.out(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    eps.init()
    torch.manual_seed(1)
    features = FeatureConfig(id_space=ID_SPACE)
    trainer = eps.Trainer(Linear(), optimizer=eps.optim.Adam(lr=1e-2))
    reader = eps.reader.cloud(args.data, batch_size=128, features=features)
    test_url = args.data + "/test"
    test_reader = eps.reader.cloud(test_url, batch_size=1000, features=features)
    try:
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       test_reader=test_reader)
        if args.publish and trainer.request_save_model(block_seconds=60):
            by_reader = trainer.evaluate(test_reader)
            by_batches = trainer.evaluate(open_dataset(test_url).iter_batches(  # bigger batches
                700, features=features))
            assert trainer.stats is not None
            eps.publish_result({"mine": True, "auc": by_reader["auc"], "by_reader": by_reader,
                                "by_batches": by_batches,
                                "end_pass": trainer.stats.pass_metrics[-1],
                                "not_a_number": float("nan")})
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
