"""Chunked datasets: Parquet row groups as chunks, a declared schema, converters, readers.

Public API (what other subsystems and users call)::

    from elasticps.data import open_dataset, iter_batches, write_dataset, Schema, Batch
    write_dataset(df, "/data/mine", "schema.yaml")   # a DataFrame, Table or dict of arrays
    ds = open_dataset("/data/mine")                  # any fsspec URL
    ds.schema                                         # the declared Schema (labels, tables...)
    for chunk in ds.manifest.chunks:                  # ChunkRef(path, row_group, num_rows)
        for batch in iter_batches(ds.url, chunk, 512, start_record=0):
            tensors = batch.to_torch()                # Batch -> TensorBatch
    auc(labels, scores); log_loss(labels, probs)

Criteo-layout (format 1) datasets also take ``features=FeatureConfig(id_space, dense_norm)``;
a converted Criteo dataset takes the one its schema declares.

Names load on first use (``elasticps.data.manifest`` alone needs no pyarrow). Heavier pieces
(converter, generator) are imported from their modules:
``elasticps.data.criteo_convert.convert_criteo``, ``elasticps.data.synth.synth_ctr``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elasticps.data.batch import Bag, Batch, TensorBatch
    from elasticps.data.convert import ConvertReport
    from elasticps.data.criteo_schema import criteo_preset
    from elasticps.data.dataset import (
        Dataset,
        iter_batches,
        open_dataset,
        read_chunk_table,
    )
    from elasticps.data.features import FeatureConfig, hash_categorical, normalize_dense
    from elasticps.data.from_table import write_dataset
    from elasticps.data.manifest import ChunkRef, Manifest, read_manifest
    from elasticps.data.metrics import auc, log_loss
    from elasticps.data.schema import ColumnSpec, DenseStats, LabelSpec, Schema, TableDecl
    from elasticps.data.writer import DatasetWriter

# Loaded on first use, so that importing the light modules (the manifest, for the master)
# does not load pyarrow.
_WHERE = {
    "auc": "metrics", "log_loss": "metrics",
    "Bag": "batch", "Batch": "batch", "TensorBatch": "batch",
    "Dataset": "dataset", "iter_batches": "dataset",
    "open_dataset": "dataset", "read_chunk_table": "dataset",
    "FeatureConfig": "features", "hash_categorical": "features", "normalize_dense": "features",
    "ChunkRef": "manifest", "Manifest": "manifest", "read_manifest": "manifest",
    "ConvertReport": "convert", "criteo_preset": "criteo_schema", "write_dataset": "from_table",
    "ColumnSpec": "schema", "DenseStats": "schema", "LabelSpec": "schema", "Schema": "schema",
    "TableDecl": "schema", "DatasetWriter": "writer",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'elasticps.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"elasticps.data.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Bag",
    "Batch",
    "ChunkRef",
    "ColumnSpec",
    "ConvertReport",
    "Dataset",
    "DatasetWriter",
    "DenseStats",
    "FeatureConfig",
    "LabelSpec",
    "Manifest",
    "Schema",
    "TableDecl",
    "TensorBatch",
    "auc",
    "criteo_preset",
    "hash_categorical",
    "iter_batches",
    "log_loss",
    "normalize_dense",
    "open_dataset",
    "read_chunk_table",
    "read_manifest",
    "write_dataset",
]
