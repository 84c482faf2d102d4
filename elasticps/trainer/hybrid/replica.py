"""The dense state every member of hybrid mode's group holds, identical after every round.

One :class:`~elasticps.pserver.dense_table.DenseShard` per dense table (shard 0 of 1: the whole
table), so the optimizer is the pservers' own (``pserver/optimizers.py``: the spec's kind, weight
decay, clipping, learning-rate schedule), applied to the mean of a round's gradients. Beside the
values and the optimizer state it keeps

- the *applied set* of batches whose dense gradient it holds (``pserver/applied.py``, as a shard
  keeps its own), pruned one pass behind the newest pass seen: a batch of an older pass can only
  come from a stale holder, and its pass lies below the floor, so it counts as applied;
- its *key* ``(generation, step)``: the generation it was last synchronised or stepped in and the
  number of optimizer steps taken. A generation's members synchronise to the greatest key among
  their states and the newest published checkpoint (:mod:`~elasticps.trainer.hybrid.group`), so
  the state a group goes on from holds every step any of them, or a checkpoint, had.

:meth:`pack` and :meth:`unpack` carry it through a broadcast; :meth:`snapshot` and
:meth:`restore` through a checkpoint file (the pservers' format).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping

import numpy as np

from elasticps.errors import CheckpointError, InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.checkpoint.snapshot import DenseState, ShardSnapshot
from elasticps.pserver.dense_table import DenseShard, normalize_spec
from elasticps.trainer.hybrid.rounds import Ref

GENERATION = "hybrid_generation"  # checkpoint counters: the state's key
STEP = "hybrid_step"


class DenseReplica:
    """Values, optimizer state and applied batches of a model's dense tables."""

    def __init__(self, specs: Iterable[pserver_pb2.TableSpec]) -> None:
        self.specs = [normalize_spec(s) for s in specs]
        if any(s.kind != pserver_pb2.TableSpec.DENSE for s in self.specs):
            raise InvalidArgumentError("a dense replica holds DENSE tables only")
        self.tables = {s.name: DenseShard(s, 0, 1) for s in self.specs}
        self.shapes = {s.name: tuple(int(d) for d in s.shape) for s in self.specs}
        self.sizes = [math.prod(self.shapes[s.name]) for s in self.specs]
        self.size = sum(self.sizes)
        self.applied = AppliedSet()
        self.generation = 0
        self.step = 0
        self.synced = False  # holds the job's state (not just this trainer's start values)
        self.version = 0  # bumped by every change: the model reloads its values then

    @property
    def key(self) -> tuple[int, int] | None:
        """``(generation, step)`` of the job's state held here; None before any."""
        return (self.generation, self.step) if self.synced else None

    def fingerprint(self) -> int:
        """A number that differs when two trainers declare different dense tables."""
        digest = hashlib.sha256(b"".join(s.SerializeToString(deterministic=True)
                                         for s in self.specs)).digest()
        return int.from_bytes(digest[:7], "little")

    # -- values -------------------------------------------------------------------------------

    def set_initial(self, values: Mapping[str, np.ndarray]) -> None:
        """This trainer's own start values: the state only if the job has none yet."""
        if self.synced:
            return
        for name, table in self.tables.items():
            array = np.asarray(values[name], dtype=np.float32).reshape(-1)
            table.check_values(array, "initial values")
            table.values = array.copy()
        self.version += 1

    def values(self) -> dict[str, np.ndarray]:
        return {name: t.values.reshape(self.shapes[name]) for name, t in self.tables.items()}

    def flatten(self, grads: Mapping[str, np.ndarray]) -> np.ndarray:
        """The gradients of every table, one float32 vector in table order."""
        out = np.empty(self.size, dtype=np.float32)
        at = 0
        for spec, size in zip(self.specs, self.sizes, strict=True):
            out[at:at + size] = np.asarray(grads[spec.name], dtype=np.float32).reshape(-1)
            at += size
        return out

    # -- one round ----------------------------------------------------------------------------

    def apply(self, mean: np.ndarray, batch_step: int) -> None:
        """One optimizer step of every table with the round's mean gradient (flat)."""
        updates = {}
        at = 0
        for spec, size in zip(self.specs, self.sizes, strict=True):
            updates[spec.name] = self.tables[spec.name].compute(mean[at:at + size], batch_step)
            at += size
        self.commit(updates)

    def commit(self, updates: Mapping[str, tuple[np.ndarray, dict[str, np.ndarray]]]) -> None:
        """One optimizer step of every table: its update (``DenseShard.compute``'s), all of
        them computed before any is committed."""
        for name, table in self.tables.items():
            table.commit(updates[name])
        self.step += 1
        self.version += 1

    def record(self, refs: Iterable[Ref]) -> None:
        """Record a round's batches; a batch of pass P prunes the passes before P - 1."""
        newest = -1
        for ref in refs:
            self.applied.add(*ref)
            newest = max(newest, ref[0])
        if newest - 1 > self.applied.floor:
            self.applied.prune(newest - 1)

    # -- through a broadcast ------------------------------------------------------------------

    def float_size(self) -> int:
        return sum(t.length * (1 + len(t.slots)) for t in self.tables.values())

    def _arrays(self) -> list[np.ndarray]:
        """Each table's values, then its optimizer slots by name: the broadcast's order."""
        return [a for t in self.tables.values()
                for a in (t.values, *(t.slots[k] for k in sorted(t.slots)))]

    def pack(self) -> tuple[np.ndarray, np.ndarray]:
        """(int64 meta, float32 values and slots): everything a member needs to hold this."""
        tasks, extra = self.applied.to_arrays()
        counts = self.applied.counts_array()
        meta = np.concatenate([
            np.array([self.generation, self.step, self.applied.floor, tasks.shape[0],
                      extra.shape[0]], dtype=np.int64),
            np.array([t.step for t in self.tables.values()], dtype=np.int64),
            tasks.reshape(-1), extra.reshape(-1), counts.reshape(-1)])
        parts = self._arrays()
        floats = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return meta, floats.astype(np.float32, copy=False)

    def unpack(self, meta: np.ndarray, floats: np.ndarray) -> None:
        generation, step, floor, n_tasks, n_extra = (int(v) for v in meta[:5])
        n = len(self.tables)
        steps = meta[5:5 + n]
        at = 5 + n
        tasks = meta[at:at + 3 * n_tasks].reshape(-1, 3)
        extra = meta[at + 3 * n_tasks:at + 3 * (n_tasks + n_extra)].reshape(-1, 3)
        counts = meta[at + 3 * (n_tasks + n_extra):].reshape(-1, 3)
        if floats.size != self.float_size():
            raise InvalidArgumentError(f"a dense state of {floats.size} values does not fit "
                                       f"these tables ({self.float_size()})")
        offset = 0
        for table, table_step in zip(self.tables.values(), steps.tolist(), strict=True):
            for name in ("", *sorted(table.slots)):
                part = floats[offset:offset + table.length].copy()
                offset += table.length
                if name:
                    table.slots[name] = part
                else:
                    table.values = part
            table.step = int(table_step)
        self.applied = AppliedSet.from_arrays(tasks, extra, counts, floor=floor)
        self._became(generation, step)

    def _became(self, generation: int, step: int) -> None:
        self.generation, self.step, self.synced = generation, step, True
        self.version += 1

    def adopt(self, generation: int) -> None:
        """This state is the one generation ``generation`` goes on from."""
        self._became(generation, self.step)

    # -- through a checkpoint -----------------------------------------------------------------

    def snapshot(self) -> ShardSnapshot:
        dense = {name: DenseState(t.values.copy(), {k: v.copy() for k, v in t.slots.items()},
                                  t.step) for name, t in self.tables.items()}
        return ShardSnapshot(0, 1, list(self.specs), True, dense, {}, self.applied.copy(),
                             counters={GENERATION: self.generation, STEP: self.step})

    def restore(self, snap: ShardSnapshot) -> None:
        if set(snap.dense) != set(self.tables):
            raise CheckpointError(f"the dense checkpoint holds tables {sorted(snap.dense)}, "
                                  f"this model {sorted(self.tables)}")
        for name, table in self.tables.items():
            state = snap.dense[name]
            table.check_values(np.asarray(state.values, dtype=np.float32), "checkpoint values")
            table.values = np.array(state.values, dtype=np.float32)
            table.slots = {k: np.array(v, dtype=np.float32) for k, v in state.slots.items()}
            table.step = state.step
        self.applied = snap.applied.copy()
        self._became(int(snap.counters.get(GENERATION, 0)), int(snap.counters.get(STEP, 0)))
