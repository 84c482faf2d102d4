"""`elasticps reshard --pservers M` (what a cluster's reshard Job runs), from a pserver's
environment, against an embedded store and real checkpoint files: it commits 2 -> 3, waits for a
held slot to be released (a real process, which the test frees while it waits), and refuses,
changing nothing, while one stays held."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from elasticps.store import Store, open_store
from elasticps.store.keys import (
    PSERVER_CHECKPOINT_PREFIX,
    PServerSlot,
    pserver_slot,
    read_pserver_layout,
)
from tests.helpers import CliResult, run_cli
from tests.unit.pserver.test_reshard_commit import _checkpointed_job, _restored

JOB = "reshard"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"file://{tmp_path}/job.db", JOB) as handle:
        yield handle


def pserver_env(tmp_path: Path) -> dict[str, str]:
    """What the reshard pod inherits from the pserver template (the parts the commit reads)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    return {**env, "PADDLE_STORE": f"file://{tmp_path}/job.db", "PADDLE_JOB_NAME": JOB,
            "PADDLE_ROLE": "pserver", "PADDLE_NUM_PSERVERS": "2",
            "PADDLE_CHECKPOINT_URL": str(tmp_path / "ckpt")}


def reshard(tmp_path: Path, *args: str) -> CliResult:
    return run_cli("reshard", *args, env=pserver_env(tmp_path))


def reshard_process(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "elasticps", "reshard", *args],
                            env=pserver_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def manifests(store: Store) -> list[str]:
    return sorted(kv.key for kv in store.get_prefix(PSERVER_CHECKPOINT_PREFIX))


def test_the_command_commits_two_to_three_from_the_pserver_environment(
        store: Store, tmp_path: Path) -> None:
    old = _checkpointed_job(store, str(tmp_path / "ckpt"), 2)
    done = reshard(tmp_path, "--pservers", "3", "--wait", "5")
    assert done.returncode == 0, done.stderr
    assert "elasticps reshard: job reshard: resharded 2 -> 3 pservers (generation 1" in done.stdout
    layout = read_pserver_layout(store)
    assert layout is not None
    assert (layout.shards, layout.generation) == (3, 1)
    new = _restored(store, str(tmp_path / "ckpt"), 3)
    np.testing.assert_array_equal(new.dense(), old.dense())
    np.testing.assert_array_equal(new.rows(), old.rows())

    # Run again (a reshard pod killed after its commit, then `scale` rerun): nothing to do.
    done = reshard(tmp_path, "--pservers", "3", "--wait", "5")
    assert done.returncode == 0, done.stderr
    assert "already has 3 pserver shards (generation 1); nothing to do" in done.stdout
    assert read_pserver_layout(store).generation == 1  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_command_waits_for_a_held_slot_then_commits(store: Store, tmp_path: Path) -> None:
    _checkpointed_job(store, str(tmp_path / "ckpt"), 2)
    store.put(pserver_slot(0), PServerSlot("10.0.0.7:7164").encode())
    proc = reshard_process(tmp_path, "--pservers", "3", "--wait", "60")
    assert proc.stdout is not None
    line = proc.stdout.readline()  # it says it waits before it polls: our cue, not a sleep
    assert "waiting up to 60s for pserver slot(s) [0] of 2 to be released" in line
    assert read_pserver_layout(store) is None
    store.delete(pserver_slot(0))  # the old pserver's lease expired
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "resharded 2 -> 3 pservers" in out
    assert read_pserver_layout(store).shards == 3  # type: ignore[union-attr]


def test_the_command_refuses_while_a_slot_stays_held_and_changes_nothing(
        store: Store, tmp_path: Path) -> None:
    _checkpointed_job(store, str(tmp_path / "ckpt"), 2)
    store.put(pserver_slot(1), PServerSlot("10.0.0.8:7164").encode())
    before = manifests(store)
    done = reshard(tmp_path, "--pservers", "3", "--wait", "0.2")
    assert done.returncode == 1
    assert "elasticps: error: pserver slot(s) [1] of 2 are still held after 0.2s" in done.stderr
    assert read_pserver_layout(store) is None
    assert manifests(store) == before
    assert not (tmp_path / "ckpt" / "shard-0-of-3").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--pservers", "0"], "--pservers=0 must be in [1, 1000]"),
    (["--pservers", "3", "--wait", "-1"], "--wait=-1 must be >= 0 seconds"),
])
def test_bad_arguments_are_named_and_change_nothing(store: Store, tmp_path: Path,
                                                    args: list[str], message: str) -> None:
    _checkpointed_job(store, str(tmp_path / "ckpt"), 2)
    done = reshard(tmp_path, *args)
    assert done.returncode == 1
    assert message in done.stderr
    assert read_pserver_layout(store) is None


def test_show_layout_reads_it_and_both_commands_leave_it_in_the_layout_file(
        store: Store, tmp_path: Path) -> None:
    """What a cluster's reshard and layout pods write to their termination message, the only
    way `elasticps scale` (talking to the API server alone) learns the job's layout."""
    _checkpointed_job(store, str(tmp_path / "ckpt"), 2)
    before = manifests(store)
    shown = tmp_path / "shown.json"
    done = reshard(tmp_path, "--show-layout", "--layout-file", str(shown))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(shown.read_text()) == {"generation": 0,
                                                                        "shards": 2}
    assert read_pserver_layout(store) is None
    assert manifests(store) == before

    committed = tmp_path / "committed.json"
    done = reshard(tmp_path, "--pservers", "3", "--wait", "5", "--layout-file", str(committed))
    assert done.returncode == 0, done.stderr
    assert json.loads(committed.read_text()) == {"generation": 1, "shards": 3}
    done = reshard(tmp_path, "--show-layout")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"generation": 1, "shards": 3}


@pytest.mark.parametrize(("args", "message"), [
    (["--show-layout", "--pservers", "3"], "not allowed with argument"),
    ([], "one of the arguments --pservers --show-layout is required"),
    (["--show-layout", "--layout-file", "/nonexistent/dir/layout"],
     "--layout-file=/nonexistent/dir/layout: cannot write the layout there"),
])
def test_show_layout_arguments_are_checked(store: Store, tmp_path: Path, args: list[str],
                                           message: str) -> None:
    done = reshard(tmp_path, *args)
    assert done.returncode != 0
    assert message in done.stderr
