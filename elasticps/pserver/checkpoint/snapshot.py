"""What a checkpoint holds: a consistent copy of one shard (or of what changed in it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.reshard.lineage import LegacyLayout


@dataclass
class DenseState:
    values: np.ndarray
    slots: dict[str, np.ndarray]
    step: int


@dataclass
class RowBookkeeping:
    """What eviction and admission know of a table's rows, so a restore does not forget it:
    per row the pass and wall-clock time (unix seconds) of its last push and its push count,
    and the admission sketch's counters (whole, in every checkpoint; None: the table admits
    every id)."""

    touched_pass: np.ndarray  # int32 [rows]
    pushed_unix: np.ndarray  # float64 [rows]
    hits: np.ndarray  # uint32 [rows]
    sketch: np.ndarray | None = None  # uint16 [depth, width]
    sketch_aging: int = 0  # increments since the sketch last halved
    # SCORE tables: per row the show and click counts as of pass ``score_pass`` (decayed from
    # there on); None: the table does not score rows, or the checkpoint predates scores.
    scores: RowScores | None = None


@dataclass
class RowScores:
    """A SCORE table's per-row show/click counts, stored as of each row's ``score_pass``."""

    shows: np.ndarray  # float32 [rows]
    clicks: np.ndarray  # float32 [rows]
    score_pass: np.ndarray  # int32 [rows]


@dataclass
class SparseState:
    ids: np.ndarray
    values: np.ndarray
    slots: dict[str, np.ndarray]
    steps: np.ndarray
    # None: the table tracks nothing, or the checkpoint predates bookkeeping (restored rows
    # then count as pushed once, at restore time).
    bookkeeping: RowBookkeeping | None = None


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
    # Earlier layouts of a resharded job and what their shards had applied (reshard/lineage.py).
    legacy: list[LegacyLayout] = field(default_factory=list)
