"""``elasticps env``: print the environment contract, or check the current environment."""

from __future__ import annotations

import argparse
from typing import Any

from elasticps.config import ENV_VARS, Config, alias_of, load_config


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "env",
        help="list every PADDLE_* variable elasticps reads",
        description="List the environment contract; with --check, validate the current "
        "environment and print the resulting configuration.",
    )
    parser.add_argument("--check", action="store_true",
                        help="validate the current environment and print the config")
    parser.set_defaults(func=run)


def mask(value: str) -> str:
    """How a secret value is shown: whether it is set and how long, never its characters."""
    return f"<set, {len(value)} characters, not shown>" if value else "<empty>"


def run(args: argparse.Namespace) -> int:
    if args.check:
        config = load_config()
        secret = {var.name for var in ENV_VARS if var.secret}
        for key, value in sorted(config.to_env().items()):
            print(f"{key}={mask(value) if key in secret else value}")
        return 0
    defaults = Config()
    print(f"{'variable':<30} {'default':<12} meaning")
    for var in ENV_VARS:
        default = getattr(defaults, var.field)
        alias = alias_of(var)
        shown = "-" if default in (None, "", ()) else str(default)
        extra = f" (alias {alias})" if alias else ""
        print(f"{var.name:<30} {shown:<12} {var.doc}{extra}")
    return 0
