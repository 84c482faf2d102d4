"""Render a job for a backend and print manifests as a multi-document YAML stream."""

from __future__ import annotations

from typing import Any

import yaml

from elasticps.cluster.code_archive import CodeArchive, pack_code
from elasticps.cluster.code_store import code_limits
from elasticps.cluster.job_secrets import JobSecrets, new_token
from elasticps.cluster.render import kubernetes as render_kubernetes
from elasticps.cluster.render import volcano as render_volcano
from elasticps.cluster.render.common import Names, etcd_hosts
from elasticps.cluster.spec import Job
from elasticps.errors import ConfigError

BACKENDS = ("volcano", "kubernetes")
__all__ = ["BACKENDS", "job_secrets", "new_token", "render", "to_yaml"]


def job_secrets(job: Job) -> JobSecrets:
    """Fresh secrets for ``job``: a token, and unless insecure a CA and its certificates."""
    return JobSecrets.generate(job, etcd_hosts(job))


def render(job: Job, backend: str = "volcano", *, secrets: JobSecrets | None = None,
           code: CodeArchive | None = None) -> list[dict[str, Any]]:
    """Every object of ``job`` for ``backend``, in creation order. Without ``secrets`` the
    job's Secret holds placeholders (what a dry run shows). The spec's ``code:`` directory is
    packed here unless ``code`` is given (the only file reading; the rest is pure)."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if secrets is None:
        secrets = JobSecrets.placeholder(job, etcd_hosts(job))
    if code is None and job.code is not None:
        code = pack_code(job.code, code_limits(job), include=job.code_include)
    if backend == "volcano":
        return render_volcano.render(job, secrets=secrets, code=code)
    return render_kubernetes.render(job, secrets=secrets, code=code)


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: `kubectl apply` users should see no &anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False,
                         default_flow_style=False, explicit_start=True)


def secret_note(job: Job, spec_path: str = "JOB.yaml") -> str:
    """What a dry run prints in place of the job's Secret (YAML comment lines)."""
    name = Names.of(job).secret
    lines = [
        f"Secret {name} (namespace {job.plan.namespace}) is not printed: it holds the job "
        "token" + ("" if job.insecure else ", the job's CA certificate and a certificate and "
                   "key per role") + ".",
        "`elasticps submit` makes it (fresh for every job) and sends it only to the API server.",
        "To apply these manifests yourself, first create it with",
        f"    elasticps submit {spec_path} --secret-only",
        "(pods wait for it; nothing else refers to its values).",
    ]
    return "".join(f"# {line}\n" for line in lines)


def dry_run_yaml(job: Job, objects: list[dict[str, Any]], spec_path: str = "JOB.yaml") -> str:
    """The manifests as a YAML stream with the job's Secret replaced by :func:`secret_note`
    (comment lines, so the stream holds no empty document)."""
    parts = []
    for obj in objects:
        if obj.get("kind") == "Secret":
            parts.append(secret_note(job, spec_path))
        else:
            parts.append(to_yaml([obj]))
    return "".join(parts)
