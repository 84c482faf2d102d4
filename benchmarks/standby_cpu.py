"""What a hot-standby master costs while it waits, and how fast it takes over.

Starts two real ``elasticps master`` processes on one store (the embedded SQLite store, as
``elasticps run`` uses, or a real etcd started here): the first leads, the second waits in the
election, as the standby that ``elasticps run`` keeps does. It measures the CPU seconds each
process uses over ``--seconds`` (from ``/proc/PID/stat``; the leader of a job with no trainers is
the baseline: what a process of this kind costs with nothing to do), then SIGKILLs the leader
and times the takeover (kill -> the standby has published ``master/address``) against the
election lease TTL.

    python benchmarks/standby_cpu.py [--seconds 60] [--store file|etcd] [--lease-ttl 5]
                                     [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elasticps.store import Store, open_store
from elasticps.store.keys import read_master_address
from elasticps.store.local_etcd import LocalEtcd

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def start_master(store_url: str, job: str, ttl: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PADDLE_STORE": store_url, "PADDLE_JOB_NAME": job,
           "PADDLE_JOB_TOKEN": "standby-bench", "PADDLE_INSECURE": "1",
           "PADDLE_LEASE_TTL": str(ttl), "PADDLE_HOST": "127.0.0.1",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "elasticps", "master"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_until(predicate: Any, timeout: float, what: str) -> float:
    """Poll ``predicate`` every 10 ms (the figure's resolution); the time it took."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - started


def leader_pid(store: Store) -> int | None:
    address = read_master_address(store)
    return None if address is None else address.pid


def measure(store_url: str, root: Path, seconds: float, ttl: int) -> dict[str, Any]:
    job = f"standby-{uuid.uuid4().hex[:8]}"
    store = open_store(store_url, job)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(start_master(store_url, job, ttl, root / "master-0.log"))
        wait_until(lambda: leader_pid(store) is not None, 60, "the first master to lead")
        leader = procs[0]
        procs.append(start_master(store_url, job, ttl, root / "master-1.log"))
        standby = procs[1]
        # Settled: the standby is in the election (its candidacy is published).
        wait_until(lambda: len(store.get_prefix("master/candidate/")) == 2, 60,
                   "the standby to campaign")
        time.sleep(2.0)  # let its imports and start-up CPU pass before the window
        before = {p.pid: cpu_seconds(p.pid) for p in procs}
        time.sleep(seconds)  # the window measured: nothing to wait on, time passing is the point
        used = {p.pid: cpu_seconds(p.pid) - before[p.pid] for p in procs}
        os.killpg(leader.pid, signal.SIGKILL)
        killed = time.monotonic()
        leader.wait(timeout=10)
        wait_until(lambda: leader_pid(store) == standby.pid, ttl + 30,
                   "the standby to publish master/address")
        takeover = time.monotonic() - killed
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        store.close()
    return {"seconds": seconds, "lease_ttl": ttl,
            "standby_cpu_s": round(used[standby.pid], 3),
            "leader_cpu_s": round(used[leader.pid], 3),
            "standby_cpu_percent": round(100 * used[standby.pid] / seconds, 2),
            "takeover_s": round(takeover, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="the window the CPU is measured over (default 60)")
    parser.add_argument("--store", choices=("file", "etcd"), default="file",
                        help="the embedded store (default, as elasticps run) or a real etcd")
    parser.add_argument("--lease-ttl", type=int, default=5,
                        help="the election lease TTL (default 5, elasticps run's)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.lease_ttl < 1:
        parser.error(f"--seconds={args.seconds} must be > 0 and --lease-ttl={args.lease_ttl} "
                     ">= 1")
    root = Path(tempfile.mkdtemp(prefix="elasticps-standby-"))
    etcd = LocalEtcd(root / "etcd") if args.store == "etcd" else None
    try:
        if etcd is not None:
            etcd.start()
        url = etcd.url if etcd is not None else f"file://{root}/job.db"
        row = measure(url, root, args.seconds, args.lease_ttl)
    finally:
        if etcd is not None:
            etcd.stop()
    row.update(store=args.store, load_average=os.getloadavg())
    print(f"{args.store} store, {args.seconds:g} s: standby {row['standby_cpu_s']} CPU s "
          f"({row['standby_cpu_percent']}% of a core), leader with no job "
          f"{row['leader_cpu_s']} CPU s; takeover after SIGKILL {row['takeover_s']} s "
          f"(lease TTL {args.lease_ttl} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
