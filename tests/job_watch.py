"""The tests' watch of a job, run where the job's network is (e.g. inside a network namespace).

Run as ``python -m tests.job_watch --store URL --job NAME --token T --tls-dir DIR --pservers N
--checkpoints DIR``; it reads one command per line on stdin and answers one JSON line on stdout:

- ``health``: ``{"ok": true}`` once the store answers;
- ``status``: the master's ``/api/status`` document (``null`` while no master serves);
- ``task ID``: the master's persisted record of task ID (``state``, ``pass``, ``epoch``,
  ``owner``, ``failures``, ``last_error``), ``null`` if never dispatched;
- ``progress``: what each trainer last published (``job/progress/<trainer>``: batches, ...);
- ``pservers``: the pserver shards' counters (pushes, duplicates, ...);
- ``accounting``: the exactly-once accounting of the job (``elasticps.chaos.accounting``).

Each command line starts with a tag the answer ``{"tag": TAG, "reply": ...}`` repeats, so a
late answer to a command that timed out is never taken for the next one. Every failure is
answered as ``{"error": "..."}``, so a test polls it with deadlines.
:class:`WatchProcess` is the test side: it owns the process's pipes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import subprocess
import sys
import threading
import time
from typing import Any


def _serve(args: argparse.Namespace) -> int:
    from elasticps.chaos.accounting import job_accounting
    from elasticps.master.snapshot import decode_task
    from elasticps.master.status_read import fetch_status
    from elasticps.pserver.client import PServerClient
    from elasticps.rpc.credentials import JobCredentials
    from elasticps.rpc.tls import TlsIdentity
    from elasticps.store import Store, open_store
    from elasticps.store.keys import master_task_key, read_master_address, read_progress

    store: Store | None = None
    pservers: PServerClient | None = None

    def the_store() -> Store:
        nonlocal store
        if store is None:
            store = open_store(args.store, args.job)
        return store

    def answer(words: list[str]) -> Any:
        nonlocal pservers
        if words == ["health"]:
            the_store().revision()
            return {"ok": True}
        if words == ["status"]:
            address = read_master_address(the_store())
            return None if address is None else fetch_status(address.http, timeout=2.0)
        if len(words) == 2 and words[0] == "task":
            kv = the_store().get(master_task_key(int(words[1])))
            if kv is None:
                return None
            rec = decode_task(kv.value)
            return {"state": rec.state.value, "pass": rec.pass_id, "epoch": rec.epoch,
                    "owner": rec.owner, "failures": rec.failures, "last_error": rec.last_error}
        if words == ["progress"]:
            return {name: json.loads(p.encode()) for name, p in read_progress(the_store()).items()}
        if words == ["pservers"]:
            if pservers is None:
                credentials = JobCredentials(args.job, args.token,
                                             TlsIdentity.load(args.tls_dir))
                pservers = PServerClient(the_store(), credentials, args.pservers, deadline=5.0,
                                         call_timeout=5.0, name="watch")
            return pservers.stats()
        if words == ["accounting"]:
            return job_accounting(the_store(), args.checkpoints, args.pservers)
        raise ValueError(f"unknown command {' '.join(words)!r}")

    for line in sys.stdin:
        tag, *words = line.split() or ["-"]
        if words == ["quit"]:
            break
        try:
            reply = answer(words)
        except Exception as exc:  # answered, so the test sees it and polls again
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps({"tag": tag, "reply": reply}), flush=True)
    if pservers is not None:
        pservers.close()
    if store is not None:
        store.close()
    return 0


class WatchProcess:
    """The test's side of a running watch process (stdin/stdout pipes)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self.proc = proc
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._lock = threading.Lock()
        self._tags = itertools.count()
        threading.Thread(target=self._read, daemon=True, name="watch-reader").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def ask(self, command: str, timeout: float = 30.0) -> Any:
        """The watch's answer to ``command``; raises if it does not come in ``timeout``."""
        with self._lock:
            assert self.proc.stdin is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the watch exited with {self.proc.returncode}")
            tag = str(next(self._tags))
            self.proc.stdin.write(f"{tag} {command}\n".encode())
            self.proc.stdin.flush()
            deadline = time.monotonic() + timeout
            while True:
                try:
                    doc = json.loads(self._lines.get(
                        timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    raise TimeoutError(f"the watch did not answer {command!r} in "
                                       f"{timeout}s") from None
                if doc.get("tag") == tag:
                    return doc["reply"]

    def ok(self, command: str, timeout: float = 30.0) -> Any:
        """Like :meth:`ask`, but an error answer is None (for polling)."""
        reply = self.ask(command, timeout)
        return None if isinstance(reply, dict) and "error" in reply else reply

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b"- quit\n")
                self.proc.stdin.close()
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--tls-dir", required=True, help="a TLS identity of the job")
    parser.add_argument("--pservers", type=int, required=True)
    parser.add_argument("--checkpoints", required=True)
    return _serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
