"""AdamW and learning-rate schedules on the pservers against torch.optim.AdamW and
torch.optim.lr_scheduler on one process; the step a schedule reads is the batch's number
(BatchRef.step), not a count a shard keeps."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.optim import lr_scheduler

from elasticps.errors import ConfigError, InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.trainer import optim

BASE_LR = 0.05
Make = Callable[[torch.optim.Optimizer], lr_scheduler.LRScheduler]

SCHEDULES: list[tuple[str, optim.Schedule, Make]] = [
    ("warmup", optim.Warmup(6, start_factor=0.2),
     lambda o: lr_scheduler.LinearLR(o, 0.2, 1.0, 6)),
    ("step", optim.StepDecay(step_size=4, gamma=0.5), lambda o: lr_scheduler.StepLR(o, 4, 0.5)),
    ("cosine", optim.Cosine(total_steps=20, min_lr=0.001),
     lambda o: lr_scheduler.CosineAnnealingLR(o, 20, 0.001)),
    ("warmup-cosine", optim.Cosine(total_steps=14, min_lr=0.001, warmup_steps=6,
                                   warmup_start_factor=0.1),
     lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.LinearLR(o, 0.1, 1.0, 6),
                                             lr_scheduler.CosineAnnealingLR(o, 14, 0.001)], [6])),
    ("warmup-step", optim.StepDecay(step_size=3, gamma=0.7, warmup_steps=5,
                                    warmup_start_factor=0.5),
     lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.LinearLR(o, 0.5, 1.0, 5),
                                             lr_scheduler.StepLR(o, 3, 0.7)], [5])),
]
IDS = [case[0] for case in SCHEDULES]


def _torch_lrs(make: Make, steps: int) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=BASE_LR)
    with warnings.catch_warnings():  # SequentialLR's deprecation notes
        warnings.simplefilter("ignore")
        scheduler = make(opt)
        lrs = []
        for _ in range(steps):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            scheduler.step()
    return lrs


@pytest.mark.parametrize(("label", "schedule", "make"), SCHEDULES, ids=IDS)
def test_each_schedule_gives_torchs_learning_rate_at_every_step(label: str,
                                                                 schedule: optim.Schedule,
                                                                 make: Make) -> None:
    steps = 21  # within a cosine's total_steps (+ warm-up): torch's cosine rises again after
    want = _torch_lrs(make, steps)
    got = [schedule.lr(BASE_LR, step) for step in range(steps)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert len(set(np.round(got, 12))) > 2  # it is a schedule, not a constant


def test_a_cosine_holds_min_lr_after_total_steps() -> None:
    schedule = optim.Cosine(total_steps=10, min_lr=0.002, warmup_steps=3)
    assert schedule.lr(BASE_LR, 13) == pytest.approx(0.002)
    assert schedule.lr(BASE_LR, 500) == pytest.approx(0.002)


def _dense_spec(opt: pserver_pb2.OptimizerSpec, shape: tuple[int, ...]) -> pserver_pb2.TableSpec:
    return pserver_pb2.TableSpec(name="w", kind=pserver_pb2.TableSpec.DENSE, shape=shape,
                                 dtype=common_pb2.FLOAT32, optimizer=opt)


@pytest.mark.parametrize(("label", "schedule", "make"), SCHEDULES, ids=IDS)
@pytest.mark.parametrize("num_shards", [1, 3])
def test_dense_adamw_with_a_schedule_matches_torch(label: str, schedule: optim.Schedule,
                                                   make: Make, num_shards: int) -> None:
    rng = np.random.default_rng(5)
    shape, steps = (4, 6), 12
    start = rng.normal(size=shape).astype(np.float32)
    grads = [rng.normal(size=shape).astype(np.float32) for _ in range(steps)]
    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = torch.optim.AdamW([param], lr=BASE_LR, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduler = make(opt)
        for grad in grads:
            param.grad = torch.from_numpy(grad.copy())
            opt.step()
            scheduler.step()

    spec = optim.AdamW(lr=BASE_LR, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1,
                       schedule=schedule).to_proto()
    shards = [ShardState(i, num_shards) for i in range(num_shards)]
    for shard, part in zip(shards, np.array_split(start.reshape(-1), num_shards), strict=True):
        shard.declare([_dense_spec(spec, shape)])
        shard.init_dense({"w": part})
    for step, grad in enumerate(grads):
        for shard, part in zip(shards, np.array_split(grad.reshape(-1), num_shards), strict=True):
            assert shard.push(BatchKey(0, 0, step, step), {"w": part}, {}).applied
    got = np.concatenate([s.pull_dense(["w"])["w"] for s in shards]).reshape(shape)
    np.testing.assert_allclose(got, param.detach().numpy(), rtol=2e-5, atol=2e-6)
    assert not np.allclose(got, start)


def test_adamw_decays_the_weights_not_the_gradient() -> None:
    """AdamW and Adam with the same weight_decay differ (decoupled vs L2), and AdamW matches
    torch.optim.AdamW at its default decay."""
    rng = np.random.default_rng(9)
    start = rng.normal(size=10).astype(np.float32) * 3
    grads = [rng.normal(size=10).astype(np.float32) for _ in range(5)]
    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = torch.optim.AdamW([param], lr=0.1)  # weight_decay 0.01 by default
    for grad in grads:
        param.grad = torch.from_numpy(grad.copy())
        opt.step()
    results = {}
    for name, spec in (("adamw", optim.AdamW(lr=0.1)),
                       ("adam", optim.Adam(lr=0.1, weight_decay=0.01))):
        shard = ShardState(0, 1)
        shard.declare([_dense_spec(spec.to_proto(), (10,))])
        shard.init_dense({"w": start})
        for seq, grad in enumerate(grads):
            shard.push(BatchKey(0, 0, seq, seq), {"w": grad}, {})
        results[name] = shard.pull_dense()["w"]
    np.testing.assert_allclose(results["adamw"], param.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(results["adam"], results["adamw"], rtol=1e-4, atol=1e-5)


def test_sparse_lazy_adamw_with_a_schedule_matches_torch_when_every_row_is_pushed() -> None:
    """Lazy AdamW steps only the rows a push touches; when every push touches every row it is
    torch.optim.AdamW on the whole table (with repeated ids summed, as autograd sums them)."""
    dim, rows, steps = 3, 8, 10
    schedule = optim.Cosine(total_steps=8, min_lr=0.005, warmup_steps=3, warmup_start_factor=0.2)
    spec = pserver_pb2.TableSpec(
        name="emb", kind=pserver_pb2.TableSpec.SPARSE, dim=dim, id_space=100,
        optimizer=optim.AdamW(lr=BASE_LR, weight_decay=0.05, schedule=schedule).to_proto(),
        initializer=pserver_pb2.Initializer(kind=pserver_pb2.Initializer.NORMAL, scale=0.5,
                                            seed=3))
    shard = ShardState(0, 1)
    shard.declare([spec])
    shard.init_dense({})
    ids = np.arange(rows, dtype=np.int64) * 7
    table = torch.nn.Parameter(torch.from_numpy(shard.pull_sparse("emb", ids).copy()))
    opt = torch.optim.AdamW([table], lr=BASE_LR, weight_decay=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduler = lr_scheduler.SequentialLR(opt, [
            lr_scheduler.LinearLR(opt, 0.2, 1.0, 3),
            lr_scheduler.CosineAnnealingLR(opt, 8, 0.005)], [3])
        rng = np.random.default_rng(2)
        for step in range(steps):
            pushed = np.concatenate([ids, ids[:3]])  # three ids twice: summed
            grads = rng.normal(size=(pushed.size, dim)).astype(np.float32)
            summed = grads[:rows].copy()
            summed[:3] += grads[rows:]
            table.grad = torch.from_numpy(summed)
            opt.step()
            scheduler.step()
            shard.push(BatchKey(0, 0, step, step), {}, {"emb": (pushed, grads)})
    np.testing.assert_allclose(shard.pull_sparse("emb", ids), table.detach().numpy(),
                               rtol=2e-5, atol=2e-6)


def test_the_learning_rate_is_the_batchs_not_the_shards_count() -> None:
    """A batch gets its step's rate on a fresh shard and on one that applied other batches
    first (as after a restore, or on a shard that saw another trainer's pushes): SGD's change
    of a weight under a unit gradient is -lr(step)."""
    schedule = optim.StepDecay(step_size=5, gamma=0.5, warmup_steps=2, warmup_start_factor=0.5)
    spec = _dense_spec(optim.SGD(lr=0.4, schedule=schedule).to_proto(), (1,))
    busy, fresh = ShardState(0, 1), ShardState(0, 1)
    for shard in (busy, fresh):
        shard.declare([spec])
        shard.init_dense({"w": np.zeros(1, np.float32)})
    for seq in range(7):
        busy.push(BatchKey(0, 1, seq, 100 + seq), {"w": np.zeros(1, np.float32)}, {})
    unit = {"w": np.ones(1, np.float32)}
    for shard in (busy, fresh):
        before = shard.pull_dense()["w"][0]
        shard.push(BatchKey(0, 0, 0, 11), unit, {})
        assert before - shard.pull_dense()["w"][0] == pytest.approx(schedule.lr(0.4, 11))
    assert schedule.lr(0.4, 11) == pytest.approx(0.4 * 0.5)  # step 11: 9 after the warm-up
    # Step 0 is in the warm-up: half the rate.
    before = fresh.pull_dense()["w"][0]
    fresh.push(BatchKey(0, 0, 1, 0), unit, {})
    assert before - fresh.pull_dense()["w"][0] == pytest.approx(0.2)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("warmup_steps", -1, "warmup_steps=-1"),
    ("warmup_start_factor", 1.5, "warmup_start_factor=1.5"),
    ("step_size", 3, "step_size and gamma are for STEP"),
])
def test_a_bad_schedule_is_refused_naming_the_table_and_field(field: str, value: float,
                                                              words: str) -> None:
    schedule = pserver_pb2.LRSchedule(kind=pserver_pb2.LRSchedule.COSINE, total_steps=5)
    setattr(schedule, field, value)
    spec = _dense_spec(pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.ADAMW, lr=0.1,
                                                 schedule=schedule), (2,))
    shard = ShardState(0, 1)
    with pytest.raises(InvalidArgumentError, match=f"table 'w': lr schedule: .*{words}"):
        shard.declare([spec])


@pytest.mark.parametrize("make", [
    lambda: optim.StepDecay(step_size=0),
    lambda: optim.StepDecay(step_size=2, gamma=1.5),
    lambda: optim.Cosine(total_steps=0),
    lambda: optim.SGD(lr=0.01, schedule=optim.Cosine(total_steps=5, min_lr=0.1)),
    lambda: optim.Adam(schedule="cosine"),  # type: ignore[arg-type]
])
def test_a_bad_schedule_spec_is_a_config_error(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        make()
