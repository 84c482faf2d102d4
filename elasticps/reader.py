"""Readers for ``dist_train``: ``elasticps.reader.cloud(dataset_url, batch_size=...)`` trains
a dataset, ``elasticps.reader.stream(prefix, batch_size=...)`` a stream of partitions as they
land (one pass, docs/data.md)."""

from elasticps.trainer.dataset_reader import DatasetReader, cloud
from elasticps.trainer.stream_reader import StreamReader, stream

__all__ = ["DatasetReader", "StreamReader", "cloud", "stream"]
