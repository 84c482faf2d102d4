"""A model's own metrics: subclass ``elasticps.metrics.MetricAccumulator`` (``update``,
``compute``) and give ``elasticps.Trainer(metrics=...)`` a callable that makes a fresh one per
pass; ``InBatchRecall`` is recall@k over a two-tower model's in-batch candidates."""

from elasticps.trainer.metrics import MetricAccumulator, metrics_for
from elasticps.trainer.recall import InBatchRecall

__all__ = ["InBatchRecall", "MetricAccumulator", "metrics_for"]
