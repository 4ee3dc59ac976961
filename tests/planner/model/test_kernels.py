"""Measured kernel times (inferplan/planner/model/kernels.py): the tables read where a GPU was profiled, scaled to a
sibling by the ratio of rooflines, a roofline at published efficiencies or at the profiled GPUs' typical ones, and
the physics every basis keeps (floors, crossovers, formats, collectives)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.gpus import load_gpu_catalog, resolve_gpu
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.kernels import (
    BACKEND_OF_ENGINE,
    MOE_PEAK_OF,
    MXFP4_MOE_KERNELS,
    SYSTEM_ARCH,
    WEIGHT_BYTES,
    _moe_shares,
    gemm_format,
    gpu_arch,
    gpu_kernels,
    kernel_basis,
    moe_formats,
    profiled_systems,
    system_tables,
    typical_efficiencies,
)
from inferplan.planner.model.performance import prompt_token_s
from tests.support.hardware import measured_hardware

H100 = "H100-SXM5-80GB"


def _file(name: str) -> dict[str, Any]:
    return json.loads(resources.files("inferplan.planner").joinpath(f"data/{name}").read_text(encoding="utf-8"))


def _kernel_tables() -> dict[str, Any]:
    """The kernel tables as their folder holds them: meta.json, and the file of each system it names."""
    meta = _file("kernels/meta.json")
    return {"meta": meta, "systems": {name: _file(f"kernels/{name}.json") for name in meta["systems"]}}


TABLES = _kernel_tables()
META = TABLES["meta"]


def _system(key: str) -> dict[str, Any]:
    return TABLES["systems"][resolve_gpu(key).kernel_tables]


def _figures(key: str) -> dict[str, float]:
    """The catalog's published kernel figures of GPU `key`, read from gpus.json."""
    entry = next(g for g in _file("gpus.json")["gpus"] if g["key"] == key)
    return {name: figure["value"] for name, figure in entry["figures"].items()}


# -- what each GPU rests on -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("gpu", "kind"), [
    (H100, "measured"), ("A100-SXM4-80GB", "measured"), ("H200-SXM-141GB", "measured"), ("B200", "measured"),
    ("L40S", "measured"), ("A100-SXM4-40GB", "scaled"), ("GH200-96GB-HBM3", "scaled"), ("RTX-3090", "scaled"),
    ("MI300X", "published"), ("MI325X", "published"), ("T4", "typical"),
])
def test_each_gpu_says_what_its_kernel_times_rest_on(gpu: str, kind: str) -> None:
    basis = kernel_basis(resolve_gpu(gpu))
    assert basis.kind == kind
    assert (basis.system is not None) == (kind in ("measured", "scaled"))
    assert basis.note
    if kind != "measured":  # a plan's warning names the GPU whose step times are extrapolated
        assert resolve_gpu(gpu).display_name in basis.note


def test_every_catalog_gpu_with_tables_names_a_profiled_system_and_each_system_one_own_gpu() -> None:
    """A GPU naming a system the kernel tables lack would silently fall back to typical efficiencies; two GPUs that
    both claim one system as their own would each pass as measured."""
    own: dict[str, str] = {}
    for gpu in load_gpu_catalog():
        if gpu.kernel_tables is None:
            assert kernel_basis(gpu).kind in ("published", "typical"), gpu.key
            continue
        assert gpu.kernel_tables in TABLES["systems"], gpu.key
        if gpu.kernel_tables_own:
            assert gpu.kernel_tables not in own, (gpu.key, own)
            own[gpu.kernel_tables] = gpu.key
    assert own[resolve_gpu(H100).kernel_tables] == H100


def test_every_engine_runs_on_a_backend_the_tables_hold() -> None:
    backends = {b for system in TABLES["systems"].values() for b in system["gemm"]}
    assert set(ENGINES) <= set(BACKEND_OF_ENGINE)
    assert set(BACKEND_OF_ENGINE.values()) <= backends
    assert gpu_kernels(resolve_gpu(H100), "no-such-engine").backend == "vllm"


@pytest.mark.parametrize(("weights", "gpu", "fmt"), [
    ("bf16", H100, "bfloat16"), ("fp8", H100, "fp8"), ("int8-w8a8", "A100-SXM4-80GB", "sq"),
    ("int4-awq", H100, "int4_wo"), ("int8-gptq", H100, "int8_wo"), ("gguf-q4_k_m", "RTX-4090", "int4_wo"),
    ("gguf-q8_0", "RTX-4090", "int8_wo"), ("mxfp4", H100, "int4_wo"), ("mxfp4", "B200", "int4_wo"),
])
def test_each_precision_is_served_by_its_formats_kernels(weights: str, gpu: str, fmt: str) -> None:
    assert gemm_format(weight_precision(weights), resolve_gpu(gpu)) == fmt


# -- measured: the tables themselves ----------------------------------------------------------------------------


@pytest.mark.parametrize(("engine", "backend"), [("vllm", "vllm"), ("sglang", "sglang"), ("tensorrt-llm", "trtllm"),
                                                 ("tgi", "vllm")])
def test_a_measured_gpu_returns_its_tables_values_at_grid_points(engine: str, backend: str) -> None:
    """At the nodes of the grid the lookup is the measurement itself, for the engine's own backend's kernels."""
    kernels = gpu_kernels(resolve_gpu(H100), engine)
    system = _system(H100)
    m, nk = META["gemm_m"], META["gemm_nk"]
    gemm = system["gemm"][backend]["bfloat16"]
    for i, j, k in ((0, 3, 3), (8, 4, 2), (12, 6, 0)):
        assert float(kernels.gemm_s("bfloat16", m[i], nk[j], nk[k])) == pytest.approx(gemm[i][j][k] * 1e-6, rel=1e-9)
    axes = META["decode_attention_axes"]
    decode = system["decode_attention"][backend]["bf16"]
    for i, j in ((4, 6), (9, 9)):
        read, units = 2.0 ** axes["log2_kv_bytes"][i], 2.0 ** axes["log2_batch_x_kv_heads"][j]
        assert float(kernels.decode_attention_s("bf16", read, units)) == pytest.approx(decode[i][j] * 1e-6, rel=1e-9)
    axes = META["prefill_attention_axes"]
    prefill = system["prefill_attention"][backend]
    flops, units = 2.0 ** axes["log2_causal_flops"][10], 2.0 ** axes["log2_batch_x_heads"][5]
    assert float(kernels.prefill_attention_s(flops, units)) == pytest.approx(prefill[10][5] * 1e-6, rel=1e-9)
    nbytes = 2.0 ** META["allreduce_log2_bytes"][10]
    assert float(kernels.allreduce_s(np.array([nbytes]), 8)[0]) == pytest.approx(
        system["allreduce"]["8"][10] * 1e-6, rel=1e-9)


def test_gemm_time_is_flat_below_the_crossover_and_grows_with_m_beyond_it() -> None:
    """y = x W with 8192 x 8192 16-bit weights on an H100: below the roofline's crossover M* = peak FLOP/s over
    bandwidth (2 FLOPs per 2-byte weight and token; about 300) the call reads the weights, whatever M; well beyond
    it, twice the tokens take about twice the time and never beat the tensor peak."""
    kernels, peaks = gpu_kernels(resolve_gpu(H100), "vllm"), _system(H100)["peaks"]
    crossover = peaks["bf16_tflops"] * 1e12 / (peaks["mem_bw_gb_s"] * 1e9)
    small = np.array([m for m in META["gemm_m"] if m <= crossover / 8])
    large = np.array([m for m in META["gemm_m"] if m >= 4 * crossover])
    assert len(small) >= 3 and len(large) >= 3
    flat = kernels.gemm_s("bfloat16", small, 8192, 8192)
    assert flat.max() / flat.min() < 1.25
    grows = kernels.gemm_s("bfloat16", large, 8192, 8192)
    assert np.all((grows[1:] / grows[:-1] > 1.6) & (grows[1:] / grows[:-1] < 2.4))
    assert np.all(2.0 * large * 8192.0**2 / grows <= peaks["bf16_tflops"] * 1e12)


def test_fp8_gemms_beat_16_bit_ones_at_large_m_by_at_most_the_peaks_ratio() -> None:
    kernels = gpu_kernels(resolve_gpu(H100), "vllm")
    m = np.array([8192.0, 16384.0])
    fp8, bf16 = kernels.gemm_s("fp8", m, 8192, 8192), kernels.gemm_s("bfloat16", m, 8192, 8192)
    peaks = _system(H100)["peaks"]
    assert np.all(fp8 < 0.8 * bf16)
    assert np.all(fp8 >= bf16 * peaks["bf16_tflops"] / peaks["fp8_tflops"])


@pytest.mark.parametrize("gpu", [H100, "A100-SXM4-80GB"])
def test_weight_only_int4_beats_16_bit_at_one_token(gpu: str) -> None:
    """At M = 1 a call is its weight read: a quarter of the bytes is faster, on the A100's own int4 tables and on
    the H100, which borrows their cost relative to 16 bits."""
    kernels = gpu_kernels(resolve_gpu(gpu), "vllm")
    assert float(kernels.gemm_s("int4_wo", 1, 8192, 8192)) < 0.8 * float(kernels.gemm_s("bfloat16", 1, 8192, 8192))


@pytest.mark.parametrize("gpu", [H100, "H200-SXM-141GB", "A100-SXM4-80GB", "B200"])
def test_a_weight_read_at_one_token_stays_below_the_rated_bandwidth_inside_the_grid(gpu: str) -> None:
    spec = resolve_gpu(gpu)
    kernels = gpu_kernels(spec, "vllm")
    nk = np.array(META["gemm_nk"], dtype=float)
    n, k = np.meshgrid(nk, nk)
    for fmt, per_weight in (("bfloat16", 2.0), ("int4_wo", 0.5)):
        rate = per_weight * n * k / kernels.gemm_s(fmt, 1.0, n, k)
        assert rate.max() <= spec.memory_bandwidth_gb_s * 1e9, fmt


@pytest.mark.parametrize("gpu", ["H200-SXM-141GB", "B200"])
def test_a_weight_read_beyond_the_grid_stays_below_the_rated_bandwidth(gpu: str) -> None:
    spec = resolve_gpu(gpu)
    kernels = gpu_kernels(spec, "vllm")
    for fmt, per_weight in (("bfloat16", 2.0), ("fp8", 1.0), ("int4_wo", 0.5)):
        rate = per_weight * 262144 * 2304 / float(kernels.gemm_s(fmt, 1.0, 262144, 2304))
        assert rate <= spec.memory_bandwidth_gb_s * 1e9, fmt


# -- scaled: a profiled sibling's tables --------------------------------------------------------------------------


def test_a_scaled_sibling_reads_weights_at_its_bandwidth_and_computes_at_its_peak_above_the_calls_floor() -> None:
    """The A100 40GB reads the A100 80GB's tables: a call's floor (the table's smallest time) stays as it is, its
    weight read (the call at M = 1) takes longer by the ratio of their bandwidths, and what more tokens add (M =
    8192) as long (the same 312 TFLOPS); decode attention by the bandwidths, prefill attention by the tensor
    peaks."""
    small, big = resolve_gpu("A100-SXM4-40GB"), resolve_gpu("A100-SXM4-80GB")
    scaled, measured = gpu_kernels(small, "vllm"), gpu_kernels(big, "vllm")
    source = _system("A100-SXM4-80GB")["peaks"]
    assert small.kernel_tables == big.kernel_tables and kernel_basis(small).kind == "scaled"
    bandwidth_ratio = source["mem_bw_gb_s"] / small.memory_bandwidth_gb_s
    floor = min(v for plane in _system("A100-SXM4-80GB")["gemm"]["vllm"]["bfloat16"] for row in plane for v in row)
    floor *= 1e-6
    for n, k in ((8192, 8192), (4096, 14336)):
        got, base = float(scaled.gemm_s("bfloat16", 1, n, k)), float(measured.gemm_s("bfloat16", 1, n, k))
        assert got == pytest.approx(floor + (base - floor) * bandwidth_ratio, rel=1e-9)
        assert base < got < base * bandwidth_ratio
        read = base - floor
        base = float(measured.gemm_s("bfloat16", 8192, n, k))
        assert float(scaled.gemm_s("bfloat16", 8192, n, k)) == pytest.approx(
            base + read * (bandwidth_ratio - 1.0), rel=1e-9)
    assert small.fp16_tflops == source["bf16_tflops"]  # the same die: compute-bound calls take as long
    big_read = float(measured.decode_attention_s("bf16", 2.0**28, 512))
    assert big_read < float(scaled.decode_attention_s("bf16", 2.0**28, 512)) < big_read * bandwidth_ratio
    small_read = float(measured.decode_attention_s("bf16", 2.0**12, 1))
    assert float(scaled.decode_attention_s("bf16", 2.0**12, 1)) == pytest.approx(small_read, rel=0.05)
    assert float(scaled.prefill_attention_s(2.0**40, 64)) == pytest.approx(
        float(measured.prefill_attention_s(2.0**40, 64)), rel=1e-9)  # the same tensor peak


def _scaled_formats() -> list[tuple[str, str, str]]:
    """(GPU, engine, GEMM format) for every scaled GPU of the catalog, engine and format of a dense GEMM
    (`gemm_format`) its profiled GPU's tables hold (the engine's own backend's or another's on the same GPU)."""
    cases = []
    for gpu in load_gpu_catalog():
        if kernel_basis(gpu).kind != "scaled":
            continue
        formats = {fmt for tables in TABLES["systems"][gpu.kernel_tables]["gemm"].values() for fmt in tables
                   if fmt in WEIGHT_BYTES}
        cases += [(gpu.key, engine, fmt) for engine in ("vllm", "sglang", "tensorrt-llm") for fmt in sorted(formats)]
    return cases


@pytest.mark.parametrize(("gpu", "engine", "fmt"), _scaled_formats())
def test_a_scaled_gpus_call_of_more_tokens_is_never_faster(gpu: str, engine: str, fmt: str) -> None:
    """Every scaled GPU x engine x format its sibling measured, over M from 1 to beyond the grid: a call of more
    tokens never takes less time (the tables never do). Scaling each call by its own ratio of rooflines made the
    A100 40GB's weight-only int8 GEMM (FP8 on Ampere) take 34.4 us at M = 64 and 30.6 us at M = 128."""
    kernels = gpu_kernels(resolve_gpu(gpu), engine)
    m = np.geomspace(1.0, 32768.0, 121)
    nk = np.array([512.0, 2880.0, 4096.0, 14336.0, 131072.0])
    seconds = kernels.gemm_s(fmt, m[:, None, None], nk[None, :, None], nk[None, None, :])
    assert (np.diff(seconds, axis=0) >= -1e-15).all()


def _borrowed_formats() -> list[tuple[str, str, str]]:
    """(GPU, engine, GEMM format) for every catalog GPU with tables (measured or scaled) and every dense GEMM format
    its tables lack but another GPU's measured beside 16 bits: the calls `_borrowed_grid` serves."""
    cases = []
    for gpu in load_gpu_catalog():
        if kernel_basis(gpu).kind not in ("measured", "scaled"):
            continue
        own = {fmt for tables in TABLES["systems"][gpu.kernel_tables]["gemm"].values() for fmt in tables}
        cases += [(gpu.key, engine, fmt) for engine in ("vllm", "sglang", "tensorrt-llm")
                  for fmt in sorted(set(WEIGHT_BYTES) - own)]
    return cases


@pytest.mark.parametrize(("gpu", "engine", "fmt"), _borrowed_formats())
def test_a_borrowed_formats_call_of_more_tokens_is_never_faster(gpu: str, engine: str, fmt: str) -> None:
    """A format a GPU's tables lack (GPTQ, AWQ, INT8 on Hopper, Ada, Blackwell) takes its 16-bit time times the
    format's cost relative to 16 bits on the A100; over M from 1 to beyond the grid a call of more tokens never
    takes less time. Multiplying by the A100's ratio at each call made the H100's weight-only int4 call of 4096 x
    4096 take 20.3 us at M = 64 and 18.4 us at M = 128, the L40S's weight-only int8 one 71.0 and 60.9."""
    kernels = gpu_kernels(resolve_gpu(gpu), engine)
    m = np.geomspace(1.0, 32768.0, 121)
    nk = np.array([512.0, 2880.0, 4096.0, 14336.0, 131072.0])
    seconds = kernels.gemm_s(fmt, m[:, None, None], nk[None, :, None], nk[None, None, :])
    assert (np.diff(seconds, axis=0) >= -1e-15).all()


def test_borrowed_formats_have_one_donor_whatever_the_engine() -> None:
    """`_borrowed_grid` says every engine borrows the weight-only and INT8 formats' cost from the A100's TensorRT-LLM
    tables because no other table measured them beside 16 bits (vLLM's and SGLang's A100 tables hold 16 bits only):
    were an engine's own kernels measured in such a format, its ratio would be the better one to borrow."""
    donors = {(system, backend) for system, entry in TABLES["systems"].items()
              for backend, tables in entry["gemm"].items() if {"int4_wo", "int8_wo", "sq"} & set(tables)}
    assert donors == {(resolve_gpu("A100-SXM4-80GB").kernel_tables, "trtllm")}
    a100 = TABLES["systems"][resolve_gpu("A100-SXM4-80GB").kernel_tables]["gemm"]
    assert set(a100["vllm"]) == set(a100["sglang"]) == {"bfloat16"}


@pytest.mark.parametrize("gpu", [gpu.key for gpu in load_gpu_catalog()])
def test_a_gemm_of_a_larger_weight_is_never_faster(gpu: str) -> None:
    """Every catalog GPU, engine and dense GEMM format, at M from 1 to 16384 and N, K from 256 to beyond the grid: a
    larger N or K never takes less time. The derive step repairs the measured tables along M only; the B200's vLLM
    FP8 table took 59% less time at a larger N."""
    m = np.array([1.0, 8.0, 64.0, 200.0, 1024.0, 16384.0])
    nk = np.geomspace(256.0, 131072.0, 58)
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        kernels = gpu_kernels(resolve_gpu(gpu), engine)
        for fmt in WEIGHT_BYTES:
            seconds = kernels.gemm_s(fmt, m[:, None, None], nk[None, :, None], nk[None, None, :])
            assert (np.diff(seconds, axis=1) >= -1e-15).all(), (engine, fmt, "N")
            assert (np.diff(seconds, axis=2) >= -1e-15).all(), (engine, fmt, "K")


def test_less_bandwidth_at_the_same_peaks_is_never_faster() -> None:
    """The A100 40GB has the 80GB's 312 TFLOPS and less bandwidth: no call, and no step of gpt-oss-120b in FP8 (its
    experts as weight-only int8 GEMMs on Ampere), is faster on it. Until 2026-12-07 its cost of a routed token at
    prefill sizes came out 36% below the 80GB's and a prompt token of TP 1 21% cheaper."""
    small, big = resolve_gpu("A100-SXM4-40GB"), resolve_gpu("A100-SXM4-80GB")
    assert small.fp16_tflops == big.fp16_tflops and small.memory_bandwidth_gb_s < big.memory_bandwidth_gb_s
    m = np.geomspace(1.0, 32768.0, 121)
    nk = np.array([512.0, 2880.0, 4096.0, 14336.0, 131072.0])
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        for fmt in ("bfloat16", "int8_wo", "int4_wo", "sq"):
            slow, fast = (gpu_kernels(g, engine).gemm_s(fmt, m[:, None, None], nk[None, :, None], nk[None, None, :])
                          for g in (small, big))
            assert (slow >= fast * (1.0 - 1e-12)).all(), (engine, fmt)
    for tp in (1, 2, 4):
        slow_hw, fast_hw = (measured_hardware("openai/gpt-oss-120b", g, "fp8", tp=tp)
                            for g in ("A100-SXM4-40GB", "A100-SXM4-80GB"))
        # The same peaks: a routed token costs the same on both, up to rounding.
        assert slow_hw.expert_s_per_token >= fast_hw.expert_s_per_token * (1.0 - 1e-12)
        for tokens in (512, 4096, 16384):
            assert float(prompt_token_s(slow_hw, tokens)) >= float(prompt_token_s(fast_hw, tokens)) * (1.0 - 1e-12)


@pytest.mark.parametrize(("gpu", "engine"), [(gpu.key, engine) for gpu in load_gpu_catalog()
                                              for engine in ("vllm", "sglang", "tensorrt-llm")])
def test_prefill_attention_of_more_flops_is_never_faster(gpu: str, engine: str) -> None:
    """Every catalog GPU and engine, at each batch x heads from 1 to beyond the grid: more causal FLOPs never take
    less time. The fitted surfaces dipped at many batch x heads and few FLOPs: the H200's vLLM one at 4096 took
    39.5 us at 2^22 FLOPs and 37.6 us at 2^26."""
    kernels = gpu_kernels(resolve_gpu(gpu), engine)
    flops = 2.0 ** np.linspace(16.0, 52.0, 145)
    units = 2.0 ** np.arange(0.0, 14.5, 0.5)
    seconds = kernels.prefill_attention_s(flops[:, None], units[None, :])
    assert (np.diff(seconds, axis=0) >= -1e-15).all()


# -- published: the catalog's microbenchmarks ---------------------------------------------------------------------


def test_the_mi300x_runs_at_its_published_efficiencies() -> None:
    """No AIConfigurator profile: a roofline at the catalog's measured shares of its peaks. Differences of two calls
    in the same regime take out the per-call floor and leave the published rate alone."""
    gpu = resolve_gpu("MI300X")
    kernels, figures = gpu_kernels(gpu, "vllm"), _figures("MI300X")
    n = k = 8192.0

    def delta(fmt: str, m1: float, m2: float, n: float = n, k: float = k) -> float:
        return float(kernels.gemm_s(fmt, m2, n, k)) - float(kernels.gemm_s(fmt, m1, n, k))

    # Compute-bound: 8192 more tokens at the published GEMM efficiency of the format's peak.
    work = 2.0 * 8192 * n * k
    assert delta("bfloat16", 8192, 16384) == pytest.approx(
        work / (gpu.fp16_tflops * 1e12 * figures["gemm_bf16_efficiency"]), rel=1e-9)
    assert delta("fp8", 8192, 16384) == pytest.approx(
        work / (gpu.fp8_tflops * 1e12 * figures["gemm_fp8_efficiency"]), rel=1e-9)
    # Memory-bound (one token): twice the weights at the published streaming efficiency.
    stream = gpu.memory_bandwidth_gb_s * 1e9 * figures["hbm_stream_efficiency"]
    more = float(kernels.gemm_s("bfloat16", 1, n, 2 * k)) - float(kernels.gemm_s("bfloat16", 1, n, k))
    assert more == pytest.approx((2.0 * n * k + 2.0 * k) / stream, rel=1e-9)
    assert float(kernels.decode_attention_s("bf16", 2.0**31, 512) - kernels.decode_attention_s("bf16", 2.0**30, 512)) \
        == pytest.approx(2.0**30 / stream, rel=1e-9)
    attention = gpu.fp16_tflops * 1e12 * figures["prefill_attention_efficiency"]
    assert float(kernels.prefill_attention_s(2.0**41, 64) - kernels.prefill_attention_s(2.0**40, 64)) \
        == pytest.approx(2.0**40 / attention, rel=1e-9)
    # RCCL: the small-message latency plus the ring's bytes at the published bus bandwidth.
    for tp in (2, 8):
        nbytes = np.array([1024.0, 2.0**24])
        ring = 2.0 * (tp - 1) / tp * nbytes
        expected = figures["allreduce_latency_us"] * 1e-6 + ring / (figures["allreduce_busbw_gb_s"] * 1e9)
        assert kernels.allreduce_s(nbytes, tp) == pytest.approx(expected, rel=1e-9)


# -- typical: neither tables nor figures ---------------------------------------------------------------------------


def test_a_gpu_without_kernel_data_runs_at_the_profiled_gpus_typical_efficiencies() -> None:
    gpu = resolve_gpu("T4")
    kernels, typical = gpu_kernels(gpu, "vllm"), typical_efficiencies()
    assert set(typical) == {"stream", "gemm", "decode_attention", "prefill_attention"}
    assert all(0.3 < value <= 1.0 for value in typical.values()), typical
    n = k = 4096.0
    more = float(kernels.gemm_s("bfloat16", 1, n, 2 * k)) - float(kernels.gemm_s("bfloat16", 1, n, k))
    assert more == pytest.approx((2.0 * n * k + 2.0 * k) / (gpu.memory_bandwidth_gb_s * 1e9 * typical["stream"]),
                                 rel=1e-9)
    work = 2.0 * 8192 * n * k
    assert float(kernels.gemm_s("bfloat16", 16384, n, k) - kernels.gemm_s("bfloat16", 8192, n, k)) == pytest.approx(
        work / (gpu.fp16_tflops * 1e12 * typical["gemm"]), rel=1e-9)
    assert float(kernels.prefill_attention_s(2.0**41, 64) - kernels.prefill_attention_s(2.0**40, 64)) \
        == pytest.approx(2.0**40 / (gpu.fp16_tflops * 1e12 * typical["prefill_attention"]), rel=1e-9)


# -- collectives and attention ------------------------------------------------------------------------------------


def test_all_reduces_grow_with_bytes_and_are_none_where_nothing_covers_them() -> None:
    """Every catalog GPU and TP size: no all-reduce time (the link's rated figures are used instead), or one that
    never falls with the message and grows with it once bandwidth counts (from 1 MiB); the measured curves fell by
    up to 7% (the B300's at TP 4: 4.63 us at 2^12 bytes, 4.32 us at 2^14). A T4 pair over PCIe, an A100 PCIe (its
    SXM sibling's NVLink tables do not apply), an H100 NVL (NVLink at another speed) and an L40S (its table measured
    one PCIe box's topology) have none; one GPU needs none."""
    sizes = 2.0 ** np.arange(10.0, 30.25, 0.25)
    covered = 0
    for gpu in load_gpu_catalog():
        kernels = gpu_kernels(gpu, "vllm")
        assert np.all(kernels.allreduce_s(sizes, 1) == 0.0)
        for tp in (2, 4, 8):
            times = kernels.allreduce_s(sizes, tp)
            if times is None:
                continue
            covered += 1
            assert np.all(np.diff(times) >= -1e-15), (gpu.key, tp)
            assert np.all(np.diff(times[sizes >= 2.0**20]) > 0), (gpu.key, tp)
            assert times[-1] > 100 * times[0], (gpu.key, tp)
    assert covered >= 6
    for key in ("T4", "A100-PCIe-80GB", "H100-NVL-94GB", "L40S", "L40"):
        assert gpu_kernels(resolve_gpu(key), "vllm").allreduce_s(sizes, 2) is None, key
    assert gpu_kernels(resolve_gpu("GH200-96GB-HBM3"), "vllm").allreduce_s(sizes, 2) == pytest.approx(
        gpu_kernels(resolve_gpu(H100), "vllm").allreduce_s(sizes, 2))  # the H100's NVLink at the same speed


@pytest.mark.parametrize("gpu", [H100, "A100-SXM4-80GB", "L40S", "A100-SXM4-40GB", "MI300X", "T4"])
def test_decode_attention_grows_with_the_kv_it_reads(gpu: str) -> None:
    """Over a batch of 64 sequences of 8 KV heads: from 64 MiB of KV a layer reads, more bytes always take longer,
    at no more than the rated bandwidth beyond the floor; 1 GiB takes many times what 64 KiB does."""
    spec = resolve_gpu(gpu)
    kernels = gpu_kernels(spec, "vllm")
    read = 2.0 ** np.arange(26, 35)
    times = kernels.decode_attention_s("bf16", read, 512)
    assert np.all(np.diff(times) > 0)
    assert np.all(np.diff(read) / np.diff(times) <= spec.memory_bandwidth_gb_s * 1e9 * 1.05)
    assert float(kernels.decode_attention_s("bf16", 2.0**30, 512)) > 10 * float(
        kernels.decode_attention_s("bf16", 2.0**16, 512))


@pytest.mark.parametrize(("gpu", "engine"), [(gpu.key, engine) for gpu in load_gpu_catalog()
                                              for engine in ("vllm", "sglang", "tensorrt-llm")])
def test_decode_attention_of_more_kv_is_never_faster(gpu: str, engine: str) -> None:
    """Every catalog GPU, engine and KV dtype, at each batch x KV heads from 1 to beyond the grid: reading more KV
    bytes never takes less time. The fitted surfaces dipped along KV bytes, most on TensorRT-LLM's fp8 kernels: the
    B200's at 2048 batch x KV heads took 46.1 us at fewer bytes and 29.5 us at 2^26."""
    kernels = gpu_kernels(resolve_gpu(gpu), engine)
    read = 2.0 ** np.linspace(10.0, 38.0, 113)
    units = 2.0 ** np.arange(0.0, 15.5, 0.5)
    for kv in ("bf16", "fp8"):
        seconds = kernels.decode_attention_s(kv, read[:, None], units[None, :])
        assert (np.diff(seconds, axis=0) >= -1e-15).all(), kv


def test_a_gpu_without_fp8_tensor_cores_never_beats_its_16_bit_peak_with_fp8_weights() -> None:
    gpu = resolve_gpu("A100-SXM4-80GB")
    assert gpu.fp8_tflops is None
    kernels = gpu_kernels(gpu, "vllm")
    fmt = gemm_format(weight_precision("fp8"), gpu)
    assert fmt == "int8_wo"  # FP8 weights with 16-bit math (FP8 Marlin), as vLLM runs them on Ampere
    m = np.array([512.0, 1024.0, 2048.0, 8192.0])
    assert np.all(2.0 * m * 8192.0**2 / kernels.gemm_s(fmt, m, 8192, 8192) <= gpu.fp16_tflops * 1e12)


def test_fp4_formats_run_on_fp4_tensor_cores_only_where_the_gpu_has_them() -> None:
    # NVFP4 and Quark's MXFP4 are W4A4 on Blackwell and CDNA 4; on Hopper vLLM dequantises NVFP4 (FP4 Marlin), a
    # 4-bit weight-only kernel.
    nvfp4, quark = weight_precision("nvfp4"), weight_precision("mxfp4-w4a4")
    assert gemm_format(nvfp4, resolve_gpu("NVIDIA-B200")) == "nvfp4"
    assert gemm_format(nvfp4, resolve_gpu("NVIDIA-H100-80GB-HBM3")) == "int4_wo"
    assert gemm_format(quark, resolve_gpu("MI355X")) == "nvfp4"
    assert gemm_format(quark, resolve_gpu("MI300X")) == "int4_wo"
    # gpt-oss's MXFP4 experts are weight-only with 16-bit activations even there (vLLM's and SGLang's MXFP4 MoE
    # on ROCm: the triton kernels' w4a16 path).
    assert gemm_format(weight_precision("mxfp4"), resolve_gpu("MI355X")) == "int4_wo"


def test_fp4_gemms_use_the_fp4_peak_where_the_catalog_states_one() -> None:
    # MI355X rests on published figures: a compute-bound FP4 GEMM runs at its MXFP4 peak times the FP8 GEMM
    # efficiency measured on it (no FP4 efficiency is published), twice as fast as the same GEMM in FP8.
    mi355x = resolve_gpu("MI355X")
    kernels = gpu_kernels(mi355x, "vllm")
    efficiency = dict(mi355x.kernel_figures)["gemm_fp8_efficiency"]
    size = 16384.0
    fp4 = float(kernels.gemm_s("nvfp4", size, size, size))
    assert fp4 == pytest.approx(2.0 * size**3 / (mi355x.fp4_tflops * 1e12 * efficiency), rel=0.01)
    assert float(kernels.gemm_s("fp8", size, size, size)) == pytest.approx(2.0 * fp4, rel=0.01)


# -- MLA: DeepSeek's latent attention, by query heads a GPU -------------------------------------------------------


@pytest.mark.parametrize("gpu", [H100, "H200-SXM-141GB", "B200", "GB200-NVL72"])
def test_mla_tables_cover_the_hopper_and_blackwell_gpus_and_never_charge_fewer_heads_more(gpu: str) -> None:
    """Every engine on a profiled Hopper or Blackwell GPU reads a measured MLA decode time per sequence and context
    token and a measured MLA prefill rate; fewer heads never cost more in decode (a padded call runs in the larger
    count's time), and no decode time reads the 576-element latent faster than the GPU's HBM allows."""
    spec = resolve_gpu(gpu)
    heads = 2.0 ** np.arange(8)
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        kernels = gpu_kernels(spec, engine)
        for kv, kv_bytes in (("bf16", 2.0), ("fp8", 1.0)):
            seconds = kernels.mla_decode_s_per_pair(kv, heads)
            assert seconds is not None and np.all(np.diff(seconds) >= 0)
            assert np.all(576 * kv_bytes / seconds <= spec.memory_bandwidth_gb_s * 1e9)
        rate = kernels.mla_prefill_flops_s(heads)
        assert rate is not None and np.all((rate > 0) & (rate < spec.fp16_tflops * 1e12))


def test_mla_tables_scale_to_a_sibling_and_are_absent_where_nothing_profiled_mla() -> None:
    """The H200 NVL reads the H200 SXM's MLA tables at the ratio of their bandwidths (decode) and of their 16-bit
    peaks (prefill); vLLM reads TensorRT-LLM's (its MLA kernels are not profiled apart from their projections), as
    does a backend without the KV dtype's table; the MI300X has no MLA table (the caller estimates)."""
    sxm, nvl = resolve_gpu("H200-SXM-141GB"), resolve_gpu("H200-NVL-141GB")
    assert nvl.kernel_tables == sxm.kernel_tables and kernel_basis(nvl).kind == "scaled"
    peaks = _system("H200-SXM-141GB")["peaks"]
    measured, scaled = gpu_kernels(sxm, "sglang"), gpu_kernels(nvl, "sglang")
    assert float(scaled.mla_decode_s_per_pair("bf16", 16)) == pytest.approx(
        float(measured.mla_decode_s_per_pair("bf16", 16)) * peaks["mem_bw_gb_s"] / nvl.memory_bandwidth_gb_s)
    assert float(scaled.mla_prefill_flops_s(16)) == pytest.approx(
        float(measured.mla_prefill_flops_s(16)) * nvl.fp16_tflops / peaks["bf16_tflops"])
    table = _system("H200-SXM-141GB")["mla_decode"]
    assert "vllm" not in table
    assert float(gpu_kernels(sxm, "vllm").mla_decode_s_per_pair("fp8", 16)) == pytest.approx(
        table["trtllm"]["fp8"][4] * 1e-9)
    # A backend without the KV dtype's table (SGLang's fp8 on the L40S) reads the next backend's that has it.
    l40s = _system("L40S")["mla_decode"]
    assert "fp8" not in l40s["sglang"]
    assert float(gpu_kernels(resolve_gpu("L40S"), "sglang").mla_decode_s_per_pair("fp8", 16)) == pytest.approx(
        l40s["trtllm"]["fp8"][4] * 1e-9)
    amd = gpu_kernels(resolve_gpu("MI300X"), "vllm")
    assert amd.mla_decode_s_per_pair("bf16", 16) is None and amd.mla_prefill_flops_s(16) is None


def test_derive_script_writes_nothing_from_a_package_without_its_measured_data(tmp_path: Any,
                                                                                capsys: pytest.CaptureFixture[str]
                                                                                ) -> None:
    """A wheel unzipped without systems/data/ gave kernel tables of no systems, written over the shipped ones with
    exit status 0; the script now refuses it. Runs without pandas (the refusal comes first)."""
    import runpy

    script = runpy.run_path(str(Path(__file__).resolve().parents[3] / "scripts" / "derive_kernel_tables.py"))
    systems = tmp_path / "aiconfigurator_core" / "systems"
    systems.mkdir(parents=True)
    for name in script["SYSTEMS"]:
        (systems / f"{name}.yaml").write_text("gpu: {}\n")
    out = tmp_path / "kernels"
    assert script["main"](["--aic-dir", str(tmp_path), "--out", str(out)]) == 2
    assert not out.exists()
    assert "holds no measured data for a100_sxm" in capsys.readouterr().err


def test_the_derive_script_writes_the_layout_the_planner_reads(tmp_path: Path) -> None:
    """`write_tables` is how the derive script writes the tables: the shipped folder's content written again is the
    same bytes, one file per system and meta.json naming them, and nothing else in the folder (a file meta.json does
    not name would never be read)."""
    import runpy

    script = runpy.run_path(str(Path(__file__).resolve().parents[3] / "scripts" / "derive_kernel_tables.py"))
    shipped = Path(str(resources.files("inferplan.planner").joinpath("data/kernels")))
    tables = {"meta": {k: v for k, v in META.items() if k != "systems"}, "systems": TABLES["systems"]}
    script["write_tables"](tables, tmp_path)
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in tmp_path.iterdir()) \
        == sorted(["meta.json", *(f"{name}.json" for name in META["systems"])])
    for written in tmp_path.iterdir():
        assert written.read_bytes() == (shipped / written.name).read_bytes(), written.name
    assert profiled_systems() == tuple(META["systems"]) and system_tables("no_such_system") is None


def test_shipped_tables_name_the_package_version_the_script_derives_from() -> None:
    import runpy

    script = runpy.run_path(str(Path(__file__).resolve().parents[3] / "scripts" / "derive_kernel_tables.py"))
    meta = META
    assert meta["source"] == script["SOURCE"] and f"aiconfigurator-core {script['AIC_VERSION']} " in meta["source"]


# Bytes per weight of the MoE tables' formats (scripts/derive_kernel_tables.py MOE_DTYPES) and the routings of the
# shapes they measured: the layer time below is what `performance.moe_step_s` charges a layer of those experts.
MOE_BYTES_PER_WEIGHT = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int4_wo": 0.5 + 2.0 / 128,
                        "w4a16_mxfp4": 0.5 + 1.0 / 32, "nvfp4": 0.5 + 1.0 / 16}
MOE_ROUTINGS = ((8, 2), (16, 1), (32, 4), (128, 1), (128, 4), (128, 6), (128, 8), (160, 8), (256, 6), (256, 8),
                (384, 6), (384, 8), (512, 10), (512, 22), (896, 16))


@pytest.mark.parametrize("system", sorted(TABLES["systems"]))
def test_a_fused_moe_layer_of_larger_experts_never_runs_faster(system: str) -> None:
    """The bins' medians of the fused-MoE tables gave a layer of larger experts up to 3x less time than one of
    smaller experts at the same routing and tokens (GB200 and B300 under vLLM in FP8: 2^19-byte experts at 0.32x the
    time of 2^18-byte ones at 8 to 64 tokens; H100 vLLM bf16 0.82x). A smaller expert can run a larger one's kernels
    on padded weights: on each profiled GPU, at every bin, routing and token count, the layer (as
    `GpuKernels.moe_layer` reads the figures on that GPU's peaks) takes no less time for more bytes, up to the
    tables' 4-digit rounding."""
    tables = TABLES["systems"][system]
    peaks = tables["peaks"]
    axis = np.asarray(META["moe_shard_log2_bytes"], float)
    experts, topk = (np.array([r[i] for r in MOE_ROUTINGS], float)[:, None, None] for i in (0, 1))
    tokens = np.array([1.0, 8.0, 64.0, 512.0, 4096.0])[None, :, None]
    shard = 2.0 ** axis[None, None, :]
    checked = 0
    for backend, formats in tables["moe"].items():
        for fmt in formats:
            figures = np.array([_moe_shares(system, backend, (fmt,), float(2.0**b), None)[1:] for b in axis]).T
            kind = MOE_PEAK_OF[fmt]
            peak = (peaks.get(f"{kind}_tflops") or peaks.get("fp8_tflops") or peaks["bf16_tflops"]) * 1e12
            floor, bandwidth, flops = (figures[0] * 1e-6, np.minimum(figures[1], 1.0) * peaks["mem_bw_gb_s"] * 1e9,
                                       figures[2] * peak)
            touched = experts * (1.0 - (1.0 - topk / experts) ** tokens)
            seconds = (floor + touched * shard / bandwidth
                       + tokens * topk * 2.0 * shard / MOE_BYTES_PER_WEIGHT[fmt] / flops)
            ratio = seconds[..., 1:] / seconds[..., :-1]
            worst = np.unravel_index(np.argmin(ratio), ratio.shape)
            assert ratio.min() >= 1.0 - 1e-3, (
                f"{system} {backend} {fmt}: 2^{axis[worst[2] + 1]:.0f}-byte experts take {ratio.min():.2f}x the time "
                f"of 2^{axis[worst[2]]:.0f}-byte ones ({MOE_ROUTINGS[worst[0]]}, {tokens.flat[worst[1]]:.0f} tokens)")
            checked += 1
    assert checked


def test_every_profiled_system_has_an_architecture_and_each_catalog_gpu_one_the_engines_choose_kernels_for() -> None:
    """A system the kernel tables gain without an architecture would join no kernel's group of stand-ins."""
    assert set(SYSTEM_ARCH) == set(TABLES["systems"])
    archs = {gpu.key: gpu_arch(gpu) for gpu in load_gpu_catalog()}
    assert (archs["A10G"], archs["L4"], archs["H20-96GB"], archs["B200"], archs["GB200-NVL72"], archs["RTX-5090"],
            archs["MI355X"], archs["T4"]) == ("sm80", "sm89", "sm90", "sm100", "sm100", "sm120", "rocm", "sm75")
    for kernels in MXFP4_MOE_KERNELS.values():
        assert set(SYSTEM_ARCH.values()) <= set(kernels), kernels


@pytest.mark.parametrize(("engine", "gpu", "kernel"), [
    ("sglang", "A100-SXM4-80GB", "triton"), ("sglang", "A10G", "triton"), ("sglang", "MI300X", "triton"),
    ("vllm", "A100-SXM4-80GB", "marlin"), ("vllm", "MI355X", "triton"),
])
def test_gpt_oss_experts_without_their_own_table_read_the_gpus_that_ran_the_same_kernel(engine: str, gpu: str,
                                                                                         kernel: str) -> None:
    """No table measured gpt-oss's MXFP4 experts on the A100 (nor its GA102 siblings) or on AMD GPUs. The engines
    pick their MXFP4 MoE kernel by architecture (SGLang 0.5.5: FlashInfer's on Blackwell, the triton kernels
    elsewhere; vLLM 0.11: Marlin below Hopper, the triton kernels on Hopper, SM120 and ROCm), and the profiled GPUs
    that ran that kernel stand in: until 2026-12-06 the median over every profiled GPU did, four of seven Blackwell
    ones under SGLang, and an A100 read SGLang's experts at 0.52 of its bandwidth where the triton kernels reach 0.22
    on the H100 and H200 (gpt-oss-20b: TPOT 15.5 ms at 16 clients, the H100's 16.7 ms)."""
    spec = resolve_gpu(gpu)
    backend = BACKEND_OF_ENGINE[engine]
    formats = moe_formats(weight_precision("mxfp4"), spec, engine)
    expert = 2880.0 * 2880.0 * 3.0 * MOE_BYTES_PER_WEIGHT["w4a16_mxfp4"]
    shape = "2880x2880x32x4/tp1"
    same = [s for s, arch in SYSTEM_ARCH.items() if MXFP4_MOE_KERNELS[backend][arch] == kernel]
    figures = [f for s in same if (f := _moe_shares(s, backend, formats, expert, shape)) is not None]
    assert figures and len(figures) < len(SYSTEM_ARCH) - 1  # a kernel's group, not every profiled GPU
    floor, bandwidth, _ = gpu_kernels(spec, engine).moe_layer(formats, expert, shape)
    assert floor == pytest.approx(np.median([f[1] for f in figures]) * 1e-6, rel=1e-12)
    assert bandwidth == pytest.approx(
        min(float(np.median([f[2] for f in figures])), 1.0) * spec.memory_bandwidth_gb_s * 1e9, rel=1e-12)


def test_sglang_serves_gpt_oss_no_faster_on_an_a100_than_on_an_h100() -> None:
    """The A100 has neither the H100's bandwidth nor other kernels under SGLang: the same MoE layer of gpt-oss-20b
    experts takes it at least as long, at every batch the search tries."""
    expert, shape = 2880.0 * 2880.0 * 3.0 * MOE_BYTES_PER_WEIGHT["w4a16_mxfp4"], "2880x2880x32x4/tp1"
    seconds = {}
    for gpu in ("A100-SXM4-80GB", "H100-SXM5-80GB"):
        spec = resolve_gpu(gpu)
        floor, bandwidth, flops = gpu_kernels(spec, "sglang").moe_layer(
            moe_formats(weight_precision("mxfp4"), spec, "sglang"), expert, shape)
        tokens = np.array([1.0, 4.0, 16.0, 64.0, 256.0, 1024.0])
        touched = 32.0 * (1.0 - (1.0 - 4.0 / 32.0) ** tokens)
        seconds[gpu] = floor + touched * expert / bandwidth + tokens * 4.0 * 2.0 * 2880.0 * 2880.0 * 3.0 / flops
    assert np.all(seconds["A100-SXM4-80GB"] >= seconds["H100-SXM5-80GB"]), seconds


def test_vllms_fp8_experts_on_an_a100_cost_between_its_awq_and_its_16_bit_ones() -> None:
    """vLLM runs FP8 experts below SM89 through Marlin's fused MoE (16-bit math, `fused_marlin_moe`), the kernel of its
    AWQ experts: a fused layer with its floor, whose read grows with the bytes. Until 2026-12-06 they ran as dense GEMM
    calls without one, and Qwen3-30B-A3B in FP8 decoded a sequence alone in 6.4 ms on an A100, faster than in AWQ (7.3
    ms), where it now takes 7.9 ms (bf16 8.1 ms)."""
    a100 = resolve_gpu("A100-SXM4-80GB")
    kernels = gpu_kernels(a100, "vllm")
    weights = 2048.0 * 768.0 * 3.0  # one Qwen3-30B-A3B expert at TP 1
    shape = "2048x768x128x8/tp1"
    seconds = {}
    for name in ("int4-awq", "fp8", "bf16"):
        precision = weight_precision(name)
        floor, bandwidth, _ = kernels.moe_layer(moe_formats(precision, a100, "vllm"),
                                                weights * precision.bytes_per_param, shape)
        seconds[name] = floor + 8.0 * weights * precision.bytes_per_param / bandwidth  # one token, eight experts
    assert seconds["int4-awq"] < seconds["fp8"] < seconds["bf16"], seconds
