"""A resharding on real checkpoint files and a real (embedded) store: what the commit publishes,
what it refuses, and that the earlier layouts survive a checkpoint round trip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elasticps.errors import (
    CheckpointError,
    FailedPreconditionError,
    InvalidArgumentError,
    StoreUnavailableError,
)
from elasticps.pserver.checkpoint import format as fmt
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.checkpoint.inspection import format_report, inspect_url
from elasticps.pserver.reshard.commit import commit_reshard
from elasticps.pserver.reshard.split import reshard_snapshots
from elasticps.pserver.shard import ShardState
from elasticps.store import Store, open_store
from elasticps.store.keys import (
    PSERVER_CHECKPOINT_PREFIX,
    PServerLayout,
    PServerSlot,
    pserver_slot,
    read_pserver_layout,
)
from tests.unit.pserver.test_reshard import Job, _batch


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"file://{tmp_path}/job.db", "reshard") as handle:
        yield handle


def _checkpointed_job(store: Store, url: str, n: int) -> Job:
    job = Job.fresh(n)
    for k in range(6):
        job.push(*_batch(k))
    job.push(*_batch(6), only=[0])  # one batch cut by the resharding
    for i, shard in enumerate(job.shards):
        ShardCheckpoints(url, i, n, store=store).save(shard.snapshot()[0])
    return job


def _restored(store: Store, url: str, m: int) -> Job:
    shards = []
    for j in range(m):
        loaded = ShardCheckpoints(url, j, m, store=store).load_newest()
        assert loaded is not None
        state = ShardState(j, m)
        state.restore(loaded[0], loaded[1].id)
        shards.append(state)
    return Job(shards)


def test_a_commit_publishes_the_new_layout_and_its_checkpoints_and_forgets_the_old(
        store: Store, tmp_path: Path) -> None:
    url = str(tmp_path / "ckpt")
    old = _checkpointed_job(store, url, 2)
    result = commit_reshard(store, url, 2, 3)

    assert (result.old_shards, result.new_shards, result.generation) == (2, 3, 1)
    layout = read_pserver_layout(store)
    assert layout is not None
    assert (layout.shards, layout.generation) == (3, 1)
    keys = sorted(kv.key.removeprefix(PSERVER_CHECKPOINT_PREFIX)
                  for kv in store.get_prefix(PSERVER_CHECKPOINT_PREFIX))
    assert [k.split("/")[0] for k in keys] == ["0", "1", "2"]  # the old manifests are gone
    assert not list((tmp_path / "ckpt" / "shard-0-of-2").glob("*.safetensors"))
    new = _restored(store, url, 3)
    np.testing.assert_array_equal(new.dense(), old.dense())
    np.testing.assert_array_equal(new.rows(), old.rows())
    assert [len(s.legacy) for s in new.shards] == [1, 1, 1]  # batch 6 is remembered

    commit_reshard(store, url, 2, 2)  # and back: the ids keep growing, the newest wins
    back = _restored(store, url, 2)
    np.testing.assert_array_equal(back.rows(), old.rows())
    assert read_pserver_layout(store).generation == 2  # type: ignore[union-attr]


def test_a_commit_is_refused_while_a_pserver_holds_a_slot_and_changes_nothing(
        store: Store, tmp_path: Path) -> None:
    url = str(tmp_path / "ckpt")
    _checkpointed_job(store, url, 2)
    store.put(pserver_slot(1), PServerSlot("127.0.0.1:1").encode())
    before = sorted(kv.key for kv in store.get_prefix(PSERVER_CHECKPOINT_PREFIX))
    with pytest.raises(FailedPreconditionError, match=r"slot\(s\) \[1\] are still held"):
        commit_reshard(store, url, 2, 3)
    assert read_pserver_layout(store) is None
    assert sorted(kv.key for kv in store.get_prefix(PSERVER_CHECKPOINT_PREFIX)) == before


def test_a_commit_needs_a_checkpoint_of_every_old_shard(store: Store, tmp_path: Path) -> None:
    url = str(tmp_path / "ckpt")
    job = Job.fresh(2)
    ShardCheckpoints(url, 0, 2, store=store).save(job.shards[0].snapshot()[0])
    with pytest.raises(CheckpointError, match="shard 1 of 2 has no readable checkpoint"):
        commit_reshard(store, url, 2, 3)
    with pytest.raises(InvalidArgumentError, match="already has 2"):
        commit_reshard(store, url, 2, 2)
    assert read_pserver_layout(store) is None


def test_earlier_layouts_survive_a_checkpoint_round_trip_and_bad_ones_are_refused(
        tmp_path: Path) -> None:
    job = Job.fresh(2)
    job.push(*_batch(0), only=[1])
    snap = reshard_snapshots([s.snapshot()[0] for s in job.shards], 3)[2]
    checkpoints = ShardCheckpoints(str(tmp_path), 2, 3)
    manifest = checkpoints.save(snap)
    loaded, _ = checkpoints.load_newest()  # type: ignore[misc]
    assert [layout.num_shards for layout in loaded.legacy] == [2]
    assert loaded.legacy[0].applied == snap.legacy[0].applied
    assert loaded.legacy[0].applied[1].contains(0, 0, 0)
    (report,) = inspect_url(str(tmp_path / "shard-2-of-3"))
    assert report["earlier_layouts"] == [2]
    assert "resharded from layouts of [2] shards" in format_report(report)

    metadata, tensors = checkpoints.read_verified(manifest)
    with pytest.raises(CheckpointError, match="legacy_shards"):
        fmt.to_snapshot({**metadata, "legacy_shards": [2, "x"]}, tensors)
    del tensors["legacy.0.1.extra"]
    with pytest.raises(CheckpointError, match=r"legacy\.0\.1\."):
        fmt.to_snapshot(metadata, tensors)


class _DeletesFail:
    """The job's store, except that deleting a key fails (an outage right after the commit)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def delete(self, key: str) -> bool:
        raise StoreUnavailableError(f"cannot delete {key}: the store went away")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_cleanup_that_fails_after_the_commit_does_not_undo_it(store: Store,
                                                                 tmp_path: Path) -> None:
    url = str(tmp_path / "ckpt")
    old = _checkpointed_job(store, url, 2)
    result = commit_reshard(_DeletesFail(store), url, 2, 3)  # type: ignore[arg-type]
    assert result.new_shards == 3
    assert read_pserver_layout(store) == PServerLayout(3, 1)
    np.testing.assert_array_equal(_restored(store, url, 3).rows(), old.rows())
