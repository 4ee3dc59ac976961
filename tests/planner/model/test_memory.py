"""Memory accounting (inferplan/planner/model/memory.py): weights, the KV cache per GPU and its pool, concurrency,
and the memory plan of one deployment."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.planner.catalog.engines import (
    ENGINES,
    VLLM_V1_SAMPLER_BYTES,
    EngineSettings,
    engine_profile,
    line_profiles_sampler,
    sampler_profile_bytes,
)
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.memory import (
    GIB,
    activation_peak_bytes,
    expert_padding_bytes,
    kv_bytes_per_token_per_gpu,
    kv_cache_tokens,
    kv_pool_bytes,
    max_concurrency,
    memory_grid,
    mtp_weight_bytes,
    plan_memory,
    plan_memory_for_settings,
    weight_bytes,
)


def test_weights_of_qwen2_7b_match_vllm_startup_log() -> None:
    # vLLM 0.10.1.1 printed "Model loading took 14.2488 GiB" for Qwen2-7B-Instruct in bf16.
    gib = weight_bytes(resolve_model("Qwen/Qwen2-7B-Instruct"), weight_precision("bf16")) / GIB
    assert gib == pytest.approx(14.2488, rel=0.01)


def test_vllm_pads_gpt_oss_mxfp4_experts_to_its_kernels_tiles() -> None:
    """vLLM 0.10.1.1 printed 17.22 GiB of weights a GPU for gpt-oss-120b at TP 4 on A100s (dennislee22's startup
    log): Marlin rounds a rank's expert width (720) up to 768 and the hidden size (2880) to 3072, 1.14x the experts'
    MXFP4 bytes. Blackwell and ROCm pad both to 256; Hopper's Triton kernels, other engines and other formats pad
    nothing."""
    arch, mxfp4 = resolve_model("openai/gpt-oss-120b"), weight_precision("mxfp4")
    a100 = resolve_gpu("A100-SXM4-80GB")
    plan = plan_memory(arch, a100, mxfp4, 2.0, engine_profile("vllm"), EngineSettings(
        max_num_seqs=256, memory_fraction=0.8, max_model_len=16384, chunk_tokens=2048, profile_tokens=2048),
        load_factors().engine("vllm"), tp=4)
    assert plan.weights_per_gpu / GIB == pytest.approx(17.22, rel=0.01)
    experts = arch.moe_layer_count * arch.num_experts * 3 * arch.hidden_size * arch.expert_intermediate_size
    unpadded = experts * mxfp4.bytes_per_param
    for gpu, tp, factor in (("A100-SXM4-80GB", 4, 768 * 4 * 3072 / 2880**2), ("B200", 1, 3072**2 / 2880**2),
                            ("MI300X", 2, 1536 * 2 * 3072 / 2880**2), ("H100-SXM5-80GB", 1, 1.0)):
        assert expert_padding_bytes(arch, mxfp4, "vllm", resolve_gpu(gpu), tp) == pytest.approx(
            unpadded * (factor - 1.0))
    assert expert_padding_bytes(arch, mxfp4, "sglang", a100, 4) == 0.0
    assert expert_padding_bytes(arch, weight_precision("bf16"), "vllm", a100, 4) == 0.0


def test_a_drafting_engine_holds_the_mtp_module_and_its_layers_kv() -> None:
    """DeepSeek-V3's MTP module is 13.5B parameters (its repository's 684.5B less the model's 671B): its layer at the
    plan's precision, its own embedding and LM head at 16 bits; its layer caches KV like one of the model's 61, so
    a drafting deployment holds those weights more and 61/62 of the tokens in the same pool."""
    arch, fp8 = resolve_model("deepseek-ai/DeepSeek-V3"), weight_precision("fp8")
    assert arch.mtp_layers == 1
    assert arch.mtp_param_count() / 1e9 == pytest.approx(684.5 - 671.0, abs=0.1)
    tables = 2 * arch.vocab_size * arch.hidden_size
    assert mtp_weight_bytes(arch, fp8) == pytest.approx(arch.mtp_param_count() - tables + 2.0 * tables)
    assert mtp_weight_bytes(resolve_model("meta-llama/Llama-3.1-8B"), fp8) == 0.0
    h200 = resolve_gpu("NVIDIA-H200")
    settings = EngineSettings(max_num_seqs=256, memory_fraction=0.9, max_model_len=16384, chunk_tokens=8192,
                              profile_tokens=8192)
    plain, drafting = (plan_memory_for_settings(arch, h200, fp8, 2.0, engine_profile("sglang"), [settings],
                                                load_factors().engine("sglang"), tp=8, mtp=mtp)[0]
                       for mtp in (False, True))
    assert (drafting.weights_per_gpu - plain.weights_per_gpu) * 8 == pytest.approx(mtp_weight_bytes(arch, fp8))
    assert drafting.kv_bytes_per_token_gpu == pytest.approx(plain.kv_bytes_per_token_gpu * 62 / 61)
    assert drafting.kv_pool_per_gpu == pytest.approx(plain.kv_pool_per_gpu - mtp_weight_bytes(arch, fp8) / 8)
    assert drafting.kv_cache_tokens == pytest.approx(
        plain.kv_cache_tokens * drafting.kv_pool_per_gpu / plain.kv_pool_per_gpu * 61 / 62, rel=0.01)


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


def test_memory_grid_agrees_with_one_deployment() -> None:
    """The search sizes memory for a grid of deployments at once: each must be, to the bit, the one plan_memory
    gives for that deployment alone."""
    factors = load_factors()
    arch = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    gpus = [resolve_gpu(name) for name in ("NVIDIA-L4", "NVIDIA-H100-80GB-HBM3", "MI300X")]
    precisions = [weight_precision(name) for name in ("bf16", "fp8", "int4-awq")]
    for engine in (ENGINES["vllm"], ENGINES["tgi"], ENGINES["llama.cpp"]):
        engine_factors = factors.engine(engine.name)
        engine_settings = EngineSettings(memory_fraction=0.9, max_model_len=8192, max_num_seqs=64,
                                         chunk_tokens=2048.0, profile_tokens=8192)
        for gpu, tp, precision, kv_bytes in itertools.product(gpus, [1, 4], precisions, [2.0, 1.0]):
            memory = memory_grid(arch, float(gpu.usable_memory_bytes), weight_bytes(arch, precision), kv_bytes,
                                 engine, engine_factors, tp, profile_tokens=8192, max_num_seqs=np.array([64.0]),
                                 memory_fraction=0.9, max_model_len=8192)
            assert memory.plan(0) == plan_memory(arch, gpu, precision, kv_bytes, engine, engine_settings,
                                                 engine_factors, tp)


def test_vllm_v1_profiles_its_sampler_over_the_whole_vocabulary_on_every_rank() -> None:
    # vLLM V1 samples max_num_seqs dummy requests after the forward pass, with the whole vocabulary's logits on
    # every TP rank: the peak is the sampler's, the same at TP 1 and 2, for a small model at 1024 sequences.
    assert sampler_profile_bytes("vllm", "0.11.0") == sampler_profile_bytes("vllm", None) == VLLM_V1_SAMPLER_BYTES
    assert sampler_profile_bytes("vllm", "0.6.3") is None and sampler_profile_bytes("sglang", None) is None
    # Judged per factor line at the line's first release: V1 from 0.8.0 on (on AMD GPUs too), V0 before it.
    assert sampler_profile_bytes("vllm", "0.8.0") is not None and sampler_profile_bytes("vllm", "0.7.3") is None
    assert [line_profiles_sampler(k) for k in ("vllm", "vllm-rocm", "vllm-v0", "vllm-v0-rocm", "sglang")] == [
        True, True, False, False, False]
    small = resolve_model("Qwen/Qwen3-0.6B")
    one, two = (activation_peak_bytes(small, 8192, 1024, tp, 1.0, VLLM_V1_SAMPLER_BYTES) for tp in (1, 2))
    assert one == two == 1024 * small.vocab_size * VLLM_V1_SAMPLER_BYTES
    # llm-d's empirical profile of vLLM 0.11 on one H100 (max_num_seqs 1024, budget 8192) measured 5.56 GiB.
    assert one / GIB == pytest.approx(5.56, rel=0.05)
    # A forward pass larger than the sampler's peak is the peak: a 70B model's 65k-token profile at 8 sequences.
    big = resolve_model("meta-llama/Llama-3.1-70B-Instruct")
    forward = activation_peak_bytes(big, 65536, 8, 1, 1.0, VLLM_V1_SAMPLER_BYTES)
    assert forward > 8 * big.vocab_size * VLLM_V1_SAMPLER_BYTES
    assert forward == activation_peak_bytes(big, 65536, 1, 1, 1.0, VLLM_V1_SAMPLER_BYTES)
