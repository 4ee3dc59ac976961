"""Step-level speed of one model instance: decode step time, prefill time, tensor-parallel cost.

Every function broadcasts over numpy arrays: a `Hardware` may hold one deployment (floats) or many
(arrays of one length), and batch sizes or token counts may be arrays too. Times are seconds.

The numbers of a `Hardware` come from measured kernel times (`inferplan.planner.model.kernels`): each layer's GEMMs
(QKV, output, gate/up, down, the experts, the LM head once) looked up at the deployment's per-rank shapes and
weight format, decode attention by KV bytes read, prefill attention by causal FLOPs, the all-reduces by message
size and TP, and the elementwise kernels at their floor. `build_hardware` reduces them to a roofline in the
batch: the time of a batch-1 step's weight reads with every kernel's floor (`dense_weights_s`), the marginal time
of a token in the GEMMs at decode and at prefill batch sizes, decode attention as a floor plus KV bytes at the
measured rate, and the overlap of memory and compute time at their crossover that the GEMM tables show. The
engine adds its per-step and per-sequence CPU time (`factors`), the only fitted terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.engines import ENGINES, EngineProfile, cuda_graph_max_batch
from inferplan.planner.catalog.gpus import GpuSpec
from inferplan.planner.catalog.precisions import WeightPrecision
from inferplan.planner.model.factors import EngineFactors
from inferplan.planner.model.kernels import (
    BACKEND_OF_ENGINE,
    ELEMENTWISE_FLOOR_S,
    ELEMENTWISE_KERNELS_PER_LAYER,
    MLA_TABLE_LATENT,
    gemm_format,
    gpu_kernels,
    moe_formats,
    moe_shape_key,
)
from inferplan.planner.model.memory import inner_ffn_params, kv_bytes_per_token_per_gpu, weight_bytes, weight_split

FloatArray = NDArray[np.float64]
Number = float | FloatArray

# All-reduce latency per call by interconnect [s] where no measured table covers the GPU and TP size: NVLink/xGMI
# custom all-reduce kernels take a few microseconds for decode-sized messages; over PCIe the NCCL ring is several
# times slower.
ALLREDUCE_LATENCY_S = {"nvlink": 8e-6, "xgmi": 12e-6, "pcie": 30e-6}

# The message size [bytes] that splits a measured all-reduce curve into its latency-bound and bandwidth-bound lines
# (`Hardware.link_knee_bytes`): 1 MiB, a decode batch of 64-128 tokens or a 64-token prompt at hidden 4096-8192.
ALLREDUCE_KNEE_BYTES = 2.0**20

# Batch sizes (tokens through the GEMMs) at which the kernel tables are read: a batch-1 step, the compute-bound
# slope of decode (512 -> 1024 tokens) and of prefill chunks (2048 -> 8192 tokens).
DECODE_SLOPE_M = (512.0, 1024.0)
PREFILL_SLOPE_M = (2048.0, 8192.0)
# Decode attention is read at a batch of 64 sequences, between 64 MiB and 1 GiB of KV per layer (its rate), and
# at 64 KiB for one sequence (its floor); prefill attention at a 16384-token prompt.
ATTENTION_BATCH = 64.0
ATTENTION_SLOPE_BYTES = (2.0**26, 2.0**30)
ATTENTION_FLOOR_BYTES = 2.0**16
PREFILL_ATTENTION_TOKENS = 16384.0


@dataclass(frozen=True)
class Hardware:
    """One model instance on its GPUs, reduced to the numbers the step model needs.

    Per-GPU quantities are per tensor-parallel rank; a pipeline stage runs after the previous one,
    so per-step times add up over the `pp` stages (llama.cpp's layer split behaves this way).
    `bandwidth_bytes_s` is what turns the weights a step reads into the measured time of a batch-1 step's
    kernels (every GEMM with its floor, attention and elementwise floors included); `decode_flops_s` and
    `prefill_flops_s` turn a token's FLOPs into its measured marginal GEMM time at decode and prefill batch sizes.
    """

    tp: Number
    pp: Number
    decode_dense_bytes_per_gpu: Number       # weights read each decode step, experts excluded
    expert_bytes_per_gpu: Number             # all routed experts on this GPU
    num_experts: Number
    experts_per_token: Number
    kv_full_bytes_per_token_per_gpu: Number  # full-attention layers
    kv_window_bytes_per_token_per_gpu: Number
    window_tokens: Number
    decode_flops_per_token_per_gpu: Number
    prefill_flops_per_token_per_gpu: Number
    attention_full_flops_per_pair_per_gpu: Number    # per (query, context token) pair, full-attention layers
    attention_window_flops_per_pair_per_gpu: Number  # the same over the sliding-window layers
    allreduce_bytes_per_token: Number         # hidden x 2 bytes, per all-reduce
    allreduces_per_step: Number
    bandwidth_bytes_s: Number                 # dense weight bytes / measured batch-1 step kernel time
    expert_bandwidth_bytes_s: Number          # the measured streaming rate of a large weight (experts, added reads)
    kv_bandwidth_bytes_s: Number              # measured decode-attention rate on KV reads
    decode_flops_s: Number                    # a token's GEMM FLOPs / its measured marginal time at decode
    prefill_flops_s: Number                   # ... at prefill chunk sizes
    attention_flops_s: Number                 # measured prefill-attention rate
    link_bytes_s: Number
    link_latency_s: Number
    overlap_penalty: Number                   # share of the smaller of memory and compute time not hidden
    step_overhead_s: Number
    sequence_overhead_s: Number
    request_overhead_s: Number               # online serving only: added to TTFT
    # Pipeline stages on separate nodes: each stage sends its activations to the next over the network, pp - 1
    # sends per pass, counted per stage (x (pp - 1) / pp) like the all-reduces (`search.over_the_pipeline`).
    stage_send_latency_s: Number = 0.0
    stage_send_s_per_token: Number = 0.0
    # MLA decode with absorbed weights (`mla_decode_flops_per_pair`): every head of a rank attends over the latent,
    # 2 x heads x (2 x kv_lora_rank + qk_rope_head_dim) FLOPs per (query, context token) pair and layer, per GPU;
    # 0 for other attention. A decode step's attention takes the larger of its KV read and these FLOPs at
    # `attention_flops_s` (`decode_attention_s_per_token`).
    mla_decode_flops_per_pair_per_gpu: Number = 0.0
    # MLA decode where a measured table covers the GPU (`kernels.GpuKernels.mla_decode_s_per_pair`): seconds per
    # (sequence, context token) over the stage's layers at this rank's query heads; it replaces the read-or-FLOPs
    # estimate above. 0 where nothing measured it (AMD, the typical GPUs) or for other attention.
    mla_decode_s_per_pair_per_gpu: Number = 0.0
    # The all-reduce curve is concave in the message size: the measured tables (`kernels.allreduce_s`) take far longer
    # per byte between one token's message and ALLREDUCE_KNEE_BYTES (latency-bound algorithms, protocol switches)
    # than beyond it. Below the knee each ring byte costs `link_knee_s_per_byte` more than at `link_bytes_s`, so an
    # all-reduce of s bytes takes link_latency_s + ring(s) / link_bytes_s + ring(min(s, knee)) * link_knee_s_per_byte
    # (`allreduce_message_s`); 0 where no table measured the curve (rated link figures, over the network).
    link_knee_bytes: Number = 0.0
    link_knee_s_per_byte: Number = 0.0
    # A mixture of experts' fused MoE layers, kernels of their own after the dense GEMMs: what they add to a step
    # over `tokens` routed to them, per stage, is moe_floor_s + expert_bytes_per_gpu x experts_touched_fraction /
    # expert_bandwidth_bytes_s + tokens x expert_s_per_token (`moe_step_s`), summed with the rest of the step, not
    # shared in the dense GEMMs' roofline: the measured fused-MoE tables are that sum of a floor, a read of the
    # experts routed to and a compute per routed token within 10% from 1 to 16k tokens, where the larger of read and
    # compute falls up to 40% short between 100 and 2k tokens (docs/model.md, One step). 0 for dense models.
    moe_floor_s: Number = 0.0
    expert_s_per_token: Number = 0.0
    # Speculative decoding with the model's multi-token-prediction modules (`with_mtp`): a decode step verifies
    # `verify_tokens` tokens of each sequence (its last token and the drafts) in the model's GEMMs, all-reduces and
    # MoE layers (its KV read once), runs `draft_passes` passes of a module over the batch, each `draft_share` of the
    # model's decode GPU time, and emits `tokens_per_step` tokens a sequence on average. The decode step of the
    # analytic model and the simulator is then the time per token emitted (`DecodeStep.at`). 1, 0, 0, 1: off.
    verify_tokens: Number = 1.0
    draft_passes: Number = 0.0
    draft_share: Number = 0.0
    tokens_per_step: Number = 1.0
    # A step over more running sequences than the engine's largest captured CUDA graph (`graph_max_batch`,
    # `engines.cuda_graph_max_batch`) runs eagerly: the CPU launches every kernel of every layer, `eager_step_s` over
    # the model's layers (the engine line's `eager_layer_ms`) on top of the step. inf and 0: never.
    graph_max_batch: Number = math.inf
    eager_step_s: Number = 0.0
    # Data-parallel attention (`with_dp_attention`): `dp_ranks` ranks each run their own requests' attention (1:
    # none). A prompt's attention, its projections (`attention_projection_flops_per_token_per_gpu`, the share of
    # `prefill_flops_per_token_per_gpu` they are when spread over the ranks) and its (query, context) pairs, runs on
    # its own rank, while the others wait for it at the MoE layers: a step's is its busiest rank's
    # (`prefill_compute_s_per_token`, the simulator's step).
    dp_ranks: Number = 1.0
    attention_projection_flops_per_token_per_gpu: Number = 0.0


def sm_stream_cap(gpu: GpuSpec, factors: EngineFactors) -> float:
    """The most an engine's kernels stream from memory on `gpu` [bytes/s]: its per-SM rate (`sm_stream_gb_s`)
    times the GPU's SMs; no cap where the catalog gives no SM count. Only engines with their own weight kernels
    (`EngineProfile.own_weight_kernels`) have a fitted rate; the others keep the prior, which caps nothing."""
    if not gpu.sm_count:
        return float("inf")
    return gpu.sm_count * factors.sm_stream_gb_s * 1e9


@dataclass(frozen=True)
class LayerShapes:
    """The GEMMs of one model on `tp` ranks: (N, K, count per layer) of the dense layers' linear layers, of the
    MoE layers' non-expert ones, of one routed expert, and the LM head's (N, K)."""

    dense: tuple[tuple[float, float, float], ...]
    moe_shared: tuple[tuple[float, float, float], ...]
    expert: tuple[tuple[float, float, float], ...]
    lm_head: tuple[float, float]
    dense_layers: int
    moe_layers: int


@lru_cache(maxsize=4096)
def layer_shapes(arch: ModelArchitecture, tp: int) -> LayerShapes:
    """Per-rank GEMM shapes of `arch` at tensor parallelism `tp` (KV heads replicated below one per rank; an MLA
    or other attention block as one GEMM of its parameters)."""
    h = float(arch.hidden_size)
    gated = arch._mlp_params(1) >= 3 * arch.hidden_size
    if arch.is_mla:
        attention = ((arch._attention_params() / h / tp, h, 1.0),)
    else:
        kv_heads = max(arch.num_kv_heads / tp, 1.0)
        q_heads = arch.num_attention_heads / tp
        attention = (((q_heads + 2.0 * kv_heads) * arch.head_dim, h, 1.0), (h, q_heads * arch.head_dim, 1.0))

    def mlp(width: float) -> tuple[tuple[float, float, float], ...]:
        if width <= 0:
            return ()
        return (((2.0 if gated else 1.0) * width / tp, h, 1.0), (h, width / tp, 1.0))

    moe_layers = arch.num_layers - arch.first_dense_layers if arch.is_moe else 0
    shared = float(arch.num_shared_experts * arch.shared_expert_intermediate_size)
    router = ((float(arch.num_experts), h, 1.0),) if arch.is_moe else ()
    return LayerShapes(
        dense=attention + mlp(float(arch.intermediate_size)),
        moe_shared=attention + mlp(shared) + router,
        expert=mlp(float(arch.expert_intermediate_size)) if arch.is_moe else (),
        lm_head=(arch.vocab_size / tp, h),
        dense_layers=arch.num_layers - moe_layers,
        moe_layers=moe_layers,
    )


def _shape_arrays(arch: ModelArchitecture, tps: tuple[int, ...], pp: int
                  ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, LayerShapes]:
    """(N, K, calls per stage) of every non-expert GEMM of a stage, and (N, K) of one routed expert's, per TP size
    (axis 0), from `layer_shapes`; the LM head is the last non-expert GEMM (once per step, its share per stage)."""
    every = [layer_shapes(arch, tp) for tp in tps]
    rows = []
    experts = []
    for shapes in every:
        calls = [(n, k, shapes.dense_layers / pp * c) for n, k, c in shapes.dense]
        calls += [(n, k, shapes.moe_layers / pp * c) for n, k, c in shapes.moe_shared]
        calls.append((*shapes.lm_head, 1.0 / pp))
        rows.append(calls)
        experts.append([(n, k) for n, k, _ in shapes.expert] or [(1.0, 1.0)])
    table = np.array(rows, dtype=float)
    expert = np.array(experts, dtype=float)
    return table[..., 0], table[..., 1], table[..., 2], expert[..., 0], expert[..., 1], every[0]


def _quantized_share(arch: ModelArchitecture, precision: WeightPrecision, gemms: int) -> FloatArray:
    """The share of each non-expert GEMM's parameters (in `_shape_arrays`' order, the LM head last) that
    `precision` quantises: 1 for every linear layer of "linear" and "all", 0 for "experts" (the 16-bit dense
    layers of gpt-oss's MXFP4), and for "inner-ffn" the feed-forward GEMMs of all but the first and the last layer
    (`memory.inner_ffn_params`), the attention projections none. The LM head's entry is the caller's to set."""
    if precision.quantizes in ("linear", "all"):
        return np.ones(gemms)
    share = np.zeros(gemms)
    if precision.quantizes == "inner-ffn":
        shapes = layer_shapes(arch, 1)
        ffn = len(shapes.dense) - (2 if arch.intermediate_size > 0 else 0)
        share[ffn:len(shapes.dense)] = inner_ffn_params(arch) / max(
            arch.num_layers * arch._mlp_params(arch.intermediate_size), 1)
    return share


# Entries each of the per-(model, GPU, format, engine, TP sizes) term caches below keeps, about 1 KiB each. 1,000
# random plans (bench/bench_plan.py) ask for about 7,000 different GEMM terms, and at 4,096 a third of the lookups
# are recomputed after eviction; 16,384 took 400 of them 3-5% less CPU, but in a long-running operator the four
# caches could then hold about 48 MiB more per planner process, so they stay at 4,096 (memory is not to grow).
TERMS_CACHE = 4096


def _own_weight_kernels(engine: str) -> bool:
    return ENGINES[engine].own_weight_kernels if engine in ENGINES else False


@lru_cache(maxsize=64)
def _terms_engine(engine: str, gemm: bool = False) -> str:
    """The engine whose entries in the term caches (`_gemm_terms`, `_attention_terms`, `_mla_terms`,
    `_allreduce_terms`) serve `engine`: the first of BACKEND_OF_ENGINE that runs the same backend's kernels (and,
    for the GEMM terms, `gemm`, the same own weight kernels). The terms read an engine only through those
    (`gpu_kernels`, `moe_formats`, `EngineProfile.own_weight_kernels`), so engines that share them get the same
    numbers: TGI's terms are vLLM's, LMDeploy's TensorRT-LLM's, and a plan of one after a plan of the other looks
    up nothing again."""
    backend = BACKEND_OF_ENGINE.get(engine, "vllm")
    for other, other_backend in BACKEND_OF_ENGINE.items():
        if other_backend == backend and (not gemm or _own_weight_kernels(other) == _own_weight_kernels(engine)):
            return other
    return engine


@lru_cache(maxsize=TERMS_CACHE)
def _gemm_terms(arch: ModelArchitecture, gpu: GpuSpec, precision: WeightPrecision, engine: str,
                tps: tuple[int, ...], pp: int
                ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """(batch-1 GEMM and elementwise time, decode token time, prefill token time, overlap) of the dense GEMMs per TP
    size, the large-weight streaming rate, and the MoE layers' compute per routed token and floor per step (0 for
    a dense model; `Hardware.moe_floor_s`): every GEMM of every TP size looked up in one call per format."""
    kernels = gpu_kernels(gpu, engine)
    fmt = gemm_format(precision, gpu)
    dense_fmt = fmt if precision.quantizes != "experts" else "bfloat16"
    n, k, calls, expert_n, expert_k, first = _shape_arrays(arch, tps, pp)
    share = _quantized_share(arch, precision, n.shape[1])
    layers_per_stage = arch.num_layers / pp
    # Engines with their own weight kernels (llama.cpp, ExLlama, MLC) read the weights of a small batch with their
    # own matrix-vector kernels, whose speed is the bytes at the GPU's streaming rate (`GpuKernels.stream_s`), not
    # the vendor GEMMs' (whose weight-only int4 calls on the A100 have floors of 17-20 us).
    own = _own_weight_kernels(engine)
    per_weight = share * precision.bytes_per_param + (1.0 - share) * 2.0
    # The LM head is quantised only where everything is (GGUF, MLC); its GEMM runs 16-bit either way.
    per_weight[-1] = precision.bytes_per_param if precision.quantizes == "all" else 2.0
    per_weight = np.broadcast_to(per_weight, n.shape)
    gemm_share = share[:, None].copy()
    gemm_share[-1] = 0.0  # the LM head's GEMM runs 16-bit

    def gemms(m: FloatArray) -> FloatArray:
        """Every non-expert GEMM of a stage at M = m tokens ([..., len(m)] per TP size), with the elementwise
        kernels of its layers: shape (TP sizes, len(m))."""
        m = np.asarray(m, dtype=float)
        m3 = m if m.ndim == 2 else np.broadcast_to(m, (len(tps), m.size))
        seconds = kernels.gemm_s(dense_fmt, m3[:, None, :], n[..., None], k[..., None])
        if dense_fmt != "bfloat16":  # what the precision leaves 16-bit (the LM head at least) runs 16-bit GEMMs
            sixteen = kernels.gemm_s("bfloat16", m3[:, None, :], n[..., None], k[..., None])
            seconds = np.where(gemm_share == 1.0, seconds, np.where(
                gemm_share == 0.0, sixteen, gemm_share * seconds + (1.0 - gemm_share) * sixteen))
        if own:
            streamed = kernels.stream_s(per_weight * n * k)[..., None]
            seconds = np.where(m3[:, None, :] <= 1.0, streamed, seconds)
        moved = 2.0 * 2.0 * arch.hidden_size * m3  # elementwise: read and write 16-bit activations
        rate = gpu.memory_bandwidth_gb_s * 1e9
        elementwise = layers_per_stage * ELEMENTWISE_KERNELS_PER_LAYER * (ELEMENTWISE_FLOOR_S + moved / rate)
        return (calls[..., None] * seconds).sum(axis=1) + elementwise

    m = np.array([1.0, *DECODE_SLOPE_M, *PREFILL_SLOPE_M])
    dense = gemms(m)
    weights = dense[:, 0]
    moe_floor = np.zeros(len(tps))
    # Experts stream at the rate this GPU's tables read a large weight at M = 1, unless a fused-MoE table says
    # otherwise (below).
    stream = np.full(len(tps), kernels.stream_bytes_s())
    if first.expert:
        # Where the engine's fused MoE kernels were measured on this GPU (`GpuKernels.moe_layer`), the layer as
        # they run it: a floor per layer (routing, permutation, two grouped GEMMs and the combine, under
        # power-law routing), the rate at which they read the routed experts, and their compute per routed token.
        moe_layers = first.moe_layers / pp
        formats = moe_formats(precision, gpu, engine)
        expert_token = np.full(len(tps), np.nan)
        for t, tp in enumerate(tps):
            flops = 6.0 * arch.hidden_size * arch.expert_intermediate_size / tp  # one routed token, one expert
            shape = moe_shape_key(arch.hidden_size, arch.expert_intermediate_size, arch.num_experts,
                                  arch.experts_per_token, tp)
            layer = kernels.moe_layer(formats, flops / 2.0 * precision.bytes_per_param, shape) if formats else None
            if layer is not None:
                floor, stream[t], compute = layer
                moe_floor[t] = moe_layers * floor
                expert_token[t] = moe_layers * arch.experts_per_token * flops / compute
        if np.isnan(expert_token).any():
            # Elsewhere the routed experts' GEMMs at M tokens: every expert busy with its share of the M x top-k
            # routed tokens (uniform routing). Their weight reads are the experts' own term (`expert_bytes_per_gpu`);
            # their compute per token is read where their GEMMs are compute-bound (prefill sizes), for decode too: at
            # decode sizes each expert's few tokens ride on its weight read, which that term charges.
            experts = float(arch.num_experts)
            per_expert = np.array(PREFILL_SLOPE_M) * arch.experts_per_token / experts
            seconds = kernels.gemm_s(fmt, per_expert[None, None, :], expert_n[..., None],
                                     expert_k[..., None]).sum(axis=1)
            gemm_token = moe_layers * experts * (seconds[:, 1] - seconds[:, 0]) / (
                PREFILL_SLOPE_M[1] - PREFILL_SLOPE_M[0])
            expert_token = np.where(np.isnan(expert_token), gemm_token, expert_token)
    else:
        expert_token = np.zeros(len(tps))
    dense_token = (dense[:, 2] - dense[:, 1]) / (DECODE_SLOPE_M[1] - DECODE_SLOPE_M[0])
    prefill_token = (dense[:, 4] - dense[:, 3]) / (PREFILL_SLOPE_M[1] - PREFILL_SLOPE_M[0])
    # The overlap at the crossover of memory (the batch-1 time) and compute (tokens x the decode slope), read on the
    # dense GEMMs' curve (an MoE model's experts have their own term).
    cross = np.maximum(weights / np.maximum(dense_token, 1e-12), 1.0)
    at_cross = gemms(cross[:, None])[:, 0]
    overlap = np.where(cross > 1.0, np.clip(at_cross / weights - 1.0, 0.0, 1.0), 0.0)
    # Experts and the weights a layout adds to a step's reads (data-parallel attention) stream at `stream` per TP
    # size: the fused MoE tables' rate, else the rate this GPU's tables read a large weight at M = 1 (the fused MoE
    # kernels load only the routed experts, each of which is too small for the GEMM tables' grid).
    return weights, dense_token, prefill_token, overlap, stream, expert_token, moe_floor


@lru_cache(maxsize=TERMS_CACHE)
def _attention_terms(arch: ModelArchitecture, gpu: GpuSpec, kv: str, engine: str, tps: tuple[int, ...],
                     pp: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(decode attention floor of a stage's layers, its rate on KV bytes, prefill attention's rate) per TP size."""
    kernels = gpu_kernels(gpu, engine)
    tp = np.array(tps, dtype=float)
    kv_heads = np.ones_like(tp) if arch.is_mla else np.maximum(arch.num_kv_heads / tp, 1.0)
    units = np.stack([kv_heads, ATTENTION_BATCH * kv_heads, ATTENTION_BATCH * kv_heads], axis=1)
    read = np.array([ATTENTION_FLOOR_BYTES, *ATTENTION_SLOPE_BYTES])[None, :]
    attention = kernels.decode_attention_s(kv, read, units)
    kv_rate = (read[0, 2] - read[0, 1]) / np.maximum(attention[:, 2] - attention[:, 1], 1e-12)
    floor = attention[:, 0] * arch.num_layers / pp
    # Prefill attention: the measured rate at a long prompt over this rank's heads (where attention is a large share
    # of a prefill; a short prompt's attention is a small share whatever its rate).
    heads = np.maximum(arch.num_attention_heads / tp, 1.0)
    flops = 2.0 * heads * (arch.head_dim + (arch.v_head_dim if arch.is_mla else arch.head_dim)) \
        * PREFILL_ATTENTION_TOKENS**2 / 2.0
    rate = flops / kernels.prefill_attention_s(flops, heads)
    measured = kernels.mla_prefill_flops_s(heads) if arch.is_mla else None  # MLA's own kernels where profiled
    return floor, kv_rate, rate if measured is None else measured


@lru_cache(maxsize=TERMS_CACHE)
def _mla_terms(arch: ModelArchitecture, gpu: GpuSpec, kv: str, engine: str, tps: tuple[int, ...],
               pp: int) -> FloatArray:
    """Measured MLA decode per (sequence, context token) over a stage's layers [s] at each TP size's query heads a
    rank, in proportion to the model's latent against the tables' (`MLA_TABLE_LATENT`); 0 for other attention and
    where no table covers the GPU."""
    measured = gpu_kernels(gpu, engine).mla_decode_s_per_pair(
        kv, arch.num_attention_heads / np.array(tps, dtype=float)) if arch.is_mla else None
    if measured is None:
        return np.zeros(len(tps))
    latent = (arch.kv_lora_rank + arch.qk_rope_head_dim) / MLA_TABLE_LATENT
    return measured * latent * arch.num_layers / pp


def mla_dp_ratio(arch: ModelArchitecture, gpu: GpuSpec, engine: str, kv_bytes: float, tp: ArrayLike) -> FloatArray:
    """Data-parallel attention's measured MLA decode against tensor-parallel's, per replica sequence: every query
    head on 1/tp of the sequences over the rank's heads on all of them (`with_dp_attention`); 1/tp where no table
    covers the GPU (the FLOPs and the read are the same per GPU then)."""
    t = np.maximum(np.asarray(tp, dtype=float), 1.0)
    kernels = gpu_kernels(gpu, engine)
    kv_name = "fp8" if kv_bytes < 2.0 else "bf16"
    whole = kernels.mla_decode_s_per_pair(kv_name, float(arch.num_attention_heads)) if arch.is_mla else None
    split = kernels.mla_decode_s_per_pair(kv_name, arch.num_attention_heads / t) if arch.is_mla else None
    if whole is None or split is None:
        return 1.0 / t
    return whole / (t * split)


@lru_cache(maxsize=TERMS_CACHE)
def _allreduce_terms(arch: ModelArchitecture, gpu: GpuSpec, engine: str, tps: tuple[int, ...]
                     ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(latency of one token's all-reduce, ring bandwidth between 1 and 16 MiB, the extra time per ring byte below
    ALLREDUCE_KNEE_BYTES that makes the curve pass through its measured time at the knee) per TP size; NaN where no
    measured table covers the GPU and TP size."""
    kernels = gpu_kernels(gpu, engine)
    latency = np.full(len(tps), np.nan)
    bandwidth = np.full(len(tps), np.nan)
    knee = np.full(len(tps), np.nan)
    for t, tp in enumerate(tps):
        ar = kernels.allreduce_s(np.array([2.0 * arch.hidden_size, ALLREDUCE_KNEE_BYTES, 2.0**24]), tp) \
            if tp > 1 else None
        if ar is not None:
            ring = 2.0 * (tp - 1) / tp
            latency[t] = ar[0]
            bandwidth[t] = ring * (2.0**24 - ALLREDUCE_KNEE_BYTES) / max(ar[2] - ar[1], 1e-12)
            knee[t] = (ar[1] - ar[0]) / (ring * ALLREDUCE_KNEE_BYTES) - 1.0 / bandwidth[t]
    return latency, bandwidth, knee


@lru_cache(maxsize=16384)
def build_hardware(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    precision: WeightPrecision,
    kv_bytes: float,
    engine: EngineProfile,
    factors: EngineFactors,
    tp: int = 1,
    pp: int = 1,
    version: str | None = None,
    step_tokens: float | None = None,
) -> Hardware:
    """Reduce (model, GPU, precision, engine at `version`, parallelism) to a `Hardware` of floats."""
    grid = hardware_grid(arch, [gpu], [precision], [[kv_bytes]], engine, [factors], [tp], pp, version=version,
                         step_tokens=step_tokens)
    return Hardware(**{f.name: float(getattr(grid, f.name)[0, 0, 0, 0]) for f in fields(Hardware)})


def hardware_grid(
    arch: ModelArchitecture,
    gpus: Sequence[GpuSpec],
    precisions: Sequence[WeightPrecision],
    kv_bytes: ArrayLike,
    engine: EngineProfile,
    factors: Sequence[EngineFactors],
    tps: Sequence[int],
    pp: int = 1,
    needed: NDArray[np.bool_] | None = None,
    version: str | None = None,
    step_tokens: float | None = None,
) -> Hardware:
    """`build_hardware` for every (GPU, TP size, precision, KV dtype) at once.

    `factors` are per GPU (the engine's factors on that GPU), `kv_bytes` is (precision, KV dtype) or (GPU,
    precision, KV dtype): bytes of one KV element (a checkpoint's KV format may differ by GPU). Every field
    comes back as an array of shape (len(gpus), len(tps), len(precisions), KV dtypes);
    `build_hardware` is the one-element case, so the two always agree. `needed` (GPUs x precisions), where given,
    says which pairs any shape will read: the kernels of the others are not looked up and their step-time
    fields are NaN.
    `version`: the engine release whose default CUDA graphs set `graph_max_batch` (None: the current one), at a step
    budget of `step_tokens` (None: its default).
    """
    split = weight_split(arch)
    # Per precision (axis 2): bytes of the weights and what a decode step reads of them.
    total_bytes = np.array([weight_bytes(arch, p) for p in precisions])
    # Every precision quantises the experts (the 16-bit ones at 2 bytes); only "all" touches embeddings.
    expert_bytes = np.array([split.experts * p.bytes_per_param for p in precisions])
    embed_bytes = np.array([split.input_embedding * (p.bytes_per_param if p.quantizes == "all" else 2.0)
                            for p in precisions])
    dense_read = total_bytes - expert_bytes - (0.0 if arch.tie_word_embeddings else embed_bytes)

    full_layers = arch.full_attention_layers()
    windows = [w for w in arch.layer_windows if w is not None]
    tp = np.array(tps)[None, :, None, None]
    shards = tp * pp
    kv = np.asarray(kv_bytes, dtype=float)
    kv = np.broadcast_to(kv, (len(gpus), *kv.shape[-2:]))  # (GPU, precision, KV dtype)
    per_layer_kv = kv_bytes_per_token_per_gpu(arch, kv[:, None, :, :], tp, pp) / max(arch.num_layers, 1)
    # One new token attending to one context token, per layer (QK^T and the weighted sum of V).
    attention_per_layer = arch.attention_flops_per_token(1.0) / arch.num_layers
    # The dense GEMMs' parameters a token multiplies (the routed experts' are the MoE layers' own term,
    # `Hardware.expert_s_per_token`).
    routed = float(arch.moe_layer_count * arch.experts_per_token * 3 * arch.hidden_size * arch.expert_intermediate_size)
    matmul_params = arch.active_param_count() - routed - split.input_embedding - (
        0.0 if arch.tie_word_embeddings else split.lm_head
    )
    decode_flops = 2.0 * (matmul_params + split.lm_head) / shards
    prefill_flops = 2.0 * matmul_params / shards
    dense_per_gpu = dense_read[None, None, :, None] / shards

    shape = (len(gpus), len(tps), len(precisions), kv.shape[-1])
    sizes = tuple(int(t) for t in tps)
    weights_s, decode_s, prefill_s_, overlap, kv_rate, attention_rate, mla_s = (np.empty(shape) for _ in range(7))
    moe_floor, expert_token = np.zeros(shape[:3]), np.zeros(shape[:3])
    stream, latency, ring, knee = np.empty(shape[:3]), np.empty(shape[:2]), np.empty(shape[:2]), np.empty(shape[:2])
    kernel_engine, gemm_engine = _terms_engine(engine.name), _terms_engine(engine.name, gemm=True)
    for i, gpu in enumerate(gpus):
        latency[i], ring[i], knee[i] = _allreduce_terms(arch, gpu, kernel_engine, sizes)
        for j, precision in enumerate(precisions):
            if needed is not None and not needed[i, j]:  # no shape of this pair is evaluated: its kernels unread
                for unread in (weights_s, decode_s, prefill_s_, kv_rate, attention_rate, mla_s):
                    unread[i, :, j] = np.nan
                overlap[i, :, j], stream[i, :, j] = 0.0, np.nan
                moe_floor[i, :, j] = expert_token[i, :, j] = np.nan
                continue
            w, d, p_, o, stream[i, :, j], expert_token[i, :, j], moe_floor[i, :, j] = _gemm_terms(
                arch, gpu, precision, gemm_engine, sizes, pp)
            for k in range(kv.shape[-1]):
                kv_name = "fp8" if kv[i, j, k] < 2.0 else "bf16"
                floor, kv_rate[i, :, j, k], attention_rate[i, :, j, k] = _attention_terms(
                    arch, gpu, kv_name, kernel_engine, sizes, pp)
                mla_s[i, :, j, k] = _mla_terms(arch, gpu, kv_name, kernel_engine, sizes, pp)
                weights_s[i, :, j, k] = w + floor
                decode_s[i, :, j, k], prefill_s_[i, :, j, k], overlap[i, :, j, k] = d, p_, o
    cap = np.array([sm_stream_cap(g, f) for g, f in zip(gpus, factors, strict=True)])[:, None, None, None]
    decode = np.array([f.decode_speed for f in factors])[:, None, None, None]
    prefill = np.array([f.prefill_speed for f in factors])[:, None, None, None]
    rated = np.array([g.memory_bandwidth_gb_s * 1e9 for g in gpus])[:, None, None, None]
    links = np.array([[ALLREDUCE_LATENCY_S.get(g.interconnect if t > 1 else "nvlink", 30e-6) for t in sizes]
                      for g in gpus])
    rated_link = np.array([g.interconnect_gb_s * 1e9 for g in gpus])[:, None]
    measured = {
        "bandwidth_bytes_s": np.minimum(dense_per_gpu / weights_s, cap) * decode,
        "expert_bandwidth_bytes_s": np.minimum(stream[..., None], cap) * decode,
        "kv_bandwidth_bytes_s": np.minimum(kv_rate, np.minimum(cap, rated)) * decode,
        "mla_decode_s_per_pair_per_gpu": mla_s / decode,
        "moe_floor_s": moe_floor[..., None] / decode,
        "expert_s_per_token": expert_token[..., None] / decode,
        "decode_flops_s": decode_flops / decode_s * decode,
        "prefill_flops_s": prefill_flops / prefill_s_ * prefill,
        "attention_flops_s": attention_rate * prefill,
        "overlap_penalty": overlap,
        "link_latency_s": np.where(np.isnan(latency), links, latency)[:, :, None, None],
        "link_bytes_s": np.where(np.isnan(ring), rated_link, ring)[:, :, None, None],
        "link_knee_bytes": np.where(np.isnan(knee), 0.0, ALLREDUCE_KNEE_BYTES)[:, :, None, None],
        "link_knee_s_per_byte": np.where(np.isnan(knee), 0.0, knee)[:, :, None, None],
    }

    def per_gpu(values: Sequence[float]) -> FloatArray:
        return np.array(values, dtype=float)[:, None, None, None]

    grid = Hardware(
        tp=tp.astype(float),
        pp=float(pp),
        decode_dense_bytes_per_gpu=dense_per_gpu,
        expert_bytes_per_gpu=expert_bytes[None, None, :, None] / shards,
        num_experts=float(arch.num_experts),
        experts_per_token=float(arch.experts_per_token),
        kv_full_bytes_per_token_per_gpu=per_layer_kv * full_layers,
        kv_window_bytes_per_token_per_gpu=per_layer_kv * len(windows),
        window_tokens=float(max(windows) if windows else 0),
        decode_flops_per_token_per_gpu=decode_flops,
        prefill_flops_per_token_per_gpu=prefill_flops,
        attention_projection_flops_per_token_per_gpu=2.0 * arch.attention_param_count() / shards,
        attention_full_flops_per_pair_per_gpu=attention_per_layer * full_layers / shards,
        attention_window_flops_per_pair_per_gpu=attention_per_layer * len(windows) / shards,
        mla_decode_flops_per_pair_per_gpu=mla_decode_flops_per_pair(arch) / shards,
        allreduce_bytes_per_token=2.0 * arch.hidden_size,
        allreduces_per_step=np.where(tp > 1, 2 * arch.num_layers / pp, 0.0),
        step_overhead_s=per_gpu([f.step_overhead_ms / 1e3 for f in factors]),
        graph_max_batch=np.array([[cuda_graph_max_batch(engine.name, version, g.memory_bytes, int(t), step_tokens)
                                   for t in sizes]
                                  for g in gpus], dtype=float)[:, :, None, None],
        eager_step_s=per_gpu([f.eager_layer_ms / 1e3 * arch.num_layers for f in factors]),
        sequence_overhead_s=per_gpu([f.sequence_overhead_ms / 1e3 for f in factors]),
        request_overhead_s=per_gpu([f.request_overhead_ms / 1e3 for f in factors]),
        **measured,
    )
    return Hardware(**{f.name: np.broadcast_to(np.asarray(getattr(grid, f.name), dtype=float), shape)
                       for f in fields(Hardware)})


def stack_hardware(items: list[Hardware]) -> Hardware:
    """Many deployments as one `Hardware` of arrays, for vectorised evaluation."""
    return Hardware(**{f.name: np.array([getattr(h, f.name) for h in items], dtype=float) for f in fields(Hardware)})


_HARDWARE_FIELDS = tuple(f.name for f in fields(Hardware))


def take_hardware(hw: Hardware, index: ArrayLike) -> Hardware:
    """Rows `index` of a stacked `Hardware`."""
    return Hardware(**{name: np.asarray(getattr(hw, name))[index] for name in _HARDWARE_FIELDS})


def hardware_column(hw: Hardware) -> Hardware:
    """The same deployments with a trailing axis, to broadcast against per-request samples."""
    return Hardware(**{f.name: np.asarray(getattr(hw, f.name), dtype=float)[..., None] for f in fields(Hardware)})


def _windowed(hw: Hardware, context_tokens: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """(context, context seen by a sliding-window layer) for `context_tokens` tokens of context."""
    ctx = np.asarray(context_tokens, dtype=float)
    return ctx, np.minimum(ctx, np.where(hw.window_tokens > 0, hw.window_tokens, ctx))


def mla_decode_flops_per_pair(arch: ModelArchitecture) -> float:
    """Absorbed MLA decode's attention FLOPs per (query, context token) pair over every layer, all heads: the query
    of each head, projected into the latent, scores the latent and rope key (kv_lora_rank + qk_rope_head_dim) and
    sums the latent values (kv_lora_rank), a multiply-add each. 0 for other attention. DeepSeek-V3 (128 heads,
    kv_lora_rank 512, rope 64): 278,528 per layer, 3.4x the un-absorbed dims' (`attention_flops_per_token`): the
    measured MLA decode kernels are compute-bound from a few sequences on (AIConfigurator's TensorRT-LLM
    `generation_mla` table on H200: 600-720 TFLOPS of these FLOPs at 4k-16k context and batch 64-256, reading
    the latent at 1.2-1.5 TB/s)."""
    if not arch.is_mla:
        return 0.0
    return 2.0 * arch.num_attention_heads * (2 * arch.kv_lora_rank + arch.qk_rope_head_dim) * arch.num_layers


def decode_attention_s_per_token(hw: Hardware) -> tuple[FloatArray, FloatArray]:
    """Decode attention's time per context token of one sequence [s]: (full-attention layers, sliding layers): the
    KV read at its measured rate; for MLA its measured time where a table covers the GPU, else the larger of its
    latent's read and its FLOPs at the attention rate."""
    estimate = np.maximum(np.asarray(hw.kv_full_bytes_per_token_per_gpu, dtype=float) / hw.kv_bandwidth_bytes_s,
                          np.asarray(hw.mla_decode_flops_per_pair_per_gpu, dtype=float) / hw.attention_flops_s)
    measured = np.asarray(hw.mla_decode_s_per_pair_per_gpu, dtype=float)
    full = np.where(measured > 0, measured, estimate)
    return full, np.asarray(hw.kv_window_bytes_per_token_per_gpu, dtype=float) / hw.kv_bandwidth_bytes_s


def attention_flops(hw: Hardware, context_tokens: ArrayLike) -> FloatArray:
    """Attention FLOPs of one query token over `context_tokens` tokens of context, per GPU."""
    ctx, windowed = _windowed(hw, context_tokens)
    return hw.attention_full_flops_per_pair_per_gpu * ctx + hw.attention_window_flops_per_pair_per_gpu * windowed


def experts_touched_fraction(hw: Hardware, tokens: ArrayLike) -> FloatArray:
    """Expected share of a layer's experts that `tokens` tokens route to (uniform routing)."""
    t = np.asarray(tokens, dtype=float)
    if not np.any(np.asarray(hw.num_experts) > 0):  # dense models only: skip the powers
        return np.zeros(np.broadcast_shapes(t.shape, np.shape(hw.num_experts)))
    experts = np.maximum(hw.num_experts, 1.0)
    miss = np.clip(1.0 - hw.experts_per_token / experts, 0.0, 1.0)
    return np.where(hw.num_experts > 0, 1.0 - miss**t, 0.0)


def moe_step_s(hw: Hardware, tokens: ArrayLike) -> FloatArray:
    """What the fused MoE layers of one stage add to a step over `tokens` tokens [s]: their floor, the read of the
    experts the tokens route to and their compute per routed token (`Hardware.moe_floor_s`); 0 for dense models."""
    t = np.asarray(tokens, dtype=float)
    return (hw.moe_floor_s + hw.expert_bytes_per_gpu * experts_touched_fraction(hw, t) / hw.expert_bandwidth_bytes_s
            + t * hw.expert_s_per_token)


def _roofline(memory_s: FloatArray, compute_s: FloatArray, overlap_penalty: Number) -> FloatArray:
    return np.maximum(memory_s, compute_s) + overlap_penalty * np.minimum(memory_s, compute_s)


def _ring_share(hw: Hardware) -> FloatArray:
    """The share of an all-reduce's message each rank sends and receives in a ring: 2 (tp - 1) / tp."""
    tp = np.asarray(hw.tp, dtype=float)
    return 2.0 * (tp - 1.0) / np.maximum(tp, 1.0)


def allreduce_message_s(hw: Hardware, tokens: ArrayLike) -> FloatArray:
    """One tensor-parallel all-reduce of `tokens` tokens' hidden states [s]: the measured curve as its two lines,
    latency-bound up to `link_knee_bytes` and bandwidth-bound beyond (`Hardware.link_knee_s_per_byte`)."""
    nbytes = hw.allreduce_bytes_per_token * np.asarray(tokens, dtype=float)
    return hw.link_latency_s + _ring_share(hw) * (nbytes / hw.link_bytes_s
                                                  + np.minimum(nbytes, hw.link_knee_bytes) * hw.link_knee_s_per_byte)


def allreduce_s(hw: Hardware, tokens: ArrayLike) -> FloatArray:
    """Communication of one pipeline stage in a step over `tokens` tokens: its tensor-parallel all-reduces
    (`allreduce_message_s`) and its share of the sends between stages."""
    t = np.asarray(tokens, dtype=float)
    return hw.allreduces_per_step * allreduce_message_s(hw, t) + hw.stage_send_latency_s \
        + t * hw.stage_send_s_per_token


# The half width of `DecodeStep.mean_at`'s ramp, in standard deviations of the running count: a linear ramp through
# one half with the slope of the normal CDF at its centre, 1 / (sigma sqrt(2 pi)), spans 1.25 sigma either way.
EAGER_RAMP_SIGMAS = 1.25


@dataclass(frozen=True)
class DecodeStep:
    """A decode step's time as a function of the batch, for fixed deployments and context.

    Everything that does not depend on the batch is computed once, so evaluating many batch sizes (the
    queueing fixed point does) costs a handful of array operations each.
    """

    hw: Hardware
    dense_weights_s: FloatArray  # reading the non-expert weights
    expert_weights_s: FloatArray  # reading every expert (scaled by the share a batch routes to)
    moe_floor_s: FloatArray       # the fused MoE layers' floor per step (`Hardware.moe_floor_s`)
    expert_s_per_sequence: FloatArray  # their compute per routed token
    kv_s_per_sequence: FloatArray
    compute_s_per_sequence: FloatArray
    allreduce_s_per_token: FloatArray
    allreduce_latency_s: FloatArray
    allreduce_knee_tokens: FloatArray        # the batch at which the all-reduces reach their knee ...
    allreduce_knee_s_per_token: FloatArray   # ... below which each token costs this much more
    has_experts: bool = True  # any deployment a mixture of experts (else the expert term is skipped)
    has_mtp: bool = False     # any deployment drafting with MTP modules (else `Hardware.verify_tokens` and the rest
                              # are their defaults and the step is the plain one)
    has_eager: bool = True    # any deployment with steps outside its CUDA graphs that cost time (else no eager term)
    eager_ramp_from: FloatArray | float = np.inf  # `mean_at`'s ramp: where it starts and how wide it is [sequences]
    eager_ramp_width: FloatArray | float = 1.0

    def take(self, index: ArrayLike, hw: Hardware | None = None) -> DecodeStep:
        """Rows `index` of a curve over many deployments (`hw`: those rows of its hardware, if already taken)."""
        return DecodeStep(
            hw=take_hardware(self.hw, index) if hw is None else hw,
            dense_weights_s=self.dense_weights_s[index],
            expert_weights_s=self.expert_weights_s[index],
            moe_floor_s=self.moe_floor_s[index],
            expert_s_per_sequence=self.expert_s_per_sequence[index],
            kv_s_per_sequence=self.kv_s_per_sequence[index],
            compute_s_per_sequence=self.compute_s_per_sequence[index],
            allreduce_s_per_token=self.allreduce_s_per_token[index],
            allreduce_latency_s=self.allreduce_latency_s[index],
            allreduce_knee_tokens=self.allreduce_knee_tokens[index],
            allreduce_knee_s_per_token=self.allreduce_knee_s_per_token[index],
            has_experts=self.has_experts,
            has_mtp=self.has_mtp,
            has_eager=self.has_eager,
            eager_ramp_from=np.asarray(self.eager_ramp_from)[index] if np.ndim(self.eager_ramp_from) else
            self.eager_ramp_from,
            eager_ramp_width=np.asarray(self.eager_ramp_width)[index] if np.ndim(self.eager_ramp_width) else
            self.eager_ramp_width,
        )

    def at(self, batch: ArrayLike) -> FloatArray:
        """Step time with `batch` running sequences [s]; with MTP drafting, the time per token each sequence emits
        (the step over `Hardware.tokens_per_step`)."""
        b = np.maximum(np.asarray(batch, dtype=float), 1.0)
        return self._at(b, np.where(b > self.hw.graph_max_batch, 1.0, 0.0) if self.has_eager else None)

    def mean_at(self, batch: ArrayLike) -> FloatArray:
        """The mean step over a running batch of `batch` sequences on average, as an open system's count varies
        (M/G/inf: Poisson about that mean, standard deviation sqrt(mean)): `at`, but with the eager time of a step
        above the largest CUDA graph weighted by the share of steps there, not switched on at the mean. The share,
        P(N > graph_max_batch), is taken as a ramp through one half at graph_max_batch + 0.5 with the normal
        approximation's slope there, 1.25 standard deviations either way: piecewise linear in the batch like the
        rest of the step, which the queueing model's Newton steps rely on (`serving._concurrency`)."""
        b = np.maximum(np.asarray(batch, dtype=float), 1.0)
        if not self.has_eager:
            return self._at(b, None)
        share = (b - self.eager_ramp_from) / self.eager_ramp_width
        if np.all(share <= 0.0):  # the usual case: every batch well within its graphs
            return self._at(b, None)
        return self._at(b, np.clip(share, 0.0, 1.0))

    def _at(self, b: FloatArray, eager_share: FloatArray | None) -> FloatArray:
        hw = self.hw
        cpu = hw.step_overhead_s + hw.sequence_overhead_s * b
        if eager_share is not None:
            cpu = cpu + eager_share * hw.eager_step_s
        if not self.has_mtp:
            return hw.pp * self._gpu_s(b, b) + cpu
        gpu = self._gpu_s(b, b * hw.verify_tokens) + hw.draft_passes * hw.draft_share * self._gpu_s(b, b)
        return (hw.pp * gpu + cpu) / hw.tokens_per_step

    def _gpu_s(self, b: FloatArray, tokens: FloatArray) -> FloatArray:
        """One stage's GPU time of a decode step over `b` sequences that pass `tokens` tokens through the GEMMs,
        all-reduces and MoE layers (b, or b x the verified tokens with MTP) [s]."""
        hw = self.hw
        memory_s = self.dense_weights_s + b * self.kv_s_per_sequence
        compute_s = tokens * self.compute_s_per_sequence
        per_stage = _roofline(memory_s, compute_s, hw.overlap_penalty)
        per_stage = per_stage + self.allreduce_latency_s + tokens * self.allreduce_s_per_token \
            + np.minimum(tokens, self.allreduce_knee_tokens) * self.allreduce_knee_s_per_token
        if self.has_experts:  # the fused MoE layers, after the roofline (`moe_step_s`)
            per_stage = per_stage + self.moe_floor_s + self.expert_weights_s * experts_touched_fraction(hw, tokens) \
                + tokens * self.expert_s_per_sequence
        return per_stage


def decode_step(hw: Hardware, context_tokens: ArrayLike) -> DecodeStep:
    """The decode-step curve of `hw` at mean context `context_tokens` (see `decode_step_s`)."""
    ring_bytes = _ring_share(hw) * hw.allreduce_bytes_per_token  # one token's share of each all-reduce
    middle = np.asarray(hw.graph_max_batch, dtype=float) + 0.5
    half_width = EAGER_RAMP_SIGMAS * np.sqrt(np.minimum(middle, 1e12))
    return DecodeStep(
        hw=hw,
        dense_weights_s=np.asarray(hw.decode_dense_bytes_per_gpu / hw.bandwidth_bytes_s, dtype=float),
        expert_weights_s=np.asarray(hw.expert_bytes_per_gpu / hw.expert_bandwidth_bytes_s, dtype=float),
        moe_floor_s=np.asarray(hw.moe_floor_s, dtype=float),
        expert_s_per_sequence=np.asarray(hw.expert_s_per_token, dtype=float),
        kv_s_per_sequence=_decode_attention_s(hw, context_tokens),
        # Decode attention is a read of the KV at its measured rate, or for MLA the larger of that and its absorbed
        # FLOPs (`decode_attention_s_per_token`); the GEMMs' tensor-core work is `compute_s_per_sequence`.
        compute_s_per_sequence=np.asarray(hw.decode_flops_per_token_per_gpu / hw.decode_flops_s, dtype=float),
        allreduce_s_per_token=np.asarray(hw.allreduces_per_step * ring_bytes / hw.link_bytes_s
                                         + hw.stage_send_s_per_token, dtype=float),
        allreduce_latency_s=np.asarray(hw.allreduces_per_step * hw.link_latency_s + hw.stage_send_latency_s,
                                       dtype=float),
        allreduce_knee_tokens=np.asarray(hw.link_knee_bytes / hw.allreduce_bytes_per_token, dtype=float),
        allreduce_knee_s_per_token=np.asarray(hw.allreduces_per_step * ring_bytes * hw.link_knee_s_per_byte,
                                              dtype=float),
        has_experts=bool(np.any(np.asarray(hw.num_experts) > 0)),
        has_mtp=bool(np.any(np.asarray(hw.draft_passes) > 0)),
        has_eager=bool(np.any(np.isfinite(hw.graph_max_batch) & (np.asarray(hw.eager_step_s) > 0))),
        eager_ramp_from=middle - half_width,
        eager_ramp_width=2.0 * half_width,
    )


def _decode_attention_s(hw: Hardware, context_tokens: ArrayLike) -> FloatArray:
    """One sequence's decode attention at `context_tokens` of context [s] (`decode_attention_s_per_token`)."""
    ctx, windowed = _windowed(hw, context_tokens)
    full, window = decode_attention_s_per_token(hw)
    return full * ctx + window * windowed


def decode_step_s(hw: Hardware, batch: ArrayLike, context_tokens: ArrayLike) -> FloatArray:
    """Time of one decode step with `batch` running sequences of mean context `context_tokens` [s]."""
    return decode_step(hw, context_tokens).at(batch)


def prefill_compute_s_per_token(hw: Hardware, prompt_tokens: ArrayLike) -> FloatArray:
    """Marginal compute time of one prompt token in a prompt of `prompt_tokens` (causal attention). With
    data-parallel attention its attention (projections and pairs) runs on its own rank alone (`dp_ranks` times its
    share spread over them): what one request's prefill takes, and what a step waits for while one rank prefills (the
    simulator's step takes its busiest rank's where several prefill at once)."""
    mean_context = np.asarray(prompt_tokens, dtype=float) / 2.0
    attention = attention_flops(hw, mean_context) / hw.attention_flops_s
    spread = hw.pp * (hw.prefill_flops_per_token_per_gpu / hw.prefill_flops_s + attention)
    dp = np.asarray(hw.dp_ranks, dtype=float)
    if not np.any(dp > 1.0):
        return spread
    rank = attention + np.asarray(hw.attention_projection_flops_per_token_per_gpu, dtype=float) / hw.prefill_flops_s
    return spread + hw.pp * (dp - 1.0) * rank


def prompt_token_s(hw: Hardware, prompt_tokens: ArrayLike) -> FloatArray:
    """What one prompt token of a prompt of `prompt_tokens` adds to the steps it rides in [s]: its compute in the
    dense GEMMs and attention (`prefill_compute_s_per_token`) and in the fused MoE layers (`moe_step_s`)."""
    return prefill_compute_s_per_token(hw, prompt_tokens) + hw.pp * np.asarray(hw.expert_s_per_token, dtype=float)


def prefill_s(
    hw: Hardware, prompt_tokens: ArrayLike, prompts: ArrayLike = 1.0, chunk_tokens: ArrayLike | None = None
) -> FloatArray:
    """Time to prefill `prompts` prompts of `prompt_tokens` tokens each [s].

    The tokens go through in steps of at most `chunk_tokens` (None: one step); each step reads the
    weights once and runs the prompt FLOPs, whose attention term grows with the prompt length squared.
    """
    p = np.maximum(np.asarray(prompt_tokens, dtype=float), 1.0)
    total = p * np.asarray(prompts, dtype=float)
    steps = np.ones_like(total)
    if chunk_tokens is not None:
        steps = np.maximum(np.ceil(total / np.asarray(chunk_tokens, dtype=float)), 1.0)
    tokens_per_step = total / steps
    compute_s = tokens_per_step * prefill_compute_s_per_token(hw, p) / hw.pp
    memory_s = hw.decode_dense_bytes_per_gpu / hw.bandwidth_bytes_s
    per_step = hw.pp * (_roofline(memory_s, compute_s, hw.overlap_penalty) + allreduce_s(hw, tokens_per_step)
                        + moe_step_s(hw, tokens_per_step))
    return steps * (per_step + hw.step_overhead_s) + hw.sequence_overhead_s * np.asarray(prompts, dtype=float)


# -- layouts of a replica (SGLang, TensorRT-LLM): data-parallel attention, expert parallelism -----------------

EP_DISPATCH_BYTES = 1.0  # DeepEP sends each token to its experts in FP8 (its default dispatch) ...
EP_COMBINE_BYTES = 2.0   # ... and gathers their outputs back in BF16


def with_expert_parallel(hw: Hardware, ep: NDArray[np.bool_], arch: ModelArchitecture,
                         per_node: NDArray[np.int_]) -> Hardware:
    """`hw` (one row per shape, data-parallel attention) with the MoE layers expert-parallel on the rows `ep`: each
    rank holds 1/tp of the experts whole and sends its own tokens (1/tp of the replica's) to the ranks of their
    `experts_per_token` experts and back (DeepEP's dispatch in FP8, combine in BF16), in place of the all-reduces
    of tensor-parallel MoE layers; two such all-to-alls per layer, each with the link's latency. The bytes that
    leave a GPU over its link: the share of destinations elsewhere, outside its NVLink domain (`per_node`: the
    node's GPUs, or `link_domain_gpus`) for a replica beyond it (whose link is then the NIC, `over_the_network`),
    else on the other GPUs of the domain. Expressed in the all-reduce terms of `performance.allreduce_s` (per
    token, per collective, before its ring factor)."""
    tp = np.asarray(hw.tp, dtype=float)
    remote = np.where(tp > per_node, (tp - per_node) / tp, (tp - 1.0) / np.maximum(tp, 1.0))
    per_token = arch.experts_per_token * arch.hidden_size * (EP_DISPATCH_BYTES + EP_COMBINE_BYTES) / 2.0
    sent = per_token * remote / np.maximum(tp, 1.0)  # per replica token, per collective, per GPU
    ring = 2.0 * (tp - 1.0) / np.maximum(tp, 1.0)
    return replace(hw, allreduce_bytes_per_token=np.where(ep, sent / np.maximum(ring, 1e-9),
                                                          hw.allreduce_bytes_per_token))


def with_mtp(hw: Hardware, arch: ModelArchitecture, draft_tokens: ArrayLike, tokens_per_step: ArrayLike) -> Hardware:
    """`hw` drafting `draft_tokens` tokens a step with the model's MTP modules (0: off) and emitting `tokens_per_step`
    tokens a sequence on average (`Hardware.verify_tokens`): each step verifies 1 + drafts tokens a sequence and runs
    one pass of a module per draft (vLLM, SGLang and TensorRT-LLM reuse DeepSeek-V3's one module for more drafts),
    whose GPU time is its share of the model's decode work by the parameters a token passes through (its layer, the
    projection and the LM head: 4.3% of DeepSeek-V3's)."""
    shape = np.shape(np.asarray(hw.bandwidth_bytes_s))  # one value per deployment, as every other field
    k = np.broadcast_to(np.asarray(draft_tokens, dtype=float), shape)
    share = arch.mtp_active_param_count() / max(arch.active_param_count(), 1)
    on = k > 0
    return replace(hw, verify_tokens=np.where(on, 1.0 + k, 1.0), draft_passes=np.where(on, k, 0.0),
                   draft_share=np.where(on, share, 0.0),
                   tokens_per_step=np.where(on, np.asarray(tokens_per_step, dtype=float), 1.0))


def with_dp_attention(hw: Hardware, dp: NDArray[np.bool_], attention_bytes: NDArray[np.float64],
                      mla_ratio: ArrayLike) -> Hardware:
    """`hw` (one row per shape) with data-parallel attention on the rows `dp`: a rank serves its own requests'
    attention, so a step reads 1/tp of the replica's KV per GPU (the latent no longer replicated on every rank),
    and every rank reads the whole attention's weights (`attention_bytes`, the model's, at its precision) instead
    of 1/tp of them. The MoE and dense MLP layers stay split over all ranks. An MLA model's measured decode
    attention takes `mla_ratio` of its tensor-parallel time per replica sequence (`mla_dp_ratio`, per row). Each
    rank captures CUDA graphs for its own batch: the replica runs eagerly above tp times a rank's largest. Each rank
    also schedules and prefills its own requests (SGLang's and TensorRT-LLM's attention-DP workers, vLLM's
    data-parallel engine cores): the per-sequence CPU time of a step is spent on every rank at once, over its 1/tp of
    the batch, and a prompt's attention runs on its rank alone (`dp_ranks`)."""
    tp = np.asarray(hw.tp, dtype=float)
    share = np.where(dp, 1.0 / tp, 1.0)
    mla = np.asarray(hw.mla_decode_s_per_pair_per_gpu, dtype=float)
    mla = np.where(dp, mla * np.asarray(mla_ratio, dtype=float), mla)
    extra = np.where(dp, np.asarray(attention_bytes, dtype=float) * (1.0 - 1.0 / tp), 0.0)
    # The added reads stream at the GPU's large-weight rate (`expert_bandwidth_bytes_s`), not at the layout's
    # batch-1 rate, which carries every kernel's floor.
    dense = np.asarray(hw.decode_dense_bytes_per_gpu, dtype=float)
    seconds = dense / hw.bandwidth_bytes_s + extra / hw.expert_bandwidth_bytes_s
    return replace(hw, mla_decode_s_per_pair_per_gpu=mla,
                   sequence_overhead_s=np.asarray(hw.sequence_overhead_s, dtype=float) * share,
                   dp_ranks=np.where(dp, tp, 1.0),
                   graph_max_batch=np.where(dp, np.asarray(hw.graph_max_batch, dtype=float) * tp, hw.graph_max_batch),
                   kv_full_bytes_per_token_per_gpu=hw.kv_full_bytes_per_token_per_gpu * share,
                   kv_window_bytes_per_token_per_gpu=hw.kv_window_bytes_per_token_per_gpu * share,
                   decode_dense_bytes_per_gpu=dense + extra, bandwidth_bytes_s=(dense + extra) / seconds)
