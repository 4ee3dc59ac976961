"""Step-level speed of one model instance: decode step time, prefill time, tensor-parallel cost.

Every function broadcasts over numpy arrays: a `Hardware` may hold one deployment (floats) or many
(arrays of one length), and batch sizes or token counts may be arrays too. Times are seconds.

The decode step reads the weights once plus every running sequence's KV (memory time) and runs
2 x active parameters x batch FLOPs (compute time); the step takes the larger of the two plus the
share of the smaller that does not overlap (`overlap_penalty`), plus the all-reduces of tensor
parallelism and the engine's per-step and per-sequence overheads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.architectures import ModelArchitecture
from inferplan.planner.engines import EngineProfile
from inferplan.planner.factors import EngineFactors, FamilyFactors
from inferplan.planner.gpus import GpuSpec
from inferplan.planner.memory import kv_bytes_per_token_per_gpu, weight_bytes, weight_split
from inferplan.planner.precisions import WeightPrecision

FloatArray = NDArray[np.float64]
Number = float | FloatArray

# All-reduce latency per call by interconnect [s]: NVLink/xGMI custom all-reduce kernels take a few
# microseconds for decode-sized messages; over PCIe the NCCL ring is several times slower.
ALLREDUCE_LATENCY_S = {"nvlink": 8e-6, "xgmi": 12e-6, "pcie": 30e-6}

# FP8 GEMMs reach a smaller share of their (doubled) peak than 16-bit ones: the median over large GEMMs
# (m, n, k >= 4096) in AIConfigurator's measured tables is 0.62 (H100) and 0.63 (H200) of the FP8 peak
# against 0.80 and 0.78 of the BF16 peak (`python bench/aic_tables.py`, docs/aic-tables.md). The engine's
# compute efficiency is fitted on 16-bit rows; FP8 compute is that times this ratio.
FP8_GEMM_RELATIVE_EFFICIENCY = 0.79


@dataclass(frozen=True)
class Hardware:
    """One model instance on its GPUs, reduced to the numbers the step model needs.

    Per-GPU quantities are per tensor-parallel rank; a pipeline stage runs after the previous one,
    so per-step times add up over the `pp` stages (llama.cpp's layer split behaves this way).
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
    bandwidth_bytes_s: Number                 # achieved on weight reads: peak x efficiency
    expert_bandwidth_bytes_s: Number          # ... on MoE expert reads (an expert-only format has its own kernels)
    kv_bandwidth_bytes_s: Number              # achieved on paged-attention KV reads
    decode_flops_s: Number
    prefill_flops_s: Number
    link_bytes_s: Number
    link_latency_s: Number
    overlap_penalty: Number
    step_overhead_s: Number
    sequence_overhead_s: Number
    request_overhead_s: Number               # online serving only: added to TTFT
    # Pipeline stages on separate nodes: each stage sends its activations to the next over the network, pp - 1
    # sends per pass, counted per stage (x (pp - 1) / pp) like the all-reduces (`search.over_the_pipeline`).
    stage_send_latency_s: Number = 0.0
    stage_send_s_per_token: Number = 0.0


def sm_stream_cap(gpu: GpuSpec, factors: EngineFactors) -> float:
    """The most an engine's kernels stream from memory on `gpu` [bytes/s]: its per-SM rate (`sm_stream_gb_s`)
    times the GPU's SMs; no cap where the catalog gives no SM count. Only engines with their own weight kernels
    (`EngineProfile.own_weight_kernels`) have a fitted rate; the others keep the prior, which caps nothing."""
    if not gpu.sm_count:
        return float("inf")
    return gpu.sm_count * factors.sm_stream_gb_s * 1e9


@dataclass(frozen=True)
class Dequantisation:
    """What dequantising weights on the fly leaves of the bandwidth on dense and on expert reads and of the tensor
    throughput (1.0: nothing lost)."""

    dense_bandwidth: float = 1.0
    expert_bandwidth: float = 1.0
    compute: float = 1.0


def dequantisation(precision: WeightPrecision, factors: EngineFactors) -> Dequantisation:
    """The dequantisation cost of `precision` with `factors`' kernels. Weight-only formats of the linear layers
    (GPTQ, AWQ) pay `quantized_bandwidth_scale` on every weight read and `quantized_compute_scale` on the tensor
    throughput (a large batch unpacks every weight tile before the 16-bit MMA); expert-only formats (MXFP4, read
    by MoE kernels of their own) pay `expert_quantized_bandwidth_scale` on the expert reads and nothing on the
    16-bit rest; 16-bit, 8-bit-compute and whole-model formats (GGUF, MLC: the engine's own kernels) pay nothing."""
    if precision.compute != "fp16" or precision.bits_per_param >= 16 or precision.quantizes == "all":
        return Dequantisation()
    if precision.quantizes == "experts":
        return Dequantisation(expert_bandwidth=factors.expert_quantized_bandwidth_scale)
    scale = factors.quantized_bandwidth_scale
    return Dequantisation(scale, scale, factors.quantized_compute_scale)


@lru_cache(maxsize=16384)
def build_hardware(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    precision: WeightPrecision,
    kv_bytes: float,
    engine: EngineProfile,
    factors: EngineFactors,
    family: FamilyFactors,
    tp: int = 1,
    pp: int = 1,
) -> Hardware:
    """Reduce (model, GPU, precision, engine, parallelism) to a `Hardware` of floats."""
    grid = hardware_grid(arch, [gpu], [precision], [[kv_bytes]], [factors], [family], [tp], pp)
    return Hardware(**{f.name: float(getattr(grid, f.name)[0, 0, 0, 0]) for f in fields(Hardware)})


def hardware_grid(
    arch: ModelArchitecture,
    gpus: Sequence[GpuSpec],
    precisions: Sequence[WeightPrecision],
    kv_bytes: ArrayLike,
    factors: Sequence[EngineFactors],
    families: Sequence[FamilyFactors],
    tps: Sequence[int],
    pp: int = 1,
) -> Hardware:
    """`build_hardware` for every (GPU, TP size, precision, KV dtype) at once.

    `factors` and `families` are per GPU (the engine's factors on that GPU, its family's), `kv_bytes` is
    (precision, KV dtype): bytes of one KV element. Every field comes back as an array of shape
    (len(gpus), len(tps), len(precisions), KV dtypes), so the search builds its hardware without a Python
    loop over shapes; `build_hardware` is the one-element case, so the two always agree.
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
    kv = np.asarray(kv_bytes, dtype=float)[None, None, :, :]
    per_layer_kv = kv_bytes_per_token_per_gpu(arch, kv, tp, pp) / max(arch.num_layers, 1)
    # One new token attending to one context token, per layer (QK^T and the weighted sum of V).
    attention_per_layer = arch.attention_flops_per_token(1.0) / arch.num_layers
    matmul_params = arch.active_param_count() - split.input_embedding - (
        0.0 if arch.tie_word_embeddings else split.lm_head
    )

    # Per (GPU, precision): achieved bandwidth on weight (and expert) reads and peak compute of the matmuls' dtype.
    bandwidth = np.empty((len(gpus), len(precisions)))
    expert_bandwidth = np.empty((len(gpus), len(precisions)))
    peak_flops = np.empty((len(gpus), len(precisions)))
    for i, (gpu, factor, family) in enumerate(zip(gpus, factors, families, strict=True)):
        for j, precision in enumerate(precisions):
            rated = gpu.memory_bandwidth_gb_s * 1e9 * factor.bandwidth_efficiency * family.bandwidth_scale
            cost = dequantisation(precision, factor)
            cap = sm_stream_cap(gpu, factor)
            bandwidth[i, j] = min(rated * cost.dense_bandwidth, cap)
            expert_bandwidth[i, j] = min(rated * cost.expert_bandwidth, cap)
            peak = gpu.fp16_tflops
            if precision.compute == "fp8" and gpu.fp8_tflops:
                peak = gpu.fp8_tflops * FP8_GEMM_RELATIVE_EFFICIENCY
            elif precision.compute == "int8" and gpu.int8_tops:
                peak = gpu.int8_tops
            peak_flops[i, j] = peak * 1e12 * family.compute_scale * cost.compute
    link_latency = np.array([[ALLREDUCE_LATENCY_S.get(gpu.interconnect if t > 1 else "nvlink", 30e-6) for t in tps]
                             for gpu in gpus])

    def per_gpu(values: Sequence[float]) -> FloatArray:
        return np.array(values, dtype=float)[:, None, None, None]

    def per_gpu_precision(values: FloatArray) -> FloatArray:
        return values[:, None, :, None]

    def per_precision(values: FloatArray) -> FloatArray:
        return values[None, None, :, None]

    peak = per_gpu_precision(peak_flops)
    kv_bandwidth = [min(gpu.memory_bandwidth_gb_s * 1e9 * f.bandwidth_efficiency * fam.bandwidth_scale
                        * fam.attention_scale, sm_stream_cap(gpu, f))
                    for gpu, f, fam in zip(gpus, factors, families, strict=True)]
    grid = Hardware(
        tp=tp.astype(float),
        pp=float(pp),
        decode_dense_bytes_per_gpu=per_precision(dense_read) / shards,
        expert_bytes_per_gpu=per_precision(expert_bytes) / shards,
        num_experts=float(arch.num_experts),
        experts_per_token=float(arch.experts_per_token),
        kv_full_bytes_per_token_per_gpu=per_layer_kv * full_layers,
        kv_window_bytes_per_token_per_gpu=per_layer_kv * len(windows),
        window_tokens=float(max(windows) if windows else 0),
        decode_flops_per_token_per_gpu=2.0 * (matmul_params + split.lm_head) / shards,
        prefill_flops_per_token_per_gpu=2.0 * matmul_params / shards,
        attention_full_flops_per_pair_per_gpu=attention_per_layer * full_layers / shards,
        attention_window_flops_per_pair_per_gpu=attention_per_layer * len(windows) / shards,
        allreduce_bytes_per_token=2.0 * arch.hidden_size,
        allreduces_per_step=np.where(tp > 1, 2 * arch.num_layers / pp, 0.0),
        bandwidth_bytes_s=per_gpu_precision(bandwidth),
        expert_bandwidth_bytes_s=per_gpu_precision(expert_bandwidth),
        kv_bandwidth_bytes_s=per_gpu(kv_bandwidth),
        decode_flops_s=peak * per_gpu([f.decode_compute_efficiency for f in factors]),
        prefill_flops_s=peak * per_gpu([f.prefill_compute_efficiency for f in factors]),
        link_bytes_s=per_gpu([gpu.interconnect_gb_s * 1e9 for gpu in gpus]),
        link_latency_s=link_latency[:, :, None, None],
        overlap_penalty=per_gpu([f.overlap_penalty for f in factors]),
        step_overhead_s=per_gpu([f.step_overhead_ms / 1e3 * fam.overhead_scale
                                 for f, fam in zip(factors, families, strict=True)]),
        sequence_overhead_s=per_gpu([f.sequence_overhead_ms / 1e3 * fam.overhead_scale
                                     for f, fam in zip(factors, families, strict=True)]),
        request_overhead_s=per_gpu([f.request_overhead_ms / 1e3 for f in factors]),
    )
    shape = (len(gpus), len(tps), len(precisions), kv.shape[-1])
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


def kv_read_bytes(hw: Hardware, context_tokens: ArrayLike) -> FloatArray:
    """KV bytes one sequence with `context_tokens` of context reads per step, per GPU."""
    ctx, windowed = _windowed(hw, context_tokens)
    return hw.kv_full_bytes_per_token_per_gpu * ctx + hw.kv_window_bytes_per_token_per_gpu * windowed


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


def _roofline(memory_s: FloatArray, compute_s: FloatArray, overlap_penalty: Number) -> FloatArray:
    return np.maximum(memory_s, compute_s) + overlap_penalty * np.minimum(memory_s, compute_s)


def allreduce_s(hw: Hardware, tokens: ArrayLike) -> FloatArray:
    """Communication of one pipeline stage in a step over `tokens` tokens: its tensor-parallel all-reduces (ring
    algorithm) and its share of the sends between stages."""
    t = np.asarray(tokens, dtype=float)
    tp = np.asarray(hw.tp, dtype=float)
    ring = 2.0 * (tp - 1.0) / np.maximum(tp, 1.0) * hw.allreduce_bytes_per_token * t / hw.link_bytes_s
    return hw.allreduces_per_step * (ring + hw.link_latency_s) + hw.stage_send_latency_s + t * hw.stage_send_s_per_token


@dataclass(frozen=True)
class DecodeStep:
    """A decode step's time as a function of the batch, for fixed deployments and context.

    Everything that does not depend on the batch is computed once, so evaluating many batch sizes (the
    queueing fixed point does) costs a handful of array operations each.
    """

    hw: Hardware
    dense_weights_s: FloatArray  # reading the non-expert weights
    expert_weights_s: FloatArray  # reading every expert (scaled by the share a batch routes to)
    kv_s_per_sequence: FloatArray
    compute_s_per_sequence: FloatArray
    allreduce_s_per_token: FloatArray
    allreduce_latency_s: FloatArray
    has_experts: bool = True  # any deployment a mixture of experts (else the expert term is skipped)

    def take(self, index: ArrayLike, hw: Hardware | None = None) -> DecodeStep:
        """Rows `index` of a curve over many deployments (`hw`: those rows of its hardware, if already taken)."""
        return DecodeStep(
            hw=take_hardware(self.hw, index) if hw is None else hw,
            dense_weights_s=self.dense_weights_s[index],
            expert_weights_s=self.expert_weights_s[index],
            kv_s_per_sequence=self.kv_s_per_sequence[index],
            compute_s_per_sequence=self.compute_s_per_sequence[index],
            allreduce_s_per_token=self.allreduce_s_per_token[index],
            allreduce_latency_s=self.allreduce_latency_s[index],
            has_experts=self.has_experts,
        )

    def at(self, batch: ArrayLike) -> FloatArray:
        """Step time with `batch` running sequences [s]."""
        hw = self.hw
        b = np.maximum(np.asarray(batch, dtype=float), 1.0)
        memory_s = self.dense_weights_s + b * self.kv_s_per_sequence
        if self.has_experts:
            memory_s = memory_s + self.expert_weights_s * experts_touched_fraction(hw, b)
        compute_s = b * self.compute_s_per_sequence
        per_stage = _roofline(memory_s, compute_s, hw.overlap_penalty)
        per_stage = per_stage + self.allreduce_latency_s + b * self.allreduce_s_per_token
        return hw.pp * per_stage + hw.step_overhead_s + hw.sequence_overhead_s * b


def decode_step(hw: Hardware, context_tokens: ArrayLike) -> DecodeStep:
    """The decode-step curve of `hw` at mean context `context_tokens` (see `decode_step_s`)."""
    tp = np.asarray(hw.tp, dtype=float)
    ring_per_token = 2.0 * (tp - 1.0) / np.maximum(tp, 1.0) * hw.allreduce_bytes_per_token / hw.link_bytes_s
    return DecodeStep(
        hw=hw,
        dense_weights_s=np.asarray(hw.decode_dense_bytes_per_gpu / hw.bandwidth_bytes_s, dtype=float),
        expert_weights_s=np.asarray(hw.expert_bytes_per_gpu / hw.expert_bandwidth_bytes_s, dtype=float),
        kv_s_per_sequence=kv_read_bytes(hw, context_tokens) / hw.kv_bandwidth_bytes_s,
        compute_s_per_sequence=(hw.decode_flops_per_token_per_gpu + attention_flops(hw, context_tokens))
        / hw.decode_flops_s,
        allreduce_s_per_token=np.asarray(hw.allreduces_per_step * ring_per_token + hw.stage_send_s_per_token,
                                         dtype=float),
        allreduce_latency_s=np.asarray(hw.allreduces_per_step * hw.link_latency_s + hw.stage_send_latency_s,
                                       dtype=float),
        has_experts=bool(np.any(np.asarray(hw.num_experts) > 0)),
    )


def decode_step_s(hw: Hardware, batch: ArrayLike, context_tokens: ArrayLike) -> FloatArray:
    """Time of one decode step with `batch` running sequences of mean context `context_tokens` [s]."""
    return decode_step(hw, context_tokens).at(batch)


def prefill_compute_s_per_token(hw: Hardware, prompt_tokens: ArrayLike) -> FloatArray:
    """Marginal compute time of one prompt token in a prompt of `prompt_tokens` (causal attention)."""
    mean_context = np.asarray(prompt_tokens, dtype=float) / 2.0
    flops = hw.prefill_flops_per_token_per_gpu + attention_flops(hw, mean_context)
    return hw.pp * flops / hw.prefill_flops_s


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
    memory_s = (hw.decode_dense_bytes_per_gpu / hw.bandwidth_bytes_s
                + hw.expert_bytes_per_gpu * experts_touched_fraction(hw, tokens_per_step) / hw.expert_bandwidth_bytes_s)
    per_step = hw.pp * (_roofline(memory_s, compute_s, hw.overlap_penalty) + allreduce_s(hw, tokens_per_step))
    return steps * (per_step + hw.step_overhead_s) + hw.sequence_overhead_s * np.asarray(prompts, dtype=float)
