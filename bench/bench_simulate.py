"""Speed of the discrete-event simulator (prints figures; asserts nothing).

Usage (from the repository root):

    python bench/bench_simulate.py [--requests N]

Llama-3-8B in bf16 on H100 (vLLM factors), 8 replicas, max_batch 256, 8192-token step budget,
prompts 1000 / outputs 250 tokens (lognormal, CV 1), Poisson arrivals at 80% of the analytic capacity
(`serving.poisson_capacity` x replicas). For each router: 3 runs, min / median seconds and simulated
requests per second of wall time, with the simulated utilisation and preemptions.
"""

from __future__ import annotations

import argparse
import statistics
import time

from inferplan.planner.architectures import resolve_model
from inferplan.planner.engines import engine_profile
from inferplan.planner.factors import FamilyFactors, load_factors
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.memory import kv_cache_tokens
from inferplan.planner.performance import build_hardware
from inferplan.planner.precisions import weight_precision
from inferplan.planner.serving import poisson_capacity
from inferplan.planner.simulate import generate_workload, simulate

REPLICAS, MAX_BATCH, CHUNK, PROMPT, OUTPUT, LOAD = 8, 256, 8192, 1000, 250, 0.8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    args = parser.parse_args()
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    engine = engine_profile("vllm")
    hw = build_hardware(arch, resolve_gpu("NVIDIA-H100-80GB-HBM3"), weight_precision("bf16"), 2.0, engine,
                        load_factors().engine("vllm"), FamilyFactors())
    kv = int(kv_cache_tokens(40 * 2**30, arch.kv_bytes_per_token(2.0), 16))
    slots = min(MAX_BATCH, kv // (PROMPT + OUTPUT))
    capacity = float(poisson_capacity(hw, PROMPT, OUTPUT, slots, CHUNK)) * REPLICAS
    rate = LOAD * capacity
    workload = generate_workload(rate, args.requests, PROMPT, OUTPUT, 1.0, 1.0, seed=1)
    print(f"{args.requests} requests at {rate:.1f}/s ({LOAD:.0%} of analytic capacity {capacity:.1f}/s), "
          f"{REPLICAS} replicas, KV {kv} tokens each")
    for router in ("round_robin", "least_outstanding"):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            result = simulate(hw, workload, replicas=REPLICAS, max_batch=MAX_BATCH, kv_tokens=kv,
                              chunk_tokens=CHUNK, router=router)
            times.append(time.perf_counter() - start)
        best = min(times)
        print(f"{router:18s} min {best:.2f} s  median {statistics.median(times):.2f} s  "
              f"{args.requests / best:,.0f} simulated requests/s  utilisation {result.utilisation:.2f}  "
              f"preemptions {result.preemptions}  TTFT p50 {result.ttft.p50_s * 1e3:.0f} ms  "
              f"TPOT p50 {result.tpot.p50_s * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
