"""NVFP4 and AMD Quark's MXFP4 from the precision table to a plan: weight bytes, the GPU gate, the launch."""

from __future__ import annotations

import pytest

from inferplan.planner.catalog.engine_args import engine_launch
from inferplan.planner.catalog.engines import EngineSettings
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.memory import weight_bytes
from inferplan.planner.request import resolve_plan
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import parse_plan


@pytest.mark.parametrize(("name", "bits"), [("nvfp4", 4.5), ("mxfp4-w4a4", 4.25)])
def test_fp4_weights_leave_only_the_embeddings_in_16_bits(name: str, bits: float) -> None:
    model = resolve_model("meta-llama/Llama-3.3-70B-Instruct")
    embeddings = 2 * model.vocab_size * model.hidden_size  # untied: input embedding and LM head
    expected = (model.param_count() - embeddings) * bits / 8 + embeddings * 2
    assert weight_bytes(model, weight_precision(name)) == pytest.approx(expected)


def _r1_plan(engine: str) -> dict:
    return {
        "model": {"name": "deepseek-ai/DeepSeek-R1", "precisions": ["nvfp4"]},
        "engine": {"name": engine},
        "workload": {"requestsPerSecond": "2", "promptTokens": {"mean": 4000, "p95": 10000},
                     "outputTokens": {"mean": 1000, "p95": 3000}},
        "slo": {"ttft": {"maxMs": 3000, "percentile": "p95"}, "tpot": {"maxMs": 60, "percentile": "p95"}},
        "constraints": {"gpuTypes": ["NVIDIA-B200", "NVIDIA-H200"], "tensorParallelSizes": [8]},
        "verify": False,
    }


@pytest.mark.parametrize("engine", ["tensorrt-llm", "sglang"])
def test_deepseek_r1_in_nvfp4_is_planned_on_blackwell_only(engine: str) -> None:
    result = plan(resolve_plan(parse_plan(_r1_plan(engine))))
    chosen = result.recommendation
    assert chosen is not None and chosen.gpu_type == "B200" and chosen.precision == "nvfp4"
    assert "nvidia/DeepSeek-R1-FP4" in chosen.engine_args
    if engine == "sglang":
        assert chosen.engine_args[chosen.engine_args.index("--quantization") + 1] == "modelopt_fp4"
    refused = [r for r in result.infeasible if r.gate == "precision"]
    assert refused and all("H200" in r.reason and "blackwell" in r.reason for r in refused)


def test_an_old_release_without_the_format_is_refused() -> None:
    data = _r1_plan("sglang")
    data["engine"]["version"] = "0.4.6.post5"
    result = plan(resolve_plan(parse_plan(data)))
    assert result.recommendation is None
    assert any(r.gate == "precision" and "0.4.6.post5" in r.reason for r in result.infeasible)


def test_a_declared_fp4_repository_launches_with_its_format() -> None:
    settings = EngineSettings(memory_fraction=0.9, max_model_len=8192, max_num_seqs=64, chunk_tokens=2048,
                              profile_tokens=2048)
    nvfp4 = engine_launch("vllm", None, "org/model-fp4", "declared", "nvfp4", 1, 64, "auto", settings)
    assert "--quantization" not in nvfp4.args  # vLLM reads ModelOpt's hf_quant_config.json itself
    quark = engine_launch("vllm", None, "org/model-mxfp4", "quark-mxfp4", "mxfp4-w4a4", 1, 64, "auto", settings)
    assert "quark-mxfp4" in quark.notes[0]
    with pytest.raises(ValueError, match="mxfp4-w4a4"):
        engine_launch("vllm", None, "org/model", "native", "mxfp4-w4a4", 1, 64, "auto", settings)
