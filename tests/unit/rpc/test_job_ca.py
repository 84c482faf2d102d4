"""The per-job CA: what each role's certificate says, and what it may be used for."""

from __future__ import annotations

import datetime
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from elasticps.errors import ConfigError
from elasticps.rpc.job_ca import JOB_ROLES, JobCA
from elasticps.rpc.tls import TlsIdentity, write_job_identities


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


@pytest.mark.parametrize("role", JOB_ROLES)
def test_a_role_certificate_names_its_job_and_role(role: str) -> None:
    ca = JobCA("ctr")
    cert = _cert(ca.issue_role(role).cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [f"{role}.ctr.elasticps.invalid"]
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [
        f"elasticps://ctr/{role}"]
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "elasticps-ctr"
    usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
    assert (ExtendedKeyUsageOID.SERVER_AUTH in usages) is (role != "trainer")
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(_cert(ca.cert_pem))
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc < now < cert.not_valid_after_utc


def test_two_jobs_never_share_a_ca() -> None:
    a, b = JobCA("ctr"), JobCA("ctr")
    with pytest.raises(InvalidSignature):
        _cert(b.issue_role("pserver").cert_pem).verify_directly_issued_by(_cert(a.cert_pem))


def test_identities_on_disk_are_private_and_hold_no_ca_key(tmp_path: Path) -> None:
    dirs = write_job_identities(tmp_path / "tls", "ctr")
    assert sorted(dirs) == sorted(JOB_ROLES)
    for directory in dirs.values():
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert sorted(p.name for p in directory.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in directory.iterdir())
        TlsIdentity.load(directory).server_credentials()
    files = b"".join(p.read_bytes() for p in (tmp_path / "tls").rglob("*") if p.is_file())
    assert files.count(b"PRIVATE KEY-----\n") == 2 * len(JOB_ROLES)  # one key per role


def test_a_missing_identity_names_the_variable_and_the_way_out(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ca\.crt, tls\.crt and tls\.key.*--insecure"):
        TlsIdentity.load(tmp_path)
