"""The Pod Security Standards' "restricted" profile (Kubernetes 1.33), checked on pod specs.

A namespace labelled ``pod-security.kubernetes.io/enforce: restricted`` refuses a pod that
breaks any of these rules, so :mod:`elasticps.cluster.validate` applies them to every pod
template before anything is sent; a rule broken is a sentence naming the pod and container.
The rules (the baseline profile's, then restricted's own), as
https://kubernetes.io/docs/concepts/security/pod-security-standards/ lists them:

* no host namespaces, host ports, hostPath volumes, privileged containers, added capabilities
  beyond ``NET_BIND_SERVICE``, unsafe sysctls, ``procMount`` other than Default, AppArmor
  ``Unconfined`` or SELinux options beyond the allowed types;
* volumes only of the types configMap, csi, downwardAPI, emptyDir, ephemeral,
  persistentVolumeClaim, projected, secret;
* ``allowPrivilegeEscalation: false`` in every container;
* ``runAsNonRoot: true`` for the pod or every container, and no ``runAsUser: 0``;
* ``seccompProfile.type`` RuntimeDefault or Localhost, for the pod or every container (and
  never Unconfined anywhere);
* every container drops ``ALL`` capabilities.

"Every container" means init containers and ephemeral containers too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_VOLUME_TYPES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                           "persistentVolumeClaim", "projected", "secret"})
_SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                            "container_engine_t"})
_SECCOMP_OK = frozenset({"RuntimeDefault", "Localhost"})
_NAME_KEYS = frozenset({"name", "volumeName"})


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field, word in (("initContainers", "init container"), ("containers", "container"),
                        ("ephemeralContainers", "ephemeral container")):
        for container in spec.get(field) or []:
            yield f"{word} {container.get('name')}", container


def restricted_problems(where: str, spec: dict[str, Any]) -> list[str]:
    """What keeps the pod ``spec`` out of a namespace enforcing "restricted"; ``where``
    names the pod in each sentence."""
    problems = _pod_level(where, spec)
    pod_context = spec.get("securityContext") or {}
    for name, container in _containers(spec):
        problems += [f"{where} {name}: {p}" for p in _container_level(container, pod_context)]
    return problems


def _pod_level(where: str, spec: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(f"{where}: {field} is true")
    context = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - _NAME_KEYS
        if not kinds <= _VOLUME_TYPES:
            problems.append(f"{where}: volume {volume.get('name')!r} is of a type "
                            f"({', '.join(sorted(kinds - _VOLUME_TYPES))}) restricted refuses")
    for sysctl in context.get("sysctls") or []:
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            problems.append(f"{where}: sysctl {sysctl.get('name')!r} is not a safe one")
    if context.get("runAsUser") == 0:
        problems.append(f"{where}: runAsUser is 0 (root)")
    problems += [f"{where}: {p}" for p in _selinux_apparmor(context)]
    seccomp = (context.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp not in _SECCOMP_OK:
        problems.append(f"{where}: seccompProfile is {seccomp}")
    return problems


def _selinux_apparmor(context: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in _SELINUX_TYPES or selinux.get("user") \
            or selinux.get("role"):
        problems.append(f"seLinuxOptions {selinux} are not allowed")
    if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
        problems.append("appArmorProfile is Unconfined")
    return problems


def _container_level(container: dict[str, Any], pod: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    context = container.get("securityContext") or {}
    if context.get("privileged"):
        problems.append("privileged is true")
    if any(port.get("hostPort") for port in container.get("ports") or []):
        problems.append("uses a hostPort")
    if context.get("procMount", "Default") != "Default":
        problems.append(f"procMount is {context.get('procMount')}")
    problems += _selinux_apparmor(context)
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    if context.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
        problems.append("runAsNonRoot is not true (for the pod or the container)")
    if context.get("runAsUser") == 0:
        problems.append("runAsUser is 0 (root)")
    seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
    if seccomp not in _SECCOMP_OK:
        problems.append(f"seccompProfile is {seccomp or 'not set'} (for the pod or the "
                        "container; RuntimeDefault or Localhost)")
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []):
        problems.append("capabilities do not drop ALL")
    added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
    if added:
        problems.append(f"adds capabilities {sorted(added)}")
    return problems
