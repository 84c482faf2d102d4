"""With JSON logs, a role process's own output becomes JSON records too.

A log collector that parses JSON lines would otherwise meet a user's ``print()``, a warning and
a traceback as plain lines between the records, in the same file. :func:`capture` makes every
line written to ``sys.stdout`` a record of the ``stdout`` logger (INFO) and every line written
to ``sys.stderr`` one of ``stderr`` (WARNING), with the job, role and node like any record; a
warning becomes one ``py.warnings`` record; an uncaught exception, in the main thread or any
other, one ERROR record with the traceback in ``exc``.

Only what goes through Python's ``sys.stdout``/``sys.stderr`` is captured: bytes a C library or
a child process writes to file descriptors 1 and 2 stay as they are.
"""

from __future__ import annotations

import atexit
import io
import logging
import sys
import threading
import traceback
from types import TracebackType
from typing import TextIO

MAX_LINE = 64 * 1024  # a "line" with no newline this long is a record anyway

_inside = threading.local()  # set while a record is being written: its own output goes raw
_capturing = False  # capture() ran: tracebacks are records


class LineRecords(io.TextIOBase):
    """A text stream whose complete lines are logged, one record each."""

    def __init__(self, logger: logging.Logger, level: int, raw: TextIO) -> None:
        super().__init__()
        self.logger = logger
        self.level = level
        self.raw = raw  # the stream it replaces, for what must not loop back into logging
        self._partial = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.raw.fileno()  # faulthandler and subprocesses write there directly

    def write(self, text: str) -> int:
        if getattr(_inside, "active", False):  # logging reporting its own failure
            return self.raw.write(text)
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            if len(self._partial) >= MAX_LINE:
                lines.append(self._partial)
                self._partial = ""
        for line in lines:
            self._emit(line.rstrip("\r"))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def close_line(self) -> None:
        """Log what was written after the last newline (at exit)."""
        with self._lock:
            rest, self._partial = self._partial, ""
        if rest:
            self._emit(rest)

    def _emit(self, line: str) -> None:
        _inside.active = True
        try:
            self.logger.log(self.level, line)
        finally:
            _inside.active = False


def _log_uncaught(kind: type[BaseException], exc: BaseException,
                  tb: TracebackType | None, what: str) -> None:
    logging.getLogger("elasticps").error("An uncaught %s ended %s: %s", kind.__name__, what,
                                         exc, exc_info=(kind, exc, tb))


def report_exception(exc: BaseException, tb: TracebackType | None, message: str) -> None:
    """An exception that ends the process's work (a trainer script's error): with capture on,
    one ERROR record saying ``message`` with the traceback ``tb`` in ``exc``; else the
    traceback on stderr, as the interpreter would print it."""
    if _capturing:
        logging.getLogger("elasticps").error(message, exc_info=(type(exc), exc, tb))
    else:
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def capture() -> None:
    """Turn this process's stdout, stderr, warnings and uncaught exceptions into log records
    (call once, after the JSON handler is set up: it keeps writing to the real stderr)."""
    streams = []
    for name, level in (("stdout", logging.INFO), ("stderr", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)  # a user's print is shown whatever the -v level
        stream = LineRecords(logger, level, getattr(sys, name))
        setattr(sys, name, stream)
        streams.append(stream)
    for stream in streams:
        atexit.register(stream.close_line)
    logging.captureWarnings(True)
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException,
                   tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, exc, tb)
            return
        _log_uncaught(kind, exc, tb, "the process")

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and not issubclass(args.exc_type, SystemExit):
            what = f"thread {args.thread.name}" if args.thread else "a thread"
            _log_uncaught(args.exc_type, args.exc_value, args.exc_traceback, what)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    global _capturing
    _capturing = True
