"""The step model (inferplan/planner/model/performance.py): decode and prefill times and their invariants, and how
`build_hardware` turns measured kernel times (inferplan/planner/model/kernels.py) into a deployment's rates."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.planner.catalog.checkpoints import checkpoint_precision
from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.gpus import GpuSpec, load_gpu_catalog, resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.kernels import (
    ELEMENTWISE_FLOOR_S,
    ELEMENTWISE_KERNELS_PER_LAYER,
    gemm_format,
    gpu_kernels,
    moe_formats,
    moe_shape_key,
    profiled_systems,
    system_tables,
)
from inferplan.planner.model.memory import attention_weight_bytes, weight_bytes, weight_split
from inferplan.planner.model.performance import (
    ALLREDUCE_KNEE_BYTES,
    ALLREDUCE_LATENCY_S,
    Hardware,
    allreduce_message_s,
    allreduce_s,
    attention_flops,
    build_hardware,
    decode_attention_s_per_token,
    decode_step,
    decode_step_s,
    hardware_grid,
    layer_shapes,
    mla_decode_flops_per_pair,
    mla_dp_ratio,
    moe_step_s,
    prefill_compute_s_per_token,
    prefill_s,
    stack_hardware,
    take_hardware,
    with_dp_attention,
    with_mtp,
)
from inferplan.planner.simulation.engine import _StepModel
from tests.support.hardware import BANDWIDTH_SHARE, DECODE_SHARE, FACTORS, hardware, measured_hardware

LLAMA = "meta-llama/Meta-Llama-3-8B"


def test_single_stream_decode_is_weights_over_bandwidth() -> None:
    hw = hardware()
    arch = resolve_model(LLAMA)
    read = weight_bytes(arch, weight_precision("bf16")) - 2.0 * arch.vocab_size * arch.hidden_size
    kv = arch.kv_bytes_per_token(2.0) * 100
    expected = (read + kv) / (3350e9 * BANDWIDTH_SHARE)
    assert decode_step_s(hw, 1, 100) == pytest.approx(expected, rel=1e-6)


def test_large_batch_decode_is_its_gemm_flops_and_attention_is_a_kv_read() -> None:
    """A batch of 4096 is compute-bound on the GEMMs alone: decode attention is charged as the KV it reads (at the
    KV rate), not as tensor-core work, so a longer context does not move a compute-bound step; where the KV reads
    dominate (a long context), the step is the weights plus every sequence's KV at the KV rate."""
    hw = hardware()
    step = decode_step_s(hw, 4096, 10)
    assert step == pytest.approx(4096 * hw.decode_flops_per_token_per_gpu / (989e12 * DECODE_SHARE), rel=1e-6)
    assert decode_step_s(hw, 4096, 20) == pytest.approx(step, rel=1e-12)
    arch = resolve_model(LLAMA)
    long = decode_step_s(hw, 64, 100_000)
    weights = hw.decode_dense_bytes_per_gpu / hw.bandwidth_bytes_s
    assert long == pytest.approx(weights + 64 * arch.kv_bytes_per_token(2.0) * 100_000 / hw.kv_bandwidth_bytes_s,
                                 rel=1e-6)


def test_a_per_sm_cap_binds_on_cards_with_many_gb_s_per_sm_only() -> None:
    """9 GB/s per SM: an A100 SXM (108 SMs) streams at most 972 GB/s, below what its kernels measure, so weights and
    KV take the cap; an RTX 4090 (128 SMs: a cap of 1,152 GB/s) keeps its measured rates, which are below it."""
    capped = replace(FACTORS, sm_stream_gb_s=9.0)
    a100, a100_capped = (measured_hardware(gpu="NVIDIA-A100-SXM4-80GB", factors=f) for f in (FACTORS, capped))
    assert a100.bandwidth_bytes_s > 108 * 9e9 and a100.kv_bandwidth_bytes_s > 108 * 9e9
    assert a100_capped.bandwidth_bytes_s == pytest.approx(108 * 9e9)
    assert a100_capped.kv_bandwidth_bytes_s == pytest.approx(108 * 9e9)
    rtx, rtx_capped = (measured_hardware(gpu="NVIDIA-GeForce-RTX-4090", factors=f) for f in (FACTORS, capped))
    assert rtx.bandwidth_bytes_s < 128 * 9e9
    assert rtx_capped.bandwidth_bytes_s == rtx.bandwidth_bytes_s
    assert rtx_capped.kv_bandwidth_bytes_s == rtx.kv_bandwidth_bytes_s


def test_the_prior_per_sm_rate_caps_no_gpu_in_the_catalog() -> None:
    for gpu in load_gpu_catalog():
        assert gpu.sm_count and gpu.sm_count * FACTORS.sm_stream_gb_s * 1e9 > gpu.memory_bandwidth_gb_s * 1e9, gpu.key


@pytest.mark.parametrize("model", [LLAMA, "mistralai/Mixtral-8x7B-v0.1"])
@pytest.mark.parametrize("gpu", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S", "MI300X", "T4"])
@pytest.mark.parametrize("weights", ["bf16", "int4-awq"])
def test_measured_rates_stay_within_the_gpus_rated_figures(model: str, gpu: str, weights: str) -> None:
    """Whatever the kernels measure, a deployment never streams faster than its GPU's rated bandwidth nor computes
    faster than its 16-bit tensor peak (a weight-only format runs 16-bit MMAs), at TP 1 and 2, dense or MoE."""
    spec = resolve_gpu(gpu)
    rated, peak = spec.memory_bandwidth_gb_s * 1e9, spec.fp16_tflops * 1e12
    for tp in (1, 2):
        hw = measured_hardware(model, gpu, weights, tp)
        for name in ("bandwidth_bytes_s", "expert_bandwidth_bytes_s", "kv_bandwidth_bytes_s"):
            assert 0 < getattr(hw, name) <= rated, (tp, name)
        # A MoE decode token's rate is held to the peak apart (test_a_moe_decode_token_...).
        rates = ("prefill_flops_s", "attention_flops_s") + (() if hw.num_experts else ("decode_flops_s",))
        for name in rates:
            assert 0 < getattr(hw, name) <= peak, (tp, name)
        assert 0.0 <= hw.overlap_penalty <= 1.0


@pytest.mark.parametrize("gpu", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"])
def test_a_moe_decode_token_costs_at_least_its_active_flops_at_the_tensor_peak(gpu: str) -> None:
    """Mixtral 8x7B: a large decode batch is compute-bound, and no token of it can take less than 2 x its active
    parameters at the GPU's 16-bit peak."""
    hw = measured_hardware("mistralai/Mixtral-8x7B-v0.1", gpu)
    assert hw.decode_flops_s <= resolve_gpu(gpu).fp16_tflops * 1e12


def test_a_moe_prompt_takes_at_least_its_active_flops_at_the_tensor_peak() -> None:
    """Mixtral 8x7B (13B active) prefilling 8192 tokens on one H100 cannot beat 2 x active parameters x tokens at
    the full 16-bit peak, nor be faster than a dense 8B model's prompt of the same length."""
    arch = resolve_model("mistralai/Mixtral-8x7B-v0.1")
    moe = measured_hardware("mistralai/Mixtral-8x7B-v0.1")
    assert float(prefill_s(moe, 8192)) >= 2.0 * arch.active_param_count() * 8192 / 989e12
    assert float(prefill_s(moe, 8192)) > float(prefill_s(measured_hardware(), 8192))


@pytest.mark.parametrize("gpu", ["MI355X", "MI300X", "NVIDIA-B200"])
def test_gpt_oss_experts_compute_at_no_more_than_the_16_bit_peak(gpu: str) -> None:
    """gpt-oss-120b's MXFP4 experts multiply 16-bit activations on every GPU (weight-only): a routed token's expert
    FLOPs (36 layers x 4 experts x 3 GEMMs of 2880 x 2880) take at least their time at the 16-bit tensor peak, on
    the MI355X too, whose FP4 peak (10.1 PFLOPS) no engine uses for them (it had been read at it: 0.65 us a token
    against 13 us measured on a B200)."""
    spec = resolve_gpu(gpu)
    hw = measured_hardware("openai/gpt-oss-120b", gpu, "mxfp4")
    flops = 36 * 4 * 6.0 * 2880 * 2880
    assert float(hw.expert_s_per_token) >= flops / (spec.fp16_tflops * 1e12)


def test_a_gpu_whose_tables_lack_the_formats_fused_moe_takes_the_profiled_gpus_medians() -> None:
    """The A100's tables hold no MXFP4 fused MoE (gpt-oss runs there through vLLM's Marlin kernels): its MoE layers
    pay the floor the GPUs that measured them pay, as a GPU without any tables does, not the dense GEMM tables'
    calls with no floor."""
    moe = system_tables("a100_sxm")["moe"]
    assert not any("w4a16_mxfp4" in formats for formats in moe.values())
    hw = measured_hardware("openai/gpt-oss-120b", "NVIDIA-A100-SXM4-80GB", "mxfp4")
    h100 = measured_hardware("openai/gpt-oss-120b", "NVIDIA-H100-80GB-HBM3", "mxfp4")
    assert 0.5 * float(h100.moe_floor_s) < float(hw.moe_floor_s) < 2.0 * float(h100.moe_floor_s)


def test_fp8_runs_on_fp8_tensor_cores_where_the_gpu_has_them() -> None:
    """H100: the FP8 GEMM tables are faster than the 16-bit ones on a large batch, by less than the 2x of the
    peaks (AIConfigurator's measurements reach a smaller share of the FP8 peak)."""
    h100, bf16 = measured_hardware(weights="fp8"), measured_hardware()
    gpu = resolve_gpu("NVIDIA-H100-80GB-HBM3")
    assert h100.prefill_flops_s > 1.3 * bf16.prefill_flops_s
    assert h100.decode_flops_s > 1.3 * bf16.decode_flops_s
    assert h100.prefill_flops_s < gpu.fp8_tflops * 1e12
    # Half the bytes per weight: a batch-1 step is faster too.
    assert decode_step_s(h100, 1, 100) < decode_step_s(bf16, 1, 100)


def test_a_checkpoint_that_keeps_layers_16_bit_reads_and_multiplies_them_16_bit() -> None:
    """Meta's FP8 Llama 3.1 405B (`inner-ffn`): the attention projections and the first and last layers' FFNs are
    read at two bytes a weight and multiplied on the 16-bit tensor cores, the other FFNs in FP8: a decode step
    reads 19% more than an all-linear FP8 repository's and a prompt runs slower, both faster than 16-bit."""
    arch, gpu, vllm = resolve_model("meta-llama/Llama-3.1-405B"), resolve_gpu("NVIDIA-H100-80GB-HBM3"), ENGINES["vllm"]
    meta = checkpoint_precision("fp8", "meta-llama/Llama-3.1-405B-FP8")
    assert meta.name == "fp8" and meta.quantizes == "inner-ffn"
    built = {name: build_hardware(arch, gpu, precision, 2.0, vllm, FACTORS, 8)
             for name, precision in (("meta", meta), ("fp8", weight_precision("fp8")),
                                     ("bf16", weight_precision("bf16")))}
    sixteen = arch.attention_param_count() + 2 * arch._mlp_params(arch.intermediate_size)
    assert built["meta"].decode_dense_bytes_per_gpu - built["fp8"].decode_dense_bytes_per_gpu == pytest.approx(
        sixteen / 8, rel=1e-3)  # one byte more a weight for those, over 8 GPUs (and for the norms, 0.04%)
    steps = {name: float(decode_step_s(hw, 1, 100)) for name, hw in built.items()}
    prompts = {name: float(prefill_s(hw, 4096)) for name, hw in built.items()}
    assert steps["fp8"] < steps["meta"] < steps["bf16"]
    assert prompts["fp8"] < prompts["meta"] < prompts["bf16"]


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


def test_prefill_attention_runs_at_its_own_measured_rate() -> None:
    """A prompt token costs its GEMM FLOPs at the prefill rate plus its attention FLOPs (over half the prompt on
    average) at the attention rate: halving the attention rate adds exactly the attention time again."""
    hw = hardware()
    prompt = 16384.0
    per_token = float(prefill_compute_s_per_token(hw, prompt))
    gemm = hw.prefill_flops_per_token_per_gpu / hw.prefill_flops_s
    attention = float(attention_flops(hw, prompt / 2)) / hw.attention_flops_s
    assert per_token == pytest.approx(gemm + attention, rel=1e-12)
    slower = replace(hw, attention_flops_s=hw.attention_flops_s / 2)
    assert float(prefill_compute_s_per_token(slower, prompt)) == pytest.approx(gemm + 2 * attention, rel=1e-12)
    # The measured H100 rate is below the 16-bit peak and well above nothing.
    measured = measured_hardware()
    assert 0.2 * 989e12 < measured.attention_flops_s < 989e12


def test_tensor_parallel_halves_weight_time_and_adds_allreduce() -> None:
    one, two = hardware(tp=1), hardware(tp=2)
    assert float(allreduce_s(one, 8)) == 0.0
    assert float(allreduce_s(two, 8)) > 0.0
    assert decode_step_s(two, 1, 100) < decode_step_s(one, 1, 100)
    assert decode_step_s(two, 1, 100) > decode_step_s(one, 1, 100) / 2


def test_all_reduces_are_the_measured_table_where_one_covers_the_gpu_else_the_rated_link() -> None:
    """H100 at TP 2: one token's all-reduce takes what AIConfigurator measured for its bytes. A T4 pair over PCIe
    has no measured or published all-reduce: the rated link's figures."""
    arch = resolve_model(LLAMA)
    h100 = measured_hardware(tp=2)
    one_token = 2.0 * arch.hidden_size
    measured = gpu_kernels(resolve_gpu("NVIDIA-H100-80GB-HBM3"), "vllm").allreduce_s(np.array([one_token]), 2)
    assert h100.link_latency_s == pytest.approx(float(measured[0]))
    assert h100.allreduces_per_step == 2 * arch.num_layers
    t4 = measured_hardware(gpu="T4", tp=2)
    assert t4.link_latency_s == ALLREDUCE_LATENCY_S["pcie"]
    assert t4.link_bytes_s == pytest.approx(resolve_gpu("T4").interconnect_gb_s * 1e9)



@pytest.mark.parametrize("slower", ["L40", "L4"])
def test_pcie_gpus_of_one_link_rank_by_their_own_figures_at_every_tp(slower: str) -> None:
    """Llama-3.1-70B in FP8 on eight GPUs of the same PCIe link (32 GB/s): an L40 (half the L40S's tensor
    throughput, the same bandwidth) or an L4 (a third of its bandwidth) never decodes or prefills faster than an
    L40S. AIConfigurator's L40S table measured one PCIe box's all-reduce (1.9 GB/s ring bandwidth at TP 8, 17 times
    below the link); its siblings took the link's rated figures, so an L40 at TP 8 decoded 7x faster than an L40S."""
    arch, fp8, vllm = resolve_model("meta-llama/Llama-3.1-70B"), weight_precision("fp8"), ENGINES["vllm"]
    for tp in (2, 4, 8):
        l40s, other = (build_hardware(arch, resolve_gpu(g), fp8, 2.0, vllm, FACTORS, tp) for g in ("L40S", slower))
        assert l40s.link_bytes_s == other.link_bytes_s and l40s.link_latency_s == other.link_latency_s
        for batch in (1, 64, 256):
            assert decode_step_s(l40s, batch, 1024.0) <= decode_step_s(other, batch, 1024.0), (tp, batch)
        assert prefill_s(l40s, 4096.0, 1, 8192.0) <= prefill_s(other, 4096.0, 1, 8192.0), tp

def test_an_all_reduce_follows_the_measured_curve_through_its_knee() -> None:
    """Llama-3-70B on four H100s: an all-reduce of one token's hidden state, of a 1 MiB message (the knee: a decode
    batch of 64) and of a 16 MiB one takes what the measured table says for its bytes. The line through one token
    and the 1-16 MiB slope alone was 30% short at the knee, where decode batches of 32-256 sit. A decode step and
    the simulator charge the same all-reduces at every batch."""
    arch = resolve_model("meta-llama/Meta-Llama-3-70B")
    hw = measured_hardware("meta-llama/Meta-Llama-3-70B", tp=4)
    per_token = 2.0 * arch.hidden_size
    sizes = np.array([per_token, ALLREDUCE_KNEE_BYTES, 2.0**24])
    table = gpu_kernels(resolve_gpu("NVIDIA-H100-80GB-HBM3"), "vllm").allreduce_s(sizes, 4)
    ours = allreduce_message_s(hw, sizes / per_token)
    assert ours[1:] == pytest.approx(table[1:], rel=1e-9)
    # The latency line starts at one token's measured time and passes through the knee's: one token's own message
    # adds its share of the rise to the knee (16 KiB of 1 MiB).
    assert table[0] < ours[0] < table[0] + per_token / ALLREDUCE_KNEE_BYTES * (table[1] - table[0]) * 1.000001
    former = hw.link_latency_s + 1.5 * ALLREDUCE_KNEE_BYTES / hw.link_bytes_s
    assert former < 0.8 * table[1]
    step, model = decode_step(hw, 1000.0), _StepModel(hw)
    for batch in (1, 16, 64, 128, 512):
        expected = float(hw.allreduces_per_step * allreduce_message_s(hw, batch))
        charged = float(step.at(batch)) - float(replace(step, allreduce_latency_s=np.asarray(0.0),
                                                          allreduce_s_per_token=np.asarray(0.0),
                                                          allreduce_knee_s_per_token=np.asarray(0.0)).at(batch))
        assert charged == pytest.approx(expected, rel=1e-9)
        assert float(allreduce_s(hw, batch)) == pytest.approx(expected, rel=1e-9)
        assert model.time(batch, 1000.0, 0, 0.0, batch) == pytest.approx(float(step.at(batch)), rel=1e-12)


def test_moe_decode_reads_only_routed_experts_at_batch_one() -> None:
    moe = hardware("mistralai/Mixtral-8x7B-v0.1")
    step1, step64 = float(decode_step_s(moe, 1, 10)), float(decode_step_s(moe, 64, 10))
    all_experts_s = moe.expert_bytes_per_gpu / moe.bandwidth_bytes_s
    assert step1 < 0.5 * (moe.decode_dense_bytes_per_gpu + moe.expert_bytes_per_gpu) / moe.bandwidth_bytes_s
    assert step64 > all_experts_s * 0.99


def test_the_fused_moe_layers_add_to_a_step_after_the_dense_roofline() -> None:
    """Qwen3-30B-A3B on an H100: the fused MoE layers are kernels of their own, so a decode step and a prompt's
    step are the dense part's roofline plus the MoE layers' floor, their read of the experts routed to and their
    compute per routed token, the measured fused-MoE table's three figures for that very shape; the simulator
    charges the same."""
    arch, gpu = resolve_model("Qwen/Qwen3-30B-A3B"), resolve_gpu("NVIDIA-H100-80GB-HBM3")
    hw = measured_hardware("Qwen/Qwen3-30B-A3B")
    dense = replace(hw, num_experts=0.0, moe_floor_s=0.0, expert_s_per_token=0.0, expert_bytes_per_gpu=0.0)
    model = _StepModel(hw)
    for batch in (1, 16, 128, 512):
        moe = float(moe_step_s(hw, batch))
        assert float(decode_step_s(hw, batch, 1000.0)) == pytest.approx(
            float(decode_step_s(dense, batch, 1000.0)) + moe, rel=1e-12)
        assert model.time(batch, 1000.0, 0, 0.0, batch) == pytest.approx(float(decode_step_s(hw, batch, 1000.0)))
    for prompt in (128, 2048, 8192):
        assert float(prefill_s(hw, prompt)) == pytest.approx(float(prefill_s(dense, prompt))
                                                             + float(moe_step_s(hw, prompt)), rel=1e-12)
    flops = 6.0 * arch.hidden_size * arch.expert_intermediate_size
    shape = moe_shape_key(arch.hidden_size, arch.expert_intermediate_size, arch.num_experts, arch.experts_per_token, 1)
    floor, stream, compute = gpu_kernels(gpu, "vllm").moe_layer(moe_formats(weight_precision("bf16"), gpu),
                                                                flops, shape)
    layers = arch.moe_layer_count
    assert hw.moe_floor_s == pytest.approx(layers * floor, rel=1e-9)
    assert hw.expert_s_per_token == pytest.approx(layers * arch.experts_per_token * flops / compute, rel=1e-9)
    assert hw.expert_bandwidth_bytes_s == pytest.approx(stream, rel=1e-9)
    # Every expert touched: the whole read, once.
    assert float(moe_step_s(hw, 1e6)) == pytest.approx(
        hw.moe_floor_s + hw.expert_bytes_per_gpu / stream + 1e6 * hw.expert_s_per_token, rel=1e-6)


def test_an_expert_only_format_changes_the_experts_kernels_only() -> None:
    """gpt-oss in MXFP4: its attention and embeddings stay 16-bit, read by the same 16-bit GEMMs as the bf16
    checkpoint (the same bytes in the same time); the two formats' fused MoE kernels differ in their floors, which
    every step carries, and the experts are fewer bytes through their own kernels, so they stream in less time
    than the 16-bit experts."""
    mxfp4, bf16 = (measured_hardware("openai/gpt-oss-20b", weights=w) for w in ("mxfp4", "bf16"))
    assert mxfp4.decode_dense_bytes_per_gpu == bf16.decode_dense_bytes_per_gpu
    arch, gpu = resolve_model("openai/gpt-oss-20b"), resolve_gpu("NVIDIA-H100-80GB-HBM3")
    kernels = gpu_kernels(gpu, "vllm")
    expert = 3.0 * arch.hidden_size * arch.expert_intermediate_size
    shape = moe_shape_key(arch.hidden_size, arch.expert_intermediate_size, arch.num_experts, arch.experts_per_token, 1)
    floors = [kernels.moe_layer(moe_formats(weight_precision(w), gpu), expert * weight_precision(w).bytes_per_param,
                                shape)[0] for w in ("mxfp4", "bf16")]
    moe_layers = arch.num_layers - arch.first_dense_layers
    assert mxfp4.decode_dense_bytes_per_gpu / mxfp4.bandwidth_bytes_s == pytest.approx(
        bf16.decode_dense_bytes_per_gpu / bf16.bandwidth_bytes_s, rel=1e-12)
    assert mxfp4.moe_floor_s - bf16.moe_floor_s == pytest.approx(moe_layers * (floors[0] - floors[1]), rel=1e-6)
    assert mxfp4.expert_bytes_per_gpu == pytest.approx(bf16.expert_bytes_per_gpu * 4.25 / 16)
    assert (mxfp4.expert_bytes_per_gpu / mxfp4.expert_bandwidth_bytes_s
            < bf16.expert_bytes_per_gpu / bf16.expert_bandwidth_bytes_s)
    assert decode_step_s(mxfp4, 64, 1000) < decode_step_s(bf16, 64, 1000)


def test_an_mtp_drafting_step_verifies_every_draft_runs_the_module_per_draft_and_is_charged_per_token() -> None:
    """DeepSeek-V3 on 8 H200 drafting k tokens a step: the step passes k + 1 tokens of each sequence through the
    GEMMs, all-reduces and MoE layers (the KV read once), adds k module passes at the module's share of the plain
    step's GPU time (its active parameters over the model's), keeps the CPU terms, and is charged per token
    emitted. No drafts, the plain step."""
    hw = measured_hardware("deepseek-ai/DeepSeek-V3", gpu="NVIDIA-H200", weights="fp8", tp=8)
    arch = resolve_model("deepseek-ai/DeepSeek-V3")
    share = arch.mtp_active_param_count() / arch.active_param_count()
    assert share == pytest.approx(0.043, abs=0.001)
    for k, emitted in ((1, 1.85), (3, 3.19)):
        drafting = with_mtp(hw, arch, k, emitted)
        for batch, ctx in ((1, 1000.0), (64, 4000.0), (512, 1500.0)):
            curve, plain = decode_step(drafting, ctx), decode_step(hw, ctx)
            b = np.array(float(batch))
            gpu = curve._gpu_s(b, b * (k + 1)) + k * share * plain._gpu_s(b, b)
            expected = (hw.pp * gpu + hw.step_overhead_s + hw.sequence_overhead_s * batch) / emitted
            assert float(curve.at(batch)) == pytest.approx(float(expected), rel=1e-12)
        # At batch 1 the drafting step costs more than the plain one (the verified tokens route to k + 1 times the
        # experts) but far less than k + 1 plain steps, so a token costs less.
        one = float(decode_step_s(drafting, 1, 1000) * emitted / decode_step_s(hw, 1, 1000))
        assert 1.0 < one < 1.0 + 0.5 * k
        assert float(decode_step_s(drafting, 1, 1000)) < float(decode_step_s(hw, 1, 1000))
    off = with_mtp(hw, arch, 0, 2.0)
    assert float(decode_step_s(off, 64, 4000)) == float(decode_step_s(hw, 64, 4000))


@pytest.mark.parametrize("gpu", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"])
def test_weight_only_formats_read_fewer_bytes_but_compute_as_16_bit(gpu: str) -> None:
    """AWQ reads a quarter of the bytes per weight, so a batch-1 step is faster than 16-bit; its large batches
    dequantise every tile before the 16-bit MMA, so they are never faster than 16-bit ones."""
    awq, bf16 = measured_hardware(gpu=gpu, weights="int4-awq"), measured_hardware(gpu=gpu)
    assert decode_step_s(awq, 1, 100) < decode_step_s(bf16, 1, 100)
    assert awq.decode_flops_s <= 1.01 * bf16.decode_flops_s
    assert awq.prefill_flops_s <= 1.01 * bf16.prefill_flops_s
    assert decode_step_s(awq, 2048, 10) >= 0.99 * decode_step_s(bf16, 2048, 10)


def test_layer_shapes_hold_every_linear_weight_once_split_over_the_ranks() -> None:
    """The GEMMs' N x K over the layers (experts x their count) plus the LM head are the model's parameters but
    its input embedding and norms; TP 2 halves each rank's share (Llama 3 8B keeps 4 KV heads a rank; a router,
    if replicated, is a thousandth of Mixtral's weights)."""
    for model in (LLAMA, "mistralai/Mixtral-8x7B-v0.1"):
        arch = resolve_model(model)

        def weights(tp: int, arch=arch) -> float:
            s = layer_shapes(arch, tp)
            per_layer = [(s.dense, s.dense_layers, 1), (s.moe_shared, s.moe_layers, 1),
                         (s.expert, s.moe_layers, arch.num_experts)]
            return sum(n * k * c * layers * count for group, layers, count in per_layer for n, k, c in group) + \
                s.lm_head[0] * s.lm_head[1]

        split = weight_split(arch)
        assert weights(1) == pytest.approx(split.total - split.input_embedding, rel=1e-4), model
        assert weights(2) == pytest.approx(weights(1) / 2, rel=1e-3), model
        s = layer_shapes(arch, 1)
        assert sum(n * k for n, k, _ in s.expert) * arch.num_experts * s.moe_layers == split.experts


def test_a_batch_one_step_is_its_kernels_one_after_another() -> None:
    """Llama 3 8B on one H100: a batch-1 step takes at least every GEMM of every layer at M = 1 (the LM head
    once), as measured one by one, and at most that plus the elementwise kernels' floors, each layer's decode
    attention floor and the step's compute."""
    arch, gpu = resolve_model(LLAMA), resolve_gpu("NVIDIA-H100-80GB-HBM3")
    hw, kernels = measured_hardware(), gpu_kernels(gpu, "vllm")
    shapes = layer_shapes(arch, 1)
    fmt = gemm_format(weight_precision("bf16"), gpu)
    gemms = sum(float(kernels.gemm_s(fmt, 1, n, k)) * c for n, k, c in shapes.dense) * arch.num_layers \
        + float(kernels.gemm_s("bfloat16", 1, *shapes.lm_head))
    floors = arch.num_layers * (ELEMENTWISE_KERNELS_PER_LAYER * ELEMENTWISE_FLOOR_S
                                + float(kernels.decode_attention_s("bf16", 2.0**16, arch.num_kv_heads)))
    step = float(decode_step_s(hw, 1, 1))
    compute = hw.decode_flops_per_token_per_gpu / hw.decode_flops_s
    assert gemms < step <= (gemms + floors + compute) * 1.01


def test_the_engines_speeds_scale_its_decode_and_prefill_rates_only() -> None:
    """`decode_speed` (online calibration) scales every rate of the decode step, `prefill_speed` those of prefill;
    neither moves the other's, nor the sizes, links or overheads."""
    base = measured_hardware()
    slow_decode = measured_hardware(factors=replace(FACTORS, decode_speed=0.5))
    slow_prefill = measured_hardware(factors=replace(FACTORS, prefill_speed=0.25))
    decode_rates = ("bandwidth_bytes_s", "expert_bandwidth_bytes_s", "kv_bandwidth_bytes_s", "decode_flops_s")
    prefill_rates = ("prefill_flops_s", "attention_flops_s")
    for f in fields(base):
        name = f.name
        ratio_decode = 0.5 if name in decode_rates else 1.0
        ratio_prefill = 0.25 if name in prefill_rates else 1.0
        assert getattr(slow_decode, name) == pytest.approx(getattr(base, name) * ratio_decode), name
        assert getattr(slow_prefill, name) == pytest.approx(getattr(base, name) * ratio_prefill), name


def test_stacked_hardware_evaluates_like_each_alone() -> None:
    items = [hardware(), hardware(gpu="NVIDIA-A100-SXM4-80GB"), hardware(tp=2), measured_hardware(tp=2)]
    stacked = stack_hardware(items)
    batch = np.array([1.0, 8.0, 32.0, 64.0])
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
        grid = hardware_grid(arch, gpus, precisions, kv, engine, [engine_factors] * len(gpus), [1, 4])
        for (g, gpu), (t, tp), (p, precision), (k, kv_bytes) in itertools.product(
                enumerate(gpus), enumerate([1, 4]), enumerate(precisions), enumerate([2.0, 1.0])):
            one = build_hardware(arch, gpu, precision, kv_bytes, engine, engine_factors, tp)
            assert all(getattr(grid, f.name)[g, t, p, k] == getattr(one, f.name) for f in fields(one))


def test_a_grid_of_some_pairs_reads_only_those_and_gives_them_the_same_step_times() -> None:
    """The search passes the (GPU, precision) pairs some shape evaluates: theirs are what the whole grid gives, the
    others' step times are NaN (never a number a row could be judged on)."""
    factors = load_factors().engine("vllm")
    arch = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    gpus = [resolve_gpu(name) for name in ("NVIDIA-L4", "NVIDIA-H100-80GB-HBM3")]
    precisions = [weight_precision(name) for name in ("bf16", "fp8")]
    kv = np.array([[2.0, 1.0]] * len(precisions))
    needed = np.array([[True, False], [False, True]])
    whole = hardware_grid(arch, gpus, precisions, kv, ENGINES["vllm"], [factors] * 2, [1, 4])
    some = hardware_grid(arch, gpus, precisions, kv, ENGINES["vllm"], [factors] * 2, [1, 4], needed=needed)
    for g, p in itertools.product(range(2), range(2)):
        if needed[g, p]:
            assert all(np.array_equal(getattr(some, f.name)[g, :, p], getattr(whole, f.name)[g, :, p])
                       for f in fields(some))
        else:
            assert np.isnan(some.bandwidth_bytes_s[g, :, p]).all() and np.isnan(some.decode_flops_s[g, :, p]).all()


@settings(max_examples=60, deadline=None)
@given(
    bandwidth=st.floats(100, 8000),
    extra=st.floats(1.0, 3.0),
    batch=st.integers(1, 512),
    context=st.integers(1, 32768),
)
def test_more_bandwidth_never_slows_decode(bandwidth: float, extra: float, batch: int, context: int) -> None:
    base = measured_hardware(factors=load_factors().engine("vllm"))
    slow = replace(base, bandwidth_bytes_s=bandwidth * 1e9, kv_bandwidth_bytes_s=bandwidth * 1e9)
    fast = replace(base, bandwidth_bytes_s=bandwidth * extra * 1e9, kv_bandwidth_bytes_s=bandwidth * extra * 1e9)
    assert decode_step_s(fast, batch, context) <= decode_step_s(slow, batch, context) + 1e-12


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 1024), context=st.integers(1, 65536))
def test_bigger_batch_never_shortens_a_step(batch: int, context: int) -> None:
    hw = measured_hardware(factors=load_factors().engine("vllm"))
    assert decode_step_s(hw, batch + 1, context) >= decode_step_s(hw, batch, context)


def test_a_moe_layer_as_the_engines_fused_kernels_ran_it_where_they_were_measured() -> None:
    """Qwen3-30B-A3B on one H200 under vLLM: its 48 MoE layers carry the measured fused-MoE floor each in a batch-1
    step, read the routed experts no faster than the HBM allows, and compute a routed token no faster than the
    16-bit peak; the figures are those measured for its own shape (not the medians of its expert size's bin). On a
    GPU without MoE tables (MI300X) the layer is the profiled GPUs' median: their floor, and their shares of the
    bandwidth and of the peak on the MI300X's own (the experts had streamed at the GEMM tables' rate with no floor,
    at the dense GEMMs' share of the peak)."""
    arch, gpu = resolve_model("Qwen/Qwen3-30B-A3B"), resolve_gpu("NVIDIA-H200")
    kernels = gpu_kernels(gpu, "vllm")
    expert = 3.0 * arch.hidden_size * arch.expert_intermediate_size * 2.0
    shape = moe_shape_key(arch.hidden_size, arch.expert_intermediate_size, arch.num_experts, arch.experts_per_token, 1)
    formats = moe_formats(weight_precision("bf16"), gpu)
    floor, stream, compute = kernels.moe_layer(formats, expert, shape)
    own = system_tables("h200_sxm")["moe"]["vllm"]["bfloat16"]["shapes"][shape]
    assert floor == pytest.approx(own[0] * 1e-6)
    assert kernels.moe_layer(formats, expert) != (floor, stream, compute)  # the bin's medians differ
    assert 10e-6 < floor < 100e-6
    assert 0.3 * gpu.memory_bandwidth_gb_s * 1e9 < stream <= gpu.memory_bandwidth_gb_s * 1e9
    assert 0.05 * gpu.fp16_tflops * 1e12 < compute <= gpu.fp16_tflops * 1e12
    hw = measured_hardware("Qwen/Qwen3-30B-A3B", "NVIDIA-H200")
    assert float(hw.expert_bandwidth_bytes_s) == pytest.approx(stream)
    moe_layers = arch.num_layers - arch.first_dense_layers
    assert float(decode_step_s(hw, 1, 100)) > moe_layers * floor
    mi300x = resolve_gpu("MI300X")
    amd = gpu_kernels(mi300x, "vllm")
    shares = [tables["vllm"]["bfloat16"]["shapes"][shape] for tables in
              (system_tables(name)["moe"] for name in profiled_systems())
              if shape in tables.get("vllm", {}).get("bfloat16", {}).get("shapes", {})]
    assert len(shares) >= 5
    floor, stream, compute = amd.moe_layer(moe_formats(weight_precision("bf16"), mi300x), expert, shape)
    assert min(f for f, _, _ in shares) * 1e-6 <= floor <= max(f for f, _, _ in shares) * 1e-6
    assert min(b for _, b, _ in shares) * 5300e9 <= stream <= 5300e9
    peak = mi300x.fp16_tflops * 1e12
    assert min(c for _, _, c in shares) * peak <= compute <= max(c for _, _, c in shares) * peak
    assert compute < dict(mi300x.kernel_figures)["gemm_bf16_efficiency"] * peak  # below the dense GEMMs' share
    amd_hw = measured_hardware("Qwen/Qwen3-30B-A3B", "MI300X")
    assert float(amd_hw.moe_floor_s) == pytest.approx(moe_layers * floor)
    assert float(amd_hw.expert_bandwidth_bytes_s) == pytest.approx(stream)
    # INT8 W8A8 experts were measured nowhere: they stay the dense GEMM tables' calls.
    assert amd.moe_layer(moe_formats(weight_precision("int8-w8a8"), mi300x), expert, shape) is None


def test_moe_formats_follow_what_the_engines_run_on_each_gpu() -> None:
    h100, b200, a100 = (resolve_gpu(g) for g in ("NVIDIA-H100-80GB-HBM3", "NVIDIA-B200", "NVIDIA-A100-SXM4-80GB"))
    assert moe_formats(weight_precision("fp8"), h100) == ("fp8_block", "fp8")
    assert moe_formats(weight_precision("fp8"), h100, "tensorrt-llm") == ("fp8", "fp8_block")  # ModelOpt: per-tensor
    # vLLM runs FP8 experts on the A100 through Marlin's fused MoE, its AWQ/GPTQ experts' kernel; other engines' FP8
    # experts there run as dense GEMM calls.
    assert moe_formats(weight_precision("fp8"), a100) == ("int4_wo",)
    assert moe_formats(weight_precision("fp8"), a100, "sglang") == ()
    assert moe_formats(weight_precision("nvfp4"), b200) == ("nvfp4",)
    assert moe_formats(weight_precision("nvfp4"), h100) == ("int4_wo",)
    assert moe_formats(weight_precision("mxfp4"), h100) == ("w4a16_mxfp4",)
    assert moe_formats(weight_precision("int4-awq"), h100) == ("int4_wo",)
    assert moe_formats(weight_precision("int8-w8a8"), h100) == ()


def test_mla_decode_attention_reads_the_measured_mla_tables_and_costs_the_latent_where_none() -> None:
    """Absorbed MLA decode where AIConfigurator measured it (the tables' `mla_decode`, ns per sequence and context
    token of a layer by query heads a GPU): DeepSeek-V3 at TP 8 runs 16 heads a rank over every sequence; with
    data-parallel attention a rank runs all 128 heads over 1/8 of them. vLLM's MLA kernels are not profiled apart
    from their projections: it reads TensorRT-LLM's table. Where no table covers the GPU (AMD) the latent's read and
    the absorbed FLOPs (2 x heads x (2 x 512 + 64) per context token and layer) at the attention rate, the larger.
    Prefill attention runs at the measured MLA context rate (`mla_prefill`, TFLOPS by query heads)."""
    arch = resolve_model("deepseek-ai/DeepSeek-V3")
    assert mla_decode_flops_per_pair(arch) == 2 * 128 * (2 * 512 + 64) * 61
    assert mla_decode_flops_per_pair(resolve_model("meta-llama/Llama-3.1-8B")) == 0.0
    h200, mi300x = resolve_gpu("H200-SXM-141GB"), resolve_gpu("MI300X")
    tables = system_tables("h200_sxm")["mla_decode"]

    def per_token(hw: Hardware) -> float:
        return float(np.ravel(decode_attention_s_per_token(hw)[0])[0])

    def on(gpu: GpuSpec, engine: str, kv_bytes: float) -> Hardware:
        return build_hardware(arch, gpu, weight_precision("fp8"), kv_bytes, ENGINES[engine],
                              load_factors().engine(engine), 8)

    sixteen, all_heads = 4, 7  # the table's entries at 2^4 and 2^7 heads
    hw = on(h200, "sglang", 2.0)
    assert per_token(hw) == pytest.approx(tables["sglang"]["bf16"][sixteen] * 1e-9 * 61)
    assert per_token(on(h200, "vllm", 1.0)) == pytest.approx(tables["trtllm"]["fp8"][sixteen] * 1e-9 * 61)
    dp = with_dp_attention(stack_hardware([hw]), np.array([True]), np.array([0.0]),
                           mla_dp_ratio(arch, h200, "sglang", 2.0, 8))
    assert per_token(dp) == pytest.approx(tables["sglang"]["bf16"][all_heads] * 1e-9 * 61 / 8)
    # The simulator's step model reads the same per-token time.
    assert _StepModel(take_hardware(dp, 0)).kv_full_s == pytest.approx(per_token(dp))

    # Another latent (kv_lora_rank 256, rope 32) reads the tables in proportion to its size.
    small = build_hardware(replace(arch, kv_lora_rank=256, qk_rope_head_dim=32), h200, weight_precision("fp8"), 2.0,
                           ENGINES["sglang"], load_factors().engine("sglang"), 8)
    assert per_token(small) == pytest.approx(per_token(hw) * (256 + 32) / (512 + 64))
    # Prefill: MLA's context-attention rate at the rank's heads, from its own table (vLLM: TensorRT-LLM's).
    prefill = system_tables("h200_sxm")["mla_prefill"]
    assert float(hw.attention_flops_s) == pytest.approx(prefill["sglang"][sixteen] * 1e12)
    assert float(on(h200, "vllm", 1.0).attention_flops_s) == pytest.approx(prefill["trtllm"][sixteen] * 1e12)

    amd = on(mi300x, "vllm", 1.0)
    assert float(amd.mla_decode_s_per_pair_per_gpu) == 0.0
    read = float(amd.kv_full_bytes_per_token_per_gpu) / float(amd.kv_bandwidth_bytes_s)
    flops = float(amd.mla_decode_flops_per_pair_per_gpu) / float(amd.attention_flops_s)
    assert per_token(amd) == pytest.approx(max(read, flops))
    amd_dp = with_dp_attention(stack_hardware([amd]), np.array([True]), np.array([0.0]),
                               mla_dp_ratio(arch, mi300x, "vllm", 1.0, 8))
    assert per_token(amd_dp) == pytest.approx(max(read / 8, flops))
    assert _StepModel(take_hardware(amd_dp, 0)).kv_full_s == pytest.approx(per_token(amd_dp))


def test_data_parallel_attention_ranks_schedule_and_prefill_their_own_requests() -> None:
    """An attention-DP replica (SGLang's --enable-dp-attention, TensorRT-LLM's enable_attention_dp) of tp ranks: each
    rank schedules its own 1/tp of the batch, so a step's per-sequence CPU time is 1/tp of what tensor parallelism
    charges; and a prompt's attention, its projections and its (query, context) pairs, runs on its request's rank
    alone, so a prompt token costs tp times that part (the MoE and dense MLP layers stay spread over the ranks)."""
    arch = resolve_model("deepseek-ai/DeepSeek-V3")
    h200, fp8 = resolve_gpu("H200-SXM-141GB"), weight_precision("fp8")
    factors = replace(FACTORS, sequence_overhead_ms=0.05)
    tp = build_hardware(arch, h200, fp8, 1.0, ENGINES["sglang"], factors, 8)
    dp = take_hardware(with_dp_attention(stack_hardware([tp]), np.array([True]),
                                         np.array([attention_weight_bytes(arch, fp8)]),
                                         mla_dp_ratio(arch, h200, "sglang", 1.0, 8)), 0)
    assert float(dp.dp_ranks) == 8.0 and float(tp.dp_ranks) == 1.0
    assert float(dp.sequence_overhead_s) == pytest.approx(0.05e-3 / 8)
    projections = 2.0 * arch.attention_param_count() / 8
    assert float(tp.attention_projection_flops_per_token_per_gpu) == pytest.approx(projections)
    prompt = 2048
    attention = (projections / float(tp.prefill_flops_s)
                 + float(attention_flops(tp, prompt / 2)) / float(tp.attention_flops_s))
    assert float(prefill_compute_s_per_token(dp, prompt)) == pytest.approx(
        float(prefill_compute_s_per_token(tp, prompt)) + 7 * attention, rel=1e-12)


def test_an_open_systems_mean_step_weights_the_eager_time_by_the_share_of_steps_above_the_graphs() -> None:
    """A step above the largest CUDA graph runs eagerly: at a fixed batch that is a switch at the graphs' batch
    (`at`); the mean step of an open system whose running count varies as a Poisson count about its mean (`mean_at`,
    what the queueing model solves for) pays the eager time in the share of steps above it: none far below, all far
    above, about half at the graphs' batch, and never a jump."""
    base = measured_hardware()
    hw = replace(base, graph_max_batch=32.0, eager_step_s=0.010)
    curve, plain = decode_step(hw, 500.0), decode_step(base, 500.0)
    assert float(curve.at(32)) == pytest.approx(float(plain.at(32)))
    assert float(curve.at(33)) == pytest.approx(float(plain.at(33)) + 0.010)
    assert float(curve.mean_at(4)) == pytest.approx(float(plain.at(4)), abs=1e-9)
    assert float(curve.mean_at(200)) == pytest.approx(float(plain.at(200)) + 0.010, abs=1e-9)
    assert float(curve.mean_at(32.5)) == pytest.approx(float(plain.at(32.5)) + 0.005, rel=1e-3)
    batches = np.linspace(1.0, 100.0, 991)
    extra = curve.mean_at(batches) - plain.at(batches)
    assert np.all(np.diff(extra) >= -1e-12) and np.max(np.diff(extra)) < 0.010 / 20
