"""Per-operator kernel times on one GPU, from measurements: what a step of the model costs before any engine.

Every figure here is a latency of one kernel call on one GPU [s], looked up where it was measured:

- **measured**: NVIDIA GPUs that NVIDIA AIConfigurator profiled (`data/kernels/`, one file per system, derived from
  `aiconfigurator-core` 0.12.0 by `scripts/derive_kernel_tables.py`; Apache-2.0, attribution in NOTICE). GEMM by
  M x N x K and weight format, decode attention by KV bytes read and batch x KV heads (MLA's by query heads, per
  sequence and context token), prefill attention by causal FLOPs and batch x heads (MLA's rate by query heads),
  all-reduce by bytes and GPUs, each under the kernels of the engine's backend (vLLM, SGLang or TensorRT-LLM).
- **scaled**: a GPU of the same die or architecture as a profiled one (A100 40GB and PCIe, H100 PCIe/NVL, GH200,
  H200 NVL, the Ada and GA102 cards): the profiled GPU's latencies above their floor times the ratio of the two GPUs'
  roofline times for the same call, or, where the GPU's bandwidth falls further short than its peak, the weight read
  at the ratio of the bandwidths and the rest at that of the peaks (`GpuKernels._scaled_gemm`; `GpuSpec.kernel_tables`
  names the profiled system, the catalog says why).
- **published**: GPUs without profiles but with published microbenchmarks in the GPU catalog (AMD Instinct: GEMM
  throughput, STREAM bandwidth, RCCL all-reduce, flash attention): a roofline at those measured efficiencies, with
  each call's floor.
- **typical**: neither (T4): the roofline at the median efficiency the profiled GPUs reach, which the plan states.

A fused MoE layer that no table of a GPU measured (published and typical GPUs, a format a GPU's tables lack) takes
the profiled GPUs' median fused-MoE floor and shares of bandwidth and peak (`GpuKernels.moe_layer`); for gpt-oss's
MXFP4 experts those of the profiled GPUs that ran the kernel the engine picks on the GPU's architecture.

Nothing here is fitted to serving runs; `inferplan.planner.model.performance` sums these per step, and the fit
(`calibrate`) touches only engine terms on top of them. Times broadcast over numpy arrays.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.catalog.gpus import FP4_FAMILIES, GpuSpec
from inferplan.planner.catalog.precisions import WeightPrecision

FloatArray = NDArray[np.float64]

# The engine backends the tables hold; every engine runs on the kernels of one of them.
BACKEND_OF_ENGINE = {
    "vllm": "vllm",
    "sglang": "sglang",
    "tensorrt-llm": "trtllm",
    "tgi": "vllm",        # flash-attention / flashinfer and cuBLAS, as vLLM
    "lmdeploy": "trtllm",  # TurboMind grew out of FasterTransformer, TensorRT-LLM's ancestor
    "mlc-llm": "vllm",    # own decode kernels (the engine's `sm_stream_gb_s`), cuBLAS-class GEMMs otherwise
    "llama.cpp": "vllm",
    "exllama": "vllm",
}
BACKENDS = ("vllm", "sglang", "trtllm")

# Smallest time of one elementwise kernel (RMSNorm, rotary embedding, activation): the constant latency
# AIConfigurator's system files charge every memory-bound op (`mem_empirical_constant_latency`, 3 us), a modelling
# constant of its authors, not a measurement. Four such kernels run per layer and step.
ELEMENTWISE_FLOOR_S = 3e-6
ELEMENTWISE_KERNELS_PER_LAYER = 4
# Floor of one GEMM or attention call where nothing was measured (AMD, typical): the median smallest call of the
# profiled NVIDIA GPUs' GEMM tables is 3-5 us, their decode attention's about 10 us (data/kernels/).
UNMEASURED_GEMM_FLOOR_S = 4e-6
UNMEASURED_ATTENTION_FLOOR_S = 10e-6
# The latent the MLA tables were measured on (DeepSeek-V3's kv_lora_rank 512 + qk_rope_head_dim 64): a model with
# another latent reads its tables in proportion to its own (`performance._mla_terms`).
MLA_TABLE_LATENT = 512 + 64


@dataclass(frozen=True)
class KernelBasis:
    """What one GPU's kernel times rest on, in words a plan can print."""

    kind: str              # "measured" | "scaled" | "published" | "typical"
    system: str | None     # the profiled system whose tables are read (measured, scaled)
    note: str


def _tables_file(name: str) -> dict[str, Any]:
    text = resources.files("inferplan.planner").joinpath(f"data/kernels/{name}.json").read_text(encoding="ascii")
    return json.loads(text)


@cache
def kernel_meta() -> dict[str, Any]:
    """What every profiled system's tables share (`data/kernels/meta.json`): the axes, the units, the source, and
    `systems`, the profiled systems' names in the order of their files."""
    return _tables_file("meta")


def profiled_systems() -> tuple[str, ...]:
    """The profiled systems (AIConfigurator's names: "h100_sxm"), without reading their tables."""
    return tuple(kernel_meta()["systems"])


@cache
def system_tables(system: str) -> dict[str, Any] | None:
    """One profiled system's tables (`data/kernels/<system>.json`: its peaks, GEMM, attention, all-reduce and
    fused-MoE tables), None for a system the tables do not hold. Each system is a file of its own, read when a plan
    first needs it: a plan of one or two GPU types reads 0.1-0.2 MB of the 0.7 MB (about 2.5 ms of CPU each, where
    all eight took 30-40 ms in one `inferplan plan` process, 2026-12-07)."""
    return _tables_file(system) if system in kernel_meta()["systems"] else None


def gemm_format(precision: WeightPrecision, gpu: GpuSpec) -> str:
    """The kernel table that serves a precision's linear layers: 16-bit, FP8 (per tensor), INT8 W8A8 (`sq`), NVFP4,
    or a weight-only kernel of 4 or 8 bits (GPTQ, AWQ, gpt-oss's MXFP4 experts, GGUF and MLC formats).

    gpt-oss's MXFP4 experts are weight-only on every GPU, FP4 tensor cores or not (its other weights are 16-bit):
    vLLM's default MXFP4 MoE backends multiply them with 16-bit activations (Marlin below Hopper, FlashInfer's
    MXFP4 x BF16 on Blackwell, the triton kernels with `mxfp4_w4a16_moe_quant_config` on ROCm, CDNA 4 included;
    `quantization/mxfp4.py` of the 0.11.0 wheel) and SGLang on ROCm runs them through the same triton kernels or
    upcast to bf16 (0.5.5.post1). Where a fused-MoE table measured them (`moe_formats`: `w4a16_mxfp4`) that table
    serves them; this format is the GEMM tables' stand-in elsewhere."""
    if precision.compute == "fp4":
        # W4A4 (NVFP4, Quark MXFP4) on FP4 tensor cores; elsewhere an engine that runs the format dequantises the
        # weights to 16-bit math (vLLM's FP4 Marlin kernels), a weight-only kernel of 4 bits.
        return "nvfp4" if gpu.family in FP4_FAMILIES else "int4_wo"
    # An 8-bit format on a GPU without 8-bit tensor cores of that kind (FP8 on Ampere) runs as a weight-only
    # kernel with 16-bit math (vLLM's FP8 Marlin).
    if precision.compute == "fp8":
        return "fp8" if gpu.fp8_tflops else "int8_wo"
    if precision.compute == "int8":
        return "sq" if gpu.int8_tops else "int8_wo"
    bits = precision.bits_per_param
    if bits >= 12:
        return "bfloat16"
    return "int8_wo" if bits > 6 else "int4_wo"


# The kernel each engine multiplies gpt-oss's MXFP4 experts with, by GPU architecture: where a GPU's tables lack them,
# the profiled GPUs that ran the same kernel stand in for it (`_typical_moe`), not those of another kernel. vLLM 0.11
# (`get_mxfp4_backend`, model_executor/layers/quantization/mxfp4.py of the 0.11.0 wheel): FlashInfer on SM100, Marlin
# below SM90, the triton kernels on SM90, SM120 and ROCm. SGLang 0.5.5.post1 (`ServerArgs`, GptOssForCausalLM's
# moe_runner_backend "auto"): FlashInfer's MXFP4 MoE on Blackwell (SM100 and SM120), the triton kernels elsewhere.
MXFP4_MOE_KERNELS = {
    "vllm": {"sm80": "marlin", "sm89": "marlin", "sm90": "triton", "sm100": "flashinfer", "sm120": "triton",
             "rocm": "triton"},
    "sglang": {"sm80": "triton", "sm89": "triton", "sm90": "triton", "sm100": "flashinfer", "sm120": "flashinfer",
               "rocm": "triton"},
}
# The architecture of each profiled system of data/kernels/.
SYSTEM_ARCH = {"a100_sxm": "sm80", "l40s": "sm89", "h100_sxm": "sm90", "h200_sxm": "sm90", "b200_sxm": "sm100",
               "b300_sxm": "sm100", "gb200": "sm100", "rtx_pro_6000_server": "sm120"}
_FAMILY_ARCH = {"turing": "sm75", "ampere": "sm80", "ada": "sm89", "hopper": "sm90"}


def gpu_arch(gpu: GpuSpec) -> str:
    """The architecture whose kernels an engine picks on `gpu`: "sm75" to "sm120" for NVIDIA (a Blackwell data-centre
    GPU SM100, a workstation or consumer one SM120), "rocm" for AMD."""
    if gpu.vendor == "amd":
        return "rocm"
    if gpu.family in _FAMILY_ARCH:
        return _FAMILY_ARCH[gpu.family]
    return "sm100" if gpu.segment == "datacenter" else "sm120"


# What each AIConfigurator MoE dtype's compute share is of (`moe` in data/kernels/): 16-bit math for the
# weight-only formats.
MOE_PEAK_OF = {"bfloat16": "bf16", "int4_wo": "bf16", "w4a16_mxfp4": "bf16", "fp8": "fp8", "fp8_block": "fp8",
               "nvfp4": "fp4"}


def moe_formats(precision: WeightPrecision, gpu: GpuSpec, engine: str = "vllm") -> tuple[str, ...]:
    """The measured fused-MoE tables that can serve `precision`'s experts on `gpu` under `engine`, in order of
    preference: FP8 block scales first (the MoE FP8 checkpoints, Qwen3 and DeepSeek, use them), per-tensor first on
    TensorRT-LLM's kernels (its ModelOpt checkpoints are per-tensor), FP4 W4A4 only on FP4 tensor cores,
    gpt-oss's MXFP4 as weight-only MXFP4 (Marlin, triton), AWQ/GPTQ as 4-bit weight-only, vLLM's FP8 below SM89 as
    its weight-only kernel (Marlin); none for INT8 W8A8, nor for other engines' FP8 without FP8 tensor cores."""
    if precision.compute == "fp4":
        return ("nvfp4",) if gpu.family in FP4_FAMILIES else ("int4_wo",)
    if precision.name == "mxfp4":
        return ("w4a16_mxfp4",)
    if precision.compute == "fp8":
        if not gpu.fp8_tflops:
            # vLLM runs FP8 experts below SM89 through Marlin's fused MoE with 16-bit math (`Fp8MoEMethod.use_marlin`,
            # `fused_marlin_moe`; quantization/fp8.py of the 0.11.0 wheel), the kernel of its AWQ and GPTQ experts.
            return ("int4_wo",) if engine == "vllm" and gpu.vendor == "nvidia" else ()
        return ("fp8", "fp8_block") if BACKEND_OF_ENGINE.get(engine) == "trtllm" else ("fp8_block", "fp8")
    if precision.compute == "int8":
        return ()
    if precision.bits_per_param >= 12:
        return ("bfloat16",)
    return ("int4_wo",) if precision.bits_per_param < 5 else ()


def _log_axis(grid: FloatArray, x: FloatArray, base: float = math.e) -> tuple[NDArray[np.intp], FloatArray, FloatArray]:
    """Cell index and weight of `x` on a sorted axis of logarithms to `base`, and the factor beyond its last node:
    below the first node the weight is 0 (clamped); above the last it is 1 and the factor base^(x - last) > 1 (a
    call larger than any measured is bound by its size: the edge's time grows in proportion)."""
    position = np.interp(x, grid, _node_indices(len(grid)))  # fractional node index, clamped at both ends
    idx = np.minimum(position.astype(np.intp), len(grid) - 2)
    return idx, position - idx, base ** np.maximum(x - grid[-1], 0.0)


@cache
def _node_indices(nodes: int) -> FloatArray:
    """0, 1, ..., nodes - 1 as floats: the positions `_log_axis` interpolates (an axis has one of a few lengths)."""
    indices = np.arange(nodes, dtype=float)
    indices.flags.writeable = False
    return indices


def _never_faster_when_larger(grid: FloatArray, *axes: int) -> FloatArray:
    """`grid` with each node along each of `axes` at most the shortest time of the nodes beyond it (a suffix
    minimum): a smaller call can always run a larger one's kernel on padding, so it is never slower. A suffix
    minimum along one axis keeps a grid monotone along the others, and interpolated the grid stays monotone."""
    for axis in axes:
        grid = np.flip(np.minimum.accumulate(np.flip(grid, axis), axis=axis), axis)
    return grid


@lru_cache(maxsize=256)
def _gemm_grid(system: str, backend: str, fmt: str) -> FloatArray | None:
    """The measured log-time grid of (system, backend, fmt) (M x N x K), never faster for a larger call along any
    axis. `scripts/derive_kernel_tables.py` repairs M as it writes the tables; N and K are repaired here, where a
    table times a larger weight shorter (B200 vLLM FP8: 59% shorter at a larger N)."""
    table = (system_tables(system) or {}).get("gemm", {}).get(backend, {}).get(fmt)
    if table is None:
        return None
    grid = _never_faster_when_larger(np.log(np.asarray(table, dtype=float) * 1e-6), 0, 1, 2)
    grid.flags.writeable = False  # shared by every caller
    return grid


@lru_cache(maxsize=256)
def _borrowed_grid(system: str, backend: str, fmt: str) -> FloatArray | None:
    """The log-time grid of a format that `system`'s tables lack (GPTQ, AWQ and INT8 on Hopper, Ada, Blackwell):
    `backend`'s 16-bit grid times what the format costs relative to 16 bits on the first GPU whose tables measured
    both (weight-only and INT8 on the A100's TensorRT-LLM tables; FP8 and NVFP4 on Hopper and Blackwell), so a GPU
    keeps its own 16-bit kernels and borrows only the format's relative cost, against the donor's 16-bit kernels of
    the same backend (one kernel family's ratio). vLLM's and SGLang's engines borrow TensorRT-LLM's ratio: their own
    A100 tables (aiconfigurator-core 0.12.0) measured 16 bits only. None where no GPU measured both.

    The borrowed ratio falls with M where the other GPU's 16-bit call turns compute-bound before this one's does; a
    call of more tokens is never faster, so each node takes the largest time of the nodes of fewer tokens (a prefix
    maximum along M; interpolated, the grid stays monotone between nodes), and along N and K, as a measured grid,
    the shortest of the larger calls' (`_never_faster_when_larger`). Until 2026-12-07 each call took the
    ratio at its own M: the H100's weight-only int4 call of 4096 x 4096 took 20.3 us at M = 64 and 18.4 us at
    M = 128, the L40S's weight-only int8 one 71.0 and 60.9."""
    own = _gemm_grid(system, backend, "bfloat16")
    if own is None:
        return None
    for donor in profiled_systems():
        for donor_backend in BACKENDS:
            measured, sixteen = _gemm_grid(donor, donor_backend, fmt), _gemm_grid(donor, donor_backend, "bfloat16")
            if measured is not None and sixteen is not None:
                grid = _never_faster_when_larger(np.maximum.accumulate(own + measured - sixteen, axis=0), 1, 2)
                grid.flags.writeable = False  # shared by every caller
                return grid
    return None


def _grid(system: str, backend: str, fmt: str) -> FloatArray | None:
    """The measured log-time grid of (system, backend, fmt), else the borrowed one (`_borrowed_grid`)."""
    measured = _gemm_grid(system, backend, fmt)
    return measured if measured is not None else _borrowed_grid(system, backend, fmt)


@cache
def _gemm_axes() -> tuple[FloatArray, FloatArray]:
    meta = kernel_meta()
    return np.log(np.asarray(meta["gemm_m"], float)), np.log(np.asarray(meta["gemm_nk"], float))


def _trilinear(grid: FloatArray, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> FloatArray:
    """The log-time `grid` (M x N x K) interpolated linearly in log M, log N and log K at (m, n, k), as seconds;
    beyond the last node of an axis in proportion to the size (`_log_axis`)."""
    axis_m, axis_nk = _gemm_axes()
    # Each axis is placed on its own values and only the corners and weights broadcast: a GEMM call's M is shared
    # by its N and K, whose sizes are shared by every M (the same numbers, elementwise, as placing the broadcast).
    logs = [np.log(np.maximum(np.asarray(v, dtype=float), 1.0)) for v in (m, n, k)]
    shape = np.broadcast_shapes(*(v.shape for v in logs))
    lm, ln, lk = (v.reshape((1,) * (len(shape) - v.ndim) + v.shape) for v in logs)
    im, wm, xm = _log_axis(axis_m, lm)
    i_n, wn, xn = _log_axis(axis_nk, ln)
    ik, wk, xk = _log_axis(axis_nk, lk)
    sm, sn = grid.shape[1] * grid.shape[2], grid.shape[2]  # flat offsets of one step along M and N (C order)
    corners = (im * sm + i_n * sn + ik).reshape(1, -1) + _corner_offsets(sm, sn)
    weights = (np.stack([1.0 - wm, wm])[:, None, None] * np.stack([1.0 - wn, wn])[None, :, None]
               * np.stack([1.0 - wk, wk])[None, None, :]).reshape(8, -1)
    out = (weights * np.take(grid, corners)).sum(axis=0)
    return np.asarray(np.exp(out).reshape(shape) * xm * xn * xk)  # an array where all three are numbers too


@cache
def _corner_offsets(sm: int, sn: int) -> NDArray[np.intp]:
    """The flat offsets of a grid cell's eight corners from its first (`_trilinear`), as a column."""
    offsets = np.array([a * sm + b * sn + c for a in (0, 1) for b in (0, 1) for c in (0, 1)])[:, None]
    offsets.flags.writeable = False
    return offsets


@lru_cache(maxsize=256)
def _grid_floor(system: str, backend: str, fmt: str) -> float:
    """The smallest time of the grid of (system, backend, fmt) (`_grid`) [s]: its floor, a launch and a tile."""
    grid = _grid(system, backend, fmt)
    assert grid is not None, (system, backend, fmt)
    return float(np.exp(grid.min()))


def _table_s(system: str, backend: str, fmt: str, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> FloatArray:
    """`_trilinear` on the GEMM grid of (system, backend, fmt) (`_grid`), remembered by the call's sizes: the GPUs that
    share a profiled GPU's tables (`KernelBasis.kind == "scaled"`) look up the same shapes."""
    arrays = [np.asarray(v, dtype=float) for v in (m, n, k)]
    return _table_s_cached(system, backend, fmt, *((a.shape, a.tobytes()) for a in arrays))


@lru_cache(maxsize=1024)  # a whole-catalog plan looks up about 300 different calls; each result is a few KiB
def _table_s_cached(system: str, backend: str, fmt: str, m: tuple[tuple[int, ...], bytes],
                    n: tuple[tuple[int, ...], bytes], k: tuple[tuple[int, ...], bytes]) -> FloatArray:
    grid = _grid(system, backend, fmt)
    assert grid is not None, (system, backend, fmt)
    seconds = _trilinear(grid, *(np.frombuffer(b, dtype=float).reshape(shape) for shape, b in (m, n, k)))
    seconds.flags.writeable = False  # shared by every caller
    return seconds


@lru_cache(maxsize=256)
def _surface(system: str, kind: str, backend: str, kv: str | None) -> FloatArray | None:
    """The log-time nodes of a measured attention surface, each node at most the shortest time of the nodes of more
    work at the same batch x heads (a suffix minimum along the first axis, as the GEMM tables' along M; interpolated,
    the surface stays monotone): a call of fewer FLOPs or fewer KV bytes can run a larger one's kernel on padding,
    so it is never slower. Both surfaces are fits to the rows (`scripts/derive_kernel_tables.py`), whose nodes
    follow their neighbours and dip: prefill attention's at many batch x heads and few FLOPs (the H200's vLLM
    surface at 4096: 39.5 us at 2^22 FLOPs, 37.6 us at 2^26), decode attention's along KV bytes, most on
    TensorRT-LLM's fp8 kernels (the B200's at 2048 batch x KV heads: 46.1 us at fewer bytes, 29.5 us at 2^26).
    Along batch x heads neither is repaired: more query groups over the same work run with more parallelism."""
    entry = (system_tables(system) or {}).get(kind, {}).get(backend)
    if entry is not None and kv is not None:
        entry = entry.get(kv)
    if entry is None:
        return None
    grid = _never_faster_when_larger(np.log(np.asarray(entry, dtype=float) * 1e-6), 0)
    grid.flags.writeable = False  # shared by every caller
    return grid


def _bilinear(grid: FloatArray, axis_x: FloatArray, axis_y: FloatArray, x: ArrayLike, y: ArrayLike) -> FloatArray:
    lx = np.log2(np.maximum(np.asarray(x, dtype=float), 1.0))
    ly = np.log2(np.maximum(np.asarray(y, dtype=float), 1.0))
    lx, ly = np.broadcast_arrays(lx, ly)
    ix, wx, beyond = _log_axis(axis_x, lx, 2.0)
    iy, wy, _ = _log_axis(axis_y, ly, 2.0)  # more parallel work than the grid: as its edge
    out = ((1 - wx) * (1 - wy) * grid[ix, iy] + wx * (1 - wy) * grid[ix + 1, iy]
           + (1 - wx) * wy * grid[ix, iy + 1] + wx * wy * grid[ix + 1, iy + 1])
    return np.exp(out) * beyond


def _peak_flops(gpu: GpuSpec, fmt: str, fp4: bool = True) -> float:
    """Dense tensor throughput of `gpu` for a GEMM of kernel format `fmt` [FLOP/s]: FP4 GEMMs at the catalog's FP4
    peak where it states one (and `fp4`), else at the FP8 peak, the conservative one."""
    if fmt == "nvfp4" and fp4 and gpu.fp4_tflops:
        return gpu.fp4_tflops * 1e12
    if fmt in ("fp8", "nvfp4") and gpu.fp8_tflops:
        return gpu.fp8_tflops * 1e12
    if fmt == "sq" and gpu.int8_tops:
        return gpu.int8_tops * 1e12
    return gpu.fp16_tflops * 1e12


def _system_peak_flops(peaks: dict[str, Any], fmt: str, fp4: bool = True) -> float:
    if fmt == "nvfp4" and fp4 and peaks.get("fp4_tflops"):
        return peaks["fp4_tflops"] * 1e12
    if fmt in ("fp8", "nvfp4") and peaks.get("fp8_tflops"):
        return peaks["fp8_tflops"] * 1e12
    if fmt == "sq" and peaks.get("int8_tops"):
        return peaks["int8_tops"] * 1e12
    return peaks["bf16_tflops"] * 1e12


WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "sq": 1.0, "int8_wo": 1.0, "int4_wo": 0.5, "nvfp4": 0.5625}


def gemm_roofline_s(bandwidth: float, flops: float, fmt: str, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> FloatArray:
    """The roofline of y = x W at a bandwidth [B/s] and a throughput [FLOP/s]: weights plus 16-bit activations
    in and out, against 2 m n k."""
    m, n, k = (np.asarray(v, dtype=float) for v in (m, n, k))
    moved = WEIGHT_BYTES[fmt] * n * k + 2.0 * m * (n + k)
    return np.maximum(moved / bandwidth, 2.0 * m * n * k / flops)


@cache
def typical_efficiencies() -> dict[str, float]:
    """Median over the profiled GPUs (vLLM tables) of what large calls reach: weight streaming at M = 1 (16-bit
    8192 x 8192) over the HBM peak, 16-bit GEMM at 8192^3 over the tensor peak, decode attention over the HBM peak
    at 1 GiB of KV, and prefill attention at 1 PFLOP-scale calls over the tensor peak. What a GPU without any
    kernel data is assumed to reach (`KernelBasis.kind == "typical"`)."""
    stream, compute, attention, prefill = [], [], [], []
    meta = kernel_meta()
    for system in profiled_systems():
        peaks = system_tables(system)["peaks"]
        grid = _gemm_grid(system, "vllm", "bfloat16")
        if grid is None:
            continue
        bw, f = peaks["mem_bw_gb_s"] * 1e9, peaks["bf16_tflops"] * 1e12
        stream.append(2.0 * 8192 * 8192 / float(_trilinear(grid, 1, 8192, 8192)) / bw)
        compute.append(2.0 * 8192**3 / float(_trilinear(grid, 8192, 8192, 8192)) / f)
        decode = _surface(system, "decode_attention", "vllm", "bf16")
        if decode is not None:
            axes = meta["decode_attention_axes"]
            t = float(_bilinear(decode, np.asarray(axes["log2_kv_bytes"], float),
                                np.asarray(axes["log2_batch_x_kv_heads"], float), 2.0**30, 512))
            attention.append(2.0**30 / t / bw)
        pre = _surface(system, "prefill_attention", "vllm", None)
        if pre is not None:
            axes = meta["prefill_attention_axes"]
            t = float(_bilinear(pre, np.asarray(axes["log2_causal_flops"], float),
                                np.asarray(axes["log2_batch_x_heads"], float), 2.0**44, 64))
            prefill.append(2.0**44 / t / f)
    return {"stream": float(np.median(stream)), "gemm": float(np.median(compute)),
            "decode_attention": float(np.median(attention)), "prefill_attention": float(np.median(prefill))}


@dataclass(frozen=True)
class GpuKernels:
    """Kernel latencies of one engine backend's kernels on one GPU [s]; every method broadcasts."""

    gpu: GpuSpec
    backend: str
    basis: KernelBasis

    # -- where the numbers come from -------------------------------------------------------------------------

    @property
    def _system(self) -> str | None:
        return self.basis.system

    @property
    def _peaks(self) -> dict[str, Any]:
        return system_tables(self.basis.system)["peaks"] if self.basis.system else {}

    def _published(self, name: str) -> float | None:
        return dict(self.gpu.kernel_figures).get(name)

    def _efficiency(self, name: str, typical: str) -> float:
        value = self._published(name)
        return value if value is not None else typical_efficiencies()[typical]

    def _table_backend(self, kind: str, fmt: str | None = None) -> str | None:
        """The engine's own backend where its table exists, else another backend's on the same GPU."""
        if self._system is None:
            return None
        for backend in (self.backend, *BACKENDS):
            if kind == "gemm" and _gemm_grid(self._system, backend, fmt or "") is not None:
                return backend
            if kind != "gemm" and _surface(self._system, kind, backend, fmt) is not None:
                return backend
        return None

    # -- GEMM ------------------------------------------------------------------------------------------------

    def gemm_s(self, fmt: str, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> FloatArray:
        """y[m, n] = x[m, k] W[k, n] with weights in kernel format `fmt` (`gemm_format`). Never faster than
        reading the weights from HBM at the rated bandwidth: a benchmark that calls one small weight over and over
        serves it from L2 (the L40S's 96 MB, tables up to 2.2x its rated bandwidth), a served model never does."""
        seconds = None
        if self._system is not None:
            backend = self._table_backend("gemm", fmt)
            if backend is None:  # a format its tables lack: borrowed onto its own 16-bit kernels
                backend = self._table_backend("gemm", "bfloat16")
                if backend is not None and _borrowed_grid(self._system, backend, fmt) is None:
                    backend = None
            if backend is not None:
                seconds = self._scaled_gemm(backend, fmt, m, n, k)
        if seconds is None:
            seconds = self._roofline_gemm(fmt, m, n, k)
        hbm = WEIGHT_BYTES[fmt] * np.asarray(n, float) * np.asarray(k, float) / (self.gpu.memory_bandwidth_gb_s * 1e9)
        return np.maximum(seconds, hbm)

    def _scaled_gemm(self, backend: str, fmt: str, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> FloatArray:
        """The profiled GPU's table (`_grid`: measured or borrowed) of (`backend`, `fmt`) at the call, on this GPU:
        the table's floor (its smallest time, a launch and a tile) as it is, and the rest
        - times the ratio of the two GPUs' roofline times for the call, where this GPU has less compute to its
          bandwidth than the profiled one (the H20's 148 TFLOPS from the H100's 989): the ratio rises with M from
          the bandwidths' to the peaks' and charges the compute the profiled GPU hid under its weight read;
        - else as the call's weight read (its time at M = 1) at the ratio of the bandwidths plus what more tokens
          add to it at the ratio of the peaks (the A100 40GB: less bandwidth, the same 312 TFLOPS). The ratio of
          the rooflines falls there where the profiled GPU's roofline turns compute-bound, and the measured
          weight-only calls do not yet: until 2026-12-07 the A100 40GB's weight-only int8 call took 34.4 us at
          M = 64 and 30.6 us at M = 128, and its GEMMs' marginal time of a token came out below the 80GB's.
        Either way a call of more tokens is never faster (the tables never are, `scripts/derive_kernel_tables.py`),
        and a GPU with less bandwidth and the same peaks never faster than its source."""
        seconds = _table_s(self._system, backend, fmt, m, n, k)
        if self.basis.kind == "measured":
            return seconds
        floor = _grid_floor(self._system, backend, fmt)
        peaks = self._peaks
        # FP4 peaks only where both GPUs state one, so that the two rooflines compare like with like.
        fp4 = bool(peaks.get("fp4_tflops") and self.gpu.fp4_tflops)
        source_flops, flops = _system_peak_flops(peaks, fmt, fp4), _peak_flops(self.gpu, fmt, fp4)
        bandwidth_ratio, peak_ratio = peaks["mem_bw_gb_s"] / self.gpu.memory_bandwidth_gb_s, source_flops / flops
        if bandwidth_ratio < peak_ratio:
            source = gemm_roofline_s(peaks["mem_bw_gb_s"] * 1e9, source_flops, fmt, m, n, k)
            target = gemm_roofline_s(self.gpu.memory_bandwidth_gb_s * 1e9, flops, fmt, m, n, k)
            return floor + np.maximum(seconds - floor, 0.0) * target / source
        read = np.maximum(_table_s(self._system, backend, fmt, 1.0, n, k) - floor, 0.0)
        return floor + read * bandwidth_ratio + np.maximum(seconds - floor - read, 0.0) * peak_ratio

    def _roofline_gemm(self, fmt: str, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> FloatArray:
        stream = self._efficiency("hbm_stream_efficiency", "stream")
        key = "gemm_fp8_efficiency" if fmt in ("fp8", "nvfp4", "sq") else "gemm_bf16_efficiency"
        gemm = self._published(key) or self._efficiency("gemm_bf16_efficiency", "gemm")
        return UNMEASURED_GEMM_FLOOR_S + gemm_roofline_s(self.gpu.memory_bandwidth_gb_s * 1e9 * stream,
                                                         _peak_flops(self.gpu, fmt) * gemm, fmt, m, n, k)

    @lru_cache(maxsize=512)  # noqa: B019 - instances come from gpu_kernels' cache and live as long
    def stream_bytes_s(self) -> float:
        """The rate [bytes/s] at which this GPU's 16-bit tables read a large (8192 x 8192) weight at M = 1: what a
        weight read reaches once its call's floor no longer counts."""
        return 2.0 * 8192.0**2 / float(self.gemm_s("bfloat16", 1.0, 8192.0, 8192.0))

    def stream_s(self, nbytes: ArrayLike) -> FloatArray:
        """Reading `nbytes` of weights at M = 1 with an engine's own matrix-vector kernels (llama.cpp, ExLlama, MLC:
        not the vendor GEMMs the tables time): one call's floor plus the bytes at `stream_bytes_s`."""
        return UNMEASURED_GEMM_FLOOR_S + np.asarray(nbytes, dtype=float) / self.stream_bytes_s()

    # -- MoE -------------------------------------------------------------------------------------------------

    def moe_layer(self, formats: tuple[str, ...], expert_bytes: float, shape: str | None = None
                  ) -> tuple[float, float, float] | None:
        """One fused MoE layer whose experts hold `expert_bytes` each on this GPU, from the first of `formats` that
        a measured table has (the engine's backend, else another's on the same GPU): (its floor [s], the rate at
        which it reads the experts a batch routes to [bytes/s], its compute on routed tokens [FLOP/s]). `shape`
        (`moe_shape_key`): where the table measured that very shape, its own figures, else the medians of the
        shapes of its expert size. A scaled GPU carries the profiled GPU's shares of bandwidth and peak to its
        own. A GPU without tables (AMD, typical GPUs), or whose tables lack every one of `formats`, takes the
        median over the profiled GPUs (for gpt-oss's MXFP4, those that ran the engine's kernel for this GPU's
        architecture) of the floor and of the shares of bandwidth and peak that the engine's fused
        MoE kernels reach (`_typical_moe`): nothing measured them there, and on every GPU that was measured they
        reach a far smaller share of the peak than the dense GEMMs and pay a floor a layer (routing, permutation,
        the combine). None where no profiled GPU measured the format (INT8 W8A8): the experts then run as the dense
        GEMM tables' calls."""
        found = _moe_shares(self._system, self.backend, formats, expert_bytes, shape) if self._system else None
        if found is None:
            found = _typical_moe(self.backend, formats, expert_bytes, shape, gpu_arch(self.gpu))
        if found is None:
            return None
        fmt, floor, stream, compute = found
        kind = MOE_PEAK_OF[fmt]
        if self.basis.kind == "measured":
            peaks = self._peaks
            bandwidth = peaks["mem_bw_gb_s"] * 1e9
            peak = (peaks.get(f"{kind}_tflops") or peaks.get("fp8_tflops") or peaks["bf16_tflops"]) * 1e12
        else:
            bandwidth = self.gpu.memory_bandwidth_gb_s * 1e9
            peak = {"bf16": self.gpu.fp16_tflops, "fp8": self.gpu.fp8_tflops,
                    "fp4": self.gpu.fp4_tflops or self.gpu.fp8_tflops}[kind] or self.gpu.fp16_tflops
            peak *= 1e12
        # A share above the rated bandwidth is a small call served from L2 or fewer experts touched than
        # uniform routing counts: never faster than the HBM.
        return floor * 1e-6, min(stream, 1.0) * bandwidth, compute * peak

    # -- attention -------------------------------------------------------------------------------------------

    def _attention_surface_s(self, kind: str, backend: str, kv: str | None, axis_names: tuple[str, str], x: ArrayLike,
                             y: ArrayLike, sibling_ratio: float) -> FloatArray:
        """The measured `kind` surface of `backend` at (x, y); on a sibling's tables the floor as it is and the rest
        scaled by `sibling_ratio` (the sibling's peak over this GPU's)."""
        axes = kernel_meta()[f"{kind}_axes"]
        surface = _surface(self._system, kind, backend, kv)
        seconds = _bilinear(surface, np.asarray(axes[axis_names[0]], float), np.asarray(axes[axis_names[1]], float),
                            x, y)
        if self.basis.kind == "scaled":
            floor = float(np.exp(surface.min()))
            seconds = floor + np.maximum(seconds - floor, 0.0) * sibling_ratio
        return seconds

    def decode_attention_s(self, kv: str, read_bytes: ArrayLike, batch_x_kv_heads: ArrayLike) -> FloatArray:
        """One layer's decode attention reading `read_bytes` of KV (`kv`: "bf16" or "fp8") for batch x KV heads
        query groups."""
        backend = self._table_backend("decode_attention", kv) if self._system else None
        if backend is not None:  # a sibling's: the rest above the floor at the ratio of the bandwidths
            seconds = self._attention_surface_s(
                "decode_attention", backend, kv, ("log2_kv_bytes", "log2_batch_x_kv_heads"), read_bytes,
                batch_x_kv_heads, self._peaks["mem_bw_gb_s"] / self.gpu.memory_bandwidth_gb_s)
            return np.maximum(seconds, np.asarray(read_bytes, float) / (self.gpu.memory_bandwidth_gb_s * 1e9))
        stream = self._efficiency("hbm_stream_efficiency", "decode_attention")
        return UNMEASURED_ATTENTION_FLOOR_S + np.asarray(read_bytes, float) / (
            self.gpu.memory_bandwidth_gb_s * 1e9 * stream)

    def _mla_table(self, kind: str, kv: str | None = None) -> Any | None:
        """The measured MLA `kind` entry ("mla_decode" at KV dtype `kv`, or "mla_prefill") of the engine's backend,
        else TensorRT-LLM's, else SGLang's on this GPU (vLLM's MLA kernels are not profiled apart from their
        projections); None where none covers the GPU."""
        if self._system is None:
            return None
        table = system_tables(self._system).get(kind, {})
        for backend in dict.fromkeys((self.backend, "trtllm", "sglang")):
            entry = table.get(backend)
            if entry is not None and kv is not None:
                entry = entry.get(kv)
            if entry is not None:
                return entry
        return None

    def mla_prefill_flops_s(self, heads: ArrayLike) -> FloatArray | None:
        """MLA context attention's rate [FLOP/s] of its causal FLOPs (2 x heads x (qk + v) per query-key pair) with
        `heads` query heads on this GPU: the measured table (`_mla_table`), interpolated in log2(heads); on a
        sibling's tables at the ratio of the 16-bit tensor peaks. None where no MLA table covers this GPU."""
        values = self._mla_table("mla_prefill")
        if values is None:
            return None
        axis = np.asarray(kernel_meta()["mla_log2_heads"], dtype=float)
        h = np.clip(np.asarray(heads, dtype=float), 1.0, 2.0 ** axis[-1])
        tflops = np.exp(np.interp(np.log2(h), axis, np.log(np.asarray(values, dtype=float))))
        if self.basis.kind == "scaled":
            tflops = tflops * self.gpu.fp16_tflops / self._peaks["bf16_tflops"]
        return tflops * 1e12

    def mla_decode_s_per_pair(self, kv: str, heads: ArrayLike) -> FloatArray | None:
        """Absorbed MLA decode attention (a 512 + 64 latent) of one layer with `heads` query heads on this GPU, per
        (sequence, context token) [s]: the measured table (`_mla_table`) at the KV dtype `kv`, interpolated in
        log2(heads) (in proportion beyond 128); on a sibling's tables at the ratio of the bandwidths. None where no
        MLA table covers this GPU (the caller costs the latent's read and the FLOPs)."""
        values = self._mla_table("mla_decode", kv)
        if values is None:
            return None
        axis = np.asarray(kernel_meta()["mla_log2_heads"], dtype=float)
        h = np.maximum(np.asarray(heads, dtype=float), 1.0)
        ns = np.exp(np.interp(np.log2(h), axis, np.log(np.asarray(values, dtype=float))))
        ns = ns * np.maximum(h / 2.0 ** axis[-1], 1.0)
        if self.basis.kind == "scaled":
            ns = ns * self._peaks["mem_bw_gb_s"] / self.gpu.memory_bandwidth_gb_s
        return ns * 1e-9

    def prefill_attention_s(self, causal_flops: ArrayLike, batch_x_heads: ArrayLike) -> FloatArray:
        """One layer's prefill attention of `causal_flops` (QK^T and PV over the causal half) for batch x heads."""
        backend = self._table_backend("prefill_attention") if self._system else None
        if backend is not None:  # a sibling's: the rest above the floor at the ratio of the tensor peaks
            return self._attention_surface_s(
                "prefill_attention", backend, None, ("log2_causal_flops", "log2_batch_x_heads"), causal_flops,
                batch_x_heads, self._peaks["bf16_tflops"] / self.gpu.fp16_tflops)
        efficiency = self._efficiency("prefill_attention_efficiency", "prefill_attention")
        rate = self.gpu.fp16_tflops * 1e12 * efficiency
        return UNMEASURED_ATTENTION_FLOOR_S + np.asarray(causal_flops, float) / rate

    # -- communication ---------------------------------------------------------------------------------------

    def allreduce_s(self, nbytes: ArrayLike, tp: int) -> FloatArray | None:
        """A 16-bit all-reduce of `nbytes` over `tp` GPUs of one node; None where nothing measured covers it
        (the caller falls back to the link's rated figures).

        Over PCIe nothing measured covers it: an all-reduce there runs at what the server's PCIe topology allows
        (switches, peer-to-peer, one CPU socket or two), which the GPU does not say. AIConfigurator's L40S table
        measured one such box at 1.9 GB/s of ring bandwidth over 8 GPUs, 17 times below the link, where its
        siblings on the same link (L40, L4, the Ada workstation cards) take the rated figures: an L40 at TP 8
        decoded 7 times faster than an L40S.

        A smaller message can always run a larger one's all-reduce on padding, so each size takes at most the
        shortest time of the larger sizes (`_never_faster_when_larger`): the curves dip by measurement noise at
        small sizes (the B300's at TP 4: 4.63 us at 2^12 bytes, 4.32 us at 2^14)."""
        if tp <= 1:
            return np.zeros(np.shape(nbytes))
        if self.gpu.interconnect != "pcie" and (
                (self._system is not None and self.basis.kind == "measured") or self._same_fabric()):
            curve = system_tables(self._system)["allreduce"].get(str(tp))
            if curve is None:
                curve = self._fabric_sibling_allreduce(tp)
            if curve is not None:
                axis = np.asarray(kernel_meta()["allreduce_log2_bytes"], float)
                lb = np.log2(np.maximum(np.asarray(nbytes, float), 1.0))
                idx, w, beyond = _log_axis(axis, lb, 2.0)
                logt = _never_faster_when_larger(np.log(np.asarray(curve, float) * 1e-6), 0)
                return np.exp((1 - w) * logt[idx] + w * logt[idx + 1]) * beyond
        busbw = self._published("allreduce_busbw_gb_s")
        latency = self._published("allreduce_latency_us")
        if busbw and latency:
            ring = 2.0 * (tp - 1) / tp * np.asarray(nbytes, float)
            return latency * 1e-6 + ring / (busbw * 1e9)
        return None

    def _fabric_sibling_allreduce(self, tp: int) -> list[float] | None:
        """The all-reduce curve over `tp` GPUs of another profiled system on the same link at the same speed, for a
        size this system's tables lack: GB200's were collected on 4 GPUs (one tray); its NVL72 domain joins trays
        through the same NVLink 5 switches as an HGX B200's 8 GPUs, whose 8-GPU curve stands in."""
        link = self._peaks.get("intra_node_gb_s")
        for name in profiled_systems():
            entry = system_tables(name)
            other = entry["peaks"].get("intra_node_gb_s")
            if name != self._system and link and other and math.isclose(link, other, rel_tol=0.05) \
                    and str(tp) in entry["allreduce"]:
                return entry["allreduce"][str(tp)]
        return None

    def _same_fabric(self) -> bool:
        """A scaled GPU whose all-reduce is its profiled sibling's: the same interconnect at the same speed."""
        if self.basis.kind != "scaled" or self._system is None:
            return False
        peaks = self._peaks
        link = peaks.get("intra_node_gb_s")
        return self.gpu.interconnect == "nvlink" and link is not None and math.isclose(
            link, self.gpu.interconnect_gb_s, rel_tol=0.05)


def _moe_shares(system: str, backend: str, formats: tuple[str, ...], expert_bytes: float, shape: str | None
                ) -> tuple[str, float, float, float] | None:
    """The first of `formats` that `system`'s fused-MoE tables measured (`backend`'s, else another backend's on the
    same GPU): (format, floor [us], share of the HBM bandwidth at which it reads the routed experts, share of the
    format's peak it computes at). The shape itself where these kernels measured it (another backend's kernels for
    the same shape can be several times apart: TensorRT-LLM's per-tensor FP8 against SGLang's block FP8), else the
    medians of the shapes of its expert size, which the derive step keeps from taking longer than a larger size's
    (`scripts/derive_kernel_tables.py`, `monotone_moe_bins`)."""
    moe = system_tables(system).get("moe", {})
    for fmt in formats:
        curves = next((moe[b][fmt] for b in (backend, *BACKENDS) if fmt in moe.get(b, {})), None)
        if curves is None:
            continue
        exact = curves.get("shapes", {}).get(shape) if shape else None
        if exact is not None:
            floor, stream, compute = (float(v) for v in exact)
        else:
            axis = np.asarray(kernel_meta()["moe_shard_log2_bytes"], dtype=float)
            x = math.log2(max(expert_bytes, 1.0))
            floor, stream, compute = (float(np.interp(x, axis, np.asarray(curves[name], dtype=float)))
                                      for name in ("floor_us", "stream", "compute"))
        return fmt, floor, stream, compute
    return None


@lru_cache(maxsize=1024)
def _typical_moe(backend: str, formats: tuple[str, ...], expert_bytes: float, shape: str | None,
                 arch: str | None = None) -> tuple[str, float, float, float] | None:
    """`_moe_shares` for a GPU of architecture `arch` (`gpu_arch`) whose tables (if any) measured none of `formats`:
    the first of them some profiled GPU measured, and per figure the median over the profiled GPUs that measured it;
    for gpt-oss's MXFP4 over those whose engine ran the kernel it runs on `arch` (`MXFP4_MOE_KERNELS`), where any
    did."""
    kernels = MXFP4_MOE_KERNELS.get(backend, {})
    for fmt in formats:
        measured = {system: f for system in profiled_systems()
                    if (f := _moe_shares(system, backend, (fmt,), expert_bytes, shape)) is not None}
        kernel = kernels.get(arch or "") if fmt == "w4a16_mxfp4" else None
        same = [f for system, f in measured.items() if kernel and kernels.get(SYSTEM_ARCH.get(system, "")) == kernel]
        found = same or list(measured.values())
        if found:
            floor, stream, compute = (float(np.median([f[i] for f in found])) for i in (1, 2, 3))
            return fmt, floor, stream, compute
    return None


def moe_shape_key(hidden: int, intermediate: int, experts: int, top_k: int, tp: int) -> str:
    """The key of one MoE shape in the tables' `shapes` (scripts/derive_kernel_tables.py writes the same)."""
    return f"{hidden}x{intermediate}x{experts}x{top_k}/tp{tp}"


def kernel_basis(gpu: GpuSpec) -> KernelBasis:
    """What `gpu`'s kernel times rest on (module docstring)."""
    tables = system_tables(gpu.kernel_tables) if gpu.kernel_tables else None
    if tables is not None:
        device = tables["device"]
        if gpu.kernel_tables_own:
            return KernelBasis("measured", gpu.kernel_tables, f"kernels measured on the {device} (AIConfigurator)")
        return KernelBasis("scaled", gpu.kernel_tables,
                           f"kernels measured on the {device} (AIConfigurator), scaled to the {gpu.display_name}'s "
                           "bandwidth and throughput")
    if gpu.kernel_figures:
        return KernelBasis("published", None, f"published microbenchmarks of the {gpu.display_name} (GPU catalog)")
    return KernelBasis("typical", None, f"no kernel measurements of the {gpu.display_name}: the roofline at the "
                                        "median efficiency of the profiled GPUs")


@lru_cache(maxsize=512)
def gpu_kernels(gpu: GpuSpec, engine: str) -> GpuKernels:
    """The kernels `engine` runs on `gpu` (its backend's tables, `BACKEND_OF_ENGINE`)."""
    return GpuKernels(gpu, BACKEND_OF_ENGINE.get(engine, "vllm"), kernel_basis(gpu))


__all__ = ["BACKEND_OF_ENGINE", "ELEMENTWISE_FLOOR_S", "ELEMENTWISE_KERNELS_PER_LAYER", "MLA_TABLE_LATENT",
           "MOE_PEAK_OF", "MXFP4_MOE_KERNELS", "SYSTEM_ARCH", "GpuKernels", "KernelBasis", "gemm_format",
           "gemm_roofline_s", "gpu_arch", "gpu_kernels", "kernel_basis", "kernel_meta", "moe_formats",
           "profiled_systems", "system_tables", "typical_efficiencies"]
