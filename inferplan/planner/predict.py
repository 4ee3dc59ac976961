"""Predict what a scenario measured: map each scenario row to a deployment and a load, evaluate the
model for all rows at once, and return a prediction or a reason the row cannot be predicted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from inferplan.planner.architectures import ModelArchitecture, resolve_model
from inferplan.planner.datasets import DatasetLengths, dataset_lengths, sample_lengths
from inferplan.planner.engines import EngineProfile, EngineSettings, engine_profile, factor_key, version_defaults
from inferplan.planner.factors import EngineFactors, FactorSet, FamilyFactors, load_factors
from inferplan.planner.gpus import GpuSpec, resolve_gpu
from inferplan.planner.memory import GIB, MemoryPlan, max_concurrency, plan_memory
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.performance import Hardware, build_hardware, stack_hardware
from inferplan.planner.precisions import kv_dtype_bytes, weight_precision
from inferplan.planner.quantiles import QUANTILE_VALUES
from inferplan.planner.scenarios import Scenario
from inferplan.planner.serving import LoadResult, single_stream, static_batch
from inferplan.planner.simulate import SimulationResult, arrival_times, simulate, trace_workload

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


def engine_settings(row: Scenario, engine: EngineProfile, arch: ModelArchitecture, gpu: GpuSpec,
                    gpus_per_instance: int = 1) -> EngineSettings:
    """Fill the settings a scenario leaves unstated with what the engine, at its version and on its GPU,
    defaults to (`version_defaults`; docs/engines.md has the sources).

    A stated step budget below the context on an engine that does not chunk by default means chunking was
    turned on (vLLM V0 needed `--enable-chunked-prefill` for a budget below max_model_len).
    """
    max_len = row.max_model_len or arch.max_position_embeddings
    defaults = version_defaults(engine, row.engine_version, float(gpu.usable_memory_bytes), gpu.key,
                                gpus_per_instance, max_len)
    seqs = row.max_num_seqs or defaults.max_num_seqs
    budget = float(row.max_num_batched_tokens or defaults.step_tokens)
    chunked = defaults.scheduling.chunked
    scheduling = defaults.scheduling
    if not chunked and row.max_num_batched_tokens is not None and row.max_num_batched_tokens < max_len \
            and engine.name == "vllm":
        chunked = True
        scheduling = replace(scheduling, mixed=True, chunked=True)
    profile = int(min(budget, seqs * max_len)) if math.isfinite(budget) else max(max_len, 2048)
    return EngineSettings(
        memory_fraction=row.gpu_memory_utilization or defaults.memory_fraction,
        max_model_len=max_len,
        max_num_seqs=seqs,
        chunk_tokens=budget if chunked else float("inf"),
        profile_tokens=profile,
        step_tokens=budget,
        scheduling=scheduling,
        activation_scale=defaults.activation_scale,
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


def checkpoint_named(notes: str) -> str | None:
    """The checkpoint a scenario's notes name (`FP8 checkpoint nvidia/Llama-3.1-8B-Instruct-FP8 ...`), or the
    toolkit that made it (ModelOpt, NIM); None when they name neither."""
    match = re.search(r"checkpoint\s+([\w.-]+/[\w.-]+)", notes)
    if match:
        return match.group(1)
    for word in ("ModelOpt", "NIM"):
        if re.search(rf"\b{word}\b", notes):
            return word.lower()
    return None


def _factor_key(row: Scenario, r: _Resolved) -> str:
    return factor_key(r.engine.name, row.engine_version, r.gpu.vendor, row.published)


def _kv_bytes(row: Scenario, r: _Resolved) -> float:
    return kv_dtype_bytes(row.kv_cache, row.weights, r.engine.name, checkpoint_named(row.notes))


def _memory(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> MemoryPlan:
    engine_factors = factors.engine(_factor_key(row, r))
    if settings.activation_scale is not None:
        engine_factors = replace(engine_factors, activation_scale=settings.activation_scale)
    return plan_memory(r.arch, r.gpu, weight_precision(row.weights), _kv_bytes(row, r),
                       r.engine, settings, engine_factors, r.tp, r.pp)


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
        settings = engine_settings(row, resolved.engine, resolved.arch, resolved.gpu, resolved.tp * resolved.pp)
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
        if kind in SIMULATED_LOADS and resolved.engine.continuous_batching:
            kind = "simulated"
        elif kind in ("static_batch", "burst", "concurrency") and getattr(row.load, "value", 0) == 1:
            kind = "single"
        timed.setdefault(kind, []).append((i, row, resolved, settings))
    runs: dict[tuple, SimulationResult | str] = {}
    for kind, items in timed.items():
        if kind == "simulated":
            values = [_simulated_metric(row, r, s, factors, runs) for _, row, r, s in items]
        else:
            values = _predict_kind(kind, items, factors)
        for (i, row, _r, _s), value in zip(items, values, strict=True):
            if isinstance(value, str):
                out[i] = Prediction(row.id, row.metric, row.value, None, value)
                continue
            out[i] = Prediction(row.id, row.metric, row.value, None if value is None else float(value),
                                None if value is not None else f"metric {row.metric} not predicted for {kind} load")
    return [p for p in out if p is not None]


SIMULATED_LOADS = ("burst", "offline", "concurrency", "poisson")
CLOSED_LOOP_REQUESTS = (8, DEFAULT_NUM_PROMPTS, 4000)  # N clients: clamp(8 N, 1000, 4000) requests in all


def _lengths(row: Scenario) -> tuple[float, float, DatasetLengths | None]:
    """Mean prompt and output tokens of a row and its dataset's length shape (None: fixed lengths)."""
    dataset = dataset_lengths(row.dataset) if row.dataset else None
    prompt = row.input_tokens if row.input_tokens is not None else (dataset.prompt_mean if dataset else 0.0)
    output = row.output_tokens if row.output_tokens is not None else (dataset.output_mean if dataset else 1.0)
    return float(prompt), float(max(output, 1)), dataset


def _run_key(row: Scenario) -> tuple:
    """What one measured run shares across its lines (the format's rule 3)."""
    return (row.source, row.model, row.gpu, row.gpus, row.tensor_parallel, row.pipeline_parallel, row.replicas,
            row.engine, row.engine_version, row.weights, row.kv_cache, row.input_tokens, row.output_tokens,
            row.dataset, row.load.model_dump_json(), row.gpu_memory_utilization, row.max_model_len,
            row.max_num_seqs, row.max_num_batched_tokens, row.prefix_caching)


def simulate_run(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> SimulationResult | str:
    """Serve one row's online load (a burst, an offline run, a closed loop or Poisson arrivals) on one instance of
    its deployment in the simulator, scheduled as its engine schedules (`EngineSettings.scheduling`), with its
    dataset's length spread; a reason instead when the deployment has no room for a KV cache."""
    memory = _memory(row, r, settings, factors)
    kv_tokens = int(memory.kv_cache_tokens)
    if not memory.fits or kv_tokens < 2:
        return "the weights and activations leave no KV cache at the row's settings"
    if r.engine.name == "vllm" and row.max_model_len is not None:
        # vLLM refuses to start when its pool cannot hold one request of max_model_len tokens, so a run that was
        # measured at a stated max_model_len had at least that much (a model that says less is short by a
        # fraction of a GiB). Not for the model's default context: a catalog entry may be the base model's.
        block = r.engine.kv_block_tokens
        kv_tokens = max(kv_tokens, -(-settings.max_model_len // block) * block)
    prompt_mean, output_mean, dataset = _lengths(row)
    replicas = max(int(row.replicas or 1), 1)
    load = int(getattr(row.load, "value", 1))
    arrivals = None
    if row.load.kind in ("burst", "offline"):
        count = load if row.load.kind == "burst" else int(row.load.num_prompts or DEFAULT_NUM_PROMPTS)
        requests, clients = max(count // replicas, 1), 0
    elif row.load.kind == "poisson":
        requests, clients = max(int(row.load.num_prompts or DEFAULT_NUM_PROMPTS) // replicas, 1), 0
        rate = float(row.load.rate) / replicas
        arrivals = arrival_times(np.random.default_rng(0), rate, requests)
        arrivals -= arrivals[0]
        if requests > 1:  # the run's own rate is the stated one: a draw of 100 gaps is off by 10% on its own
            arrivals *= (requests - 1) / rate / arrivals[-1]
    else:
        clients = max(load // replicas, 1)
        low, floor, cap = CLOSED_LOOP_REQUESTS
        requests = min(max(low * clients, floor), cap)
    prompts, outputs = sample_lengths(requests, prompt_mean, output_mean, dataset)
    longest = min(settings.max_model_len, kv_tokens - 1)
    prompts = np.minimum(prompts, longest - 1)
    outputs = np.maximum(np.minimum(outputs, longest - prompts), 1)
    hw = _hardware(row.model, row.gpu, r.engine.name, row.weights, _kv_bytes(row, r),
                   r.tp, r.pp, factors.engine(_factor_key(row, r)), factors.family(r.gpu.family))
    workload = trace_workload(np.zeros(requests) if arrivals is None else arrivals, prompts, outputs)
    return simulate(hw, workload, max_batch=int(settings.max_num_seqs), kv_tokens=kv_tokens,
                    chunk_tokens=settings.step_tokens, policy=settings.scheduling, clients=clients, series_points=2)


def _simulated_metric(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet,
                      runs: dict[tuple, SimulationResult | str]) -> float | str | None:
    key = _run_key(row)
    if key not in runs:
        runs[key] = simulate_run(row, r, settings, factors)
    result = runs[key]
    if isinstance(result, str):
        return result
    replicas = float(row.replicas or 1)
    m = row.metric
    if m == "output_tps_total":
        return result.output_tokens_per_s * replicas
    if m == "requests_per_s":
        return result.requests_per_s * replicas
    if m == "itl_ms_mean":  # the mean gap between streamed tokens, over every gap of every request
        gaps = np.isfinite(result.tpot_s)
        decode_s = (result.e2e_s - result.ttft_s)[gaps]
        return 1e3 * float(decode_s.sum() / (decode_s / result.tpot_s[gaps]).sum()) if gaps.any() else None
    if m == "decode_tps_single":
        if row.includes_prefill:  # output tokens over the whole request, first token included
            outputs = np.where(np.isfinite(result.tpot_s), (result.e2e_s - result.ttft_s) / result.tpot_s + 1.0, 1.0)
            return float(np.mean(outputs / result.e2e_s))
        return 1.0 / result.tpot.mean_s
    stat, _, which = m.partition("_ms_")
    latency = {"ttft": result.ttft, "tpot": result.tpot, "e2e": result.e2e}.get(stat)
    if latency is None:
        return None
    field = {"mean": "mean_s", "p50": "p50_s", "p90": "p90_s", "p95": "p95_s", "p99": "p99_s"}.get(which)
    return None if field is None else 1e3 * float(getattr(latency, field))


def _timing_skip_reason(row: Scenario, r: _Resolved) -> str | None:
    if row.dataset is not None:
        try:
            dataset_lengths(row.dataset)
        except CatalogLookupError as exc:
            return f"dataset without a length preset: {exc}"
    preset = row.dataset is not None  # a named dataset's preset gives the lengths a row leaves out
    if row.input_tokens is None and not preset:
        return "prompt token count not stated"
    if row.output_tokens is None and not preset and not (row.metric.startswith("ttft") and row.load.kind != "poisson"):
        return "output token count not stated"
    if row.load.kind == "poisson" and row.load.rate is None:
        return "MLPerf Server run (highest SLO-compliant rate): the SLO limits are not in the scenario format"
    if not r.engine.continuous_batching and row.load.kind in ("burst", "concurrency", "poisson", "offline") and \
            getattr(row.load, "value", None) != 1:
        return f"{r.engine.name} serves one stream at a time; concurrent loads are not modelled for it"
    return None


def _predict_kind(kind: str, items: list, factors: FactorSet) -> list[float | None]:
    hw = stack_hardware([
        _hardware(row.model, row.gpu, r.engine.name, row.weights, _kv_bytes(row, r),
                  r.tp, r.pp, factors.engine(_factor_key(row, r)), factors.family(r.gpu.family))
        for _, row, r, _ in items
    ])
    rows = [row for _, row, _, _ in items]
    lengths = [_lengths(row) for row in rows]
    p = np.array([prompt for prompt, _, _ in lengths])
    o = np.array([output for _, output, _ in lengths])
    replicas = np.array([float(row.replicas or 1) for row in rows])
    if kind == "single":
        result = single_stream(hw, p, o)
    elif kind == "static_batch":
        result = static_batch(hw, np.array([float(row.load.value) for row in rows]), p, o)
    else:  # pragma: no cover - every other load is simulated
        raise ValueError(f"load {kind!r} is simulated, not computed here")
    return [_metric(result, row, j, replicas[j]) for j, row in enumerate(rows)]


def _metric(result: LoadResult, row: Scenario, j: int, replicas: float) -> float | None:
    o = _lengths(row)[1]
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
        return quant[QUANTILE_VALUES[which]][j] * 1e3
    return None
