"""What ``dist_train(reader=...)`` accepts: a dataset the master splits into tasks.

``elasticps.reader.cloud(url, batch_size=512)`` names a chunked dataset (made by
``elasticps data``). The master turns its chunks into tasks (``chunks_per_task`` chunks each);
a trainer reads the chunks of the tasks it is given, in the batch numbering of
:func:`elasticps.trainer.task_batches.task_batches` (so a recomputed batch has the same ``seq``).

``elasticps.reader.stream(prefix)`` (:mod:`elasticps.trainer.stream_reader`) names a stream
instead: the same task loop over partitions the master appends as they land. Both kinds
(:data:`TrainingData`) say how a job joins them (``join``: SetDataset) and where their schema is
read (``schema_url``).

Evaluation and export read a dataset whole and in order instead (:func:`read_whole`), from a
reader, a URL, or any iterable of batches; the dataset's declared schema (its manifest's
``schema``) says the label kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from elasticps.data.batch import Batch, TensorBatch
from elasticps.data.batch_plan import BatchPlan, features_key
from elasticps.data.dataset import open_dataset
from elasticps.data.features import FeatureConfig
from elasticps.data.manifest import read_manifest
from elasticps.data.schema import Schema
from elasticps.errors import ConfigError
from elasticps.proto import master_pb2
from elasticps.trainer.api import TaskSource
from elasticps.trainer.stream_reader import StreamReader
from elasticps.trainer.task_batches import TaskBatch, data_chunk_batches, task_batches

EVAL_BATCH_SIZE = 4096  # a URL evaluated or exported without a reader: no gradients, big batches


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

    @property
    def plan(self) -> BatchPlan:
        """The batch identity this reader numbers batches by (the master pins the job's)."""
        return BatchPlan(self.batch_size, self.shuffle_seed, features_key(self.features))

    def join(self, master: TaskSource, num_passes: int) -> None:
        """SetDataset: the job trains this dataset ``num_passes`` times."""
        master.set_dataset(self.dataset_url, self.chunks_per_task, num_passes, self.plan)

    def schema_url(self, stop: Any = None, report: Any = None) -> str:
        """Where the dataset's schema is read: the dataset itself."""
        return self.dataset_url

    def task_batches(self, task: master_pb2.Task) -> Iterator[TaskBatch]:
        """The batches of ``task`` from its resume point on (a ``BatchSource``)."""
        chunks = data_chunk_batches(self.dataset_url, self.batch_size, features=self.features,
                                    shuffle_seed=self.shuffle_seed)
        return task_batches(task, self.batch_size, chunks)


# What a trainer trains on: a dataset or a stream, each read through the master's tasks.
TrainingData = DatasetReader | StreamReader


def cloud(dataset_url: str, batch_size: int = 512, *, chunks_per_task: int = 1,
          features: FeatureConfig | None = None, shuffle_seed: int | None = None) -> DatasetReader:
    """The seed's ``reader.cloud(...)``: train on ``dataset_url`` through the master's tasks."""
    return DatasetReader(dataset_url, batch_size, chunks_per_task, features or FeatureConfig(),
                         shuffle_seed)


def dataset_schema(url: str) -> Schema | None:
    """The declared schema of the dataset at ``url``, None where its manifest has none."""
    schema = getattr(read_manifest(url), "schema", None)
    return schema if isinstance(schema, Schema) else None


def check_test_classes(train_url: str, test_url: str) -> None:
    """A test set whose class labels map to other indices than the training set's would score
    wrong without a word: refuse it, naming both lists (convert it ``--like`` the training
    set)."""
    train, test = dataset_schema(train_url), dataset_schema(test_url)
    if train is None or test is None:
        return
    for mine, theirs in zip(train.labels, test.labels, strict=False):
        if (mine.by_value or theirs.by_value) and mine.values != theirs.values:
            raise ConfigError(
                f"the test data {test_url} has the classes {theirs.values} for label "
                f"{theirs.name!r}, the training data {train_url} {mine.values}: convert the "
                "test data with --like TRAINING_DIR so that a class has one index in both")


def read_whole(data: Any) -> tuple[Iterable[Batch], str | None]:
    """``(batches, dataset URL or None)`` of a reader (a table's too), a URL, or an iterable of
    batches (numpy ``Batch`` or ``TensorBatch``), read whole and in order."""
    if isinstance(data, StreamReader):
        return data.whole(), data.schema_url()
    if isinstance(data, JobTable):
        data = data.in_job()
    if isinstance(data, DatasetReader | str):
        reader = data if isinstance(data, DatasetReader) else cloud(data, EVAL_BATCH_SIZE)
        dataset = open_dataset(reader.dataset_url)
        return dataset.iter_batches(reader.batch_size, features=reader.features), dataset.url
    if isinstance(data, Batch | TensorBatch):
        data = [data]
    if not isinstance(data, Iterable):
        raise ConfigError(f"{data!r} is not a reader, a dataset URL or an iterable of batches")
    return (b.source if isinstance(b, TensorBatch) else b for b in data), None


@runtime_checkable
class JobTable(Protocol):
    """A reader of data the job first writes as a dataset (``elasticps.reader.from_pandas``:
    table_reader.py)."""

    def in_job(self) -> DatasetReader:
        """The dataset it is in the current job."""


def as_dataset_reader(reader: Any) -> DatasetReader:
    if isinstance(reader, DatasetReader):
        return reader
    if isinstance(reader, str):
        return cloud(reader)
    if isinstance(reader, JobTable):
        return reader.in_job()
    raise ConfigError(f"reader={reader!r} is not a dataset reader; use "
                      "elasticps.reader.cloud(dataset_url, batch_size=...) or "
                      "elasticps.reader.from_pandas(frame, schema)")


def as_training_data(reader: Any) -> TrainingData:
    """What ``train`` reads: a dataset reader, URL or table, or a stream reader."""
    if isinstance(reader, StreamReader):
        return reader
    if isinstance(reader, DatasetReader | str | JobTable):
        return as_dataset_reader(reader)
    raise ConfigError(f"reader={reader!r} is neither a dataset nor a stream reader; use "
                      "elasticps.reader.cloud(dataset_url, batch_size=...), "
                      "elasticps.reader.from_pandas(frame, schema) or "
                      "elasticps.reader.stream(prefix, batch_size=...)")
