"""A model directory: numbered versions of a model export and the pointer to the newest one.

::

    MODEL_DIR/
      LATEST                     the pointer: {"format": "elasticps.model-dir/1", "version": 7,
                                 "path": "versions/000007", "kind": "delta", "base": 5,
                                 "depth": 2, "position": {...}, "committed_at": t,
                                 "published_at": t}
      versions/000005/           a full export (manifest.json, model.safetensors)
      versions/000006/           a delta of 000005
      versions/000007/           a delta of 000006
      versions/.tmp-000008-xyz/  being written: no reader looks here

A version is an export (:mod:`elasticps.trainer.export`) whose manifest's ``meta`` records its
``version``, its chain's ``base`` (the full export it builds on), its ``depth`` (deltas since
that base), the training ``position`` it reflects and ``committed_at``, the wall-clock time
(Unix seconds) at which that position's updates were all applied on the pservers.

**Publishing** (:func:`publish`) writes the export into a temporary directory, renames it to
its number (the rename is the claim: a number already taken refuses it, so two writers never
share one) and only then replaces ``LATEST``: written to a temporary file, fsynced, renamed
over the old pointer, the directory fsynced. A reader reads ``LATEST`` and then the version it
names (:func:`read_latest`), so it never sees a version half written, and a version stays
complete on disk from the moment any pointer names it. Old chains go (:func:`retire`) only
after the pointer names a newer version, and the newest ``keep`` chains always stay.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elasticps.trainer.export_chain import MANIFEST, ExportChainError

FORMAT = "elasticps.model-dir/1"
LATEST = "LATEST"
VERSIONS = "versions"
TMP_PREFIX = ".tmp-"
MAX_POINTER_BYTES = 1 << 20
STALE_TMP_S = 3600.0  # a temporary directory this old was left by a writer that died
KINDS = ("full", "delta")
_NUMBER = re.compile(r"[0-9]{1,18}")


class ModelDirError(ExportChainError):
    """A model directory whose pointer or versions cannot be read or written as they must."""


class VersionTakenError(ModelDirError):
    """Another writer published this version number first."""


@dataclass(frozen=True)
class VersionRecord:
    """What ``LATEST`` says of the version it names (see the module docstring)."""

    version: int
    path: str
    kind: str
    base: int
    depth: int
    position: dict[str, Any] = field(default_factory=dict)
    committed_at: float = 0.0
    published_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> VersionRecord:
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
            raise ModelDirError(f"{where} is not an elasticps model directory pointer "
                                f"(format {found!r}, expected {FORMAT!r})")
        try:
            record = cls(version=_int(raw["version"]), path=str(raw["path"]),
                         kind=str(raw["kind"]), base=_int(raw["base"]),
                         depth=_int(raw["depth"]), position=dict(raw.get("position") or {}),
                         committed_at=float(raw["committed_at"]),
                         published_at=float(raw["published_at"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelDirError(f"{where} is malformed: {exc!r:.200}") from exc
        if record.kind not in KINDS or record.path != version_path(record.version):
            raise ModelDirError(f"{where} names version {record.version} of kind "
                                f"{record.kind!r} at {record.path!r}; expected a kind of "
                                f"{KINDS} at {version_path(record.version)!r}")
        return record


@dataclass(frozen=True)
class Draft:
    """A version being written: what :func:`publish` hands the writer."""

    version: int
    kind: str
    base: int
    depth: int
    parent: Path | None  # the export a delta is made against
    meta: dict[str, Any]  # what the version's manifest records in ``meta``


Write = Callable[[Path, Draft], None]


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a non-negative integer")
    return value


def version_path(version: int) -> str:
    """Where version ``version`` lives, relative to the model directory."""
    return f"{VERSIONS}/{version:06d}"


def read_latest(root: str | os.PathLike[str]) -> VersionRecord | None:
    """The version ``LATEST`` names; None while there is none."""
    where = Path(root) / LATEST
    try:
        with open(where, "rb") as handle:
            raw = handle.read(MAX_POINTER_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModelDirError(f"cannot read {where}: {exc}") from exc
    if len(raw) > MAX_POINTER_BYTES:
        raise ModelDirError(f"{where} is over {MAX_POINTER_BYTES} bytes: not a pointer")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ModelDirError(f"{where} is not JSON: {exc}") from exc
    return VersionRecord.from_dict(doc, str(where))


def published_versions(root: str | os.PathLike[str]) -> list[int]:
    """The version numbers under ``versions/`` (published, or claimed by a writer), sorted."""
    try:
        names = os.listdir(Path(root) / VERSIONS)
    except FileNotFoundError:
        return []
    return sorted(int(name) for name in names if _NUMBER.fullmatch(name))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_pointer(root: Path, record: VersionRecord) -> None:
    """Replace ``LATEST`` with ``record`` in one rename; never a partial file."""
    tmp = root / f"{TMP_PREFIX}{LATEST}-{secrets.token_hex(4)}"
    with open(tmp, "x") as handle:
        handle.write(json.dumps(record.to_dict(), indent=1) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, root / LATEST)
    _fsync_dir(root)


def next_draft(root: Path, kind: str, meta: Mapping[str, Any]) -> Draft:
    """The next version after everything under ``versions/``: a full export, or a delta of
    the version ``LATEST`` names (a delta needs one)."""
    latest = read_latest(root)
    version = max([*published_versions(root), latest.version if latest else 0]) + 1
    if kind == "delta" and latest is not None:
        return Draft(version, kind, latest.base, latest.depth + 1, root / latest.path,
                     {**meta, "version": version, "base": latest.base,
                      "depth": latest.depth + 1})
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    return Draft(version, "full", version, 0, None,
                 {**meta, "version": version, "base": version, "depth": 0})


def publish(root: str | os.PathLike[str], kind: str, write: Write, *,
            position: Mapping[str, Any], committed_at: float,
            meta: Mapping[str, Any] | None = None,
            clock: Callable[[], float] = time.time) -> VersionRecord:
    """Write the next version with ``write(directory, draft)`` and point ``LATEST`` at it (see
    the module docstring). ``kind`` "delta" without a published version writes a full one.
    :class:`VersionTakenError` if another writer published the same number meanwhile."""
    root = Path(root)
    (root / VERSIONS).mkdir(parents=True, exist_ok=True)
    draft = next_draft(root, kind, {**(meta or {}), "position": dict(position),
                                    "committed_at": committed_at})
    tmp = root / VERSIONS / f"{TMP_PREFIX}{draft.version:06d}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        write(tmp, draft)
        _fsync_dir(tmp)
        final = root / version_path(draft.version)
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise VersionTakenError(f"version {draft.version} of {root} was published by "
                                   "another writer") from exc
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _fsync_dir(root / VERSIONS)
    record = VersionRecord(draft.version, version_path(draft.version), draft.kind, draft.base,
                           draft.depth, dict(position), committed_at, clock())
    latest = read_latest(root)
    if latest is not None and latest.version > record.version:
        # A writer that claimed a later number got there first; the pointer never goes back.
        raise VersionTakenError(f"{root}/{LATEST} already names version {latest.version}, after "
                           f"{record.version}")
    write_pointer(root, record)
    return record


def version_base(root: Path, version: int) -> int | None:
    """The base a published version's manifest records; None when it cannot be read."""
    try:
        manifest = json.loads((root / version_path(version) / MANIFEST).read_bytes())
        base = manifest["meta"]["base"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return base if isinstance(base, int) and not isinstance(base, bool) else None


def retired(bases: Mapping[int, int | None], latest: VersionRecord, keep: int) -> list[int]:
    """Of the versions ``bases`` lists (version -> its chain's base, None: unreadable), those
    to delete: every version up to the latest whose chain is not among the newest ``keep``
    (the latest's chain always stays). Versions after the latest are a writer's in flight."""
    older = {v: b for v, b in bases.items() if v <= latest.version}
    chains = sorted({b for b in older.values() if b is not None and b <= latest.base})
    kept = set(chains[-keep:]) | {latest.base}
    return sorted(v for v, b in older.items() if v != latest.version and b not in kept)


def retire(root: str | os.PathLike[str], keep: int, *,
           clock: Callable[[], float] = time.time) -> list[int]:
    """Delete what :func:`retired` names, and temporary directories left by dead writers; the
    versions deleted."""
    root = Path(root)
    latest = read_latest(root)
    if latest is None:
        return []
    versions = published_versions(root)
    gone = retired({v: version_base(root, v) for v in versions}, latest, keep)
    for version in reversed(gone):  # a chain's deltas before its base
        shutil.rmtree(root / version_path(version), ignore_errors=True)
    for directory in (root, root / VERSIONS):
        _remove_stale(directory, clock())
    return gone


def _remove_stale(directory: Path, now: float) -> None:
    """Temporary files and directories under ``directory`` older than :data:`STALE_TMP_S`."""
    for entry in _entries(directory):
        if not entry.name.startswith(TMP_PREFIX):
            continue
        try:
            if now - entry.lstat().st_mtime <= STALE_TMP_S:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()
        except FileNotFoundError:
            continue  # its writer renamed or removed it meanwhile


def _entries(directory: Path) -> Sequence[Path]:
    try:
        return list(directory.iterdir())
    except FileNotFoundError:
        return []
