"""Serving engines: how each one batches, sizes its KV pool and schedules prefill.

Behaviour is fixed per engine (from the engines' documentation and defaults). The efficiency factors
that turn hardware peaks into achieved speed are fitted on measurements and live in
`data/factors.json` (see `inferplan.planner.factors`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
        is left after weights, the profiled activation peak and non-torch memory (vLLM, SGLang, MLC-LLM).
      "free_fraction": the KV pool is a fraction of the memory still free after loading the weights
        (TensorRT-LLM `kv_cache_free_gpu_mem_fraction`, LMDeploy `cache_max_entry_count`, TGI).
      "context": the engine allocates KV for the configured context only (llama.cpp, ExLlama).
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
            memory_mode="total_fraction",
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
        ),
    )
}


# Weight formats each engine serves (the first ones are what a plan tries when it names none), from the
# engines' quantisation docs. GGUF and MLC formats belong to llama.cpp and MLC-LLM only.
SERVED_PRECISIONS: dict[str, tuple[str, ...]] = {
    "vllm": ("bf16", "fp8", "int4-awq", "int8-w8a8", "fp16", "int4-gptq", "int8-gptq", "mxfp4"),
    "sglang": ("bf16", "fp8", "int4-awq", "int8-w8a8", "fp16", "int4-gptq", "mxfp4"),
    "tgi": ("bf16", "fp8", "int4-awq", "int4-gptq", "fp16"),
    "tensorrt-llm": ("bf16", "fp8", "int8-w8a8", "int4-awq", "fp16", "mxfp4"),
    "lmdeploy": ("bf16", "int4-awq", "int8-w8a8", "fp16"),
    "mlc-llm": ("mlc-q4f16_1", "fp16"),
    "llama.cpp": ("gguf-q4_k_m", "gguf-q8_0", "gguf-f16", "gguf-q6_k", "gguf-q5_k_m", "gguf-q4_0"),
    "exllama": ("int4-gptq",),
}
DEFAULT_PLAN_PRECISIONS = 4  # a plan without `precisions` tries the first four an engine serves


@dataclass(frozen=True)
class EngineSettings:
    """The settings one engine instance runs with (stated values, else the engine's defaults)."""

    memory_fraction: float  # gpu_memory_utilization (or the engine's equivalent)
    max_model_len: int
    max_num_seqs: int
    chunk_tokens: float  # per-step prefill token budget; inf when prefill is not chunked
    profile_tokens: int  # tokens of the memory-profiling forward pass


def engine_profile(name: str) -> EngineProfile:
    """The engine named `name` (case and separators ignored: `TensorRT-LLM`, `trtllm` is not accepted)."""
    key = normalize_name(name)
    for engine in ENGINES.values():
        if normalize_name(engine.name) == key:
            return engine
    raise CatalogLookupError("engine", name, closest_names(name, ENGINES))
