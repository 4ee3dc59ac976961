"""Command-line arguments that make a serving engine run one planned deployment (docs/engines.md,
"Engine arguments").

`engine_launch` maps a candidate (checkpoint, precision, TP, batch, KV dtype, engine settings) to the
arguments after the engine's entry point, with a note for every choice that is not obvious. The flags used
are checked by the tests against the flags each engine's parser accepts at its pinned version lines
(`data/engine-flags.json`, built from the engines' own source by `scripts/engine_flags.py`).

Quantisation flags: a pre-quantised checkpoint carries its method in its config, and vLLM and SGLang read
it from there, so no `--quantization` is given for one:
- vLLM: `ModelConfig._verify_quantization` sets `self.quantization = quant_method` from the checkpoint's
  `quantization_config` when none is given (vllm/config.py lines 264-297 in 0.6.3.post1,
  vllm/config/model.py `_verify_quantization` in 0.11.2); 0.11.2 also reads ModelOpt's standalone
  `hf_quant_config.json` into it (vllm/transformers_utils/config.py lines 642-647), 0.6.3.post1 does not
  (`_parse_quant_hf_config`, vllm/config.py lines 257-262, looks at config.json only), so on the 0.6 line a
  ModelOpt checkpoint gets `--quantization modelopt`. Giving `--quantization awq` for an AWQ checkpoint would
  also pick the slower AWQ kernel over the `awq_marlin` override the engine chooses itself.
- SGLang: `ModelConfig._verify_quantization` / `_parse_quant_hf_config` (sglang/srt/configs/model_config.py
  lines 305-366 in 0.4.6.post5, 410-470 in 0.5.2), which detect ModelOpt from `hf_quant_config.json`.
Only "online" (a 16-bit checkpoint that the engine quantises to FP8 while loading) needs a flag.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from inferplan.planner.catalog.engines import EngineSettings, engine_vendor_problem, parse_version
from inferplan.planner.catalog.gpus import FP8_FAMILIES, PRE_AMPERE_FAMILIES

# The pinned release of each engine's current line (what `version=None` means).
DEFAULT_VERSIONS: dict[str, str] = {
    "vllm": "0.11.2",
    "sglang": "0.5.2",
    "tensorrt-llm": "1.0.0",
    "tgi": "3.3.7",
    "lmdeploy": "0.10.2",
}

# Pinned version lines, oldest first: (first version of the line, line name).
VERSION_LINES: dict[str, tuple[tuple[tuple[int, ...], str], ...]] = {
    "vllm": (((0,), "0.6"), ((0, 8), "0.11")),            # V0 engine before 0.8, V1 after
    "sglang": (((0,), "0.4"), ((0, 5), "0.5")),
    "tensorrt-llm": (((0,), "0.18"), ((1, 0), "1")),     # built engines before 1.0, PyTorch backend after
    "tgi": (((0,), "2"), ((3, 0), "3")),
    "lmdeploy": (((0,), "0.10"),),
}

# The releases a plan may name, per engine: (the oldest planned, the newest read). The oldest is the first release of
# the oldest pinned line whose flags were read (vLLM 0.6: the V0 parser of 0.6.3.post1; SGLang 0.4: the 0.4.0-0.4.10
# sdists behind `FLAG_SINCE`; TGI 2: the launcher's 2.x arguments, whose `--max-input-tokens` 1.x named
# `--max-input-length`); an older one is refused. TensorRT-LLM's releases before 0.18 were not read and are not limited.
# The newest is the last release whose flags were read (vLLM 0.11.2; SGLang 0.5.10, docs/engines.md; TGI 3.3.7;
# TensorRT-LLM 1.0.0's documented options): a later one is planned as it, with a warning.
RELEASES_READ: dict[str, tuple[tuple[int, ...] | None, str]] = {
    "vllm": ((0, 6), "0.11.2"),
    "sglang": ((0, 4), "0.5.10"),
    "tgi": ((2, 0), "3.3.7"),
    "tensorrt-llm": (None, "1.0.0"),
}


CHECKPOINT_FORMATS = ("native", "fp8-native", "modelopt-fp8", "compressed-tensors-fp8", "compressed-tensors-int8",
                      "compressed-tensors-w4a16", "autofp8", "awq", "gptq", "online", "modelopt-nvfp4",
                      "compressed-tensors-nvfp4", "quark-fp8", "quark-mxfp4", "fbgemm-fp8")
_FORMAT_ALIASES = {"bf16-native": "native", "fp16-native": "native", "mxfp4-native": "native",
                   "compressed-tensors-w8a8-int8": "compressed-tensors-int8", "w8a8-int8": "compressed-tensors-int8",
                   "compressed-tensors-w4a16-int4": "compressed-tensors-w4a16"}

# The checkpoint formats that hold each quantised precision ("native": the model's own repository holds it).
_FORMATS_OF: dict[str, frozenset[str]] = {
    "bf16": frozenset({"native"}),
    "fp16": frozenset({"native"}),
    "fp8": frozenset({"fp8-native", "modelopt-fp8", "compressed-tensors-fp8", "autofp8", "online", "quark-fp8",
                      "fbgemm-fp8"}),
    "int8-w8a8": frozenset({"compressed-tensors-int8"}),
    "int4-awq": frozenset({"awq"}),
    "int4-gptq": frozenset({"gptq", "compressed-tensors-w4a16"}),  # W4A16 INT4: the same packed 4-bit groups
    "int8-gptq": frozenset({"gptq"}),
    "mxfp4": frozenset({"native"}),  # gpt-oss ships MXFP4 experts in its own repository
    "nvfp4": frozenset({"modelopt-nvfp4", "compressed-tensors-nvfp4"}),
    "mxfp4-w4a4": frozenset({"quark-mxfp4"}),
}
_SIXTEEN_BIT_KV = ("auto", "bf16", "fp16", "bfloat16", "float16")
_TGI_DEFAULT_MAX_CONCURRENT = 128  # launcher/src/main.rs default (engine-defaults.md)
_TGI_DEFAULT_MAX_WAITING_TOKENS = 20
TRT_OPTIONS_FILE = "trtllm-extra-llm-api-options.yaml"


@dataclass(frozen=True)
class EngineFlags:
    """The flags of one engine's command line that say what a deployment is: written by `engine_launch` and
    read back from a running Deployment by the operator (`operator/observing.read_deployment`), so that both
    directions use one table. Each tuple lists the spellings the engine's parser accepts: the first is the one
    written, the others are read too (in that order of precedence); empty where the engine has no such flag."""

    tp: tuple[str, ...]
    batch: tuple[str, ...]
    quantization: tuple[str, ...] = ()
    dtype: tuple[str, ...] = ()
    kv_cache_dtype: tuple[str, ...] = ()
    pp: tuple[str, ...] = ()  # pipeline stages
    ep: tuple[str, ...] = ()  # expert-parallel size
    dp_attention: tuple[str, ...] = ()  # the switch that makes the attention data-parallel over the TP ranks
    dp_size: tuple[str, ...] = ()  # the data-parallel size given with it
    ep_switch: tuple[str, ...] = ()  # a switch that makes the MoE layers expert-parallel (no size: over the TP ranks);
    # read only, and only where its release has it (vLLM's from 0.10): `READ_ONLY_ROLES`
    step_tokens: tuple[str, ...] = ()  # the token budget of one step (the prefill chunk); SGLang's takes -1 for
    # chunking off (`STEP_TOKENS_CHUNKING_OFF`)
    memory_fraction: tuple[str, ...] = ()  # the memory share, as `EngineSettings.memory_fraction` means it for the
    # engine's memory mode (`engines.EngineProfile.memory_mode`): vLLM's of total memory, SGLang's static share,
    # TensorRT-LLM's of the memory free after loading
    context: tuple[str, ...] = ()  # the longest sequence, prompt and output (`EngineSettings.max_model_len`)
    chunked_on: tuple[str, ...] = ()  # the switch that turns chunked prefill on (vLLM 0.6's takes True|False)
    chunked_off: tuple[str, ...] = ()  # the switch that turns it off
    # (chunked_on, chunked_off: each in the lines that have it only, `SOME_LINES_ROLES`)
    option_keys: tuple[str, ...] = ()  # the same switches as keys of the engine's options file (`key: true`)
    bench_ep: tuple[str, ...] = ()  # the expert-parallel size as the engine's benchmark tool spells it (trtllm-bench)

    @property
    def roles(self) -> dict[str, tuple[str, ...]]:
        return {"tp": self.tp, "batch": self.batch, "quantization": self.quantization, "dtype": self.dtype,
                "kv_cache_dtype": self.kv_cache_dtype, "pp": self.pp, "ep": self.ep, "dp_attention": self.dp_attention,
                "dp_size": self.dp_size, "ep_switch": self.ep_switch, "step_tokens": self.step_tokens,
                "memory_fraction": self.memory_fraction, "context": self.context, "chunked_on": self.chunked_on,
                "chunked_off": self.chunked_off}


STEP_TOKENS_CHUNKING_OFF = -1
"""SGLang's `--chunked-prefill-size` that turns chunked prefill off (its scheduler takes any value <= 0 so:
`if self.chunked_prefill_size <= 0:  # -1 means disable`, srt/managers/scheduler.py in 0.5.3)."""

READ_ONLY_ROLES = frozenset({"ep_switch"})
"""Roles the planner never writes: a spelling of theirs need only exist in some pinned release of its engine."""

SOME_LINES_ROLES = READ_ONLY_ROLES | {"chunked_on", "chunked_off"}
"""Roles whose spellings need exist in only some pinned line of their engine: read-only ones, and the chunked-prefill
switches, which the launches write only on a line that has them (vLLM's --no-enable-chunked-prefill from the V1
line, TensorRT-LLM's --enable_chunked_prefill on 1.x)."""

ENGINE_FLAGS: dict[str, EngineFlags] = {
    # vLLM's short aliases -tp and -q (vllm/engine/arg_utils.py) are read, never written.
    "vllm": EngineFlags(tp=("--tensor-parallel-size", "-tp"), batch=("--max-num-seqs",),
                        quantization=("--quantization", "-q"), dtype=("--dtype",),
                        kv_cache_dtype=("--kv-cache-dtype",), pp=("--pipeline-parallel-size", "-pp"),
                        ep_switch=("--enable-expert-parallel",), step_tokens=("--max-num-batched-tokens",),
                        memory_fraction=("--gpu-memory-utilization",), context=("--max-model-len",),
                        chunked_on=("--enable-chunked-prefill",), chunked_off=("--no-enable-chunked-prefill",)),
    "sglang": EngineFlags(tp=("--tp-size", "--tensor-parallel-size"), batch=("--max-running-requests",),
                          quantization=("--quantization",), dtype=("--dtype",), kv_cache_dtype=("--kv-cache-dtype",),
                          pp=("--pp-size", "--pipeline-parallel-size"), ep=("--ep-size", "--expert-parallel-size"),
                          dp_attention=("--enable-dp-attention",), dp_size=("--dp-size", "--data-parallel-size"),
                          ep_switch=("--enable-ep-moe",), step_tokens=("--chunked-prefill-size",),
                          memory_fraction=("--mem-fraction-static",), context=("--context-length",)),
    # TGI: --max-batch-size caps the running batch; --max-concurrent-requests only bounds admission (read as a
    # fallback when no batch cap is given).
    "tgi": EngineFlags(tp=("--num-shard",), batch=("--max-batch-size", "--max-concurrent-requests"),
                       quantization=("--quantize",), dtype=("--dtype",), kv_cache_dtype=("--kv-cache-dtype",),
                       step_tokens=("--max-batch-prefill-tokens",), memory_fraction=("--cuda-memory-fraction",),
                       context=("--max-total-tokens",)),
    # trtllm-serve has no precision or KV dtype flag (they come from the checkpoint and the options file).
    # trtllm-serve: `--ep_size` (`--ep` in trtllm-bench) and the LLM API options file's `enable_attention_dp: true`
    # (--extra_llm_api_options).
    "tensorrt-llm": EngineFlags(tp=("--tp_size",), batch=("--max_batch_size",), pp=("--pp_size",),
                                ep=("--ep_size",), option_keys=("enable_attention_dp",), bench_ep=("--ep",),
                                step_tokens=("--max_num_tokens",),
                                memory_fraction=("--kv_cache_free_gpu_memory_fraction",), context=("--max_seq_len",),
                                chunked_on=("--enable_chunked_prefill",)),
    "lmdeploy": EngineFlags(tp=("--tp",), batch=("--max-batch-size",), dtype=("--dtype",),
                            memory_fraction=("--cache-max-entry-count",), context=("--session-len",)),
}


def flag_spellings(role: str, engine: str | None = None) -> tuple[str, ...]:
    """Every spelling of `role` (`EngineFlags.roles`: "tp", "batch", ..., "dp_attention") in ENGINE_FLAGS,
    `engine`'s first (a Deployment may run another engine than its plan names: all are read), less another engine's
    spelling that `engine`'s own parser takes (at any pinned line) for something else: SGLang's --max-total-tokens is
    the size of its KV pool, not a context length as TGI's is."""
    order = [engine] if engine in ENGINE_FLAGS else []
    order += [name for name in ENGINE_FLAGS if name != engine]
    own = set().union(*(parser["flags"] for parser in engine_flags().get(engine or "", {}).values()))
    spellings: list[str] = []
    for name in order:
        spellings += [flag for flag in ENGINE_FLAGS[name].roles[role] if flag not in spellings
                      and (name == engine or flag not in own)]
    return tuple(spellings)


def stated_layout(text: str) -> tuple[bool, bool]:
    """(data-parallel attention, expert parallelism) as a command line or a description of one states them, read
    with the spellings of ENGINE_FLAGS only: a data-parallel-attention switch or option key (`key: true`), an
    expert-parallel size above 1 or an expert-parallel switch (any engine's, since a text may name any)."""
    def switch(flags: tuple[str, ...]) -> bool:
        return any(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) for flag in flags)

    keys = tuple(key for flags in ENGINE_FLAGS.values() for key in flags.option_keys)
    dp = switch(flag_spellings("dp_attention")) or any(
        re.search(rf"\b{re.escape(key)}[\s:=`'\"]*(?:true|True)\b", text) for key in keys)
    bench = tuple(flag for flags in ENGINE_FLAGS.values() for flag in flags.bench_ep)
    sizes = [int(m.group(1)) for flag in (*flag_spellings("ep"), *bench)
             for m in re.finditer(rf"(?<![\w-]){re.escape(flag)}[\s=]+(\d+)", text)]
    ep = any(size > 1 for size in sizes) or switch(flag_spellings("ep_switch"))
    return dp, ep


VLLM_DATA_PARALLEL = ("--data-parallel-size", "-dp")
"""vLLM's data-parallel size (0.8 and later; read from a run's notes, never written: the search plans no vLLM data
parallelism)."""


def stated_vllm_data_parallel(text: str) -> int:
    """The data-parallel size a vLLM command line in `text` states (`--data-parallel-size 8`, `-dp 8`,
    `--data-parallel-size=8`), whose ranks each run vLLM's scheduler over their own batch; 1 where none is stated."""
    sizes = [int(m.group(1)) for flag in VLLM_DATA_PARALLEL
             for m in re.finditer(rf"(?<![\w-]){re.escape(flag)}(?:\s+|=)(\d+)(?![\w.])", text)]
    return max(sizes, default=1)


def stated_chunked_prefill(text: str) -> bool | None:
    """Whether a command line, or a table of its settings, turns chunked prefill on or off: vLLM's
    `--enable-chunked-prefill[=True|False]` and `--no-enable-chunked-prefill`, TensorRT-LLM's
    `--enable_chunked_prefill`, or a settings column `enable-chunked-prefill TRUE|FALSE`; None where it says
    neither (the last one counts where it says both)."""
    stated = None
    for m in re.finditer(r"(?<![\w-])-{0,2}(no-)?enable[-_]chunked[-_]prefill(?![\w-])(?:\s*=\s*|\s+)?(true|false)?",
                         text, flags=re.IGNORECASE):
        stated = not m.group(1) and (m.group(2) or "true").lower() == "true"
    return stated


def stated_scheduler_steps(text: str) -> int | None:
    """vLLM V0's `--num-scheduler-steps N` (multi-step scheduling) as a command line or a table of its settings
    (`num-scheduler-step 15`) states it; None where it is not stated (the last one counts)."""
    steps = None
    for m in re.finditer(r"(?<![\w-])-{0,2}num[-_]scheduler[-_]steps?(?:\s*=\s*|\s+)(\d+)", text):
        steps = int(m.group(1))
    return steps


# The AMD GPU families each pinned line has ROCm builds for, what deploy/manifests.py renders images of
# (`_AMD_IMAGES`, where the sources are): vLLM 0.6's ROCm 6.2 builds and SGLang 0.4's ROCm 6.3 builds predate gfx950
# (MI355X, CDNA 4); vLLM 0.11 (the upstream ROCm images, gfx942 and gfx950), SGLang 0.5 (its -mi30x and -mi35x
# builds) and TGI's one ROCm build per release take both families.
ROCM_FAMILIES: dict[tuple[str, str], frozenset[str]] = {
    ("vllm", "0.6"): frozenset({"cdna3"}),
    ("vllm", "0.11"): frozenset({"cdna3", "cdna4"}),
    ("sglang", "0.4"): frozenset({"cdna3"}),
    ("sglang", "0.5"): frozenset({"cdna3", "cdna4"}),
    ("tgi", "2"): frozenset({"cdna3", "cdna4"}),
    ("tgi", "3"): frozenset({"cdna3", "cdna4"}),
}


# The first release of an engine whose CUDA build runs on an NVIDIA GPU family, where older releases have none.
# PyTorch's first builds with Blackwell kernels are 2.7's (CUDA 12.8); a release pinned to an older torch runs on no
# Blackwell GPU, whatever image it comes in. Read in the releases' sdists (pypi.org): vLLM 0.8.5's docker/Dockerfile
# builds on CUDA 12.4.1 for TORCH_CUDA_ARCH_LIST '7.0 7.5 8.0 8.6 8.9 9.0+PTX' with torch 2.6.0
# (requirements/cuda.txt), 0.9.0's on CUDA 12.8.1 for '7.0 7.5 8.0 8.9 9.0 10.0+PTX' with torch 2.7.0; SGLang's
# pyproject.toml pins torch 2.5.1 (0.4.5), 2.6.0 (0.4.6 to 0.4.6.post5) and 2.7.1 from 0.4.7. TensorRT-LLM and TGI
# were not read: their releases are not limited here.
CUDA_SINCE: dict[tuple[str, str], tuple[int, ...]] = {
    ("vllm", "blackwell"): (0, 9, 0),
    ("sglang", "blackwell"): (0, 4, 7),
}


@lru_cache(maxsize=1024)  # the grid asks it for every (GPU, precision) of every shape; strings in, a string out
def engine_gpu_problem(engine: str, version: str | None, vendor: str, family: str, gpu: str) -> str | None:
    """Why `engine` at `version` (None: the pinned release) cannot run on `gpu` (of `vendor` and `family`): an
    engine that runs on other vendors only (`engines.ENGINE_VENDORS`), a release older than the first whose CUDA
    build runs on an NVIDIA GPU's family (`CUDA_SINCE`), or a release line with no ROCm build for an AMD GPU's
    family (`ROCM_FAMILIES`); None where it can."""
    if (problem := engine_vendor_problem(engine, vendor, gpu)) is not None:
        return problem
    since = CUDA_SINCE.get((engine, family)) if vendor == "nvidia" else None
    released = parse_version(version)
    if since is not None and released is not None and released < since:
        first = ".".join(map(str, since))
        return (f"{engine} {version} has no CUDA build for {family} GPUs ({gpu}): the first release that runs on "
                f"them is {first} (PyTorch 2.7, CUDA 12.8): plan {first} or later (engine.version)")
    line = version_line(engine, version)
    families = ROCM_FAMILIES.get((engine, line))
    if vendor == "amd" and families is not None and family not in families:
        return (f"{engine} {line}.x has no ROCm build for {family} GPUs ({gpu}); its builds run on "
                f"{', '.join(sorted(families))}: plan a later release (engine.version)")
    return None


# Architectures an engine release refuses to run in float16, from the first release read to refuse them: vLLM's
# `_FLOAT16_NOT_SUPPORTED_MODELS` (model types gemma2, gemma3, gemma3_text, plamo2 and glm4: "Numerical instability.
# Please use bfloat16 or float32 instead."), read in the 0.10.0 and 0.10.2 sdists (`config.py`) and the 0.11.0 wheel
# (`config/model.py`); 0.9.0's `_get_and_verify_dtype` has no such check. With `--dtype auto` on a GPU without
# bfloat16 (`gpus.PRE_AMPERE_FAMILIES`) the same releases fall back to float32, which is not planned. SGLang casts
# between float16 and bfloat16 with a warning (`configs/model_config.py` in 0.5.5.post1).
FLOAT16_REFUSED: dict[str, tuple[tuple[int, ...], frozenset[str]]] = {
    "vllm": ((0, 10), frozenset({"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
                                 "Glm4ForCausalLM", "Plamo2ForCausalLM"})),
}


def float16_problem(engine: str, version: str | None, architecture: str, precision: str, family: str,
                    gpu: str) -> str | None:
    """Why `engine` at `version` (None: the pinned release) cannot run `architecture` in 16-bit `precision` on a GPU
    of `family`: the engine refuses float16 for it (`FLOAT16_REFUSED`), and the run is float16 because the plan
    says fp16 or the GPU has no bfloat16; None where it can."""
    if precision not in ("bf16", "fp16"):
        return None
    refused = FLOAT16_REFUSED.get(engine)
    released = _release(version) or _release(DEFAULT_VERSIONS.get(engine))
    if refused is None or architecture not in refused[1] or released is None or released < refused[0]:
        return None
    release = version or DEFAULT_VERSIONS[engine]
    if family in PRE_AMPERE_FAMILIES:
        return (f"{gpu} has no bfloat16 arithmetic and {engine} {release} refuses float16 for {architecture} "
                "(numerical instability): it would run in float32, which is not planned")
    if precision == "fp16":
        return f"{engine} {release} refuses float16 for {architecture} (numerical instability): plan bf16"
    return None


# vLLM from 0.10.2 runs its V1 engine below compute capability 8.0 (0.10.1.1 and earlier fall back to V0 there,
# "Compute Capability < 8.0" in `engine/arg_utils.py`) and attends with FlexAttention there (`platforms/cuda.py`:
# "FlexAttention is the default for older GPUs"), which raises "FlexAttention does not support quantized kv-cache"
# (`v1/attention/backends/flex_attention.py`, read in the 0.10.2 sdist and the 0.11.0 wheel).
VLLM_FLEX_ATTENTION_SINCE = (0, 10, 2)


def flex_attention(engine: str, version: str | None, family: str) -> bool:
    """Whether `engine` at `version` (None: the pinned release; one without a number reads as it) attends with vLLM's
    FlexAttention on a GPU of `family` (`VLLM_FLEX_ATTENTION_SINCE`)."""
    if engine != "vllm" or family not in PRE_AMPERE_FAMILIES:
        return False
    released = _release(version) or _release(DEFAULT_VERSIONS[engine])
    return released is not None and released >= VLLM_FLEX_ATTENTION_SINCE


# vLLM 0.8.0 to 0.10.x keep an FP8 KV cache on their V1 engine only where its attention backend takes one; elsewhere
# `_is_v1_supported_oracle` falls back to the V0 engine ("--kv-cache-dtype is not supported by the V1 Engine. Falling
# back to V0", vllm/engine/arg_utils.py), which the V1 launch does not fit: V0 leaves chunked prefill off at contexts
# up to 32k, so the planned --max-num-batched-tokens below max_model_len fails SchedulerConfig._verify_args at start,
# and it schedules prefill-first. V1 takes it with FlashAttention 3 (compute capability 9.0, `flash_attn_supports_fp8`:
# the fallback at arg_utils.py line 1371 in 0.8.5, 1380 in 0.9.2, 1412 in 0.10.1.1), on ROCm from 0.9 (0.9.2 line
# 1373: `if current_platform.is_rocm(): supported = True`;
# 0.8.5 only on CUDA), on compute capability 10.0 (B200, GB200) from 0.10.1 (`is_kv_cache_dtype_supported`,
# platforms/cuda.py in 0.10.1.1 and 0.10.2). 0.11.0 has no V0 engine and picks a backend that takes it.
VLLM_V0_FALLBACK_UNTIL = (0, 11, 0)
VLLM_FP8_KV_V1_SINCE: dict[str, tuple[int, ...]] = {"hopper": (0, 8), "cdna3": (0, 9), "cdna4": (0, 9)}
VLLM_FP8_KV_V1_SM100 = (frozenset({"B200", "GB200-NVL72"}), (0, 10, 1))


def _vllm_v0_fp8_kv(version: str | None, family: str, gpu: str) -> bool:
    """Whether vLLM at `version` falls back to its V0 engine for an FP8 KV cache on `gpu` of `family`."""
    released = _release(version) or _release(DEFAULT_VERSIONS["vllm"])
    if released is None or version_line("vllm", version) != "0.11" or released >= VLLM_V0_FALLBACK_UNTIL:
        return False
    since = VLLM_FP8_KV_V1_SINCE.get(family)
    if gpu in VLLM_FP8_KV_V1_SM100[0]:
        since = VLLM_FP8_KV_V1_SM100[1]
    return since is None or released < since


def kv_dtype_problem(engine: str, version: str | None, family: str, kv_dtype: str, gpu: str) -> str | None:
    """Why `engine` at `version` (None: the pinned release) cannot keep its KV cache in `kv_dtype` on a GPU of
    `family`, or None where it can."""
    if kv_dtype == "fp8" and engine == "vllm" and _vllm_v0_fp8_kv(version, family, gpu):
        return (f"vllm {version} keeps an FP8 KV cache on {gpu} only by falling back to its V0 engine, which the "
                "launch is not written for (V0 refuses the planned --max-num-batched-tokens below max_model_len "
                "without chunked prefill): plan 0.11.0 or later (engine.version), or a 16-bit KV cache")
    if kv_dtype != "fp8" or not flex_attention(engine, version, family):
        return None
    return (f"{engine} {version or DEFAULT_VERSIONS[engine]} attends on {gpu} (compute capability below 8.0) with "
            "FlexAttention, which has no FP8 KV cache")


def stated_mtp(text: str) -> tuple[int, float | None]:
    """(draft tokens a step, mean tokens accepted a step or None) of a run that drafts with a model's MTP module, as
    its command line or options state it in the spellings the launches write: TensorRT-LLM's
    `decoding_type: MTP` with `num_nextn_predict_layers: N`, SGLang's `--speculative-algorithm EAGLE|NEXTN` with
    `--speculative-num-steps N`, vLLM's speculative config with method `mtp` or `deepseek_mtp` and
    `num_speculative_tokens: N`; and a stated mean acceptance length (`acceptance length 2.7`, `accept len: 2.7`).
    (0, None) where it states none (the last one counts)."""
    drafts = 0
    if re.search(r"decoding_type\W{0,3}MTP\b", text):
        for m in re.finditer(r"num_nextn_predict_layers\W{0,3}(\d+)", text):
            drafts = int(m.group(1))
    if re.search(r"--speculative[-_]algorithm[\s=]+(?:EAGLE|NEXTN)\b", text):
        for m in re.finditer(r"--speculative[-_]num[-_]steps[\s=]+(\d+)", text):
            drafts = int(m.group(1))
    if re.search(r"\bmethod\W{0,4}(?:deepseek_)?mtp\b", text):
        for m in re.finditer(r"num_speculative_tokens\W{0,3}(\d+)", text):
            drafts = int(m.group(1))
    accepted = None
    if drafts:
        for m in re.finditer(r"(?:mean\s+)?accept(?:ance)?[ _-]len(?:gth)?\W{0,3}(\d+(?:\.\d+)?)", text,
                             flags=re.IGNORECASE):
            accepted = float(m.group(1))
    return drafts, accepted


@dataclass(frozen=True)
class EngineLaunch:
    """How to start one engine for one deployment.

    args: the command-line arguments after the engine's entry point (`entry_point`).
    notes: one line per non-obvious choice (the step token budget, TGI's concurrency cap, where the
      precision comes from, ...).
    files: extra files the arguments name (filename -> content), e.g. TensorRT-LLM's
      `--extra_llm_api_options` YAML; mount them in the working directory.
    entry_point: the command the arguments follow (`vllm serve`, `trtllm-serve`, ...).
    version_line: the pinned version line the arguments were checked against ("" where none is pinned).
    """

    args: list[str]
    notes: list[str]
    files: dict[str, str] = field(default_factory=dict)
    entry_point: str = ""
    version_line: str = ""


def version_line(engine: str, version: str | None) -> str:
    """The pinned version line of `engine` at `version` (None: the current release, `DEFAULT_VERSIONS`);
    "" for engines whose flags are not pinned (mlc-llm, llama.cpp, exllama). A version that names no
    number counts as the current release."""
    lines = VERSION_LINES.get(engine)
    if lines is None:
        return ""
    v = parse_version(version) or parse_version(DEFAULT_VERSIONS[engine])
    assert v is not None
    chosen = lines[0][1]
    for start, name in lines:
        if v >= start:
            chosen = name
    return chosen


def release_problem(engine: str, version: str | None) -> str | None:
    """Why a plan cannot run `engine` at `version`: a release older than any inferplan writes a launch for
    (`RELEASES_READ`); None where it can (None, the pinned release, always can)."""
    released, read = parse_version(version), RELEASES_READ.get(engine)
    if released is None or read is None or read[0] is None or released >= read[0]:
        return None
    first = ".".join(map(str, read[0]))
    return (f"{engine} {version} is older than the releases inferplan plans ({engine} {first} to {read[1]}): its "
            f"defaults and flags were not read, and the launch is written for {engine} {first} and later; plan "
            f"{first} or later (engine.version)")


def release_warning(engine: str, version: str | None) -> str | None:
    """What a plan for `engine` at `version` should be told when the release is newer than any whose flags were read
    (`RELEASES_READ`): it is planned as the newest read; None otherwise."""
    released, read = parse_version(version), RELEASES_READ.get(engine)
    if released is None or read is None or released <= (parse_version(read[1]) or ()):
        return None
    return (f"{engine} {version} is newer than any release inferplan has read (the newest is {read[1]}): it is "
            f"planned as {read[1]} behaves, and its launch is checked against the {version_line(engine, version)}.x "
            "line's parser; a flag renamed or a default changed since is not known")


@cache
def engine_flags() -> dict[str, Any]:
    """The pinned flag lists (`data/engine-flags.json`): engine -> line -> {version, source, entry_point,
    flags: {"--flag": {"value": "required" | "optional" | "none", "choices": [...]}}}."""
    return dict(_flags_file()["engines"])


ROUTER_REPLICAS = 2
"""The replicas of sglang-router `inferplan render` runs in front of disaggregated pools (a Service spreads requests
over them at random; each keeps its own round-robin turn), as verification simulates them."""


def router_flags() -> dict[str, Any]:
    """The pinned flag list of SGLang's P/D router (`sglang-router`, what `inferplan render` runs in front of
    disaggregated SGLang pools): {version, source, entry_point, flags} as for an engine's line."""
    return dict(_flags_file()["routers"]["sglang-router"])


@cache
def _flags_file() -> dict[str, Any]:
    text = resources.files("inferplan.planner").joinpath("data/engine-flags.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def flag_problems(engine: str, version: str | None, args: list[str]) -> list[str]:
    """What in `args` the pinned parser of `engine` at `version` would not accept: unknown long flags, a
    missing value, a value outside the declared choices. Empty when all is well or nothing is pinned."""
    line = version_line(engine, version)
    if not line:
        return []
    return _problems(f"{engine} {line}", engine_flags()[engine][line]["flags"], args)


def router_flag_problems(args: list[str]) -> list[str]:
    """`flag_problems` for the arguments of SGLang's router (`router_flags`)."""
    pinned = router_flags()
    return _problems(f"sglang-router {pinned['version']}", pinned["flags"], args)


def _problems(parser: str, flags: dict[str, dict[str, Any]], args: list[str]) -> list[str]:
    problems: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            continue  # a positional (the checkpoint, a subcommand) or a value already consumed
        spec = flags.get(token)
        if spec is None:
            problems.append(f"{parser}: unknown flag {token}")
            continue
        has_value = i < len(args) and not args[i].startswith("--")
        if spec["value"] == "required" and not has_value:
            problems.append(f"{parser}: {token} needs a value")
            continue
        if spec["value"] == "none" or not has_value:
            continue
        value = args[i]
        i += 1
        choices = spec.get("choices")
        if choices and value not in choices:
            problems.append(f"{parser}: {token} {value} is not one of {choices}")
    return problems


# The formats of `checkpoints.Checkpoint` that name no loader of their own: a repository whose config declares
# the quantisation (published in FP8 by the model's vendor, block-scaled), or one the plan says holds it.
_DECLARED_FORMAT = {"fp8": "fp8-native", "int8-w8a8": "compressed-tensors-int8", "int4-awq": "awq",
                    "int4-gptq": "gptq", "int8-gptq": "gptq", "nvfp4": "modelopt-nvfp4", "mxfp4-w4a4": "quark-mxfp4"}


def _format(checkpoint_format: str, precision: str) -> str:
    fmt = checkpoint_format.strip().lower()
    fmt = _FORMAT_ALIASES.get(fmt, fmt)
    if fmt == "fp8-block":
        fmt = "fp8-native"
    elif fmt == "declared":
        fmt = _DECLARED_FORMAT.get(precision, "native")
    if fmt not in CHECKPOINT_FORMATS:
        raise ValueError(f"unknown checkpoint format {checkpoint_format!r}; known: {', '.join(CHECKPOINT_FORMATS)}")
    return fmt


def _check_checkpoint(engine: str, precision: str, fmt: str, checkpoint: str) -> None:
    if precision.startswith(("gguf-", "mlc-")):
        if fmt != "native":
            raise ValueError(f"{precision} is served from its own {precision.split('-')[0].upper()} repository "
                             f"(format 'native'), not {fmt!r}")
        return
    allowed = _FORMATS_OF.get(precision)
    if allowed is None:
        raise ValueError(f"no checkpoint formats known for precision {precision!r}")
    if fmt == "native" and "native" not in allowed:
        raise ValueError(f"precision {precision} with checkpoint {checkpoint!r} in format 'native': a model's own "
                         "repository holds 16-bit weights; give a repository that holds the quantised weights and "
                         "its format" + (", or 'online' to quantise at load" if precision == "fp8" else "")
                         + (" ('fp8-native' if the model itself is published in FP8)" if precision == "fp8" else ""))
    if fmt not in allowed:
        raise ValueError(f"a {fmt!r} checkpoint does not hold {precision} weights (formats for {precision}: "
                         f"{', '.join(sorted(allowed))})")
    if fmt == "online" and engine not in ("vllm", "sglang", "tgi"):
        raise ValueError(f"{engine} cannot quantise a 16-bit checkpoint to FP8 at load; give a pre-quantised "
                         "checkpoint (TensorRT-LLM: a ModelOpt FP8 export)")


def _kv_fp8(engine: str, kv_dtype: str) -> bool:
    kv = kv_dtype.strip().lower()
    if kv in _SIXTEEN_BIT_KV:
        return False
    if kv != "fp8":
        raise ValueError(f"unknown KV cache dtype {kv_dtype!r}: 'fp8' or a 16-bit one ({', '.join(_SIXTEEN_BIT_KV)})")
    if engine not in ("vllm", "sglang", "tgi", "tensorrt-llm"):
        raise ValueError(f"{engine} has no FP8 KV cache")
    return True


def _step_budget(settings: EngineSettings) -> int | None:
    """The planned token budget of one step (the simulator's `step_tokens`, else the chunk size)."""
    for value in (settings.step_tokens, settings.chunk_tokens):
        if math.isfinite(value):
            return int(value)
    return None


def engine_launch(engine: str, version: str | None, checkpoint: str, checkpoint_format: str, precision: str,
                  tp: int, batch: int, kv_dtype: str, settings: EngineSettings, *, kv_tokens: int | None = None,
                  expected_queue: int | None = None, pp: int = 1, mtp_draft_tokens: int = 0,
                  gpu_family: str | None = None, prefix_caching: bool | None = None) -> EngineLaunch:
    """The launch of `engine` (at `version`, None: `DEFAULT_VERSIONS`) serving `checkpoint` for one replica.

    checkpoint: the repository (or path) the engine loads; it already holds `precision` unless
      `checkpoint_format` is "online" (a 16-bit repository the engine quantises to FP8 at load).
    checkpoint_format: one of `CHECKPOINT_FORMATS` (catalog spellings such as "bf16-native" are accepted).
    kv_dtype: "fp8" for an FP8 KV cache, otherwise a 16-bit one ("bf16", "fp16", "auto").
    kv_tokens: KV-cache tokens one replica holds (the memory plan's), used for TGI's
      `--max-batch-total-tokens`; expected_queue: requests the plan expects waiting at peak (TGI's cap).
    pp: pipeline stages (each `tp` GPUs), given with the engine's flag (`EngineFlags.pp`) after the TP size.
    mtp_draft_tokens: tokens drafted a step with the model's MTP modules (0: no speculative decoding).
    gpu_family: the GPUs' family; on one without bfloat16 (`gpus.PRE_AMPERE_FAMILIES`) bf16 weights run in float16.
    prefix_caching: True to have the engine cache prompt prefixes, False to have it not, None for its default
      (`PREFIX_CACHING_DEFAULT`); switched with its flag only where the default differs.
    Raises ValueError for a combination the engine cannot serve (a quantised precision on a 16-bit
    "native" checkpoint, online quantisation where the engine has none, FP8 KV where it has none).
    """
    fmt = _format(checkpoint_format, precision)
    _check_checkpoint(engine, precision, fmt, checkpoint)
    fp8_kv = _kv_fp8(engine, kv_dtype)
    if tp < 1 or batch < 1 or pp < 1:
        raise ValueError(f"tp, pp and batch must be positive, got tp={tp}, pp={pp}, batch={batch}")
    line = version_line(engine, version)
    builders = {"vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "tensorrt-llm": _trtllm, "lmdeploy": _lmdeploy,
                "mlc-llm": _mlc, "llama.cpp": _llamacpp, "exllama": _exllama}
    build = builders.get(engine)
    if build is None:
        raise ValueError(f"no argument mapping for engine {engine!r}")
    ctx = _Ctx(engine, line, checkpoint, fmt, precision, tp, batch, fp8_kv, settings, kv_tokens, expected_queue,
               mtp_draft_tokens, version, gpu_family, prefix_caching)
    if mtp_draft_tokens and (problem := mtp_problem(engine, version)) is not None:
        raise ValueError(problem)
    if (problem := chunked_prefill_problem(engine, version, ctx.chunked)) is not None:
        raise ValueError(problem)
    launch = build(ctx)
    return launch if pp == 1 else _pipelined(launch, engine, tp, pp)


def _pipelined(launch: EngineLaunch, engine: str, tp: int, pp: int) -> EngineLaunch:
    """`launch` with `pp` pipeline stages: the engine's flag after its TP size, and a note."""
    flags = ENGINE_FLAGS.get(engine)
    if flags is None or not flags.pp:
        raise ValueError(f"{engine} has no pipeline parallelism in inferplan's argument mapping")
    at = launch.args.index(flags.tp[0]) + 2
    args = [*launch.args[:at], flags.pp[0], str(pp), *launch.args[at:]]
    note = (f"{flags.pp[0]} {pp}: the layers split into {pp} stages of {tp} GPUs (tensor parallel within each), one "
            f"node each; the engine keeps {pp} batches in flight, one per stage, so the batch cap is theirs together")
    return replace(launch, args=args, notes=[*launch.notes, note])


# Disaggregated serving, per engine: the flags that make one replica a prefill or a decode worker, and the
# flag whose presence in the pinned parser says the version line has it (engine-flags.json).
_DISAGGREGATION = {
    # vLLM's NIXL connector: both roles run kv_both; the P/D proxy in front (llm-d's, vLLM's example proxy)
    # sends each request to a prefill worker with max_tokens 1, then to a decode worker that pulls the KV.
    "vllm": ("--kv-transfer-config", lambda role: ["--kv-transfer-config",
                                                    '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']),
    # SGLang: each server is a prefill or a decode server; sglang-router --pd-disaggregation pairs them.
    "sglang": ("--disaggregation-mode", lambda role: ["--disaggregation-mode", role,
                                                       "--disaggregation-transfer-backend", "nixl"]),
}


# NVIDIA Dynamo (ai-dynamo 1.6.1 on PyPI, read from dynamo/vllm/backend_args.py and dynamo/sglang/args.py): a
# worker is `python3 -m dynamo.vllm` (or dynamo.sglang) with the engine's own arguments and
# `--disaggregation-mode prefill|decode`; a prefill vLLM worker must be given --kv-transfer-config; the
# `python3 -m dynamo.frontend` process routes between them.
DYNAMO_VERSION = "1.6.1"
DYNAMO_ENTRY_POINTS = {"vllm": "python3 -m dynamo.vllm", "sglang": "python3 -m dynamo.sglang"}


def dynamo_args(engine: str, role: str, args: list[str]) -> list[str] | None:
    """The arguments of a Dynamo worker (after `DYNAMO_ENTRY_POINTS[engine]`) that runs `role` with the engine
    arguments `args` of that role (its `disaggregation_args` included); None for an engine Dynamo does not run."""
    if engine not in DYNAMO_ENTRY_POINTS:
        return None
    if engine == "sglang":
        return list(args)  # SGLang's own --disaggregation-mode is Dynamo's too
    return [*args, "--disaggregation-mode", role]


def disaggregation_args(engine: str, version: str | None, role: str) -> list[str] | None:
    """The arguments that make a replica of `engine` (at `version`) the `role` ("prefill" or "decode") of a
    disaggregated deployment, added to its launch's; None where the engine (or its pinned version line) has no
    disaggregated serving inferplan can configure (TGI has none; TensorRT-LLM's is not rendered yet)."""
    entry = _DISAGGREGATION.get(engine)
    if entry is None:
        return None
    flag, args = entry
    return args(role) if flag_released(engine, version, flag) else None


@dataclass(frozen=True)
class _Ctx:
    engine: str
    line: str
    checkpoint: str
    fmt: str
    precision: str
    tp: int
    batch: int
    fp8_kv: bool
    settings: EngineSettings
    kv_tokens: int | None
    expected_queue: int | None
    mtp: int = 0  # tokens drafted a step with the model's MTP modules
    version: str | None = None  # the release as the plan pins it (None: DEFAULT_VERSIONS)
    gpu_family: str | None = None  # None: a GPU with bfloat16
    prefix_caching: bool | None = None  # None: the engine's default

    @property
    def chunked(self) -> bool:
        return math.isfinite(self.settings.chunk_tokens)

    @property
    def fraction(self) -> str:
        return f"{self.settings.memory_fraction:g}"

    @property
    def sixteen_bit(self) -> bool:
        return self.precision in ("bf16", "fp16")

    @property
    def dtype(self) -> str:
        """The `--dtype` of 16-bit weights: float16 where the GPU has no bfloat16 (vLLM refuses bfloat16 there)."""
        return "bfloat16" if self.precision == "bf16" and self.gpu_family not in PRE_AMPERE_FAMILIES else "float16"


def _precision_note(c: _Ctx) -> str:
    note = _precision_source(c)
    if c.precision == "fp8" and c.gpu_family is not None and c.gpu_family not in FP8_FAMILIES:
        note += (f"; {c.gpu_family} GPUs have no FP8 tensor cores, so the engine runs the FP8 weights weight-only "
                 "(a Marlin kernel dequantises them to 16-bit math; activations stay 16-bit)")
    return note


def _precision_source(c: _Ctx) -> str:
    if c.fmt == "online":
        return f"precision fp8: {c.checkpoint} holds 16-bit weights; the engine quantises them to FP8 while loading"
    if c.sixteen_bit and c.precision == "bf16" and c.dtype == "float16":
        return (f"precision bf16: {c.checkpoint} holds 16-bit weights; {c.gpu_family} GPUs have no bfloat16 "
                "arithmetic, so the engine runs them in float16 (--dtype float16)")
    if c.sixteen_bit:
        return f"precision {c.precision}: {c.checkpoint} holds 16-bit weights"
    note = (f"precision {c.precision}: {c.checkpoint} is a {c.fmt} checkpoint; the engine reads the method from "
            "its quantisation config, so no quantisation flag is given")
    if c.fmt == "fbgemm-fp8":  # what `checkpoints.checkpoint_precision` sizes and times it by
        note += ("; Meta's recipe keeps its attention and its first and last layers 16-bit "
                 "(modules_to_not_convert), as the plan's memory and step times count them")
    return note


def _dtype_and_online(c: _Ctx) -> list[str]:
    """vLLM's and SGLang's flags for 16-bit weights (`--dtype`) and for FP8 quantised at load."""
    flags = ENGINE_FLAGS[c.engine]
    if c.sixteen_bit:
        return [flags.dtype[0], c.dtype]
    return [flags.quantization[0], "fp8"] if c.fmt == "online" else []


# The version lines whose launches draft with a model's MTP modules (the pinned parsers in engine-flags.json have
# the flags): vLLM V1's --speculative-config (method "mtp", which 0.11 names for DeepSeek's, GLM's and MiMo's modules,
# `config/speculative.py`; "deepseek_mtp" in 0.9-0.10, `VLLM_MTP_METHODS`), SGLang's EAGLE over the NextN weights,
# TensorRT-LLM 1.x's MTP decoding in its options file.
MTP_LINES = frozenset({("vllm", "0.11"), ("sglang", "0.4"), ("sglang", "0.5"), ("tensorrt-llm", "1")})

# vLLM's name for DeepSeek's MTP method, by release (read in the sdists and wheel): 0.8.5's V1 engine drafts with
# ngram and EAGLE only (`engine/arg_utils.py` `_is_v1_supported_oracle`; anything else falls back to V0), 0.9.0 adds
# "deepseek_mtp" there (`config.py` SpeculativeMethod, still the only spelling in 0.10.2), and 0.11.0 adds "mtp",
# taking "deepseek_mtp" as a deprecated alias (`config/speculative.py`).
VLLM_MTP_METHODS: tuple[tuple[tuple[int, ...], str], ...] = (((0, 9), "deepseek_mtp"), ((0, 11), "mtp"))


def _vllm_mtp_method(version: str | None) -> str | None:
    """The --speculative-config method vLLM at `version` (None: the pinned release) drafts DeepSeek's MTP module
    with on its V1 engine; None before 0.9."""
    released = parse_version(version) or parse_version(DEFAULT_VERSIONS["vllm"])
    method = None
    for since, name in VLLM_MTP_METHODS:
        if released is not None and released >= since:
            method = name
    return method


# SGLang drafts from the model's own checkpoint from 0.4.6.post2 on (`server_args.py` sets
# speculative_draft_model_path to the model for DeepseekV3ForCausalLM, `configs/model_config.py` turns the draft's
# architecture into DeepseekV3ForCausalLMNextN); 0.4.3 to 0.4.6.post1 load the NextN module only from a separately
# exported repository whose layer 0 it is (`models/deepseek_nextn.py` reads `model.layers.0`; lmsys/DeepSeek-V3-NextN),
# which the launch does not name. Read in the 0.4.3.post2, 0.4.4, 0.4.5, 0.4.6 and 0.4.6.post1-post5 sdists.
SGLANG_MTP_SINCE = (0, 4, 6, 2)  # (major, minor, patch, post release)


def _release(version: str | None) -> tuple[int, ...] | None:
    """(major, minor, patch, post) of `version` (`0.4.6.post2` -> (0, 4, 6, 2)), None without a number."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    post = re.search(r"\.post(\d+)", version or "")
    return (*parsed, int(post.group(1)) if post else 0)


# The first release with a flag the launches give for a shape, where the pinned parser of its line (a later release)
# has it: read in the sdists (vLLM 0.8.0-0.10.2, SGLang 0.4.0-0.4.10). vLLM's --kv-transfer-config names the
# NixlConnector, registered from 0.9.0 (`kv_connector/factory.py`); SGLang's --ep-size is in 0.4.1, DeepEP's switch
# in 0.4.5, --disaggregation-transfer-backend (nixl) in 0.4.6 and --pp-size in 0.4.6.post2.
SGLANG_E4M3_KV_SINCE = (0, 4, 2, 0)  # --kv-cache-dtype choices: auto, fp8_e5m2 in 0.4.0-0.4.1; fp8_e4m3 from 0.4.2
FLAG_SINCE: dict[tuple[str, str], tuple[int, ...]] = {
    ("vllm", "--kv-transfer-config"): (0, 9, 0, 0),
    ("sglang", "--ep-size"): (0, 4, 1, 0),
    ("sglang", "--enable-deepep-moe"): (0, 4, 5, 0),
    ("sglang", "--disaggregation-mode"): (0, 4, 6, 0),
    ("sglang", "--pp-size"): (0, 4, 6, 2),
}


def flag_released(engine: str, version: str | None, flag: str) -> bool:
    """Whether `engine` at `version` (None: the pinned release) takes `flag`: its line's pinned parser has it and
    the release is not older than the first that does (`FLAG_SINCE`)."""
    line = version_line(engine, version)
    if not line or flag not in engine_flags()[engine][line]["flags"]:
        return False
    since, released = FLAG_SINCE.get((engine, flag)), _release(version)
    return since is None or released is None or released >= since


# vLLM's V1 engine chunks every generative model's prompts whatever the command line says from 0.8.0 to 0.11.0:
# `_set_default_args_v1` (`_set_default_args` in 0.11.0) sets `self.enable_chunked_prefill = True` for a runner that
# is not pooling, over a stated --no-enable-chunked-prefill (vllm/engine/arg_utils.py: 0.8.5 line 1569, 0.9.2
# line 1579, 0.10.1.1 line 1592, 0.11.0 line 1548). 0.11.1 keeps a stated choice (`if self.enable_chunked_prefill
# is None`, line 1955 in 0.11.1 and 0.11.2), and the V0 line takes --enable-chunked-prefill False.
VLLM_UNCHUNKED_SINCE = (0, 11, 1)


def chunked_prefill_problem(engine: str, version: str | None, chunked: bool) -> str | None:
    """Why `engine` at `version` (None: the pinned release) cannot run with chunked prefill `chunked` (vLLM V1 before
    0.11.1 cannot turn it off: `VLLM_UNCHUNKED_SINCE`); None where it can."""
    if chunked or engine != "vllm" or version_line(engine, version) != "0.11":
        return None
    released = _release(version) or _release(DEFAULT_VERSIONS[engine])
    if released is None or released >= VLLM_UNCHUNKED_SINCE:
        return None
    first = ".".join(map(str, VLLM_UNCHUNKED_SINCE))
    return (f"vllm {version} chunks prompts whatever the command line says (its V1 engine sets "
            "enable_chunked_prefill for every generative model, over --no-enable-chunked-prefill): leave "
            f"engine.chunkedPrefill out or true, or plan {first} or later (engine.version)")


def mtp_problem(engine: str, version: str | None) -> str | None:
    """Why `engine` at `version` (None: the pinned release) cannot draft with a model's MTP modules in inferplan's
    argument mapping; None where it can."""
    line = version_line(engine, version)
    if (engine, line) not in MTP_LINES:
        return (f"{engine} {line}.x does not draft with MTP modules in inferplan's argument mapping; "
                f"{', '.join(f'{e} {v}.x' for e, v in sorted(MTP_LINES))} do")
    if engine == "vllm" and _vllm_mtp_method(version) is None:
        return (f"vllm {version} drafts with MTP modules only on its V0 engine (V1 takes method deepseek_mtp from "
                "0.9.0): plan 0.9.0 or later (engine.version)")
    released = _release(version)
    if engine == "sglang" and released is not None and released < SGLANG_MTP_SINCE:
        return (f"sglang {version} drafts only from a separately exported NextN repository "
                "(--speculative-draft-model-path); from 0.4.6.post2 it reads the module from the model's own "
                "checkpoint, as the launch assumes: plan 0.4.6.post2 or later (engine.version)")
    return None


def _mtp_note(c: _Ctx, how: str) -> str:
    return (f"multi-token prediction: {how}; each step drafts {c.mtp} token{'s' if c.mtp > 1 else ''} a sequence with "
            "the model's MTP module and verifies them in the next, as the plan's step times assume")


# Whether each engine's version line caches prompt prefixes by default, and the flag that switches it the other way:
# vLLM V0's `enable_prefix_caching: bool = False` (0.6.3.post1 engine/arg_utils.py) and its `--enable-prefix-caching`
# switch; vLLM V1 sets it on for generative models where it is not stated (`_set_default_args_v1`: "V1 enables prefix
# caching by default", 0.8.5 engine/arg_utils.py line 1571; `_set_default_args` in 0.11.x) and takes
# `--no-enable-prefix-caching` (BooleanOptionalAction); SGLang's radix cache is on unless `--disable-radix-cache`
# (srt/server_args.py); LMDeploy's `--enable-prefix-caching` is off by default (lmdeploy/cli/utils.py).
PREFIX_CACHING_DEFAULT: dict[tuple[str, str], tuple[bool, str]] = {
    ("vllm", "0.6"): (False, "--enable-prefix-caching"),
    ("vllm", "0.11"): (True, "--no-enable-prefix-caching"),
    ("sglang", "0.4"): (True, "--disable-radix-cache"),
    ("sglang", "0.5"): (True, "--disable-radix-cache"),
    ("lmdeploy", "0.10"): (False, "--enable-prefix-caching"),
}


def _prefix_caching(c: _Ctx) -> tuple[list[str], list[str]]:
    """(arguments, notes) that turn the engine's prefix cache on or off as the plan says (`PREFIX_CACHING_DEFAULT`)."""
    default = PREFIX_CACHING_DEFAULT.get((c.engine, c.line))
    if c.prefix_caching is None or default is None or c.prefix_caching == default[0]:
        return [], []
    on, flag = default[0] is False, default[1]
    return [flag], [f"prefix caching {'on' if on else 'off'} ({flag}) as the plan has it; {c.engine} {c.line}.x has "
                    f"it {'off' if on else 'on'} by default"]


def _vllm(c: _Ctx) -> EngineLaunch:
    s = c.settings
    notes = [_precision_note(c)]
    flags = ENGINE_FLAGS["vllm"]
    args = ["--model", c.checkpoint, flags.tp[0], str(c.tp), flags.batch[0], str(c.batch),
            flags.memory_fraction[0], c.fraction, flags.context[0], str(s.max_model_len)]
    args += _dtype_and_online(c)
    if c.fmt == "modelopt-fp8" and c.line == "0.6":
        args += [flags.quantization[0], "modelopt"]
        notes.append("vLLM 0.6 does not read ModelOpt's hf_quant_config.json (it looks at config.json only), so "
                     "the ModelOpt method is named with --quantization modelopt")
    if c.fp8_kv:
        args += [flags.kv_cache_dtype[0], "fp8"]
        notes.append("FP8 KV cache: --kv-cache-dtype fp8 (e4m3 on CUDA); without it vLLM keeps a 16-bit cache even "
                     "for checkpoints that carry KV scales")
    budget = _step_budget(s)
    planned = budget
    if budget is None:
        budget = max(s.max_model_len, 2048)
    if not c.chunked:
        budget = max(budget, s.max_model_len)  # SchedulerConfig rejects a smaller one without chunked prefill
    budget = max(budget, c.batch)  # and one smaller than max_num_seqs
    args += [flags.step_tokens[0], str(budget)]
    default = ("the V1 default (8192 on GPUs of 70 GiB or more other than A100, 2048 otherwise, for vllm serve)"
               if c.line == "0.11" else
               "the V0 default (512 with chunked prefill, else max(max_model_len, 2048))")
    why = f"the plan's step token budget {planned}" if planned is not None else "no planned budget"
    if planned is not None and planned != budget:
        why += f", raised to {budget} (vLLM requires at least max_num_seqs, and max_model_len without chunking)"
    notes.append(f"--max-num-batched-tokens {budget}: {why}; set explicitly, in place of {default}, so the engine "
                 "fills each step as the plan simulated it")
    if c.line == "0.11":
        if not c.chunked:
            args.append(flags.chunked_off[0])
            notes.append("chunked prefill off (--no-enable-chunked-prefill): the plan sends prompts whole; "
                         "V1 chunks by default")
    else:
        auto_on = s.max_model_len > 32768  # V0 turns chunking on by itself only above 32k contexts
        if c.chunked != auto_on:
            args += [flags.chunked_on[0], "True" if c.chunked else "False"]
            notes.append(f"--enable-chunked-prefill {c.chunked}: vLLM 0.6 chunks on its own only for contexts "
                         "over 32768")
    prefix_args, prefix_notes = _prefix_caching(c)
    args += prefix_args
    notes += prefix_notes
    if c.mtp:
        config = f'{{"method":"{_vllm_mtp_method(c.version)}","num_speculative_tokens":{c.mtp}}}'
        args += ["--speculative-config", config]
        notes.append(_mtp_note(c, f"--speculative-config '{config}'"))
    entry = "vllm serve" if c.line == "0.11" else "python3 -m vllm.entrypoints.openai.api_server"
    return EngineLaunch(args, notes, entry_point=entry, version_line=c.line)


def _sglang(c: _Ctx) -> EngineLaunch:
    s = c.settings
    notes = [_precision_note(c)]
    flags = ENGINE_FLAGS["sglang"]
    args = ["--model-path", c.checkpoint, flags.tp[0], str(c.tp), flags.batch[0], str(c.batch),
            flags.memory_fraction[0], c.fraction, flags.context[0], str(s.max_model_len)]
    args += _dtype_and_online(c)
    if c.fmt == "modelopt-nvfp4":
        args += [flags.quantization[0], "modelopt_fp4"]
        notes.append("--quantization modelopt_fp4: SGLang detects a ModelOpt checkpoint as 'modelopt' (FP8), whose "
                     "config refuses NVFP4 ('For FP4 quantization, use ModelOptFp4Config': "
                     "layers/quantization/modelopt_quant.py and configs/model_config.py in 0.5.2)")
    if c.fp8_kv and (_release(c.version) or SGLANG_E4M3_KV_SINCE) < SGLANG_E4M3_KV_SINCE:
        args += [flags.kv_cache_dtype[0], "fp8_e5m2"]
        notes.append("FP8 KV cache: --kv-cache-dtype fp8_e5m2, the only FP8 KV cache SGLang 0.4.0 and 0.4.1 take "
                     "(fp8_e4m3 from 0.4.2)")
    elif c.fp8_kv:
        args += [flags.kv_cache_dtype[0], "fp8_e4m3"]
        notes.append("FP8 KV cache: --kv-cache-dtype fp8_e4m3, the format FP8 checkpoints calibrate their k/v "
                     "scales for and the only FP8 KV that SGLang's FA3 backend takes (fp8_e5m2 falls back to triton "
                     "attention: model_runner.py lines 524-533 in 0.5.2)")
    budget = _step_budget(s)
    if c.chunked and budget is not None:
        args += [flags.step_tokens[0], str(budget)]
        notes.append(f"--chunked-prefill-size {budget}: the plan's step token budget (a prefill batch takes at most "
                     "this many prompt tokens); set explicitly in place of SGLang's GPU-memory-dependent default "
                     "(2048 / 8192 / 16384)")
    else:
        args += [flags.step_tokens[0], str(STEP_TOKENS_CHUNKING_OFF)]
        notes.append("--chunked-prefill-size -1: chunked prefill off, prompts go whole as the plan simulated")
    prefix_args, prefix_notes = _prefix_caching(c)
    args += prefix_args
    notes += prefix_notes
    if c.mtp:
        mtp = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(c.mtp), "--speculative-eagle-topk",
               "1", "--speculative-num-draft-tokens", str(c.mtp + 1)]
        args += mtp
        notes.append(_mtp_note(c, " ".join(mtp) + " (SGLang's EAGLE reads a DeepSeek checkpoint's NextN module as "
                                               "its draft)"))
    return EngineLaunch(args, notes, entry_point="python3 -m sglang.launch_server", version_line=c.line)


_TGI_QUANTIZE = {"awq": "awq", "gptq": "gptq", "compressed-tensors-fp8": "compressed-tensors",
                 "compressed-tensors-int8": "compressed-tensors", "autofp8": "fp8", "fp8-native": "fp8",
                 "modelopt-fp8": "fp8", "online": "fp8"}


def _tgi(c: _Ctx) -> EngineLaunch:
    s = c.settings
    notes = [_precision_note(c)] if c.fmt not in _TGI_QUANTIZE else []
    max_input = s.max_model_len - 1
    flags = ENGINE_FLAGS["tgi"]
    args = ["--model-id", c.checkpoint, flags.tp[0], str(c.tp), flags.memory_fraction[0], c.fraction,
            "--max-input-tokens", str(max_input), flags.context[0], str(s.max_model_len)]
    if c.sixteen_bit:
        args += [flags.dtype[0], c.dtype]
    quantize = _TGI_QUANTIZE.get(c.fmt)
    if quantize is not None:
        args += [flags.quantization[0], quantize]
        if c.fmt == "online":
            notes.append(f"precision fp8: --quantize fp8 quantises the 16-bit {c.checkpoint} at load")
        else:
            notes.append(f"precision {c.precision}: --quantize {quantize} names the method of the {c.fmt} checkpoint "
                         "(it matches the checkpoint's quantization_config, which TGI also auto-selects from)")
    if c.fp8_kv:
        args += [flags.kv_cache_dtype[0], "fp8_e4m3fn"]
        notes.append("FP8 KV cache: --kv-cache-dtype fp8_e4m3fn (uses the checkpoint's k/v scales where present)")
    # The batch cap is --max-batch-size; --max-concurrent-requests is an admission limit above which the
    # router answers HTTP 429 (try_acquire_owned -> Overloaded), so it is set well above the batch.
    queue = max(3 * c.batch, 2 * (c.expected_queue or 0))
    concurrent = max(_TGI_DEFAULT_MAX_CONCURRENT, c.batch + queue)
    args += [flags.batch[0], str(c.batch), flags.batch[1], str(concurrent),
             "--max-waiting-tokens", str(_TGI_DEFAULT_MAX_WAITING_TOKENS)]
    expected = f"twice the {c.expected_queue} requests the plan expects waiting" if c.expected_queue else "3x the batch"
    notes.append(f"--max-batch-size {c.batch} caps the running batch; --max-concurrent-requests {concurrent} = batch "
                 f"{c.batch} + a waiting queue of {queue} ({expected}, at least TGI's default 128 in all): TGI refuses "
                 "requests above it with HTTP 429 instead of queueing them, so it sits well above the planned load")
    notes.append(f"--max-waiting-tokens {_TGI_DEFAULT_MAX_WAITING_TOKENS}: TGI's default (decode steps before "
                 "waiting requests are forced into the running batch), the prefill-first behaviour the plan simulates")
    budget = _step_budget(s) or s.max_model_len
    planned = budget
    if c.line == "2" or not c.chunked:
        budget = max(budget, max_input)  # the launcher requires max_batch_prefill_tokens >= max_input_tokens
    if c.kv_tokens is not None:
        if c.kv_tokens < s.max_model_len:
            raise ValueError(f"TGI needs --max-batch-total-tokens ({c.kv_tokens}) >= --max-total-tokens "
                             f"({s.max_model_len})")
        budget = min(budget, c.kv_tokens)
    args += [flags.step_tokens[0], str(budget)]
    notes.append(f"--max-batch-prefill-tokens {budget}: the plan's step token budget {planned}"
                 + (f", raised to max_input_tokens {max_input} (TGI {c.line}.x prompts are not split)"
                    if budget > planned else "") + "; TGI's own default is estimated from the model and GPU")
    if c.kv_tokens is not None:
        args += ["--max-batch-total-tokens", str(c.kv_tokens)]
        notes.append(f"--max-batch-total-tokens {c.kv_tokens}: the KV tokens the plan's memory budget gives one "
                     "replica (the batch's token budget; the paged KV allocator is sized from it)")
    else:
        notes.append("--max-batch-total-tokens left to TGI, which infers it from the memory free after warm-up")
    return EngineLaunch(args, notes, entry_point="text-generation-launcher", version_line=c.line)


def _trtllm(c: _Ctx) -> EngineLaunch:
    s = c.settings
    notes: list[str] = []
    if c.sixteen_bit:
        notes.append(f"precision {c.precision}: {c.checkpoint} holds 16-bit weights")
    else:
        notes.append(f"precision {c.precision}: trtllm-serve has no precision flag; it comes from the checkpoint "
                     f"{c.checkpoint} ({c.fmt}: ModelOpt's hf_quant_config.json quant_algo, or the HF "
                     "quantization_config)")
    args = [c.checkpoint]
    if c.line == "1":
        args += ["--backend", "pytorch"]
    flags = ENGINE_FLAGS["tensorrt-llm"]
    args += [flags.tp[0], str(c.tp), flags.batch[0], str(c.batch), flags.context[0], str(s.max_model_len),
             flags.memory_fraction[0], c.fraction]
    budget = _step_budget(s) or s.max_model_len
    planned = budget
    if not c.chunked:
        budget = max(budget, s.max_model_len)  # without chunking a prompt must fit one step
    args += [flags.step_tokens[0], str(budget)]
    notes.append(f"--max_num_tokens {budget}: the plan's step token budget {planned}"
                 + (f", raised to max_seq_len {s.max_model_len} since prompts are not chunked" if budget > planned
                    else "") + "; set explicitly in place of BuildConfig's default")
    options: dict[str, str] = {}
    if c.chunked:
        if c.line == "1":
            args.append(flags.chunked_on[0])
        else:
            options["enable_chunked_prefill"] = "true"
        notes.append("chunked prefill on (off by default in trtllm-serve)")
    kv_cache_config: list[str] = []
    if c.fp8_kv:
        kv_cache_config.append("dtype: fp8")
    # TensorRT-LLM 1.x reuses KV blocks across requests (prefix caching) unless told not to (`KvCacheConfig.
    # enable_block_reuse = True`, the LLM API reference; ../shared/catalog-facts/engine-defaults.md): a plan with
    # engine.prefixCaching false had rendered nothing and run with it on.
    block_reuse_off = c.prefix_caching is False and c.line == "1"
    if block_reuse_off:
        kv_cache_config.append("enable_block_reuse: false")
    if kv_cache_config:
        # The file's kv_cache_config replaces the one trtllm-serve builds from --kv_cache_free_gpu_memory_fraction
        # (update_llm_args_with_extra_dict: a KvCacheConfig of the file's keys, merged over the command line's
        # arguments key by key), so it carries the fraction too.
        kv_cache_config.append(f"free_gpu_memory_fraction: {c.fraction}")
        options["kv_cache_config"] = "{" + ", ".join(kv_cache_config) + "}"
    if block_reuse_off:
        notes.append(f"prefix caching off (kv_cache_config.enable_block_reuse false in {TRT_OPTIONS_FILE}) as the plan "
                     "has it; trtllm-serve 1.x reuses KV blocks by default")
    if c.fp8_kv:
        notes.append(f"FP8 KV cache: kv_cache_config.dtype fp8 in {TRT_OPTIONS_FILE}; trtllm-serve has no KV dtype "
                     "flag, and on 'auto' the KV dtype follows the checkpoint's kv_cache_quant_algo, which a "
                     "ModelOpt export may or may not set. The file's kv_cache_config replaces the one of the command "
                     f"line whole, so it repeats free_gpu_memory_fraction {c.fraction}")
    elif c.precision == "fp8":
        notes.append("KV cache on 'auto': FP8 if the ModelOpt checkpoint declares kv_cache_quant_algo FP8, else "
                     "16-bit (docs/engines.md)")
    if c.mtp:
        options["speculative_config"] = f"{{decoding_type: MTP, num_nextn_predict_layers: {c.mtp}}}"
        notes.append(_mtp_note(c, f"speculative_config {options['speculative_config']} in {TRT_OPTIONS_FILE}"))
    files: dict[str, str] = {}
    if options:
        files[TRT_OPTIONS_FILE] = "".join(f"{k}: {v}\n" for k, v in options.items())
        args += ["--extra_llm_api_options", TRT_OPTIONS_FILE]
    return EngineLaunch(args, notes, files=files, entry_point="trtllm-serve", version_line=c.line)


def _lmdeploy(c: _Ctx) -> EngineLaunch:
    s = c.settings
    flags = ENGINE_FLAGS["lmdeploy"]
    args = ["serve", "api_server", c.checkpoint, flags.tp[0], str(c.tp), flags.batch[0], str(c.batch),
            flags.memory_fraction[0], c.fraction, flags.context[0], str(s.max_model_len)]
    notes = [f"--cache-max-entry-count {c.fraction}: the fraction of free memory after loading that holds the KV "
             "cache; LMDeploy has no step token budget flag that the plan sets"]
    if c.fmt in ("awq", "gptq"):
        args += ["--model-format", c.fmt]
        notes.append(f"precision {c.precision}: --model-format {c.fmt} for the pre-quantised {c.checkpoint}")
    elif c.fmt == "compressed-tensors-int8":
        args += ["--backend", "pytorch"]
        notes.append("precision int8-w8a8: served by LMDeploy's PyTorch engine (TurboMind has no W8A8 kernels)")
    elif c.precision == "fp8":
        args += ["--model-format", "fp8"]
        notes.append(f"precision fp8: --model-format fp8 for the pre-quantised {c.checkpoint}")
    else:
        notes.append(_precision_note(c))
    prefix_args, prefix_notes = _prefix_caching(c)
    args += prefix_args
    notes += prefix_notes
    return EngineLaunch(args, notes, entry_point="lmdeploy", version_line=c.line)


def _mlc(c: _Ctx) -> EngineLaunch:
    s = c.settings
    args = ["serve", c.checkpoint, "--mode", "server", "--overrides",
            f"tensor_parallel_shards={c.tp};max_num_sequence={c.batch};gpu_memory_utilization="
            f"{c.fraction};context_window_size={s.max_model_len}"]
    notes = [f"precision {c.precision}: {c.checkpoint} is an MLC-compiled repository that holds it"]
    return EngineLaunch(args, notes, entry_point="mlc_llm")


def _llamacpp(c: _Ctx) -> EngineLaunch:
    args = ["-m", c.checkpoint, "--parallel", "1", "--ctx-size", str(c.settings.max_model_len),
            "--n-gpu-layers", "999"]
    notes = ["one sequence per replica (--parallel 1); every layer offloaded to the GPU (--n-gpu-layers 999)",
             f"precision {c.precision}: {c.checkpoint} is the GGUF file of that quantisation"]
    return EngineLaunch(args, notes, entry_point="llama-server")


def _exllama(c: _Ctx) -> EngineLaunch:
    args = ["--model", c.checkpoint, "--length", str(c.settings.max_model_len)]
    notes = [f"precision {c.precision}: {c.checkpoint} holds the GPTQ/EXL2 weights; one stream per replica"]
    return EngineLaunch(args, notes, entry_point="exllama")
