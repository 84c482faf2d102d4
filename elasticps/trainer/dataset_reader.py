"""What ``dist_train(reader=...)`` accepts: a dataset the master splits into tasks.

``elasticps.reader.cloud(url, batch_size=512)`` names a chunked dataset (made by
``elasticps data``). The master turns its chunks into tasks (``chunks_per_task`` chunks each);
a trainer reads the chunks of the tasks it is given, in the batch numbering of
:func:`elasticps.trainer.task_batches.task_batches` (so a recomputed batch has the same ``seq``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from elasticps.data.features import FeatureConfig
from elasticps.errors import ConfigError
from elasticps.proto import master_pb2
from elasticps.trainer.task_batches import TaskBatch, data_chunk_batches, task_batches


@dataclass(frozen=True)
class DatasetReader:
    """A dataset read through the master's task queue."""

    dataset_url: str
    batch_size: int = 512
    chunks_per_task: int = 1
    features: FeatureConfig = field(default_factory=FeatureConfig)
    shuffle_seed: int | None = None

    def __post_init__(self) -> None:
        if not self.dataset_url:
            raise ConfigError("reader dataset_url is empty")
        if self.batch_size < 1:
            raise ConfigError(f"reader batch_size={self.batch_size!r} must be >= 1")
        if self.chunks_per_task < 1:
            raise ConfigError(f"reader chunks_per_task={self.chunks_per_task!r} must be >= 1")

    def task_batches(self, task: master_pb2.Task) -> Iterator[TaskBatch]:
        """The batches of ``task`` from its resume point on (a ``BatchSource``)."""
        chunks = data_chunk_batches(self.dataset_url, self.batch_size, features=self.features,
                                    shuffle_seed=self.shuffle_seed)
        return task_batches(task, self.batch_size, chunks)


def cloud(dataset_url: str, batch_size: int = 512, *, chunks_per_task: int = 1,
          features: FeatureConfig | None = None, shuffle_seed: int | None = None) -> DatasetReader:
    """The seed's ``reader.cloud(...)``: train on ``dataset_url`` through the master's tasks."""
    return DatasetReader(dataset_url, batch_size, chunks_per_task, features or FeatureConfig(),
                         shuffle_seed)


def as_dataset_reader(reader: Any) -> DatasetReader:
    if isinstance(reader, DatasetReader):
        return reader
    if isinstance(reader, str):
        return cloud(reader)
    raise ConfigError(f"reader={reader!r} is not a dataset reader; use "
                      "elasticps.reader.cloud(dataset_url, batch_size=...)")
