"""Reading a master's status document (``/api/status``) over HTTP, bounded.

The launcher's watch, ``elasticps status`` and ``elasticps ui`` find the master's address in
the store. Once that master is dead its port is free, and another user of the machine can bind
it within a second: whatever answers may be anyone's. So a read stops at
:data:`MAX_STATUS_BYTES` (the master's own document is tens of KiB) and after its timeout in
all, not per packet; a larger answer is reported, never read to its end.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from typing import Any

log = logging.getLogger(__name__)

MAX_STATUS_BYTES = 8 << 20  # 8 MiB: what any reader of a status document reads at most
_BLOCK = 64 << 10


class StatusTooLargeError(ValueError):
    """An answer at a status URL held more than MAX_STATUS_BYTES."""


def read_bounded(response: Any, url: str, deadline: float) -> bytes:
    """The body of an ``http.client`` response, read as it arrives until ``deadline``
    (``time.monotonic()``) and at most :data:`MAX_STATUS_BYTES`."""
    blocks: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not finish its answer in time")
        block = response.read1(_BLOCK)
        if not block:
            return b"".join(blocks)
        total += len(block)
        if total > MAX_STATUS_BYTES:
            raise StatusTooLargeError(
                f"the answer at {url} is larger than {MAX_STATUS_BYTES >> 20} MiB, more than "
                "any status document; it was not read further (is another process listening "
                "on the master's old port?)")
        blocks.append(block)


def fetch_status(http: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The document at ``http://HTTP/api/status``, or None when nothing answers in
    ``timeout`` seconds or the answer is not a status document (one too large is logged)."""
    url = f"http://{http}/api/status"
    deadline = time.monotonic() + timeout
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            doc = json.loads(read_bounded(response, url, deadline))
    except StatusTooLargeError as exc:
        log.warning("%s", exc)
        return None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


__all__ = ["MAX_STATUS_BYTES", "StatusTooLargeError", "fetch_status", "read_bounded"]
