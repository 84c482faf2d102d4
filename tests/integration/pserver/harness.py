"""Real pserver processes for tests: started with `python -m elasticps pserver` (or a test's own
entry module around the real PServerProcess), killed by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from elasticps.store import Store
from tests.helpers import REPO, TOKEN, tls_env, wait_for

__all__ = ["TOKEN", "PServers"]



class PServers:
    """Starts pserver processes of one job; ``stop_all`` reaps whatever is left."""

    def __init__(self, tmp: Path, store_url: str, job: str, num: int, **env: str) -> None:
        self.tmp, self.store_url, self.job, self.num = tmp, store_url, job, num
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, module: str | None = None, **extra: str) -> subprocess.Popen[bytes]:
        """One pserver; ``module`` runs ``python -m MODULE`` instead of ``elasticps pserver``."""
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PADDLE_STORE": self.store_url,
            "PADDLE_JOB_NAME": self.job,
            "PADDLE_JOB_TOKEN": TOKEN,
            "PADDLE_NUM_PSERVERS": str(self.num),
            "PADDLE_HOST": "127.0.0.1",
            "PADDLE_PORT": "0",
            "PADDLE_LEASE_TTL": "2",
            **tls_env(self.job, "pserver"),
            **self.env,
            **extra,
        }
        log = open(self.tmp / f"pserver-{len(self.procs)}.log", "wb")  # noqa: SIM115
        argv = [sys.executable, "-m", module] if module else \
            [sys.executable, "-m", "elasticps", "-v", "pserver"]
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def wait_slots(self, store: Store, pids: set[int], timeout: float = 30.0) -> None:
        import json

        def claimed() -> bool:
            values = [json.loads(kv.value) for kv in store.get_prefix("pserver/slot/")]
            return {v["pid"] for v in values} >= pids

        wait_for(claimed, timeout, f"pservers {sorted(pids)} to claim slots")

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.tmp.glob("pserver-*.log")))
