"""What the examples' tests share: running an example under ``elasticps run``, the one-process
reference (the example's own model with local lookups from ``examples/tabular/local_layers.py``,
started from the values the job dumped, trained by torch on the same batches in the same
order), and the comparison of a job's export with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file

from elasticps.data import Batch
from tests.helpers import REPO, load_example, run_cli

LocalTables = load_example("examples/tabular/local_layers.py").LocalTables


@dataclass
class Job:
    workdir: Path
    proc: subprocess.CompletedProcess[str]

    @property
    def summary(self) -> dict[str, Any]:
        doc = json.loads((self.workdir / "summary.json").read_text())
        assert isinstance(doc, dict)
        return doc

    def log(self, name: str) -> str:
        return (self.workdir / "logs" / f"{name}.log").read_text()


def run_job(script: str, workdir: Path, args: Sequence[str], *, trainers: int,
            pservers: int) -> Job:
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", str(trainers),
            "--pservers", str(pservers), "--workdir", str(workdir), "--grace", "5",
            str(REPO / script), *args]
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Job(workdir, proc)


def cli(*args: str, cwd: Path) -> str:
    """``elasticps ARGS`` in ``cwd``, as a user types it (run in-process); its stdout."""
    done = run_cli(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


class Reference:
    """A one-process PyTorch run of an example's model, from the values a job dumped
    (``--dump-initial``): local tables holding the dumped rows, dense parameters loaded by
    name, ``torch.optim.SGD``."""

    def __init__(self, initial: Path, build: Callable[[LocalTables], torch.nn.Module]) -> None:
        self.start = load_file(str(initial))
        self.tables = LocalTables.from_tensors(
            {k: torch.from_numpy(v) for k, v in self.start.items()}, trainable=True)
        self.model = build(self.tables)
        self.dense_names = [n for n in self.start if not n.startswith("sparse/")]
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name in self.dense_names:
                params[name].copy_(torch.from_numpy(self.start[name]))

    def train(self, batches: Callable[[], Iterable[Batch]], passes: int, lr: float,
              loss: Callable[[Any, torch.Tensor], torch.Tensor],
              optimizer_class: type[torch.optim.Optimizer] = torch.optim.SGD) -> None:
        """``passes`` over ``batches()`` with ``optimizer_class`` (SGD, or Adagrad: the
        pservers' Adagrad is torch's with its defaults) over every parameter."""
        self.fit(batches, passes, loss, lambda dense, sparse: [
            (optimizer_class(dense + sparse, lr=lr), None)])

    def fit(self, batches: Callable[[], Iterable[Batch]], passes: int,
            loss: Callable[[Any, torch.Tensor], torch.Tensor],
            optimizers: Callable[[list[torch.nn.Parameter], list[torch.nn.Parameter]],
                                 list[tuple[torch.optim.Optimizer, Any]]]) -> None:
        """Train on ``batches`` for ``passes`` passes with the ``(optimizer, lr scheduler or
        None)`` pairs ``optimizers(dense parameters, table parameters)`` makes; each
        scheduler steps once per batch."""
        tables = {id(t.weight) for t in self.tables.tables.values()}
        params = list(self.model.parameters())
        steppers = optimizers([p for p in params if id(p) not in tables],
                              [p for p in params if id(p) in tables])
        for _ in range(passes):
            for batch in batches():
                tensors = batch.to_torch()
                for optimizer, _ in steppers:
                    optimizer.zero_grad()
                loss(self.model(tensors), tensors.label).backward()
                for optimizer, scheduler in steppers:
                    optimizer.step()
                    if scheduler is not None:
                        scheduler.step()

    def outputs(self, batches: Iterable[Batch]) -> tuple[np.ndarray, np.ndarray]:
        """(model outputs, labels) over ``batches``."""
        outputs, labels = [], []
        with torch.no_grad():
            for batch in batches:
                outputs.append(self.model(batch.to_torch()).numpy())
                labels.append(batch.label)
        return np.concatenate(outputs), np.concatenate(labels)

    def differences(self, export: Path) -> dict[str, float]:
        """Max |export - reference| per dense parameter and sparse table, after checking that
        the export holds the same tables with the same ids; also asserts that training moved
        every table (the comparison is not between two untouched copies)."""
        final = load_file(str(export / "model.safetensors"))
        params = dict(self.model.named_parameters())
        out: dict[str, float] = {}
        assert any(not np.allclose(params[name].detach().numpy(), self.start[name])
                   for name in self.dense_names)
        for name in self.dense_names:
            np.testing.assert_allclose(final[name], params[name].detach().numpy(), rtol=1e-4,
                                       atol=1e-5, err_msg=name)
            out[name] = float(np.abs(final[name] - params[name].detach().numpy()).max())
        for table, rows in self.tables.tables.items():
            np.testing.assert_array_equal(final[f"sparse/{table}/ids"], rows.ids.numpy())
            local = rows.weight.detach().numpy()[:-1]  # without the zero row of unknown ids
            np.testing.assert_allclose(final[f"sparse/{table}/rows"], local, rtol=1e-4,
                                       atol=1e-5, err_msg=table)
            out[f"sparse/{table}"] = float(np.abs(final[f"sparse/{table}/rows"] - local).max())
            assert not np.allclose(local, self.start[f"sparse/{table}/rows"]), table
        return out
