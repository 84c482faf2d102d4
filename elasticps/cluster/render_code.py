"""The user's code in the trainer pods: a ConfigMap holding the archive, and an init container
that checks its hash and unpacks it into the trainers' working directory.

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
from elasticps.cluster.spec import Job

CODE_VOLUME = "code"
ARCHIVE_VOLUME = "code-archive"
UNPACK_CONTAINER = "unpack-code"
CONFIG_MAP_MODE = 0o444
# The emptyDir the code is unpacked into: what the init container may write, and no more.
CODE_VOLUME_LIMIT = "128Mi"


def config_map_name(job_name: str, archive: CodeArchive) -> str:
    return f"{job_name}-code-{archive.short_hash}"


def code_config_map(metadata: dict[str, Any], archive: CodeArchive) -> dict[str, Any]:
    """The ConfigMap carrying the archive (``metadata`` names it; see :func:`config_map_name`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "immutable": True,
            "binaryData": {ARCHIVE_KEY: base64.b64encode(archive.data).decode("ascii")}}


def add_code(job: Job, archive: CodeArchive, spec: dict[str, Any]) -> None:
    """Give a trainer pod spec the unpacked code as its working directory (in place)."""
    trainer = spec["containers"][0]
    unpack = {
        "name": UNPACK_CONTAINER,
        "image": job.image,
        "imagePullPolicy": trainer.get("imagePullPolicy", "IfNotPresent"),
        "command": ["elasticps", "code", "unpack", f"{ARCHIVE_DIR}/{ARCHIVE_KEY}", CODE_DIR,
                    "--sha256", archive.sha256],
        # the trainer's own requests: an init container never raises the pod's total, and
        # requests = limits keeps the pod Guaranteed
        "resources": trainer["resources"],
        "volumeMounts": [
            {"name": ARCHIVE_VOLUME, "mountPath": ARCHIVE_DIR, "readOnly": True},
            {"name": CODE_VOLUME, "mountPath": CODE_DIR},
        ],
    }
    spec["initContainers"] = [unpack]
    trainer["workingDir"] = CODE_DIR
    trainer.setdefault("volumeMounts", []).append({"name": CODE_VOLUME, "mountPath": CODE_DIR})
    spec.setdefault("volumes", []).extend([
        {"name": ARCHIVE_VOLUME, "configMap": {
            "name": config_map_name(job.job_name, archive), "defaultMode": CONFIG_MAP_MODE,
            "items": [{"key": ARCHIVE_KEY, "path": ARCHIVE_KEY}]}},
        {"name": CODE_VOLUME, "emptyDir": {"sizeLimit": CODE_VOLUME_LIMIT}},
    ])
