"""The sharding rule, the one place it is written: which shard of ``num_shards`` owns what.

- a sparse row ``id`` lives on shard ``id % num_shards``;
- a dense parameter is flattened (C order) and split by ``np.array_split(flat, num_shards)``:
  shard ``i`` owns one contiguous slice, the first ``size % num_shards`` slices one element
  longer.

Clients route pushes and pulls by it, shards check what they are sent against it, a resharding
re-splits by it, and exactly-once across a resharding asks it which old shard owned a row.
"""

from __future__ import annotations

import numpy as np


def route_ids(ids: np.ndarray, num_shards: int) -> np.ndarray:
    """The shard of each sparse id (int64, the shape of ``ids``)."""
    return ids % num_shards


def dense_bounds(size: int, shard: int, num_shards: int) -> tuple[int, int]:
    """[start, stop) of part ``shard`` of ``np.array_split(flat_of_size, num_shards)``."""
    base, extra = divmod(size, num_shards)
    start = shard * base + min(shard, extra)
    return start, start + base + (1 if shard < extra else 0)


def dense_parts(flat: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """A flattened dense parameter cut into its shards' slices, in shard order (views)."""
    return np.array_split(flat, num_shards)


def dense_owner(positions: np.ndarray, size: int, num_shards: int) -> np.ndarray:
    """The shard owning each flat position of a dense parameter of ``size`` elements."""
    starts = np.array([dense_bounds(size, s, num_shards)[0] for s in range(num_shards)],
                      dtype=np.int64)
    return np.searchsorted(starts, positions, side="right") - 1
