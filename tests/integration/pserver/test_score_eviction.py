"""Score eviction on real pserver processes over gRPC and etcd: the client splits each push's
show/click counts with its ids, the shards decay them at every pass end, and rows shown without
clicks leave before clicked ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.client import PServerClient
from elasticps.store import Store, open_store
from tests.helpers import job_credentials
from tests.integration.pserver.harness import PServers

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy
# Decay 0.5 a pass end (Paddle's threshold 0.8 and coefficients 0.1 / 1.0 otherwise).
CTR = SPEC(name="ctr", kind=SPEC.SPARSE, dim=4, optimizer=OPT(kind=OPT.ADAGRAD, lr=0.1),
           policy=POLICY(evict=POLICY.SCORE, score_decay=0.5))


@pytest.fixture
def cluster(tmp_path: Path, job_name: str, etcd_server) -> Iterator[tuple[PServers, Store]]:
    store = open_store(etcd_server.url, job_name)
    servers = PServers(tmp_path, etcd_server.url, job_name, num=2)
    try:
        procs = [servers.start(), servers.start()]
        servers.wait_slots(store, {p.pid for p in procs})
        yield servers, store
    finally:
        servers.stop_all()
        store.close()


def _push(client: PServerClient, pass_id: int, ids: np.ndarray, shows: np.ndarray,
          clicks: np.ndarray) -> None:
    grads = np.full((ids.size, 4), 0.1, np.float32)
    responses = client.push(common_pb2.BatchRef(pass_id=pass_id, task_id=0, seq=pass_id), {},
                            {"ctr": (ids, grads)}, {"ctr": (shows, clicks)})
    assert all(r.applied for r in responses)


def test_clicked_rows_outlive_rows_shown_without_clicks(cluster) -> None:
    servers, store = cluster
    with PServerClient(store, job_credentials(servers.job), 2, deadline=30) as client:
        client.declare_tables([CTR])
        client.initialize({})
        # Ids of both shards: 10, 11 clicked (score 6.5), 20, 21 shown 20 times without a
        # click (2.0), 30, 31 shown twice (0.2).
        watched = np.array([10, 11, 20, 21, 30, 31], np.int64)
        _push(client, 0, watched, np.array([20, 20, 20, 20, 2, 2], np.float32),
              np.array([5, 5, 0, 0, 0, 0], np.float32))
        held = []
        for pass_id in range(1, 5):  # each pass begins with a push of an unrelated id
            _push(client, pass_id, np.array([1000 + pass_id], np.int64),
                  np.ones(1, np.float32), np.zeros(1, np.float32))
            held.append(client.pull_held("ctr", watched)[1].tolist())
        # Scores after 1..4 pass ends: 3.25, 1.625, 0.8125, 0.41 / 1.0, 0.5 / 0.1.
        assert held == [[True] * 4 + [False] * 2, [True] * 2 + [False] * 4,
                        [True] * 2 + [False] * 4, [False] * 6]
        stats = client.stats()
        evicted = sum(int(t.get("evicted", 0)) for shard in stats["shards"]
                      for t in shard.get("tables", []) if t["name"] == "ctr")
        assert evicted >= 6 + 3  # the watched rows and the pass openers shown once

        # Counts that do not fit the ids are refused by the client, bad values by the shard.
        ids = np.array([2, 3], np.int64)
        with pytest.raises(InvalidArgumentError, match=r"1 / 1 entries for 2 ids"):
            _push(client, 5, ids, np.ones(1, np.float32), np.zeros(1, np.float32))
        with pytest.raises(InvalidArgumentError, match=r"click 3.0 .* 0 <= click <= show"):
            _push(client, 5, ids, np.ones(2, np.float32), np.full(2, 3, np.float32))
        assert not client.pull_held("ctr", ids)[1].any()  # nothing changed
