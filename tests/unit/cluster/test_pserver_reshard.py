"""`elasticps scale JOB --pservers M` of a cluster job, over real HTTP against the fake API
server, for both backends: pservers patched to 0, their pods awaited, the reshard Job created
from the pserver template (and valid against the schemas with the job's other objects), then
the pservers patched to M; a failed Job puts N back; bad counts change nothing.

The fake runs no pods: :class:`Controllers` plays the cluster between two polls (the
command's ``sleep``): pods of a workload asked for 0 pservers go away, and a reshard Job's pod
runs and ends as the test says."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from elasticps.cli import main
from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.pserver_reshard import ClusterResharding, ReshardTimeouts
from elasticps.cluster.quantity import parse_memory
from elasticps.cluster.render_reshard import CONTAINER, LABEL_RESHARD
from elasticps.cluster.spec import Job
from elasticps.cluster.submit import submit
from elasticps.cluster.validate import validate_manifests
from elasticps.errors import ClusterError, ConfigError
from tests.unit.cluster.fake_kube import FakeKube
from tests.unit.cluster.test_submit import SPEC, secrets

VOLCANO_JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs"
BATCH_JOBS = "/apis/batch/v1/namespaces/ml/jobs"
STATEFUL_SETS = "/apis/apps/v1/namespaces/ml/statefulsets"
PODS = "/api/v1/namespaces/ml/pods"
RESHARDABLE = {**SPEC, "trainers": 2, "pservers": 2, "checkpoint": "pvc://ctr-ckpt"}
LABELS = {"app.kubernetes.io/managed-by": "elasticps", "elasticps.io/job": "ctr"}


def submitted(fake: FakeKube, client: KubeClient, backend: str,
              spec: dict[str, Any] = RESHARDABLE) -> None:
    submit(Job.from_dict(spec), backend, client=client, secrets=secrets(), environ={})
    for i in range(2):
        fake.add_pod("ml", f"ctr-pserver-{i}", {**LABELS, "elasticps.io/role": "pserver"})


def pserver_count(fake: FakeKube, backend: str) -> int:
    if backend == "volcano":
        tasks = fake.objects[VOLCANO_JOBS]["ctr"]["spec"]["tasks"]
        return int(next(t for t in tasks if t["name"] == "pserver")["replicas"])
    return int(fake.objects[STATEFUL_SETS]["ctr-pserver"]["spec"]["replicas"])


def pserver_template(fake: FakeKube, backend: str) -> dict[str, Any]:
    if backend == "volcano":
        tasks = fake.objects[VOLCANO_JOBS]["ctr"]["spec"]["tasks"]
        return dict(next(t for t in tasks if t["name"] == "pserver")["template"])
    return dict(fake.objects[STATEFUL_SETS]["ctr-pserver"]["spec"]["template"])


def job_objects(fake: FakeKube) -> list[dict[str, Any]]:
    """Every stored object of the job but pods, as the API server holds them."""
    return [copy.deepcopy(o) for path, items in fake.objects.items() if path != PODS
            for o in items.values()]


class Controllers:
    """What the cluster does between two polls of the command (its ``sleep``)."""

    def __init__(self, fake: FakeKube, backend: str, outcome: str = "succeeded") -> None:
        self.fake, self.backend, self.outcome = fake, backend, outcome
        self.at_zero: list[dict[str, Any]] = []  # the job's objects while no pserver ran
        self.reshard_jobs: list[dict[str, Any]] = []

    def __call__(self, _seconds: float) -> None:
        fake = self.fake
        if pserver_count(fake, self.backend) == 0 and any(
                p["metadata"]["labels"].get("elasticps.io/role") == "pserver"
                for p in fake.objects.get(PODS, {}).values()):
            self.at_zero.append({"objects": job_objects(fake)})
            with fake.lock:  # the pservers checkpointed and exited; their pods are deleted
                for name in [n for n, p in fake.objects[PODS].items()
                             if p["metadata"]["labels"].get("elasticps.io/role") == "pserver"]:
                    del fake.objects[PODS][name]
        for name, job in list(fake.objects.get(BATCH_JOBS, {}).items()):
            if "-reshard-" in name and "status" not in job:
                self.reshard_jobs.append(copy.deepcopy(job))
                pod = f"{name}-x7k2p"
                fake.add_pod("ml", pod, {**LABELS, LABEL_RESHARD: name,
                                         "elasticps.io/role": "reshard"})
                fake.logs[("ml", pod, CONTAINER)] = (
                    "elasticps reshard: job ctr: resharded 2 -> 3 pservers (generation 1)\n"
                    if self.outcome == "succeeded" else
                    "elasticps: error: pserver shard 1 of 2 has no readable checkpoint\n")
                with fake.lock:
                    job["status"] = {self.outcome: 1}


def patch_bodies(fake: FakeKube) -> list[Any]:
    return [r.body for r in fake.requests if r.method == "PATCH"]


def replaced(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {op["path"]: op["value"] for op in ops if op["op"] == "replace"}


def resharding(client: KubeClient, controllers: Controllers, target: int = 3,
               said: list[str] | None = None) -> ClusterResharding:
    return ClusterResharding(client, "ctr", "ml", target, say=(said if said is not None
                                                               else []).append,
                             sleep=controllers)


@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_a_resharding_stops_the_pservers_runs_the_job_then_asks_for_m(
        fake: FakeKube, client: KubeClient, backend: str) -> None:
    submitted(fake, client, backend)
    template = copy.deepcopy(pserver_template(fake, backend))
    controllers, said = Controllers(fake, backend), []
    assert resharding(client, controllers, said=said).run() == 2

    first, second = patch_bodies(fake)
    assert first[0]["op"] == "test"  # conditional on what was read, like trainer scaling
    if backend == "volcano":
        assert replaced(first) == {"/spec/tasks/1/replicas": 0, "/spec/tasks/1/minAvailable": 0,
                                   "/spec/minAvailable": 2}
        assert replaced(second) == {"/spec/tasks/1/replicas": 3,
                                    "/spec/tasks/1/minAvailable": 3, "/spec/minAvailable": 5}
        assert pserver_template(fake, backend) == template  # Volcano refuses template changes
    else:
        assert replaced(first) == {"/spec/replicas": 0}
        env = {e["name"]: e.get("value") for e in
               pserver_template(fake, backend)["spec"]["containers"][0]["env"]}
        assert env["PADDLE_NUM_PSERVERS"] == "3"
        assert env["PADDLE_PSERVERS"].split(",") == [
            f"ctr-pserver-{i}.ctr-pserver.ml.svc" for i in range(3)]
    assert pserver_count(fake, backend) == 3

    # The Job ran from the pserver template with the new command, and is gone afterwards.
    [job] = controllers.reshard_jobs
    assert job["metadata"]["name"] == "ctr-reshard-3"
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    pserver = template["spec"]["containers"][0]
    assert container["command"] == ["elasticps", "reshard", "--pservers", "3", "--wait", "120",
                                    "--layout-file", "/dev/termination-log"]
    assert (container["terminationMessagePath"], container["terminationMessagePolicy"]) == \
        ("/dev/termination-log", "File")
    assert (container["image"], container["env"], container["volumeMounts"]) == \
        (pserver["image"], pserver["env"], pserver["volumeMounts"])
    assert pod["volumes"] == template["spec"]["volumes"]
    assert pod["serviceAccountName"] == template["spec"]["serviceAccountName"]
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 0
    assert not {"ports", "livenessProbe", "readinessProbe", "startupProbe"} & set(container)
    assert container["resources"]["requests"] == pserver["resources"]["requests"]
    # the commit holds the 2 old shards and the 3 new ones at once
    assert parse_memory(container["resources"]["limits"]["memory"]) == \
        5 * parse_memory(pserver["resources"]["limits"]["memory"])
    assert "ctr-reshard-3" not in fake.objects[BATCH_JOBS]
    assert any("resharded 2 -> 3 pservers" in line for line in said)

    # Valid with the job's objects: schemas (kubernetes-validate, Volcano's CRD) and the
    # semantic checks, including Volcano's minAvailable <= replicas while at 0 pservers.
    [at_zero] = controllers.at_zero
    job.pop("status", None)
    assert validate_manifests([*at_zero["objects"], job]) == []
    assert validate_manifests(job_objects(fake)) == []


@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_a_failed_reshard_job_puts_the_old_pservers_back_and_says_why(
        fake: FakeKube, client: KubeClient, backend: str) -> None:
    submitted(fake, client, backend)
    template = copy.deepcopy(pserver_template(fake, backend))
    controllers = Controllers(fake, backend, outcome="failed")
    with pytest.raises(ClusterError, match=r"(?s)Job ctr-reshard-3 failed; nothing was "
                                           r"committed.*shard 1 of 2 has no readable"):
        resharding(client, controllers).run()
    _, back = patch_bodies(fake)
    assert pserver_count(fake, backend) == 2
    assert pserver_template(fake, backend) == template  # no new count anywhere
    assert "ctr-reshard-3" not in fake.objects[BATCH_JOBS]
    if backend == "volcano":
        assert replaced(back) == {"/spec/tasks/1/replicas": 2, "/spec/tasks/1/minAvailable": 2,
                                  "/spec/minAvailable": 4}
    else:
        assert replaced(back) == {"/spec/replicas": 2}
    assert validate_manifests(job_objects(fake)) == []


@pytest.mark.parametrize(("target", "message"), [
    (0, r"--pservers=0 must be in \[1, 1000\]"),
    (1001, r"--pservers=1001 must be in \[1, 1000\]"),
    (2, r"--pservers=2: job ctr already has 2 pserver\(s\)"),
])
def test_a_bad_count_is_refused_and_changes_nothing(fake: FakeKube, client: KubeClient,
                                                    target: int, message: str) -> None:
    submitted(fake, client, "volcano")
    submit_requests = len(fake.requests)
    with pytest.raises(ConfigError, match=message):
        resharding(client, Controllers(fake, "volcano"), target).run()
    assert [r.method for r in fake.requests[submit_requests:]] in ([], ["GET"])
    assert pserver_count(fake, "volcano") == 2


def test_checkpoints_in_an_empty_dir_or_a_leftover_job_are_refused_first(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "kubernetes", {**RESHARDABLE, "checkpoint": None})
    with pytest.raises(ClusterError, match="emptyDir, which is deleted with the pserver pods"):
        resharding(client, Controllers(fake, "kubernetes")).run()
    assert patch_bodies(fake) == []


def test_a_reshard_job_left_behind_is_refused_before_anything_changes(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "volcano")
    fake.put(BATCH_JOBS, {"apiVersion": "batch/v1", "kind": "Job",
                          "metadata": {"name": "ctr-reshard-3", "namespace": "ml"}})
    with pytest.raises(ClusterError, match="Job 'ctr-reshard-3' exists"):
        resharding(client, Controllers(fake, "volcano")).run()
    assert patch_bodies(fake) == []


def test_pods_that_do_not_stop_in_time_get_their_pservers_back_and_no_job(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "kubernetes")
    now = [0.0]

    def stuck(seconds: float) -> None:  # the kubelet never removes the pods; time passes
        now[0] += seconds

    with pytest.raises(ClusterError, match=r"pserver pod\(s\) ctr-pserver-0, ctr-pserver-1 of "
                                           r"job ctr did not stop within 10s"):
        ClusterResharding(client, "ctr", "ml", 3, ReshardTimeouts(stop_s=10), say=[].append,
                          sleep=stuck, clock=lambda: now[0]).run()
    assert [replaced(ops) for ops in patch_bodies(fake)] == [{"/spec/replicas": 0},
                                                             {"/spec/replicas": 2}]
    assert not [r for r in fake.requests if r.method == "POST" and "/jobs" in r.path
                and r.body["metadata"]["name"].startswith("ctr-reshard")]


def test_ctrl_c_while_waiting_puts_the_pservers_back(fake: FakeKube,
                                                     client: KubeClient) -> None:
    submitted(fake, client, "volcano")

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ClusterResharding(client, "ctr", "ml", 3, say=[].append, sleep=interrupted).run()
    assert pserver_count(fake, "volcano") == 2
    assert validate_manifests(job_objects(fake)) == []


def test_pservers_left_at_zero_are_refused_naming_the_way_out(fake: FakeKube,
                                                              client: KubeClient) -> None:
    submitted(fake, client, "kubernetes")
    fake.objects[STATEFUL_SETS]["ctr-pserver"]["spec"]["replicas"] = 0
    with pytest.raises(ClusterError, match=r"asks for 0 pservers, as a resharding leaves it"):
        resharding(client, Controllers(fake, "kubernetes")).run()
    assert patch_bodies(fake) == []


def test_scale_command_reshards_a_cluster_job(fake: FakeKube, client: KubeClient,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    submitted(fake, client, "kubernetes")
    with fake.lock:  # no pserver pod runs; the Job ends as soon as it is created
        fake.objects[PODS].clear()

    def succeed(obj: dict[str, Any]) -> None:
        if "-reshard-" in obj["metadata"]["name"]:
            obj["status"] = {"succeeded": 1}

    fake.on_create.append(succeed)
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    assert main(["scale", "ctr", "-n", "ml", "--pservers", "1", "--reshard-timeout", "0",
                 "--kubeconfig", str(kubeconfig)]) == 1
    assert "--reshard-timeout=0 must be > 0 seconds" in capsys.readouterr().err
    assert patch_bodies(fake) == []
    assert main(["scale", "ctr", "-n", "ml", "--pservers", "1",
                 "--kubeconfig", str(kubeconfig)]) == 0
    out = capsys.readouterr().out
    assert "created Job ctr-reshard-1" in out
    assert "resharded from 2 to 1 pserver(s)" in out
    assert pserver_count(fake, "kubernetes") == 1
