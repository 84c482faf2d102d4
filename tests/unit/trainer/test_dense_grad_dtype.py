"""A trainer that sends bfloat16 dense gradients rounds them once, in DenseSync.grads(): what
its own replica applies is what the pservers receive; the client refuses a dtype it does not
know (tests/integration/trainer/test_dense_chain_grpc.py pushes them to real pservers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from elasticps.errors import InvalidArgumentError
from elasticps.pserver.client import PServerClient
from elasticps.rpc.codec import round_to_bfloat16
from elasticps.trainer.dense import DenseSync


def _grads(grad_dtype: str) -> dict[str, np.ndarray]:
    torch.manual_seed(1)
    model = nn.Linear(7, 3)
    dense = DenseSync(model)
    dense.grad_dtype = grad_dtype
    model(torch.randn(5, 7)).square().sum().backward()
    return dense.grads()


def test_bfloat16_grads_are_the_float32_ones_rounded() -> None:
    exact, rounded = _grads("float32"), _grads("bfloat16")
    for name, grad in exact.items():
        assert rounded[name].dtype == np.float32
        assert rounded[name].shape == grad.shape
        np.testing.assert_array_equal(rounded[name], round_to_bfloat16(grad))
        assert not np.array_equal(rounded[name], grad)  # the rounding did something


def test_an_unknown_dense_grad_dtype_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgumentError, match="dense_grad_dtype='float16' is not one of"):
        PServerClient(None, None, 1, dense_grad_dtype="float16")  # type: ignore[arg-type]
