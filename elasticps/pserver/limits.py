"""What one shard accepts: caps on requests, tables and memory, and the checks against them.

Every check raises :class:`~elasticps.errors.ResourceExhaustedError` (``RESOURCE_EXHAUSTED`` on
the wire) naming the table and the cap, before anything changes. The caps come from the
environment (``PADDLE_PSERVER_MEMORY_MB``, ``PADDLE_MAX_IDS_PER_REQUEST``,
``PADDLE_MAX_TABLES``); the memory cap covers the tables' arrays (rows, indexes, sketches, dense
slices), not the interpreter or gRPC's buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elasticps.errors import ResourceExhaustedError
from elasticps.proto import pserver_pb2
from elasticps.pserver.dense_table import MAX_DIRECT_IDS, TableSpec
from elasticps.pserver.optimizers import config_from_spec, make_optimizer
from elasticps.pserver.routing import dense_bounds
from elasticps.pserver.sparse_policy import SKETCH_DEPTH, SKETCH_WIDTH

DEFAULT_MAX_IDS_PER_REQUEST = 1 << 20  # a push this size runs ~1 s under the lock (Adam, dim 16)
DEFAULT_MAX_TABLES = 1000
MAX_DENSE_VALUES = 1 << 34  # 64 GiB of float32: a larger dense table is a mistake


@dataclass(frozen=True)
class ShardLimits:
    memory_bytes: int = 0  # 0 = no memory cap
    max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST
    max_tables: int = DEFAULT_MAX_TABLES

    def check_ids(self, table: str, count: int, what: str) -> None:
        if count > self.max_ids_per_request:
            raise ResourceExhaustedError(
                f"table {table!r}: {count} ids in one {what}; the cap is "
                f"{self.max_ids_per_request} ids per request (PADDLE_MAX_IDS_PER_REQUEST); "
                "split the request")

    def check_table_count(self, count: int) -> None:
        if count > self.max_tables:
            raise ResourceExhaustedError(
                f"declaring would make {count} tables on this shard; the cap is "
                f"{self.max_tables} tables per job (PADDLE_MAX_TABLES)")

    def check_memory(self, table: str, needed: int, why: str,
                     hint: str = "eviction cannot make room (give the table an evict policy, "
                                 "or raise the cap)") -> None:
        if self.memory_bytes and needed > self.memory_bytes:
            raise ResourceExhaustedError(
                f"table {table!r}: {why} needs {needed} bytes of this shard's memory; the cap "
                f"is {self.memory_bytes} bytes (PADDLE_PSERVER_MEMORY_MB): {hint}")


def declared_bytes(spec: pserver_pb2.TableSpec, shard: int, num_shards: int) -> int:
    """Memory a normalized table takes on this shard as soon as it is declared, before any row:
    a dense slice with its optimizer slots; a sparse table's direct index and sketch."""
    slots = len(make_optimizer(config_from_spec(spec.optimizer, spec.name)).slots)
    if spec.kind == TableSpec.DENSE:
        size = math.prod(spec.shape)
        if size > MAX_DENSE_VALUES:
            raise ResourceExhaustedError(
                f"table {spec.name!r}: dense shape {list(spec.shape)} holds {size} values; the "
                f"cap on a declared size is {MAX_DENSE_VALUES}")
        start, stop = dense_bounds(size, shard, num_shards)
        return 4 * (stop - start) * (1 + slots)
    from_sketch = 2 * SKETCH_DEPTH * SKETCH_WIDTH if spec.policy.admit_after > 1 else 0
    local_ids = -(-(spec.id_space - shard) // num_shards) if spec.id_space else 0
    direct = 4 * local_ids if spec.id_space and local_ids <= MAX_DIRECT_IDS else 0
    return from_sketch + direct
