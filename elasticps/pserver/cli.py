"""``elasticps pserver`` (the role), ``elasticps reshard`` (a one-shot commit of a resharding)
and ``elasticps checkpoint inspect URL``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from elasticps.config import load_config
from elasticps.errors import ConfigError

PSERVER_HELP = """\
Run one parameter server: it claims a free slot pserver/slot/<i> of N in the store, restores
that slot's newest good checkpoint, serves shard i of every table, and checkpoints every
PADDLE_CHECKPOINT_INTERVAL seconds. SIGTERM stops it cleanly (a final checkpoint, then the slot
is released). Configuration comes from the environment: PADDLE_STORE, PADDLE_JOB_NAME,
PADDLE_JOB_TOKEN (or PADDLE_JOB_TOKEN_FILE), PADDLE_NUM_PSERVERS, PADDLE_HOST, PADDLE_PORT
(0 = any free port), PADDLE_CHECKPOINT_URL/_INTERVAL/_KEEP, PADDLE_LEASE_TTL (see
`elasticps env`). A configuration error exits 78, which a supervisor must not restart.
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

--show-layout changes nothing: it prints the job's current layout, pserver/layout (or the
starting PADDLE_NUM_PSERVERS at generation 0 before any resharding), as JSON. `elasticps scale`
runs it in a one-shot Job to learn whether a resharding committed, with --layout-file
/dev/termination-log so the API server shows the layout in the pod's status; the reshard Job
passes that too and writes the layout it committed.

examples:
  elasticps reshard --pservers 3 --wait 60
  elasticps reshard --show-layout
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
    action = reshard.add_mutually_exclusive_group(required=True)
    action.add_argument("--pservers", type=int, metavar="M",
                        help="the number of pserver shards the job should have")
    action.add_argument("--show-layout", action="store_true",
                        help="print the job's current pserver layout as JSON "
                             '({"generation": G, "shards": S}) and change nothing')
    reshard.add_argument("--wait", type=float, default=120.0, metavar="S",
                         help="seconds to wait for the old pservers' slots to be released "
                              "(default 120)")
    reshard.add_argument("--layout-file", metavar="PATH",
                         help="also write the job's layout afterwards, as that JSON, to PATH "
                              "(a Kubernetes container's termination message: "
                              "/dev/termination-log)")
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
    from elasticps.pserver.reshard.layout_change import current_layout, reshard, write_layout_file
    from elasticps.store.keys import PServerLayout

    config = load_config(role="pserver")

    def say(message: str) -> None:
        print(f"elasticps reshard: job {config.job_name}: {message}", flush=True)

    if args.show_layout:
        layout = current_layout(config)
        print(layout.encode().decode(), flush=True)
        if args.layout_file:  # the point of the run: failing to write it is failing
            try:
                write_layout_file(args.layout_file, layout)
            except OSError as exc:
                raise ConfigError(f"--layout-file={args.layout_file}: cannot write the layout "
                                  f"there: {exc}") from exc
        return 0
    change = reshard(config, args.pservers, wait_s=args.wait, say=say)
    say(change.summary)
    if args.layout_file:
        try:  # the commit stands either way; the exit status says so
            write_layout_file(args.layout_file,
                              PServerLayout(change.new_shards, change.generation))
        except OSError as exc:
            say(f"could not write the layout to {args.layout_file}: {exc}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from elasticps.pserver.checkpoint.inspection import format_report, inspect_url

    reports = inspect_url(args.url)
    if args.json:
        print(json.dumps(reports, indent=2, sort_keys=True))
    else:
        print("\n".join(format_report(r) for r in reports))
    return 0 if all(r.get("checksum_ok") for r in reports) else 1
