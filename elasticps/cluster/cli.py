"""``elasticps submit | status | logs | delete | list``: run a job on Kubernetes or Volcano.

``status``, ``logs``, ``scale`` and ``list`` are registered by :mod:`elasticps.jobs_cli`, which
sends them here for a cluster job and to :mod:`elasticps.launch.local_cli` for a local one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from elasticps.config import check_job_name, user_namespace
from elasticps.errors import ConfigError

if TYPE_CHECKING:
    from elasticps.cluster.kube_client import KubeClient

# The kubernetes client is imported only when a cluster command runs: every role process
# (`elasticps pserver` ...) builds this parser and should not pay for it.
BACKENDS = ("volcano", "kubernetes")

SUBMIT_EPILOG = """\
examples:
  elasticps submit examples/ctr/job.yaml --dry-run > job-manifests.yaml
      print the manifests (Volcano Job, RBAC, NetworkPolicies, etcd) instead of creating them;
      the job's Secret (token, CA, certificates) is never printed, only a note in its place
  elasticps submit examples/ctr/job.yaml --secret-only && kubectl apply -f job-manifests.yaml
      create just the Secret, then apply the printed manifests yourself
  elasticps submit examples/ctr/job.yaml --backend kubernetes
      create the job with plain Deployment / StatefulSet / Indexed Job objects
"""


def cluster_options(parser: argparse.ArgumentParser, *, namespace: bool = True) -> None:
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the "
                             "in-cluster service account)")
    parser.add_argument("--context", help="kubeconfig context (default: its current context)")
    if namespace:
        parser.add_argument("-n", "--namespace", default=None,
                            help="namespace of the job (default: $USER_NAMESPACE or 'default')")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "submit", help="create a job on Kubernetes/Volcano from a job.yaml",
        description="Validate JOB.yaml, render its manifests for the backend, check them "
                    "against the Kubernetes and Volcano schemas, and create them.",
        epilog=SUBMIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", metavar="JOB.yaml", help="the job spec (see docs/cluster.md)")
    p.add_argument("--backend", choices=BACKENDS, default="volcano",
                   help="volcano (gang-scheduled Volcano Job, the default) or kubernetes "
                        "(built-in objects only)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the manifests as a YAML stream on stdout and create nothing; "
                        "the job's Secret is replaced by a note (secrets are never printed)")
    p.add_argument("--secret-only", action="store_true",
                   help="create only the job's Secret (a fresh token, CA and certificates), "
                        "for manifests printed by --dry-run and applied with kubectl")
    p.add_argument("--insecure", action="store_true",
                   help="no TLS on gRPC, the status page or the job's etcd (the spec's "
                        "'insecure: true'); a warning is printed")
    cluster_options(p, namespace=False)
    p.add_argument("-n", "--namespace", default=None,
                   help="override the spec's namespace")
    p.set_defaults(func=run_submit)

    p = subparsers.add_parser(
        "delete", help="delete every object of a cluster job",
        description="Delete every object labelled elasticps.io/job=JOB (Volcano Job or "
                    "Deployment/StatefulSet/Job, Services, Secret, RBAC, etcd and its volumes).")
    p.add_argument("job", metavar="JOB", help="the job_name")
    cluster_options(p)
    p.set_defaults(func=run_delete)

    p = subparsers.add_parser(
        "autoscale", help="grow and shrink a cluster job's trainers while it runs",
        description="Watch a cluster job through the API server and change its trainer count "
                    "within the spec's min_trainers/max_trainers: one more trainer while there "
                    "is work for it and the last one found room (no trainer pod Pending), kept "
                    "only if the job's samples/s rose by --min-gain; fewer when fewer tasks are "
                    "left than trainers. Runs until the job finishes; stop and restart it any "
                    "time (it keeps no state the job needs). Needs read access to the job, its "
                    "pods and its Secret, and patch on the job.",
        epilog="example:\n  elasticps autoscale ctr-1a2b3c -n team-ml --interval 15\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", metavar="JOB", help="the job_name")
    p.add_argument("--interval", type=float, default=15.0, metavar="S",
                   help="seconds between looks (default 15)")
    p.add_argument("--cooldown", type=float, default=60.0, metavar="S",
                   help="seconds after a change before the next is judged (default 60)")
    p.add_argument("--min-gain", type=float, default=0.15, metavar="F",
                   help="a step up is kept only if samples/s rose by this fraction (default "
                        "0.15)")
    cluster_options(p)
    p.set_defaults(func=run_autoscale)

    # `elasticps data upload DIR pvc://CLAIM` (parsed by elasticps.data.cli, a layer below)
    # is carried out here, through a transfer Job.
    subparsers.choices["data"].set_defaults(upload_to_claim=run_claim_upload)


def _job(args: argparse.Namespace) -> str:
    """The JOB argument, checked before it reaches an object name or a label selector (where
    ``a,b`` would select other objects)."""
    return check_job_name(args.job)


def _client(args: argparse.Namespace) -> KubeClient:
    from elasticps.cluster.kube_client import KubeClient

    return KubeClient.from_kubeconfig(args.kubeconfig, args.context)


def run_submit(args: argparse.Namespace) -> int:
    from elasticps.cluster.spec import Job
    from elasticps.cluster.submit import submit

    job = Job.from_yaml(args.spec)
    if args.namespace is not None:
        job = dataclasses.replace(job, namespace=args.namespace)
    if args.insecure:
        job = dataclasses.replace(job, insecure=True)
    if args.dry_run and args.secret_only:
        raise ConfigError("--dry-run and --secret-only exclude each other")
    if args.secret_only:
        from elasticps.cluster.submit import submit_secret

        name = submit_secret(job, client=_client(args))
        print(f"created Secret {name} in namespace {job.plan.namespace} (its values are not "
              "shown); now apply the manifests of `elasticps submit --dry-run`")
        return 0
    client = None if args.dry_run else _client(args)
    handle = submit(job, args.backend, dry_run=args.dry_run, client=client,
                    spec_path=args.spec)
    code = _code_line(handle)
    if args.dry_run:
        sys.stdout.write(handle.yaml())
        print(f"elasticps submit --dry-run: the Secret of job {job.job_name} is not printed; "
              f"create it with `elasticps submit {args.spec} --secret-only`.", file=sys.stderr)
        if code:
            print(f"{code} (dry run: nothing uploaded)", file=sys.stderr)
        return 0
    print(f"submitted job {job.job_name} to namespace {job.plan.namespace} ({args.backend}, "
          f"{len(handle.manifests)} objects)")
    if code:
        print(code)
    print(f"status: elasticps status {job.job_name} -n {job.plan.namespace}")
    print(f"status page (with `kubectl proxy`): {handle.status_url()}")
    return 0


def _code_line(handle: Any) -> str | None:
    location = handle.code_location()
    if location is None:
        return None
    note = handle.code.left_out_note()
    return (f"code: {len(handle.code.files)} file(s), {len(handle.code.data):,} bytes packed, "
            f"sha256 {handle.code.sha256}, from {location}" + (f"; {note}" if note else ""))


def run_status(args: argparse.Namespace) -> int:
    from elasticps.cluster.submit import job_status

    job = _job(args)
    status = job_status(_client(args), job, args.namespace or user_namespace())
    if args.json:
        print(json.dumps(dataclasses.asdict(status), indent=2, sort_keys=True))
    else:
        print(status.summary())
    return 0


def run_logs(args: argparse.Namespace) -> int:
    from elasticps.cluster.job_logs import job_logs

    job = _job(args)
    lines = job_logs(_client(args), job, args.namespace or user_namespace(),
                     role=args.role, index=args.index, follow=args.follow, tail_lines=args.tail)
    for line in lines:
        print(line, flush=args.follow)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from elasticps.cluster.job_list import format_table, list_jobs

    namespace = args.namespace or user_namespace()
    jobs = list_jobs(_client(args), namespace)
    if args.json:
        print(json.dumps([dataclasses.asdict(j) for j in jobs], indent=2))
    elif not jobs:
        print(f"no elasticps jobs in namespace {namespace}")
    else:
        print(format_table(jobs))
    return 0


def run_scale(args: argparse.Namespace) -> int:
    """Trainers first (one patch), then a resharding (minutes) when --pservers is given."""
    _job(args)
    namespace = args.namespace or user_namespace()
    client = _client(args)
    if args.trainers is not None:
        from elasticps.cluster.trainer_scale import scale_trainers

        before = scale_trainers(client, args.job, namespace, args.trainers)
        print(f"elasticps scale: job {args.job} in namespace {namespace} asked for "
              f"{args.trainers} trainer(s) (was {before.trainers}; bounds "
              f"[{before.min_trainers}, {before.max_trainers}])")
    if args.pservers is not None:
        from elasticps.cluster.pserver_reshard import ClusterResharding, ReshardTimeouts

        timeout = ReshardTimeouts.job_s if args.reshard_timeout is None else args.reshard_timeout
        if timeout <= 0:
            raise ConfigError(f"--reshard-timeout={timeout:g} must be > 0 seconds")
        old = ClusterResharding(client, args.job, namespace, args.pservers,
                                ReshardTimeouts(job_s=timeout),
                                say=lambda line: print(line, flush=True)).run()
        if old == args.pservers:  # found at 0 pservers, the layout already at M
            print(f"elasticps scale: job {args.job} in namespace {namespace} has its "
                  f"{args.pservers} pserver(s) back")
        else:
            print(f"elasticps scale: job {args.job} in namespace {namespace} resharded from "
                  f"{old} to {args.pservers} pserver(s)")
    return 0


def run_autoscale(args: argparse.Namespace) -> int:
    from elasticps.cluster.autoscaler import ClusterAutoscaler, ClusterSettings

    if args.interval <= 0 or args.cooldown < 0 or args.min_gain < 0:
        raise ConfigError(f"--interval={args.interval} must be > 0, --cooldown="
                          f"{args.cooldown} and --min-gain={args.min_gain} >= 0")
    _job(args)
    namespace = args.namespace or user_namespace()
    scaler = ClusterAutoscaler(_client(args), args.job, namespace,
                               ClusterSettings(cooldown_s=args.cooldown, min_gain=args.min_gain))
    print(f"elasticps autoscale: watching job {args.job} in namespace {namespace} every "
          f"{args.interval:g}s")
    phase = scaler.run(args.interval)
    print(f"elasticps autoscale: job {args.job} is {phase}")
    return 0


def run_claim_upload(args: argparse.Namespace, report: Callable[[str, bool], None]) -> int:
    from elasticps.cluster.claim_upload import upload_to_claim
    from elasticps.cluster.spec import DEFAULT_IMAGE

    result = upload_to_claim(_client(args), args.local_dir, args.url,
                             namespace=args.namespace or user_namespace(), name=args.name,
                             overwrite=args.overwrite, image=args.image or DEFAULT_IMAGE,
                             ready_timeout=args.ready_timeout, on_file=report)
    print(f"uploaded {args.local_dir} to {result.url}: {len(result.copied)} file(s) copied "
          f"({result.bytes_copied:,} bytes), {len(result.skipped)} already there, all "
          "verified by sha256 in the transfer pod; its Job was deleted")
    print(f"job spec: data: {result.url}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    from elasticps.cluster.submit import delete_job

    job = _job(args)
    namespace = args.namespace or user_namespace()
    deleted = delete_job(_client(args), job, namespace)
    print(f"deleted job {args.job} in namespace {namespace}: {', '.join(deleted)}")
    return 0
