"""Tensor-parallel validity: every catalog model x TP x engine against the engines' own checks, transcribed."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.model_configs import load_model_catalog, resolve_model
from inferplan.planner.catalog.validity import tp_mask, tp_problem
from inferplan.planner.names import CatalogLookupError

TP_SIZES = (1, 2, 4, 8, 16)
MODELS = list(load_model_catalog())


def _engine_asserts_pass(engine: str, arch: ModelArchitecture, tp_size: int) -> bool:
    """The engines' start-up checks, written as each engine writes them (sources in validity.py's docstring)."""
    total_num_heads = arch.num_attention_heads
    total_num_kv_heads = arch.num_kv_heads
    dense_output_sizes = []  # MergedColumnParallelLinear(gate, up) of each dense FFN
    if not arch.is_moe or arch.first_dense_layers:
        dense_output_sizes += [arch.intermediate_size, arch.intermediate_size]
    if arch.num_shared_experts:
        shared = arch.shared_expert_intermediate_size * arch.num_shared_experts
        dense_output_sizes += [shared, shared]
    try:
        if engine in ("llama.cpp", "exllama"):
            assert tp_size == 1
        elif engine in ("vllm", "sglang"):
            # config/model.py / models/llama.py
            assert total_num_heads % tp_size == 0
            if not arch.is_mla:  # MLA: get_num_kv_heads returns 1
                if total_num_kv_heads >= tp_size:
                    assert total_num_kv_heads % tp_size == 0
                else:
                    assert tp_size % total_num_kv_heads == 0
            assert all(output_size % tp_size == 0 for output_size in dense_output_sizes)
            if arch.is_moe:
                intermediate_size = arch.expert_intermediate_size
                assert intermediate_size % tp_size == 0
            if engine == "vllm" and arch.architecture == "GptOssForCausalLM":
                num_local_key_value_heads = total_num_kv_heads // tp_size
                assert num_local_key_value_heads > 0 and num_local_key_value_heads * tp_size == total_num_kv_heads
            moe_checked = {"vllm": ("Qwen3MoeForCausalLM",),
                           "sglang": ("Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")}
            if arch.architecture in moe_checked[engine] and tp_size > arch.num_experts:
                raise ValueError("Tensor parallel size is greater than the number of experts")
        elif engine == "lmdeploy":
            tp = tp_size
            assert arch.num_attention_heads % tp == 0
            if not arch.is_mla:  # turbomind/builders/mla.py sets kv_head_num = tp
                if arch.num_kv_heads >= tp:
                    assert arch.num_kv_heads % tp == 0
                else:
                    assert tp % arch.num_kv_heads == 0
        elif engine == "tensorrt-llm":
            num_heads = arch.num_attention_heads
            assert num_heads % tp_size == 0
            # num_key_value_heads = (num_key_value_heads + tp_size - 1) // tp_size: no check
        elif engine in ("tgi", "mlc-llm"):
            num_shards = tp_size
            if total_num_heads % num_shards != 0:
                raise ValueError("`num_heads` must be divisible by `num_shards`")
            if not arch.is_mla:
                assert total_num_kv_heads % num_shards == 0 and total_num_kv_heads // num_shards >= 1
            for size in dense_output_sizes:
                assert size % num_shards == 0
            if arch.is_moe:
                assert arch.expert_intermediate_size % num_shards == 0
        else:
            raise AssertionError(f"no transcription for {engine}")
    except (AssertionError, ValueError):
        return False
    return True


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("arch", MODELS, ids=[m.repo_id for m in MODELS])
def test_matrix_matches_engine_asserts(engine: str, arch: ModelArchitecture) -> None:
    for tp in TP_SIZES:
        reason = tp_problem(engine, arch, tp)
        assert (reason is None) == _engine_asserts_pass(engine, arch, tp), (engine, arch.repo_id, tp, reason)
        if reason is not None:
            assert reason.isascii()
    expected = np.array([_engine_asserts_pass(engine, arch, tp) for tp in TP_SIZES])
    assert np.array_equal(tp_mask(engine, arch, TP_SIZES), expected)


def test_every_engine_has_a_transcription() -> None:
    arch = resolve_model("llama-3.1-8b")
    for engine in ENGINES:
        _engine_asserts_pass(engine, arch, 1)  # raises AssertionError for an engine without one


def test_qwen25_7b_tp8_refused_by_vllm_naming_the_heads() -> None:
    arch = resolve_model("Qwen/Qwen2.5-7B")
    reason = tp_problem("vllm", arch, 8)
    assert reason is not None
    assert f"{arch.num_attention_heads} attention heads" in reason
    assert "vllm/config/model.py" in reason
    assert tp_problem("vllm", arch, 4) is None


@pytest.mark.parametrize("tp", [4, 8])
def test_phi4_tp4_and_tp8_refused_naming_the_kv_heads(tp: int) -> None:
    arch = resolve_model("microsoft/phi-4")
    for engine in ("vllm", "sglang", "lmdeploy"):
        reason = tp_problem(engine, arch, tp)
        assert reason is not None
        assert f"{arch.num_kv_heads} KV heads" in reason
        assert "1, 2, 5, 10" in reason  # what the user can pick instead


def test_llama31_70b_tp8_accepted_everywhere_tp_exists() -> None:
    arch = resolve_model("llama-3.1-70b")
    for engine, profile in ENGINES.items():
        if profile.tensor_parallel:
            assert tp_problem(engine, arch, 8) is None, engine


def test_kv_replication_vllm_and_tgi_differ() -> None:
    arch = resolve_model("llama-3.1-70b")  # 64 heads, 8 KV heads
    assert tp_problem("vllm", arch, 16) is None
    assert tp_problem("sglang", arch, 16) is None
    assert "not replicated" in (tp_problem("tgi", arch, 16) or "")


def test_mla_has_no_kv_head_rule() -> None:
    arch = resolve_model("deepseek-v3")
    assert arch.is_mla
    for engine in ("vllm", "sglang", "tgi", "lmdeploy"):
        assert tp_problem(engine, arch, 16) is None, engine


def test_single_gpu_engines_refuse_tp_above_one() -> None:
    arch = resolve_model("llama-3.1-8b")
    for engine in ("llama.cpp", "exllama"):
        assert tp_problem(engine, arch, 1) is None
        assert "tensor parallel size 1" in (tp_problem(engine, arch, 2) or "")


def test_expert_count_and_width_rules() -> None:
    base = resolve_model("qwen3-30b-a3b")  # 128 experts of width 768
    few = ModelArchitecture(**{**base.__dict__, "num_experts": 4, "experts_per_token": 2})
    assert "4 experts" in (tp_problem("vllm", few, 8) or "")
    narrow = ModelArchitecture(**{**base.__dict__, "expert_intermediate_size": 772})
    assert "expert FFN width 772" in (tp_problem("sglang", narrow, 8) or "")
    assert tp_problem("lmdeploy", narrow, 8) is None  # TurboMind pads the FFN


def test_bad_tp_and_unknown_engine() -> None:
    arch = resolve_model("llama-3.1-8b")
    assert "positive integer" in (tp_problem("vllm", arch, 0) or "")
    with pytest.raises(CatalogLookupError):
        tp_problem("nonesuch", arch, 1)
    assert tp_problem("vLLM", arch, 2) is None
