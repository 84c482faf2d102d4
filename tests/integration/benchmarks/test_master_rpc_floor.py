"""`benchmarks/master_rpc_floor.py` as a smoke test: real TLS callers in another process get
every answer of the do-nothing master server, and the JSON carries its figures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import grpc
import pytest

from elasticps.proto import master_pb2, master_pb2_grpc
from elasticps.rpc.channel import make_channel
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.tls import TlsIdentity, write_job_identities
from tests.helpers import REPO


def test_floor_benchmark_answers_every_call_and_reports_its_cpu(tmp_path: Path) -> None:
    out = tmp_path / "floor.json"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "master_rpc_floor.py"),
                          "--clients", "4", "--calls", "5", "--processes", "2",
                          "--server", "sync,aio", "--json", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [row["server"] for row in report["rows"]] == ["sync", "aio"]
    for row in report["rows"]:
        assert row["calls"] == 20
        assert row["errors"] == 0
        assert row["calls_per_s"] > 0
        assert row["server_cpu_ms_per_call"] > 0
    assert report["aio_over_sync"]["calls_per_s"] > 0


def load_floor_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("master_rpc_floor",
                                                  REPO / "benchmarks" / "master_rpc_floor.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_asyncio_floor_server_checks_the_job_token(tmp_path: Path) -> None:
    """The aio arm is only a fair comparison if it checks the token as the master does."""
    floor = load_floor_benchmark()
    identities = write_job_identities(tmp_path / "tls", floor.JOB)
    server = floor.AioFloorServer(
        JobCredentials(floor.JOB, floor.TOKEN, TlsIdentity.load(identities["master"])))

    def call(token: str) -> master_pb2.FinishAndGetTaskResponse:
        channel = make_channel(f"127.0.0.1:{server.port}", JobCredentials(
            floor.JOB, token, TlsIdentity.load(identities["trainer"])), "master")
        try:
            return master_pb2_grpc.MasterStub(channel).FinishAndGetTask(
                master_pb2.FinishAndGetTaskRequest(), timeout=30)
        finally:
            channel.close()

    try:
        assert call(floor.TOKEN) == floor.ANSWER
        with pytest.raises(grpc.RpcError) as refused:
            call("not-the-token")
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop()
