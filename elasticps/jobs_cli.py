"""``elasticps status | logs | scale | ui``: one shape for local and cluster jobs.

``elasticps status JOB`` and ``elasticps logs JOB --role R --index I`` read a cluster job (its
pods, through the Kubernetes API); with ``--workdir DIR`` (or run inside a job's work
directory, which holds ``job.json``) they read a job started by ``elasticps run`` instead,
and ``logs`` takes the role as its argument: ``elasticps logs --workdir DIR trainer-1 -f``.
``elasticps scale`` changes the trainer count, or reshards the pservers, of either kind of job
while it runs.
``elasticps ui DIR`` serves the status page of a local job, finished or not.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from elasticps.cluster import cli as cluster_cli
from elasticps.errors import ConfigError
from elasticps.launch import scale as local_scale
from elasticps.launch.scale import JOB_FILE

STATUS_EPILOG = """\
examples:
  elasticps status --workdir /tmp/ctr        a job started by `elasticps run --workdir /tmp/ctr`
  elasticps status ctr-1a2b3c -n team-ml     a cluster job
"""

LOGS_EPILOG = """\
examples:
  elasticps logs --workdir /tmp/ctr trainer-1 -f     follow trainer 1 of a local job
  elasticps logs --workdir /tmp/ctr --role pserver --index 0 --tail 20
  elasticps logs ctr-1a2b3c --role master            a cluster job's master pod
  elasticps logs ctr-1a2b3c --role trainer -f        follow every trainer pod, lines prefixed
"""


SCALE_EPILOG = """\
examples:
  elasticps scale --workdir /tmp/ctr --trainers 4      a job started by `elasticps run`
  elasticps scale ctr-1a2b3c --store etcd://127.0.0.1:2379 --trainers 1
  elasticps scale ctr-1a2b3c -n team-ml --trainers 8   a cluster job (Volcano task replicas
                                                       or the trainers' Indexed Job)
  elasticps scale --workdir /tmp/ctr --pservers 3      reshard a local job's tables onto 3
                                                       pservers (trainers pause meanwhile)
  elasticps scale ctr-1a2b3c -n team-ml --pservers 3   reshard a cluster job: pservers to 0,
                                                       a one-shot Job runs `elasticps reshard`,
                                                       then 3 pservers (needs `checkpoint:` on
                                                       a claim or storage URL)
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "status", help="show a job's state, its processes per role and its progress",
        description="Show a job's state, each role's processes (restarts included) and its "
                    "progress: a local job (--workdir, or the current directory when it holds "
                    "job.json) from its master or its saved page, a cluster job (JOB) from its "
                    "pods and the master's /api/status.",
        epilog=STATUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", nargs="?", default=None, metavar="JOB",
                   help="a cluster job's job_name (leave out for a local job)")
    p.add_argument("--workdir", metavar="DIR", help="a local job's work directory")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    cluster_cli.cluster_options(p)
    p.set_defaults(func=run_status)

    p = subparsers.add_parser(
        "logs", help="print the logs of a job's processes",
        description="A cluster job (JOB): the logs of all its pods, or of one --role and "
                    "--index, each line prefixed by its pod; with -f every chosen pod is "
                    "followed at once. A local job (--workdir) takes the role as its argument "
                    "(trainer-1, master, pserver-0) and prints that one process's log.",
        epilog=LOGS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", default=None, metavar="JOB|ROLE",
                   help="a cluster job's name, or a local job's role (with --workdir)")
    p.add_argument("--workdir", metavar="DIR", help="a local job's work directory")
    p.add_argument("--role", default=None, choices=("master", "pserver", "trainer", "etcd"),
                   help="which role (a cluster job: every role unless given; a local job: "
                        "trainer)")
    p.add_argument("--index", type=int, default=None,
                   help="which process of that role (a cluster job: every one unless given, "
                        "each line prefixed by its pod; a local job: 0)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines (a local job: until it ends)")
    p.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines")
    cluster_cli.cluster_options(p)
    p.set_defaults(func=run_logs)

    p = subparsers.add_parser(
        "scale", help="add or remove trainers, or reshard onto M pservers, of a running job",
        description="Ask a running job for N trainers. A local job (--workdir, or JOB --store "
                    "URL): the launcher starts trainers or sends the newest SIGTERM within a "
                    "second. A cluster job (JOB): its trainer count is patched through the API "
                    "server, within the spec's min_trainers/max_trainers. A trainer that is "
                    "removed leaves gracefully: its task goes back to the queue, not counted "
                    "as a failure. --pservers M moves the job's tables, optimizer "
                    "state and applied batches from its N pservers to M without restarting "
                    "trainers: the pservers stop and checkpoint, the checkpoints are re-split, "
                    "M pservers start from them; trainers pause for that time, and every batch "
                    "stays applied exactly once. A local job's launcher does it; for a cluster "
                    "job the pservers are patched to 0, a one-shot Job <JOB>-reshard-<M> runs "
                    "`elasticps reshard` from the pserver pod template, then the pservers are "
                    "patched to M (to N again, unchanged, if the Job fails).",
        epilog=SCALE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", nargs="?", default=None, metavar="JOB",
                   help="the job's name: a cluster job, or a local one with --store")
    p.add_argument("--workdir", default=None, metavar="DIR",
                   help="a local job's work directory (holds job.json)")
    p.add_argument("--store", default=None, metavar="URL", help="a local job's store URL")
    p.add_argument("--trainers", type=int, default=None, metavar="N",
                   help="the number of trainers the job should have")
    p.add_argument("--pservers", type=int, default=None, metavar="M",
                   help="the number of pservers the job should have (resharding)")
    p.add_argument("--reshard-timeout", type=float, default=None, metavar="S",
                   help="a cluster job: seconds the reshard Job may run (default 1800)")
    cluster_cli.cluster_options(p)
    p.set_defaults(func=run_scale)

    p = subparsers.add_parser(
        "ui", help="serve the status page of a local job, running or finished",
        description="Serve the status page of the job started by `elasticps run --workdir "
                    "WORKDIR`: live while its master runs, and the saved page (charts, "
                    "tables, timeline) once the job is over.")
    p.add_argument("workdir", metavar="WORKDIR", help="the job's work directory")
    p.add_argument("--port", type=int, default=8080, help="port to serve on (default 8080; 0 "
                                                         "= any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="loopback address to bind (default 127.0.0.1; the page asks no token, so "
                        "it is never served beyond this machine)")
    p.set_defaults(func=run_ui)


def _local(args: argparse.Namespace, cluster_name: str | None) -> bool:
    """A local job when --workdir is given, or no cluster job is named and the current
    directory is a job's work directory."""
    if args.workdir is not None:
        return True
    if cluster_name is None:
        if (Path.cwd() / JOB_FILE).exists():
            args.workdir = "."
            return True
        raise ConfigError("name the job: a cluster JOB, or --workdir DIR for a job started by "
                          "`elasticps run`")
    return False


def run_status(args: argparse.Namespace) -> int:
    if _local(args, args.job):
        from elasticps.launch import local_cli

        return local_cli.run_status(args)
    return cluster_cli.run_status(args)


def run_logs(args: argparse.Namespace) -> int:
    from elasticps.launch import local_cli

    if args.workdir is None and args.target is not None and (Path.cwd() / JOB_FILE).exists() \
            and local_cli.is_role(args.target):
        args.workdir = "."
    if _local(args, args.target):
        args.role = args.role or "trainer"
        args.index = 0 if args.index is None else args.index
        return local_cli.run_logs(args)
    args.job = args.target
    return cluster_cli.run_logs(args)


def run_ui(args: argparse.Namespace) -> int:
    from elasticps.launch import local_cli

    return local_cli.run_ui(args)


def run_scale(args: argparse.Namespace) -> int:
    if args.trainers is None and args.pservers is None:
        raise ConfigError("say what to scale: --trainers N and/or --pservers M")
    if args.store is not None or _local(args, args.job):
        if args.reshard_timeout is not None:
            raise ConfigError("--reshard-timeout is for a cluster job's reshard Job; a local "
                              "job's launcher reshards without one")
        return local_scale.scale_command(args)
    return cluster_cli.run_scale(args)
