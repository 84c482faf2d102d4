"""A stream's chunks as the master hands them out: every appended partition, its chunks (paths
relative to the stream's prefix) and its tasks, and what the status page says of the stream.

The task queue knows tasks by chunk index; this catalogue maps a task's chunks back to their
paths, their first batch number in the pass (``Task.first_batch``: a batch's ``step`` is
``first_batch + seq`` in a stream's one pass) and the partition they came from (``Task.partition``
and its time, ``Task.event_time``). It grows as partitions are appended and is rebuilt from the
partition records when a master takes over.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elasticps.data.batch_plan import batches_in_chunk
from elasticps.data.manifest import ChunkRef
from elasticps.master.stream_follow import AppendedPartition, StreamPosition
from elasticps.master.task_queue import TaskQueue, TaskState


@dataclass(frozen=True)
class CatalogEntry:
    partition: AppendedPartition
    first_chunk: int
    first_task: int
    num_tasks: int


class StreamCatalog:
    """The appended partitions of a stream (see the module docstring)."""

    def __init__(self, batch_size: int, start: str = "") -> None:
        self.batch_size = batch_size
        self.start = start  # the backfill's --from: partitions before it are passed over
        self.position = StreamPosition()
        self.entries: list[CatalogEntry] = []
        self._chunks: list[ChunkRef] = []
        self._first_batches = [0]  # each chunk's first batch in the pass, then the total
        self._starts: list[int] = []  # each entry's first chunk (for bisect)
        self._trained = 0  # leading entries fully trained, as last counted

    def add(self, partition: AppendedPartition, task_ids: Sequence[int],
            position: StreamPosition) -> None:
        """Record ``partition``, appended to the queue as ``task_ids``, and the position it
        moved the stream to."""
        first_task = task_ids[0] if task_ids else (
            self.entries[-1].first_task + self.entries[-1].num_tasks if self.entries else 0)
        self.entries.append(CatalogEntry(partition, len(self._chunks), first_task,
                                         len(task_ids)))
        self._starts.append(len(self._chunks))
        for chunk in partition.chunks:
            self._chunks.append(chunk)
            self._first_batches.append(self._first_batches[-1]
                                       + batches_in_chunk(chunk.num_rows, self.batch_size))
        self.position = position

    # -- what a task message needs (service.TaskChunks) ---------------------------------------

    def chunk_slice(self, first: int, count: int) -> Sequence[ChunkRef]:
        return self._chunks[first:first + count]

    def first_batch(self, chunk: int) -> int:
        return self._first_batches[chunk]

    @property
    def pass_batches(self) -> int:
        """0: a stream's pass has no known length, and its one pass makes ``step`` =
        ``first_batch + seq`` anyway."""
        return 0

    def partition_at(self, chunk: int) -> AppendedPartition | None:
        index = bisect.bisect_right(self._starts, chunk) - 1
        return self.entries[index].partition if index >= 0 else None

    @property
    def schema_partition(self) -> str:
        """The partition whose schema every partition is read with (the first appended)."""
        return self.entries[0].partition.name if self.entries else ""

    # -- the stream's progress ----------------------------------------------------------------

    def trained_through(self, queue: TaskQueue) -> int:
        """How many leading partitions have every task DONE (a recovery dispatch can take one
        back, so the count is checked backwards first, then carried forward)."""
        count = min(self._trained, len(self.entries))
        while count and not self._trained_entry(queue, count - 1):
            count -= 1
        while count < len(self.entries) and self._trained_entry(queue, count):
            count += 1
        self._trained = count
        return count

    def _trained_entry(self, queue: TaskQueue, index: int) -> bool:
        entry = self.entries[index]
        return all(queue.state_of(t) is TaskState.DONE
                   for t in range(entry.first_task, entry.first_task + entry.num_tasks))

    def status(self, queue: TaskQueue, wall_now: float) -> dict[str, Any]:
        """What the status page and the metrics say of the stream (no follow-loop state)."""
        trained = self.trained_through(queue)
        newest = self.entries[trained - 1].partition if trained else None
        lag = (round(max(0.0, wall_now - newest.time), 1)
               if newest is not None and newest.time is not None else None)
        return {
            "from": self.start or None,
            "partitions": len(self.entries),
            "last": self.position.last,
            "trained_through": newest.name if newest else None,
            "trained_time": newest.time if newest else None,
            "lag_s": lag,
            "waiting": len(self.entries) - trained,
            "waiting_for_data": queue.open and not queue.counts()["todo"]
            and not queue.counts()["pending"],
            "ended": not queue.open,
        }
