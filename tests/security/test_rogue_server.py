"""The store no longer decides who gets the token: a listener registered as a pserver (or as
the master) that cannot prove, in the TLS handshake, that it is that role of this job receives
no call and no token. The same listener with the job's real certificate does receive them, so
the recorder is shown to work."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from elasticps.errors import RemoteError, UnavailableError
from elasticps.master.client import MasterClient
from elasticps.pserver.client import PServerClient
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.tls import TlsIdentity, write_job_identities
from elasticps.store import Store, open_store
from elasticps.store.keys import MASTER_ADDRESS, MasterAddress, PServerSlot, pserver_slot
from tests.helpers import TOKEN, job_credentials, job_tls


class Recorder(grpc.ServerInterceptor):
    """Records every call that reaches the server: its method and its metadata."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()

    def intercept_service(self, continuation: Callable[..., Any],
                          details: grpc.HandlerCallDetails) -> Any:
        with self.lock:
            self.calls.append((details.method, dict(details.invocation_metadata or ())))
        return continuation(details)


def rogue(identity: TlsIdentity, recorder: Recorder) -> tuple[grpc.Server, str]:
    """A listener with ``identity``'s certificate that asks for no client certificate."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[recorder])
    credentials = grpc.ssl_server_credentials([(identity.key_pem, identity.cert_pem)])
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


def impostors(job: str, tmp: Path) -> dict[str, TlsIdentity]:
    other_ca = write_job_identities(tmp / "other-ca", job)  # same job name, another CA
    return {
        "another CA's pserver certificate": TlsIdentity.load(other_ca["pserver"]),
        "the job's trainer certificate": TlsIdentity.load(job_tls(job)["trainer"]),
    }


@pytest.mark.parametrize("which", ["another CA's pserver certificate",
                                   "the job's trainer certificate"])
def test_a_forged_pserver_slot_receives_no_call_and_no_token(
        store: Store, job_name: str, tmp_path: Path, which: str) -> None:
    recorder = Recorder()
    server, address = rogue(impostors(job_name, tmp_path)[which], recorder)
    try:
        store.put(pserver_slot(0), PServerSlot(address).encode())
        with PServerClient(store, job_credentials(job_name), 1, deadline=3,
                           call_timeout=2) as client, pytest.raises(UnavailableError) as info:
            client.stats()
        assert recorder.calls == []  # no request, so no token: the handshake failed first
        assert TOKEN not in str(info.value)
    finally:
        server.stop(None)


def test_a_forged_master_address_receives_no_call_and_no_token(
        store: Store, job_name: str, tmp_path: Path) -> None:
    recorder = Recorder()
    server, address = rogue(impostors(job_name, tmp_path)["another CA's pserver certificate"],
                            recorder)
    try:
        store.put(MASTER_ADDRESS, MasterAddress(address, "127.0.0.1:1", "rogue").encode())
        client = MasterClient(store, job_credentials(job_name), "t0", retry_for=2,
                              rpc_timeout=1)
        with pytest.raises(UnavailableError):
            client.status()
        client.close()
        assert recorder.calls == []
    finally:
        server.stop(None)


def test_the_recorder_sees_a_real_pserver_certificate_and_its_token(
        store: Store, job_name: str) -> None:
    """Control: the same listener holding the job's pserver certificate is trusted, gets the
    call and the token (so the cases above show the handshake, not a broken recorder)."""
    recorder = Recorder()
    server, address = rogue(TlsIdentity.load(job_tls(job_name)["pserver"]), recorder)
    try:
        store.put(pserver_slot(0), PServerSlot(address).encode())
        credentials = job_credentials(job_name)
        assert isinstance(credentials, JobCredentials)
        with PServerClient(store, credentials, 1, deadline=3, call_timeout=2) as client, \
                pytest.raises(RemoteError, match="UNIMPLEMENTED"):
            client.stats()
        assert recorder.calls
        method, metadata = recorder.calls[0]
        assert method.startswith("/elasticps.")
        assert metadata["x-elasticps-token"] == TOKEN
    finally:
        server.stop(None)
