"""What a process proves itself with and checks its peers against.

Two factors, checked in this order on every call:

1. **mutual TLS** (unless the job was started with ``--insecure``): the server presents its role
   certificate from the job's CA, and the client verifies both the CA and the role name before
   it sends anything; the server requires a client certificate from the same CA;
2. **the job token** (``x-elasticps-token``), checked by the server before any handler runs.

A plaintext job is an explicit choice (``PADDLE_INSECURE=true``, set by ``--insecure``) and
every process that makes one logs a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from elasticps.config import Config
from elasticps.errors import ConfigError
from elasticps.rpc.tls import TlsIdentity

log = logging.getLogger(__name__)

INSECURE_WARNING = ("runs WITHOUT TLS (--insecure / PADDLE_INSECURE=true): the job token and "
                    "all traffic travel in clear, and clients cannot tell a real server from "
                    "an impostor; use this only on a machine or network you trust")


@dataclass(frozen=True)
class JobCredentials:
    """The job token and, unless the job is insecure, this process's TLS identity."""

    job: str
    token: str = field(repr=False)
    tls: TlsIdentity | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.token:
            raise ConfigError("a job token is required (set PADDLE_JOB_TOKEN)")

    @property
    def secure(self) -> bool:
        return self.tls is not None


def credentials_from_config(config: Config) -> JobCredentials:
    """The credentials ``config`` describes: the job token (PADDLE_JOB_TOKEN or
    PADDLE_JOB_TOKEN_FILE) plus PADDLE_TLS_DIR, or PADDLE_INSECURE=true for a plaintext job
    (with a warning)."""
    token = config.token
    if not token:
        raise ConfigError("the job token is missing: set PADDLE_JOB_TOKEN or "
                          "PADDLE_JOB_TOKEN_FILE")
    if config.insecure:
        log.warning("Job %s %s.", config.job_name, INSECURE_WARNING)
        return JobCredentials(config.job_name, token)
    if not config.tls_dir:
        raise ConfigError(
            "TLS material is missing: set PADDLE_TLS_DIR to the directory holding ca.crt, "
            "tls.crt and tls.key (`elasticps run` and `elasticps submit` make them), or set "
            "PADDLE_INSECURE=true to run without TLS")
    return JobCredentials(config.job_name, token, TlsIdentity.load(config.tls_dir))
