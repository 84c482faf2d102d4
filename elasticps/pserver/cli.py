"""``elasticps pserver`` (the role), ``elasticps reshard`` (a one-shot commit of a resharding)
and ``elasticps checkpoint inspect URL``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from elasticps.config import load_config

PSERVER_HELP = """\
Run one parameter server: it claims a free slot pserver/slot/<i> of N in the store, restores
that slot's newest good checkpoint, serves shard i of every table, and checkpoints every
PADDLE_CHECKPOINT_INTERVAL seconds. SIGTERM stops it cleanly (a final checkpoint, then the slot
is released). Configuration comes from the environment: PADDLE_STORE, PADDLE_JOB_NAME,
PADDLE_JOB_TOKEN, PADDLE_NUM_PSERVERS, PADDLE_HOST, PADDLE_PORT (0 = any free port),
PADDLE_CHECKPOINT_URL/_INTERVAL/_KEEP, PADDLE_LEASE_TTL (see `elasticps env`).
"""

RESHARD_HELP = """\
Move a stopped job's pserver tables onto M shards: wait (at most --wait seconds) until no
pserver slot of the job is held, re-split every shard's newest checkpoint (dense and sparse
tables, optimizer state, applied batches) into M, and publish the new layout (pserver/layout)
in one store transaction. Pservers started afterwards serve M shards and trainers route by it.
Nothing changes unless the commit succeeds. `elasticps scale JOB --pservers M` runs this in a
one-shot Job on a cluster, after stopping the pservers; it reads the pserver's environment:
PADDLE_STORE, PADDLE_JOB_NAME, PADDLE_NUM_PSERVERS (the count before any resharding),
PADDLE_CHECKPOINT_URL/_KEEP (see `elasticps env`).

example:
  elasticps reshard --pservers 3 --wait 60
"""

INSPECT_HELP = """\
Show what pserver checkpoints hold and whether their sha256 checksums hold. URL may be a
manifest (ckpt-<id>.json), a data file (ckpt-<id>.safetensors), a shard directory
(shard-<i>-of-<N>) or the checkpoint root (PADDLE_CHECKPOINT_URL). Exit code 1 if any checkpoint
is corrupt.

example:
  elasticps checkpoint inspect file:///tmp/ctr/checkpoints
"""


def register(subparsers: Any) -> None:
    pserver = subparsers.add_parser(
        "pserver", help="run one parameter server (the role a container runs)",
        description=PSERVER_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    pserver.set_defaults(func=run_pserver)

    reshard = subparsers.add_parser(
        "reshard", help="commit a resharding of a stopped job's pservers onto M shards",
        description=RESHARD_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    reshard.add_argument("--pservers", type=int, required=True, metavar="M",
                         help="the number of pserver shards the job should have")
    reshard.add_argument("--wait", type=float, default=120.0, metavar="S",
                         help="seconds to wait for the old pservers' slots to be released "
                              "(default 120)")
    reshard.set_defaults(func=run_reshard)

    checkpoint = subparsers.add_parser(
        "checkpoint", help="look into pserver checkpoints",
        description="Tools for pserver checkpoints.")
    sub = checkpoint.add_subparsers(dest="checkpoint_command", metavar="SUBCOMMAND")
    inspect = sub.add_parser(
        "inspect", help="show tables, rows, optimizer, shard and checksum of checkpoints",
        description=INSPECT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    inspect.add_argument("url", metavar="URL", help="fsspec URL or path of checkpoints")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.set_defaults(func=run_inspect)


def run_pserver(args: argparse.Namespace) -> int:
    from elasticps.pserver.server import main

    return main(load_config(role="pserver"))


def run_reshard(args: argparse.Namespace) -> int:
    from elasticps.pserver.layout_change import reshard

    config = load_config(role="pserver")

    def say(message: str) -> None:
        print(f"elasticps reshard: job {config.job_name}: {message}", flush=True)

    change = reshard(config, args.pservers, wait_s=args.wait, say=say)
    say(change.summary)
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from elasticps.pserver.checkpoint_inspect import format_report, inspect_url

    reports = inspect_url(args.url)
    if args.json:
        print(json.dumps(reports, indent=2, sort_keys=True))
    else:
        print("\n".join(format_report(r) for r in reports))
    return 0 if all(r.get("checksum_ok") for r in reports) else 1
