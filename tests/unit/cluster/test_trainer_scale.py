"""`elasticps scale` and `elasticps autoscale` of a cluster job, over real HTTP against the
fake API server: the trainer count is patched where each backend keeps it, within the spec's
bounds, and the autoscaler carries the pure policy's decisions out there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from elasticps.cli import main
from elasticps.cluster.autoscaler import ClusterAutoscaler, ClusterSettings
from elasticps.cluster.kube_client import VOLCANO_JOB, KubeAPIError, KubeClient
from elasticps.cluster.spec import Job
from elasticps.cluster.submit import submit
from elasticps.cluster.trainer_scale import scale_trainers, trainer_count
from elasticps.errors import ConfigError
from tests.unit.cluster.fake_kube import FakeKube
from tests.unit.cluster.test_submit import SPEC, secrets

VOLCANO_JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs"
BATCH_JOBS = "/apis/batch/v1/namespaces/ml/jobs"
BOUNDED = {**SPEC, "trainers": 2, "min_trainers": 1, "max_trainers": 4}


def submitted(fake: FakeKube, client: KubeClient, backend: str) -> None:
    submit(Job.from_dict(BOUNDED), backend, client=client, secrets=secrets(), environ={})
    fake.requests.clear()  # submission's own requests are not the scaling's


def volcano_replicas(fake: FakeKube) -> dict[str, int]:
    job = fake.objects[VOLCANO_JOBS]["ctr"]
    return {t["name"]: t["replicas"] for t in job["spec"]["tasks"]}


def patches(fake: FakeKube) -> list[Any]:
    return [r.body for r in fake.requests if r.method == "PATCH"]


def test_volcano_scale_patches_the_trainer_task_replicas_only(fake: FakeKube,
                                                              client: KubeClient) -> None:
    submitted(fake, client, "volcano")
    before = scale_trainers(client, "ctr", "ml", 4)
    assert (before.backend, before.trainers, before.min_trainers, before.max_trainers) == \
        ("volcano", 2, 1, 4)
    assert volcano_replicas(fake) == {"master": 1, "pserver": 1, "trainer": 4}
    # conditional on what was read: a scaler that raced us would fail its test op
    assert patches(fake)[-1][:2] == [
        {"op": "test", "path": "/spec/tasks/2/name", "value": "trainer"},
        {"op": "test", "path": "/spec/tasks/2/replicas", "value": 2}]
    assert trainer_count(client, "ctr", "ml").trainers == 4


@pytest.mark.slow
def test_kubernetes_scale_patches_the_indexed_job_together(fake: FakeKube,
                                                           client: KubeClient) -> None:
    submitted(fake, client, "kubernetes")
    scale_trainers(client, "ctr", "ml", 3)
    spec = fake.objects[BATCH_JOBS]["ctr-trainer"]["spec"]
    assert (spec["parallelism"], spec["completions"], spec["maxFailedIndexes"]) == (3, 3, 2)
    scale_trainers(client, "ctr", "ml", 1)
    spec = fake.objects[BATCH_JOBS]["ctr-trainer"]["spec"]
    assert (spec["parallelism"], spec["completions"], spec["maxFailedIndexes"]) == (1, 1, 0)


@pytest.mark.parametrize("trainers", [0, 5])
def test_a_count_outside_the_specs_bounds_is_refused_and_changes_nothing(
        fake: FakeKube, client: KubeClient, trainers: int) -> None:
    submitted(fake, client, "volcano")
    with pytest.raises(ConfigError, match=rf"--trainers={trainers} is outside job ctr's bounds "
                                          r"\[1, 4\]"):
        scale_trainers(client, "ctr", "ml", trainers)
    assert patches(fake) == []
    assert volcano_replicas(fake)["trainer"] == 2


def test_a_patch_made_stale_by_another_scaler_is_refused_whole(fake: FakeKube,
                                                               client: KubeClient) -> None:
    submitted(fake, client, "volcano")
    fake.objects[VOLCANO_JOBS]["ctr"]["spec"]["tasks"][2]["replicas"] = 3  # someone else
    with pytest.raises(KubeAPIError) as refused:
        client.patch(VOLCANO_JOB, "ml", "ctr", [
            {"op": "test", "path": "/spec/tasks/2/replicas", "value": 2},
            {"op": "replace", "path": "/spec/tasks/2/replicas", "value": 4}])
    assert refused.value.status == 422
    assert volcano_replicas(fake)["trainer"] == 3


@pytest.mark.slow
def test_scale_command_reaches_a_cluster_job(fake: FakeKube, client: KubeClient,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    submitted(fake, client, "volcano")
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    assert main(["scale", "ctr", "-n", "ml", "--trainers", "3",
                 "--kubeconfig", str(kubeconfig)]) == 0
    assert "asked for 3 trainer(s) (was 2; bounds [1, 4])" in capsys.readouterr().out
    assert volcano_replicas(fake)["trainer"] == 3


# --------------------------------------------------------------------------- the autoscaler


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def seed_running(fake: FakeKube, *, trainers: int, pending: int = 0) -> None:
    base = {"app.kubernetes.io/managed-by": "elasticps", "elasticps.io/job": "ctr"}
    fake.add_pod("ml", "ctr-master-0", {**base, "elasticps.io/role": "master"})
    for i in range(trainers):
        fake.add_pod("ml", f"ctr-trainer-{i}", {**base, "elasticps.io/role": "trainer"},
                     annotations={"volcano.sh/task-index": str(i)},
                     phase="Pending" if i >= trainers - pending else "Running")


def master_page(fake: FakeKube, *, todo: int, rate: float, live: int,
                pending: int | None = None) -> None:
    """The master's status page: ``live`` trainers, each holding a task unless ``pending``."""
    held = live if pending is None else pending
    fake.proxy_pages[("ml", "https:ctr-master:http", "/api/status")] = json.dumps({
        "state": "running", "pass": 0, "num_passes": 1, "num_tasks": 100,
        "counts": {"todo": todo, "pending": held, "done": 100 - todo - held},
        "throughput_records_per_s": rate,
        "live_trainers": [f"trainer-{i}" for i in range(live)]})


@pytest.mark.slow
def test_the_autoscaler_grows_a_job_with_work_and_room_then_keeps_what_paid(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "volcano")
    seed_running(fake, trainers=2)
    master_page(fake, todo=60, rate=1000.0, live=2)
    clock, said = Clock(), []
    scaler = ClusterAutoscaler(client, "ctr", "ml", ClusterSettings(cooldown_s=60, up_after=3),
                               say=said.append, clock=clock)
    decisions = []
    for _ in range(8):  # the first look starts a cooldown; then three looks that want more
        decisions.append(scaler.step())
        clock.now += 15
    grown = [d for d in decisions if d is not None]
    assert [d.target for d in grown] == [3]
    assert volcano_replicas(fake)["trainer"] == 3
    assert said == [f"elasticps autoscale: job ctr: 2 -> 3 trainers ({grown[0].reason})"]
    # The third trainer runs and the job is 40% faster: the step is kept.
    seed_running(fake, trainers=3)
    master_page(fake, todo=40, rate=1400.0, live=3)
    clock.now += 61
    assert scaler.step() is None
    assert volcano_replicas(fake)["trainer"] == 3


def test_the_autoscaler_adds_nobody_while_a_trainer_pod_is_pending(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "volcano")
    seed_running(fake, trainers=2, pending=1)  # the cluster had no room for the last one
    master_page(fake, todo=60, rate=1000.0, live=1)
    clock = Clock()
    scaler = ClusterAutoscaler(client, "ctr", "ml", ClusterSettings(cooldown_s=0, up_after=1),
                               say=lambda _: None, clock=clock)
    for _ in range(6):
        assert scaler.step() is None
        clock.now += 15
    assert patches(fake) == []


def test_the_autoscaler_shrinks_to_the_backlog_but_never_below_min(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "volcano")
    scale_trainers(client, "ctr", "ml", 4)
    seed_running(fake, trainers=4)
    master_page(fake, todo=0, rate=900.0, live=4, pending=1)  # one task left, 4 trainers
    scaler = ClusterAutoscaler(client, "ctr", "ml", ClusterSettings(cooldown_s=0),
                               say=lambda _: None, clock=Clock())
    decision = scaler.step()
    assert decision is not None
    assert decision.target == 1  # min_trainers, though no task is left
    assert volcano_replicas(fake)["trainer"] == 1
