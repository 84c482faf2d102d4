"""A process's TLS identity on disk, and the gRPC credentials made from it.

An identity directory holds three PEM files, named as in a Kubernetes TLS Secret::

    ca.crt    the job's CA certificate: the only issuer this process trusts
    tls.crt   this process's role certificate (see :mod:`elasticps.rpc.job_ca`)
    tls.key   its private key (mode 0600; the directory 0700)

``elasticps run`` writes one directory per role under ``WORKDIR/tls/``; in a cluster each role's
pods mount their own items of the job's Secret there. ``PADDLE_TLS_DIR`` names it.
"""

from __future__ import annotations

import logging
import os
import ssl
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from elasticps.errors import ConfigError
from elasticps.rpc.job_ca import JOB_ROLES, Issued, JobCA, role_dns_name

log = logging.getLogger(__name__)

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


@dataclass(frozen=True)
class TlsIdentity:
    """The job's CA certificate and this process's certificate and key (PEM)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    source: str = "memory"

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> TlsIdentity:
        """Read ``ca.crt``, ``tls.crt`` and ``tls.key`` from ``directory``."""
        path = Path(directory)
        contents: dict[str, bytes] = {}
        for name in (CA_FILE, CERT_FILE, KEY_FILE):
            try:
                contents[name] = (path / name).read_bytes()
            except OSError as exc:
                raise ConfigError(
                    f"PADDLE_TLS_DIR={str(directory)!r}: cannot read {name} ({exc.strerror}); "
                    "it must hold ca.crt, tls.crt and tls.key (made by `elasticps run` or "
                    "`elasticps submit`), or run the job with --insecure") from exc
            if b"-----BEGIN" not in contents[name]:
                raise ConfigError(f"{path / name} is not a PEM file")
        mode = (path / KEY_FILE).stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("The private key %s can be read by other users (mode %o); it should "
                        "be 0600 (0400 in a pod).", path / KEY_FILE, stat.S_IMODE(mode))
        return cls(contents[CA_FILE], contents[CERT_FILE], contents[KEY_FILE], str(path))

    def server_credentials(self) -> grpc.ServerCredentials:
        """Serve with our certificate and require a client certificate from the job's CA."""
        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)],
                                           root_certificates=self.ca_pem,
                                           require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Trust only the job's CA and present our own certificate."""
        return grpc.ssl_channel_credentials(root_certificates=self.ca_pem,
                                            private_key=self.key_pem,
                                            certificate_chain=self.cert_pem)


    def ssl_server_context(self) -> ssl.SSLContext:
        """An ``ssl`` server context with our certificate (for the master's HTTPS page)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.source != "memory":
            context.load_cert_chain(Path(self.source) / CERT_FILE, Path(self.source) / KEY_FILE)
            return context
        with tempfile.TemporaryDirectory() as tmp:  # ssl loads keys from files only
            write_private(Path(tmp) / KEY_FILE, self.key_pem)
            write_private(Path(tmp) / CERT_FILE, self.cert_pem)
            context.load_cert_chain(Path(tmp) / CERT_FILE, Path(tmp) / KEY_FILE)
        return context


def peer_options(job: str, role: str) -> tuple[tuple[str, Any], ...]:
    """Channel options that make the TLS handshake verify the server is ``role`` of ``job``.

    gRPC checks the server certificate's names against this name (not the address dialled),
    during the handshake, before any request is sent.
    """
    name = role_dns_name(job, role)
    return (("grpc.ssl_target_name_override", name), ("grpc.default_authority", name))


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (0600), never wider."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT: set it
        os.write(fd, data)
    finally:
        os.close(fd)


def write_identity(directory: Path, ca_pem: bytes, issued: Issued) -> Path:
    """An identity directory (0700) with its three files (0600)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    write_private(directory / CA_FILE, ca_pem)
    write_private(directory / CERT_FILE, issued.cert_pem)
    write_private(directory / KEY_FILE, issued.key_pem)
    return directory


def write_job_identities(root: Path, job: str) -> dict[str, Path]:
    """A fresh CA for ``job`` and one identity directory per role under ``root`` (0700).

    The CA key is not written anywhere: once these are issued, no more can be.
    """
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    root.chmod(0o700)
    ca = JobCA(job)
    return {role: write_identity(root / role, ca.cert_pem, ca.issue_role(role))
            for role in JOB_ROLES}
