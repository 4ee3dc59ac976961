"""Plans of models given as a Hugging Face config.json (`model.configFile`), written as the repositories publish
them: what `inferplan plan` makes of their quantisation, attention layout and defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferplan.cli import main
from inferplan.planner.catalog.model_configs import from_hf_config, load_config_json, resolve_model, stated_precision

# Qwen/Qwen2.5-7B-Instruct-AWQ's config.json: Qwen2.5-7B (catalog-facts models.json) with AutoAWQ's
# quantization_config.
QWEN_AWQ: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
    "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944,
    "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4,
    "quantization_config": {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
                            "version": "gemm", "zero_point": True},
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.41.1", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 152064, "_name_or_path": "Qwen/Qwen2.5-7B-Instruct-AWQ",
}


def _plan(tmp_path: Path, config: dict[str, Any], extra_model: str = "") -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "plan.yaml").write_text(
        f"model: {{configFile: config.json{extra_model}}}\nengine: {{name: vllm}}\n"
        'workload: {requestsPerSecond: "5", promptTokens: {mean: 500}, outputTokens: {mean: 250}}\n'
        "slo: {ttft: {maxMs: 2000}, tpot: {maxMs: 100}}\nconstraints: {gpuTypes: [H100]}\nverify: false\n",
        encoding="utf-8")
    return tmp_path / "plan.yaml"


def test_a_config_json_that_states_awq_is_planned_in_awq_only(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(_plan(tmp_path, QWEN_AWQ)), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    chosen = [out["recommendation"], *out["alternatives"]]
    assert {c["precision"] for c in chosen} == {"int4-awq"}
    # vLLM refuses --quantization fp8 on a checkpoint whose quantization_config says awq
    assert all("--quantization" not in c["engineArgs"] for c in chosen)
    assert any("quantization_config" in line for line in out["assumptions"])


def test_a_listed_precision_other_than_the_config_jsons_is_an_error(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(_plan(tmp_path, QWEN_AWQ, ", precisions: [fp8]"))]) == 2
    err = capsys.readouterr().err
    assert "model.precisions" in err and "holds int4-awq weights" in err and "Traceback" not in err


def test_a_quantisation_method_the_planner_does_not_model_is_an_error_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = QWEN_AWQ | {"quantization_config": {"load_in_4bit": True, "quant_method": "bitsandbytes"}}
    assert main(["plan", str(_plan(tmp_path, config))]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "'quantization_config'" in err and "bitsandbytes" in err
    assert main(["plan", str(_plan(tmp_path, config, ", precisions: [int4-awq]"))]) == 0  # the plan's word


@pytest.mark.parametrize(("quant", "precision"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}, "int4-awq"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}, "int4-gptq"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False, "sym": True}, "int8-gptq"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}, "mxfp4"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}}, "fp8"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}}}}, "int8-w8a8"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
        "input_activations": None}}}, "int4-gptq"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
])
def test_the_precision_a_quantization_config_states(quant: dict[str, Any], precision: str) -> None:
    assert stated_precision(QWEN_AWQ | {"quantization_config": quant}) == precision
    assert stated_precision({k: v for k, v in QWEN_AWQ.items() if k != "quantization_config"}) is None


# bigcode/starcoder's config.json: GPTBigCode with multi-query attention (one KV head shared by the 48 query heads).
STARCODER: dict[str, Any] = {
    "_name_or_path": "bigcode/starcoder", "activation_function": "gelu_pytorch_tanh",
    "architectures": ["GPTBigCodeForCausalLM"], "attention_softmax_in_fp32": True, "bos_token_id": 0,
    "eos_token_id": 0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt_bigcode",
    "multi_query": True, "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40, "n_positions": 8192,
    "scale_attn_weights": True, "torch_dtype": "float32", "use_cache": True, "vocab_size": 49152,
}


def test_a_multi_query_config_keeps_one_kv_head(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(STARCODER), encoding="utf-8")
    arch = load_config_json(tmp_path / "config.json")
    assert (arch.num_attention_heads, arch.num_kv_heads, arch.head_dim) == (48, 1, 128)
    assert arch.kv_bytes_per_token(2) == 40 * 2 * 1 * 128 * 2  # 20480, not 48 times that
    grouped = {k: v for k, v in STARCODER.items() if k != "multi_query"} | {"num_kv_heads": 8}  # Falcon's key
    assert from_hf_config(grouped).num_kv_heads == 8
    with pytest.raises(ValueError, match="'multi_query' must be true or false"):
        from_hf_config(STARCODER | {"multi_query": "yes"})


# google/gemma-3-27b-it's config.json as transformers wrote it: the text_config leaves out what Gemma3TextConfig
# defaults (vocab_size, max_position_embeddings, sliding_window_pattern 6); the figures are catalog-facts'.
GEMMA3_27B: dict[str, Any] = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                    "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}


def test_a_gemma3_config_json_without_the_keys_transformers_defaults_is_read_as_transformers_reads_it() -> None:
    arch = from_hf_config(GEMMA3_27B)
    catalogued = resolve_model("google/gemma-3-27b-it")
    assert arch.max_position_embeddings == catalogued.max_position_embeddings == 131072
    assert arch.layer_windows == catalogued.layer_windows  # every 6th layer global: 10 of 62
    assert sum(w is None for w in arch.layer_windows) == 10
    # 10 full layers x 8192 tokens + 52 sliding layers x 1024, at 2 x 16 x 128 x 2 bytes a layer
    assert arch.kv_bytes_for_context(8192, 2) == (10 * 8192 + 52 * 1024) * 8192
    assert arch.vocab_size == 262208  # Gemma3TextConfig's
    four_b = GEMMA3_27B | {"text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                                           "model_type": "gemma3_text", "num_hidden_layers": 34,
                                           "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                           "sliding_window": 1024}}
    small = from_hf_config(four_b)  # a text_config stating only its sizes, as gemma-3-4b-it's
    assert (small.num_attention_heads, small.num_kv_heads, small.head_dim) == (8, 4, 256)
