"""The oracle's count: parameter values of shards that applied batches 0, 1 or 2 times are read
back from checkpoints and every count that is not exactly 1 is found (the check can fail)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elasticps.chaos.oracle import (
    COUNTER,
    TABLE,
    OracleResult,
    OracleSpec,
    ShardCount,
    check_oracle,
    write_oracle_data,
)
from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.shard import BatchKey, ShardState

SPEC = pserver_pb2.TableSpec
SGD = pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.SGD, lr=1.0)
ROWS, BATCH, SHARDS = 8, 4, 2  # 2 batches, 1 pass, 2 shards


def shard_applying(shard: int, times: dict[int, int]) -> ShardState:
    """A shard on which batch b (rows 4b..4b+3) was applied ``times[b]`` times, as the oracle
    model's pushes do it: -1 per counting row of the batch, -1 on this shard's counter."""
    state = ShardState(shard, SHARDS)
    state.declare([SPEC(name=TABLE, kind=SPEC.SPARSE, dim=1, id_space=ROWS * SHARDS,
                        optimizer=SGD, initializer=pserver_pb2.Initializer(
                            kind=pserver_pb2.Initializer.ZEROS)),
                   SPEC(name=COUNTER, kind=SPEC.DENSE, shape=[SHARDS], optimizer=SGD)])
    state.init_dense({COUNTER: np.zeros(1, dtype=np.float32)})
    push = 0
    for batch, count in times.items():
        ids = np.arange(batch * BATCH, (batch + 1) * BATCH, dtype=np.int64) * SHARDS + shard
        for _ in range(count):  # a fresh BatchRef each time: what a broken dedup would let in
            state.push(BatchKey(0, 0, push), {COUNTER: -np.ones(1, dtype=np.float32)},
                       {TABLE: (ids, -np.ones((BATCH, 1), dtype=np.float32))})
            push += 1
    return state


def test_every_count_not_exactly_one_is_found(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    write_oracle_data(data, ROWS, rows_per_chunk=ROWS)
    url = str(tmp_path / "ckpt")
    for shard, times in ((0, {0: 1, 1: 2}), (1, {1: 1})):  # shard 0 twice, shard 1 lost one
        ShardCheckpoints(url, shard, SHARDS).save(shard_applying(shard, times).snapshot()[0])
    result = check_oracle(OracleSpec(data, 1, BATCH, SHARDS), url)
    assert (result.rows_checked, result.batches_checked) == (ROWS * SHARDS, 2 * SHARDS)
    assert (result.mismatches, result.batch_mismatches) == (2 * BATCH, 2)
    first, second = result.shards
    assert (first.applied_twice_or_more, first.never_applied, first.counter) == (BATCH, 0, 3.0)
    assert (second.applied_twice_or_more, second.never_applied, second.counter) == (0, BATCH, 1.0)
    assert not result.counters_ok  # 2 batches were expected on each shard
    assert result.examples[0] == {"pass": 0, "row": 4, "shard": 0, "count": 2.0}
    clean = tmp_path / "clean"
    for shard in range(SHARDS):
        ShardCheckpoints(str(clean), shard, SHARDS).save(
            shard_applying(shard, {0: 1, 1: 1}).snapshot()[0])
    ok = check_oracle(OracleSpec(data, 1, BATCH, SHARDS), str(clean))
    assert (ok.mismatches, ok.batch_mismatches, ok.counters_ok) == (0, 0, True)


def sync_shard(shard: int, rounds: list[list[int]], masked: frozenset[int] = frozenset()
               ) -> ShardState:
    """A sync-mode shard that closed ``rounds`` (each the batches its trainers pushed), with the
    oracle script's sync optimizer (Adagrad, eps 0) on the counting table: each round applies
    the mean of its batches' gradients, -1/r per row. A ``masked`` batch pushes 0 on the
    counter, as after a resharding when an older layout's shard applied its counter part."""
    from elasticps.chaos.oracle_script import counting_optimizer

    state = ShardState(shard, SHARDS, mode="sync")
    state.declare([SPEC(name=TABLE, kind=SPEC.SPARSE, dim=1, id_space=ROWS * SHARDS,
                        optimizer=counting_optimizer("sync").to_proto(),
                        initializer=pserver_pb2.Initializer(kind=pserver_pb2.Initializer.ZEROS)),
                   SPEC(name=COUNTER, kind=SPEC.DENSE, shape=[SHARDS], optimizer=SGD)])
    state.init_dense({COUNTER: np.zeros(1, dtype=np.float32)})
    push = 0
    for batches in rounds:
        trainers = [f"t{i}" for i in range(len(batches))]
        for trainer in trainers:
            state.join_round(trainer)
        for trainer, batch in zip(trainers, batches, strict=True):
            ids = np.arange(batch * BATCH, (batch + 1) * BATCH, dtype=np.int64) * SHARDS + shard
            # every push but the round's last stays pending: the last one closes the round
            counter = np.zeros(1, np.float32) if batch in masked else -np.ones(1, np.float32)
            state.push(BatchKey(0, 0, push), {COUNTER: counter},
                       {TABLE: (ids, -np.ones((BATCH, 1), dtype=np.float32))},
                       trainer=trainer, wait_s=0.0)
            push += 1
        for trainer in trainers:
            state.leave_round(trainer)
    return state


def test_sync_rounds_of_any_size_count_exactly_one_and_a_second_application_does_not(
        tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    write_oracle_data(data, ROWS, rows_per_chunk=ROWS)
    spec = OracleSpec(data, 1, BATCH, SHARDS, mode="sync")
    clean = str(tmp_path / "clean")
    # shard 0: both batches in one round of 2 (1/2 each); shard 1: two rounds of 1
    for shard, rounds in ((0, [[0, 1]]), (1, [[0], [1]])):
        ShardCheckpoints(clean, shard, SHARDS).save(sync_shard(shard, rounds).snapshot()[0])
    ok = check_oracle(spec, clean)
    assert (ok.mismatches, ok.batch_mismatches, ok.counters_ok) == (0, 0, True), ok.examples
    assert [s.counter for s in ok.shards] == [1.0, 2.0]  # the counter counts rounds
    # Batch 1 applied twice at 1/2 on shard 0 (with SGD's mean it would read 1: invisible),
    # batch 0 lost on shard 1.
    broken = str(tmp_path / "broken")
    for shard, rounds in ((0, [[0, 1], [1]]), (1, [[1]])):
        ShardCheckpoints(broken, shard, SHARDS).save(sync_shard(shard, rounds).snapshot()[0])
    bad = check_oracle(spec, broken)
    first, second = bad.shards
    assert (first.applied_twice_or_more, first.never_applied) == (BATCH, 0)
    assert (second.applied_twice_or_more, second.never_applied) == (0, BATCH)
    assert (bad.mismatches, bad.batch_mismatches) == (2 * BATCH, 2)
    assert all(1.0 < e["count"] < 2.0 for e in bad.examples if e["shard"] == 0)


def test_in_sync_mode_a_round_with_a_masked_counter_adds_a_fraction_and_passes(
        tmp_path: Path) -> None:
    """After a resharding a batch's counter position may have been applied by an older
    layout's shard: its push carries 0 there, and its round's mean adds 1/2, not 1. Only sync
    mode's counter may be fractional; in async and geo it counts whole batches."""
    data = str(tmp_path / "data")
    write_oracle_data(data, ROWS, rows_per_chunk=ROWS)
    spec = OracleSpec(data, 1, BATCH, SHARDS, mode="sync")
    for shard in range(SHARDS):
        ShardCheckpoints(str(tmp_path / "c"), shard, SHARDS).save(
            sync_shard(shard, [[0, 1]], masked=frozenset({1})).snapshot()[0])
    ok = check_oracle(spec, str(tmp_path / "c"))
    assert [s.counter for s in ok.shards] == [0.5, 0.5]
    assert (ok.mismatches, ok.counters_ok) == (0, True), ok.examples
    whole = OracleResult(shards=[ShardCount(0, counter=0.5, counter_expected=2,
                                            counter_low=2)])
    assert not whole.counters_ok  # async and geo: a fraction of a batch is never right


def test_hybrid_reads_the_dense_counter_from_the_dense_checkpoint_and_counts_rounds(
        tmp_path: Path) -> None:
    """Hybrid shards hold the counting rows only; the counter lives in the trainers' dense
    checkpoint. With it, 2 batches in 2 rounds of one pass; without it the counters fail."""
    from elasticps.store.embedded_store import EmbeddedStore
    from elasticps.store.keys import HYBRID_GROUP
    from elasticps.trainer.hybrid.checkpoints import DenseCheckpoints
    from elasticps.trainer.hybrid.replica import DenseReplica

    data = str(tmp_path / "data")
    write_oracle_data(data, ROWS, rows_per_chunk=ROWS)
    url = str(tmp_path / "ckpt")
    spec = OracleSpec(data, 1, BATCH, SHARDS, mode="hybrid")
    with EmbeddedStore(tmp_path / "job.db", "/job/") as store:
        for shard in range(SHARDS):
            state = ShardState(shard, SHARDS, mode="hybrid")
            state.declare([SPEC(name=TABLE, kind=SPEC.SPARSE, dim=1, id_space=ROWS * SHARDS,
                                optimizer=SGD, initializer=pserver_pb2.Initializer(
                                    kind=pserver_pb2.Initializer.ZEROS))])
            state.init_dense({})  # what the trainers' initialisation does with no dense tables
            for batch in range(2):
                ids = np.arange(batch * BATCH, (batch + 1) * BATCH, dtype=np.int64) * SHARDS
                state.push(BatchKey(0, 0, batch), {},
                           {TABLE: (ids + shard, -np.ones((BATCH, 1), dtype=np.float32))})
            ShardCheckpoints(url, shard, SHARDS, store=store).save(state.snapshot()[0])
        missing = check_oracle(spec, url, store)
        assert (missing.mismatches, missing.counters_ok) == (0, False)

        replica = DenseReplica([SPEC(name=COUNTER, kind=SPEC.DENSE, shape=[SHARDS],
                                     optimizer=SGD)])
        replica.set_initial({COUNTER: np.zeros(SHARDS, np.float32)})
        replica.adopt(1)
        for _ in range(2):  # two rounds, each the mean of its batches' -1
            replica.apply(-np.ones(SHARDS, np.float32), 0)
        assert DenseCheckpoints(url, store, "t0").save(replica, store.put(HYBRID_GROUP, b"{}"))
        ok = check_oracle(spec, url, store)
    assert (ok.mismatches, ok.batch_mismatches, ok.counters_ok) == (0, 0, True)
    assert [s.counter for s in ok.shards] == [2.0, 2.0]
