"""The user's code (``code: DIR`` in a job spec) as a deterministic, content-addressed archive.

``submit`` packs the directory into a gzipped tar and ships it in a ConfigMap named after the
archive's sha256; an init container in every trainer pod checks the hash and unpacks it into
:data:`CODE_DIR`, the trainer's working directory. So a change to a script needs no new image.

Deterministic: the same files give the same bytes (sorted paths, fixed mtimes, owners and
modes, a gzip header without time or name), so the hash names the content and an unchanged
directory resubmitted makes the same ConfigMap. Caches, virtual environments and version
control (:data:`EXCLUDED_DIRS`, :data:`EXCLUDED_SUFFIXES`) stay out. So do files that usually
hold credentials (:data:`CREDENTIAL_FILES`, and everything under :data:`CREDENTIAL_DIRS`:
``.env``, ``.aws/credentials``, SSH keys...): a ConfigMap or a bucket is readable by more people
than the user's home directory. They are listed in :attr:`CodeArchive.left_out`, and an
``include`` pattern (the spec's ``code_include``, ``code pack --include``) ships one anyway.
A ConfigMap holds at most 1 MiB, so the archive is limited to :data:`MAX_ARCHIVE_BYTES`
(:data:`CONFIG_MAP_LIMITS`); past it the error says what to do instead (``code_url``: the
archive through storage, under the spec's ``code_limit``; see
:mod:`elasticps.cluster.code_store`; or bake the code into an image, or move data files out of
the directory).
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from elasticps.errors import ConfigError

CODE_DIR = "/workspace/code"  # where trainers find the unpacked code (their working directory)
ARCHIVE_DIR = "/opt/elasticps/code-archive"  # where the ConfigMap is mounted
ARCHIVE_KEY = "code.tar.gz"
# A ConfigMap may hold 1 MiB; leave room for its metadata.
MAX_ARCHIVE_BYTES = 1000 * 1024
MAX_UNPACKED_BYTES = 64 * 2**20  # what the init container will write, whatever the archive says
# With code_url (the archive on storage): the spec's code_limit, on the archive and its contents.
DEFAULT_CODE_LIMIT = 256 * 2**20
MAX_FILES = 10_000
READ_BLOCK = 2**20
EXCLUDED_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "node_modules", ".idea", ".vscode",
    ".eggs",
})
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".DS_Store", ".swp")
# Left out unless an include pattern names them (fnmatch patterns on a file's name).
CREDENTIAL_FILES = (
    ".env", ".env.*", "*.env", ".netrc", ".pgpass", ".npmrc", ".pypirc", ".git-credentials",
    ".htpasswd", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "id_rsa*",
    "id_dsa*", "id_ecdsa*", "id_ed25519*", "credentials", "credentials.json",
    "service-account*.json", "kubeconfig", "*.kubeconfig", "secrets.yaml", "secrets.yml",
    "secrets.json",
)
# Directories whose files are all left out unless an include pattern names them.
CREDENTIAL_DIRS = frozenset({".aws", ".ssh", ".gnupg", ".kube", ".docker", ".azure",
                             ".gcloud", "gcloud"})


@dataclass(frozen=True)
class CodeLimits:
    """How big a code archive may be on its route: packed, unpacked, and what to do past it."""

    archive_bytes: int
    unpacked_bytes: int
    # names the limit in errors: "the 1,024,000 a ConfigMap can carry" / "code_limit=256Mi"
    name: str
    advice: str

    def __post_init__(self) -> None:
        if self.archive_bytes < 1 or self.unpacked_bytes < 1:
            raise ConfigError(f"code limits must be positive, got {self.archive_bytes} and "
                              f"{self.unpacked_bytes} bytes")


CONFIG_MAP_LIMITS = CodeLimits(
    MAX_ARCHIVE_BYTES, MAX_UNPACKED_BYTES, f"the {MAX_ARCHIVE_BYTES:,} a ConfigMap can carry",
    "move data out of it, set 'code_url' to ship it through storage, or bake the code into "
    "an image and drop 'code'")


@dataclass(frozen=True)
class CodeArchive:
    """A packed code directory: the gzipped tar, its sha256 and what is in it."""

    data: bytes
    sha256: str
    files: tuple[str, ...]
    unpacked_bytes: int
    left_out: tuple[str, ...] = ()  # files that look like credentials, not packed

    def left_out_note(self) -> str | None:
        """What a person is told about :attr:`left_out` (None when nothing was)."""
        if not self.left_out:
            return None
        shown = ", ".join(self.left_out[:10]) + (", ..." if len(self.left_out) > 10 else "")
        return (f"left out {len(self.left_out)} file(s) that may hold credentials: {shown} "
                "(to ship one, name it in the spec's code_include or `code pack --include`)")

    @property
    def short_hash(self) -> str:
        """What names the ConfigMap (``<job>-code-<short_hash>``)."""
        return self.sha256[:12]


def _fail(reason: str) -> ConfigError:
    return ConfigError(f"job spec field 'code': {reason}")


def _excluded(name: str) -> bool:
    return name in EXCLUDED_DIRS or name.endswith(EXCLUDED_SUFFIXES)


def looks_like_credentials(arcname: str) -> bool:
    """Whether the file at ``arcname`` (a path in the archive) usually holds credentials."""
    *dirs, name = arcname.split("/")
    return any(part in CREDENTIAL_DIRS for part in dirs) or any(
        fnmatch.fnmatchcase(name, pattern) for pattern in CREDENTIAL_FILES)


def _included(arcname: str, include: Sequence[str]) -> bool:
    name = arcname.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(arcname, p) or fnmatch.fnmatchcase(name, p) for p in include)


def code_files(root: Path, include: Sequence[str] = ()) -> list[tuple[str, Path]]:
    """``(path in the archive, file on disk)`` for every file packed, sorted by archive path.

    A symlink is packed as the file it points to when that lies inside ``root``; one that
    leaves it (or points to a directory) is refused, so the archive never holds what the user
    did not mean to ship. Files that look like credentials are not among them unless a pattern
    of ``include`` matches their path or name (:func:`split_files` also lists those).
    """
    return split_files(root, include)[0]


def split_files(root: Path, include: Sequence[str] = ()) -> tuple[list[tuple[str, Path]],
                                                                  list[str]]:
    """The files :func:`code_files` packs, and the archive paths it leaves out as
    credentials."""
    packed: list[tuple[str, Path]] = []
    left_out: list[str] = []
    for arcname, path in _walk(root):
        if looks_like_credentials(arcname) and not _included(arcname, include):
            left_out.append(arcname)
        else:
            packed.append((arcname, path))
    return packed, left_out


def _walk(root: Path) -> list[tuple[str, Path]]:
    """Every file under ``root`` but caches and version control, sorted by archive path."""
    if not root.is_dir():
        raise _fail(f"{str(root)!r} is not a directory")
    resolved_root = root.resolve()
    found: list[tuple[str, Path]] = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _excluded(d))
        here = Path(current)
        for name in [*dirs]:
            if (here / name).is_symlink():
                raise _fail(f"{str(here / name)!r} is a symlink to a directory; copy it in or "
                            "leave it out")
        for name in sorted(files):
            if _excluded(name):
                continue
            path = here / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(resolved_root) or not target.is_file():
                    raise _fail(f"{str(path)!r} is a symlink to {str(target)!r}, outside "
                                f"{str(root)!r}; copy the file in or remove the link")
            elif not path.is_file():
                continue  # sockets, fifos: nothing a trainer can use
            found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


def pack_code(directory: str | Path, limits: CodeLimits = CONFIG_MAP_LIMITS,
              include: Sequence[str] = ()) -> CodeArchive:
    """Pack ``directory`` deterministically, without credential files unless ``include``
    names them; :class:`ConfigError` past ``limits``."""
    root = Path(directory)
    files, left_out = split_files(root, include)
    if not files:
        raise _fail(f"{str(root)!r} holds no files to ship")
    if len(files) > MAX_FILES:
        raise _fail(f"{str(root)!r} holds {len(files)} files, more than {MAX_FILES}")
    raw = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, path in files:
            content = path.read_bytes()
            total += len(content)
            if total > limits.unpacked_bytes:
                raise _fail(f"{str(root)!r} holds more than {limits.unpacked_bytes:,} bytes of "
                            f"files; {limits.advice} (datasets belong in storage: see "
                            "`elasticps data upload`)")
            info = tarfile.TarInfo(arcname)
            info.size = len(content)
            info.mtime = 0
            executable = path.stat().st_mode & stat.S_IXUSR
            info.mode = 0o755 if executable else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(content))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    data = packed.getvalue()
    if len(data) > limits.archive_bytes:
        largest = sorted(files, key=lambda item: item[1].stat().st_size, reverse=True)[:3]
        raise _fail(
            f"{str(root)!r} packs to {len(data):,} bytes, more than {limits.name} (largest "
            f"files: {', '.join(name for name, _ in largest)}); {limits.advice}")
    return CodeArchive(data, hashlib.sha256(data).hexdigest(), tuple(n for n, _ in files),
                       total, tuple(left_out))


def sha256_of_file(path: str | Path, max_bytes: int) -> str:
    """The file's sha256, read in blocks; :class:`ConfigError` past ``max_bytes``."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while block := stream.read(READ_BLOCK):
            size += len(block)
            if size > max_bytes:
                raise ConfigError(f"code archive {path} is more than {max_bytes:,} bytes")
            digest.update(block)
    return digest.hexdigest()


def check_hash(where: str, actual: str, expected: str) -> None:
    if actual != expected:
        raise ConfigError(f"code archive {where} has sha256 {actual}, not the expected "
                          f"{expected}; it was changed after submission")


def unpack_code(archive: str | Path, destination: str | Path, expected_sha256: str,
                limits: CodeLimits = CONFIG_MAP_LIMITS) -> int:
    """Check ``archive`` against its hash and unpack it into ``destination`` (the init
    container's job). Returns the number of files written. Refuses a wrong hash, more than
    the limits, and any member that is not a plain file inside ``destination``."""
    check_hash(str(archive), sha256_of_file(archive, limits.archive_bytes), expected_sha256)
    return extract_verified(archive, destination, limits)


def extract_verified(archive: str | Path, destination: str | Path, limits: CodeLimits) -> int:
    """Unpack an archive whose hash was checked; the members are checked before any is
    written. Streams from the file, so a big archive needs no memory to match."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = tar.getmembers()
            if len(members) > MAX_FILES or \
                    sum(m.size for m in members) > limits.unpacked_bytes:
                raise ConfigError(f"code archive {archive} unpacks to more than the limits "
                                  f"({MAX_FILES} files, {limits.unpacked_bytes:,} bytes)")
            bad = [m.name for m in members if not m.isfile()]
            if bad:
                raise ConfigError(f"code archive {archive} holds entries that are not plain "
                                  f"files: {bad[:5]}")
            Path(destination).mkdir(parents=True, exist_ok=True)
            # The "data" filter refuses absolute paths and '..', and drops special modes.
            tar.extractall(destination, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ConfigError(f"code archive {archive} cannot be unpacked: {exc}") from exc
    return len(members)


__all__ = ["ARCHIVE_DIR", "ARCHIVE_KEY", "CODE_DIR", "CONFIG_MAP_LIMITS", "CREDENTIAL_DIRS",
           "CREDENTIAL_FILES", "DEFAULT_CODE_LIMIT", "MAX_ARCHIVE_BYTES",
           "CodeArchive", "CodeLimits", "check_hash", "code_files", "extract_verified",
           "looks_like_credentials", "pack_code", "sha256_of_file", "split_files",
           "unpack_code"]
