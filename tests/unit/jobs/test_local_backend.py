"""The local backend's handle on a real child process that speaks the launcher's contract (a
``status:`` line on stdout, an exit code, ``WORKDIR/summary.json``), and the ``elasticps run``
command line it builds. A real ``elasticps run`` job is tests/integration/trainer/
test_dist_train_outside_job.py's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import elasticps as eps
from elasticps.errors import ConfigError
from elasticps.jobs.local_backend import LocalJobHandle, run_argv


def launcher(workdir: Path, code: int, summary: dict[str, object] | None = None,
             sleep: float = 0.0) -> LocalJobHandle:
    """A child standing for `elasticps run`: prints its status line, maybe writes the summary."""
    write = (f"pathlib.Path({str(workdir / 'summary.json')!r}).write_text({json.dumps(summary)!r});"
             if summary is not None else "")
    body = (f"import pathlib, sys, time; print('progress 1/2'); "
            f"print('status: http://127.0.0.1:4242/', flush=True); time.sleep({sleep}); "
            f"{write} sys.exit({code})")
    return LocalJobHandle([sys.executable, "-c", body], workdir)


def test_a_job_that_succeeds_has_its_url_its_summary_and_exit_code_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    handle = launcher(tmp_path, 0, {"auc": 0.75, "samples": 3000})
    assert not handle.in_job
    assert handle.status_url(timeout=30) == "http://127.0.0.1:4242/"
    result = handle.wait(timeout=60)
    assert (result.succeeded, result.state, result.exit_code) == (True, "succeeded", 0)
    assert result.summary == {"auc": 0.75, "samples": 3000} == handle.summary()
    assert handle.wait() == result  # waiting again says the same
    # the launcher's own output reaches this process's stdout, line by line
    assert capsys.readouterr().out == "progress 1/2\nstatus: http://127.0.0.1:4242/\n"


@pytest.mark.parametrize(("code", "state"), [(1, "failed"), (130, "interrupted")])
def test_a_job_that_fails_or_is_stopped_says_so_with_no_summary(tmp_path: Path, code: int,
                                                                 state: str) -> None:
    result = launcher(tmp_path, code).wait(timeout=60)
    assert (result.succeeded, result.state, result.exit_code, result.summary) == (
        False, state, code, {})


@pytest.mark.slow
def test_wait_gives_up_after_its_timeout_and_the_job_goes_on(tmp_path: Path) -> None:
    handle = launcher(tmp_path, 0, {"done": True}, sleep=1.0)
    with pytest.raises(TimeoutError, match=r"still runs after 0\.05s"):
        handle.wait(timeout=0.05)
    assert handle.wait(timeout=60).summary == {"done": True}


def test_no_status_line_means_no_url(tmp_path: Path) -> None:
    handle = LocalJobHandle([sys.executable, "-c", "raise SystemExit(1)"], tmp_path)
    assert handle.status_url(timeout=30) is None
    assert handle.wait(timeout=60).state == "failed"
    assert handle.summary() == {}


def test_the_run_command_carries_the_job_spec(tmp_path: Path) -> None:
    job = eps.Job(trainers=3, pservers=2, backend="local", job_name="ctr", mode="geo",
                  geo_steps=4)
    assert run_argv(job, "train.py", ["--passes", "2"], tmp_path) == [
        sys.executable, "-m", "elasticps", "run", "--trainers", "3", "--pservers", "2",
        "--workdir", str(tmp_path), "--job-name", "ctr", "--mode", "geo", "--geo-steps", "4",
        "train.py", "--passes", "2"]
    # pservers follow the spec's derivation when not given: ceil(trainers / 2)
    assert run_argv(eps.Job(trainers=4, backend="local"), "t.py", [], tmp_path)[5:8] == [
        "4", "--pservers", "2"]


def test_a_local_job_needs_a_script_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a script: pass it to launch_job or give"):
        eps.launch_job(eps.Job(backend="local"))
    with pytest.raises(ConfigError, match=r"'nope\.py' is not one"):
        eps.launch_job(eps.Job(backend="local"), "nope.py", workdir=tmp_path)
    with pytest.raises(ConfigError, match=r"'missing\.py' is not one"):  # from the entry point
        eps.launch_job(eps.Job(backend="local", entry_point="python missing.py --x 1"))
