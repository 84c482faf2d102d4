"""What a checkpoint holds: a consistent copy of one shard (or of what changed in it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet


@dataclass
class DenseState:
    values: np.ndarray
    slots: dict[str, np.ndarray]
    step: int


@dataclass
class SparseState:
    ids: np.ndarray
    values: np.ndarray
    slots: dict[str, np.ndarray]
    steps: np.ndarray


@dataclass
class ShardSnapshot:
    """A consistent copy of a shard: what a checkpoint holds."""

    shard: int
    num_shards: int
    specs: list[pserver_pb2.TableSpec]
    initialized: bool
    dense: dict[str, DenseState]
    sparse: dict[str, SparseState]
    applied: AppliedSet
    counters: dict[str, int] = field(default_factory=dict)
    # A delta holds only the sparse rows pushed since the previous snapshot, and the ids
    # evicted since; ``parent`` is the checkpoint it applies on (set when read from a file).
    delta: bool = False
    tombstones: dict[str, np.ndarray] = field(default_factory=dict)
    parent: str = ""
