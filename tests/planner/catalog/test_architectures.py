"""Model architectures: catalog coverage, parameter counts, KV sizes and config.json parsing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.model_configs import (
    architecture_from_inline,
    from_hf_config,
    load_config_json,
    load_model_catalog,
    resolve_model,
)
from inferplan.planner.names import CatalogLookupError

CATALOG = load_model_catalog()

# gpt-oss's published active counts (3.61B, 5.13B in its model card) leave out the input embedding,
# which a token only indexes; our active count includes both embedding tables like the other families.
ACTIVE_EXCLUDES_INPUT_EMBEDDING = {"openai/gpt-oss-20b", "openai/gpt-oss-120b"}
# Kimi-K2's README rounds its counts to "1T" and "32B"; the config gives 1.026T and 32.9B (+2.6%, +2.7%).
PUBLISHED_TOLERANCE = {"moonshotai/Kimi-K2-Instruct": 0.03}

# -- catalog -------------------------------------------------------------------------------------


def test_catalog_has_at_least_30_models() -> None:
    assert len(CATALOG) >= 30
    assert len(list(CATALOG)) == len(CATALOG)


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Llama-2-7b-hf",
        "meta-llama/Llama-2-13b-hf",
        "meta-llama/Llama-2-70b-hf",
        "meta-llama/Meta-Llama-3-8B",
        "meta-llama/Meta-Llama-3-70B",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Llama-3.1-405B",
        "meta-llama/Llama-3.2-1B",
        "meta-llama/Llama-3.2-3B",
        "meta-llama/Llama-3.3-70B-Instruct",
        "codellama/CodeLlama-7b-hf",
        "mistralai/Mistral-7B-v0.1",
        "mistralai/Mistral-Small-24B-Base-2501",
        "mistralai/Mixtral-8x7B-v0.1",
        "mistralai/Mixtral-8x22B-v0.1",
        "Qwen/Qwen2-7B",
        "Qwen/Qwen2-72B",
        "Qwen/Qwen2.5-0.5B",
        "Qwen/Qwen2.5-1.5B",
        "Qwen/Qwen2.5-3B",
        "Qwen/Qwen2.5-7B",
        "Qwen/Qwen2.5-14B",
        "Qwen/Qwen2.5-32B",
        "Qwen/Qwen2.5-72B",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-235B-A22B",
        "google/gemma-2-9b",
        "google/gemma-2-27b",
        "google/gemma-3-27b-it",
        "google/gemma-3-12b-it",
        "microsoft/Phi-3-mini-4k-instruct",
        "microsoft/Phi-3-medium-4k-instruct",
        "microsoft/phi-4",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-R1",
        "openai/gpt-oss-20b",
        "openai/gpt-oss-120b",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "deepseek-ai/DeepSeek-V3.1",
        "moonshotai/Kimi-K2-Instruct",
    ],
)
def test_required_model_is_in_catalog(name: str) -> None:
    assert resolve_model(name).num_layers > 0


# Facts models the catalog does not hold yet (none since the issue on today's models, 35).
PENDING_MODELS: set[str] = set()
# Repositories of an architecture the catalog holds under another name: they resolve to it.
# Qwen3-235B-A22B-Instruct-2507 is not one: its context (262144) differs from the base model's (40960).
SAME_ARCHITECTURE = {"deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-V3",
                     "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-V3",
                     "deepseek-ai/DeepSeek-V3.1": "deepseek-ai/DeepSeek-V3",
                     "Qwen/Qwen2.5-72B-Instruct": "Qwen/Qwen2.5-72B"}


def test_every_facts_model_is_in_catalog_or_pending() -> None:
    facts = Path(__file__).resolve().parents[4] / "shared" / "catalog-facts" / "models.json"
    if not facts.exists():
        pytest.skip("catalog-facts not present on this machine")
    for entry in json.loads(facts.read_text()):
        repo = entry["repo"]
        if repo in PENDING_MODELS:  # not yet: a model added must leave the list
            with pytest.raises(CatalogLookupError):
                resolve_model(repo)
            continue
        assert resolve_model(repo).repo_id == SAME_ARCHITECTURE.get(repo, repo)


@pytest.mark.parametrize(
    ("alias", "repo_id"),
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
        ("Qwen/Qwen2-7B-Instruct", "Qwen/Qwen2-7B"),
        ("Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-72B"),
        ("Qwen/Qwen2.5-32B-Instruct", "Qwen/Qwen2.5-32B"),
        ("Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-14B"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
        ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
        ("google/gemma-2-9b-it", "google/gemma-2-9b"),
        ("mistralai/Mistral-7B-Instruct-v0.1", "mistralai/Mistral-7B-v0.1"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-v0.3"),
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
        ("LLAMA_3.1_8B", "meta-llama/Llama-3.1-8B"),
        ("qwen2.5-72b", "Qwen/Qwen2.5-72B"),
        ("Qwen2.5 72B", "Qwen/Qwen2.5-72B"),
        ("gpt-oss-120b", "openai/gpt-oss-120b"),
        ("deepseek-r1", "deepseek-ai/DeepSeek-V3"),
        ("DeepSeek-R1", "deepseek-ai/DeepSeek-V3"),
        ("deepseek-v3.1", "deepseek-ai/DeepSeek-V3"),
        ("llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
        ("Kimi-K2", "moonshotai/Kimi-K2-Instruct"),
        ("codellama/CodeLlama-70b-Instruct-hf", "codellama/CodeLlama-70b-hf"),
        ("qwen3-coder-480b-a35b", "Qwen/Qwen3-Coder-480B-A35B-Instruct"),
        ("Qwen3 4B", "Qwen/Qwen3-4B"),
    ],
)
def test_alias_resolves_ignoring_case_and_separators(alias: str, repo_id: str) -> None:
    assert resolve_model(alias).repo_id == repo_id


def test_every_alias_resolves_to_its_entry() -> None:
    for model in CATALOG:
        for name in (model.repo_id, *model.aliases):
            resolved = CATALOG.resolve(name)  # or the entry with that repository's own context (served_configs)
            assert resolved is model or dataclasses.replace(
                resolved, max_position_embeddings=model.max_position_embeddings, sources=model.sources,
                unverified_fields=model.unverified_fields) == model, name


def test_mistral_v02_and_v03_are_not_aliases_of_v01() -> None:
    v01 = resolve_model("mistralai/Mistral-7B-v0.1")
    assert resolve_model("mistralai/Mistral-7B-Instruct-v0.2") is not v01
    assert resolve_model("mistralai/Mistral-7B-Instruct-v0.3").vocab_size == 32768


@pytest.mark.parametrize(
    ("name", "repo_id"),
    [
        ("Qwen/Qwen3-8B-Base", "Qwen/Qwen3-8B"),  # a training stage
        ("meta-llama/Llama-4-Scout-17B-16E", "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "meta-llama/Llama-3.1-8B"),  # another organisation
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "meta-llama/Llama-3.1-70B"),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "Qwen/Qwen2.5-7B"),
        # Two entries share the stem: the release date decides, an undated name takes the undated release.
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen/Qwen3-235B-A22B-Instruct-2507"),
        ("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B"),
    ],
)
def test_a_variant_name_resolves_to_the_model_it_extends(name: str, repo_id: str) -> None:
    with pytest.raises(CatalogLookupError):
        resolve_model(name)  # plans take catalogued names only
    variant = CATALOG.variant_of(name)
    assert variant is not None and variant.repo_id == repo_id


@pytest.mark.parametrize("name", ["Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-Coder-30B-A3B-Instruct",
                                  "Qwen/Qwen2.5-Math-7B", "microsoft/Phi-3-mini-128k-instruct",
                                  "acme/never-heard-of-it-7b"])
def test_a_name_that_adds_more_than_variant_words_stays_unknown(name: str) -> None:
    assert CATALOG.variant_of(name) is None


def test_unknown_model_lists_close_names() -> None:
    with pytest.raises(CatalogLookupError) as caught:
        resolve_model("llama-3.1-8x")
    assert caught.value.kind == "model"
    assert any("3.1-8B" in name or "3.1-8b" in name for name in caught.value.suggestions)
    assert "llama-3.1-8x" in str(caught.value)


def test_every_entry_lists_its_sources() -> None:
    for model in CATALOG:
        assert model.sources, model.repo_id
        assert all(source.startswith("https://") for source in model.sources)


# -- parameter counts --------------------------------------------------------------------------

PUBLISHED_TOTAL = [m for m in CATALOG if m.params_total_published]
PUBLISHED_ACTIVE = [m for m in CATALOG if m.params_active_published]


@pytest.mark.parametrize("model", PUBLISHED_TOTAL, ids=lambda m: m.repo_id)
def test_param_count_within_2_percent_of_published(model: ModelArchitecture) -> None:
    tolerance = PUBLISHED_TOLERANCE.get(model.repo_id, 0.02)
    assert model.param_count() == pytest.approx(model.params_total_published, rel=tolerance)


@pytest.mark.parametrize("model", PUBLISHED_ACTIVE, ids=lambda m: m.repo_id)
def test_active_param_count_within_2_percent_of_published(model: ModelArchitecture) -> None:
    active = model.active_param_count()
    if model.repo_id in ACTIVE_EXCLUDES_INPUT_EMBEDDING:
        active -= model.vocab_size * model.hidden_size
    assert active == pytest.approx(model.params_active_published, rel=PUBLISHED_TOLERANCE.get(model.repo_id, 0.02))


def test_every_catalog_model_has_a_published_total() -> None:
    assert len(PUBLISHED_TOTAL) == len(CATALOG)
    assert {m.repo_id for m in PUBLISHED_ACTIVE} == {m.repo_id for m in CATALOG if m.is_moe}


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("meta-llama/Meta-Llama-3-8B", 8.03e9, 8.03e9),
        ("meta-llama/Llama-3.1-405B", 405.9e9, 405.9e9),
        ("meta-llama/Llama-3.2-1B", 1.24e9, 1.24e9),
        ("Qwen/Qwen2.5-0.5B", 0.49e9, 0.49e9),
        ("mistralai/Mixtral-8x7B-v0.1", 46.7e9, 12.9e9),
        ("deepseek-ai/DeepSeek-V3", 671e9, 37e9),
        ("Qwen/Qwen3-235B-A22B", 235e9, 22e9),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", 235e9, 22e9),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 109e9, 17e9),
        ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 400e9, 17e9),
        ("deepseek-ai/DeepSeek-V3.1", 671e9, 37e9),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", 480e9, 35e9),
        ("Qwen/Qwen3-4B", 4.0e9, 4.0e9),
        ("codellama/CodeLlama-70b-hf", 70e9, 70e9),
    ],
)
def test_headline_counts(name: str, total: float, active: float) -> None:
    model = resolve_model(name)
    assert model.param_count() == pytest.approx(total, rel=0.02)
    assert model.active_param_count() == pytest.approx(active, rel=0.02)


def test_tied_embeddings_count_once() -> None:
    model = resolve_model("meta-llama/Llama-3.2-1B")
    assert model.tie_word_embeddings
    assert model.embedding_param_count() == 128256 * 2048
    untied = dataclasses.replace(model, tie_word_embeddings=False)
    assert untied.param_count() - model.param_count() == 128256 * 2048


def test_dense_active_equals_total() -> None:
    model = resolve_model("Qwen/Qwen2.5-7B")
    assert not model.is_moe
    assert model.active_param_count() == model.param_count()


def test_qwen2_counts_qkv_bias() -> None:
    qwen = resolve_model("Qwen/Qwen2.5-7B")
    as_llama = dataclasses.replace(qwen, architecture="LlamaForCausalLM")
    bias = qwen.num_layers * (qwen.num_attention_heads + 2 * qwen.num_kv_heads) * qwen.head_dim
    assert qwen.param_count() - as_llama.param_count() == bias


# -- KV cache ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype_bytes", "expected"),
    [
        ("meta-llama/Meta-Llama-3-8B", 2, 32 * 2 * 8 * 128 * 2),
        ("meta-llama/Llama-2-7b-hf", 2, 32 * 2 * 32 * 128 * 2),
        ("Qwen/Qwen2-7B", 2, 28 * 2 * 4 * 128 * 2),
        ("deepseek-ai/DeepSeek-V3", 2, 61 * 576 * 2),
        ("deepseek-ai/DeepSeek-V3.1", 2, 61 * 576 * 2),
        ("moonshotai/Kimi-K2-Instruct", 2, 61 * 576 * 2),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 2, 48 * 2 * 8 * 128 * 2),
        ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 2, 48 * 2 * 8 * 128 * 2),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", 2, 94 * 2 * 4 * 128 * 2),
    ],
)
def test_kv_bytes_per_token(name: str, dtype_bytes: float, expected: int) -> None:
    model = resolve_model(name)
    assert model.kv_bytes_per_token(dtype_bytes) == expected
    assert model.kv_bytes_per_token(1) == expected / 2


def test_kv_hand_values() -> None:
    assert resolve_model("meta-llama/Meta-Llama-3-8B").kv_bytes_per_token(2) == 131072
    assert resolve_model("meta-llama/Llama-2-7b-hf").kv_bytes_per_token(2) == 524288
    assert resolve_model("Qwen/Qwen2-7B").kv_bytes_per_token(2) == 57344


def test_gpt_oss_sliding_layers_hold_their_window() -> None:
    model = resolve_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2
    assert model.full_attention_layers() == 18
    expected = 18 * 10000 * per_layer + 18 * 128 * per_layer
    assert model.kv_bytes_for_context(10000, 2) == expected


def test_mistral_all_layers_window() -> None:
    model = resolve_model("mistralai/Mistral-7B-v0.1")
    assert model.full_attention_layers() == 0
    assert model.kv_bytes_for_context(8192, 2) == 4096 * model.kv_bytes_per_token(2)
    assert model.kv_bytes_for_context(1000, 2) == 1000 * model.kv_bytes_per_token(2)


def test_gemma_layouts() -> None:
    gemma2 = resolve_model("google/gemma-2-9b")
    assert gemma2.layer_windows[:2] == (4096, None)
    assert gemma2.full_attention_layers() == 21
    gemma3 = resolve_model("google/gemma-3-27b-it")
    assert gemma3.layer_windows[:6] == (1024,) * 5 + (None,)
    assert gemma3.full_attention_layers() == 10


def test_kv_for_context_accepts_arrays() -> None:
    model = resolve_model("gpt-oss-20b")
    tokens = np.array([0, 64, 128, 1000])
    result = model.kv_bytes_for_context(tokens, 2)
    assert isinstance(result, np.ndarray)
    assert result.tolist() == [model.kv_bytes_for_context(int(t), 2) for t in tokens]


def test_attention_flops_formula() -> None:
    llama = resolve_model("llama-3-8b")
    assert llama.attention_flops_per_token(1000) == 2 * 2 * 32 * 32 * 128 * 1000
    oss = resolve_model("gpt-oss-20b")
    expected = 2 * 2 * 64 * 64 * (12 * 5000 + 12 * 128)
    assert oss.attention_flops_per_token(5000) == expected
    assert oss.attention_flops_per_token(np.array([5000]))[0] == expected
    ds = resolve_model("deepseek-v3")
    assert ds.attention_flops_per_token(100) == 2 * 128 * (192 + 128) * 61 * 100


# -- config.json parsing -----------------------------------------------------------------------

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "attention_bias": False,
    "rope_scaling": {
        "factor": 8.0,
        "rope_type": "llama3",
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def test_from_hf_config_llama() -> None:
    model = from_hf_config(LLAMA_CONFIG, repo_id="meta-llama/Llama-3.1-8B-Instruct")
    assert model.repo_id == "meta-llama/Llama-3.1-8B-Instruct"
    assert (model.num_layers, model.num_kv_heads, model.head_dim) == (32, 8, 128)
    assert model.layer_windows == () and not model.is_moe
    assert model.param_count() == resolve_model("llama-3.1-8b").param_count()


def test_from_hf_config_qwen2_sliding_disabled() -> None:
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 131072,
        "sliding_window": 131072,
        "use_sliding_window": False,
        "max_window_layers": 28,
        "tie_word_embeddings": False,
    }
    model = from_hf_config(config)
    assert model.layer_windows == ()
    assert model.kv_bytes_per_token(2) == 57344
    switched_on = from_hf_config(
        {**config, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    )
    assert switched_on.full_attention_layers() == 20
    assert switched_on.layer_windows[20:] == (4096,) * 8


def test_from_hf_config_mixtral() -> None:
    config = {
        "architectures": ["MixtralForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "sliding_window": None,
        "tie_word_embeddings": False,
    }
    model = from_hf_config(config)
    assert model.is_moe and model.num_experts == 8 and model.experts_per_token == 2
    assert model.expert_intermediate_size == 14336
    assert model.param_count() == pytest.approx(46.7e9, rel=0.01)
    assert model.active_param_count() == pytest.approx(12.9e9, rel=0.01)


def test_from_hf_config_gemma3_text_config() -> None:
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 5376,
            "intermediate_size": 21504,
            "num_attention_heads": 32,
            "num_hidden_layers": 62,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
            "max_position_embeddings": 131072,
            "vocab_size": 262208,
        },
    }
    model = from_hf_config(config, repo_id="google/gemma-3-27b-it")
    assert model.architecture == "Gemma3ForConditionalGeneration"
    assert model.hidden_size == 5376 and model.head_dim == 128  # explicit, not 5376 / 32
    assert model.tie_word_embeddings  # Gemma's default
    assert model.full_attention_layers() == 10
    assert model.param_count() == pytest.approx(27.0e9, rel=0.01)


DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "num_hidden_layers": 61,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
    "num_nextn_predict_layers": 1,
}


def test_from_hf_config_deepseek_v3() -> None:
    model = from_hf_config(DEEPSEEK_V3_CONFIG)
    assert model.is_mla and model.is_moe
    assert model.head_dim == 192 and model.v_head_dim == 128
    assert model.first_dense_layers == 3 and model.num_shared_experts == 1
    assert model.shared_expert_intermediate_size == 2048
    assert model.kv_bytes_per_token(2) == 61 * 576 * 2
    assert model.param_count() == pytest.approx(671e9, rel=0.01)


def test_from_hf_config_gpt_oss_layer_types() -> None:
    config = {
        "architectures": ["GptOssForCausalLM"],
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "head_dim": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 24,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "sliding_window": 128,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "attention_bias": True,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
    }
    model = from_hf_config(config)
    assert model.layer_windows == (128, None) * 12
    assert model.param_count() == pytest.approx(20.9e9, rel=0.01)


def test_load_config_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, "_name_or_path": "my-org/my-llama"}))
    model = load_config_json(path)
    assert model.repo_id == "my-org/my-llama"
    assert model.kv_bytes_per_token(2) == 131072


def test_load_config_json_malformed(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 4096,\n  "num_hidden_layers": 32,,\n}\n')
    with pytest.raises(ValueError, match=r"config\.json.*line 3"):
        load_config_json(path)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"num_hidden_layers": -4}, "num_hidden_layers"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"num_hidden_layers": 32.5}, "num_hidden_layers"),
        ({"vocab_size": "lots"}, "vocab_size"),
        ({"hidden_size": 4096 * 1000}, "parameter count"),
        ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok"),
    ],
)
def test_absurd_config_names_the_field(change: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        from_hf_config({**LLAMA_CONFIG, **change})


@pytest.mark.parametrize(
    "missing",
    [
        "num_hidden_layers",
        "hidden_size",
        "vocab_size",
        "intermediate_size",
        "max_position_embeddings",
        "num_attention_heads",
    ],
)
def test_missing_field_names_it(missing: str) -> None:
    config = {k: v for k, v in LLAMA_CONFIG.items() if k != missing}
    with pytest.raises(ValueError, match=missing):
        from_hf_config(config)


def test_missing_config_file_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.json"):
        load_config_json(tmp_path / "nope.json")


def test_absurd_config_file_names_path_and_field(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, "num_hidden_layers": 0}))
    with pytest.raises(ValueError, match=r"config\.json.*num_hidden_layers"):
        load_config_json(path)


# -- inline architectures ----------------------------------------------------------------------


def test_inline_snake_and_camel_case_agree() -> None:
    snake = architecture_from_inline(
        {
            "num_layers": 32,
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_kv_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
        }
    )
    camel = architecture_from_inline(
        {
            "numLayers": 32,
            "hiddenSize": 4096,
            "intermediateSize": 14336,
            "numAttentionHeads": 32,
            "numKvHeads": 8,
            "vocabSize": 128256,
            "maxPositionEmbeddings": 8192,
        }
    )
    assert snake == camel
    assert snake.head_dim == 128
    assert snake.param_count() == resolve_model("llama-3-8b").param_count()


def test_inline_config_json_vocabulary_is_accepted() -> None:
    assert architecture_from_inline(LLAMA_CONFIG).num_kv_heads == 8


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"numLayers": 0}, "num_layers"),
        ({"numKvHeads": 5}, "num_kv_heads"),
        ({"colour": "blue"}, "colour"),
        ({"tieWordEmbeddings": "yes"}, "tie_word_embeddings"),
        ({"vocabSize": None}, "vocab_size"),
    ],
)
def test_inline_validation_names_the_field(data: dict, field: str) -> None:
    base = {
        "numLayers": 32,
        "hiddenSize": 4096,
        "intermediateSize": 14336,
        "numAttentionHeads": 32,
        "vocabSize": 128256,
        "maxPositionEmbeddings": 8192,
    }
    with pytest.raises(ValueError, match=field):
        architecture_from_inline({**base, **data})


# -- properties --------------------------------------------------------------------------------

MODELS = list(CATALOG)


@given(
    model=st.sampled_from(MODELS),
    tokens=st.lists(st.integers(min_value=0, max_value=2_000_000), min_size=2, max_size=20),
    dtype_bytes=st.sampled_from([0.5, 1, 2, 4]),
)
def test_kv_for_context_monotone_and_bounded(
    model: ModelArchitecture, tokens: list[int], dtype_bytes: float
) -> None:
    ordered = np.sort(np.array(tokens))
    kv = model.kv_bytes_for_context(ordered, dtype_bytes)
    assert np.all(np.diff(kv) >= 0)
    assert np.all(kv <= ordered * model.kv_bytes_per_token(dtype_bytes) + 1e-6)


@given(model=st.sampled_from(MODELS), extra=st.integers(min_value=1, max_value=16))
def test_param_count_increases_with_layers(model: ModelArchitecture, extra: int) -> None:
    windows = model.layer_windows + model.layer_windows[-1:] * extra if model.layer_windows else ()
    deeper = dataclasses.replace(model, num_layers=model.num_layers + extra, layer_windows=windows)
    assert deeper.param_count() > model.param_count()
    assert deeper.active_param_count() > model.active_param_count()


def test_qwen3_14b_matches_its_published_parameter_count() -> None:
    from inferplan.planner.catalog.model_configs import resolve_model

    arch = resolve_model("Qwen/Qwen3-14B")
    assert arch.param_count() == pytest.approx(14.8e9, rel=0.01)  # model card: 14.8B, 13.2B non-embedding
    assert arch.param_count() - 2 * arch.vocab_size * arch.hidden_size == pytest.approx(13.2e9, rel=0.01)


# -- today's models (issue 35) -------------------------------------------------------------------
# Hand counts from the config fields (sources in models.json); published figures in the comments.

LLAMA4_ATTENTION = 2 * 5120 * 40 * 128 + 2 * 5120 * 8 * 128  # q, o; k, v (no bias; the L2 qk-norm has no weights)
LLAMA4_EXPERT = 3 * 5120 * 8192  # gate, up, down of one expert (and of the shared expert)
LLAMA4_EMBEDDINGS = 2 * 202048 * 5120  # untied
LLAMA4_NORMS = 48 * 2 * 5120 + 5120


def test_llama4_scout_counts_and_kv() -> None:
    scout = resolve_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    per_layer = LLAMA4_ATTENTION + (16 + 1) * LLAMA4_EXPERT + 5120 * 16  # 16 routed + 1 shared, router
    assert scout.param_count() == LLAMA4_EMBEDDINGS + LLAMA4_NORMS + 48 * per_layer  # 107.77B; card: 109B
    active_layer = LLAMA4_ATTENTION + (1 + 1) * LLAMA4_EXPERT + 5120 * 16
    assert scout.active_param_count() == LLAMA4_EMBEDDINGS + LLAMA4_NORMS + 48 * active_layer  # 17.17B; card: 17B
    assert (scout.moe_layer_count, scout.first_dense_layers, scout.num_shared_experts) == (48, 0, 1)
    assert scout.kv_bytes_per_token(2) == 48 * 2 * 8 * 128 * 2 == 196608


def test_llama4_maverick_interleaves_dense_and_moe_layers() -> None:
    maverick = resolve_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert (maverick.moe_layer_count, maverick.first_dense_layers) == (24, 24)
    assert maverick.intermediate_size == 16384 and maverick.expert_intermediate_size == 8192
    dense = 3 * 5120 * 16384
    moe = (128 + 1) * LLAMA4_EXPERT + 5120 * 128
    attention = 48 * LLAMA4_ATTENTION
    assert maverick.param_count() == LLAMA4_EMBEDDINGS + LLAMA4_NORMS + attention + 24 * dense + 24 * moe  # 400.71B
    active_moe = 2 * LLAMA4_EXPERT + 5120 * 128
    assert maverick.active_param_count() == (LLAMA4_EMBEDDINGS + LLAMA4_NORMS + attention + 24 * dense
                                             + 24 * active_moe)  # 17.18B; card: 17B
    assert maverick.kv_bytes_per_token(2) == 196608


def test_llama4_chunked_layers_hold_one_chunk() -> None:
    for name in ("llama-4-scout", "llama-4-maverick"):
        model = resolve_model(name)
        assert model.layer_windows[:4] == (8192, 8192, 8192, None)  # NoPE global attention on every 4th layer
        assert model.full_attention_layers() == 12
        per_layer = 2 * 8 * 128 * 2
        assert model.kv_bytes_for_context(100_000, 2) == (12 * 100_000 + 36 * 8192) * per_layer
        assert model.kv_bytes_for_context(4000, 2) == 4000 * model.kv_bytes_per_token(2)


def test_kimi_k2_is_deepseek_v3_with_more_experts_and_fewer_heads() -> None:
    kimi = resolve_model("moonshotai/Kimi-K2-Instruct")
    v3 = resolve_model("deepseek-ai/DeepSeek-V3")
    assert kimi.architecture == v3.architecture and kimi.is_mla
    assert (kimi.num_attention_heads, kimi.num_experts, kimi.experts_per_token, kimi.num_shared_experts,
            kimi.first_dense_layers) == (64, 384, 8, 1, 1)
    attention = (7168 * 1536 + 1536 + 1536 * 64 * 192  # q_a, q_a norm, q_b
                 + 7168 * 576 + 512 + 512 * 64 * 256  # kv_a (latent + rope key), kv_a norm, kv_b
                 + 64 * 128 * 7168)  # o
    expert = 3 * 7168 * 2048
    router = 7168 * 384 + 384  # gate and e_score_correction_bias
    base = 2 * 163840 * 7168 + 61 * (attention + 2 * 7168) + 7168 + 3 * 7168 * 18432
    assert kimi.param_count() == base + 60 * ((384 + 1) * expert + router)  # 1.026T; README: 1T
    assert kimi.active_param_count() == base + 60 * ((8 + 1) * expert + router)  # 32.86B; README: 32B
    assert kimi.kv_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70272


def test_qwen3_2507_differs_from_its_base_only_in_context() -> None:
    new = resolve_model("Qwen/Qwen3-235B-A22B-Instruct-2507")
    base = resolve_model("Qwen/Qwen3-235B-A22B")
    assert new is not base
    assert (new.max_position_embeddings, base.max_position_embeddings) == (262144, 40960)
    assert dataclasses.replace(new, repo_id=base.repo_id, aliases=base.aliases, max_position_embeddings=40960,
                               unverified_fields=base.unverified_fields, sources=base.sources) == base
    assert new.param_count() == base.param_count()  # 235.09B; 235B by name
    assert new.kv_bytes_per_token(2) == 94 * 2 * 4 * 128 * 2 == 192512


def test_an_instruct_repository_is_planned_with_its_own_configs_context() -> None:
    # Qwen2.5 Instruct configs state 32768 where the base config states 131072 (YaRN only when the user sets
    # rope_scaling): vLLM refuses a --max-model-len above the served config's without an override.
    instruct = resolve_model("Qwen/Qwen2.5-72B-Instruct")
    base = resolve_model("Qwen/Qwen2.5-72B")
    assert (instruct.max_position_embeddings, base.max_position_embeddings) == (32768, 131072)
    assert resolve_model("qwen2.5-72b-instruct") is instruct  # the short alias names the same repository
    assert dataclasses.replace(instruct, max_position_embeddings=131072, sources=base.sources,
                               unverified_fields=base.unverified_fields) == base  # the same weights otherwise
    for size in ("1.5B", "7B", "14B", "32B"):
        assert resolve_model(f"Qwen/Qwen2.5-{size}-Instruct").max_position_embeddings == 32768, size
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct") is resolve_model("meta-llama/Llama-3.1-8B")


def test_every_facts_repository_resolves_to_the_context_of_its_own_config() -> None:
    facts = Path(__file__).resolve().parents[4] / "shared" / "catalog-facts" / "models.json"
    if not facts.exists():
        pytest.skip("catalog-facts not present on this machine")
    for entry in json.loads(facts.read_text()):
        assert resolve_model(entry["repo"]).max_position_embeddings == entry["max_position_embeddings"], entry["repo"]


def test_deepseek_v31_is_an_alias_of_v3() -> None:
    assert resolve_model("deepseek-ai/DeepSeek-V3.1") is resolve_model("deepseek-ai/DeepSeek-V3")


def test_deepseek_v31_terminus_is_an_alias_of_v3() -> None:
    """DeepSeek-V3.1-Terminus, an update of V3.1 whose model card states DeepSeek-V3's structure, was an unknown model:
    a plan or a scenario line naming it was refused."""
    assert resolve_model("deepseek-ai/DeepSeek-V3.1-Terminus") is resolve_model("deepseek-ai/DeepSeek-V3")
    assert "https://huggingface.co/deepseek-ai/DeepSeek-V3.1-Terminus" in resolve_model("deepseek-v3").sources


LLAMA4_TEXT = {
    "num_hidden_layers": 8, "hidden_size": 512, "intermediate_size": 256, "intermediate_size_mlp": 1024,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
    "max_position_embeddings": 65536, "num_local_experts": 4, "num_experts_per_tok": 1, "attention_chunk_size": 512,
}


def _llama4(**text: object) -> ModelArchitecture:
    return from_hf_config({"architectures": ["Llama4ForConditionalGeneration"],
                           "text_config": {**LLAMA4_TEXT, **text}})


def test_llama4_config_parsing() -> None:
    every = _llama4()
    assert (every.moe_layer_count, every.num_shared_experts, every.shared_expert_intermediate_size) == (8, 1, 256)
    assert every.layer_windows == (512, 512, 512, None) * 2
    interleaved = _llama4(interleave_moe_layer_step=2)
    assert (interleaved.moe_layer_count, interleaved.first_dense_layers, interleaved.intermediate_size) == (4, 4, 1024)
    assert _llama4(moe_layers=[0, 5]).moe_layer_count == 2  # an explicit list wins over the step
    assert _llama4(no_rope_layers=[1, 0] * 4).layer_windows == (512, None) * 4
    assert _llama4(no_rope_layer_interval=2).full_attention_layers() == 4
    assert _llama4(attention_chunk_size=None).layer_windows == ()
    assert _llama4(n_shared_experts=0).num_shared_experts == 0  # a stated count is kept
    for bad, field in (({"no_rope_layers": [1, 0]}, "no_rope_layers"), ({"moe_layers": [9]}, "moe_layers"),
                       ({"interleave_moe_layer_step": 0}, "interleave_moe_layer_step")):
        with pytest.raises(ValueError, match=field):
            _llama4(**bad)


def test_qwen_sparse_step_and_dense_layers_anywhere_are_counted() -> None:
    config = {"architectures": ["Qwen2MoeForCausalLM"], "num_hidden_layers": 8, "hidden_size": 512,
              "intermediate_size": 1024, "moe_intermediate_size": 128, "num_attention_heads": 8,
              "num_key_value_heads": 8, "vocab_size": 1000, "max_position_embeddings": 4096, "num_experts": 4,
              "num_experts_per_tok": 2}
    assert from_hf_config({**config, "decoder_sparse_step": 2}).moe_layer_count == 4  # layers 1, 3, 5, 7
    assert from_hf_config({**config, "mlp_only_layers": [2, 6]}).first_dense_layers == 2
    assert from_hf_config({**config, "decoder_sparse_step": 2, "mlp_only_layers": [1, 2]}).moe_layer_count == 3


@pytest.mark.parametrize(("derivative", "base", "context"), [
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "Qwen/Qwen2.5-32B", 131072),
    ("Qwen/QwQ-32B", "Qwen/Qwen2.5-32B", 40960),
    ("Qwen/Qwen2.5-Coder-32B-Instruct", "Qwen/Qwen2.5-32B", 32768),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "Qwen/Qwen2.5-14B", 131072),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen/Qwen2.5-7B", 131072),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "meta-llama/Llama-3.1-8B", 131072),
    ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistralai/Mistral-Small-24B-Base-2501", 131072),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistralai/Mistral-Small-24B-Base-2501", 131072),
    # Added 2026-12-07 from litgpt 0.5.13's copies of their configs.
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen/Qwen3-30B-A3B", 262144),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", "Qwen/Qwen3-30B-A3B", 262144),
    ("Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B", 262144),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507", "Qwen/Qwen3-235B-A22B-Instruct-2507", 262144),
    ("nvidia/Llama-3.1-Nemotron-70B-Instruct-HF", "meta-llama/Llama-3.1-70B", 131072),
    ("microsoft/Phi-4-reasoning-plus", "microsoft/phi-4", 32768),
])
def test_a_derivative_is_planned_with_its_bases_architecture_and_its_own_context(derivative: str, base: str,
                                                                                  context: int) -> None:
    arch, of_base = resolve_model(derivative), resolve_model(base)
    assert arch.repo_id == base and arch.max_position_embeddings == context
    assert (arch.param_count(), arch.kv_bytes_per_token(2)) == (of_base.param_count(), of_base.kv_bytes_per_token(2))
    assert CATALOG.is_derivative(derivative) and not CATALOG.is_derivative(base)
    assert not CATALOG.is_derivative(f"{base}-Instruct")  # the same weights' instruct repository is an alias


def test_a_derivative_must_be_an_alias_of_its_entry() -> None:
    llama = resolve_model("meta-llama/Llama-3.1-8B")
    with pytest.raises(ValueError, match="not an alias"):
        type(CATALOG)([llama], derivatives=["acme/never-heard-of-it-8b"])
    with pytest.raises(ValueError, match="not an alias"):
        type(CATALOG)([llama], derivatives=["meta-llama/Llama-3.1-8B"])  # the entry itself holds its own weights
