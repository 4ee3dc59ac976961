"""Timing figures for the capacity search (prints a table; asserts nothing).

Usage (from the repository root):

    python bench/bench_plan.py [--plans N]

Figures:
  (a) one plan over the whole GPU catalog, TP 1/2/4/8, every weight precision vLLM serves, KV dtypes
      auto and fp8, every batch size: in-process `plan()`, 7 runs, min / median seconds, candidates;
  (b) N different plans (default 1,000): models from the catalog, rates, lengths and SLOs drawn from a
      seeded generator, default constraints (every catalog GPU, default precisions): total seconds;
  (c) `inferplan plan examples/plans/chat-assistant-8b.yaml` end to end as a subprocess, 5 runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from inferplan.planner.architectures import load_model_catalog
from inferplan.planner.engines import SERVED_PRECISIONS
from inferplan.planner.search import BATCH_SIZES, plan
from inferplan.planner.spec import parse_plan, resolve_plan

REPO = Path(__file__).resolve().parents[1]


def whole_catalog_plan() -> dict:
    return {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": list(SERVED_PRECISIONS["vllm"]),
                  "kvCacheDtypes": ["auto", "fp8"]},
        "engine": {"name": "vllm"},
        "workload": {"requestsPerSecond": "20", "promptTokens": {"mean": 500, "p95": 1500},
                     "outputTokens": {"mean": 250, "p95": 700}},
        "slo": {"ttft": {"maxMs": 500, "percentile": "p95"}, "tpot": {"maxMs": 50, "percentile": "p95"}},
        "constraints": {"tensorParallelSizes": [1, 2, 4, 8]},
    }


def random_plan(rng: random.Random, models: list[str]) -> dict:
    prompt = rng.choice([200, 500, 1000, 2000, 4000])
    output = rng.choice([100, 250, 500, 1000])
    slo = {"ttft": {"maxMs": rng.choice([300, 500, 1000, 3000]), "percentile": rng.choice(["p90", "p95", "p99"])}}
    if rng.random() < 0.7:
        slo["tpot"] = {"maxMs": rng.choice([30, 50, 80]), "percentile": "p95"}
    return {
        "model": {"name": rng.choice(models)},
        "engine": {"name": rng.choice(["vllm", "sglang", "tgi", "tensorrt-llm"])},
        "workload": {"requestsPerSecond": str(rng.choice([1, 2, 5, 10, 20, 50, 100])),
                     "promptTokens": {"mean": prompt, "p95": prompt * 3},
                     "outputTokens": {"mean": output, "p95": output * 2},
                     "burstiness": {"preset": rng.choice(["steady", "chatbot", "bursty"])}},
        "slo": slo,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=1000, help="plans for figure (b)")
    args = parser.parse_args()

    req = resolve_plan(parse_plan(whole_catalog_plan()))
    plan(req)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        result = plan(req)
        times.append(time.perf_counter() - start)
    shapes = len(req.tp_sizes) * len(req.precisions) * len(req.kv_dtypes) * 29
    print(f"(a) whole-catalog plan: {shapes} shapes x up to {len(BATCH_SIZES)} batch sizes; "
          f"min {min(times):.3f} s, median {statistics.median(times):.3f} s "
          f"(recommendation {result.recommendation.gpu_type if result.recommendation else None})")

    models = [m.repo_id for m in load_model_catalog() if m.param_count() < 200e9]
    rng = random.Random(7)
    plans = [resolve_plan(parse_plan(random_plan(rng, models))) for _ in range(args.plans)]
    start = time.perf_counter()
    feasible = sum(plan(p).recommendation is not None for p in plans)
    total = time.perf_counter() - start
    print(f"(b) {args.plans} different plans: {total:.1f} s in all, {total / args.plans * 1e3:.0f} ms each; "
          f"{feasible} feasible")

    exe = Path(sys.executable).with_name("inferplan")
    example = REPO / "examples" / "plans" / "chat-assistant-8b.yaml"
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([str(exe), "plan", str(example)], check=True, capture_output=True)
        runs.append(time.perf_counter() - start)
    print(f"(c) inferplan plan (end to end): min {min(runs):.2f} s, median {statistics.median(runs):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
