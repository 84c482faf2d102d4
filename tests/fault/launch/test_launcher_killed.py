"""``elasticps run`` SIGKILLed (as the OOM killer or ``kill -9`` would): no role outlives it.

Each role runs in its own session, so nothing sent to the launcher's process group reaches it;
each is tied to the launcher's life instead (``elasticps/launch/parent_watch.py``) and stops
gracefully: the masters resign, the pservers free their slots, the trainers leave the job.
The processes are found through the store, where each announces itself with its pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from elasticps.store import Store
from elasticps.store.keys import (
    MASTER_ADDRESS,
    MASTER_CANDIDATE_PREFIX,
    PSERVER_SLOT_PREFIX,
    TRAINER_PREFIX,
    ProcessInfo,
    PServerSlot,
    TrainerRegistration,
    read_master_address,
)
from tests.fault.small_job import open_job_store
from tests.helpers import REPO, kill_quietly, pid_alive, wait_for

SCRIPT = Path(__file__).resolve().parent / "scripts" / "registered_trainer.py"
# Long, so a key that vanishes within seconds was removed by its owner on its way out, not
# by a lease running out after the owner died.
LEASE_TTL = 30
TRAINERS = PSERVERS = 2


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def role_pids(store: Store) -> dict[str, list[int]] | None:
    """The job's processes by role, once the leader, its standby, every pserver and every
    trainer have announced themselves; None before."""
    leader = read_master_address(store)
    masters = [ProcessInfo.decode(kv.value, kv.key).pid
               for kv in store.get_prefix(MASTER_CANDIDATE_PREFIX)]
    pservers = [PServerSlot.decode(kv.value, kv.key).pid
                for kv in store.get_prefix(PSERVER_SLOT_PREFIX)]
    trainers = [TrainerRegistration.decode(kv.value, kv.key).pid
                for kv in store.get_prefix(TRAINER_PREFIX)]
    if leader is None or len(masters) < 2 or len(pservers) < PSERVERS \
            or len(trainers) < TRAINERS:
        return None
    assert leader.pid in masters
    return {"leader": [leader.pid], "standby": [p for p in masters if p != leader.pid],
            "pserver": pservers, "trainer": trainers}


def test_sigkilled_launcher_takes_every_role_with_it_gracefully(tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_LEASE_TTL": str(LEASE_TTL)}
    env.pop("PADDLE_ROLE", None)
    with open(tmp_path / "launcher.log", "wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "elasticps", "run", "--trainers", str(TRAINERS),
             "--pservers", str(PSERVERS), "--standby-masters", "1", "--workdir", str(workdir),
             str(SCRIPT)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    store = None
    pids: list[int] = []
    try:
        store, _ = open_job_store(workdir)
        roles = wait_for(lambda: role_pids(store), 120,
                         what="a leader, a standby master, 2 pservers and 2 trainers")
        pids = [pid for group in roles.values() for pid in group]
        assert len(set(pids)) == 1 + 1 + PSERVERS + TRAINERS, roles
        assert all(parent_of(pid) == launcher.pid for pid in pids), roles

        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)
        killed_at = time.monotonic()
        try:
            wait_for(lambda: not any(pid_alive(pid) for pid in pids), 30,
                     what=f"every role of {roles} to exit after the launcher's SIGKILL")
        except AssertionError:
            alive = {role: [p for p in group if pid_alive(p)] for role, group in roles.items()}
            logs = "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}"
                             for path in sorted((workdir / "logs").glob("*.log")))
            raise AssertionError(f"still alive 30 s after the launcher's SIGKILL: {alive}\n"
                                 f"{logs}") from None
        gone_s = time.monotonic() - killed_at
        # Gracefully: each removed its own keys on the way out (the TTL is 30 s).
        assert store.get(MASTER_ADDRESS) is None  # the leader resigned
        assert store.get_prefix(MASTER_CANDIDATE_PREFIX) == []
        assert store.get_prefix(PSERVER_SLOT_PREFIX) == []  # the slots were freed
        assert store.get_prefix(TRAINER_PREFIX) == []  # the trainers left
        logs = workdir / "logs"
        assert all("trainer left the job" in (logs / f"trainer-{i}.log").read_text()
                   for i in range(TRAINERS))
        assert all("is shutting down" in (logs / f"pserver-{i}.log").read_text()
                   for i in range(PSERVERS))
        print(f"every role gone {gone_s:.1f}s after the launcher was SIGKILLed")
    finally:
        for pid in pids:
            kill_quietly(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if store is not None:
            store.close()
