"""Where a warm start reads its export: ``--warm-start`` names either an export directory
(``manifest.json``: a full export or the newest delta of a chain) or a model directory that
publishes numbered versions, whose ``LATEST`` pointer (read by
:func:`~elasticps.trainer.model_dir.read_latest`) names the export to start from."""

from __future__ import annotations

import os
from pathlib import Path

from elasticps.errors import ConfigError
from elasticps.trainer.export_chain import MANIFEST
from elasticps.trainer.model_dir import LATEST, ModelDirError, read_latest


def export_of(model_dir: str | os.PathLike[str]) -> Path:
    """The export directory ``model_dir`` names (itself, or the version its ``LATEST`` names);
    a ConfigError naming ``model_dir`` when it is neither."""
    root = Path(model_dir)
    if (root / MANIFEST).is_file():
        return root
    try:
        record = read_latest(root)
    except ModelDirError as exc:
        raise ConfigError(f"--warm-start {model_dir}: {exc}") from exc
    if record is None:
        raise ConfigError(f"--warm-start {model_dir}: neither an export (no {MANIFEST}) nor a "
                          f"model directory (no {LATEST})")
    return root / record.path
