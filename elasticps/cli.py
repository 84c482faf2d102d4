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
import sys
from collections.abc import Sequence

from elasticps.errors import ElasticPSError
from elasticps.launch.parent_watch import OPTION as EXIT_WITH_PARENT
from elasticps.launch.parent_watch import exit_with_parent
from elasticps.telemetry.logfmt import FORMATS, process_node
from elasticps.telemetry.logfmt import configure as configure_logging
from elasticps.telemetry.stream_capture import capture as capture_output
from elasticps.version import __version__

# Order is the order of `elasticps --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "elasticps.launch.cli",     # run, trainer
    "elasticps.master.cli",     # master
    "elasticps.pserver.cli",    # pserver, checkpoint
    "elasticps.data.cli",       # data
    "elasticps.chaos.cli",      # chaos
    "elasticps.cluster.cli",    # submit, delete, list, autoscale
    "elasticps.cluster.code_cli",  # code pack|unpack
    "elasticps.jobs_cli",       # status, logs, scale, ui (local and cluster jobs)
    "elasticps.store.cli",      # store
    "elasticps.config_cli",     # env
)

# The commands a launcher starts as a job's processes (the others are a person's).
ROLE_COMMANDS = ("master", "pserver", "trainer")

EPILOG = """\
Start here:
  elasticps run --trainers 2 --pservers 2 --workdir /tmp/ctr examples/ctr/train.py
      train the CTR demo on this machine (embedded store, no setup)
  elasticps env
      every PADDLE_* variable elasticps reads, with defaults

Run `elasticps COMMAND --help` for a command's options.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elasticps",
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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
        return int(args.func(args) or 0)
    except ElasticPSError as exc:
        print(f"elasticps: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
