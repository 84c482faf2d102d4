"""The user's code in the trainer pods: an init container that checks the archive's hash and
unpacks it into the trainers' working directory. The archive comes from a ConfigMap (``code``
alone) or from storage (``code_url``: the init container fetches it; see
:mod:`elasticps.cluster.code_store`).

Why an init container and not the ConfigMap mounted as files: a ConfigMap's keys cannot hold
directories, its files are read-only symlinks, and it loses executable bits; unpacking into
an emptyDir gives the script an ordinary, writable directory tree. The ConfigMap's name
carries the archive's hash, so two versions of the code never share a name, and it is
immutable (the kubelet stops watching it).
"""

from __future__ import annotations

import base64
from typing import Any

from elasticps.cluster.code_archive import ARCHIVE_DIR, ARCHIVE_KEY, CODE_DIR, CodeArchive
from elasticps.cluster.code_store import archive_url, code_limits
from elasticps.cluster.quantity import format_memory
from elasticps.cluster.render.security import container_security_context
from elasticps.cluster.spec import Job

CODE_VOLUME = "code"
ARCHIVE_VOLUME = "code-archive"
UNPACK_CONTAINER = "unpack-code"
FETCH_CONTAINER = "fetch-code"
CONFIG_MAP_MODE = 0o444
# The emptyDir the code is unpacked into: what the init container may write, and no more.
CODE_VOLUME_LIMIT = "128Mi"


def config_map_name(job_name: str, archive: CodeArchive) -> str:
    return f"{job_name}-code-{archive.short_hash}"


def code_config_map(metadata: dict[str, Any], archive: CodeArchive) -> dict[str, Any]:
    """The ConfigMap carrying the archive (``metadata`` names it; see :func:`config_map_name`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "immutable": True,
            "binaryData": {ARCHIVE_KEY: base64.b64encode(archive.data).decode("ascii")}}


def add_code(job: Job, archive: CodeArchive, spec: dict[str, Any],
             user_env: list[dict[str, Any]]) -> None:
    """Give a trainer pod spec the unpacked code as its working directory (in place);
    ``user_env`` is the spec's ``env:`` as container entries, for a fetch from storage."""
    trainer = spec["containers"][0]
    init: dict[str, Any] = {
        "name": UNPACK_CONTAINER,
        "image": job.image,
        "imagePullPolicy": trainer.get("imagePullPolicy", "IfNotPresent"),
        # the trainer's own requests: an init container never raises the pod's total, and
        # requests = limits keeps the pod Guaranteed
        "resources": trainer["resources"],
        "securityContext": container_security_context(),
    }
    code_mount = {"name": CODE_VOLUME, "mountPath": CODE_DIR}
    if job.code_url is None:
        init["command"] = ["elasticps", "code", "unpack", f"{ARCHIVE_DIR}/{ARCHIVE_KEY}",
                           CODE_DIR, "--sha256", archive.sha256]
        init["volumeMounts"] = [
            {"name": ARCHIVE_VOLUME, "mountPath": ARCHIVE_DIR, "readOnly": True}, code_mount]
        volumes: list[dict[str, Any]] = [{"name": ARCHIVE_VOLUME, "configMap": {
            "name": config_map_name(job.job_name, archive), "defaultMode": CONFIG_MAP_MODE,
            "items": [{"key": ARCHIVE_KEY, "path": ARCHIVE_KEY}]}}]
        size_limit = CODE_VOLUME_LIMIT
    else:
        limit = code_limits(job).archive_bytes
        init["name"] = FETCH_CONTAINER
        init["command"] = ["elasticps", "code", "fetch", archive_url(job.code_url, archive.sha256),
                           "--sha256", archive.sha256, "--into", CODE_DIR, "--limit", str(limit)]
        # the spec's env (storage credentials, as references to the job's Secret) and
        # nothing of the job's own secrets
        if user_env:
            init["env"] = user_env
        init["volumeMounts"] = [code_mount]
        volumes = []
        size_limit = format_memory(2 * limit)  # the archive and its contents, side by side
    spec["initContainers"] = [init]
    trainer["workingDir"] = CODE_DIR
    trainer.setdefault("volumeMounts", []).append(dict(code_mount))
    spec.setdefault("volumes", []).extend(
        [*volumes, {"name": CODE_VOLUME, "emptyDir": {"sizeLimit": size_limit}}])
