"""Scenario rows to predictions: resolution, skip reasons, engine defaults and the startup metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplan.planner.architectures import resolve_model
from inferplan.planner.engines import engine_profile
from inferplan.planner.predict import engine_settings, predict_scenarios
from inferplan.planner.scenarios import Scenario, parse_scenario_line

EXAMPLE = Path(__file__).resolve().parents[1] / "inferplan" / "planner" / "data" / "example-scenarios.jsonl"


def example(of_metric: str, **changes: object) -> Scenario:
    """The bundled example row of metric `of_metric`, with `changes` applied."""
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        if data["metric"] == of_metric:
            data.update(changes)
            row = parse_scenario_line(json.dumps(data), 1)
            assert isinstance(row, Scenario), row
            return row
    raise AssertionError(f"no example row for {of_metric}")


def test_every_bundled_example_is_predicted_close_to_its_measurement() -> None:
    rows = [parse_scenario_line(line, i) for i, line in enumerate(EXAMPLE.read_text().splitlines(), 1)]
    predictions = predict_scenarios(rows)
    assert [p.id for p in predictions] == [r.id for r in rows]
    for p in predictions:
        assert p.skipped is None
        assert p.predicted == pytest.approx(p.measured, rel=0.5), p.id


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"gpu": None}, "GPU not stated"),
        ({"engine": None}, "engine outside the supported set"),
        ({"gpu": "NVIDIA-H1000"}, "GPU not in the catalog: unknown GPU 'NVIDIA-H1000'; closest"),
        ({"model": "acme/never-heard-of-it-7b"}, "model not in the catalog: unknown model"),
        ({"weights": "int3-magic"}, "weight format not supported"),
        ({"gpus": 2, "tensor_parallel": None}, "sharding not stated"),
    ],
)
def test_unpredictable_rows_say_why(changes: dict[str, object], reason: str) -> None:
    good = example("tpot_ms_p50")
    bad = example("tpot_ms_p50", id="bad-row", **changes)
    predictions = predict_scenarios([good, bad])
    assert predictions[0].predicted is not None
    assert predictions[1].predicted is None
    assert predictions[1].skipped is not None and predictions[1].skipped.startswith(reason)


def test_missing_output_tokens_only_skip_metrics_that_need_them() -> None:
    poisson = example("tpot_ms_p50", metric="ttft_ms_p99", unit="ms", output_tokens=None)
    assert predict_scenarios([poisson])[0].skipped == "output token count not stated"
    static = example("e2e_ms_mean", id="static-ttft", metric="ttft_ms_mean", unit="ms", output_tokens=None)
    assert predict_scenarios([static])[0].predicted is not None


def test_vllm_defaults_depend_on_version() -> None:
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    vllm = engine_profile("vllm")
    old = engine_settings(example("tpot_ms_p50", engine_version="0.4.1", max_num_batched_tokens=None), vllm, arch)
    new = engine_settings(example("tpot_ms_p50", engine_version="0.10.1", max_num_batched_tokens=None), vllm, arch)
    assert old.chunk_tokens == float("inf")  # V0: whole-prompt prefill steps
    assert old.profile_tokens == 8192        # max(max_model_len, 2048)
    assert new.chunk_tokens == 2048.0
    assert new.memory_fraction == 0.9 or new.memory_fraction == example("tpot_ms_p50").gpu_memory_utilization


def test_startup_metrics_agree_with_each_other() -> None:
    base = example("kv_cache_tokens")
    rows = [base] + [
        example("kv_cache_tokens", id=f"same-run-{m}", metric=m, unit=u)
        for m, u in (("kv_cache_gib", "GiB/GPU"), ("max_concurrency", "x (requests of max_model_len)"))
    ]
    tokens, gib, concurrency = (p.predicted for p in predict_scenarios(rows))
    arch = resolve_model(base.model)
    assert tokens * arch.kv_bytes_per_token(2.0) == pytest.approx(gib * 2**30, rel=0.001)
    assert concurrency == pytest.approx(tokens / base.max_model_len)


def test_predictions_are_deterministic() -> None:
    rows = [parse_scenario_line(line, i) for i, line in enumerate(EXAMPLE.read_text().splitlines(), 1)]
    assert predict_scenarios(rows) == predict_scenarios(rows)
