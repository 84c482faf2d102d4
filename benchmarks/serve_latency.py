"""``elasticps serve`` under load: request latency (p50, p99) and requests per second, steady and
while new versions of the model land.

    python benchmarks/serve_latency.py [--seconds 10] [--clients 4] [--rows 16] [--every 1.0]
                                       [--json FILE]

The model: a CTR model of Criteo's shape, 13 dense and 26 categorical columns (each hashed
into one table of ``--id-space`` rows of 16), an MLP 429-256-128-1 over the dense values and
the 26 embeddings. The benchmark writes its model directory (a full version), starts ``elasticps
serve DIR --model benchmarks/serve_latency.py:build`` as its own process, and ``--clients``
threads, each on one keep-alive connection, send ``POST /score`` with ``--rows`` random raw rows
(strings for the categories, numbers for the dense columns) as fast as they are answered:

* ``steady``: ``--seconds`` with the version it loaded first;
* ``swapping``: ``--seconds`` while a process of its own (as a training job is) publishes a new
  version every ``--every`` seconds (a delta of a tenth of the table's rows and every dense
  weight; a full version every fifth).

Per phase: requests, failures (any answer but 200, or an answer whose version is not one that
was published), requests per second and the latency percentiles as the clients measured them
(request sent to answer read), and in ``swapping`` the versions answers named and the server's
mean time to load a version (``/metrics``). Clients and server share the machine's cores, so
the figures are a floor for this machine, not the server's alone.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
DENSE = [f"I{i}" for i in range(1, 14)]
CATEGORICAL = [f"C{i}" for i in range(1, 27)]
DIM = 16
HIDDEN = (256, 128)


def schema(id_space: int) -> dict[str, Any]:
    columns: dict[str, Any] = {name: {"kind": "dense", "dtype": "float", "norm": "log"}
                               for name in DENSE}
    columns.update({name: {"kind": "categorical", "dtype": "hex32", "table": "cats"}
                    for name in CATEGORICAL})
    return {"label": "clicked", "defaults": {"id_space": id_space, "dim": DIM},
            "columns": columns}


class CtrModel(torch.nn.Module):
    """Embeddings of the 26 columns (one table) and the dense values into an MLP."""

    def __init__(self, table: torch.Tensor, weights: Mapping[str, torch.Tensor]) -> None:
        super().__init__()
        self.table = table
        sizes = [len(DENSE) + len(CATEGORICAL) * DIM, *HIDDEN, 1]
        self.mlp = torch.nn.Sequential(*[
            module for i in range(len(sizes) - 1) for module in (
                torch.nn.Linear(sizes[i], sizes[i + 1]),
                *([torch.nn.ReLU()] if i < len(sizes) - 2 else []))])
        self.mlp.load_state_dict({k.removeprefix("mlp."): v for k, v in weights.items()})

    def forward(self, batch: Any) -> torch.Tensor:
        embedded = [self.table[batch.ids[name]] for name in CATEGORICAL]
        return self.mlp(torch.cat([batch.dense, *embedded], dim=1))[:, 0]


def build(tensors: Mapping[str, Any], manifest: Mapping[str, Any]) -> torch.nn.Module:
    """``elasticps serve --model benchmarks/serve_latency.py:build``."""
    ids = torch.as_tensor(tensors["sparse/cats/ids"])
    rows = torch.as_tensor(tensors["sparse/cats/rows"])
    table = torch.zeros(int(manifest["meta"]["id_space"]), DIM)
    table[ids] = rows
    weights = {k: torch.as_tensor(v) for k, v in tensors.items() if k.startswith("mlp.")}
    return CtrModel(table, weights).eval()


class Versions:
    """Publishes versions of the model into a model directory: version ``v``'s weights are a
    fixed random start moved by ``v`` steps (a tenth of the rows each)."""

    def __init__(self, root: Path, id_space: int) -> None:
        from elasticps.data.model_inputs import model_inputs
        from elasticps.data.schema import Schema

        self.root = root
        self.id_space = id_space
        self.schema = Schema.from_dict(schema(id_space))
        self.inputs = model_inputs(self.schema)
        rng = np.random.default_rng(0)
        self.rows = rng.normal(0, 0.05, (id_space, DIM)).astype(np.float32)
        shapes = self._shapes()
        self.dense = {name: rng.normal(0, 0.05, shape).astype(np.float32)
                      for name, shape in shapes.items()}
        self.published: list[int] = []
        self.rng = rng

    @staticmethod
    def _shapes() -> dict[str, tuple[int, ...]]:
        sizes = [len(DENSE) + len(CATEGORICAL) * DIM, *HIDDEN, 1]
        shapes: dict[str, tuple[int, ...]] = {}
        for i in range(len(sizes) - 1):
            shapes[f"mlp.{2 * i}.weight"] = (sizes[i + 1], sizes[i])
            shapes[f"mlp.{2 * i}.bias"] = (sizes[i + 1],)
        return shapes

    def publish(self, kind: str) -> float:
        """The next version; the seconds it took to write."""
        from elasticps.trainer.export import export_model
        from elasticps.trainer.model_dir import Draft, publish, retire

        if self.published:  # a step of training: a tenth of the rows, every dense weight
            changed = self.rng.choice(self.id_space, self.id_space // 10, replace=False)
            self.rows[changed] += self.rng.normal(0, 0.01, (changed.size, DIM)).astype(
                np.float32)
            for value in self.dense.values():
                value += self.rng.normal(0, 0.001, value.shape).astype(np.float32)
        layers = {"table": {"table": "cats", "dim": DIM, "kind": "embedding",
                            "columns": CATEGORICAL}}

        def write(directory: Path, draft: Draft) -> None:
            export_model(directory, self.dense,
                         {"cats": (np.arange(self.id_space, dtype=np.int64), self.rows)},
                         layers, draft.meta, schema=self.schema.to_dict(), inputs=self.inputs,
                         parent=draft.parent)

        started = time.perf_counter()
        record = publish(self.root, kind, write, position={}, committed_at=time.time(),
                         meta={"id_space": self.id_space})
        retire(self.root, keep=2)
        self.published.append(record.version)
        return time.perf_counter() - started


def write_versions(root: Path, id_space: int, published: list[int], seconds: float,
                   every: float, done: Any) -> None:
    """The writer process: a version every ``every`` seconds for ``seconds`` after those
    already ``published`` (the same random start, so its deltas follow them)."""
    versions = Versions(root, id_space)
    versions.published = list(published)
    done.put("ready")
    write_s = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        write_s.append(versions.publish("full" if len(versions.published) % 5 == 0
                                        else "delta"))
        time.sleep(max(0.0, every - write_s[-1]))
    done.put((versions.published, write_s))


def random_rows(rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        row: dict[str, Any] = {name: float(rng.integers(0, 1000)) for name in DENSE}
        row.update({name: f"{int(rng.integers(0, 1 << 20)):08x}" for name in CATEGORICAL})
        rows.append(row)
    return rows


class Clients:
    """``count`` threads scoring without pause; each answer's latency, version and status."""

    def __init__(self, port: int, count: int, rows: int,
                 bodies: list[bytes] | None = None) -> None:
        self.port = port
        # Another model's requests (benchmarks/online.py) come ready; by default this one's.
        self.bodies = bodies or [
            json.dumps({"rows": random_rows(np.random.default_rng(i), rows)}).encode()
            for i in range(64)]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.records: list[tuple[float, float, int, int]] = []  # (end, latency, status, version)
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(count)]

    def _run(self, index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        mine: list[tuple[float, float, int, int]] = []
        n = index
        while not self.stop.is_set():
            body = self.bodies[n % len(self.bodies)]
            n += 1
            started = time.perf_counter()
            try:
                connection.request("POST", "/score", body=body)
                answer = connection.getresponse()
                doc = json.loads(answer.read())
                status, version = answer.status, int(doc.get("version", -1))
            except (OSError, http.client.HTTPException, ValueError):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                status, version = -1, -1
            ended = time.perf_counter()
            mine.append((ended, ended - started, status, version))
        connection.close()
        with self.lock:
            self.records.extend(mine)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> list[tuple[float, float, int, int]]:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        return self.records


def phase(records: list[tuple[float, float, int, int]], start: float, end: float,
          published: list[int]) -> dict[str, Any]:
    inside = [r for r in records if start <= r[0] < end]
    latencies = sorted(r[1] for r in inside)
    failed = [r for r in inside if r[2] != 200 or r[3] not in published]

    def pct(q: float) -> float:
        return round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)

    return {"seconds": round(end - start, 3), "requests": len(inside), "failed": len(failed),
            "rps": round(len(inside) / (end - start), 1), "p50_ms": pct(0.50),
            "p99_ms": pct(0.99), "max_ms": round(1000 * latencies[-1], 3),
            "mean_ms": round(1000 * statistics.fmean(latencies), 3),
            "versions_answered": sorted({r[3] for r in inside})}


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else float("nan")


def main() -> int:
    # Here, not at the top: `elasticps serve` loads this file for its model function (build),
    # without this directory on its path.
    from run_facts import run_facts

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rows", type=int, default=16, help="rows per request")
    parser.add_argument("--every", type=float, default=1.0,
                        help="seconds between versions while swapping")
    parser.add_argument("--id-space", type=int, default=1 << 18, help="rows of the table")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="serve-latency-") as tmp:
        root = Path(tmp) / "models"
        versions = Versions(root, args.id_space)
        versions.publish("full")
        log = (Path(tmp) / "serve.log").open("w")
        server = subprocess.Popen(
            [sys.executable, "-m", "elasticps", "serve", str(root), "--port", "0",
             "--poll", "0.1", "--max-rows", str(max(args.rows, 1)),
             "--model", f"{Path(__file__).resolve()}:build"],
            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=log,
            text=True)
        try:
            assert server.stdout is not None
            port = int(re.findall(r":(\d+)$", server.stdout.readline().strip())[0])
            wait_ready(port)
            clients = Clients(port, args.clients, args.rows)
            clients.start()
            steady_start = time.perf_counter()
            time.sleep(args.seconds)
            steady_end = time.perf_counter()  # the writer's start (its imports) is in neither
            # The writer is a process of its own, as a training job is: its work must not
            # take the clients' interpreter lock.
            spawn = multiprocessing.get_context("spawn")
            done: Any = spawn.Queue()
            writer = spawn.Process(target=write_versions, args=(
                root, args.id_space, versions.published, args.seconds, args.every, done))
            writer.start()
            done.get(timeout=120)  # ready: its imports are done
            swap_start = time.perf_counter()
            published, write_s = done.get(timeout=args.seconds + 120)
            writer.join()
            swap_end = time.perf_counter()
            records = clients.finish()
            metrics = get(port, "/metrics").decode()
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()
    result = {
        **run_facts(vars(args)),
        "steady": phase(records, steady_start, steady_end, versions.published),
        "swapping": phase(records, swap_start, swap_end, published),
        "versions_published": len(published),
        "version_write_s_mean": round(statistics.fmean(write_s), 3) if write_s else None,
        "version_load_s_mean": round(
            metric(metrics, "elasticps_serve_version_load_seconds_sum")
            / metric(metrics, "elasticps_serve_version_load_seconds_count"), 3),
        "load_failures": metric(metrics, "elasticps_serve_version_load_failures_total"),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def get(port: int, path: str) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        return connection.getresponse().read()
    finally:
        connection.close()


def wait_ready(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"the server on port {port} loaded no version in {timeout:g}s")


if __name__ == "__main__":
    sys.exit(main())
