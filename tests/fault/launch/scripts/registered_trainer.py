"""Trainer script for a launcher test: registers with the job as a real trainer does
(``trainer/<name>`` under its store lease, carrying its pid), says it is up, and blocks until
signalled. SIGTERM unwinds it through ``finally``, so it leaves the job as a real trainer does."""

import os
import signal

from elasticps.config import load_config
from elasticps.master.client import MasterClient
from elasticps.rpc import credentials_from_config
from elasticps.store import open_store

config = load_config()
assert config.store is not None
store = open_store(config.store, config.job_name)
client = MasterClient(store, credentials_from_config(config),
                      f"trainer-{config.trainer_id}-{os.getpid()}", lease_ttl=config.lease_ttl)
try:
    client.register_trainer()
    print("trainer is up", flush=True)
    signal.pause()
finally:
    client.close()
    store.close()
    print("trainer left the job", flush=True)
