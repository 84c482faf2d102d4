"""``elasticps.dist_train`` as a facade, and the public surface: ``elasticps.Job`` is the one
job spec, and it (with ``launch_job`` and the handle types) loads neither torch nor the
Kubernetes client. Real launches are in tests/unit/jobs and
tests/integration/trainer/test_dist_train_outside_job.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import elasticps as eps
from elasticps.api import TrainerHandle
from elasticps.cluster.spec import Job
from elasticps.config import load_config
from elasticps.errors import ConfigError
from elasticps.jobs.api import JobHandle
from elasticps.trainer.step_worker import LoopStats

OUTSIDE = load_config(env={})


def trainer() -> eps.Trainer:
    return eps.Trainer(torch.nn.Linear(2, 1))


def test_the_public_job_spec_launcher_and_handles_load_neither_torch_nor_kubernetes() -> None:
    script = ("import sys, elasticps as eps; "
              "print(eps.Job is __import__('elasticps.cluster.spec').cluster.spec.Job, "
              "eps.launch_job.__module__, eps.JobHandle.__name__, eps.JobResult.__name__); "
              "print(sorted(m for m in ('torch', 'kubernetes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.splitlines() == ["True elasticps.jobs.api JobHandle JobResult", "[]"]


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'LocalJob'"):
        _ = eps.LocalJob  # type: ignore[attr-defined]


def test_dist_train_runs_in_trainers_only() -> None:
    with pytest.raises(ConfigError, match="not in PADDLE_ROLE=pserver"):
        eps.dist_train(trainer(), None, config=load_config(env={"PADDLE_ROLE": "pserver"}))


def test_the_job_is_a_job_spec_given_once() -> None:
    job = Job(backend="local")
    with pytest.raises(ConfigError, match=r"job= or paddle_job= \(the same argument\), not both"):
        eps.dist_train(trainer(), None, job=job, paddle_job=job, config=OUTSIDE)
    with pytest.raises(ConfigError, match=r"is an elasticps\.Job, not dict"):
        eps.dist_train(trainer(), None, job={"trainers": 2},  # type: ignore[arg-type]
                       config=OUTSIDE)


def test_outside_a_job_it_relaunches_the_running_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["-c"])  # python -c: no script to re-run
    with pytest.raises(ConfigError, match=r"re-runs the current script .* sys.argv\[0\]='-c'"):
        eps.dist_train(trainer(), None, config=OUTSIDE)


def test_outside_a_job_a_cluster_job_takes_no_workdir() -> None:
    job = Job(entry_point="python train.py", job_name="ctr", namespace="ml")
    with pytest.raises(ConfigError, match="runs its entry_point in its own pods"):
        eps.dist_train(trainer(), None, paddle_job=job, workdir="w", config=OUTSIDE)


def test_inside_a_job_the_handle_is_this_trainers_finished_part() -> None:
    stats = LoopStats(samples=3000, batches=6, tasks=2, pass_id=1)
    handle = TrainerHandle(trainer(), stats)
    assert isinstance(handle, JobHandle)
    assert handle.in_job
    assert handle.status_url() is None  # not connected: no store to read the master from
    result = handle.wait()
    assert (result.succeeded, result.state, result.exit_code) == (True, "succeeded", 0)
    assert result.summary == handle.summary()
    assert (result.summary["samples"], result.summary["tasks"]) == (3000, 2)
