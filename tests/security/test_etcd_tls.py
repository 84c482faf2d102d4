"""A job's etcd as `elasticps submit` renders it, run for real: TLS with client-certificate
auth, the job's user limited to the job's prefix by `elasticps store setup-auth`, and the
certificates from the job's Secret (:class:`~elasticps.cluster.job_secrets.JobSecrets`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.cluster.job_secrets import JobSecrets
from elasticps.cluster.spec import Job
from elasticps.errors import StoreError, StoreUnavailableError
from elasticps.identity import Identity, write_identity
from elasticps.store import Compare, Put, job_prefix, open_store
from elasticps.store.election import Election
from elasticps.store.etcd_auth import setup_job_auth
from elasticps.store.etcd_store import EtcdStore
from elasticps.store.keys import PServerSlot, pserver_slot
from tests.etcd_server import EtcdServer

JOB = "tlsjob"


def _identity(root: Path, values: dict[str, str], name: str) -> Path:
    return write_identity(root / name, values["ca.crt"].encode(),
                          values[f"{name}.crt"].encode(), values[f"{name}.key"].encode())


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EtcdServer, Path]]:
    """A TLS etcd with the job's Secret's certificates, auth set up for the job."""
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed: apt-get install -y etcd-server")
    root = tmp_path_factory.mktemp("etcd-tls")
    job = Job.from_dict({"job_name": JOB, "entry_point": "python train.py", "namespace": "ml"})
    values = dict(JobSecrets.generate(job, (f"{JOB}-etcd-0.{JOB}-etcd.ml.svc",)).values)
    server_dir = root / "server"
    write_identity(server_dir, values["ca.crt"].encode(), values["etcd-server.crt"].encode(),
                   values["etcd-server.key"].encode())
    (server_dir / "server.crt").write_bytes((server_dir / "tls.crt").read_bytes())
    (server_dir / "server.key").write_bytes((server_dir / "tls.key").read_bytes())
    for name in ("etcd-root", "trainer", "pserver"):
        _identity(root, values, name)
    server = EtcdServer(tls_dir=server_dir)
    server.start()
    try:
        setup_job_auth([("127.0.0.1", server.client_port)],
                       Identity.load(root / "etcd-root"), f"elasticps-{JOB}", job_prefix(JOB))
        yield server, root
    finally:
        server.stop()


def _url(server: EtcdServer, identity: Path) -> str:
    return f"etcd://127.0.0.1:{server.client_port}?tls={identity}"


def test_the_job_user_works_inside_its_prefix(secured: tuple[EtcdServer, Path]) -> None:
    server, root = secured
    store = open_store(_url(server, root / "pserver"), JOB)
    try:
        slot = PServerSlot("10.0.0.5:7164").encode()
        lease = store.grant_lease(5)
        assert store.txn([Compare.missing(pserver_slot(0))],
                         [Put(pserver_slot(0), slot, lease.id)]).succeeded
        watch = store.watch_prefix("job/", start_revision=store.revision() + 1)
        store.put("job/result", b"{}")
        event = watch.get(timeout=10)
        watch.cancel()
        assert event is not None
        assert event.key == "job/result"
        assert [kv.key for kv in store.get_prefix("")] == ["job/result", "pserver/slot/0"]
        election = Election(store, "master/election", value=b"me", ttl=5)
        election.campaign(timeout=10)
        assert election.leader_txn([Put("master/state/x", b"1")]).succeeded
        election.resign()
        lease.revoke()
        assert store.get(pserver_slot(0)) is None
    finally:
        store.close()


def test_the_job_user_cannot_read_or_write_another_prefix(
        secured: tuple[EtcdServer, Path]) -> None:
    server, root = secured
    other = open_store(_url(server, root / "trainer"), "another-job")
    try:
        with pytest.raises(StoreError, match="PERMISSION_DENIED"):
            other.put("job/result", b"{}")
        with pytest.raises(StoreError, match="PERMISSION_DENIED"):
            other.get_prefix("")
    finally:
        other.close()


def test_no_certificate_or_another_ca_gets_nothing(secured: tuple[EtcdServer, Path],
                                                   tmp_path: Path) -> None:
    server, _ = secured
    plain = EtcdStore([("127.0.0.1", server.client_port)], job_prefix(JOB), retry_for=1.0)
    try:
        with pytest.raises(StoreUnavailableError):
            plain.get("job/result")
    finally:
        plain.close()
    stranger = Job.from_dict({"job_name": JOB, "entry_point": "python train.py",
                              "namespace": "ml"})
    foreign = dict(JobSecrets.generate(stranger, ()).values)  # same job name, another CA
    other_ca = _identity(tmp_path, foreign, "trainer")
    store = EtcdStore.from_url(_url(server, other_ca), job_prefix(JOB), retry_for=1.0)
    try:
        with pytest.raises(StoreUnavailableError):
            store.get("job/result")
    finally:
        store.close()


def test_setup_is_idempotent(secured: tuple[EtcdServer, Path]) -> None:
    server, root = secured
    setup_job_auth([("127.0.0.1", server.client_port)], Identity.load(root / "etcd-root"),
                   f"elasticps-{JOB}", job_prefix(JOB))
    store = open_store(_url(server, root / "trainer"), JOB)
    try:
        store.put("job/progress/x", b"{}")
        assert store.get("job/progress/x") is not None
    finally:
        store.close()
