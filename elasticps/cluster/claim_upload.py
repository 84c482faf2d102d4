"""``elasticps data upload DIR pvc://CLAIM[/PATH] -n NS``: a dataset into a PersistentVolumeClaim.

A claim is mounted only by pods, so the upload creates one: a transfer Job
(:mod:`elasticps.cluster.render.transfer`) running ``elasticps data receive`` on the claim,
waits until its pod is ready, and streams the files to it through the API server's pod proxy
(the user's own credentials and TLS to the API server; the receiver checks a fresh random
token from a Secret). The files go through :func:`elasticps.data.upload.upload_to`, so this
route keeps the fsspec route's promises: the same ``PATH/NAMESPACE/NAME`` layout, a file under
its name only once its sha256 matched (checked by the receiver on what it wrote), verified
files skipped on a rerun (resume), another file there refused unless ``--overwrite``, the
record last. The Job and its Secret are deleted at the end, whatever happened
(``ttlSecondsAfterFinished`` as a backstop).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from elasticps.cluster.kube_client import POD, KubeClient, kind_of
from elasticps.cluster.render.transfer import (
    LABEL_TRANSFER,
    Transfer,
    transfer_name,
    transfer_objects,
)
from elasticps.cluster.spec import DEFAULT_IMAGE, Storage
from elasticps.cluster.submit import pod_info
from elasticps.cluster.validate import check_manifests
from elasticps.data.receive import RECEIVER_PORT, SHA256_HEADER, TOKEN_HEADER
from elasticps.data.upload import RECORD_NAME, UploadResult, dataset_url, local_files, upload_to
from elasticps.errors import ClusterError, ConfigError, DataError

logger = logging.getLogger(__name__)

POLL_INTERVAL = 1.0


class ReceiverDestination:
    """The receiver in the transfer pod, as an upload destination (see data.upload)."""

    def __init__(self, client: KubeClient, namespace: str, pod: str, token: str,
                 url: str) -> None:
        self.client = client
        self.namespace = namespace
        self.pod = pod
        self.token = token
        self.url = url

    def _request(self, method: str, path: str, *, headers: dict[str, str] | None = None,
                 body: Any = None, timeout: float | None = 60.0) -> dict[str, Any]:
        status, data = self.client.pod_proxy(
            self.namespace, self.pod, RECEIVER_PORT, method, path,
            headers={TOKEN_HEADER: self.token, **(headers or {})}, body=body, timeout=timeout)
        try:
            answer = json.loads(data) if data else {}
        except ValueError:
            answer = {"error": data[:300].decode("utf-8", errors="replace")}
        if status < 400:
            return dict(answer)
        message = answer.get("error") or f"status {status}"
        if status in (409, 413, 422):  # the data's fault: another file there, too big, damaged
            raise DataError(f"{self.url}: {message}")
        raise ClusterError(f"the transfer pod {self.pod} refused {method} {path.split('?')[0]} "
                           f"({status}): {message}; run the upload again to resume")

    def in_place(self, rel: str, sha: str, size: int, overwrite: bool) -> bool:
        query = f"sha256={sha}&size={size}&overwrite={int(overwrite)}"
        # hashing a big file already there takes a while: no read timeout
        return bool(self._request("GET", f"files/{quote(rel)}?{query}",
                                  timeout=None)["in_place"])

    def put(self, rel: str, source: Path, sha: str, size: int) -> None:
        with source.open("rb") as stream:
            self._request("PUT", f"files/{quote(rel)}", body=stream, timeout=None, headers={
                SHA256_HEADER: sha, "Content-Length": str(size),
                "Content-Type": "application/octet-stream"})

    def write_record(self, data: bytes) -> None:
        self._request("PUT", f"files/{quote(RECORD_NAME)}", body=data, headers={
            SHA256_HEADER: hashlib.sha256(data).hexdigest(), "Content-Length": str(len(data)),
            "Content-Type": "application/octet-stream"})

    def finish(self) -> None:
        self._request("POST", "finish")


def claim_dataset(claim_url: str, namespace: str, name: str) -> tuple[Storage, str]:
    """The claim and the dataset's directory in it (``PATH/NAMESPACE/NAME``)."""
    try:
        storage = Storage.parse("URL", claim_url)
    except ConfigError as exc:  # the spec's parser, worded for a spec field
        reason = str(exc).removeprefix("job spec field 'URL': ")
        raise ConfigError(f"upload destination {claim_url!r}: {reason}") from exc
    if storage.claim is None:
        raise ConfigError(f"{claim_url!r} is not pvc://CLAIM[/PATH]")
    directory = dataset_url(storage.sub_path, namespace, name).lstrip("/")
    return storage, directory


def upload_to_claim(client: KubeClient, local_dir: str | Path, claim_url: str, *,
                    namespace: str, name: str | None = None, overwrite: bool = False,
                    image: str = DEFAULT_IMAGE, ready_timeout: float = 300.0,
                    on_file: Callable[[str, bool], None] | None = None) -> UploadResult:
    """Upload ``local_dir`` into the claim of ``claim_url`` through a transfer Job; see the
    module docstring. The result's ``url`` is what a job spec's ``data:`` names."""
    root = Path(local_dir)
    local_files(root)  # a missing or empty directory fails before anything is created
    dataset = name or root.resolve().name
    storage, directory = claim_dataset(claim_url, namespace, dataset)
    assert storage.claim is not None
    transfer = Transfer(transfer_name(dataset, secrets.token_hex(3)), namespace, storage.claim,
                        directory, image)
    token = secrets.token_urlsafe(32)
    objects = transfer_objects(transfer, token)
    check_manifests(objects)
    url = f"pvc://{storage.claim}/{directory}"
    created: list[dict[str, Any]] = []
    try:
        for obj in objects:
            client.create(obj)
            created.append(obj)
        logger.info("Created transfer Job %s in namespace %s for %s.", transfer.name,
                    namespace, url)
        pod = wait_ready(client, transfer, ready_timeout)
        destination = ReceiverDestination(client, namespace, pod, token, url)
        result = upload_to(root, destination, overwrite=overwrite, on_file=on_file)
        destination.finish()
        return result
    finally:
        _remove(client, created)


def wait_ready(client: KubeClient, transfer: Transfer, timeout: float) -> str:
    """The name of the transfer Job's pod once it is ready; ClusterError if it fails first
    or is not ready within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    phase = "not created yet"
    while True:
        pods = [pod_info(p) for p in client.list(POD, transfer.namespace,
                                                 f"{LABEL_TRANSFER}={transfer.name}")]
        for pod in pods:
            if pod.ready:
                return pod.name
            if pod.phase == "Failed":
                raise ClusterError(f"the transfer pod {pod.name} failed; see `kubectl logs "
                                   f"{pod.name} -n {transfer.namespace}`")
        if pods:
            phase = pods[0].phase
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"the transfer pod of Job {transfer.name} was not ready within {timeout:.0f}s "
                f"(phase: {phase}); check that claim {transfer.claim!r} exists in namespace "
                f"{transfer.namespace!r} and that its image can be pulled (`kubectl describe "
                f"pod -l {LABEL_TRANSFER}={transfer.name} -n {transfer.namespace}`)")
        time.sleep(POLL_INTERVAL)  # polling a remote API; there is nothing to wait on


def _remove(client: KubeClient, created: list[dict[str, Any]]) -> None:
    for obj in reversed(created):
        meta = obj["metadata"]
        try:
            client.delete(kind_of(obj), meta["namespace"], meta["name"])
        except ClusterError as exc:
            logger.warning("Could not delete %s %s of the transfer: %s; delete it with "
                           "kubectl.", obj["kind"], meta["name"], exc)


__all__ = ["ReceiverDestination", "claim_dataset", "upload_to_claim",
           "wait_ready"]
