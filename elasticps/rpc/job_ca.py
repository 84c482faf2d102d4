"""A per-job certificate authority and the certificates it issues (``cryptography``).

Every job gets its own CA, made when the job is launched (``elasticps run``) or submitted
(``elasticps submit``). It issues one certificate per role, and the CA key is then thrown away:
nothing can mint another certificate for the job, so a certificate from any other CA, or from
this one for another role, is refused by whoever checks it.

A role certificate names its job and role twice, for the two checkers that read it:

* a DNS name ``<role>.<job>.elasticps.invalid`` (:func:`role_dns_name`): a client connecting
  to a pserver asks gRPC to verify that name (``ssl_target_name_override``), so a listener
  holding a trainer's certificate, or another job's pserver certificate, fails the handshake
  before a single request byte (or the token) is sent. ``.invalid`` is reserved: the name is
  never resolved, only compared.
* a URI ``elasticps://<job>/<role>`` (:func:`role_uri`), for people and logs.

Its subject common name is the job's store user (:func:`elasticps.identity.store_user`): a
job's etcd, rendered with client-certificate auth, maps the CN to a user whose role may touch
only the job's prefix.

Keys are ECDSA P-256: generating the whole set takes milliseconds and handshakes stay cheap.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from elasticps.identity import store_user, write_identity
from elasticps.private_files import DIR_MODE

ROLE_DOMAIN = "elasticps.invalid"
SERVER_ROLES = ("master", "pserver")
CLIENT_ROLES = ("trainer",)
JOB_ROLES = (*SERVER_ROLES, *CLIENT_ROLES)
DEFAULT_VALID_DAYS = 365
_CLOCK_SKEW = datetime.timedelta(minutes=10)  # nodes' clocks may trail the submitter's


def role_dns_name(job: str, role: str) -> str:
    """The DNS name in ``role``'s certificate that clients verify, e.g.
    ``pserver.ctr.elasticps.invalid``."""
    return f"{role}.{job}.{ROLE_DOMAIN}"


def role_uri(job: str, role: str) -> str:
    return f"elasticps://{job}/{role}"


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class JobCA:
    """The CA of one job. Keep it only as long as it takes to issue the job's certificates."""

    def __init__(self, job: str, *, valid_days: int = DEFAULT_VALID_DAYS) -> None:
        self.job = job
        self.valid_days = valid_days
        self._key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        self._not_before = now - _CLOCK_SKEW
        self._not_after = now + datetime.timedelta(days=valid_days)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"elasticps job {job} CA")])
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before).not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue_role(self, role: str) -> Issued:
        """The certificate of a job role: its role name and URI, the job's store user as CN.

        Server roles may act as TLS servers and clients; a trainer only as a client.
        """
        return self.issue(store_user(self.job), dns=[role_dns_name(self.job, role)],
                          uris=[role_uri(self.job, role)], server=role in SERVER_ROLES)

    def issue(self, common_name: str, *, dns: Sequence[str] = (), ips: Sequence[str] = (),
              uris: Sequence[str] = (), server: bool = True) -> Issued:
        """A leaf certificate for ``common_name`` with these subject alternative names."""
        key = _new_key()
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        names += [x509.UniformResourceIdentifier(u) for u in uris]
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before).not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=True, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self._key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_job_identities(root: Path, job: str) -> dict[str, Path]:
    """A fresh CA for ``job`` and one identity directory per role under ``root`` (0700).

    The CA key is not written anywhere: once these are issued, no more can be.
    """
    root.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    root.chmod(DIR_MODE)
    ca = JobCA(job)
    identities = {}
    for role in JOB_ROLES:
        issued = ca.issue_role(role)
        identities[role] = write_identity(root / role, ca.cert_pem, issued.cert_pem,
                                          issued.key_pem)
    return identities
