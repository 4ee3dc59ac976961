"""Timing figures for the capacity search (prints a table; asserts nothing).

Usage (from the repository root):

    python bench/bench_plan.py [--plans N]

Figures:
  (a) one plan over the whole GPU catalog, TP 1/2/4/8, every weight precision vLLM serves, KV dtypes
      auto and fp8, every batch size (`--shapes aggregated,disaggregated`: disaggregated pools too):
      in-process `plan()`, 15 runs, min / median seconds (and the median CPU time, which other processes on
      a shared machine inflate less), the recommendation;
  (b) N different plans (default 1,000): models from the catalog, rates, lengths and SLOs drawn from a
      seeded generator (draws the spec rejects are drawn again), default constraints (every catalog GPU,
      default precisions): total seconds (and CPU seconds);
  (c) `inferplan plan examples/plans/chat-assistant-8b.yaml` end to end as a process, --runs times (default
      20): min / median seconds and the median CPU time of the process, against the 0.25 s target. Twice: with
      the modules' bytecode compiled, as an install leaves it (pip compiles it; here it is cached under a
      temporary PYTHONPYCACHEPREFIX after one run), the figure the target is for; then as this environment
      runs the command (with PYTHONDONTWRITEBYTECODE=1 and an editable install, the package's modules are
      compiled from source on every run).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inferplan.planner.catalog.engines import SERVED_PRECISIONS
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.catalog.model_configs import load_model_catalog
from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.search.grid import BATCH_SIZES
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import PlanError, parse_plan

REPO = Path(__file__).resolve().parents[1]


def whole_catalog_plan(shapes: list[str] | None = None) -> dict:
    spec = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": list(SERVED_PRECISIONS["vllm"]),
                  "kvCacheDtypes": ["auto", "fp8"]},
        "engine": {"name": "vllm"},
        "workload": {"requestsPerSecond": "20", "promptTokens": {"mean": 500, "p95": 1500},
                     "outputTokens": {"mean": 250, "p95": 700}},
        "slo": {"ttft": {"maxMs": 500, "percentile": "p95"}, "tpot": {"maxMs": 50, "percentile": "p95"}},
        # Every GPU of the catalog, GeForce cards included (a plan's default leaves them out).
        "constraints": {"tensorParallelSizes": [1, 2, 4, 8], "gpuTypes": [g.key for g in load_gpu_catalog()]},
    }
    if shapes:
        spec["constraints"]["shapes"] = shapes
    return spec


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


def end_to_end(command: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (user + system, the process and its threads) of `runs` runs of `command`."""
    wall, cpu = [], []
    for _ in range(runs):
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall.append(time.perf_counter() - start)
        cpu.append(usage.ru_utime + usage.ru_stime)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} failed")
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=1000, help="plans for figure (b)")
    parser.add_argument("--runs", type=int, default=20, help="processes for figure (c)")
    parser.add_argument("--shapes", default=None,
                        help="constraints.shapes of figure (a), comma-separated (default: the plan's default, "
                             "aggregated); e.g. aggregated,disaggregated")
    args = parser.parse_args()

    req = resolve_plan(parse_plan(whole_catalog_plan(args.shapes.split(",") if args.shapes else None)))
    plan(req)
    times, cpu = [], []
    for _ in range(15):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = plan(req)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    shapes = len(req.tp_sizes) * len(req.precisions) * len(req.kv_dtypes) * len(req.gpu_types or ())
    # CPU time as well: on a shared machine the wall clock also counts the time other processes ran.
    chosen = result.recommendation.gpu_type if result.recommendation else None
    print(f"(a) whole-catalog plan ({', '.join(req.shapes)}): {shapes} shapes x up to {len(BATCH_SIZES)} batch sizes; "
          f"min {min(times):.3f} s, median {statistics.median(times):.3f} s "
          f"(CPU median {statistics.median(cpu):.3f} s; recommendation {chosen})")

    models = [m.repo_id for m in load_model_catalog() if m.param_count() < 200e9]
    rng = random.Random(7)
    plans: list[PlanRequest] = []
    while len(plans) < args.plans:
        try:
            plans.append(resolve_plan(parse_plan(random_plan(rng, models))))
        except PlanError:
            continue  # a draw the spec rejects (e.g. lengths beyond the model's context): draw again
    start, start_cpu = time.perf_counter(), time.process_time()
    feasible = sum(plan(p).recommendation is not None for p in plans)
    total, total_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    print(f"(b) {args.plans} different plans: {total:.1f} s in all, {total / args.plans * 1e3:.0f} ms each "
          f"(CPU {total_cpu:.1f} s); {feasible} feasible")

    exe = Path(sys.executable).with_name("inferplan")
    command = [str(exe), "plan", str(REPO / "examples" / "plans" / "chat-assistant-8b.yaml")]
    with tempfile.TemporaryDirectory() as cache:
        compiled = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        compiled["PYTHONPYCACHEPREFIX"] = cache
        subprocess.run(command, check=True, capture_output=True, env=compiled)  # compiles and caches the bytecode
        wall, cpu = end_to_end(command, args.runs, compiled)
    print(f"(c) inferplan plan (end to end, {args.runs} runs, bytecode compiled): min {min(wall):.3f} s, "
          f"median {statistics.median(wall):.3f} s (CPU median {statistics.median(cpu):.3f} s; target 0.25 s)")
    wall, cpu = end_to_end(command, args.runs, dict(os.environ))
    setting = "PYTHONDONTWRITEBYTECODE=1" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode as found"
    print(f"    as this environment runs it ({setting}): min {min(wall):.3f} s, median {statistics.median(wall):.3f} s "
          f"(CPU median {statistics.median(cpu):.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
