"""Readers for ``dist_train``: a dataset (``elasticps.reader.cloud(dataset_url,
batch_size=...)``), a table in memory (``from_pandas(frame, schema)``, ``from_arrow(table,
schema)``), which the job writes once as its dataset, or a stream of partitions as they land
(``stream(prefix, batch_size=...)``, one pass, docs/streams.md)."""

from elasticps.trainer.dataset_reader import DatasetReader, cloud
from elasticps.trainer.stream_reader import StreamReader, stream
from elasticps.trainer.table_reader import TableReader, from_arrow, from_pandas

__all__ = ["DatasetReader", "StreamReader", "TableReader", "cloud", "from_arrow", "from_pandas",
           "stream"]
