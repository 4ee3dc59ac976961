"""Predict what a scenario measured: map each scenario row to a deployment and a load, evaluate the
model for all rows at once, and return a prediction or a reason the row cannot be predicted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from inferplan.planner.calibration.scenarios import Scenario
from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.checkpoints import (
    Checkpoint,
    checkpoint_for,
    checkpoint_precision,
    gpu_problem,
    known_precisions,
    named_checkpoint,
    resolve_served,
)
from inferplan.planner.catalog.datasets import DatasetLengths, dataset_lengths, eos_lengths, sample_lengths
from inferplan.planner.catalog.engine_args import (
    stated_chunked_prefill,
    stated_layout,
    stated_mtp,
    stated_scheduler_steps,
    stated_vllm_data_parallel,
)
from inferplan.planner.catalog.engines import (
    EngineProfile,
    EngineSettings,
    engine_profile,
    engine_vendor_problem,
    factor_key,
    mtp_tokens_per_step,
    parse_version,
    per_rank_batches,
    sampler_profile_bytes,
    version_defaults,
    weight_format_problem,
)
from inferplan.planner.catalog.gpus import GpuSpec, resolve_gpu
from inferplan.planner.catalog.precisions import kv_dtype_bytes, weight_precision
from inferplan.planner.catalog.validity import tp_problem
from inferplan.planner.model.factors import EngineFactors, FactorSet, load_factors
from inferplan.planner.model.memory import (
    GIB,
    MemoryPlan,
    attention_weight_bytes,
    max_concurrency,
    plan_memory_for_settings,
)
from inferplan.planner.model.performance import (
    Hardware,
    build_hardware,
    mla_dp_ratio,
    stack_hardware,
    with_dp_attention,
    with_expert_parallel,
    with_mtp,
)
from inferplan.planner.model.serving import (
    LoadResult,
    Traffic,
    poisson,
    poisson_capacity,
    running_context,
    single_stream,
    static_batch,
)
from inferplan.planner.names import CatalogLookupError, normalize_name
from inferplan.planner.quantiles import QUANTILE_VALUES
from inferplan.planner.simulation.simulate import SimulationResult, arrival_times, simulate, trace_workload

DEFAULT_NUM_PROMPTS = 1000  # vLLM benchmark_serving's default
# The batch of a TensorRT-LLM maximum-throughput run that states none (trtllm-bench, MLPerf Offline): its harness
# built or configured the engine for that workload, and trtllm-bench's tuning heuristic takes as many requests as
# the KV cache holds at the run's lengths, capped at 4096 (`batch_size_cap` in tensorrt_llm/bench/build/tuning.py,
# recalled: the package's source could not be fetched to check it). The KV cache bounds the batch in the simulator.
# Held out by source, NVIDIA's 100 lines 18.7% -> 15.0% MdAPE against the built-engine default of 256 (2048 on
# 1.x), no source worse (docs/model.md, Known gaps).
TUNED_BATCH_CAP = 4096

# Metrics of the generated tokens: a line that generated none has no value for them.
OUTPUT_METRICS = ("output_tps_total", "decode_tps_single", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_mean")
STARTUP_METRICS = ("kv_cache_tokens", "max_concurrency", "weights_gib", "kv_cache_gib", "activation_peak_gib")


@dataclass(frozen=True)
class Prediction:
    """The predicted value of a scenario's metric, or why it has none."""

    id: str
    metric: str
    measured: float
    predicted: float | None
    skipped: str | None = None


def unmodelled(row: Scenario) -> str | None:
    """Why the step-time model cannot stand for `row`'s deployment, or None: multi-head latent attention
    (DeepSeek-V2/V3/R1) has its kernels costed (its measured MLA decode and prefill, the latent KV, fused-MoE
    tables, expert and data parallelism) but runs 2-4x slower than them on the one source that measured it, so its
    rows are scored apart and never fitted on, which would push what the model lacks into the engine terms."""
    return _unmodelled_model(row.model)


@lru_cache(maxsize=1024)
def _unmodelled_model(model: str) -> str | None:
    try:
        arch = resolve_served(model, variants=True)[0]
    except CatalogLookupError:
        return None
    return ("multi-head latent attention (MLA): costed from its measured kernels, which its one serving source ran "
            "2-4x slower than" if arch.is_mla else None)


def engine_settings(row: Scenario, engine: EngineProfile, arch: ModelArchitecture, gpu: GpuSpec,
                    gpus_per_instance: int = 1) -> EngineSettings:
    """Fill the settings a scenario leaves unstated with what the engine, at its version and on its GPU,
    defaults to (`version_defaults`; docs/engines.md has the sources).

    A stated step budget below the context on an engine that does not chunk by default means chunking was
    turned on (vLLM V0 needed `--enable-chunked-prefill` for a budget below max_model_len).
    """
    max_len = row.max_model_len or arch.max_position_embeddings
    defaults = version_defaults(engine, row.version, float(gpu.usable_memory_bytes), gpu.key,
                                gpus_per_instance, max_len, offline=row.load.kind == "offline")
    seqs = row.max_num_seqs or defaults.max_num_seqs
    if engine.name == "tensorrt-llm" and row.max_num_seqs is None and _ceiling_run(row):
        seqs = TUNED_BATCH_CAP
    budget = float(row.max_num_batched_tokens or defaults.step_tokens)
    chunked = defaults.scheduling.chunked
    scheduling = defaults.scheduling
    stated = stated_chunked_prefill(row.notes or "")
    version = parse_version(row.version)
    if stated is False and chunked and engine.name == "vllm" and version is not None and version < (0, 8):
        # V0 with chunked prefill turned off where its default turned it on (contexts over 32k): whole prompts,
        # prefill first, a budget of max(max_model_len, 2048) (`SchedulerConfig`).
        chunked = False
        scheduling = replace(scheduling, mixed=False, chunked=False)
        budget = float(row.max_num_batched_tokens or max(max_len, 2048))
    elif stated and not chunked and engine.name == "tensorrt-llm":
        chunked = True  # `--enable_chunked_prefill`: prompts split within max_num_tokens
        scheduling = replace(scheduling, chunked=True)
    steps = stated_scheduler_steps(row.notes or "") if engine.name == "vllm" else None
    if steps and steps > 1 and version is not None and (0, 6) <= version < (0, 8) and not scheduling.mixed:
        scheduling = replace(scheduling, steps_per_schedule=steps)  # V0's multi-step, prefill first
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
        sampler_bytes=sampler_profile_bytes(engine.name, row.version),
    )


@dataclass(frozen=True)
class _Resolved:
    arch: ModelArchitecture
    gpu: GpuSpec
    engine: EngineProfile
    tp: int
    pp: int
    dp_attention: bool = False  # the attention data-parallel over the TP ranks (`replica_layout`)
    expert_parallel: bool = False  # the MoE layers expert-parallel over them
    mtp_draft_tokens: int = 0      # drafting with the model's MTP module as the notes state it (`stated_mtp`)
    mtp_tokens_per_step: float = 1.0
    precision: str = "bf16"        # the planner precision of the row's `weights` (`row_precision`)
    replicas: int = 1              # instances the run spread its load over (`replicas`, or what the GPUs leave)
    data_parallel: int = 1         # vLLM's data-parallel ranks within `tp` (`--data-parallel-size` with experts)


# Common spellings of a weight format that the scenario format spells otherwise (its `weights` enum), and the
# values they may mean. One value: the line is read as it (`fp8_e4m3` is the format's `fp8`; `w4a16`, 4-bit weights
# with 16-bit activations, is int4-gptq, as a compressed-tensors W4A16 config reads, `model_configs`). Several: the
# checkpoint the line ran settles it, else the model's catalogued repositories its engine can run on its GPU
# (`stated_precision`: `fp4` is NVIDIA's NVFP4 on a B200, AMD's MXFP4 on an MI355X, gpt-oss's MXFP4 on either);
# where neither does, the line is refused naming the values to write.
WEIGHT_SPELLINGS: dict[str, tuple[str, ...]] = {
    "bfloat16": ("bf16",), "float16": ("fp16",), "half": ("fp16",), "awq": ("int4-awq",), "w4a16": ("int4-gptq",),
    "float8": ("fp8",), "fp8-dynamic": ("fp8",), "fp8_e4m3": ("fp8",), "float8_e4m3fn": ("fp8",),
    "gptq": ("int4-gptq", "int8-gptq"), "w8a8": ("int8-w8a8", "fp8"), "int8": ("int8-w8a8", "int8-gptq"),
    "fp4": ("nvfp4", "mxfp4"),
    # vLLM's --quantization names, as the serve command in a run's notes spells them
    "awq_marlin": ("int4-awq",), "gptq_marlin": ("int4-gptq", "int8-gptq"),
    "compressed-tensors": ("fp8", "int8-w8a8", "int4-gptq"),
}
_SPELLING_KEYS = {normalize_name(spelt): values for spelt, values in WEIGHT_SPELLINGS.items()}


def stated_precision(weights: str, arch: ModelArchitecture, engine: str, gpu_family: str,
                     checkpoint: str | None = None) -> str | None:
    """The planner precision a scenario's `weights` names for `arch` served by `engine` on a GPU of `gpu_family` from
    `checkpoint` (`row_checkpoint`): a value of the format as `row_precision` reads it, a common spelling of one
    (`WEIGHT_SPELLINGS`) as the value it means; None where a spelling of several values is settled neither by the
    checkpoint nor by the model's catalogued repositories that the engine can run on that GPU. Raises
    CatalogLookupError for a name that is neither."""
    values = _SPELLING_KEYS.get(normalize_name(weights))
    if values is None:
        return row_precision(weights, arch, checkpoint)
    if len(values) == 1:
        return row_precision(values[0], arch, checkpoint)
    named = named_checkpoint(checkpoint) if checkpoint else None
    held = [named.checkpoint] if named is not None else [
        repo for repos in known_precisions(arch.repo_id).values() for repo in repos
        if gpu_problem(repo, engine, gpu_family) is None]
    meant = {repo.precision for repo in held if _format_value(repo.precision) in values}
    return meant.pop() if len(meant) == 1 else None


def _format_value(precision: str) -> str:
    """The scenario format's `weights` value of a planner precision (one MXFP4 value for both of the planner's)."""
    return "mxfp4" if precision == "mxfp4-w4a4" else precision


def row_precision(weights: str, arch: ModelArchitecture, checkpoint: str | None = None) -> str:
    """The planner precision a scenario's `weights` names for `arch` served from `checkpoint` (`row_checkpoint`).
    The format has one MXFP4 value, gpt-oss's (MoE experts in MXFP4); on a model without experts it can only mean
    MXFP4 on every linear layer, AMD Quark's W4A4 (`mxfp4-w4a4`: amd/Llama-3.1-405B-Instruct-MXFP4-Preview on
    MI355X), and on a MoE it means that too where the line's checkpoint is a catalogued W4A4 repository
    (amd/DeepSeek-R1-0528-MXFP4-Preview)."""
    name = weight_precision(weights).name
    if name != "mxfp4":
        return name
    named = named_checkpoint(checkpoint) if checkpoint else None
    return "mxfp4-w4a4" if not arch.is_moe or (named is not None and named.checkpoint.precision == "mxfp4-w4a4") \
        else name


def replica_layout(notes: str, arch: ModelArchitecture) -> tuple[bool, bool]:
    """(data-parallel attention, expert-parallel MoE) as a run's notes state its launch; expert parallelism only for
    a mixture of experts. The scenario format has no field for either, so the engines' own flags in the notes are
    read (`SCENARIOS.md`: the notes hold the command), with the spellings of the launch table
    (`engine_args.stated_layout`)."""
    dp, ep = stated_layout(notes)
    return dp, ep and arch.is_moe


def _resolve(row: Scenario) -> _Resolved | str:
    if row.gpu is None:
        return "GPU not stated"
    if row.engine is None:
        return "engine outside the supported set (named in notes)"
    tp = row.tensor_parallel
    # vLLM's wide expert parallelism (`--data-parallel-size N --enable-expert-parallel`): N ranks of tensor_parallel
    # GPUs each, the attention data-parallel over them and the experts spread over all, as SGLang's data-parallel
    # attention with expert parallelism over its TP ranks: one instance of N x tensor_parallel GPUs. Without expert
    # parallelism vLLM's ranks are whole copies of the model, the format's replicas.
    data_parallel = stated_vllm_data_parallel(row.notes or "") if row.engine == "vllm" else 1
    if data_parallel > 1 and not stated_layout(row.notes or "")[1]:
        data_parallel = 1
    if tp is not None:
        tp *= data_parallel
    if tp is None:  # the format's identity gpus = tensor_parallel x pipeline_parallel x replicas, where it settles TP
        instances = row.pipeline_parallel * (row.replicas or 1)
        if row.gpus % instances or (row.replicas is None and row.gpus != row.pipeline_parallel):
            return "sharding not stated (tensor_parallel is null)"
        tp = row.gpus // instances
    elif row.replicas is not None and row.gpus != tp * row.pipeline_parallel * row.replicas:
        return (f"gpus {row.gpus} is not tensor_parallel x pipeline_parallel x replicas ({tp} x "
                f"{row.pipeline_parallel} x {row.replicas})")
    elif row.gpus % (tp * row.pipeline_parallel):  # replicas null: a whole number of instances, at least one
        return (f"gpus {row.gpus} is not a multiple of tensor_parallel x pipeline_parallel ({tp} x "
                f"{row.pipeline_parallel}): no whole number of instances")
    try:
        gpu = resolve_gpu(row.gpu)
    except CatalogLookupError as exc:
        return f"GPU not in the catalog: {exc}"
    try:
        arch = resolve_served(row.model, variants=True)[0]
    except CatalogLookupError as exc:
        return f"model not in the catalog: {exc}"
    try:
        precision = stated_precision(row.weights, arch, row.engine, gpu.family, row_checkpoint(row))
    except CatalogLookupError as exc:
        return f"weight format not supported: {exc}"
    if precision is None:  # a spelling of several values that neither the checkpoint nor the catalog settles
        spelt = " or ".join(repr(value) for value in _SPELLING_KEYS[normalize_name(row.weights)])
        return (f"weight format {row.weights!r} is not a value of the format and the line's checkpoint does not "
                f"settle which it means: write {spelt}")
    problem = (engine_vendor_problem(row.engine, gpu.vendor, gpu.key) or weight_format_problem(row.engine, precision)
               or tp_problem(row.engine, arch, tp)
               or _checkpoint_gpu_problem(row.model, precision, row.engine, gpu.family, row.version,
                                          row_checkpoint(row)))
    if problem is not None:
        return f"the engine could not have run this line: {problem}"
    dp, ep = replica_layout(row.notes, arch) if tp > 1 else (False, False)
    if data_parallel > 1:
        if not arch.is_moe:
            return (f"--data-parallel-size {data_parallel} with expert parallelism on {arch.repo_id}, which has no "
                    "experts: its ranks are whole copies of the model, write them as replicas")
        dp = ep = True
    drafts, accepted = stated_mtp(row.notes) if arch.mtp_layers else (0, None)
    per_step = (accepted or mtp_tokens_per_step(drafts)) if drafts else 1.0
    # gpus = tensor_parallel x pipeline_parallel x replicas (SCENARIOS.md): unstated replicas are what it leaves.
    instance = tp * row.pipeline_parallel
    replicas = row.replicas or row.gpus // instance
    return _Resolved(arch, gpu, engine_profile(row.engine), tp, row.pipeline_parallel, dp, ep, drafts, per_step,
                     precision, max(replicas, 1), data_parallel)


@lru_cache(maxsize=1024)
def _checkpoint_gpu_problem(model: str, precision: str, engine: str, family: str, version: str | None,
                            named: str | None) -> str | None:
    """Why `engine` cannot run the row's checkpoint (the one its model or notes name, else the catalog's choice for
    the GPU family) on a GPU of `family`, as a plan refuses it (`checkpoints.gpu_problem`: FP4 formats on GPUs
    without FP4 tensor cores); None where it can, or where the catalog knows no checkpoint. The rule's release
    bound is not applied: dstack's vLLM 0.6.4 on ROCm ran AMD Quark FP8 checkpoints, which the catalog reads first in
    0.11."""
    found = named_checkpoint(named) if named else None
    if found is not None:
        checkpoint: Checkpoint | str = found.checkpoint
    else:
        try:
            checkpoint = checkpoint_for(model, precision, engine, gpu_family=family, version=version)
        except CatalogLookupError:
            return None
    return gpu_problem(checkpoint, engine, family) if not isinstance(checkpoint, str) else None


@lru_cache(maxsize=8192)
def _hardware(model: str, gpu: str, engine: str, weights: str, kv: float, tp: int, pp: int,
              engine_factors: EngineFactors, dp_attention: bool = False, expert_parallel: bool = False,
              mtp: tuple[int, float] = (0, 1.0), version: str | None = None,
              step_tokens: float | None = None, checkpoint: str | None = None) -> Hardware:
    arch, spec = resolve_served(model, variants=True)[0], resolve_gpu(gpu)
    precision = checkpoint_precision(weights, checkpoint)  # as the repository the notes name holds it
    # The CUDA graphs are the row's release's at its stated step budget (`cuda_graph_max_batch`).
    hw = build_hardware(arch, spec, precision, kv, engine_profile(engine), engine_factors, tp, pp, version,
                        step_tokens)
    if dp_attention:  # as the search lays a replica out (`search.dp_attention_possible`)
        hw = with_dp_attention(hw, np.array(True), np.array(attention_weight_bytes(arch, precision)),
                               mla_dp_ratio(arch, spec, engine, kv, tp))
    if expert_parallel:  # the GPUs one replica reaches without the network: an 8-GPU node's, or an NVLink domain's
        hw = with_expert_parallel(hw, np.array(True), arch, np.array(spec.link_domain_gpus(8)))
    if mtp[0]:  # drafting with the model's MTP module, as the notes state it
        hw = with_mtp(hw, arch, *mtp)
    return hw


def row_factors(row: Scenario, r: _Resolved, factors: FactorSet) -> EngineFactors:
    """The engine factors that predict `row`: its engine line's, with the per-request time of an online run being
    the engine's own (a sourced assumption) plus what the row's harness adds (`FactorSet.harness_for`: fitted per
    source and engine line; for a pair the factors were not fitted on, the typical one of that engine line)."""
    line = _factor_key(row, r)
    engine = factors.engine(line)
    harness = factors.harness_for(row.source_name, line) if row.load.kind in ONLINE_LOADS else 0.0
    return replace(engine, request_overhead_ms=engine.request_overhead_ms + harness) if harness else engine


def _row_hardware(row: Scenario, r: _Resolved, factors: FactorSet) -> Hardware:
    return _hardware(row.model, row.gpu, r.engine.name, r.precision, _kv_bytes(row, r), r.tp, r.pp,
                     row_factors(row, r, factors), r.dp_attention, r.expert_parallel,
                     (r.mtp_draft_tokens, r.mtp_tokens_per_step), row.version, row.max_num_batched_tokens,
                     row_checkpoint(row))


def row_checkpoint(row: Scenario) -> str | None:
    """The checkpoint a scenario line ran: its `model` where that is a catalogued quantised repository (the format
    asks for the base repository there, with the checkpoint in the notes; a file of one's own may name the
    repository it served), else what its notes name (`checkpoint_named`)."""
    named = named_checkpoint(row.model)
    return named.checkpoint.repo if named is not None else checkpoint_named(row.notes)


@lru_cache(maxsize=4096)
def checkpoint_named(notes: str) -> str | None:
    """The checkpoint a scenario's notes name (`FP8 checkpoint nvidia/Llama-3.1-8B-Instruct-FP8 ...`; else the
    first catalogued quantised repository they mention, however worded: `served nvidia/Llama-3.1-8B-Instruct-FP8`),
    or the toolkit that made it (ModelOpt, NIM); None when they name none of these."""
    match = re.search(r"checkpoint\s+([\w.-]+/[\w.-]+)", notes)
    if match:
        return match.group(1)
    # A repository starts a word (the look-behind keeps a long run of word characters from being rescanned from
    # each of its positions, quadratic in its length).
    mentioned = (named_checkpoint(repo.rstrip(".")) for repo in re.findall(r"(?<![\w.-])[\w.-]+/[\w.-]+", notes))
    named = next((n for n in mentioned if n is not None), None)
    if named is not None:
        return named.checkpoint.repo
    for word in ("ModelOpt", "NIM"):
        if re.search(rf"\b{word}\b", notes):
            return word.lower()
    return None


def _factor_key(row: Scenario, r: _Resolved) -> str:
    return factor_key(r.engine.name, row.version, r.gpu.vendor, row.published)


def _kv_bytes(row: Scenario, r: _Resolved) -> float:
    return kv_dtype_bytes(row.kv_cache, r.precision, r.engine.name, row_checkpoint(row))


def _memory(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> MemoryPlan:
    engine_factors = factors.engine(_factor_key(row, r))
    if settings.activation_scale is not None:
        engine_factors = replace(engine_factors, activation_scale=settings.activation_scale)
    precision = checkpoint_precision(r.precision, row_checkpoint(row))
    engine = r.engine
    if row.gpu_memory_utilization is not None and engine.memory_mode == "free_fraction":
        # The format's gpu_memory_utilization is a fraction of the total memory (vLLM's meaning); an engine that
        # sizes its pool from the memory free after loading (TensorRT-LLM's kv_cache_free_gpu_mem_fraction, which
        # the format leaves in the notes) takes its pool from that fraction of the total when a line states it.
        engine = replace(engine, memory_mode="total_fraction")
    # Data-parallel attention: each rank's pool holds its own sequences, the instance `tp` times one rank's tokens
    # (`plan_memory_for_settings` counts them so, as the search does).
    return plan_memory_for_settings(r.arch, r.gpu, precision, _kv_bytes(row, r), engine, (settings,),
                                    engine_factors, r.tp, r.pp, r.dp_attention, mtp=r.mtp_draft_tokens > 0)[0]


def _startup(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> float | str:
    if row.metric not in STARTUP_METRICS:
        return f"metric {row.metric} of a startup load (no traffic) is not predicted"
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
        settings = engine_settings(row, resolved.engine, resolved.arch, resolved.gpu,
                                   resolved.tp // resolved.data_parallel * resolved.pp)
        if resolved.dp_attention and resolved.engine.name == "tensorrt-llm":
            settings = per_rank_batches(settings, resolved.tp)
        elif resolved.data_parallel > 1:  # each vLLM rank is an engine core with its own scheduler and limits
            settings = per_rank_batches(settings, resolved.data_parallel)
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
        kind = row.load.kind
        if kind in SIMULATED_LOADS and resolved.engine.continuous_batching:
            kind = "simulated"
        elif kind in ("static_batch", "burst", "concurrency") and getattr(row.load, "value", 0) == 1:
            kind = "single"
        reason = _timing_skip_reason(row, resolved) or _context_skip_reason(row, settings, kind == "simulated")
        if not reason and kind in ("single", "static_batch"):
            batch = int(row.load.value) if kind == "static_batch" and row.load.kind == "static_batch" else 1
            reason = _computed_memory_skip_reason(row, resolved, settings, factors, batch)
        if reason:
            out[i] = Prediction(row.id, row.metric, row.value, None, reason)
            continue
        timed.setdefault(kind, []).append((i, row, resolved, settings))
    runs: dict[tuple, SimulationResult | str] = {}
    for kind, items in timed.items():
        if kind == "simulated":
            values = [_guarded(_simulated_metric, row, r, s, factors, runs) for _, row, r, s in items]
        else:
            values = _predict_kind(kind, items, factors)
        for (i, row, _r, _s), value in zip(items, values, strict=True):
            if isinstance(value, str):
                out[i] = Prediction(row.id, row.metric, row.value, None, value)
                continue
            out[i] = Prediction(row.id, row.metric, row.value, None if value is None else float(value),
                                None if value is not None else f"metric {row.metric} not predicted for {kind} load")
    return [p for p in out if p is not None]


def _guarded(metric: Callable[..., float | str | None], row: Scenario, *args: object) -> float | str | None:
    """`metric(row, *args)`, or a reason naming the error where the row's lengths or settings are out of what the
    model accepts (a check missed them): one bad line is skipped, never the end of a run of many."""
    try:
        return metric(row, *args)
    except (ValueError, ArithmeticError) as exc:
        return f"could not be simulated at the row's settings: {exc}"


SIMULATED_LOADS = ("burst", "offline", "concurrency", "poisson")
ONLINE_LOADS = ("burst", "concurrency", "poisson")  # measured through a server's client: a harness adds its time
# A measured run's per-request time (its harness and front end) passes a front end (`simulate(front_end=True)`):
# at most FRONT_END_SERIAL_MAX_S of it is served one request at a time, so that requests sent together queue for
# that share; the rest delays each request in parallel. A server's front end passes a burst far faster than one
# harness time per request: GPUStack's 1000 ShareGPT requests sent at once to vLLM 0.11 on one H100 had a mean
# TTFT of 4.9 s with their 215k prompt tokens' prefill in it, where a 50 ms harness served one at a time would
# queue the last for 50 s. Chosen by leave-one-source-out over the four published files (docs/calibration.md):
# 10 ms, refitted, median 11.9% and worst 46.1% against 11.9% and 48.6% at 2 ms (saienduri 18.8% -> 13.3%,
# gpustack 28.6% -> 25.3%, sgl-project 26.0% -> 24.1%; dennislee22 and NVIDIA 0.4 points worse), after a screen of
# 1-25 ms on the 2 ms run's fits (gpustack's mean absolute log error lowest near 10 ms, higher again at 25 ms); on
# the model of 2026-12-03, 2 ms had beaten 1 ms, 5 ms and all of it served one at a time.
SERIAL_FRONT_END = True
FRONT_END_SERIAL_MAX_S = 0.010
# An offline run of unstated length is served as a queue that stays full: all its requests at once, three times the
# sequences the engine runs at a time (at most OFFLINE_REQUESTS_CAP), scored over the time its queue is not empty
# (`steady_throughput`).
OFFLINE_RUNS_PER_SLOT = 3
OFFLINE_REQUESTS_CAP = 6000
CLOSED_LOOP_REQUESTS = (8, DEFAULT_NUM_PROMPTS, 4000)  # N clients: clamp(8 N, 1000, 4000) requests in all


def _lengths(row: Scenario) -> tuple[float, float, DatasetLengths | None]:
    """Mean prompt and output tokens of a row and its dataset's length shape (None: fixed lengths); an unstated
    prompt is empty and an unstated output one token (a decode speed's lengths set only the context it reads)."""
    dataset = dataset_lengths(row.dataset) if row.dataset else None
    prompt = row.input_tokens if row.input_tokens is not None else (dataset.prompt_mean if dataset else 0.0)
    output = row.output_tokens if row.output_tokens is not None else (dataset.output_mean if dataset else 1.0)
    return float(prompt), float(max(output, 1)), dataset


def stated_eos_cap(notes: str) -> int | None:
    """The output cap of a run whose notes say its completions end at EOS (no `ignore_eos`) under a stated
    output length or `max_tokens` (dstack's sonnet bursts: "completions stop at EOS (no ignore_eos; benchmark
    default sonnet output length 150)"); None where they say neither. Its requests' lengths then vary
    (`datasets.eos_lengths`) where a scenario states only their mean."""
    if not re.search(r"(?:stops?|ends?) at EOS|no ignore_eos", notes, flags=re.IGNORECASE):
        return None
    caps = re.findall(r"(?:output[ _-]len(?:gth)?|max[_-]tokens)\D{0,12}?(\d+)", notes, flags=re.IGNORECASE)
    return int(caps[-1]) if caps else None


def _run_key(row: Scenario) -> tuple:
    """What one measured run shares across its lines (the format's rule 3), its notes included: they state
    conditions its simulation reads (the release, the checkpoint, chunked prefill, an EOS cap, the layout), so
    lines that differ there are different runs, whatever order they come in."""
    return (row.source, row.model, row.gpu, row.gpus, row.tensor_parallel, row.pipeline_parallel, row.replicas,
            row.engine, row.engine_version, row.weights, row.kv_cache, row.input_tokens, row.output_tokens,
            row.dataset, row.load.model_dump_json(), row.gpu_memory_utilization, row.max_model_len,
            row.max_num_seqs, row.max_num_batched_tokens, row.prefix_caching, row.notes)


def simulate_run(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> SimulationResult | str:
    """Serve one row's online load (a burst, an offline run, a closed loop or Poisson arrivals) on one instance of
    its deployment in the simulator, scheduled as its engine schedules (`EngineSettings.scheduling`), with its
    dataset's length spread; a reason instead when the deployment has no room for a KV cache."""
    memory = _memory(row, r, settings, factors)
    kv_tokens = int(memory.kv_cache_tokens)
    # A measured run started, so what it needed beside the pool fitted (the CUDA-graph headroom a plan keeps free
    # is not a reason to refuse it: a run at gpu_memory_utilization 1.0 is predicted like any other).
    if kv_tokens < 2:
        return no_kv_cache_reason(r, settings, memory)
    block = r.engine.kv_block_tokens
    if r.engine.name == "vllm" and row.max_model_len is not None:
        # vLLM refuses to start when its pool cannot hold one request of max_model_len tokens, so a run that was
        # measured at a stated max_model_len had at least that much (a model that says less is short by a
        # fraction of a GiB). Not for the model's default context: a catalog entry may be the base model's.
        kv_tokens = max(kv_tokens, -(-settings.max_model_len // block) * block)
    prompt_mean, output_mean, dataset = _lengths(row)
    # Likewise a run that served requests of a mean length held one of them: engines refuse or abort a request
    # their pool cannot hold (vLLM checks the pool against max_model_len at start and rejects longer prompts), so
    # a pool the model sizes below that is short (docs/model.md#known-gaps), not a run of one-token outputs.
    kv_tokens = max(kv_tokens, -(-math.ceil(prompt_mean + output_mean) // block) * block)
    replicas = _serving_replicas(row, r.replicas)
    load = int(getattr(row.load, "value", 1))
    arrivals = None
    if row.load.kind == "offline" and row.load.num_prompts is None:
        # A maximum-throughput run of unstated length (trtllm-bench, MLPerf Offline): the engine's ceiling, which a
        # queue that stays full gives (SCENARIOS.md): OFFLINE_RUNS_PER_SLOT times the sequences it runs at once.
        requests = min(max(OFFLINE_RUNS_PER_SLOT * int(settings.max_num_seqs), DEFAULT_NUM_PROMPTS),
                       OFFLINE_REQUESTS_CAP)
        clients = 0
    elif row.load.kind in ("burst", "offline"):
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
    cap = stated_eos_cap(row.notes or "") if dataset is None else None
    if cap:  # completions that end at EOS under a cap: the stated mean of lengths that vary, the longest at the cap
        outputs = eos_lengths(requests, output_mean, cap)
    longest = min(settings.max_model_len, kv_tokens - 1)
    prompts = np.minimum(prompts, longest - 1)
    outputs = np.maximum(np.minimum(outputs, longest - prompts), 1)
    hw = _row_hardware(row, r, factors)
    workload = trace_workload(np.zeros(requests) if arrivals is None else arrivals, prompts, outputs)
    return simulate(hw, workload, max_batch=int(settings.max_num_seqs), kv_tokens=kv_tokens,
                    chunk_tokens=settings.step_tokens, policy=settings.scheduling, clients=clients, series_points=2,
                    front_end=SERIAL_FRONT_END, front_end_max_s=FRONT_END_SERIAL_MAX_S)


def _ceiling_run(row: Scenario) -> bool:
    """A maximum-throughput run of unstated length (its rate is the engine's ceiling, not one run's average)."""
    return row.load.kind == "offline" and row.load.num_prompts is None


def steady_throughput(result: SimulationResult) -> tuple[float, float]:
    """(output tokens/s, requests/s) of a run sent all at once, while its queue was full and its batch turned over:
    the tokens generated between the first completion (before it, the first batch is still in its prompts) and the
    last first token (no request waits after it, and the batch drains), over that time; requests at the same rate
    divided by their mean output. The whole run's rates where that window is empty."""
    first, done = result.ttft_s, result.e2e_s  # every request arrived at 0
    start, until = float(done.min()), float(first.max())
    if not until > start:
        return result.output_tokens_per_s, result.requests_per_s
    decoding = np.isfinite(result.tpot_s)
    tpot = np.where(decoding, result.tpot_s, 1.0)
    outputs = np.where(decoding, (done - first) / tpot + 1.0, 1.0)

    def made(t: float) -> np.ndarray:
        return np.where(decoding, np.clip((t - first) / tpot + 1.0, 0.0, outputs), (first <= t).astype(float))

    tokens_per_s = float((made(until) - made(start)).sum()) / (until - start)
    return tokens_per_s, tokens_per_s / float(outputs.mean())


# `TTFT p99 <= 2 s`, and the other spellings of the same limit: `TTFT p99 6s`, `TTFT p99: 2000 ms`, `TTFT p99 < 2s`,
# `TTFT p99 of 2 s`, `TTFT p99 under 2 s` (and the Unicode sign for "at most").
_SLO = re.compile(r"\b(TTFT|TPOT) p99\s*(?:<=|\u2264|<|=|:|of\b|under\b|below\b|within\b)?\s*([\d.]+) ?(ms|s)\b",
                  flags=re.IGNORECASE)


def slo_limits(notes: str) -> dict[str, float]:
    """The p99 limits [s] a highest-SLO-compliant-rate run states in its notes (`TTFT p99 <= 2 s, TPOT p99 <= 200
    ms`, MLPerf Server's rule), by metric ("ttft", "tpot"); empty unless both are there."""
    found = {m.group(1).lower(): float(m.group(2)) * (1e-3 if m.group(3).lower() == "ms" else 1.0)
             for m in _SLO.finditer(notes)}
    return found if set(found) == {"ttft", "tpot"} else {}


SLO_RATE_STEPS = 30  # bisection steps on the rate: a 2^-30 bracket, far finer than any measurement


def slo_rate(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet) -> float | str:
    """The highest Poisson rate [requests/s per instance] at which the planner's own queueing model (`serving.poisson`,
    what a plan's rate search uses) keeps TTFT and TPOT p99 within the limits the row's notes state (MLPerf Server:
    the SUT serves the highest rate that meets them)."""
    limits = slo_limits(row.notes)
    memory = _memory(row, r, settings, factors)
    if memory.kv_cache_tokens < 2:  # as `simulate_run`: the run started, so its headroom sufficed
        return no_kv_cache_reason(r, settings, memory)
    prompt, output, dataset = _lengths(row)
    hw = _row_hardware(row, r, factors)
    prompt_cv = dataset.prompt_cv if dataset else 0.0
    output_cv = dataset.output_cv if dataset else 0.0
    slots = memory.slots(int(settings.max_num_seqs), float(running_context(prompt, output, output_cv)))
    chunk = settings.step_tokens
    traffic = Traffic(prompt, output, prompt_cv, output_cv)
    capacity = float(poisson_capacity(hw, traffic, slots, chunk))
    low, high = 0.0, capacity
    for _ in range(SLO_RATE_STEPS):
        mid = 0.5 * (low + high)
        result = poisson(hw, mid, traffic, slots, chunk, metrics=("ttft", "tpot"))
        ok = (float(result.ttft_q[QUANTILE_VALUES["p99"]]) <= limits["ttft"]
              and float(result.tpot_q[QUANTILE_VALUES["p99"]]) <= limits["tpot"])
        low, high = (mid, high) if ok else (low, mid)
    return low


def _simulated_metric(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet,
                      runs: dict[tuple, SimulationResult | str]) -> float | str | None:
    if row.load.kind == "poisson" and row.load.rate is None:
        if row.metric not in ("output_tps_total", "requests_per_s"):
            return f"metric {row.metric} of a highest-SLO-compliant-rate run is not predicted"
        rate = slo_rate(row, r, settings, factors)
        if isinstance(rate, str):
            return rate
        per_request = _lengths(row)[1] if row.metric == "output_tps_total" else 1.0
        return rate * per_request * float(r.replicas)  # the rate per instance, on every instance
    key = _run_key(row)
    if key not in runs:
        runs[key] = simulate_run(row, r, settings, factors)
    result = runs[key]
    if isinstance(result, str):
        return result
    replicas = float(_serving_replicas(row, r.replicas))
    m = row.metric
    if m in ("output_tps_total", "requests_per_s") and _ceiling_run(row):
        tokens_per_s, requests_per_s = steady_throughput(result)
        return (tokens_per_s if m == "output_tps_total" else requests_per_s) * replicas
    if m == "output_tps_total":
        return result.output_tokens_per_s * replicas
    if m == "requests_per_s":
        return result.requests_per_s * replicas
    if m == "itl_ms_mean":  # the mean gap between streamed tokens, over every gap of every request
        gaps = np.isfinite(result.tpot_s)
        decode_s = (result.e2e_s - result.ttft_s)[gaps]
        if not gaps.any():
            return "no simulated request generated more than one token at the row's KV capacity"
        return 1e3 * float(decode_s.sum() / (decode_s / result.tpot_s[gaps]).sum())
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
    if field is None:
        return None
    value = 1e3 * float(getattr(latency, field))
    if not math.isfinite(value):  # TPOT of a run whose KV cache left every request a single output token
        return "no simulated request generated more than one token at the row's KV capacity"
    return value


def _context_skip_reason(row: Scenario, settings: EngineSettings, simulated: bool) -> str | None:
    """Why a timing row cannot be predicted at its context, or None: vLLM, SGLang and TensorRT-LLM reject a request
    whose prompt and max_tokens exceed the context they serve, whatever the load. Beyond the model's own context
    where the row states none, only a simulated run is refused (the simulator's pool must hold the request): a
    measured run of one request or a static batch that long had its context extended (rope scaling; Qwen2.5's
    128k-token speed runs), and its steps are computed as they are."""
    prompt_mean, output_mean, _ = _lengths(row)
    if simulated and row.input_tokens == 0 and row.dataset is None:
        # A served request has at least one prompt token (vLLM: "The decoder prompt cannot be empty"); an empty
        # prompt is llama-bench's `tg` test, one stream.
        return "an empty prompt (input_tokens 0) under a served load: engines reject a request without prompt tokens"
    if simulated and settings.max_model_len < 2:
        return (f"max_model_len {settings.max_model_len} leaves no room for a request of one prompt and one output "
                "token")
    if prompt_mean + output_mean <= settings.max_model_len or (row.max_model_len is None and not simulated):
        return None
    context = (f"its max_model_len {settings.max_model_len}" if row.max_model_len is not None
               else f"the model's context of {settings.max_model_len} tokens")
    advice = ("" if row.max_model_len is not None else
              "; state the max_model_len the run served (rope scaling extends it) to get the line predicted")
    return (f"the row's requests ({prompt_mean:.0f} prompt + {output_mean:.0f} output tokens) exceed {context}, "
            f"which the engine rejects{advice}")


# A single stream or static batch is computed, not simulated, so no KV pool bounds it; it is refused where its
# weights, or its weights and its requests' KV cache, exceed the GPU memory by more than an engine could have served
# (a batch the scheduler admitted in part, a KV estimate above the engine's). The published rows reach 1.08 (argonne's
# static batch of 64 on four A100-40GB, TensorRT-LLM), impossible runs 10-30x (4096 requests of 8B on an L4).
COMPUTED_MEMORY_OVER = 1.5


def _computed_memory_skip_reason(row: Scenario, r: _Resolved, settings: EngineSettings, factors: FactorSet,
                                 batch: int) -> str | None:
    """Why a single stream or static batch of `batch` requests cannot have run on the row's GPUs, or None: its
    weights per GPU exceed the GPU's memory, or they and the KV cache of its requests at full length exceed it
    COMPUTED_MEMORY_OVER times."""
    memory = _memory(row, r, settings, factors)
    total = float(r.gpu.usable_memory_bytes)
    weights = memory.weights_per_gpu
    if weights > total:
        return _weights_do_not_fit(r, weights, total)
    prompt, output, _ = _lengths(row)
    kv = batch * (prompt + output) * memory.kv_bytes_per_token_gpu
    if weights + kv > COMPUTED_MEMORY_OVER * total:
        return (f"{batch} request(s) of {prompt:.0f} + {output:.0f} tokens need {kv / GIB:.1f} GiB of KV cache per "
                f"GPU beside {weights / GIB:.1f} GiB of weights, {(weights + kv) / total:.1f}x the "
                f"{total / GIB:.1f} GiB of the {r.gpu.key}: fewer or shorter requests, or more GPUs")
    return None


def no_kv_cache_reason(r: _Resolved, settings: EngineSettings, memory: MemoryPlan) -> str:
    """Why a row's deployment has no KV cache, in numbers: its weights (and activations and runtime) per GPU against
    the GPU memory the engine may use at the row's memory fraction, and what would leave room."""
    total = float(r.gpu.usable_memory_bytes)
    weights = memory.weights_per_gpu
    if weights > total:
        return _weights_do_not_fit(r, weights, total)
    rest = memory.activation_per_gpu + memory.non_torch_per_gpu
    budget = settings.memory_fraction * total
    fix = "more GPUs per instance (tensor_parallel), a smaller precision"
    if settings.memory_fraction < 0.95:
        fix += " or a higher gpu_memory_utilization"
    return (f"no KV cache: the {r.precision} weights take {weights / GIB:.1f} GiB per GPU at tensor_parallel {r.tp} x "
            f"pipeline_parallel {r.pp}, and activations and runtime {rest / GIB:.1f} GiB, of the "
            f"{budget / GIB:.1f} GiB the engine may use on the {r.gpu.key} ({settings.memory_fraction:g} x "
            f"{total / GIB:.1f} GiB): {fix}")


def _weights_do_not_fit(r: _Resolved, weights: float, total: float) -> str:
    return (f"the {r.precision} weights take {weights / GIB:.1f} GiB per GPU at tensor_parallel {r.tp} x "
            f"pipeline_parallel {r.pp}, more than the {total / GIB:.1f} GiB of the {r.gpu.key}: more GPUs per "
            "instance or a smaller precision")


def _serving_replicas(row: Scenario, replicas: int) -> int:
    """The replicas of a run of `replicas` that get work: no more than its requests or clients (one closed-loop
    client on eight replicas keeps one busy). A run's throughput is theirs, each serving an even share."""
    kind = row.load.kind
    if kind in ("single", "startup"):
        return 1
    if kind == "offline":
        count = row.load.num_prompts
    elif kind == "poisson":
        count = row.load.num_prompts or DEFAULT_NUM_PROMPTS
    else:
        count = row.load.value
    return max(1, min(replicas, count)) if count is not None else replicas


def _timing_skip_reason(row: Scenario, r: _Resolved) -> str | None:
    if row.dataset is not None:
        try:
            dataset_lengths(row.dataset)
        except CatalogLookupError as exc:
            return f"dataset without a length preset: {exc}"
    preset = row.dataset is not None  # a named dataset's preset gives the lengths a row leaves out
    # A decode speed that excludes the prefill needs no lengths: they only set the context its steps read (a short
    # one where unstated).
    decode_speed = row.metric == "decode_tps_single" and row.includes_prefill is False
    if row.input_tokens is None and not preset and not decode_speed:
        return "prompt token count not stated"
    if row.output_tokens is None and not preset and not decode_speed and not (
            row.metric.startswith("ttft") and row.load.kind != "poisson"):
        return "output token count not stated"
    if row.load.kind == "poisson" and row.load.rate is None and not slo_limits(row.notes):
        return "highest SLO-compliant rate (MLPerf Server) without its TTFT and TPOT p99 limits in the notes"
    if not r.engine.continuous_batching and row.load.kind in ("burst", "concurrency", "poisson", "offline") and \
            getattr(row.load, "value", None) != 1:
        return f"{r.engine.name} serves one stream at a time; concurrent loads are not modelled for it"
    if row.output_tokens == 0 and row.dataset is None and row.metric in OUTPUT_METRICS:
        return (f"output_tokens 0: the run generated no tokens, so it has no {row.metric} (engines ask for at "
                "least one output token: vLLM's max_tokens >= 1)")
    if row.metric.startswith(("tpot", "itl")) and row.output_tokens == 1 and row.dataset is None:
        return "one-token outputs: no token follows the first, so there is no TPOT"
    if row.metric == "decode_tps_single" and row.includes_prefill is None:
        return ("decode_tps_single with includes_prefill null: whether the speed counts the prefill (true: output "
                "tokens over end-to-end time) or not (false: decode tokens over decode time) is not stated")
    prompts = (row.load.num_prompts or DEFAULT_NUM_PROMPTS) if row.load.kind == "poisson" else None
    if prompts is not None and row.load.rate is not None and prompts < r.replicas:
        return f"{prompts} Poisson requests over {r.replicas} replicas: no replica's share is a stream of arrivals"
    return None


def _predict_kind(kind: str, items: list, factors: FactorSet) -> list[float | None]:
    hw = stack_hardware([_row_hardware(row, r, factors) for _, row, r, _ in items])
    rows = [row for _, row, _, _ in items]
    lengths = [_lengths(row) for row in rows]
    p = np.array([prompt for prompt, _, _ in lengths])
    o = np.array([output for _, output, _ in lengths])
    replicas = np.array([float(_serving_replicas(row, r.replicas)) for _, row, r, _ in items])
    if kind == "single":
        result = single_stream(hw, p, o)
    elif kind == "static_batch":
        result = static_batch(hw, np.array([float(row.load.value) for row in rows]), p, o)
    else:  # pragma: no cover - every other load is simulated
        raise ValueError(f"load {kind!r} is simulated, not computed here")
    # A run of one request at a time through an online server (a closed loop, a burst or Poisson arrivals of one)
    # pays the per-request time on its TTFT like any online run; an offline harness does not.
    online = np.array([row.load.kind in ONLINE_LOADS for row in rows])
    extra = np.where(online, np.asarray(hw.request_overhead_s, dtype=float), 0.0)
    if np.any(extra):
        slower = result.e2e_mean / (result.e2e_mean + extra)
        result = replace(result, ttft_mean=result.ttft_mean + extra, e2e_mean=result.e2e_mean + extra,
                         requests_per_s=result.requests_per_s * slower,
                         output_tokens_per_s=result.output_tokens_per_s * slower,
                         ttft_q={q: v + extra for q, v in result.ttft_q.items()},
                         e2e_q={q: v + extra for q, v in result.e2e_q.items()})
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
