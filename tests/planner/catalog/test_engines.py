"""Engine profiles and their release lines (inferplan/planner/catalog/engines.py)."""

from __future__ import annotations

import math
from datetime import date

import pytest

from inferplan.planner.catalog.checkpoints import FORMAT_LOADERS, _catalog, _loader_key
from inferplan.planner.catalog.engines import (
    ENGINES,
    LOADED_PRECISIONS,
    SERVED_PRECISIONS,
    base_line,
    cuda_graph_max_batch,
    engine_of_line,
    engine_profile,
    factor_key,
    parse_version,
    weight_format_problem,
)
from inferplan.planner.catalog.precisions import WEIGHT_PRECISIONS
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


@pytest.mark.parametrize(("text", "version"), [
    ("MLPerf Inference v5.1", None), ("MLPerf v4.1", None), ("mlperf-inference-v5.0", None),
    ("MLPerf Inference: Datacenter v4.1", None), ("inference_results_v5.0", None),
    ("InferenceMAX v1.2", None), ("InferenceMAX v1, SGLang 0.5.2", (0, 5, 2)), ("inferencemax-v1.0", None),
    ("MLPerf Inference v5.1, TensorRT-LLM 0.17.0", (0, 17, 0)), ("MLPerf Inference v5.1 (closed), vLLM 0.10.1",
                                                                  (0, 10, 1)),
])
def test_a_benchmark_round_is_not_the_engines_release(text: str, version: tuple[int, ...] | None) -> None:
    """`MLPerf Inference v5.1` was read as release 5.1: an `engine_version` naming the round a run was submitted to
    (as MLPerf results name their versions) put it on the engine's newest line whatever release it ran."""
    assert parse_version(text) == version


def test_a_run_of_an_mlperf_round_without_its_engines_release_is_on_the_line_of_its_date() -> None:
    # MLPerf Inference v4.1 (August 2024) ran TensorRT-LLM 0.x builds: the built-engine line, as its date says.
    assert factor_key("tensorrt-llm", "MLPerf Inference v4.1", "nvidia", date(2024, 8, 28)) == "tensorrt-llm-v0"
    assert factor_key("vllm", "MLPerf Inference v4.1", published=date(2024, 8, 28)) == "vllm-v0"


GIB = 2**30


def test_each_engine_release_captures_cuda_graphs_up_to_its_own_default_batch() -> None:
    """The largest batch a default server runs from a CUDA graph, as each release's source sets it: vLLM V1 512 (V0
    every batch up to max_num_seqs), SGLang 160 before 0.5.3 and by GPU memory and TP after, TGI 32, and no cap
    where the default is not known."""
    h100, h200, b200, a100_40, l4 = 80 * GIB, 141 * GIB, 180 * GIB, 40 * GIB, 22.5 * GIB
    assert cuda_graph_max_batch("vllm", "0.11.0", h100, 1) == 512
    assert cuda_graph_max_batch("vllm", None, h100, 1, step_tokens=256) == 256
    assert cuda_graph_max_batch("vllm", "0.6.3", h100, 8) == math.inf
    assert cuda_graph_max_batch("sglang", "0.3.0", h100, 1) == 160
    assert cuda_graph_max_batch("sglang", "0.4.3.post2", l4, 1) == 8
    assert cuda_graph_max_batch("sglang", "0.3.0", l4, 1) == 160
    assert cuda_graph_max_batch("sglang", "0.5.2", 32 * GIB, 1) == 8
    assert cuda_graph_max_batch("sglang", "0.5.5.post1", h100, 1) == 256
    assert cuda_graph_max_batch("sglang", "0.5.5.post1", h200, 4) == 512
    assert cuda_graph_max_batch("sglang", None, b200, 1) == 512
    assert cuda_graph_max_batch("sglang", "0.5.4", a100_40, 2) == 32
    assert cuda_graph_max_batch("sglang", "0.5.4", l4, 1) == 16
    assert cuda_graph_max_batch("sglang", "0.5.5", l4, 1) == 24
    assert cuda_graph_max_batch("tgi", None, h100, 1) == 32
    assert cuda_graph_max_batch("tensorrt-llm", "1.2.0rc1", h100, 1) == math.inf


def test_the_formats_an_engine_loads_cover_what_it_serves_and_the_catalogs_loaders() -> None:
    """A measurement is refused only in a format its engine cannot load (`weight_format_problem`): every format a
    plan tries with an engine and every catalogued checkpoint whose format the engine reads (`FORMAT_LOADERS`) is one
    it loads, and every format named is a planner precision."""
    assert set(LOADED_PRECISIONS) == set(ENGINES)
    for engine, served in SERVED_PRECISIONS.items():
        assert set(served) <= LOADED_PRECISIONS[engine], engine
        assert LOADED_PRECISIONS[engine] <= set(WEIGHT_PRECISIONS), engine
    for by_precision in _catalog().values():
        for entries in by_precision.values():
            for entry in entries:
                for engine in FORMAT_LOADERS.get(_loader_key(entry.checkpoint), ()):
                    assert weight_format_problem(engine, entry.checkpoint.precision) is None, (engine, entry)
    assert weight_format_problem("vllm", "gguf-q4_k_m") is None  # vLLM reads GGUF files; a plan does not try them
    assert "gguf-q4_k_m" not in SERVED_PRECISIONS["vllm"]
    assert weight_format_problem("vllm", "mlc-q4f16_1") == (
        "vllm does not load mlc-q4f16_1 weights (it loads " + ", ".join(sorted(LOADED_PRECISIONS["vllm"])) + ")")
