"""A separate process that uses the store, for the contract tests' cross-process cases.

    python -m tests.contract.store_worker cas URL JOB KEY N
        N compare-and-set increments of the decimal counter at KEY; prints "done ATTEMPTS".
    python -m tests.contract.store_worker hold URL JOB NAME TTL VALUE
        campaigns for election NAME, prints "leader TOKEN", then for every line "write" on stdin
        tries a fenced write of VALUE to "state" and prints "written" or "refused".
"""

from __future__ import annotations

import sys

from elasticps.errors import NotLeaderError
from elasticps.store import Put, open_store
from elasticps.store.election import Election


def cas(url: str, job: str, key: str, count: int) -> int:
    attempts = 0
    with open_store(url, job) as store:
        for _ in range(count):
            current = store.get(key)
            while True:
                attempts += 1
                value = int(current.value) + 1 if current else 1
                expected = current.mod_revision if current else 0
                written, current = store.compare_and_set(key, str(value).encode(), expected)
                if written:
                    break
    print(f"done {attempts}", flush=True)
    return 0


def hold(url: str, job: str, name: str, ttl: int, value: bytes) -> int:
    with open_store(url, job) as store:
        election = Election(store, name, value, ttl)
        if not election.campaign(timeout=60):
            print("lost", flush=True)
            return 1
        print(f"leader {election.fencing().expected}", flush=True)
        for line in sys.stdin:
            if line.strip() != "write":
                continue
            try:
                election.leader_txn([Put("state", value)])
                print("written", flush=True)
            except NotLeaderError:
                print("refused", flush=True)
    return 0


def main(argv: list[str]) -> int:
    command, url, job, *rest = argv
    if command == "cas":
        return cas(url, job, rest[0], int(rest[1]))
    if command == "hold":
        return hold(url, job, rest[0], int(rest[1]), rest[2].encode())
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
