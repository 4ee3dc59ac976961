"""GPU memory of one model instance: weights, activation peak, the engine's KV pool, KV capacity.

Bytes throughout (GiB = 2**30 bytes only at the edges). All functions are per GPU unless their name
says otherwise; a model instance spans `tp x pp` GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.engines import EngineProfile, EngineSettings, expert_tiles
from inferplan.planner.catalog.gpus import GpuSpec
from inferplan.planner.catalog.precisions import WeightPrecision
from inferplan.planner.model.factors import EngineFactors

GIB = float(2**30)
Number = float | NDArray[np.float64]


@dataclass(frozen=True)
class WeightSplit:
    """Parameter counts by how a precision treats them and how a decode step reads them."""

    total: float
    input_embedding: float  # vocab x hidden, read only for the B looked-up rows
    lm_head: float          # vocab x hidden matmul (the tied embedding where tied)
    experts: float          # all routed-expert parameters (0 for dense models)


@lru_cache(maxsize=512)
def weight_split(arch: ModelArchitecture) -> WeightSplit:
    embed = float(arch.vocab_size * arch.hidden_size)
    moe_layers = arch.num_layers - arch.first_dense_layers if arch.is_moe else 0
    experts = float(moe_layers * arch.num_experts * 3 * arch.hidden_size * arch.expert_intermediate_size)
    return WeightSplit(total=float(arch.param_count()), input_embedding=embed, lm_head=embed, experts=experts)


@lru_cache(maxsize=2048)
def weight_bytes(arch: ModelArchitecture, precision: WeightPrecision) -> float:
    """Bytes of all weights of the model at `precision` (whole model, all GPUs)."""
    split = weight_split(arch)
    unembedded = split.total - split.input_embedding - (0.0 if arch.tie_word_embeddings else split.lm_head)
    if precision.quantizes == "all":
        quantized = split.total
    elif precision.quantizes == "linear":
        quantized = unembedded
    elif precision.quantizes == "experts":
        quantized = split.experts
    elif precision.quantizes == "inner-ffn":
        quantized = inner_ffn_params(arch)
    else:  # pragma: no cover - guarded by the precision table
        raise ValueError(f"unknown quantisation scope {precision.quantizes!r}")
    return quantized * precision.bytes_per_param + (split.total - quantized) * 2.0


def inner_ffn_params(arch: ModelArchitecture) -> float:
    """Parameters of the feed-forward layers of every transformer layer but the first and the last: what Meta's
    FP8 recipe quantises ("we quantize most parameters and activations in the feedforward network layers ... we do
    not quantize parameters in the self-attention layers ... nor in the first and last Transformer layers", The
    Llama 3 Herd of Models, arXiv:2407.21783, section 6.2). A dense model's scope only."""
    if arch.is_moe:
        raise ValueError(f"{arch.repo_id}: the inner-ffn quantisation scope is defined for dense models only")
    return float(max(arch.num_layers - 2, 0) * arch._mlp_params(arch.intermediate_size))


def mtp_weight_bytes(arch: ModelArchitecture, precision: WeightPrecision) -> float:
    """Bytes of the multi-token-prediction modules an engine loads to draft with them (whole model, all GPUs): their
    layers at `precision` as the model's, their own embedding and LM head at 16 bits (`mtp_param_count`)."""
    if not arch.mtp_layers:
        return 0.0
    tables = 2.0 * arch.vocab_size * arch.hidden_size
    return (arch.mtp_param_count() - tables) * precision.bytes_per_param + tables * 2.0


def expert_padding_bytes(arch: ModelArchitecture, precision: WeightPrecision, engine: str, gpu: GpuSpec,
                         tp: ArrayLike) -> Number:
    """Bytes the engine adds to the whole model's weights by padding its MoE experts to its kernels' tiles at
    tensor-parallel size `tp` (`engines.expert_tiles`: vLLM with gpt-oss's MXFP4 experts); 0 where it pads
    nothing."""
    tiles = expert_tiles(engine, precision.name, gpu.vendor, gpu.family) if arch.is_moe else None
    if tiles is None:
        return 0.0
    width_tile, hidden_tile = tiles
    ranks = np.asarray(tp, dtype=float)
    width = np.ceil(np.ceil(arch.expert_intermediate_size / ranks) / width_tile) * width_tile * ranks
    hidden = math.ceil(arch.hidden_size / hidden_tile) * hidden_tile
    extra = width * hidden - float(arch.expert_intermediate_size * arch.hidden_size)
    return arch.moe_layer_count * arch.num_experts * 3.0 * extra * precision.bytes_per_param


def kv_bytes_per_token_per_gpu(arch: ModelArchitecture, kv_bytes: Number, tp: Number, pp: Number = 1) -> Number:
    """KV bytes one token takes on one GPU of the instance, every layer keeping it (`kv_bytes` and `tp` may
    be arrays).

    Tensor parallelism splits KV heads across GPUs; with fewer KV heads than GPUs each GPU keeps a
    replica of one head (vLLM), so the per-GPU share never drops below one head. MLA's latent is
    replicated on every TP rank.
    """
    full = arch.kv_bytes_per_token(kv_bytes)
    if arch.is_mla:
        return full / pp
    heads_per_gpu = np.maximum(1.0, arch.num_kv_heads / np.asarray(tp))
    return full * heads_per_gpu / arch.num_kv_heads / pp


def activation_peak_bytes(
    arch: ModelArchitecture, profile_tokens: Number, max_num_seqs: Number, tp: Number, scale: float = 1.0,
    sampler_bytes: float | None = None,
) -> Number:
    """Peak activation memory of the engine's profiling forward pass, per GPU (arrays broadcast).

    One forward pass of `profile_tokens` tokens keeps the MLP's gate/up output and its activation
    (3 x intermediate / tp per token) and a few hidden-size buffers (4 x hidden) in 16 bits; the
    sampler then holds fp32 logits and probabilities for `max_num_seqs` dummy sequences
    (2 x 4 bytes x vocab / tp). An engine that profiles its sampler apart (`sampler_bytes`, vLLM V1:
    `engines.sampler_profile_bytes`) peaks at the larger of the forward pass and `sampler_bytes` x
    sequences x the whole vocabulary. `scale` is the fitted correction of the engine.
    """
    width = arch.intermediate_size
    if arch.is_moe:
        width = max(width if arch.first_dense_layers else 0, arch.experts_per_token * arch.expert_intermediate_size)
    forward = profile_tokens * (3.0 * width / tp + 4.0 * arch.hidden_size) * 2.0
    # A step samples one token per sequence in it, and holds no more sequences than tokens.
    sequences = np.minimum(max_num_seqs, profile_tokens)
    if sampler_bytes is not None:
        return scale * np.maximum(forward, sequences * arch.vocab_size * sampler_bytes)
    sampler = sequences * arch.vocab_size / tp * 8.0
    return scale * (forward + sampler)


def kv_pool_bytes(
    memory_mode: str,
    gpu_memory_bytes: Number,
    memory_fraction: Number,
    weights_per_gpu: Number,
    activation_per_gpu: Number,
    non_torch_bytes: Number,
) -> Number:
    """Bytes per GPU the engine gives its KV cache (never negative; arrays broadcast).

    total_fraction: fraction x total - weights - activation peak - non-torch (vLLM, MLC-LLM).
    static_fraction: fraction x total - weights - non-torch; activations live in the rest (SGLang's
      `mem_fraction_static` covers the weights and the KV pool only).
    free_fraction: fraction x (total - weights - activation - non-torch) (TensorRT-LLM, LMDeploy, TGI).
    """
    if memory_mode == "total_fraction":
        pool = memory_fraction * gpu_memory_bytes - weights_per_gpu - activation_per_gpu - non_torch_bytes
    elif memory_mode == "static_fraction":
        pool = memory_fraction * gpu_memory_bytes - weights_per_gpu - non_torch_bytes
    elif memory_mode == "free_fraction":
        pool = memory_fraction * (gpu_memory_bytes - weights_per_gpu - activation_per_gpu - non_torch_bytes)
    else:
        raise ValueError(f"memory mode {memory_mode!r} has no KV pool")
    return np.maximum(0.0, pool)


def kv_cache_tokens(pool_bytes_per_gpu: float, kv_bytes_per_token_gpu: float, block_tokens: int) -> int:
    """Tokens the KV pool holds, whole blocks only (as the engine reports at start-up)."""
    if kv_bytes_per_token_gpu <= 0:
        return 0
    blocks = np.floor(pool_bytes_per_gpu / (kv_bytes_per_token_gpu * block_tokens))
    return int(blocks) * block_tokens


@dataclass(frozen=True)
class MemoryPlan:
    """Memory of one model instance at start-up, per GPU [bytes], and the KV capacity it leaves."""

    weights_per_gpu: float
    activation_per_gpu: float
    non_torch_per_gpu: float
    kv_pool_per_gpu: float          # 0 for engines that size KV by context (no pool)
    kv_bytes_per_token_gpu: float
    kv_cache_tokens: int            # whole blocks, the whole instance (all TP ranks hold the same tokens)
    cuda_graph_per_gpu: float = 0.0
    headroom_per_gpu: float = 0.0   # memory left after everything above; negative: fails at start-up

    @property
    def fits(self) -> bool:
        """Weights, activations and graphs fit, and the KV pool holds at least one block."""
        return self.headroom_per_gpu >= 0 and self.kv_cache_tokens > 0

    def slots(self, max_num_seqs: int, tokens_per_sequence: float) -> float:
        """Sequences of `tokens_per_sequence` tokens the pool holds, capped by max_num_seqs (at least 1)."""
        return max(1.0, min(float(max_num_seqs), self.kv_cache_tokens / max(tokens_per_sequence, 1.0)))


def plan_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    precision: WeightPrecision,
    kv_bytes: float,
    engine: EngineProfile,
    settings: EngineSettings,
    factors: EngineFactors,
    tp: int = 1,
    pp: int = 1,
) -> MemoryPlan:
    """Weights, activation peak, KV pool and KV capacity of one instance as the engine sizes them at start."""
    return plan_memory_for_settings(arch, gpu, precision, kv_bytes, engine, (settings,), factors, tp, pp)[0]


def plan_memory_for_settings(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    precision: WeightPrecision,
    kv_bytes: float,
    engine: EngineProfile,
    settings: Sequence[EngineSettings],
    factors: EngineFactors,
    tp: int = 1,
    pp: int = 1,
    dp_attention: bool = False,
    mtp: bool = False,
) -> list[MemoryPlan]:
    """`plan_memory` for several engine settings of one deployment (the search varies max_num_seqs), with
    what does not depend on the settings computed once. `dp_attention`: data-parallel attention
    (`dp_attention_weights`); each rank's KV pool holds its own sequences, so the instance holds `tp` times
    one rank's tokens."""
    weights = weight_bytes(arch, precision) + float(expert_padding_bytes(arch, precision, engine.name, gpu, tp)) + (
        dp_attention_weights(arch, precision, tp) if dp_attention else 0.0) + (
        mtp_weight_bytes(arch, precision) if mtp else 0.0)
    grid = memory_grid(
        arch, float(gpu.usable_memory_bytes), weights, kv_bytes, engine, factors, tp,
        profile_tokens=np.array([s.profile_tokens for s in settings], dtype=float),
        max_num_seqs=np.array([s.max_num_seqs for s in settings], dtype=float),
        memory_fraction=np.array([s.memory_fraction for s in settings], dtype=float),
        max_model_len=np.array([s.max_model_len for s in settings], dtype=float),
        pp=pp,
        sampler_bytes=settings[0].sampler_bytes,
        mtp_layers=arch.mtp_layers if mtp else 0,
    )
    plans = [grid.plan(k) for k in range(len(settings))]
    return [replace(p, kv_cache_tokens=p.kv_cache_tokens * tp) for p in plans] if dp_attention else plans


def attention_weight_bytes(arch: ModelArchitecture, precision: WeightPrecision) -> float:
    """Bytes of the model's attention weights (every layer) at `precision`: quantised with the linear layers."""
    per_param = precision.bytes_per_param if precision.quantizes in ("linear", "all") else 2.0
    return arch.attention_param_count() * per_param


def dp_attention_weights(arch: ModelArchitecture, precision: WeightPrecision, tp: ArrayLike) -> NDArray[np.float64]:
    """Bytes that data-parallel attention adds to a tensor-parallel instance's weights, all GPUs together:
    every rank holds the whole attention (not 1/tp of it), so (tp - 1) more copies of it [bytes]. SGLang's
    `--enable-dp-attention` for MLA models: the attention and its KV run per request on one rank, the MoE
    layers across all of them."""
    return attention_weight_bytes(arch, precision) * (np.asarray(tp, dtype=float) - 1.0)


@dataclass(frozen=True)
class MemoryGrid:
    """The fields of `MemoryPlan` for many deployments and settings at once, as arrays of one shape."""

    weights_per_gpu: NDArray[np.float64]
    activation_per_gpu: NDArray[np.float64]
    non_torch_per_gpu: NDArray[np.float64]
    kv_pool_per_gpu: NDArray[np.float64]
    kv_bytes_per_token_gpu: NDArray[np.float64]
    kv_cache_tokens: NDArray[np.float64]     # whole numbers
    cuda_graph_per_gpu: NDArray[np.float64]
    headroom_per_gpu: NDArray[np.float64]

    def plan(self, index: int | tuple[int, ...]) -> MemoryPlan:
        """The `MemoryPlan` at one position of the grid."""
        return MemoryPlan(
            weights_per_gpu=float(self.weights_per_gpu[index]),
            activation_per_gpu=float(self.activation_per_gpu[index]),
            non_torch_per_gpu=float(self.non_torch_per_gpu[index]),
            kv_pool_per_gpu=float(self.kv_pool_per_gpu[index]),
            kv_bytes_per_token_gpu=float(self.kv_bytes_per_token_gpu[index]),
            kv_cache_tokens=int(self.kv_cache_tokens[index]),
            cuda_graph_per_gpu=float(self.cuda_graph_per_gpu[index]),
            headroom_per_gpu=float(self.headroom_per_gpu[index]),
        )


def memory_grid(
    arch: ModelArchitecture,
    gpu_bytes: ArrayLike,
    weights_bytes: ArrayLike,
    kv_bytes: ArrayLike,
    engine: EngineProfile,
    factors: EngineFactors,
    tp: ArrayLike,
    *,
    profile_tokens: ArrayLike,
    max_num_seqs: ArrayLike,
    memory_fraction: ArrayLike,
    max_model_len: ArrayLike,
    pp: ArrayLike = 1,
    sampler_bytes: float | None = None,
    mtp_layers: int = 0,
) -> MemoryGrid:
    """What `plan_memory` computes, for arrays that broadcast together: the usable memory of the GPU
    (`gpu_bytes`), the whole model's weights (`weight_bytes` of its precision), the KV element size, the TP
    size and the engine settings. The search plans every (GPU, TP, precision, KV dtype, max_num_seqs) in one
    call; `plan_memory` is the one-element case, so the two always agree. `mtp_layers`: the MTP modules a drafting
    engine loads, whose layers keep a KV cache of their own (their weights are in `weights_bytes`)."""
    tp_ = np.asarray(tp, dtype=float)
    total = np.asarray(gpu_bytes, dtype=float)
    fraction = np.asarray(memory_fraction, dtype=float)
    pp_ = np.asarray(pp, dtype=float)
    weights = np.asarray(weights_bytes, dtype=float) / (tp_ * pp_)
    non_torch = factors.non_torch_gib * GIB
    per_token = np.asarray(kv_bytes_per_token_per_gpu(arch, np.asarray(kv_bytes, dtype=float), tp_, pp_))
    if mtp_layers:  # each module's layer caches like one of the model's
        per_token = per_token * (arch.num_layers + mtp_layers) / arch.num_layers
    graphs = engine.cuda_graph_gib * GIB
    activation = activation_peak_bytes(arch, profile_tokens, max_num_seqs, tp_, factors.activation_scale,
                                       sampler_bytes)
    if engine.memory_mode == "context":
        context = np.asarray(max_model_len, dtype=float)
        kv = per_token * context
        headroom = total - weights - activation - non_torch - graphs - kv
        pool, tokens = np.zeros_like(headroom), context
    else:
        pool = kv_pool_bytes(engine.memory_mode, total, fraction, weights, activation, non_torch)
        used = weights + activation + non_torch + pool
        if engine.memory_mode == "total_fraction":
            used = np.maximum(used, fraction * total)  # the pool is what is left of the fraction
        elif engine.memory_mode == "static_fraction":
            used = np.maximum(weights + non_torch + pool, fraction * total) + activation
        # kv_cache_tokens over arrays: whole blocks, none where a token takes no KV bytes
        block = engine.kv_block_tokens
        safe = np.where(per_token > 0, per_token, 1.0)
        tokens = np.where(per_token > 0, np.floor(pool / (safe * block)), 0.0) * block
        headroom = total - used - graphs
    arrays = np.broadcast_arrays(weights, activation, non_torch, pool, per_token, tokens, graphs, headroom)
    return MemoryGrid(*arrays)


def max_concurrency(
    arch: ModelArchitecture, kv_tokens: int, max_model_len: int, batched_tokens: int, block_tokens: int
) -> float:
    """How many requests of `max_model_len` tokens fit in the KV pool, as vLLM reports it at start-up.

    A full-attention layer needs the whole length; a sliding-window layer at most the window plus one
    step's prefill budget (vLLM's sliding-window spec: ceil(min(window - 1 + budget, len) / block) + 1
    blocks). `kv_tokens` counts tokens as if every layer kept them, so the pool holds
    kv_tokens x layers layer-tokens.
    """
    def blocks(tokens: float) -> float:
        return np.ceil(tokens / block_tokens) * block_tokens

    windows = arch.layer_windows or (None,) * arch.num_layers
    needed = sum(
        blocks(max_model_len) if w is None else blocks(min(w - 1 + batched_tokens, max_model_len)) + block_tokens
        for w in windows
    )
    if all(w is None for w in windows):
        return kv_tokens / max_model_len
    return kv_tokens * len(windows) / needed
