"""How `elasticps run` splits the cores: the plan (pure), the flags and the environment that
carry it to every role, and the line that says it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elasticps.cli import build_parser
from elasticps.errors import ConfigError
from elasticps.launch.launcher import Launch, LaunchOptions, build_specs
from elasticps.launch.threads import plan_threads
from tests.helpers import REPO


def _counts(cpus: int, trainers: int, pservers: int, mode: str = "async",
            **kw: object) -> tuple[int, int]:
    plan = plan_threads(cpus, trainers, pservers, mode, **kw)  # type: ignore[arg-type]
    return plan.trainer, plan.pserver


def test_the_trainers_share_what_the_pservers_leave() -> None:
    assert _counts(2, 1, 1) == (1, 1)
    assert _counts(16, 1, 1) == (15, 1)  # not 16 // 2: a pserver works on one core
    assert _counts(16, 2, 2) == (7, 1)
    assert _counts(16, 3, 1, "sync") == (5, 1)
    assert _counts(2, 2, 2) == (1, 1)  # never fewer than one
    assert _counts(8, 1, 1, "a-mode-newer-than-the-table") == (7, 1)  # the busiest: a core


def test_hybrid_pservers_keep_their_core_too() -> None:
    # Measured: on two cores a second trainer thread bought nothing and cost CPU.
    assert _counts(2, 1, 1, "hybrid") == (1, 1)
    assert _counts(16, 2, 4, "hybrid") == (6, 1)


def test_the_environment_sets_every_role_and_the_flags_beat_it() -> None:
    env = {"OMP_NUM_THREADS": "3"}
    plan = plan_threads(16, 1, 1, "async", env=env)
    assert (plan.trainer, plan.pserver, plan.master) == (3, 3, 3)
    assert "OMP_NUM_THREADS=3 from the environment" in plan.reason
    assert _counts(16, 1, 1, env=env, trainer_threads=6) == (6, 3)
    assert _counts(16, 1, 1, pserver_threads=2) == (15, 2)


@pytest.mark.parametrize(("kw", "message"), [
    ({"trainer_threads": 0}, "--trainer-threads=0 must be >= 1"),
    ({"pserver_threads": -2}, "--pserver-threads=-2 must be >= 1"),
    ({"env": {"OMP_NUM_THREADS": "four"}}, "OMP_NUM_THREADS='four' in the environment"),
    ({"env": {"OMP_NUM_THREADS": "0"}}, "OMP_NUM_THREADS='0' in the environment"),
])
def test_bad_counts_are_refused_naming_the_value(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_threads(2, 1, 1, "async", **kw)  # type: ignore[arg-type]


def test_every_role_is_given_its_count(tmp_path: Path) -> None:
    opts = LaunchOptions(script="train.py", trainers=2, pservers=1, trainer_threads=3,
                         pserver_threads=2)
    specs = build_specs(opts, tmp_path, "file:///x.db", "job", {})
    assert {(s.role, s.env["OMP_NUM_THREADS"]) for s in specs} == {
        ("master", "1"), ("pserver", "2"), ("trainer", "3")}
    mine = build_specs(LaunchOptions(script="train.py"), tmp_path, "file:///x.db", "job",
                       {"OMP_NUM_THREADS": "5"})
    assert {s.env["OMP_NUM_THREADS"] for s in mine} == {"5"}


def test_the_flags_reach_the_options_and_the_split_is_printed(tmp_path: Path) -> None:
    args = build_parser().parse_args(["run", "--trainer-threads", "4", "--pserver-threads",
                                      "2", "train.py"])
    assert (args.trainer_threads, args.pserver_threads) == (4, 2)
    script = tmp_path / "train.py"
    script.write_text("")
    launch = Launch(LaunchOptions(script=str(script), workdir=str(tmp_path / "w"),
                                  job_name="job", trainer_threads=4), out=io.StringIO(),
                    err=io.StringIO())
    line = launch.threads.line("job")
    assert "each trainer 4 threads, each pserver 1 thread" in line
    assert "--trainer-threads given" in line
    assert launch.threads.summary()["trainer"] == 4


def test_a_job_plans_for_the_cores_it_may_run_on() -> None:
    # Started by taskset on one core of this machine, the launcher plans for one core, as
    # torch's own default does there; not for every core of the machine.
    script = ("from elasticps.launch.launcher import LaunchOptions, thread_plan; import torch; "
              "plan = thread_plan(LaunchOptions(script='train.py'), 'async', {}); "
              "print(plan.cpus, torch.get_num_threads())")
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]
