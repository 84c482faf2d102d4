"""What a job writes is its owner's alone, and what it trusts must be its owner's.

A second user of the machine (a real account, tests/security/second_user.py) tries to read a
finished job's token, logs, store, checkpoints and dataset, with the victim's umask at its
widest (0): every file must be 0600, every directory 0700, and the second user must open none.
The token reaches the roles as a file: it is in no process's environment, so the user's script
and what it starts never see it. And a role started by hand refuses TLS files, a store or a
token file that the second user owns."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from elasticps.config import load_config
from elasticps.data import write_dataset
from elasticps.errors import ConfigError
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.rpc.tls import TlsIdentity, write_job_identities
from elasticps.store.embedded_store import EmbeddedStore
from tests.helpers import REPO
from tests.security.second_user import SecondUser

SCRIPT = REPO / "tests/security/scripts/private_job.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _everything_under(*roots: Path) -> list[Path]:
    return [path for root in roots for path in (root, *sorted(root.rglob("*")))]


def _assert_owners_only(paths: list[Path]) -> None:
    wider = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in paths
             if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)}
    assert wider == {}


def test_a_finished_jobs_files_are_closed_to_another_user_and_the_token_to_its_script(
        attacker: SecondUser, shared: Path) -> None:
    data, checkpoints, workdir = shared / "data", shared / "ckpt", shared / "ctr"
    synth = subprocess.run(
        [sys.executable, "-m", "elasticps", "data", "synth", "ctr", "--rows", "2000",
         "--test-rows", "500", "--seed", "1", "--max-vocab", "50", "--rows-per-chunk", "500",
         "--out", str(data), "--no-progress"],
        env=ENV, capture_output=True, text=True, timeout=120, check=False, umask=0)
    assert synth.returncode == 0, synth.stderr
    job = subprocess.run(
        [sys.executable, "-m", "elasticps", "run", "--workdir", str(workdir), "--job-name",
         "private", "--standby-masters", "0", "--grace", "5", str(SCRIPT), "--data", str(data)],
        env={**ENV, "PADDLE_CHECKPOINT_URL": str(checkpoints),
             "PADDLE_CHECKPOINT_INTERVAL": "0.2"},
        capture_output=True, text=True, timeout=240, check=False, umask=0)
    assert job.returncode == 0, job.stderr[-4000:]

    trainer_log = (workdir / "logs" / "trainer-0.log").read_text()
    report = "token given: False; in os.environ: False; in a child: False"
    assert trainer_log.count(report) == 2, trainer_log[-3000:]  # before and after training
    assert (workdir / "token").read_text().strip()  # the roles read it from there

    written = _everything_under(workdir, data, checkpoints)
    assert any(p.suffix == ".safetensors" for p in written)  # a checkpoint was written
    assert any(p.suffix == ".parquet" for p in written)
    _assert_owners_only(written)
    assert attacker.readable(written) == []


def test_a_dataset_written_through_the_api_is_private_whatever_the_umask(
        attacker: SecondUser, shared: Path) -> None:
    out = shared / "table"
    old = os.umask(0)
    try:
        write_dataset({"y": [0, 1, 1, 0], "x": [0.5, 1.5, 2.5, 3.5]}, str(out),
                      {"label": "y", "columns": {"x": {"kind": "dense"}}}, rows_per_chunk=2)
    finally:
        os.umask(old)
    written = _everything_under(out)
    assert len(written) >= 3  # the directory, a Parquet file and the manifest
    _assert_owners_only(written)
    assert attacker.readable(written) == []


def test_a_role_refuses_tls_files_another_user_owns(attacker: SecondUser,
                                                    tmp_path: Path) -> None:
    """The swap that sent the token away: another CA in tls/, owned by the other user."""
    identity = write_job_identities(tmp_path / "tls", "victim")["trainer"]
    for path in (identity, identity / "ca.crt"):
        os.chown(path, attacker.uid, attacker.gid)
        with pytest.raises(ConfigError, match=rf"'{path}' \(owner {attacker.name} "
                                              rf"\(uid {attacker.uid}\).*another user"):
            TlsIdentity.load(identity)
        os.chown(path, 0, 0)
    TlsIdentity.load(identity)  # the user's own again


def test_a_role_refuses_a_store_another_user_owns(attacker: SecondUser, tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with EmbeddedStore(path, "/job/") as store:
        store.put("master/address", b"the victim's")
    os.chown(path, attacker.uid, attacker.gid)
    with pytest.raises(ConfigError, match=rf"embedded store file '{path}' \(owner "
                                          rf"{attacker.name}"):
        EmbeddedStore(path, "/job/")


def test_a_role_refuses_a_token_file_another_user_owns(attacker: SecondUser,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("a token the other user chose\n")
    path.chmod(0o600)
    assert load_config({"PADDLE_JOB_TOKEN_FILE": str(path)}).token == \
        "a token the other user chose"
    os.chown(path, attacker.uid, attacker.gid)
    with pytest.raises(ConfigError, match=rf"PADDLE_JOB_TOKEN_FILE '{path}' \(owner "
                                          rf"{attacker.name}"):
        load_config({"PADDLE_JOB_TOKEN_FILE": str(path)})


def test_a_token_given_in_the_environment_stays_out_of_the_scripts_environment(
        tmp_path: Path) -> None:
    """A cluster's trainer container gets PADDLE_JOB_TOKEN from the job's Secret: the trainer
    keeps it for itself and takes it out of the environment before the user's script runs."""
    script = tmp_path / "train.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "from elasticps.config import load_config\n"
        "child = subprocess.run([sys.executable, '-c', 'import os; "
        "print(\"PADDLE_JOB_TOKEN\" in os.environ)'], capture_output=True, text=True)\n"
        "print('in os.environ:', 'PADDLE_JOB_TOKEN' in os.environ, '; in a child:',\n"
        "      child.stdout.strip(), '; the trainer has it:',\n"
        "      load_config().token == 'the-secret-token')\n")
    done = subprocess.run(
        [sys.executable, "-m", "elasticps", "trainer", str(script)],
        env={**ENV, "PADDLE_STORE": f"file://{tmp_path}/store.db", "PADDLE_JOB_NAME": "j",
             "PADDLE_JOB_TOKEN": "the-secret-token"},
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "in os.environ: False ; in a child: False ; the trainer has it: True\n"


def test_a_checkpoint_or_dataset_directory_another_user_made_first_is_refused(
        attacker: SecondUser, shared: Path) -> None:
    """The other user pre-creates the shard's checkpoint directory or the dataset's directory,
    open to all, so as to delete, swap or plant files in it later: elasticps refuses it, names
    the owner, and writes nothing there."""
    shard_dir = Path(ShardCheckpoints(str(shared / "ckpt"), 0, 1).dir)  # its own: accepted
    shutil.rmtree(shard_dir)
    planted = {shard_dir: lambda: ShardCheckpoints(str(shared / "ckpt"), 0, 1),
               shared / "table": lambda: write_dataset(
                   {"y": [0, 1], "x": [0.5, 1.5]}, str(shared / "table"),
                   {"label": "y", "columns": {"x": {"kind": "dense"}}})}
    for directory, write in planted.items():
        directory.mkdir(mode=0o777)
        directory.chmod(0o777)
        os.chown(directory, attacker.uid, attacker.gid)
        with pytest.raises(ConfigError, match=rf"'{directory}' \(owner {attacker.name} "
                                              r"\(uid \d+\), mode 0777\) belongs to another"):
            write()
        assert list(directory.iterdir()) == []
        assert stat.S_IMODE(directory.stat().st_mode) == 0o777  # left as it was found
