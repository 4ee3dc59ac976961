"""Predict what a scenario measured: map each scenario row to a deployment and a load, evaluate the
model for all rows at once, and return a prediction or a reason the row cannot be predicted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from inferplan.planner.architectures import ModelArchitecture, resolve_model
from inferplan.planner.engines import EngineProfile, EngineSettings, engine_profile
from inferplan.planner.factors import EngineFactors, FactorSet, FamilyFactors, load_factors
from inferplan.planner.gpus import GpuSpec, resolve_gpu
from inferplan.planner.memory import GIB, MemoryPlan, max_concurrency, plan_memory
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.performance import Hardware, build_hardware, stack_hardware
from inferplan.planner.precisions import kv_dtype_bytes, weight_precision
from inferplan.planner.scenarios import Scenario
from inferplan.planner.serving import LoadResult, burst, closed_loop, poisson, single_stream, static_batch

# Length spread of the chat datasets benchmarks draw from: coefficient of variation of prompt and
# output tokens and the longest prompt kept. vLLM's benchmark_serving drops ShareGPT prompts over 1024
# tokens (and pairs over 2048), so the heavy tail is cut there. Provenance: assumed from the dataset's
# length histograms and the benchmark's filter.
DATASET_LENGTHS = {"sharegpt": (0.8, 1.0, 1024.0), "openorca": (1.0, 0.9, 2048.0)}
DEFAULT_NUM_PROMPTS = 1000  # vLLM benchmark_serving's default

STARTUP_METRICS = ("kv_cache_tokens", "max_concurrency", "weights_gib", "kv_cache_gib", "activation_peak_gib")


@dataclass(frozen=True)
class Prediction:
    """The predicted value of a scenario's metric, or why it has none."""

    id: str
    metric: str
    measured: float
    predicted: float | None
    skipped: str | None = None


def _version(text: str | None) -> tuple[int, ...] | None:
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g or 0) for g in match.groups()) if match else None


def engine_settings(row: Scenario, engine: EngineProfile, arch: ModelArchitecture) -> EngineSettings:
    """Fill the settings a scenario leaves unstated with what the engine (at its version) defaults to.

    vLLM before 0.8 (V0) did not chunk prefill by default and profiled max(max_model_len, 2048)
    tokens; V1 chunks with a 2048-token budget.
    """
    max_len = row.max_model_len or arch.max_position_embeddings
    seqs = row.max_num_seqs or engine.default_max_num_seqs
    budget = row.max_num_batched_tokens
    chunked = engine.chunked_prefill
    if engine.name == "vllm":
        version = _version(row.engine_version)
        if version is not None and version < (0, 8):
            chunked = budget is not None and budget < max_len
            budget = budget or max(max_len, 2048)
    budget = budget or engine.default_max_batched_tokens
    return EngineSettings(
        memory_fraction=row.gpu_memory_utilization or engine.default_memory_fraction,
        max_model_len=max_len,
        max_num_seqs=seqs,
        chunk_tokens=float(budget) if chunked else float("inf"),
        profile_tokens=budget,
    )


@dataclass(frozen=True)
class _Resolved:
    arch: ModelArchitecture
    gpu: GpuSpec
    engine: EngineProfile
    tp: int
    pp: int


def _resolve(row: Scenario) -> _Resolved | str:
    if row.gpu is None:
        return "GPU not stated"
    if row.engine is None:
        return "engine outside the supported set (named in notes)"
    tp = row.tensor_parallel
    if tp is None:
        if row.gpus // row.pipeline_parallel != 1:
            return "sharding not stated (tensor_parallel is null)"
        tp = 1
    try:
        gpu = resolve_gpu(row.gpu)
    except CatalogLookupError as exc:
        return f"GPU not in the catalog: {exc}"
    try:
        arch = resolve_model(row.model)
    except CatalogLookupError as exc:
        return f"model not in the catalog: {exc}"
    try:
        weight_precision(row.weights)
    except CatalogLookupError as exc:
        return f"weight format not supported: {exc}"
    return _Resolved(arch, gpu, engine_profile(row.engine), tp, row.pipeline_parallel)


@lru_cache(maxsize=8192)
def _hardware(model: str, gpu: str, engine: str, weights: str, kv: float, tp: int, pp: int,
              engine_factors: EngineFactors, family_factors: FamilyFactors) -> Hardware:
    return build_hardware(resolve_model(model), resolve_gpu(gpu), weight_precision(weights), kv,
                          engine_profile(engine), engine_factors, family_factors, tp, pp)


def _memory(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> MemoryPlan:
    return plan_memory(r.arch, r.gpu, weight_precision(row.weights), kv_dtype_bytes(row.kv_cache, row.weights),
                       r.engine, settings, factors.engine(r.engine.name), r.tp, r.pp)


def _startup(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> float | str:
    memory = _memory(row, r, settings, factors)
    if row.metric == "weights_gib":
        return memory.weights_per_gpu / GIB
    if row.metric == "activation_peak_gib":
        return memory.activation_per_gpu / GIB
    if r.engine.memory_mode == "context":
        return f"{r.engine.name} sizes its KV cache by the configured context, not by a memory pool"
    if row.metric == "kv_cache_gib":
        return memory.kv_pool_per_gpu / GIB
    if row.metric == "kv_cache_tokens":
        return float(memory.kv_cache_tokens)
    budget = int(min(settings.chunk_tokens, settings.max_model_len))
    return max_concurrency(r.arch, memory.kv_cache_tokens, settings.max_model_len, budget, r.engine.kv_block_tokens)


def _slots(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet,
           prompt: float, output: float) -> tuple[float, float]:
    """(admitted, running) sequences: what max_num_seqs and the KV pool allow at these lengths.

    The engine admits a request when its prompt fits (one block of headroom); it keeps running as many as
    fit at their mean length over the generation (prompt + output / 2).
    """
    if not r.engine.continuous_batching:
        return 1.0, 1.0
    memory = _memory(row, r, settings, factors)
    return (memory.slots(settings.max_num_seqs, prompt + r.engine.kv_block_tokens),
            memory.slots(settings.max_num_seqs, prompt + output / 2.0))


def predict_scenarios(rows: Sequence[Scenario], factors: FactorSet | None = None) -> list[Prediction]:
    """Predict every row; rows that cannot be predicted carry the reason in `skipped`."""
    factors = factors or load_factors()
    out: list[Prediction | None] = [None] * len(rows)
    timed: dict[str, list[tuple[int, Scenario, _Resolved, EngineSettings]]] = {}
    for i, row in enumerate(rows):
        resolved = _resolve(row)
        if isinstance(resolved, str):
            out[i] = Prediction(row.id, row.metric, row.value, None, resolved)
            continue
        settings = engine_settings(row, resolved.engine, resolved.arch)
        if row.load.kind == "startup" or row.metric in STARTUP_METRICS:
            if row.load.kind != "startup":
                value: float | str = "memory metric without a startup load"
            else:
                value = _startup(row, resolved, settings, factors)
            if isinstance(value, str):
                out[i] = Prediction(row.id, row.metric, row.value, None, value)
            else:
                out[i] = Prediction(row.id, row.metric, row.value, value)
            continue
        reason = _timing_skip_reason(row, resolved)
        if reason:
            out[i] = Prediction(row.id, row.metric, row.value, None, reason)
            continue
        kind = row.load.kind
        if kind in ("static_batch", "burst", "concurrency") and getattr(row.load, "value", 0) == 1:
            kind = "single"
        timed.setdefault(kind, []).append((i, row, resolved, settings))
    for kind, items in timed.items():
        for (i, row, _r, _s), value in zip(items, _predict_kind(kind, items, factors), strict=True):
            out[i] = Prediction(row.id, row.metric, row.value, None if value is None else float(value),
                                None if value is not None else f"metric {row.metric} not predicted for {kind} load")
    return [p for p in out if p is not None]


def _timing_skip_reason(row: Scenario, r: _Resolved) -> str | None:
    if row.input_tokens is None:
        return "prompt token count not stated"
    if row.output_tokens is None and not (row.metric.startswith("ttft") and row.load.kind != "poisson"):
        return "output token count not stated"
    if row.load.kind == "poisson" and row.load.rate is None:
        return "MLPerf Server run (highest SLO-compliant rate): the SLO limits are not in the scenario format"
    if not r.engine.continuous_batching and row.load.kind in ("burst", "concurrency", "poisson", "offline") and \
            getattr(row.load, "value", None) != 1:
        return f"{r.engine.name} serves one stream at a time; concurrent loads are not modelled for it"
    return None


def _predict_kind(kind: str, items: list, factors: FactorSet) -> list[float | None]:
    hw = stack_hardware([
        _hardware(row.model, row.gpu, r.engine.name, row.weights, kv_dtype_bytes(row.kv_cache, row.weights),
                  r.tp, r.pp, factors.engine(r.engine.name), factors.family(r.gpu.family))
        for _, row, r, _ in items
    ])
    rows = [row for _, row, _, _ in items]
    p = np.array([float(row.input_tokens) for row in rows])
    o = np.array([float(row.output_tokens or 1) for row in rows])
    replicas = np.array([float(row.replicas or 1) for row in rows])
    chunk = np.array([s.chunk_tokens for _, _, _, s in items])
    if kind == "single":
        result = single_stream(hw, p, o)
    elif kind == "static_batch":
        result = static_batch(hw, np.array([float(row.load.value) for row in rows]), p, o)
    else:
        slots = np.array([_slots(row, r, s, factors, row.input_tokens, row.output_tokens or 1)
                          for _, row, r, s in items])
        if kind in ("burst", "offline"):
            n = np.array([float(getattr(row.load, "value", None) or getattr(row.load, "num_prompts", None)
                                or DEFAULT_NUM_PROMPTS) for row in rows]) / replicas
            result = burst(hw, n, p, o, slots[:, 0], slots[:, 1], chunk)
        elif kind == "concurrency":
            result = closed_loop(hw, np.array([float(row.load.value) for row in rows]) / replicas, p, o,
                                 slots[:, 1], chunk)
        else:  # poisson
            lengths = np.array([DATASET_LENGTHS.get(row.dataset or "", (0.0, 0.0, np.inf)) for row in rows])
            rate = np.array([row.load.rate for row in rows]) / replicas
            num = np.array([float(row.load.num_prompts or DEFAULT_NUM_PROMPTS) for row in rows]) / replicas
            result = poisson(hw, rate, p, o, slots[:, 1], chunk, lengths[:, 0], lengths[:, 1], 1.0, num,
                             max_prompt_tokens=lengths[:, 2])
    return [_metric(result, row, j, replicas[j]) for j, row in enumerate(rows)]


def _metric(result: LoadResult, row: Scenario, j: int, replicas: float) -> float | None:
    o = max(float(row.output_tokens or 1), 1.0)
    m = row.metric
    if m == "decode_tps_single":
        if row.includes_prefill:
            return o / (result.ttft_mean[j] + o * result.tpot_mean[j])
        return 1.0 / result.tpot_mean[j]
    if m == "output_tps_total":
        return result.output_tokens_per_s[j] * replicas
    if m == "requests_per_s":
        return result.requests_per_s[j] * replicas
    if m == "e2e_ms_mean":
        return result.e2e_mean[j] * 1e3
    stat, _, which = m.partition("_ms_")
    if stat in ("ttft", "tpot", "itl"):
        mean = result.ttft_mean if stat == "ttft" else result.tpot_mean
        quant = result.ttft_q if stat == "ttft" else result.tpot_q
        if which == "mean":
            return mean[j] * 1e3
        return quant[{"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}[which]][j] * 1e3
    return None
