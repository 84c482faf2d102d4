"""Readers for ``dist_train``: a dataset (``elasticps.reader.cloud(dataset_url,
batch_size=...)``) or a table in memory (``from_pandas(frame, schema)``, ``from_arrow(table,
schema)``), which the job writes once as its dataset."""

from elasticps.trainer.dataset_reader import DatasetReader, cloud
from elasticps.trainer.table_reader import TableReader, from_arrow, from_pandas

__all__ = ["DatasetReader", "TableReader", "cloud", "from_arrow", "from_pandas"]
