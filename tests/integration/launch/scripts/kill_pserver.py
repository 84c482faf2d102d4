"""Trainer script for a launcher test: SIGKILL pserver 0, wait until a new one holds its slot."""

import json
import os
import signal
import time

from elasticps.config import load_config
from elasticps.store import open_store

config = load_config()
assert config.store is not None
store = open_store(config.store, config.job_name)


def slot_pid() -> int | None:
    kv = store.get("pserver/slot/0")
    return int(json.loads(kv.value)["pid"]) if kv is not None else None


deadline = time.monotonic() + 60
while (old := slot_pid()) is None:
    assert time.monotonic() < deadline, "pserver 0 never took its slot"
    time.sleep(0.05)
print(f"killing pserver 0 (pid {old})", flush=True)
os.kill(old, signal.SIGKILL)
while (new := slot_pid()) in (None, old):
    assert time.monotonic() < deadline, "pserver 0 did not come back"
    time.sleep(0.05)
print(f"pserver 0 is back as pid {new}", flush=True)
store.close()
