"""The store records trainers publish (run_once, progress, result) and the launcher's line."""

from __future__ import annotations

import threading
from pathlib import Path

from elasticps.launch.monitor import render
from elasticps.store import open_store
from elasticps.store.keys import (
    TrainerProgress,
    publish_progress,
    publish_result,
    read_progress,
    read_result,
)
from elasticps.store.once import run_once


def test_run_once_runs_the_step_in_exactly_one_caller(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store.db'}"
    calls: list[str] = []
    results: dict[str, bytes] = {}
    gate = threading.Barrier(4)

    def caller(name: str) -> None:
        with open_store(url, "job") as store:
            gate.wait()

            def step() -> bytes:
                calls.append(name)
                return b"/data/ctr"

            results[name] = run_once(store, "data", step, owner=name, timeout=30)

    threads = [threading.Thread(target=caller, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == {f"t{i}": b"/data/ctr" for i in range(4)}


def test_progress_and_result_round_trip(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path / 'store.db'}", "job") as store:
        first = TrainerProgress(samples=10, loss=0.5, timers={"forward": 1.5})
        second = TrainerProgress(pass_id=1, samples=30, loss=0.7)
        publish_progress(store, "trainer-0", first)
        publish_progress(store, "trainer-1", second)
        store.put("job/progress/trainer-2", b"[not an object]")  # left out, not fatal
        publish_result(store, {"auc": 0.75})
        assert read_progress(store) == {"trainer-0": first, "trainer-1": second}
        assert read_result(store) == {"auc": 0.75}


def test_progress_line_shows_pass_tasks_rate_and_loss() -> None:
    status = {"pass": 1, "num_passes": 3, "num_tasks": 32, "counts": {"done": 12},
              "state": "running"}
    progress = {"a": TrainerProgress(loss=0.5, samples=5),
                "b": TrainerProgress(loss=0.7, samples=9)}
    assert render(status, progress, 1234.0) == (
        "pass 2/3 | tasks 12/32 | trainers 2 | 1,234 samples/s | loss 0.6000 | running")
    assert render(None, {}, None) == "trainers 0"


def test_progress_line_counts_only_live_trainers() -> None:
    # "gone" was killed or scaled away: its progress key stays behind in the store.
    status = {"pass": 0, "live_trainers": ["a"]}
    progress = {"a": TrainerProgress(loss=0.5), "gone": TrainerProgress(loss=0.9)}
    assert render(status, progress, None) == "pass 1 | trainers 1 | loss 0.5000"
