"""Disaggregated against aggregated serving in the settings of two published studies (prints a table; asserts
nothing).

Usage (from the repository root):

    python bench/disaggregation_published.py [--rate R] [--sweep-only] [--analytic]

For each setting the planner plans the same traffic three ways: aggregated replicas as today's vLLM runs them
(chunked prefill, decode and prompt chunks sharing each step), aggregated replicas as the 2023 vLLM the studies
compared against ran them (chunked prefill off: a prompt's prefill is a step of its own, and the decodes wait),
and disaggregated prefill and decode pools. It prints the GPUs and cost each needs at the rate, and the ratio
of GPUs: at a fixed rate, the aggregated GPUs over the disaggregated ones is the disaggregated deployment's
gain in requests per GPU within the targets (goodput per GPU, DistServe's measure), up to the rounding of
replicas. `minReplicas` is 1 and the rate high, so that rounding and the availability floor do not decide it.
Each answer is `inferplan plan`'s: the shown candidates verified in the simulator (`--analytic`: the closed form
alone, as with `verify: false`).

Then it sweeps the tightness of the decode target in the setting of DistServe's Figure 1 (a 13B model on one
A100 per replica, prompts of 512 tokens and outputs of 64, TTFT p90 <= 0.4 s, TPOT p90 from 1.1 to 2 times
the planner's TPOT of one request alone, and the figure's 40 ms), against the same aggregated baseline with
whole-prompt steps, at 40 requests/s, one GPU per replica (tensorParallelSizes [1], as in the figure).

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

from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.performance import build_hardware
from inferplan.planner.model.serving import single_stream
from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.results import Candidate
from inferplan.planner.simulation.verification import planned
from inferplan.planner.spec_parsing import parse_plan

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


def spec_of(setting: dict[str, Any], rate: float, shapes: list[str], chunked: bool, verify: bool = True
            ) -> dict[str, Any]:
    spec = copy.deepcopy({key: value for key, value in setting.items() if key != "rate"})
    spec["engine"] = {"name": "vllm", "chunkedPrefill": chunked}
    spec["workload"]["requestsPerSecond"] = f"{rate:g}"
    spec["constraints"].update({"shapes": shapes, "minReplicas": 1, "maxNodesPerReplica": 1})
    spec["verify"] = verify
    return spec


def recommended(spec: dict[str, Any]) -> Candidate | None:
    """The recommendation `inferplan plan` gives for `spec`: verified in the simulator unless it says otherwise."""
    return planned(resolve_plan(parse_plan(spec))).recommendation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=None, help="requests/s for every setting (default: each's)")
    parser.add_argument("--sweep-only", action="store_true", help="only the tightness sweep of DistServe's Figure 1")
    parser.add_argument("--analytic", action="store_true", help="the closed form alone, no verification")
    args = parser.parse_args()
    verify = not args.analytic
    print("answers verified in the simulator" if verify else "answers from the closed form alone (not verified)")
    if args.sweep_only:
        sweep(verify=verify)
        return
    print(f"{'setting':24} {'deployment':44} {'GPUs':>5} {'$/h':>8}  shape")
    for name, setting in SETTINGS.items():
        rate = args.rate or setting["rate"]
        gpus = {}
        for label, shapes, chunked in WAYS:
            rec = recommended(spec_of(setting, rate, shapes, chunked, verify))
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
    print()
    sweep(verify=verify)


FIGURE_1: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-2-13b-hf", "precisions": ["fp16"]},
    "workload": {"promptTokens": {"mean": 512, "p95": 512}, "outputTokens": {"mean": 64, "p95": 64}},
    "constraints": {"gpuTypes": ["A100-SXM4-80GB"], "tensorParallelSizes": [1]},
}
TIGHTNESS = (1.1, 1.2, 1.25, 1.3, 1.4, 1.5, 1.75, 2.0)
PAPER_TPOT_MS = 40  # the figure's own TPOT target (and 0.4 s for TTFT)


def sweep(rate: float = 40.0, verify: bool = True) -> None:
    """DistServe's Figure 1 setting with its TTFT target and TPOT targets of TIGHTNESS x the TPOT of a request alone:
    the GPUs of the aggregated (whole-prompt steps) and the disaggregated recommendations, and their ratio."""
    request = resolve_plan(parse_plan(spec_of({**FIGURE_1, "slo": {"ttft": {"maxMs": 400, "percentile": "p90"}}},
                                              rate, ["aggregated"], False)))
    alone = single_request_tpot_ms(request)
    print(f"DistServe Figure 1 setting at {rate:g} requests/s: TTFT p90 <= 400 ms; a request alone has TPOT "
          f"{alone:.1f} ms")
    print(f"{'TPOT p90 target':>16} {'x alone':>8} {'aggregated':>11} {'disaggregated':>14} {'gain':>6}")
    for target in sorted({*(round(t * alone) for t in TIGHTNESS), PAPER_TPOT_MS}):
        setting = {**FIGURE_1, "slo": {"ttft": {"maxMs": 400, "percentile": "p90"},
                                       "tpot": {"maxMs": target, "percentile": "p90"}}}
        gpus = []
        for shapes, chunked in ((["aggregated"], False), (["disaggregated"], True)):
            rec = recommended(spec_of(setting, rate, shapes, chunked, verify))
            gpus.append(rec.gpus if rec is not None else None)
        gain = f"{gpus[0] / gpus[1]:.2f}x" if None not in gpus else "-"
        paper = "  (the paper's target)" if target == PAPER_TPOT_MS else ""
        print(f"{target:>13} ms {target / alone:>8.2f} {gpus[0] or '-':>11} {gpus[1] or '-':>14} {gain:>6}{paper}")


def single_request_tpot_ms(request: PlanRequest) -> float:
    """The TPOT of one request alone on the plan's only deployment (one GPU type, TP 1) [ms]: the unloaded
    latency the sweep's targets are multiples of, as Splitwise states its targets (slowdowns)."""
    assert request.gpu_types, "the setting names its GPU type"
    gpu = resolve_gpu(request.gpu_types[0])
    factors = load_factors()
    hw = build_hardware(request.arch, gpu, weight_precision(request.precisions[0]), 2.0, ENGINES[request.engine],
                        factors.engine_on(request.engine, gpu.key, gpu.vendor), 1)
    return float(single_stream(hw, request.prompt_mean, request.output_mean).tpot_mean) * 1e3


if __name__ == "__main__":
    main()
