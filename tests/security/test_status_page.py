"""The master's status page: open on loopback (the local default); anywhere else (a cluster
pod binds 0.0.0.0) it is HTTPS with the master's certificate and refuses requests without the
job token, and it never shows a secret."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.master.options import MasterOptions
from elasticps.master.server import MasterServer
from elasticps.store import Store, open_store
from elasticps.store.keys import read_master_address
from tests.helpers import TOKEN, job_credentials, wait_for
from tests.integration.master.helpers import synthetic_chunks


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


def _serve(store: Store, job: str, http_host: str) -> Iterator[MasterServer]:
    options = MasterOptions(job=job, credentials=job_credentials(job, "master"),
                            http_host=http_host, lease_ttl=2, dataset="synthetic://",
                            batch_plan=BatchPlan(4))
    server = MasterServer(store, options, lambda url: synthetic_chunks(4))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(server.serving.is_set, 30, "the master to serve")
    yield server
    server.stop()
    thread.join(timeout=10)


@pytest.fixture
def cluster_master(store: Store, job_name: str) -> Iterator[MasterServer]:
    yield from _serve(store, job_name, "0.0.0.0")


def _get(port: int, path: str, headers: dict[str, str], ca: bytes) -> tuple[int, bytes]:
    context = ssl.create_default_context(cadata=ca.decode())
    context.check_hostname = False  # as the API server's proxy: the CA is what is checked
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def test_status_is_refused_without_the_token_in_cluster_mode(
        cluster_master: MasterServer, store: Store, job_name: str) -> None:
    port = cluster_master.http_port
    address = read_master_address(store)
    assert address is not None
    assert address.status_url.startswith("https://")
    ca = job_credentials(job_name).tls.ca_pem  # type: ignore[union-attr]
    for path in ("/api/status", "/", "/api/logs", "/api/logs/master"):
        for headers in ({}, {"X-Elasticps-Token": "wrong"}, {"Authorization": "Bearer x"},
                        {"X-Elasticps-Token": TOKEN + "x" * 2000}):
            status, body = _get(port, path, headers, ca)
            assert status == 401, (path, headers)
            assert b"job" not in body or b"requires the job token" in body
    status, body = _get(port, "/api/status", {"X-Elasticps-Token": TOKEN}, ca)
    assert status == 200
    doc = json.loads(body)
    assert doc["job"] == job_name
    assert TOKEN not in body.decode()
    status, _ = _get(port, "/api/status", {"Authorization": f"Bearer {TOKEN}"}, ca)
    assert status == 200
    # Plain HTTP to the HTTPS port gets no page.
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        plain.request("GET", "/api/status", headers={"X-Elasticps-Token": TOKEN})
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.getresponse().read()
    finally:
        plain.close()


def test_status_is_open_on_loopback_by_default(store: Store, job_name: str) -> None:
    for server in _serve(store, job_name, "127.0.0.1"):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        connection.request("GET", "/api/status")
        reply = connection.getresponse()
        body = reply.read()
        connection.close()
        assert reply.status == 200
        assert TOKEN not in body.decode()
        address = read_master_address(store)
        assert address is not None
        assert address.status_url == f"http://127.0.0.1:{server.http_port}/"
