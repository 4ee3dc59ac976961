"""Analytic versus simulated latency tails across burstiness presets and utilisations (prints a table).

Usage (from the repository root):

    python bench/report_tails.py [--requests N] [--replicas R] [--prefill-only]

One deployment (Llama-3.1-8B, bf16, one H100 per replica, vLLM factors, max batch 256), chat-like lengths
(prompt mean 500 / CV 1, output mean 250 / CV 1). For each preset's arrival CV^2 and each utilisation
(0.5-0.9 of the analytic capacity), the table gives p95 and p99 of TTFT and end-to-end latency from the
analytic model (`serving.poisson`) and from the simulator (`simulate.simulate`, seed 0), and their ratio
(simulated / analytic: above 1, the analytic model was optimistic). The output is what docs/model.md shows.

`--prefill-only`: replicas that only prefill (one output token: a disaggregated prefill pool) of Llama-2-13B on an
A100 (the shipped vLLM factors), Poisson arrivals, prompts of 512 and 4,000 tokens mean at
CV 0, 0.5 and 1, at 0.3, 0.6 and 0.8 of one prompt per mean prefill time: TTFT p90 and p99, analytic and
simulated.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from inferplan.planner.catalog.engines import engine_profile
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.disaggregated import prefill_pool
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.performance import build_hardware
from inferplan.planner.model.serving import Traffic, poisson, poisson_capacity
from inferplan.planner.request import BURSTINESS_ARRIVAL_CV2
from inferplan.planner.simulation.simulate import generate_workload, simulate

PROMPT, OUTPUT, CV = 500.0, 250.0, 1.0
MAX_BATCH, KV_TOKENS, CHUNK = 256, 400_000, 2048.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--prefill-only", action="store_true", help="replicas that only prefill (see above)")
    args = parser.parse_args()
    if args.prefill_only:
        return prefill_only(args.requests)
    factors = load_factors()
    gpu = resolve_gpu("H100")
    hw = build_hardware(resolve_model("meta-llama/Llama-3.1-8B"), gpu, weight_precision("bf16"), 2.0,
                        engine_profile("vllm"), factors.engine("vllm"), 1)
    capacity = float(poisson_capacity(hw, Traffic(PROMPT, OUTPUT), MAX_BATCH, CHUNK))
    print(f"capacity per replica {capacity:.2f} requests/s; {args.requests} simulated requests per row, "
          f"{args.replicas} replica(s)")
    header = (f"{'preset':8s} {'CV^2':>5s} {'util':>5s} | {'TTFT p95 ana':>12s} {'sim':>8s} {'x':>5s} | "
              f"{'TTFT p99 ana':>12s} {'sim':>8s} {'x':>5s} | {'e2e p95 ana':>11s} {'sim':>8s} {'x':>5s} | "
              f"{'e2e p99 ana':>11s} {'sim':>8s} {'x':>5s}")
    print(header)
    print("-" * len(header))
    started = time.perf_counter()
    for preset, cv2 in BURSTINESS_ARRIVAL_CV2.items():
        for util in (0.5, 0.6, 0.7, 0.8, 0.9):
            rate = util * capacity
            traffic = Traffic(PROMPT, OUTPUT, CV, CV, cv2, num_prompts=args.requests)
            analytic = poisson(hw, rate, traffic, MAX_BATCH, CHUNK)
            workload = generate_workload(rate * args.replicas, args.requests, traffic, seed=0)
            sim = simulate(hw, workload, replicas=args.replicas, max_batch=MAX_BATCH, kv_tokens=KV_TOKENS,
                           chunk_tokens=CHUNK)
            cells = []
            for a, s in ((analytic.ttft_q[0.95], sim.ttft.p95_s), (analytic.ttft_q[0.99], sim.ttft.p99_s),
                         (analytic.e2e_q[0.95], sim.e2e.p95_s), (analytic.e2e_q[0.99], sim.e2e.p99_s)):
                a_ms, s_ms = float(np.squeeze(a)) * 1e3, s * 1e3
                cells.append(f"{a_ms:10.0f}ms {s_ms:6.0f}ms {s_ms / a_ms:5.2f}")
            print(f"{preset:8s} {cv2:5.2f} {util:5.1f} | " + " | ".join(cells))
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


def prefill_only(requests: int) -> int:
    """The prompt queue alone: analytic against simulated TTFT tails of replicas that only prefill."""
    factors = load_factors()
    gpu = resolve_gpu("NVIDIA-A100-SXM4-80GB")
    hw = build_hardware(resolve_model("meta-llama/Llama-2-13b-hf"), gpu, weight_precision("bf16"), 2.0,
                        engine_profile("vllm"), factors.engine("vllm"), 1)
    print(f"prefill only: Llama-2-13B bf16, one A100 per replica, Poisson; {requests} simulated requests per row")
    header = (f"{'prompt':>6s} {'CV':>4s} {'rho':>4s} | {'TTFT p90 ana':>12s} {'sim':>8s} {'x':>5s} | "
              f"{'TTFT p99 ana':>12s} {'sim':>8s} {'x':>5s}")
    print(header)
    print("-" * len(header))
    for prompt in (512.0, 4000.0):
        for cv in (0.0, 0.5, 1.0):
            model = prefill_pool(hw, 1.0, prompt, 128.0, CHUNK, cv, 1.0, 1.0, 400.0, 1024).model  # without the transfer
            model = replace(model, num_prompts=np.full_like(model.num_prompts, requests))
            for rho in (0.3, 0.6, 0.8):
                rate = rho / float(model.es)
                analytic = model.quantiles(rate, [("ttft", 0.9), ("ttft", 0.99)]).ravel()
                workload = generate_workload(rate, requests, Traffic(prompt, 1, prompt_cv=cv), seed=3)
                sim = simulate(hw, workload, max_batch=128, kv_tokens=400_000, chunk_tokens=CHUNK)
                cells = [f"{a * 1e3:10.0f}ms {s * 1e3:6.0f}ms {s / a:5.2f}"
                         for a, s in zip(analytic, (sim.ttft.p90_s, sim.ttft.p99_s), strict=True)]
                print(f"{prompt:6.0f} {cv:4.1f} {rho:4.1f} | " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
