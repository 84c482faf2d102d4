"""``elasticps store`` against a real embedded store file, through the command line's ``main``."""

from __future__ import annotations

import os
from pathlib import Path

from elasticps.store import open_store
from tests.helpers import REPO, CliResult, run_cli


def elasticps(*args: str) -> CliResult:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    return run_cli(*args, cwd=REPO, env=env)


def test_store_cli_lists_gets_watches_and_names_the_leader(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/job.db"
    with open_store(url, "ctr") as store:
        store.put("pserver/slot/1", b'{"address": "h:2"}')
        first = store.put("pserver/slot/0", b'{"address": "h:1"}')
        store.put("master/election", b"m1")
    with open_store(url, "other") as store:
        store.put("pserver/slot/9", b"not ours")
    ls = elasticps("store", "--store", url, "--job", "ctr", "ls", "pserver/")
    assert ls.returncode == 0, ls.stderr
    lines = ls.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["pserver/slot/0", "pserver/slot/1"]
    assert lines[-1] == "# revision 5"  # the revision is the whole store's, not the job's
    get = elasticps("store", "--store", url, "--job", "ctr", "get", "pserver/slot/0")
    assert get.stdout.strip() == '{"address": "h:1"}'
    watch = elasticps("store", "--store", url, "--job", "ctr", "watch", "pserver/",
                      "--from-revision", str(first), "--timeout", "0.5")
    assert watch.stdout.splitlines() == [f'{first} PUT pserver/slot/0 {{"address": "h:1"}}']
    leader = elasticps("store", "--store", url, "--job", "ctr", "leader")
    assert leader.stdout.strip() == "m1"


def test_store_cli_errors_name_what_is_missing(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/job.db"
    missing = elasticps("store", "--store", url, "--job", "ctr", "get", "nope")
    assert missing.returncode == 1
    assert "'nope' does not exist" in missing.stderr
    no_store = elasticps("store", "ls")
    assert no_store.returncode == 1
    assert "PADDLE_STORE" in no_store.stderr
    nobody = elasticps("store", "--store", url, "--job", "ctr", "leader")
    assert nobody.returncode == 1
    assert "nobody holds 'master/election'" in nobody.stdout
