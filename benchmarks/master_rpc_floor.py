"""The floor under the master's CPU per task round trip: the same gRPC call doing nothing.

A server made exactly as the master's (``make_server``: mutual TLS, the job-token interceptor,
the call counters' interceptor, ``MASTER_RPC_WORKERS`` workers, the concurrent-RPC limit)
answers ``FinishAndGetTask`` at once with a fixed task: no lock, no queue step, no store. N
client threads, packed into a few processes with their own channels (``make_channel``: TLS,
token), call it in a loop. The server's CPU per call is what any master call costs before the
master does anything; compare it with ``scale_sim.py --pservers 0``'s
``master_cpu_ms_per_task`` (one FinishAndGetTask per task) to see what the master's own work
(queue step, encoding, group commit, etcd) adds.

``--server aio`` measures the same call on gRPC's asyncio server (``grpc.aio``: handlers are
coroutines on one event loop, no worker threads), with the same TLS, token check, receive
limits and concurrent-RPC limit; ``--server sync,aio`` runs both in one invocation, one after
the other, and prints the ratio: what moving the master to an asyncio server could save.

    python benchmarks/master_rpc_floor.py [--clients 64] [--calls 100] [--server sync,aio]
                                          [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elasticps.config import DEFAULT_MAX_CONCURRENT_RPCS
from elasticps.master.server import MASTER_RPC_WORKERS
from elasticps.proto import master_pb2, master_pb2_grpc
from elasticps.rpc.call_metrics import ServerCallMetrics
from elasticps.rpc.channel import make_channel
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.server import (
    MAX_MESSAGE_BYTES,
    bind,
    make_server,
    server_options,
    token_refusal,
)
from elasticps.rpc.tls import TlsIdentity, write_job_identities

JOB, TOKEN = "rpc-floor", "rpc-floor-token"
ANSWER = master_pb2.FinishAndGetTaskResponse(
    finished=master_pb2.TaskFinishedResponse(accepted=True),
    next=master_pb2.GetTaskResponse(task=master_pb2.Task(
        task_id=1, pass_id=0, epoch=1, lease_seconds=120.0,
        chunks=[master_pb2.Chunk(path="sim-00000.parquet", row_group=0, num_rows=256)])))


class NothingMaster(master_pb2_grpc.MasterServicer):
    """Answers every FinishAndGetTask with the same task, at once."""

    def FinishAndGetTask(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.FinishAndGetTaskRequest, context: grpc.ServicerContext,
    ) -> master_pb2.FinishAndGetTaskResponse:
        return ANSWER


class AioNothingMaster(master_pb2_grpc.MasterServicer):
    """The same, as a coroutine for the asyncio server."""

    async def FinishAndGetTask(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.FinishAndGetTaskRequest, context: grpc.aio.ServicerContext,
    ) -> master_pb2.FinishAndGetTaskResponse:
        return ANSWER


class AioTokenInterceptor(grpc.aio.ServerInterceptor):
    """elasticps's token check (``rpc.server.token_refusal``, as ``TokenInterceptor`` makes
    it) for the asyncio server: a refused call is answered by a handler that never reads the
    request."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        refusal = token_refusal(handler_call_details.invocation_metadata, self._token)
        if refusal is None:
            return await continuation(handler_call_details)

        async def deny(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

        return grpc.stream_unary_rpc_method_handler(deny)


class SyncFloorServer:
    """The master's own server (``make_server``) answering with :class:`NothingMaster`."""

    def __init__(self, credentials: JobCredentials) -> None:
        self._server = make_server(credentials, max_workers=MASTER_RPC_WORKERS,
                                   max_concurrent_rpcs=DEFAULT_MAX_CONCURRENT_RPCS,
                                   call_metrics=ServerCallMetrics(CollectorRegistry()))
        master_pb2_grpc.add_MasterServicer_to_server(NothingMaster(), self._server)
        self.port = bind(self._server, "127.0.0.1", 0, credentials)
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=0.5)


class AioFloorServer:
    """A ``grpc.aio`` server made as ``make_server`` makes the master's, on an event loop in a
    thread of this process (so this process's CPU is still the server's)."""

    def __init__(self, credentials: JobCredentials) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aio-server",
                                        daemon=True)
        self._thread.start()
        self._server, self.port = asyncio.run_coroutine_threadsafe(
            self._start(credentials), self._loop).result(timeout=60)

    async def _start(self, credentials: JobCredentials) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(interceptors=[AioTokenInterceptor(credentials.token)],
                                 options=server_options(MAX_MESSAGE_BYTES),
                                 maximum_concurrent_rpcs=DEFAULT_MAX_CONCURRENT_RPCS)
        master_pb2_grpc.add_MasterServicer_to_server(AioNothingMaster(), server)
        assert credentials.tls is not None  # write_job_identities made the job's TLS files
        port = server.add_secure_port("127.0.0.1:0", credentials.tls.server_credentials())
        await server.start()
        return server, port

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(0.5), self._loop).result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=60)
        self._loop.close()


def cpu_seconds() -> float:
    """This process's CPU (user + system), every thread included."""
    return time.process_time()


def run_clients(address: str, tls_dir: str, threads: int, calls: int, out: str) -> int:
    """``--client``: ``threads`` callers, each with its own channel, ``calls`` calls each."""
    credentials = JobCredentials(JOB, TOKEN, TlsIdentity.load(Path(tls_dir)))
    errors: list[str] = []

    def ready() -> None:  # every caller connected: tell the server, wait for its go
        print("ready", flush=True)
        sys.stdin.readline()

    start = threading.Barrier(threads, action=ready)

    def caller(index: int) -> None:
        channel = make_channel(address, credentials, "master")
        stub = master_pb2_grpc.MasterStub(channel)
        request = master_pb2.FinishAndGetTaskRequest(
            finished=master_pb2.TaskFinishedRequest(trainer=f"t{index}", task_id=1, epoch=1))
        try:
            stub.FinishAndGetTask(request, timeout=30)  # connected before the clock starts
            start.wait(timeout=60)
            for _ in range(calls):
                stub.FinishAndGetTask(request, timeout=30)
        except grpc.RpcError as exc:
            errors.append(str(exc)[:200])
        finally:
            channel.close()

    pool = [threading.Thread(target=caller, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    Path(out).write_text(json.dumps({"errors": errors}))
    return 0


def measure(clients: int, calls: int, processes: int, kind: str = "sync") -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="elasticps-rpc-floor-"))
    identities = write_job_identities(root / "tls", JOB)
    credentials = JobCredentials(JOB, TOKEN, TlsIdentity.load(identities["master"]))
    server = (AioFloorServer if kind == "aio" else SyncFloorServer)(credentials)
    port = server.port
    try:
        per = [len(range(k, clients, processes)) for k in range(min(processes, clients))]
        procs = [subprocess.Popen(
            [sys.executable, __file__, "--client", f"127.0.0.1:{port}",
             str(identities["trainer"]), str(n), str(calls), str(root / f"client-{k}.json")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for k, n in enumerate(per)]
        # The clock starts once every caller has connected and made a first call, so the
        # TLS handshakes and imports are not counted: the server's CPU from here is the calls'.
        for proc in procs:
            said = proc.stdout.readline().strip() if proc.stdout is not None else ""
            if said != "ready":
                raise RuntimeError(f"a client process said {said!r}, not ready")
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.write("go\n")
                proc.stdin.flush()
        for proc in procs:
            proc.wait(timeout=600)
        wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    finally:
        server.stop()
    errors = [e for k in range(len(per))
              for e in json.loads((root / f"client-{k}.json").read_text())["errors"]]
    total = clients * calls
    return {"server": kind, "clients": clients, "calls": total, "wall_s": round(wall, 3),
            "calls_per_s": round(total / wall, 1),
            "server_cpu_ms_per_call": round(1e3 * cpu / total, 4), "errors": len(errors),
            "load_average": os.getloadavg()}


def server_kinds(text: str) -> list[str]:
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    bad = [kind for kind in kinds if kind not in ("sync", "aio")]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected sync, aio or both (sync,aio), each at most once")
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64, help="calling threads (default 64)")
    parser.add_argument("--calls", type=int, default=100, help="calls per thread (default 100)")
    parser.add_argument("--processes", type=int, default=4,
                        help="processes the callers are packed into (default 4)")
    parser.add_argument("--server", type=server_kinds, default=["sync"],
                        help="sync (the master's thread-pool server, default), aio (gRPC's "
                             "asyncio server) or sync,aio: both, one after the other")
    parser.add_argument("--json", help="write the figures to this file: one row per server, "
                                       "and aio_over_sync when both ran")
    parser.add_argument("--client", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        address, tls_dir, threads, calls, out = args.client
        return run_clients(address, tls_dir, int(threads), int(calls), out)
    if min(args.clients, args.calls, args.processes) < 1:
        parser.error("--clients, --calls and --processes must be >= 1")
    rows = {}
    for kind in args.server:
        row = rows[kind] = measure(args.clients, args.calls, args.processes, kind)
        print(f"{kind:4s} server, {row['clients']} callers, a FinishAndGetTask that does "
              f"nothing: {row['calls_per_s']:.0f} calls/s, server CPU "
              f"{row['server_cpu_ms_per_call']} ms a call, errors {row['errors']} "
              f"(load {row['load_average'][0]:.1f})", flush=True)
    report: dict[str, Any] = {"rows": list(rows.values())}
    if len(rows) == 2:
        sync, aio = rows["sync"], rows["aio"]
        report["aio_over_sync"] = {
            "calls_per_s": round(aio["calls_per_s"] / sync["calls_per_s"], 3),
            "server_cpu_ms_per_call": round(
                aio["server_cpu_ms_per_call"] / sync["server_cpu_ms_per_call"], 3)}
        print(f"aio / sync: calls/s x{report['aio_over_sync']['calls_per_s']:.2f}, server CPU "
              f"a call x{report['aio_over_sync']['server_cpu_ms_per_call']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if any(row["errors"] for row in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
