"""Every pod elasticps renders meets the Pod Security Standards' "restricted" profile: the
roles of both backends (init containers too), etcd and its setup Job, the transfer pod, the
reshard and layout pods. The rules are applied here as the profile states them
(elasticps/cluster/pod_security.py lists them); each one is shown to catch its breach."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticps.cluster.manifests import BACKENDS, render
from elasticps.cluster.pod_security import restricted_problems
from elasticps.cluster.render.reshard import layout_job, reshard_job
from elasticps.cluster.render.transfer import Transfer, transfer_objects
from elasticps.cluster.spec import Job
from elasticps.cluster.validate import semantic_problems

SPEC: dict[str, Any] = {"job_name": "ctr", "namespace": "ml", "entry_point": "python train.py",
                        "trainers": 2, "data": "pvc://ctr-data", "checkpoint": "pvc://ckpt",
                        "etcd": {"replicas": 3}}


def pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod spec inside a manifest: workloads' templates and Volcano tasks'."""
    spec = obj.get("spec", {})
    if obj["apiVersion"] == "batch.volcano.sh/v1alpha1":
        for task in spec["tasks"]:
            yield f"{obj['metadata']['name']} task {task['name']}", task["template"]["spec"]
    elif obj["kind"] in ("Deployment", "StatefulSet", "Job"):
        yield f"{obj['kind']}/{obj['metadata']['name']}", spec["template"]["spec"]


def every_pod(tmp_path: Path) -> list[tuple[str, dict[str, Any]]]:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('hi')\n")
    jobs = [Job.from_dict(SPEC),
            Job.from_dict({**SPEC, "code": str(code)}),  # unpack-code init container
            Job.from_dict({**SPEC, "code": str(code), "code_url": "s3://b/code",
                           "env": {"AWS_SECRET_ACCESS_KEY": "x"}})]  # fetch-code
    objects = [o for job in jobs for backend in BACKENDS for o in render(job, backend)]
    objects += transfer_objects(Transfer("upload-ctr-1", "ml", "data", "ml/ctr", "img:1"),
                                "t" * 40)
    pserver = next(t for o in render(jobs[0], "kubernetes") if o["kind"] == "StatefulSet"
                   and o["metadata"]["name"] == "ctr-pserver"
                   for t in [o["spec"]["template"]])
    objects += [reshard_job(pserver, job_name="ctr", namespace="ml", old_pservers=1,
                            new_pservers=2, slot_wait_s=10, deadline_s=60),
                layout_job(pserver, job_name="ctr", namespace="ml", deadline_s=60)]
    return [pod for obj in objects for pod in pod_specs(obj)]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_rendered_pod_meets_the_restricted_profile(tmp_path: Path) -> None:
    pods = every_pod(tmp_path)
    names = {where.split(" task ")[-1].split("/")[-1] for where, _ in pods}
    assert {"master", "pserver", "trainer", "ctr-master", "ctr-pserver", "ctr-trainer",
            "ctr-etcd", "ctr-etcd-setup", "upload-ctr-1", "ctr-reshard-2",
            "ctr-layout"} <= names
    init = {c["name"] for _, spec in pods for c in spec.get("initContainers", [])}
    assert init == {"unpack-code", "fetch-code"}
    problems = [p for where, spec in pods for p in restricted_problems(where, spec)]
    assert problems == []


def test_every_pod_and_container_says_non_root_and_no_escalation(tmp_path: Path) -> None:
    """Said outright in each container, not only inherited from the pod."""
    for where, spec in every_pod(tmp_path):
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["runAsUser"] != 0, where
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for container in containers(spec):
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True, (where, container["name"])
            assert context["allowPrivilegeEscalation"] is False, (where, container["name"])
            assert context["capabilities"] == {"drop": ["ALL"]}, (where, container["name"])


def test_submit_refuses_a_pod_the_restricted_profile_would_refuse() -> None:
    objects = render(Job.from_dict(SPEC), "kubernetes")
    assert semantic_problems(objects) == []
    broken = copy.deepcopy(objects)
    trainer = next(o for o in broken if o["metadata"]["name"] == "ctr-trainer")
    trainer["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "allowPrivilegeEscalation"] = True
    assert any("ctr-trainer container trainer: allowPrivilegeEscalation is not false" in p
               for p in semantic_problems(broken))


POD = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
       "containers": [{"name": "c", "securityContext": {
           "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
       "initContainers": [{"name": "i", "securityContext": {
           "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}


def _set(path: str, value: Any) -> Any:
    def mutate(spec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        if value is None:
            del node[last]
        else:
            node[last] = value
    return mutate


BREACHES = [
    (_set("hostNetwork", True), "hostNetwork"),
    (_set("volumes", [{"name": "h", "hostPath": {"path": "/"}}]), "hostPath"),
    (_set("containers.0.securityContext.privileged", True), "privileged"),
    (_set("containers.0.ports", [{"containerPort": 80, "hostPort": 80}]), "hostPort"),
    (_set("initContainers.0.securityContext.allowPrivilegeEscalation", None),
     "init container i: allowPrivilegeEscalation"),
    (_set("securityContext.runAsNonRoot", None), "runAsNonRoot"),
    (_set("containers.0.securityContext.runAsNonRoot", False), "runAsNonRoot"),
    (_set("securityContext.runAsUser", 0), "runAsUser is 0"),
    (_set("securityContext.seccompProfile", None), "seccompProfile is not set"),
    (_set("containers.0.securityContext.seccompProfile", {"type": "Unconfined"}),
     "seccompProfile is Unconfined"),
    (_set("initContainers.0.securityContext.capabilities", {"drop": ["NET_RAW"]}),
     "drop ALL"),
    (_set("containers.0.securityContext.capabilities.add", ["SYS_ADMIN"]), "SYS_ADMIN"),
    (_set("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]), "sysctl"),
    (_set("containers.0.securityContext.procMount", "Unmasked"), "procMount"),
    (_set("securityContext.seLinuxOptions", {"type": "spc_t"}), "seLinuxOptions"),
]


@pytest.mark.parametrize(("mutate", "expected"), BREACHES, ids=[e for _, e in BREACHES])
def test_each_rule_catches_its_breach(mutate: Any, expected: str) -> None:
    assert restricted_problems("pod", copy.deepcopy(POD)) == []
    spec = copy.deepcopy(POD)
    mutate(spec)
    problems = restricted_problems("pod", spec)
    assert any(expected in p for p in problems), problems


def test_every_pod_can_read_its_secret_files_as_its_own_user(tmp_path: Path) -> None:
    """The kubelet writes a Secret volume's files as root with the volume's mode (0400 or
    0440); only an fsGroup gives them a group, and its read bit, that the unprivileged user
    is in. Without it the roles could not read their key or token."""
    checked = 0
    for where, spec in every_pod(tmp_path):
        modes = [v["secret"].get("defaultMode", 0o644) for v in spec.get("volumes", [])
                 if "secret" in v]
        if not modes:
            continue
        checked += 1
        context = spec["securityContext"]
        assert context["fsGroup"] == context["runAsGroup"], where
        assert all(mode & 0o007 == 0 for mode in modes), where  # nobody else
    assert checked >= 10
