"""`elasticps logs` of a local job: a role name is the process that serves it (pserver-K the one
serving shard K, master the leader), not the file of that start order; `--all` merges every
log by time with a prefix per line; and the launcher's records it reads, written from a real
embedded store."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from elasticps.errors import ConfigError
from elasticps.launch.local_job import LocalJob
from elasticps.launch.log_view import line_time, view
from elasticps.launch.process import RoleSpec
from elasticps.launch.process_records import RECORDS_FILE, ProcessRecords, RecordsWriter
from elasticps.launch.role_logs import LogSource, resolve
from elasticps.store import open_store
from elasticps.store.keys import MASTER_ADDRESS, MasterAddress, PServerSlot, pserver_slot
from tests.helpers import run_cli

# Start order: master.log, master-1.log; pserver-0.log, pserver-1.log. In this job the second
# pserver started claimed shard 0 and the standby (master-1) leads.
PIDS = {"master.log": 100, "master-1.log": 101, "pserver-0.log": 200, "pserver-1.log": 201,
        "trainer-0.log": 300}


def stamp(second: int) -> str:
    return datetime(2026, 1, 2, 10, 0, second).strftime("%Y-%m-%d %H:%M:%S") + ",000"


def job_dir(tmp_path: Path, *, records: bool = True) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in PIDS:
        (logs / name).write_text(f"{stamp(1)} INFO first line of {name}\n"
                                 f"{stamp(3)} INFO last line of {name}\n")
    if records:
        processes = {str(pid): {"role": name.split("-")[0].split(".")[0],
                                "index": int(name[:-4].split("-")[1]) if "-" in name else 0,
                                "log": name} for name, pid in PIDS.items()}
        processes["201"]["serves"], processes["200"]["serves"] = "pserver-0", "pserver-1"
        processes["101"]["serves"] = "master"
        (tmp_path / RECORDS_FILE).write_text(json.dumps({
            "processes": processes,
            "serving": {"master": 101, "pserver-0": 201, "pserver-1": 200}}))
    (tmp_path / "job.json").write_text(json.dumps({"store": f"file://{tmp_path}/s.db",
                                                   "job_name": "demo", "launcher_pid": 0}))
    return tmp_path


def logs(workdir: Path, *args: str) -> tuple[int, list[str], str]:
    done = run_cli("logs", "--workdir", str(workdir), *args)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_pserver_k_is_the_process_that_serves_shard_k(tmp_path: Path) -> None:
    workdir = job_dir(tmp_path)
    code, lines, err = logs(workdir, "pserver-0")
    assert (code, err) == (0, "")
    assert lines == [f"{stamp(1)} INFO first line of pserver-1.log",
                     f"{stamp(3)} INFO last line of pserver-1.log"]
    assert logs(workdir, "--role", "pserver", "--index", "1")[1][0].endswith("pserver-0.log")
    assert logs(workdir, "pserver")[1][0].endswith("pserver-1.log")  # shard 0


def test_master_is_the_leader_and_master_all_every_master(tmp_path: Path) -> None:
    workdir = job_dir(tmp_path)
    assert logs(workdir, "master")[1][-1].endswith("last line of master-1.log")
    assert logs(workdir, "master-0")[1][-1].endswith("last line of master.log")  # start order
    code, lines, _ = logs(workdir, "master", "--all")
    assert code == 0
    assert lines == [f"master-0 | {stamp(1)} INFO first line of master.log",
                     f"master-1 | {stamp(1)} INFO first line of master-1.log",
                     f"master-0 | {stamp(3)} INFO last line of master.log",
                     f"master-1 | {stamp(3)} INFO last line of master-1.log"]


def test_a_job_with_no_leader_seen_shows_every_master_and_says_so(tmp_path: Path) -> None:
    workdir = job_dir(tmp_path)
    doc = json.loads((workdir / RECORDS_FILE).read_text())
    del doc["serving"]["master"]
    (workdir / RECORDS_FILE).write_text(json.dumps(doc))
    code, lines, err = logs(workdir, "master")
    assert code == 0
    assert "has not seen a leading master (yet); showing every master process" in err
    assert {line.split(" | ")[0] for line in lines} == {"master-0", "master-1"}


def test_every_log_merged_by_time_each_line_prefixed_by_its_role(tmp_path: Path) -> None:
    workdir = job_dir(tmp_path)
    (workdir / "logs" / "trainer-0.log").write_text(
        f"{stamp(2)} ERROR the step failed\nTraceback (most recent call last):\n"
        "ValueError: bad row\n"
        + json.dumps({"time": "2026-01-02T10:00:04+00:00", "message": "json"}) + "\n")
    code, lines, _ = logs(workdir)  # no role: every process
    assert code == 0
    labels = [line.split(" | ")[0].strip() for line in lines]
    firsts = ["master-0", "master-1", "pserver-1", "pserver-0"]  # role, then start order
    # second 1: every first line, file by file; second 2: the trainer's line and the
    # traceback under it; second 3: the last lines
    assert labels[:4] == firsts
    assert [line.split(" | ", 1)[1] for line in lines[4:7]] == [
        f"{stamp(2)} ERROR the step failed", "Traceback (most recent call last):",
        "ValueError: bad row"]
    assert labels[7:11] == firsts
    json_time = line_time(lines[-1].split(" | ", 1)[1])
    assert json_time == datetime.fromisoformat("2026-01-02T10:00:04+00:00").timestamp()
    assert logs(workdir, "--all")[1] == lines
    assert logs(workdir, "--all", "--tail", "2")[1] == lines[-2:]


def test_bad_role_names_are_refused_naming_the_name(tmp_path: Path) -> None:
    workdir = job_dir(tmp_path)
    code, _, err = logs(workdir, "etcd")
    assert code == 1
    assert "role 'etcd' is not master, pserver or trainer" in err
    assert "name the role without an index (pserver --all)" in logs(
        workdir, "pserver-1", "--all")[2]
    code, _, err = logs(workdir, "pserver-5")
    assert code == 1
    assert "no process has been seen serving pserver shard 5" in err
    assert "shards seen: pserver-0, pserver-1" in err
    assert "name the role once" in logs(workdir, "trainer-0", "--role", "trainer")[2]


def test_a_job_without_records_falls_back_to_start_order(tmp_path: Path) -> None:
    workdir = job_dir(tmp_path, records=False)
    code, lines, err = logs(workdir, "pserver-1")
    assert code == 0
    assert lines[0].endswith("pserver-1.log")
    assert "no record of which process serves which shard" in err


def test_following_ends_with_a_launcher_that_is_gone(tmp_path: Path) -> None:
    job = LocalJob.find(job_dir(tmp_path))
    (tmp_path / "logs" / "trainer-0.log").write_text("a\nb\nno newline")
    lines = list(view([LogSource("trainer-0", tmp_path / "logs" / "trainer-0.log")], job,
                      tail=2, follow=True))
    assert lines == ["b", "no newline"]


def test_the_launchers_records_follow_the_store(tmp_path: Path) -> None:
    """RecordsWriter against a real embedded store: pids the launcher started, and who serves
    each role as the store says; a name keeps its holder once the store forgets it."""
    store = open_store(f"file://{tmp_path}/store.db", "demo")
    procs = [SimpleNamespace(pid=pid, spec=RoleSpec(name.split("-")[0].split(".")[0], index,
                                                    ("x",), log_path=tmp_path / name))
             for name, pid, index in (("master.log", 100, 0), ("master-1.log", 101, 1),
                                      ("pserver-0.log", 200, 0), ("pserver-1.log", 201, 1))]
    writer = RecordsWriter(tmp_path, lambda: store, poll_s=0.0)
    try:
        writer.step(procs)  # type: ignore[arg-type]
        assert ProcessRecords.read(tmp_path).serving == {}
        store.put(pserver_slot(0), PServerSlot("127.0.0.1:1", pid=201).encode())
        store.put(pserver_slot(1), PServerSlot("127.0.0.1:2", pid=200).encode())
        store.put(MASTER_ADDRESS, MasterAddress("127.0.0.1:3", "127.0.0.1:4", "m",
                                                pid=101).encode())
        writer.step(procs)  # type: ignore[arg-type]
        records = ProcessRecords.read(tmp_path)
        assert (records.log_of("pserver-0"), records.log_of("pserver-1"),
                records.log_of("master")) == ("pserver-1.log", "pserver-0.log", "master-1.log")
        store.delete(MASTER_ADDRESS)
        store.delete(pserver_slot(0))  # the job ended: the keys go with their leases
        restarted = [*procs, SimpleNamespace(pid=202, spec=procs[3].spec)]
        writer.step(restarted)  # type: ignore[arg-type]
        records = ProcessRecords.read(tmp_path)
        assert records.log_of("master") == "master-1.log"
        assert records.log_of("pserver-0") == "pserver-1.log"
        assert records.processes[202].log == "pserver-1.log"
    finally:
        store.close()


def test_resolve_names_files_the_person_can_open(tmp_path: Path) -> None:
    job = LocalJob.find(job_dir(tmp_path))
    sources, note = resolve(job, "trainer-0")
    assert (sources, note) == ([LogSource("trainer-0", tmp_path / "logs" / "trainer-0.log")],
                               None)
    with pytest.raises(ConfigError, match="has no trainer-4 log"):
        resolve(job, "trainer-4")
