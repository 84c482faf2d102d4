"""A forged checkpoint manifest (in the store and in the shard directory) that names a file
outside the checkpoint directory is refused: nothing outside is deleted or read, the pserver
falls back to its real checkpoints, and `elasticps checkpoint inspect` reports it as bad.
The issue's original forgery, a manifest whose id is a number, falls back too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.store import open_store
from elasticps.store.keys import checkpoint_key
from tests.helpers import run_cli

SPEC = pserver_pb2.TableSpec


def _shard(step: int) -> ShardState:
    state = ShardState(0, 1)
    state.declare([SPEC(name="w", kind=SPEC.DENSE, shape=[4],
                        optimizer=pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.SGD,
                                                            lr=1.0))])
    state.init_dense({"w": np.zeros(4, dtype=np.float32)})
    for seq in range(step):
        state.push(BatchKey(0, 0, seq), {"w": np.ones(4, dtype=np.float32)}, {})
    return state


def _forge(ckpt: ShardCheckpoints, store_put: object, checkpoint_id: str, fields: dict) -> None:
    doc = {"id": checkpoint_id, "shard": 0, "num_shards": 1, "size": 5,
           "sha256": "0" * 64, "created_unix": 1.0, **fields}
    body = json.dumps(doc).encode()
    Path(ckpt.dir, f"ckpt-{checkpoint_id}.json").write_bytes(body)
    store_put(checkpoint_key(0, checkpoint_id), body)  # type: ignore[operator]


def test_a_traversal_manifest_is_refused_with_nothing_deleted(tmp_path: Path,
                                                              job_name: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("not a checkpoint")
    store = open_store(f"file://{tmp_path}/job.db", job_name)
    try:
        ckpt = ShardCheckpoints(f"file://{tmp_path}/ckpt", 0, 1, keep=1, store=store)
        first = ckpt.save(_shard(1).snapshot()[0])
        relative = os.path.relpath(victim, ckpt.dir)
        assert relative.startswith("..")
        # A forged "newest" checkpoint naming the victim, and one with a numeric id.
        _forge(ckpt, store.put, "999999999999", {"data": relative})
        Path(ckpt.dir, "ckpt-7.json").write_text(json.dumps(
            {"id": 7, "shard": 0, "num_shards": 1, "data": relative, "size": 5,
             "sha256": "0" * 64, "created_unix": 1.0}))
        # Listing, loading and pruning (keep=1 prunes everything but the newest) go on.
        assert [m.id for m in ckpt.manifests()] == [first.id]
        second = ckpt.save(_shard(2).snapshot()[0])
        loaded = ckpt.load_newest()
        assert loaded is not None
        assert loaded[1].id == second.id
        assert loaded[0].dense["w"].step == 2
        assert victim.read_text() == "not a checkpoint"  # nothing outside was deleted
    finally:
        store.close()
    # `elasticps checkpoint inspect` reports the forged manifests; it reads no victim.
    done = run_cli("checkpoint", "inspect", "--json", f"file://{tmp_path}/ckpt")
    assert done.returncode == 1  # some checkpoint is bad
    reports = json.loads(done.stdout)
    bad = [r for r in reports if not r["checksum_ok"]]
    assert len(bad) == 2
    assert all("its data file must be" in r["problem"] or "not 1-20 decimal digits"
               in r["problem"] for r in bad)
    assert all(str(victim) not in json.dumps(r) for r in reports)
    assert victim.exists()
