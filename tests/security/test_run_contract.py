"""The contract: with default settings, the gRPC ports of a job started by `elasticps run`
refuse a plaintext connection, serve TLS only to holders of the job's certificates, and the
job's secrets on disk are readable by their owner only. `--insecure` is explicit and warns."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from elasticps.errors import UnauthenticatedError, UnavailableError
from elasticps.rpc import call
from elasticps.rpc.tls import TlsIdentity, peer_options, write_job_identities
from elasticps.store import open_store
from elasticps.store.keys import PServerSlot, read_master_address
from tests.helpers import REPO, wait_for

SCRIPT = REPO / "tests/security/scripts/idle_trainer.py"
JOB = "contract"


def _launch(workdir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "elasticps", "run", "--workdir", str(workdir), "--job-name", JOB,
         "--trainers", "1", "--pservers", "1", "--standby-masters", "0", "--grace", "5",
         *extra, str(SCRIPT)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)


def _addresses(workdir: Path) -> tuple[str, str]:
    """(master gRPC, pserver 0) once both are published."""
    store = open_store(f"file://{workdir}/store.db", JOB)
    try:
        def published() -> tuple[str, str] | None:
            master, slot = read_master_address(store), store.get("pserver/slot/0")
            if master is None or slot is None:
                return None
            return master.grpc, PServerSlot.decode(slot.value, slot.key).address

        return wait_for(published, 90, "the master and the pserver to publish their ports")
    finally:
        store.close()


def _call_without_token(channel: grpc.Channel) -> None:
    """A health check without the job token: UNAUTHENTICATED from a server that accepted the
    connection (the token is checked only after the TLS handshake), UNAVAILABLE from one that
    refused it."""
    call(health_pb2_grpc.HealthStub(channel).Check, health_pb2.HealthCheckRequest(service=""),
         timeout=5)


@pytest.fixture
def running_job(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    workdir = tmp_path / "work"
    launcher = _launch(workdir)
    try:
        yield workdir, launcher
    finally:
        if launcher.poll() is None:
            os.kill(launcher.pid, signal.SIGTERM)
        launcher.communicate(timeout=60)


def test_default_job_ports_refuse_plaintext_and_speak_tls_to_the_job_only(
        running_job: tuple[Path, subprocess.Popen[str]], tmp_path: Path) -> None:
    workdir, _ = running_job
    for role, address in zip(("master", "pserver"), _addresses(workdir), strict=True):
        with grpc.insecure_channel(address) as plain, pytest.raises(UnavailableError):
            _call_without_token(plain)  # plaintext: the TLS port refuses it
        job_cert = TlsIdentity.load(workdir / "tls" / "trainer")
        with grpc.secure_channel(address, job_cert.channel_credentials(),
                                 options=peer_options(JOB, role)) as tls, \
                pytest.raises(UnauthenticatedError):
            _call_without_token(tls)  # the job's certificate gets through TLS to the token check
        # a certificate for the same job name from another CA is refused
        stranger = TlsIdentity.load(write_job_identities(tmp_path / "x", JOB)["trainer"])
        with grpc.secure_channel(address, stranger.channel_credentials(),
                                 options=peer_options(JOB, role)) as other, \
                pytest.raises(UnavailableError):
            _call_without_token(other)


def test_secrets_on_disk_are_the_owners_only(
        running_job: tuple[Path, subprocess.Popen[str]]) -> None:
    workdir, _ = running_job
    _addresses(workdir)
    assert stat.S_IMODE((workdir / "store.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((workdir / "tls").stat().st_mode) == 0o700
    for role in ("master", "pserver", "trainer"):
        assert stat.S_IMODE((workdir / "tls" / role).stat().st_mode) == 0o700
        for name in ("ca.crt", "tls.crt", "tls.key"):
            assert stat.S_IMODE((workdir / "tls" / role / name).stat().st_mode) == 0o600
    assert not list((workdir / "tls").rglob("ca.key"))  # the CA key is never written
    logs = "".join(p.read_text(errors="replace") for p in (workdir / "logs").glob("*.log"))
    assert "BEGIN PRIVATE KEY" not in logs


def test_insecure_is_explicit_and_warns(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    launcher = _launch(workdir, "--insecure")
    try:
        master, _ = _addresses(workdir)
        with grpc.insecure_channel(master) as plain, pytest.raises(UnauthenticatedError):
            _call_without_token(plain)  # plaintext accepted: refused only for the token
        assert not (workdir / "tls").exists()
    finally:
        os.kill(launcher.pid, signal.SIGTERM)
        _, err = launcher.communicate(timeout=60)
    assert "WARNING: job contract runs WITHOUT TLS" in err
    master_log = (workdir / "logs" / "master.log").read_text()
    assert "WITHOUT TLS" in master_log
