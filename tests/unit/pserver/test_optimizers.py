"""Server-side optimizers against torch.optim (dense) and a plain reference (sparse, lazy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec

CASES = [
    ("sgd", OPT(kind=OPT.SGD, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    ("sgd-wd", OPT(kind=OPT.SGD, lr=0.1, weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01)),
    ("momentum", OPT(kind=OPT.MOMENTUM, lr=0.05, momentum=0.9, weight_decay=0.001),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.001)),
    ("adagrad", OPT(kind=OPT.ADAGRAD, lr=0.1, weight_decay=0.01, initial_accumulator=0.1),
     lambda p: torch.optim.Adagrad(p, lr=0.1, weight_decay=0.01, initial_accumulator_value=0.1)),
    ("adam", OPT(kind=OPT.ADAM, lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.01),
     lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01)),
]


def _dense_spec(opt: pserver_pb2.OptimizerSpec, shape: tuple[int, ...]) -> pserver_pb2.TableSpec:
    return pserver_pb2.TableSpec(name="w", kind=pserver_pb2.TableSpec.DENSE, shape=shape,
                                 dtype=common_pb2.FLOAT32, optimizer=opt)


@pytest.mark.slow
@pytest.mark.parametrize(("label", "spec", "make_torch"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("num_shards", [1, 3])
def test_dense_matches_torch(label, spec, make_torch, num_shards) -> None:
    rng = np.random.default_rng(7)
    shape = (5, 7)
    start = rng.normal(size=shape).astype(np.float32)
    grads = [rng.normal(size=shape).astype(np.float32) for _ in range(6)]

    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = make_torch([param])
    for g in grads:
        param.grad = torch.from_numpy(g.copy())
        opt.step()
    expected = param.detach().numpy()

    shards = [ShardState(i, num_shards) for i in range(num_shards)]
    parts = np.array_split(start.reshape(-1), num_shards)
    for i, shard in enumerate(shards):
        shard.declare([_dense_spec(spec, shape)])
        shard.init_dense({"w": parts[i]})
    for seq, g in enumerate(grads):
        for i, part in enumerate(np.array_split(g.reshape(-1), num_shards)):
            assert shards[i].push(BatchKey(0, 0, seq), {"w": part}, {}).applied
    got = np.concatenate([s.pull_dense(["w"])["w"] for s in shards]).reshape(shape)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)
    assert not np.allclose(got, start)  # it actually trained


@pytest.mark.slow
def test_dense_clip_matches_torch_clip_grad_norm() -> None:
    rng = np.random.default_rng(3)
    start = rng.normal(size=20).astype(np.float32)
    grads = [rng.normal(size=20).astype(np.float32) * 5 for _ in range(4)]
    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = torch.optim.SGD([param], lr=0.1, weight_decay=0.01)
    for g in grads:
        param.grad = torch.from_numpy(g.copy())
        torch.nn.utils.clip_grad_norm_([param], max_norm=1.5)
        opt.step()
    shard = ShardState(0, 1)
    spec = OPT(kind=OPT.SGD, lr=0.1, weight_decay=0.01, clip_norm=1.5)
    shard.declare([_dense_spec(spec, (20,))])
    shard.init_dense({"w": start})
    for seq, g in enumerate(grads):
        shard.push(BatchKey(0, 0, seq), {"w": g}, {})
    got = shard.pull_dense()["w"]
    np.testing.assert_allclose(got, param.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_dense_clip_over_three_shards_clips_each_slice_by_its_own_norm() -> None:
    """At N = 3 each shard clips its slice of the gradient by that slice's norm (as
    clip_grad_norm_ on three separate parameters), which is not the global clip."""
    rng = np.random.default_rng(4)
    start = rng.normal(size=21).astype(np.float32)
    grads = [rng.normal(size=21).astype(np.float32) * 5 for _ in range(4)]
    slices = [torch.nn.Parameter(torch.from_numpy(part.copy()))
              for part in np.array_split(start, 3)]
    whole = torch.nn.Parameter(torch.from_numpy(start.copy()))
    per_slice = torch.optim.SGD(slices, lr=0.1, weight_decay=0.01)
    globally = torch.optim.SGD([whole], lr=0.1, weight_decay=0.01)
    for g in grads:
        for param, part in zip(slices, np.array_split(g, 3), strict=True):
            param.grad = torch.from_numpy(part.copy())
            torch.nn.utils.clip_grad_norm_([param], max_norm=1.5)
        whole.grad = torch.from_numpy(g.copy())
        torch.nn.utils.clip_grad_norm_([whole], max_norm=1.5)
        per_slice.step()
        globally.step()
    spec = OPT(kind=OPT.SGD, lr=0.1, weight_decay=0.01, clip_norm=1.5)
    shards = [ShardState(i, 3) for i in range(3)]
    for shard, part in zip(shards, np.array_split(start, 3), strict=True):
        shard.declare([_dense_spec(spec, (21,))])
        shard.init_dense({"w": part})
    for seq, g in enumerate(grads):
        for shard, part in zip(shards, np.array_split(g, 3), strict=True):
            assert shard.push(BatchKey(0, 0, seq), {"w": part}, {}).applied
    got = np.concatenate([s.pull_dense(["w"])["w"] for s in shards])
    expected = torch.cat([p.detach() for p in slices]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, whole.detach().numpy(), atol=1e-3)  # not the global clip


class _ReferenceLazy:
    """Per-row optimizer written the plain way: one Python loop per row, dict of state."""

    def __init__(self, kind: str, lr: float, wd: float, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, momentum: float = 0.9) -> None:
        self.kind, self.lr, self.wd, self.b1, self.b2, self.eps, self.mom = (
            kind, lr, wd, b1, b2, eps, momentum)
        self.rows: dict[int, np.ndarray] = {}
        self.state: dict[int, dict[str, object]] = {}

    def push(self, ids: np.ndarray, grads: np.ndarray) -> None:
        summed: dict[int, np.ndarray] = {}
        for i, g in zip(ids.tolist(), grads, strict=True):
            summed[i] = summed.get(i, np.zeros_like(g, dtype=np.float64)) + g
        for i, g in summed.items():
            w = self.rows[i].astype(np.float64)
            g = g + self.wd * w
            st = self.state.setdefault(i, {"t": 0, "m": 0.0, "v": 0.0, "s": 0.0})
            st["t"] = int(st["t"]) + 1  # type: ignore[call-overload]
            if self.kind == "sgd":
                w = w - self.lr * g
            elif self.kind == "momentum":
                st["m"] = self.mom * st["m"] + g  # type: ignore[operator]
                w = w - self.lr * st["m"]  # type: ignore[operator]
            elif self.kind == "adagrad":
                st["s"] = st["s"] + g * g  # type: ignore[operator]
                w = w - self.lr * g / (np.sqrt(st["s"]) + self.eps)  # type: ignore[arg-type]
            else:
                t = int(st["t"])  # type: ignore[call-overload]
                st["m"] = self.b1 * st["m"] + (1 - self.b1) * g  # type: ignore[operator]
                st["v"] = self.b2 * st["v"] + (1 - self.b2) * g * g  # type: ignore[operator]
                mhat = st["m"] / (1 - self.b1**t)  # type: ignore[operator]
                vhat = st["v"] / (1 - self.b2**t)  # type: ignore[operator]
                w = w - self.lr * mhat / (np.sqrt(vhat) + self.eps)
            self.rows[i] = w


SPARSE = [
    ("sgd", OPT(kind=OPT.SGD, lr=0.1, weight_decay=0.01), {}),
    ("momentum", OPT(kind=OPT.MOMENTUM, lr=0.1, momentum=0.9, weight_decay=0.01), {}),
    ("adagrad", OPT(kind=OPT.ADAGRAD, lr=0.1, eps=1e-10, weight_decay=0.01), {"eps": 1e-10}),
    ("adam", OPT(kind=OPT.ADAM, lr=0.01, weight_decay=0.01), {}),
]


@pytest.mark.parametrize(("kind", "spec", "extra"), SPARSE, ids=[c[0] for c in SPARSE])
@pytest.mark.parametrize("id_space", [1000, 0])
def test_sparse_lazy_matches_reference(kind, spec, extra, id_space) -> None:
    dim = 4
    table = pserver_pb2.TableSpec(
        name="emb", kind=pserver_pb2.TableSpec.SPARSE, dim=dim, id_space=id_space, optimizer=spec,
        initializer=pserver_pb2.Initializer(kind=pserver_pb2.Initializer.NORMAL, scale=0.1, seed=5))
    shard = ShardState(0, 1)
    shard.declare([table])
    shard.init_dense({})
    ref = _ReferenceLazy(kind, spec.lr, spec.weight_decay, **extra)
    rng = np.random.default_rng(11)
    for seq in range(8):
        # Few distinct ids so rows repeat within a push (summed) and skip some pushes (lazy).
        ids = rng.integers(0, 30, size=25).astype(np.int64)
        grads = rng.normal(size=(25, dim)).astype(np.float32)
        for i, row in zip(ids.tolist(), shard.pull_sparse("emb", ids), strict=True):
            ref.rows.setdefault(i, row.astype(np.float64))
        shard.push(BatchKey(0, 1, seq), {}, {"emb": (ids, grads)})
        ref.push(ids, grads)
    ids = np.array(sorted(ref.rows), dtype=np.int64)
    got = shard.pull_sparse("emb", ids)
    want = np.stack([ref.rows[i] for i in ids.tolist()])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
