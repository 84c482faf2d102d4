"""Hybrid mode with 2 trainers as real processes (`elasticps run --mode hybrid`): the second
trainer joins the first one's live group (it starts once the first trained 5 batches, and the
first waits there until it joined) and takes its dense state; the dense replicas are identical,
bit for bit, after every step both trainers saw; every row is trained once; and the rounds
averaged the two trainers' batches (fewer optimizer steps than batches). All of it holds with
the trainers computing in bfloat16 too (PADDLE_COMPUTE_DTYPE): the gradients they average and
the replicas they update stay float32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hybrid_job import (
    ROWS,
    differing,
    finish,
    go,
    ready,
    records,
    running,
    start,
    trainer_logs,
    wait_for,
    write_data,
)


@pytest.mark.slow
@pytest.mark.parametrize("compute_dtype", ["float32", "bfloat16"])
def test_two_trainers_hold_identical_dense_replicas_after_every_step(tmp_path: Path,
                                                                     compute_dtype: str) -> None:
    # trainer 1 starts once trainer 0 trained 5 batches; trainer 0 waits there until it joined
    with running(start(tmp_path, write_data(tmp_path), trainers=2, join_after=5,
                       hold_at=5, PADDLE_COMPUTE_DTYPE=compute_dtype)) as job:
        wait_for(lambda: ready(tmp_path, 1), "trainer 1 to join")
        go(tmp_path)
        finish(job)
    first, second = records(tmp_path)
    # it started from the live state (trainer 0's 5 batches; the 5th round may still have been
    # on its way), not from its own start values at step 0
    assert min(second.steps) >= 4
    common, different = differing(first, second)
    assert common >= 20, (sorted(first.steps), sorted(second.steps))
    assert different == [], different
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert summary["samples"] == ROWS
    batches = first.batches + second.batches
    assert max(max(first.steps), max(second.steps)) < batches  # some rounds averaged two
    logs = (tmp_path / "job" / "logs" / "pserver-0.log").read_text()
    assert "hybrid mode" in logs
    said = trainer_logs(tmp_path).count("passes in bfloat16 (torch.autocast")
    assert said == (2 if compute_dtype == "bfloat16" else 0)
