"""The verbs about a job, in-process: one way to name a local job's work directory in every verb
(``--workdir W``, with ``W`` in the JOB position as its alias, and the current directory when
neither is given); ``elasticps stop`` of a job that is not running; ``elasticps list`` of the
jobs this user started (its registry under $XDG_STATE_HOME) and of those under a directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elasticps.launch import job_registry
from elasticps.store import open_store
from elasticps.store.keys import DESIRED_TRAINERS
from tests.helpers import CliResult, run_cli


def finished_job(workdir: Path, name: str = "demo", state: str = "succeeded") -> Path:
    """A work directory as `elasticps run` leaves it after the job: job.json (its launcher
    gone), the saved page, a log."""
    (workdir / "logs").mkdir(parents=True)
    (workdir / "logs" / "trainer-0.log").write_text("the trainer's only line\n")
    (workdir / "job.json").write_text(json.dumps({"store": f"file://{workdir}/store.db",
                                                  "job_name": name, "launcher_pid": 0}))
    (workdir / "status.json").write_text(json.dumps({
        "state": state, "live": False, "launcher": {"state": state}, "pservers": [],
        "trainers": []}))
    return workdir


def same(*results: CliResult) -> CliResult:
    """The results of one verb in its several forms, which must be one result."""
    first = results[0]
    for other in results[1:]:
        assert (other.returncode, other.stdout, other.stderr) == (
            first.returncode, first.stdout, first.stderr)
    return first


def test_status_and_logs_name_the_workdir_the_same_three_ways(tmp_path: Path) -> None:
    workdir = finished_job(tmp_path / "job")
    status = same(run_cli("status", "--workdir", str(workdir)),
                  run_cli("status", str(workdir)),
                  run_cli("status", cwd=workdir))
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"job demo (local, {workdir}): succeeded")
    assert f"elasticps ui --workdir {workdir}" in status.stdout
    logs = same(run_cli("logs", "--workdir", str(workdir), "trainer-0"),
                run_cli("logs", str(workdir), "trainer-0"),
                run_cli("logs", "trainer-0", cwd=workdir))
    assert (logs.returncode, logs.stdout) == (0, "the trainer's only line\n")


def test_scale_ui_and_stop_take_the_same_forms(tmp_path: Path) -> None:
    workdir = finished_job(tmp_path / "job")
    for form in (("--workdir", str(workdir)), (str(workdir),)):
        done = run_cli("scale", *form, "--trainers", "3")
        assert done.returncode == 0, done.stderr
        with open_store(f"file://{workdir}/store.db", "demo") as store:
            kv = store.get(DESIRED_TRAINERS)
            assert kv is not None
            assert kv.value == b"3"
            store.delete(DESIRED_TRAINERS)
    (workdir / "status.json").unlink()  # no page saved: ui stops at the job it found
    ui = same(run_cli("ui", "--workdir", str(workdir), "--port", "0"),
              run_cli("ui", str(workdir), "--port", "0"),
              run_cli("ui", "--port", "0", cwd=workdir))
    assert ui.returncode == 1
    assert f"job demo in {workdir} has no status page saved yet" in ui.stderr
    stop = same(run_cli("stop", "--workdir", str(workdir)), run_cli("stop", str(workdir)),
                run_cli("stop", cwd=workdir))
    assert stop.returncode == 3  # nothing to stop
    assert stop.stdout == (f"elasticps stop: job demo in {workdir} is not running (ended); "
                           "nothing to stop\n")


@pytest.mark.parametrize("verb", ["status", "logs", "scale", "ui", "stop"])
def test_a_directory_that_holds_no_job_is_named_in_the_error(verb: str, tmp_path: Path
                                                             ) -> None:
    extra = ("--trainers", "1") if verb == "scale" else ()
    done = run_cli(verb, "--workdir", str(tmp_path), *extra)
    assert done.returncode == 1
    assert f"{tmp_path} holds no readable job.json" in done.stderr or \
        f"--workdir={str(tmp_path)!r} holds no readable job.json" in done.stderr


def test_naming_the_job_twice_or_not_at_all_is_refused(tmp_path: Path) -> None:
    workdir = finished_job(tmp_path / "job")
    twice = run_cli("status", "--workdir", str(workdir), str(workdir))
    assert twice.returncode == 1
    assert "name the job once" in twice.stderr
    nowhere = run_cli("stop", cwd=tmp_path)
    assert nowhere.returncode == 1
    assert "name the job: elasticps stop --workdir W" in nowhere.stderr


def test_list_shows_the_jobs_you_started_and_the_jobs_under_a_directory(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    env_state = {"XDG_STATE_HOME": str(state)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(state))
        assert job_registry.registry_dir() == state / "elasticps" / "jobs"
        first = finished_job(tmp_path / "runs" / "a", "job-a", "succeeded")
        job_registry.register(first, "job-a")
        second = finished_job(tmp_path / "runs" / "b", "job-b", "interrupted")
        job_registry.register(second, "job-b")
        gone = finished_job(tmp_path / "gone", "job-c")
        job_registry.register(gone, "job-c")
        (gone / "job.json").unlink()  # deleted since
        assert oct(job_registry.registry_dir().stat().st_mode & 0o777) == "0o700"

    listed = run_cli("list", env=env_state)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "NAME   STATE        WORKDIR" + " " * (len(str(first)) - 5) + "STATUS PAGE",
        f"job-b  interrupted  {second}  elasticps ui --workdir {second}",
        f"job-a  succeeded    {first}  elasticps ui --workdir {first}"]
    rows = json.loads(run_cli("list", "--json", env=env_state).stdout)
    assert [(r["name"], r["state"], r["status_url"]) for r in rows] == [
        ("job-b", "interrupted", None), ("job-a", "succeeded", None)]
    under = run_cli("list", str(tmp_path / "runs"), env={"XDG_STATE_HOME": str(tmp_path / "x")})
    assert [line.split()[0] for line in under.stdout.splitlines()] == ["NAME", "job-a", "job-b"]
    empty = run_cli("list", env={"XDG_STATE_HOME": str(tmp_path / "nothing")})
    assert empty.stdout.startswith("no local elasticps jobs started by you (registry: ")
    assert "DIR" in run_cli("list", str(tmp_path), "--cluster").stderr


def test_a_relative_xdg_state_home_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")
    assert job_registry.registry_dir() == Path.home() / ".local/state/elasticps/jobs"
