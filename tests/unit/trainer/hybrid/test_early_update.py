"""A lone member's dense update computed during the backward pass (early_update.py): the same
state bit for bit as the round computing it, and dropped whenever it is not the round's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from elasticps.store.embedded_store import EmbeddedStore
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.device import Placement
from elasticps.trainer.hybrid.early_update import EarlyUpdate
from elasticps.trainer.hybrid.group import DenseGroup
from elasticps.trainer.hybrid.params import HybridParams
from elasticps.trainer.hybrid.replica import DenseReplica
from elasticps.trainer.hybrid.rounds import Header, Kind
from elasticps.trainer.optim import Adam, Cosine

OPTIMIZER = Adam(lr=0.05, weight_decay=0.01, clip_norm=0.5, schedule=Cosine(total_steps=20))


class Member:
    """One trainer's side: its model, its dense tables, a lone DenseGroup over its own store,
    and (``early``) the hooks that compute the update during backward."""

    def __init__(self, stack: ExitStack, path: Path, *, early: bool,
                 grad_dtype: str = "float32") -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(),
                                         torch.nn.Linear(4, 1))
        self.dense = DenseSync(self.model)
        self.dense.grad_dtype = grad_dtype
        self.replica = DenseReplica(self.dense.table_specs(OPTIMIZER))
        self.replica.set_initial(self.dense.values())
        store = stack.enter_context(EmbeddedStore(path, "/job/"))
        self.group = DenseGroup(store, self.replica, name="trainer-0", host="127.0.0.1",
                                lease_ttl=5, timeout=10, device=torch.device("cpu"))
        self.group.start()
        stack.callback(self.group.leave)
        self.group.wait_ready()
        self.early = (EarlyUpdate(self.replica, self.group.lock, self.dense.params,
                                  self.group.solo, self.dense.host_grad) if early else None)
        if self.early is not None:
            stack.callback(self.early.close)

    def train(self, x: torch.Tensor, step: int, header_step: int | None = None,
              seq: int | None = None) -> bool:
        """One batch as the step runner and HybridParams run it; True if it was applied."""
        self.dense.load(self.group.values())
        self.dense.zero_grad()
        loss = self.model(x).pow(2).mean()
        if self.early is not None:
            self.early.begin(step)
        loss.backward()
        grads = self.dense.grads()
        early = self.early.take() if self.early is not None else None
        ref_step = step if header_step is None else header_step
        header = Header(Kind.BATCH, 0, 0, step if seq is None else seq, step=ref_step)
        return self.group.submit(header, self.replica.flatten(grads), early)

    def state(self) -> list[np.ndarray]:
        return [a.copy() for t in self.replica.tables.values()
                for a in (t.values, *(t.slots[k] for k in sorted(t.slots)))]


@contextmanager
def members(tmp_path: Path, grad_dtype: str = "float32") -> Iterator[tuple[Member, Member]]:
    with ExitStack() as stack:
        yield (Member(stack, tmp_path / "early.db", early=True, grad_dtype=grad_dtype),
               Member(stack, tmp_path / "plain.db", early=False, grad_dtype=grad_dtype))


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("grad_dtype", ["float32", "bfloat16"])
def test_a_lone_member_commits_the_update_computed_during_backward_bit_for_bit(
        tmp_path: Path, grad_dtype: str) -> None:
    """Adam with weight decay, clipping and a schedule, gradients as they travel (bfloat16
    too): the early path and the round's own computation end in the same bits, step by step."""
    rng = np.random.default_rng(3)
    with members(tmp_path, grad_dtype) as (early, plain):
        for step in range(8):
            x = torch.from_numpy(rng.normal(size=(16, 5)).astype(np.float32))
            assert early.train(x, step)
            assert plain.train(x, step)
            assert _same(early.state(), plain.state()), step
        assert early.group.early_rounds == 8  # every round took the early update
        assert plain.group.early_rounds == 0
        assert early.replica.step == plain.replica.step == 8


def test_an_early_update_that_is_not_the_rounds_is_dropped(tmp_path: Path) -> None:
    """A learning rate of another step, a duplicate batch: the round computes (or skips) as
    it would without one, and the state is still the plain path's."""
    rng = np.random.default_rng(4)
    with members(tmp_path) as (early, plain):
        x = torch.from_numpy(rng.normal(size=(16, 5)).astype(np.float32))
        assert early.train(x, 0, header_step=5)  # computed at step 0's rate, the round's is 5
        assert plain.train(x, 0, header_step=5)
        assert early.group.early_rounds == 0
        assert _same(early.state(), plain.state())
        # The same batch again (seq 0): a duplicate, applied nowhere, early update or not.
        assert not early.train(x, 1, seq=0)
        assert not plain.train(x, 1, seq=0)
        assert early.group.early_rounds == 0
        assert _same(early.state(), plain.state())
        assert early.replica.step == 1


def test_a_member_that_is_not_alone_computes_nothing_early(tmp_path: Path) -> None:
    with ExitStack() as stack:
        member = Member(stack, tmp_path / "job.db", early=False)
        hooks = EarlyUpdate(member.replica, member.group.lock, member.dense.params,
                            solo=lambda: False, grad_of=member.dense.host_grad)
        stack.callback(hooks.close)
        hooks.begin(0)
        member.model(torch.ones(2, 5)).sum().backward()
        assert hooks.take() is None


def test_a_trainer_whose_tensors_travel_to_a_device_computes_nothing_early() -> None:
    """On a GPU (here the device path on the CPU: every tensor copied), reading each gradient
    to the host as it lands would stall the device: hybrid mode makes no hooks there."""
    dense = DenseSync(torch.nn.Linear(2, 1))
    dense.placement = Placement(torch.device("cpu"), transfer=True)
    assert HybridParams(client=None, make_group=None).early_update(dense) is None
