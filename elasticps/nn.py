"""Layers whose parameters live on the pservers: ``elasticps.nn.SparseEmbedding``."""

from elasticps.trainer.sparse import RowInit, SparseEmbedding

__all__ = ["RowInit", "SparseEmbedding"]
