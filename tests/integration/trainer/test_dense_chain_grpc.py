"""A trainer alone on two real pserver processes skips its dense pulls (the shards answer
"unchanged" over gRPC) and trains exactly what it trains pulling every time, bit for bit; a
second trainer's push makes it pull again."""

from __future__ import annotations

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
from elasticps.trainer.optim import Adam
from elasticps.trainer.step import StepRunner
from elasticps.trainer.trainer import Trainer
from tests.helpers import job_credentials
from tests.integration.pserver.harness import PServers

BATCHES = 24


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = SparseEmbedding("t", 500, 4, columns="c")
        self.mlp = nn.Sequential(nn.Linear(4 + 2, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        return self.mlp(torch.cat([batch.dense, self.emb(batch)], 1)).squeeze(1)


def _data() -> list[Batch]:
    rng = np.random.default_rng(5)
    return [Batch(label=rng.integers(0, 2, 64).astype(np.float32),
                  dense=rng.normal(size=(64, 2)).astype(np.float32), dense_names=("x", "y"),
                  ids={"c": rng.integers(0, 500, 64)}, bags={})
            for _ in range(BATCHES)]


@pytest.fixture
def two_jobs(tmp_path: Path, job_name: str, etcd_server) -> Iterator[list[PServerClient]]:
    """Two jobs of two pserver processes each: one trains with the chain, one without."""
    servers, clients, stores = [], [], []
    try:
        for job in (job_name, job_name + "-b"):
            store = open_store(etcd_server.url, job)
            stores.append(store)
            group = PServers(tmp_path / job, etcd_server.url, job, num=2)
            (tmp_path / job).mkdir()
            servers.append(group)
            group.wait_slots(store, {group.start().pid, group.start().pid})
            clients.append(PServerClient(store, job_credentials(job), 2, deadline=30))
        yield clients
    finally:
        for client in clients:
            client.close()
        for group in servers:
            group.stop_all()
        for store in stores:
            store.close()


def _train(client: PServerClient, chain: bool, data: list[Batch]) -> StepRunner:
    torch.manual_seed(0)
    trainer = Trainer(Model(), optimizer=Adam(lr=0.01))  # prefetch and own update: the defaults
    trainer.attach(client, None, "trainer-0")
    runner = trainer.runner()
    assert runner.dense_chain is not None  # a real client: the chain is on by default
    if not chain:
        runner.dense_chain = None
    for seq, batch in enumerate(data):
        runner.run(batch, common_pb2.BatchRef(seq=seq),
                   data[seq + 1] if seq + 1 < len(data) else None)
    runner.flush()
    return runner


def test_skipped_pulls_train_bit_for_bit_what_pulling_trains(two_jobs: list[PServerClient]
                                                              ) -> None:
    data = _data()
    with_chain = _train(two_jobs[0], True, data)
    _train(two_jobs[1], False, data).close()
    chain = with_chain.dense_chain
    assert chain is not None
    assert chain.live
    assert chain.skipped == BATCHES - 1  # every pull after the first came back "unchanged"
    ours, theirs = two_jobs[0].pull_dense(), two_jobs[1].pull_dense()
    assert sorted(ours) == ["mlp.0.bias", "mlp.0.weight", "mlp.2.bias", "mlp.2.weight"]
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    ids = np.arange(500)
    np.testing.assert_array_equal(two_jobs[0].pull_sparse("t", ids),
                                  two_jobs[1].pull_sparse("t", ids))
    assert not np.array_equal(ours["mlp.2.weight"], Model().mlp[2].weight.detach().numpy())

    # Another trainer pushes to the first job: the next pull reads the shards again.
    other = {n: np.ones_like(v) for n, v in ours.items()}
    two_jobs[0].push(common_pb2.BatchRef(seq=1000, trainer="other"), other, {})
    with_chain.run(data[0], common_pb2.BatchRef(seq=BATCHES), None)
    assert not chain.live
    assert chain.skipped == BATCHES - 1
    with_chain.close()
