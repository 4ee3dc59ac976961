"""Disaggregated prefill and decode (model/disaggregated.py, search/disaggregated.py): the KV transfer,
the two pools' models, the search over pairs of pools, their simulation and how they are shown."""

from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.catalog.model_configs import load_model_catalog
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.disaggregated import (
    LINK_EFFICIENCY,
    TRANSFER_SETUP_S,
    decode_pool,
    prefill_pool,
    transfer_s,
)
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.intervals import load_intervals
from inferplan.planner.model.performance import build_hardware
from inferplan.planner.model.serving import Traffic, poisson
from inferplan.planner.quantiles import QUANTILE_VALUES
from inferplan.planner.request import resolve_plan
from inferplan.planner.search.core import interval_evidence
from inferplan.planner.search.plan import plan
from inferplan.planner.simulation.verification import compare, simulate_candidate
from inferplan.planner.spec_parsing import PlanError, parse_plan
from inferplan.tables import format_plan
from tests.planner.search.test_plan import all_shown

# Long prompts and a tight TPOT target on a 70B model: the case disaggregation is for.
LONG_PROMPTS: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.3-70B-Instruct", "precisions": ["fp8"]},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "10", "promptTokens": {"mean": 8000, "p95": 12000},
                 "outputTokens": {"mean": 300, "p95": 800}},
    "slo": {"ttft": {"maxMs": 2000, "percentile": "p95"}, "tpot": {"maxMs": 12, "percentile": "p95"}},
    "constraints": {"gpuTypes": ["H100-SXM5-80GB", "H200-SXM-141GB"], "shapes": ["aggregated", "disaggregated"]},
    "verify": False,
}


def _plan(**sections: dict[str, Any]):
    spec = copy.deepcopy(LONG_PROMPTS)
    for key, value in sections.items():
        spec[key] = {**spec[key], **value}
    request = resolve_plan(parse_plan(spec))
    return request, plan(request)


@pytest.fixture(scope="module")
def tight():
    return _plan()


def _hardware(gpu: str, tp: int):
    arch = load_model_catalog().resolve("meta-llama/Llama-3.3-70B-Instruct")
    factors = load_factors()
    spec = load_gpu_catalog().get(gpu)
    return arch, build_hardware(arch, spec, weight_precision("fp8"), 2.0, ENGINES["vllm"],
                                factors.engine_on("vllm", spec.key, spec.vendor), tp)


def test_a_prompts_kv_crosses_over_the_fewer_links_of_the_two_pools() -> None:
    arch, hw = _hardware("H100-SXM5-80GB", 8)
    kv_bytes = arch.kv_bytes_per_token(2.0) * 8000  # Llama 70B: 80 layers x 8 KV heads x 128 x 2 x 2 bytes
    assert kv_bytes == pytest.approx(327_680 * 8000)
    for tp_decode, links in ((8, 8), (4, 4), (2, 2)):
        expected = kv_bytes / (links * 400e9 / 8 * LINK_EFFICIENCY) + TRANSFER_SETUP_S
        assert float(transfer_s(hw, tp_decode, 8000.0, 400.0)) == pytest.approx(expected, rel=1e-9)
    # A slower network: the bytes take four times as long, the setup does not change.
    slow = float(transfer_s(hw, 4, 8000.0, 100.0)) - TRANSFER_SETUP_S
    assert slow == pytest.approx(4 * (float(transfer_s(hw, 4, 8000.0, 400.0)) - TRANSFER_SETUP_S))


def test_a_decode_pool_is_not_slowed_by_prompts_and_a_prefill_pool_saturates_at_its_compute() -> None:
    _, hw = _hardware("H200-SXM-141GB", 4)
    rate, slots = 2.0, 32.0
    mixed = poisson(hw, rate, Traffic(8000.0, 300.0, 0.3, 0.5), slots, 2048.0, samples=256)
    decode = decode_pool(hw, 8000.0, 300.0, slots, 2048.0, 0.5, 1.0, None, 256).quantiles(rate, [("tpot", 0.95)])
    # The aggregated replica's decode steps share the GPU with 2 x 8000 prompt tokens a second; the decode pool's
    # do not: its TPOT is the bare decode step's, well below.
    assert float(decode[0]) < 0.7 * float(mixed.tpot_q[0.95])
    prefill = prefill_pool(hw, 4.0, 8000.0, 64.0, 2048.0, 0.3, 1.0, 1.0, 400.0, 256)
    # One prompt's compute after another: the pool saturates at one prompt per mean prefill time.
    assert float(prefill.capacity) <= 1.0 / float(prefill.model.es)
    assert float(prefill.capacity) == pytest.approx(1.0 / float(prefill.model.es), rel=1e-6)


def test_a_tight_tpot_on_long_prompts_is_served_cheapest_by_separate_pools(tight) -> None:
    request, result = tight
    rec = result.recommendation
    assert rec is not None and rec.shape == "disaggregated"
    prefill, decode = rec.roles
    assert (prefill.role, decode.role) == ("prefill", "decode")
    assert rec.gpus == prefill.gpus + decode.gpus
    assert prefill.gpus == prefill.replicas * prefill.gpus_per_replica
    # The cost is both pools' GPUs at their catalog prices.
    prices = {g.key: g.usd_per_hour for g in load_gpu_catalog()}
    assert rec.cost.dollars_per_hour == pytest.approx(
        sum(r.gpus * prices[r.gpu_type] for r in rec.roles), rel=1e-3)
    # The top level describes the decode pool; both pools' engines get vLLM's NIXL connector.
    assert (rec.gpu_type, rec.replicas, rec.max_batch) == (decode.gpu_type, decode.replicas, decode.max_batch)
    for role in rec.roles:
        assert "--kv-transfer-config" in role.engine_args
        assert role.engine_args[role.engine_args.index("--tensor-parallel-size") + 1] == str(role.gpus_per_replica)
    assert rec.predicted.tpot_ms.p95 <= 12 and rec.predicted.ttft_ms.p95 <= 2000
    # The aggregated shape is still there to compare with (its cheapest feasible candidate), and costs more.
    aggregated = [o for o in result.shape_options if o.layout == 0]
    assert len(aggregated) == 1 and aggregated[0].cost is not None and aggregated[0].cost > rec.cost.dollars_per_hour
    assert any(line.startswith("aggregated") and "against the recommendation" in line for line in result.shapes)
    assert "prefill" in rec.why or "prefill" in format_plan(result, request)


def test_each_role_says_how_its_engine_and_dynamo_run_it(tight) -> None:
    _, result = tight
    for role in result.recommendation.roles:
        # Dynamo's vLLM worker: the role's vLLM arguments and its disaggregation mode.
        assert role.dynamo_args == [*role.engine_args, "--disaggregation-mode", role.role]
    _, sglang = _plan(engine={"name": "sglang"}, constraints={"shapes": ["disaggregated"]})
    for role in sglang.recommendation.roles:
        args = role.engine_args
        assert args[args.index("--disaggregation-mode") + 1] == role.role
        assert role.dynamo_args == args  # SGLang's own flag is Dynamo's too


def test_with_a_relaxed_tpot_one_pool_of_replicas_costs_about_as_little_as_two(tight) -> None:
    """At 40 ms a token (more than three times the tight case's 12 ms) decode steps may share the GPUs with prompt
    chunks: one pool of replicas, three times the cost of the prefill and decode pools at 12 ms, comes within 10% of
    them (which of the two is cheaper is then a replica more or less: 9 or 10 replicas of 4 H100 against $115.40/h,
    as the engine's fitted per-step time moves by 0.15 ms)."""
    def costs(result) -> tuple[float, float]:
        by_layout = {option.layout: option.cost for option in result.shape_options}
        aggregated = by_layout.pop(0)
        assert aggregated is not None and len(by_layout) == 1
        (pair,) = by_layout.values()
        return aggregated, pair

    _, relaxed = _plan(slo={"tpot": {"maxMs": 40, "percentile": "p95"}})
    aggregated, pair = costs(tight[1])
    assert aggregated > 2.5 * pair
    aggregated, pair = costs(relaxed)
    assert aggregated < 1.1 * pair


def test_only_the_shapes_the_plan_lists_are_planned() -> None:
    _, aggregated = _plan(constraints={"shapes": ["aggregated"]})
    shown = [aggregated.recommendation, *aggregated.alternatives]
    assert shown[0] is not None and all(c.shape == "aggregated" and not c.roles for c in shown)
    _, separate = _plan(constraints={"shapes": ["disaggregated"]})
    shown = [separate.recommendation, *separate.alternatives]
    assert shown[0] is not None and all(c.shape == "disaggregated" and len(c.roles) == 2 for c in shown)


def test_a_limit_counts_the_gpus_of_both_pools() -> None:
    _, result = _plan(constraints={"shapes": ["disaggregated"]})
    cheapest = result.recommendation
    assert cheapest is not None
    # A budget just under the cheapest pair rules it out; the pairs shown all fit the budget.
    budget = cheapest.cost.dollars_per_hour - 1.0
    _, tighter = _plan(constraints={"shapes": ["disaggregated"], "budgetDollarsPerHour": f"{budget:.2f}"})
    shown = [c for c in [tighter.recommendation, *tighter.alternatives] if c is not None]
    assert all(c.cost.dollars_per_hour <= budget for c in shown)
    assert cheapest.model_dump() not in [c.model_dump() for c in shown]


def test_a_pair_that_costs_the_budget_is_within_it() -> None:
    prices = {"H100": "1.1", "H200": "1.1"}
    _, result = _plan(constraints={"shapes": ["disaggregated"], "prices": prices})
    pair = result.recommendation
    assert pair is not None and [p.gpus for p in pair.roles] == [32, 24]
    # 8 x 4 x $1.10 + 3 x 8 x $1.10 is 61.60000000000001 in floating point: a budget of $61.60/h allows the pair.
    assert 8 * (4 * 1.1) + 3 * (8 * 1.1) > 61.6 == pair.cost.dollars_per_hour
    _, budgeted = _plan(constraints={"shapes": ["disaggregated"], "prices": prices, "budgetDollarsPerHour": "61.6"})
    shown = budgeted.recommendation
    assert shown is not None and shown.cost == pair.cost and shown.roles == pair.roles


def test_a_pairs_cost_is_as_sure_as_its_least_sure_price() -> None:
    # A GB200 prefill pool (priced from the catalog author's estimate: half a Superchip's quote) before an H200 decode
    # pool (a quoted price): the pair's cost rests on the estimate, and says so as an aggregated GB200 would.
    _, result = _plan(constraints={"shapes": ["disaggregated"], "gpuTypes": ["GB200-NVL72", "H200-SXM-141GB"]})
    mixed = [c for c in all_shown(result) if [p.gpu_type for p in c.roles] == ["GB200-NVL72", "H200-SXM-141GB"]]
    assert mixed
    for pair in mixed:
        assert pair.provenance["cost"] == "estimate"
        assert any(w.startswith("GB200-NVL72: $4.54 per GPU-hour is the catalog's estimate") for w in pair.warnings)
    # The plan's own price for the decode pool's GPU alone: the prefill pool's is still the catalog's.
    _, priced = _plan(constraints={"shapes": ["disaggregated"], "prices": {"H200": "3.5"}})
    pair = priced.recommendation
    assert pair is not None and [p.gpu_type for p in pair.roles] == ["H100-SXM5-80GB", "H200-SXM-141GB"]
    assert pair.provenance["cost"] == "catalog"
    _, both = _plan(constraints={"shapes": ["disaggregated"], "prices": {"H200": "3.5", "H100": "2.95"}})
    assert both.recommendation is not None and both.recommendation.provenance["cost"] == "spec"


def test_an_engine_without_disaggregated_serving_says_so() -> None:
    _, result = _plan(engine={"name": "tgi"})
    assert all(c is None or c.shape == "aggregated" for c in [result.recommendation, *result.alternatives])
    assert any("no disaggregated serving" in w for w in result.warnings)


def test_the_simulated_pools_agree_with_the_analytic_tail(tight) -> None:
    request, result = tight
    rec = result.recommendation
    simulated = simulate_candidate(request, rec, requests=4000, seed=1)
    assert len(simulated.e2e_s) == 4000 and np.all(np.isfinite(simulated.e2e_s))
    assert np.all(simulated.ttft_s < simulated.e2e_s)
    rows = {(r.metric, r.quantile): r for r in compare(rec, simulated)}
    # The tolerance the aggregated recommendation is held to (test_verification.py): p95 TPOT and e2e within 25%.
    for key in (("tpot", "p95"), ("e2e", "p95")):
        assert rows[key].ratio == pytest.approx(1.0, abs=0.25), rows[key]
    # TTFT: the analytic prefill queue is the conservative side (each replica's arrivals as bursty as the
    # whole stream; the simulator's round robin smooths them).
    assert 0.0 < rows[("ttft", "p95")].ratio <= 1.0


@pytest.mark.parametrize(("constraints", "field"), [
    ({"shapes": ["aggregated", "aggregated"]}, "shapes"),
    ({"shapes": []}, "shapes"),
    ({"shapes": ["pipelined"]}, "shapes"),
    ({"networkGbps": 0}, "networkGbps"),
])
def test_bad_shapes_and_transfer_bandwidths_are_refused(constraints: dict[str, Any], field: str) -> None:
    spec = copy.deepcopy(LONG_PROMPTS)
    spec["constraints"].update(constraints)
    with pytest.raises(PlanError, match=field):
        parse_plan(spec)


@pytest.mark.parametrize("slo", [{"tpot": {"maxMs": 8, "percentile": "p99"}},
                                 {"e2e": {"maxMs": 8000, "percentile": "p95"}}])
def test_targets_on_one_pool_or_on_the_whole_request_are_split_too(slo: dict[str, Any]) -> None:
    """A TPOT target alone leaves the prefill pool unbounded but by the utilisation cap; an end-to-end target
    alone is split between the pools. Either way the candidates meet the plan's targets, quietly."""
    spec = copy.deepcopy(LONG_PROMPTS)
    spec["model"] = {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": ["bf16"]}
    spec["workload"] = {"requestsPerSecond": "8", "promptTokens": {"mean": 4000, "p95": 8000},
                        "outputTokens": {"mean": 300, "p95": 800}}
    spec["slo"] = slo
    spec["constraints"] = {"gpuTypes": ["H100-SXM5-80GB"], "shapes": ["disaggregated"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = plan(resolve_plan(parse_plan(spec)))
    shown = [result.recommendation, *result.alternatives]
    assert shown[0] is not None and all(c.shape == "disaggregated" for c in shown)
    (metric, bound), = slo.items()
    key = {"p95": "p95", "p99": "p99"}[bound["percentile"]]
    assert all(getattr(getattr(c.predicted, f"{metric}_ms"), key) <= bound["maxMs"] for c in shown)


def test_each_pool_of_an_mla_model_says_how_its_attention_and_experts_run() -> None:
    """DeepSeek-R1 on SGLang at 10 requests/s on H200, pools only, with a TPOT target (150 ms) loose enough for the
    large decode batches that data-parallel attention's KV room pays for: each role carries its own attention and
    expert layout (the pools need not share one), the flags in its arguments agree, and the simulation builds each
    pool's hardware from its role's (not the decode pool's)."""
    import dataclasses
    from pathlib import Path

    from inferplan.planner.search.annotate import deployment_of
    from inferplan.planner.spec_parsing import load_plan_file

    path = Path(__file__).resolve().parents[3] / "examples" / "platform" / "deepseek-r1-shapes.yaml"
    request = resolve_plan(load_plan_file(path), path.parent)
    tpot = next(s for s in request.slos if s.metric == "tpot")
    slos = tuple(dataclasses.replace(s, max_s=0.15) if s is tpot else s for s in request.slos)
    request = dataclasses.replace(request, shapes=("disaggregated",), rate_rps=10.0, gpu_types=("H200-SXM-141GB",),
                                  slos=slos)
    rec = plan(request).recommendation
    assert rec is not None and len(rec.roles) == 2 and any(r.data_parallel_attention for r in rec.roles)
    for role in rec.roles:
        assert role.data_parallel_attention == ("--enable-dp-attention" in role.engine_args)
        assert role.expert_parallel == ("--ep-size" in role.engine_args)
        pool = deployment_of(request, rec.model_copy(update={
            "gpu_type": role.gpu_type, "gpus_per_replica": role.gpus_per_replica, "max_batch": role.max_batch,
            "data_parallel_attention": role.data_parallel_attention, "expert_parallel": role.expert_parallel}))
        plain = deployment_of(request, rec.model_copy(update={
            "gpu_type": role.gpu_type, "gpus_per_replica": role.gpus_per_replica, "max_batch": role.max_batch,
            "data_parallel_attention": False, "expert_parallel": False}))
        if role.data_parallel_attention:  # DP attention: 1/TP of the KV read per GPU
            assert pool.hardware.kv_full_bytes_per_token_per_gpu < plain.hardware.kv_full_bytes_per_token_per_gpu
    result = simulate_candidate(request, rec, requests=2000, seed=1)
    assert len(result.e2e_s) == 2000


def test_a_disaggregated_plan_a_limit_rules_out_points_at_its_suggestions_not_an_empty_infeasible() -> None:
    # Its pairs are kept only within the limits, so no nearest one is recorded; the warning sent the reader to an
    # empty `infeasible`, where the suggestions name the limit that binds.
    spec = yaml.safe_load((Path(__file__).parents[3] / "examples/plans/chat-assistant-8b.yaml").read_text())["spec"]
    spec["verify"] = False
    spec["constraints"] = {**spec.get("constraints", {}), "shapes": ["disaggregated"], "maxGpus": 3}
    result = plan(resolve_plan(parse_plan(spec)))
    assert result.recommendation is None and result.infeasible == []
    warning = next(w for w in result.warnings if w.startswith("no candidate meets every gate"))
    assert "see infeasible" not in warning and "see suggestions" in warning
    assert any(s.startswith("limits: maxGpus") for s in result.suggestions)


@pytest.mark.parametrize("limit", [{"budgetDollarsPerHour": "300"}, {"maxReplicas": 10},
                                   {"availableGpus": {"H100-SXM5-80GB": 84, "H200-SXM-141GB": 16}}])
def test_a_limit_the_cheapest_pair_meets_keeps_it(limit: dict[str, Any]) -> None:
    # long-prompts-70b-shapes.yaml: 10 x 8 H100 prefill + 3 x 4 H200 decode, $278/h. The search's coarse sample put
    # the prefill pool at 11 replicas ($301.60/h), so a budget of $300, maxReplicas 10 or 84 H100 ruled the pair out
    # before the report's sample confirmed 10, and the plan came out infeasible under a limit its answer meets.
    spec = yaml.safe_load((Path(__file__).parents[3] / "examples/platform/long-prompts-70b-shapes.yaml").read_text())
    spec = {**spec["spec"], "verify": False}
    free = plan(resolve_plan(parse_plan(spec))).recommendation
    assert free is not None and free.shape == "disaggregated"
    assert [(r.gpu_type, r.gpus_per_replica, r.replicas) for r in free.roles] == [
        ("H100-SXM5-80GB", 8, 10), ("H200-SXM-141GB", 4, 3)]
    limited = plan(resolve_plan(parse_plan({**spec, "constraints": {**spec["constraints"], **limit}})))
    assert limited.recommendation is not None  # the same pair (its tags and why differ with the others left)
    assert limited.recommendation.model_dump(exclude={"tags", "why"}) == free.model_dump(exclude={"tags", "why"})


def test_a_limits_suggestion_counts_each_pools_gpus_and_replicas() -> None:
    # The $278/h pair needs 80 H100 and 12 H200 in pools of 10 and 3 replicas; the suggestion had counted all 92 GPUs
    # as the decode pool's H200 and the decode pool's 3 replicas against maxReplicas, which the prefill pool's 10 break.
    spec = yaml.safe_load((Path(__file__).parents[3] / "examples/platform/long-prompts-70b-shapes.yaml").read_text())
    spec = {**spec["spec"], "verify": False}
    spec["constraints"] = {**spec["constraints"], "shapes": ["disaggregated"], "maxReplicas": 5,
                           "availableGpus": {"H100-SXM5-80GB": 80, "H200-SXM-141GB": 8},
                           "maxGpusPerType": {"H200-SXM-141GB": 8}}
    result = plan(resolve_plan(parse_plan(spec)))
    assert result.recommendation is None
    limits = next(s for s in result.suggestions if s.startswith("limits:"))
    assert limits.startswith("limits: maxGpusPerType H200-SXM-141GB: 12 (now 8); 12 H200-SXM-141GB GPUs in the "
                             "cluster (now fewer); maxReplicas 10 (now 5) gives 10 x 8 H100-SXM5-80GB prefill")


def test_a_disaggregated_plan_a_limit_rules_out_names_the_limit_beside_an_unrelated_nearest_row() -> None:
    # With maxGpus 60 every pair of long-prompts-70b-shapes broke the limit, and the only nearest row was a shape
    # no pool can use (TP 1 out of memory) while the warnings said "see infeasible": nothing named the limit there.
    spec = yaml.safe_load((Path(__file__).parents[3] / "examples/platform/long-prompts-70b-shapes.yaml").read_text(
    ))["spec"]
    spec["verify"] = False
    spec["constraints"] = {**spec["constraints"], "shapes": ["disaggregated"], "maxGpus": 60}
    result = plan(resolve_plan(parse_plan(spec)))
    assert result.recommendation is None and [r.gate for r in result.infeasible] == ["memory"]
    warning = next(w for w in result.warnings if w.startswith("no disaggregated deployment"))
    assert "meets them breaks maxGpus 60 (the pools need" in warning


def test_a_pairs_ttft_and_e2e_intervals_and_checks_read_an_unmeasured_prefill_gpu_too() -> None:
    # SGLang has measured lines on Hopper and none on Blackwell: a B200 prefill pool computes every prompt of a pair
    # whose decode pool is an H200, so the pair's TTFT and end-to-end time are as uncertain as an unmeasured pair's.
    # They had read the decode GPU's (measured) errors alone, narrower: e2e p95 80% 0.89-3.3x, not 0.70-4.3x.
    request, result = _plan(engine={"name": "sglang"}, workload={"promptTokens": {"mean": 12000, "p95": 20000}},
                            slo={"tpot": {"maxMs": 20, "percentile": "p95"}},
                            constraints={"gpuTypes": ["B200", "H200-SXM-141GB"]})
    pair = next(c for c in all_shown(result) if [r.gpu_type for r in c.roles] == ["B200", "H200-SXM-141GB"])
    assert pair.provenance["measuredLines"] != "0" and pair.provenance["prefillMeasuredLines"] == "0"
    table, catalog = load_intervals(), load_gpu_catalog()
    for metric, q in (("ttft", "p50"), ("ttft", "p95"), ("e2e", "p95"), ("tpot", "p95")):
        value, (low, high) = getattr(getattr(pair.predicted, f"{metric}_ms"), q), \
            getattr(getattr(pair.predicted.intervals, f"{metric}_ms"), q)
        read = {gpu: table.interval(interval_evidence(request, catalog.get(gpu), metric, QUANTILE_VALUES[q], lines),
                                    value) for gpu, lines in (("B200", 0), ("H200-SXM-141GB", 64))}
        pools = ("B200", "H200-SXM-141GB") if metric != "tpot" else ("H200-SXM-141GB",)
        assert low == pytest.approx(min(read[g][0] for g in pools), rel=2e-3)
        assert high == pytest.approx(max(read[g][1] for g in pools), rel=2e-3)
    check = next(c for c in pair.predicted.slo_checks if c.metric == "ttft")
    b200 = interval_evidence(request, catalog.get("B200"), "ttft", 0.95, 0)
    assert check.holds_with <= table.confidence_within(b200, math.log(check.target_ms / check.predicted_ms))
    assert check.ratio >= math.exp(table.upper_log_bound(b200)) - 1e-3
