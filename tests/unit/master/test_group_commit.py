"""GroupCommit: concurrent calls' writes share transactions; no call returns before its own
write (and every write staged ahead of it) is stored; a failed write fails every waiter."""

from __future__ import annotations

import threading

import pytest

from elasticps.errors import StoreUnavailableError
from elasticps.master.group_commit import GroupCommit
from elasticps.store.api import Delete, Op, Put


class Recorder:
    """A store write that logs each transaction; the first can be held open."""

    def __init__(self, hold_first: bool = False) -> None:
        self.log: list[tuple[str, object]] = []  # ("write", keys) and ("done", name), in order
        self.lock = threading.Lock()
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.fail_with: BaseException | None = None

    def write(self, ops: list[Op]) -> None:
        self.entered.set()
        assert self.release.wait(30)
        if self.fail_with is not None:
            raise self.fail_with
        with self.lock:
            self.log.append(("write", [(op.key, op.value if isinstance(op, Put) else None)
                                       for op in ops]))

    def done(self, name: str) -> None:
        with self.lock:
            self.log.append(("done", name))

    def writes(self) -> list[object]:
        return [what for kind, what in self.log if kind == "write"]


def put(key: str, value: bytes = b"v") -> Put:
    return Put(key, value)


def waiter(commits: GroupCommit, ticket: int, name: str, recorder: Recorder,
           errors: dict[str, BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            commits.wait(ticket)
            recorder.done(name)
        except BaseException as exc:  # checked by the test
            errors[name] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_calls_that_arrive_during_a_write_share_the_next_transaction() -> None:
    recorder = Recorder(hold_first=True)
    commits = GroupCommit(recorder.write, max_ops=10)
    errors: dict[str, BaseException] = {}
    first = waiter(commits, commits.stage([put("a")]), "a", recorder, errors)
    assert recorder.entered.wait(30)  # "a" is being written, and held
    later = [waiter(commits, commits.stage([put(k)]), k, recorder, errors) for k in "bc"]
    assert not recorder.log, "nothing may be acknowledged while its write is in flight"
    recorder.release.set()
    for thread in [first, *later]:
        thread.join(30)
    assert not errors
    assert recorder.writes() == [[("a", b"v")], [("b", b"v"), ("c", b"v")]]
    assert commits.transactions == 2
    # Every call returned after the transaction that holds its write.
    position = {what: i for i, (kind, what) in enumerate(recorder.log) if kind == "done"}
    written_at = {key: i for i, (kind, what) in enumerate(recorder.log) if kind == "write"
                  for key, _ in what}  # type: ignore[union-attr]
    assert all(position[k] > written_at[k] for k in "abc")


def test_a_key_written_twice_in_a_group_keeps_the_later_value() -> None:
    recorder = Recorder()
    commits = GroupCommit(recorder.write, max_ops=10)
    commits.stage([put("meta", b"1"), put("task/1")])
    ticket = commits.stage([put("meta", b"2"), put("task/2")])
    commits.wait(ticket)
    assert recorder.writes() == [[("task/1", b"v"), ("meta", b"2"), ("task/2", b"v")]]


def test_a_group_never_exceeds_one_transaction_and_keeps_each_write_whole() -> None:
    recorder = Recorder()
    commits = GroupCommit(recorder.write, max_ops=3)
    for i in range(3):
        ticket = commits.stage([put(f"t{i}/x"), put(f"t{i}/y")])
    commits.wait(ticket)
    assert [len(ops) for ops in recorder.writes()] == [2, 2, 2]  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="4 ops do not fit one transaction of 3"):
        commits.stage([put(f"k{i}") for i in range(4)])


def test_a_prefix_delete_is_written_alone_in_its_place() -> None:
    recorder = Recorder()
    commits = GroupCommit(recorder.write, max_ops=10)
    commits.stage([put("a")])
    commits.stage([Delete("state/", prefix=True)])
    commits.wait(commits.stage([put("b")]))
    assert recorder.writes() == [[("a", b"v")], [("state/", None)], [("b", b"v")]]


def test_an_answer_that_changed_nothing_waits_for_what_was_staged_before_it() -> None:
    recorder = Recorder()
    commits = GroupCommit(recorder.write, max_ops=10)
    assert commits.latest() == 0
    commits.wait(commits.latest())  # nothing staged: returns at once
    assert recorder.writes() == []
    commits.stage([put("a")])
    commits.wait(commits.latest())
    assert recorder.writes() == [[("a", b"v")]]


def test_a_failed_write_fails_its_waiters_and_every_later_call() -> None:
    recorder = Recorder(hold_first=True)
    recorder.fail_with = StoreUnavailableError("etcd is down")
    commits = GroupCommit(recorder.write, max_ops=10)
    errors: dict[str, BaseException] = {}
    threads = [waiter(commits, commits.stage([put("a")]), "a", recorder, errors)]
    assert recorder.entered.wait(30)
    threads.append(waiter(commits, commits.stage([put("b")]), "b", recorder, errors))
    recorder.release.set()
    for thread in threads:
        thread.join(30)
    assert set(errors) == {"a", "b"}
    assert all(isinstance(e, StoreUnavailableError) for e in errors.values())
    assert recorder.writes() == []
    with pytest.raises(StoreUnavailableError):
        commits.stage([put("c")])
