"""Check rendered manifests before anything reaches a cluster.

Three layers:

1. Built-in Kubernetes objects against the API's own OpenAPI schemas with
   ``kubernetes_validate`` in strict mode (unknown fields are errors), for
   :data:`K8S_VERSION`, the oldest Kubernetes we target.
2. The Volcano Job against the ``openAPIV3Schema`` of Volcano's CRD
   (``schemas/volcano-batch.volcano.sh_jobs.yaml``, copied from volcano-sh/volcano), made
   strict the same way; each task's pod template is also checked as a ``v1/PodTemplate``.
3. Semantic checks no schema can express: unique names; every env var a role reads is set;
   secret, service-account, volume and port references resolve; Services and
   PodDisruptionBudgets select pods that exist; Volcano ``minAvailable`` fits the replicas and
   policies use valid events/actions; every pod meets the Pod Security Standards'
   "restricted" profile (:mod:`elasticps.cluster.pod_security`).

Layers 1-2 need the ``kubernetes-validate`` and ``jsonschema`` packages (dev extras); without
them :func:`validate_manifests` runs layer 3 only and says so in the log.
"""

from __future__ import annotations

import copy
import functools
import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import Any

import yaml

from elasticps.cluster.pod_security import restricted_problems
from elasticps.cluster.render.common import LABEL_ROLE, OPTIONAL_ROLE_ENV, ROLE_ENV
from elasticps.errors import ClusterError

logger = logging.getLogger(__name__)

K8S_VERSION = "1.33"  # Indexed Jobs' backoffLimitPerIndex went GA here
VOLCANO_API = "batch.volcano.sh/v1alpha1"
CRD_RESOURCE = "volcano-batch.volcano.sh_jobs.yaml"

# Volcano's admission webhook (pkg/webhooks/admission/jobs/validate/util.go) accepts these.
VOLCANO_EVENTS = frozenset({"*", "PodFailed", "PodEvicted", "PodPending", "Unknown",
                            "TaskCompleted", "TaskFailed", "JobUpdated"})
VOLCANO_ACTIONS = frozenset({"AbortJob", "RestartJob", "RestartTask", "RestartPod",
                             "TerminateJob", "CompleteJob", "ResumeJob"})
VOLCANO_PLUGINS = frozenset({"svc", "env", "ssh", "pytorch", "tensorflow", "mpi"})
_FIELD_REF = re.compile(
    r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)\['[^']+'\]|"
    r"spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)
_POD_OWNERS = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("batch/v1", "Job")}


def validate_manifests(objects: list[dict[str, Any]], *, schemas: bool = True) -> list[str]:
    """Every problem found, as sentences naming the object; empty when all is well."""
    problems = semantic_problems(objects)
    if schemas:
        try:
            problems += schema_problems(objects)
        except ImportError as exc:
            logger.info("Schema validation skipped (%s); install elasticps[dev] for it.", exc)
    return problems


def check_manifests(objects: list[dict[str, Any]], *, schemas: bool = True) -> None:
    """Raise :class:`ClusterError` listing every problem, or return quietly."""
    problems = validate_manifests(objects, schemas=schemas)
    if problems:
        raise ClusterError("the rendered manifests are invalid:\n  " + "\n  ".join(problems))


def _ident(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


# ---------------------------------------------------------------- layers 1 and 2: schemas


def job_schema_problems(job: dict[str, Any]) -> list[str]:
    """:func:`schema_problems` of one Job this command renders and creates; none when the
    schemas' validator (kubernetes-validate, a dev extra) is not installed: the API server
    checks the Job too."""
    try:
        return schema_problems([job])
    except ImportError:
        return []


def schema_problems(objects: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    for obj in objects:
        if obj.get("apiVersion") == VOLCANO_API and obj.get("kind") == "Job":
            problems += [f"{_ident(obj)}: {p}" for p in volcano_schema_problems(obj)]
            for i, task in enumerate(obj.get("spec", {}).get("tasks", [])):
                wrapped = {"apiVersion": "v1", "kind": "PodTemplate",
                           "metadata": {"name": str(task.get("name", i))},
                           "template": task.get("template", {})}
                problems += [f"{_ident(obj)} task {task.get('name', i)}: {p}"
                             for p in kubernetes_schema_problems(wrapped)]
        else:
            problems += [f"{_ident(obj)}: {p}" for p in kubernetes_schema_problems(obj)]
    return problems


def kubernetes_schema_problems(obj: dict[str, Any], version: str = K8S_VERSION) -> list[str]:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(copy.deepcopy(obj), version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "(top)"
        return [f"{path}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [exc.message]
    return []


@functools.cache
def volcano_crd_schema() -> dict[str, Any]:
    """The strict JSON schema of a Volcano Job, from the CRD shipped in this package."""
    text = resources.files("elasticps.cluster").joinpath("schemas", CRD_RESOURCE).read_text()
    crd = yaml.safe_load(text)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    return _strict(version["schema"]["openAPIV3Schema"])


def _strict(node: Any) -> Any:
    """Drop ``x-kubernetes-*`` keys and forbid unknown fields, as ``kubectl --validate=strict``
    does, except where the CRD says unknown fields are preserved."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def volcano_schema_problems(obj: dict[str, Any]) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft7Validator(volcano_crd_schema())
    return [f"{'.'.join(str(p) for p in err.absolute_path) or '(top)'}: {err.message}"
            for err in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]


# ---------------------------------------------------------------- layer 3: semantics


def _pod_templates(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        spec = obj.get("spec", {})
        if (obj.get("apiVersion"), obj.get("kind")) in _POD_OWNERS:
            yield _ident(obj), spec.get("template", {})
        elif obj.get("apiVersion") == VOLCANO_API and obj.get("kind") == "Job":
            for task in spec.get("tasks", []):
                yield f"{_ident(obj)} task {task.get('name')}", task.get("template", {})


def semantic_problems(objects: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    keys = Counter((o.get("kind"), o.get("metadata", {}).get("name")) for o in objects)
    problems += [f"{kind}/{name} is defined {n} times" for (kind, name), n in keys.items()
                 if n > 1]
    namespaces = {o.get("metadata", {}).get("namespace") for o in objects}
    if len(namespaces) > 1:
        problems.append(f"objects span several namespaces: {sorted(map(str, namespaces))}")
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(str(obj.get("kind")), {})[obj["metadata"]["name"]] = obj
    templates = list(_pod_templates(objects))
    for where, template in templates:
        problems += _template_problems(where, template, by_kind)
        problems += restricted_problems(where, template.get("spec", {}))
    problems += _service_problems(by_kind, templates)
    problems += _budget_problems(by_kind, templates)
    problems += _workload_problems(objects, by_kind)
    problems += _rbac_problems(by_kind)
    return problems


def _template_problems(where: str, template: dict[str, Any],
                       by_kind: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    problems: list[str] = []
    spec = template.get("spec", {})
    role = template.get("metadata", {}).get("labels", {}).get(LABEL_ROLE)
    account = spec.get("serviceAccountName")
    if account and account not in by_kind.get("ServiceAccount", {}):
        problems.append(f"{where}: serviceAccountName {account!r} is not among the objects")
    volumes = {v["name"] for v in spec.get("volumes", [])}
    problems += _config_map_problems(where, spec, by_kind)
    for container in spec.get("initContainers", []):
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in volumes:
                problems.append(f"{where} init container {container.get('name')}: "
                                f"volumeMount {mount['name']!r} has no volume")
    for container in spec.get("containers", []):
        cwhere = f"{where} container {container.get('name')}"
        env = container.get("env", [])
        names = [e["name"] for e in env]
        dupes = sorted(n for n, c in Counter(names).items() if c > 1)
        if dupes:
            problems.append(f"{cwhere}: env vars set twice: {', '.join(dupes)}")
        if role in ROLE_ENV:
            missing = [n for n in ROLE_ENV[role] if n not in names]
            if missing:
                problems.append(f"{cwhere}: the {role} reads {', '.join(missing)} "
                                "but the manifest does not set it")
            stray = [n for n in names if n.startswith("PADDLE_")
                     and n not in ROLE_ENV[role] + OPTIONAL_ROLE_ENV[role]
                     and n not in _tunable()]
            if stray:
                problems.append(f"{cwhere}: sets {', '.join(stray)}, which the {role} "
                                "does not read")
        for item in env:
            problems += _env_ref_problems(cwhere, item, by_kind)
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in volumes and not _claim_template(by_kind, mount["name"]):
                problems.append(f"{cwhere}: volumeMount {mount['name']!r} has no volume")
        problems += _probe_problems(cwhere, container)
    return problems


def _config_map_problems(where: str, spec: dict[str, Any],
                         by_kind: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """A configMap or secret volume names an object among the objects, and keys it holds."""
    problems: list[str] = []
    for volume in spec.get("volumes", []):
        for field, kind, name_key, keys_of in (
                ("configMap", "ConfigMap", "name", ("data", "binaryData")),
                ("secret", "Secret", "secretName", ("data", "stringData"))):
            source = volume.get(field)
            if source is None:
                continue
            name = source.get(name_key)
            found = by_kind.get(kind, {}).get(name)
            if found is None:
                problems.append(f"{where}: volume {volume['name']!r} refers to missing {kind} "
                                f"{name!r}")
                continue
            keys = {key for part in keys_of for key in found.get(part, {})}
            problems += [f"{where}: volume {volume['name']!r} refers to key "
                         f"{item.get('key')!r} missing from {kind} {name!r}"
                         for item in source.get("items", []) if item.get("key") not in keys]
    return problems


@functools.cache
def _tunable() -> frozenset[str]:
    from elasticps.cluster.spec_env import TUNABLE_ENV

    return TUNABLE_ENV


def _claim_template(by_kind: dict[str, dict[str, dict[str, Any]]], name: str) -> bool:
    return any(t.get("metadata", {}).get("name") == name
               for sts in by_kind.get("StatefulSet", {}).values()
               for t in sts.get("spec", {}).get("volumeClaimTemplates", []))


def _env_ref_problems(where: str, item: dict[str, Any],
                      by_kind: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    source = item.get("valueFrom")
    if source is None:
        return [] if isinstance(item.get("value"), str) else [
            f"{where}: env {item['name']} has no string value"]
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        secret = by_kind.get("Secret", {}).get(ref.get("name"))
        if secret is None:
            return [f"{where}: env {item['name']} refers to missing Secret {ref.get('name')!r}"]
        data = {**secret.get("data", {}), **secret.get("stringData", {})}
        if ref.get("key") not in data:
            return [f"{where}: env {item['name']} refers to key {ref.get('key')!r} "
                    f"missing from Secret {ref.get('name')!r}"]
    if "fieldRef" in source and not _FIELD_REF.match(source["fieldRef"].get("fieldPath", "")):
        return [f"{where}: env {item['name']} uses fieldPath "
                f"{source['fieldRef'].get('fieldPath')!r}, which the downward API lacks"]
    return []


def _probe_problems(where: str, container: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    port_names = {p.get("name") for p in container.get("ports", [])}
    port_numbers = {p.get("containerPort") for p in container.get("ports", [])}
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = container.get(kind)
        if not probe:
            continue
        for handler in ("tcpSocket", "httpGet", "grpc"):
            port = probe.get(handler, {}).get("port")
            if port is None:
                continue
            known = port_names if isinstance(port, str) else port_numbers
            if port not in known:
                problems.append(f"{where}: {kind} uses port {port!r}, "
                                "which the container does not declare")
    return problems


def _service_problems(by_kind: dict[str, dict[str, dict[str, Any]]],
                      templates: list[tuple[str, dict[str, Any]]]) -> list[str]:
    problems: list[str] = []
    for name, svc in by_kind.get("Service", {}).items():
        wanted = svc.get("spec", {}).get("selector", {})
        matched = [t for _, t in templates
                   if wanted.items() <= t.get("metadata", {}).get("labels", {}).items()]
        if not matched:
            problems.append(f"Service/{name} selects {wanted} but no pod template has "
                            "those labels")
            continue
        ports = {p.get("name") for t in matched for c in t["spec"].get("containers", [])
                 for p in c.get("ports", [])}
        for port in svc["spec"].get("ports", []):
            target = port.get("targetPort")
            if isinstance(target, str) and target not in ports:
                problems.append(f"Service/{name} targets port {target!r}, which its pods "
                                "do not declare")
    return problems


def _budget_problems(by_kind: dict[str, dict[str, dict[str, Any]]],
                     templates: list[tuple[str, dict[str, Any]]]) -> list[str]:
    problems: list[str] = []
    for name, budget in by_kind.get("PodDisruptionBudget", {}).items():
        wanted = budget.get("spec", {}).get("selector", {}).get("matchLabels", {})
        if not any(wanted.items() <= t.get("metadata", {}).get("labels", {}).items()
                   for _, t in templates):
            problems.append(f"PodDisruptionBudget/{name} selects {wanted} but no pod template "
                            "has those labels")
    return problems


def _workload_problems(objects: Iterable[dict[str, Any]],
                       by_kind: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    problems: list[str] = []
    for obj in objects:
        spec = obj.get("spec", {})
        kind = obj.get("kind")
        if (obj.get("apiVersion"), kind) in {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")}:
            match = spec.get("selector", {}).get("matchLabels", {})
            labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
            if not match.items() <= labels.items():
                problems.append(f"{_ident(obj)}: selector {match} does not match its "
                                f"template labels {labels}")
        if kind == "StatefulSet":
            svc = by_kind.get("Service", {}).get(spec.get("serviceName"))
            if svc is None or svc["spec"].get("clusterIP") != "None":
                problems.append(f"{_ident(obj)}: serviceName {spec.get('serviceName')!r} is "
                                "not a headless Service among the objects")
        if obj.get("apiVersion") == "batch/v1" and kind == "Job":
            if spec.get("maxFailedIndexes", 0) > spec.get("completions", 0):
                problems.append(f"{_ident(obj)}: maxFailedIndexes exceeds completions")
            restart = spec.get("template", {}).get("spec", {}).get("restartPolicy")
            if "backoffLimitPerIndex" in spec and restart != "Never":
                problems.append(f"{_ident(obj)}: backoffLimitPerIndex needs restartPolicy "
                                f"Never, got {restart!r}")
        if obj.get("apiVersion") == VOLCANO_API and kind == "Job":
            problems += _volcano_problems(obj, by_kind)
    return problems


def _volcano_problems(obj: dict[str, Any],
                      by_kind: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    where = _ident(obj)
    spec = obj.get("spec", {})
    tasks = spec.get("tasks", [])
    problems: list[str] = []
    total = sum(t.get("replicas", 0) for t in tasks)
    if spec.get("minAvailable", 0) > total:
        problems.append(f"{where}: minAvailable {spec.get('minAvailable')} exceeds the "
                        f"{total} replicas of all tasks")
    names = [t.get("name") for t in tasks]
    if len(set(names)) != len(names):
        problems.append(f"{where}: task names repeat: {names}")
    for task in tasks:
        if task.get("minAvailable", 0) > task.get("replicas", 0):
            problems.append(f"{where} task {task.get('name')}: minAvailable exceeds replicas")
        problems += _policy_problems(f"{where} task {task.get('name')}",
                                     task.get("policies", []))
    problems += _policy_problems(where, spec.get("policies", []))
    unknown = sorted(set(spec.get("plugins", {})) - VOLCANO_PLUGINS)
    if unknown:
        problems.append(f"{where}: unknown Volcano plugins {unknown}")
    if "svc" in spec.get("plugins", {}):
        # The svc plugin creates a Service named after the job and a ConfigMap <job>-svc.
        job_name = obj["metadata"]["name"]
        if job_name in by_kind.get("Service", {}):
            problems.append(f"{where}: Service/{job_name} clashes with the svc plugin's Service")
    return problems


def _policy_problems(where: str, policies: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for policy in policies:
        events = list(policy.get("events", [])) + ([policy["event"]] if "event" in policy else [])
        if not events and "exitCode" not in policy:
            problems.append(f"{where}: a policy has neither event(s) nor exitCode")
        for event in events:
            if event not in VOLCANO_EVENTS:
                problems.append(f"{where}: policy event {event!r} is not accepted by Volcano")
            if event in seen:
                problems.append(f"{where}: policy event {event!r} appears twice")
            seen.add(event)
        if policy.get("action") not in VOLCANO_ACTIONS:
            problems.append(f"{where}: policy action {policy.get('action')!r} is not accepted "
                            "by Volcano")
    if "*" in seen and len(seen) > 1:
        problems.append(f"{where}: a '*' policy must be the only one")
    return problems


def _rbac_problems(by_kind: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    problems: list[str] = []
    for name, binding in by_kind.get("RoleBinding", {}).items():
        ref = binding.get("roleRef", {})
        if ref.get("kind") == "Role" and ref.get("name") not in by_kind.get("Role", {}):
            problems.append(f"RoleBinding/{name} refers to missing Role {ref.get('name')!r}")
        for subject in binding.get("subjects", []):
            if (subject.get("kind") == "ServiceAccount"
                    and subject.get("name") not in by_kind.get("ServiceAccount", {})):
                problems.append(f"RoleBinding/{name} binds missing ServiceAccount "
                                f"{subject.get('name')!r}")
    for name, role in by_kind.get("Role", {}).items():
        for rule in role.get("rules", []):
            if "*" in rule.get("verbs", []) or "*" in rule.get("resources", []):
                problems.append(f"Role/{name} uses a wildcard; grant exactly what is needed")
    return problems
