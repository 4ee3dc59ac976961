"""Property-based fuzz of the planner over the spec space: every valid spec gives a result (or a PlanError
for a spec the planner cannot use), never an exception, every number in the result is finite and
non-negative, and every candidate shown meets each SLO by the numbers it shows."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.catalog.model_configs import load_model_catalog
from inferplan.planner.catalog.precisions import WEIGHT_PRECISIONS
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.request import resolve_plan
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import PlanError, parse_plan

MODELS = sorted(m.repo_id for m in load_model_catalog())
GPUS = sorted(g.product_label for g in load_gpu_catalog())


def decimal(low: float, high: float) -> st.SearchStrategy[str]:
    return st.floats(low, high).map(lambda x: f"{x:.3f}".rstrip("0").rstrip(".") or "0")


def lengths(low: int, high: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.integers(low, high).flatmap(lambda mean: st.one_of(
        st.just({"mean": mean}),
        st.integers(mean, mean * 20).map(lambda p95: {"mean": mean, "p95": p95}),
        decimal(0, 5).map(lambda cv: {"mean": mean, "cv": cv}),
    ))


def slo() -> st.SearchStrategy[dict[str, Any]]:
    bound = st.fixed_dictionaries({"maxMs": st.integers(1, 10**6)},
                                  optional={"percentile": st.sampled_from(["p50", "p90", "p95", "p99"])})
    return st.fixed_dictionaries({}, optional={k: bound for k in ("ttft", "tpot", "e2e")}).filter(bool)


SPECS = st.fixed_dictionaries({
    "model": st.fixed_dictionaries({"name": st.sampled_from(MODELS)}, optional={
        "precisions": st.lists(st.sampled_from(sorted(WEIGHT_PRECISIONS)), min_size=1, max_size=3, unique=True),
        "kvCacheDtypes": st.lists(st.sampled_from(["auto", "fp8", "fp16", "bf16"]), min_size=1, max_size=2,
                                  unique=True)}),
    "engine": st.fixed_dictionaries({"name": st.sampled_from(["vllm", "sglang", "tgi", "tensorrt-llm"])}, optional={
        "gpuMemoryUtilization": decimal(0.05, 1), "maxModelLen": st.integers(16, 200_000),
        "chunkedPrefill": st.booleans(), "maxNumBatchedTokens": st.integers(16, 65_536)}),
    "workload": st.fixed_dictionaries({
        "requestsPerSecond": decimal(0.001, 5000), "promptTokens": lengths(1, 100_000),
        "outputTokens": lengths(1, 20_000)}, optional={
        "burstiness": st.one_of(
            st.sampled_from(["steady", "chatbot", "bursty", "agent"]).map(lambda p: {"preset": p}),
            st.fixed_dictionaries({"arrivalCV2": decimal(0, 100)}, optional={"serviceCV2": decimal(0, 100)})),
        "prefixCacheHitRate": decimal(0, 0.99)}),
    "slo": slo(),
    "constraints": st.fixed_dictionaries({}, optional={
        "gpuTypes": st.lists(st.sampled_from(GPUS), min_size=1, max_size=4, unique=True),
        "tensorParallelSizes": st.lists(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), min_size=1, max_size=3,
                                        unique=True),
        "maxGpus": st.integers(1, 1000), "maxReplicas": st.integers(1, 100),
        "budgetDollarsPerHour": decimal(0.01, 10_000), "maxUtilization": decimal(0.01, 1),
        "availableGpus": st.dictionaries(st.sampled_from(GPUS), st.integers(0, 64), max_size=3)}),
    "alternatives": st.integers(1, 20),
})


def numbers(obj: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from numbers(value, f"{path}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from numbers(value, f"{path}[{i}]")
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        yield path, obj


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(SPECS)
def test_any_valid_spec_plans_to_finite_non_negative_numbers_or_a_plan_error(data: dict[str, Any]) -> None:
    try:
        request = resolve_plan(parse_plan(data))
    except PlanError as exc:
        assert exc.problems and all(message for _, message in exc.problems)
        return
    planned = plan(request)
    for candidate in [planned.recommendation, *planned.alternatives]:
        for slo in request.slos if candidate is not None else ():
            shown = getattr(getattr(candidate.predicted, f"{slo.metric}_ms"), QUANTILE_NAMES[slo.quantile])
            assert shown <= slo.max_s * 1e3 * (1 + 1e-3), (candidate.gpu_type, slo, shown)  # 4 digits shown
    result = planned.model_dump(by_alias=True, mode="json")
    for path, value in numbers(result):
        assert math.isfinite(value) and (value >= 0 or path.endswith(".margin")), (path, value)  # a check's margin
    if result["recommendation"] is None:
        assert result["infeasible"] or result["warnings"]  # an empty answer always says why
