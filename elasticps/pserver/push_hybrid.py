"""Hybrid mode: the pservers hold the sparse tables alone; each batch's sparse gradients are
applied at once and at most once, as in async mode.

The dense parameters live in the trainers (replicated, averaged by all-reduce every step:
:mod:`elasticps.trainer.hybrid`), so a hybrid shard refuses to declare a DENSE table: a trainer
that declares one runs in another mode than the pserver, and every role of a job needs the same
``PADDLE_TRAINING_MODE``.
"""

from __future__ import annotations

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.push_async import AsyncGradients


class HybridSparse(AsyncGradients):
    name = "hybrid"

    def check_declare(self, spec: pserver_pb2.TableSpec) -> None:
        if spec.kind == pserver_pb2.TableSpec.DENSE:
            raise InvalidArgumentError(
                f"shard {self.shard.shard} runs in hybrid mode, where the trainers hold the "
                f"dense parameters; it takes no DENSE table ({spec.name!r}): every role of a job "
                "needs the same PADDLE_TRAINING_MODE")
