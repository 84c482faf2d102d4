"""Layers whose rows live on the pservers: ``elasticps.nn.SparseEmbedding`` (one id per row and
column) and ``elasticps.nn.SparseEmbeddingBag`` (a sum or mean over a bag of ids per row)."""

from elasticps.trainer.row_policy import Admit, Evict
from elasticps.trainer.sparse import RowInit, SparseEmbedding
from elasticps.trainer.sparse_bag import SparseEmbeddingBag

__all__ = ["Admit", "Evict", "RowInit", "SparseEmbedding", "SparseEmbeddingBag"]
