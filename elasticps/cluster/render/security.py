"""The security contexts of every rendered pod and container: what the Pod Security Standards'
"restricted" profile asks (``tests/unit/cluster/test_pod_security.py`` applies its rules to
every pod of both backends, init containers included).

* Pods run as the image's unprivileged user, said outright (``runAsUser`` 10001, the
  Dockerfile's ``elasticps`` user; the etcd image gets the same uid): the kubelet cannot check
  ``runAsNonRoot`` against an image whose user is a name, and etcd's image would run as root.
* ``seccompProfile: RuntimeDefault`` for the pod; every container (init containers too) has
  ``runAsNonRoot: true``, ``allowPrivilegeEscalation: false`` and drops every capability.
* ``fsGroup`` 10001 on every pod: the kubelet writes a Secret's files as root, and with an
  ``fsGroup`` gives them that group and its read bit (mode 0400 becomes 0440), so the
  unprivileged user can read its key and token and no other user can; a claim the pod writes
  (pserver checkpoints, etcd's data) gets the group too. ``fsGroupChangePolicy:
  OnRootMismatch`` skips the walk when a claim's root already has it, and a claim mounted
  read-only (the dataset) is not walked at all.
"""

from __future__ import annotations

from typing import Any

RUN_AS_USER = 10001  # the Dockerfile's `useradd --uid 10001 elasticps` and `USER 10001`
RUN_AS_GROUP = 10001


def pod_security_context() -> dict[str, Any]:
    """The pod-level context every rendered pod gets."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "fsGroup": RUN_AS_GROUP,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


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
