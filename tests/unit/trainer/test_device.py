"""The trainer's device path (device.py) run on the CPU: with ``transfer=True`` every tensor
crosses host -> device -> host as it does on a GPU (copies, non_blocking moves, host
round trips; only the pinning needs CUDA), and training must still equal local PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elasticps.data.batch import Bag, Batch
from elasticps.errors import ConfigError
from elasticps.proto import common_pb2
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.device import CPU, Placement, select_device
from elasticps.trainer.objective import Objective
from elasticps.trainer.sparse_rows import SparseTables
from elasticps.trainer.step import StepRunner
from elasticps.trainer.trainer import Trainer
from tests.unit.trainer.sgd_tables import SgdTables
from tests.unit.trainer.test_binding import BATCHES, Tiny, reference
from tests.unit.trainer.test_prefetch_exact import batches, distributed, local

DEVICE_PATH = Placement(torch.device("cpu"), pin=False, transfer=True)


def test_the_device_is_chosen_by_one_function() -> None:
    assert select_device(False) is CPU
    assert select_device(False, cuda_available=lambda: True) is CPU
    gpu = select_device(True, cuda_available=lambda: True)
    assert (gpu.device, gpu.pin, gpu.copies) == (torch.device("cuda:0"), True, True)
    with pytest.raises(ConfigError, match=r"PADDLE_USE_GPU is true but PyTorch sees no CUDA "
                                          r"device.*TORCH_VARIANT=cu126"):
        select_device(True, cuda_available=lambda: False)
    assert Placement.for_device("cpu") == CPU


def test_the_device_path_copies_and_the_cpu_path_shares() -> None:
    array = np.arange(6, dtype=np.float32)
    shared, copied = CPU.tensor(array), DEVICE_PATH.tensor(array)
    array[0] = 99.0
    assert float(shared[0]) == 99.0
    assert float(copied[0]) == 0.0
    batch = Batch(label=np.ones(2, np.float32), ids={"a": np.array([1, 2])},
                  bags={"t": Bag(np.array([3, 4, 5]), np.array([0, 1, 3]))},
                  vectors={"v": np.ones((2, 3), np.float32)})
    moved = DEVICE_PATH.batch(batch)
    batch.ids["a"][0] = 7
    batch.vectors["v"][0, 0] = 5.0
    assert moved.ids["a"].tolist() == [1, 2]
    assert moved.vectors["v"].tolist() == [[1.0] * 3] * 2
    assert moved.bags["t"].offsets.tolist() == [0, 1, 3]
    assert moved.source is batch
    assert DEVICE_PATH.host(copied).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("prefetch", [False, True], ids=["sync", "prefetch"])
def test_the_device_path_trains_exactly_like_local_pytorch(prefetch: bool) -> None:
    """Two tables, embeddings and weighted bags, dense layers: through the device path."""
    data = batches()
    client, _ = distributed(prefetch, data, placement=DEVICE_PATH)
    expected = local(stale=prefetch, data=data)
    for name in ("out.weight", "out.bias"):
        np.testing.assert_allclose(client.dense[name], expected[name].numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    tables = {"a": expected["pair.table"], "b": expected["tags_mean.table"]}
    for (table, row_id), row in client.rows.items():
        np.testing.assert_allclose(row, tables[table][row_id].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_trainer_on_the_device_path_trains_and_evaluates() -> None:
    torch.manual_seed(0)
    trainer = Trainer(Tiny(), prefetch=False, device=DEVICE_PATH)
    tables = SgdTables(lr=0.5, dims={"emb": 3})
    trainer.attach(tables, None, "trainer-0")
    assert trainer.placement is DEVICE_PATH
    runner = trainer.runner()
    seen = []
    for k, batch in enumerate(BATCHES):
        result = runner.run(batch, common_pb2.BatchRef(task_id=0, seq=k), None)
        seen.append(result.output.device)
    runner.close()
    dense, table = reference()
    for name, value in dense.items():
        np.testing.assert_allclose(tables.dense[name], value, rtol=1e-5, atol=1e-6)
    for (_, row_id), row in tables.rows.items():
        np.testing.assert_allclose(row, table[row_id], rtol=1e-5, atol=1e-6)
    assert set(seen) == {torch.device("cpu")}  # outputs come back to the host
    metrics = trainer.evaluate(BATCHES)
    assert metrics["samples"] == 8
    assert np.isfinite(metrics["logloss"])
    trainer.close()


def test_runner_without_a_trainer_takes_the_tables_placement() -> None:
    model = Tiny()
    tables = SparseTables(model)
    tables.placement = DEVICE_PATH
    dense = DenseSync(model)
    dense.placement = DEVICE_PATH
    client = SgdTables(lr=0.5, dims={"emb": 3})
    client.initialize(dense.values())
    runner = StepRunner(model, Objective("binary"), client, dense, prefetch=False,
                        tables=tables)
    runner.run(BATCHES[0], common_pb2.BatchRef(task_id=0, seq=0), None)
    runner.close()
    assert model.embedding._placement is DEVICE_PATH


def test_the_job_config_decides_the_device() -> None:
    """PADDLE_USE_GPU=true on a machine without CUDA stops the trainer with a clear error
    (on one with CUDA the model moves to cuda:0)."""
    from elasticps.config import load_config

    trainer = Trainer(Tiny(), prefetch=False)
    trainer.config = load_config(env={"PADDLE_USE_GPU": "true"})
    if torch.cuda.is_available():
        trainer.attach(SgdTables(lr=0.5, dims={"emb": 3}), None, "trainer-0")
        assert trainer.placement.device == torch.device("cuda:0")
        assert next(trainer.model.parameters()).is_cuda
        trainer.close()
    else:
        with pytest.raises(ConfigError, match="PADDLE_USE_GPU is true but PyTorch sees no CUDA"):
            trainer.attach(SgdTables(lr=0.5, dims={"emb": 3}), None, "trainer-0")
    cpu = Trainer(Tiny(), prefetch=False)
    cpu.config = load_config(env={"PADDLE_USE_GPU": "false"})
    cpu.attach(SgdTables(lr=0.5, dims={"emb": 3}), None, "trainer-0")
    assert cpu.placement is CPU
    cpu.close()
