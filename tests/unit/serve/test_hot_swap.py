"""New versions land while clients score without pause: the follower (its own poll thread)
swaps each in, no request fails, and every answer's scores are those of the version it names."""

from __future__ import annotations

import functools
import http.client
import json
import threading

import pytest

from elasticps.trainer.model_dir import retire
from tests.helpers import wait_for
from tests.unit.serve.conftest import Served
from tests.unit.serve.tiny_model import expected, publish_version

VERSIONS = 12  # published while the clients score
CLIENTS = 4
ROWS = [{"x": 0.25 * i, "item": 7 * i % 50} for i in range(6)]


@pytest.mark.slow  # threads scoring for a few seconds
def test_versions_swap_in_while_clients_score_and_no_request_fails(served: Served) -> None:
    publish_version(served.root, "full")
    assert served.follower.step()  # version 1 before the first request
    served.follower.start()
    landed = threading.Event()
    problems: list[str] = []
    seen: list[list[int]] = [[] for _ in range(CLIENTS)]
    body = json.dumps({"rows": ROWS}).encode()

    def client(versions: list[int]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", served.server.port, timeout=30)
        try:  # one keep-alive connection, as a real client holds
            while not (landed.is_set() and versions and versions[-1] == VERSIONS):
                connection.request("POST", "/score", body=body)
                answer = connection.getresponse()
                doc = json.loads(answer.read())
                if answer.status != 200:
                    problems.append(f"{answer.status}: {doc}")
                    return
                if doc["scores"] != pytest.approx(expected(doc["version"], ROWS), rel=1e-12):
                    problems.append(f"version {doc['version']} answered {doc['scores']}")
                    return
                versions.append(doc["version"])
        except (OSError, http.client.HTTPException) as exc:
            problems.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()

    def answered_by(version: int) -> bool:
        return bool(problems) or all(v and v[-1] >= version for v in seen)

    threads = [threading.Thread(target=client, args=(mine,)) for mine in seen]
    for thread in threads:
        thread.start()
    for _ in range(VERSIONS - 1):
        # Each version is published once every client has been answered by the one before,
        # so every swap happens under load.
        record = publish_version(served.root, "full" if len(seen[0]) % 3 == 0 else "delta")
        retire(served.root, keep=1)  # old chains go while the server may be reading them
        wait_for(functools.partial(answered_by, record.version),
                 what=f"every client answered by version {record.version}", interval=0.002)
    landed.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not problems, problems[:3]
    for versions in seen:
        assert versions == sorted(versions)  # a client never goes back to an older version
        assert versions[-1] == VERSIONS
    assert {v for versions in seen for v in versions} == set(range(1, VERSIONS + 1))
    assert served.follower.failed == {}
