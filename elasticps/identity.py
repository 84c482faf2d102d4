"""A process's identity on disk: the job's CA certificate, its own certificate and key.

One directory, three PEM files, named as in a Kubernetes TLS Secret::

    ca.crt    the job's CA certificate: the only issuer this process trusts
    tls.crt   this process's certificate (see :mod:`elasticps.rpc.job_ca`)
    tls.key   its private key (mode 0600; the directory 0700)

A directory, or a file in it, that another user owns or can write is refused (that user could
swap the CA and so impersonate every role to this process); one that others can read is
logged (a Kubernetes Secret mounted with an ``fsGroup`` is group-readable by design). Root's
files pass: a mounted Secret belongs to root.

The gRPC layer (:mod:`elasticps.rpc.tls`) and the etcd client (:mod:`elasticps.store.etcd_tls`)
both read it from here, so the layout is defined once. ``PADDLE_TLS_DIR`` names it.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from elasticps.errors import ConfigError
from elasticps.private_files import DIR_MODE, check_owned, replace_private

__all__ = ["CA_FILE", "CERT_FILE", "KEY_FILE", "Identity", "store_user", "write_identity"]

log = logging.getLogger(__name__)

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"

IdentityT = TypeVar("IdentityT", bound="Identity")


def store_user(job: str) -> str:
    """The etcd user of a job's processes: the common name of every role certificate, and the
    user whose role the job's etcd limits to the job's prefix."""
    return f"elasticps-{job}"


@dataclass(frozen=True)
class Identity:
    """The job's CA certificate and this process's certificate and key (PEM)."""

    ca_pem: bytes = field(repr=False)
    cert_pem: bytes = field(repr=False)
    key_pem: bytes = field(repr=False)
    source: str = "memory"

    @classmethod
    def load(cls: type[IdentityT], directory: str | os.PathLike[str]) -> IdentityT:
        """Read ``ca.crt``, ``tls.crt`` and ``tls.key`` from ``directory``."""
        path = Path(directory)
        check_owned(path, "TLS directory", sticky_ok=True)
        contents: dict[str, bytes] = {}
        for name in (CA_FILE, CERT_FILE, KEY_FILE):
            check_owned(path / name, "TLS file")
            try:
                contents[name] = (path / name).read_bytes()
            except OSError as exc:
                raise ConfigError(
                    f"TLS directory {str(directory)!r}: cannot read {name} ({exc.strerror}); "
                    "it must hold ca.crt, tls.crt and tls.key (made by `elasticps run` or "
                    "`elasticps submit`), or run the job with --insecure") from exc
            if b"-----BEGIN" not in contents[name]:
                raise ConfigError(f"{path / name} is not a PEM file")
        mode = (path / KEY_FILE).stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("The private key %s can be read by other users (mode %o); it should "
                        "be 0600 (0400 in a pod).", path / KEY_FILE, stat.S_IMODE(mode))
        return cls(contents[CA_FILE], contents[CERT_FILE], contents[KEY_FILE], str(path))


def write_identity(directory: Path, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> Path:
    """An identity directory (0700) with its three files (0600)."""
    directory.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    directory.chmod(DIR_MODE)
    for name, pem in ((CA_FILE, ca_pem), (CERT_FILE, cert_pem), (KEY_FILE, key_pem)):
        replace_private(directory / name, pem)
    return directory
