"""A job exports while it trains and ``elasticps serve`` follows it: the server starts before the
model directory exists (503), ``examples/tabular`` trains under ``elasticps run`` (2 trainers)
with ``--export-dir`` and a version every 4 batches, the server loads versions as they land,
and once the job is over it answers the test table's raw rows, in their own column names, with
the final version: scores whose AUC is the job's own (measured by the job on the converted test
data through the plain-PyTorch scorer). On disk: deltas and full versions, old chains retired."""

from __future__ import annotations

import csv
import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elasticps.data.metrics import auc
from elasticps.trainer.model_dir import published_versions, read_latest
from tests.helpers import REPO, wait_for
from tests.integration.examples.jobs import run_job
from tests.integration.examples.test_export_contract import (
    SCRIPT,
    TRAIN_ARGS,
    convert,
    make_tables,
)

pytestmark = pytest.mark.slow


def get(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, None if body is None else json.dumps(body))
        answer = connection.getresponse()
        raw = answer.read()
        return answer.status, raw if path == "/metrics" else json.loads(raw)
    finally:
        connection.close()


def test_serve_follows_a_job_exporting_while_it_trains(tmp_path: Path) -> None:
    def bought(rng: np.random.Generator, score: np.ndarray) -> list[str]:
        return ["yes" if c else "no" for c in rng.random(score.size) < 1 / (1 + np.exp(-score))]

    make_tables(tmp_path, bought, "bought")
    convert(tmp_path, "bought")
    models = tmp_path / "job" / "models"
    log = (tmp_path / "serve.log").open("w")  # the server's log: never a full pipe
    server = subprocess.Popen(
        [sys.executable, "-m", "elasticps", "serve", str(models), "--port", "0", "--poll", "0.1",
         "--model", str(REPO / "examples/tabular/score.py") + ":model_from_export"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=log, text=True)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        found = re.search(r"on http://127\.0\.0\.1:(\d+)", first)
        assert found, first
        port = int(found.group(1))
        assert get(port, "GET", "/healthz")[0] == 503  # no version yet: the job has not run
        job = run_job(SCRIPT, tmp_path / "job", [
            "--data", str(tmp_path / "data"), "--test-data", str(tmp_path / "test-data"),
            *TRAIN_ARGS, "--passes", "3", "--export-dir", "models", "--export-every-batches",
            "4", "--export-full-every", "2", "--export-keep", "1"], trainers=2, pservers=1)
        latest = read_latest(models)
        assert latest is not None
        # Every 4 batches of the trainer holding the grant (90 batches in all), and a final.
        assert latest.version >= 3
        # The newest chain only: its full version and the deltas after it.
        assert published_versions(models) == list(range(latest.base, latest.version + 1))
        wait_for(lambda: get(port, "GET", "/healthz")[1].get("version") == latest.version,
                 what=f"the server to load version {latest.version}")

        with open(tmp_path / "test.csv", newline="") as handle:
            table = list(csv.DictReader(handle))
        labels = np.array([row.pop("bought") == "yes" for row in table], dtype=np.float64)
        rows = [{k: (v if k == "city" else float(v)) for k, v in row.items()} for row in table]
        scores: list[float] = []
        for start in range(0, len(rows), 500):
            code, answer = get(port, "POST", "/score", {"rows": rows[start:start + 500]})
            assert code == 200, answer
            assert answer["version"] == latest.version
            scores += answer["scores"]
        served_auc = auc(labels, np.array(scores))
        print(f"job auc {job.summary['auc']:.6f}, served {served_auc:.6f} by version "
              f"{latest.version}")
        assert served_auc == pytest.approx(job.summary["auc"], abs=1e-4)
        metrics = get(port, "GET", "/metrics")[1].decode()
        loads = re.search(r"elasticps_serve_version_load_seconds_count\S* (\S+)", metrics)
        assert loads is not None
        print(f"the server loaded {float(loads.group(1)):g} of {latest.version} versions")
        assert float(loads.group(1)) >= 2  # it followed the chain, not just the last version
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
