"""AppliedSet keeps its tasks in arrays; every public method must answer as the dict of Python
objects it replaced, which this test keeps as the reference model (random operations, keys that
pack into the hash index and keys beyond it), and must be smaller."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from elasticps.pserver.applied import AppliedSet


@dataclass
class _Seqs:
    below: int = 0
    extra: set[int] = field(default_factory=set)
    applications: int = 0


class DictModel:
    """The former implementation: a dict of (pass, task) -> watermark, set, count."""

    def __init__(self) -> None:
        self.tasks_: dict[tuple[int, int], _Seqs] = {}
        self.floor = 0

    def add(self, pass_id: int, task_id: int, seq: int) -> bool:
        seqs = self.tasks_.setdefault((pass_id, task_id), _Seqs())
        seqs.applications += 1
        if seq < seqs.below or seq in seqs.extra:
            return False
        seqs.extra.add(seq)
        while seqs.below in seqs.extra:
            seqs.extra.remove(seqs.below)
            seqs.below += 1
        return True

    def contains(self, pass_id: int, task_id: int, seq: int) -> bool:
        if pass_id < self.floor:
            return True
        seqs = self.tasks_.get((pass_id, task_id))
        return seqs is not None and (seq < seqs.below or seq in seqs.extra)

    def __len__(self) -> int:
        return sum(s.below + len(s.extra) for s in self.tasks_.values())

    def tasks(self) -> Iterator[tuple[int, int, int, list[int]]]:
        for (p, t), s in sorted(self.tasks_.items()):
            yield p, t, s.below, sorted(s.extra)

    def applications(self, pass_id: int, task_id: int) -> int:
        seqs = self.tasks_.get((pass_id, task_id))
        return 0 if seqs is None else seqs.applications

    def prune(self, upto_pass: int) -> int:
        doomed = [k for k in self.tasks_ if k[0] < upto_pass]
        for k in doomed:
            del self.tasks_[k]
        self.floor = max(self.floor, upto_pass)
        return len(doomed)

    def forget_task(self, pass_id: int, task_id: int) -> bool:
        return self.tasks_.pop((pass_id, task_id), None) is not None

    def counts(self) -> list[tuple[int, int, int]]:
        return [(p, t, s.applications) for (p, t), s in sorted(self.tasks_.items())]


WIDE_TASK = 1 << 40  # beyond the packed key: the fallback dict
WIDE_PASS = 1 << 33


def _key(rng: np.random.Generator) -> tuple[int, int]:
    pass_id = int(rng.integers(0, 4)) if rng.random() > 0.05 else WIDE_PASS
    task_id = int(rng.integers(0, 12)) if rng.random() > 0.1 else WIDE_TASK + int(
        rng.integers(0, 2))
    return pass_id, task_id


def _same(got: AppliedSet, want: DictModel) -> None:
    assert list(got.tasks()) == list(want.tasks())
    assert len(got) == len(want)
    assert got.counts_array().tolist() == [list(c) for c in want.counts()]
    assert got.floor == want.floor


def test_random_operations_answer_as_the_dict_it_replaced() -> None:
    rng = np.random.default_rng(11)
    got, want = AppliedSet(), DictModel()
    for step in range(3000):
        pass_id, task_id = _key(rng)
        seq = int(rng.integers(0, 30))
        op = rng.random()
        if op < 0.7:
            assert got.add(pass_id, task_id, seq) == want.add(pass_id, task_id, seq), step
        elif op < 0.85:
            assert got.contains(pass_id, task_id, seq) == want.contains(pass_id, task_id, seq)
            assert got.applications(pass_id, task_id) == want.applications(pass_id, task_id)
        elif op < 0.93:
            assert got.forget_task(pass_id, task_id) == want.forget_task(pass_id, task_id)
        elif op < 0.95:
            upto = int(rng.integers(0, 3))
            assert got.prune(upto) == want.prune(upto)
        else:  # the checkpoint's round trip and the snapshot's copy stand in for the original
            copied = got.copy() if rng.random() < 0.5 else AppliedSet.from_arrays(
                *got.to_arrays(), got.counts_array(), got.floor)
            assert copied == got
            got = copied
        if step % 50 == 0:
            _same(got, want)
    _same(got, want)
    assert len(want) > 50  # the run did record batches


def test_a_copy_is_independent() -> None:
    applied = AppliedSet()
    applied.add(0, 1, 0)
    applied.add(0, 1, 5)
    copied = applied.copy()
    copied.add(0, 1, 1)
    copied.add(0, 2, 0)
    assert list(applied.tasks()) == [(0, 1, 1, [5])]
    assert list(copied.tasks()) == [(0, 1, 2, [5]), (0, 2, 1, [])]


@pytest.mark.slow
def test_a_task_takes_a_fraction_of_the_dicts_memory() -> None:
    def traced(build) -> int:  # type: ignore[no-untyped-def]
        tracemalloc.start()
        try:
            kept = build()
            size, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        del kept
        return size

    def fill(applied):  # type: ignore[no-untyped-def]
        for task in range(20_000):
            for seq in range(3):
                applied.add(0, task, seq)
        return applied

    arrays, model = traced(lambda: fill(AppliedSet())), traced(lambda: fill(DictModel()))
    assert arrays * 3 < model, (arrays, model)  # ~100 B a task against ~450 B
    filled = fill(AppliedSet())  # the index grew many times on the way: every task is found
    assert all(filled.contains(0, task, 2) and not filled.contains(0, task, 3)
               for task in range(20_000))
    assert {filled.applications(0, task) for task in range(20_000)} == {3}
