"""The ``elasticps`` command line. Each subsystem registers its own subcommands.

A subsystem's ``cli.py`` exposes ``register(subparsers)``, adding parsers whose ``func``
default takes the parsed ``argparse.Namespace`` and returns an exit code.

Every command registers at every start (``elasticps --help``, and each role process that
``elasticps run`` starts), so a ``cli.py`` imports at module level only what its parsers need;
what a command needs to run (grpc, pyarrow, the launcher...) it imports in its function
(tests/unit/test_cli.py checks that building the parser loads none of them).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from elasticps.errors import CONFIG_EXIT_CODE, ConfigError, ElasticPSError
from elasticps.launch.parent_watch import OPTION as EXIT_WITH_PARENT
from elasticps.launch.parent_watch import exit_with_parent
from elasticps.telemetry.logfmt import FORMATS, process_node
from elasticps.telemetry.logfmt import configure as configure_logging
from elasticps.telemetry.stream_capture import capture as capture_output
from elasticps.version import __version__

# The order the commands register in (`elasticps --help` lists them by COMMAND_GROUPS).
COMMAND_MODULES: tuple[str, ...] = (
    "elasticps.launch.cli",     # run, trainer
    "elasticps.master.cli",     # master
    "elasticps.pserver.cli",    # pserver, checkpoint
    "elasticps.data.cli",       # data
    "elasticps.chaos.cli",      # chaos
    "elasticps.cluster.cli",    # submit, delete, autoscale
    "elasticps.cluster.code_cli",  # code pack|unpack
    "elasticps.jobs_cli",       # status, logs, scale, ui, stop, list (local and cluster jobs)
    "elasticps.store.cli",      # store
    "elasticps.telemetry.cli",  # monitoring export
    "elasticps.serve.cli",      # serve
    "elasticps.config_cli",     # env
)

# The commands a launcher starts as a job's processes (the others are a person's).
ROLE_COMMANDS = ("master", "pserver", "trainer")

# `elasticps --help` lists a person's commands in these groups, in this order. The entry points
# that `elasticps run` and a cluster's pods start (the roles, and the reshard Job's `reshard`)
# work as before but are left out of the list. Every command is in exactly one of the two
# (build_parser checks), so a new command has to be placed.
COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run a job", ("run", "stop", "scale", "chaos", "env")),
    ("inspect a job", ("list", "status", "logs", "ui", "store", "checkpoint")),
    ("data", ("data",)),
    ("serve a model", ("serve",)),
    ("cluster", ("submit", "delete", "autoscale", "code", "monitoring")),
)
INTERNAL_COMMANDS: tuple[str, ...] = (*ROLE_COMMANDS, "reshard")
# A role process (`elasticps run` starts them, so do a cluster's pods) registers its own
# command's module only: importing every other command's module would cost each role process a
# tenth of a second of CPU at its start.
ROLE_MODULES: dict[str, str] = {
    "master": "elasticps.master.cli",
    "pserver": "elasticps.pserver.cli",
    "trainer": "elasticps.launch.cli",
}

EPILOG = """\
Start here:
  elasticps run --trainers 2 --pservers 2 --workdir /tmp/ctr examples/ctr/train.py
      train the CTR demo on this machine (embedded store, no setup)
  elasticps logs --workdir /tmp/ctr -f
      every process's log, merged by time, followed until the job ends
  elasticps stop --workdir /tmp/ctr
      stop it gracefully (`elasticps list`: the local jobs you started)
  elasticps env
      every PADDLE_* variable elasticps reads, with defaults

Run `elasticps COMMAND --help` for a command's options.
"""


class _Commands:
    """The subparsers action, keeping each command's one-line help for the grouped list."""

    def __init__(self, action: Any) -> None:
        self.action = action
        self.help: dict[str, str] = {}

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        self.help[name] = str(kwargs.get("help") or "")
        parser: argparse.ArgumentParser = self.action.add_parser(name, **kwargs)
        return parser

    @property
    def choices(self) -> dict[str, argparse.ArgumentParser]:
        """The parsers added so far, by command (a module may extend another's)."""
        choices: dict[str, argparse.ArgumentParser] = self.action.choices
        return choices


def _list_commands(parser: argparse.ArgumentParser, commands: _Commands) -> None:
    grouped = [name for _, names in COMMAND_GROUPS for name in names]
    placed = sorted(grouped + list(INTERNAL_COMMANDS))
    if placed != sorted(commands.help):
        raise RuntimeError(f"elasticps commands {sorted(commands.help)} and their places in "
                           f"COMMAND_GROUPS/INTERNAL_COMMANDS {placed} differ")
    width = max(len(name) for name in grouped) + 2
    for title, names in COMMAND_GROUPS:
        lines = [textwrap.fill(commands.help[name], 76, initial_indent=f"{name:<{width}}",
                               subsequent_indent=" " * width, break_on_hyphens=False)
                 for name in names]
        parser.add_argument_group(title, "\n".join(lines))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line, or, when ``argv`` runs a role (:data:`ROLE_MODULES`), the part
    that parses it."""
    parser = argparse.ArgumentParser(
        prog="elasticps",
        usage="%(prog)s [-h] [--version] [-v] [--log-format {text,json}] COMMAND ...",
        description="Elastic, fault-tolerant parameter-server training for PyTorch models.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"elasticps {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (-vv for debug)")
    parser.add_argument("--log-format", choices=FORMATS, default=None,
                        help="log lines as text (naming job, role and node) or JSON lines "
                             "(default: PADDLE_LOG_FORMAT, else text)")
    # Set by `elasticps run` on the roles it starts: they stop when the launcher dies
    # (elasticps/launch/parent_watch.py). Hidden: not for people.
    parser.add_argument(EXIT_WITH_PARENT, type=int, metavar="PID", help=argparse.SUPPRESS)
    # The commands are listed by _list_commands, in groups, not by argparse in one flat list.
    commands = _Commands(parser.add_subparsers(dest="command", metavar="COMMAND",
                                               prog="elasticps", help=argparse.SUPPRESS))
    role = _command(argv) if argv is not None else None
    if role in ROLE_MODULES:
        importlib.import_module(ROLE_MODULES[role]).register(commands)
        return parser
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(commands)
    _list_commands(parser, commands)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is no option and no option's value."""
    takes_value = {"--log-format", EXIT_WITH_PARENT}
    words = iter(argv)
    for word in words:
        if word in takes_value:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    fmt = args.log_format or os.environ.get("PADDLE_LOG_FORMAT", "").strip().lower() or "text"
    if fmt not in FORMATS:
        print(f"elasticps: error: PADDLE_LOG_FORMAT={fmt!r} is not one of {', '.join(FORMATS)}",
              file=sys.stderr)
        return 2
    role = args.command if args.command in ROLE_COMMANDS else (
        "launcher" if args.command == "run" else os.environ.get("PADDLE_ROLE") or args.command)
    trainer_id = os.environ.get("PADDLE_TRAINER_ID", "")
    node = process_node(role, int(trainer_id) if trainer_id.isdigit() else None) \
        if role in ROLE_COMMANDS else None
    configure_logging(level, fmt, job=os.environ.get("PADDLE_JOB_NAME"), role=role, node=node)
    if fmt == "json" and args.command in ROLE_COMMANDS:
        # A role's log is one JSON record per line: the user's prints and tracebacks too.
        capture_output()
    launcher = args.exit_with_parent
    if launcher is not None and not exit_with_parent(launcher):
        print(f"elasticps: the launcher (pid {launcher}) that started this {args.command} has "
              "already exited; exiting", file=sys.stderr)
        return 1
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe can still be answered quietly
        return code
    except BrokenPipeError:
        return closed_pipe()
    except ConfigError as exc:
        print(f"elasticps: error: {exc}", file=sys.stderr)
        # A role's supervisor must tell "fix the configuration" from "restart me".
        return CONFIG_EXIT_CODE if args.command in ROLE_COMMANDS else 1
    except ElasticPSError as exc:
        print(f"elasticps: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def closed_pipe() -> int:
    """What stdout went to has closed (``elasticps data inspect DIR | head``): stop without a
    traceback and with the status of a command SIGPIPE ended (128 + 13 = 141), as ``seq`` or
    ``cat`` give ``head`` and ``set -o pipefail`` users expect."""
    try:  # what is still buffered must not fail again when the interpreter flushes at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind stdout (a test's StringIO)
        pass
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
