"""``elasticps list`` and ``elasticps logs`` across a job's pods, over real HTTP against the
fake API server (tests/unit/cluster/fake_kube.py)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from elasticps.cluster.job_list import format_age, format_table, list_jobs
from elasticps.cluster.job_logs import job_logs
from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.spec import Job
from elasticps.cluster.submit import submit
from elasticps.errors import ClusterError
from tests.helpers import REPO, CliResult, run_cli, wait_for
from tests.unit.cluster.fake_kube import FakeKube
from tests.unit.cluster.test_submit import SPEC, secrets

MANAGED = {"app.kubernetes.io/managed-by": "elasticps"}


def add_role_pods(fake: FakeKube, job: str, *, trainers: int = 2, pservers: int = 1,
                  namespace: str = "ml") -> None:
    def labels(role: str) -> dict[str, str]:
        return {**MANAGED, "elasticps.io/job": job, "elasticps.io/role": role}

    fake.add_pod(namespace, f"{job}-master-0", labels("master"),
                 annotations={"volcano.sh/task-index": "0"})
    for i in range(pservers):
        fake.add_pod(namespace, f"{job}-pserver-{i}", labels("pserver"),
                     annotations={"volcano.sh/task-index": str(i)})
    for i in range(trainers):
        fake.add_pod(namespace, f"{job}-trainer-{i}", labels("trainer"),
                     annotations={"volcano.sh/task-index": str(i)},
                     phase="Running" if i == 0 else "Pending")


@pytest.mark.slow
def test_list_shows_both_backends_with_phase_trainers_and_age(fake: FakeKube,
                                                              client: KubeClient) -> None:
    submit(Job.from_dict(SPEC), "volcano", client=client, secrets=secrets(), environ={})
    submit(Job.from_dict({**SPEC, "job_name": "wide", "trainers": 3}), "kubernetes",
           client=client, secrets=secrets(), environ={})
    submit(Job.from_dict({**SPEC, "namespace": "elsewhere"}), "volcano", client=client,
           secrets=secrets(), environ={})
    fake.objects["/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs"]["ctr"]["status"] = {
        "state": {"phase": "Running"}}
    fake.objects["/apis/batch/v1/namespaces/ml/jobs"]["wide-trainer"]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]}
    add_role_pods(fake, "ctr")
    add_role_pods(fake, "wide", trainers=3)

    jobs = list_jobs(client, "ml")
    assert [(j.name, j.backend, j.phase, j.trainers_running, j.trainers_wanted)
            for j in jobs] == [("ctr", "volcano", "Running", 1, 2),
                               ("wide", "kubernetes", "Completed", 1, 3)]
    later = datetime.fromisoformat(jobs[0].created.replace("Z", "+00:00"))
    table = format_table(jobs, now=later).splitlines()
    assert table[0].split() == ["NAME", "BACKEND", "PHASE", "TRAINERS", "AGE"]
    assert table[1].split() == ["ctr", "volcano", "Running", "1/2", "0s"]
    assert list_jobs(client, "empty") == []
    listed = [r for r in fake.requests if r.method == "GET" and "labelSelector" in r.query]
    assert all("app.kubernetes.io/managed-by=elasticps" in r.query["labelSelector"][0]
               for r in listed[-3:])


def test_age_reads_like_kubectl() -> None:
    now = datetime(2030, 1, 2, 0, 0, 0, tzinfo=UTC)
    assert format_age("2030-01-01T23:59:15Z", now) == "45s"
    assert format_age("2030-01-01T23:48:00Z", now) == "12m"
    assert format_age("2030-01-01T19:00:00Z", now) == "5h"
    assert format_age("2029-12-29T00:00:00Z", now) == "4d"
    assert format_age("", now) == "?"


def test_logs_of_every_pod_are_prefixed_and_grouped(fake: FakeKube, client: KubeClient) -> None:
    add_role_pods(fake, "ctr")
    add_role_pods(fake, "other")
    for pod, role in (("ctr-master-0", "master"), ("ctr-pserver-0", "pserver"),
                      ("ctr-trainer-0", "trainer"), ("ctr-trainer-1", "trainer"),
                      ("other-trainer-0", "trainer")):
        fake.logs[("ml", pod, role)] = f"{pod} started\n{pod} done\n"
    assert list(job_logs(client, "ctr", "ml")) == [
        f"[{pod}] {pod} {word}" for pod in ("ctr-master-0", "ctr-pserver-0", "ctr-trainer-0",
                                            "ctr-trainer-1") for word in ("started", "done")]
    assert list(job_logs(client, "ctr", "ml", role="trainer")) == [
        "[ctr-trainer-0] ctr-trainer-0 started", "[ctr-trainer-0] ctr-trainer-0 done",
        "[ctr-trainer-1] ctr-trainer-1 started", "[ctr-trainer-1] ctr-trainer-1 done"]
    assert list(job_logs(client, "ctr", "ml", role="trainer", index=1, tail_lines=1)) == [
        "[ctr-trainer-1] ctr-trainer-1 started", "[ctr-trainer-1] ctr-trainer-1 done"]
    tailed = [r for r in fake.requests if r.path.endswith("/ctr-trainer-1/log")][-1]
    assert tailed.query["tailLines"] == ["1"]
    with pytest.raises(ClusterError, match=r"no trainer pod with index 7; indexes present: "
                                           r"\[0, 1\]"):
        list(job_logs(client, "ctr", "ml", role="trainer", index=7))
    with pytest.raises(ClusterError, match="job 'ctr' has no etcd pods"):
        list(job_logs(client, "ctr", "ml", role="etcd"))


def test_follow_streams_every_pod_at_once(fake: FakeKube, client: KubeClient) -> None:
    add_role_pods(fake, "ctr", trainers=2)
    first = fake.live_log("ml", "ctr-trainer-0", "trainer")
    second = fake.live_log("ml", "ctr-trainer-1", "trainer")
    seen: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in job_logs(client, "ctr", "ml", role="trainer", follow=True):
            seen.append(line)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    # The second pod speaks first: a reader that took the pods one by one would block on
    # the first pod's open stream and never show it.
    second.put("step 1 on trainer 1")
    wait_for(lambda: "[ctr-trainer-1] step 1 on trainer 1" in seen, 10, "trainer 1's line")
    first.put("step 1 on trainer 0")
    wait_for(lambda: "[ctr-trainer-0] step 1 on trainer 0" in seen, 10, "trainer 0's line")
    second.put(None)  # trainer 1's container stops; trainer 0 goes on
    first.put("step 2 on trainer 0")
    wait_for(lambda: "[ctr-trainer-0] step 2 on trainer 0" in seen, 10, "trainer 0's line 2")
    assert not done.is_set()
    first.put(None)
    wait_for(done.is_set, 10, "the follow to end with the last stream")
    assert len(seen) == 3
    follows = [r for r in fake.requests if r.path.endswith("/log")]
    assert all(r.query["follow"] == ["true"] for r in follows)


def test_list_and_logs_on_the_command_line(fake: FakeKube, tmp_path: Path) -> None:
    kubeconfig = str(fake.kubeconfig(tmp_path / "kubeconfig"))

    def elasticps(*args: str) -> CliResult:
        return run_cli(*args, cwd=REPO)

    result = elasticps("list", "-n", "ml", "--kubeconfig", kubeconfig)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "no elasticps jobs in namespace ml\n"
    client = KubeClient.from_kubeconfig(kubeconfig)
    submit(Job.from_dict(SPEC), "volcano", client=client, secrets=secrets(), environ={})
    add_role_pods(fake, "ctr")
    fake.logs[("ml", "ctr-pserver-0", "pserver")] = "slot 0 claimed\n"
    fake.logs[("ml", "ctr-master-0", "master")] = "leader\n"
    result = elasticps("list", "-n", "ml", "--kubeconfig", kubeconfig, "--json")
    assert result.returncode == 0, result.stderr
    (listed,) = json.loads(result.stdout)
    assert (listed["name"], listed["trainers_running"], listed["trainers_wanted"]) == (
        "ctr", 1, 2)
    result = elasticps("logs", "ctr", "-n", "ml", "--kubeconfig", kubeconfig, "--role",
                       "pserver")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[ctr-pserver-0] slot 0 claimed\n"
    result = elasticps("list", "--help")
    assert result.returncode == 0
    assert "TRAINERS" in result.stdout or "trainers" in result.stdout
