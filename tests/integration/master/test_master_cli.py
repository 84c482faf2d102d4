"""`elasticps master` as a real process on a real dataset: trainers read every row once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np

from elasticps.data.synth import synth_ctr
from elasticps.errors import CONFIG_EXIT_CODE
from elasticps.master.client import MasterClient
from elasticps.store import open_store
from elasticps.store.keys import read_master_address
from elasticps.trainer.task_batches import data_chunk_batches
from elasticps.trainer.task_loop import LoopState
from tests.helpers import REPO, job_credentials, run_cli, tls_env, wait_for
from tests.task_workers import Collect, task_loop

TOKEN = "cli-token"


def test_master_cli_serves_a_real_dataset_and_exits_zero_on_sigterm(
        tmp_path: Path, job_name: str) -> None:
    data = tmp_path / "ctr"
    synth_ctr(str(data), 600, seed=3, rows_per_chunk=100, chunks_per_file=3)
    url = f"file://{tmp_path}/job.db"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_STORE": url,
           "PADDLE_JOB_NAME": job_name, "PADDLE_JOB_TOKEN": TOKEN, "PADDLE_LEASE_TTL": "2",
           **tls_env(job_name, "master")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "elasticps", "-v", "master", "--dataset", str(data),
         "--chunks-per-task", "2", "--num-passes", "2", "--batch-size", "32",
         "--task-lease", "10"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    store = open_store(url, job_name)
    try:
        wait_for(lambda: read_master_address(store) is not None, 60, "the master to publish")
        client = MasterClient(store, job_credentials(job_name, token=TOKEN), "t0")
        client.register_trainer()
        labels: dict[int, list[np.ndarray]] = {0: [], 1: []}
        worker = Collect()
        loop = task_loop(client, data_chunk_batches(str(data), 32), 32, worker)
        assert loop.run() is LoopState.DONE
        for item in worker.items:
            labels[item.pass_id].append(item.batch.label)
        assert [sum(len(x) for x in labels[p]) for p in (0, 1)] == [600, 600]
        address = read_master_address(store)
        assert address is not None
        with urllib.request.urlopen(address.status_url + "api/status", timeout=10) as r:
            doc = json.loads(r.read())
        assert doc["state"] == "succeeded"
        assert doc["num_tasks"] == 3
        assert doc["records_total"] == 1200
        client.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out.decode()
        assert store.get("master/address") is None  # resigned: the address went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        store.close()


def test_master_cli_rejects_bad_flags_naming_them(tmp_path: Path) -> None:
    """With the configuration exit code, 78: a supervisor must not restart it."""
    env = {**os.environ, "PADDLE_STORE": f"file://{tmp_path}/j.db", "PADDLE_JOB_TOKEN": TOKEN}
    done = run_cli("master", "--max-failures", "0", env=env)
    assert done.returncode == CONFIG_EXIT_CODE == 78
    assert "max_failures=0" in done.stderr
    done = run_cli("master", "--dataset", "/d", env=env)
    assert done.returncode == CONFIG_EXIT_CODE
    assert "--dataset needs --batch-size" in done.stderr
    env.pop("PADDLE_JOB_TOKEN")
    done = run_cli("master", env=env)
    assert done.returncode == CONFIG_EXIT_CODE
    assert "PADDLE_JOB_TOKEN" in done.stderr
