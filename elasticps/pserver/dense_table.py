"""Tables held by one pserver shard: dense slices and sparse embedding rows.

Sharding is :mod:`elasticps.pserver.routing`'s: a sparse id on shard ``id % N``, a dense
parameter split by ``np.array_split(flat, N)``, so a big parameter spreads over every pserver.

Initial values are a pure function of ``(seed, id, column)`` (sparse) or ``(seed, flat index)``
(dense), computed with a counter-based hash (splitmix64), so a row has the same start value on
any shard, for any N, and after a restore — no random state to save.
"""

from __future__ import annotations

import math

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.hashing import uniform01
from elasticps.pserver.optimizers import Optimizer, config_from_spec, make_optimizer
from elasticps.pserver.routing import dense_bounds
from elasticps.pserver.sparse_policy import check_policy, fill_score_defaults

TableSpec = pserver_pb2.TableSpec
Initializer = pserver_pb2.Initializer

# A bounded id space up to this many ids per shard gets a DirectIndex (4 bytes per possible id).
MAX_DIRECT_IDS = 1 << 25
DEFAULT_SPARSE_SCALE = 0.01


def initial_values(init: pserver_pb2.Initializer, keys: np.ndarray, width: int) -> np.ndarray:
    """Start values for rows ``keys`` (float32 [n, width])."""
    if init.kind in (Initializer.ZEROS, Initializer.KIND_UNSPECIFIED) or keys.size == 0:
        return np.zeros((keys.shape[0], width), dtype=np.float32)
    if init.kind == Initializer.UNIFORM:
        u = uniform01(init.seed, keys, width, 0)
        u *= 2.0  # (2u - 1) * scale, in place: the same float64 steps, no temporaries
        u -= 1.0
        u *= init.scale
        return u.astype(np.float32)
    # NORMAL by Box-Muller on two independent streams.
    u1 = uniform01(init.seed, keys, width, 0)
    u2 = uniform01(init.seed, keys, width, 1)
    normal = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
    return (normal * init.scale).astype(np.float32)


def normalize_spec(spec: pserver_pb2.TableSpec) -> pserver_pb2.TableSpec:
    """Validate a TableSpec and fill its defaults; raise InvalidArgumentError naming the field."""
    name = spec.name
    if not name or len(name) > 200 or any(ch.isspace() or ch == "/" for ch in name):
        raise InvalidArgumentError(
            f"table name {name!r} must be 1-200 characters without whitespace or '/'"
        )
    out = pserver_pb2.TableSpec()
    out.CopyFrom(spec)
    if out.dtype not in (common_pb2.DTYPE_UNSPECIFIED, common_pb2.FLOAT32):
        raise InvalidArgumentError(
            f"table {name!r}: dtype {common_pb2.DType.Name(out.dtype)} is not supported "
            "(tables hold FLOAT32)"
        )
    out.dtype = common_pb2.FLOAT32
    config_from_spec(out.optimizer, name)
    if out.initializer.kind not in Initializer.Kind.values():
        raise InvalidArgumentError(
            f"table {name!r}: unknown initializer kind {out.initializer.kind}"
        )
    if not (math.isfinite(out.initializer.scale) and out.initializer.scale >= 0):
        raise InvalidArgumentError(
            f"table {name!r}: initializer scale={out.initializer.scale} must be finite and >= 0"
        )
    if out.kind == TableSpec.DENSE:
        if any(d <= 0 for d in out.shape) or not out.shape:
            raise InvalidArgumentError(
                f"table {name!r}: dense shape {list(out.shape)} must be non-empty and positive"
            )
        if out.dim or out.id_space or out.HasField("policy"):
            raise InvalidArgumentError(
                f"table {name!r}: dim, id_space and policy are for SPARSE tables")
        if out.initializer.kind == Initializer.KIND_UNSPECIFIED:
            out.initializer.kind = Initializer.ZEROS
    elif out.kind == TableSpec.SPARSE:
        if not 0 < out.dim <= 65536:
            raise InvalidArgumentError(
                f"table {name!r}: sparse dim={out.dim} must be in [1, 65536]"
            )
        if out.id_space < 0:
            raise InvalidArgumentError(
                f"table {name!r}: id_space={out.id_space} must be >= 0 (0 = unbounded)"
            )
        if out.shape:
            raise InvalidArgumentError(f"table {name!r}: shape is for DENSE tables; use dim")
        if out.initializer.kind == Initializer.KIND_UNSPECIFIED:
            out.initializer.kind = Initializer.UNIFORM
            out.initializer.scale = out.initializer.scale or DEFAULT_SPARSE_SCALE
        check_policy(out.policy, name)
        fill_score_defaults(out.policy)
        if out.policy == pserver_pb2.SparsePolicy():
            out.ClearField("policy")  # all zero = unset, so both spellings declare alike
    else:
        raise InvalidArgumentError(f"table {name!r}: kind must be DENSE or SPARSE")
    return out


def strictly_increasing(ids: np.ndarray) -> bool:
    """Whether ``ids`` are sorted and unique already (a linear check: then no sort is due)."""
    return bool(np.all(ids[1:] > ids[:-1]))


def sum_duplicates(ids: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique ids, per-id sums of ``grads``): one sort and a segmented sum
    (``np.add.reduceat``), several times faster than ``np.add.at`` on 10k-row batches."""
    if ids.shape[0] == 0:  # a table entry with no ids: nothing to sum (reduceat needs one)
        return ids, grads
    if strictly_increasing(ids):  # what trainers send: their unique ids, sorted
        return ids, grads
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    if starts.shape[0] == ids.shape[0]:
        return sorted_ids, grads[order]
    return sorted_ids[starts], np.add.reduceat(grads[order], starts, axis=0)


class DenseShard:
    """This shard's slice of one dense parameter, with its optimizer state."""

    kind = TableSpec.DENSE

    def __init__(self, spec: pserver_pb2.TableSpec, shard: int, num_shards: int) -> None:
        self.spec = spec
        self.name = spec.name
        self.optimizer: Optimizer = make_optimizer(config_from_spec(spec.optimizer, spec.name))
        self.start, self.stop = dense_bounds(math.prod(spec.shape), shard, num_shards)
        flat_index = np.arange(self.start, self.stop, dtype=np.int64)
        self.values = initial_values(spec.initializer, flat_index, 1)[:, 0].copy()
        self.slots = {
            name: np.full(self.length, self.optimizer.slot_init(name), dtype=np.float32)
            for name in self.optimizer.slots
        }
        self.step = 0

    @property
    def length(self) -> int:
        return self.stop - self.start

    def check_values(self, values: np.ndarray, what: str) -> None:
        if values.dtype != np.float32 or values.shape != (self.length,):
            raise InvalidArgumentError(
                f"{what} for dense table {self.name!r} must be float32 [{self.length}] "
                f"(this shard's slice), got {values.dtype} {list(values.shape)}"
            )

    def compute(self, grad: np.ndarray,
                batch_step: int = 0) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The update of one push, not yet committed. ``batch_step``: the batch's number, which
        the learning-rate schedule reads."""
        step = np.array([self.step + 1], dtype=np.int64)
        return self.optimizer.step(self.values, grad, self.slots, step,
                                   self.optimizer.lr_at(batch_step))

    def compute_delta(self, delta: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Geo mode: the values plus a trainer's delta; the optimizer state is left alone."""
        return self.values + delta, self.slots

    def commit(self, update: tuple[np.ndarray, dict[str, np.ndarray]]) -> None:
        self.values, self.slots = update[0].astype(np.float32, copy=False), update[1]
        self.step += 1

    def values_at(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """A copy of the values and optimizer state at ``mask``, for :meth:`put_back`."""
        return mask, self.values[mask], {k: v[mask] for k, v in self.slots.items()}

    def put_back(self, saved: tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]) -> None:
        """Restore what :meth:`values_at` saved: those positions end as they were."""
        mask, values, slots = saved
        self.values[mask] = values
        for name, old in slots.items():
            self.slots[name][mask] = old

    @property
    def rows(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + sum(s.nbytes for s in self.slots.values()))
