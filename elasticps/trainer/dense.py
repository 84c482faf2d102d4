"""Dense parameters of any ``torch.nn.Module``, synchronised with the pservers.

Every trainable parameter becomes a DENSE table named by its parameter name (``mlp.0.weight``);
the pservers split its flattened values across shards by size. The trainer pulls fresh values
every ``sync_every`` batches and pushes every batch's gradient; the optimizer runs on the
pservers, so the module never steps locally.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from elasticps.errors import ConfigError, InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.rpc.codec import round_to_bfloat16
from elasticps.trainer.device import CPU, Placement
from elasticps.trainer.optim import OptimizerSpec


class DenseSync:
    """The dense tables of one module: specs, initial values, loading pulls, reading grads."""

    def __init__(self, model: torch.nn.Module, sync_every: int = 1) -> None:
        if sync_every < 1:
            raise ConfigError(f"dense_sync_every={sync_every!r} must be >= 1")
        self.sync_every = sync_every
        self.placement: Placement = CPU  # where the module computes (the trainer sets it)
        # How the gradients travel (PADDLE_DENSE_GRAD_DTYPE; the trainer sets it): with
        # bfloat16, grads() rounds them here, so that the trainer's own replica of the update
        # applies the very values the pservers receive.
        self.grad_dtype = "float32"
        self.params: dict[str, torch.nn.Parameter] = {
            name: p for name, p in model.named_parameters() if p.requires_grad
        }
        for name, p in self.params.items():
            if p.dtype != torch.float32:
                raise ConfigError(f"parameter {name!r} has dtype {p.dtype}; pservers hold float32")

    @property
    def names(self) -> list[str]:
        return list(self.params)

    def table_specs(self, optimizer: OptimizerSpec) -> list[pserver_pb2.TableSpec]:
        return [
            pserver_pb2.TableSpec(
                name=name, kind=pserver_pb2.TableSpec.DENSE, shape=list(p.shape),
                dtype=common_pb2.FLOAT32, optimizer=optimizer.to_proto(),
            )
            for name, p in self.params.items()
        ]

    def values(self) -> dict[str, np.ndarray]:
        """Current local values (the initialising trainer sends these)."""
        return {name: self.placement.host(p).copy() for name, p in self.params.items()}

    def shaped(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Pulled values in their parameters' shapes, checked, the module left as it is."""
        return {name: self._checked(values, name, p).reshape(p.shape)
                for name, p in self.params.items()}

    @staticmethod
    def _checked(values: Mapping[str, np.ndarray], name: str,
                 p: torch.nn.Parameter) -> np.ndarray:
        if name not in values:
            raise InvalidArgumentError(f"pull returned no values for dense table {name!r}")
        array = np.asarray(values[name], dtype=np.float32)
        if array.size != p.numel():
            raise InvalidArgumentError(
                f"dense table {name!r} holds {array.size} values, parameter needs {p.numel()}")
        return array

    def load(self, values: Mapping[str, np.ndarray]) -> None:
        """Overwrite the module's parameters with pulled values."""
        for name, p in self.params.items():
            array = self._checked(values, name, p)
            with torch.no_grad():
                if self.placement.copies:
                    p.copy_(self.placement.tensor(array.reshape(p.shape)))
                else:  # the CPU: straight into the parameter's memory
                    np.copyto(p.detach().numpy(), array.reshape(p.shape))

    def grads(self) -> dict[str, np.ndarray]:
        """This batch's gradients (rounded to bfloat16 when they travel so); a parameter the
        batch did not reach pushes zeros."""
        return {name: (self.host_grad(p.grad) if p.grad is not None
                       else np.zeros(p.shape, dtype=np.float32))
                for name, p in self.params.items()}

    def host_grad(self, grad: torch.Tensor) -> np.ndarray:
        """One parameter's gradient as it travels: on the host, float32 values (rounded to
        bfloat16 ones when they travel so)."""
        host = self.placement.host(grad)
        return round_to_bfloat16(host) if self.grad_dtype == "bfloat16" else host

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None
