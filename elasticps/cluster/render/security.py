"""The security contexts of every rendered pod and container: what the Pod Security Standards'
"restricted" profile asks (``tests/unit/cluster/test_pod_security.py`` applies its rules to
every pod of both backends, init containers included).

* Pods run as the image's unprivileged user, said outright (``runAsUser`` 10001, the
  Dockerfile's ``elasticps`` user; the etcd image gets the same uid): the kubelet cannot check
  ``runAsNonRoot`` against an image whose user is a name, and etcd's image would run as root.
* ``seccompProfile: RuntimeDefault`` for the pod; every container (init containers too) has
  ``runAsNonRoot: true``, ``allowPrivilegeEscalation: false`` and drops every capability.
* ``fsGroup`` only where a pod writes to a claim (pserver checkpoints, etcd's data): setting it
  on a pod that mounts a large dataset would make the kubelet walk every file of it.
"""

from __future__ import annotations

from typing import Any

RUN_AS_USER = 10001  # the Dockerfile's `useradd --uid 10001 elasticps` and `USER 10001`
RUN_AS_GROUP = 10001


def pod_security_context(*, writes_claims: bool = False) -> dict[str, Any]:
    """The pod-level context; ``writes_claims``: the pod writes to a PersistentVolumeClaim."""
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if writes_claims:
        context["fsGroup"] = RUN_AS_GROUP
        context["fsGroupChangePolicy"] = "OnRootMismatch"  # no walk when the root is right
    return context


def container_security_context(*, read_only_root: bool = False) -> dict[str, Any]:
    """Every container's context; ``read_only_root`` for those that write only to volumes
    (the user's training script may write anywhere, so the roles' containers do not get it)."""
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if read_only_root:
        context["readOnlyRootFilesystem"] = True
    return context
