"""Job records in the store: run_once, trainers' progress and the job's result."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from elasticps.errors import StoreValueError
from elasticps.store import open_store
from elasticps.store.keys import (
    MasterAddress,
    PServerSlot,
    TrainerProgress,
    TrainerRegistration,
    decode_desired_trainers,
    publish_progress,
    publish_result,
    read_master_address,
    read_progress,
    read_result,
)
from elasticps.store.once import run_once


def test_run_once_runs_the_step_in_exactly_one_caller(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store.db'}"
    calls: list[str] = []
    results: dict[str, bytes] = {}
    gate = threading.Barrier(4, timeout=60)  # a caller that fails breaks it for the rest

    def caller(name: str) -> None:
        with open_store(url, "job") as store:
            gate.wait()

            def step() -> bytes:
                calls.append(name)
                return b"/data/ctr"

            results[name] = run_once(store, "data", step, owner=name, timeout=30)

    threads = [threading.Thread(target=caller, args=(f"t{i}",), daemon=True) for i in range(4)]
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


def test_values_round_trip_and_bad_values_name_the_key(tmp_path: Path) -> None:
    address = MasterAddress("h:1", "h:2", "master-h-7", pid=7, host="h")
    assert MasterAddress.decode(address.encode()) == address
    assert address.status_url == "http://h:2/"
    slot = PServerSlot("h:3", pid=8, host="h")
    assert PServerSlot.decode(slot.encode(), "pserver/slot/0") == slot
    leaving = TrainerRegistration(pid=9, host="h", leaving=True)
    assert TrainerRegistration.decode(leaving.encode(), "trainer/t") == leaving
    with pytest.raises(StoreValueError, match="pserver/slot/1"):
        PServerSlot.decode(b'{"address": 5, "pid": 1, "host": "h"}', "pserver/slot/1")
    with pytest.raises(StoreValueError, match="trainer/x"):
        TrainerRegistration.decode(b"not json", "trainer/x")
    with pytest.raises(StoreValueError, match="launcher/desired_trainers"):
        decode_desired_trainers(b"-3")
    with open_store(f"file://{tmp_path / 'store.db'}", "job") as store:
        assert read_master_address(store) is None
        store.put("master/address", b"[1, 2]")
        with pytest.raises(StoreValueError, match="master/address"):
            read_master_address(store)
