"""Engine profiles and their release lines (inferplan/planner/catalog/engines.py)."""

from __future__ import annotations

from datetime import date

import pytest

from inferplan.planner.catalog.engines import ENGINES, base_line, engine_of_line, engine_profile, factor_key
from inferplan.planner.names import CatalogLookupError


def test_engine_profiles_say_how_they_batch() -> None:
    assert set(ENGINES) == {"vllm", "sglang", "tensorrt-llm", "tgi", "lmdeploy", "mlc-llm", "llama.cpp", "exllama"}
    assert engine_profile("vLLM").continuous_batching
    assert not engine_profile("llama.cpp").continuous_batching
    assert engine_profile("TensorRT-LLM").memory_mode == "free_fraction"
    with pytest.raises(CatalogLookupError, match="vllm"):
        engine_profile("vlm")


def test_factor_lines_separate_engine_generations() -> None:
    assert factor_key("vllm", "0.6.3") == "vllm-v0"
    assert factor_key("vllm", "0.11.0") == factor_key("vllm", None) == "vllm"
    assert factor_key("tensorrt-llm", "0.18.2") == "tensorrt-llm-v0"
    assert factor_key("tensorrt-llm", "1.2.0rc1") == "tensorrt-llm"
    assert factor_key("sglang", "0.4.6") == "sglang"


def test_an_amd_gpu_puts_an_engine_on_its_rocm_line() -> None:
    assert factor_key("vllm", None, "amd") == "vllm-rocm"
    assert factor_key("vllm", "0.6.3", "amd") == "vllm-v0-rocm"
    assert factor_key("sglang", "0.5.3", "nvidia") == "sglang"
    assert base_line("vllm-v0-rocm") == "vllm-v0"
    assert base_line("vllm") == "vllm"
    assert engine_of_line("vllm-v0-rocm") == engine_of_line("vllm") == "vllm"
    assert engine_of_line("tensorrt-llm-v0") == "tensorrt-llm"


def test_a_measurement_without_a_version_is_on_the_line_current_when_its_source_was_published() -> None:
    assert factor_key("vllm", None, published=date(2024, 11, 1)) == "vllm-v0"
    assert factor_key("vllm", None, published=date(2025, 6, 1)) == "vllm"
    assert factor_key("vllm", "0.11.0", published=date(2024, 11, 1)) == "vllm"  # a stated version wins
    assert factor_key("tensorrt-llm", None, "nvidia", date(2025, 6, 1)) == "tensorrt-llm-v0"
    assert factor_key("vllm", None, "amd", date(2024, 11, 1)) == "vllm-v0-rocm"
