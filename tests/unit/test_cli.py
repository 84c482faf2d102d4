"""The ``elasticps`` command line itself: building it imports no heavy package, it runs from a
user's shell, and the in-process runner the CLI tests use (``tests.helpers.run_cli``) sees what
a process would and leaves this one as it found it."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from elasticps import cli, config_cli
from elasticps.telemetry import logfmt
from elasticps.version import __version__
from tests.helpers import REPO, run_cli

# Packages some command needs when it runs and `elasticps --help` never needs (each takes from a
# tenth of a second to seconds to import): building the parser must load none of them.
HEAVY = ("aetcd", "cryptography", "fsspec", "google", "grpc", "kubernetes", "numpy", "pandas",
         "prometheus_client", "pyarrow", "rich", "safetensors", "torch", "yaml")


def test_building_the_parser_imports_no_heavy_package() -> None:
    script = ("import sys, elasticps.cli; elasticps.cli.build_parser(); "
              "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))")
    done = subprocess.run([sys.executable, "-c", script, *HEAVY], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"building the parser imported {done.stdout.strip()}"


@pytest.mark.parametrize(("argv", "command", "module"), [
    (["--exit-with-parent=1", "-v", "master"], "master", "elasticps.master.cli"),
    (["--log-format", "json", "pserver"], "pserver", "elasticps.pserver.cli"),
    (["-v", "trainer", "train.py", "--lr", "1"], "trainer", "elasticps.launch.cli"),
])
def test_a_role_process_imports_only_its_own_commands_module(argv: list[str], command: str,
                                                             module: str) -> None:
    """Every process of a job starts through this parser: the other commands' modules would
    cost each a tenth of a second."""
    script = ("import sys, elasticps.cli as c; args = c.build_parser(sys.argv[1:])"
              ".parse_args(sys.argv[1:]); "
              "print(args.command, sorted(m for m in c.COMMAND_MODULES if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [command, f"['{module}']"]


def test_python_m_elasticps_runs_from_a_users_shell(tmp_path: Path) -> None:
    """The installed package, as a shell without PYTHONPATH starts it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "elasticps", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for command in ("run", "stop", "data", "chaos", "submit", "status", "logs", "list", "env"):
        assert f"\n  {command} " in done.stdout, command
    assert "Run `elasticps COMMAND --help`" in done.stdout


def test_help_lists_a_persons_commands_in_groups_and_hides_the_role_entry_points() -> None:
    shown = run_cli("--help")
    assert shown.returncode == 0
    sections: dict[str, list[str]] = {}
    current = None
    for line in shown.stdout.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and not line.startswith("   "):
            current.append(line.split()[0])
    groups = {title: names for title, names in sections.items()
              if title in ("run a job", "inspect a job", "data", "serve a model", "cluster")}
    assert list(groups) == ["run a job", "inspect a job", "data", "serve a model", "cluster"]
    assert groups == {title: list(names) for title, names in cli.COMMAND_GROUPS}
    assert {"stop", "list", "logs", "run", "ui"} <= {n for ns in groups.values() for n in ns}
    listed = shown.stdout.split("\nStart here:")[0]
    for internal in ("master", "pserver", "trainer", "reshard"):
        assert f"  {internal} " not in listed, internal
        entry = run_cli(internal, "--help")  # hidden, still there
        assert entry.returncode == 0, internal
        assert entry.stdout.startswith(f"usage: elasticps {internal}"), internal


def test_every_command_has_a_place_in_the_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMAND_GROUPS", tuple(
        (title, tuple(n for n in names if n != "stop")) for title, names in cli.COMMAND_GROUPS))
    with pytest.raises(RuntimeError, match="stop"):
        cli.build_parser()


def test_run_cli_answers_with_the_exit_codes_of_a_process() -> None:
    version = run_cli("--version")
    assert (version.returncode, version.stdout, version.stderr) == (
        0, f"elasticps {__version__}\n", "")
    shown = run_cli("env", "--help")
    assert (shown.returncode, shown.stderr) == (0, "")
    assert "--check" in shown.stdout
    wrong = run_cli("no-such-command")
    assert wrong.returncode == 2
    assert "invalid choice: 'no-such-command'" in wrong.stderr
    assert run_cli().returncode == 2  # no command: the help, and 2


def test_run_cli_captures_a_crash_and_puts_the_process_back(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def late_line() -> None:
        time.sleep(0.2)
        print("a thread's last line")

    def crash(args: argparse.Namespace) -> int:
        logging.getLogger("elasticps.test").info("a log line in %s", os.getcwd())
        warnings.warn("a warning the user sees", UserWarning, stacklevel=1)
        print(f"PADDLE_PORT={os.environ.get('PADDLE_PORT')} HOME={os.environ.get('HOME')}")
        os.environ["LEFT_BEHIND"] = "1"
        signal.signal(signal.SIGUSR1, lambda *_: None)
        threading.Thread(target=late_line).start()  # not a daemon: the process waits for it
        raise RuntimeError("the command broke")

    monkeypatch.setattr(config_cli, "run", crash)
    root = logging.getLogger()
    handlers, level, context = list(root.handlers), root.level, logfmt.context()
    usr1, environ, cwd = signal.getsignal(signal.SIGUSR1), dict(os.environ), os.getcwd()

    done = run_cli("-v", "env", env={"PADDLE_PORT": "7"}, cwd=tmp_path)
    assert done.returncode == 1
    # the environment given, and only it; a thread's output before the process would end
    assert done.stdout == "PADDLE_PORT=7 HOME=None\na thread's last line\n"
    assert "INFO [job " in done.stderr  # the log line, as `elasticps -v` formats it
    assert f"role env node {context['node']}] elasticps.test: a log line in {tmp_path}" \
        in done.stderr
    assert "UserWarning: a warning the user sees" in done.stderr
    assert done.stderr.rstrip().endswith("RuntimeError: the command broke")

    assert (list(root.handlers), root.level, logfmt.context()) == (handlers, level, context)
    assert (signal.getsignal(signal.SIGUSR1), dict(os.environ), os.getcwd()) == (
        usr1, environ, cwd)


def test_run_help_lists_every_training_mode_hybrid_included() -> None:
    shown = run_cli("run", "--help")
    assert "{async,sync,geo,hybrid}" in shown.stdout
    assert "hybrid (dense parameters replicated on the trainers" in " ".join(shown.stdout.split())
