"""Limits a server announces before any call: a job server tells every peer, in its first
HTTP/2 SETTINGS frame, that one connection may carry at most MAX_STREAMS_PER_CONNECTION calls
at once (so one connection cannot queue unbounded work), and the health-only port 4.

Read off the wire with a raw TLS (or plaintext) HTTP/2 connection, not from the options we
pass: this is what gRPC actually enforces."""

from __future__ import annotations

import socket
import ssl
import struct

from elasticps.rpc.health import add_health, serve_health
from elasticps.rpc.job_ca import role_dns_name
from elasticps.rpc.server import MAX_STREAMS_PER_CONNECTION, bind, make_server
from tests.helpers import job_credentials, job_tls

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, MAX_CONCURRENT_STREAMS = 0x4, 0x3


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def _announced_settings(sock: socket.socket) -> dict[int, int]:
    """Send the HTTP/2 preface and an empty SETTINGS frame; the server's first SETTINGS."""
    sock.sendall(PREFACE + struct.pack(">I", 0)[1:] + bytes([SETTINGS, 0]) + struct.pack(">I", 0))
    while True:
        header = _read_exactly(sock, 9)
        length = int.from_bytes(header[:3], "big")
        kind, flags = header[3], header[4]
        payload = _read_exactly(sock, length)
        if kind == SETTINGS and not flags & 0x1:  # not an ACK
            return {ident: value for ident, value in
                    (struct.unpack_from(">HI", payload, at) for at in range(0, length, 6))}


def test_a_job_server_announces_its_per_connection_stream_limit(job_name: str) -> None:
    server = make_server(job_credentials(job_name, "pserver"), max_workers=2)
    health = add_health(server)
    port = bind(server, "127.0.0.1", 0, job_credentials(job_name, "pserver"))
    server.start()
    probes, health_port = serve_health(health, "127.0.0.1", 0)
    try:
        trainer = job_tls(job_name)["trainer"]
        context = ssl.create_default_context(cafile=str(trainer / "ca.crt"))
        context.load_cert_chain(trainer / "tls.crt", trainer / "tls.key")
        context.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=role_dns_name(job_name,
                                                                       "pserver")) as tls:
            assert tls.selected_alpn_protocol() == "h2"
            settings = _announced_settings(tls)
        assert settings[MAX_CONCURRENT_STREAMS] == MAX_STREAMS_PER_CONNECTION == 32
        with socket.create_connection(("127.0.0.1", health_port), timeout=10) as plain:
            assert _announced_settings(plain)[MAX_CONCURRENT_STREAMS] == 4
    finally:
        probes.stop(grace=None)
        server.stop(grace=None)
