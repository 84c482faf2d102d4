"""What ``dist_train(reader=elasticps.reader.stream(prefix))`` trains: a stream, one pass over
partitions as they land (docs/data.md).

The master follows the prefix and appends each committed partition's chunks as tasks; a
trainer reads the chunks of the tasks it is given, like a dataset's, with the stream's schema:
the first partition's (``Task.schema_partition``), dense statistics included, whatever later
partitions measured. A task's batches carry its partition's time (``Task.event_time``) to the
pservers, whose sparse tables expire and decay rows on it.

Before the master hands out any task the trainer needs the stream's schema (for its loss and
metrics), so :meth:`StreamReader.schema_url` waits for the first committed partition (at or
after ``start``), listing the prefix with the same rule as the master.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from elasticps import data
from elasticps.data.batch import Batch
from elasticps.data.batch_plan import BatchPlan, features_key
from elasticps.data.dataset import reading_schema
from elasticps.data.features import FeatureConfig
from elasticps.data.manifest import Manifest, read_manifest
from elasticps.data.stream import FsspecPartitionSource, Partition
from elasticps.errors import ConfigError, DataError
from elasticps.proto import master_pb2
from elasticps.retry import RetryPolicy
from elasticps.trainer.api import TaskSource
from elasticps.trainer.task_batches import TaskBatch, task_batches

log = logging.getLogger(__name__)

# Waiting for a stream's first partition: list again after 0.2 s, doubling to 5 s.
FIRST_PARTITION_POLL = RetryPolicy(deadline=math.inf, initial_backoff=0.2, max_backoff=5.0)


@dataclass(frozen=True)
class StreamReader:
    """A stream read through the master's task queue (see the module docstring).

    ``start`` (a backfill): partitions whose names sort before it are passed over; the stream
    is trained in order from it on, then followed as it grows."""

    prefix: str
    batch_size: int = 512
    chunks_per_task: int = 1
    features: FeatureConfig = field(default_factory=FeatureConfig)
    shuffle_seed: int | None = None
    start: str = ""

    def __post_init__(self) -> None:
        if not self.prefix:
            raise ConfigError("a stream's prefix is empty")
        if self.batch_size < 1:
            raise ConfigError(f"reader batch_size={self.batch_size!r} must be >= 1")
        if self.chunks_per_task < 1:
            raise ConfigError(f"reader chunks_per_task={self.chunks_per_task!r} must be >= 1")

    @property
    def dataset_url(self) -> str:
        return self.prefix.rstrip("/") or self.prefix

    @property
    def plan(self) -> BatchPlan:
        return BatchPlan(self.batch_size, self.shuffle_seed, features_key(self.features))

    def join(self, master: TaskSource, num_passes: int) -> None:
        """SetDataset: the job trains this stream, once."""
        if num_passes != 1:
            raise ConfigError(f"num_passes={num_passes}: a stream is trained once, in order "
                              "(pass num_passes=1 with elasticps.reader.stream)")
        master.set_dataset(self.dataset_url, self.chunks_per_task, 1, self.plan,
                           stream_from=self.start)

    def first_partition(self, stop: threading.Event | None = None,
                        report: Callable[[str | None], None] | None = None
                        ) -> Partition | None:
        """The stream's first committed partition at or after ``start``, waited for (None
        if ``stop`` was set first); ``report`` says so (a trainer's stage) while it waits."""
        source = FsspecPartitionSource(self.dataset_url)
        backoff = FIRST_PARTITION_POLL.backoff()
        stop = stop or threading.Event()
        waited = False
        try:
            while not stop.is_set():
                found = [p for p in source.partitions(None) if p.name >= self.start]
                if found:
                    return found[0]
                if not waited:
                    log.info("Waiting for the first partition of the stream %s%s.",
                             self.dataset_url, f" from {self.start}" if self.start else "")
                    if report is not None:
                        report("waiting for the stream's first partition")
                    waited = True
                stop.wait(backoff.next_delay() or 0.0)
            return None
        finally:
            if waited and report is not None:
                report(None)

    def schema_url(self, stop: threading.Event | None = None,
                   report: Callable[[str | None], None] | None = None) -> str:
        """Where the stream's schema is read: its first partition (waited for)."""
        first = self.first_partition(stop, report)
        if first is None:
            raise ConfigError(f"stopped while waiting for the first partition of the stream "
                              f"{self.dataset_url}")
        return f"{self.dataset_url}/{first.name}"

    def task_batches(self, task: master_pb2.Task) -> Iterator[TaskBatch]:
        """The batches of ``task`` from its resume point on, read with the stream's schema."""
        if not task.schema_partition:
            raise DataError(f"task {task.task_id} names no schema partition: the master does "
                            f"not train {self.dataset_url} as a stream")
        schema = reading_schema(_manifest(f"{self.dataset_url}/{task.schema_partition}"),
                                self.features)

        def read(chunk: master_pb2.Chunk, start_record: int) -> Iterator[Any]:
            ref = data.ChunkRef(chunk.path, chunk.row_group, chunk.num_rows)
            return data.iter_batches(self.dataset_url, ref, self.batch_size,
                                     start_record=start_record, schema=schema,
                                     shuffle_seed=self.shuffle_seed)

        return task_batches(task, self.batch_size, read)

    def whole(self, batch_size: int | None = None) -> Iterator[Batch]:
        """Every committed partition (at or after ``start``), in order, read whole with the
        stream's schema (evaluation and export; no waiting)."""
        yield from self.read_partitions(self.committed(), batch_size)

    def committed(self) -> list[Partition]:
        """The stream's committed partitions at or after ``start``, in order (one listing)."""
        source = FsspecPartitionSource(self.dataset_url)
        return [p for p in source.partitions(None) if p.name >= self.start]

    def read_partitions(self, partitions: Sequence[Partition],
                        batch_size: int | None = None) -> Iterator[Batch]:
        """``partitions`` (committed ones of this stream), read whole and in order with the
        stream's schema (its first partition's at or after ``start``)."""
        if not partitions:
            return
        first = self.first_partition(threading.Event())  # committed already: no wait
        schema = reading_schema(_manifest(f"{self.dataset_url}/{(first or partitions[0]).name}"),
                                self.features)
        for partition in partitions:
            url = f"{self.dataset_url}/{partition.name}"
            for chunk in _manifest(url).chunks:
                yield from data.iter_batches(url, chunk, batch_size or self.batch_size,
                                             schema=schema)


@functools.lru_cache(maxsize=32)
def _manifest(url: str) -> Manifest:
    """A committed partition's manifest (it does not change once written)."""
    return read_manifest(url)


def stream(prefix: str, batch_size: int = 512, *, chunks_per_task: int = 1,
           features: FeatureConfig | None = None, shuffle_seed: int | None = None,
           start: str = "") -> StreamReader:
    """Train on the stream under ``prefix`` (any fsspec URL): its partitions, as they land,
    once and in order, from ``start`` on (a backfill), until its ``_END`` marker. Pass it to
    ``dist_train(reader=...)`` (or ``Trainer.train``) with ``num_passes=1``."""
    return StreamReader(prefix, batch_size, chunks_per_task, features or FeatureConfig(),
                        shuffle_seed, start)
