"""Engine profiles and their release lines (inferplan/planner/engines.py)."""

from __future__ import annotations

import pytest

from inferplan.planner.engines import ENGINES, engine_profile, factor_key
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
