"""A stream's records under ``master/state/`` (the keys: ``store/keys.py``)::

    master/state/stream              StreamPosition {partitions, last, schema}: how far the
                                     master followed the stream
    master/state/partition/<k:08d>   partition k as appended: {name, time, paths, chunks}
                                     (paths relative to the partition, each listed once;
                                     chunks [path index, row group, rows])

Appending partitions writes their records and the new position in the transaction that carries
the queue's meta record (``MasterState.append_partitions``), conditioned on the election lock:
a master that dies before it commits appended nothing, one that dies after appended all, so a
takeover neither skips nor repeats a partition. Loading reads the partition records in ranges
of 10,000 keys, like the task records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from elasticps.data.manifest import ChunkRef
from elasticps.errors import DataError
from elasticps.master.stream_follow import AppendedPartition, StreamPosition
from elasticps.store.api import Op, Put, Store
from elasticps.store.keys import (
    MASTER_STATE_STREAM,
    MASTER_TASKS_PER_RANGE,
    master_partition_key,
    master_partition_range,
)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def encode_position(position: StreamPosition) -> bytes:
    return _dumps({"partitions": position.partitions, "last": position.last,
                   "schema": position.schema})


def decode_position(raw: bytes) -> StreamPosition:
    doc = json.loads(raw)
    last, schema = doc.get("last"), doc.get("schema")
    return StreamPosition(int(doc["partitions"]), None if last is None else str(last),
                          None if schema is None else str(schema))


def encode_partition(partition: AppendedPartition) -> bytes:
    """Chunk paths are stored relative to the partition (they all start with its name)."""
    prefix = partition.name + "/"
    paths: dict[str, int] = {}
    rows = []
    for chunk in partition.chunks:
        local = chunk.path.removeprefix(prefix)
        rows.append([paths.setdefault(local, len(paths)), chunk.row_group, chunk.num_rows])
    return _dumps({"name": partition.name, "time": partition.time, "paths": list(paths),
                   "chunks": rows})


def decode_partition(raw: bytes) -> AppendedPartition:
    doc = json.loads(raw)
    name = str(doc["name"])
    paths = [f"{name}/{path}" for path in doc["paths"]]
    time = doc.get("time")
    return AppendedPartition(name, None if time is None else float(time),
                             tuple(ChunkRef(paths[p], int(rg), int(n))
                                   for p, rg, n in doc["chunks"]))


def append_ops(first_index: int, partitions: Sequence[AppendedPartition],
               position: StreamPosition) -> list[Op]:
    """The records that append ``partitions`` as numbers ``first_index``... and move the
    stream to ``position`` (written with the queue's meta, in one transaction)."""
    ops: list[Op] = [Put(master_partition_key(first_index + i), encode_partition(p))
                     for i, p in enumerate(partitions)]
    ops.append(Put(MASTER_STATE_STREAM, encode_position(position)))
    return ops


def load_stream(store: Store) -> tuple[StreamPosition, list[AppendedPartition]]:
    """The stream's position and its appended partitions, in order; a partition record
    missing below the position's count is a DataError (the state was not written by us)."""
    kv = store.get(MASTER_STATE_STREAM)
    position = StreamPosition() if kv is None else decode_position(kv.value)
    found: dict[int, AppendedPartition] = {}
    for first in range(0, position.partitions, MASTER_TASKS_PER_RANGE):
        for item in store.get_prefix(master_partition_range(first)):
            index = int(item.key.rsplit("/", 1)[1])
            if index < position.partitions:  # a record past the position was never committed
                found[index] = decode_partition(item.value)
    missing = [i for i in range(position.partitions) if i not in found]
    if missing:
        raise DataError(f"the master's stream state names {position.partitions} partitions "
                        f"but records {missing[:5]} are missing")
    return position, [found[i] for i in range(position.partitions)]
