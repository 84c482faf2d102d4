"""The dtype a trainer's forward and backward passes compute in (``PADDLE_COMPUTE_DTYPE``).

``float32`` (the default) computes as the model is written. ``bfloat16`` runs the model's call
under ``torch.autocast`` (mixed precision, as PyTorch's AMP recipes do): matrix products and
convolutions compute in bfloat16 on CPUs with AMX or AVX-512 BF16 and on GPUs that have it,
while the parameters, their gradients, the optimizer state on the pservers and the replicas,
the loss and everything a push carries stay float32. bfloat16 keeps float32's exponent range,
so no loss scaling is needed. Only training steps compute this way; evaluation, exports and
serving compute in float32 on the same float32 parameters.

What it buys is measured by ``benchmarks/ctr_throughput.py --compute-dtype bfloat16`` (both
sides under autocast, plus PyTorch left in float32; figures in ``benchmarks/results.md``). On a
CPU without native bfloat16, oneDNN emulates it and training gets slower: the trainer warns at
start.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from elasticps.config import COMPUTE_DTYPES
from elasticps.errors import ConfigError

log = logging.getLogger(__name__)

# /proc/cpuinfo flags of an x86 CPU that computes bfloat16 products natively.
NATIVE_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


class ComputePrecision:
    """Where ``dtype`` is ``bfloat16``, :meth:`autocast` wraps a model call in
    ``torch.autocast`` for ``device`` and :meth:`outputs` returns its floating outputs as
    float32 (the loss and the metrics compute on them); with ``float32`` both are no-ops."""

    def __init__(self, dtype: str = "float32", device: torch.device | str = "cpu") -> None:
        if dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"compute dtype {dtype!r} is not one of "
                              f"{', '.join(COMPUTE_DTYPES)}")
        self.dtype = dtype
        self.device = torch.device(device)

    @property
    def mixed(self) -> bool:
        return self.dtype != "float32"

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def outputs(self, output: Any) -> Any:
        return as_float32(output) if self.mixed else output


def as_float32(output: Any) -> Any:
    """``output`` with every reduced-precision floating tensor in it (alone, or in a tuple,
    list or dict) as float32; everything else as it is."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.bfloat16, torch.float16) else output
    if isinstance(output, tuple):
        items = [as_float32(item) for item in output]
        return type(output)(*items) if hasattr(output, "_fields") else tuple(items)
    if isinstance(output, list):
        return [as_float32(item) for item in output]
    if isinstance(output, Mapping):
        return {key: as_float32(value) for key, value in output.items()}
    return output


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The first CPU's feature flags, or None where the file is missing or unreadable (a
    system without ``/proc``)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def warn_if_emulated(precision: ComputePrecision, trainer: str,
                     flags: frozenset[str] | None = None) -> bool:
    """Log how ``trainer`` computes; warn (and return True) when bfloat16 on this CPU is
    emulated, not native (known from its flags; nothing is said where they cannot be read)."""
    if not precision.mixed:
        return False
    log.info("Trainer %s computes its forward and backward passes in %s (torch.autocast; "
             "parameters, gradients and optimizer state stay float32).", trainer,
             precision.dtype)
    if precision.device.type != "cpu":
        return False
    flags = cpu_flags() if flags is None else flags
    if flags is None or flags & NATIVE_BF16_FLAGS:
        return False
    log.warning("Trainer %s: this CPU has neither AMX nor AVX-512 BF16, so bfloat16 products "
                "are emulated and likely slower than float32; PADDLE_COMPUTE_DTYPE=float32 "
                "is the better choice here.", trainer)
    return True


__all__ = ["ComputePrecision", "as_float32", "cpu_flags", "warn_if_emulated"]
