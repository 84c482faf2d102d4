"""Hybrid mode under SIGKILL, as real processes (`elasticps run --mode hybrid`, lease TTL 2 s):

- the rank 0 of 2 trainers killed mid-job (its process served the generation's rendezvous
  store): the survivor's next step comes within the stated re-forming
  bound (the lease TTL for the dead member's key to vanish, plus a few seconds of slack for a
  loaded machine), and every two processes' replicas are identical at every step both
  recorded;
- the only trainer killed: its restart resumes the dense state from the newest dense
  checkpoint (written by the group's rank 0 every PADDLE_CHECKPOINT_INTERVAL), not from its own
  fresh start values.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.hybrid_job import (
    LEASE_TTL,
    Record,
    differing,
    finish,
    go,
    lines,
    ready,
    records,
    running,
    start,
    trainer_logs,
    wait_for,
    write_data,
)

REFORM_SLACK_S = 8.0  # beyond the lease TTL: a loaded 2-core machine's scheduling, a rendezvous


@pytest.mark.slow
def test_a_killed_trainer_leaves_a_group_that_reforms_within_the_bound(
        tmp_path: Path) -> None:
    # trainer 1 starts once trainer 0 trained 5 batches, and trainer 0 waits there until it
    # joined (else a trainer 1 that started first could train the whole job alone): both then
    # train
    with running(start(tmp_path, write_data(tmp_path), trainers=2, join_after=5,
                       hold_at=5)) as job:
        wait_for(lambda: ready(tmp_path, 1), "trainer 1 to join")
        go(tmp_path)
        wait_for(lambda: lines(tmp_path, 0) >= 10 and lines(tmp_path, 1) >= 10,
                 "both trainers to train 10 batches")
        # trainer 0 is rank 0 (members go by name): its rendezvous store dies with it
        (victim,) = [r for r in records(tmp_path) if r.trainer == 0]
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.time()
        finish(job)

    found = records(tmp_path)
    (survivor,) = [r for r in found if r.trainer == 1]
    restarted = [r for r in found if r.trainer == 0 and r.pid != victim.pid]
    after = [t for t in survivor.times.values() if t > killed_at]
    assert after, "the survivor trained nothing after the kill"
    assert min(after) - killed_at <= LEASE_TTL + REFORM_SLACK_S
    for a, b in itertools.combinations(found, 2):
        assert differing(a, b)[1] == [], (a.pid, b.pid)
    # a restart that found work left joined with the group's state, not its own
    assert all(min(r.steps) > 1 for r in restarted)
    assert "ends dense group generation" in trainer_logs(tmp_path)


def _newest_dense_checkpoint(tmp_path: Path) -> int | None:
    folder = tmp_path / "job" / "checkpoints" / "hybrid-dense" / "shard-0-of-1"
    steps = [int(p.name.split("-")[1][8:20]) for p in folder.glob("ckpt-*.json")] \
        if folder.exists() else []
    return max(steps, default=None)


@pytest.mark.slow
def test_a_job_whose_only_trainer_dies_resumes_the_dense_state_from_its_checkpoint(
        tmp_path: Path) -> None:
    # the trainer stops after 100 batches (until the test says go): it is killed there
    with running(start(tmp_path, write_data(tmp_path), trainers=1, hold_at=100,
                       PADDLE_CHECKPOINT_INTERVAL="0.1")) as job:
        wait_for(lambda: lines(tmp_path, 0) >= 100, "100 batches")
        wait_for(lambda: (_newest_dense_checkpoint(tmp_path) or 0) >= 10,
                 "a dense checkpoint of step 10 or later")
        (victim,) = records(tmp_path)
        os.kill(victim.pid, signal.SIGKILL)
        go(tmp_path)  # the restart goes on past batch 100
        finish(job)

    killed: Record
    (killed, restart) = sorted(records(tmp_path), key=lambda r: min(r.steps))
    assert killed.pid == victim.pid
    restored = re.search(r"restored the dense state from checkpoint \d+ \(generation \d+, "
                         r"step (\d+)\)", trainer_logs(tmp_path))
    assert restored is not None
    resumed_from = int(restored.group(1))
    assert 10 <= resumed_from <= max(killed.steps) + 1  # a state the killed trainer reached
    # its first batch trained on that state (recorded before or after its own round landed)
    assert min(restart.steps) in (resumed_from, resumed_from + 1)
    if resumed_from in killed.steps and resumed_from in restart.steps:
        assert killed.steps[resumed_from] == restart.steps[resumed_from]  # bit for bit
