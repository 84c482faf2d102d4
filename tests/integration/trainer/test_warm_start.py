"""A warm start from an export on two real pserver processes: a new job's tables start with the
export's dense values and sparse rows (a delta chain applied), training goes on from them, and a
second trainer joining later changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from elasticps.data.batch import Batch, TensorBatch
from elasticps.errors import ConfigError
from elasticps.nn import SparseEmbedding
from elasticps.proto import common_pb2
from elasticps.pserver.client import PServerClient
from elasticps.store import open_store
from elasticps.trainer.export_chain import load_state
from elasticps.trainer.optim import SGD
from elasticps.trainer.trainer import Trainer
from tests.helpers import job_credentials
from tests.integration.pserver.harness import PServers


class Model(nn.Module):
    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.emb = SparseEmbedding("t", 0, dim, columns="c")
        self.out = nn.Linear(dim + 1, 1)

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        return self.out(torch.cat([batch.dense, self.emb(batch)], 1)).squeeze(1)


def batch(ids: np.ndarray, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(label=rng.integers(0, 2, ids.size).astype(np.float32),
                 dense=rng.normal(size=(ids.size, 1)).astype(np.float32), dense_names=("x",),
                 ids={"c": ids.astype(np.int64)}, bags={})


class Job:
    """Two pserver processes of one job, and clients to them."""

    def __init__(self, tmp_path: Path, url: str, name: str) -> None:
        tmp_path.mkdir(parents=True)
        self.store = open_store(url, name)
        self.servers = PServers(tmp_path, url, name, num=2)
        self.servers.wait_slots(self.store, {self.servers.start().pid,
                                             self.servers.start().pid})
        self.name = name
        self.clients: list[PServerClient] = []

    def client(self) -> PServerClient:
        client = PServerClient(self.store, job_credentials(self.name), 2, deadline=30)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.servers.stop_all()
        self.store.close()


@pytest.fixture
def jobs(tmp_path: Path, job_name: str, etcd_server) -> Iterator[list[Job]]:
    made = [Job(tmp_path / "first", etcd_server.url, job_name),
            Job(tmp_path / "second", etcd_server.url, f"{job_name}-warm")]
    try:
        yield made
    finally:
        for job in made:
            job.close()


def test_a_new_jobs_tables_start_from_an_export_and_train_on_from_it(
        tmp_path: Path, jobs: list[Job]) -> None:
    first, second = jobs
    torch.manual_seed(0)
    trained = Trainer(Model(), optimizer=SGD(lr=0.5), prefetch=False)
    trained.attach(first.client(), None, "trainer-0")
    runner = trained.runner()
    for seq in range(3):
        runner.run(batch(np.arange(seq * 10, seq * 10 + 30), seq),
                   common_pb2.BatchRef(seq=seq), None)
    trained.export(tmp_path / "e0", {"t": np.arange(100)})
    runner.run(batch(np.arange(50, 70), 9), common_pb2.BatchRef(seq=9), None)
    runner.close()
    trained.export(tmp_path / "e1", {"t": np.arange(100)}, parent=tmp_path / "e0")
    export = load_state(tmp_path / "e1")  # the chain, applied
    ids, rows = export.sparse["t"]
    assert ids.size == 70  # ids 0..39 and 50..69 were trained

    torch.manual_seed(1)  # another random start, which the export replaces
    fresh = Trainer(Model(), optimizer=SGD(lr=0.5), prefetch=False)
    fresh.warm_start(tmp_path / "e1")
    client = second.client()
    fresh.attach(client, None, "trainer-0")
    for name, value in fresh.pull_dense().items():
        np.testing.assert_array_equal(value, export.dense[name])
    held_ids, held_rows = fresh.held_rows("t", np.arange(100))
    np.testing.assert_array_equal(held_ids, ids)
    np.testing.assert_array_equal(held_rows, rows)
    assert client.stats()["rows_admitted"] == ids.size

    # Training goes on from the export's values; a trainer joining later sends nothing.
    runner = fresh.runner()
    runner.run(batch(np.arange(0, 5), 20), common_pb2.BatchRef(seq=0), None)
    runner.close()
    _, moved = fresh.held_rows("t", np.arange(0, 10))
    assert (moved[:5] != rows[:5]).any(axis=1).all()  # trained: moved from the export
    np.testing.assert_array_equal(moved[5:], rows[5:10])  # not trained: still the export's
    late = Trainer(Model(), optimizer=SGD(lr=0.5), prefetch=False)
    late.warm_start(tmp_path / "e0")  # another export: ignored, the tables are initialised
    late.attach(second.client(), None, "trainer-1")
    np.testing.assert_array_equal(late.held_rows("t", np.arange(0, 10))[1], moved)

    with pytest.raises(ConfigError, match="comes before connect"):
        fresh.warm_start(tmp_path / "e1")
    with pytest.raises(ConfigError, match=r"'out.weight' of shape \[1, 5\], the model \[1, 9\]"):
        Trainer(Model(dim=8), optimizer=SGD(lr=0.5)).warm_start(tmp_path / "e1")
