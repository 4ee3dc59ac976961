"""Answers a platform team can deploy as printed: the example plans, fleet defaults, replicas and headroom,
context limits, distinct alternatives, infeasibility that helps, arguments the engines accept."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplan.cli import main
from inferplan.planner.catalog.checkpoints import Checkpoint, gpu_problem
from inferplan.planner.catalog.engine_args import DEFAULT_VERSIONS, RELEASES_READ, disaggregation_args, flag_problems
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.model.memory import GIB
from inferplan.planner.request import resolve_plan
from inferplan.planner.results import Candidate, PlanResult
from inferplan.planner.search.advice import CONTEXT_LIMIT_SHARE
from inferplan.planner.search.annotate import deployment_of
from inferplan.planner.search.core import PRACTICAL_COST_FACTOR
from inferplan.planner.search.grid import (
    checkpoint_of,
    context_overflow,
    expert_parallel_possible,
    pipeline_possible,
)
from inferplan.planner.search.plan import plan
from inferplan.planner.simulation.verification import planned as plan_answer
from inferplan.planner.spec_parsing import PlanError, load_plan_file, parse_plan
from inferplan.tables import format_plan
from tests.support.plans import verified

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = [*sorted((ROOT / "examples" / "plans").glob("*.yaml")),
            *sorted((ROOT / "examples" / "platform").glob("*.yaml"))]
INFEASIBLE = ROOT / "examples" / "platform" / "infeasible-ask.yaml"
BURSTY_72B = ROOT / "examples" / "platform" / "infeasible-bursty-agent-72b.yaml"
INFEASIBLE_EXAMPLES = {INFEASIBLE, BURSTY_72B}  # no recommendation: the answer is the suggestions
CONSUMER = {g.key for g in load_gpu_catalog() if g.segment == "consumer"}


def spec_of(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    return data.get("spec", data)  # a manifest or a bare spec


def shown(result: PlanResult) -> list[Candidate]:
    return [c for c in [result.recommendation, *result.alternatives] if c is not None]


def planned(path: Path) -> tuple[Any, PlanResult]:
    return verified(path)  # what `inferplan plan` prints, planned once per session


def test_the_platform_example_set_covers_what_teams_ask() -> None:
    platform = [p for p in EXAMPLES if p.parent.name == "platform"]
    specs = [spec_of(p) for p in platform]
    assert len(platform) >= 8
    assert any("gpuTypes" not in s.get("constraints", {}) and "availableGpus" not in s.get("constraints", {})
               for s in specs)                                        # GPU types open
    assert {s["engine"]["name"] for s in specs} >= {"vllm", "sglang", "tgi", "tensorrt-llm"}
    assert any(s.get("constraints", {}).get("availableGpus", {}).keys() == {"MI300X"} for s in specs)  # AMD only


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p not in INFEASIBLE_EXAMPLES], ids=lambda p: p.stem)
def test_every_example_recommendation_passes_the_simulator_at_its_slo_percentiles(
        path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `inferplan simulate` serves 20,000 requests of the plan on the recommendation `inferplan plan` prints
    # (verified on 5,000): every SLO holds at its own percentile.
    assert main(["simulate", str(path), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    simulated = {(r["metric"], r["quantile"]): r["simulatedMs"] for r in out["percentiles"]}
    slo = spec_of(path)["slo"]
    for metric, bound in slo.items():
        assert simulated[(metric, bound["percentile"])] <= bound["maxMs"], (metric, bound)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_shown_argument_list_passes_the_engine_pinned_parser(path: Path) -> None:
    req, result = planned(path)
    for c in shown(result):
        assert flag_problems(req.engine, req.engine_version, c.engine_args) == [], c.engine_args
        assert c.checkpoint and c.engine_command


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_shown_checkpoint_runs_on_its_gpu_with_the_planned_release(path: Path) -> None:
    # The engine release the plan assumes loads the checkpoint's format on that vendor and architecture (vLLM's ROCm
    # build refuses ModelOpt repositories; its CUDA build has no INT8 W8A8 kernel for Blackwell).
    req, result = planned(path)
    catalog = load_gpu_catalog()
    for c in shown(result):
        checkpoint = checkpoint_of(req, c.precision, catalog.get(c.gpu_type))
        assert isinstance(checkpoint, Checkpoint) and checkpoint.repo == c.checkpoint
        assert gpu_problem(checkpoint, req.engine, catalog.get(c.gpu_type).family, req.engine_version) is None


def test_an_fp8_plan_on_amd_loads_a_repository_rocm_reads() -> None:
    _, result = planned(ROOT / "examples" / "platform" / "amd-only-cluster.yaml")
    rec = result.recommendation
    assert rec is not None and rec.gpu_type == "MI300X" and rec.precision == "fp8"
    assert not rec.checkpoint.startswith("nvidia/"), rec.checkpoint  # ModelOpt: not on vLLM's ROCm platform


def test_open_gpu_types_leave_out_consumer_cards_unless_named() -> None:
    _, result = planned(ROOT / "examples" / "platform" / "chat-8b-open-gpus.yaml")
    assert shown(result) and not {c.gpu_type for c in shown(result)} & CONSUMER
    assert any("consumer (GeForce) cards are left out" in a for a in result.assumptions)
    named = resolve_plan(parse_plan({**spec_of(ROOT / "examples/platform/chat-8b-open-gpus.yaml"),
                                     "constraints": {"gpuTypes": ["RTX-4090"]}}))
    assert plan(named).recommendation.gpu_type == "RTX-4090"


def test_gpus_per_node_come_from_the_catalog_chassis() -> None:
    req = resolve_plan(load_plan_file(ROOT / "examples" / "platform" / "batch-70b-open-gpus.yaml"))
    assert req.gpus_per_node["GH200-96GB-HBM3"] == 1 and req.gpus_per_node["H100-SXM5-80GB"] == 8
    gh200 = resolve_plan(parse_plan({**spec_of(ROOT / "examples/platform/batch-70b-open-gpus.yaml"),
                                     "constraints": {"gpuTypes": ["GH200-96GB-HBM3"], "tensorParallelSizes": [4]}}))
    result = plan(gh200)
    assert result.recommendation is None and result.infeasible[0].gate == "placement"
    assert "nodes have 1" in result.infeasible[0].reason


def test_at_least_two_replicas_and_the_minimum_headroom_by_default() -> None:
    req, result = planned(ROOT / "examples" / "plans" / "chat-assistant-8b.yaml")
    assert req.min_replicas == 2 and req.min_headroom == 0.05
    assert all(c.replicas >= 2 and c.headroom >= 0.05 - 1e-3 for c in shown(result))
    single = resolve_plan(parse_plan({**spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml"),
                                      "constraints": {"minReplicas": 1, "minHeadroom": "0"}}))
    one = plan(single)
    assert any("minReplicas 1" in w for w in one.warnings)


def test_a_context_below_the_prompt_tail_is_a_warning_with_the_share_rejected() -> None:
    req, result = planned(ROOT / "examples" / "platform" / "long-context-gemma.yaml")
    share = context_overflow(req, 8192)
    assert 0.001 < share < CONTEXT_LIMIT_SHARE
    assert result.recommendation is not None
    assert any(f"{share:.1%} of requests" in w and "8192" in w for w in result.warnings)


def test_a_context_far_below_the_tail_is_infeasible_and_says_what_would_fit() -> None:
    spec = spec_of(ROOT / "examples/platform/long-context-gemma.yaml")
    spec["workload"]["promptTokens"] = {"mean": 6000, "p95": 12000}  # the report: about a fifth rejected
    req = resolve_plan(parse_plan(spec))
    assert context_overflow(req, 8192) > 0.15
    result = plan(req)
    assert result.recommendation is None
    assert any("8192" in w and "exceed it" in w for w in result.warnings)
    assert result.suggestions and result.suggestions[0].startswith("context:")


def test_a_max_model_len_below_the_tail_suggests_raising_it_within_the_models_context() -> None:
    """A plan's own engine.maxModelLen of 32768 under prompts of mean 30k (p95 60k) on Llama-3.1-8B, whose context is
    131072: the suggestion told the user to "serve a model with a context (and maxModelLen) of at least 123904
    tokens", though this model has one; it names the maxModelLen to set, and the deployment it gives."""
    spec = copy.deepcopy(spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml"))
    spec["engine"]["maxModelLen"] = 32768
    spec["workload"] = {"requestsPerSecond": "0.5", "promptTokens": {"mean": 30000, "p95": 60000},
                        "outputTokens": {"mean": 500}}
    spec["slo"] = {"ttft": {"maxMs": 30000}, "tpot": {"maxMs": 100}}
    req = resolve_plan(parse_plan(spec))
    result = plan(req)
    assert result.recommendation is None
    [suggestion] = result.suggestions
    assert suggestion.startswith("context: maxModelLen 123904 (now 32768: it holds 65.3% of requests"), suggestion
    assert "serve a model" not in suggestion and " gives " in suggestion and "context is 131072" in suggestion
    # Set as it says, the plan has an answer.
    spec["engine"]["maxModelLen"] = 123904
    assert plan(resolve_plan(parse_plan(spec))).recommendation is not None
    # Where even the model's context is short of the tail, the suggestion says what that context holds too.
    spec["engine"]["maxModelLen"] = 110000
    spec["workload"]["promptTokens"] = {"mean": 100000, "p95": 131000}
    spec["workload"]["outputTokens"] = {"mean": 100}
    [suggestion] = plan(resolve_plan(parse_plan(spec))).suggestions
    assert suggestion.startswith("context: maxModelLen 110000 holds 73.6% of requests, the model's context of "
                                 "131072 tokens 94.9%; serve a model with a context"), suggestion


def test_alternatives_are_distinct_bounded_and_each_says_why() -> None:
    for path in EXAMPLES:
        if path in INFEASIBLE_EXAMPLES:
            continue
        _, result = planned(path)
        rows = shown(result)
        tags = [t for c in rows for t in c.tags]
        assert len(tags) == len(set(tags)), path.name                      # each tag on one row
        assert all(c.why for c in rows), path.name
        assert len(result.alternatives) <= 5, path.name                 # the plans' default `alternatives`
        # A layout is part of what is deployed: 16 GPUs as TP 16 or as two pipeline stages of TP 8 are two rows.
        keys = [(c.gpu_type, c.gpus_per_replica, c.precision, c.kv_cache_dtype, c.max_batch, c.replicas,
                 c.pipeline_parallel, c.data_parallel_attention, c.expert_parallel,
                 tuple((r.role, r.gpu_type, r.gpus_per_replica, r.replicas, r.max_batch) for r in c.roles))
                for c in rows]
        assert len(keys) == len(set(keys)), path.name


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p not in INFEASIBLE_EXAMPLES], ids=lambda p: p.stem)
def test_no_alternative_costs_more_than_the_practical_bound_of_the_recommendation(path: Path) -> None:
    _, result = planned(path)
    rec = result.recommendation
    assert all(c.cost.dollars_per_hour <= PRACTICAL_COST_FACTOR * rec.cost.dollars_per_hour for c in shown(result))


def test_an_infeasible_plan_names_every_gate_and_what_would_make_it_feasible() -> None:
    _, result = planned(INFEASIBLE)
    assert result.recommendation is None and result.infeasible
    assert result.suggestions
    kinds = {s.split(":")[0] for s in result.suggestions}
    assert kinds & {"limits", "SLO", "GPU type"}
    # Each suggestion names a deployment that meets every target once changed: check one by applying it.
    slo = next(s for s in result.suggestions if s.startswith("SLO:"))
    looser = int(slo.split("<= ")[1].split(" ms")[0])
    spec = spec_of(INFEASIBLE)
    spec["slo"]["tpot"]["maxMs"] = looser
    assert plan(resolve_plan(parse_plan(spec))).recommendation is not None


def test_a_shape_that_fails_several_gates_lists_them_all() -> None:
    spec = spec_of(ROOT / "examples/platform/phi-4-tensor-parallel.yaml")
    spec["constraints"] = {"gpuTypes": ["L4"], "tensorParallelSizes": [8], "gpusPerNode": {"L4": 4}}
    result = plan(resolve_plan(parse_plan(spec)))
    first = result.infeasible[0]
    assert first.gate == "parallelism" and "10 KV heads" in first.reason
    assert any(a.startswith("placement:") and "nodes have 4" in a for a in first.also)
    # A gate the shape passes is never listed: TP 4 fits a node of 8 L4s.
    spec["constraints"]["tensorParallelSizes"] = [4]
    spec["constraints"]["gpusPerNode"] = {"L4": 8}
    refused = plan(resolve_plan(parse_plan(spec))).infeasible
    assert refused and all(not a.startswith("placement:") for i in refused for a in i.also)


def test_tgi_caps_the_batch_and_queues_above_it() -> None:
    _, result = planned(ROOT / "examples" / "platform" / "tgi-mistral-7b.yaml")
    for c in shown(result):
        args = c.engine_args
        assert int(args[args.index("--max-batch-size") + 1]) == c.max_batch
        assert int(args[args.index("--max-concurrent-requests") + 1]) > c.max_batch


def test_a_batch_above_the_engines_cuda_graphs_says_its_steps_there_run_eagerly() -> None:
    # TGI captures graphs up to 32 sequences by default (--cuda-graphs): a candidate whose batch cap is above it is
    # told so, one at or below it is not.
    _, result = planned(ROOT / "examples" / "platform" / "tgi-mistral-7b.yaml")
    for c in shown(result):
        said = any("captures CUDA graphs" in note for note in c.engine_notes)
        assert said == (c.max_batch > 32), (c.max_batch, c.engine_notes)
    assert any(c.max_batch > 32 for c in shown(result))


def test_the_cuda_graphs_a_plan_prices_are_those_of_its_own_step_budget() -> None:
    # vLLM V1 captures graphs up to 512 sequences but none above max_num_batched_tokens: a plan that sets 256 gets
    # its steps over 256 priced eager, and its note says 256, as the engine it launches would run them.
    spec = spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml")
    spec["engine"] = {"name": "vllm", "maxNumBatchedTokens": 256}
    req = resolve_plan(parse_plan(spec))
    result = plan(req)
    above = [c for c in shown(result) if c.max_batch > 256]
    assert above, [c.max_batch for c in shown(result)]
    for c in above:
        assert any("above the 256 sequences vllm captures CUDA graphs for" in note for note in c.engine_notes)
        assert float(deployment_of(req, c).hardware.graph_max_batch) == 256


def test_tensorrt_llm_serves_fp8_from_a_modelopt_checkpoint() -> None:
    _, result = planned(ROOT / "examples" / "platform" / "trtllm-70b-fp8.yaml")
    fp8 = [c for c in shown(result) if c.precision == "fp8"]
    assert fp8 and all(c.checkpoint.startswith("nvidia/") and "FP8" in c.checkpoint for c in fp8)
    assert all("--quantization" not in c.engine_args for c in shown(result))
    assert all(c.provenance["engineVersion"] == "1.x" or c.provenance["engineVersion"].startswith("1")
               for c in shown(result))


def test_an_amd_only_cluster_gets_amd_answers() -> None:
    _, result = planned(ROOT / "examples" / "platform" / "amd-only-cluster.yaml")
    assert shown(result) and {c.gpu_type for c in shown(result)} == {"MI300X"}
    assert all("amd.com/gpu.product-name" in c.node_selector for c in shown(result))


def test_quantised_weights_come_from_a_repository_that_holds_them() -> None:
    spec = spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml")
    spec["model"] = {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": ["int4-awq", "bf16"]}
    result = plan(resolve_plan(parse_plan(spec)))
    for c in shown(result):
        if c.precision == "int4-awq":
            assert "awq" in c.checkpoint.lower() and "--quantization" not in c.engine_args
        else:
            assert c.checkpoint == "meta-llama/Llama-3.1-8B-Instruct"
    spec["model"] = {"name": "deepseek-ai/DeepSeek-V3", "precisions": ["int4-awq"]}
    spec["constraints"] = {"gpuTypes": ["H200-SXM-141GB"], "tensorParallelSizes": [8]}
    refused = plan(resolve_plan(parse_plan(spec)))
    assert refused.recommendation is None
    assert any(i.gate == "precision" and "no public int4-awq checkpoint" in i.reason for i in refused.infeasible)


def test_a_plan_may_name_the_quantised_repository_it_deploys() -> None:
    # What a team deploys is often a quantised repository (nvidia/DeepSeek-R1-FP4, Qwen/Qwen3-235B-A22B-FP8);
    # naming it had been "unknown model". It plans the architecture it holds, in its precision only, and loads it.
    spec = spec_of(ROOT / "examples/platform/deepseek-r1-nvfp4-b200.yaml")
    spec["model"] = {"name": "nvidia/DeepSeek-R1-FP4"}
    spec["engine"] = {"name": "tensorrt-llm"}
    spec["constraints"] = {"gpuTypes": ["NVIDIA-B200", "NVIDIA-H200"]}
    req = resolve_plan(parse_plan(spec))
    assert req.arch.is_mla and req.arch.mtp_layers == 1 and req.precisions == ("nvfp4",)
    result = plan(req)
    assert shown(result) and all(c.checkpoint == "nvidia/DeepSeek-R1-FP4" and c.precision == "nvfp4"
                                 and c.gpu_type == "B200" for c in shown(result))
    assert "nvidia/DeepSeek-R1-FP4" in result.recommendation.engine_args  # trtllm-serve's model argument
    # The H200 (Hopper) has no FP4 tensor cores: refused, not planned from another repository.
    assert any(i.gpu_type == "H200-SXM-141GB" and i.gate == "precision" and "nvfp4" in i.reason
               for i in result.infeasible)

    spec["model"] = {"name": "amd/Llama-3.1-70B-Instruct-FP8-KV"}
    spec["engine"] = {"name": "tensorrt-llm"}
    spec["constraints"] = {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"]}
    refused = plan(resolve_plan(parse_plan(spec)))
    assert refused.recommendation is None and any(
        "tensorrt-llm does not load quark-fp8 checkpoints such as amd/Llama-3.1-70B-Instruct-FP8-KV" in i.reason
        for i in refused.infeasible)

    spec["model"] = {"name": "Qwen/Qwen3-235B-A22B-FP8", "precisions": ["bf16"]}
    with pytest.raises(PlanError) as raised:
        resolve_plan(parse_plan(spec))
    assert raised.value.problems == [("model.precisions", "Qwen/Qwen3-235B-A22B-FP8 holds fp8 weights: list only "
                                                          "fp8, or leave model.precisions out")]
    spec["model"] = {"name": "Qwen/Qwen3-235B-A22B-FP9"}  # a name neither catalog has is still refused
    with pytest.raises(PlanError) as raised:
        parse_plan(spec)
    assert "unknown model 'Qwen/Qwen3-235B-A22B-FP9'" in str(raised.value)


def test_metas_fp8_405b_is_planned_with_the_16_bit_layers_it_keeps() -> None:
    # Meta's FP8 recipe quantises the feed-forward layers but the first and last (arXiv:2407.21783, 6.2): 56.7 GiB
    # of weights a GPU at TP 8, as dstack measured (56.77 GB, vLLM 0.6.3), where an all-linear FP8 repository of the
    # same model holds 47.7. A plan naming it had been given the KV pool of the smaller one.
    spec = spec_of(ROOT / "examples/platform/llama-405b-bf16-h100.yaml")
    spec["constraints"] = {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"], "tensorParallelSizes": [8]}
    weights = {}
    for name in ("meta-llama/Llama-3.1-405B-Instruct-FP8", "nvidia/Llama-3.1-405B-Instruct-FP8"):
        spec["model"] = {"name": name}
        req = resolve_plan(parse_plan(spec))
        result = plan(req)
        assert result.recommendation is not None and result.recommendation.checkpoint == name
        weights[name] = deployment_of(req, result.recommendation).memory.weights_per_gpu / GIB
        said = any("keeps its attention and its first and last layers 16-bit" in note
                   for note in result.recommendation.engine_notes)
        assert said == name.startswith("meta-llama/")  # the engine note says why the weights are larger
    assert weights["meta-llama/Llama-3.1-405B-Instruct-FP8"] == pytest.approx(56.77, rel=0.01)
    assert weights["nvidia/Llama-3.1-405B-Instruct-FP8"] == pytest.approx(47.74, rel=0.01)
    # vLLM loads it (fbgemm_fp8); SGLang's quantisation methods do not include it.
    spec["model"] = {"name": "meta-llama/Llama-3.1-405B-Instruct-FP8"}
    spec["engine"] = {"name": "sglang"}
    refused = plan(resolve_plan(parse_plan(spec)))
    assert refused.recommendation is None and any(
        "sglang does not load fbgemm-fp8 checkpoints such as meta-llama/Llama-3.1-405B-Instruct-FP8" in i.reason
        for i in refused.infeasible)


@pytest.mark.parametrize(("engine", "too_old", "first"), [("vllm", "0.6.3", "0.9.0"), ("vllm", "0.8.5", "0.9.0"),
                                                          ("sglang", "0.4.6.post5", "0.4.7")])
def test_a_release_without_blackwell_kernels_is_not_planned_on_blackwell(engine: str, too_old: str,
                                                                          first: str) -> None:
    # vLLM before 0.9.0 and SGLang before 0.4.7 run on torch < 2.7, which has no Blackwell (sm_100) kernels: a plan
    # pinning one had been given B200 replicas that would not start.
    spec = spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml")
    spec["engine"] = {"name": engine, "version": too_old}
    spec["constraints"] = {"gpuTypes": ["NVIDIA-B200", "NVIDIA-H100-80GB-HBM3"]}
    result = plan(resolve_plan(parse_plan(spec)))
    assert shown(result) and all(c.gpu_type != "B200" for c in shown(result))
    assert any(i.gpu_type == "B200" and i.gate == "precision" and i.reason.startswith(
        f"{engine} {too_old} has no CUDA build for blackwell GPUs (B200): the first release that runs on them is "
        f"{first}") for i in result.infeasible)
    spec["engine"] = {"name": engine, "version": first}
    spec["constraints"] = {"gpuTypes": ["NVIDIA-B200"]}
    assert plan(resolve_plan(parse_plan(spec))).recommendation.gpu_type == "B200"


@pytest.mark.parametrize(("engine", "older", "first", "shape"), [
    ("sglang", "0.4.4", "0.4.5", "expert parallel"),         # DeepEP's switch (--enable-deepep-moe)
    ("sglang", "0.4.6.post1", "0.4.6.post2", "pipeline"),   # --pp-size
    ("sglang", "0.4.5", "0.4.6", "disaggregated"),          # --disaggregation-transfer-backend nixl
    ("vllm", "0.8.5", "0.9.0", "disaggregated"),            # --kv-transfer-config's NixlConnector
])
def test_a_shape_is_planned_only_on_releases_that_take_its_flags(engine: str, older: str, first: str,
                                                                 shape: str) -> None:
    # The pinned parser of a version line is its newest release's; a plan pinning an older release of the line had
    # been given flags that release lacks (read in the sdists: `engine_args.FLAG_SINCE`).
    spec = spec_of(ROOT / "examples/platform/deepseek-r1-shapes.yaml")
    spec["constraints"] = {"gpuTypes": ["H200-SXM-141GB"], "maxNodesPerReplica": 2}

    def possible(version: str) -> bool:
        spec["engine"] = {"name": engine, "version": version}
        req = resolve_plan(parse_plan(spec))
        if shape == "expert parallel":
            return expert_parallel_possible(req)
        if shape == "pipeline":
            return pipeline_possible(req)
        return disaggregation_args(engine, version, "prefill") is not None

    assert not possible(older) and possible(first)


def test_a_plan_beyond_any_autoscaler_says_so() -> None:
    # 500,000 requests/s of a 70B model: hundreds of thousands of GPUs. The answer is printed, with a warning
    # that no maxReplicas or autoscaler reaches it (it was "Feasible" without a word).
    req = resolve_plan(parse_plan({
        "model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "engine": {"name": "vllm"},
        "workload": {"requestsPerSecond": "500000", "promptTokens": {"mean": 2000}, "outputTokens": {"mean": 500}},
        "slo": {"tpot": {"maxMs": 50, "percentile": "p95"}}, "constraints": {"gpuTypes": ["H100-SXM5-80GB"]}}))
    rec = plan(req).recommendation
    assert rec is not None and rec.replicas > 10_000
    assert any("more than the 10,000" in w and "requestsPerSecond" in w for w in rec.warnings)
    small = resolve_plan(parse_plan({**spec_of(ROOT / "examples/platform/chat-8b-open-gpus.yaml")}))
    assert not any("more than the 10,000" in w for c in shown(plan(small)) for w in c.warnings)


# Infeasible answers that help (issue 36, points 4 and 8): suggestions that change the precision, TP or context,
# suggestions where verification drops every candidate, nearest misses nearest first, rows that say their layout.

LLAMA_70B_ON_ONE_H100 = {
    "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16"]}, "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "2", "promptTokens": {"mean": 1000}, "outputTokens": {"mean": 200}},
    "slo": {"tpot": {"maxMs": 100, "percentile": "p95"}},
    "constraints": {"gpuTypes": ["H100"], "tensorParallelSizes": [1]}}


def _suggestion(result: PlanResult, kind: str) -> str:
    found = [s for s in result.suggestions if s.startswith(f"{kind}: ")]
    assert found, result.suggestions
    return found[0]


def test_a_suggestion_changes_the_precision_and_names_the_checkpoint_it_loads() -> None:
    # 70B in bf16 fills no single H100 (131 GiB of weights); the plan lists bf16 only: FP8 holds it.
    result = plan(resolve_plan(parse_plan(copy.deepcopy(LLAMA_70B_ON_ONE_H100))))
    assert result.recommendation is None
    line = _suggestion(result, "precision")
    precision = line.split()[1]
    assert precision != "bf16" and "model.precisions" in line
    changed = copy.deepcopy(LLAMA_70B_ON_ONE_H100)
    changed["model"]["precisions"] = [precision]
    rec = plan(resolve_plan(parse_plan(changed))).recommendation
    assert rec is not None and rec.checkpoint in line and f"({precision})" in line


def test_a_suggestion_changes_the_tensor_parallel_size_beyond_the_plan_list() -> None:
    result = plan(resolve_plan(parse_plan(copy.deepcopy(LLAMA_70B_ON_ONE_H100))))
    line = _suggestion(result, "TP")
    tp = int(line.split()[1])
    assert tp > 1 and "tensorParallelSizes" in line
    changed = copy.deepcopy(LLAMA_70B_ON_ONE_H100)
    changed["constraints"]["tensorParallelSizes"] = [tp]
    rec = plan(resolve_plan(parse_plan(changed))).recommendation
    assert rec is not None and rec.gpus_per_replica == tp and f"{rec.replicas} x {tp} " in line


def _llama_8b_on_one_l4(max_model_len: int, rate: str) -> dict[str, Any]:
    return {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": ["bf16"]},
            "engine": {"name": "vllm", "maxModelLen": max_model_len},
            "workload": {"requestsPerSecond": rate, "promptTokens": {"mean": 1000}, "outputTokens": {"mean": 200}},
            "slo": {"tpot": {"maxMs": 100, "percentile": "p95"}},
            "constraints": {"gpuTypes": ["L4"], "tensorParallelSizes": [1]}}


def test_a_context_the_kv_cache_cannot_hold_gets_a_shorter_one() -> None:
    # maxModelLen 131072 on one L4: the KV cache holds fewer tokens than one sequence; 1,200-token requests
    # need far less.
    spec = _llama_8b_on_one_l4(131072, "1")
    result = plan(resolve_plan(parse_plan(copy.deepcopy(spec))))
    assert result.recommendation is None
    line = _suggestion(result, "context")
    length = int(line.split("maxModelLen ")[1].split()[0])
    assert length < 131072 and "(now 131072" in line
    spec["engine"]["maxModelLen"] = length
    assert plan(resolve_plan(parse_plan(spec))).recommendation is not None


def test_a_kv_cache_too_small_for_the_context_gets_an_fp8_one() -> None:
    # 65536 tokens of maxModelLen on one L4 next to 16-bit Llama-3.1-8B: a 16-bit KV cache holds fewer tokens than one
    # sequence, an FP8 one (half the bytes a token) holds it.
    spec = _llama_8b_on_one_l4(65536, "0.5")
    result = plan(resolve_plan(parse_plan(copy.deepcopy(spec))))
    assert result.recommendation is None
    line = _suggestion(result, "KV cache")
    assert line.startswith("KV cache: fp8 (model.kvCacheDtypes, now auto) gives ")
    spec["model"]["kvCacheDtypes"] = ["fp8"]
    rec = plan(resolve_plan(parse_plan(spec))).recommendation
    assert rec is not None and rec.kv_cache_dtype == "fp8" and f"{rec.replicas} x " in line


def test_a_plan_verification_leaves_empty_gets_suggestions_that_pass_the_simulator() -> None:
    # The analytic search finds 14 x 8 H100 within maxReplicas 14; the simulator finds its E2E p95 over the target
    # at every replica count the limit allows. The answer was "no deployment" with no suggestion at all.
    # Routed at random, as its Service spreads requests, agent traffic (CV^2 8) stays bursty at every replica
    # (1 + 7 / n): no replica count verification reaches passes (until 2026-12-07, routed round robin, maxReplicas 18
    # did): another GPU type is suggested, and passes the simulator.
    _, result = planned(BURSTY_72B)
    assert result.recommendation is None and any(i.gate == "verify" for i in result.infeasible)
    line = _suggestion(result, "GPU type")
    spec = spec_of(BURSTY_72B)
    del spec["constraints"]["gpuTypes"]
    rec = plan_answer(resolve_plan(parse_plan(spec))).recommendation
    assert rec is not None and rec.provenance["predicted"] == "simulated" and rec.gpu_type in line


def test_an_slo_suggestion_names_a_target_that_gives_the_deployment_it_names() -> None:
    # The suggestion named the value a candidate reached at a looser target (TPOT p99 <= 118 ms), not a target the
    # plan was answered at: replanned at 118 ms there was no recommendation. Applied, it gives what it says.
    _, result = planned(BURSTY_72B)
    line = _suggestion(result, "SLO")
    match = re.match(r"SLO: TPOT p99 <= (\d+) ms \(now 50\) gives (\d+) x (\d+) ", line)
    assert match, line
    spec = spec_of(BURSTY_72B)
    spec["slo"]["tpot"]["maxMs"] = int(match.group(1))
    rec = plan_answer(resolve_plan(parse_plan(spec))).recommendation
    assert rec is not None, line
    assert (rec.replicas, rec.gpus_per_replica) == (int(match.group(2)), int(match.group(3)))


def test_nearest_infeasible_candidates_are_the_nearest_to_their_targets_first() -> None:
    # Llama-3.1-8B at a 3 ms TPOT: every shape misses at light load. The cheapest (one GPU) misses by the most.
    spec = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"name": "vllm"},
            "workload": {"requestsPerSecond": "5", "promptTokens": {"mean": 1000}, "outputTokens": {"mean": 200}},
            "slo": {"tpot": {"maxMs": 3, "percentile": "p95"}}, "constraints": {"gpuTypes": ["H100"]}}
    result = plan(resolve_plan(parse_plan(spec)))
    slow = [float(i.reason.split(" is ")[1].split(" ms")[0]) for i in result.infeasible if i.gate == "slo"]
    assert len(slow) >= 2 and slow == sorted(slow)
    assert result.infeasible[0].gpus_per_replica > 1


def test_nearest_infeasible_rows_never_read_alike() -> None:
    # DeepSeek-R1 on H100 at an 8 ms TPOT: TP 16 with and without data-parallel attention (and EP), two pipeline
    # stages of 8; each row says which, so no two print the same words with different numbers.
    spec = spec_of(ROOT / "examples/platform/deepseek-r1-shapes.yaml")
    spec["slo"]["tpot"]["maxMs"] = 8
    spec["constraints"].update(gpuTypes=["H100"], shapes=["aggregated"])
    req = resolve_plan(parse_plan(spec))
    result = plan(req)
    assert result.recommendation is None
    assert any(i.data_parallel_attention for i in result.infeasible)
    assert any(not i.data_parallel_attention and i.gpus_per_replica == 16 for i in result.infeasible)
    printed = format_plan(result, req).split("Nearest infeasible candidates:\n")[1].split("\n\n")[0].splitlines()
    rows = [line for line in printed if line.startswith("  [")]
    assert len(rows) == len(result.infeasible) >= 3
    words = [re.sub(r"[0-9.]+", "#", line) for line in rows]
    assert len(words) == len(set(words)), rows


def test_a_plan_without_a_version_is_priced_as_the_release_it_renders() -> None:
    # An SGLang plan that named no engine.version renders the pinned 0.5.2 (lmsysorg/sglang:v0.5.2), which captures
    # CUDA graphs up to 160 sequences on an H100, but its decode steps were priced with 0.5.3's 256: at max batch
    # 256 the steps over 160 ran eagerly, unpriced and unmentioned, and the plan differed from one naming 0.5.2.
    spec = spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml")
    spec["constraints"] = {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"]}
    answers = []
    for version in (None, DEFAULT_VERSIONS["sglang"]):
        spec["engine"] = {"name": "sglang", **({"version": version} if version else {})}
        rec = plan(resolve_plan(parse_plan(spec))).recommendation
        assert rec is not None
        answers.append((rec.replicas, rec.max_batch, rec.predicted, rec.engine_args, rec.engine_notes))
    assert answers[0] == answers[1]
    assert all("160 sequences sglang captures" in note for note in answers[0][4] if "CUDA graphs" in note)


@pytest.mark.parametrize(("engine", "version", "first"), [("vllm", "0.5.4", "0.6"), ("vllm", "v0.4.3", "0.6"),
                                                          ("sglang", "0.3.6", "0.4"), ("tgi", "1.4.5", "2.0")])
def test_a_release_older_than_any_planned_is_refused(engine: str, version: str, first: str) -> None:
    # vLLM 0.5.4 had been planned with 0.6.3's V0 flags and SGLang 0.2 with 0.4.6's, without a word: releases whose
    # flags and defaults were never read (TGI 1.x names --max-input-tokens --max-input-length).
    spec = spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml")
    spec["engine"] = {"name": engine, "version": version}
    with pytest.raises(PlanError) as raised:
        resolve_plan(parse_plan(spec))
    assert raised.value.problems == [("engine.version", (
        f"{engine} {version} is older than the releases inferplan plans ({engine} {first} to "
        f"{RELEASES_READ[engine][1]}): its defaults and flags were not read, and the launch is written for {engine} "
        f"{first} and later; plan {first} or later (engine.version)"))]
    spec["engine"] = {"name": engine, "version": f"{first}.0"}
    resolve_plan(parse_plan(spec))


@pytest.mark.parametrize(("engine", "version", "newest"), [("vllm", "0.12.0", "0.11.2"), ("sglang", "0.6.0", "0.5.10"),
                                                           ("tensorrt-llm", "1.1.0", "1.0.0")])
def test_a_release_newer_than_any_read_is_planned_with_a_warning(engine: str, version: str, newest: str) -> None:
    # vLLM 0.12.0 had been planned as 0.11.2 with nothing saying its flags and defaults were never read.
    spec = spec_of(ROOT / "examples/plans/chat-assistant-8b.yaml")
    spec["engine"] = {"name": engine, "version": version}
    spec["constraints"] = {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"]}
    result = plan(resolve_plan(parse_plan(spec)))
    assert result.recommendation is not None
    assert any(w.startswith(f"{engine} {version} is newer than any release inferplan has read (the newest is "
                            f"{newest}): it is planned as {newest} behaves") for w in result.warnings)
    for known in (newest, f"{newest}rc1"):
        spec["engine"] = {"name": engine, "version": known}
        assert not any("newer than any release" in w for w in plan(resolve_plan(parse_plan(spec))).warnings)


def test_fp8_quantised_at_load_needs_the_16_bit_weights_in_memory_while_loading() -> None:
    # vLLM and SGLang create a 16-bit repository's layers in 16 bits, load every weight and only then cast them to
    # FP8: qwen3-235b-mi355x.yaml had shown 10 x MI355X at TP 1 in FP8, whose 438 GiB of bf16 weights one 288 GB
    # MI355X cannot hold while loading. TP 2 (219 GiB a GPU) loads.
    spec = spec_of(ROOT / "examples/platform/qwen3-235b-mi355x.yaml")
    spec["verify"] = False
    result = plan(resolve_plan(parse_plan(spec)))
    assert shown(result) and all(c.gpus_per_replica > 1 for c in shown(result) if c.precision == "fp8")
    assert any(i.gate == "memory" and i.gpus_per_replica == 1 and "while loading" in i.reason
               for i in result.infeasible)


def test_the_mi355x_example_says_what_it_plans() -> None:
    # Its comment had offered "FP8 or AMD Quark's MXFP4"; no MXFP4 repository of the 2507 model is known, so the
    # plan is FP8 quantised at load, and the comment says so.
    path = ROOT / "examples/platform/qwen3-235b-mi355x.yaml"
    header = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    spec = spec_of(path)
    spec["verify"] = False
    result = plan(resolve_plan(parse_plan(spec)))
    assert result.recommendation is not None and result.recommendation.precision == "fp8"
    assert result.recommendation.provenance["checkpoint"] == "online"
    assert any(i.gate == "precision" and "no public mxfp4-w4a4 checkpoint" in i.reason for i in result.infeasible)
    assert "quantises at load" in header and "mxfp4-w4a4 is refused" in header
