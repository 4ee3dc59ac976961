"""The generated CRD on a real API server: the example plans are accepted, bad plans are rejected with HTTP
422 and a message naming the field (OpenAPI validation and the CEL rules), a real planner status fits the
status schema, and the printer columns read it."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from inferplan.deploy.manifests import deployment
from inferplan.operator.reconcile import change_status, manifests_ref
from inferplan.operator.status import Condition, PlanStatus, Recommendation
from inferplan.planner.search import plan
from inferplan.planner.spec import load_plan_file, resolve_plan
from inferplan.resource import GROUP, KIND, PLURAL, VERSION

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples" / "plans").glob("*.yaml"))

BASE_SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "20", "promptTokens": {"mean": 500, "p95": 1500}, "outputTokens": {"mean": 250}},
    "slo": {"ttft": {"maxMs": 500}, "tpot": {"maxMs": 50, "percentile": "p99"}},
}


def _manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": spec}


def _create(k8s: dict[str, Any], namespace: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    api = kubernetes.client.CustomObjectsApi(k8s["admin"])
    return api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, **kwargs)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to the base spec: set the dotted `path` to `value`."""
    *parents, last = path.split(".")

    def change(spec: dict[str, Any]) -> None:
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    *parents, last = path.split(".")

    def change(spec: dict[str, Any]) -> None:
        node = spec
        for key in parents:
            node = node[key]
        del node[last]

    return change


# (id, change to BASE_SPEC, fragments the 422 message must contain: the field path and what is wrong)
BAD_PLANS = [
    ("rate-float", _set("workload.requestsPerSecond", 12.5),
     ["spec.workload.requestsPerSecond", "must be of type string"]),
    ("rate-negative", _set("workload.requestsPerSecond", "-1"), ["spec.workload.requestsPerSecond", "should match"]),
    ("rate-zero", _set("workload.requestsPerSecond", "0"), ["spec.workload.requestsPerSecond", "must be > 0"]),
    ("p95-below-mean", _set("workload.promptTokens.p95", 100), ["spec.workload.promptTokens.p95",
                                                                "p95 must be >= mean"]),
    ("no-slo", _set("slo", {}), ["spec.slo", "give at least one of ttft, tpot (or itl), e2e"]),
    ("two-model-sources", _set("model.configFile", "config.json"),
     ["spec.model", "give exactly one of name, architecture, configFile, configMapRef"]),
    ("no-model-source", _set("model", {"precisions": ["bf16"]}), ["spec.model", "give exactly one of"]),
    ("tpot-and-itl", _set("slo.itl", {"maxMs": 40}), ["spec.slo.itl", "itl and tpot are the same target"]),
    ("preset-and-arrivalcv2", _set("workload.burstiness", {"preset": "bursty", "arrivalCV2": "2"}),
     ["spec.workload.burstiness.arrivalCV2", "give either preset or arrivalCV2, not both"]),
    ("two-spreads", _set("workload.outputTokens", {"mean": 250, "p95": 700, "cv": "1.2"}),
     ["spec.workload.outputTokens", "give at most one of p95, cv, percentiles"]),
    ("percentiles-decreasing", _set("workload.outputTokens.percentiles", {"p50": 300, "p90": 200}),
     ["spec.workload.outputTokens.percentiles.p90", "p90 must be >= p50"]),
    ("one-percentile", _set("workload.outputTokens.percentiles", {"p99": 900}),
     ["spec.workload.outputTokens.percentiles", "give at least two of p50, p90, p95, p99"]),
    ("string-too-long", _set("model.name", "m" * 257), ["spec.model.name", "256"]),
    ("too-many-gpu-types", _set("constraints.gpuTypes", [f"gpu-{i}" for i in range(33)]),
     ["spec.constraints.gpuTypes", "32 items"]),
    ("percentile-enum", _set("slo.ttft.percentile", "p97"), ["spec.slo.ttft.percentile", "Unsupported value"]),
    ("engine-enum", _set("engine.name", "triton"), ["spec.engine.name", "Unsupported value"]),
    ("kv-dtype-enum", _set("model.kvCacheDtypes", ["int3"]), ["spec.model.kvCacheDtypes[0]", "Unsupported value"]),
    ("alternatives-over-20", _set("alternatives", 21), ["spec.alternatives", "less than or equal to 20"]),
    ("max-utilization-pattern", _set("constraints.maxUtilization", "80%"),
     ["spec.constraints.maxUtilization", "should match"]),
    ("max-utilization-above-1", _set("constraints.maxUtilization", "1.5"),
     ["spec.constraints.maxUtilization", "must be > 0 and <= 1"]),
    ("negative-max-ms", _set("slo.ttft.maxMs", -5), ["spec.slo.ttft.maxMs", "greater than or equal to 1"]),
    ("tp-out-of-range", _set("constraints.tensorParallelSizes", [128]),
     ["spec.constraints.tensorParallelSizes[0]", "less than or equal to 64"]),
    ("tp-not-power-of-two", _set("constraints.tensorParallelSizes", [3]),
     ["spec.constraints.tensorParallelSizes[0]", "Unsupported value"]),
    ("tp-repeated", _set("constraints.tensorParallelSizes", [2, 2]),
     ["spec.constraints.tensorParallelSizes[1]", "Duplicate value"]),
    ("integer-as-string", _set("engine.maxModelLen", "4096"), ["spec.engine.maxModelLen", "must be of type integer"]),
    ("too-many-prices", _set("constraints.prices", {f"gpu-{i}": "1" for i in range(65)}),
     ["spec.constraints.prices", "64"]),
    ("gpu-name-key-too-long", _set("constraints.gpusPerNode", {"g" * 65: 4}),
     ["spec.constraints.gpusPerNode", "keys must be 1-64 characters"]),
    ("architecture-too-many-keys", _set("model", {"architecture": {f"k{i}": i for i in range(65)}}),
     ["spec.model.architecture", "64"]),
    ("configmap-name-pattern", _set("model", {"configMapRef": {"name": "Not_A_Name"}}),
     ["spec.model.configMapRef.name", "should match"]),
    ("engine-missing", _drop("engine"), ["spec.engine", "Required value"]),
]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_plan_is_accepted(k8s: dict[str, Any], namespace: str, path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    body = data if "spec" in data else _manifest(path.stem, data)
    body["metadata"] = {"name": path.stem}  # into the session's namespace
    created = _create(k8s, namespace, body, field_validation="Strict")
    assert created["spec"]["model"] == data.get("spec", data)["model"]


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
    recommendation = result.recommendation
    assert cells["GPU"] == recommendation.gpu_type
    assert cells["GPUs"] == recommendation.gpus and cells["Replicas"] == recommendation.replicas
    assert cells["Batch"] == recommendation.max_batch
    assert cells["TTFT-ms"] == recommendation.predicted.ttft_ms.p95
    assert cells["USD/h"] == recommendation.cost.dollars_per_hour
    assert cells["Ready"] == "True"
