"""Plans that break one rule each: the CRD's schema and CEL rules must refuse them on the API server
(tests/e2e/test_crd_validation.py), and the planner's parser must refuse them too, at the same field
(tests/operator/test_crd.py). One list, so that neither side can drift from the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BASE_SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "20", "promptTokens": {"mean": 500, "p95": 1500}, "outputTokens": {"mean": 250}},
    "slo": {"ttft": {"maxMs": 500}, "tpot": {"maxMs": 50, "percentile": "p99"}},
}


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
    ("too-many-gpu-types", _set("constraints.gpuTypes", [f"gpu-{i}" for i in range(65)]),
     ["spec.constraints.gpuTypes", "64 items"]),
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
    ("min-replicas-over-max", _set("constraints", {"minReplicas": 4, "maxReplicas": 2}),
     ["spec.constraints.minReplicas", "minReplicas must be <= maxReplicas"]),
    ("current-without-shape", _set("observe", {"prometheus": "main", "selector": {"namespace": "serving"},
                                               "current": {"gpuType": "H100"}}),
     ["spec.observe.current", "give deployment, or gpuType and replicas"]),
    ("percentile-below-mean", _set("workload.outputTokens", {"mean": 250, "percentiles": {"p50": 100, "p95": 200}}),
     ["spec.workload.outputTokens.percentiles.p95", "percentiles.p95 must be >= mean"]),
    ("no-lengths-no-dataset", _drop("workload.promptTokens"),
     ["spec.workload.promptTokens", "required unless workload.dataset names a dataset preset"]),
    ("observed-without-observe", _set("workload.source", "observed"),
     ["spec.workload.source", "observed needs spec.observe"]),
]
