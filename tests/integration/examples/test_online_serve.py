"""The online example end to end, as a user runs it: partitions land one by one while
``elasticps run ... examples/online/train.py --stream PREFIX --export-dir models`` (2 trainers,
2 pservers, real processes) follows the stream and writes a version each partition, and
``elasticps serve`` (started before any version exists) follows the model directory. Each
partition lands once a version trained through the one before is published, so every one lands
while the job runs (``PADDLE_STREAM_POLL_S`` 0.2: the master lists the prefix at least that
often).

Each partition's users are new (a range of their own), so the served model can only hold the
last partition's users if the versions read the ids of partitions that landed after the first.
Afterwards: summary.json lists the partitions, a progressive AUC each and the freshness (commit
to publication); the server answers with a version trained through the last partition;
``examples/online/client.py`` sees it and reports its own freshness (commit to answer)."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elasticps.data import open_dataset, write_dataset
from elasticps.data.stream import write_end_marker
from elasticps.trainer.export_chain import load_state
from elasticps.trainer.model_dir import read_latest
from tests.helpers import REPO, wait_for

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples/online"
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")},
       "PYTHONPATH": str(REPO), "PADDLE_STREAM_POLL_S": "0.2"}
NAMES = [f"dt=2026-12-01/hour={h:02d}" for h in range(5)]
USERS_EACH = 300  # partition k's users: [k * 300, (k + 1) * 300), inside train.py's 2000
ROWS = 2000
SCHEMA = {"label": {"name": "click", "kind": "binary"},  # make_stream.py's
          "columns": {"user": {"kind": "categorical", "table": "user", "id_space": 2000},
                      "item": {"kind": "categorical", "table": "item", "id_space": 500}}}


def users_of(index: int) -> np.ndarray:
    return np.arange(index * USERS_EACH, (index + 1) * USERS_EACH)


def land(prefix: Path, models: Path, stop: threading.Event) -> None:
    """The stream's writer: the next partition once the served directory has a version
    trained through the one before (so each lands while the job runs), then ``_END``."""
    rng = np.random.default_rng(3)
    for index, name in enumerate(NAMES):
        while index and not stop.is_set() and newest(models) != NAMES[index - 1]:
            stop.wait(0.05)
        users = rng.choice(users_of(index), ROWS)
        items = rng.integers(0, 500, ROWS)
        clicks = (rng.random(ROWS) < 1 / (1 + np.exp(-(items % 7 - 3.0)))).astype(np.int8)
        write_dataset({"user": users, "item": items, "click": clicks}, str(prefix / name),
                      SCHEMA, rows_per_chunk=1000)
    write_end_marker(str(prefix))


def newest(models: Path) -> str | None:
    """The newest partition the directory's latest version trained through."""
    latest = read_latest(models)
    return None if latest is None else latest.position.get("stream", {}).get("newest")


def get(port: int, path: str) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_serve_follows_a_job_that_follows_a_stream(tmp_path: Path) -> None:
    prefix, workdir = tmp_path / "clicks", tmp_path / "job"
    models = workdir / "models"
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "elasticps", "serve", str(models), "--port", "0", "--poll", "0.1",
         "--model", f"{EXAMPLE / 'score.py'}:build"],
        env=ENV, stdout=subprocess.PIPE, stderr=log, text=True)
    stop = threading.Event()
    writer = threading.Thread(target=land, args=(prefix, models, stop))
    try:
        assert server.stdout is not None
        found = re.search(r"on http://127\.0\.0\.1:(\d+)", server.stdout.readline())
        assert found
        port = int(found.group(1))
        writer.start()
        job = subprocess.run(
            [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
             "--workdir", str(workdir), str(EXAMPLE / "train.py"), "--stream", str(prefix),
             "--export-dir", "models"],
            env=ENV, capture_output=True, text=True, timeout=180, check=False)
        writer.join()
        assert job.returncode == 0, job.stderr[-4000:]

        summary = json.loads((workdir / "summary.json").read_text())
        assert summary["partitions"] == NAMES
        assert len(summary["progressive_auc"]) == len(NAMES)
        assert all(isinstance(a, float) for a in summary["progressive_auc"])
        freshness = summary["freshness_s"]
        assert 0 < freshness["median"] <= freshness["max"]

        latest = read_latest(models)
        assert latest is not None
        assert latest.position["stream"]["newest"] == NAMES[-1]
        assert latest.position["stream"]["partitions"] == len(NAMES)
        # The last partition's users (first seen there) are in the version: ids refreshed.
        held = set(load_state(models / latest.path).sparse["user"][0].tolist())
        last = open_dataset(str(prefix / NAMES[-1]))
        last_ids = {int(i) for b in last.iter_batches(ROWS) for i in b.ids["user"]}
        first = open_dataset(str(prefix / NAMES[0]))
        first_ids = {int(i) for b in first.iter_batches(ROWS) for i in b.ids["user"]}
        assert len(last_ids - first_ids) > 100  # hashed into 2000: a few collide
        assert last_ids <= held

        wait_for(lambda: get(port, "/healthz")[1].get("partition") == NAMES[-1],
                 what="the server to serve a version trained through the last partition")
        status, version = get(port, "/version")
        assert status == 200
        assert version["position"]["stream"]["newest"] == NAMES[-1]

        client = subprocess.run(
            [sys.executable, str(EXAMPLE / "client.py"), "--url", f"http://127.0.0.1:{port}",
             "--stream", str(prefix), "--timeout", "60"],
            env=ENV, capture_output=True, text=True, timeout=120, check=False)
        assert client.returncode == 0, client.stdout + client.stderr[-2000:]
        seen = json.loads(client.stdout.strip().splitlines()[-1])
        assert seen["complete"]
        assert seen["newest_served"] == NAMES[-1]
        assert 0 < seen["freshness_served_s"]["median"] <= seen["freshness_served_s"]["max"]
    finally:
        stop.set()
        writer.join(timeout=30)
        server.terminate()
        server.wait(timeout=30)
        log.close()
