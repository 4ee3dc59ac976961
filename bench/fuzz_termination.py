"""Fuzz the planner for non-termination and pathological slowness (prints figures; asserts nothing).

Usage (from the repository root, one process; `timeout` around it as a backstop):

    python bench/fuzz_termination.py scenarios [--count N] [--seed S] [--limit-s 20] [--slow-s 5] [--heavy]
    python bench/fuzz_termination.py plans [--count N] [--seed S] [--limit-s 60] [--slow-s 10]
    python bench/fuzz_termination.py scenarios --replay FILE   # the lines of FILE (JSON Lines), e.g. a log's

`scenarios`: random but valid scenario lines (the format of ../shared/accuracy/SCENARIOS.md: engines and releases
from vLLM 0.6 to 0.11, SGLang 0.4/0.5, TensorRT-LLM 0.x/1.x, TGI, LMDeploy; every catalog GPU, small ones included;
every catalog model; gpu_memory_utilization 0.2-1.0, max_model_len 2k-128k, max_num_seqs 1-1024,
max_num_batched_tokens 16-65536, prompts of 1-100k tokens, outputs of 1-8k, fixed or a dataset's spread; single
streams, static batches, bursts of 1-5000, closed loops of 1-2048 clients, Poisson far above capacity, offline and
startup), each predicted alone by `predict_scenarios` (as `inferplan accuracy` does) under a wall-clock limit.
`plans`: random plans (bench_plan.py's draw widened: prompts CV up to 3, bursty and agent traffic, tiny
gpu_memory_utilization, small max_num_batched_tokens, short max_model_len) through `verification.planned`, as
`inferplan plan` runs them (verified in the simulator).

Prints one line per item over `--slow-s` seconds (SLOW), past `--limit-s` (HANG: interrupted by SIGALRM; only pure
Python loops can be interrupted, so a hang inside numpy runs to the outer `timeout`) or raising an exception other
than a clear refusal (ERROR), each with the item as one JSON line to replay; then the counts and the time
percentiles. A refusal (`Prediction.skipped`, a `PlanError`) is fine and counted apart.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import METRIC_UNITS, parse_scenario_line
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.catalog.model_configs import load_model_catalog
from inferplan.planner.request import resolve_plan
from inferplan.planner.simulation.verification import planned
from inferplan.planner.spec_parsing import PlanError, parse_plan

ENGINE_VERSIONS = {
    "vllm": ["0.6.3", "0.6.6", "0.8.5", "0.10.1.1", "0.11.0", None],
    "sglang": ["0.4.6", "0.5.2", None],
    "tensorrt-llm": ["0.17.0", "1.0.0", None],
    "tgi": ["2.4.0", "3.1.0", None],
    "lmdeploy": ["0.7.2", None],
}
SMALL_GPUS = ["NVIDIA-L4", "NVIDIA-A10G", "NVIDIA-GeForce-RTX-3090", "Tesla-T4", "NVIDIA-GeForce-RTX-4090"]
TIMED_METRICS = ["ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_p99", "itl_ms_mean",
                 "e2e_ms_mean", "output_tps_total", "requests_per_s"]
SMALL_MODELS = ["Qwen/Qwen2.5-0.5B", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B",
                "openai/gpt-oss-20b", "Qwen/Qwen3-30B-A3B"]
BIG_GPUS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200", "NVIDIA-B200", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"]
STARTUP_METRICS = ["kv_cache_tokens", "max_concurrency", "weights_gib", "kv_cache_gib", "activation_peak_gib"]


class _Hang(BaseException):
    """Raised by SIGALRM: not an Exception, so no `except Exception` in the planner swallows it."""


def _log_uniform(rng: random.Random, low: float, high: float) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def random_scenario(rng: random.Random, index: int, models: list[str], gpus: list[str],
                    heavy: bool = False) -> dict[str, Any]:
    """One valid line of the scenario format (all 29 keys), drawn to reach the simulator's corners; `heavy`: a
    served load of many requests of a small model on a big GPU, so that nearly every line is simulated at length."""
    if heavy:
        line = random_scenario(rng, index, SMALL_MODELS, gpus)
        load = rng.choice([{"kind": "burst", "value": _log_uniform(rng, 500, 5000)},
                           {"kind": "concurrency", "value": _log_uniform(rng, 64, 2048)},
                           {"kind": "poisson", "rate": round(rng.uniform(1, 2000), 2),
                            "num_prompts": _log_uniform(rng, 500, 5000)},
                           {"kind": "offline", "num_prompts": rng.choice([None, _log_uniform(rng, 500, 5000)])}])
        metric = rng.choice(TIMED_METRICS)
        return {**line, "gpu": rng.choice(BIG_GPUS), "tensor_parallel": 1, "pipeline_parallel": 1,
                "replicas": 1, "gpus": 1, "weights": "bf16", "load": load, "metric": metric,
                "unit": METRIC_UNITS[metric], "includes_prefill": None,
                "engine": (engine := rng.choice(["vllm", "vllm", "sglang", "tensorrt-llm", "tgi", "lmdeploy"])),
                "engine_version": rng.choice(ENGINE_VERSIONS[engine]),
                "max_model_len": rng.choice([None, 131072]),
                "max_num_batched_tokens": rng.choice([None, 16, 64, 256, _log_uniform(rng, 16, 65536)])}
    engine = rng.choice(list(ENGINE_VERSIONS))
    version = rng.choice(ENGINE_VERSIONS[engine])
    model = rng.choice(models)
    gpu = rng.choice(SMALL_GPUS) if rng.random() < 0.35 else rng.choice(gpus)
    tp = rng.choice([1, 1, 1, 2, 4, 8])
    pp = 1 if rng.random() < 0.9 else 2
    replicas = rng.choice([1, 1, 1, 2, 4])
    weights = "mxfp4" if "gpt-oss" in model and rng.random() < 0.7 else \
        rng.choice(["bf16", "bf16", "fp16", "fp8", "int4-awq", "int8-w8a8"])
    prompt = 0 if rng.random() < 0.03 else _log_uniform(rng, 1, 100_000)
    output = _log_uniform(rng, 1, 8192)
    dataset = rng.choice([None, None, None, "sharegpt", "openorca"])
    roll = rng.random()
    if roll < 0.08:
        load: dict[str, Any] = {"kind": "single"}
    elif roll < 0.15:
        load = {"kind": "static_batch", "value": _log_uniform(rng, 1, 512)}
    elif roll < 0.40:
        load = {"kind": "burst", "value": _log_uniform(rng, 1, 5000)}
    elif roll < 0.62:
        load = {"kind": "concurrency", "value": _log_uniform(rng, 1, 2048)}
    elif roll < 0.82:
        load = {"kind": "poisson", "rate": round(math.exp(rng.uniform(math.log(0.05), math.log(2000))), 3),
                "num_prompts": rng.choice([None, _log_uniform(rng, 1, 5000)])}
    elif roll < 0.93:
        load = {"kind": "offline", "num_prompts": rng.choice([None, _log_uniform(rng, 1, 5000)])}
    else:
        load = {"kind": "startup"}
    if load["kind"] == "startup":
        metric = rng.choice(STARTUP_METRICS)
    elif load["kind"] == "single" or rng.random() < 0.05:
        metric = rng.choice(["decode_tps_single", *TIMED_METRICS])
    else:
        metric = rng.choice(TIMED_METRICS)
    max_model_len = None
    if rng.random() < 0.7:
        max_model_len = rng.choice([2048, 4096, 8192, 16384, 32768, 65536, 131072])
        if rng.random() < 0.7:  # mostly long enough for the requests, so that the line is simulated
            max_model_len = max(max_model_len, prompt + output)
    return {
        "id": f"fuzz-{index}", "source": "https://example.com/fuzz", "detail": "fuzz", "model": model, "gpu": gpu,
        "gpu_variant_assumed": False, "gpus": tp * pp * replicas, "tensor_parallel": tp, "pipeline_parallel": pp,
        "replicas": replicas, "engine": engine, "engine_version": version, "weights": weights,
        "kv_cache": rng.choice(["auto", "auto", "fp8", "bf16"]), "input_tokens": prompt, "output_tokens": output,
        "dataset": dataset, "load": load,
        "gpu_memory_utilization": rng.choice([None, round(rng.uniform(0.2, 1.0), 2), 0.2, 1.0]),
        "max_model_len": max_model_len,
        "max_num_seqs": rng.choice([None, None, 1, 2, _log_uniform(rng, 1, 1024), 1024]),
        "max_num_batched_tokens": rng.choice([None, None, 16, 64, _log_uniform(rng, 16, 65536), 65536]),
        "prefix_caching": rng.choice([None, True, False]), "metric": metric, "value": 1.0,
        "unit": METRIC_UNITS[metric], "includes_prefill": rng.choice([True, False]) if metric == "decode_tps_single"
        else None, "notes": "fuzz line", "suspect": False,
    }


def random_plan(rng: random.Random, models: list[str]) -> dict[str, Any]:
    """A plan spec drawn wider than bench_plan.py's: very variable lengths, bursty traffic, tiny KV pools."""
    prompt = _log_uniform(rng, 1, 30_000)
    output = _log_uniform(rng, 1, 8192)
    slo: dict[str, Any] = {"ttft": {"maxMs": rng.choice([100, 300, 1000, 5000, 60000]),
                                    "percentile": rng.choice(["p50", "p90", "p95", "p99"])}}
    if rng.random() < 0.6:
        slo["tpot"] = {"maxMs": rng.choice([10, 30, 50, 200]), "percentile": rng.choice(["p50", "p95", "p99"])}
    if rng.random() < 0.3:
        slo["e2e"] = {"maxMs": rng.choice([2000, 30000, 600000]), "percentile": "p95"}
    engine: dict[str, Any] = {"name": rng.choice(["vllm", "vllm", "sglang", "tgi", "tensorrt-llm"])}
    if rng.random() < 0.4:
        engine["gpuMemoryUtilization"] = str(round(rng.uniform(0.2, 0.95), 2))
    if rng.random() < 0.3:
        engine["maxNumBatchedTokens"] = rng.choice([16, 64, 256, 2048, 65536])
    if rng.random() < 0.3:
        engine["maxModelLen"] = rng.choice([2048, 4096, 32768, 131072])
    burstiness = {"preset": rng.choice(["steady", "chatbot", "bursty", "agent"])} if rng.random() < 0.8 \
        else {"arrivalCv2": str(rng.choice([0.1, 1, 4, 16])), "serviceCv2": str(rng.choice([0.5, 1, 4]))}
    return {
        "model": {"name": rng.choice(models), "kvCacheDtypes": rng.choice([["auto"], ["auto", "fp8"]])},
        "engine": engine,
        "workload": {"requestsPerSecond": str(rng.choice([0.05, 0.5, 1, 5, 20, 100, 500, 2000])),
                     "promptTokens": {"mean": prompt, "cv": str(rng.choice([0, 0.3, 1, 2, 3]))},
                     "outputTokens": {"mean": output, "cv": str(rng.choice([0, 0.5, 1, 3]))},
                     "burstiness": burstiness},
        "slo": slo,
        "constraints": {"tensorParallelSizes": rng.choice([[1], [1, 2], [1, 2, 4, 8]])},
    }


def _timed(run: Callable[[dict[str, Any]], str], item: dict[str, Any], limit_s: float) -> tuple[float, str]:
    """(seconds, outcome) of `run(item)` interrupted after `limit_s`: its own outcome, 'HANG' or 'ERROR: ...'."""
    def alarm(signum: int, frame: object) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    start = time.perf_counter()
    try:
        outcome = run(item)
    except _Hang:
        outcome = "HANG"
    except Exception as exc:  # what the fuzz looks for: reported, not raised
        outcome = f"ERROR: {type(exc).__name__}: {exc} | {traceback.format_exc().splitlines()[-3].strip()}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return time.perf_counter() - start, outcome


def _scenario_outcome(line: dict[str, Any]) -> str:
    row = parse_scenario_line(json.dumps(line), 1)
    if not hasattr(row, "metric"):
        return f"ERROR: generated line invalid: {row}"
    prediction = predict_scenarios([row])[0]
    return "skipped" if prediction.skipped else "predicted"


def _plan_outcome(spec: dict[str, Any]) -> str:
    try:
        req = resolve_plan(parse_plan(spec))
    except PlanError:
        return "skipped"
    return "feasible" if planned(req).recommendation is not None else "infeasible"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["scenarios", "plans"])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-s", type=float, default=None, help="interrupt an item after this (20 s / 60 s)")
    parser.add_argument("--slow-s", type=float, default=None, help="report an item over this (5 s / 10 s)")
    parser.add_argument("--heavy", action="store_true",
                        help="scenarios: served loads of many requests of small models on big GPUs only")
    parser.add_argument("--replay", type=Path, default=None, help="run the JSON lines of this file instead")
    args = parser.parse_args()
    scenarios = args.what == "scenarios"
    limit_s = args.limit_s or (20.0 if scenarios else 60.0)
    slow_s = args.slow_s or (5.0 if scenarios else 10.0)
    rng = random.Random(args.seed)
    models = [m.repo_id for m in load_model_catalog()]
    gpus = [g.product_label for g in load_gpu_catalog()]
    if args.replay:
        items = [json.loads(text) for text in args.replay.read_text().splitlines() if text.strip().startswith("{")]
    elif scenarios:
        items = [random_scenario(rng, i, models, gpus, args.heavy) for i in range(args.count)]
    else:
        items = [random_plan(rng, [m for m in models if "Kimi" not in m]) for _ in range(args.count)]
    times: list[float] = []
    outcomes: dict[str, int] = {}
    for i, item in enumerate(items):
        seconds, outcome = _timed(_scenario_outcome if scenarios else _plan_outcome, item, limit_s)
        times.append(seconds)
        kind = outcome.split(":")[0]
        outcomes[kind] = outcomes.get(kind, 0) + 1
        if outcome == "HANG" or kind == "ERROR" or seconds > slow_s:
            label = "HANG" if outcome == "HANG" else kind if kind == "ERROR" else "SLOW"
            print(f"{label} #{i} {seconds:.1f} s {outcome}\n{json.dumps(item)}", flush=True)
    ordered = sorted(times)
    print(f"{len(items)} {args.what} (seed {args.seed}): {outcomes}; seconds median "
          f"{statistics.median(ordered):.3f}, p99 {ordered[int(0.99 * (len(ordered) - 1))]:.2f}, "
          f"max {ordered[-1]:.2f}, total {sum(ordered):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
