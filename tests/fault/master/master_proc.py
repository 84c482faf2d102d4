"""A real master process over a synthetic chunk list (no dataset files needed).

Usage: python -m tests.fault.master.master_proc STORE_URL JOB TOKEN NUM_CHUNKS CHUNKS_PER_TASK
NUM_PASSES LEASE_TTL TASK_LEASE. Runs :class:`MasterServer` exactly as ``elasticps master``
does; only the chunk lister is synthetic.
"""

from __future__ import annotations

import logging
import signal
import sys

from elasticps.data.batch_plan import BatchPlan
from elasticps.master.server import MasterOptions, MasterServer
from elasticps.master.task_queue import QueuePolicy
from elasticps.store import open_store
from tests.helpers import job_credentials
from tests.integration.master.helpers import synthetic_chunks


def main(argv: list[str]) -> int:
    url, job, token, num_chunks, per_task, passes, ttl, task_lease = argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    store = open_store(url, job)
    options = MasterOptions(job=job, credentials=job_credentials(job, "master", token),
                            lease_ttl=int(ttl),
                            policy=QueuePolicy(task_lease=float(task_lease)),
                            dataset="synthetic://", chunks_per_task=int(per_task),
                            num_passes=int(passes), batch_plan=BatchPlan(10))
    server = MasterServer(store, options, lambda _url: synthetic_chunks(int(num_chunks)))
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    try:
        return server.run()
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
