"""Who may read the master's status page, and over what.

* Bound to a loopback address (the default, ``PADDLE_HTTP_HOST=127.0.0.1``): plain HTTP, no
  token; only processes on this machine can connect.
* Bound to any other address (a pod's, for the API server's service proxy): the job token is
  required in ``X-Elasticps-Token`` (or ``Authorization: Bearer``), and the page is served
  over TLS with the master's certificate unless the job is insecure; the API server's proxy
  reaches it as ``https:<service>:http``.

The page never shows secrets: the status document holds no token, key or certificate.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import ssl
from dataclasses import dataclass, field
from typing import Protocol

from elasticps.errors import ConfigError
from elasticps.rpc.credentials import JobCredentials

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-Elasticps-Token"


class HeaderLookup(Protocol):
    def get(self, name: str, default: None = None) -> str | None: ...


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class StatusAccess:
    """What the status server demands: a token (None = none) and TLS (None = plain HTTP)."""

    token: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = None

    def allows(self, headers: HeaderLookup) -> bool:
        """Whether a request with these headers may read the page."""
        if self.token is None:
            return True
        sent = headers.get(TOKEN_HEADER) or ""
        bearer = headers.get("Authorization") or ""
        if not sent and bearer.startswith("Bearer "):
            sent = bearer[len("Bearer "):]
        if not sent or len(sent) > 1024:
            return False
        return hmac.compare_digest(sent.encode(), self.token.encode())


OPEN = StatusAccess()


def status_access(host: str, credentials: JobCredentials | None) -> StatusAccess:
    """Loopback: open. Anything else: the token, over TLS when the job has it."""
    if is_loopback(host):
        return OPEN
    if credentials is None:
        raise ConfigError(f"a status page bound to {host} needs the job's credentials")
    if credentials.tls is None:
        log.warning("Job %s: the status page on %s requires the token but is served without "
                    "TLS (the job is insecure), so the token crosses the network in clear.",
                    credentials.job, host)
        return StatusAccess(credentials.token)
    return StatusAccess(credentials.token, credentials.tls.ssl_server_context())


def published_status(http_host: str, host: str,
                     credentials: JobCredentials | None) -> tuple[str, str]:
    """(host, scheme) under which the page is published in ``master/address``: a wildcard
    bind is reached at the process's own address (PADDLE_HOST)."""
    shown = host if http_host in ("0.0.0.0", "::", "") else http_host
    secure = not is_loopback(http_host) and credentials is not None and credentials.secure
    return shown, "https" if secure else "http"
