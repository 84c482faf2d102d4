"""A real Prometheus for tests: Debian's binary on a free loopback port with a temporary data
directory, started with a readiness poll, asked through its HTTP API, stopped (and killed if
it must be) at the end."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from elasticps.store.local_etcd import free_port
from tests.helpers import kill_quietly, wait_for


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("prometheus is not installed: apt-get install -y prometheus "
                    "(scripts/setup.sh does this)")
    return path


class Prometheus:
    """``config`` is the prometheus.yml document; ``files`` are written beside it (rule files
    it names by their file name)."""

    def __init__(self, root: Path, config: dict[str, Any], files: dict[str, str]) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / name).write_text(text)
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = root / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(
                [prometheus_binary(), f"--config.file={self.root / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                cwd=self.root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._ready, 30, what=f"Prometheus at {self.url} (log: {self.log})",
                 interval=0.1)
        return self

    def _ready(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"Prometheus exited: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """``data`` of an HTTP API answer; an error answer (a query that does not parse)
        raises with Prometheus' message."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read())
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return list(data["result"])

    def alerts(self, state: str = "firing") -> dict[str, list[dict[str, str]]]:
        """alertname -> the label sets of its alerts in ``state``."""
        out: dict[str, list[dict[str, str]]] = {}
        for alert in self.api("alerts")["alerts"]:
            if alert["state"] == state:
                out.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return out

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        kill_quietly(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_quietly(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
