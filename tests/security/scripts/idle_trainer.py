"""A trainer script that does nothing until the launcher stops it: the job's servers stay up
for a test to probe."""

import signal

print("trainer is up", flush=True)
signal.pause()
