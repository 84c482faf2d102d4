"""The dense group's backend choice and its one-member collectives."""

from __future__ import annotations

import numpy as np
import torch

from elasticps.trainer.hybrid.collectives import (
    LocalCollectives,
    device_label,
    select_backend,
)


def test_nccl_is_chosen_when_every_member_has_a_gpu_of_its_own_and_torch_has_nccl() -> None:
    gpus = ["cuda/GPU-aaaa", "cuda/GPU-bbbb"]
    assert select_backend(gpus, nccl_available=lambda: True) == "nccl"
    assert select_backend(gpus, nccl_available=lambda: False) == "gloo"
    # one GPU shared by two trainers (NCCL refuses it), or a member on the CPU: gloo
    assert select_backend(["cuda/GPU-aaaa"] * 2, nccl_available=lambda: True) == "gloo"
    assert select_backend(["cuda/GPU-aaaa", "cpu"], nccl_available=lambda: True) == "gloo"
    assert select_backend([], nccl_available=lambda: True) == "gloo"
    assert device_label(torch.device("cpu")) == "cpu"


def test_a_generation_of_one_answers_every_collective_itself() -> None:
    local = LocalCollectives()
    values = np.arange(4, dtype=np.float32)
    assert local.all_reduce(values) is values
    assert local.broadcast(values, 0) is values
    assert local.all_gather(np.array([1, 2])).tolist() == [[1, 2]]
