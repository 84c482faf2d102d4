"""``elasticps serve``'s HTTP endpoints on a real server and a real model directory: health
before and after a version, scores in the dataset's column names that match the version named,
and bad requests refused with 400/411/413 naming the bad field, row or column, changing
nothing."""

from __future__ import annotations

import http.client
import json

import pytest

from elasticps.trainer.model_dir import LATEST
from tests.unit.serve.conftest import Served
from tests.unit.serve.tiny_model import expected, publish_version

ROWS = [{"x": 1.5, "item": 3}, {"x": -2.0, "item": 49}, {"item": 0}]


def test_health_is_503_until_a_version_is_loaded_then_200_naming_it(served: Served) -> None:
    assert served.request("GET", "/healthz")[0] == 503
    code, answer = served.score(ROWS)
    assert code == 503
    assert "no model version is loaded" in answer["error"]
    publish_version(served.root, "full")
    assert served.follower.step()
    assert served.request("GET", "/healthz") == (200, {"status": "ok", "version": 1})


def test_a_streams_version_is_reported_with_the_newest_partition_it_trained(
        served: Served) -> None:
    stream = {"partitions": 3, "newest": "dt=2026-12-01/hour=02",
              "newest_committed_at": 1796100000.5}
    publish_version(served.root, "full", stream=stream)
    assert served.follower.step()
    assert served.request("GET", "/healthz") == (
        200, {"status": "ok", "version": 1, "partition": "dt=2026-12-01/hour=02"})
    code, version = served.request("GET", "/version")
    assert code == 200
    assert version["position"]["stream"] == stream


def test_scores_are_those_of_the_version_the_answer_names(served: Served) -> None:
    publish_version(served.root, "full")
    served.follower.step()
    code, answer = served.score(ROWS)
    assert code == 200
    assert answer["version"] == 1
    assert answer["scores"] == pytest.approx(expected(1, ROWS), rel=1e-12)
    publish_version(served.root)  # a delta: version 2
    assert served.follower.step()
    code, answer = served.score(ROWS)
    assert answer["version"] == 2
    assert answer["scores"] == pytest.approx(expected(2, ROWS), rel=1e-12)
    assert answer["scores"] != pytest.approx(expected(1, ROWS), rel=1e-6)
    code, version = served.request("GET", "/version")
    assert (version["version"], version["kind"], version["base"]) == (2, "delta", 1)
    assert version["position"] == {"value": 2.0}
    assert version["committed_at"] == 1002.0
    assert version["freshness_s"] is not None  # the first answer with it was above


@pytest.mark.parametrize(("body", "code", "message"), [
    (b"{not json", 400, "the body is not JSON"),
    (b'[1, 2]', 400, 'field "rows" is missing or not a list'),
    (b'{"rows": {"x": 1}}', 400, 'field "rows" is missing or not a list'),
    (b'{"rows": [], "model": "b"}', 400, "unknown field 'model'"),
    (b'{"rows": []}', 400, "rows is empty"),
    (b'{"rows": [[1.5, 3]]}', 400, "row 0 is a list, not an object"),
    (b'{"rows": [{"x": 1, "item": 2}, {"x": 1, "itme": 2}]}', 400,
     "row 1: column 'itme' is not one the model reads; its columns are x, item"),
    (b'{"rows": [{"x": 1, "item": 2}, {"x": "abc", "item": 2}]}', 400, "column 'x'"),
    (b'{"rows": [{"item": 60}]}', 400, "column 'item'"),
    (json.dumps({"rows": [{"item": 1}] * 9}).encode(), 413, "9 rows, at most 8"),
    (json.dumps({"rows": [{"item": 1, "x": 0.5}] * 300}).encode(), 413, "at most 4096"),
])
def test_a_bad_request_is_refused_naming_what_is_wrong_and_changes_nothing(
        served: Served, body: bytes, code: int, message: str) -> None:
    publish_version(served.root, "full")
    served.follower.step()
    got, answer = served.request("POST", "/score", raw=body)
    assert got == code
    assert message in answer["error"]
    assert served.score(ROWS)[1]["scores"] == pytest.approx(expected(1, ROWS), rel=1e-12)


def test_a_body_must_say_its_length(served: Served) -> None:
    code, answer = served.request("POST", "/score", raw=b'{"rows": []}',
                                  headers={"Transfer-Encoding": "chunked"})
    assert code == 411
    assert "Content-Length" in answer["error"]


def test_other_paths_and_methods_are_refused(served: Served) -> None:
    assert served.request("GET", "/score")[0] == 405
    code, answer = served.request("GET", "/admin")
    assert code == 404
    assert "'/admin'" in answer["error"]
    assert served.request("POST", "/healthz", {})[0] == 404


def test_a_version_that_cannot_be_loaded_leaves_the_one_served(served: Served) -> None:
    publish_version(served.root, "full")
    served.follower.step()
    broken = publish_version(served.root)
    (served.root / broken.path / "model.safetensors").write_bytes(b"garbage")
    assert not served.follower.step()
    assert 2 in served.follower.failed
    assert served.request("GET", "/healthz")[1]["version"] == 1
    assert served.score(ROWS)[1]["version"] == 1
    publish_version(served.root, "full")  # version 3: a new chain
    assert served.follower.step()
    assert served.score(ROWS)[1]["scores"] == pytest.approx(expected(3, ROWS), rel=1e-12)


def test_metrics_report_the_version_served(served: Served) -> None:
    publish_version(served.root, "full")
    served.follower.step()
    served.score(ROWS)
    connection = http.client.HTTPConnection("127.0.0.1", served.server.port, timeout=10)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    assert 'elasticps_serve_model_version{role="serve"} 1.0' in text
    assert 'elasticps_serve_rows_total{role="serve"} 3.0' in text


def test_a_pointer_that_is_not_one_loads_nothing(served: Served) -> None:
    publish_version(served.root, "full")
    (served.root / LATEST).write_text("{}")
    assert not served.follower.step()
    assert served.follower.current is None
    assert served.request("GET", "/healthz")[0] == 503
