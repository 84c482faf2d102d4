"""``elasticps data receive``, the transfer pod's server, as a real process over real HTTP:
the token, the checksum, path traversal and the size bound are refused before anything is
written; a verified file takes its name, a resumed one is found in place."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticps.data.receive import SHA256_HEADER, TOKEN_HEADER
from elasticps.data.upload import PARTIAL_SUFFIX
from tests.helpers import REPO, run_cli

TOKEN = "t" * 20 + "-transfer-token"


class Running:
    """A receiver process on a kernel-picked loopback port."""

    def __init__(self, root: Path, token_file: Path, *extra: str) -> None:
        self.root = root
        self.process = subprocess.Popen(
            [sys.executable, "-m", "elasticps", "data", "receive", "--dir", str(root),
             "--token-file", str(token_file), "--host", "127.0.0.1", "--port", "0", *extra],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # printed once it listens
        assert line.startswith("receiving into"), self.process.stderr.read()  # type: ignore
        self.port = int(line.rsplit(":", 1)[1])

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None,
                token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = dict(headers or {})
        if token is not None:
            sent[TOKEN_HEADER] = token
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        return response.status, json.loads(data) if data.startswith(b"{") else {}

    def put(self, rel: str, data: bytes, sha: str | None = None,
            **kwargs: Any) -> tuple[int, dict[str, Any]]:
        return self.request("PUT", f"/files/{rel}", data, {
            SHA256_HEADER: sha or hashlib.sha256(data).hexdigest()}, **kwargs)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Running]:
    (tmp_path / "token").write_text(TOKEN + "\n")
    running = Running(tmp_path / "claim" / "ml" / "ctr", tmp_path / "token", "--max-bytes",
                      "1000")
    yield running
    running.stop()


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*") if p.is_file()}


def test_a_verified_file_takes_its_name_and_is_then_in_place(receiver: Running) -> None:
    data = b"chunk-0 " * 50
    sha = hashlib.sha256(data).hexdigest()
    assert receiver.request("GET", f"/files/part/c0.parquet?sha256={sha}&size=400") == \
        (200, {"in_place": False})
    assert receiver.put("part/c0.parquet", data) == (201, {"written": "part/c0.parquet"})
    assert files_under(receiver.root) == {"part/c0.parquet": data}
    assert receiver.request("GET", f"/files/part/c0.parquet?sha256={sha}&size=400") == \
        (200, {"in_place": True})
    other = hashlib.sha256(b"x").hexdigest()
    status, answer = receiver.request("GET", f"/files/part/c0.parquet?sha256={other}&size=400")
    assert status == 409
    assert "already exists with other content" in answer["error"]
    assert receiver.request(
        "GET", f"/files/part/c0.parquet?sha256={other}&size=400&overwrite=1") == \
        (200, {"in_place": False})
    assert receiver.request("POST", "/finish") == (200, {"finished": True})
    assert receiver.process.wait(timeout=30) == 0


def test_a_checksum_mismatch_is_refused_and_nothing_is_left(receiver: Running) -> None:
    status, answer = receiver.put("a.bin", b"what was sent", hashlib.sha256(b"other").hexdigest())
    assert status == 422
    assert "does not match" in answer["error"]
    assert files_under(receiver.root) == {}
    assert receiver.put("b.bin", b"x", "not-a-hash")[0] == 400


def test_a_bad_or_missing_token_is_refused_before_the_body(receiver: Running) -> None:
    assert receiver.put("a.bin", b"data", token="t" * 20 + "-transfer-tokem")[0] == 401
    assert receiver.put("a.bin", b"data", token=None)[0] == 401
    assert receiver.request("POST", "/finish", token="wrong")[0] == 401
    assert files_under(receiver.root) == {}
    assert receiver.process.poll() is None  # still serving
    assert receiver.request("GET", "/healthz", token=None)[0] == 200  # the probe needs none


@pytest.mark.parametrize("rel", ["../escape.bin", "a/../../escape.bin", "%2e%2e/escape.bin",
                                 "/etc/passwd", "a//b", "./a", "a\\b",
                                 f"a.bin{PARTIAL_SUFFIX}"])
def test_paths_out_of_the_directory_are_refused(receiver: Running, rel: str) -> None:
    status, answer = receiver.put(rel, b"data")
    assert status == 400, answer
    assert files_under(receiver.root.parents[1]) == {}


def test_a_symlink_out_of_the_directory_is_refused(receiver: Running, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (receiver.root / "link").symlink_to(outside)
    (receiver.root / "file-link").symlink_to(tmp_path / "token")
    assert receiver.put("link/x.bin", b"data")[0] == 400
    assert receiver.put("file-link", b"data")[0] == 400
    assert list(outside.iterdir()) == []
    assert (tmp_path / "token").read_text() == TOKEN + "\n"


def test_the_request_size_is_bounded(receiver: Running) -> None:
    status, answer = receiver.put("big.bin", b"x" * 1001)
    assert status == 413
    assert "more than this receiver's limit of 1,000 (--max-bytes)" in answer["error"]
    assert receiver.put("fits.bin", b"x" * 1000)[0] == 201
    # no Content-Length: http.client sends a bodyless PUT with "Content-Length: 0", so
    # speak HTTP by hand
    connection = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=30)
    connection.putrequest("PUT", "/files/chunked.bin")
    connection.putheader(TOKEN_HEADER, TOKEN)
    connection.putheader(SHA256_HEADER, hashlib.sha256(b"").hexdigest())
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    connection.send(b"0\r\n\r\n")
    assert connection.getresponse().status == 411
    connection.close()
    assert sorted(files_under(receiver.root)) == ["fits.bin"]


def test_a_short_token_or_no_token_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "short").write_text("abc")
    for token_file, message in ((tmp_path / "short", "shorter than 16 characters"),
                                (tmp_path / "missing", "cannot read the transfer token")):
        done = run_cli("data", "receive", "--dir", str(tmp_path / "d"), "--token-file",
                       str(token_file), "--port", "0", cwd=REPO)
        assert done.returncode == 1
        assert message in done.stderr


def _put_with_length(port: int, rel: str, length: str) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.putrequest("PUT", f"/files/{rel}")
    connection.putheader(TOKEN_HEADER, TOKEN)
    connection.putheader(SHA256_HEADER, hashlib.sha256(b"").hexdigest())
    connection.putheader("Content-Length", length)
    connection.endheaders()
    return connection.getresponse()


@pytest.mark.parametrize("length", ["abc", "-5", "1_0", "0x10"])
def test_a_content_length_that_is_not_a_number_is_a_clear_error(receiver: Running,
                                                                length: str) -> None:
    response = _put_with_length(receiver.port, "a.bin", length)
    assert response.status == 400
    assert json.loads(response.read())["error"] == (
        f"the Content-Length header {length!r} is not a whole number of bytes")
    assert files_under(receiver.root) == {}
    assert receiver.request("GET", "/healthz", token=None)[0] == 200  # still serving


def test_entries_planted_at_the_partial_name_are_not_written_through(
        receiver: Running, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"someone else's file")
    (receiver.root / f"a.bin{PARTIAL_SUFFIX}").symlink_to(victim)
    assert receiver.put("a.bin", b"the upload")[0] == 201
    assert victim.read_bytes() == b"someone else's file"
    assert (receiver.root / "a.bin").read_bytes() == b"the upload"
    assert not (receiver.root / "a.bin").is_symlink()
    os.mkfifo(receiver.root / f"b.bin{PARTIAL_SUFFIX}")  # opening it for writing would block
    status, answer = receiver.put("b.bin", b"more")
    assert status == 500
    assert f"b.bin{PARTIAL_SUFFIX} is a FIFO" in answer["error"]
    assert not (receiver.root / "b.bin").exists()


@pytest.mark.slow
def test_requests_without_the_token_do_not_keep_the_receiver_alive(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN)
    running = Running(tmp_path / "dir", tmp_path / "token", "--idle-timeout", "1")
    try:
        deadline = time.monotonic() + 10  # ten idle timeouts
        while running.process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError, http.client.HTTPException):  # it may stop mid-way
                running.request("POST", "/finish", token="not-the-token")
        # It stopped while the requests went on, not once they ended.
        assert running.process.poll() == 1, "requests without the token kept it alive"
    finally:
        running.stop()


@pytest.mark.slow
def test_a_slow_authenticated_upload_keeps_the_receiver_alive(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN)
    running = Running(tmp_path / "dir", tmp_path / "token", "--idle-timeout", "1")
    data = b"0123456789" * 4
    try:
        connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=30)
        connection.putrequest("PUT", "/files/slow.bin")
        connection.putheader(TOKEN_HEADER, TOKEN)
        connection.putheader(SHA256_HEADER, hashlib.sha256(data).hexdigest())
        connection.putheader("Content-Length", str(len(data)))
        connection.endheaders()
        for start in range(0, len(data), 5):  # a sender slower than the idle timeout
            connection.send(data[start:start + 5])
            time.sleep(0.4)
        assert connection.getresponse().status == 201
        assert running.process.poll() is None
        assert (running.root / "slow.bin").read_bytes() == data
    finally:
        running.stop()
