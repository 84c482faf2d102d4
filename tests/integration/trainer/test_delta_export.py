"""Delta exports from a trainer on two real pserver processes whose table evicts (max_rows):
base + deltas, loaded by the plain loader, equal a full export of the same final state, and the
evicted rows are gone from both (tombstones)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from elasticps.data.batch import Batch, TensorBatch
from elasticps.nn import SparseEmbedding
from elasticps.proto import common_pb2
from elasticps.pserver.client import PServerClient
from elasticps.store import open_store
from elasticps.trainer.export_chain import load_export
from elasticps.trainer.optim import SGD
from elasticps.trainer.trainer import Trainer
from tests.helpers import job_credentials
from tests.integration.pserver.harness import PServers

MAX_ROWS = 40  # per shard: 80 rows in all, far fewer than the ids pushed


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = SparseEmbedding("t", 0, 4, columns="c", max_rows=MAX_ROWS)
        self.out = nn.Linear(4 + 1, 1)

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        return self.out(torch.cat([batch.dense, self.emb(batch)], 1)).squeeze(1)


def batch(ids: np.ndarray, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(label=rng.integers(0, 2, ids.size).astype(np.float32),
                 dense=rng.normal(size=(ids.size, 1)).astype(np.float32), dense_names=("x",),
                 ids={"c": ids.astype(np.int64)}, bags={})


@pytest.fixture
def client(tmp_path: Path, job_name: str, etcd_server) -> Iterator[PServerClient]:
    store = open_store(etcd_server.url, job_name)
    servers = PServers(tmp_path, etcd_server.url, job_name, num=2)
    try:
        servers.wait_slots(store, {servers.start().pid, servers.start().pid})
        with PServerClient(store, job_credentials(job_name), 2, deadline=30) as params:
            yield params
    finally:
        servers.stop_all()
        store.close()


def test_base_and_deltas_equal_a_full_export_after_evictions(tmp_path: Path,
                                                            client: PServerClient) -> None:
    torch.manual_seed(0)
    trainer = Trainer(Model(), optimizer=SGD(lr=0.5), prefetch=False)
    trainer.attach(client, None, "trainer-0")
    runner = trainer.runner()
    everything = {"t": np.arange(400)}
    for seq, start in enumerate(range(0, 60, 20)):  # ids 0..59: all held
        runner.run(batch(np.arange(start, start + 20), seq), common_pb2.BatchRef(seq=seq), None)
    trainer.export(tmp_path / "e0", everything)
    for seq, start in enumerate(range(60, 160, 20), 10):  # 100 new ids: old rows evicted
        runner.run(batch(np.arange(start, start + 20), seq), common_pb2.BatchRef(seq=seq), None)
    trainer.export(tmp_path / "e1", everything, parent=tmp_path / "e0")
    runner.run(batch(np.arange(150, 170), 99), common_pb2.BatchRef(seq=99), None)
    trainer.export(tmp_path / "e2", everything, parent=tmp_path / "e1")
    trainer.export(tmp_path / "full", everything)
    runner.close()

    chained, _ = load_export(tmp_path / "e2")
    full, manifest = load_export(tmp_path / "full")
    assert sorted(chained) == sorted(full)
    for key in full:
        torch.testing.assert_close(chained[key], full[key], rtol=0, atol=0)
    held = full["sparse/t/ids"].numpy()
    assert held.size == manifest["sparse"]["t"]["count"] <= 2 * MAX_ROWS  # only held rows
    assert not np.isin(np.arange(0, 20), held).any()  # the oldest rows were evicted
    first = json.loads((tmp_path / "e1" / "manifest.json").read_text())["sparse"]["t"]
    last = json.loads((tmp_path / "e2" / "manifest.json").read_text())["sparse"]["t"]
    assert first["removed"] > 0
    assert last["count"] < held.size
    assert client.stats()["rows_evicted"] >= first["removed"]
