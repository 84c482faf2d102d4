"""The job's Secret: its token, its CA certificate, and a certificate and key per role.

Made by ``elasticps submit`` (or ``--secret-only``) and sent straight to the API server; it is
never printed. A dry run renders :meth:`JobSecrets.placeholder` instead, whose values say where
the real ones come from, so a manifest stream can never carry a secret by accident.

Keys of the Secret (each role's pods mount only their own three, as ``ca.crt``, ``tls.crt``,
``tls.key``, and the token as the file ``PADDLE_JOB_TOKEN_FILE`` names):

==========================  ==================================================================
``token``                   the job token (256 bits)
``ca.crt``                  the job CA's certificate (its key is discarded after issuing)
``<role>.crt|.key``         master, pserver, trainer: role certificates (rpc/job_ca.py)
``etcd-server.crt|.key``    the job's etcd members (client and peer TLS), when it deploys one
``etcd-root.crt|.key``      etcd's root user (CN ``root``), for the setup Job only
``env.<NAME>``              each secret entry of the spec's ``env:`` (cluster/spec_env.py), given
                            to the pods as ``NAME`` through a ``secretKeyRef``
==========================  ==================================================================
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from elasticps.cluster.spec import Job
from elasticps.rpc.job_ca import JOB_ROLES, JobCA

TOKEN_KEY = "token"
CA_KEY = "ca.crt"
ETCD_SERVER = "etcd-server"
ETCD_ROOT = "etcd-root"
ENV_KEY_PREFIX = "env."
PLACEHOLDER = "<not printed: `elasticps submit` generates it and sends it to the API server>"


def new_token() -> str:
    """A fresh per-job RPC token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def env_key(name: str) -> str:
    """The Secret's key holding the spec's secret ``env:`` entry ``name``."""
    return ENV_KEY_PREFIX + name


def secret_keys(job: Job, etcd_hosts: tuple[str, ...]) -> tuple[str, ...]:
    """The keys the job's Secret holds, in a stable order."""
    keys = [TOKEN_KEY]
    if not job.insecure:
        keys.append(CA_KEY)
        for name in (*JOB_ROLES, *((ETCD_SERVER, ETCD_ROOT) if etcd_hosts else ())):
            keys += [f"{name}.crt", f"{name}.key"]
    keys += [env_key(name) for name in job.secret_env_names]
    return tuple(keys)


@dataclass(frozen=True)
class JobSecrets:
    """The values of the job's Secret by key; ``real`` is False for a dry run's placeholders."""

    values: Mapping[str, str] = field(repr=False)
    real: bool = True

    @classmethod
    def generate(cls, job: Job, etcd_hosts: tuple[str, ...]) -> JobSecrets:
        """A token and, unless the job is insecure, a fresh CA's certificates.

        ``etcd_hosts`` are the DNS names of the job's own etcd members (empty when it uses an
        existing etcd); the etcd certificate names each, the headless Service, and loopback.
        """
        values = {TOKEN_KEY: new_token()}
        values.update({env_key(name): job.env[name] for name in job.secret_env_names})
        if job.insecure:
            return cls(values)
        ca = JobCA(job.job_name)
        values[CA_KEY] = ca.cert_pem.decode()
        for role in JOB_ROLES:
            issued = ca.issue_role(role)
            values[f"{role}.crt"], values[f"{role}.key"] = (issued.cert_pem.decode(),
                                                          issued.key_pem.decode())
        if etcd_hosts:
            service = etcd_hosts[0].split(".", 1)[1]  # <etcd>.<namespace>.svc
            server = ca.issue(f"{job.job_name}-etcd", dns=[*etcd_hosts, service, "localhost"],
                              ips=["127.0.0.1"])
            root = ca.issue("root", server=False)
            values[f"{ETCD_SERVER}.crt"], values[f"{ETCD_SERVER}.key"] = (
                server.cert_pem.decode(), server.key_pem.decode())
            values[f"{ETCD_ROOT}.crt"], values[f"{ETCD_ROOT}.key"] = (
                root.cert_pem.decode(), root.key_pem.decode())
        return cls(values)

    @classmethod
    def placeholder(cls, job: Job, etcd_hosts: tuple[str, ...]) -> JobSecrets:
        """Every key of the Secret, each holding :data:`PLACEHOLDER`."""
        return cls({key: PLACEHOLDER for key in secret_keys(job, etcd_hosts)}, real=False)
