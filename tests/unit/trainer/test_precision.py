"""PADDLE_COMPUTE_DTYPE: a bfloat16 step computes as a local PyTorch step under
``torch.autocast`` does, while what it pushes (gradients) and the loss stay float32; float32
changes nothing; the trainer says which it runs and warns where this CPU would emulate
bfloat16; bad values are refused by name."""

from __future__ import annotations

import logging
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from elasticps.config import load_config
from elasticps.data.batch import Batch
from elasticps.errors import ConfigError
from elasticps.launch.launcher import LaunchOptions, build_specs
from elasticps.proto import common_pb2
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.objective import Objective
from elasticps.trainer.precision import ComputePrecision, as_float32, cpu_flags, warn_if_emulated
from elasticps.trainer.sparse_rows import SparseTables
from elasticps.trainer.step import StepRunner
from elasticps.trainer.trainer import Trainer
from tests.unit.trainer.sgd_tables import SgdTables, initial_table
from tests.unit.trainer.test_prefetch_exact import (
    DIMS,
    IDS,
    LR,
    LocalBag,
    LocalEmbedding,
    Model,
    batches,
    distributed,
)


def _distributed(dtype: str, data: list[Batch]) -> tuple[SgdTables, list[torch.dtype]]:
    """The step runner's training (no prefetch), with the dtype the output layer computed in,
    batch by batch."""
    client, model = distributed(False, data, precision=ComputePrecision(dtype))
    return client, model.seen


def _local(data: list[Batch]) -> dict[str, torch.Tensor]:
    """One-process PyTorch SGD with the model's call under bfloat16 autocast, as PyTorch's AMP
    recipe writes it: the loss on the float32 output."""
    torch.manual_seed(0)
    tables = {t: nn.Parameter(torch.from_numpy(initial_table(t, IDS, d))) for t, d in DIMS.items()}
    model = Model(lambda t, cols: LocalEmbedding(tables[t], cols),
                  lambda t, col, mode, w: LocalBag(tables[t], col, mode, w))
    params = dict(model.named_parameters())
    for batch in data:
        for p in params.values():
            p.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            output = model(batch.to_torch())
        nn.functional.binary_cross_entropy_with_logits(
            output.float(), torch.from_numpy(batch.label)).backward()
        with torch.no_grad():
            for p in params.values():
                if p.grad is not None:
                    p -= LR * p.grad
    return {n: p.detach() for n, p in params.items()}


def test_a_bfloat16_step_trains_as_pytorch_under_autocast_does() -> None:
    data = batches()
    client, seen = _distributed("bfloat16", data)
    assert set(seen) == {torch.bfloat16}  # the products ran in bfloat16
    expected = _local(data)
    for name in ("out.weight", "out.bias"):
        assert client.dense[name].dtype == np.float32  # what the replica/pservers hold
        np.testing.assert_allclose(client.dense[name], expected[name].numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    for (table, row_id), row in client.rows.items():
        source = expected["pair.table"] if table == "a" else expected["tags_mean.table"]
        np.testing.assert_allclose(row, source[row_id].numpy(), rtol=1e-5, atol=1e-6)
    # and it is not the float32 training: the reference could tell the two apart
    exact, seen32 = _distributed("float32", data)
    assert set(seen32) == {torch.float32}
    assert not np.allclose(exact.dense["out.weight"], client.dense["out.weight"],
                           rtol=1e-5, atol=1e-6)


def test_what_a_bfloat16_step_pushes_and_reports_is_float32() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1), nn.Flatten(0))
    pushed: list[dict[str, np.ndarray]] = []

    class Recording(SgdTables):
        def push(self, batch, dense_grads, sparse_grads, counts=None):  # type: ignore[no-untyped-def]
            pushed.append(dict(dense_grads))
            return super().push(batch, dense_grads, sparse_grads, counts)

    client = Recording(0.1)
    dense = DenseSync(model)
    client.initialize(dense.values())
    runner = StepRunner(model, Objective("binary"), client, dense, prefetch=False,
                        feed=lambda b: b.dense, tables=SparseTables(model),
                        precision=ComputePrecision("bfloat16"))
    rng = np.random.default_rng(0)
    batch = Batch(label=rng.integers(0, 2, 6).astype(np.float32),
                  dense=rng.normal(size=(6, 3)).astype(np.float32), dense_names=("a", "b", "c"))
    result = runner.run(batch, common_pb2.BatchRef(seq=0), None)
    runner.close()
    assert result.output.dtype == torch.float32  # the metrics read float32 scores
    assert isinstance(result.loss, float)
    assert np.isfinite(result.loss)
    assert pushed
    assert all(g.dtype == np.float32 for g in pushed[0].values())
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_outputs_come_back_as_float32_in_any_container() -> None:
    Pair = namedtuple("Pair", "score aux")
    half = torch.ones(2, dtype=torch.bfloat16)
    ids = torch.arange(3)
    out = as_float32({"a": half, "b": [half, ids], "c": (half, 7), "d": Pair(half, None)})
    assert out["a"].dtype == torch.float32
    assert out["b"][0].dtype == torch.float32
    assert out["b"][1] is ids
    assert out["c"][0].dtype == torch.float32
    assert out["c"][1] == 7
    assert isinstance(out["d"], Pair)
    assert out["d"].score.dtype == torch.float32
    assert ComputePrecision("float32").outputs(half) is half  # float32 steps are left alone


def test_float32_adds_no_autocast() -> None:
    with ComputePrecision("float32").autocast():
        assert not torch.is_autocast_enabled("cpu")
    with ComputePrecision("bfloat16").autocast():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16


@pytest.mark.parametrize(("flags", "warned"), [
    (frozenset({"avx2", "fma"}), True),
    (frozenset({"avx512f", "amx_bf16"}), False),
    (frozenset({"avx512_bf16"}), False),
])
def test_the_trainer_warns_only_where_bfloat16_would_be_emulated(
        flags: frozenset[str], warned: bool, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="elasticps.trainer.precision"):
        assert warn_if_emulated(ComputePrecision("bfloat16"), "t0", flags) is warned
    assert "computes its forward and backward passes in bfloat16" in caplog.text
    assert ("neither AMX nor AVX-512 BF16" in caplog.text) is warned
    caplog.clear()
    assert warn_if_emulated(ComputePrecision("float32"), "t0", frozenset()) is False
    assert caplog.text == ""


def test_cpu_flags_are_read_from_cpuinfo_and_none_without_it(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == frozenset({"fpu", "avx512f", "amx_bf16"})
    assert cpu_flags(tmp_path / "missing") is None
    info.write_text("processor\t: 0\n")
    assert cpu_flags(info) is None


def test_bad_compute_dtypes_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="compute dtype 'float16' is not one of float32, "
                                          "bfloat16"):
        ComputePrecision("float16")
    with pytest.raises(ConfigError, match="compute_dtype='fp8' is not one of"):
        Trainer(nn.Linear(2, 1), compute_dtype="fp8")


def test_the_run_flag_reaches_the_roles(tmp_path: Path) -> None:
    specs = build_specs(LaunchOptions(script="train.py", compute_dtype="bfloat16"), tmp_path,
                        "file:///x.db", "job", {})
    trainers = [s for s in specs if s.role == "trainer"]
    assert trainers
    assert all(s.env["PADDLE_COMPUTE_DTYPE"] == "bfloat16" for s in trainers)
    assert load_config(env={"PADDLE_COMPUTE_DTYPE": trainers[0].env["PADDLE_COMPUTE_DTYPE"]}
                       ).compute_dtype == "bfloat16"
    plain = build_specs(LaunchOptions(script="train.py"), tmp_path, "file:///x.db", "job", {})
    assert {s.env.get("PADDLE_COMPUTE_DTYPE", "float32") for s in plain} == {"float32"}


def test_a_trainer_s_own_choice_wins_over_the_job_s() -> None:
    trainer = Trainer(nn.Linear(2, 1), compute_dtype="bfloat16")
    assert trainer.precision().dtype == "bfloat16"
    assert Trainer(nn.Linear(2, 1)).precision().dtype == "float32"  # outside a job
