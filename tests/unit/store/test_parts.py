"""Unit tests for the store's pure pieces: URL parsing, prefix ranges, the monotonic clock."""

from __future__ import annotations

import subprocess
import sys

import pytest

from elasticps.errors import ConfigError
from elasticps.store._common import prefix_range_end
from elasticps.store.embedded_store import monotonic_now
from elasticps.store.etcd_store import parse_endpoints


def test_parse_endpoints_keeps_order() -> None:
    assert parse_endpoints("etcd://a:2379, b.example:2380/") == [("a", 2379), ("b.example", 2380)]


@pytest.mark.parametrize("url", ["etcd://", "etcd://a", "etcd://a:x", "etcd://:2379",
                                 "etcd://a:2379,b:99999", "http://a:2379"])
def test_parse_endpoints_names_the_bad_part(url: str) -> None:
    with pytest.raises(ConfigError, match="etcd"):
        parse_endpoints(url)


@pytest.mark.parametrize(("prefix", "end"), [
    (b"/a/", b"/a0"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"", b"\0")])
def test_prefix_range_end_bounds_exactly_the_prefix(prefix: bytes, end: bytes) -> None:
    assert prefix_range_end(prefix) == end
    if prefix and end != b"\0":
        assert prefix + b"\xff" * 4 < end
        assert prefix < end


def test_monotonic_clock_is_shared_by_processes() -> None:
    """Lease expiry compares one process's clock with another's; CLOCK_MONOTONIC allows it."""
    before = monotonic_now()
    child = float(subprocess.run(
        [sys.executable, "-c", "import time; print(time.clock_gettime(time.CLOCK_MONOTONIC))"],
        check=True, capture_output=True, text=True).stdout)
    after = monotonic_now()
    assert before <= child <= after
