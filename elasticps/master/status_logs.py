"""The role logs a local job keeps in ``WORKDIR/logs`` (``master.log``, ``pserver-0.log``,
``trainer-1.log``...), as the status page shows them: the names, and the last lines of one.

Only files named like a role's log are ever read, so a request names a log, never a path.
A cluster job has no such directory (its logs are the pods'); its page lists none.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_LOG_NAME = re.compile(r"^(master|pserver|trainer)(-\d{1,6})?$")
TAIL_BYTES = 64 * 1024  # read from a log's end: a few hundred lines
TAIL_LINES = 200


class LogFiles:
    """The role logs in ``directory`` (None: there are none)."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = Path(directory) if directory is not None else None

    def names(self) -> list[str]:
        if self.directory is None or not self.directory.is_dir():
            return []
        found = [p.stem for p in self.directory.glob("*.log") if _LOG_NAME.match(p.stem)]
        return sorted(found, key=_order)

    def tail(self, name: str, lines: int = TAIL_LINES) -> str | None:
        """The last ``lines`` lines of log ``name`` (None: no such log)."""
        if self.directory is None or not _LOG_NAME.match(name):
            return None
        path = self.directory / f"{name}.log"
        try:
            with open(path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - TAIL_BYTES))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return None
        return "\n".join(text.splitlines()[-lines:])


def _order(name: str) -> tuple[int, int]:
    role, _, index = name.partition("-")
    return (("master", "pserver", "trainer").index(role), int(index) if index else -1)
