"""This trainer's own dense update, applied locally the way the pservers apply it.

With prefetch, batch k+1's dense values are pulled while batch k computes, so they lack batch
k's own update: a staleness of one batch that cost the CTR benchmark 0.008 test AUC (the sparse
rows' staleness cost 0.001). :class:`OwnDenseUpdate` keeps a replica of the pservers' dense
optimizer state for this trainer's pushes and runs the same update (``pserver/optimizers.py``,
shard by shard, as ``np.array_split`` splits a dense table), so the next batch computes on the
values the pservers hold once batch k is applied:

- the pulled values are exactly the ones batch k computed on (no other trainer pushed in
  between): the replica's result *is* the pservers' state after batch k, bit for bit, when
  the replica has seen every push to the table (one trainer from the start);
- they differ (another trainer's pushes arrived): the pulled values plus this trainer's own
  step, an approximation that removes this trainer's own staleness only.

The pservers stay the only owner of the parameters: every pull still overwrites what the
replica computed, so a replica that started late (a restarted trainer) costs one step's error,
not a drift.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from elasticps.proto import pserver_pb2
from elasticps.pserver.optimizers import Optimizer, config_from_spec, make_optimizer
from elasticps.pserver.routing import dense_bounds


class _Part:
    """One shard's slice of one dense table: the optimizer state the pserver keeps for it."""

    def __init__(self, optimizer: Optimizer, start: int, stop: int) -> None:
        self.start, self.stop = start, stop
        self.slots = {name: np.full(stop - start, optimizer.slot_init(name), dtype=np.float32)
                      for name in optimizer.slots}


class OwnDenseUpdate:
    """Replicas of the dense tables' optimizers for this trainer's own pushes."""

    def __init__(self, specs: list[pserver_pb2.TableSpec], num_shards: int) -> None:
        self._optimizers: dict[str, Optimizer] = {}
        self._parts: dict[str, list[_Part]] = {}
        self._steps: dict[str, int] = {}
        for spec in specs:
            optimizer = make_optimizer(config_from_spec(spec.optimizer, spec.name))
            size = int(np.prod(spec.shape))
            self._optimizers[spec.name] = optimizer
            self._parts[spec.name] = [_Part(optimizer, *dense_bounds(size, shard, num_shards))
                                      for shard in range(num_shards)]
            self._steps[spec.name] = 0

    @property
    def fresh(self) -> bool:
        """No step taken yet: the optimizer state is the initial one, as on fresh pservers."""
        return not any(self._steps.values())

    def step(self, values: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray],
             batch_step: int = 0) -> dict[str, np.ndarray]:
        """The values after the pservers apply ``grads`` to ``values`` (what this batch ran
        on) at the learning rate of the batch numbered ``batch_step`` (``BatchRef.step``);
        advances the replica's state as the pservers advance theirs."""
        out: dict[str, np.ndarray] = {}
        for name, grad in grads.items():
            optimizer = self._optimizers[name]
            flat_values = np.ascontiguousarray(values[name], dtype=np.float32).reshape(-1)
            flat_grad = np.ascontiguousarray(grad, dtype=np.float32).reshape(-1)
            self._steps[name] += 1
            step = np.array([self._steps[name]], dtype=np.int64)
            lr = optimizer.lr_at(batch_step)
            new = np.empty_like(flat_values)
            for part in self._parts[name]:
                cut = slice(part.start, part.stop)
                new[cut], part.slots = optimizer.step(flat_values[cut], flat_grad[cut],
                                                      part.slots, step, lr)
            out[name] = new.reshape(np.shape(values[name]))
        return out


def corrected(pulled: Mapping[str, np.ndarray], ran_on: Mapping[str, np.ndarray],
              after_own: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Values for the next batch from a pull that lacks this trainer's last update: the
    replica's result where the pull equals what the batch ran on, else the pull plus the
    trainer's own step."""
    out: dict[str, np.ndarray] = {}
    for name, values in pulled.items():
        before, after = ran_on.get(name), after_own.get(name)
        if before is None or after is None:
            out[name] = values
        elif values is before or np.array_equal(values.reshape(-1), before.reshape(-1)):
            # The same array object: a pull the pservers answered "unchanged" hands back the
            # very arrays the batch ran on (dense_chain.py), and comparing 1.7 MB costs ~1 ms.
            out[name] = after if after.shape == values.shape else after.reshape(values.shape)
        else:
            out[name] = values + (after.reshape(values.shape) - before.reshape(values.shape))
    return out
