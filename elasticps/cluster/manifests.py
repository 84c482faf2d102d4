"""Render a job for a backend and print manifests as a multi-document YAML stream."""

from __future__ import annotations

import secrets
from typing import Any

import yaml

from elasticps.cluster import render_kubernetes, render_volcano
from elasticps.cluster.spec import Job
from elasticps.errors import ConfigError

BACKENDS = ("volcano", "kubernetes")


def new_token() -> str:
    """A fresh per-job RPC token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def render(job: Job, backend: str = "volcano", *, token: str | None = None) -> list[dict[str, Any]]:
    """Every object of ``job`` for ``backend``, in creation order. Pure when ``token`` is given."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    token = new_token() if token is None else token
    if backend == "volcano":
        return render_volcano.render(job, token=token)
    return render_kubernetes.render(job, token=token)


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: `kubectl apply` users should see no &anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False,
                         default_flow_style=False, explicit_start=True)
