"""Disaggregated against aggregated serving in the settings of two published studies (prints a table; asserts
nothing).

Usage (from the repository root):

    python bench/disaggregation_published.py [--rate R]

For each setting the planner plans the same traffic three ways: aggregated replicas as today's vLLM runs them
(chunked prefill, decode and prompt chunks sharing each step), aggregated replicas as the 2023 vLLM the studies
compared against ran them (chunked prefill off: a prompt's prefill is a step of its own, and the decodes wait),
and disaggregated prefill and decode pools. It prints the GPUs and cost each needs at the rate, and the ratio
of GPUs: at a fixed rate, the aggregated GPUs over the disaggregated ones is the disaggregated deployment's
gain in requests per GPU within the targets (goodput per GPU, DistServe's measure), up to the rounding of
replicas. `minReplicas` is 1 and the rate high, so that rounding and the availability floor do not decide it.

Settings (the models are the catalog's closest to the studies'; the studies' own figures are in
docs/planning.md#disaggregated-prefill-and-decode):
  distserve-chatbot: DistServe (OSDI 2024) chatbot on OPT-13B, A100 80GB, ShareGPT lengths, TTFT p90 <= 0.25 s
      and TPOT p90 <= 0.1 s (its Table 1 targets at 90% attainment). Llama-2-13B stands in for OPT-13B (the same
      40 layers of 5,120 with 40 attention heads).
  splitwise-coding, splitwise-conversation: Splitwise (ISCA 2024) traces on Llama-2-70B, H100 (and A100, which a
      pool may use, as Splitwise's H100 prompt / A100 token machines do): coding prompts
      1,500 tokens and outputs 13 (medians), conversation 1,020 and 129. Targets here: TTFT p99 <= 1 s, TPOT
      p99 <= 50 ms (Splitwise states its targets as slowdowns over an idle machine, not in milliseconds).
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

from inferplan.planner.search import plan
from inferplan.planner.spec import parse_plan, resolve_plan

SETTINGS: dict[str, dict[str, Any]] = {
    "distserve-chatbot": {
        "model": {"name": "meta-llama/Llama-2-13b-hf", "precisions": ["fp16"]},
        "workload": {"dataset": "sharegpt"},
        "slo": {"ttft": {"maxMs": 250, "percentile": "p90"}, "tpot": {"maxMs": 100, "percentile": "p90"}},
        "constraints": {"gpuTypes": ["A100-SXM4-80GB"]},
        "rate": 40.0,
    },
    "splitwise-coding": {
        "model": {"name": "meta-llama/Llama-2-70b-hf", "precisions": ["fp16"]},
        "workload": {"promptTokens": {"mean": 1500, "p95": 4000}, "outputTokens": {"mean": 13, "p95": 60}},
        "slo": {"ttft": {"maxMs": 1000, "percentile": "p99"}, "tpot": {"maxMs": 50, "percentile": "p99"}},
        "constraints": {"gpuTypes": ["H100-SXM5-80GB", "A100-SXM4-80GB"]},
        "rate": 20.0,
    },
    "splitwise-conversation": {
        "model": {"name": "meta-llama/Llama-2-70b-hf", "precisions": ["fp16"]},
        "workload": {"promptTokens": {"mean": 1020, "p95": 3000}, "outputTokens": {"mean": 129, "p95": 400}},
        "slo": {"ttft": {"maxMs": 1000, "percentile": "p99"}, "tpot": {"maxMs": 50, "percentile": "p99"}},
        "constraints": {"gpuTypes": ["H100-SXM5-80GB", "A100-SXM4-80GB"]},
        "rate": 20.0,
    },
}

WAYS = (("aggregated, chunked prefill (vLLM today)", ["aggregated"], True),
        ("aggregated, whole-prompt steps (vLLM 2023)", ["aggregated"], False),
        ("disaggregated", ["disaggregated"], True))


def spec_of(setting: dict[str, Any], rate: float, shapes: list[str], chunked: bool) -> dict[str, Any]:
    spec = copy.deepcopy({key: value for key, value in setting.items() if key != "rate"})
    spec["engine"] = {"name": "vllm", "chunkedPrefill": chunked}
    spec["workload"]["requestsPerSecond"] = f"{rate:g}"
    spec["constraints"].update({"shapes": shapes, "minReplicas": 1, "maxNodesPerReplica": 1})
    spec["verify"] = False
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=None, help="requests/s for every setting (default: each's)")
    args = parser.parse_args()
    print(f"{'setting':24} {'deployment':44} {'GPUs':>5} {'$/h':>8}  shape")
    for name, setting in SETTINGS.items():
        rate = args.rate or setting["rate"]
        gpus = {}
        for label, shapes, chunked in WAYS:
            result = plan(resolve_plan(parse_plan(spec_of(setting, rate, shapes, chunked))))
            rec = result.recommendation
            if rec is None:
                print(f"{name:24} {label:44} {'-':>5} {'-':>8}  none feasible")
                continue
            gpus[label] = rec.gpus
            pools = rec.pools() or (
                f"{rec.replicas} x {rec.gpus_per_replica} {rec.gpu_type}, batch {rec.max_batch}")
            print(f"{name:24} {label:44} {rec.gpus:>5} {rec.cost.dollars_per_hour:>8.2f}  {pools}")
        split = gpus.get("disaggregated")
        for label, _, _ in WAYS[:2]:
            if split and label in gpus:
                print(f"{name:24} {'  requests per GPU, disaggregated / ' + label.split(',')[1].strip():60}"
                      f" {gpus[label] / split:.2f}x")
    rates = ", ".join(f"{n} {s['rate']:g}/s" for n, s in SETTINGS.items())
    print(f"(rate per setting: {rates}; --rate overrides)")


if __name__ == "__main__":
    main()
