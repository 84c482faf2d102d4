"""When ``elasticps run`` starts its standby masters: once a trainer trained (its progress key
is in the store), or after the bound. A real supervisor over tiny real processes."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.launch.process import RoleSpec
from elasticps.launch.standby import DeferredStandbys, standbys_due
from elasticps.launch.supervisor import Supervisor
from elasticps.store import Store, open_store
from elasticps.store.keys import TrainerProgress, publish_progress

SLEEP = (sys.executable, "-c", "import time; time.sleep(60)")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", "standby-test")
    yield handle
    handle.close()


def test_standbys_are_due_once_the_job_trains_or_at_the_bound() -> None:
    assert not standbys_due(trained=False, elapsed_s=9.9, bound_s=10.0)
    assert standbys_due(trained=True, elapsed_s=0.1, bound_s=10.0)
    assert standbys_due(trained=False, elapsed_s=10.0, bound_s=10.0)


def stop(supervisor: Supervisor) -> None:
    supervisor.kill_all()
    for proc in supervisor.procs.values():
        if proc.popen is not None:
            proc.popen.wait(timeout=10)


def make(store: Store, clock: Clock) -> tuple[Supervisor, DeferredStandbys, io.StringIO]:
    report = io.StringIO()
    supervisor = Supervisor([RoleSpec("master", 0, SLEEP, restart=True)], report=report,
                            grace=1.0)
    standbys = DeferredStandbys([RoleSpec("master", 1, SLEEP, restart=True)], supervisor,
                                lambda: store, job_name="standby-test", bound_s=10.0,
                                clock=clock)
    return supervisor, standbys, report


def test_the_standby_starts_with_the_first_trained_batch(store: Store) -> None:
    clock = Clock()
    supervisor, standbys, report = make(store, clock)
    supervisor.start()
    try:
        standbys.step()
        clock.now = 5.0
        standbys.step()
        assert list(supervisor.procs) == ["master"]  # nobody trained yet
        publish_progress(store, "trainer-0", TrainerProgress(0, 512, 1, 0.7))
        standbys.step()
        assert list(supervisor.procs) == ["master", "master 1"]
        assert supervisor.procs["master 1"].running
        assert standbys.pending == []
        standbys.step()  # started once
        assert len(supervisor.procs) == 2
        assert "started master 1" not in report.getvalue()  # not news to the user
    finally:
        stop(supervisor)


def test_the_standby_starts_at_the_bound_when_nothing_trains(store: Store) -> None:
    clock = Clock()
    supervisor, standbys, _ = make(store, clock)
    supervisor.start()
    try:
        clock.now = 9.0
        standbys.step()
        assert "master 1" not in supervisor.procs
        clock.now = 10.0
        standbys.step()
        assert supervisor.procs["master 1"].running
    finally:
        stop(supervisor)
