"""Serving engines: how each one batches, sizes its KV pool and schedules prefill.

Behaviour is fixed per engine (from the engines' documentation and defaults). The kernel times of a step are
measured (`inferplan.planner.model.kernels`); the engine terms on top of them (per-step and per-sequence CPU time,
memory outside the allocator) are fitted on measurements and live in `data/factors.json` (see
`inferplan.planner.model.factors`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import date
from functools import lru_cache

from inferplan.planner.names import CatalogLookupError, closest_names, normalize_name


@dataclass(frozen=True)
class EngineProfile:
    """Behaviour of one serving engine at its defaults.

    cuda_graph_gib: memory of the captured CUDA graphs per GPU. vLLM (through 0.10) and SGLang capture
      them after sizing the KV pool, so they come out of the `1 - gpu_memory_utilization` headroom; a
      fraction so high that the headroom cannot hold them fails at start-up. vLLM logs print 0.3-1 GiB
      ("Graph capturing finished ... took X GiB"); 0.5 is assumed.

    memory_mode:
      "total_fraction": the engine may use `gpu_memory_utilization` x total memory; the KV pool is what
        is left after weights, the profiled activation peak and non-torch memory (vLLM, MLC-LLM).
      "static_fraction": `mem_fraction_static` x total memory holds the weights and the KV pool; the
        activations use the rest (SGLang).
      "free_fraction": the KV pool is a fraction of the memory still free after loading the weights
        (TensorRT-LLM `kv_cache_free_gpu_mem_fraction`, LMDeploy `cache_max_entry_count`, TGI).
      "context": the engine allocates KV for the configured context only (llama.cpp, ExLlama).

    own_weight_kernels: the engine reads the weights with its own matrix-vector kernels (ggml's CUDA kernels,
      ExLlama's, MLC's TVM-generated ones), not with vendor GEMM libraries tuned for each GPU. Such a kernel
      keeps a fixed number of loads in flight per SM, so what one SM streams is bounded (Little's law: bytes
      in flight / memory latency) and a card with many GB/s per SM (HBM) reaches a smaller share of its
      rated bandwidth than a GDDR card: the factor `sm_stream_gb_s` is fitted for these engines only, one rate
      for all of them (`calibrate.OWN_KERNELS`).
    """

    name: str
    continuous_batching: bool
    memory_mode: str
    default_memory_fraction: float
    kv_block_tokens: int
    chunked_prefill: bool
    default_max_num_seqs: int
    default_max_batched_tokens: int
    tensor_parallel: bool
    cuda_graph_gib: float  # CUDA-graph memory per GPU, captured after the KV pool is sized (assumed)
    description: str
    own_weight_kernels: bool = False  # streams weights with its own kernels, not vendor GEMM libraries


ENGINES: dict[str, EngineProfile] = {
    e.name: e
    for e in (
        EngineProfile(
            name="vllm",
            continuous_batching=True,
            memory_mode="total_fraction",
            default_memory_fraction=0.9,
            kv_block_tokens=16,
            chunked_prefill=True,
            default_max_num_seqs=256,
            default_max_batched_tokens=2048,
            tensor_parallel=True,
            cuda_graph_gib=0.5,
            description="vLLM: paged KV, continuous batching, chunked prefill on by default since V1 (0.8)",
        ),
        EngineProfile(
            name="sglang",
            continuous_batching=True,
            memory_mode="static_fraction",
            default_memory_fraction=0.88,
            kv_block_tokens=1,
            chunked_prefill=True,
            default_max_num_seqs=1024,
            default_max_batched_tokens=8192,
            tensor_parallel=True,
            cuda_graph_gib=0.5,
            description="SGLang: radix-tree KV (page size 1), continuous batching, chunked prefill 8192",
        ),
        EngineProfile(
            name="tensorrt-llm",
            continuous_batching=True,
            memory_mode="free_fraction",
            default_memory_fraction=0.9,
            kv_block_tokens=64,
            chunked_prefill=True,
            default_max_num_seqs=256,
            default_max_batched_tokens=8192,
            tensor_parallel=True,
            cuda_graph_gib=0.0,
            description="TensorRT-LLM: in-flight batching, paged KV sized from free memory after load",
        ),
        EngineProfile(
            name="tgi",
            continuous_batching=True,
            memory_mode="free_fraction",
            default_memory_fraction=0.95,
            kv_block_tokens=16,
            chunked_prefill=True,
            default_max_num_seqs=256,
            default_max_batched_tokens=4096,
            tensor_parallel=True,
            cuda_graph_gib=0.3,
            description="Text Generation Inference: continuous batching, KV sized from free memory",
        ),
        EngineProfile(
            name="lmdeploy",
            continuous_batching=True,
            memory_mode="free_fraction",
            default_memory_fraction=0.8,
            kv_block_tokens=64,
            chunked_prefill=False,
            default_max_num_seqs=256,
            default_max_batched_tokens=8192,
            tensor_parallel=True,
            cuda_graph_gib=0.0,
            description="LMDeploy TurboMind: persistent batching, KV = cache_max_entry_count of free memory",
        ),
        EngineProfile(
            name="mlc-llm",
            continuous_batching=True,
            memory_mode="total_fraction",
            default_memory_fraction=0.85,
            kv_block_tokens=16,
            chunked_prefill=True,
            default_max_num_seqs=80,
            default_max_batched_tokens=2048,
            tensor_parallel=True,
            cuda_graph_gib=0.0,
            description="MLC-LLM serve: continuous batching, KV from gpu_memory_utilization of total memory",
            own_weight_kernels=True,
        ),
        EngineProfile(
            name="llama.cpp",
            continuous_batching=False,
            memory_mode="context",
            default_memory_fraction=1.0,
            kv_block_tokens=1,
            chunked_prefill=False,
            default_max_num_seqs=1,
            default_max_batched_tokens=512,
            tensor_parallel=False,
            cuda_graph_gib=0.0,
            description="llama.cpp server: one sequence per slot, no continuous batching across requests; "
            "multi-GPU splits layers (pipeline), which adds no speed to one stream",
            own_weight_kernels=True,
        ),
        EngineProfile(
            name="exllama",
            continuous_batching=False,
            memory_mode="context",
            default_memory_fraction=1.0,
            kv_block_tokens=1,
            chunked_prefill=False,
            default_max_num_seqs=1,
            default_max_batched_tokens=2048,
            tensor_parallel=False,
            cuda_graph_gib=0.0,
            description="ExLlama: single-stream GPTQ/EXL2 kernels",
            own_weight_kernels=True,
        ),
    )
}


# Weight formats each engine serves (the first ones are what a plan tries when it names none), from the
# engines' quantisation docs. GGUF and MLC formats are planned on llama.cpp and MLC-LLM only (vLLM and SGLang load
# GGUF too, `LOADED_PRECISIONS`, but the planner has no launch for it). NVFP4 and Quark's MXFP4
# run only on some GPUs and releases: `checkpoints.gpu_problem` says which.
SERVED_PRECISIONS: dict[str, tuple[str, ...]] = {
    "vllm": ("bf16", "fp8", "int4-awq", "int8-w8a8", "fp16", "int4-gptq", "int8-gptq", "mxfp4", "nvfp4",
             "mxfp4-w4a4"),
    "sglang": ("bf16", "fp8", "int4-awq", "int8-w8a8", "fp16", "int4-gptq", "mxfp4", "nvfp4", "mxfp4-w4a4"),
    "tgi": ("bf16", "fp8", "int4-awq", "int4-gptq", "fp16"),
    "tensorrt-llm": ("bf16", "fp8", "int8-w8a8", "int4-awq", "fp16", "mxfp4", "nvfp4"),
    "lmdeploy": ("bf16", "int4-awq", "int8-w8a8", "fp16"),
    "mlc-llm": ("mlc-q4f16_1", "fp16"),
    "llama.cpp": ("gguf-q4_k_m", "gguf-q8_0", "gguf-f16", "gguf-q6_k", "gguf-q5_k_m", "gguf-q4_0"),
    "exllama": ("int4-gptq",),
}
DEFAULT_PLAN_PRECISIONS = 4  # a plan without `precisions` tries the first four an engine serves

_GGUF = ("gguf-f16", "gguf-q8_0", "gguf-q6_k", "gguf-q5_k_m", "gguf-q4_k_m", "gguf-q4_0", "gguf-q3_k_m", "gguf-q2_k")
# Weight formats an engine loads beside those a plan tries with it (SERVED_PRECISIONS, where the planner has the
# checkpoints and the launch flags): a measurement may have run them. vLLM and SGLang read a GGUF file through
# ggml's dequantising kernels (vLLM's `gguf` quantisation method, docs/features/quantization/gguf.md; SGLang's `gguf`
# load format and quantisation method); SGLang's and TGI's GPTQ loaders take 8-bit GPTQ as well as 4-bit;
# TensorRT-LLM runs GPTQ's W4A16 checkpoints (its quantisation support matrix); LMDeploy loads GPTQ, FP8 and
# gpt-oss's MXFP4 and MLC-LLM compiles 16-bit weights, as the checkpoint catalog reads them (`checkpoints.
# FORMAT_LOADERS`); llama.cpp runs every GGUF type.
_LOADED_BESIDE: dict[str, tuple[str, ...]] = {
    "vllm": _GGUF,
    "sglang": ("int8-gptq", *_GGUF),
    "tgi": ("int8-gptq",),
    "tensorrt-llm": ("int4-gptq",),
    "lmdeploy": ("fp8", "int4-gptq", "mxfp4"),
    "mlc-llm": ("bf16",),
    "llama.cpp": _GGUF,
}
LOADED_PRECISIONS: dict[str, frozenset[str]] = {
    engine: frozenset(served) | frozenset(_LOADED_BESIDE.get(engine, ()))
    for engine, served in SERVED_PRECISIONS.items()
}


def weight_format_problem(engine: str, precision: str) -> str | None:
    """Why `engine` cannot have run weights in `precision` (it loads no such format, `LOADED_PRECISIONS`); None where
    it can, or where the engine is not one the catalog knows."""
    loaded = LOADED_PRECISIONS.get(engine)
    if loaded is None or precision in loaded:
        return None
    return f"{engine} does not load {precision} weights (it loads {', '.join(sorted(loaded))})"


@dataclass(frozen=True)
class Scheduling:
    """How an engine fills a step, as the simulator runs it (sources in docs/engines.md).

    mixed: prompt tokens share a step with the decode of the running sequences (vLLM V1's decode-first
      step, TensorRT-LLM's in-flight batching); False: a step with prompt work runs no decode (prefill
      first: SGLang without `--enable-mixed-chunk`, vLLM V0 without chunked prefill, TGI).
    chunked: a prompt may be split over steps within the token budget; False: it goes whole, in a later
      step if the budget is spent.
    reserve_output: a request is admitted only when the KV cache holds its prompt and all the output it
      may generate, next to what the running requests were promised, so nothing is ever preempted
      (TensorRT-LLM's GUARANTEED_NO_EVICT); False: admitted when its prompt fits, preempted (recomputed)
      when the cache runs out during decode (vLLM; SGLang with `estimate_output`).
    steps_per_schedule: vLLM V0's multi-step scheduling (`--num-scheduler-steps`): the scheduler runs once per
      that many decode steps (`Scheduler._schedule_default` with `multi_step`, `worker/multi_step_model_runner.py`),
      so a request that arrives while sequences decode waits for the current run of steps to end before its prefill.
      The CPU time a run saves is not modelled (each step keeps the engine line's per-step and per-sequence time).
    estimate_output: SGLang's admission: a request is admitted only when the KV cache holds its prompt and its
      whole output (up to 4,096 tokens) next to the running requests' remaining output times a new-token
      ratio, which starts at 0.7, falls by about 0.001 per decode step to 0.098, returns to 0.7 when the engine
      idles and is re-estimated from the tokens decoded so far when a request is retracted (preempted)
      (`PrefillAdder.add_one_req` and `Scheduler.update_running_batch`; `SGLANG_*_NEW_TOKEN_RATIO*`); once one
      does not fit, none is admitted until a request leaves the batch (`batch_is_full`), and the retracted request
      is the one with the fewest tokens generated (of those the longest prompt), put at the back of the queue
      (`ScheduleBatch.retract_decode`).
    admit_first_chunk: vLLM V1's admission with chunked prefill: a waiting request is admitted when its first chunk
      (what is left of the step's token budget, at most its prompt) and what the prefix cache holds of it fit in the
      free KV cache, and the cache is filled chunk by chunk as the prompt is computed; when a running request's next
      chunk or decode token does not fit, the most recently admitted request is preempted, its computed tokens
      dropped but its blocks kept in the prefix cache until others need them (so it computes again only what was
      evicted), and no request is admitted in that step (`Scheduler.schedule`, `KVCacheManager.allocate_slots` in
      vLLM 0.11.0). A request preempted this way is admitted again once a request completes. False: admitted only
      when the whole prompt fits.
    """

    mixed: bool = True
    chunked: bool = True
    reserve_output: bool = False
    estimate_output: bool = False
    steps_per_schedule: int = 1
    admit_first_chunk: bool = False


@dataclass(frozen=True)
class EngineSettings:
    """The settings one engine instance runs with (stated values, else the engine's defaults)."""

    memory_fraction: float  # gpu_memory_utilization (or the engine's equivalent)
    max_model_len: int
    max_num_seqs: int
    chunk_tokens: float  # per-step prefill token budget; inf when prefill is not chunked
    profile_tokens: int  # tokens of the memory-profiling forward pass
    step_tokens: float = math.inf  # token budget of one step, chunked or not (the simulator's)
    scheduling: Scheduling = Scheduling()
    activation_scale: float | None = None  # replaces the engine's fitted activation factor (None: keep it)
    sampler_bytes: float | None = None  # the profile's sampler peak per sequence and vocabulary entry (vLLM V1)


def per_rank_batches(settings: EngineSettings, ranks: int) -> EngineSettings:
    """`settings` of an instance whose `ranks` attention ranks each schedule their own batch (TensorRT-LLM with
    `enable_attention_dp`: `max_batch_size` and `max_num_tokens` are per rank; vLLM's data-parallel ranks with
    expert parallelism, each an engine core with its own scheduler), as one instance's limits."""
    chunk = settings.chunk_tokens * ranks if math.isfinite(settings.chunk_tokens) else settings.chunk_tokens
    return replace(settings, max_num_seqs=settings.max_num_seqs * ranks, step_tokens=settings.step_tokens * ranks,
                   chunk_tokens=chunk)


# vLLM V1 (0.8 on) profiles its sampler after the forward pass, on max_num_seqs dummy requests with top-k and
# top-p set, and every TP rank holds the whole vocabulary's logits (all-gathered): the 16-bit logits, their fp32
# copy, the sort's fp32 values and int64 indices, the softmax and cumulative sum, the masks, the scattered result
# (v1/worker/gpu_model_runner.py `_dummy_sampler_run`, v1/sample/ops/topk_topp_sampler.py `apply_top_k_top_p` in
# vLLM 0.11.0) and the sort's scratch: about 39 bytes per sequence and vocabulary entry. llm-d's empirical
# profiles of vLLM 0.11 on one H100 measured 38.5-39.6 (activation peak over max_num_seqs 1024 x vocabulary,
# Qwen3-0.6B, Llama-3.1-8B, Qwen3-32B, gpt-oss-20b/120b, Llama-3.3-70B at TP 2). The forward pass's own
# activations are freed by then, so the peak is the larger of the two.
VLLM_V1_SAMPLER_BYTES = 39.0


# vLLM pads gpt-oss's MXFP4 experts to its MoE kernels' tiles as it creates them (vLLM 0.11
# model_executor/layers/quantization/mxfp4.py, `Mxfp4MoEMethod.create_weights`): Marlin, its kernel on NVIDIA GPUs
# before Hopper, rounds a rank's expert width up to a multiple of 128 and the hidden size to 256; FlashInfer, its
# default on Blackwell, and the ROCm build round both to 256. gpt-oss (hidden size and expert width 2880) at TP 4 on
# the A100 then holds 1.14x the experts' bytes: its startup log printed 17.22 GiB of weights a GPU (dennislee22,
# vLLM 0.10.1), 15.2 unpadded. Hopper keeps the unpadded bytes here: vLLM runs Triton's kernels there where the
# optional triton_kernels package is installed (the width to 64, which 2880 already is) and Marlin otherwise; llm-d's
# H100 logs read 5-6% over the unpadded bytes (13.47 GiB for gpt-oss-20b against 12.82), Marlin's padding would add
# 9%, and with it gpt-oss-120b on one H100 would leave no KV pool where llm-d's run started with 3.33 GiB
# (docs/model.md, Known gaps).
VLLM_MXFP4_TILES = {"marlin": (128, 256), "flashinfer": (256, 256), "rocm": (256, 256)}
MARLIN_FAMILIES = frozenset({"turing", "ampere", "ada"})


def expert_tiles(engine: str, precision: str, vendor: str, family: str) -> tuple[int, int] | None:
    """(expert width per rank, hidden size) multiples to which `engine` pads a MoE model's experts in `precision`
    on a GPU of `vendor` and `family` (`VLLM_MXFP4_TILES`); None where it pads nothing."""
    if engine != "vllm" or precision != "mxfp4":
        return None
    kernel = ("rocm" if vendor == "amd" else "flashinfer" if family == "blackwell"
              else "marlin" if family in MARLIN_FAMILIES else None)
    return None if kernel is None else VLLM_MXFP4_TILES[kernel]


def sampler_profile_bytes(engine: str, version: str | None) -> float | None:
    """Bytes per sequence and vocabulary entry that `engine` at `version` (None: its current release) holds when
    it profiles its sampler apart from the forward pass (vLLM V1); None where the sampler is not profiled apart."""
    v = parse_version(version)
    if engine == "vllm" and (v is None or v >= (0, 8)):
        return VLLM_V1_SAMPLER_BYTES
    return None


def line_profiles_sampler(key: str) -> bool:
    """Whether every release of factor line `key` (`factor_key`) profiles its sampler apart
    (`sampler_profile_bytes`), judged at the line's first release: an engine's newest line starts at the version
    that split it from its older line (`FACTOR_LINES`), every other line at the engine's first. Such a line's
    activation peak is read from the engine's code, and the fit leaves its `activation_scale` at 1."""
    base = base_line(key)
    engine = engine_of_line(base)
    split = FACTOR_LINES.get(engine)
    first = ".".join(str(p) for p in split[0]) if split is not None and base == engine else "0.0"
    return sampler_profile_bytes(engine, first) is not None


def engine_profile(name: str) -> EngineProfile:
    """The engine named `name` (case and separators ignored: `TensorRT-LLM`, `trtllm` is not accepted)."""
    key = normalize_name(name)
    for engine in ENGINES.values():
        if normalize_name(engine.name) == key:
            return engine
    raise CatalogLookupError("engine", name, closest_names(name, ENGINES))


@dataclass(frozen=True)
class VersionDefaults:
    """What one engine at one version does when a setting is left unset, on one GPU (docs/engines.md)."""

    max_num_seqs: int
    step_tokens: float        # token budget of one step (max_num_batched_tokens, chunked_prefill_size, ...)
    memory_fraction: float
    scheduling: Scheduling
    activation_scale: float | None = None  # replaces the engine's fitted activation factor (None: keep it)


# Words whose version a version text carries beside the engine's (AMD's container tag
# `rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715`, `cuda12.4`): never the engine's release.
_PLATFORM_WORDS = frozenset({"rocm", "cuda", "cu", "torch", "pytorch", "python", "py", "ubuntu"})
# A benchmark round a version text may name instead of, or beside, the engine's release (`MLPerf Inference v5.1`,
# `MLPerf Inference: Datacenter v4.1`, MLCommons' results repository `inference_results_v5.0`, SemiAnalysis'
# `InferenceMAX v1`): never the engine's.
_BENCHMARK_ROUND = re.compile(
    r"(?:mlperf|inference[_-]results|inference[_ -]?max)"
    r"(?:[\s_:-]*(?:inference|training|datacenter|edge|closed|open|division|round))*"
    r"[\s_:-]*v?\d+\.\d+(?:\.\d+)?", re.IGNORECASE)


@lru_cache(maxsize=1024)  # a search asks it for a few version texts some 700 times a plan; its answer is a tuple
def parse_version(text: str | None) -> tuple[int, ...] | None:
    """(major, minor, patch) of the first dotted version in `text` (`~0.6.3`, `NIM 1.8.0`) that is not a platform's
    (`rocm6.4.1_vllm_0.9.1`: 0.9.1) nor a benchmark round's (`MLPerf Inference v5.1, TensorRT-LLM 0.17.0`: 0.17.0;
    `InferenceMAX v1.2`: none), None if none."""
    for match in re.finditer(r"([A-Za-z]*)[ _-]?v?(\d+)\.(\d+)(?:\.(\d+))?", _BENCHMARK_ROUND.sub(" ", text or "")):
        if match.group(1).lower() not in _PLATFORM_WORDS:
            return tuple(int(g or 0) for g in match.groups()[1:])
    return None


GIB = float(2**30)

# Release lines whose engines differ enough to need factors of their own: vLLM's V0 engine (before 0.8, when
# V1 became the default) and TensorRT-LLM's built-engine path (before 1.0, when the PyTorch backend became the
# default of trtllm-serve). The newest line keeps the engine's own name, so a plan (always the current
# release) uses it. The date is the newer line's first release on PyPI (upload time of vllm-0.8.0 and
# tensorrt_llm-1.0.0): a measurement that states no version but whose source is dated before it
# (`Scenario.published`) ran the older line.
FACTOR_LINES: dict[str, tuple[tuple[int, ...], date, str]] = {
    "vllm": ((0, 8), date(2025, 3, 18), "vllm-v0"),
    "tensorrt-llm": ((1, 0), date(2025, 9, 24), "tensorrt-llm-v0"),
}


# Engines that run on some GPU vendors only (the rest run on every vendor of the catalog): TensorRT-LLM is built on
# CUDA and TensorRT, NVIDIA's own (its install docs: NVIDIA GPUs; its images are NGC's, CUDA only).
ENGINE_VENDORS: dict[str, tuple[str, ...]] = {"tensorrt-llm": ("nvidia",)}


def engine_vendor_problem(engine: str, vendor: str, gpu: str) -> str | None:
    """Why `engine` cannot run on `gpu` of `vendor`; None where it can."""
    vendors = ENGINE_VENDORS.get(engine)
    if vendors is None or vendor in vendors:
        return None
    return (f"{engine} runs on {' and '.join(v.upper() for v in vendors)} GPUs only; {gpu} is an {vendor.upper()} "
            "GPU")


# GPU vendors whose engine builds run other kernels than the CUDA build (ROCm: hipBLASLt GEMMs, Triton or AITER
# attention, RCCL, HIP graphs) and so get factor lines of their own: `vllm` on an MI300X is fitted as `vllm-rocm`.
# A stack line without fitted factors falls back to the engine's line (`base_line`), never to the neutral prior.
STACK_LINES: dict[str, str] = {"amd": "rocm"}


def factor_key(engine: str, version: str | None, vendor: str = "nvidia", published: date | None = None) -> str:
    """The name the fitted factors of `engine` at `version` on a `vendor` GPU are kept under (`FACTOR_LINES`,
    `STACK_LINES`). Without a version, a measurement `published` before the newer line's first release ran
    the older line; with neither, the current line."""
    line = FACTOR_LINES.get(engine)
    v = parse_version(version)
    older = line is not None and (v < line[0] if v is not None else published is not None and published < line[1])
    key = line[2] if line is not None and older else engine
    stack = STACK_LINES.get(vendor)
    return f"{key}-{stack}" if stack else key


def engine_of_line(key: str) -> str:
    """The engine a factor line belongs to (`vllm-v0-rocm` -> `vllm`)."""
    base = base_line(key)
    return next((engine for engine, (_, _, older) in FACTOR_LINES.items() if older == base), base)


def base_line(key: str) -> str:
    """The CUDA-build line of factor line `key` (`vllm-rocm` -> `vllm`); `key` itself when it is one."""
    for stack in STACK_LINES.values():
        if key.endswith(f"-{stack}"):
            return key[: -len(stack) - 1]
    return key


def scheduling_of(engine: str, version: str | None, max_model_len: int, chunked: bool | None = None) -> Scheduling:
    """How `engine` at `version` (None: its current release) fills a step at its defaults (docs/engines.md), or with
    chunked prefill turned on or off (`chunked`; None: the release's default). vLLM V0 with chunked prefill mixes
    decodes and prompt chunks in a step (decode first), without it sends whole prompts first."""
    default = _scheduling_of(engine, version, max_model_len)
    if chunked is None or chunked == default.chunked:
        return default
    if engine == "vllm" and (v := parse_version(version)) is not None and v < (0, 8):
        return Scheduling(mixed=chunked, chunked=chunked)
    return replace(default, chunked=chunked)


def _scheduling_of(engine: str, version: str | None, max_model_len: int) -> Scheduling:
    v = parse_version(version)
    if engine == "vllm":
        if v is not None and v < (0, 8) and max_model_len <= 32768:
            return Scheduling(mixed=False, chunked=False)  # V0 without chunked prefill: prefill first, whole
        if v is not None and v < (0, 8):
            return Scheduling(mixed=True, chunked=True)  # V0 chunked: `can_allocate` wants the whole prompt
        return Scheduling(mixed=True, chunked=True, admit_first_chunk=True)
    if engine == "sglang":
        return Scheduling(mixed=False, chunked=True, estimate_output=True)
    if engine == "tgi":
        return Scheduling(mixed=False, chunked=True)
    if engine == "tensorrt-llm":
        return Scheduling(mixed=True, chunked=False, reserve_output=True)
    if engine == "lmdeploy":
        return Scheduling(mixed=True, chunked=False)
    return Scheduling(mixed=True, chunked=engine in ENGINES and ENGINES[engine].chunked_prefill)


def version_defaults(engine: EngineProfile, version: str | None, gpu_memory_bytes: float, gpu_key: str,
                     gpus_per_instance: int, max_model_len: int, offline: bool = False,
                     chunked: bool | None = None) -> VersionDefaults:
    """The defaults of `engine` at `version` (None: its current release line) for one model instance on
    `gpus_per_instance` GPUs of `gpu_memory_bytes` each, served (`vllm serve`), or with `offline` run in-process
    as offline benchmarks run it (vLLM V1's `LLM` class: `vllm bench throughput`, `LLM.generate`, whose step
    budget is twice or four times the server's), with chunked prefill as `chunked` turns it (None: as the release
    decides; vLLM V0's default budget follows the choice, 512 chunked, else max(max_model_len, 2048)). Sources,
    quoted, in docs/engines.md."""
    v = parse_version(version)
    gib = gpu_memory_bytes / GIB
    name = engine.name
    if name == "vllm":
        if v is not None and v < (0, 8):
            # V0: chunked prefill only for contexts over 32k (budget 512, decode first); otherwise whole prompts,
            # prefill first, with a budget of max(max_model_len, 2048).
            if (max_model_len > 32768) if chunked is None else chunked:
                return VersionDefaults(256, 512.0, 0.9, scheduling_of(name, version, max_model_len, chunked))
            return VersionDefaults(256, float(max(max_model_len, 2048)), 0.9,
                                   scheduling_of(name, version, max_model_len, chunked))
        # Which GPUs get the larger step budget and sequence limit moved within 0.8 (`EngineArgs` in the sdists):
        # 0.8.0-0.8.3 a name with "h100" or "h200" in it for the budget and 1024 sequences everywhere, 0.8.4 that
        # name for both, 0.8.5 70 GiB or more, 0.9 on 70 GiB or more but no A100.
        key = gpu_key.lower()
        named = "h100" in key or "h200" in key
        if v is not None and v < (0, 8, 5):
            big, seqs_everywhere = named, v < (0, 8, 4)
        elif v is not None and v < (0, 9):
            big, seqs_everywhere = gib >= 70, False
        else:
            big, seqs_everywhere = gib >= 70 and "a100" not in key, False
        seqs = 1024 if big or seqs_everywhere else 256
        budget = (16384 if offline else 8192) if big else (8192 if offline else 2048)
        return VersionDefaults(seqs, float(budget), 0.9, scheduling_of(name, version, max_model_len, chunked))
    if name == "sglang":
        if v is not None and v < (0, 5):
            # By tensor-parallel size; from 0.4.6 only on GPUs of up to 80 GiB (0.88 above), before it on every
            # GPU, and before 0.4 with 0.83 at TP 8 (`ServerArgs.__post_init__` of the 0.3.0, 0.4.0-0.4.5 and
            # 0.4.6.post5 wheels).
            limit = 25000 / 1024
            by_tp = {16: 0.79, 8: 0.83 if v < (0, 4) else 0.81, 4: 0.85, 2: 0.87}
            fraction = 0.88
            if gib <= 80 or v < (0, 4, 6):
                fraction = by_tp.get(next((k for k in (16, 8, 4, 2) if gpus_per_instance >= k), 1), 0.88)
        elif v is not None and v < (0, 5, 3):
            limit = 35.0
            reserved = 32.0
            if gib < 35:
                reserved = 2.8 + gpus_per_instance / 10
            elif gib < 90:
                reserved = 9.5 + gpus_per_instance / 2
            elif gib < 160:
                reserved = 12.0 + gpus_per_instance / 2
            fraction = round((gib - reserved) / gib, 3)
        else:
            # 0.5.3 on (`ServerArgs._handle_gpu_memory_settings` of the 0.5.3, 0.5.4 and 0.5.5.post1 sdists): the
            # prefill chunk by the GPU's memory, and mem_fraction_static = (GPU MiB - reserved) / GPU MiB, the reserve
            # for activations and CUDA graphs 512 MiB + 1.5 MiB per token of the chunk (at least 2048) + 2 MiB per
            # sequence of the largest captured batch + 128 MiB per GPU of the instance, at least 10 GiB on a GPU of
            # more than 60 GiB (data-parallel attention, speculative decoding and piecewise CUDA graphs, all off by
            # default, reserve more).
            chunk = 2048 if gib < 35 else 4096 if gib < 60 else 8192 if gib < 160 else 16384
            graphs = cuda_graph_max_batch(name, version, gpu_memory_bytes, gpus_per_instance)
            reserved_mib = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + gpus_per_instance / 8 * 1024
            if gib > 60:
                reserved_mib = max(reserved_mib, 10 * 1024)
            fraction = round((gib * 1024 - reserved_mib) / (gib * 1024), 3)
            return VersionDefaults(4096, float(chunk), fraction, scheduling_of(name, version, max_model_len, chunked))
        budget = 2048 if gib < limit else (8192 if gib < 160 else 16384)
        return VersionDefaults(4096, float(budget), fraction, scheduling_of(name, version, max_model_len, chunked))
    if name == "tensorrt-llm":
        no_evict = scheduling_of(name, version, max_model_len, chunked)
        if v is not None and v < (1, 0):
            return VersionDefaults(256, 8192.0, 0.9, no_evict)
        # 1.x serves from the PyTorch backend: its warm-up forward is an ordinary one, not the activation
        # buffers a built TensorRT engine reserves (what the fitted factor describes).
        return VersionDefaults(2048, 8192.0, 0.9, no_evict, activation_scale=1.0)
    if name == "tgi":
        return VersionDefaults(engine.default_max_num_seqs, float(engine.default_max_batched_tokens),
                               engine.default_memory_fraction, scheduling_of(name, version, max_model_len, chunked))
    if name == "lmdeploy":
        return VersionDefaults(engine.default_max_num_seqs, math.inf, engine.default_memory_fraction,
                               scheduling_of(name, version, max_model_len, chunked))
    return VersionDefaults(engine.default_max_num_seqs, float(engine.default_max_batched_tokens),
                           engine.default_memory_fraction, scheduling_of(name, version, max_model_len, chunked))


# The factor lines whose releases, at their defaults, run some decode batches outside their captured CUDA graphs
# (`cuda_graph_max_batch` finite): vLLM V1, SGLang, TGI. vLLM V0 captures every batch up to its max_num_seqs.
GRAPH_CAPPED_LINES = ("vllm", "sglang", "tgi")


def cuda_graph_max_batch(engine: str, version: str | None, gpu_memory_bytes: float, tp: int,
                         step_tokens: float | None = None) -> float:
    """The largest decode batch `engine` at `version` (None: its current release) runs from a captured CUDA graph at
    its defaults, on `tp` GPUs of `gpu_memory_bytes` (NVML total) each; a step over more sequences runs eagerly,
    launching every kernel of every layer from the CPU (`Hardware.eager_step_s`). math.inf where graphs cover any
    batch the engine runs, or where the engine's default is not known (TensorRT-LLM, LMDeploy, llama.cpp, MLC).

    - vLLM V1: the sizes 1, 2, 4, 8, 16 ... up to 512, none above `max_num_batched_tokens`
      (`VllmConfig._set_cudagraph_sizes` in the 0.8.5, 0.9.2 and 0.10.1.1 wheels; from 0.10 up to
      `min(2 x max_num_seqs, 512)`, `SchedulerConfig.cuda_graph_sizes`, which never leaves a batch of max_num_seqs
      outside; 0.11 the same, ../shared/catalog-facts/engine-defaults.md): only a batch above 512 runs eagerly. V0
      captures every size up to its `max_num_seqs` (the same function's V0 branch; 0.6.3
      `_get_max_graph_batch_size`): never eager at its defaults.
    - SGLang before 0.5.3: sizes 1, 2, 4, 8 ... 160 (0.3.0 `model_runner.py`, on every GPU; 0.4 `cuda_graph_max_bs`
      160, or 8 at TP < 4 and 80 above on GPUs under 25,000 MiB, 0.5.0-0.5.2 under 35 GiB). From 0.5.3 by GPU
      memory and TP
      (`_handle_gpu_memory_settings` in the 0.5.3, 0.5.4 and 0.5.5 sdists): under 20 GiB 8; under 35 GiB 16 (24 from
      0.5.5) at TP < 4, 80 above; under 60 GiB 32 or 160; under 160 GiB (H100, A100-80GB, H200) 256 or 512;
      above (B200, MI300X) 512.
    - TGI: `--cuda-graphs` "Default = 1,2,4,8,16,32" (launcher `main.rs`, v2.0.4 to v3.3.7).
    """
    v = parse_version(version)
    mib = gpu_memory_bytes / 2**20
    if engine == "vllm":
        if v is not None and v < (0, 8):
            return math.inf
        return float(min(512.0, step_tokens if step_tokens is not None else math.inf))
    if engine == "sglang":
        small = tp < 4
        if v is not None and v < (0, 5, 3):
            below = 0.0 if v < (0, 4) else 25_000.0 if v < (0, 5) else 35 * 1024.0  # where the automatic cap starts
            return 160.0 if mib >= below else (8.0 if small else 80.0)
        if mib < 20 * 1024:
            return 8.0
        if mib < 35 * 1024:
            return (16.0 if v is not None and v < (0, 5, 5) else 24.0) if small else 80.0
        if mib < 60 * 1024:
            return 32.0 if small else 160.0
        if mib < 160 * 1024:
            return 256.0 if small else 512.0
        return 512.0
    if engine == "tgi":
        return 32.0
    return math.inf


# The share of drafted tokens a DeepSeek-V3 MTP module gets accepted: "the acceptance rate of the second token
# prediction ranges between 85% and 90%" (DeepSeek-V3 Technical Report, arXiv 2412.19437, section 5.4.3); the low end.
MTP_ACCEPTANCE = 0.85


def mtp_tokens_per_step(draft_tokens: int, acceptance: float = MTP_ACCEPTANCE) -> float:
    """Tokens a sequence emits per step, on average, with `draft_tokens` drafts each accepted with probability
    `acceptance` once the one before it was (the chain stops at the first rejection): 1 + a + ... + a^k. The module's
    one published rate is for the first draft; the later ones are assumed to keep it (docs/model.md)."""
    return sum(acceptance**i for i in range(max(draft_tokens, 0) + 1))
