"""Layers whose rows live on the pservers: ``elasticps.nn.SparseEmbedding`` (one id per row and
column), ``elasticps.nn.SparseEmbeddingBag`` (a sum or mean over a bag of ids per row) and
``elasticps.nn.SparseEmbeddingSequence`` (a bag's ids one per position, padded, with a mask)."""

from elasticps.trainer.row_policy import Admit, Evict
from elasticps.trainer.sparse import RowInit, SparseEmbedding
from elasticps.trainer.sparse_bag import SparseEmbeddingBag
from elasticps.trainer.sparse_sequence import Padded, SparseEmbeddingSequence

__all__ = ["Admit", "Evict", "Padded", "RowInit", "SparseEmbedding", "SparseEmbeddingBag",
           "SparseEmbeddingSequence"]
