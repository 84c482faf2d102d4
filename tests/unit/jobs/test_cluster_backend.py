"""The cluster backend over real HTTP against the fake Kubernetes API server: launch_job
submits, and the handle's wait polls the job's phase into the same JobResult a local job ends
with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import elasticps as eps
from elasticps.cluster.job_secrets import JobSecrets
from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.manifests import job_secrets
from elasticps.cluster.submit import JobStatus, submit
from elasticps.errors import ConfigError
from elasticps.jobs.cluster_backend import ClusterJobHandle, result_of_phase
from tests.unit.cluster.fake_kube import FakeKube

SPEC: dict[str, Any] = {"job_name": "ctr", "namespace": "ml", "entry_point": "python train.py",
                        "trainers": 2}
VOLCANO_JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs"
TRAINER_JOBS = "/apis/batch/v1/namespaces/ml/jobs"


def job() -> eps.Job:
    return eps.Job.from_dict(SPEC)


@pytest.fixture(scope="module")
def secrets() -> JobSecrets:
    return job_secrets(job())


def handle_of(client: KubeClient, secrets: JobSecrets, backend: str) -> ClusterJobHandle:
    return ClusterJobHandle(submit(job(), backend, client=client, secrets=secrets, environ={}),
                            poll_interval=0.01)


@pytest.mark.parametrize(("phase", "state", "code"), [
    ("Completed", "succeeded", 0), ("Failed", "failed", 1), ("Aborted", "interrupted", 130),
    ("Terminated", "interrupted", 130)])
def test_a_final_phase_is_the_local_launchers_state_and_exit_code(phase: str, state: str,
                                                                  code: int) -> None:
    result = result_of_phase(JobStatus("ctr", "ml", "volcano", phase, master={"pass": 2}))
    assert result is not None
    assert (result.state, result.exit_code, result.summary) == (state, code, {"pass": 2})


@pytest.mark.parametrize("phase", ["Pending", "Running", "Restarting", "Completing"])
def test_a_running_phase_has_no_result(phase: str) -> None:
    assert result_of_phase(JobStatus("ctr", "ml", "volcano", phase)) is None


def test_launch_job_submits_a_cluster_job_and_wait_follows_its_phase(
        fake: FakeKube, tmp_path: Path) -> None:
    handle = eps.launch_job(job(), kubeconfig=str(fake.kubeconfig(tmp_path / "kubeconfig")))
    assert isinstance(handle, ClusterJobHandle)
    assert not handle.in_job
    assert "ctr" in fake.objects.get(VOLCANO_JOBS, {})
    assert handle.status_url().endswith(
        "/api/v1/namespaces/ml/services/https:ctr-master:http/proxy/")
    handle.poll_interval = 0.01
    with pytest.raises(TimeoutError, match=r"job ctr is still Pending after 0\.05s"):
        handle.wait(timeout=0.05)
    fake.objects[VOLCANO_JOBS]["ctr"]["status"] = {"state": {"phase": "Completed"}}
    result = handle.wait(timeout=5)
    assert (result.succeeded, result.exit_code, result.summary) == (True, 0, {})
    assert handle.last_status == handle.submitted.status()
    assert handle.last_status.phase == "Completed"


@pytest.mark.slow
def test_a_failed_kubernetes_job_ends_like_a_failed_local_one(
        fake: FakeKube, client: KubeClient, secrets: JobSecrets) -> None:
    handle = handle_of(client, secrets, "kubernetes")
    fake.objects[TRAINER_JOBS]["ctr-trainer"]["status"] = {
        "conditions": [{"type": "Failed", "status": "True"}]}
    result = handle.wait(timeout=5)
    assert (result.succeeded, result.state, result.exit_code) == (False, "failed", 1)


@pytest.mark.slow
def test_the_summary_is_the_masters_status_page(fake: FakeKube, client: KubeClient,
                                                secrets: JobSecrets) -> None:
    handle = handle_of(client, secrets, "volcano")
    assert handle.summary() == {}  # no master pod yet
    fake.add_pod("ml", "ctr-master-0", {"elasticps.io/job": "ctr", "elasticps.io/role": "master"},
                 annotations={"volcano.sh/task-index": "0"})
    fake.proxy_pages[("ml", "https:ctr-master:http", "/api/status")] = json.dumps(
        {"job": "ctr", "pass": 1})
    assert handle.summary() == {"job": "ctr", "pass": 1}
    fake.objects[VOLCANO_JOBS]["ctr"]["status"] = {"state": {"phase": "Completed"}}
    assert handle.wait(timeout=5).summary == {"job": "ctr", "pass": 1}


def test_a_cluster_job_takes_no_script_and_no_workdir_and_a_local_one_no_kubeconfig(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kubeconfig is for cluster jobs"):
        eps.launch_job(eps.Job(backend="local"), "train.py", kubeconfig="kubeconfig")
    with pytest.raises(ConfigError, match="runs its entry_point in its own pods"):
        eps.launch_job(job(), "train.py")
    with pytest.raises(ConfigError, match="runs its entry_point in its own pods"):
        eps.launch_job(job(), workdir=tmp_path)
