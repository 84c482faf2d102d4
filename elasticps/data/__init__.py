"""Chunked CTR datasets: Parquet row groups as chunks, converters, readers, metrics.

Public API (what other subsystems call)::

    from elasticps.data import open_dataset, iter_batches, FeatureConfig, ChunkRef, CtrBatch
    ds = open_dataset("/data/ctr")                 # any fsspec URL
    for chunk in ds.manifest.chunks:               # ChunkRef(path, row_group, num_rows)
        for batch in iter_batches(ds.url, chunk, 512, start_record=0,
                                  features=FeatureConfig(id_space=1_000_001)):
            dense, sparse, label = batch.to_torch()
    auc(labels, scores); log_loss(labels, probs)

Heavier pieces (converter, generator) are imported from their modules:
``elasticps.data.criteo.convert_criteo``, ``elasticps.data.synth.synth_ctr``.
"""

from elasticps.data.auc import auc, log_loss
from elasticps.data.features import FeatureConfig, hash_categorical, normalize_dense
from elasticps.data.manifest import ChunkRef, Manifest
from elasticps.data.reader import CtrBatch, Dataset, iter_batches, open_dataset, read_chunk_table

__all__ = [
    "ChunkRef",
    "CtrBatch",
    "Dataset",
    "FeatureConfig",
    "Manifest",
    "auc",
    "hash_categorical",
    "iter_batches",
    "log_loss",
    "normalize_dense",
    "open_dataset",
    "read_chunk_table",
]
