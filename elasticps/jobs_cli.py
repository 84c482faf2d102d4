"""``elasticps status | logs | scale | ui | stop | list``: one shape for local and cluster jobs.

A job started by ``elasticps run`` is named by its work directory, the same way in every verb:
``--workdir W``. The work directory in the JOB position works too (``elasticps status W``,
``elasticps logs W trainer-1``, ``elasticps ui W``, ``elasticps stop W``): a JOB that is a
directory holding ``job.json`` is a local job's; any other JOB is a cluster job's name
(DNS-1123, so never a path). Named neither way, a verb run inside a job's work directory means
that job. ``status``, ``logs`` and ``scale`` read or change either kind; ``ui`` and ``stop``
are for local jobs; ``list`` lists the local jobs this user started (or those under a
directory), and a namespace's cluster jobs with ``--cluster`` or ``-n NS``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from elasticps.cluster import cli as cluster_cli
from elasticps.errors import ConfigError
from elasticps.launch import scale as local_scale
from elasticps.launch.scale import JOB_FILE

WORKDIR_HELP = "a local job's work directory (the --workdir of its `elasticps run`)"

STATUS_EPILOG = """\
examples:
  elasticps status --workdir /tmp/ctr        a job started by `elasticps run --workdir /tmp/ctr`
  elasticps status /tmp/ctr                  the same
  elasticps status ctr-1a2b3c -n team-ml     a cluster job
"""

LOGS_EPILOG = """\
examples:
  elasticps logs --workdir /tmp/ctr                  every process of a local job, merged by
                                                     time, each line prefixed by its role
  elasticps logs --workdir /tmp/ctr trainer-1 -f     follow trainer 1 until the job ends
  elasticps logs --workdir /tmp/ctr pserver-0        the process serving pserver shard 0
  elasticps logs --workdir /tmp/ctr master           the leading master
  elasticps logs --workdir /tmp/ctr master --all     every master process (the standbys too)
  elasticps logs /tmp/ctr --role pserver --index 1 --tail 20
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

STOP_EPILOG = """\
exit codes:
  0  the job stopped: its launcher and every process of the job have exited
  1  the work directory holds no job (or another error, named)
  3  the job was not running (it had ended, or never started): nothing was done
  4  the launcher still ran after --timeout seconds (it was asked to stop)
"""

LIST_EPILOG = """\
Local jobs are found through a registry that every `elasticps run` writes to:
$XDG_STATE_HOME/elasticps/jobs/ (~/.local/state/elasticps/jobs/ when XDG_STATE_HOME is unset),
one entry per work directory, dropped once the directory no longer holds that job.

examples:
  elasticps list                      the local jobs you started, newest first
  elasticps list /tmp/runs            the local jobs in /tmp/runs and its subdirectories
  elasticps list -n team-ml           a namespace's cluster jobs (also: --cluster)
"""


def _workdir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", metavar="W", default=None, help=WORKDIR_HELP)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "status", help="show a job's state, its processes per role and its progress",
        description="Show a job's state, each role's processes (restarts included) and its "
                    "progress: a local job (--workdir W, or W as JOB) from its master or its "
                    "saved page, a cluster job (JOB) from its pods and the master's "
                    "/api/status.",
        epilog=STATUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", nargs="?", default=None, metavar="JOB",
                   help="a cluster job's job_name, or a local job's work directory")
    _workdir_option(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    cluster_cli.cluster_options(p)
    p.set_defaults(func=run_status)

    p = subparsers.add_parser(
        "logs", help="print the logs of a job's processes",
        description="A local job (--workdir W, or W as JOB): the log of one role (master: the "
                    "leading master; pserver-K: the process serving shard K; trainer-K; "
                    "master-K: the K-th master process started), or, with --all or no role, "
                    "every process's log merged by time, each line prefixed by its role. A "
                    "cluster job (JOB): the logs of all its pods, or of one --role and "
                    "--index, each line prefixed by its pod. -f follows (a local job: until "
                    "its launcher exits).",
        epilog=LOGS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", default=None, metavar="JOB",
                   help="a cluster job's name or a local job's work directory (a local job's "
                        "ROLE here names a role of the job in the current directory)")
    p.add_argument("role_name", nargs="?", default=None, metavar="ROLE",
                   help="a local job's role: master, master-K, pserver-K, trainer-K")
    _workdir_option(p)
    p.add_argument("--role", default=None, choices=("master", "pserver", "trainer", "etcd"),
                   help="which role (a cluster job: every role unless given)")
    p.add_argument("--index", type=int, default=None,
                   help="which process of that role (a cluster job: every one unless given, "
                        "each line prefixed by its pod; a local job: pserver shard, trainer "
                        "id or master process number)")
    p.add_argument("--all", action="store_true",
                   help="a local job: every process (of ROLE, if given), merged by time")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines (a local job: until it ends)")
    p.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines")
    cluster_cli.cluster_options(p)
    p.set_defaults(func=run_logs)

    p = subparsers.add_parser(
        "scale", help="add or remove trainers, or reshard onto M pservers, of a running job",
        description="Ask a running job for N trainers. A local job (--workdir W, W as JOB, or "
                    "JOB --store URL): the launcher starts trainers or sends the newest SIGTERM "
                    "within a second. A cluster job (JOB): its trainer count is patched through "
                    "the API server, within the spec's min_trainers/max_trainers. A trainer "
                    "that is removed leaves gracefully: its task goes back to the queue, not "
                    "counted as a failure. --pservers M moves the job's tables, optimizer "
                    "state and applied batches from its N pservers to M without restarting "
                    "trainers: the pservers stop and checkpoint, the checkpoints are re-split, "
                    "M pservers start from them; trainers pause for that time, and every batch "
                    "stays applied exactly once. A local job's launcher does it; for a cluster "
                    "job the pservers are patched to 0, a one-shot Job <JOB>-reshard-<M> runs "
                    "`elasticps reshard` from the pserver pod template, then the pservers are "
                    "patched to M (to N again, unchanged, if the Job fails).",
        epilog=SCALE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", nargs="?", default=None, metavar="JOB",
                   help="the job's name (a cluster job, or a local one with --store), or a "
                        "local job's work directory")
    _workdir_option(p)
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
        description="Serve the status page of the job started by `elasticps run --workdir W`: "
                    "live while its master runs, and the saved page (charts, tables, "
                    "timeline) once the job is over.")
    p.add_argument("job", nargs="?", default=None, metavar="W",
                   help="the job's work directory (the same as --workdir W)")
    _workdir_option(p)
    p.add_argument("--port", type=int, default=8080, help="port to serve on (default 8080; 0 "
                                                         "= any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="loopback address to bind (default 127.0.0.1; the page asks no token, so "
                        "it is never served beyond this machine)")
    p.set_defaults(func=run_ui)

    p = subparsers.add_parser(
        "stop", help="stop a local job gracefully and wait until every process has exited",
        description="Stop the job started by `elasticps run --workdir W` as Ctrl-C in its "
                    "terminal would: its launcher gets SIGTERM, stops every process (SIGKILL "
                    "after its --grace), saves the status page and exits; this waits for it.",
        epilog=STOP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", nargs="?", default=None, metavar="W",
                   help="the job's work directory (the same as --workdir W)")
    _workdir_option(p)
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait for the launcher to exit (default 60)")
    p.set_defaults(func=run_stop)

    p = subparsers.add_parser(
        "list", help="list your local jobs (or a namespace's cluster jobs)",
        description="List the local jobs you started with `elasticps run` (or those under "
                    "DIR): name, state, work directory and status page. With --cluster or "
                    "-n NS: the elasticps jobs (Volcano Jobs, or plain Kubernetes trainer "
                    "Jobs) of a namespace: name, backend, phase, trainers running/wanted, age.",
        epilog=LIST_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?", default=None, metavar="DIR",
                   help="list the local jobs in DIR and its direct subdirectories instead")
    p.add_argument("--cluster", action="store_true",
                   help="list a namespace's cluster jobs (implied by -n, --kubeconfig, "
                        "--context)")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    cluster_cli.cluster_options(p)
    p.set_defaults(func=run_list)


def _is_workdir(text: str | None) -> bool:
    return text is not None and (Path(text) / JOB_FILE).is_file()


def _local(args: argparse.Namespace, attr: str = "job") -> bool:
    """Whether the verb is about a local job, setting ``args.workdir`` if so: --workdir W; a
    JOB that is a work directory; or no JOB and the current directory is one."""
    named = getattr(args, attr)
    if args.workdir is not None:
        if named is not None:
            raise ConfigError(f"name the job once: --workdir {args.workdir} or {named}, not "
                              "both")
        return True
    if _is_workdir(named):
        args.workdir, named = named, None
        setattr(args, attr, None)
        return True
    if named is None:
        if (Path.cwd() / JOB_FILE).exists():
            args.workdir = "."
            return True
        raise ConfigError("name the job: --workdir W (or W) for a job started by `elasticps "
                          "run`, or JOB for a cluster job")
    return False


def _local_only(args: argparse.Namespace, verb: str) -> None:
    """``ui`` and ``stop``: the work directory from --workdir W, W, or the current
    directory."""
    if args.job is not None and args.workdir is not None:
        raise ConfigError(f"name the job once: --workdir {args.workdir} or {args.job}, not both")
    args.workdir = args.workdir or args.job
    if args.workdir is None and not (Path.cwd() / JOB_FILE).exists():
        raise ConfigError(f"name the job: elasticps {verb} --workdir W (the work directory of "
                          "a job started by `elasticps run`)")


def run_status(args: argparse.Namespace) -> int:
    if _local(args):
        from elasticps.launch import local_cli

        return local_cli.run_status(args)
    return cluster_cli.run_status(args)


def run_logs(args: argparse.Namespace) -> int:
    from elasticps.launch import local_cli
    from elasticps.launch.role_logs import is_role

    # `logs --workdir W ROLE`, and `logs ROLE` inside a job's work directory: ROLE came first.
    first = args.target
    if args.role_name is None and first is not None and not _is_workdir(first) and (
            args.workdir is not None or (is_role(first) and (Path.cwd() / JOB_FILE).exists())):
        args.target, args.role_name = None, first
    if _local(args, "target"):
        if args.role_name is not None and (args.role or args.index is not None):
            raise ConfigError(f"name the role once: {args.role_name} or --role/--index")
        if args.role_name is None and args.role is not None:
            args.role_name = args.role + ("" if args.index is None else f"-{args.index}")
        elif args.role_name is None and args.index is not None:
            raise ConfigError(f"--index {args.index} needs --role")
        return local_cli.run_logs(args)
    if args.role_name is not None:
        raise ConfigError(f"a cluster job's role is chosen with --role and --index, not "
                          f"{args.role_name!r}")
    if args.all:
        raise ConfigError("--all is for a local job; a cluster job's logs are every pod's "
                          "unless --role is given")
    args.job = args.target
    return cluster_cli.run_logs(args)


def run_ui(args: argparse.Namespace) -> int:
    from elasticps.launch import local_cli

    _local_only(args, "ui")
    return local_cli.run_ui(args)


def run_stop(args: argparse.Namespace) -> int:
    from elasticps.launch import local_cli

    _local_only(args, "stop")
    return local_cli.run_stop(args)


def run_list(args: argparse.Namespace) -> int:
    if args.cluster or args.namespace or args.kubeconfig or args.context:
        if args.dir is not None:
            raise ConfigError(f"DIR ({args.dir}) lists local jobs; leave it out with "
                              "--cluster/-n")
        return cluster_cli.run_list(args)
    from elasticps.launch import local_cli

    return local_cli.run_list(args)


def run_scale(args: argparse.Namespace) -> int:
    if args.trainers is None and args.pservers is None:
        raise ConfigError("say what to scale: --trainers N and/or --pservers M")
    if args.store is not None or _local(args):
        if args.reshard_timeout is not None:
            raise ConfigError("--reshard-timeout is for a cluster job's reshard Job; a local "
                              "job's launcher reshards without one")
        return local_scale.scale_command(args)
    return cluster_cli.run_scale(args)
