"""Weight formats and KV cache dtypes (inferplan/planner/catalog/precisions.py)."""

from __future__ import annotations

import pytest

from inferplan.planner.catalog.precisions import WEIGHT_PRECISIONS, kv_dtype_bytes, resolve_kv_dtype, weight_precision
from inferplan.planner.names import CatalogLookupError


@pytest.mark.parametrize(
    ("name", "bits"),
    [("bf16", 16), ("fp8", 8), ("int8-w8a8", 8), ("int4-awq", 4.15625), ("int4-gptq", 4.15625),
     ("int8-gptq", 8.1875), ("gguf-q8_0", 8.5), ("gguf-q4_k_m", 4.89), ("mxfp4", 4.25), ("mlc-q4f16_1", 4.5),
     ("nvfp4", 4.5), ("mxfp4-w4a4", 4.25)],
)
def test_bits_per_parameter_include_scales(name: str, bits: float) -> None:
    assert weight_precision(name).bits_per_param == pytest.approx(bits)


def test_every_format_of_the_scenario_spec_is_known() -> None:
    for name in ("fp16", "bf16", "fp8", "int8-w8a8", "int4-awq", "int4-gptq", "int8-gptq", "gguf-f16", "gguf-q8_0",
                 "gguf-q4_k_m", "gguf-q6_k", "gguf-q5_k_m", "mlc-q4f16_1", "mxfp4", "nvfp4"):
        assert name in WEIGHT_PRECISIONS
    assert weight_precision("INT4_AWQ").name == "int4-awq"


def test_unknown_precision_lists_close_names() -> None:
    with pytest.raises(CatalogLookupError, match="int4-awq"):
        weight_precision("int4-aqw")


def test_kv_dtypes() -> None:
    assert kv_dtype_bytes("fp8", "bf16") == 1.0
    assert kv_dtype_bytes("auto", "fp8") == 2.0
    with pytest.raises(CatalogLookupError):
        kv_dtype_bytes("int2", "bf16")


@pytest.mark.parametrize(
    ("engine", "weights", "checkpoint", "expected"),
    [
        ("tensorrt-llm", "fp8", "nvidia/Llama-3.1-8B-Instruct-FP8", "fp8"),  # ModelOpt declares FP8 KV
        ("tensorrt-llm", "fp8", None, "fp8"),                                  # TensorRT-LLM's own quantisation
        ("tensorrt-llm", "fp8", "Qwen/Qwen3-32B-FP8", "bf16"),                 # a vendor FP8 repo declares none
        ("tensorrt-llm", "bf16", None, "bf16"),
        ("vllm", "fp8", "nvidia/Llama-3.1-8B-Instruct-FP8", "bf16"),           # vLLM keeps 16 bits on auto
        ("sglang", "fp8", None, "bf16"),
        ("tensorrt-llm", "nvfp4", "modelopt", "fp8"),                          # kv_cache_quant_algo FP8 was read
        ("tensorrt-llm", "nvfp4", "nvidia/DeepSeek-R1-0528-FP4", "bf16"),      # its hf_quant_config.json was not read
        ("vllm", "nvfp4", "modelopt", "bf16"),
    ],
)
def test_auto_kv_cache_resolves_as_the_engine_does(engine: str, weights: str, checkpoint: str | None,
                                                   expected: str) -> None:
    assert resolve_kv_dtype("auto", weights, engine, checkpoint) == expected
    assert resolve_kv_dtype("fp8", "bf16", engine, checkpoint) == "fp8"  # a stated dtype is kept


def test_fp4_formats_quantise_every_linear_layer_in_four_bit_compute() -> None:
    nvfp4, quark, gpt_oss = weight_precision("NVFP4"), weight_precision("mxfp4-w4a4"), weight_precision("mxfp4")
    assert (nvfp4.quantizes, nvfp4.compute) == ("linear", "fp4")  # 4 + 8/16: an FP8 scale per 16 values
    assert (quark.quantizes, quark.compute) == ("linear", "fp4")  # 4 + 8/32: an E8M0 scale per 32 values
    assert (gpt_oss.quantizes, gpt_oss.compute) == ("experts", "fp16")  # the scenario format's mxfp4 stays gpt-oss's
    assert weight_precision("MXFP4_W4A4") is quark and weight_precision("mxfp4") is not quark
