"""The step model: memory accounting, decode and prefill times, and their invariants."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.planner.architectures import resolve_model
from inferplan.planner.engines import engine_profile
from inferplan.planner.factors import EngineFactors, FamilyFactors, load_factors
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.memory import (
    GIB,
    kv_bytes_per_token_per_gpu,
    kv_cache_tokens,
    kv_pool_bytes,
    max_concurrency,
    weight_bytes,
)
from inferplan.planner.performance import (
    FP8_GEMM_RELATIVE_EFFICIENCY,
    Hardware,
    allreduce_s,
    attention_flops,
    build_hardware,
    decode_step_s,
    prefill_s,
    stack_hardware,
)
from inferplan.planner.precisions import weight_precision

FACTORS = EngineFactors(
    bandwidth_efficiency=0.8, decode_compute_efficiency=0.5, prefill_compute_efficiency=0.6,
    overlap_penalty=0.0, step_overhead_ms=0.0, sequence_overhead_ms=0.0, request_overhead_ms=0.0,
    quantized_bandwidth_scale=1.0,
    non_torch_gib=0.3, activation_scale=1.0,
)


def hardware(model: str = "meta-llama/Meta-Llama-3-8B", gpu: str = "NVIDIA-H100-80GB-HBM3", weights: str = "bf16",
             tp: int = 1, factors: EngineFactors = FACTORS) -> Hardware:
    return build_hardware(resolve_model(model), resolve_gpu(gpu), weight_precision(weights), 2.0,
                          engine_profile("vllm"), factors, FamilyFactors(), tp)


def test_weights_of_qwen2_7b_match_vllm_startup_log() -> None:
    # vLLM 0.10.1.1 printed "Model loading took 14.2488 GiB" for Qwen2-7B-Instruct in bf16.
    gib = weight_bytes(resolve_model("Qwen/Qwen2-7B-Instruct"), weight_precision("bf16")) / GIB
    assert gib == pytest.approx(14.2488, rel=0.01)


def test_awq_keeps_embeddings_in_16_bits() -> None:
    arch = resolve_model("Qwen/Qwen2.5-7B-Instruct")
    embed = 2 * arch.vocab_size * arch.hidden_size  # untied: embedding and LM head
    quantized = (arch.param_count() - embed) * weight_precision("int4-awq").bytes_per_param
    assert weight_bytes(arch, weight_precision("int4-awq")) == pytest.approx(quantized + 2.0 * embed)


def test_kv_per_gpu_splits_heads_but_never_below_one_head() -> None:
    arch = resolve_model("meta-llama/Meta-Llama-3-70B")  # 8 KV heads
    whole = arch.kv_bytes_per_token(2.0)
    assert kv_bytes_per_token_per_gpu(arch, 2.0, tp=4) == pytest.approx(whole / 4)
    assert kv_bytes_per_token_per_gpu(arch, 2.0, tp=16) == pytest.approx(whole / 8)


def test_kv_cache_tokens_of_vllm_startup_row() -> None:
    # Qwen2-7B, A100 80GB, gpu_memory_utilization 0.25: vLLM reported 93872 tokens in 5.01 GiB.
    arch = resolve_model("Qwen/Qwen2-7B-Instruct")
    per_token = kv_bytes_per_token_per_gpu(arch, 2.0, tp=1)
    assert per_token == 57344
    assert kv_cache_tokens(5.01 * GIB, per_token, 16) == pytest.approx(93872, rel=0.002)


def test_kv_pool_modes() -> None:
    total = 80 * GIB
    assert kv_pool_bytes("total_fraction", total, 0.5, 14 * GIB, 1 * GIB, 0.5 * GIB) == pytest.approx(24.5 * GIB)
    assert kv_pool_bytes("free_fraction", total, 0.5, 14 * GIB, 1 * GIB, 1 * GIB) == pytest.approx(32 * GIB)
    assert kv_pool_bytes("total_fraction", total, 0.1, 14 * GIB, 1 * GIB, 0.5 * GIB) == 0.0


def test_max_concurrency_of_hybrid_sliding_window_model_matches_vllm() -> None:
    # gpt-oss-120b on 4 x A100 80GB, vLLM 0.10.1.1: 2640144 tokens, "Maximum concurrency ... 284.25x".
    arch = resolve_model("openai/gpt-oss-120b")
    assert max_concurrency(arch, 2640144, 16384, 2048, 16) == pytest.approx(284.25, rel=0.01)
    dense = resolve_model("meta-llama/Meta-Llama-3-8B")
    assert max_concurrency(dense, 163840, 8192, 2048, 16) == pytest.approx(20.0)


def test_single_stream_decode_is_weights_over_bandwidth() -> None:
    hw = hardware()
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    read = weight_bytes(arch, weight_precision("bf16")) - 2.0 * arch.vocab_size * arch.hidden_size
    kv = arch.kv_bytes_per_token(2.0) * 100
    expected = (read + kv) / (3350e9 * 0.8)
    assert decode_step_s(hw, 1, 100) == pytest.approx(expected, rel=1e-6)


def test_large_batch_decode_is_compute_bound() -> None:
    hw = hardware()
    step = decode_step_s(hw, 4096, 10)
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    attention = 2 * 2 * arch.num_layers * arch.num_attention_heads * arch.head_dim * 10  # QK^T and AV, 10 tokens
    flops = 4096 * (hw.decode_flops_per_token_per_gpu + attention)
    assert step == pytest.approx(flops / (989e12 * 0.5), rel=1e-6)


def test_fp8_uses_fp8_tensor_cores_where_the_gpu_has_them() -> None:
    h100 = hardware(weights="fp8")
    a100 = hardware(gpu="NVIDIA-A100-SXM4-80GB", weights="fp8")
    # FP8 GEMMs reach a smaller share of their peak than 16-bit ones (AIConfigurator's tables).
    assert h100.prefill_flops_s == pytest.approx(1979e12 * FP8_GEMM_RELATIVE_EFFICIENCY * 0.6)
    assert h100.prefill_flops_s > 1.5 * hardware().prefill_flops_s
    assert a100.prefill_flops_s == pytest.approx(312e12 * 0.6)


def test_sliding_window_layers_cap_attention_work() -> None:
    oss = hardware("openai/gpt-oss-20b")
    short, long = attention_flops(oss, 100.0), attention_flops(oss, 100_000.0)
    full, window = oss.attention_full_flops_per_pair_per_gpu, oss.attention_window_flops_per_pair_per_gpu
    # Full layers grow with the context; window layers only up to their 128-token window.
    assert long - short == pytest.approx(full * (100_000 - 100) + window * (128 - 100), rel=1e-9)


def test_prefill_has_a_quadratic_attention_term() -> None:
    hw = hardware()
    short, long = float(prefill_s(hw, 4096)), float(prefill_s(hw, 32768))
    assert long > 8 * short  # linear work alone would give exactly 8x


def test_tensor_parallel_halves_weight_time_and_adds_allreduce() -> None:
    one, two = hardware(tp=1), hardware(tp=2)
    assert float(allreduce_s(one, 8)) == 0.0
    assert float(allreduce_s(two, 8)) > 0.0
    assert decode_step_s(two, 1, 100) < decode_step_s(one, 1, 100)
    assert decode_step_s(two, 1, 100) > decode_step_s(one, 1, 100) / 2


def test_moe_decode_reads_only_routed_experts_at_batch_one() -> None:
    moe = hardware("mistralai/Mixtral-8x7B-v0.1")
    step1, step64 = float(decode_step_s(moe, 1, 10)), float(decode_step_s(moe, 64, 10))
    all_experts_s = moe.expert_bytes_per_gpu / moe.bandwidth_bytes_s
    assert step1 < 0.5 * (moe.decode_dense_bytes_per_gpu + moe.expert_bytes_per_gpu) / moe.bandwidth_bytes_s
    assert step64 > all_experts_s * 0.99


def test_stacked_hardware_evaluates_like_each_alone() -> None:
    items = [hardware(), hardware(gpu="NVIDIA-A100-SXM4-80GB"), hardware(tp=2)]
    stacked = stack_hardware(items)
    batch = np.array([1.0, 8.0, 32.0])
    together = decode_step_s(stacked, batch, 500.0)
    alone = [float(decode_step_s(h, b, 500.0)) for h, b in zip(items, batch, strict=True)]
    assert together == pytest.approx(alone)


@settings(max_examples=60, deadline=None)
@given(
    bandwidth=st.floats(100, 8000),
    extra=st.floats(1.0, 3.0),
    batch=st.integers(1, 512),
    context=st.integers(1, 32768),
)
def test_more_bandwidth_never_slows_decode(bandwidth: float, extra: float, batch: int, context: int) -> None:
    base = hardware(factors=replace(load_factors().engine("vllm")))
    slow = replace(base, bandwidth_bytes_s=bandwidth * 1e9, kv_bandwidth_bytes_s=bandwidth * 1e9)
    fast = replace(base, bandwidth_bytes_s=bandwidth * extra * 1e9, kv_bandwidth_bytes_s=bandwidth * extra * 1e9)
    assert decode_step_s(fast, batch, context) <= decode_step_s(slow, batch, context) + 1e-12


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 1024), context=st.integers(1, 65536))
def test_bigger_batch_never_shortens_a_step(batch: int, context: int) -> None:
    hw = hardware(factors=load_factors().engine("vllm"))
    assert decode_step_s(hw, batch + 1, context) >= decode_step_s(hw, batch, context)


@settings(max_examples=60, deadline=None)
@given(memory=st.floats(8, 200), more=st.floats(0, 100), fraction=st.floats(0.3, 0.95))
def test_more_memory_never_lowers_kv_capacity(memory: float, more: float, fraction: float) -> None:
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    per_token = kv_bytes_per_token_per_gpu(arch, 2.0, 1)
    weights = weight_bytes(arch, weight_precision("bf16"))

    def tokens(gib: float) -> int:
        return kv_cache_tokens(kv_pool_bytes("total_fraction", gib * GIB, fraction, weights, GIB, 0.3 * GIB),
                               per_token, 16)

    assert tokens(memory + more) >= tokens(memory)


def test_memory_plan_leaves_headroom_for_cuda_graphs_only_below_full_utilisation() -> None:
    from inferplan.planner.engines import EngineSettings
    from inferplan.planner.memory import plan_memory

    arch, gpu = resolve_model("meta-llama/Meta-Llama-3-8B"), resolve_gpu("NVIDIA-H100-80GB-HBM3")
    factors = load_factors().engine("vllm")

    def plan(fraction: float):
        settings = EngineSettings(fraction, 8192, 256, 2048.0, 2048)
        return plan_memory(arch, gpu, weight_precision("bf16"), 2.0, engine_profile("vllm"), settings, factors)

    usual, greedy = plan(0.9), plan(0.999)
    assert usual.fits and usual.kv_cache_tokens > 0
    assert usual.headroom_per_gpu == pytest.approx(0.1 * gpu.usable_memory_bytes - usual.cuda_graph_per_gpu)
    assert not greedy.fits  # 0.1% headroom cannot hold 0.5 GiB of CUDA graphs
    assert plan(0.05).kv_cache_tokens == 0 and not plan(0.05).fits  # weights alone exceed 5% of 80 GB
