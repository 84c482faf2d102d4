"""``elasticps run`` (the local launcher) and ``elasticps trainer`` (one trainer process)."""

from __future__ import annotations

import argparse
import gc
import os
import runpy
import signal
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from elasticps.autoscale_policy import AutoscaleConfig
from elasticps.config import COMPUTE_DTYPES, MODES, hold_env_token, load_config
from elasticps.errors import ConfigError, ElasticPSError
from elasticps.launch.threads import usable_cores
from elasticps.telemetry.stream_capture import report_exception

RUN_EPILOG = """\
examples:
  elasticps run --trainers 2 --pservers 2 --workdir /tmp/ctr examples/ctr/train.py --rows 200000
  elasticps run --store etcd://127.0.0.1:2379 --workdir /tmp/ctr examples/ctr/train.py
  elasticps run --autoscale --max-trainers 4 --workdir /tmp/ctr examples/ctr/train.py
  elasticps run --trainers 2 --mode sync --workdir /tmp/ctr examples/ctr/train.py
  elasticps run --trainer-threads 2 --workdir /tmp/ctr examples/ctr/train.py

Threads: each trainer gets OMP_NUM_THREADS = (cores - one per pserver) // trainers (every core
shared by the trainers in a mode whose pservers hold only sparse rows), each pserver and master
1; an OMP_NUM_THREADS in the environment is what every role gets (as with torchrun);
--trainer-threads and --pserver-threads override either. The split is printed at start and
kept in summary.json ("threads").

With --autoscale the launcher adds a trainer while there is more work than trainers, the
machine has an idle core for it (--autoscale-cpu) and the last step up raised samples/s by
15%; it undoes a step that did not pay, shrinks the job when fewer tasks are left than
trainers, and waits --autoscale-cooldown seconds after every change. Each decision is printed
with its reason, put on the status page's timeline and kept in summary.json ("autoscale").

The launcher prints `status: http://HOST:PORT/` (the master's status page) early, then a
progress bar with ETA (on a terminal; plain lines every 10 s otherwise). While it runs and
after it ended: `elasticps status --workdir DIR`, `elasticps logs --workdir DIR [ROLE] [-f]`
(no ROLE: every process, merged), `elasticps ui --workdir DIR` (the finished job's page);
`elasticps list` shows your local jobs. A master or pserver that crashes is restarted; a
trainer that fails fails the job, and the launcher exits non-zero with the tail of that
trainer's log. Ctrl-C or `elasticps stop --workdir DIR` stops every child (SIGTERM, then
SIGKILL after --grace seconds). On success WORKDIR/summary.json holds the result (auc,
best_auc, samples_per_sec, wall_s, passes).
"""


def register(subparsers: Any) -> None:
    run = subparsers.add_parser(
        "run", help="run a training job on this machine (master, pservers, trainers)",
        description="Start the store, a master, M pservers and N trainers running SCRIPT on "
        "this machine, supervise them, and exit 0 only if the job succeeded.",
        epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--trainers", type=int, default=1, metavar="N",
                     help="trainer processes (default 1)")
    run.add_argument("--pservers", type=int, default=1, metavar="M",
                     help="parameter server processes, i.e. shards (default 1)")
    run.add_argument("--store", metavar="URL",
                     help="coordination store; default: embedded file://WORKDIR/store.db")
    run.add_argument("--workdir", metavar="DIR",
                     help="logs, store, checkpoints, data and summary.json "
                     "(default ./elasticps-<time>)")
    run.add_argument("--job-name", metavar="NAME",
                     help="DNS-1123 job name (default: script name + random suffix)")
    run.add_argument("--grace", type=float, default=10.0, metavar="S",
                     help="seconds between SIGTERM and SIGKILL when stopping (default 10)")
    run.add_argument("--max-restarts", type=int, default=10, metavar="K",
                     help="restarts of one master/pserver before the job fails (default 10)")
    run.add_argument("--standby-masters", type=int, default=1, metavar="K",
                     help="extra master processes waiting in the election; one takes over "
                     "within PADDLE_LEASE_TTL when the leader dies (default 1; 0 = the "
                     "restarted master takes over)")
    run.add_argument("--mode", choices=MODES, default=None,
                     help="how trainers update the pservers: async (default: each batch "
                     "applied as it comes), sync (each step's gradients of every training "
                     "trainer averaged at the pservers, then applied once), geo (trainers "
                     "train a local copy and push parameter deltas every --geo-steps) or "
                     "hybrid (dense parameters replicated on the trainers and averaged by "
                     "all-reduce every step; sparse rows through the pservers as in async)")
    run.add_argument("--geo-steps", type=int, default=None, metavar="K",
                     help="geo mode: local steps between two pushes of a trainer's deltas "
                     "(default 10)")
    run.add_argument("--warm-start", metavar="MODEL_DIR", default=None,
                     help="start the job's tables from an export (or a model directory's "
                     "newest version) instead of their initializers; a job resuming from its "
                     "checkpoints keeps them (PADDLE_WARM_START)")
    run.add_argument("--trainer-threads", type=int, default=None, metavar="N",
                     help="intra-op threads of each trainer (its OMP_NUM_THREADS, which torch "
                     "reads). Default: OMP_NUM_THREADS if the environment sets it, else the "
                     "cores left after one per pserver, shared by the trainers (every core in a "
                     "mode whose pservers hold only sparse rows); printed at start")
    run.add_argument("--pserver-threads", type=int, default=None, metavar="M",
                     help="OMP_NUM_THREADS of each pserver (default: OMP_NUM_THREADS if the "
                     "environment sets it, else 1: a pserver's numpy work runs on one core)")
    run.add_argument("--compute-dtype", choices=COMPUTE_DTYPES, default=None,
                     help="what the trainers' forward and backward passes compute in: float32 "
                     "(default) or bfloat16 (torch.autocast, mixed precision: faster on CPUs "
                     "with AMX or AVX-512 BF16 and on GPUs; parameters, gradients and optimizer "
                     "state stay float32) (PADDLE_COMPUTE_DTYPE)")
    run.add_argument("--log-format", choices=("text", "json"), default=None,
                     help="the roles' log lines: text (default) or json lines "
                          "(PADDLE_LOG_FORMAT); every line names the job, the role and the node")
    scaling = run.add_argument_group("autoscaling")
    scaling.add_argument("--autoscale", action="store_true",
                         help="add and remove trainers while the job runs, within "
                         "[--min-trainers, --max-trainers], starting from --trainers")
    scaling.add_argument("--min-trainers", type=int, default=1, metavar="A",
                         help="fewest trainers with --autoscale (default 1)")
    scaling.add_argument("--max-trainers", type=int, default=None, metavar="B",
                         help="most trainers with --autoscale (default: this machine's cores)")
    scaling.add_argument("--autoscale-cooldown", type=float, default=30.0, metavar="S",
                         help="seconds after a change before the next, and before a step up "
                         "is judged by its samples/s (default 30)")
    scaling.add_argument("--autoscale-cpu", type=float, default=1.0, metavar="CORES",
                         help="idle cores the machine must have to add a trainer (default 1; "
                         "0 = ignore the CPU, e.g. when trainers wait on I/O)")
    scaling.add_argument("--autoscale-min-gain", type=float, default=0.15, metavar="F",
                         help="the rise in samples/s a step up must bring to be kept (default "
                         "0.15 = 15%%; one that brings less is undone)")
    run.add_argument("--insecure", action="store_true",
                     help="run without TLS: no job CA, plaintext gRPC, the job token in clear "
                     "(a warning is printed; by default every gRPC port requires mutual TLS)")
    run.add_argument("script", metavar="SCRIPT", help="the training script every trainer runs")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="arguments passed to SCRIPT")
    run.set_defaults(func=run_command)

    trainer = subparsers.add_parser(
        "trainer", help="run one trainer: SCRIPT in this process with the PADDLE_* contract",
        description="Run the user's training SCRIPT in this process (as `python SCRIPT ARGS` "
        "would), inside a job: PADDLE_STORE, PADDLE_JOB_NAME, PADDLE_JOB_TOKEN (or "
        "PADDLE_JOB_TOKEN_FILE) and PADDLE_TRAINER_ID must be set (the launcher or the cluster "
        "sets them). PADDLE_JOB_TOKEN is taken out of the environment before SCRIPT runs, so "
        "nothing SCRIPT starts inherits it.")
    trainer.add_argument("script", metavar="SCRIPT")
    trainer.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")
    trainer.set_defaults(func=trainer_command)


def run_command(args: argparse.Namespace) -> int:
    from elasticps.launch.launcher import LaunchOptions, run_job

    opts = LaunchOptions(
        script=args.script, script_args=list(args.script_args), trainers=args.trainers,
        pservers=args.pservers, store=args.store, workdir=args.workdir, job_name=args.job_name,
        grace=args.grace, max_restarts=args.max_restarts, standby_masters=args.standby_masters,
        log_format=args.log_format, insecure=args.insecure, autoscale=_autoscale(args),
        mode=args.mode, geo_steps=_geo_steps(args), trainer_threads=args.trainer_threads,
        pserver_threads=args.pserver_threads, warm_start=args.warm_start,
        compute_dtype=args.compute_dtype)
    return run_job(opts)


def _geo_steps(args: argparse.Namespace) -> int | None:
    if args.geo_steps is not None and args.mode not in ("geo", None):
        raise ConfigError(f"--geo-steps={args.geo_steps} needs --mode geo")
    return args.geo_steps


def _autoscale(args: argparse.Namespace) -> AutoscaleConfig | None:
    if not args.autoscale:
        for flag, value, default in (("--min-trainers", args.min_trainers, 1),
                                     ("--max-trainers", args.max_trainers, None)):
            if value != default:
                raise ConfigError(f"{flag}={value} needs --autoscale")
        return None
    most = args.max_trainers if args.max_trainers is not None else max(
        args.min_trainers, args.trainers, usable_cores())
    return AutoscaleConfig(args.min_trainers, most, cooldown_s=args.autoscale_cooldown,
                           cpu_per_trainer=args.autoscale_cpu,
                           min_gain=args.autoscale_min_gain)


def trainer_command(args: argparse.Namespace) -> int:
    hold_env_token()  # the script's subprocesses inherit os.environ; they get no token
    config = load_config()
    if config.store is None:
        raise ConfigError("elasticps trainer needs PADDLE_STORE (run it through `elasticps run` "
                          "or a cluster job)")
    script = Path(args.script)
    if not script.is_file():
        raise ConfigError(f"trainer script {args.script!r} does not exist or is not a file")
    os.environ["PADDLE_ROLE"] = "trainer"
    # SIGTERM (the launcher stopping the job or scaling down, a pod being deleted) unwinds the
    # script, so its finally blocks run: a Trainer closes and hands its task back at once.
    previous = signal.signal(signal.SIGTERM, _leave_on_sigterm)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args.script_args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except GracefulLeave:
        return 0
    except ElasticPSError:
        raise  # "elasticps: error: ..." (cli.main): a job's refusal, said in one line
    except Exception as exc:  # the script's own error: its traceback, from the script down
        report_exception(exc, _from_script(exc.__traceback__, script),
                         f"The trainer script {script.name} stopped on "
                         f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.argv, sys.path[:] = saved_argv, saved_path
        # The script is over and the process is about to exit: the collector's walk at exit
        # over every object torch and the model made would only delay the job's end (0.3-0.7 s
        # per trainer); frozen objects are left to the process's end.
        gc.freeze()
    return 0


def _from_script(tb: TracebackType | None, script: Path) -> TracebackType | None:
    """The traceback from the script's first frame on: the runner's own frames (runpy, this
    command) say nothing about the error, and the status page shows the last lines only."""
    path = str(script.resolve())
    entry = tb
    while entry is not None and entry.tb_frame.f_code.co_filename != path:
        entry = entry.tb_next
    return entry if entry is not None else tb


class GracefulLeave(BaseException):
    """Raised in the trainer's main thread by SIGTERM: the script's ``finally`` closes the
    trainer, whose MasterClient unregisters with ``leaving`` (its tasks go back at once, no
    failure counted), and the process exits 0."""


def _leave_on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it the hard way
    raise GracefulLeave
