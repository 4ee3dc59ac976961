"""The plan spec: parsing, error paths, bounds, and resolution to plain numbers."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from inferplan.planner.request import (
    MAX_P95_RATIO,
    SloTarget,
    cv_from_sigma,
    resolve_plan,
    sigma_from_p95_ratio,
    sigma_from_percentiles,
)
from inferplan.planner.spec import PlanSpec
from inferplan.planner.spec_parsing import PlanError, load_plan_file, parse_plan
from inferplan.resource import API_VERSION, KIND

MINIMAL: dict[str, Any] = {
    "model": {"name": "llama-3.1-8b"},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "12.5", "promptTokens": {"mean": 512}, "outputTokens": {"mean": 256}},
    "slo": {"ttft": {"maxMs": 500}},
}

FULL: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16", "FP8", "int4-awq"],
              "kvCacheDtypes": ["auto", "fp8"]},
    "engine": {"name": "sglang", "gpuMemoryUtilization": "0.85", "maxModelLen": 8192, "chunkedPrefill": True,
               "prefixCaching": True, "maxNumBatchedTokens": 4096},
    "workload": {
        "requestsPerSecond": "20",
        "promptTokens": {"mean": 1200, "percentiles": {"p50": 800, "p90": 2500, "p99": 6000}},
        "outputTokens": {"mean": 300, "p95": 900},
        "burstiness": {"arrivalCV2": "2.5", "serviceCV2": "1.2"},
        "prefixCacheHitRate": "0.3",
    },
    "slo": {"ttft": {"maxMs": 800, "percentile": "p99"}, "itl": {"maxMs": 60}, "e2e": {"maxMs": 30000,
                                                                                      "percentile": "p90"}},
    "constraints": {
        "gpuTypes": ["H100", "NVIDIA-A100-SXM4-80GB", "L40S"],
        "tensorParallelSizes": [2, 4, 8],
        "maxGpus": 64,
        "maxGpusPerType": {"H100-SXM5-80GB": 32},
        "maxReplicas": 16,
        "budgetDollarsPerHour": "150.50",
        "maxUtilization": "0.75",
        "prices": {"H100": "2.49", "A100-SXM4-80GB": "1.60"},
        "availableGpus": {"NVIDIA-H100-80GB-HBM3": 24, "L40S": 0},
        "gpusPerNode": {"L40S": 4},
    },
    "alternatives": 7,
}


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `base` with the dotted `path` set to `value` (or removed when value is ...)."""
    data = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return data


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(PlanError) as info:
        parse_plan(data)
    return dict(info.value.problems)


# -- parsing -------------------------------------------------------------------------------------------------


def test_minimal_spec_takes_the_defaults() -> None:
    spec = parse_plan(MINIMAL)
    assert spec.workload.burstiness.preset is None and spec.workload.burstiness.arrival_cv2 is None
    assert spec.workload.prefix_cache_hit_rate == "0"
    assert spec.model.kv_cache_dtypes == ["auto"]
    assert spec.constraints.tensor_parallel_sizes == [1, 2, 4, 8]
    assert spec.constraints.max_utilization == "0.8"
    assert spec.slo.ttft is not None and spec.slo.ttft.percentile == "p95"
    assert spec.alternatives == 5


def test_full_spec_parses_and_itl_is_tpot() -> None:
    spec = parse_plan(FULL)
    assert spec.slo.tpot is not None and spec.slo.tpot.max_ms == 60
    assert spec.engine.gpu_memory_utilization == "0.85"
    assert spec.constraints.available_gpus == {"NVIDIA-H100-80GB-HBM3": 24, "L40S": 0}


def test_manifest_and_bare_spec_are_the_same() -> None:
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "chat", "namespace": "ml"},
                "spec": FULL}
    assert parse_plan(manifest) == parse_plan(FULL)


@pytest.mark.parametrize("exclude_none", [False, True])
def test_camel_case_dump_round_trips(exclude_none: bool) -> None:
    spec = parse_plan(FULL)
    dumped = spec.model_dump(by_alias=True, exclude_none=exclude_none)
    assert "requestsPerSecond" in dumped["workload"]
    assert "arrivalCV2" in dumped["workload"]["burstiness"]
    assert "e2e" in dumped["slo"] and "tpot" in dumped["slo"]
    assert parse_plan(json.loads(json.dumps(dumped))) == spec


def test_schema_bounds_every_string_list_and_map_and_describes_every_field() -> None:
    schema = PlanSpec.model_json_schema(by_alias=True)
    unbounded: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            if kind == "string" and "enum" not in node and "const" not in node and "maxLength" not in node:
                unbounded.append(where)
            if kind == "array" and "maxItems" not in node:
                unbounded.append(where)
            if kind == "object" and "additionalProperties" in node and node["additionalProperties"] is not False:
                if "maxProperties" not in node:
                    unbounded.append(where)
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(schema, "")
    assert not unbounded
    for model in (schema, *schema["$defs"].values()):
        for name, prop in model.get("properties", {}).items():
            target = schema["$defs"].get(prop.get("$ref", "").rpartition("/")[2], {})
            assert prop.get("description") or target.get("description"), name  # pydantic drops repeats
    decimal = schema["$defs"]["Workload"]["properties"]["requestsPerSecond"]
    assert decimal["pattern"] == r"^[0-9]+(\.[0-9]+)?$"


# -- problems and their paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "where", "words"),
    [
        ("workload.promptTokens", {"mean": 512, "p95": 400}, "workload.promptTokens.p95", "must be >= mean (512)"),
        ("workload.promptTokens", {"mean": 512, "percentiles": {"p50": 400, "p90": 300}},
         "workload.promptTokens.percentiles.p90", ">= p50 (400)"),
        ("workload.promptTokens", {"mean": 512, "percentiles": {"p90": 700}},
         "workload.promptTokens.percentiles", "at least two"),
        ("workload.promptTokens", {"mean": 512, "p95": 900, "cv": "1"}, "workload.promptTokens", "at most one"),
        ("slo", {}, "slo", "at least one"),
        ("slo", {"itl": {"maxMs": 50}, "tpot": {"maxMs": 50}}, "slo.itl", "same target"),
        ("model", {"name": "llama-3.1-8b", "configFile": "c.json"}, "model", "exactly one"),
        ("model", {}, "model", "exactly one"),
        ("workload.prefixCacheHitRate", "1", "workload.prefixCacheHitRate", "< 1"),
        ("workload.prefixCacheHitRate", "1.5", "workload.prefixCacheHitRate", "< 1"),
        ("workload.requestsPerSecond", "0", "workload.requestsPerSecond", "> 0"),
        ("workload.requestsPerSecond", "-1", "workload.requestsPerSecond", "decimal number in a string"),
        ("workload.requestsPerSecond", "1e3", "workload.requestsPerSecond", "decimal number in a string"),
        ("engine.gpuMemoryUtilization", "0", "engine.gpuMemoryUtilization", "> 0"),
        ("engine.gpuMemoryUtilization", "1.01", "engine.gpuMemoryUtilization", "<= 1"),
        ("engine.name", "trtllm", "engine.name", "'tensorrt-llm'"),
        ("engine.maxModelLen", 0, "engine.maxModelLen", ">= 1"),
        ("constraints.maxUtilization", "0", "constraints.maxUtilization", "> 0"),
        ("constraints.tensorParallelSizes", [1, 3], "constraints.tensorParallelSizes[1]", "power of two"),
        ("constraints.tensorParallelSizes", [128], "constraints.tensorParallelSizes[0]", "<= 64"),
        ("constraints.tensorParallelSizes", [2, 2], "constraints.tensorParallelSizes", "twice"),
        ("constraints.tensorParallelSizes", [], "constraints.tensorParallelSizes", "at least 1"),
        ("constraints.gpuTypes", ["H100", "NVIDIA-H100-80GB-HBM3"], "constraints.gpuTypes", "both name GPU"),
        ("constraints.gpuTypes", ["A100-SXM4-40GB-MIG-1g.5gb"], "constraints.gpuTypes[0]", "MIG slice"),
        ("constraints.prices", {"H100": "0"}, "constraints.prices.H100", "> 0"),
        ("constraints.gpusPerNode", {"H100": 0}, "constraints.gpusPerNode.H100", ">= 1"),
        ("constraints.availableGpus", {"H100": -1}, "constraints.availableGpus.H100", ">= 0"),
        ("constraints.maxGpus", 0, "constraints.maxGpus", ">= 1"),
        ("alternatives", 21, "alternatives", "<= 20"),
        ("alternatives", 0, "alternatives", ">= 1"),
        ("slo.ttft", {"maxMs": 0}, "slo.ttft.maxMs", ">= 1"),
        ("slo.ttft", {"maxMs": 100, "percentile": "p999"}, "slo.ttft.percentile", "'p99'"),
        ("slo.ttft", {"maxMs": "100"}, "slo.ttft.maxMs", "valid integer"),
        ("workload.burstiness", {"preset": "stormy"}, "workload.burstiness.preset", "'agent'"),
        ("workload.burstiness", {"preset": "bursty", "arrivalCV2": "2"}, "workload.burstiness.arrivalCV2",
         "not both"),
        ("workload.burstiness", "bursty", "workload.burstiness", "must be a mapping"),
        ("model.precisions", ["int4-aqw"], "model.precisions[0]", "int4-awq"),
        ("model.precisions", ["fp8", "FP8"], "model.precisions", "twice"),
        ("model.kvCacheDtypes", ["int4"], "model.kvCacheDtypes[0]", "'auto'"),
        ("model.architecture", {"numLayers": 2}, "model.architecture", "missing required field"),
        ("model.configMapRef", {"name": "Bad_Name"}, "model.configMapRef.name", "should match pattern"),
        ("engine.chunkedPrefill", "yes", "engine.chunkedPrefill", "valid boolean"),
        ("workload.promptTokens", 512, "workload.promptTokens", "mapping"),
    ],
)
def test_each_rule_and_bound_names_the_camel_case_path(path: str, value: Any, where: str, words: str) -> None:
    data = with_(MINIMAL, path, value)
    if path.startswith("model.") and path != "model.precisions" and path != "model.kvCacheDtypes":
        data["model"].pop("name")
    problems = problems_of(data)
    assert where in problems, problems
    assert words in problems[where]


def test_missing_required_fields_are_reported() -> None:
    problems = problems_of(with_(MINIMAL, "workload.requestsPerSecond", ...))
    assert problems == {"workload.requestsPerSecond": "required"}


def test_several_problems_are_all_reported_one_per_line() -> None:
    data = with_(MINIMAL, "workload.promptTokens", {"mean": 512, "p95": 100})
    data = with_(data, "engine.name", "nope")
    data = with_(data, "alternatives", 99)
    data = with_(data, "constraints.gpuTypes", ["H1000"])
    with pytest.raises(PlanError) as info:
        parse_plan(data)
    lines = str(info.value).splitlines()
    assert len(lines) == len(info.value.problems) == 4
    assert {line.split(":")[0] for line in lines} == {
        "engine.name", "workload.promptTokens.p95", "alternatives", "constraints.gpuTypes[0]"}


def test_unknown_keys_are_rejected_with_a_suggestion() -> None:
    problems = problems_of(with_(MINIMAL, "workload.reqestsPerSecond", "3"))
    assert "did you mean requestsPerSecond" in problems["workload.reqestsPerSecond"]
    problems = problems_of(with_(MINIMAL, "colour", "blue"))
    assert problems["colour"].startswith("unknown field")


def test_a_field_in_the_wrong_place_is_told_where_it_belongs() -> None:
    # The suggestion comes from the fields of the mapping the key is in, and a field of another part of the spec
    # is named with its path (it used to suggest the very name given, from every part of the spec at once).
    misplaced = problems_of(with_(MINIMAL, "constraints.kvCacheDtypes", ["fp8"]))
    assert misplaced["constraints.kvCacheDtypes"] == "unknown field; kvCacheDtypes is model.kvCacheDtypes"
    typo = problems_of(with_(MINIMAL, "constraints.gpuType", ["H100"]))
    assert typo["constraints.gpuType"].startswith("unknown field; did you mean gpuTypes?")
    assert "observe.current.gpuType" in typo["constraints.gpuType"]
    assert problems_of(with_(MINIMAL, "engine.verison", "0.11.2"))["engine.verison"] == \
        "unknown field; did you mean version?"


@pytest.mark.parametrize(("path", "value", "camel"), [
    ("workload.requests_per_second", "12.5", "requestsPerSecond"),
    ("slo.ttft.max_ms", 500, "maxMs"),
    ("model.config_file", "config.json", "configFile"),
    ("constraints.max_gpus", 8, "maxGpus"),
])
def test_a_snake_case_key_is_an_unknown_field_as_for_the_api_server(path: str, value: Any, camel: str) -> None:
    # The CRD's schema has camelCase keys only: a plan the command line planned with `max_ms` was one kubectl apply
    # refused (or, the unknown key pruned, one the operator planned without that limit).
    parent = path.rpartition(".")[0]
    problems = problems_of(with_(MINIMAL, path, value))
    assert problems[path] == f"unknown field; keys are camelCase: write {camel}"
    assert f"{parent}.{camel}" not in problems or problems[f"{parent}.{camel}"] == "required"


def test_a_yaml_float_is_told_to_quote_it() -> None:
    data = yaml.safe_load(yaml.safe_dump(MINIMAL).replace("'12.5'", "12.5"))
    assert data["workload"]["requestsPerSecond"] == 12.5
    problems = problems_of(data)
    assert 'write "12.5"' in problems["workload.requestsPerSecond"]
    problems = problems_of(with_(MINIMAL, "constraints.prices", {"H100": 2}))
    assert 'write "2"' in problems["constraints.prices.H100"]


def test_an_unquoted_version_is_told_to_quote_it() -> None:
    # `version: 0.10` reaches the parser as the float 0.1: "Input should be a valid string, got 0.1" named a
    # value the user never wrote.
    data = yaml.safe_load(yaml.safe_dump(with_(MINIMAL, "engine.version", "0.10")).replace("'0.10'", "0.10"))
    message = problems_of(data)["engine.version"]
    assert message.startswith("must be a string: put it in quotes") and "the number 0.1," in message
    empty = yaml.safe_load("constraints:\n  maxGpusPerType: {~: 4}\n")["constraints"]
    assert problems_of(with_(MINIMAL, "constraints", empty))["constraints.maxGpusPerType.None"] == \
        "must be a string, got nothing (an empty value or null)"


def test_an_unknown_gpu_names_close_ones() -> None:
    problems = problems_of(with_(MINIMAL, "constraints.gpuTypes", ["H100", "H1000"]))
    assert list(problems) == ["constraints.gpuTypes[1]"]
    assert "'H1000'" in problems["constraints.gpuTypes[1]"]
    assert "H100-SXM5-80GB" in problems["constraints.gpuTypes[1]"]


def test_unknown_model_names_close_ones() -> None:
    problems = problems_of(with_(MINIMAL, "model.name", "llama-3.1-8c"))
    assert "llama-3.1-8b" in problems["model.name"]


def test_manifest_with_wrong_api_version_or_kind_is_an_error() -> None:
    manifest = {"apiVersion": "inferplan.io/v1", "kind": "CapacityPlan", "spec": MINIMAL, "extra": 1}
    with pytest.raises(PlanError) as info:
        parse_plan(manifest)
    problems = dict(info.value.problems)
    assert set(problems) == {"apiVersion", "kind", "extra"}
    assert API_VERSION in problems["apiVersion"]
    problems = problems_of({"apiVersion": API_VERSION, "kind": KIND})
    assert problems == {"spec": "required"}


# -- resolution ----------------------------------------------------------------------------------------------


def test_resolving_the_minimal_spec() -> None:
    request = resolve_plan(parse_plan(MINIMAL))
    assert request.arch.repo_id == "meta-llama/Llama-3.1-8B"
    assert request.engine == "vllm"
    assert request.precisions == ("bf16", "fp8", "int4-awq", "int8-w8a8")
    assert request.kv_dtypes == ("auto",)
    assert request.rate_rps == 12.5
    assert (request.prompt_mean, request.prompt_cv, request.output_mean, request.output_cv) == (512, 1, 256, 1)
    assert len(request.notes) == 2  # both CVs assumed
    assert request.arrival_cv2 == 1.0 and request.service_cv2 is None
    assert request.slos == (SloTarget("ttft", 0.95, 0.5),)
    assert request.gpu_types is None and request.available_gpus is None
    assert request.memory_fraction is None and request.max_model_len is None
    assert request.max_utilization == 0.8 and request.prefix_hit_rate == 0.0
    assert request.gpus_per_node["H100-SXM5-80GB"] == 8


def test_resolving_the_full_spec_uses_canonical_gpu_keys() -> None:
    request = resolve_plan(parse_plan(FULL))
    assert request.engine == "sglang"
    assert request.precisions == ("bf16", "fp8", "int4-awq")
    assert request.kv_dtypes == ("auto", "fp8")
    assert request.memory_fraction == 0.85
    assert (request.max_model_len, request.chunked_prefill, request.prefix_caching) == (8192, True, True)
    assert request.max_num_batched_tokens == 4096
    assert request.gpu_types == ("H100-SXM5-80GB", "A100-SXM4-80GB", "L40S")
    assert request.prices == {"H100-SXM5-80GB": 2.49, "A100-SXM4-80GB": 1.60}
    assert request.available_gpus == {"H100-SXM5-80GB": 24, "L40S": 0}
    assert request.max_gpus_per_type == {"H100-SXM5-80GB": 32}
    assert request.gpus_per_node["L40S"] == 4 and request.gpus_per_node["H100-SXM5-80GB"] == 8
    assert request.tp_sizes == (2, 4, 8)
    assert (request.max_gpus, request.max_replicas, request.alternatives) == (64, 16, 7)
    assert request.budget_usd_per_hour == 150.5 and request.max_utilization == 0.75
    assert (request.arrival_cv2, request.service_cv2, request.prefix_hit_rate) == (2.5, 1.2, 0.3)
    assert request.slos == (SloTarget("ttft", 0.99, 0.8), SloTarget("tpot", 0.95, 0.06),
                            SloTarget("e2e", 0.9, 30.0))
    assert request.notes == ()


@pytest.mark.parametrize(("engine", "precisions"), [
    ("vllm", ("bf16", "fp8", "int4-awq", "int8-w8a8")),
    ("sglang", ("bf16", "fp8", "int4-awq", "int8-w8a8")),
    ("tgi", ("bf16", "fp8", "int4-awq", "int4-gptq")),
    ("tensorrt-llm", ("bf16", "fp8", "int8-w8a8", "int4-awq")),
])
def test_default_precisions_per_engine(engine: str, precisions: tuple[str, ...]) -> None:
    assert resolve_plan(parse_plan(with_(MINIMAL, "engine.name", engine))).precisions == precisions


def test_a_model_published_in_another_format_is_planned_in_it_by_default() -> None:
    # gpt-oss ships only as MXFP4: a plan that names no precision tries it after the engine's four, and finds a
    # deployment (before, every default precision lacked a checkpoint and the plan had none).
    from inferplan.planner.search.plan import plan

    oss = with_(with_(MINIMAL, "model.name", "openai/gpt-oss-20b"), "constraints", {"gpuTypes": ["H100-SXM5-80GB"]})
    req = resolve_plan(parse_plan(oss))
    assert req.precisions == ("bf16", "fp8", "int4-awq", "int8-w8a8", "mxfp4")
    assert plan(req).recommendation.precision == "mxfp4"
    # TGI does not serve MXFP4: its defaults stay.
    assert resolve_plan(parse_plan(with_(oss, "engine.name", "tgi"))).precisions == ("bf16", "fp8", "int4-awq",
                                                                                       "int4-gptq")


@pytest.mark.parametrize(("preset", "cv2"), [("steady", 0.25), ("chatbot", 1.0), ("bursty", 4.0), ("agent", 8.0)])
def test_burstiness_presets(preset: str, cv2: float) -> None:
    request = resolve_plan(parse_plan(with_(MINIMAL, "workload.burstiness", {"preset": preset})))
    assert (request.arrival_cv2, request.service_cv2) == (cv2, None)


def test_burstiness_defaults_to_chatbot_and_service_cv2_may_join_a_preset() -> None:
    assert resolve_plan(parse_plan(MINIMAL)).arrival_cv2 == 1.0
    both = resolve_plan(parse_plan(with_(MINIMAL, "workload.burstiness", {"preset": "agent", "serviceCV2": "6"})))
    assert (both.arrival_cv2, both.service_cv2) == (8.0, 6.0)


def test_p95_to_cv_by_hand() -> None:
    # p95/mean = 3 = exp(z s - s^2/2): s = z - sqrt(z^2 - 2 ln 3), z = 1.6449 -> s = 0.93189, CV 1.1761
    sigma, capped = sigma_from_p95_ratio(3.0)
    assert sigma == pytest.approx(0.93189, abs=1e-4) and not capped
    request = resolve_plan(parse_plan(with_(MINIMAL, "workload.promptTokens", {"mean": 500, "p95": 1500})))
    assert request.prompt_cv == pytest.approx(1.1761, abs=1e-3)
    # the lognormal with that mean and CV has p95 1500 within 1%
    s2 = math.log1p(request.prompt_cv**2)
    mu = math.log(500) - s2 / 2
    p95 = math.exp(mu + NormalDist().inv_cdf(0.95) * math.sqrt(s2))
    assert p95 == pytest.approx(1500, rel=0.01)


def test_p95_beyond_the_lognormal_maximum_is_capped_and_noted() -> None:
    sigma, capped = sigma_from_p95_ratio(5.0)
    assert capped and sigma == pytest.approx(NormalDist().inv_cdf(0.95))
    assert sigma_from_p95_ratio(1.0) == (0.0, False)
    request = resolve_plan(parse_plan(with_(MINIMAL, "workload.outputTokens", {"mean": 100, "p95": 500})))
    assert request.output_cv == pytest.approx(cv_from_sigma(sigma))
    assert any("workload.outputTokens.p95" in note and "capped" in note for note in request.notes)
    assert MAX_P95_RATIO == pytest.approx(3.868, abs=1e-3)


@given(st.floats(min_value=1.0, max_value=3.8))
def test_p95_ratio_round_trips(ratio: float) -> None:
    sigma, capped = sigma_from_p95_ratio(ratio)
    assert not capped
    z = NormalDist().inv_cdf(0.95)
    assert math.exp(z * sigma - sigma**2 / 2) == pytest.approx(ratio, rel=1e-9)


def test_percentiles_fit_recovers_a_lognormal() -> None:
    mu, sigma = math.log(600), 0.8
    quantiles = {q: math.exp(mu + NormalDist().inv_cdf(q) * sigma) for q in (0.5, 0.9, 0.99)}
    assert sigma_from_percentiles(quantiles) == pytest.approx(sigma)
    spread = {"p50": round(quantiles[0.5]), "p90": round(quantiles[0.9]), "p99": round(quantiles[0.99])}
    request = resolve_plan(parse_plan(with_(MINIMAL, "workload.promptTokens", {"mean": 827, "percentiles": spread})))
    assert request.prompt_mean == 827  # the stated mean is kept
    assert request.prompt_cv == pytest.approx(cv_from_sigma(0.8), rel=1e-3)
    flat = {"mean": 100, "percentiles": {"p50": 100, "p99": 100}}
    assert resolve_plan(parse_plan(with_(MINIMAL, "workload.promptTokens", flat))).prompt_cv == 0.0


def test_explicit_cv_is_kept() -> None:
    request = resolve_plan(parse_plan(with_(MINIMAL, "workload.outputTokens", {"mean": 200, "cv": "0.5"})))
    assert request.output_cv == 0.5


def test_config_map_ref_cannot_be_read_without_the_operator() -> None:
    spec = parse_plan(with_(MINIMAL, "model", {"configMapRef": {"name": "llama-config"}}))
    assert spec.model.config_map_ref is not None and spec.model.config_map_ref.key == "config.json"
    with pytest.raises(PlanError) as info:
        resolve_plan(spec)
    ((path, message),) = info.value.problems
    assert path == "model.configMapRef"
    assert "operator" in message and "configFile" in message


def test_config_file_is_read_relative_to_the_plan(tmp_path: Path) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 256,
              "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
              "max_position_embeddings": 2048}
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text(json.dumps(config))
    spec = parse_plan(with_(MINIMAL, "model", {"configFile": "models/config.json"}))
    assert resolve_plan(spec, base_dir=tmp_path).arch.num_kv_heads == 2
    with pytest.raises(PlanError) as info:
        resolve_plan(spec, base_dir=tmp_path / "elsewhere")
    assert info.value.problems[0][0] == "model.configFile"
    too_long = with_(MINIMAL, "model", {"configFile": "models/config.json"})
    too_long["engine"]["maxModelLen"] = 4096
    with pytest.raises(PlanError, match=r"engine.maxModelLen: must be <= the model's context length \(2048"):
        resolve_plan(parse_plan(too_long), base_dir=tmp_path)


def test_an_instruct_model_is_held_to_its_own_configs_context() -> None:
    from inferplan.planner.search.plan import plan

    spec = with_(MINIMAL, "model", {"name": "Qwen/Qwen2.5-72B-Instruct"})
    spec["workload"] = {"requestsPerSecond": "1", "promptTokens": {"mean": 12000, "p95": 30000},
                        "outputTokens": {"mean": 500}}
    spec["slo"] = {"ttft": {"maxMs": 20000}}
    spec["constraints"] = {"gpuTypes": ["H100"]}
    request = resolve_plan(parse_plan(spec))
    assert request.arch.max_position_embeddings == 32768  # the base config says 131072
    recommended = plan(request).recommendation
    assert recommended is not None
    args = recommended.engine_args
    assert int(args[args.index("--max-model-len") + 1]) <= 32768  # what vLLM accepts for this repository
    spec["engine"]["maxModelLen"] = 65536
    with pytest.raises(PlanError, match=r"engine.maxModelLen: must be <= the model's context length \(32768"):
        resolve_plan(parse_plan(spec))


def test_inline_architecture_resolves() -> None:
    arch = {"numLayers": 4, "hiddenSize": 512, "intermediateSize": 1024, "numAttentionHeads": 8, "numKvHeads": 2,
            "vocabSize": 32000, "maxPositionEmbeddings": 4096}
    request = resolve_plan(parse_plan(with_(MINIMAL, "model", {"architecture": arch})))
    assert request.arch.num_layers == 4 and request.arch.head_dim == 64


# -- files ---------------------------------------------------------------------------------------------------


def test_yaml_files_in_both_forms_and_json(tmp_path: Path) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(FULL))
    manifest = tmp_path / "plan.yml"
    manifest.write_text(yaml.safe_dump({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "chat"},
                                        "spec": FULL}))
    as_json = tmp_path / "plan.json"
    as_json.write_text(json.dumps(FULL))
    assert load_plan_file(bare) == load_plan_file(manifest) == load_plan_file(str(as_json)) == parse_plan(FULL)


def test_file_problems_are_plan_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="cannot read"):
        load_plan_file(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model:\n  name: [unclosed\n")
    with pytest.raises(PlanError, match="malformed YAML at line"):
        load_plan_file(broken)
    twice = tmp_path / "twice.yaml"
    twice.write_text("alternatives: 3\nalternatives: 4\n")
    with pytest.raises(PlanError, match="given twice"):
        load_plan_file(twice)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    with pytest.raises(PlanError, match="malformed JSON at line 1"):
        load_plan_file(bad_json)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    with pytest.raises(PlanError, match="mapping"):
        load_plan_file(scalar)


def test_a_key_given_twice_in_a_json_plan_is_an_error(tmp_path: Path) -> None:
    # JSON keeps the last of two equal keys; a plan would then silently be planned for the second model.
    twice = tmp_path / "twice.json"
    twice.write_text('{"model": {"name": "llama-3.1-8b"}, "model": {"name": "llama-3.1-70b"}}', encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan_file(twice)
    assert info.value.problems == [(str(twice), "key 'model' is given twice in one object")]


def test_a_json_plan_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    marked = tmp_path / "plan.json"
    marked.write_text("\ufeff" + json.dumps(MINIMAL), encoding="utf-8")
    assert load_plan_file(marked) == parse_plan(MINIMAL)


def test_a_yaml_stream_is_read_as_one_plan_and_empty_documents_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("---\n" + yaml.safe_dump(MINIMAL) + "---\n", encoding="utf-8")  # as kubectl and kustomize write
    assert load_plan_file(path) == parse_plan(MINIMAL)


def test_a_yaml_stream_of_several_documents_is_an_error_naming_them(tmp_path: Path) -> None:
    path = tmp_path / "plans.yaml"
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "chat"}, "spec": MINIMAL}
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap"}) + "---\n" + yaml.safe_dump(manifest),
                    encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan_file(path)
    (where, message), = info.value.problems
    assert where == str(path)
    assert message.startswith(f"holds 2 YAML documents (ConfigMap, {KIND}); ") and "malformed" not in message


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_plan_file_says_it_is_empty(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan_file(path)
    assert info.value.problems == [(str(path), "holds no plan: it is empty, or only comments")]


def test_file_validation_problems_are_collected(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "apiVersion: inferplan.io/v1alpha1\nkind: InferenceCapacityPlan\nmetadata: {name: x}\nspec:\n"
        "  model: {name: llama-3.1-8b}\n  engine: {name: vllm}\n"
        "  workload: {requestsPerSecond: 12.5, promptTokens: {mean: 512}, outputTokens: {mean: 0}}\n"
        "  slo: {}\n"
    )
    with pytest.raises(PlanError) as info:
        load_plan_file(path)
    assert [p for p, _ in info.value.problems] == ["workload.requestsPerSecond", "workload.outputTokens.mean", "slo"]


def test_a_dataset_preset_stands_in_for_the_lengths() -> None:
    data = copy.deepcopy(MINIMAL)
    del data["workload"]["promptTokens"], data["workload"]["outputTokens"]
    assert "workload.promptTokens" in problems_of(data)  # without a dataset the lengths are required
    data["workload"]["dataset"] = "sharegpt"
    req = resolve_plan(parse_plan(data))
    assert (req.prompt_mean, req.output_mean) == (220.0, 200.0)
    assert (req.prompt_cv, req.output_cv) == (1.1, 1.0)
    assert any("sharegpt preset" in note for note in req.notes)
    # A stated mean is kept and only the spread comes from the preset; a stated spread wins too.
    data["workload"]["promptTokens"] = {"mean": 900}
    data["workload"]["outputTokens"] = {"mean": 50, "cv": "0.3"}
    req = resolve_plan(parse_plan(data))
    assert (req.prompt_mean, req.prompt_cv, req.output_mean, req.output_cv) == (900.0, 1.1, 50.0, 0.3)
    assert "workload.dataset" in problems_of(with_(data, "workload.dataset", "alpaca"))


# -- multi-token prediction ----------------------------------------------------------------------------------

DEEPSEEK = with_(with_(MINIMAL, "model.name", "deepseek-ai/DeepSeek-R1"), "engine.name", "sglang")


def test_multi_token_prediction_resolves_its_drafts_and_the_tokens_a_step_emits() -> None:
    """Off unless asked; the tokens a step emits are the plan's where it states them, else each draft accepted with
    0.85 once the one before it was."""
    assert resolve_plan(parse_plan(DEEPSEEK)).mtp_draft_tokens == 0
    req = resolve_plan(parse_plan(with_(DEEPSEEK, "engine.multiTokenPrediction", {"draftTokens": 2})))
    assert (req.mtp_draft_tokens, req.mtp_accepted_stated) == (2, False)
    assert req.mtp_tokens_per_step == pytest.approx(1 + 0.85 + 0.85**2)
    req = resolve_plan(parse_plan(with_(DEEPSEEK, "engine.multiTokenPrediction",
                                        {"draftTokens": 2, "acceptedPerStep": "2.4"})))
    assert (req.mtp_tokens_per_step, req.mtp_accepted_stated) == (2.4, True)


def test_multi_token_prediction_is_refused_where_nothing_can_draft() -> None:
    """More tokens a step than drafts plus one; a model without MTP modules; an engine or release line that does
    not draft with them: each a problem at engine.multiTokenPrediction."""
    too_many = problems_of(with_(DEEPSEEK, "engine.multiTokenPrediction", {"draftTokens": 2, "acceptedPerStep": "3.5"}))
    assert "at most draftTokens + 1 = 3" in too_many["engine.multiTokenPrediction.acceptedPerStep"]
    assert "engine.multiTokenPrediction.draftTokens" in problems_of(
        with_(DEEPSEEK, "engine.multiTokenPrediction", {"draftTokens": 5}))
    for path, value, words in (("model.name", "meta-llama/Llama-3.1-8B", "ships no multi-token-prediction modules"),
                               ("engine.name", "tgi", "tgi 3.x does not draft"),
                               ("engine", {"name": "vllm", "version": "0.6.3"}, "vllm 0.6.x does not draft")):
        plan = with_(with_(DEEPSEEK, path, value), "engine.multiTokenPrediction", {"draftTokens": 1})
        with pytest.raises(PlanError) as info:
            resolve_plan(parse_plan(plan))
        assert words in dict(info.value.problems)["engine.multiTokenPrediction"]


def test_chunked_prefill_off_is_refused_where_vllm_v1_chunks_regardless() -> None:
    """vLLM 0.8.0-0.11.0 chunk prompts over --no-enable-chunked-prefill: a plan that sends them whole is refused at
    engine.chunkedPrefill, naming the release that honours it; 0.11.1 on, V0 and SGLang plan it."""
    plan = with_(MINIMAL, "engine", {"name": "vllm", "version": "0.9.2", "chunkedPrefill": False})
    with pytest.raises(PlanError) as info:
        resolve_plan(parse_plan(plan))
    assert "0.11.1 or later" in dict(info.value.problems)["engine.chunkedPrefill"]
    for engine in ({"name": "vllm", "version": "0.11.2"}, {"name": "vllm", "version": "0.6.3"}, {"name": "vllm"},
                   {"name": "sglang"}, {"name": "vllm", "version": "0.9.2", "chunkedPrefill": True}):
        assert resolve_plan(parse_plan(with_(MINIMAL, "engine", {"chunkedPrefill": False, **engine}))) is not None


def test_a_prefix_hit_rate_with_prefix_caching_off_is_refused() -> None:
    plan = with_(with_(MINIMAL, "engine.prefixCaching", False), "workload.prefixCacheHitRate", "0.3")
    with pytest.raises(PlanError) as info:
        resolve_plan(parse_plan(plan))
    assert "engine.prefixCaching is false" in dict(info.value.problems)["workload.prefixCacheHitRate"]
    assert resolve_plan(parse_plan(with_(plan, "engine.prefixCaching", True))).prefix_hit_rate == 0.3


@pytest.mark.parametrize(("engine", "hit_rate", "switch"), [
    ({"name": "vllm", "version": "0.6.3"}, "0.3", "--enable-prefix-caching"),
    ({"name": "vllm", "prefixCaching": False}, "0", "--no-enable-prefix-caching"),
    ({"name": "sglang", "prefixCaching": False}, "0", "--disable-radix-cache"),
])
def test_the_planned_prefix_cache_reaches_the_engines_command(engine: dict[str, Any], hit_rate: str,
                                                              switch: str) -> None:
    """vLLM 0.6 caches no prefixes unless told: a plan that counts 30% of prompt tokens as hits gets
    --enable-prefix-caching; engine.prefixCaching false turns V1's and SGLang's default cache off."""
    from inferplan.planner.search.plan import plan

    spec = with_(with_(MINIMAL, "engine", engine), "workload.prefixCacheHitRate", hit_rate)
    spec["constraints"] = {"gpuTypes": ["H100"]}
    recommended = plan(resolve_plan(parse_plan(spec))).recommendation
    assert recommended is not None and switch in recommended.engine_args


def test_disaggregated_only_is_refused_where_the_engine_has_no_disaggregated_serving() -> None:
    """`shapes: [disaggregated]` on TGI, TensorRT-LLM or a vLLM before 0.9 could plan nothing (no aggregated candidate
    is asked for): a problem at constraints.shapes, not an infeasible answer whose warning says aggregated candidates
    were planned; with aggregated beside it, or on an engine that has it, it plans."""
    for engine in ({"name": "tgi"}, {"name": "tensorrt-llm"}, {"name": "vllm", "version": "0.8.5"}):
        plan = with_(with_(MINIMAL, "engine", engine), "constraints.shapes", ["disaggregated"])
        with pytest.raises(PlanError) as info:
            resolve_plan(parse_plan(plan))
        assert "add aggregated" in dict(info.value.problems)["constraints.shapes"]
        assert resolve_plan(parse_plan(with_(plan, "constraints.shapes", ["aggregated", "disaggregated"])))
    for engine in ({"name": "vllm"}, {"name": "sglang"}):
        plan = with_(with_(MINIMAL, "engine", engine), "constraints.shapes", ["disaggregated"])
        assert resolve_plan(parse_plan(plan)).shapes == ("disaggregated",)


@pytest.mark.parametrize(("version", "message"), [
    ("latest", "must be a release number such as 0.11.2, v0.10.1.1, 0.5.4.post1 or 1.0.0rc4: a tag such as 'latest' "
               "names no release"),
    ("vllm/vllm-openai:v0.10.1", "must be the engine's release, not its image: write version '0.10.1' and, for that "
                                 "image, image 'vllm/vllm-openai:v0.10.1', got 'vllm/vllm-openai:v0.10.1'"),
])
def test_an_engine_version_that_names_no_release_says_what_to_write(version: str, message: str) -> None:
    # `version: latest` and an image reference had been refused with the pattern's regular expression alone.
    with pytest.raises(PlanError) as info:
        parse_plan({**MINIMAL, "engine": {"name": "vllm", "version": version}})
    [(path, said)] = info.value.problems
    assert path == "engine.version" and said.startswith(message) and "pattern" not in said


@pytest.mark.parametrize("version", ["0.11.2", "v0.10.0", "0.11.2rc1", "0.10.1.1", "0.5.4.post1", "1.0.0rc4"])
def test_an_engine_version_is_taken_as_releases_are_numbered(version: str) -> None:
    assert parse_plan({**MINIMAL, "engine": {"name": "vllm", "version": version}}).engine.version == version
