"""``elasticps data upload DIR pvc://CLAIM``: a transfer Job, over real HTTP. The fake API
server creates the Job; a hook standing for the Job controller and the kubelet runs the Job's
own rendered command (paths moved under tmp) as a real receiver process, marks its pod ready
once it listens, and the upload streams through the fake's pod proxy to it."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticps.cluster.claim_upload import upload_to_claim
from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.render.transfer import (
    CLAIM_MOUNT,
    LABEL_TRANSFER,
    TOKEN_DIR,
    Transfer,
    transfer_objects,
)
from elasticps.cluster.validate import validate_manifests
from elasticps.data.receive import RECEIVER_PORT, TOKEN_HEADER
from elasticps.data.upload import PARTIAL_SUFFIX, RECORD_NAME
from elasticps.errors import ClusterError, ConfigError, DataError
from tests.helpers import REPO, run_cli, wait_for
from tests.unit.cluster.fake_kube import FakeKube


class StandInPods:
    """Stands for the Job controller and kubelet: a transfer Job's pod is its rendered command
    run as a real process, with the claim mounted at ``claim`` (a local directory)."""

    def __init__(self, fake: FakeKube, claim: Path, tmp: Path) -> None:
        self.fake = fake
        self.claim = claim
        self.tmp = tmp
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self.commands: list[list[str]] = []
        fake.on_create.append(self.created)
        fake.on_delete.append(self.deleted)

    def created(self, obj: dict[str, Any]) -> None:
        if obj["kind"] != "Job" or LABEL_TRANSFER not in obj["metadata"]["labels"]:
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        pod = f"{name}-x7k2p"
        template = obj["spec"]["template"]
        self.fake.add_pod(ns, pod, template["metadata"]["labels"], phase="Pending",
                          ready=False)
        secret = self.fake.objects[f"/api/v1/namespaces/{ns}/secrets"][name]
        tokens = self.tmp / f"{name}-token"
        tokens.mkdir()
        (tokens / "token").write_bytes(base64.b64decode(secret["data"]["token"]))
        (container,) = template["spec"]["containers"]
        command = [arg.replace(CLAIM_MOUNT, str(self.claim)).replace(TOKEN_DIR, str(tokens))
                   for arg in container["command"]]
        command[command.index("--port") + 1] = "0"
        self.commands.append(container["command"])
        process = subprocess.Popen([sys.executable, "-m", "elasticps", *command[1:],
                                    "--host", "127.0.0.1"], cwd=REPO, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.processes[name] = process

        def become_ready() -> None:  # as the readiness probe would, once it listens
            assert process.stdout is not None
            line = process.stdout.readline()
            if line.startswith("receiving into"):
                self.fake.pod_ports[(ns, pod)] = int(line.rsplit(":", 1)[1])
                self.fake.add_pod(ns, pod, template["metadata"]["labels"])

        threading.Thread(target=become_ready, daemon=True).start()

    def deleted(self, collection: str, name: str) -> None:
        process = self.processes.get(name)
        if collection.endswith("/jobs") and process is not None and process.poll() is None:
            process.kill()  # background propagation takes the pod along

    def kill(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)

    def reap(self) -> None:
        self.kill()
        for process in self.processes.values():
            process.wait(timeout=30)


@pytest.fixture
def pods(fake: FakeKube, tmp_path: Path) -> Iterator[StandInPods]:
    (tmp_path / "claim").mkdir()
    stand_in = StandInPods(fake, tmp_path / "claim", tmp_path)
    yield stand_in
    stand_in.reap()


def make_dataset(root: Path, files: int = 4) -> Path:
    (root / "part").mkdir(parents=True)
    (root / "manifest.json").write_text('{"rows": 4}')
    for index in range(files):
        (root / "part" / f"chunk {index}.parquet").write_bytes(os.urandom(20_000))
    return root


GONE = {"jobs": [], "secrets": [], "networkpolicies": []}


def transfer_collections(fake: FakeKube) -> dict[str, list[str]]:
    return {kind: sorted(fake.objects.get(f"{prefix}/namespaces/ml/{kind}", {}))
            for prefix, kind in (("/apis/batch/v1", "jobs"), ("/api/v1", "secrets"),
                                 ("/apis/networking.k8s.io/v1", "networkpolicies"))}


@pytest.mark.slow
def test_a_full_upload_lands_verified_under_the_namespace_layout(
        fake: FakeKube, client: KubeClient, pods: StandInPods, tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr")
    seen: list[tuple[str, bool]] = []
    result = upload_to_claim(client, local, "pvc://datasets/shared", namespace="ml",
                             ready_timeout=120, on_file=lambda rel, c: seen.append((rel, c)))
    assert result.url == "pvc://datasets/shared/ml/ctr"
    landed = pods.claim / "shared" / "ml" / "ctr"
    expected = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert result.copied == expected
    assert seen == [(rel, True) for rel in expected]
    for rel in expected:
        assert (landed / rel).read_bytes() == (local / rel).read_bytes()
    assert (landed / RECORD_NAME).exists()
    assert not list(landed.rglob(f"*{PARTIAL_SUFFIX}"))
    assert [r.path.rsplit("/", 1)[1] for r in fake.requests if r.method == "POST"
            and "/proxy/" in r.path] == ["finish"]  # told the receiver it is over
    assert transfer_collections(fake) == GONE  # deleted at the end
    (command,) = pods.commands
    assert command[command.index("--dir") + 1] == f"{CLAIM_MOUNT}/shared/ml/ctr"
    # the token went only in the header the receiver checks, never in a URL
    proxied = [r for r in fake.requests if "/proxy/" in r.path]
    assert proxied
    assert all(r.path.startswith("/api/v1/namespaces/ml/pods/") for r in proxied)
    assert all(TOKEN_HEADER.lower() in r.headers for r in proxied)
    assert not any(r.headers[TOKEN_HEADER.lower()] in r.path for r in proxied)


@pytest.mark.slow
def test_an_interrupted_upload_resumes(fake: FakeKube, client: KubeClient, pods: StandInPods,
                                       tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr")
    done: list[str] = []

    def kill_after_two(rel: str, copied: bool) -> None:
        done.append(rel)
        if len(done) == 2:
            pods.kill()  # the transfer pod dies (node lost, evicted)

    with pytest.raises(ClusterError, match="error trying to reach service"):
        upload_to_claim(client, local, "pvc://datasets", namespace="ml", ready_timeout=120,
                        on_file=kill_after_two)
    assert transfer_collections(fake) == GONE
    landed = pods.claim / "ml" / "ctr"
    assert not (landed / RECORD_NAME).exists()  # not whole: no record
    resumed = upload_to_claim(client, local, "pvc://datasets", namespace="ml",
                              ready_timeout=120)
    assert resumed.skipped == done
    assert len(resumed.copied) == 5 - len(done)
    for rel in [*resumed.skipped, *resumed.copied]:
        assert (landed / rel).read_bytes() == (local / rel).read_bytes()
    assert (landed / RECORD_NAME).exists()


@pytest.mark.slow
def test_another_file_in_the_claim_is_refused_unless_overwrite(
        fake: FakeKube, client: KubeClient, pods: StandInPods, tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr", files=1)
    landed = pods.claim / "ml" / "ctr"
    (landed / "part").mkdir(parents=True)
    (landed / "part" / "chunk 0.parquet").write_bytes(b"someone else's data")
    with pytest.raises(DataError, match=r"pvc://datasets/ml/ctr: part/chunk 0\.parquet already "
                                        r"exists with other content.*--overwrite"):
        upload_to_claim(client, local, "pvc://datasets", namespace="ml", ready_timeout=120)
    assert (landed / "part" / "chunk 0.parquet").read_bytes() == b"someone else's data"
    assert transfer_collections(fake) == GONE
    upload_to_claim(client, local, "pvc://datasets", namespace="ml", ready_timeout=120,
                    overwrite=True)
    assert (landed / "part" / "chunk 0.parquet").read_bytes() == \
        (local / "part" / "chunk 0.parquet").read_bytes()


@pytest.mark.slow
def test_a_pod_never_ready_times_out_and_cleans_up(fake: FakeKube, client: KubeClient,
                                                   tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr", files=1)  # no stand-in: the pod never appears
    with pytest.raises(ClusterError, match=r"not ready within 1s.*claim 'datasets'"):
        upload_to_claim(client, local, "pvc://datasets", namespace="ml", ready_timeout=1)
    assert transfer_collections(fake) == GONE
    with pytest.raises(ConfigError, match=r"upload destination 'pvc://Bad_Claim': PVC name "
                                          r"'Bad_Claim' is not a DNS-1123 subdomain"):
        upload_to_claim(client, local, "pvc://Bad_Claim", namespace="ml")
    assert not [r for r in fake.requests if r.method == "POST" and "Bad" in str(r.body)]


def test_the_transfer_job_is_valid_and_least_privileged() -> None:
    transfer = Transfer("upload-ctr-a1b2c3", "ml", "datasets", "shared/ml/ctr",
                        "elasticps/elasticps:0.1.0")
    objects = transfer_objects(transfer, "s3cr3t-" + "x" * 40)
    assert validate_manifests(objects) == []  # the Kubernetes schemas, strict
    secret, policy, job = objects
    assert secret["stringData"] == {"token": "s3cr3t-" + "x" * 40}
    spec = job["spec"]["template"]["spec"]
    # the receiver's port is the one way in, and the pod may open no connection
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP",
                                                     "port": RECEIVER_PORT}]}]
    assert policy["spec"]["egress"] == []
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["ports"][0]["containerPort"] == RECEIVER_PORT
    assert {"name": "claim", "persistentVolumeClaim": {"claimName": "datasets"}} in \
        spec["volumes"]
    assert "s3cr3t-" not in str(job)  # the token is only in the Secret


@pytest.mark.slow
def test_the_cli_uploads_into_a_claim(fake: FakeKube, pods: StandInPods, tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr", files=1)
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    done = run_cli("data", "upload", str(local), "pvc://datasets", "-n", "ml", "--kubeconfig",
                   str(kubeconfig), "--ready-timeout", "120", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "job spec: data: pvc://datasets/ml/ctr" in done.stdout
    assert "2 file(s) copied" in done.stdout
    digest = hashlib.sha256((local / "manifest.json").read_bytes()).hexdigest()
    assert hashlib.sha256((pods.claim / "ml" / "ctr" / "manifest.json").read_bytes()) \
        .hexdigest() == digest
    wait_for(lambda: transfer_collections(fake) == GONE, 10,
             "the transfer Job deleted")
