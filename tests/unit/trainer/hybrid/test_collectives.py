"""The dense group's backend choice and its one-member collectives."""

from __future__ import annotations

import numpy as np
import torch

from elasticps.trainer.hybrid.collectives import LocalCollectives, select_backend


def test_nccl_is_chosen_for_cuda_trainers_where_torch_has_it_gloo_otherwise() -> None:
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert select_backend(cuda, nccl_available=lambda: True) == "nccl"
    assert select_backend(cuda, nccl_available=lambda: False) == "gloo"
    assert select_backend(cpu, nccl_available=lambda: True) == "gloo"


def test_a_generation_of_one_answers_every_collective_itself() -> None:
    local = LocalCollectives()
    values = np.arange(4, dtype=np.float32)
    assert local.all_reduce(values) is values
    assert local.broadcast(values, 0) is values
    assert local.all_gather(np.array([1, 2])).tolist() == [[1, 2]]
