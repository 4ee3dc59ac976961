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
    description: str


ENGINES: dict[str, EngineProfile] = {
    e.name: e
    for e in (
        EngineProfile("vllm", True, "total_fraction", 0.9, 16, True, 256, 2048, True,
                      "vLLM: paged KV, continuous batching, chunked prefill on by default since V1 (0.8)"),
        EngineProfile("sglang", True, "total_fraction", 0.88, 1, True, 1024, 8192, True,
                      "SGLang: radix-tree KV (page size 1), continuous batching, chunked prefill 8192"),
        EngineProfile("tensorrt-llm", True, "free_fraction", 0.9, 64, True, 256, 8192, True,
                      "TensorRT-LLM: in-flight batching, paged KV sized from free memory after load"),
        EngineProfile("tgi", True, "free_fraction", 0.95, 16, True, 256, 4096, True,
                      "Text Generation Inference: continuous batching, KV sized from free memory"),
        EngineProfile("lmdeploy", True, "free_fraction", 0.8, 64, False, 256, 8192, True,
                      "LMDeploy TurboMind: persistent batching, KV = cache_max_entry_count of free memory"),
        EngineProfile("mlc-llm", True, "total_fraction", 0.85, 16, True, 80, 2048, True,
                      "MLC-LLM serve: continuous batching, KV from gpu_memory_utilization of total memory"),
        EngineProfile("llama.cpp", False, "context", 1.0, 1, False, 1, 512, False,
                      "llama.cpp server: one sequence per slot, no continuous batching across requests; "
                      "multi-GPU splits layers (pipeline), which adds no speed to one stream"),
        EngineProfile("exllama", False, "context", 1.0, 1, False, 1, 2048, False,
                      "ExLlama: single-stream GPTQ/EXL2 kernels"),
    )
}


@dataclass(frozen=True)
class EngineSettings:
    """The settings one engine instance runs with (stated values, else the engine's defaults)."""

    memory_fraction: float     # gpu_memory_utilization (or the engine's equivalent)
    max_model_len: int
    max_num_seqs: int
    chunk_tokens: float        # per-step prefill token budget; inf when prefill is not chunked
    profile_tokens: int        # tokens of the memory-profiling forward pass


def engine_profile(name: str) -> EngineProfile:
    """The engine named `name` (case and separators ignored: `TensorRT-LLM`, `trtllm` is not accepted)."""
    key = normalize_name(name)
    for engine in ENGINES.values():
        if normalize_name(engine.name) == key:
            return engine
    raise CatalogLookupError("engine", name, closest_names(name, ENGINES))
