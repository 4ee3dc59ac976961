"""Capacity search: from a workload and its SLOs to the cheapest deployment and its Pareto alternatives.

Every (GPU type x tensor-parallel size x weight precision x KV dtype x max batch) is a candidate. The
candidates pass through gates in a fixed order (`GATES`); each that passes the SLO gate gets the highest
request rate one replica sustains within every SLO and the utilisation cap, and from it the replicas, GPUs
and cost. The recommendation is the cheapest feasible candidate, ties broken by headroom; the alternatives
are the Pareto frontier over (cost, TTFT, TPOT, end-to-end latency at the SLO percentiles), sorted by cost.

Everything is computed as arrays over the candidates, without a Python loop over shapes or batch sizes:
memory and hardware for the whole (GPU, TP, precision, KV dtype, batch) grid at once; the queueing model's
rate-free part once per shape (`serving.poisson_model`); the highest rate by a search that lands where a
geometric bisection would, in fewer evaluations of the model (`_RateSearch`). Reasons for rejections are
only worded for the few shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.catalog.checkpoints import Checkpoint, checkpoint_for, gpu_problem
from inferplan.planner.catalog.engine_args import ENGINE_FLAGS, engine_flags, version_line
from inferplan.planner.catalog.engines import (
    ENGINES,
    SERVED_PRECISIONS,
    EngineProfile,
    EngineSettings,
    factor_key,
    sampler_profile_bytes,
    scheduling_of,
)
from inferplan.planner.catalog.gpus import GpuSpec, load_gpu_catalog
from inferplan.planner.catalog.precisions import (
    WEIGHT_PRECISIONS,
    WeightPrecision,
    kv_dtype_bytes,
    weight_precision,
)
from inferplan.planner.catalog.validity import tp_mask, tp_problem
from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.model.intervals import DEFAULT_CONFIDENCE, Evidence, load_intervals
from inferplan.planner.model.kernels import kernel_basis
from inferplan.planner.model.memory import (
    GIB,
    MemoryPlan,
    attention_weight_bytes,
    memory_grid,
    plan_memory_for_settings,
    weight_bytes,
)
from inferplan.planner.model.performance import (
    Hardware,
    build_hardware,
    hardware_grid,
    stack_hardware,
    take_hardware,
    with_dp_attention,
    with_expert_parallel,
)
from inferplan.planner.model.serving import (
    PoissonModel,
    poisson,
    poisson_capacity,
    poisson_model,
    running_context,
)
from inferplan.planner.quantiles import QUANTILE_NAMES, normal_ppf
from inferplan.planner.results import (
    Candidate,
    Infeasible,
    Intervals,
    PercentileIntervals,
    Percentiles,
    PlanResult,
    ShapeOption,
    UpperCost,
    cost_of,
    headroom,
    replica_shape,
    rounded,
)
from inferplan.planner.search.core import (
    _COUNTED,
    FIRST_PASS_ROWS,
    PRACTICAL_COST_FACTOR,
    REPORT_SAMPLES,
    UNMEASURED_EVIDENCE,
    UNMEASURED_STEP_SLOWDOWN,
    CountBounds,
    _candidate,
    _Grid,
    _limit_checks,
    _RateSearch,
    _Rejections,
    _replicas,
    _Rows,
    _Shape,
    _tail_warning,
    _unmeasured_warning,
    kv_hint,
    output_tokens_per_hour,
)
from inferplan.planner.spec import TP_SIZES, PlanRequest, SloTarget

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
GATES = ("parallelism", "placement", "memory", "precision", "slo", "utilization", "maxReplicas", "inventory",
         "maxGpus", "budget", "verify")  # verify: the simulator's check (inferplan.planner.simulation.verification)
SHAPE_GATES = frozenset(GATES[:4])  # gates of a whole shape (every batch cap); the later ones are per row
# The limits checked after the SLOs, in order: the gate each reports.
LIMIT_CHECKS = ("maxReplicas", "inventory", "maxGpus", "maxGpus", "budget")
CONTEXT_WARN_SHARE = 0.001   # a max model length below the tail of this share of requests is a warning ...
CONTEXT_LIMIT_SHARE = 0.05   # ... and above this share the plan is infeasible: a plan for errors
NEAR_DUPLICATE = 0.1         # alternatives within this relative distance on every latency objective, at one cost,
                             # are one choice: only the first (cheapest, most headroom) is shown
_NONE = np.zeros(0, dtype=np.intp)
_EMPTY = np.zeros(0)


def _settings(req: PlanRequest, engine: EngineProfile, max_batch: int) -> EngineSettings:
    max_len = req.max_model_len or min(req.arch.max_position_embeddings, _auto_max_len(req))
    chunked = engine.chunked_prefill if req.chunked_prefill is None else req.chunked_prefill
    budget = req.max_num_batched_tokens or max(engine.default_max_batched_tokens, 0 if chunked else max_len)
    # The current release's way of filling a step (docs/engines.md); chunking as the plan says.
    scheduling = replace(scheduling_of(engine.name, None, max_len), chunked=chunked)
    return EngineSettings(
        memory_fraction=req.memory_fraction or engine.default_memory_fraction,
        max_model_len=max_len,
        max_num_seqs=max_batch,
        chunk_tokens=float(budget) if chunked else math.inf,
        profile_tokens=budget,
        step_tokens=float(budget),
        scheduling=scheduling,
        sampler_bytes=sampler_profile_bytes(engine.name, None),
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
    workstation cards (GeForce cards are not for datacenters: their driver licence forbids it)."""
    catalog = load_gpu_catalog()
    if req.gpu_types:
        return [catalog.get(key) for key in req.gpu_types]
    if req.available_gpus is not None:
        return [catalog.get(key) for key, count in sorted(req.available_gpus.items()) if count > 0]
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
                       checkpoint: Checkpoint | str, version: str | None = None) -> str | None:
    if name not in SERVED_PRECISIONS.get(engine.name, ()):
        return f"{engine.name} does not serve {name} weights"
    if isinstance(checkpoint, str):
        return checkpoint
    if precision.compute == "fp8" and not gpu.fp8_tflops:
        return f"{name} needs FP8 tensor cores; {gpu.key} has none"
    if precision.compute == "int8" and not gpu.int8_tops:
        return f"{name} needs INT8 tensor cores; {gpu.key} has none in the catalog"
    problem = gpu_problem(checkpoint, engine.name, gpu.family, version)  # FP4 formats: GPUs and releases
    return f"{problem} ({gpu.key})" if problem else None


def _memory_problem(req: PlanRequest, shape: _Shape, memory: MemoryPlan, settings: EngineSettings) -> str | None:
    """Why `memory` does not work (the checks `_grid` makes over arrays, in words), None when it does."""
    usable = shape.gpu.usable_memory_bytes / GIB
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


def _describe_slo(slo: SloTarget) -> str:
    return f"{slo.metric.upper()} {QUANTILE_NAMES[slo.quantile]}"


def _grid(req: PlanRequest, engine: EngineProfile, factors: FactorSet) -> _Grid:
    """Every shape of `req` through the placement, memory and precision gates, as arrays."""
    gpus = _candidate_gpus(req)
    # The plan's names are canonical: look them up directly (weight_precision also matches spellings).
    precisions = [WEIGHT_PRECISIONS.get(name) or weight_precision(name) for name in req.precisions]
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
    price = np.array([req.prices.get(g.key, g.usd_per_hour) for g in gpus])[gpu]
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
    attention = np.array([attention_weight_bytes(req.arch, p) for p in precisions])[pi]
    weights = weights + np.where(dp, attention * (tp - 1), 0.0)  # dp_attention_weights, per shape
    memory = memory_grid(req.arch, usable[:, None], weights[:, None], kv_bytes[gpu, pi, ki][:, None], engine,
                         factors.engine(engine.name), tp[:, None], profile_tokens=settings.profile_tokens,
                         max_num_seqs=batch_sizes[None, :], memory_fraction=settings.memory_fraction,
                         max_model_len=settings.max_model_len, pp=pp[:, None],
                         sampler_bytes=settings.sampler_bytes)
    fixed = (memory.weights_per_gpu + memory.activation_per_gpu + memory.non_torch_per_gpu) / GIB
    problem = ((fixed >= (settings.memory_fraction * (usable / GIB))[:, None])
               | (memory.kv_cache_tokens < settings.max_model_len) | (memory.headroom_per_gpu < 0))
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
        _memory_miss(fixed[too_big, 0], settings.memory_fraction * usable[too_big] / GIB,
                     memory.kv_cache_tokens[too_big, 0], settings.max_model_len,
                     memory.headroom_per_gpu[too_big, 0], usable[too_big])))

    problems = [[_precision_problem(engine, g, name, p, c, req.engine_version)
                 for name, p, c in zip(req.precisions, precisions, row, strict=True)]
                for g, row in zip(gpus, checkpoints, strict=True)]
    unsupported = np.array([[problem is not None for problem in row] for row in problems], dtype=bool)[gpu, pi]
    unserved = np.flatnonzero(unsupported)
    rejected.append(_Rejections(
        "precision", unserved, unserved, None, replica_price[unserved],
        lambda s: problems[gpu[s]][pi[s]] or ""))
    fitting &= ~unsupported[:, None]

    row_shape, row_batch = np.nonzero(fitting)
    # factors.engine_on: the engine's factors on each GPU type (an online calibration may override them).
    needed = np.zeros((len(gpus), len(precisions)), dtype=bool)  # the (GPU, precision) pairs any row evaluates
    needed[gpu[row_shape], pi[row_shape]] = True
    flat = _shape_hardware(req, gpus, precisions, kv_bytes, engine, factors, pp,
                           np.ravel_multi_index((gpu, ti, pi, ki), axes), needed)
    # Over nodes, a replica's collectives cross the network unless one NVLink domain joins its nodes (GB200 NVL72).
    domain = domain_gpus[gpu]
    over_network = over_nodes & (tp > domain)
    if np.any(over_network & placed):
        flat = over_the_network(flat, over_network, req.network_gbps)
    if np.any(pp > 1):
        flat = over_the_pipeline(flat, req.network_gbps, tp * pp > domain)
    if np.any(dp):
        flat = with_dp_attention(flat, dp, attention)
    if np.any(ep):
        flat = with_expert_parallel(flat, ep, req.arch, domain)
    return _Grid(gpus, gpu, tp, pi, ki, dp, pp, ep, price, flat, batch_sizes, batch_settings, row_shape, row_batch,
                 tokens[row_shape, row_batch], rejected, checkpoints)


def _shape_hardware(req: PlanRequest, gpus: list[GpuSpec], precisions: list[WeightPrecision],
                    kv_bytes: NDArray[np.float64], engine: EngineProfile, factors: FactorSet, pp: NDArray[np.int_],
                    cell: NDArray[np.intp], needed: NDArray[np.bool_] | None = None) -> Hardware:
    """The hardware of every shape: cell `cell` (of the flat (GPU, TP, precision, KV dtype) grid) at `pp` stages,
    one `hardware_grid` per number of stages; step times only of the (GPU, precision) pairs `needed` (all if
    None), NaN for the rest."""
    out: Hardware | None = None
    for stages in sorted(set(pp.tolist())):  # not np.unique: without its indices it imports numpy.ma (5 ms)
        grid = hardware_grid(req.arch, gpus, precisions, kv_bytes, engine,
                             [factors.engine_on(engine.name, g.key, g.vendor) for g in gpus], req.tp_sizes, int(stages),
                             needed)
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
    line = version_line(req.engine, req.engine_version)
    return (req.engine == "sglang" and req.arch.is_mla and bool(line)
            and ENGINE_FLAGS["sglang"].dp_attention[0] in engine_flags()["sglang"][line]["flags"])


def expert_parallel_possible(req: PlanRequest) -> bool:
    """Whether the search also plans the MoE layers expert-parallel: SGLang with data-parallel attention
    (`dp_attention_possible`) whose pinned parser has `--ep-size` and DeepEP's switch, for a mixture of experts."""
    if not dp_attention_possible(req) or req.arch.num_experts <= 0:
        return False
    flags = engine_flags()["sglang"][version_line(req.engine, req.engine_version)]["flags"]
    return ENGINE_FLAGS["sglang"].ep[0] in flags and ("--moe-a2a-backend" in flags or "--enable-deepep-moe" in flags)


def pipeline_possible(req: PlanRequest) -> bool:
    """Whether the plan lets a replica span nodes and its engine (version line) splits a model's layers into
    pipeline stages: vLLM, SGLang and TensorRT-LLM, each with its flag (`EngineFlags.pp`) in its pinned parser."""
    flags = ENGINE_FLAGS.get(req.engine)
    line = version_line(req.engine, req.engine_version)
    return (req.max_nodes_per_replica > 1 and flags is not None and bool(flags.pp) and bool(line)
            and flags.pp[0] in engine_flags()[req.engine][line]["flags"])


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
                   link_latency_s=np.where(over_nodes, INTER_NODE_ALLREDUCE_LATENCY_S, hw.link_latency_s))


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


@contextmanager
def count_bounds() -> Iterator[CountBounds]:
    """Record every GPU need that planning inside the block compares with an available count (the one
    comparison, in `_limit_checks`, and the suggestions' wording): `bounds()` then says between which counts of
    each GPU type the same planning gives the same answer, so that a count moving within them needs no new
    plan (the operator's inventory, docs/operator.md)."""
    recorder = CountBounds()
    token = _COUNTED.set(recorder)
    try:
        yield recorder
    finally:
        _COUNTED.reset(token)


def _limit_reason(req: PlanRequest, check: int, shape: _Shape, replicas: int, gpus: int, cost: float) -> str:
    key = shape.gpu.key
    return (
        f"needs {replicas} replicas of {shape.parallelism()}; maxReplicas is {req.max_replicas}",
        f"needs {gpus} {key}, more than are available",
        f"needs {gpus} {key}; maxGpusPerType allows {req.max_gpus_per_type.get(key)}",
        f"needs {gpus} GPUs ({replica_shape(replicas, shape.gpus, key)}); maxGpus is {req.max_gpus}",
        f"{gpus} x {key} cost ${cost:.2f}/h; the budget is ${req.budget_usd_per_hour or 0.0:.2f}/h",
    )[check]


def _search_rates(rows: _Rows) -> NDArray[np.bool_]:
    """Find the best rates of the rows worth searching (into `rows.best_rate`); return which those are.

    The cheapest rows (`FIRST_PASS_ROWS` cost floors) are searched first; then only the rows whose cost floor
    is within reach of the alternatives: PRACTICAL_COST_FACTOR x the cheapest feasible cost of the first pass.
    The cheapest candidate is never skipped.
    """
    req = rows.req
    rates = _RateSearch(rows.model_of, rows.capacity, req.max_utilization, rows.wanted, rows.targets,
                        np.max(np.log(rows.light / rows.targets), axis=0))

    def search(index: NDArray[np.intp], pending: NDArray[np.intp] = _NONE, margin: NDArray[np.float64] = _EMPTY
               ) -> None:
        """Best rates of `index`, and of `pending` (rows already found to miss an SLO at the cap, by `margin`)."""
        ok, cap_margin = rates.at_cap(index)
        rows.best_rate[index[ok]] = rows.capacity[index[ok]] * req.max_utilization
        pending = np.concatenate([pending, index[~ok]])
        rows.best_rate[pending] = rates.refine(pending, np.concatenate([margin, cap_margin[~ok]]))

    passing = np.flatnonzero(rows.slo_ok)
    by_floor = passing[np.argsort(rows.cost_floor[passing], kind="stable")]
    first, later = by_floor[:FIRST_PASS_ROWS], by_floor[FIRST_PASS_ROWS:]
    ok, cap_margin = rates.at_cap(first)
    rows.best_rate[first[ok]] = rows.capacity[first[ok]] * req.max_utilization
    # A row that meets its SLOs at the cap costs its floor, so the cheapest of those bounds the cheapest
    # first-pass cost from above: the later rows within reach of that bound include every row to search, and
    # are searched together with the rest of the first pass (fewer evaluations); those out of reach of the
    # cheapest cost, once known, are then left out as if never searched.
    bound = rows.cheapest(first[ok])
    if math.isfinite(bound):
        later = later[rows.cost_floor[later] <= PRACTICAL_COST_FACTOR * bound]
        search(later, first[~ok], cap_margin[~ok])
        later = later[rows.cost_floor[later] <= PRACTICAL_COST_FACTOR * rows.cheapest(first)]
    else:
        search(_NONE, first[~ok], cap_margin[~ok])
        cheapest = rows.cheapest(first)
        if math.isfinite(cheapest):  # else every later row is searched
            later = later[rows.cost_floor[later] <= PRACTICAL_COST_FACTOR * cheapest]
        search(later)
    searched = np.zeros(len(rows.shape), dtype=bool)
    searched[first] = True
    searched[later] = True
    return searched


def _feasible_rows(req: PlanRequest, rows: _Rows, searched: NDArray[np.bool_]
                   ) -> tuple[NDArray[np.intp], NDArray[np.int_], NDArray[np.int_], NDArray[np.float64]]:
    """(rows, replicas, GPUs, cost) of the searched rows with a rate that pass every limit."""
    rated = np.flatnonzero(searched & (rows.best_rate > 0))
    replicas, gpus, cost, check = rows.limits(rated)
    feasible = check < 0
    return rated[feasible], replicas[feasible], gpus[feasible], cost[feasible]


def _shown_rows(req: PlanRequest, rows: _Rows, searched: NDArray[np.bool_], confirm: bool = True
                ) -> tuple[NDArray[np.intp], NDArray[np.int_], NDArray[np.intp]]:
    """(feasible rows, their replicas, the positions among them of the rows to show).

    Objectives of every feasible row at its planned per-replica rate (search sample), then the Pareto
    frontier. The rows to show are then confirmed with the report's sample, whose numbers they will show: the
    search's coarse sample can put a tail percentile (TTFT p99 of a long-tailed prompt mix) under its target
    where the full sample puts it over. A shown row whose best rate the full sample lowers (`_confirm`) costs
    more replicas, so the frontier is chosen again, until every row shown is confirmed (`confirm`).
    """
    confirmed = np.full(len(rows.shape), not confirm)
    while True:
        index, replicas, gpus, cost = _feasible_rows(req, rows, searched)
        if not len(index):
            return index, replicas, np.zeros(0, dtype=np.intp)
        planned = req.rate_rps / replicas
        latencies = rows.model_of(index).quantiles(planned, _objective_latencies(req))
        spare = np.maximum(0.0, headroom(req.rate_rps, replicas * rows.best_rate[index]))
        objectives = np.column_stack([cost, latencies.T, -spare])
        chosen = _select(objectives, spare, gpus, req.alternatives)
        todo = index[chosen][~confirmed[index[chosen]]]
        if not len(todo):
            return index, replicas, chosen
        confirmed[todo] = True
        _confirm(req, rows, todo)


def _confirm(req: PlanRequest, rows: _Rows, index: NDArray[np.intp]) -> None:
    """Search the best rates of rows `index` again with the report's sample (`REPORT_SAMPLES`); a row that
    misses an SLO with it even at light load fails the slo gate (its light-load latencies are updated)."""
    p, o = req.prompt_mean, req.output_mean
    model = poisson_model(
        rows.hardware(index), p, o, rows.slots[index], rows.chunk, req.prompt_cv, req.output_cv, req.arrival_cv2,
        service_cv2=req.service_cv2, prefill_fraction=rows.fraction, capacity=rows.capacity[index],
        samples=REPORT_SAMPLES, streams=rows.pp[index])
    local = np.full(len(rows.shape), -1)
    local[index] = np.arange(len(index))

    def model_of(at: NDArray[np.intp]) -> PoissonModel:
        return model.take(local[at], rows.slots[at], rows.capacity[at])

    light = model.quantiles(rows.capacity[index] * 1e-4, rows.wanted)
    rows.light[:, index] = light
    ok = np.all(light <= rows.targets, axis=0)
    rows.slo_ok[index[~ok]] = False
    rows.best_rate[index[~ok]] = 0.0
    keep = index[ok]
    margin = np.full(len(rows.shape), np.nan)
    margin[index] = np.max(np.log(light / rows.targets), axis=0)
    rates = _RateSearch(model_of, rows.capacity, req.max_utilization, rows.wanted, rows.targets, margin)
    at_cap, cap_margin = rates.at_cap(keep)
    rows.best_rate[keep[at_cap]] = rows.capacity[keep[at_cap]] * req.max_utilization
    pending = keep[~at_cap]  # the search's rates (its coarser sample) are the first guesses
    rows.best_rate[pending] = rates.refine(pending, cap_margin[~at_cap], rows.best_rate[pending])


def plan(req: PlanRequest, factors: FactorSet | None = None, *, suggest: bool = True, confirm: bool = True
         ) -> PlanResult:
    """Search every candidate deployment of `req` and return the recommendation and its alternatives, the
    assumptions made, and, when nothing is feasible, the smallest changes that would make it (`suggest`).

    `confirm`: search the rows shown again with the sample their numbers are shown with (`_shown_rows`), so
    that each meets every SLO by its own numbers. Off when the simulator verifies the candidates instead
    (`verification.planned`): it accepts rows the analytic tail rejects (16 of 120 random plans were
    recommended one or more replicas cheaper by it), and the recommendation then shows simulated numbers."""
    factors = factors or load_factors()
    engine = ENGINES[req.engine]
    settings = _settings(req, engine, 1)
    warnings: list[str] = []
    tail_warning = _tail_warning(req)
    if tail_warning:
        warnings.append(tail_warning)
    if req.arch.is_mla:
        warnings.append(MLA_WARNING)
    if req.min_replicas == 1:
        warnings.append("minReplicas 1: a single replica has no redundancy; a node or pod failure, or a rollout, "
                        "stops the service")
    overflow = context_overflow(req, settings.max_model_len)
    if overflow >= CONTEXT_WARN_SHARE:
        warnings.append(_context_warning(req, settings.max_model_len, overflow))
    if overflow > CONTEXT_LIMIT_SHARE:
        result = PlanResult(recommendation=None, alternatives=[], infeasible=[], warnings=[
            *warnings, f"no candidate: more than {CONTEXT_LIMIT_SHARE:.0%} of requests would be rejected"])
    elif not _candidate_gpus(req):  # e.g. available_gpus with every count 0 and no gpu_types
        result = PlanResult(recommendation=None, alternatives=[], infeasible=[],
                            warnings=[*warnings, "no GPU type to consider: every available count is 0"])
    else:
        result = _search(req, engine, factors, warnings, confirm)
        if confirm:  # the answer as shown; verification, which searches unconfirmed, ranges its own
            result = with_intervals(req, with_upper_cost(req, result))
    suggestions = (suggestions_for(req, lambda changed: plan(changed, factors, suggest=False), factors)
                   if suggest and not result.recommendation else [])
    return result.model_copy(update={"assumptions": _assumptions(req, settings), "suggestions": suggestions})


# What the step model does not represent yet for multi-head latent attention models, and how far off it was where
# measured (`inferplan accuracy` on large-models-under-load.jsonl, its MLA rows, scored apart).
MLA_WARNING = ("multi-head latent attention (DeepSeek-V3/R1, Kimi-K2) is not modelled yet: its attention is costed as "
               "ordinary attention over the latent KV, with no absorbed decode weights, MoE kernels at few tokens per "
               "expert or expert-parallel all-to-all; on published DeepSeek-R1 runs on eight H200 or MI300X "
               "(SGLang 0.4, vLLM 0.7, TensorRT-LLM 0.17) the predicted TPOT was 0.4-0.7 of the measured and TTFT "
               "0.16-0.43: treat these latencies as optimistic")


def _context_warning(req: PlanRequest, max_len: int, overflow: float) -> str:
    source = ("engine.maxModelLen" if req.max_model_len else "the model's context"
              if max_len == req.arch.max_position_embeddings else "chosen for the workload")
    return (f"max model length {max_len} ({source}) is below the workload's tail: {overflow:.1%} of requests "
            "(prompt + output) exceed it; the engine rejects them, or cuts their output short where clients set "
            "no max_tokens, and the predictions are for the rest")


def _tokens_for(req: PlanRequest, share: float) -> int:
    """The fewest tokens (a multiple of 256) that all but `share` of requests fit in (prompt + output)."""
    low, high = 256, 256
    while context_overflow(req, high) > share and high < 1 << 24:
        low, high = high, high * 2
    while high - low > 256:
        mid = (low + high) // 512 * 256
        low, high = (mid, high) if context_overflow(req, mid) > share else (low, mid)
    return high


def _assumptions(req: PlanRequest, settings: EngineSettings) -> list[str]:
    """What the plan left open and the planner assumed, in words (the plan's own notes first)."""
    notes = list(req.notes)
    if not req.gpu_types and req.available_gpus is None:
        notes.append("GPU types: the catalog's datacenter and workstation GPUs; consumer (GeForce) cards are left "
                     "out, their driver licence forbids datacenter use: name them in constraints.gpuTypes to plan "
                     "them")
    notes.append("GPUs per node: the catalog's common chassis (HGX and OAM boards 8, GB200 NVL72 trays 4 in one "
                 "NVLink domain of 72, GH200 1, PCIe servers 8, workstations 4) unless constraints.gpusPerNode or the "
                 "cluster's nodes say otherwise")
    if req.max_model_len is None:
        covers = 1.0 - context_overflow(req, settings.max_model_len)
        notes.append(f"max model length {settings.max_model_len}: "
                     + (f"the model's context, which holds {covers:.2%} of requests"
                        if settings.max_model_len == req.arch.max_position_embeddings
                        else "the shortest power of two that holds 99.9% of requests (engine.maxModelLen sets it)"))
    overhead = load_factors().engine(req.engine).request_overhead_ms
    notes.append(f"TTFT as the engine measures it, from a request's arrival at the server (vLLM's "
                 f"vllm:time_to_first_token_seconds): {overhead:g} ms of per-request time on top of the step model; "
                 "no benchmark client's tokenising, HTTP or streaming time, which published clients add on top "
                 "(docs/calibration.md)")
    notes.append(f"at least {req.min_replicas} replica{'s' if req.min_replicas > 1 else ''} and "
                 f"{req.min_headroom:.0%} headroom (constraints.minReplicas, minHeadroom)")
    if req.network_from != "plan" and (req.max_nodes_per_replica > 1 or "disaggregated" in req.shapes):
        notes.append(f"network between nodes: {req.network_gbps:g} Gb/s per GPU, "
                     + ("the least inferplan.io/network-gbps label of the plan's GPU nodes"
                        if req.network_from == "nodes" else
                        "one 400G NIC per GPU (constraints.networkGbps, or the nodes' inferplan.io/network-gbps "
                        "label, says otherwise)"))
    return notes


SLO_RELAXED = 100.0  # a suggestion looks for the target one SLO would need within this factor of the plan's


def _describe(c: Candidate) -> str:
    if c.roles:
        pools = c.pools()
        return f"{pools} ({c.precision}) at ${c.cost.dollars_per_hour:g}/h"
    shape = replica_shape(c.replicas, c.gpus_per_replica, c.gpu_type)
    return f"{shape} ({c.precision}) at ${c.cost.dollars_per_hour:g}/h"


Answer = Callable[[PlanRequest], PlanResult]
"""What a plan answers for a request: the analytic search's (`plan`), or the candidates verified in the simulator
(`verification.planned`). Suggestions judge each change they try with the plan's own."""


def suggestions_for(req: PlanRequest, answer: Answer, factors: FactorSet | None = None) -> list[str]:
    """For a plan with no feasible candidate: the smallest changes that make one feasible (`_suggestions`), each
    judged by `answer`: verification passes its own, so that a plan whose every candidate the simulator dropped
    gets suggestions, and each suggested deployment passes the simulator too."""
    factors = factors or load_factors()
    return _suggestions(req, factors, _settings(req, ENGINES[req.engine], 1).max_model_len, answer)


def _suggestions(req: PlanRequest, factors: FactorSet, max_len: int, answer: Answer) -> list[str]:
    """For a plan with no feasible candidate: the smallest changes that make one feasible, one line each (the
    context, the limits (budget, GPU counts, replicas), the GPU types, the precision, the TP, a shorter context,
    each SLO), with the deployment it gives (`answer`'s recommendation for the changed plan)."""
    overflow = context_overflow(req, max_len)
    if overflow > CONTEXT_LIMIT_SHARE:
        need = _tokens_for(req, CONTEXT_WARN_SHARE)
        return [f"context: {max_len} tokens hold {1.0 - overflow:.1%} of requests; serve a model with a context "
                f"(and maxModelLen) of at least {need} tokens, or cut prompts so that 99.9% fit"]
    out: list[str] = []
    types = req.gpu_types or tuple(g.key for g in _candidate_gpus(req))

    def best(changed: PlanRequest) -> Candidate | None:
        return answer(changed).recommendation

    if types:
        free = best(replace(req, gpu_types=types, available_gpus=None, max_gpus=None, max_gpus_per_type={},
                            max_replicas=None, budget_usd_per_hour=None))
        if free is not None:
            changes = []
            if req.budget_usd_per_hour is not None and free.cost.dollars_per_hour > req.budget_usd_per_hour:
                changes.append(f"budgetDollarsPerHour {math.ceil(free.cost.dollars_per_hour)} "
                               f"(now {req.budget_usd_per_hour:g})")
            if req.max_gpus is not None and free.gpus > req.max_gpus:
                changes.append(f"maxGpus {free.gpus} (now {req.max_gpus})")
            limit = req.max_gpus_per_type.get(free.gpu_type)
            if limit is not None and free.gpus > limit:
                changes.append(f"maxGpusPerType {free.gpu_type}: {free.gpus} (now {limit})")
            have = (req.available_gpus or {}).get(free.gpu_type, math.inf)
            recorder = _COUNTED.get()
            if recorder is not None:
                recorder.note(free.gpu_type, np.array([free.gpus]), have)
            if free.gpus > have:
                changes.append(f"{free.gpus} {free.gpu_type} GPUs in the cluster (now fewer)")
            if req.max_replicas is not None and free.replicas > req.max_replicas:
                changes.append(f"maxReplicas {free.replicas} (now {req.max_replicas})")
            if changes:
                out.append(f"limits: {'; '.join(changes)} gives {_describe(free)}")
    if req.gpu_types or req.available_gpus is not None:
        other = best(replace(req, gpu_types=None, available_gpus=None))
        if other is not None and other.gpu_type not in types:
            out.append(f"GPU type: {_describe(other)} meets every target (a type this plan does not consider)")
    out += [line for line in (_precision_suggestion(req, best), _tp_suggestion(req, best),
                              _shorter_context_suggestion(req, factors, max_len, best)) if line]
    for k, slo in enumerate(req.slos):
        name = QUANTILE_NAMES[slo.quantile]

        def value(c: Candidate, metric: str = slo.metric, name: str = name) -> float:
            return float(getattr(getattr(c.predicted, f"{metric}_ms"), name)) / 1e3

        def at(target_s: float, k: int = k, slo: SloTarget = slo) -> list[Candidate]:
            changed = replace(req, slos=(*req.slos[:k], replace(slo, max_s=target_s), *req.slos[k + 1:]))
            result = answer(changed)
            shown = [c for c in [result.recommendation, *result.alternatives] if c is not None]
            # Verified: the alternatives the simulator did not reach keep their analytic (lower) tails; the target
            # reached is one a simulated candidate reaches.
            simulated = [c for c in shown if c.provenance.get("predicted") == "simulated"]
            return simulated if shown and shown[0] in simulated else shown

        # Nearly without this target, the candidates shown include the lowest on its metric (within
        # PRACTICAL_COST_FACTOR of the cheapest): a target it reaches is feasible. Two geometric bisection steps
        # between the plan's target and that one then bring the suggestion within (reached / target)^(1/4).
        reached = at(slo.max_s * SLO_RELAXED)
        if not reached:
            continue
        low, high = slo.max_s, max(min(value(c) for c in reached), slo.max_s)
        found = None
        for _ in range(2):
            middle = math.sqrt(low * high)
            shown = at(middle)
            if shown:
                found, high = shown[0], max(value(shown[0]), low)
            else:
                low = middle
        if found is None:  # the deployment the reached target gives, planned at that target
            found = next(iter(at(high)), None)
        if found is not None:
            out.append(f"SLO: {_describe_slo(slo)} <= {math.ceil(high * 1e3)} ms (now {slo.max_s * 1e3:g}) gives "
                       f"{_describe(found)}")
    if not out:
        out.append(f"no single change among the limits, the GPU types, the precision, the TP, the context and one SLO "
                   f"(up to {SLO_RELAXED:g}x) makes this plan feasible: see infeasible for what each candidate fails")
    return out


def _precision_suggestion(req: PlanRequest, best: Callable[[PlanRequest], Candidate | None]) -> str | None:
    """The cheapest deployment in a weight precision the engine serves that the plan does not list (each from the
    checkpoint the engine would load: the catalog's, or the plan's model quantised at load), in words; None where
    none is feasible."""
    others = tuple(p for p in SERVED_PRECISIONS.get(req.engine, ()) if p not in req.precisions)
    found = best(replace(req, precisions=others, precisions_listed=False)) if others else None
    if found is None:
        return None
    source = "quantised at load from" if found.provenance.get("checkpoint") == "online" else "from"
    return (f"precision: {found.precision} weights {source} {found.checkpoint} (model.precisions, now "
            f"{', '.join(req.precisions)}) gives {_describe(found)}")


def _tp_suggestion(req: PlanRequest, best: Callable[[PlanRequest], Candidate | None]) -> str | None:
    """The cheapest deployment at a tensor-parallel size the plan does not list (constraints.tensorParallelSizes),
    within a node or over two (or the plan's maxNodesPerReplica, where more), in words; None where none is feasible.
    Over nodes it names the maxNodesPerReplica it needs, and the pipeline stages where it has them."""
    nodes = max(req.max_nodes_per_replica, 2)
    node_gpus = max((req.gpus_per_node.get(g.key, 8) for g in _candidate_gpus(req)), default=8)
    extra = tuple(t for t in TP_SIZES if t not in req.tp_sizes and t <= node_gpus * nodes)
    found = best(replace(req, tp_sizes=extra, max_nodes_per_replica=nodes)) if extra else None
    if found is None or found.roles:
        return None
    tp = found.gpus_per_replica // found.pipeline_parallel
    stages = f" x {found.pipeline_parallel} pipeline stages" if found.pipeline_parallel > 1 else ""
    spans = (f"; maxNodesPerReplica {found.nodes_per_replica}"
             if found.nodes_per_replica > req.max_nodes_per_replica else "")
    return (f"TP: {tp}{stages} (tensorParallelSizes, now {', '.join(map(str, req.tp_sizes))}{spans}) gives "
            f"{_describe(found)}")


def _shorter_context_suggestion(req: PlanRequest, factors: FactorSet, max_len: int,
                                best: Callable[[PlanRequest], Candidate | None]) -> str | None:
    """Where the context binds memory (a shorter maxModelLen lets more (shape, batch) rows through the memory
    gate: a KV cache that holds one sequence, a profile run that fits), the deployment at the shortest power of two
    that holds 99.9% of requests, else 99%, in words; None where neither is shorter, binds or is feasible."""
    engine = ENGINES[req.engine]
    lengths = sorted({min(_auto_max_len(req, share), req.arch.max_position_embeddings)
                      for share in (CONTEXT_WARN_SHARE, 10 * CONTEXT_WARN_SHARE)} - {max_len}, reverse=True)
    lengths = [length for length in lengths if length < max_len]
    if not lengths:
        return None
    fitting = len(_grid(req, engine, factors).row_shape)
    for length in lengths:
        shorter = replace(req, max_model_len=length)
        if len(_grid(shorter, engine, factors).row_shape) > fitting:
            found = best(shorter)
            if found is not None:
                return (f"context: maxModelLen {length} (now {max_len}; it holds "
                        f"{1.0 - context_overflow(req, length):.1%} of requests) gives {_describe(found)}")
    return None


def _search(req: PlanRequest, engine: EngineProfile, factors: FactorSet, warnings: list[str], confirm: bool = True
            ) -> PlanResult:
    grid = _grid(req, engine, factors)
    rejected = list(grid.rejected)
    if not len(grid.row_shape):
        return _finish(req, grid, [], rejected, warnings)
    # Vectorised over every (shape, batch) row from here on.
    rows = _Rows(req, grid)

    searched = np.zeros(len(rows.shape), dtype=bool)

    def finish(candidates: list[Candidate]) -> PlanResult:
        separate: list[Candidate] = []
        if "disaggregated" in req.shapes:
            # Imported when asked for: most plans are aggregated only, and `inferplan plan` pays for every import.
            from inferplan.planner.search.disaggregated import disaggregated_candidates

            cheapest = min((c.cost.dollars_per_hour for c in candidates), default=math.inf)
            separate = disaggregated_candidates(req, engine, factors, grid, rows, warnings, cheapest)
        result = _finish(req, grid, candidates + separate, rejected, warnings)
        options = _compare_shapes(req, grid, rows, searched, separate, result, rejected)
        return result.model_copy(update={"shapes": shape_lines(options, result.recommendation),
                                         "shape_options": options})

    if "aggregated" not in req.shapes:
        return finish([])
    searched = _search_rates(rows)
    index, replicas, chosen = _shown_rows(req, rows, searched, confirm)
    batch, best_rate = rows.batch, rows.best_rate

    def row_shape(i: int) -> _Shape:
        return grid.shape(req, rows.shape[i])

    def slo_reason(i: int) -> str:
        worst = int(np.argmax(rows.light[:, i] / rows.targets[:, 0]))
        slo, shape = req.slos[worst], row_shape(i)
        return (f"{_describe_slo(slo)} at batch {batch[i]} on {shape.parallelism()} ({shape.precision}) is "
                f"{rows.light[worst, i] * 1e3:.0f} ms even at light load > {slo.max_s * 1e3:.0f} ms target")

    def rejections(gate: str, index: NDArray[np.intp], cost: NDArray[np.float64],
                   reason: Callable[[int], str], miss: NDArray[np.float64] | None = None) -> _Rejections:
        return _Rejections(gate, index, rows.shape[index], batch[index], cost, reason, miss)

    light_miss = np.max(rows.light / rows.targets, axis=0)  # each row's worst light-load latency over its target
    slow = np.flatnonzero(~rows.slo_ok)
    rejected.append(rejections("slo", slow, (rows.gpus * rows.price)[slow], slo_reason, light_miss[slow]))
    stuck = np.flatnonzero(searched & rows.slo_ok & (best_rate <= 0))
    rejected.append(rejections("utilization", stuck, (rows.gpus * rows.price)[stuck],
                               lambda i: f"no rate within max utilization {req.max_utilization:g}",
                               light_miss[stuck]))
    rated = np.flatnonzero(searched & (best_rate > 0))
    rated_replicas, rated_gpus, rated_cost, check = rows.limits(rated)
    position = np.zeros(len(rows.shape), dtype=int)
    position[rated] = np.arange(len(rated))

    def limit_reason(i: int) -> str:
        j = position[i]
        return _limit_reason(req, int(check[j]), row_shape(i), int(rated_replicas[j]), int(rated_gpus[j]),
                             float(rated_cost[j]))

    over = _limit_miss(req, grid.gpus, grid.gpu[rows.shape[rated]], rated_replicas, rated_gpus, rated_cost, check)
    for k, gate in enumerate(LIMIT_CHECKS):
        rejected.append(rejections(gate, rated[check == k], rated_cost[check == k], limit_reason, over[check == k]))
    if not len(index):
        return finish([])
    shown = index[chosen]
    planned = req.rate_rps / replicas
    report = poisson(rows.hardware(shown), planned[chosen], req.prompt_mean, req.output_mean, rows.slots[shown],
                     rows.chunk, req.prompt_cv, req.output_cv, req.arrival_cv2, service_cv2=req.service_cv2,
                     prefill_fraction=rows.fraction, capacity=rows.capacity[shown], samples=REPORT_SAMPLES,
                     streams=rows.pp[shown])
    candidates = [
        _candidate(req, engine, row_shape(i), int(batch[i]), grid.settings[grid.row_batch[i]], int(replicas[k]),
                   report, j, float(best_rate[i]), float(rows.capacity[i]), float(rows.slots[i] * rows.pp[i]),
                   factors.lines_measured_on(engine.name, row_shape(i).gpu.family),
                   grid.checkpoints[grid.gpu[rows.shape[i]]][grid.precision[rows.shape[i]]],
                   float(grid.row_kv_tokens[i]))
        for j, (k, i) in enumerate(zip(chosen, shown, strict=True))
    ]
    return finish(candidates)


def _compare_shapes(req: PlanRequest, grid: _Grid, rows: _Rows, searched: NDArray[np.bool_],
                    separate: list[Candidate], result: PlanResult, rejected: list[_Rejections]) -> list[ShapeOption]:
    """Where the plan allows more than one deployment shape: each shape's cheapest feasible candidate (the
    recommendation where it is of that shape; else the search's analytic figures), or that none was found within
    PRACTICAL_COST_FACTOR of the cheapest cost, with the nearest miss of that shape where the gates rejected all
    of it (`_nearest_miss`). `shape_lines` puts them in words against the recommendation."""
    aggregated = "aggregated" in req.shapes
    kinds = ([("aggregated, a replica within a node", 0)] if aggregated else []) + (
        [("aggregated, tensor or expert parallel over nodes", 1)] if aggregated and req.max_nodes_per_replica > 1
        else []) + (
        [("aggregated, pipeline stages over nodes", 2)] if aggregated and pipeline_possible(req) else []) + (
        [("disaggregated", None)] if "disaggregated" in req.shapes else [])
    if len(kinds) < 2:
        return []
    rec = result.recommendation
    index, replicas, _, cost = _feasible_rows(req, rows, searched)
    node_gpus = np.array([req.gpus_per_node.get(g.key, 8) for g in grid.gpus])
    shape_layout = np.where(grid.pp > 1, 2, np.where(grid.tp > node_gpus[grid.gpu], 1, 0))
    layout = shape_layout[rows.shape[index]]
    spare = headroom(req.rate_rps, np.maximum(replicas * rows.best_rate[index], 1e-12))
    options = []
    for name, kind in kinds:
        if kind is None:
            best = rec if rec is not None and rec.roles else min(separate, key=by_cost, default=None)
            found = None if best is None else (best.cost.dollars_per_hour, describe_shape(best))
        elif rec is not None and shape_layout_of(rec) == kind:
            found = (rec.cost.dollars_per_hour, describe_shape(rec))
        else:
            mine = np.flatnonzero(layout == kind)
            # The cheapest, ties to the most headroom (the recommendation's order).
            k = mine[np.lexsort((-spare[mine], cost[mine]))[0]] if len(mine) else None
            shape = None if k is None else grid.shape(req, int(rows.shape[index[k]]))
            found = None if k is None or shape is None else (float(cost[k]), _shape_words(
                int(replicas[k]), shape.gpus, shape.gpu.key, shape.precision, int(rows.batch[index[k]]),
                shape.dp_attention, shape.pp, shape.ep))
        miss = None if found is not None or kind is None else _nearest_miss(rejected, shape_layout == kind)
        options.append(ShapeOption(name=name, layout=kind, cost=None if found is None else found[0],
                                   words=None if found is None else found[1], miss=miss))
    return options


def shape_lines(options: list[ShapeOption], rec: Candidate | None) -> list[str]:
    """`PlanResult.shapes`: each shape's option in words, against the recommendation `rec`."""
    lines = []
    for option in options:
        name, cost, words = option.name, option.cost, option.words
        if cost is None or words is None:
            nearest = f"; nearest: {option.miss[:600]}" if option.miss else ""
            lines.append(f"{name}: no feasible candidate found (within the targets, the limits and "
                         f"{PRACTICAL_COST_FACTOR:g}x the cheapest cost){nearest}")
        elif rec is not None and words == describe_shape(rec):
            lines.append(f"{name}: ${cost:.2f}/h, {words}: the recommendation")
        elif rec is not None:
            extra = cost / rec.cost.dollars_per_hour - 1.0
            lines.append(f"{name}: ${cost:.2f}/h ({extra:+.0%} against the recommendation), {words}")
        else:
            lines.append(f"{name}: ${cost:.2f}/h, {words}")
    return lines


def _nearest_miss(rejected: list[_Rejections], mine: NDArray[np.bool_]) -> str | None:
    """The rejection of the shapes `mine` (a mask over the grid's shapes) that got furthest through the gates,
    nearest to passing that gate first (`_nearness`), then cheapest (a shape failing several shape gates counts
    under the first), as "gate: reason"; None when none of them was rejected."""
    order = {gate: i for i, gate in enumerate(GATES)}
    first_gate = np.full(len(mine), len(GATES))
    for r in rejected:
        if r.gate in SHAPE_GATES and len(r.shape):
            np.minimum.at(first_gate, r.shape, order[r.gate])
    best: tuple[int, float, float, int] | None = None
    chosen: _Rejections | None = None
    for r in rejected:
        keep = mine[r.shape] & ((first_gate[r.shape] == order[r.gate]) if r.gate in SHAPE_GATES else True)
        near = _nearness(r)
        for k in np.flatnonzero(keep):
            key = (-order[r.gate], float(near[k]), float(r.cost[k]), int(r.index[k]))
            if best is None or key < best:
                best, chosen = key, r
    if chosen is None or best is None:
        return None
    return f"{chosen.gate}: {chosen.reason(best[3])}"


def _nearness(r: _Rejections) -> NDArray[np.float64]:
    """How near each of `r` is to passing its gate, the order of the nearest infeasible candidates within a gate:
    its miss (the value over the gate's limit, e.g. 1.25 for a 10 ms TPOT against an 8 ms target), inf where the
    gate has no measure of it (parallelism, placement, precision: cost orders those)."""
    return np.full(len(r.index), np.inf) if r.miss is None else np.asarray(r.miss, dtype=float)


def _memory_miss(fixed_gib: NDArray[np.float64], budget_gib: NDArray[np.float64], kv_tokens: NDArray[np.float64],
                 max_model_len: int, headroom: NDArray[np.float64], usable: NDArray[np.float64]
                 ) -> NDArray[np.float64]:
    """Per shape the memory gate rejects, how far it is from fitting, in the order `_memory_problem` words it:
    weights, activations and runtime over the engine's share [GiB / GiB]; else one max-model-length sequence over
    the KV cache's tokens; else the memory needed over the GPU's (`headroom` [bytes] below 0 of `usable` [bytes])."""
    return np.where(fixed_gib >= budget_gib, fixed_gib / budget_gib,
                    np.where(kv_tokens < max_model_len, max_model_len / np.maximum(kv_tokens, 1.0),
                             1.0 - np.minimum(headroom, 0.0) / usable))


def _limit_miss(req: PlanRequest, gpu_types: Sequence[GpuSpec], gpu: NDArray[np.intp], replicas: NDArray[np.int_],
                gpus: NDArray[np.int_], cost: NDArray[np.float64], check: NDArray[np.intp]) -> NDArray[np.float64]:
    """Per row, the need over the limit `check` says it breaks (`_limit_checks`; 1 where it breaks none): replicas
    over maxReplicas, GPUs over those available, maxGpusPerType or maxGpus, cost over the budget."""
    def cap(value: float | None) -> float:
        return math.inf if value is None else max(value, 1e-12)

    available = req.available_gpus or {}
    need = [replicas, gpus, gpus, gpus, cost]
    limit = [np.full(len(replicas), cap(req.max_replicas)),
             np.array([cap(available.get(g.key)) for g in gpu_types])[gpu],
             np.array([cap(req.max_gpus_per_type.get(g.key)) for g in gpu_types])[gpu],
             np.full(len(replicas), cap(req.max_gpus)),
             np.full(len(replicas), cap(req.budget_usd_per_hour))]
    out = np.ones(len(replicas))
    for k in range(len(need)):
        mine = check == k
        out[mine] = need[k][mine] / limit[k][mine]
    return out


def _objective_latencies(req: PlanRequest) -> list[tuple[str, float]]:
    """The latencies the frontier compares: TTFT, TPOT and e2e, each at its SLO percentile (p95 without SLO)."""
    quantile = {s.metric: s.quantile for s in req.slos}
    return [(metric, quantile.get(metric, 0.95)) for metric in ("ttft", "tpot", "e2e")]


def non_dominated(objectives: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Mask of rows no other row beats on every column (lower is better) and strictly on one; of identical
    rows only the first is kept.

    Dominance is transitive, so a row is off the frontier exactly when some row dominates it (or is an
    identical earlier one), and a row that a dominated row would dominate is dominated too. The rows are
    compared pairwise, one column at a time: first against the cheapest few (which usually remove most), then
    the rows left among themselves.
    """
    n = len(objectives)

    def beaten(rows: NDArray[np.intp], by: NDArray[np.intp]) -> NDArray[np.bool_]:
        """For each of `rows`: whether one of `by` dominates it or is an identical earlier row."""
        no_worse = np.ones((len(rows), len(by)), dtype=bool)   # [i, j]: by[j] <= rows[i] in every column
        better = np.zeros((len(rows), len(by)), dtype=bool)    # [i, j]: by[j] < rows[i] in some column
        for column in objectives.T:
            no_worse &= column[by][None, :] <= column[rows][:, None]
            better |= column[by][None, :] < column[rows][:, None]
        identical_before = no_worse & ~better & (by[None, :] < rows[:, None])
        return np.any((no_worse & better) | identical_before, axis=1)

    every = np.arange(n)
    cheapest = np.argsort(objectives[:, 0], kind="stable")[:32] if n else every
    left = every[~beaten(every, cheapest)]
    keep = np.zeros(n, dtype=bool)
    keep[left[~beaten(left, left)]] = True
    return keep


def _select(objectives: NDArray[np.float64], headroom: NDArray[np.float64], gpus: NDArray[np.int_],
            alternatives: int) -> NDArray[np.intp]:
    """Indices to show: the cheapest (ties: most headroom); then, among frontier points costing at most
    `PRACTICAL_COST_FACTOR` times the cheapest, each latency objective's best, the most headroom and the
    fewest GPUs; then the cheapest others within that bound, up to 1 + alternatives."""
    front = np.flatnonzero(non_dominated(objectives))
    by_cost = front[np.lexsort((-headroom[front], objectives[front, 0]))]
    picks = [int(by_cost[0])]
    practical = by_cost[objectives[by_cost, 0] <= PRACTICAL_COST_FACTOR * objectives[by_cost[0], 0]]
    if not len(practical):  # costs that are not finite (absurd rates): no latency extremes to pick
        practical = by_cost[:1]
    extremes = [practical[np.argmin(objectives[practical, col])] for col in range(1, 4)]
    extremes += [practical[np.argmax(headroom[practical])], practical[np.argmin(gpus[practical])]]
    for i in [*extremes, *practical]:
        if len(picks) > alternatives:
            break
        if int(i) not in picks:
            picks.append(int(i))
    return np.array(picks)


def with_upper_cost(req: PlanRequest, result: PlanResult) -> PlanResult:
    """`result` with its recommendation's upper cost (`Candidate.upper_cost`) where that rests on no measurement: the
    range then leads its warnings. A disaggregated pair's report states no one replica's capacity, so its slower
    pools are not planned (the mark and the warning still apply)."""
    rec = result.recommendation
    if rec is None or rec.measured or rec.roles:
        return result
    upper = _upper_cost(req, rec, rec.predicted.max_concurrency / rec.pipeline_parallel)
    engine, gpu = ENGINES[req.engine], load_gpu_catalog().get(rec.gpu_type)
    first = _unmeasured_warning(engine, gpu, kernel_basis(gpu).kind, upper)
    rest = [w for w in rec.warnings if not w.startswith("unmeasured: ")]
    return result.model_copy(update={"recommendation": rec.model_copy(update={
        "upper_cost": upper, "warnings": [first, *rest][:16]})})


# The scenario metric whose held-out errors stand for each predicted percentile: the published runs measure TTFT and
# TPOT at p50 and p99 (a p90 or p95 reads the p99's, the wider) and the end-to-end time as a mean only.
INTERVAL_METRICS = {
    "ttft_ms": {"p50": "ttft_ms_p50", "p90": "ttft_ms_p99", "p95": "ttft_ms_p99", "p99": "ttft_ms_p99"},
    "tpot_ms": {"p50": "tpot_ms_p50", "p90": "tpot_ms_p99", "p95": "tpot_ms_p99", "p99": "tpot_ms_p99"},
    "e2e_ms": {q: "e2e_ms_mean" for q in ("p50", "p90", "p95", "p99")},
}


def candidate_intervals(req: PlanRequest, candidate: Candidate, confidence: float = DEFAULT_CONFIDENCE) -> Intervals:
    """The intervals of `candidate`'s predicted latencies (`intervals.py`): read for its model kind, its engine's
    factor line on its GPU family, and whether that pair has measured lines (`provenance.measuredLines`)."""
    gpu = load_gpu_catalog().get(candidate.gpu_type)
    kind = "mla" if req.arch.is_mla else "moe" if req.arch.is_moe else "dense"
    line = factor_key(req.engine, None, gpu.vendor)
    measured = candidate.provenance.get("measuredLines", "0") != "0"
    table = load_intervals()

    def bounds(stats: Percentiles, metric: str) -> PercentileIntervals:
        def pair(q: str) -> list[float]:
            evidence = Evidence(INTERVAL_METRICS[metric][q], kind, line, gpu.family, "poisson", measured)
            low, high = table.interval(evidence, getattr(stats, q), confidence)
            return [rounded(low), rounded(high)]
        return PercentileIntervals(p50=pair("p50"), p90=pair("p90"), p95=pair("p95"), p99=pair("p99"))

    p = candidate.predicted
    return Intervals(ttft_ms=bounds(p.ttft_ms, "ttft_ms"), tpot_ms=bounds(p.tpot_ms, "tpot_ms"),
                     e2e_ms=bounds(p.e2e_ms, "e2e_ms"))


def with_intervals(req: PlanRequest, result: PlanResult, confidence: float = DEFAULT_CONFIDENCE) -> PlanResult:
    """`result` with the prediction intervals of its recommendation and alternatives (`Predicted.intervals`): worked
    out once on the candidates shown, not in the search."""
    def add(c: Candidate) -> Candidate:
        return c.model_copy(update={"predicted": c.predicted.model_copy(update={
            "intervals": candidate_intervals(req, c, confidence), "confidence": confidence})})

    rec = result.recommendation
    return result.model_copy(update={"recommendation": add(rec) if rec is not None else None,
                                     "alternatives": [add(c) for c in result.alternatives]})


_STEP_RATES = ("bandwidth_bytes_s", "expert_bandwidth_bytes_s", "kv_bandwidth_bytes_s", "decode_flops_s",
               "prefill_flops_s", "attention_flops_s", "link_bytes_s")
_STEP_TIMES = ("link_latency_s", "step_overhead_s", "sequence_overhead_s", "stage_send_latency_s",
               "stage_send_s_per_token")


def slower_steps(hw: Hardware, factor: float | NDArray[np.float64]) -> Hardware:
    """`hw` with every step (decode, prefill chunk, all-reduce, stage send, the engine's CPU time) `factor` times
    as long: each rate divided by it, each time multiplied. The per-request time, part of no step, is kept."""
    return replace(hw, **{name: getattr(hw, name) / factor for name in _STEP_RATES},
                   **{name: getattr(hw, name) * factor for name in _STEP_TIMES})


def _upper_cost(req: PlanRequest, c: Candidate, slots: float) -> UpperCost:
    """What aggregated candidate `c` (`slots` running sequences a stream) needs if every step takes
    UNMEASURED_STEP_SLOWDOWN times as long: the highest rate a replica then sustains within every SLO and the
    utilisation cap, by the search's rate search on the report's sample, and the replicas (at least `c`'s), GPUs
    and cost of that rate; none where an SLO is missed even at light load. The deployment is rebuilt with the
    shipped engine terms (`deployment_of`): a plan made with other factors (`--factors`, an observed calibration)
    gets its upper cost from the shipped ones."""
    slowdown = UNMEASURED_STEP_SLOWDOWN
    deployment = deployment_of(req, c)
    hw = stack_hardware([slower_steps(deployment.hardware, slowdown)])
    p, o, pp = req.prompt_mean, req.output_mean, c.pipeline_parallel
    fraction, chunk = 1.0 - req.prefix_hit_rate, deployment.settings.chunk_tokens
    per_stream = np.array([slots])
    capacity = poisson_capacity(hw, p, o, per_stream, chunk, fraction, pp, req.output_cv)
    model = poisson_model(hw, p, o, per_stream, chunk, req.prompt_cv, req.output_cv, req.arrival_cv2,
                          service_cv2=req.service_cv2, prefill_fraction=fraction, capacity=capacity,
                          samples=REPORT_SAMPLES, streams=np.array([pp]))
    wanted = [(s.metric, s.quantile) for s in req.slos]
    targets = np.array([s.max_s for s in req.slos])[:, None]
    light = model.quantiles(capacity * 1e-4, wanted)
    if not np.all(light <= targets):
        worst = int(np.argmax(light[:, 0] / targets[:, 0]))
        slo = req.slos[worst]
        return UpperCost(step_slowdown=slowdown, evidence=UNMEASURED_EVIDENCE,
                         missed=f"{_describe_slo(slo)} <= {slo.max_s * 1e3:.0f} ms ({light[worst, 0] * 1e3:.0f} ms "
                                "at light load)")
    row = np.zeros(1, dtype=np.intp)
    rates = _RateSearch(lambda at: model.take(at, per_stream[at], capacity[at]), capacity, req.max_utilization,
                        wanted, targets, np.max(np.log(light / targets), axis=0))
    at_cap, cap_margin = rates.at_cap(row)
    best = capacity * req.max_utilization if at_cap[0] else rates.refine(row, cap_margin)
    if not best[0] > 0:
        return UpperCost(step_slowdown=slowdown, evidence=UNMEASURED_EVIDENCE,
                         missed=f"max utilization {req.max_utilization:g}")
    replicas = max(int(_replicas(req, best)[0]), c.replicas)
    gpus = replicas * c.gpus_per_replica
    return UpperCost(step_slowdown=slowdown, evidence=UNMEASURED_EVIDENCE, replicas=replicas, gpus=gpus,
                     dollars_per_hour=rounded(gpus * c.cost.dollars_per_hour / c.gpus))


def _objectives(req: PlanRequest, c: Candidate) -> NDArray[np.float64]:
    """(cost, TTFT, TPOT, e2e at each metric's SLO percentile (p95 without SLO), -headroom) of a reported
    candidate: all lower-is-better, the columns the frontier is computed on."""
    quantile = {s.metric: s.quantile for s in req.slos}
    values = [c.cost.dollars_per_hour]
    for metric, stats in (("ttft", c.predicted.ttft_ms), ("tpot", c.predicted.tpot_ms), ("e2e", c.predicted.e2e_ms)):
        values.append(getattr(stats, QUANTILE_NAMES[quantile.get(metric, 0.95)]))
    values.append(-c.headroom)
    return np.array(values)


TAG_COLUMNS = (("cheapest", 0), ("lowestTtft", 1), ("lowestTpot", 2), ("lowestLatency", 3), ("mostHeadroom", 4))


def tag_candidates(req: PlanRequest, front: list[Candidate]) -> list[Candidate]:
    """The candidates (in the order shown: the recommendation first) with tags saying which objective each is
    best at (cheapest, lowestTtft, lowestTpot, lowestLatency, mostHeadroom, fewestGpus; each tag on one row,
    the first of those tied) and a line saying why each is worth reading (`why`)."""
    if not front:
        return []
    objectives = np.array([_objectives(req, c) for c in front])
    tags: list[list[str]] = [[] for _ in front]
    for name, column in TAG_COLUMNS:
        tags[int(np.argmin(objectives[:, column]))].append(name)
    tags[int(np.argmin([c.gpus for c in front]))].append("fewestGpus")
    first = front[0]
    return [c.model_copy(update={"tags": t, "why": _why(req, c, t, first, k == 0)})
            for k, (c, t) in enumerate(zip(front, tags, strict=True))]


def _why(req: PlanRequest, c: Candidate, tags: list[str], first: Candidate, is_first: bool) -> str:
    """One line: what `c` is best at, against the recommendation `first`, and what that costs."""
    quantile = {s.metric: s.quantile for s in req.slos}

    def latency(x: Candidate, metric: str) -> tuple[str, float]:
        name = QUANTILE_NAMES[quantile.get(metric, 0.95)]
        return name, float(getattr(getattr(x.predicted, f"{metric}_ms"), name))

    shape = describe_shape(c)
    if is_first:
        return f"cheapest that meets every target: {shape}, ${c.cost.dollars_per_hour:g}/h, {c.headroom:.0%} headroom"
    extra = c.cost.dollars_per_hour - first.cost.dollars_per_hour
    cost = (f"+${extra:.2f}/h (+{extra / first.cost.dollars_per_hour:.0%})" if extra > 0.005
            else "at the same cost")
    for tag, metric, label in (("lowestTtft", "ttft", "TTFT"), ("lowestTpot", "tpot", "TPOT"),
                               ("lowestLatency", "e2e", "end-to-end latency")):
        if tag in tags:
            name, value = latency(c, metric)
            return f"lowest {label} {name}: {value:g} ms vs {latency(first, metric)[1]:g} ms, {cost}: {shape}"
    if "mostHeadroom" in tags:
        return f"most headroom: {c.headroom:.0%} vs {first.headroom:.0%}, {cost}: {shape}"
    if "fewestGpus" in tags:
        return f"fewest GPUs: {c.gpus} vs {first.gpus}, {cost}: {shape}"
    return f"a further choice on the frontier, {cost}: {shape}"


def describe_shape(c: Candidate) -> str:
    """`c`'s replicas, GPUs, precision and batch cap in a few words (each pool's, for a disaggregated one)."""
    if c.roles:
        pools = c.pools()
        return f"{pools} ({c.precision}, decode batch {c.max_batch})"
    return _shape_words(c.replicas, c.gpus_per_replica, c.gpu_type, c.precision, c.max_batch,
                        c.data_parallel_attention, c.pipeline_parallel, c.expert_parallel)


def _shape_words(replicas: int, gpus: int, gpu_type: str, precision: str, batch: int, dp_attention: bool,
                 pp: int, ep: bool = False) -> str:
    dp = ", DP attention" + (" + EP" if ep else "") if dp_attention else ""
    stages = f", {pp} pipeline stages" if pp > 1 else ""
    return f"{replica_shape(replicas, gpus, gpu_type)} ({precision}, batch {batch}{dp}{stages})"


def shape_layout_of(c: Candidate) -> int | None:
    """`ShapeOption.layout` of `c`: None for a disaggregated one; aggregated, 0: a replica within a node; 1: tensor
    (or expert) parallel over nodes; 2: pipeline stages over nodes."""
    if c.roles:
        return None
    return 2 if c.pipeline_parallel > 1 else 1 if c.nodes_per_replica > 1 else 0


def distinct(req: PlanRequest, ordered: list[Candidate]) -> list[Candidate]:
    """`ordered` without near-duplicates: a candidate at the cost of one kept before it whose latency
    objectives are all within NEAR_DUPLICATE of that one's and whose headroom is within 5 points."""
    kept: list[tuple[Candidate, NDArray[np.float64]]] = []
    for c in ordered:
        mine = _objectives(req, c)
        if not any(abs(mine[0] - theirs[0]) <= 1e-9 * max(1.0, theirs[0])
                   and np.all(np.abs(mine[1:4] - theirs[1:4]) <= NEAR_DUPLICATE * np.maximum(theirs[1:4], 1e-9))
                   and abs(mine[4] - theirs[4]) <= 0.05 for _, theirs in kept):
            kept.append((c, mine))
    return [c for c, _ in kept]


def by_cost(c: Candidate) -> tuple[float, float, int]:
    """The recommendation's order: cost, then most headroom, then fewest GPUs."""
    return c.cost.dollars_per_hour, -c.headroom, c.gpus


def _finish(req: PlanRequest, grid: _Grid, candidates: list[Candidate], rejected: list[_Rejections],
            warnings: list[str]) -> PlanResult:
    # The reported numbers come from a finer sample than the search's: drop any shown candidate another
    # shown one now dominates; the recommendation is the cheapest left, ties broken by headroom.
    if candidates:
        keep = non_dominated(np.array([_objectives(req, c) for c in candidates]))
        candidates = [c for c, k in zip(candidates, keep, strict=True) if k]
    shown = tag_candidates(req, distinct(req, sorted(candidates, key=by_cost)))
    if shown:  # each shape's search bounded its own; merged, the bound is the cheapest of all (`_select`)
        bound = PRACTICAL_COST_FACTOR * shown[0].cost.dollars_per_hour
        shown = [shown[0], *(c for c in shown[1:] if c.cost.dollars_per_hour <= bound)]
    if len(shown) > req.alternatives + 1:
        # Each shape's search chose its own few; beside the recommendation keep the tagged ones, then the cheapest.
        tagged = [c for c in shown[1:] if c.tags]
        others = [c for c in shown[1:] if not c.tags]
        kept = {id(c) for c in [*tagged, *others][:req.alternatives]}
        shown = [shown[0], *(c for c in shown[1:] if id(c) in kept)]
    recommendation = shown[0] if shown else None
    alternatives = shown[1:]
    # Nearest infeasible: those that got furthest through the gates, within a gate the nearest to passing it first
    # (`_nearness`: 9 ms against an 8 ms target before 30 ms; the cheapest first among equals and where a gate has no
    # measure), one per reason. Beside a recommendation, a row that broke a limit (replicas, GPUs available,
    # budget) at more than PRACTICAL_COST_FACTOR x its cost is no near miss: it would not be shown if the limit
    # allowed it (`_select`), and listing it would tie the status to GPU counts that change nothing else (a
    # candidate of 2,004 GPUs listed while 2,000 are available goes when 8 more come).
    order = {gate: i for i, gate in enumerate(GATES)}
    blocks = [r for r in rejected if len(r.index)]
    if recommendation is not None:
        reach = PRACTICAL_COST_FACTOR * recommendation.cost.dollars_per_hour
        blocks = [_only(r, r.cost <= reach) if r.gate in LIMIT_CHECKS else r for r in blocks]
        blocks = [r for r in blocks if len(r.index)]
    # A shape that fails several of the shape gates is listed under the first it fails, the rest in `also`.
    first_gate = np.full(len(grid.gpu), len(GATES))
    for r in blocks:
        if r.gate in SHAPE_GATES:
            np.minimum.at(first_gate, r.shape, order[r.gate])
    blocks = [r if r.gate not in SHAPE_GATES else _only(r, first_gate[r.shape] == order[r.gate]) for r in blocks]
    blocks = [r for r in blocks if len(r.index)]
    nearest: list[Infeasible] = []
    if blocks:
        gate = np.concatenate([np.full(len(r.index), order[r.gate]) for r in blocks])
        cost = np.concatenate([r.cost for r in blocks])
        near = np.concatenate([_nearness(r) for r in blocks])
        batch = np.concatenate([np.zeros(len(r.index), dtype=int) if r.batch is None else r.batch for r in blocks])
        found = np.concatenate([r.index for r in blocks])  # equal keys keep the order the search found them in
        block = np.concatenate([np.full(len(r.index), k) for k, r in enumerate(blocks)])
        position = np.concatenate([np.arange(len(r.index)) for r in blocks])
        seen: set[object] = set()
        for k in np.lexsort((found, batch, cost, near, -gate)):
            r, j = blocks[block[k]], position[k]
            shape = grid.shape(req, int(r.shape[j]))
            # One line per deployment shape and gate (its nearest, then smallest, failing batch) and per reason.
            if (shape, r.gate) in seen:
                continue
            reason = r.reason(int(r.index[j]))
            if reason in seen:
                continue
            seen.update({(shape, r.gate), reason})
            also = [f"{other.gate}: {other.reason(int(other.index[hit[0]]))}" for other in rejected
                    if other.gate in SHAPE_GATES and other.gate != r.gate
                    and len(hit := np.flatnonzero(other.shape == r.shape[j]))]
            nearest.append(Infeasible(gpu_type=shape.gpu.key, gpus_per_replica=shape.gpus, precision=shape.precision,
                                      kv_cache_dtype=shape.kv_dtype,
                                      max_batch=None if r.batch is None else int(r.batch[j]),
                                      gate=r.gate, reason=reason, also=also, pipeline_parallel=shape.pp,
                                      data_parallel_attention=shape.dp_attention, expert_parallel=shape.ep))
            if len(nearest) >= req.alternatives:
                break
    if recommendation is None:
        warnings = [*warnings, "no candidate meets every gate; see infeasible for the nearest ones and why, and "
                               "suggestions for what would make it feasible"]
    return PlanResult(recommendation=recommendation, alternatives=alternatives, infeasible=nearest,
                      warnings=warnings)


def with_replicas(req: PlanRequest, c: Candidate, replicas: int) -> Candidate | None:
    """`c` scaled to `replicas` replicas at the plan's rate (its latencies kept: the caller re-evaluates them),
    None where that breaks a limit of the plan."""
    if c.roles:
        return None  # a disaggregated candidate's pools are sized by its own search, not scaled here
    gpus = replicas * c.gpus_per_replica
    price = c.cost.dollars_per_hour / c.gpus
    cost = gpus * price
    gpu = load_gpu_catalog().get(c.gpu_type)
    if _limit_checks(req, [gpu], np.zeros(1, dtype=np.intp), np.array([replicas]), np.array([gpus]),
                     np.array([cost]))[0] >= 0:
        return None
    capacity = c.predicted.requests_per_second_per_replica / c.predicted.utilization
    per_replica = req.rate_rps / replicas
    predicted = c.predicted.model_copy(update={"utilization": rounded(per_replica / capacity),
                                               "requests_per_second_per_replica": rounded(per_replica)})
    best = c.predicted.max_requests_per_second_per_replica
    return c.model_copy(update={
        "replicas": replicas, "gpus": gpus, "predicted": predicted,
        "cost": cost_of([(gpus, price)], output_tokens_per_hour(req)),
        "headroom": rounded(max(0.0, headroom(req.rate_rps, replicas * best)))})


def _only(r: _Rejections, mask: NDArray[np.bool_]) -> _Rejections:
    return replace(r, index=r.index[mask], shape=r.shape[mask], batch=None if r.batch is None else r.batch[mask],
                   cost=r.cost[mask], miss=None if r.miss is None else r.miss[mask])


@dataclass(frozen=True)
class Deployment:
    """What the search evaluated for one candidate: the hardware, the engine settings and the memory plan
    (KV capacity) of one replica. Rebuilt from a candidate by `deployment_of`, e.g. to simulate it."""

    hardware: Hardware
    settings: EngineSettings
    memory: MemoryPlan


def deployment_of(req: PlanRequest, candidate: Candidate, factors: FactorSet | None = None) -> Deployment:
    """The deployment behind `candidate` of `req`, built as the search built it."""
    factors = factors or load_factors()
    engine = ENGINES[req.engine]
    gpu = load_gpu_catalog().get(candidate.gpu_type)
    precision = weight_precision(candidate.precision)
    checkpoint = checkpoint_of(req, candidate.precision, gpu)
    kv_bytes = kv_dtype_bytes(candidate.kv_cache_dtype, candidate.precision, req.engine, kv_hint(checkpoint))
    settings = _settings(req, engine, candidate.max_batch)
    engine_factors = factors.engine(engine.name)
    pp = candidate.pipeline_parallel
    tp = candidate.gpus_per_replica // pp
    memory = plan_memory_for_settings(req.arch, gpu, precision, kv_bytes, engine, [settings], engine_factors,
                                      tp, pp, dp_attention=candidate.data_parallel_attention)[0]
    hardware = build_hardware(req.arch, gpu, precision, kv_bytes, engine,
                              factors.engine_on(engine.name, gpu.key, gpu.vendor), tp, pp)
    domain = link_domain_gpus(req, gpu)
    if tp > domain:
        hardware = over_the_network(hardware, np.array(True), req.network_gbps)
    if pp > 1:
        hardware = over_the_pipeline(hardware, req.network_gbps, np.array(tp * pp > domain))
    if candidate.data_parallel_attention:
        hardware = with_dp_attention(hardware, np.array(True), attention_weight_bytes(req.arch, precision))
    if candidate.expert_parallel:
        hardware = with_expert_parallel(hardware, np.array(True), req.arch, np.array(domain))
    return Deployment(hardware, settings, memory)
