"""Where a warm start reads its export: ``--warm-start`` names either an export directory
(``manifest.json``: a full export or the newest delta of a chain) or a model directory that
publishes numbered versions, whose ``LATEST`` pointer (JSON with the newest version's ``path``,
relative to the directory) names the export to start from."""

from __future__ import annotations

import json
import os
from pathlib import Path

from elasticps.errors import ConfigError
from elasticps.trainer.export_chain import MANIFEST

LATEST = "LATEST"
MAX_POINTER_BYTES = 1 << 20


def export_of(model_dir: str | os.PathLike[str]) -> Path:
    """The export directory ``model_dir`` names (itself, or the version its ``LATEST`` names);
    a ConfigError naming ``model_dir`` when it is neither."""
    root = Path(model_dir)
    if (root / MANIFEST).is_file():
        return root
    pointer = root / LATEST
    if not pointer.is_file():
        raise ConfigError(f"--warm-start {model_dir}: neither an export (no {MANIFEST}) nor a "
                          f"model directory (no {LATEST})")
    raw = pointer.read_bytes()[:MAX_POINTER_BYTES + 1]
    try:
        path = json.loads(raw)["path"] if len(raw) <= MAX_POINTER_BYTES else None
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--warm-start {model_dir}: {pointer} is not a model directory's "
                          f"pointer: {exc!r:.200}") from exc
    if not isinstance(path, str) or not path or os.path.isabs(path) or ".." in Path(path).parts:
        raise ConfigError(f"--warm-start {model_dir}: {pointer} names {path!r:.200}, not a "
                          "version inside the directory")
    return root / path
