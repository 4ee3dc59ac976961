"""Tensor-parallel sizes each engine accepts for a model: the checks the engines run at start-up.

Each rule is the engine's own check, with the file it comes from (docs/engines.md, "Tensor-parallel sizes each
engine accepts"). Read in this pass, from release wheels (`pip download --no-deps`):

vLLM 0.33.0 (the same rules are in v0.6.3.post1, quoted in shared/catalog-facts/engine-defaults.md):
  - heads: `vllm/config/model.py` 1559-1564, `ModelConfig.verify_with_parallel_config`: "Total number of
    attention heads (...) must be divisible by tensor parallel size (...)".
  - KV heads: `vllm/model_executor/layers/linear.py` 1065-1070 (`QKVParallelLinear`) and
    `models/llama.py` 145-156: kv >= tp needs kv % tp == 0, kv < tp needs tp % kv == 0 (replicas).
    MLA (DeepSeek-V3) keeps one latent: `config/model.py` 1673-1675 returns 1 KV head, no KV rule.
    gpt-oss: `models/gpt_oss.py` 156 and 180 give each rank `num_key_value_heads // tp_size` KV heads, so
    TP above the KV heads leaves a rank none: kv % tp == 0 with kv >= tp.
  - dense FFN: `layers/linear.py` 731 (`MergedColumnParallelLinear`): output sizes % tp == 0.
  - MoE: `layers/fused_moe/config.py` 1352: `assert self.intermediate_size % tp_size == 0` (no expert
    parallelism); Qwen3-MoE `models/qwen3_moe.py` 154: TP above the expert count raises ValueError.
SGLang 0.5.2:
  - heads and KV heads: `sglang/srt/models/llama.py` 129-140 (the same asserts in qwen2.py, gemma2.py,
    gemma3_causal.py, mixtral.py, gpt_oss.py 250-260), `layers/linear.py` 800-806; MLA heads:
    `models/deepseek_v2.py` 833.
  - dense FFN: `layers/linear.py` 481; MoE: `layers/moe/fused_moe_triton/layer.py` 188
    (`assert intermediate_size % self.moe_tp_size == 0`); TP above the expert count raises ValueError in
    `models/qwen3_moe.py` 89 and `models/deepseek_v2.py` 346.
LMDeploy 0.18.0:
  - PyTorch engine `lmdeploy/pytorch/config.py` 606-610: the vLLM heads and KV rule, word for word.
  - TurboMind `lmdeploy/turbomind/builders/attention.py` 28-35 repeats KV heads up to
    ceil(kv / tp) * tp and asserts that is a multiple of kv: the same KV rule. `builders/ffn.py` 50-75 pads
    the FFN to TP, so no FFN rule. MLA: `builders/mla.py` 74-75 (no KV rule). The TurboMind heads check is in
    C++, not read; the PyTorch engine's is used.
TensorRT-LLM (PyTorch backend): quoted in engine-defaults.md from index excerpts of `_torch/modules` attention
  (path and commit not resolved, no wheel on PyPI): `assert self.num_heads % tp_size == 0`; KV heads per rank
  `(num_key_value_heads + tp_size - 1) // tp_size` (ceil: replication). FFN/MoE checks not traced.

Not read from source in this pass (no wheel on PyPI holds it):
TGI (text-generation-inference `server/text_generation_server/models/custom_modeling/flash_llama_modeling.py`,
  `FlashLlamaAttention`): raises "`num_heads` must be divisible by `num_shards`", and gives each shard
  `config.num_key_value_heads // weights.process_group.size()` KV heads, with no replication, so
  kv % tp == 0; `utils/weights.py` `get_sharded` asserts each sharded size divides by the world size (FFN).
  Recalled, not verified.
MLC-LLM (`python/mlc_llm/model/llama/llama_model.py`): assumed: heads % shards == 0, KV heads divisible by
  `tensor_parallel_shards` and not fewer than it, FFN intermediate % shards == 0 (recalled, not verified).
llama.cpp and ExLlama run TP 1 only in this planner (`EngineProfile.tensor_parallel` is False).

Vocabulary: vLLM and SGLang pad it to a multiple of 64 before sharding, TGI and TurboMind pad it too, so it
need not divide by TP; it is not checked.
Not modelled: FP8 block-quantised weights also need each rank's FFN width to divide by the block (128);
vLLM and SGLang (`layers/quantization/fp8.py`) raise "... is not divisible by weight quantization block_n".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.engines import engine_profile

Check = Callable[[ModelArchitecture, int], str | None]

_VLLM = "vLLM"
_SGLANG = "SGLang"


def _heads(source: str) -> Check:
    def check(arch: ModelArchitecture, tp: int) -> str | None:
        if arch.num_attention_heads % tp:
            return f"its {arch.num_attention_heads} attention heads do not divide by {tp} ({source})"
        return None
    return check


def _kv_replicated(source: str) -> Check:
    """kv >= tp: kv % tp == 0; kv < tp: tp % kv == 0 (each rank keeps a replica). No rule for MLA."""
    def check(arch: ModelArchitecture, tp: int) -> str | None:
        kv = arch.num_kv_heads
        if arch.is_mla:
            return None
        if kv >= tp and kv % tp:
            return f"its {kv} KV heads do not divide by {tp} ({source})"
        if kv < tp and tp % kv:
            return f"{tp} is not a multiple of its {kv} KV heads, so they cannot be replicated evenly ({source})"
        return None
    return check


def _kv_split(source: str) -> Check:
    """kv % tp == 0 with kv >= tp: each rank holds kv // tp KV heads, no replication. No rule for MLA."""
    def check(arch: ModelArchitecture, tp: int) -> str | None:
        kv = arch.num_kv_heads
        if arch.is_mla or kv % tp == 0:
            return None
        if kv < tp:
            return f"its {kv} KV heads are fewer than {tp} and are not replicated ({source})"
        return f"its {kv} KV heads do not divide by {tp} ({source})"
    return check


def _dense_ffn(source: str) -> Check:
    """The dense FFN width (every layer of a dense model, the first dense layers and shared experts of MoE)."""
    def check(arch: ModelArchitecture, tp: int) -> str | None:
        widths = []
        if not arch.is_moe or arch.first_dense_layers:
            widths.append(("FFN width", arch.intermediate_size))
        if arch.num_shared_experts:
            widths.append(("shared-expert width", arch.shared_expert_intermediate_size * arch.num_shared_experts))
        for label, width in widths:
            if width % tp:
                return f"its {label} {width} does not divide by {tp} ({source})"
        return None
    return check


def _expert_ffn(source: str) -> Check:
    def check(arch: ModelArchitecture, tp: int) -> str | None:
        if arch.is_moe and arch.expert_intermediate_size % tp:
            return f"its expert FFN width {arch.expert_intermediate_size} does not divide by {tp} ({source})"
        return None
    return check


def _experts_at_least(source: str, architectures: frozenset[str]) -> Check:
    def check(arch: ModelArchitecture, tp: int) -> str | None:
        if arch.architecture in architectures and tp > arch.num_experts:
            return f"{tp} exceeds its {arch.num_experts} experts ({source})"
        return None
    return check


def _gpt_oss_kv(source: str) -> Check:
    split = _kv_split(source)

    def check(arch: ModelArchitecture, tp: int) -> str | None:
        return split(arch, tp) if arch.architecture == "GptOssForCausalLM" else None
    return check


_RULES: dict[str, tuple[Check, ...]] = {
    "vllm": (
        _heads(f"{_VLLM}: vllm/config/model.py ModelConfig.verify_with_parallel_config"),
        _kv_replicated(f"{_VLLM}: vllm/model_executor/layers/linear.py QKVParallelLinear"),
        _gpt_oss_kv(f"{_VLLM}: vllm/model_executor/models/gpt_oss.py gives each rank kv // tp KV heads"),
        _dense_ffn(f"{_VLLM}: vllm/model_executor/layers/linear.py MergedColumnParallelLinear"),
        _expert_ffn(f"{_VLLM}: vllm/model_executor/layers/fused_moe/config.py"),
        _experts_at_least(f"{_VLLM}: vllm/model_executor/models/qwen3_moe.py",
                          frozenset({"Qwen3MoeForCausalLM"})),
    ),
    "sglang": (
        _heads(f"{_SGLANG}: sglang/srt/models/llama.py and the other model files"),
        _kv_replicated(f"{_SGLANG}: sglang/srt/models/llama.py, sglang/srt/layers/linear.py QKVParallelLinear"),
        _dense_ffn(f"{_SGLANG}: sglang/srt/layers/linear.py MergedColumnParallelLinear"),
        _expert_ffn(f"{_SGLANG}: sglang/srt/layers/moe/fused_moe_triton/layer.py"),
        _experts_at_least(f"{_SGLANG}: sglang/srt/models/qwen3_moe.py, deepseek_v2.py",
                          frozenset({"Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"})),
    ),
    "lmdeploy": (
        _heads("LMDeploy: lmdeploy/pytorch/config.py"),
        _kv_replicated("LMDeploy: lmdeploy/pytorch/config.py, lmdeploy/turbomind/builders/attention.py"),
    ),
    "tensorrt-llm": (
        # KV heads per rank are ceil(kv / tp): any KV count is accepted (engine-defaults.md).
        _heads("TensorRT-LLM: tensorrt_llm/_torch attention module"),
    ),
    "tgi": (  # recalled from TGI's flash_llama_modeling.py and utils/weights.py, not read in this pass
        _heads("TGI: server/text_generation_server/models/custom_modeling/flash_llama_modeling.py"),
        _kv_split("TGI: flash_llama_modeling.py shards KV heads as kv // num_shards"),
        _dense_ffn("TGI: server/text_generation_server/utils/weights.py get_sharded"),
        _expert_ffn("TGI: server/text_generation_server/utils/weights.py get_sharded"),
    ),
    "mlc-llm": (  # assumed (mlc_llm/model/llama/llama_model.py recalled, not read)
        _heads("MLC-LLM: mlc_llm/model/llama/llama_model.py (assumed)"),
        _kv_split("MLC-LLM: mlc_llm/model/llama/llama_model.py (assumed)"),
        _dense_ffn("MLC-LLM: mlc_llm/model/llama/llama_model.py (assumed)"),
        _expert_ffn("MLC-LLM: MoE models (assumed)"),
    ),
}


def _violation(engine: str, arch: ModelArchitecture, tp: int) -> str | None:
    for check in _RULES.get(engine, ()):
        reason = check(arch, tp)
        if reason is not None:
            return reason
    return None


@lru_cache(maxsize=8192)
def _problem(engine: str, arch: ModelArchitecture, tp: int) -> str | None:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        return f"tensor parallel size must be a positive integer, got {tp!r}"
    profile = engine_profile(engine)
    if not profile.tensor_parallel:
        if tp == 1:
            return None
        return (f"{profile.name} runs without tensor parallelism in this planner (EngineProfile.tensor_parallel; "
                "multi-GPU splits layers, not heads): use tensor parallel size 1")
    reason = _violation(profile.name, arch, tp)
    if reason is None:
        return None
    accepted = [str(t) for t in range(1, max(16, tp) + 1) if _violation(profile.name, arch, t) is None]
    return (f"{profile.name} refuses tensor parallel size {tp} for {arch.repo_id}: {reason}; "
            f"sizes it accepts up to {max(16, tp)}: {', '.join(accepted)}")


def tp_problem(engine: str, arch: ModelArchitecture, tp: int) -> str | None:
    """None when `engine` accepts tensor-parallel size `tp` for `arch`; else the reason, in words a user can act on,
    naming the rule and where it comes from (file in the engine's source). Unknown engines raise
    CatalogLookupError."""
    return _problem(engine, arch, tp)


def tp_mask(engine: str, arch: ModelArchitecture, tp_sizes: Sequence[int]) -> NDArray[np.bool_]:
    """True where `engine` accepts the tensor-parallel size, one entry per element of `tp_sizes`."""
    return np.fromiter((_problem(engine, arch, int(tp)) is None for tp in tp_sizes), dtype=np.bool_,
                       count=len(tp_sizes))
