"""Bounds on the free text a request carries: names are refused when too long, reasons cut.

A name (a trainer's, a table's) ends up in store keys, logs and the status page; a failure
reason is logged and persisted with the task queue (whose store values are at most 1 MiB). A
peer that sends megabytes of either is refused (names) or cut short (reasons), at the edge.
"""

from __future__ import annotations

from elasticps.errors import InvalidArgumentError

MAX_NAME = 253  # a DNS name's length: hostnames and pids fit with room to spare
MAX_REASON = 2048


def check_name(value: str, what: str) -> str:
    """``value`` if it is 1-253 printable characters, else InvalidArgumentError."""
    if not value or len(value) > MAX_NAME or not value.isprintable():
        raise InvalidArgumentError(f"{what} must be 1-{MAX_NAME} printable characters, got "
                                   f"{value[:40]!r} ({len(value)} characters)")
    return value


def clip_text(value: str, limit: int = MAX_REASON) -> str:
    """``value`` cut to ``limit`` characters, saying how much was cut."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}... ({len(value) - limit} more characters cut)"
