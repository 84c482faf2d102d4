"""`elasticps scale JOB --pservers M` of a cluster job, over real HTTP against the fake API
server, for both backends: pservers patched to 0, their pods awaited, the reshard Job created
from the pserver template (and valid against the schemas with the job's other objects), then
the pservers patched to M; a failed Job puts N back; bad counts change nothing.

The fake runs no pods: :class:`Controllers` plays the cluster between two polls (the
command's ``sleep``): pods of a workload asked for 0 pservers go away, and a reshard Job's pod
runs and ends as the test says."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elasticps.cli import main
from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.pserver_reshard import ClusterResharding, ReshardTimeouts
from elasticps.cluster.quantity import parse_memory
from elasticps.cluster.render.reshard import CONTAINER, LABEL_RESHARD
from elasticps.cluster.spec import Job
from elasticps.cluster.submit import submit
from elasticps.cluster.validate import validate_manifests
from elasticps.errors import ClusterError, ConfigError
from tests.unit.cluster.fake_kube import FakeKube, Fault
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
    fake.requests.clear()  # submission's own requests are not the resharding's
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
    """What the cluster does between two polls of the command (its ``sleep``).

    ``layout`` stands for the job's ``pserver/layout`` (shards, generation). A reshard Job's
    pod ends as ``outcome`` says: ``succeeded`` (committed, the layout in its termination
    message), ``failed`` (nothing committed), ``killed`` (committed, then killed before it
    wrote its message or exited 0), ``vanished`` (committed, then the Job and its pod were
    deleted). The layout Job's pod reads ``layout`` unless ``layout_readable`` is off (it
    cannot reach the store). Deleting a Job takes its pods along, as the garbage collector
    does."""

    def __init__(self, fake: FakeKube, backend: str, outcome: str = "succeeded",
                 layout: tuple[int, int] = (2, 0), layout_readable: bool = True) -> None:
        self.fake, self.backend, self.outcome = fake, backend, outcome
        self.layout, self.layout_readable = layout, layout_readable
        self.at_zero: list[dict[str, Any]] = []  # the job's objects while no pserver ran
        self.reshard_jobs: list[dict[str, Any]] = []
        self.layout_jobs: list[dict[str, Any]] = []
        self.now = 0.0  # the command's clock, moved by its sleeps
        self.after_reshard: list[Callable[[], None]] = []  # run once the reshard pod ended
        fake.on_delete.append(self._pods_go_with_their_job)

    def clock(self) -> float:
        return self.now

    def _pods_go_with_their_job(self, collection: str, name: str) -> None:
        if collection == BATCH_JOBS:
            with self.fake.lock:
                for pod in [n for n, p in self.fake.objects.get(PODS, {}).items()
                            if p["metadata"]["labels"].get(LABEL_RESHARD) == name]:
                    del self.fake.objects[PODS][pod]

    def __call__(self, seconds: float) -> None:
        self.now += seconds
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
            if "status" not in job and "-reshard-" in name:
                self.reshard_jobs.append(copy.deepcopy(job))
                self._reshard(name, job)
                for then in self.after_reshard:
                    then()
            elif "status" not in job and name == "ctr-layout":
                self.layout_jobs.append(copy.deepcopy(job))
                self._read_layout(name, job)

    def _reshard(self, name: str, job: dict[str, Any]) -> None:
        fake, pod = self.fake, f"{name}-x7k2p"
        committed = self.outcome != "failed"
        if committed:
            self.layout = (3, 1)
        one_shot_pod(fake, pod, name, "Succeeded" if self.outcome == "succeeded" else "Failed",
                     layout_message(self.layout) if self.outcome == "succeeded" else "")
        fake.logs[("ml", pod, CONTAINER)] = (
            "elasticps reshard: job ctr: resharded 2 -> 3 pservers (generation 1)\n"
            if committed else
            "elasticps: error: pserver shard 1 of 2 has no readable checkpoint\n")
        if self.outcome == "vanished":  # e.g. deleted by hand: the pod goes with it
            with fake.lock:
                del fake.objects[BATCH_JOBS][name]
                del fake.objects[PODS][pod]
            return
        with fake.lock:
            job["status"] = {"succeeded" if self.outcome == "succeeded" else "failed": 1}

    def _read_layout(self, name: str, job: dict[str, Any]) -> None:
        pod = f"{name}-q9w4z"
        one_shot_pod(self.fake, pod, name, "Succeeded" if self.layout_readable else "Failed",
                     layout_message(self.layout) if self.layout_readable else "")
        self.fake.logs[("ml", pod, CONTAINER)] = (
            layout_message(self.layout) if self.layout_readable else
            "elasticps: error: cannot reach the store at https://ctr-etcd:2379\n")
        with self.fake.lock:
            job["status"] = {"succeeded" if self.layout_readable else "failed": 1}


def layout_message(layout: tuple[int, int]) -> str:
    """What `elasticps reshard --layout-file /dev/termination-log` leaves there."""
    return json.dumps({"generation": layout[1], "shards": layout[0]}, sort_keys=True)


def one_shot_pod(fake: FakeKube, pod: str, job: str, phase: str, message: str) -> None:
    """A reshard or layout pod that has ended, as the API server shows it."""
    fake.add_pod("ml", pod, {**LABELS, LABEL_RESHARD: job, "elasticps.io/role": "reshard"},
                 phase=phase)
    with fake.lock:
        fake.objects[PODS][pod]["status"]["containerStatuses"] = [{
            "name": CONTAINER, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                                     "message": message}}}]


def patch_bodies(fake: FakeKube) -> list[Any]:
    return [r.body for r in fake.requests if r.method == "PATCH"]


def replaced(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {op["path"]: op["value"] for op in ops if op["op"] == "replace"}


def resharding(client: KubeClient, controllers: Controllers, target: int = 3,
               said: list[str] | None = None) -> ClusterResharding:
    return ClusterResharding(client, "ctr", "ml", target, say=(said if said is not None
                                                               else []).append,
                             sleep=controllers)


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_a_failed_reshard_job_puts_the_old_pservers_back_and_says_why(
        fake: FakeKube, client: KubeClient, backend: str) -> None:
    submitted(fake, client, backend)
    template = copy.deepcopy(pserver_template(fake, backend))
    controllers = Controllers(fake, backend, outcome="failed")
    with pytest.raises(ClusterError, match=r"(?s)Job ctr-reshard-3 failed.*shard 1 of 2 has "
                                           r"no readable.*The job's pserver layout is 2 shards: "
                                           r"nothing was committed; asked for 2 pserver"):
        resharding(client, controllers).run()
    _, back = patch_bodies(fake)
    assert pserver_count(fake, backend) == 2
    assert pserver_template(fake, backend) == template  # no new count anywhere
    assert "ctr-reshard-3" not in fake.objects[BATCH_JOBS]
    # "nothing was committed" is read, not assumed: by the layout Job, once the pod ended
    [layout_job] = controllers.layout_jobs
    assert layout_job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "elasticps", "reshard", "--show-layout", "--layout-file", "/dev/termination-log"]
    assert "ctr-layout" not in fake.objects[BATCH_JOBS]
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


@pytest.mark.slow
def test_checkpoints_in_an_empty_dir_or_a_leftover_job_are_refused_first(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "kubernetes", {**RESHARDABLE, "checkpoint": None})
    with pytest.raises(ClusterError, match="emptyDir, which is deleted with the pserver pods"):
        resharding(client, Controllers(fake, "kubernetes")).run()
    assert patch_bodies(fake) == []


@pytest.mark.slow
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


@pytest.mark.slow
def test_ctrl_c_while_waiting_puts_the_pservers_back(fake: FakeKube,
                                                     client: KubeClient) -> None:
    submitted(fake, client, "volcano")

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ClusterResharding(client, "ctr", "ml", 3, say=[].append, sleep=interrupted).run()
    assert pserver_count(fake, "volcano") == 2
    assert validate_manifests(job_objects(fake)) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_a_commit_whose_job_then_cannot_be_read_brings_back_m_pservers(
        fake: FakeKube, client: KubeClient, backend: str) -> None:
    """The reshard pod commits and says so in its termination message; the API server then
    fails every read of the Job. The pservers come back at the layout's 3, not the old 2."""
    submitted(fake, client, backend)
    controllers, said = Controllers(fake, backend), []
    controllers.after_reshard.append(lambda: fake.faults.append(
        Fault("GET", r"/jobs/ctr-reshard-3$", 503, "ServiceUnavailable")))
    assert resharding(client, controllers, said=said).run() == 2
    assert pserver_count(fake, backend) == 3
    assert controllers.layout == (3, 1)
    assert not controllers.layout_jobs  # the reshard pod's own message said it
    assert any("the job's pserver layout is 3 shards (generation 1, read from the termination "
               "message of reshard pod ctr-reshard-3-x7k2p): the resharding was committed"
               in line for line in said)
    assert "ctr-reshard-3" not in fake.objects[BATCH_JOBS]
    assert validate_manifests(job_objects(fake)) == []


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "outcome"), [
    ("volcano", "killed"), ("kubernetes", "killed"), ("kubernetes", "vanished")])
def test_a_pod_lost_after_its_commit_brings_back_m_pservers_read_by_the_layout_job(
        fake: FakeKube, client: KubeClient, backend: str, outcome: str) -> None:
    """Committed, then the pod was killed before it exited 0 (its Job failed), or the Job
    vanished with its pod: no word from the pod, so the layout Job reads the store."""
    submitted(fake, client, backend)
    controllers, said = Controllers(fake, backend, outcome=outcome), []
    assert resharding(client, controllers, said=said).run() == 2
    assert pserver_count(fake, backend) == 3
    [job] = controllers.layout_jobs
    assert job["metadata"]["labels"]["elasticps.io/role"] == "reshard"  # not a pserver
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["elasticps", "reshard", "--show-layout", "--layout-file",
                                    "/dev/termination-log"]
    assert container["terminationMessagePolicy"] == "File"
    assert container["env"] == pserver_template(fake, backend)["spec"]["containers"][0]["env"] \
        or backend == "kubernetes"  # the StatefulSet's template now says 3 pservers
    assert not {"ports", "livenessProbe", "readinessProbe"} & set(container)
    assert any("read from Job ctr-layout (pod ctr-layout-q9w4z)): the resharding was "
               "committed" in line for line in said)
    assert not {"ctr-reshard-3", "ctr-layout"} & set(fake.objects[BATCH_JOBS])
    job.pop("status", None)
    assert validate_manifests([*controllers.at_zero[0]["objects"], job]) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_a_layout_that_cannot_be_read_leaves_the_pservers_at_zero_and_says_so(
        fake: FakeKube, client: KubeClient, backend: str) -> None:
    submitted(fake, client, backend)
    controllers = Controllers(fake, backend, outcome="killed", layout_readable=False)
    with pytest.raises(ClusterError) as raised:
        resharding(client, controllers).run()
    message = str(raised.value)
    assert "resharding 2 -> 3 pservers: Job ctr-reshard-3 failed." in message
    assert "Whether Job ctr-reshard-3 committed the new layout is not known" in message
    assert "Job ctr-layout failed, and no layout is in its pod's termination message" in message
    assert "The pservers are left at 0" in message
    assert "run `elasticps scale ctr -n ml --pservers 3` again" in message
    assert "kubectl get pods -n ml -l elasticps.io/reshard=ctr-layout" in message
    assert pserver_count(fake, backend) == 0  # neither 2 nor 3: no guess
    assert "ctr-reshard-3" not in fake.objects[BATCH_JOBS]  # it cannot commit later


@pytest.mark.slow
def test_an_api_server_that_stops_answering_leaves_the_pservers_at_zero(
        fake: FakeKube, client: KubeClient) -> None:
    """Every Job call fails from the reshard Job's creation on: the layout is not read within
    its deadline, and nothing is guessed."""
    submitted(fake, client, "kubernetes")
    controllers = Controllers(fake, "kubernetes")

    def api_gone(obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "ctr-reshard-3":
            fake.faults.extend(Fault(method, r"/apis/batch/v1/", 503, "ServiceUnavailable")
                               for method in ("GET", "POST", "DELETE"))

    fake.on_create.append(api_gone)
    with pytest.raises(ClusterError, match=r"(?s)not known: the job's pserver layout could not "
                                           r"be read \(waited 60s for every reshard pod of the "
                                           r"job to end \(last error: the API server failed "
                                           r"\(503\).*left at 0"):
        ClusterResharding(client, "ctr", "ml", 3, ReshardTimeouts(layout_s=60),
                          say=[].append, sleep=controllers, clock=controllers.clock).run()
    assert pserver_count(fake, "kubernetes") == 0


def test_ctrl_c_once_the_job_exists_stops_it_and_leaves_the_pservers_at_zero(
        fake: FakeKube, client: KubeClient) -> None:
    """Interrupted while the reshard Job runs: it may have committed, so no count is guessed."""
    submitted(fake, client, "volcano")
    controllers = Controllers(fake, "volcano")

    def interrupted(seconds: float) -> None:
        if "ctr-reshard-3" in fake.objects.get(BATCH_JOBS, {}):
            raise KeyboardInterrupt
        controllers(seconds)

    with pytest.raises(ClusterError, match=r"KeyboardInterrupt. Whether Job ctr-reshard-3 "
                                           r"committed the new layout is not known: .*"
                                           r"\(interrupted before it was read\)"):
        ClusterResharding(client, "ctr", "ml", 3, say=[].append, sleep=interrupted).run()
    assert pserver_count(fake, "volcano") == 0
    assert "ctr-reshard-3" not in fake.objects[BATCH_JOBS]


@pytest.mark.slow
def test_pservers_found_at_zero_come_back_at_the_layouts_count(fake: FakeKube,
                                                               client: KubeClient) -> None:
    """An earlier run left them at 0 after the commit: the layout says 3, so the same
    command asks for 3 and runs no second resharding."""
    submitted(fake, client, "kubernetes")
    with fake.lock:
        fake.objects[STATEFUL_SETS]["ctr-pserver"]["spec"]["replicas"] = 0
        fake.objects[PODS].clear()
    controllers = Controllers(fake, "kubernetes", layout=(3, 1))
    assert resharding(client, controllers).run() == 3
    assert pserver_count(fake, "kubernetes") == 3
    assert len(controllers.layout_jobs) == 1
    assert not controllers.reshard_jobs


@pytest.mark.slow
def test_pservers_found_at_zero_with_an_unreadable_layout_change_nothing(
        fake: FakeKube, client: KubeClient) -> None:
    submitted(fake, client, "kubernetes")
    fake.objects[STATEFUL_SETS]["ctr-pserver"]["spec"]["replicas"] = 0
    controllers = Controllers(fake, "kubernetes", layout_readable=False)
    with pytest.raises(ClusterError, match=r"asks for 0 pservers and the job's pserver layout "
                                           r"could not be read \(Job ctr-layout failed.*nothing "
                                           r"was changed"):
        resharding(client, controllers).run()
    assert [replaced(ops) for ops in patch_bodies(fake)] == []
    assert not controllers.reshard_jobs


@pytest.mark.slow
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
