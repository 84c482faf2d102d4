"""Trainer script for a launcher test: runs until it is signalled."""

import signal

print("trainer is up", flush=True)
signal.pause()
