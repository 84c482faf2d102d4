"""Exports on a schedule: the option's checks, the pure decisions (when a version is due, full
or delta), and the worker that carries them out, stepped batch by batch against a real model
directory with a controlled clock and grant."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elasticps.errors import ConfigError
from elasticps.proto import master_pb2
from elasticps.trainer.export import export_model
from elasticps.trainer.export_chain import load_state
from elasticps.trainer.export_flags import add_export_flags, schedule_from_flags
from elasticps.trainer.export_schedule import ExportSchedule, due, version_kind
from elasticps.trainer.model_dir import Draft, VersionRecord, read_latest, version_path
from elasticps.trainer.scheduled_export import ScheduledExports
from elasticps.trainer.task_batches import TaskBatch
from elasticps.trainer.task_loop import TaskEnd, TaskWorker
from tests.task_workers import Collect, task_loop
from tests.unit.trainer.queue_master import QueueMaster, row_batches

LAYERS = {"emb": {"table": "t", "dim": 2, "kind": "embedding", "columns": "c"}}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "needs at least one of every_s=, every_passes=, every_tasks=, every_batches=, "
         "every_partitions="),
    ({"every_partitions": 0}, "every_partitions=0 must be a whole number >= 1"),
    ({"every_tasks": 0}, "every_tasks=0 must be a whole number >= 1"),
    ({"every_passes": -1}, "every_passes=-1"),
    ({"every_batches": 0}, "every_batches=0 must be a whole number >= 1"),
    ({"every_batches": 2.5}, "every_batches=2.5"),
    ({"every_s": -1.0}, "every_s=-1.0 must be a number of seconds > 0"),
    ({"every_s": float("nan")}, "every_s=nan"),
    ({"every_s": 5, "full_every": 0}, "full_every=0"),
    ({"every_s": 5, "keep": True}, "keep=True"),
    ({"every_s": 5, "hold_s": 0}, "hold_s=0"),
    ({"every_s": 5, "meta": {"version": 3}}, r"may not set \['version'\]"),
])
def test_a_bad_schedule_is_refused_naming_the_field(kwargs: dict[str, Any],
                                                    message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ExportSchedule("/tmp/models", **kwargs)


def test_a_version_is_due_after_enough_batches_or_enough_time() -> None:
    both = ExportSchedule("m", every_batches=10, every_s=30.0)
    assert not due(both, {"batches": 9}, 29.9)
    assert due(both, {"batches": 10}, 0.0)
    assert due(both, {"batches": 1}, 30.0)
    # Nothing trained since the last version: nothing to export.
    assert not due(both, {"batches": 0, "passes": 3}, 1e9)
    assert not due(ExportSchedule("m", every_batches=10), {"batches": 9}, 1e9)
    assert not due(ExportSchedule("m", every_s=5.0), {"batches": 10**9}, 4.9)


def test_a_version_is_due_after_enough_tasks_or_passes() -> None:
    schedule = ExportSchedule("m", every_tasks=3, every_passes=1)
    assert not due(schedule, {"batches": 50, "tasks": 2}, 1e9)
    assert due(schedule, {"batches": 50, "tasks": 3}, 0.0)
    assert due(schedule, {"batches": 1, "passes": 1}, 0.0)
    with pytest.raises(ValueError, match="'hours' is not one of"):
        schedule.every("hours")


def test_a_full_version_first_and_after_full_every_deltas() -> None:
    def at(depth: int) -> VersionRecord:
        return VersionRecord(7, version_path(7), "delta", 5, depth)

    assert version_kind(None, 3) == "full"
    assert [version_kind(at(d), 3) for d in range(5)] == ["delta"] * 3 + ["full"] * 2
    assert version_kind(at(0), 1) == "delta"
    assert version_kind(at(1), 1) == "full"


class Inner(TaskWorker):
    """The trainer's worker as the loop sees it: records what it is asked to do."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        self.calls.append(f"train {item.seq}")

    def flush(self) -> None:
        self.calls.append("flush")


class Job:
    """A model that changes with every batch, written as the trainer's writer writes it."""

    def __init__(self, root: Path, **schedule: Any) -> None:
        self.calls: list[str] = []
        self.now = 0.0
        self.granted = True
        self.fail: Exception | None = None
        self.dense_shape = (2, 2)
        self.schedule = ExportSchedule(root, **{"meta": {"model": "m"}, **schedule})
        self.exports = ScheduledExports(Inner(self.calls), self.schedule, self.write,
                                        self.grant, trainer_name="trainer-0",
                                        clock=lambda: self.now, wall=lambda: 5000.0 + self.now)
        self.trained = 0

    def grant(self, hold_s: float) -> bool:
        self.calls.append(f"grant {hold_s:g}")
        return self.granted

    def write(self, directory: Path, draft: Draft) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(f"write {draft.version} {draft.kind}")
        ids = np.arange(4)
        export_model(directory, {"w": np.full(self.dense_shape, float(self.trained), np.float32)},
                     {"t": (ids, np.full((4, 2), float(self.trained), np.float32))}, LAYERS,
                     draft.meta, parent=draft.parent)

    @staticmethod
    def write_step(directory: Path, draft: Draft) -> None:
        """A version of a model that does not change (the loop tests count versions)."""
        export_model(directory, {"w": np.zeros((2, 2), np.float32)},
                     {"t": (np.arange(4), np.zeros((4, 2), np.float32))}, LAYERS, draft.meta,
                     parent=draft.parent)

    def batches(self, n: int, *, seconds: float = 0.0) -> None:
        for _ in range(n):
            self.now += seconds
            step = self.trained
            self.trained += 1  # what the pservers hold once this batch is pushed
            self.exports.train(TaskBatch(0, step // 5, 0, step % 5, None, step % 5 + 1, step),
                               None)


def test_versions_every_n_batches_flushed_first_with_their_position(tmp_path: Path) -> None:
    job = Job(tmp_path, every_batches=3, hold_s=60.0)
    job.batches(7)
    assert job.calls == ["train 0", "train 1", "train 2", "flush", "grant 60", "write 1 full",
                         "train 3", "train 4", "train 0", "flush", "grant 60", "write 2 delta",
                         "train 1"]
    latest = read_latest(tmp_path)
    assert latest is not None
    assert latest.version == 2
    assert latest.position == {"trainer": "trainer-0", "batches": 6, "pass": 0, "task": 1,
                               "seq": 0, "step": 5, "records_done": 1}
    assert latest.committed_at == 5000.0
    state = load_state(tmp_path / latest.path)
    assert float(state.dense["w"][0, 0]) == 6.0  # the model after its sixth batch
    assert state.manifest["meta"]["model"] == "m"


def test_a_full_export_every_full_every_deltas_and_old_chains_retired(tmp_path: Path) -> None:
    job = Job(tmp_path, every_batches=1, full_every=2, keep=1)
    job.batches(7)
    kinds = [call.split()[2] for call in job.calls if call.startswith("write")]
    assert kinds == ["full", "delta", "delta", "full", "delta", "delta", "full"]
    assert sorted(p.name for p in (tmp_path / "versions").iterdir()) == ["000007"]


def test_every_s_follows_the_clock(tmp_path: Path) -> None:
    job = Job(tmp_path, every_s=10.0)
    job.batches(3, seconds=4.0)  # 4, 8, 12 s
    assert [c for c in job.calls if c.startswith("write")] == ["write 1 full"]
    job.batches(2, seconds=4.0)  # 4, 8 s since
    assert [c for c in job.calls if c.startswith("write")] == ["write 1 full"]
    job.batches(1, seconds=4.0)
    assert [c for c in job.calls if c.startswith("write")] == ["write 1 full", "write 2 delta"]


def test_refused_the_grant_it_exports_nothing_and_asks_again_an_interval_later(
        tmp_path: Path) -> None:
    job = Job(tmp_path, every_batches=2)
    job.granted = False
    job.batches(3)
    assert job.calls == ["train 0", "train 1", "flush", "grant 120", "train 2"]
    assert read_latest(tmp_path) is None
    job.granted = True
    job.batches(1)
    assert job.calls[-2:] == ["grant 120", "write 1 full"]


def test_training_ends_with_a_final_version_of_the_model_as_training_left_it(
        tmp_path: Path) -> None:
    job = Job(tmp_path, every_batches=3)
    job.batches(4)
    final = job.exports.finish()
    assert final is not None
    assert final.version == 2
    assert float(load_state(tmp_path / final.path).dense["w"][0, 0]) == 4.0
    # This trainer exported at its last batch; another trainer pushed two more after it.
    job.batches(3)
    assert read_latest(tmp_path).version == 3  # type: ignore[union-attr]
    job.trained += 2
    final = job.exports.finish()
    assert final is not None
    assert final.version == 4
    assert float(load_state(tmp_path / final.path).dense["w"][0, 0]) == 9.0
    no_final = Job(tmp_path / "other", every_batches=3, final=False)
    no_final.batches(4)
    assert no_final.exports.finish() is None


def test_a_version_that_cannot_be_written_does_not_stop_training(tmp_path: Path) -> None:
    job = Job(tmp_path, every_batches=2)
    job.fail = OSError(28, "No space left on device")
    job.batches(2)
    assert job.exports.failures == 1
    assert read_latest(tmp_path) is None
    assert not any(p.name.startswith(".tmp") for p in (tmp_path / "versions").iterdir())
    job.fail = None
    job.batches(2)
    assert read_latest(tmp_path).version == 1  # type: ignore[union-attr]


def test_a_directory_holding_another_model_gets_a_full_version(tmp_path: Path) -> None:
    job = Job(tmp_path, every_batches=1)
    job.batches(1)
    job.dense_shape = (3, 3)  # a changed model, exported into the same directory
    job.batches(1)
    latest = read_latest(tmp_path)
    assert latest is not None
    assert (latest.version, latest.kind) == (2, "full")
    manifest = json.loads((tmp_path / latest.path / "manifest.json").read_text())
    assert manifest["dense"] == {"w": [3, 3]}


def loop_versions(tmp_path: Path, **schedule: Any) -> list[tuple[int, int, str]]:
    """Run a real task loop on the real task queue (3 tasks of 2 batches, 2 passes) under a
    schedule; each version as (pass, task, kind) of its position."""
    master = QueueMaster([8, 8, 8], num_passes=2)
    worker = Collect(keep=False)
    exports = ScheduledExports(worker, ExportSchedule(tmp_path, **schedule), Job.write_step,
                               lambda hold_s: True, trainer_name="t0")
    task_loop(master.client("t0"), row_batches, 4, exports, trainer_name="t0").run()
    exports.finish()
    return [(r.position["pass"], r.position["task"], r.kind) for r in exports.published]


def test_the_loop_counts_finished_tasks_and_ended_passes(tmp_path: Path) -> None:
    # The last of each: the final version (finish), written whatever this trainer exported.
    assert loop_versions(tmp_path / "tasks", every_tasks=2) == [
        (0, 1, "full"), (1, 0, "delta"), (1, 2, "delta"), (1, 2, "delta")]
    assert loop_versions(tmp_path / "passes", every_passes=1) == [
        (0, 2, "full"), (1, 2, "delta"), (1, 2, "delta")]


def test_a_unit_the_schedule_does_not_know_is_refused(tmp_path: Path) -> None:
    exports = ScheduledExports(Inner([]), ExportSchedule(tmp_path, every_s=1.0), Job.write_step,
                               lambda hold_s: True, trainer_name="t0")
    with pytest.raises(ValueError, match="'partition' is not one of"):
        exports.count("partition")


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_export_flags(parser)
    return parser.parse_args(list(argv))


def test_the_flags_make_the_schedule_with_defaults_and_name_a_bad_flag(tmp_path: Path) -> None:
    assert schedule_from_flags(flags(), root=tmp_path) is None
    default = schedule_from_flags(flags("--export-dir", "models"), root=tmp_path,
                                  meta={"model": "dnn"})
    assert default == ExportSchedule(tmp_path / "models", every_s=30.0, full_every=10, keep=2,
                                     meta={"model": "dnn"})
    counted = schedule_from_flags(flags("--export-dir", "/abs", "--export-every-passes", "1",
                                        "--export-full-every", "3", "--export-keep", "4"))
    assert counted == ExportSchedule(Path("/abs"), every_passes=1, full_every=3, keep=4)
    with pytest.raises(ConfigError, match=r"--export-every-tasks=0 must be a whole number"):
        schedule_from_flags(flags("--export-dir", "m", "--export-every-tasks", "0"))
    with pytest.raises(ConfigError, match=r"--export-keep=0"):
        schedule_from_flags(flags("--export-dir", "m", "--export-keep", "0"))


def test_a_version_due_at_a_tasks_end_is_written_before_the_next_batch(tmp_path: Path) -> None:
    """The finish may bring the next task, whose lease only the heartbeat of its first batch
    renews: the export waits for that batch (or the pass's end), not in between."""
    job = Job(tmp_path, every_tasks=1)
    job.batches(2)
    job.exports.end_task(master_pb2.Task(task_id=0), TaskEnd.FINISHED)
    assert job.calls == ["train 0", "train 1"]  # not yet
    job.batches(1)
    assert job.calls[2:] == ["flush", "grant 120", "write 1 full", "train 2"]
    latest = read_latest(tmp_path)
    assert latest is not None
    assert latest.position["batches"] == 2  # the finished task's batches, not the next one's
    job.exports.end_task(master_pb2.Task(task_id=1), TaskEnd.LOST)  # not counted
    job.exports.end_task(master_pb2.Task(task_id=2), TaskEnd.FINISHED)
    job.exports.end_pass(0)  # no batch follows: the pass's end writes it
    assert job.calls[-2:] == ["grant 120", "write 2 delta"]


class Notes:
    """A stream's notes as the worker sees them: how far the master says the stream is trained
    (set by the test), what each version adds, what was published."""

    def __init__(self) -> None:
        self.through = 0
        self.asked: list[int | None] = []  # the version LATEST named when asked
        self.versions: list[int] = []  # published

    def trained(self) -> int | None:
        return self.through

    def position(self, latest: VersionRecord | None) -> dict[str, Any]:
        self.asked.append(None if latest is None else latest.version)
        return {"stream": {"partitions": self.through, "newest": f"p{self.through - 1}",
                           "newest_committed_at": 1.0}}

    def published(self, record: VersionRecord) -> None:
        self.versions.append(record.version)


def test_a_version_each_partition_trained_through_also_while_waiting_for_data(
        tmp_path: Path) -> None:
    job = Job(tmp_path, every_partitions=1)
    notes = Notes()
    job.exports.notes = notes
    job.batches(2)
    job.exports.end_task(master_pb2.Task(task_id=0), TaskEnd.FINISHED)
    assert job.calls == ["train 0", "train 1"]  # the partition is not trained through yet
    notes.through = 1  # another trainer finished the partition's last task
    job.exports.end_task(master_pb2.Task(task_id=1), TaskEnd.FINISHED)
    assert job.calls == ["train 0", "train 1"]  # due, written before the next batch
    job.batches(1)
    assert job.calls[2:] == ["flush", "grant 120", "write 1 full", "train 2"]
    job.exports.idle()  # no task comes (the stream waits), nothing trained through since
    assert job.calls[-1] == "train 2"
    # Another trainer trains the next partition through while this one waits: exported now,
    # though this trainer has trained nothing of it.
    notes.through = 2
    job.exports.idle()
    assert job.calls[-3:] == ["flush", "grant 120", "write 2 delta"]
    job.exports.idle()
    assert job.calls[-1] == "write 2 delta"  # nothing new
    assert notes.asked == [None, 1]
    assert notes.versions == [1, 2]
    latest = read_latest(tmp_path)
    assert latest is not None
    assert latest.position["stream"]["partitions"] == 2


def test_a_scripts_default_unit_applies_when_no_flag_says_when(tmp_path: Path) -> None:
    by_default = schedule_from_flags(flags("--export-dir", "m"), root=tmp_path,
                                     default={"partitions": 1})
    assert by_default == ExportSchedule(tmp_path / "m", every_partitions=1)
    given = schedule_from_flags(flags("--export-dir", "m", "--export-every-s", "5"),
                                root=tmp_path, default={"partitions": 1})
    assert given == ExportSchedule(tmp_path / "m", every_s=5.0)
    assert schedule_from_flags(flags("--export-dir", "m", "--export-every-partitions", "3"),
                               root=tmp_path) == ExportSchedule(tmp_path / "m",
                                                                every_partitions=3)
