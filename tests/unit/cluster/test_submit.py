"""Submission, status, logs and delete over real HTTP against a fake Kubernetes API server.

No cluster is involved: the fake (tests/unit/cluster/fake_kube.py) checks paths and bodies the
way the API server routes them and answers in its JSON, so these tests show which requests we
send and how we read the answers and errors — not that a real cluster accepts the objects.
"""

from __future__ import annotations

import functools
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from elasticps.cluster.job_secrets import JobSecrets
from elasticps.cluster.kube_client import KubeClient, kind_of
from elasticps.cluster.manifests import job_secrets, render
from elasticps.cluster.spec import Job
from elasticps.cluster.submit import delete_job, job_status, pod_logs, submit, submit_secret
from elasticps.errors import ClusterError, ConfigError
from elasticps.master.status_read import MAX_STATUS_BYTES
from tests.unit.cluster.fake_kube import FakeKube, Fault

SPEC: dict[str, Any] = {"job_name": "ctr", "namespace": "ml", "entry_point": "python train.py",
                        "trainers": 2, "data": "pvc://ctr-data"}
OWNER_PATH = {"volcano": "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs",
              "kubernetes": "/apis/batch/v1/namespaces/ml/jobs"}
BUDGETS = ["/apis/policy/v1/namespaces/ml/poddisruptionbudgets"] * 2  # pservers, trainers
EXPECTED_PATHS = {
    "volcano": [
        "/api/v1/namespaces/ml/serviceaccounts",
        OWNER_PATH["volcano"],
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ml/roles",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ml/rolebindings",
        "/api/v1/namespaces/ml/secrets",
        "/api/v1/namespaces/ml/services",
        "/api/v1/namespaces/ml/services",
        "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies",
        "/apis/apps/v1/namespaces/ml/statefulsets",
        "/apis/batch/v1/namespaces/ml/jobs",  # the etcd setup Job
        "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies",  # master
        "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies",  # pserver
        *BUDGETS,
    ],
}
EXPECTED_PATHS["kubernetes"] = [
    EXPECTED_PATHS["volcano"][0], OWNER_PATH["kubernetes"], *EXPECTED_PATHS["volcano"][2:-2],
    "/api/v1/namespaces/ml/services",
    "/apis/apps/v1/namespaces/ml/deployments",
    "/apis/apps/v1/namespaces/ml/statefulsets",
    *BUDGETS,
]


def job() -> Job:
    return Job.from_dict(SPEC)


@functools.cache
def secrets() -> JobSecrets:
    """One set of real secrets (token, CA, certificates) for the test job."""
    return job_secrets(job())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_submit_creates_every_object_in_order(fake: FakeKube, client: KubeClient,
                                              backend: str) -> None:
    handle = submit(job(), backend, client=client, secrets=secrets(), environ={})
    posts = [r for r in fake.requests if r.method == "POST"]
    assert [r.path for r in posts] == EXPECTED_PATHS[backend]
    assert [_unowned(r.body) for r in posts] == render(job(), backend, secrets=secrets())
    assert posts[4].body["kind"] == "Secret"
    assert posts[4].body["stringData"] == dict(secrets().values)  # only ever sent to the API
    assert all(r.headers.get("authorization") == "Bearer fake-bearer-token" for r in posts)
    assert all(r.headers.get("content-type") == "application/json" for r in posts)
    assert handle.status_url() == (
        f"{fake.url}/api/v1/namespaces/ml/services/https:ctr-master:http/proxy/")


def _unowned(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as rendered: without the owner reference submission adds."""
    out = json.loads(json.dumps(obj))
    out["metadata"].pop("ownerReferences", None)
    return out


def _owner(fake: FakeKube, backend: str) -> dict[str, Any]:
    name = "ctr" if backend == "volcano" else "ctr-trainer"
    return fake.objects[OWNER_PATH[backend]][name]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_the_owner_is_created_first_and_every_other_object_names_its_uid(
        fake: FakeKube, client: KubeClient, backend: str) -> None:
    """The owner's uid exists only once the API server made it: the ServiceAccount (which its
    pods need to be admitted) comes first and gets the reference by a patch; everything else
    is created after the owner, with the uid the API server answered."""
    submit(job(), backend, client=client, secrets=secrets(), environ={})
    owner = _owner(fake, backend)
    reference = {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                 "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
    writes = [r for r in fake.requests if r.method in ("POST", "PATCH")]
    assert [r.method for r in writes[:4]] == ["POST", "POST", "PATCH", "POST"]
    assert writes[1].path == OWNER_PATH[backend]
    assert "ownerReferences" not in writes[1].body["metadata"]
    assert writes[2].path == "/api/v1/namespaces/ml/serviceaccounts/ctr-runner"
    assert writes[2].body == [{"op": "add", "path": "/metadata/ownerReferences",
                               "value": [reference]}]
    later = writes[3:]
    assert len(later) == len(EXPECTED_PATHS[backend]) - 2
    assert all(r.body["metadata"]["ownerReferences"] == [reference] for r in later)
    stored = [o for items in fake.objects.values() for o in items.values()]
    unowned = [o["metadata"]["name"] for o in stored
               if not o["metadata"].get("ownerReferences")]
    assert unowned == [owner["metadata"]["name"]]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_deleting_the_owner_alone_deletes_the_whole_job(
        fake: FakeKube, client: KubeClient, backend: str) -> None:
    """One delete (what `kubectl delete` or the owner's ttlSecondsAfterFinished does) removes
    every object of the job: etcd, Services, NetworkPolicies, budgets, RBAC, the Secret."""
    submit(job(), backend, client=client, secrets=secrets(), environ={})
    other = Job.from_dict({**SPEC, "job_name": "other"})
    submit(other, backend, client=client, secrets=secrets(), environ={})
    owner = _owner(fake, backend)
    assert client.delete(kind_of(owner), "ml", owner["metadata"]["name"])
    left = [o for items in fake.objects.values() for o in items.values()]
    assert left
    assert {o["metadata"]["labels"]["elasticps.io/job"] for o in left} == {"other"}


def test_dry_run_sends_nothing_and_prints_no_secret(fake: FakeKube) -> None:
    handle = submit(job(), "volcano", dry_run=True, secrets=secrets(), environ={})
    assert fake.requests == []
    assert handle.dry_run
    text = handle.yaml()
    assert "kind: Job" in text
    assert "kind: Secret" not in text
    assert "elasticps submit JOB.yaml --secret-only" in text
    assert all(value not in text for value in secrets().values.values())
    assert "BEGIN" not in text  # no certificate or key, real or placeholder
    assert handle.status_url().startswith("http://localhost:8001/api/v1/namespaces/ml/")
    with pytest.raises(ClusterError, match="dry run"):
        handle.status()


def test_local_job_is_not_submitted(fake: FakeKube) -> None:
    with pytest.raises(ConfigError, match="'backend': the job's backend is local"):
        submit(Job.from_dict({**SPEC, "backend": "local"}), "volcano", dry_run=True)


@pytest.mark.slow
def test_existing_job_is_a_409_with_advice_and_leaves_nothing_new(fake: FakeKube,
                                                                   client: KubeClient) -> None:
    submit(job(), "kubernetes", client=client, secrets=secrets(), environ={})
    before = json.dumps(fake.objects, sort_keys=True)
    fake.requests.clear()
    with pytest.raises(ClusterError) as info:
        submit(job(), "kubernetes", client=client, secrets=job_secrets(job()), environ={})
    message = str(info.value)
    assert "job ctr already exists in namespace ml" in message
    assert "conflict (409)" in message
    assert "elasticps delete ctr -n ml" in message
    assert json.dumps(fake.objects, sort_keys=True) == before  # the old job is untouched
    assert fake.paths("DELETE") == []  # the very first create failed: nothing to undo


def test_forbidden_midway_rolls_back_what_this_submission_created(
        fake: FakeKube, client: KubeClient) -> None:
    fake.faults.append(Fault("POST", r"/statefulsets$", 403, "Forbidden"))
    with pytest.raises(ClusterError) as info:
        submit(job(), "volcano", client=client, secrets=secrets(), environ={})
    message = str(info.value)
    assert "forbidden (403)" in message
    assert "create StatefulSet.apps 'ctr-etcd' in namespace 'ml'" in message
    assert "removed the 8 object(s)" in message
    assert all(not items for items in fake.objects.values())
    deleted = fake.paths("DELETE")
    assert deleted[0] == "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies/ctr-etcd"
    assert deleted[-1] == "/api/v1/namespaces/ml/serviceaccounts/ctr-runner"
    assert len(deleted) == 8


def test_server_error_is_reported_with_its_message(fake: FakeKube, client: KubeClient) -> None:
    fake.faults.append(Fault("POST", r"/batch.volcano.sh/", 500, "InternalError"))
    with pytest.raises(ClusterError, match=r"failed \(500\).*injected InternalError"):
        submit(job(), "volcano", client=client, secrets=secrets(), environ={})


def test_missing_volcano_crd_is_a_clear_404(fake: FakeKube, client: KubeClient) -> None:
    fake.faults.append(Fault("POST", r"/batch.volcano.sh/", 404, "NotFound"))
    with pytest.raises(ClusterError, match=r"not found \(404\).*create Job.batch.volcano.sh"):
        submit(job(), "volcano", client=client, secrets=secrets(), environ={})


def test_bad_credentials_are_a_clear_401(fake: FakeKube, client: KubeClient) -> None:
    fake.faults.append(Fault("POST", r"serviceaccounts", 401, "Unauthorized"))
    with pytest.raises(ClusterError, match=r"rejected our credentials \(401\)"):
        submit(job(), "volcano", client=client, secrets=secrets(), environ={})


def test_connection_refused_is_a_cluster_error(tmp_path: Path) -> None:
    with socket.socket() as closed:  # bound, never listening: connecting is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        client = KubeClient.from_kubeconfig(str(kubeconfig))
        with pytest.raises(ClusterError) as info:
            submit(job(), "volcano", client=client, secrets=secrets(), environ={})
        assert f"cannot reach the Kubernetes API server at http://127.0.0.1:{port}" in str(
            info.value)
        assert "connection refused" in str(info.value)
        with pytest.raises(ClusterError, match="cannot reach"):
            job_status(client, "ctr", "ml")


def test_bad_kubeconfig_is_a_cluster_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="cannot load kubeconfig"):
        KubeClient.from_kubeconfig(str(tmp_path / "missing"))


def _seed_pods(fake: FakeKube) -> None:
    base = {"elasticps.io/job": "ctr", "app.kubernetes.io/managed-by": "elasticps"}
    fake.add_pod("ml", "ctr-master-0", {**base, "elasticps.io/role": "master"},
                 annotations={"volcano.sh/task-index": "0"})
    for i in range(2):
        fake.add_pod("ml", f"ctr-pserver-{i}", {**base, "elasticps.io/role": "pserver"},
                     annotations={"volcano.sh/task-index": str(i)}, restarts=i)
    fake.add_pod("ml", "ctr-trainer-0", {**base, "elasticps.io/role": "trainer"},
                 annotations={"volcano.sh/task-index": "0"})
    fake.add_pod("ml", "ctr-trainer-1", {**base, "elasticps.io/role": "trainer"},
                 annotations={"volcano.sh/task-index": "1"}, phase="Pending", ready=False)
    fake.add_pod("ml", "other-trainer-0", {"elasticps.io/job": "other",
                                           "elasticps.io/role": "trainer"})


def test_status_reports_pods_per_role_and_the_master_page(fake: FakeKube,
                                                          client: KubeClient) -> None:
    submit(job(), "volcano", client=client, secrets=secrets(), environ={})
    fake.objects["/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs"]["ctr"]["status"] = {
        "state": {"phase": "Running"}}
    _seed_pods(fake)
    fake.proxy_pages[("ml", "https:ctr-master:http", "/api/status")] = json.dumps(
        {"job": "ctr", "pass": 1, "tasks": {"todo": 3, "done": 7}})
    status = job_status(client, "ctr", "ml")
    assert (status.backend, status.phase, status.finished) == ("volcano", "Running", False)
    roles = status.by_role()
    assert [p.name for p in roles["pserver"]] == ["ctr-pserver-0", "ctr-pserver-1"]
    assert [p.restarts for p in roles["pserver"]] == [0, 1]
    assert [(p.index, p.phase, p.ready) for p in roles["trainer"]] == [
        (0, "Running", True), (1, "Pending", False)]
    assert "other-trainer-0" not in [p.name for p in status.pods]
    assert status.master == {"job": "ctr", "pass": 1, "tasks": {"todo": 3, "done": 7}}
    proxy = [r for r in fake.requests if r.path.endswith("/proxy")]
    assert proxy[-1].path == "/api/v1/namespaces/ml/services/https:ctr-master:http/proxy"
    assert proxy[-1].query == {"path": ["/api/status"]}
    # the page requires the token: status reads it from the job's Secret and sends it
    assert proxy[-1].headers.get("x-elasticps-token") == secrets().values["token"]
    pods = [r for r in fake.requests if r.path == "/api/v1/namespaces/ml/pods"]
    assert pods[-1].query["labelSelector"] == ["elasticps.io/job=ctr"]
    summary = status.summary()
    assert "pserver  2 pod(s), 2 ready, 1 restart(s)" in summary
    assert "ctr-trainer-1" in summary


def test_status_reads_at_most_8_mib_of_the_master_page(fake: FakeKube,
                                                      client: KubeClient) -> None:
    submit(job(), "volcano", client=client, secrets=secrets(), environ={})
    _seed_pods(fake)
    fake.proxy_pages[("ml", "https:ctr-master:http", "/api/status")] = json.dumps(
        {"job": "ctr", "padding": "x" * MAX_STATUS_BYTES})
    status = job_status(client, "ctr", "ml")
    assert status.master is None
    assert status.master_error is not None
    assert f"is larger than {MAX_STATUS_BYTES:,} bytes" in status.master_error


def test_status_of_a_kubernetes_job_follows_the_trainer_job(fake: FakeKube,
                                                            client: KubeClient) -> None:
    handle = submit(job(), "kubernetes", client=client, secrets=secrets(), environ={})
    trainer_job = fake.objects["/apis/batch/v1/namespaces/ml/jobs"]["ctr-trainer"]
    trainer_job["status"] = {"active": 2}
    status = handle.status()
    assert (status.backend, status.phase) == ("kubernetes", "Running")
    assert status.master_error == "no master pod is ready yet"
    trainer_job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    final = handle.status()
    assert (final.phase, final.finished, final.succeeded) == ("Completed", True, True)


def test_status_of_an_unknown_job(fake: FakeKube, client: KubeClient) -> None:
    with pytest.raises(ClusterError, match="no elasticps job 'nope' in namespace 'ml'"):
        job_status(client, "nope", "ml")


def test_logs_pick_the_pod_by_role_and_index(fake: FakeKube, client: KubeClient) -> None:
    _seed_pods(fake)
    fake.logs[("ml", "ctr-trainer-1", "trainer")] = "line one\nline two\n"
    fake.logs[("ml", "ctr-pserver-0", "pserver")] = "serving slot 0"
    assert list(pod_logs(client, "ctr", "ml", role="trainer", index=1)) == [
        "line one", "line two"]
    assert list(pod_logs(client, "ctr", "ml", role="pserver", follow=True)) == ["serving slot 0"]
    follow = [r for r in fake.requests if r.path.endswith("/log")][-1]
    assert follow.path == "/api/v1/namespaces/ml/pods/ctr-pserver-0/log"
    assert follow.query == {"container": ["pserver"], "follow": ["true"]}
    with pytest.raises(ClusterError,
                       match=r"no trainer pod with index 5; indexes present: \[0, 1\]"):
        list(pod_logs(client, "ctr", "ml", role="trainer", index=5))
    with pytest.raises(ClusterError, match="no etcd pods"):
        list(pod_logs(client, "ctr", "ml", role="etcd"))


def test_logs_of_a_replaced_trainer_come_from_the_running_pod(fake: FakeKube,
                                                               client: KubeClient) -> None:
    labels = {"elasticps.io/job": "ctr", "elasticps.io/role": "trainer"}
    index = {"batch.kubernetes.io/job-completion-index": "0"}
    fake.add_pod("ml", "ctr-trainer-0-aaaaa", labels, annotations=index, phase="Failed",
                 created="2030-01-01T00:00:00Z")
    fake.add_pod("ml", "ctr-trainer-0-bbbbb", labels, annotations=index, phase="Running",
                 created="2030-01-01T00:05:00Z")
    fake.logs[("ml", "ctr-trainer-0-bbbbb", "trainer")] = "resumed"
    assert list(pod_logs(client, "ctr", "ml")) == ["resumed"]


@pytest.mark.slow
def test_delete_removes_every_labelled_object(fake: FakeKube, client: KubeClient) -> None:
    submit(job(), "kubernetes", client=client, secrets=secrets(), environ={})
    other = Job.from_dict({**SPEC, "job_name": "other"})
    submit(other, "kubernetes", client=client, secrets=secrets(), environ={})
    deleted = delete_job(client, "ctr", "ml")
    assert len(deleted) == len(render(job(), "kubernetes", secrets=secrets()))
    assert set(deleted[:2]) == {"Job/ctr-etcd-setup", "Job/ctr-trainer"}
    remaining = [name for items in fake.objects.values() for name in items]
    assert remaining
    assert all(name.startswith("other") for name in remaining)
    assert any(r.method == "DELETE" and r.path.endswith("/jobs/ctr-trainer")
               for r in fake.requests)
    with pytest.raises(ClusterError, match="no elasticps job 'ctr'"):
        delete_job(client, "ctr", "ml")


@pytest.mark.slow
def test_delete_forbidden_is_reported(fake: FakeKube, client: KubeClient) -> None:
    submit(job(), "volcano", client=client, secrets=secrets(), environ={})
    fake.faults.append(Fault("DELETE", r"/jobs/ctr$", 403, "Forbidden"))
    with pytest.raises(ClusterError, match=r"forbidden \(403\) to delete Job.batch.volcano.sh"):
        delete_job(client, "ctr", "ml")


def test_secret_only_creates_just_the_secret(fake: FakeKube, client: KubeClient) -> None:
    name = submit_secret(job(), client=client)
    posts = [r for r in fake.requests if r.method == "POST"]
    assert [r.path for r in posts] == ["/api/v1/namespaces/ml/secrets"]
    assert name == "ctr-secrets"
    values = posts[0].body["stringData"]
    assert {"token", "ca.crt", "trainer.key", "etcd-root.crt"} <= set(values)
    assert "BEGIN CERTIFICATE" in values["pserver.crt"]


def test_an_insecure_job_has_no_certificates_and_a_plain_status_page(
        fake: FakeKube, client: KubeClient) -> None:
    insecure = Job.from_dict({**SPEC, "insecure": True})
    handle = submit(insecure, "kubernetes", client=client, environ={})
    secret = next(r.body for r in fake.requests if r.path.endswith("/secrets"))
    assert set(secret["stringData"]) == {"token"}
    assert "/services/ctr-master:http/proxy/" in handle.status_url()
    kinds = [r.body["kind"] for r in fake.requests if r.method == "POST"]
    assert kinds.count("NetworkPolicy") == 3  # policies do not depend on TLS


def test_submit_sends_the_code_config_map_and_delete_removes_it(
        fake: FakeKube, client: KubeClient, tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    spec = Job.from_dict({**SPEC, "code": str(tmp_path / "code")})
    submit(spec, "kubernetes", client=client, secrets=secrets(), environ={})
    posts = [r for r in fake.requests if r.method == "POST"]
    maps = [r for r in posts if r.path == "/api/v1/namespaces/ml/configmaps"]
    assert len(maps) == 1
    assert maps[0].body["metadata"]["name"].startswith("ctr-code-")
    assert posts.index(maps[0]) < next(i for i, r in enumerate(posts)
                                       if r.path.endswith("/deployments"))
    deleted = delete_job(client, "ctr", "ml")
    assert f"ConfigMap/{maps[0].body['metadata']['name']}" in deleted
