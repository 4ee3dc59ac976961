"""The step model (inferplan/planner/performance.py): decode and prefill times and their invariants."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.planner.architectures import resolve_model
from inferplan.planner.engines import ENGINES
from inferplan.planner.factors import load_factors
from inferplan.planner.gpus import load_gpu_catalog, resolve_gpu
from inferplan.planner.memory import weight_bytes
from inferplan.planner.performance import (
    FP8_GEMM_RELATIVE_EFFICIENCY,
    allreduce_s,
    attention_flops,
    build_hardware,
    decode_step_s,
    hardware_grid,
    prefill_s,
    stack_hardware,
)
from inferplan.planner.precisions import weight_precision
from tests.support.hardware import FACTORS, hardware


def test_single_stream_decode_is_weights_over_bandwidth() -> None:
    hw = hardware()
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    read = weight_bytes(arch, weight_precision("bf16")) - 2.0 * arch.vocab_size * arch.hidden_size
    kv = arch.kv_bytes_per_token(2.0) * 100
    expected = (read + kv) / (3350e9 * 0.8)
    assert decode_step_s(hw, 1, 100) == pytest.approx(expected, rel=1e-6)


def test_a_per_sm_cap_binds_on_cards_with_many_gb_s_per_sm_only() -> None:
    """9 GB/s per SM: an A100 SXM (108 SMs, 2,039 GB/s) streams 972 GB/s, not 0.8 of its rating; an RTX 4090 (128
    SMs, 1,008 GB/s) keeps 0.8 of its rating, as the cap (1,152 GB/s) is above it. KV reads take the cap too."""
    capped = replace(FACTORS, sm_stream_gb_s=9.0)
    a100 = hardware(gpu="NVIDIA-A100-SXM4-80GB", factors=capped)
    assert a100.bandwidth_bytes_s == pytest.approx(108 * 9e9)
    assert a100.kv_bandwidth_bytes_s == pytest.approx(108 * 9e9)
    assert hardware(gpu="NVIDIA-GeForce-RTX-4090", factors=capped).bandwidth_bytes_s == pytest.approx(1008e9 * 0.8)


def test_the_prior_per_sm_rate_caps_no_gpu_in_the_catalog() -> None:
    for gpu in load_gpu_catalog():
        assert gpu.sm_count and gpu.sm_count * FACTORS.sm_stream_gb_s * 1e9 > gpu.memory_bandwidth_gb_s * 1e9, gpu.key


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


def test_an_expert_only_format_pays_its_dequantisation_on_the_experts_only() -> None:
    """gpt-oss in MXFP4: the 16-bit attention and embeddings are read at the full bandwidth, the experts at the
    expert format's scale; AWQ's scale is the other factor and covers every linear layer."""
    slow_experts = replace(FACTORS, expert_quantized_bandwidth_scale=0.5, quantized_bandwidth_scale=0.9)
    oss = hardware("openai/gpt-oss-20b", weights="mxfp4", factors=slow_experts)
    assert oss.bandwidth_bytes_s == pytest.approx(3350e9 * 0.8)
    assert oss.expert_bandwidth_bytes_s == pytest.approx(3350e9 * 0.8 * 0.5)
    awq = hardware("meta-llama/Meta-Llama-3-8B", weights="int4-awq", factors=slow_experts)
    assert awq.bandwidth_bytes_s == pytest.approx(3350e9 * 0.8 * 0.9)
    assert awq.expert_bandwidth_bytes_s == pytest.approx(3350e9 * 0.8 * 0.9)
    step = decode_step_s(oss, 64, 10)
    assert step > decode_step_s(hardware("openai/gpt-oss-20b", weights="mxfp4"), 64, 10)


def test_gptq_and_awq_pay_their_dequantisation_on_tensor_throughput_too() -> None:
    """A large AWQ batch is compute-bound: unpacking the weights costs MMA throughput (`quantized_compute_scale`),
    which MXFP4 experts and 16-bit weights do not pay."""
    slow = replace(FACTORS, quantized_compute_scale=0.6)
    awq = hardware(weights="int4-awq", factors=slow)
    assert awq.decode_flops_s == pytest.approx(989e12 * 0.5 * 0.6)
    assert awq.prefill_flops_s == pytest.approx(989e12 * 0.6 * 0.6)
    assert hardware(factors=slow).decode_flops_s == pytest.approx(989e12 * 0.5)
    assert hardware("openai/gpt-oss-20b", weights="mxfp4", factors=slow).decode_flops_s == pytest.approx(989e12 * 0.5)
    assert decode_step_s(awq, 2048, 10) > decode_step_s(hardware(weights="int4-awq"), 2048, 10) * 1.5


def test_stacked_hardware_evaluates_like_each_alone() -> None:
    items = [hardware(), hardware(gpu="NVIDIA-A100-SXM4-80GB"), hardware(tp=2)]
    stacked = stack_hardware(items)
    batch = np.array([1.0, 8.0, 32.0])
    together = decode_step_s(stacked, batch, 500.0)
    alone = [float(decode_step_s(h, b, 500.0)) for h, b in zip(items, batch, strict=True)]
    assert together == pytest.approx(alone)


# The search evaluates whole grids at once: each cell must be, to the bit, what the one deployment gives.


def test_hardware_grid_agrees_with_one_deployment() -> None:
    factors = load_factors()
    arch = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    gpus = [resolve_gpu(name) for name in ("NVIDIA-L4", "NVIDIA-H100-80GB-HBM3", "MI300X")]
    precisions = [weight_precision(name) for name in ("bf16", "fp8", "int4-awq")]
    kv = np.array([[2.0, 1.0]] * len(precisions))
    for engine in (ENGINES["vllm"], ENGINES["tgi"], ENGINES["llama.cpp"]):
        engine_factors = factors.engine(engine.name)
        grid = hardware_grid(arch, gpus, precisions, kv, [engine_factors] * len(gpus),
                             [factors.family(g.family) for g in gpus], [1, 4])
        for (g, gpu), (t, tp), (p, precision), (k, kv_bytes) in itertools.product(
                enumerate(gpus), enumerate([1, 4]), enumerate(precisions), enumerate([2.0, 1.0])):
            one = build_hardware(arch, gpu, precision, kv_bytes, engine, engine_factors, factors.family(gpu.family), tp)
            assert all(getattr(grid, f.name)[g, t, p, k] == getattr(one, f.name) for f in fields(one))


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
