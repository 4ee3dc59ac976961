"""Plans the unit tests share: the base spec most of them start from, and the example plans (examples/) with
their analytic recommendations, planned once per session."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.results import Candidate, PlanResult
from inferplan.planner.search.plan import plan
from inferplan.planner.simulation.verification import planned as plan_answer
from inferplan.planner.spec_parsing import load_plan_file

REPO = Path(__file__).resolve().parents[2]

SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": ["bf16"]},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "10", "promptTokens": {"mean": 500, "p95": 1500},
                 "outputTokens": {"mean": 250, "p95": 700}},
    "slo": {"ttft": {"maxMs": 1000, "percentile": "p95"}, "tpot": {"maxMs": 100, "percentile": "p95"}},
}
"""Llama-3.1-8B-Instruct in bf16 on vLLM at 10 requests/s, TTFT p95 <= 1 s and TPOT p95 <= 100 ms."""


def spec(**constraints: Any) -> dict[str, Any]:
    """A fresh copy of SPEC, with `constraints` as its constraints when any are given."""
    data = copy.deepcopy(SPEC)
    if constraints:
        data["constraints"] = constraints
    return data


def example_spec(path: Path) -> dict[str, Any]:
    """The spec of an example plan (each is a whole InferenceCapacityPlan manifest), a fresh copy."""
    return yaml.safe_load(path.read_text())["spec"]


EXAMPLES = [REPO / "examples" / "plans" / "chat-assistant-8b.yaml",
            *sorted(p for p in (REPO / "examples" / "platform").glob("*.yaml")
                    if not p.stem.startswith("infeasible-"))]
"""The example plans that have a recommendation: the chat example first, then the platform set."""
OVER_NODES = {"llama-405b-bf16-h100"}  # the examples whose recommendation spans nodes (a LeaderWorkerSet)
# The examples whose recommendation is separate prefill and decode pools (SGLang's: two Deployments behind
# sglang-router, docs/deploy.md).
DISAGGREGATED = {"long-prompts-70b-shapes"}
IN_A_NODE = [p for p in EXAMPLES if p.stem not in OVER_NODES | DISAGGREGATED]


@functools.cache
def planned(path: Path) -> tuple[PlanRequest, Candidate]:
    """The example's request and its (analytic) recommendation, planned once per session."""
    request = resolve_plan(load_plan_file(path), path.parent)
    candidate = plan(request).recommendation
    assert candidate is not None, f"{path.name} has no recommendation"
    return request, candidate


@functools.cache
def verified(path: Path) -> tuple[PlanRequest, PlanResult]:
    """The example's request and what `inferplan plan FILE` answers for it (verified where the plan asks), planned
    once per session: the planner is deterministic, and several modules read the same examples' answers (tests
    only read them: do not change the objects returned)."""
    request = resolve_plan(load_plan_file(path), path.parent)
    return request, plan_answer(request)


LONG_PROMPTS_PD: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": ["bf16"]},
    "engine": {"name": "sglang"},
    "workload": {"requestsPerSecond": "4", "promptTokens": {"mean": 8000, "p95": 12000},
                 "outputTokens": {"mean": 300, "p95": 800}},
    "slo": {"ttft": {"maxMs": 2000, "percentile": "p95"}, "tpot": {"maxMs": 10, "percentile": "p95"}},
    "constraints": {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"], "shapes": ["disaggregated"]},
}
"""8,000-token prompts to an 8B model on SGLang, disaggregated pools only: a plan whose answer has two roles."""


@functools.cache
def disaggregated(engine: str = "sglang") -> tuple[PlanRequest, Candidate]:
    """LONG_PROMPTS_PD on `engine` and its (analytic) disaggregated recommendation."""
    from inferplan.planner.spec_parsing import parse_plan

    request = resolve_plan(parse_plan({**copy.deepcopy(LONG_PROMPTS_PD), "engine": {"name": engine}}))
    candidate = plan(request).recommendation
    assert candidate is not None and candidate.roles, "no disaggregated recommendation"
    return request, candidate


def over_two_nodes(path: Path) -> tuple[PlanRequest, Candidate]:
    """The example's recommendation stretched to two nodes' GPUs per replica (today's search keeps a replica in
    one node), with the tensor-parallel size in its arguments to match."""
    request, candidate = planned(path)
    per_node = request.gpus_per_node[candidate.gpu_type]
    tp = 2 * per_node
    args = list(candidate.engine_args)
    for flag in ("--tensor-parallel-size", "--tp-size"):
        if flag in args:
            args[args.index(flag) + 1] = str(tp)
    return request, candidate.model_copy(update={"gpus_per_replica": tp, "gpus": tp * candidate.replicas,
                                                 "engine_args": args})
