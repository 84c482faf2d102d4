"""Where a trainer computes: the CPU, or a CUDA device with ``PADDLE_USE_GPU``.

The parameters live on the pservers as numpy arrays, so every step crosses between host and
device in the same few places: pulled dense values and sparse rows go in, batches go in,
gradients and outputs come out. All of them go through one :class:`Placement`, chosen by one
function, :func:`select_device`:

* to the device (:meth:`Placement.tensor`): on CUDA the host array is first copied into
  page-locked (pinned) memory, then moved with ``non_blocking=True``, so the copy runs on the
  DMA engine while the CPU goes on queueing the step (and a pull's rows do not wait for the
  previous kernel to finish before they start moving);
* back to the host (:meth:`Placement.host`): a numpy array (``.cpu()`` synchronises, which the
  push needs anyway).

On the CPU, ``transfer=False`` keeps today's zero-copy path (tensors share the arrays'
memory). ``transfer=True`` on the CPU runs the device code path without a GPU — every copy,
``non_blocking`` move and host round trip except the pinning itself, which needs CUDA — which
is how the tests exercise it on machines with no GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from elasticps.data.batch import Batch, TensorBag, TensorBatch
from elasticps.errors import ConfigError


@dataclass(frozen=True)
class Placement:
    """How tensors reach the compute device and come back."""

    device: torch.device
    pin: bool = False  # stage host arrays in pinned memory before an asynchronous copy
    transfer: bool = False  # copy (the device path) even when the device is the CPU

    @classmethod
    def for_device(cls, device: str | torch.device) -> Placement:
        device = torch.device(device)
        on_cpu = device.type == "cpu"
        return cls(device, pin=device.type == "cuda", transfer=not on_cpu)

    @property
    def copies(self) -> bool:
        return self.transfer or self.device.type != "cpu"

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """A host array as a tensor on the device (sharing memory when nothing moves)."""
        host = torch.from_numpy(np.ascontiguousarray(array))
        if not self.copies:
            return host
        if self.pin:
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True, copy=True)

    def host(self, tensor: torch.Tensor) -> np.ndarray:
        """A device tensor as a numpy array on the host."""
        return tensor.detach().cpu().numpy()

    def batch(self, batch: Batch) -> TensorBatch:
        """A batch's arrays as tensors on the device (what ``model(batch)`` receives)."""
        if not self.copies:
            return batch.to_torch()
        bags = {name: TensorBag(self.tensor(bag.values), self.tensor(bag.offsets),
                                None if bag.weights is None else self.tensor(bag.weights))
                for name, bag in batch.bags.items()}
        return TensorBatch(
            label=self.tensor(batch.label), dense=self.tensor(batch.dense),
            dense_names=batch.dense_names,
            ids={name: self.tensor(ids) for name, ids in batch.ids.items()}, bags=bags,
            weight=None if batch.weight is None else self.tensor(batch.weight), source=batch,
            vectors={name: self.tensor(vectors) for name, vectors in batch.vectors.items()})


CPU = Placement(torch.device("cpu"))


def select_device(use_gpu: bool, *,
                  cuda_available: Callable[[], bool] = torch.cuda.is_available) -> Placement:
    """The trainer's placement: CUDA device 0 of the pod when ``use_gpu`` (PADDLE_USE_GPU),
    else the CPU. A GPU asked for but not visible is an error, not a silent CPU run."""
    if not use_gpu:
        return CPU
    if not cuda_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ConfigError(
            "PADDLE_USE_GPU is true but PyTorch sees no CUDA device (torch "
            f"{torch.__version__}, built for CUDA {torch.version.cuda or 'none'}; "
            f"CUDA_VISIBLE_DEVICES={visible!r}). Use the CUDA image (docker build --build-arg "
            "TORCH_VARIANT=cu126), request GPUs (trainer_gpu), or set PADDLE_USE_GPU=false")
    return Placement.for_device("cuda:0")


__all__ = ["CPU", "Placement", "select_device"]
