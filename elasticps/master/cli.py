"""``elasticps master``: run the master role (as a container or the local launcher runs it)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

from elasticps.config import load_config
from elasticps.data.batch_plan import BatchPlan
from elasticps.errors import ConfigError, InvalidArgumentError
from elasticps.telemetry.logfmt import set_node

log = logging.getLogger(__name__)

DESCRIPTION = """\
Run the job's master: it hands out the dataset's chunks as tasks to trainers, pass after pass,
and persists every change in the store before answering. Start two for a hot standby: the
second blocks in the election and takes over (resuming from the store) when the first dies.
The leader publishes its gRPC and status addresses at master/address in the store.

Reads PADDLE_STORE, PADDLE_JOB_NAME, PADDLE_JOB_TOKEN (or PADDLE_JOB_TOKEN_FILE),
PADDLE_TLS_DIR (or PADDLE_INSECURE), PADDLE_HOST, PADDLE_HTTP_HOST, PADDLE_LEASE_TTL and
PADDLE_DATA from the environment (see `elasticps env`). Exits 0 on SIGTERM (after resigning
the lead), 1 when it loses the lead, so a supervisor restarts it as a standby, and 78 on a
configuration error (a busy PADDLE_HTTP_PORT, say), which a restart would only repeat.

The dataset is set by the first trainer's SetDataset, with the batch plan of its reader (batch
size, shuffle seed, features): the master counts every task's batches from it and refuses a
trainer that reads differently. --dataset sets it at start instead and then needs
--batch-size (and --shuffle-seed / --features where the trainers' readers set them).
"""

EPILOG = """\
example:
  PADDLE_STORE=file:///tmp/job/job.db PADDLE_JOB_TOKEN_FILE=/tmp/job/token \\
    PADDLE_TLS_DIR=/tmp/job/tls/master \\
    elasticps master --dataset /data/criteo --chunks-per-task 2 --num-passes 3 \\
    --batch-size 512 --http-port 8080
  curl http://127.0.0.1:8080/api/status
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "master", help="run the master (task queue, election, status page)",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=None,
                        help="dataset URL to train on, set at start (needs --batch-size; "
                             "PADDLE_DATA is used with --batch-size); without it, the first "
                             "trainer's SetDataset call decides")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="rows per batch of the trainers' readers, with --dataset")
    parser.add_argument("--shuffle-seed", type=int, default=None,
                        help="the trainers' reader shuffle seed, with --dataset (default none)")
    parser.add_argument("--features", default="",
                        help="the trainers' feature config as canonical JSON of its non-default "
                             "fields, with --dataset (default: the defaults)")
    parser.add_argument("--chunks-per-task", type=int, default=1,
                        help="consecutive chunks (Parquet row groups) per task (default 1)")
    parser.add_argument("--num-passes", type=int, default=1,
                        help="passes over the dataset, used with --dataset (default 1)")
    parser.add_argument("--max-failures", type=int, default=3,
                        help="failed attempts after which a task is marked failed for the "
                             "pass (default 3)")
    parser.add_argument("--max-failed-fraction", type=float, default=0.1,
                        help="the job fails when more than this fraction of the tasks fail in "
                             "one pass (default 0.1)")
    parser.add_argument("--task-lease", type=float, default=30.0,
                        help="seconds a task stays leased without a progress report before it "
                             "goes back to todo (default 30)")
    parser.add_argument("--no-reconcile", action="store_true",
                        help="end passes without checking that every pserver shard holds every "
                             "batch (by default the master reconciles with the "
                             "PADDLE_NUM_PSERVERS shards at each pass end when that variable "
                             "is set; see docs/fault-tolerance.md)")
    parser.add_argument("--port", type=int, default=None,
                        help="gRPC port (default: PADDLE_PORT if set, else 0 = any free port, "
                             "published in the store)")
    parser.add_argument("--http-port", type=int, default=None,
                        help="status page port (default: PADDLE_HTTP_PORT, else 0 = any free "
                             "port, published in the store as status_url)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elasticps.master.options import MasterOptions
    from elasticps.master.server import MasterServer
    from elasticps.master.task_queue import QueuePolicy
    from elasticps.rpc.credentials import credentials_from_config
    from elasticps.store import open_store

    config = load_config()
    if args.port is None:
        # 7164 is the seed's default for a pserver; a master only takes it when asked to.
        args.port = config.port if "PADDLE_PORT" in os.environ else 0
    if args.http_port is None:
        args.http_port = config.http_port
    if not config.store:
        raise ConfigError("the master needs a store: set PADDLE_STORE (etcd://... or file://...)")
    if not config.token:
        raise ConfigError("the master needs the job token: set PADDLE_JOB_TOKEN or "
                          "PADDLE_JOB_TOKEN_FILE")
    for flag, value in (("--port", args.port), ("--http-port", args.http_port)):
        if not 0 <= value <= 65535:
            raise ConfigError(f"{flag}={value} must be within [0, 65535]")
    if args.chunks_per_task < 1:
        raise ConfigError(f"--chunks-per-task={args.chunks_per_task} must be >= 1")
    if args.num_passes < 1:
        raise ConfigError(f"--num-passes={args.num_passes} must be >= 1")
    try:
        policy = QueuePolicy(max_failures=args.max_failures, task_lease=args.task_lease,
                             max_failed_fraction=args.max_failed_fraction)
    except InvalidArgumentError as exc:
        raise ConfigError(str(exc)) from exc
    dataset, plan = _dataset_at_start(args, config.data)
    options = MasterOptions(
        job=config.job_name, credentials=credentials_from_config(config), host=config.host,
        port=args.port, http_port=args.http_port, http_host=config.http_host,
        health_port=config.health_port or None, data_schemes=config.data_schemes,
        lease_ttl=config.lease_ttl, policy=policy,
        dataset=dataset, chunks_per_task=args.chunks_per_task,
        num_passes=args.num_passes, batch_plan=plan,
        num_pservers=0 if args.no_reconcile or config.num_pservers is None
        else config.num_pservers, metrics_port=config.metrics_port,
        max_concurrent_rpcs=config.call_limit("master"), stream_poll_s=config.stream_poll_s,
        logs_dir=os.path.join(config.workdir, "logs") if config.workdir else None)
    set_node(options.node)
    store = open_store(config.store, config.job_name)
    server = MasterServer(store, options)

    def on_term(signum: int, frame: FrameType | None) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, on_term)
    try:
        code = server.run()
    finally:
        store.close()
    if code:
        print(f"elasticps master: {options.node} of job {options.job} lost the lead; exiting "
              "so it restarts as a standby", file=sys.stderr)
    return code


def _dataset_at_start(args: argparse.Namespace,
                      env_data: str | None) -> tuple[str | None, BatchPlan | None]:
    """The dataset and batch plan to set at start, or (None, None): wait for a trainer."""
    if args.batch_size is None:
        if args.dataset:
            raise ConfigError("--dataset needs --batch-size: the master counts each task's "
                              "batches from the trainers' batch size")
        if env_data:
            log.info("PADDLE_DATA is %s but no --batch-size was given; the master waits for "
                     "the first trainer's SetDataset, which brings the batch plan.", env_data)
        return None, None
    dataset = args.dataset or env_data
    if not dataset:
        raise ConfigError("--batch-size is for a dataset set at start: give --dataset")
    try:
        return dataset, BatchPlan(args.batch_size, args.shuffle_seed, args.features)
    except InvalidArgumentError as exc:
        raise ConfigError(f"--batch-size: {exc}") from exc
