"""Correctness: one trainer, plain SGD, no shuffling, no overlap. The parameters the pservers end
with equal those of a single-process PyTorch run of the same model on the same batches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file

from elasticps.data import FeatureConfig, open_dataset
from elasticps.data.batch import TensorBatch
from tests.helpers import REPO

sys.path.insert(0, str(REPO / "examples/ctr"))
from models import build

ROWS, BATCH, LR, HIDDEN, ID_SPACE = 3000, 100, 0.05, (16, 8), 1_000_001


class CompactEmbedding(torch.nn.Module):
    """A local embedding over the few ids the data holds (sorted ``ids``, rows as a Parameter),
    reading the batch's slot columns as the model's SparseEmbedding does."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray) -> None:
        super().__init__()
        self.ids = torch.from_numpy(ids)
        self.weight = torch.nn.Parameter(torch.from_numpy(rows.copy()))
        self.columns: tuple[str, ...] = ()

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        ids = torch.stack([batch.ids[c] for c in self.columns], dim=1)
        return self.weight[torch.searchsorted(self.ids, ids)]


def test_distributed_sgd_matches_local_pytorch(tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    initial = tmp_path / "initial.safetensors"
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", "1", "--pservers", "2",
            "--workdir", str(workdir), "--grace", "5", str(REPO / "examples/ctr/train.py"),
            "--rows", str(ROWS), "--rows-per-chunk", "700", "--passes", "2",
            "--hidden", ",".join(map(str, HIDDEN)), "--model", "wide_deep",
            "--batch-size", str(BATCH), "--optimizer", "sgd", "--lr", str(LR), "--no-prefetch",
            "--max-vocab", "50", "--dump-initial", str(initial)]
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]

    # The reference: same initial values, same batches in the same order, torch SGD.
    start = load_file(str(initial))
    tables = {t: CompactEmbedding(start[f"sparse/{t}/ids"], start[f"sparse/{t}/rows"])
              for t in ("embedding", "wide")}
    def make_embedding(table: str, dim: int, columns: tuple[str, ...]) -> torch.nn.Module:
        tables[table].columns = tuple(columns)
        return tables[table]

    model = build("wide_deep", make_embedding, embedding_dim=10, hidden=HIDDEN)
    dense_names = [n for n in start if not n.startswith("sparse/")]
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name in dense_names:
            params[name].copy_(torch.from_numpy(start[name]))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    dataset = open_dataset(str(workdir / "data"))
    assert len(dataset.chunks) == 5  # tasks of one chunk, handed out in order to one trainer
    for _ in range(2):
        for batch in dataset.iter_batches(BATCH, features=FeatureConfig(id_space=ID_SPACE,
                                                                        dense_norm="log-missing")):
            optimizer.zero_grad()
            loss_fn(model(batch.to_torch()), torch.from_numpy(batch.label)).backward()
            optimizer.step()

    final = load_file(str(workdir / "model" / "model.safetensors"))
    for name in dense_names:
        np.testing.assert_allclose(final[name], params[name].detach().numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
    for table, emb in tables.items():
        np.testing.assert_array_equal(final[f"sparse/{table}/ids"], emb.ids.numpy())
        np.testing.assert_allclose(final[f"sparse/{table}/rows"], emb.weight.detach().numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=table)
    # Training moved the parameters: the comparison is not between two untouched copies.
    assert not np.allclose(final["sparse/embedding/rows"], start["sparse/embedding/rows"])
