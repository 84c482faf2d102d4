"""A thin wrapper over the official ``kubernetes`` client for the few calls elasticps makes.

Objects travel as plain dicts (the rendered manifests) and come back as parsed JSON, so nothing
depends on the client's model classes. Every failure of the API — HTTP errors and an API
server that cannot be reached — is turned into :class:`~elasticps.errors.ClusterError` in one
place, :func:`_translate`, with a message that says what we tried and what to do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from elasticps.errors import ClusterError

logger = logging.getLogger(__name__)

T = TypeVar("T")
REQUEST_TIMEOUT = 30.0


@dataclass(frozen=True)
class Kind:
    """How to reach one resource type: a typed API class and its method suffix, or a CRD."""

    api_version: str
    kind: str
    api: type | None = None  # None: a custom resource served through CustomObjectsApi
    snake: str = ""
    plural: str = ""

    @property
    def label(self) -> str:
        return self.kind if "/" not in self.api_version else f"{self.kind}.{self.group}"

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


KINDS: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k for k in (
        Kind("v1", "ServiceAccount", k8s.CoreV1Api, "service_account"),
        Kind("v1", "Secret", k8s.CoreV1Api, "secret"),
        Kind("v1", "ConfigMap", k8s.CoreV1Api, "config_map"),
        Kind("v1", "Service", k8s.CoreV1Api, "service"),
        Kind("v1", "Pod", k8s.CoreV1Api, "pod"),
        Kind("v1", "PersistentVolumeClaim", k8s.CoreV1Api, "persistent_volume_claim"),
        Kind("apps/v1", "Deployment", k8s.AppsV1Api, "deployment"),
        Kind("apps/v1", "StatefulSet", k8s.AppsV1Api, "stateful_set"),
        Kind("batch/v1", "Job", k8s.BatchV1Api, "job"),
        Kind("rbac.authorization.k8s.io/v1", "Role", k8s.RbacAuthorizationV1Api, "role"),
        Kind("rbac.authorization.k8s.io/v1", "RoleBinding", k8s.RbacAuthorizationV1Api,
             "role_binding"),
        Kind("networking.k8s.io/v1", "NetworkPolicy", k8s.NetworkingV1Api, "network_policy"),
        Kind("policy/v1", "PodDisruptionBudget", k8s.PolicyV1Api, "pod_disruption_budget"),
        Kind("batch.volcano.sh/v1alpha1", "Job", plural="jobs"),
    )
}
VOLCANO_JOB = KINDS[("batch.volcano.sh/v1alpha1", "Job")]
BATCH_JOB = KINDS[("batch/v1", "Job")]
POD = KINDS[("v1", "Pod")]
SECRET = KINDS[("v1", "Secret")]


class KubeAPIError(ClusterError):
    """The API server answered with an error; ``status`` is the HTTP code (0: no answer)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def kind_of(obj: dict[str, Any]) -> Kind:
    try:
        return KINDS[(obj["apiVersion"], obj["kind"])]
    except KeyError:
        raise ClusterError(f"elasticps cannot create {obj.get('apiVersion')}/{obj.get('kind')} "
                           "objects") from None


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
    except ValueError:
        return (exc.body or exc.reason or "").strip()[:300]
    return str(body.get("message") or exc.reason or "") if isinstance(body, dict) else str(body)


class KubeClient:
    """Create, read, patch, list and delete the job's objects; read pod logs; proxy to a Service."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> KubeClient:
        """Load ``path`` (default ``$KUBECONFIG`` or ``~/.kube/config``), or the in-cluster
        service account when no kubeconfig exists and none was named."""
        configuration = k8s.Configuration()
        try:
            k8s_config.load_kube_config(config_file=path, context=context,
                                        client_configuration=configuration)
        except (ConfigException, OSError) as exc:
            if path is not None:
                raise ClusterError(f"cannot load kubeconfig {path}: {exc}") from exc
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                raise ClusterError(
                    f"no Kubernetes credentials: {exc}. Pass --kubeconfig FILE or set KUBECONFIG."
                ) from exc
        return cls(k8s.ApiClient(configuration))

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host).rstrip("/")

    # -- the one translation point -------------------------------------------------------

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ApiException as exc:
            raise self._translate(action, exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(
                f"cannot reach the Kubernetes API server at {self.host} to {action}: "
                f"{_root_cause(exc)}. Is the cluster up and --kubeconfig right?"
            ) from exc

    def _translate(self, action: str, exc: ApiException) -> KubeAPIError:
        message = _status_message(exc)
        status = exc.status or 0
        if status == 0:
            text = f"cannot reach the Kubernetes API server at {self.host} to {action}: {message}"
        elif status == 401:
            text = (f"the API server at {self.host} rejected our credentials (401) when trying "
                    f"to {action}; check --kubeconfig or log in again")
        elif status == 403:
            text = (f"forbidden (403) to {action}: {message}. Ask your cluster admin for that "
                    "permission in this namespace")
        elif status == 404:
            text = f"not found (404) when trying to {action}: {message}"
        elif status == 409:
            text = f"conflict (409) when trying to {action}: {message}"
        elif status == 422:
            text = f"the API server refused the object (422) when trying to {action}: {message}"
        else:
            text = f"the API server failed ({status}) when trying to {action}: {message}"
        return KubeAPIError(text, status)

    # -- objects --------------------------------------------------------------------------

    def _typed(self, kind: Kind) -> Any:
        assert kind.api is not None
        return kind.api(self.api_client)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind = kind_of(obj)
        namespace = obj["metadata"]["namespace"]
        action = f"create {kind.label} {obj['metadata']['name']!r} in namespace {namespace!r}"

        # The generated client sends a dict body with no Content-Type (and ignores
        # _content_type); say what it is rather than rely on the server's default.
        options: dict[str, Any] = {"_preload_content": False,
                                   "_headers": {"Content-Type": "application/json"},
                                   "_request_timeout": REQUEST_TIMEOUT}

        def run() -> Any:
            if kind.api is None:
                return k8s.CustomObjectsApi(self.api_client).create_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, obj, **options)
            method = getattr(self._typed(kind), f"create_namespaced_{kind.snake}")
            return method(namespace, obj, **options)

        return _json(self._call(action, run))

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (or its API is not served)."""
        action = f"read {kind.label} {name!r} in namespace {namespace!r}"

        def run() -> Any:
            if kind.api is None:
                return k8s.CustomObjectsApi(self.api_client).get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name,
                    _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
            method = getattr(self._typed(kind), f"read_namespaced_{kind.snake}")
            return method(name, namespace, _preload_content=False,
                          _request_timeout=REQUEST_TIMEOUT)

        try:
            return _json(self._call(action, run))
        except KubeAPIError as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, kind: Kind, namespace: str, name: str,
              ops: list[dict[str, Any]]) -> dict[str, Any]:
        """Apply a JSON Patch (RFC 6902) to the object; its ``test`` ops make the change
        conditional on what was read (a failed test is a 422 KubeAPIError, nothing changed)."""
        action = f"patch {kind.label} {name!r} in namespace {namespace!r}"
        # The generated client would pick merge-patch for a custom object (and its own choice
        # over a header); a JSON Patch must say so.
        options: dict[str, Any] = {"_preload_content": False,
                                   "_content_type": "application/json-patch+json",
                                   "_request_timeout": REQUEST_TIMEOUT}

        def run() -> Any:
            if kind.api is None:
                return k8s.CustomObjectsApi(self.api_client).patch_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, ops, **options)
            method = getattr(self._typed(kind), f"patch_namespaced_{kind.snake}")
            return method(name, namespace, ops, **options)

        return _json(self._call(action, run))

    def list(self, kind: Kind, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """Objects matching ``label_selector``; empty when the API (e.g. a CRD) is not served."""
        action = f"list {kind.label} objects with {label_selector!r} in namespace {namespace!r}"

        def run() -> Any:
            if kind.api is None:
                return k8s.CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural,
                    label_selector=label_selector, _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT)
            method = getattr(self._typed(kind), f"list_namespaced_{kind.snake}")
            return method(namespace, label_selector=label_selector, _preload_content=False,
                          _request_timeout=REQUEST_TIMEOUT)

        try:
            items = _json(self._call(action, run)).get("items") or []
        except KubeAPIError as exc:
            if exc.status == 404 and kind.api is None:
                return []
            raise
        return [dict(item) for item in items]

    def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """Delete with background propagation (a Job takes its pods along); False if absent."""
        action = f"delete {kind.label} {name!r} in namespace {namespace!r}"

        def run() -> Any:
            if kind.api is None:
                return k8s.CustomObjectsApi(self.api_client).delete_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name,
                    propagation_policy="Background", _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT)
            method = getattr(self._typed(kind), f"delete_namespaced_{kind.snake}")
            return method(name, namespace, propagation_policy="Background",
                          _preload_content=False, _request_timeout=REQUEST_TIMEOUT)

        try:
            self._call(action, run)
        except KubeAPIError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # -- pods -----------------------------------------------------------------------------

    def read_log(self, namespace: str, pod: str, container: str, *, follow: bool = False,
                 tail_lines: int | None = None) -> Iterator[str]:
        """Lines of a container's log; with ``follow`` the iterator ends when the pod does."""
        action = f"read the log of pod {pod!r} in namespace {namespace!r}"
        kwargs: dict[str, Any] = {"container": container, "follow": follow,
                                  "_preload_content": False}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if not follow:
            kwargs["_request_timeout"] = REQUEST_TIMEOUT
        response = self._call(action, lambda: k8s.CoreV1Api(self.api_client)
                              .read_namespaced_pod_log(pod, namespace, **kwargs))
        return self._lines(action, response)

    def _lines(self, action: str, response: Any) -> Iterator[str]:
        pending = b""
        try:
            for chunk in response.stream(4096, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace")
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"lost the log stream while trying to {action}: "
                               f"{_root_cause(exc)}") from exc
        finally:
            response.release_conn()
        if pending:
            yield pending.decode("utf-8", errors="replace")

    def proxy_get(self, namespace: str, service: str, port: str, path: str, *,
                  scheme: str = "http", headers: dict[str, str] | None = None,
                  limit: int | None = None) -> bytes:
        """GET ``path`` from a Service's named port through the API server's service proxy
        (``scheme`` https: the API server speaks TLS to the pod), with extra ``headers``. An
        answer of more than ``limit`` bytes is a ClusterError, read no further."""
        action = f"fetch {path} from service {service}:{port} in namespace {namespace!r}"
        target = f"{service}:{port}" if scheme == "http" else f"{scheme}:{service}:{port}"
        # The path goes in the `path` query parameter: the client would percent-encode a '/'
        # in the URL path, which the API server does not route.
        response: Any = self._call(action, lambda: k8s.CoreV1Api(self.api_client)
                              .connect_get_namespaced_service_proxy(
                                  target, namespace, path=path, _headers=headers or None,
                                  _preload_content=False, _request_timeout=REQUEST_TIMEOUT))
        if limit is None:
            return bytes(response.data)
        try:
            data = bytes(response.read(limit + 1))
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"lost the answer while trying to {action}: "
                               f"{_root_cause(exc)}") from exc
        finally:
            response.release_conn()
        if len(data) > limit:
            raise ClusterError(f"the answer to {path} from service {service}:{port} in "
                               f"namespace {namespace!r} is larger than {limit:,} bytes; it "
                               "was not read further")
        return data


    def pod_proxy(self, namespace: str, pod: str, port: int, method: str, path: str, *,
                  headers: dict[str, str] | None = None, body: Any = None,
                  timeout: float | None = REQUEST_TIMEOUT) -> tuple[int, bytes]:
        """One HTTP request to a pod's port through the API server's pod proxy
        (``/api/v1/namespaces/NS/pods/POD:PORT/proxy/PATH``); ``path`` is already
        percent-encoded and may carry a query. ``body`` may be a file object: it is streamed
        (give its Content-Length in ``headers``). Returns the pod's status and body; an
        error of the API server itself (no such pod, forbidden) is a :class:`KubeAPIError`.

        Not through the generated client: it reads a request body into memory, and a
        dataset file can be gigabytes."""
        action = f"{method} {path.split('?')[0]} on pod {pod}:{port} in namespace {namespace!r}"
        url = (f"{self.host}/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}:{port}"
               f"/proxy/{path.lstrip('/')}")
        sent = dict(headers or {})
        for setting in self.api_client.configuration.auth_settings().values():
            if setting["in"] == "header" and setting["value"]:
                sent[setting["key"]] = setting["value"]
        try:
            response = self.api_client.rest_client.pool_manager.request(
                method, url, body=body, headers=sent, preload_content=True, retries=False,
                timeout=urllib3.Timeout(connect=REQUEST_TIMEOUT, read=timeout))
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"cannot reach the Kubernetes API server at {self.host} to "
                               f"{action}: {_root_cause(exc)}") from exc
        data = bytes(response.data)
        if _from_api_server(response.status, response.headers, data):
            raise self._translate(action, _api_exception(response.status, response.reason, data))
        return response.status, data


def _api_exception(status: int, reason: str | None, data: bytes) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = data.decode("utf-8", errors="replace")
    return exc


def _from_api_server(status: int, headers: Any, data: bytes) -> bool:
    """Whether an error answer comes from the API server (a Status object) rather than the
    pod: the proxy passes the pod's own answers through unchanged."""
    if status < 400 or "json" not in str(headers.get("Content-Type", "")):
        return False
    try:
        parsed = json.loads(data)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("kind") == "Status"


def _json(response: Any) -> dict[str, Any]:
    data = response.data
    if not data:
        return {}
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise ClusterError(f"the API server sent a reply that is not JSON: {data[:200]!r}") from exc
    return parsed if isinstance(parsed, dict) else {}


def _root_cause(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    while isinstance(reason, BaseException) and getattr(reason, "reason", None) is not None:
        reason = getattr(reason, "reason", None)
    text = str(reason if reason is not None else exc)
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    return text
