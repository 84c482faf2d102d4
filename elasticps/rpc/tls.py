"""gRPC credentials from a process's identity (:mod:`elasticps.identity`). The identity
directories ``elasticps run`` writes (one per role under ``WORKDIR/tls/``; in a cluster each
role's pods mount their own items of the job's Secret instead) come from
:func:`~elasticps.rpc.job_ca.write_job_identities`, re-exported here. ``PADDLE_TLS_DIR`` names
one.
"""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path
from typing import Any

import grpc

from elasticps.identity import CA_FILE, CERT_FILE, KEY_FILE, Identity
from elasticps.private_files import write_private
from elasticps.rpc.job_ca import role_dns_name, write_job_identities

__all__ = ["CA_FILE", "CERT_FILE", "KEY_FILE", "TlsIdentity", "peer_options",
           "write_job_identities"]


class TlsIdentity(Identity):
    """An :class:`~elasticps.identity.Identity` that makes gRPC and ``ssl`` credentials."""

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
