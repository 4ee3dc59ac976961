"""The objects `inferplan render` makes, sent to a real API server with a server-side dry run (`dryRun=All`):
accepted as they are, returned as sent, and nothing stored.

The test server stores built-in kinds without their schemas (../shared/k8s-testenv, Limits), so the schema
check is tests/deploy/test_manifests.py's kubernetes-validate --strict; what this adds is the API machinery: names,
namespaces, labels, the request path of each kind and the dry run itself. No registry package ships the
CustomResourceDefinitions of LeaderWorkerSet, InferenceService or ScaledObject (see docs/deploy.md), and
autoscaling/v2 is not served here, so those are not sent. policy/v1 is: the PodDisruptionBudgets are sent."""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes
import pytest

from inferplan.deploy.autoscaling import autoscaling
from inferplan.deploy.manifests import render
from inferplan.resource import GROUP, KIND, PLURAL, VERSION
from tests.support.plans import EXAMPLES, disaggregated, example_spec, planned

TRTLLM = next(p for p in EXAMPLES if p.stem == "trtllm-70b-fp8")  # ConfigMap + Deployment + Service
SGLANG = next(p for p in EXAMPLES if p.stem == "moe-qwen3-30b-a3b")


def _apis(admin: kubernetes.client.ApiClient) -> tuple[Any, Any, Any, Any]:
    return (kubernetes.client.CoreV1Api(admin), kubernetes.client.AppsV1Api(admin),
            kubernetes.client.RbacAuthorizationV1Api(admin), kubernetes.client.PolicyV1Api(admin))


def _create(admin: kubernetes.client.ApiClient, namespace: str, obj: dict[str, Any]) -> Any:
    core, apps, rbac, policy = _apis(admin)
    create = {"ConfigMap": core.create_namespaced_config_map, "Service": core.create_namespaced_service,
              "ServiceAccount": core.create_namespaced_service_account, "Role": rbac.create_namespaced_role,
              "RoleBinding": rbac.create_namespaced_role_binding,
              "Deployment": apps.create_namespaced_deployment,
              "PodDisruptionBudget": policy.create_namespaced_pod_disruption_budget}[obj["kind"]]
    return create(namespace, obj, dry_run="All", _preload_content=False)


def _listed(admin: kubernetes.client.ApiClient, namespace: str, kind: str) -> list[Any]:
    core, apps, rbac, policy = _apis(admin)
    lister = {"ConfigMap": core.list_namespaced_config_map, "Service": core.list_namespaced_service,
              "ServiceAccount": core.list_namespaced_service_account, "Role": rbac.list_namespaced_role,
              "RoleBinding": rbac.list_namespaced_role_binding,
              "Deployment": apps.list_namespaced_deployment,
              "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget}[kind]
    return lister(namespace, label_selector="app.kubernetes.io/managed-by=inferplan").items


def _answer(case: str) -> tuple[Any, Any]:
    return disaggregated("sglang") if case == "disaggregated-sglang" else planned(
        next(p for p in EXAMPLES if p.stem == case))


@pytest.mark.parametrize("case", [TRTLLM.stem, SGLANG.stem, "disaggregated-sglang"])
def test_rendered_objects_pass_a_server_side_dry_run(k8s: dict[str, Any], namespace: str, case: str) -> None:
    """The examples' objects, and a disaggregated SGLang answer's (two pools, the router, its RBAC), with the
    PodDisruptionBudget of each workload."""
    request, candidate = _answer(case)
    objects = render(request, candidate, name=case, namespace=namespace)
    assert {o["kind"] for o in objects} <= {"ConfigMap", "Deployment", "Service", "ServiceAccount", "Role",
                                            "RoleBinding", "PodDisruptionBudget"}
    assert "PodDisruptionBudget" in {o["kind"] for o in objects}
    for obj in objects:
        response = _create(k8s["admin"], namespace, obj)
        assert response.status == 201, response.data
        returned = json.loads(response.data)
        assert returned["metadata"]["name"] == obj["metadata"]["name"]
        assert returned["metadata"]["namespace"] == namespace
        assert returned["metadata"]["labels"] == obj["metadata"]["labels"]
        body = next((key for key in ("spec", "data", "rules", "subjects") if key in obj), None)
        if body:
            assert returned[body] == obj[body]
    for kind in {o["kind"] for o in objects}:
        assert _listed(k8s["admin"], namespace, kind) == []  # a dry run stores nothing


def test_a_dry_run_into_a_missing_namespace_is_refused(k8s: dict[str, Any]) -> None:
    request, candidate = planned(SGLANG)
    objects = render(request, candidate, name="qwen", namespace="nowhere")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    with pytest.raises(kubernetes.client.ApiException) as raised:
        _create(k8s["admin"], "nowhere", deployment)
    assert raised.value.status == 404


@pytest.mark.parametrize(("image", "accepted"), [("registry.example.com:5000/mirror/vllm-openai:v0.11.2", True),
                                                 ("vllm/vllm-openai:v0.11.2 --trust-remote-code", False)])
def test_the_crd_checks_spec_engine_image(k8s: dict[str, Any], namespace: str, image: str, accepted: bool) -> None:
    """The CRD's pattern for engine.image (Go's regexp on the server, pydantic's in the CLI) takes the same images."""

    spec = example_spec(EXAMPLES[0])
    spec["engine"]["image"] = image
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "engine-image-check"}, "spec": spec}
    api = kubernetes.client.CustomObjectsApi(k8s["admin"])
    if accepted:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, dry_run="All")
        return
    with pytest.raises(kubernetes.client.ApiException) as raised:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, dry_run="All")
    assert raised.value.status == 422 and "spec.engine.image" in raised.value.body


@pytest.mark.parametrize("target", ["deployment", "kserve"])
@pytest.mark.parametrize("name", ["chat", "chat-assistant-llama-3-1-8b-instruct-eu1", "chat-" * 9 + "llama-3-1-8b"])
def test_the_keda_query_matches_the_pods_the_api_server_names(k8s: dict[str, Any], namespace: str, name: str,
                                                              target: str) -> None:
    """A Deployment's pods are named from their ReplicaSet's generateName `DEPLOYMENT-HASH-`, which the API server
    cuts at 58 characters before the random ones: for a long plan name (from 47 characters, from 37 for KServe's
    NAME-predictor) the ScaledObject's query must match the cut names, else KEDA counts no requests and never
    scales up."""
    request, candidate = planned(EXAMPLES[0])
    (scaled,) = autoscaling(request, candidate, name=name, namespace=namespace, kind="keda", target=target)
    pods = re.search(r'pod=~"([^"]+)"', scaled["spec"]["triggers"][0]["metadata"]["query"]).group(1)
    deployment = scaled["spec"]["scaleTargetRef"]["name"]
    core = kubernetes.client.CoreV1Api(k8s["admin"])
    for pod_template_hash in ("5d4f8c7b9", "7f6b9d8c4x", "b6"):
        pod = {"metadata": {"generateName": f"{deployment}-{pod_template_hash}-"},
               "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.2"}]}}
        created = core.create_namespaced_pod(namespace, pod, dry_run="All").metadata.name
        assert re.fullmatch(pods, created), (created, pods)
        assert not re.fullmatch(pods, f"{name}x-{pod_template_hash}-abcde")  # another Deployment's pods
