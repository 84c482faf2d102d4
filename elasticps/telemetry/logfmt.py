"""Log lines that name the job, the role and the node, as text or as JSON lines.

Text: ``2025-01-02 10:11:12,345 INFO [job ctr-1a2b role pserver node pserver-0] elasticps...:
message``. JSON lines (``PADDLE_LOG_FORMAT=json`` or ``elasticps --log-format json``): one
object per line with ``time``, ``level``, ``job``, ``role``, ``node``, ``logger``, ``message``
(and ``exc`` with a traceback), for log collectors that parse fields.

The node starts as ``<host>-<pid>`` and a role renames it once it knows better
(:func:`set_node`: the master's election node, ``pserver-<slot>``, the trainer's name).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")
_context: dict[str, str] = {"job": "-", "role": "-",
                            "node": f"{socket.gethostname()}-{os.getpid()}"}


def process_node(role: str, trainer_id: int | None = None) -> str:
    """A role process's name before it knows a better one: ``master-<host>-<pid>``,
    ``pserver-<host>-<pid>``; a trainer's is its name for good, ``trainer-<id>-<host>-<pid>``."""
    index = f"{trainer_id}-" if role == "trainer" and trainer_id is not None else ""
    return f"{role}-{index}{socket.gethostname()}-{os.getpid()}"


def set_context(*, job: str | None = None, role: str | None = None,
                node: str | None = None) -> None:
    for key, value in (("job", job), ("role", role), ("node", node)):
        if value:
            _context[key] = value


def set_node(node: str) -> None:
    set_context(node=node)


def context() -> dict[str, str]:
    return dict(_context)


class ContextFilter(logging.Filter):
    """Puts the job, role and node on every record (``%(job)s``, ``%(role)s``, ``%(node)s``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.job = _context["job"]
        record.role = _context["role"]
        record.node = _context["node"]
        return True


TEXT_FORMAT = ("%(asctime)s %(levelname)s [job %(job)s role %(role)s node %(node)s] "
               "%(name)s: %(message)s")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "job": getattr(record, "job", _context["job"]),
            "role": getattr(record, "role", _context["role"]),
            "node": getattr(record, "node", _context["node"]),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def configure(level: int, fmt: str = "text", *, job: str | None = None,
              role: str | None = None, node: str | None = None) -> None:
    """Set up the root logger: one stderr handler in ``fmt`` (``text`` or ``json``)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    set_context(job=job, role=role, node=node)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
