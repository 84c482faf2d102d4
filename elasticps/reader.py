"""Readers for ``dist_train``: ``elasticps.reader.cloud(dataset_url, batch_size=...)``."""

from elasticps.trainer.dataset_reader import DatasetReader, cloud

__all__ = ["DatasetReader", "cloud"]
