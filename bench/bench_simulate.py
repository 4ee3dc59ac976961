"""Speed and memory of the discrete-event simulator (prints figures; asserts nothing).

Usage (from the repository root):

    python bench/bench_simulate.py [--requests N] [--runs R]
    python bench/bench_simulate.py --spread SEEDS

Llama-3-8B in bf16 on H100 (vLLM factors), 8 replicas, max_batch 256, 8192-token step budget,
prompts 1000 / outputs 250 tokens (lognormal, CV 1), Poisson arrivals at 80% of the analytic capacity
(`serving.poisson_capacity` x replicas). For each router: R runs, min / median wall seconds, simulated
requests per second of wall time (from the fastest run) and the CPU seconds of that run (on a shared
machine the wall time includes waiting for a core), with the simulated utilisation and preemptions.

Memory (Linux): how far the resident memory of a fresh process rises above its level before the call
while it simulates N/4, N/2 and N requests with round robin, and the growth per added request. The
simulator keeps Python objects only for the requests in flight plus one chunk; what grows with N is its
numpy results and their temporaries (about a dozen 8-byte values per request).

`--spread SEEDS`: the closed-form checks of tests/planner/simulation/test_simulate.py (mean waits of M/M/1, M/D/1,
M/M/4 and of the engine simulator as M/D/1 and M/G/1, 100k requests each) over that many seeds: mean, standard
deviation and largest absolute value of the relative error, plain and with the control variate, which is
what justifies their 3% tolerance.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from inferplan.planner.catalog.engines import engine_profile
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.memory import kv_cache_tokens
from inferplan.planner.model.performance import Hardware, build_hardware
from inferplan.planner.model.serving import Traffic, poisson_capacity
from inferplan.planner.simulation.simulate import generate_workload, simulate

REPLICAS, MAX_BATCH, CHUNK, PROMPT, OUTPUT, LOAD = 8, 256, 8192, 1000, 250, 0.8


def deployment() -> tuple[Hardware, int, float]:
    """The replica's hardware, its KV tokens and the analytic capacity of the deployment [requests/s]."""
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    engine = engine_profile("vllm")
    hw = build_hardware(arch, resolve_gpu("NVIDIA-H100-80GB-HBM3"), weight_precision("bf16"), 2.0, engine,
                        load_factors().engine("vllm"))
    kv = int(kv_cache_tokens(40 * 2**30, arch.kv_bytes_per_token(2.0), 16))
    slots = min(MAX_BATCH, kv // (PROMPT + OUTPUT))
    return hw, kv, float(poisson_capacity(hw, Traffic(PROMPT, OUTPUT), slots, CHUNK)) * REPLICAS


def status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status [KiB]."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spread", type=int, metavar="SEEDS", help="scatter of the closed-form checks over seeds")
    parser.add_argument("--peak-rss", type=int, metavar="N", help=argparse.SUPPRESS)  # one memory measurement
    args = parser.parse_args()
    if args.spread:
        spread(args.spread)
        return
    hw, kv, capacity = deployment()
    rate = LOAD * capacity
    if args.peak_rss:
        workload = generate_workload(rate, args.peak_rss, Traffic(PROMPT, OUTPUT, 1.0, 1.0), seed=1)
        before = status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # restart the peak (VmHWM) from here
        simulate(hw, workload, replicas=REPLICAS, max_batch=MAX_BATCH, kv_tokens=kv, chunk_tokens=CHUNK)
        print((status_kib("VmHWM") - before) * 1024)
        return
    workload = generate_workload(rate, args.requests, Traffic(PROMPT, OUTPUT, 1.0, 1.0), seed=1)
    print(f"{args.requests} requests at {rate:.1f}/s ({LOAD:.0%} of analytic capacity {capacity:.1f}/s), "
          f"{REPLICAS} replicas, KV {kv} tokens each")
    for router in ("round_robin", "least_outstanding"):
        runs = []
        for _ in range(args.runs):
            wall, cpu = time.perf_counter(), time.process_time()
            result = simulate(hw, workload, replicas=REPLICAS, max_batch=MAX_BATCH, kv_tokens=kv,
                              chunk_tokens=CHUNK, router=router)
            runs.append((time.perf_counter() - wall, time.process_time() - cpu))
        best, best_cpu = min(runs)
        print(f"{router:18s} min {best:.2f} s  median {statistics.median(w for w, _ in runs):.2f} s  "
              f"{args.requests / best:,.0f} simulated requests/s  (cpu {best_cpu:.2f} s)  "
              f"utilisation {result.utilisation:.2f}  preemptions {result.preemptions}  "
              f"TTFT p50 {result.ttft.p50_s * 1e3:.0f} ms  TPOT p50 {result.tpot.p50_s * 1e3:.1f} ms")

    sizes = (args.requests // 4, args.requests // 2, args.requests)
    peaks = [int(subprocess.run([sys.executable, __file__, "--peak-rss", str(n)], check=True, capture_output=True,
                                text=True).stdout) for n in sizes]
    growth = (peaks[-1] - peaks[0]) / (sizes[-1] - sizes[0])
    cells = ", ".join(f"{p / 2**20:.1f} MiB at {n}" for n, p in zip(sizes, peaks, strict=True))
    print(f"peak memory added by simulate: {cells} requests; {growth:.0f} bytes per added request")


def spread(seeds: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checks live in the tests
    from tests.planner.simulation.test_simulate import engine_md1_case, engine_mg1_case, md1_case, mm1_case, mmc_case

    print(f"relative error of the mean wait over {seeds} seeds (100k requests each): mean, sd, max |error|")
    for case in (mm1_case, md1_case, mmc_case, engine_md1_case, engine_mg1_case):
        checks = [case(seed) for seed in range(seeds)]
        cells = []
        for label in ("raw", "controlled"):
            errors = np.array([getattr(check, label) for check in checks]) * 100
            cells.append(f"{label} {errors.mean():+.2f}% sd {errors.std(ddof=1):.2f}% max {np.abs(errors).max():.2f}%")
        print(f"{case.__doc__.split(';')[0]:64s} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
