"""The search's grid: which GPUs, precisions, TP/PP/EP shapes and engine settings a plan considers, each checked against
memory, placement and the engine's rules before any rate is searched."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.catalog.checkpoints import (
    Checkpoint,
    checkpoint_for,
    checkpoint_precision,
    fp8_weight_only_problem,
    gpu_problem,
)
from inferplan.planner.catalog.engine_args import (
    ENGINE_FLAGS,
    engine_gpu_problem,
    flag_released,
    float16_problem,
    kv_dtype_problem,
)
from inferplan.planner.catalog.engines import (
    SERVED_PRECISIONS,
    EngineProfile,
    EngineSettings,
    expert_tiles,
    sampler_profile_bytes,
    scheduling_of,
)
from inferplan.planner.catalog.gpus import GpuSpec, load_gpu_catalog
from inferplan.planner.catalog.precisions import (
    WeightPrecision,
    kv_dtype_bytes,
    weight_precision,
)
from inferplan.planner.catalog.validity import tp_mask, tp_problem
from inferplan.planner.model.factors import FactorSet
from inferplan.planner.model.memory import (
    GIB,
    MemoryPlan,
    attention_weight_bytes,
    expert_padding_bytes,
    memory_grid,
    mtp_weight_bytes,
    weight_bytes,
)
from inferplan.planner.model.performance import (
    Hardware,
    hardware_grid,
    mla_dp_ratio,
    take_hardware,
    with_dp_attention,
    with_expert_parallel,
    with_mtp,
)
from inferplan.planner.model.serving import (
    running_context,
)
from inferplan.planner.quantiles import normal_ppf
from inferplan.planner.request import PlanRequest
from inferplan.planner.search.core import (
    _Grid,
    _Rejections,
    _Shape,
    gpu_price,
    kv_hint,
    slo_limits,
)

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


CONTEXT_WARN_SHARE = 0.001   # a max model length below the tail of this share of requests is a warning ...


def _settings(req: PlanRequest, engine: EngineProfile, max_batch: int, release: str | None = None) -> EngineSettings:
    """The settings a plan launches `engine` with (its step budget and chunking, as `engine_launch` writes them), run
    by `release` (None: the current release; `annotate.deployment_of`)."""
    max_len = req.max_model_len or min(req.arch.max_position_embeddings, _auto_max_len(req))
    chunked = engine.chunked_prefill if req.chunked_prefill is None else req.chunked_prefill
    budget = req.max_num_batched_tokens or max(engine.default_max_batched_tokens, 0 if chunked else max_len)
    # The release's way of filling a step (docs/engines.md); chunking as the plan says.
    scheduling = scheduling_of(engine.name, release, max_len, chunked)
    return EngineSettings(
        memory_fraction=req.memory_fraction or engine.default_memory_fraction,
        max_model_len=max_len,
        max_num_seqs=max_batch,
        chunk_tokens=float(budget) if chunked else math.inf,
        profile_tokens=budget,
        step_tokens=float(budget),
        scheduling=scheduling,
        sampler_bytes=sampler_profile_bytes(engine.name, release),
    )


def _auto_max_len(req: PlanRequest, share: float = CONTEXT_WARN_SHARE) -> int:
    """The shortest power of two (from 256) that all but `share` of the requests fit in."""
    length = 256
    while context_overflow(req, length) > share and length < 1 << 24:
        length *= 2
    return length


def context_overflow(req: PlanRequest, max_len: int) -> float:
    """Share of requests whose prompt plus output exceed `max_len` tokens (independent lognormal lengths):
    the engine rejects them, or cuts their output short where the client sets no max_tokens."""
    return _overflow(req.prompt_mean, req.prompt_cv, req.output_mean, req.output_cv, max_len)


@lru_cache(maxsize=1024)  # a plan asks the same few lengths a dozen times (engine settings, warnings, assumptions)
def _overflow(prompt_mean: float, prompt_cv: float, output_mean: float, output_cv: float, max_len: int) -> float:
    q = (np.arange(512) + 0.5) / 512
    s2p, s2o = math.log1p(prompt_cv ** 2), math.log1p(output_cv ** 2)
    prompts = prompt_mean * np.exp(math.sqrt(s2p) * normal_ppf(q) - s2p / 2.0)
    left = max_len - prompts
    if s2o == 0.0:
        return float(np.mean(left < output_mean))
    mu, sigma = math.log(output_mean) - s2o / 2.0, math.sqrt(s2o)
    z = (np.log(np.maximum(left, 1e-9)) - mu) / sigma
    above = 0.5 * np.array([math.erfc(v / math.sqrt(2.0)) for v in z])
    return float(np.mean(np.where(left > 0, above, 1.0)))


def _candidate_gpus(req: PlanRequest) -> list[GpuSpec]:
    """The GPU types a plan considers: those it names, else the cluster's, else the catalog's datacenter and
    workstation cards (GeForce cards are not for datacenters: their driver licence forbids it). In the catalog's
    order whichever order the plan or the cluster gives them in: candidates that tie on everything the
    recommendation is ordered by keep this order (docs/planning.md#pareto-frontier)."""
    catalog = load_gpu_catalog()
    if req.gpu_types:
        named = [catalog.get(key) for key in req.gpu_types]  # an unknown key raises, as it always did
        return [gpu for gpu in catalog if gpu in named]
    if req.available_gpus is not None:
        return [gpu for gpu in catalog if req.available_gpus.get(gpu.key, 0) > 0]
    return [gpu for gpu in catalog if gpu.segment != "consumer"]


def checkpoints_of(req: PlanRequest, gpu: GpuSpec) -> list[Checkpoint | str]:
    """Per precision of `req`: the checkpoint its engine loads on `gpu` (`checkpoints.checkpoint_for`: a ModelOpt
    FP8 repository on NVIDIA, FP8 quantised at load on AMD where the engine's ROCm build refuses ModelOpt), or
    why none."""
    return [checkpoint_of(req, name, gpu) for name in req.precisions]


def checkpoint_of(req: PlanRequest, precision: str, gpu: GpuSpec) -> Checkpoint | str:
    """What `req`'s engine loads to serve `precision` on `gpu`, or why nothing."""
    return _checkpoint_for(req.served_model, precision, req.engine, req.precisions_listed, gpu.family,
                           req.engine_version)


@lru_cache(maxsize=4096)
def _checkpoint_for(model: str, precision: str, engine: str, declared: bool, family: str,
                    version: str | None) -> Checkpoint | str:
    """`checkpoint_for`, once per argument set: a whole-catalog plan asks it for every GPU and precision (330
    times, 9 ms), on a handful of GPU families. Checkpoints are frozen; the reasons are strings."""
    return checkpoint_for(model, precision, engine, declared=declared, gpu_family=family, version=version)


def _precision_problem(engine: EngineProfile, gpu: GpuSpec, name: str, precision: WeightPrecision,
                       checkpoint: Checkpoint | str, version: str | None = None, architecture: str = "") -> str | None:
    if (problem := engine_gpu_problem(engine.name, version, gpu.vendor, gpu.family, gpu.key)) is not None:
        return problem
    if name not in SERVED_PRECISIONS.get(engine.name, ()):
        return f"{engine.name} does not serve {name} weights"
    if (problem := float16_problem(engine.name, version, architecture, name, gpu.family, gpu.key)) is not None:
        return problem
    if isinstance(checkpoint, str):
        return checkpoint
    if precision.compute == "fp8" and not gpu.fp8_tflops and (
            problem := fp8_weight_only_problem(checkpoint, engine.name, gpu.family, version)) is not None:
        return f"{name} needs FP8 tensor cores; {gpu.key} has none ({problem})"
    if precision.compute == "int8" and not gpu.int8_tops:
        return f"{name} needs INT8 tensor cores; {gpu.key} has none in the catalog"
    problem = gpu_problem(checkpoint, engine.name, gpu.family, version)  # FP4 formats: GPUs and releases
    return f"{problem} ({gpu.key})" if problem else None


# vLLM and SGLang quantise a 16-bit repository to FP8 after loading it whole: the layers are created in 16 bits,
# every weight is loaded, and only then does each layer's process_weights_after_loading cast it (vLLM 0.11.0
# model_loader/base_loader.py and quantization/fp8.py, "For non-serialized checkpoints, use original dtype";
# SGLang 0.5.4 model_loader/loader.py and quantization/fp8.py). A replica's GPUs hold its 16-bit weights while
# loading, whatever the FP8 weights they serve with. TGI quantises each weight as it reads it.
LOAD_THEN_QUANTISE = frozenset({"vllm", "sglang"})


def load_peak_bytes(req: PlanRequest, checkpoint: Checkpoint | str, gpus: int) -> float:
    """The weights one of a replica's `gpus` GPUs holds while the engine loads `checkpoint` [bytes]: its 16-bit
    weights where the engine quantises them after loading (`LOAD_THEN_QUANTISE`), else 0 (the served weights,
    which the memory gate counts)."""
    if not (isinstance(checkpoint, Checkpoint) and checkpoint.online and req.engine in LOAD_THEN_QUANTISE):
        return 0.0
    return weight_bytes(req.arch, weight_precision("bf16")) / gpus


def _memory_problem(req: PlanRequest, shape: _Shape, memory: MemoryPlan, settings: EngineSettings) -> str | None:
    """Why `memory` does not work (the checks `_grid` makes over arrays, in words), None when it does."""
    usable = shape.gpu.usable_memory_bytes / GIB
    peak = load_peak_bytes(req, checkpoint_of(req, shape.precision, shape.gpu), shape.tp * shape.pp) / GIB
    if peak >= usable:
        return (f"{req.engine} quantises {req.served_model} to {shape.precision} only after loading its 16-bit "
                f"weights: {peak:.1f} GiB per GPU at TP {shape.tp}{f' x PP {shape.pp}' if shape.pp > 1 else ''} "
                f"while loading; {shape.gpu.key} has {usable:.1f} GiB")
    budget = settings.memory_fraction * usable
    fixed = (memory.weights_per_gpu + memory.activation_per_gpu + memory.non_torch_per_gpu) / GIB
    if fixed >= budget:
        return (f"{req.served_model} {shape.precision} needs {memory.weights_per_gpu / GIB:.1f} GiB of weights "
                f"plus {fixed - memory.weights_per_gpu / GIB:.1f} GiB of activations and runtime per GPU at "
                f"TP {shape.tp}{f' x PP {shape.pp}' if shape.pp > 1 else ''}; "
                f"{shape.gpu.key} gives the engine {budget:.1f} GiB ({settings.memory_fraction:g} x {usable:.1f})")
    if memory.kv_cache_tokens < settings.max_model_len:
        return (f"the KV cache holds {memory.kv_cache_tokens} tokens on {shape.parallelism()}, "
                f"less than one {settings.max_model_len}-token sequence")
    if memory.headroom_per_gpu < 0:
        return (f"gpu memory utilization {settings.memory_fraction:g} leaves no room for "
                f"{memory.cuda_graph_per_gpu / GIB:.1f} GiB of CUDA graphs on {shape.gpu.key}")
    return None


def _grid(req: PlanRequest, engine: EngineProfile, factors: FactorSet) -> _Grid:
    """Every shape of `req` through the placement, memory and precision gates, as arrays."""
    gpus = _candidate_gpus(req)
    # As the repository the plan names holds them (Meta's FP8 405B quantises its feed-forward layers only).
    precisions = [checkpoint_precision(name, req.served_model) for name in req.precisions]
    # Without continuous batching an engine runs one sequence per replica: it scales by replicas only.
    batch_sizes = np.array(BATCH_SIZES if engine.continuous_batching else (1,))
    settings = _settings(req, engine, int(batch_sizes[0]))
    # The batch sizes share every setting but max_num_seqs.
    batch_settings = [replace(settings, max_num_seqs=int(batch)) for batch in batch_sizes]
    # Shapes: (GPU, TP, precision, KV dtype) and, where the engine has it for the model, data-parallel
    # attention beside tensor-parallel attention (at TP above 1); and, where a replica may span nodes and the
    # engine pipelines, 2 .. maxNodesPerReplica stages of a whole node each (TP the node's GPUs).
    # Attention modes: tensor-parallel; data-parallel (DP); DP with the MoE layers expert-parallel (EP).
    modes = [(False, False)] + ([(True, False)] if dp_attention_possible(req) else []) + (
        [(True, True)] if expert_parallel_possible(req) else [])
    stages = np.arange(1, req.max_nodes_per_replica + 1) if pipeline_possible(req) else np.ones(1, dtype=int)
    axes = (len(gpus), len(req.tp_sizes), len(precisions), len(req.kv_dtypes))
    gpu, ti, pi, ki, ai, si = (axis.ravel() for axis in np.indices((*axes, len(modes), len(stages))))
    dp, ep, pp = np.array([m[0] for m in modes])[ai], np.array([m[1] for m in modes])[ai], stages[si]
    node_gpus = np.array([req.gpus_per_node.get(g.key, 8) for g in gpus])
    domain_gpus = np.array([link_domain_gpus(req, g) for g in gpus])
    exists = (~dp | (np.array(req.tp_sizes)[ti] > 1)) & (
        (pp == 1) | (~dp & (np.array(req.tp_sizes)[ti] == node_gpus[gpu]) & (pp <= req.arch.num_layers)))
    gpu, ti, pi, ki, dp, ep, pp = (a[exists] for a in (gpu, ti, pi, ki, dp, ep, pp))
    tp = np.array(req.tp_sizes)[ti]
    price = np.array([gpu_price(req, g) for g in gpus])[gpu]
    per_node = node_gpus[gpu]
    checkpoints = [checkpoints_of(req, g) for g in gpus]
    kv_bytes = np.array([[[kv_dtype_bytes(kv, name, req.engine, kv_hint(c)) for kv in req.kv_dtypes]
                          for name, c in zip(req.precisions, row, strict=True)] for row in checkpoints])
    rejected: list[_Rejections] = []

    def shape(s: int) -> _Shape:
        return _Shape(gpus[gpu[s]], int(tp[s]), req.precisions[pi[s]], req.kv_dtypes[ki[s]], bool(dp[s]),
                      int(pp[s]), bool(ep[s]))

    replica_price = tp * pp * price
    accepted = tp_mask(req.engine, req.arch, req.tp_sizes)[ti]
    refused = np.flatnonzero(~accepted)
    rejected.append(_Rejections(
        "parallelism", refused, refused, None, replica_price[refused],
        lambda s: tp_problem(req.engine, req.arch, int(tp[s])) or ""))
    # A replica within a node, or over up to maxNodesPerReplica whole nodes (TP a multiple of the node's GPUs).
    over_nodes = tp > per_node
    fits = ~over_nodes | ((tp % per_node == 0) & (tp <= per_node * req.max_nodes_per_replica))
    misplaced = np.flatnonzero(~fits)
    placed = fits & accepted  # what goes on through the gates
    rejected.append(_Rejections(
        "placement", misplaced, misplaced, None, replica_price[misplaced], lambda s: _placement_problem(
            req, tp[s], gpus[gpu[s]].key, per_node[s])))

    # Memory of every (shape, batch size) at once: axis 0 shapes, axis 1 batch sizes.
    usable = np.array([float(g.usable_memory_bytes) for g in gpus])[gpu]
    weights = np.array([weight_bytes(req.arch, p) for p in precisions])[pi]
    if req.arch.is_moe and any(expert_tiles(engine.name, p.name, g.vendor, g.family) for p in precisions for g in gpus):
        # the experts as the engine pads them to its kernels' tiles (gpt-oss's MXFP4 on vLLM), per (GPU, precision,
        # TP) of each shape
        keys = np.stack([gpu, pi, tp], axis=1)
        pairs, back = np.unique(keys, axis=0, return_inverse=True)
        pads = np.array([float(expert_padding_bytes(req.arch, precisions[j], engine.name, gpus[g], t))
                         for g, j, t in pairs])
        weights = weights + pads[back.reshape(-1)]
    attention = np.array([attention_weight_bytes(req.arch, p) for p in precisions])[pi]
    weights = weights + np.where(dp, attention * (tp - 1), 0.0)  # dp_attention_weights, per shape
    mtp = req.mtp_draft_tokens > 0
    if mtp:  # the MTP modules a drafting engine loads
        weights = weights + np.array([mtp_weight_bytes(req.arch, p) for p in precisions])[pi]
    memory = memory_grid(req.arch, usable[:, None], weights[:, None], kv_bytes[gpu, pi, ki][:, None], engine,
                         factors.engine(engine.name), tp[:, None], profile_tokens=settings.profile_tokens,
                         max_num_seqs=batch_sizes[None, :], memory_fraction=settings.memory_fraction,
                         max_model_len=settings.max_model_len, pp=pp[:, None],
                         sampler_bytes=settings.sampler_bytes, mtp_layers=req.arch.mtp_layers if mtp else 0)
    fixed = (memory.weights_per_gpu + memory.activation_per_gpu + memory.non_torch_per_gpu) / GIB
    peak = np.array([[load_peak_bytes(req, c, 1) for c in row] for row in checkpoints])[gpu, pi] / (tp * pp)
    problem = ((fixed >= (settings.memory_fraction * (usable / GIB))[:, None])
               | (memory.kv_cache_tokens < settings.max_model_len) | (memory.headroom_per_gpu < 0)
               | (peak >= usable)[:, None])
    # Batch sizes are tried in increasing order up to the first that does not fit, and no further than the
    # first whose cap the KV pool already binds (from there on the pool, not the cap, bounds concurrency).
    # A replica's tokens: every rank holds the same ones, or with data-parallel attention its own.
    tokens = memory.kv_cache_tokens * np.where(dp, tp, 1)[:, None]
    kv_bound = tokens / running_context(req.prompt_mean, req.output_mean, req.output_cv) <= batch_sizes
    bound_before = np.zeros_like(kv_bound)
    bound_before[:, 1:] = np.logical_or.accumulate(kv_bound, axis=1)[:, :-1]
    fitting = np.logical_and.accumulate(~problem, axis=1) & ~bound_before & placed[:, None]
    too_big = np.flatnonzero(problem[:, 0])  # misplaced shapes too: their reasons list every gate they fail
    rejected.append(_Rejections(
        "memory", too_big, too_big, np.full(len(too_big), batch_sizes[0]), replica_price[too_big],
        lambda s: _memory_problem(req, shape(s), memory.plan((s, 0)), settings) or "",
        _memory_miss(peak[too_big], fixed[too_big, 0], settings.memory_fraction * usable[too_big] / GIB,
                     memory.kv_cache_tokens[too_big, 0], settings.max_model_len,
                     memory.headroom_per_gpu[too_big, 0], usable[too_big])))

    problems = [[_precision_problem(engine, g, name, p, c, req.engine_version, req.arch.architecture)
                 for name, p, c in zip(req.precisions, precisions, row, strict=True)]
                for g, row in zip(gpus, checkpoints, strict=True)]
    kv_problems = [[kv_dtype_problem(engine.name, req.engine_version, g.family, kv, g.key) for kv in req.kv_dtypes]
                   for g in gpus]
    unsupported = (np.array([[problem is not None for problem in row] for row in problems], dtype=bool)[gpu, pi]
                   | np.array([[problem is not None for problem in row] for row in kv_problems], dtype=bool)[gpu, ki])
    unserved = np.flatnonzero(unsupported)
    rejected.append(_Rejections(
        "precision", unserved, unserved, None, replica_price[unserved],
        lambda s: problems[gpu[s]][pi[s]] or kv_problems[gpu[s]][ki[s]] or ""))
    fitting &= ~unsupported[:, None]

    row_shape, row_batch = np.nonzero(fitting)
    # factors.engine_on: the engine's factors on each GPU type (an online calibration may override them).
    needed = np.zeros((len(gpus), len(precisions)), dtype=bool)  # the (GPU, precision) pairs any row evaluates
    needed[gpu[row_shape], pi[row_shape]] = True
    flat = _shape_hardware(req, gpus, precisions, kv_bytes, engine, factors, pp,
                           np.ravel_multi_index((gpu, ti, pi, ki), axes), needed, settings.step_tokens)
    # Over nodes, a replica's collectives cross the network unless one NVLink domain joins its nodes (GB200 NVL72).
    domain = domain_gpus[gpu]
    over_network = over_nodes & (tp > domain)
    if np.any(over_network & placed):
        flat = over_the_network(flat, over_network, req.network_gbps)
    if np.any(pp > 1):
        flat = over_the_pipeline(flat, req.network_gbps, tp * pp > domain)
    if np.any(dp):
        ratio = np.ones(len(dp))
        ratios: dict[tuple[int, float, float], float] = {}  # per (GPU, KV bytes, TP): few against the rows
        for r in np.flatnonzero(dp):
            key = (int(gpu[r]), float(kv_bytes[gpu[r], pi[r], ki[r]]), float(tp[r]))
            if key not in ratios:
                ratios[key] = float(mla_dp_ratio(req.arch, gpus[key[0]], engine.name, key[1], key[2]))
            ratio[r] = ratios[key]
        flat = with_dp_attention(flat, dp, attention, ratio)
    if np.any(ep):
        flat = with_expert_parallel(flat, ep, req.arch, domain)
    if mtp:
        flat = with_mtp(flat, req.arch, req.mtp_draft_tokens, req.mtp_tokens_per_step)
    return _Grid(gpus, gpu, tp, pi, ki, dp, pp, ep, price, flat, batch_sizes, batch_settings, row_shape, row_batch,
                 tokens[row_shape, row_batch], rejected, checkpoints, slo_limits(req, factors, gpus))


def _shape_hardware(req: PlanRequest, gpus: list[GpuSpec], precisions: list[WeightPrecision],
                    kv_bytes: NDArray[np.float64], engine: EngineProfile, factors: FactorSet, pp: NDArray[np.int_],
                    cell: NDArray[np.intp], needed: NDArray[np.bool_] | None = None,
                    step_tokens: float | None = None) -> Hardware:
    """The hardware of every shape: cell `cell` (of the flat (GPU, TP, precision, KV dtype) grid) at `pp` stages,
    one `hardware_grid` per number of stages; step times only of the (GPU, precision) pairs `needed` (all if
    None), NaN for the rest; the CUDA graphs of the plan's step budget `step_tokens` (`cuda_graph_max_batch`)."""
    out: Hardware | None = None
    for stages in sorted(set(pp.tolist())):  # not np.unique: without its indices it imports numpy.ma (5 ms)
        grid = hardware_grid(req.arch, gpus, precisions, kv_bytes, engine,
                             [factors.engine_on(engine.name, g.key, g.vendor) for g in gpus], req.tp_sizes, int(stages),
                             needed, req.engine_release, step_tokens)
        flat = take_hardware(Hardware(**{name: np.ravel(value) for name, value in vars(grid).items()}), cell)
        mine = pp == stages
        out = flat if out is None else Hardware(**{name: np.where(mine, getattr(flat, name), getattr(out, name))
                                                   for name in vars(flat)})
    assert out is not None
    return out


def dp_attention_possible(req: PlanRequest) -> bool:
    """Whether the plan's engine runs the model with data-parallel attention: SGLang's `--enable-dp-attention`
    (in the pinned flags of its version line) for MLA models (DeepSeek-V2/V3/R1), whose latent KV every
    tensor-parallel rank would otherwise hold whole."""
    return (req.engine == "sglang" and req.arch.is_mla
            and flag_released("sglang", req.engine_version, ENGINE_FLAGS["sglang"].dp_attention[0]))


def expert_parallel_possible(req: PlanRequest) -> bool:
    """Whether the search also plans the MoE layers expert-parallel: SGLang with data-parallel attention
    (`dp_attention_possible`) whose pinned parser has `--ep-size` and DeepEP's switch, for a mixture of experts."""
    if not dp_attention_possible(req) or req.arch.num_experts <= 0:
        return False
    version = req.engine_version
    return flag_released("sglang", version, ENGINE_FLAGS["sglang"].ep[0]) and any(
        flag_released("sglang", version, switch) for switch in ("--moe-a2a-backend", "--enable-deepep-moe"))


def pipeline_possible(req: PlanRequest) -> bool:
    """Whether the plan lets a replica span nodes and its engine (version line) splits a model's layers into
    pipeline stages: vLLM, SGLang and TensorRT-LLM, each with its flag (`EngineFlags.pp`) in its pinned parser."""
    flags = ENGINE_FLAGS.get(req.engine)
    return (req.max_nodes_per_replica > 1 and flags is not None and bool(flags.pp)
            and flag_released(req.engine, req.engine_version, flags.pp[0]))


def link_domain_gpus(req: PlanRequest, gpu: GpuSpec) -> int:
    """GPUs one replica of `gpu` reaches without the nodes' network: a node's (`req.gpus_per_node`), or the NVLink
    domain that joins several nodes (GB200 NVL72: 72 GPUs in trays of 4, `GpuSpec.nvlink_domain_gpus`)."""
    return gpu.link_domain_gpus(req.gpus_per_node.get(gpu.key, 8))


def _placement_problem(req: PlanRequest, tp: int, key: str, per_node: int) -> str:
    if req.max_nodes_per_replica == 1:
        return (f"TP {tp} needs {tp} {key} in one node; nodes have {per_node} (constraints.maxNodesPerReplica "
                "lets a replica span nodes)")
    if tp % per_node:
        return f"TP {tp} does not split evenly over nodes of {per_node} {key}"
    return (f"TP {tp} needs {tp // per_node} nodes of {per_node} {key}; maxNodesPerReplica is "
            f"{req.max_nodes_per_replica}")


INTER_NODE_ALLREDUCE_LATENCY_S = 25e-6  # NCCL's small-message all-reduce between nodes over InfiniBand/RoCE


def over_the_network(hw: Hardware, over_nodes: NDArray[np.bool_], network_gbps: float) -> Hardware:
    """`hw` (one row per shape) with the all-reduces of the rows `over_nodes` (a replica over several nodes)
    over the network: a ring over every rank crosses the nodes' NICs, so each rank moves its share at its NIC's
    rate (`network_gbps` at LINK_EFFICIENCY) instead of NVLink's, with an inter-node latency per all-reduce."""
    from inferplan.planner.model.disaggregated import LINK_EFFICIENCY

    nic = network_gbps * 1e9 / 8.0 * LINK_EFFICIENCY
    return replace(hw, link_bytes_s=np.where(over_nodes, np.minimum(hw.link_bytes_s, nic), hw.link_bytes_s),
                   link_latency_s=np.where(over_nodes, INTER_NODE_ALLREDUCE_LATENCY_S, hw.link_latency_s),
                   link_knee_s_per_byte=np.where(over_nodes, 0.0, hw.link_knee_s_per_byte))


def over_the_pipeline(hw: Hardware, network_gbps: float,
                      over_network: NDArray[np.bool_] | bool = True) -> Hardware:
    """`hw` (one row per shape) with the sends between pipeline stages on separate nodes: a stage sends each
    token's hidden state (the all-reduce's bytes) to the next at the NIC's rate (`network_gbps` at
    LINK_EFFICIENCY) after INTER_NODE_ALLREDUCE_LATENCY_S; pp - 1 sends per pass, counted per stage. On the rows
    not `over_network` (all stages within one NVLink domain, `link_domain_gpus`) at the link's rate and latency."""
    from inferplan.planner.model.disaggregated import LINK_EFFICIENCY

    nic = network_gbps * 1e9 / 8.0 * LINK_EFFICIENCY
    pp = np.asarray(hw.pp, dtype=float)
    share = (pp - 1.0) / pp
    rate = np.where(over_network, nic, hw.link_bytes_s)
    latency = np.where(over_network, INTER_NODE_ALLREDUCE_LATENCY_S, hw.link_latency_s)
    return replace(hw, stage_send_latency_s=share * latency,
                   stage_send_s_per_token=share * np.asarray(hw.allreduce_bytes_per_token) / rate)


def _memory_miss(load_peak: NDArray[np.float64], fixed_gib: NDArray[np.float64], budget_gib: NDArray[np.float64],
                 kv_tokens: NDArray[np.float64], max_model_len: int, headroom: NDArray[np.float64],
                 usable: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per shape the memory gate rejects, how far it is from fitting, in the order `_memory_problem` words it:
    the 16-bit weights loaded before quantising (`load_peak` [bytes]) over the GPU's memory; else weights,
    activations and runtime over the engine's share [GiB / GiB]; else one max-model-length sequence over the KV
    cache's tokens; else the memory needed over the GPU's (`headroom` [bytes] below 0 of `usable` [bytes])."""
    return np.where(load_peak >= usable, load_peak / usable,
                    np.where(fixed_gib >= budget_gib, fixed_gib / budget_gib,
                             np.where(kv_tokens < max_model_len, max_model_len / np.maximum(kv_tokens, 1.0),
                                      1.0 - np.minimum(headroom, 0.0) / usable)))
