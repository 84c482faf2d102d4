"""``elasticps store``: look inside a job's coordination store (list, get, watch, who leads)."""

from __future__ import annotations

import argparse
from typing import Any

from elasticps.config import load_config
from elasticps.errors import ConfigError, NotFoundError
from elasticps.identity import Identity, store_user
from elasticps.store import KeyValue, Store, job_prefix, open_store
from elasticps.store.election import leader_value
from elasticps.store.keys import MASTER_ELECTION

EPILOG = """\
examples:
  elasticps store ls --store file:///tmp/ctr/job.db --job ctr
      every key of job "ctr" with its revisions and lease
  elasticps store get master/address
      one value (store and job from PADDLE_STORE / PADDLE_JOB_NAME)
  elasticps store watch pserver/ --count 5
      print the next 5 changes under pserver/ as they happen
  elasticps store leader master/election
      the value the current master published with its election lock
  elasticps store --store 'etcd://etcd-0:2379?tls=/etc/root' --job ctr setup-auth
      as etcd's root user (the certificate in /etc/root), limit the job's etcd user to
      /elasticps/ctr/ and enable auth (the job's setup Job runs this)
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "store",
        help="inspect a job's coordination store (etcd or embedded)",
        description="Read a job's keys in the coordination store. Keys are relative to the job "
        "(/elasticps/<job>/ is added for you). The store and job default to PADDLE_STORE and "
        "PADDLE_JOB_NAME.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--store", help="store URL: etcd://host:2379[,host:2379] or "
                        "file:///path/job.db (default: PADDLE_STORE)")
    parser.add_argument("--job", help="job name (default: PADDLE_JOB_NAME)")
    commands = parser.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    ls = commands.add_parser("ls", help="list keys under a prefix, sorted")
    ls.add_argument("prefix", nargs="?", default="", help="key prefix (default: everything)")
    ls.set_defaults(func=run_ls)
    get = commands.add_parser("get", help="print one key's value")
    get.add_argument("key")
    get.set_defaults(func=run_get)
    watch = commands.add_parser("watch", help="print changes under a prefix as they happen")
    watch.add_argument("prefix", nargs="?", default="")
    watch.add_argument("--from-revision", type=int, default=None,
                       help="replay history from this revision (default: only new changes)")
    watch.add_argument("--count", type=int, default=None, help="stop after this many events")
    watch.add_argument("--timeout", type=float, default=None,
                       help="stop after this many seconds without an event")
    watch.set_defaults(func=run_watch)
    leader = commands.add_parser("leader", help="print the current holder of an election lock")
    leader.add_argument("name", nargs="?", default=MASTER_ELECTION)
    leader.set_defaults(func=run_leader)
    setup = commands.add_parser(
        "setup-auth", help="etcd only: limit the job's user to the job's prefix, enable auth",
        description="Connect as etcd's root user (the client certificate of --store's ?tls= "
        "directory must name root), create the job's user with a role that may read and write "
        "only /elasticps/<job>/, and enable auth. Idempotent; waits up to 2 minutes for etcd.")
    setup.add_argument("--user", default=None,
                       help="the job's etcd user (default: elasticps-<job>, the common name "
                       "of the job's certificates)")
    setup.set_defaults(func=run_setup_auth)


def _open(args: argparse.Namespace) -> Store:
    overrides = {k: v for k, v in (("store", args.store), ("job_name", args.job)) if v}
    config = load_config(**overrides)
    if not config.store:
        raise ConfigError("no store given: pass --store URL or set PADDLE_STORE")
    return open_store(config.store, config.job_name)


def _show(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return repr(value)


def _line(kv: KeyValue) -> str:
    lease = f" lease={kv.lease:x}" if kv.lease else ""
    return (f"{kv.key}  rev={kv.mod_revision} created={kv.create_revision} "
            f"version={kv.version}{lease}  {_show(kv.value)}")


def run_ls(args: argparse.Namespace) -> int:
    with _open(args) as store:
        for kv in store.get_prefix(args.prefix):
            print(_line(kv))
        print(f"# revision {store.revision()}")
    return 0


def run_get(args: argparse.Namespace) -> int:
    with _open(args) as store:
        kv = store.get(args.key)
    if kv is None:
        raise NotFoundError(f"key {args.key!r} does not exist in this job's store")
    print(_show(kv.value))
    return 0


def run_watch(args: argparse.Namespace) -> int:
    seen = 0
    with _open(args) as store, store.watch_prefix(args.prefix, args.from_revision) as watch:
        while args.count is None or seen < args.count:
            event = watch.get(timeout=args.timeout)
            if event is None:
                break
            print(f"{event.revision} {event.type.name} {event.key} {_show(event.value)}",
                  flush=True)
            seen += 1
    return 0


def run_leader(args: argparse.Namespace) -> int:
    with _open(args) as store:
        value = leader_value(store, args.name)
    if value is None:
        print(f"nobody holds {args.name!r}")
        return 1
    print(_show(value))
    return 0


def run_setup_auth(args: argparse.Namespace) -> int:
    from elasticps.store.etcd_auth import setup_job_auth
    from elasticps.store.etcd_store import parse_endpoints
    from elasticps.store.etcd_tls import split_tls

    overrides = {k: v for k, v in (("store", args.store), ("job_name", args.job)) if v}
    config = load_config(**overrides)
    if not config.store or not config.store.startswith("etcd://"):
        raise ConfigError("setup-auth needs an etcd store: --store 'etcd://HOST:2379?tls=DIR'")
    tls_dir = split_tls(config.store)[1]
    if tls_dir is None:
        raise ConfigError("setup-auth needs root's certificate: add ?tls=DIR to the store URL")
    user = args.user or store_user(config.job_name)
    setup_job_auth(parse_endpoints(config.store), Identity.load(tls_dir), user,
                   job_prefix(config.job_name))
    print(f"etcd auth is on; user {user} may read and write {job_prefix(config.job_name)} only")
    return 0
