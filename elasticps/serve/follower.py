"""Following a model directory: each new version loaded off the request path, then swapped in.

A :class:`ModelFollower` polls ``LATEST`` (:func:`~elasticps.trainer.model_dir.read_latest`)
every ``poll_s`` seconds in its own thread. A version newer than the one held is read and
applied onto the state held (:func:`~elasticps.trainer.export_chain.advance`: only the deltas
after it; the whole chain from its base when the held state is not on it), the user's code
builds the module, and the result replaces :attr:`ModelFollower.current` in one assignment.
A request reads ``current`` once and scores with that version to the end, so a swap neither
drops nor fails a request, and every answer names the version it used. A version that cannot
be loaded (corrupt, its chain retired while it was being read, the model code failing) is
logged and counted once; the version held keeps answering, a newer version is tried as soon as
it lands and the same one again after :data:`RETRY_FAILED_S`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from elasticps.serve.builder import Builder
from elasticps.serve.metrics import ServeMetrics
from elasticps.serve.scoring import LoadedVersion
from elasticps.trainer.export_chain import ExportChainError, State, advance, as_tensors
from elasticps.trainer.model_dir import VersionRecord, read_latest

log = logging.getLogger(__name__)

# A version that failed to load is tried again this long after (an I/O error may pass); a
# newer version is tried at once.
RETRY_FAILED_S = 30.0


class ModelFollower:
    """Holds the newest loadable version of the model directory ``root``."""

    def __init__(self, root: str | Path, build: Builder, *, poll_s: float = 1.0,
                 metrics: ServeMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.build = build
        self.poll_s = poll_s
        self.metrics = metrics
        self.clock = clock
        self.wall = wall
        self.current: LoadedVersion | None = None
        self.failed: dict[int, str] = {}  # version -> why it could not be loaded (latest only)
        self._failed_at = 0.0
        self._state: State | None = None
        self._first = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> bool:
        """One poll: load and swap in the version ``LATEST`` names if it is newer than the
        one held. True when a version was swapped in."""
        try:
            record = read_latest(self.root)
        except ExportChainError as exc:
            self._failed(-1, str(exc))
            return False
        held = self.current
        if record is None or (held is not None and record.version <= held.version):
            return False
        if record.version in self.failed and self.clock() - self._failed_at < RETRY_FAILED_S:
            return False  # the same broken version: wait for a newer one, or try it later
        try:
            self.current = self._load(record)
        except Exception as exc:  # the model's code is the user's: any error it raises
            self._failed(record.version, f"{type(exc).__name__}: {exc}")
            return False
        self.failed = {}
        stream = record.position.get("stream")
        log.info("Serving version %d of %s (%s, %s), loaded in %.3fs.", record.version,
                 self.root, record.kind,
                 f"trained through partition {stream.get('newest')}"
                 if isinstance(stream, dict) else f"position {record.position}",
                 self.current.load_s)
        return True

    def _load(self, record: VersionRecord) -> LoadedVersion:
        started = self.clock()
        state = advance(self._state, self.root / record.path)
        version = state.manifest.get("meta", {}).get("version")
        if version != record.version:
            raise ExportChainError(f"{self.root / record.path} records version {version!r}, "
                                   f"LATEST says {record.version}")
        model = self.build(as_tensors(state), state.manifest)
        loaded = LoadedVersion.build(record, state.manifest, model)  # warmed up
        loaded.load_s, loaded.loaded_at = self.clock() - started, self.wall()
        self._state = state
        if self.metrics is not None:
            self.metrics.load.observe(loaded.load_s)
        return loaded

    def _failed(self, version: int, why: str) -> None:
        self._failed_at = self.clock()
        if self.failed.get(version) == why:
            return  # told already: one warning per failure, not one per poll
        self.failed = {version: why}
        if self.metrics is not None:
            self.metrics.load_failures.inc()
        log.warning("Cannot load version %s of %s: %s; still serving version %s.",
                    version if version >= 0 else "(LATEST)", self.root, why,
                    self.current.version if self.current else "none")

    def answered(self, loaded: LoadedVersion) -> None:
        """An answer used ``loaded``: the first one sets its freshness."""
        if loaded.first_answer_at is not None:
            return
        with self._first:
            if loaded.first_answer_at is not None:
                return
            loaded.first_answer_at = self.wall()
        if self.metrics is not None:
            self.metrics.freshness.observe(loaded.first_answer_at - loaded.record.committed_at)

    # -- the thread -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="model-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.poll_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
