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
from elasticps.proto import common_pb2, pserver_pb2, pserver_pb2_grpc
from elasticps.pserver.client import PServerClient
from elasticps.rpc import call, encode_tensor, make_channel
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
def two_jobs(request: pytest.FixtureRequest, tmp_path: Path, job_name: str, etcd_server
             ) -> Iterator[list[PServerClient]]:
    """Two jobs of two pserver processes each: one trains with the chain, one without. Their
    clients send dense gradients as the test's parameter says (float32 unless given)."""
    dense_grad_dtype = getattr(request, "param", "float32")
    servers, clients, stores = [], [], []
    try:
        for job in (job_name, job_name + "-b"):
            store = open_store(etcd_server.url, job)
            stores.append(store)
            group = PServers(tmp_path / job, etcd_server.url, job, num=2)
            (tmp_path / job).mkdir()
            servers.append(group)
            group.wait_slots(store, {group.start().pid, group.start().pid})
            clients.append(PServerClient(store, job_credentials(job), 2, deadline=30,
                                         dense_grad_dtype=dense_grad_dtype))
        yield clients
    finally:
        for client in clients:
            client.close()
        for group in servers:
            group.stop_all()
        for store in stores:
            store.close()


def _train(client: PServerClient, chain: bool, data: list[Batch],
           grad_dtype: str = "float32") -> StepRunner:
    torch.manual_seed(0)
    trainer = Trainer(Model(), optimizer=Adam(lr=0.01))  # prefetch and own update: the defaults
    trainer.dense.grad_dtype = grad_dtype  # as Trainer.connect sets it from the job's config
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


@pytest.mark.parametrize("two_jobs", ["bfloat16"], indirect=True)
def test_bfloat16_gradients_keep_the_skipped_pulls_exact(two_jobs: list[PServerClient]) -> None:
    """With dense gradients sent as bfloat16 the trainer's own replica applies the rounded
    values the pservers receive, so skipping pulls still trains bit for bit what pulling
    trains (a replica that applied the unrounded gradients drifts from the pservers)."""
    data = _data()
    with_chain = _train(two_jobs[0], True, data, "bfloat16")
    _train(two_jobs[1], False, data, "bfloat16").close()
    chain = with_chain.dense_chain
    assert chain is not None
    assert chain.skipped == BATCHES - 1
    ours, theirs = two_jobs[0].pull_dense(), two_jobs[1].pull_dense()
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    with_chain.close()


def test_a_pull_that_finds_only_some_shards_changed_reads_every_shard(
        two_jobs: list[PServerClient]) -> None:
    """Values are all or nothing: when one shard's dense state moved and the other's did not,
    the client reads both again, and the tags it returns are the new ones."""
    client = two_jobs[0]
    torch.manual_seed(0)
    Trainer(Model(), optimizer=Adam(lr=0.01)).attach(client, None, "trainer-0")
    known = client.pull_dense_tagged().tags
    assert client.pull_dense_tagged(if_changed=known).values is None

    # A push of shard 0's slice of one table, straight at shard 0 over the wire.
    stub = pserver_pb2_grpc.ParameterServerStub(
        make_channel(str(client.addresses()[0]), client.credentials, "pserver"))
    grad = np.ones(1, np.float32)  # mlp.2.bias holds one value: all of it on shard 0
    call(stub.Push, pserver_pb2.PushRequest(
        batch=common_pb2.BatchRef(seq=7), dense=[pserver_pb2.NamedTensor(
            name="mlp.2.bias", tensor=encode_tensor(grad))]), timeout=10)

    pulled = client.pull_dense_tagged(if_changed=known)
    assert pulled.values is not None
    assert pulled.tags[0] != known[0]
    assert pulled.tags[1] == known[1]
    for name, values in client.pull_dense().items():
        np.testing.assert_array_equal(pulled.values[name], values, err_msg=name)
