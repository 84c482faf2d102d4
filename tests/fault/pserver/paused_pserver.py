"""``elasticps pserver`` whose second checkpoint pauses after its data file is written and fsynced,
before the rename: a test SIGKILLs it there, mid-write.

Usage: ``python -m tests.fault.pserver.paused_pserver`` with the pserver's PADDLE_* environment.
It runs the real :class:`~elasticps.pserver.server.PServerProcess`; only the injected
``before_publish`` hook is the test's. When it pauses it writes ``<temp file>.paused``.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from elasticps.config import load_config
from elasticps.pserver.server import main

PAUSE_AT_SAVE = 2
log = logging.getLogger("tests.fault.pserver.paused_pserver")


def pause_one_save(at: int) -> Callable[[str], None]:
    saves = itertools.count(1)

    def before_publish(temp: str) -> None:
        if next(saves) != at:
            return
        log.warning("Pausing checkpoint write %s before its rename (fault injection).", temp)
        Path(f"{temp}.paused").write_bytes(b"paused\n")
        threading.Event().wait()  # until the test kills the process

    return before_publish


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main(load_config(role="pserver"), before_publish=pause_one_save(PAUSE_AT_SAVE)))
