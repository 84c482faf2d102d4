"""An export records what each sparse layer reads, so plain PyTorch (no elasticps) rebuilds the
lookups from the manifest alone and scores exactly as the trained model does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from elasticps.data.batch import Bag, Batch, TensorBatch
from elasticps.errors import ConfigError
from elasticps.proto import common_pb2
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.sparse_bag import SparseEmbeddingBag
from elasticps.trainer.trainer import Trainer
from tests.unit.trainer.sgd_tables import SgdTables


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.user = SparseEmbedding("users", 50, 3, columns="user")
        self.context = SparseEmbedding("features", 100, 2, columns=["country", "device"])
        self.genres = SparseEmbeddingBag("features", 100, 2, column="genres", mode="mean")
        self.out = nn.Linear(1 + 3 + 2 * 2 + 2, 1)

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        return self.out(torch.cat([batch.dense, self.user(batch), self.context(batch).flatten(1),
                                   self.genres(batch)], 1)).squeeze(1)


def make_batches(count: int, rows: int = 16) -> list[Batch]:
    rng = np.random.default_rng(2)
    out = []
    for _ in range(count):
        lengths = rng.integers(0, 3, rows)
        out.append(Batch(
            label=rng.integers(0, 2, rows).astype(np.float32),
            dense=rng.normal(size=(rows, 1)).astype(np.float32), dense_names=("age",),
            ids={"user": rng.integers(0, 50, rows), "country": rng.integers(0, 100, rows),
                 "device": rng.integers(0, 100, rows)},
            bags={"genres": Bag(rng.integers(0, 100, int(lengths.sum())),
                                np.r_[0, np.cumsum(lengths)].astype(np.int64))}))
    return out


# -- a scorer as a user would write it: torch and safetensors only ----------------------------


class Lookup(nn.Module):
    def __init__(self, ids: torch.Tensor, rows: torch.Tensor, record: dict[str, Any]) -> None:
        super().__init__()
        self.ids, self.record = ids, record
        self.rows = torch.cat([rows, torch.zeros(1, rows.shape[1])])  # unknown ids: zeros

    def rows_of(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.searchsorted(self.ids, ids).clamp(max=self.ids.numel() - 1)
        return self.rows[torch.where(self.ids[pos] == ids, pos, self.ids.numel())]

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        if self.record["kind"] == "bag":
            bag = batch.bags[self.record["column"]]
            return nn.functional.embedding_bag(
                torch.arange(bag.values.numel()), self.rows_of(bag.values), bag.offsets,
                mode=self.record["mode"], include_last_offset=True)
        columns = self.record["columns"]
        if isinstance(columns, str):
            return self.rows_of(batch.ids[columns])
        return self.rows_of(torch.stack([batch.ids[c] for c in columns], 1))


def rebuild(directory: Path, model: nn.Module) -> nn.Module:
    manifest = json.loads((directory / "manifest.json").read_text())
    tensors = load_file(str(directory / manifest["weights"]))
    for path, record in manifest["layers"].items():
        table = manifest["sparse"][record["table"]]
        model.set_submodule(path, Lookup(tensors[table["ids"]], tensors[table["rows"]], record))
    model.load_state_dict({name: tensors[name] for name in manifest["dense"]}, strict=False)
    return model.eval()


def test_plain_pytorch_rebuilds_every_lookup_from_the_export(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trainer = Trainer(Model(), prefetch=False)
    trainer.attach(SgdTables(lr=0.5), None, "trainer-0")
    train, test = make_batches(4), make_batches(1)[0]
    runner = trainer.runner()
    for k, batch in enumerate(train):
        runner.run(batch, common_pb2.BatchRef(seq=k), None)
    runner.close()
    with pytest.raises(ConfigError, match="needs a trained model"):
        trainer.export(tmp_path / "none")
    trainer.export(tmp_path / "model", train, meta={"note": "x"})  # the ids of the data given
    manifest = json.loads((tmp_path / "model" / "manifest.json").read_text())
    assert manifest["layers"] == {
        "user": {"table": "users", "dim": 3, "kind": "embedding", "columns": "user"},
        "context": {"table": "features", "dim": 2, "kind": "embedding",
                    "columns": ["country", "device"]},
        "genres": {"table": "features", "dim": 2, "kind": "bag", "column": "genres",
                   "mode": "mean", "weighted": False}}
    assert manifest["modules"] == {"user": "users", "context": "features", "genres": "features"}
    assert manifest["meta"] == {"note": "x"}
    # The table "features" holds the ids of both of its layers.
    ids = load_file(str(tmp_path / "model" / "model.safetensors"))["sparse/features/ids"]
    expected = np.unique(np.concatenate([np.r_[b.ids["country"], b.ids["device"],
                                               b.bags["genres"].values] for b in train]))
    np.testing.assert_array_equal(ids.numpy(), expected)

    torch.manual_seed(1)  # other initial values: the export must supply every parameter
    scorer = rebuild(tmp_path / "model", Model())
    # Score rows whose ids the training data holds (the export's), against the trained model.
    seen = train[0].slice(0, 8)
    trainer.model.eval()
    with torch.no_grad():
        expected_scores = trainer.model(seen.to_torch())
        scores = scorer(seen.to_torch())
    np.testing.assert_allclose(scores.numpy(), expected_scores.numpy(), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        scorer(test.to_torch())  # unknown ids read zero rows; no error
