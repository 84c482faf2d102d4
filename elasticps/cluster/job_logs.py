"""``elasticps logs JOB``: the logs of a cluster job's pods, one role or all, each line
prefixed by its pod.

Without ``--follow`` the pods are read one after the other (ordered by role, index, age), so
each pod's lines stay together. With ``--follow`` every pod is streamed at once by its own
thread, and lines are printed as they arrive; the command ends when every stream has ended
(the API server closes a followed log when its container stops).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from elasticps.cluster.kube_client import POD, KubeClient
from elasticps.cluster.render.common import LABEL_JOB, LABEL_ROLE, ROLES
from elasticps.cluster.submit import PodInfo, pod_info, role_order
from elasticps.errors import ClusterError, ConfigError

LOG_ROLES = (*ROLES, "etcd")
# Following this many pods at once is one open HTTP stream each; past it, name a role.
MAX_FOLLOWED_PODS = 200


@dataclass(frozen=True)
class LogLine:
    """One line of one pod's log (``text`` is None for a stream's end or its error)."""

    pod: str
    text: str | None
    error: str | None = None


def select_pods(client: KubeClient, name: str, namespace: str, *, role: str | None = None,
                index: int | None = None) -> list[PodInfo]:
    """The job's pods of ``role`` (every role when None) holding ``index`` (every index when
    None), ordered by role, index and creation; ClusterError when none match."""
    if role is not None and role not in LOG_ROLES:
        raise ConfigError(f"role {role!r} is not one of {', '.join(LOG_ROLES)}")
    selector = f"{LABEL_JOB}={name}" + (f",{LABEL_ROLE}={role}" if role else "")
    pods = [pod_info(p) for p in client.list(POD, namespace, selector)]
    pods = [p for p in pods if p.role in LOG_ROLES]
    if not pods:
        what = f"{role} pods" if role else "pods"
        raise ClusterError(f"job {name!r} has no {what} in namespace {namespace!r}")
    if index is not None:
        chosen = [p for p in pods if p.index == index]
        if not chosen:
            known = sorted({p.index for p in pods if p.index is not None})
            who = f"{role} pod" if role else "pod"
            raise ClusterError(f"job {name!r} has no {who} with index {index}; indexes "
                               f"present: {known}")
        pods = chosen
    return sorted(pods, key=lambda p: (role_order(p.role), -1 if p.index is None else p.index,
                                       p.created, p.name))


def _container(pod: PodInfo) -> str:
    return "etcd" if pod.role == "etcd" else pod.role


def job_logs(client: KubeClient, name: str, namespace: str, *, role: str | None = None,
             index: int | None = None, follow: bool = False,
             tail_lines: int | None = None) -> Iterator[str]:
    """Lines of the chosen pods' logs, each as ``[pod] text``."""
    pods = select_pods(client, name, namespace, role=role, index=index)
    if not follow:
        for pod in pods:
            for text in client.read_log(namespace, pod.name, _container(pod),
                                        tail_lines=tail_lines):
                yield f"[{pod.name}] {text}"
        return
    if len(pods) > MAX_FOLLOWED_PODS:
        raise ConfigError(f"job {name!r} has {len(pods)} pods, more than {MAX_FOLLOWED_PODS} "
                          "to follow at once; pick one with --role (and --index)")
    yield from _follow(client, namespace, pods, tail_lines)


def _follow(client: KubeClient, namespace: str, pods: list[PodInfo],
            tail_lines: int | None) -> Iterator[str]:
    lines: queue.Queue[LogLine] = queue.Queue(maxsize=10_000)

    def stream(pod: PodInfo) -> None:
        try:
            for text in client.read_log(namespace, pod.name, _container(pod), follow=True,
                                        tail_lines=tail_lines):
                lines.put(LogLine(pod.name, text))
        except ClusterError as exc:
            lines.put(LogLine(pod.name, None, str(exc)))
            return
        lines.put(LogLine(pod.name, None))

    for pod in pods:
        threading.Thread(target=stream, args=(pod,), daemon=True,
                         name=f"logs-{pod.name}").start()
    open_streams = len(pods)
    while open_streams:
        line = lines.get()
        if line.text is not None:
            yield f"[{line.pod}] {line.text}"
            continue
        open_streams -= 1
        if line.error is not None:
            yield f"[{line.pod}] (log stream ended: {line.error})"


__all__ = ["MAX_FOLLOWED_PODS", "job_logs", "select_pods"]
