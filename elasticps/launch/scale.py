"""``elasticps scale`` of a local job: change the number of trainers (or pservers) of a running
job.

The launcher (``elasticps run``) follows the store key ``launcher/desired_trainers``: when it
grows it starts trainers; when it shrinks it sends SIGTERM to the newest trainers, which leave
gracefully (their pending tasks go back to todo at once, without counting as a failure). This
command writes that key; it finds the job through ``WORKDIR/job.json`` (written by the launcher)
or through ``JOB --store URL``. (The command, for local and cluster jobs, is in
:mod:`elasticps.jobs_cli`; :mod:`elasticps.cluster.trainer_scale` changes a cluster job's.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from elasticps.errors import ConfigError

if TYPE_CHECKING:
    from elasticps.store.api import Store

JOB_FILE = "job.json"
MAX_TRAINERS = 1000


def job_location(workdir: str | None, job: str | None, store: str | None) -> tuple[str, str]:
    """(store URL, job name) from a launcher workdir or from JOB + --store."""
    if workdir is not None:
        path = Path(workdir) / JOB_FILE
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--workdir={workdir!r} holds no readable {JOB_FILE} (is a job "
                              f"launched there with `elasticps run --workdir`?): {exc}") from exc
        return str(doc["store"]), str(doc["job_name"])
    if job is None or store is None:
        raise ConfigError("name the job: either --workdir DIR, or JOB --store URL")
    return store, job


def set_desired_trainers(store_url: str, job_name: str, trainers: int) -> None:
    from elasticps.store import open_store

    with open_store(store_url, job_name) as store:
        write_desired_trainers(store, trainers, "scale")


def write_desired_trainers(store: Store, trainers: int, source: str, why: str = "") -> None:
    """Ask the launcher for ``trainers`` trainers, and say so on the job's timeline."""
    from elasticps.store.keys import (
        DESIRED_TRAINERS,
        JobEvent,
        decode_desired_trainers,
        encode_desired_trainers,
        record_event,
    )

    if not 0 <= trainers <= MAX_TRAINERS:
        raise ConfigError(f"--trainers={trainers} must be within [0, {MAX_TRAINERS}]")
    kv = store.get(DESIRED_TRAINERS)
    before = f" (was {decode_desired_trainers(kv.value)})" if kv is not None else ""
    store.put(DESIRED_TRAINERS, encode_desired_trainers(trainers))
    # the status page's timeline; the joins and leaves that follow are the master's
    record_event(store, JobEvent("scale", "trainers", f"asked for {trainers} trainer(s){before}"
                                 + (f": {why}" if why else ""), source))


def write_desired_pservers(store: Store, pservers: int, source: str) -> None:
    """Ask the launcher to reshard onto ``pservers`` pservers, and say so on the timeline."""
    from elasticps.store.keys import (
        DESIRED_PSERVERS,
        MAX_PSERVERS_IN_LAYOUT,
        JobEvent,
        encode_desired_pservers,
        record_event,
    )

    if not 1 <= pservers <= MAX_PSERVERS_IN_LAYOUT:
        raise ConfigError(f"--pservers={pservers} must be within [1, {MAX_PSERVERS_IN_LAYOUT}]")
    store.put(DESIRED_PSERVERS, encode_desired_pservers(pservers))
    record_event(store, JobEvent("scale", "pservers", f"asked for {pservers} pserver(s)",
                                 source))


def scale_command(args: argparse.Namespace) -> int:
    from elasticps.store import open_store

    store_url, job_name = job_location(args.workdir, args.job, args.store)
    if args.trainers is not None:
        set_desired_trainers(store_url, job_name, args.trainers)
        print(f"elasticps scale: job {job_name} asked for {args.trainers} trainer(s); the "
              "launcher follows within a second")
    if args.pservers is not None:
        with open_store(store_url, job_name) as store:
            write_desired_pservers(store, args.pservers, "scale")
        print(f"elasticps scale: job {job_name} asked for {args.pservers} pserver(s); the "
              "launcher reshards (trainers pause until the new pservers serve)")
    return 0
