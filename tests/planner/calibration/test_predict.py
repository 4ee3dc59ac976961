"""Scenario rows to predictions: resolution, skip reasons, engine defaults and the startup metrics."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferplan.planner.calibration.predict import (
    checkpoint_named,
    engine_settings,
    predict_scenarios,
    replica_layout,
    row_checkpoint,
    slo_limits,
    stated_eos_cap,
    stated_precision,
)
from inferplan.planner.calibration.scenarios import METRIC_UNITS, Scenario, parse_scenario_line, read_scenarios
from inferplan.planner.catalog.checkpoints import resolve_served
from inferplan.planner.catalog.engines import EngineSettings, Scheduling, engine_profile, parse_version
from inferplan.planner.catalog.gpus import GpuSpec, resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model

EXAMPLE = Path(__file__).resolve().parents[3] / "inferplan" / "planner" / "data" / "example-scenarios.jsonl"


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


# Bundled examples in a gap docs/model.md#known-gaps names: held to 2x instead of 1.5x, so they cannot drift further.
KNOWN_GAPS = {
    # Ray across two nodes: the measured TP2 run is no faster than TP1; the model counts NVLink.
    "dennislee-qwen2-7b-instruct-a100-sxm4-80gbx2-vllm-bf16-1024-1024-burst50-gmu0.25-len16384-output_tps_total",
}


def test_every_bundled_example_is_predicted_close_to_its_measurement() -> None:
    rows = [parse_scenario_line(line, i) for i, line in enumerate(EXAMPLE.read_text().splitlines(), 1)]
    predictions = predict_scenarios(rows)
    assert [p.id for p in predictions] == [r.id for r in rows]
    assert KNOWN_GAPS <= {p.id for p in predictions}
    for p in predictions:
        assert p.skipped is None
        assert p.predicted is not None
        if p.id in KNOWN_GAPS:
            assert p.measured / 2 <= p.predicted <= 2 * p.measured, p.id
        else:
            assert p.predicted == pytest.approx(p.measured, rel=0.5), p.id


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"gpu": None}, "GPU not stated"),
        ({"engine": None}, "engine outside the supported set"),
        ({"gpu": "NVIDIA-H1000"}, "GPU not in the catalog: unknown GPU 'NVIDIA-H1000'; closest"),
        ({"model": "acme/never-heard-of-it-7b"}, "model not in the catalog: unknown model"),
        ({"weights": "int3-magic"}, "weight format not supported"),
        ({"gpus": 2, "tensor_parallel": None, "replicas": None}, "sharding not stated"),
        ({"gpus": 3, "tensor_parallel": None, "replicas": 2}, "sharding not stated"),
    ],
)
def test_unpredictable_rows_say_why(changes: dict[str, object], reason: str) -> None:
    good = example("tpot_ms_p50")
    bad = example("tpot_ms_p50", id="bad-row", **changes)
    predictions = predict_scenarios([good, bad])
    assert predictions[0].predicted is not None
    assert predictions[1].predicted is None
    assert predictions[1].skipped is not None and predictions[1].skipped.startswith(reason)


def test_a_line_naming_a_variant_of_a_catalogued_model_is_predicted_as_that_model() -> None:
    # The format maps quantised checkpoints to their base repository; files that name the checkpoint, a -Base or a
    # dated release are predicted with the architecture they extend (`weights` carries the format).
    base = example("tpot_ms_p50")
    assert base.model == "meta-llama/Meta-Llama-3-8B-Instruct"
    for name in ("meta-llama/Meta-Llama-3-8B-Instruct-GPTQ-Int8", "someorg/Meta-Llama-3-8B-Instruct-FP8-dynamic"):
        variant = example("tpot_ms_p50", id="variant-row", model=name)
        ours, theirs = predict_scenarios([base, variant])
        assert theirs.skipped is None and theirs.predicted == ours.predicted, name


def test_a_line_naming_nvidias_llama4_maverick_checkpoints_is_predicted_in_their_format() -> None:
    """NVIDIA's ModelOpt FP8 and NVFP4 Maverick repositories were unknown to the catalog: a line naming the FP4 one
    with `weights` fp4 was refused (nothing settled NVFP4 or MXFP4), and on an H200, which has no FP4 tensor cores,
    it was predicted. The FP4 repository settles fp4 as NVFP4 on a B200 and is refused on an H200."""
    def line(model: str, gpu: str, weights: str) -> Scenario:
        return example("output_tps_total", id=f"{gpu}-{weights}".lower(), model=model, gpu=gpu, gpus=8,
                       tensor_parallel=8, engine="tensorrt-llm", engine_version="1.0.0", weights=weights,
                       kv_cache="auto", gpu_memory_utilization=None, max_model_len=None, notes="")
    fp4 = "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP4"
    spelt, written, hopper = predict_scenarios([line(fp4, "B200", "fp4"), line(fp4, "B200", "nvfp4"),
                                                line(fp4, "NVIDIA-H200", "nvfp4")])
    assert spelt.skipped is None and written.skipped is None and spelt.predicted == written.predicted
    assert hopper.skipped is not None and "blackwell" in hopper.skipped
    fp8 = line("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", "NVIDIA-H200", "fp8")
    assert row_checkpoint(fp8) == "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8"
    assert predict_scenarios([fp8])[0].skipped is None


def test_a_line_naming_deepseek_v31_terminus_is_predicted_as_deepseek_v3() -> None:
    # The V3.1 update's card states V3's structure: its lines were refused as an unknown model.
    v3 = example("tpot_ms_p50", id="v3", model="deepseek-ai/DeepSeek-V3", gpu="NVIDIA-H200", gpus=8, tensor_parallel=8,
                 engine="sglang", engine_version="0.5.2", weights="fp8")
    terminus = example("tpot_ms_p50", **{**v3.model_dump(include={"gpu", "gpus", "tensor_parallel", "engine",
                                                                  "engine_version", "weights"}),
                                         "id": "terminus", "model": "deepseek-ai/DeepSeek-V3.1-Terminus"})
    ours, theirs = predict_scenarios([v3, terminus])
    assert theirs.skipped is None and theirs.predicted == ours.predicted


@pytest.mark.parametrize(("name", "published"), [
    ("google/gemma-3-12b-it", 12e9), ("microsoft/Phi-3-medium-4k-instruct", 14e9),
])
def test_mainstream_12b_and_14b_models_are_predicted_at_their_size(name: str, published: float) -> None:
    # Gemma 3 12B and Phi-3-medium are served on one L4 or A10G in FP8 or 4 bits, or on one A100 in 16 bits:
    # a file measuring them is predicted, its weights those of the model's published size in 16 bits.
    row = example("weights_gib", id="mainstream-row", model=name, weights="bf16", gpu="NVIDIA-A100-SXM4-80GB",
                  gpu_memory_utilization=0.9)
    (prediction,) = predict_scenarios([row])
    assert prediction.skipped is None
    assert prediction.predicted == pytest.approx(published * 2 / 2**30, rel=0.03)


def test_mxfp4_weights_of_a_model_without_experts_are_mxfp4_on_every_linear_layer() -> None:
    # The format's one MXFP4 value is gpt-oss's (experts only); a dense model in MXFP4 is AMD Quark's W4A4.
    bf16 = example("weights_gib", weights="bf16")
    mxfp4 = example("weights_gib", id="mxfp4-row", weights="mxfp4")
    sixteen, four = (p.predicted for p in predict_scenarios([bf16, mxfp4]))
    assert sixteen is not None and four is not None
    arch = resolve_model(bf16.model)
    linear = arch.param_count() - arch.embedding_param_count()  # embedding and LM head stay 16-bit
    assert four == pytest.approx(sixteen - linear * (2.0 - 4.25 / 8) / 2**30, rel=0.02)


def test_a_checkpoint_the_notes_name_is_predicted_with_what_it_quantises() -> None:
    # Meta's FP8 405B keeps its attention and its first and last layers 16-bit: dstack measured 56.77 GB of weights
    # a GPU at TP 8 on H100 (vLLM 0.6.3) loading it, where an all-linear FP8 repository holds 47.7 GiB.
    def weights(checkpoint: str) -> float:
        row = example("weights_gib", id=f"weights-{checkpoint.split('/')[0].lower()}",
                      model="meta-llama/Llama-3.1-405B", weights="fp8", gpu="NVIDIA-H100-80GB-HBM3", gpus=8,
                      tensor_parallel=8, notes=f"vllm serve; checkpoint {checkpoint} (FP8 W8A8)")
        (prediction,) = predict_scenarios([row])
        assert prediction.predicted is not None, prediction.skipped
        return prediction.predicted

    assert weights("meta-llama/Llama-3.1-405B-FP8") == pytest.approx(56.77, rel=0.01)
    assert weights("nvidia/Llama-3.1-405B-Instruct-FP8") == pytest.approx(47.74, rel=0.01)


def test_a_line_whose_model_is_a_catalogued_repository_is_predicted_as_that_repository_holds_it() -> None:
    # The format asks for the base repository in `model` and the checkpoint in the notes; a file of one's own may
    # name the repository it served instead, and is predicted the same way.
    def weights(model: str, notes: str, weights: str = "fp8", gpu: str = "NVIDIA-H100-80GB-HBM3") -> float:
        row = example("weights_gib", id=f"weights-{len(notes)}-{model.lower().replace('/', '-')}", model=model,
                      weights=weights, gpu=gpu, gpus=8, tensor_parallel=8, notes=notes)
        (prediction,) = predict_scenarios([row])
        assert prediction.predicted is not None, prediction.skipped
        return prediction.predicted

    in_notes = weights("meta-llama/Llama-3.1-405B", "vllm serve; checkpoint meta-llama/Llama-3.1-405B-Instruct-FP8")
    as_model = weights("meta-llama/Llama-3.1-405B-Instruct-FP8", "vllm serve")
    all_linear = weights("meta-llama/Llama-3.1-405B", "vllm serve")
    assert as_model == in_notes == pytest.approx(56.7, rel=0.01)  # its attention, first and last layers 16-bit
    assert all_linear < 0.9 * as_model
    # AMD's MXFP4 DeepSeek-R1 quantises every linear layer (Quark W4A4), where the format's `mxfp4` on a MoE is
    # gpt-oss's experts-only MXFP4; its repository name was not a model name at all.
    amd = weights("amd/DeepSeek-R1-0528-MXFP4-Preview", "vllm serve", "mxfp4", "AMD-Instinct-MI355X")
    experts_only = weights("deepseek-ai/DeepSeek-R1-0528", "vllm serve", "mxfp4", "AMD-Instinct-MI355X")
    assert amd < experts_only
    assert amd == weights("deepseek-ai/DeepSeek-R1-0528", "vllm serve --model amd/DeepSeek-R1-0528-MXFP4-Preview",
                          "mxfp4", "AMD-Instinct-MI355X")


def test_an_mlperf_server_run_is_predicted_within_the_limits_its_notes_state() -> None:
    # Poisson with rate null is MLPerf Server: the highest rate whose TTFT and TPOT p99 meet the round's limits, which
    # the format has no field for. Without both limits in the notes there is nothing to predict; with them, a
    # tighter limit can only lower the rate.
    def server(notes: str) -> tuple[float | None, str | None]:
        row = example("output_tps_total", id=f"mlperf-{len(notes)}", notes=notes,
                      load={"kind": "poisson", "rate": None, "num_prompts": None})
        (prediction,) = predict_scenarios([row])
        return prediction.predicted, prediction.skipped

    assert slo_limits("MLPerf Server: TTFT p99 <= 2 s, TPOT p99 <= 200 ms") == {"ttft": 2.0, "tpot": 0.2}
    assert slo_limits("MLPerf Server: TTFT p99 <= 2 s") == {}
    assert server("MLPerf Server: TTFT p99 <= 2 s") == (None, "highest SLO-compliant rate (MLPerf Server) without "
                                                              "its TTFT and TPOT p99 limits in the notes")
    loose, _ = server("MLPerf Server: TTFT p99 <= 2 s, TPOT p99 <= 200 ms")
    tight_tpot, _ = server("MLPerf Server: TTFT p99 <= 2 s, TPOT p99 <= 40 ms")
    tight_ttft, _ = server("MLPerf Server: TTFT p99 <= 500 ms, TPOT p99 <= 200 ms")
    assert loose is not None and tight_tpot is not None and tight_ttft is not None
    assert tight_tpot < loose and tight_ttft < loose


def test_notes_name_a_catalogued_repository_however_worded() -> None:
    assert checkpoint_named("trtllm-serve nvidia/Llama-3.1-8B-Instruct-FP8 --tp_size 1.") == \
        "nvidia/Llama-3.1-8B-Instruct-FP8"
    assert checkpoint_named("served acme/own-finetune-7b from a local path") is None  # not catalogued


def test_a_null_tensor_parallel_is_what_the_gpus_replicas_and_stages_leave() -> None:
    # gpus = tensor_parallel x pipeline_parallel x replicas (SCENARIOS.md): with the replicas stated, TP follows.
    stated = example("tpot_ms_p50", gpus=2, tensor_parallel=2, replicas=1)
    implied = example("tpot_ms_p50", id="implied-tp", gpus=2, tensor_parallel=None, replicas=1)
    four = example("tpot_ms_p50", id="two-replicas", gpus=4, tensor_parallel=2, replicas=2)
    four_implied = example("tpot_ms_p50", id="two-replicas-implied", gpus=4, tensor_parallel=None, replicas=2)
    ours, theirs, replicated, replicated_implied = predict_scenarios([stated, implied, four, four_implied])
    assert theirs.skipped is None and theirs.predicted == ours.predicted
    assert replicated_implied.skipped is None and replicated_implied.predicted == replicated.predicted
    # And the replicas, where they are not stated: two GPUs at TP 1 are two replicas sharing the burst (not one).
    one = example("output_tps_total", gpus=1, tensor_parallel=1, replicas=1)
    two = example("output_tps_total", id="two-stated", gpus=2, tensor_parallel=1, replicas=2)
    unstated = example("output_tps_total", id="two-unstated", gpus=2, tensor_parallel=1, replicas=None)
    single, double, implied_two = predict_scenarios([one, two, unstated])
    assert implied_two.skipped is None and implied_two.predicted == double.predicted > single.predicted


def test_missing_output_tokens_only_skip_metrics_that_need_them() -> None:
    poisson = example("tpot_ms_p50", metric="ttft_ms_p99", unit="ms", output_tokens=None, dataset=None)
    assert predict_scenarios([poisson])[0].skipped == "output token count not stated"
    preset = example("tpot_ms_p50", metric="ttft_ms_p99", unit="ms", output_tokens=None, dataset="sharegpt")
    assert predict_scenarios([preset])[0].predicted is not None  # the dataset's preset gives the mean
    static = example("e2e_ms_mean", id="static-ttft", metric="ttft_ms_mean", unit="ms", output_tokens=None)
    assert predict_scenarios([static])[0].predicted is not None


def test_vllm_defaults_depend_on_version_and_gpu() -> None:
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    vllm = engine_profile("vllm")
    a100, h100 = resolve_gpu("NVIDIA-A100-SXM4-80GB"), resolve_gpu("NVIDIA-H100-80GB-HBM3")

    def settings(version: str, gpu: GpuSpec) -> EngineSettings:
        return engine_settings(example("tpot_ms_p50", engine_version=version, max_num_batched_tokens=None,
                                       max_num_seqs=None), vllm, arch, gpu)

    old = settings("0.4.1", a100)
    assert old.chunk_tokens == float("inf")  # V0: whole-prompt prefill steps, prefill first
    assert old.profile_tokens == 8192        # max(max_model_len, 2048)
    assert not old.scheduling.mixed and not old.scheduling.chunked
    on_a100, on_h100 = settings("0.11.0", a100), settings("0.11.0", h100)
    assert (on_a100.chunk_tokens, on_a100.max_num_seqs) == (2048.0, 256)  # V1 server defaults on A100
    assert (on_h100.chunk_tokens, on_h100.max_num_seqs) == (8192.0, 1024)  # ... on 70 GiB and more, not A100
    # V1 admits a request on its first chunk (`Scheduler.schedule` in vllm/v1/core/sched/scheduler.py of 0.11.0).
    assert on_h100.scheduling == Scheduling(mixed=True, chunked=True, reserve_output=False, admit_first_chunk=True)
    # Within 0.8 the rule moved (`EngineArgs` of the 0.8.0-0.8.5 sdists): 1024 sequences on every GPU and the larger
    # budget on an H100 or H200 by name up to 0.8.3, both by that name in 0.8.4, by 70 GiB (A100s too) in 0.8.5.
    expected = {("0.8.3", a100): (2048.0, 1024), ("0.8.3", h100): (8192.0, 1024), ("0.8.4", a100): (2048.0, 256),
                ("0.8.4", h100): (8192.0, 1024), ("0.8.5", a100): (8192.0, 1024), ("0.9.0", a100): (2048.0, 256)}
    for (version, gpu), defaults in expected.items():
        got = settings(version, gpu)
        assert (got.chunk_tokens, got.max_num_seqs) == defaults, (version, gpu.key)


def test_an_offline_vllm_v1_run_has_the_llm_classs_step_budget() -> None:
    """vLLM V1's offline benchmarks run the `LLM` class, whose default step budget is 16384 tokens on a GPU of
    70 GiB or more that is not an A100 and 8192 elsewhere (the server's: 8192 and 2048); its sequences are the
    server's. A stated budget is the budget; V0 has no such default."""
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    vllm = engine_profile("vllm")
    a100, h100 = resolve_gpu("NVIDIA-A100-SXM4-80GB"), resolve_gpu("NVIDIA-H100-80GB-HBM3")
    offline = {"kind": "offline", "num_prompts": 1000}

    def settings(version: str, gpu: GpuSpec, load: dict[str, object], budget: int | None = None) -> EngineSettings:
        return engine_settings(example("tpot_ms_p50", engine_version=version, load=load, max_num_seqs=None,
                                       max_num_batched_tokens=budget), vllm, arch, gpu)

    served = {"kind": "poisson", "rate": 4.0, "num_prompts": 1000}
    for gpu, in_process, server in ((h100, 16384, 8192), (a100, 8192, 2048)):
        assert settings("0.11.0", gpu, offline).step_tokens == in_process
        assert settings("0.11.0", gpu, served).step_tokens == server
    assert settings("0.11.0", h100, offline).max_num_seqs == settings("0.11.0", h100, served).max_num_seqs == 1024
    assert settings("0.11.0", h100, offline, budget=4096).step_tokens == 4096
    assert settings("0.6.0", a100, offline).step_tokens == settings("0.6.0", a100, served).step_tokens


def test_engines_schedule_as_their_defaults_say() -> None:
    arch = resolve_model("Qwen/Qwen3-8B")
    h100 = resolve_gpu("NVIDIA-H100-80GB-HBM3")
    row = example("tpot_ms_p50", max_num_batched_tokens=None, max_num_seqs=None, gpu_memory_utilization=None)
    def sglang_on(version: str, gpu: GpuSpec) -> EngineSettings:
        return engine_settings(row.model_copy(update={"engine": "sglang", "engine_version": version}),
                               engine_profile("sglang"), arch, gpu)

    sglang = sglang_on("0.5.2", h100)
    assert not sglang.scheduling.mixed and sglang.step_tokens == 8192  # prefill first, chunks of 8192
    assert sglang.scheduling.estimate_output  # admitted on its estimate of the output to come
    gib = h100.usable_memory_bytes / 2**30
    assert sglang.memory_fraction == pytest.approx((gib - 10.0) / gib, abs=1e-3)  # reserved 9.5 + tp / 2 GiB
    # Before 0.5 the fraction goes by tensor-parallel size: from 0.4.6 on GPUs of up to 80 GiB only, before on all.
    h200 = resolve_gpu("NVIDIA-H200")

    def fraction_at(version: str, gpu: GpuSpec, tp: int) -> float:
        return engine_settings(row.model_copy(update={"engine": "sglang", "engine_version": version,
                                                      "tensor_parallel": tp, "gpus": tp}),
                               engine_profile("sglang"), arch, gpu, tp).memory_fraction

    assert fraction_at("0.4.0", h200, 8) == 0.81
    assert fraction_at("0.4.6.post5", h200, 8) == 0.88
    assert fraction_at("0.4.6.post5", h100, 8) == 0.81
    assert fraction_at("0.3.0", h100, 8) == 0.83
    trt = engine_settings(row.model_copy(update={"engine": "tensorrt-llm", "engine_version": "1.2.0rc1"}),
                          engine_profile("tensorrt-llm"), arch, h100)
    assert trt.scheduling.reserve_output and not trt.scheduling.chunked  # GUARANTEED_NO_EVICT, no chunking
    assert (trt.max_num_seqs, trt.step_tokens) == (2048, 8192)


def test_chunked_prefill_turned_on_or_off_in_the_notes_is_how_the_run_is_scheduled() -> None:
    """vLLM V0 chunks by default above a 32k context (a budget of 512, decode first); a run launched with
    `--enable-chunked-prefill=False` prefills whole prompts first within max(max_model_len, 2048) instead, and
    TensorRT-LLM's `--enable_chunked_prefill` splits prompts within its token budget."""
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    h100 = resolve_gpu("NVIDIA-H100-80GB-HBM3")
    row = example("tpot_ms_p50", engine_version="0.6.4", max_num_batched_tokens=None, max_num_seqs=None,
                  max_model_len=65536)

    def vllm_with(notes: str) -> EngineSettings:
        return engine_settings(row.model_copy(update={"notes": notes}), engine_profile("vllm"), arch, h100)

    default = vllm_with("vllm serve M")
    assert default.scheduling.chunked and default.step_tokens == 512
    assert not default.scheduling.admit_first_chunk  # V0 admits on the whole prompt, chunked or not
    off = vllm_with("vllm serve M --enable-chunked-prefill=False --num-scheduler-step 15")
    assert not off.scheduling.chunked and not off.scheduling.mixed
    assert off.step_tokens == 65536 and off.chunk_tokens == float("inf")
    assert vllm_with("CSV: num-scheduler-step 15, enable-chunked-prefill FALSE").step_tokens == 65536
    trt_row = row.model_copy(update={"engine": "tensorrt-llm", "engine_version": "1.2.0rc1"})

    def trt_with(notes: str) -> EngineSettings:
        return engine_settings(trt_row.model_copy(update={"notes": notes}), engine_profile("tensorrt-llm"), arch,
                               h100)

    assert not trt_with("trtllm-serve M").scheduling.chunked
    chunked = trt_with("trtllm-serve M --max_seq_len=40960 --enable_chunked_prefill")
    assert chunked.scheduling.chunked and chunked.scheduling.reserve_output and chunked.chunk_tokens == 8192
def test_vllm_v0s_multi_step_scheduling_in_the_notes_is_how_the_run_is_scheduled() -> None:
    arch = resolve_model("meta-llama/Meta-Llama-3-8B")
    a100 = resolve_gpu("NVIDIA-A100-SXM4-80GB")
    notes = "vLLM 0.6.0 with --num-scheduler-steps 10 --max_model_len 4096; SGLang 0.3.0 with --enable-torch-compile"
    row = example("tpot_ms_p50", engine_version="0.6.0", max_num_batched_tokens=None, max_num_seqs=None,
                  max_model_len=4096, notes=notes)
    assert engine_settings(row, engine_profile("vllm"), arch, a100).scheduling.steps_per_schedule == 10
    # The same notes on the SGLang row of the comparison: vLLM's flag is not SGLang's.
    sglang = row.model_copy(update={"engine": "sglang", "engine_version": "0.3.0"})
    assert engine_settings(sglang, engine_profile("sglang"), arch, a100).scheduling.steps_per_schedule == 1
    # V1 has no multi-step scheduling: the flag is not read there.
    v1 = row.model_copy(update={"engine_version": "0.11.0"})
    assert engine_settings(v1, engine_profile("vllm"), arch, a100).scheduling.steps_per_schedule == 1


def test_a_burst_whose_completions_end_at_eos_under_a_cap_lasts_as_long_as_its_longest() -> None:
    """dstack's sonnet bursts state a mean of 58 generated tokens, each completion ending at EOS or at the
    benchmark's 150: the run lasts until its longest completion ends, so its throughput is the mean's over a run
    about as long as the cap's. Sent as one batch without a server's client (`offline`), so that no front end's
    queue, the same for both runs, dilutes the ratio."""
    notes = ("vLLM benchmark_serving.py --dataset-name sonnet --num-prompts 64 (request rate inf); completions stop "
             "at EOS (no ignore_eos; benchmark default sonnet output length 150), so generated lengths vary")
    assert stated_eos_cap(notes) == 150
    assert stated_eos_cap("no ignore_eos, a few requests may stop at EOS") is None  # no cap stated: as stated
    assert stated_eos_cap("--random-output-len 800 (ignore_eos on by default)") is None

    def throughput(row_notes: str) -> float:
        row = example("output_tps_total", input_tokens=80, output_tokens=58, dataset=None,
                      load={"kind": "offline", "num_prompts": 64}, notes=row_notes)
        (prediction,) = predict_scenarios([row])
        assert prediction.predicted is not None
        return prediction.predicted

    fixed, eos = throughput("vllm serve M"), throughput(notes)
    assert 0.3 * fixed < eos < 0.6 * fixed  # 58 of 150 tokens a request, and the short ones leave the batch idle


def test_a_tensorrt_llm_ceiling_run_of_unstated_batch_runs_trtllm_benchs_tuned_batch() -> None:
    arch = resolve_model("Qwen/Qwen3-8B")
    h100 = resolve_gpu("NVIDIA-H100-80GB-HBM3")

    def seqs(engine: str, version: str, load: dict[str, object], max_num_seqs: int | None = None) -> int:
        row = example("tpot_ms_p50", engine=engine, engine_version=version, load=load, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=None, gpu_memory_utilization=None)
        return engine_settings(row, engine_profile(engine), arch, h100).max_num_seqs

    ceiling = {"kind": "offline", "num_prompts": None}  # trtllm-bench's maximum throughput: no length stated
    assert seqs("tensorrt-llm", "0.13.0", ceiling) == seqs("tensorrt-llm", "1.0.0", ceiling) == 4096
    assert seqs("tensorrt-llm", "0.13.0", ceiling, max_num_seqs=64) == 64  # a stated batch is the batch
    assert seqs("tensorrt-llm", "0.13.0", {"kind": "offline", "num_prompts": 1000}) == 256  # the built default
    assert seqs("tensorrt-llm", "1.0.0", {"kind": "burst", "value": 500}) == 2048
    assert seqs("vllm", "0.11.0", ceiling) == 1024  # only trtllm-bench tunes its engine to the run


def test_checkpoint_is_read_from_the_notes() -> None:
    assert checkpoint_named("... FP8 checkpoint Qwen/Qwen3-8B-FP8 (W8A8 FP8) mapped to ...") == "Qwen/Qwen3-8B-FP8"
    assert checkpoint_named("served from a NIM container") == "nim"
    assert checkpoint_named("no checkpoint named here") is None


def _online(kind: str, **changes: object) -> Scenario:
    load = {"burst": {"kind": "burst", "value": 200}, "concurrency": {"kind": "concurrency", "value": 16},
            "poisson": {"kind": "poisson", "rate": 1.0, "num_prompts": 400}}[kind]
    base = {"engine_version": "0.11.0", "load": load, "dataset": "sharegpt", "input_tokens": 220,
            "output_tokens": 200, "max_num_batched_tokens": None, "max_num_seqs": None, "max_model_len": None}
    return example("tpot_ms_p50", **(base | changes))


@pytest.mark.parametrize("kind", ["burst", "concurrency", "poisson"])
def test_online_loads_are_simulated_with_consistent_metrics(kind: str) -> None:
    metrics = {"ttft_ms_mean": "ms", "ttft_ms_p50": "ms", "ttft_ms_p99": "ms", "tpot_ms_mean": "ms",
               "tpot_ms_p50": "ms", "tpot_ms_p99": "ms", "itl_ms_mean": "ms", "output_tps_total": "output tokens/s",
               "requests_per_s": "requests/s"}
    rows = [_online(kind, id=f"run-{m}", metric=m, unit=u) for m, u in metrics.items()]
    got = {p.metric: p.predicted for p in predict_scenarios(rows)}
    assert all(v is not None and v > 0 for v in got.values()), got
    assert got["ttft_ms_p50"] <= got["ttft_ms_p99"] and got["tpot_ms_p50"] <= got["tpot_ms_p99"]
    # Throughput is requests times their mean output (the lengths were sampled at the stated means).
    assert got["output_tps_total"] == pytest.approx(got["requests_per_s"] * 200, rel=0.02)
    if kind == "poisson":  # below capacity, an open loop completes what it is sent (less the last ones' drain)
        assert 0.8 <= got["requests_per_s"] <= 1.0


def test_more_clients_raise_throughput_and_waiting() -> None:
    def at(clients: int) -> dict[str, float]:
        load = {"kind": "concurrency", "value": clients}
        rows = [_online("concurrency", id=f"c{clients}-{m}", metric=m, unit=u, load=load)
                for m, u in (("output_tps_total", "output tokens/s"), ("ttft_ms_mean", "ms"),
                             ("tpot_ms_mean", "ms"))]
        return {p.metric: p.predicted for p in predict_scenarios(rows)}

    few, many = at(4), at(64)
    assert many["output_tps_total"] > 4 * few["output_tps_total"]
    assert many["tpot_ms_mean"] > few["tpot_ms_mean"]  # bigger batches take longer steps


def test_a_row_naming_a_dataset_without_lengths_uses_the_preset() -> None:
    row = _online("burst", input_tokens=None, output_tokens=None, metric="output_tps_total", unit="output tokens/s")
    prediction = predict_scenarios([row])[0]
    assert prediction.skipped is None and prediction.predicted and prediction.predicted > 0


def test_a_dataset_of_empty_prompts_is_predicted_not_a_crash() -> None:
    # A ShareGPT row stating a mean prompt of 0 tokens had scaled its lengths by 0 / 0 and stopped the whole file's
    # prediction with a ValueError (found by a fuzz of the format's fields); it is predicted as empty prompts are.
    row = _online("burst", input_tokens=0, metric="output_tps_total", unit="output tokens/s")
    prediction = predict_scenarios([row, _online("burst", id="next", metric="tpot_ms_p50")])
    assert [p.skipped for p in prediction] == [None, None] and all(p.predicted > 0 for p in prediction)


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
    """The same predictions in fresh processes whose string hashing differs (set and dict-of-set orders)."""
    rows = [parse_scenario_line(line, i) for i, line in enumerate(EXAMPLE.read_text().splitlines(), 1)]
    here = [p.predicted for p in predict_scenarios(rows)]
    printed = [subprocess.run([sys.executable, "-m", "inferplan.cli", "predict", "--scenarios", str(EXAMPLE),
                               "-o", "json"], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert printed[0] == printed[1]
    shown = [row["predicted"] for row in json.loads(printed[0])]
    assert len(shown) == len(here)
    for a, b in zip(shown, here, strict=True):
        assert (a is None) == (b is None) and (a is None or a == pytest.approx(b, rel=1e-3))


def test_a_sources_harness_time_is_on_the_ttft_of_its_online_runs_only() -> None:
    """`FactorSet.harness_ms` is what a source's benchmark client adds to every TTFT it measures of an engine line:
    a run of one request at a time through llama.cpp's server (a burst of one) pays it once on its TTFT; the same
    measurement taken offline (llama-bench: no client) does not. A source the factors were not fitted on pays the
    median of that engine line's fitted sources, at most the median of all of them."""
    from dataclasses import replace

    from inferplan.planner.model.factors import harness_key, load_factors

    fields = {"input_tokens": 512, "output_tokens": 128, "metric": "ttft_ms_mean", "unit": "ms",
              "includes_prefill": None}
    base = example("decode_tps_single", **fields)
    online = example("decode_tps_single", **fields, load={"kind": "burst", "value": 1}, id="online")
    assert online.engine == "llama.cpp" and online.source_name
    plain = replace(load_factors(), harness_ms={})
    own = replace(plain, harness_ms={harness_key(online.source_name, "llama.cpp"): 50.0})
    others = replace(plain, harness_ms={harness_key("a", "llama.cpp"): 20.0, harness_key("b", "llama.cpp"): 60.0,
                                        harness_key("c", "llama.cpp"): 90.0, harness_key("a", "vllm"): 400.0})
    heavy = replace(plain, harness_ms={harness_key("a", "llama.cpp"): 90.0, harness_key("b", "llama.cpp"): 120.0,
                                       harness_key("a", "vllm"): 10.0, harness_key("b", "vllm"): 20.0,
                                       harness_key("c", "vllm"): 30.0})
    before, after, typical, capped = (predict_scenarios([online, base], f) for f in (plain, own, others, heavy))
    assert after[0].predicted == pytest.approx(before[0].predicted + 50.0)
    assert typical[0].predicted == pytest.approx(before[0].predicted + 60.0)  # the line's median, under all's 75
    assert capped[0].predicted == pytest.approx(before[0].predicted + 30.0)  # all's median, under the line's 105
    assert before[1].predicted == after[1].predicted == typical[1].predicted == capped[1].predicted


def test_a_run_at_the_whole_memory_is_predicted_like_any_other() -> None:
    """A measured run started, so the CUDA-graph headroom a plan keeps free is no reason to refuse it: a run at
    gpu_memory_utilization 1.0 gets a prediction, no smaller than the same run's at 0.9 (its pool is larger)."""
    at = {g: predict_scenarios([_online("burst", id=f"gmu-{g}", gpu_memory_utilization=g, metric="output_tps_total",
                                        unit="output tokens/s")])[0] for g in (0.9, 1.0)}
    assert at[1.0].skipped is None and at[1.0].predicted is not None
    assert at[1.0].predicted >= at[0.9].predicted * 0.99


def test_a_run_that_served_long_requests_had_room_for_one_of_them() -> None:
    """A pool the model sizes below one request of the row's lengths is short, since the engine served them: the
    run is simulated with room for one, each request generating its whole output, not skipped as one-token runs."""
    # Llama-3-8B on a 24 GB RTX 3090 at 72% of its memory: a pool of about 5,500 tokens, by the model.
    lengths = {"dataset": None, "input_tokens": 7000, "output_tokens": 400, "load": {"kind": "burst", "value": 4},
               "gpu_memory_utilization": 0.72}
    metrics = (("tpot_ms_p50", "ms"), ("output_tps_total", "output tokens/s"), ("requests_per_s", "requests/s"),
               ("ttft_ms_mean", "ms"))
    rows = [_online("burst", id=f"long-{m}", metric=m, unit=u, **lengths) for m, u in metrics]
    got = {p.metric: p for p in predict_scenarios(rows)}
    assert all(p.skipped is None and p.predicted for p in got.values()), got
    assert got["output_tps_total"].predicted == pytest.approx(got["requests_per_s"].predicted * 400, rel=0.02)
    # One request at a time: the last waits for the three before it, so the mean TTFT is well above one prefill.
    single = predict_scenarios([_online("burst", id="one", metric="ttft_ms_mean", unit="ms",
                                        **(lengths | {"load": {"kind": "burst", "value": 1}}))])[0]
    assert got["ttft_ms_mean"].predicted > 1.5 * single.predicted


def test_a_run_whose_requests_exceed_its_context_says_so() -> None:
    # An engine rejects a request longer than the context it serves: such a line is not predicted, and says why
    # (it had read "no simulated request generated more than one token").
    rows = [_online("burst", id=f"too-long-{m}", metric=m, unit=u, dataset=None, input_tokens=32000,
                    output_tokens=100, max_model_len=8192) for m, u in (("tpot_ms_p50", "ms"), ("ttft_ms_p50", "ms"))]
    for p in predict_scenarios(rows):
        assert p.predicted is None
        assert p.skipped == ("the row's requests (32000 prompt + 100 output tokens) exceed its max_model_len 8192, "
                             "which the engine rejects")
    fits = predict_scenarios([_online("burst", id="fits", dataset=None, input_tokens=8000, output_tokens=100,
                                      max_model_len=8192)])[0]
    assert fits.predicted is not None
    # Without a stated max_model_len, the model's own context (Llama-3-8B: 8192 tokens).
    unstated = predict_scenarios([_online("burst", id="unstated", dataset=None, input_tokens=32000,
                                          output_tokens=100)])[0]
    assert unstated.skipped == ("the row's requests (32000 prompt + 100 output tokens) exceed the model's context "
                                "of 8192 tokens, which the engine rejects; state the max_model_len the run served "
                                "(rope scaling extends it) to get the line predicted")


def test_a_highest_slo_compliant_rate_is_the_rate_the_planners_queueing_model_holds_within_the_stated_limits() -> None:
    notes = "MLPerf Server style: the highest rate that met TTFT p99 <= 20 s, TPOT p99 <= 2000 ms."
    served = _online("poisson", id="slo", load={"kind": "poisson", "rate": None, "num_prompts": None},
                     metric="output_tps_total", unit="output tokens/s", notes=notes)
    tight = _online("poisson", id="slo-tight", load={"kind": "poisson", "rate": None, "num_prompts": None},
                    metric="output_tps_total", unit="output tokens/s",
                    notes="the highest rate that met TTFT p99 <= 2 s, TPOT p99 <= 200 ms (MLPerf's rule)")
    unstated = _online("poisson", id="slo-unstated", load={"kind": "poisson", "rate": None, "num_prompts": None},
                       metric="output_tps_total", unit="output tokens/s", notes="highest SLO-compliant rate")
    loose, strict, none = predict_scenarios([served, tight, unstated])
    assert loose.predicted is not None and strict.predicted is not None
    assert 0 < strict.predicted < loose.predicted  # tighter limits hold at a lower rate
    assert none.predicted is None and "limits" in (none.skipped or "")


def test_an_offline_run_of_unstated_length_is_the_engines_ceiling() -> None:
    """A maximum-throughput run whose length is not stated is scored at the steady state of a full queue, which no
    finite burst of the same requests exceeds (its drain at the end runs at a smaller batch)."""
    ceiling = _online("burst", id="ceiling", load={"kind": "offline", "num_prompts": None},
                      metric="output_tps_total", unit="output tokens/s")
    finite = _online("burst", id="finite", load={"kind": "offline", "num_prompts": 300},
                     metric="output_tps_total", unit="output tokens/s")
    steady, short = predict_scenarios([ceiling, finite])
    assert steady.predicted is not None and short.predicted is not None
    assert steady.predicted > short.predicted


def test_the_layout_a_runs_notes_state_is_read() -> None:
    """Data-parallel attention and expert parallelism are read from the engines' own flags in the notes; expert
    parallelism only for a mixture of experts."""
    deepseek, llama = resolve_model("deepseek-ai/DeepSeek-R1"), resolve_model("meta-llama/Llama-3.1-70B-Instruct")
    assert replica_layout("trtllm-bench --tp 8 --ep 8 ... `enable_attention_dp: true`", deepseek) == (True, True)
    assert replica_layout("python3 -m sglang.launch_server --tp 8 --enable-dp-attention", deepseek) == (True, False)
    assert replica_layout("vllm serve --tensor-parallel-size 8 --enable-expert-parallel", deepseek) == (False, True)
    assert replica_layout("--ep 1 enable_attention_dp: false", deepseek) == (False, False)
    assert replica_layout("--enable-expert-parallel", llama) == (False, False)


def test_a_run_with_data_parallel_attention_is_predicted_with_it() -> None:
    """NVIDIA's DeepSeek-R1 max-throughput run on 8 x H200 (TensorRT-LLM, attention DP, EP 8, max_batch_size 128 per
    rank, 1024 requests in flight): with the layout its notes state, each rank runs its own batch of 128, so the
    instance serves several times the output of the same run read as one batch of 128, within 30% of the measured
    11,489 tokens/s (1.27x: each rank's per-sequence CPU time over its own 128 sequences, at the time TensorRT-LLM's
    runs without attention DP fitted; held out, NVIDIA's rows out of the fit, 1.20x)."""
    data = {"id": "adp", "source": "https://github.com/NVIDIA/TensorRT-LLM/blob/x/blog.md", "detail": "d",
            "model": "deepseek-ai/DeepSeek-R1", "gpu": "NVIDIA-H200", "gpu_variant_assumed": True, "gpus": 8,
            "tensor_parallel": 8, "pipeline_parallel": 1, "replicas": 1, "engine": "tensorrt-llm",
            "engine_version": None, "weights": "fp8", "kv_cache": "auto", "input_tokens": 1024,
            "output_tokens": 2048, "dataset": None, "load": {"kind": "concurrency", "value": 1024},
            "gpu_memory_utilization": None, "max_model_len": None, "max_num_seqs": 128,
            "max_num_batched_tokens": 1151, "prefix_caching": None, "metric": "output_tps_total",
            "value": 11489.2671, "unit": "output tokens/s", "includes_prefill": None,
            "notes": "trtllm-bench throughput --tp 8 --ep 8 --max_batch_size 128 --max_num_tokens 1151 "
                     "--concurrency 1024 with `enable_attention_dp: true`", "suspect": False}
    with_layout = parse_scenario_line(json.dumps(data), 1)
    without = parse_scenario_line(json.dumps({**data, "notes": "trtllm-bench throughput --tp 8"}), 1)
    assert isinstance(with_layout, Scenario) and isinstance(without, Scenario)
    laid_out, plain = (predict_scenarios([row])[0].predicted for row in (with_layout, without))  # one run each
    assert laid_out is not None and plain is not None
    assert laid_out > 2.0 * plain
    assert abs(laid_out / 11489.2671 - 1.0) < 0.3


def test_a_run_that_drafts_with_the_mtp_module_is_predicted_with_it() -> None:
    """A DeepSeek-R1 run on 8 x B200 whose options draft three tokens a step with the MTP module (TensorRT-LLM's
    spelling) decodes a token in under half the time of the same run without drafts; a stated acceptance length
    replaces the assumed one, and a model without an MTP module ignores the spelling."""
    data = {"id": "mtp", "source": "https://github.com/NVIDIA/TensorRT-LLM/blob/x/blog.md", "detail": "d",
            "model": "deepseek-ai/DeepSeek-R1", "gpu": "NVIDIA-B200", "gpu_variant_assumed": True, "gpus": 8,
            "tensor_parallel": 8, "pipeline_parallel": 1, "replicas": 1, "engine": "tensorrt-llm",
            "engine_version": "1.0.0", "weights": "nvfp4", "kv_cache": "auto", "input_tokens": 1024,
            "output_tokens": 1024, "dataset": None, "load": {"kind": "concurrency", "value": 1},
            "gpu_memory_utilization": None, "max_model_len": None, "max_num_seqs": 64,
            "max_num_batched_tokens": None, "prefix_caching": None, "metric": "tpot_ms_mean", "value": 4.0,
            "unit": "ms", "includes_prefill": None, "suspect": False,
            "notes": "trtllm-serve with speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 3}"}
    rows = [parse_scenario_line(json.dumps({**data, "id": key, "notes": notes}), 1) for key, notes in (
        ("drafting", data["notes"]), ("plain", "trtllm-serve"),
        ("stated", data["notes"] + "; mean acceptance length 2.0"))]
    assert all(isinstance(row, Scenario) for row in rows)
    drafting, plain, stated = (predict_scenarios([row])[0].predicted for row in rows)
    assert drafting is not None and plain is not None and stated is not None
    assert drafting < 0.5 * plain
    assert drafting < stated < plain  # 2.0 tokens a step instead of the assumed 3.19
    llama = parse_scenario_line(json.dumps({**data, "model": "meta-llama/Llama-3.1-70B-Instruct"}), 1)
    llama_plain = parse_scenario_line(json.dumps({**data, "model": "meta-llama/Llama-3.1-70B-Instruct",
                                                  "notes": "trtllm-serve"}), 1)
    assert predict_scenarios([llama])[0].predicted == predict_scenarios([llama_plain])[0].predicted


def test_a_lines_prediction_does_not_depend_on_the_lines_before_it() -> None:
    # Two runs alike but for what their notes state (here an EOS cap) shared one simulation: the first line's.
    capped = example("output_tps_total", id="capped", input_tokens=1000, output_tokens=500,
                     notes="completions stop at EOS (no ignore_eos; output length 2000).")
    fixed = example("output_tps_total", id="fixed", input_tokens=1000, output_tokens=500,
                    notes="fixed lengths (ignore_eos).")
    alone = [predict_scenarios([row])[0].predicted for row in (capped, fixed)]
    assert alone[0] != alone[1]
    assert [p.predicted for p in predict_scenarios([capped, fixed])] == alone
    assert [p.predicted for p in predict_scenarios([fixed, capped])] == alone[::-1]


def test_a_load_smaller_than_the_replicas_keeps_only_that_many_busy() -> None:
    one = example("output_tps_total", id="one", load={"kind": "concurrency", "value": 1})
    eight = example("output_tps_total", id="eight", load={"kind": "concurrency", "value": 1}, gpus=16, replicas=8)
    three = example("output_tps_total", id="three", load={"kind": "concurrency", "value": 3}, gpus=16, replicas=8)
    single, on_eight, three_on_eight = (p.predicted for p in predict_scenarios([one, eight, three]))
    assert on_eight == pytest.approx(single)  # one client keeps one replica busy, not eight
    assert three_on_eight == pytest.approx(3 * single, rel=0.02)
    few = example("tpot_ms_p50", id="few", gpus=8, tensor_parallel=1, replicas=8,
                  load={"kind": "poisson", "rate": 0.5, "num_prompts": 4})
    (skipped,) = predict_scenarios([few])
    assert skipped.predicted is None and "4 Poisson requests over 8 replicas" in (skipped.skipped or "")


def test_a_startup_line_of_a_timing_metric_is_skipped_not_scored_against_its_concurrency() -> None:
    row = example("kv_cache_tokens", id="st", metric="ttft_ms_mean", unit="ms")
    (p,) = predict_scenarios([row])
    assert p.predicted is None and "startup load" in (p.skipped or "")


def test_a_single_stream_beyond_its_stated_context_is_skipped_and_beyond_the_models_own_is_not() -> None:
    # The stated max_model_len binds every load; the model's own context only a simulated run (a measured single
    # stream that long had its context extended, as Qwen2.5's 128k-token speed runs did).
    base = {"metric": "e2e_ms_mean", "unit": "ms", "includes_prefill": None, "load": {"kind": "single"},
            "input_tokens": 4096, "output_tokens": 128, "engine": "vllm", "engine_version": "0.10.1.1",
            "weights": "bf16", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "NVIDIA-H100-80GB-HBM3"}
    stated = example("decode_tps_single", **base | {"id": "stated", "max_model_len": 2048})
    beyond = example("decode_tps_single", **base | {"id": "beyond", "max_model_len": None, "input_tokens": 200_000})
    p_stated, p_beyond = predict_scenarios([stated, beyond])
    assert p_stated.predicted is None and "exceed its max_model_len 2048" in (p_stated.skipped or "")
    assert p_beyond.predicted is not None


def test_gpus_that_break_the_formats_identity_are_a_skip_reason() -> None:
    row = example("output_tps_total", id="odd", gpus=8, tensor_parallel=2, replicas=1)
    (p,) = predict_scenarios([row])
    assert p.predicted is None and "gpus 8 is not tensor_parallel x pipeline_parallel x replicas" in (p.skipped or "")


def test_the_tpot_of_one_token_outputs_is_skipped_for_that_reason() -> None:
    row = example("output_tps_total", id="one", metric="tpot_ms_mean", unit="ms", output_tokens=1)
    (p,) = predict_scenarios([row])
    assert p.predicted is None and p.skipped == "one-token outputs: no token follows the first, so there is no TPOT"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"input_tokens": 0, "output_tokens": 1, "max_model_len": 1, "load": {"kind": "concurrency", "value": 16}},
         "an empty prompt (input_tokens 0) under a served load"),
        ({"input_tokens": 0, "load": {"kind": "burst", "value": 8}}, "an empty prompt (input_tokens 0)"),
        ({"input_tokens": 1, "output_tokens": 0, "max_model_len": 1}, "max_model_len 1 leaves no room"),
    ],
)
def test_a_served_row_no_request_fits_is_skipped_and_the_others_predicted(changes: dict[str, object],
                                                                          reason: str) -> None:
    """An empty prompt or a one-token context under a served load stopped the whole run with a ValueError from the
    simulator; it is a skip reason of its own row."""
    good = example("ttft_ms_p99")
    bad = example("ttft_ms_p99", id="bad-row", **changes)
    predictions = predict_scenarios([bad, good])
    assert predictions[0].predicted is None
    assert predictions[0].skipped is not None and predictions[0].skipped.startswith(reason)
    assert predictions[1].predicted is not None


@pytest.mark.parametrize(("gpus", "tp", "pp"), [(1, 2, 1), (4, 8, 1), (6, 4, 1), (2, 1, 4)])
def test_more_ranks_than_gpus_is_skipped_when_replicas_is_null(gpus: int, tp: int, pp: int) -> None:
    """`gpus 1, tensor_parallel 2, replicas null` was predicted as a 2-GPU deployment: gpus = tp x pp x replicas was
    checked only where replicas is stated."""
    row = example("tpot_ms_p50", gpus=gpus, tensor_parallel=tp, pipeline_parallel=pp, replicas=None)
    [p] = predict_scenarios([row])
    assert p.predicted is None
    assert p.skipped == (f"gpus {gpus} is not a multiple of tensor_parallel x pipeline_parallel ({tp} x {pp}): "
                         "no whole number of instances")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"model": "deepseek-ai/DeepSeek-R1", "weights": "fp8", "load": {"kind": "single"}},
         "the fp8 weights take 626.7 GiB per GPU at tensor_parallel 1 x pipeline_parallel 1, more than the 79.1 GiB"),
        ({"model": "meta-llama/Llama-3.1-70B-Instruct", "gpu": "NVIDIA-L4", "weights": "bf16"},
         "the bf16 weights take 131.4 GiB per GPU"),
        ({"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "NVIDIA-L4",
          "load": {"kind": "static_batch", "value": 4096}, "input_tokens": 1024, "output_tokens": 1024},
         "4096 request(s) of 1024 + 1024 tokens need 1024.0 GiB of KV"),
        ({"model": "meta-llama/Llama-3.1-8B-Instruct", "load": {"kind": "single"}, "input_tokens": 8_000_000},
         "1 request(s) of 8000000 + 128 tokens need 976.6 GiB of KV cache per GPU"),
    ],
)
def test_a_computed_load_that_cannot_fit_its_gpus_is_skipped(changes: dict[str, object], reason: str) -> None:
    """Single streams and static batches were computed with no memory check: DeepSeek-R1 FP8 on one H100 was
    predicted at 41 tokens/s, where the same deployment under a served load has no KV cache."""
    [p] = predict_scenarios([example("e2e_ms_mean", engine="vllm", **changes)])
    assert p.predicted is None
    assert p.skipped is not None and p.skipped.startswith(reason), p.skipped


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"engine": "tensorrt-llm", "gpu": "AMD-Instinct-MI300X"}, "tensorrt-llm runs on NVIDIA GPUs only"),
        ({"model": "meta-llama/Llama-3.1-70B-Instruct", "gpus": 3, "tensor_parallel": 3},
         "vllm refuses tensor parallel size 3 for meta-llama/Llama-3.1-70B: its 64 attention heads"),
        ({"model": "meta-llama/Llama-3.3-70B-Instruct", "weights": "nvfp4", "gpu": "NVIDIA-H100-80GB-HBM3",
          "notes": "vllm serve nvidia/Llama-3.3-70B-Instruct-FP4"},
         "vllm runs nvfp4 (modelopt-nvfp4) only on blackwell GPUs, not hopper"),
        ({"model": "meta-llama/Llama-3.1-405B-Instruct", "weights": "mxfp4", "gpu": "NVIDIA-H200", "gpus": 8,
          "tensor_parallel": 8, "notes": "checkpoint amd/Llama-3.1-405B-Instruct-MXFP4-Preview"},
         "vllm runs mxfp4-w4a4 (quark-mxfp4) only on cdna4 GPUs, not hopper"),
        # A weight format the engine does not load at all: MLC's own build on vLLM, GGUF on TensorRT-LLM.
        ({"weights": "mlc-q4f16_1"}, "vllm does not load mlc-q4f16_1 weights"),
        ({"engine": "tensorrt-llm", "weights": "gguf-q4_k_m"}, "tensorrt-llm does not load gguf-q4_k_m weights"),
        ({"engine": "llama.cpp", "weights": "bf16"}, "llama.cpp does not load bf16 weights"),
    ],
)
def test_a_line_the_engine_could_not_have_run_is_skipped(changes: dict[str, object], reason: str) -> None:
    """predict skipped the catalog's feasibility rules that a plan applies (engine vendor, TP against the heads, an
    FP4 checkpoint's GPUs): TensorRT-LLM on an MI300X and Llama-70B at TP 3 were predicted."""
    row = example("e2e_ms_mean", **{"engine": "vllm", "weights": "bf16", "replicas": 1, **changes})
    [p] = predict_scenarios([row])
    assert p.predicted is None
    assert p.skipped is not None and p.skipped.startswith(f"the engine could not have run this line: {reason}"), \
        p.skipped


@pytest.mark.parametrize(("engine", "weights"), [("vllm", "gguf-q4_k_m"), ("sglang", "gguf-q8_0"),
                                                 ("tensorrt-llm", "int4-gptq"), ("lmdeploy", "int4-gptq"),
                                                 ("llama.cpp", "gguf-q2_k"), ("mlc-llm", "bf16")])
def test_a_weight_format_the_engine_loads_is_predicted(engine: str, weights: str) -> None:
    """The engines load more formats than a plan tries: vLLM and SGLang read GGUF files, TensorRT-LLM and LMDeploy
    GPTQ checkpoints, llama.cpp every GGUF type; a measurement in one of them is predicted."""
    row = example("e2e_ms_mean", engine=engine, weights=weights, replicas=1)
    [p] = predict_scenarios([row])
    assert p.skipped is None and p.predicted is not None, p.skipped


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "NVIDIA-L4", "gpu_memory_utilization": 0.5},
         "no KV cache: the bf16 weights take 15.0 GiB per GPU at tensor_parallel 1 x pipeline_parallel 1, and "
         "activations and runtime 1.4 GiB, of the 11.1 GiB the engine may use on the L4 (0.5 x 22.2 GiB): more GPUs "
         "per instance (tensor_parallel), a smaller precision or a higher gpu_memory_utilization"),
        ({"model": "meta-llama/Llama-3.1-70B-Instruct", "gpu": "NVIDIA-H100-80GB-HBM3"},
         "the bf16 weights take 131.4 GiB per GPU at tensor_parallel 1 x pipeline_parallel 1, more than the 79.1 GiB "
         "of the H100-SXM5-80GB: more GPUs per instance or a smaller precision"),
    ],
)
def test_no_kv_cache_says_how_much_the_weights_take_and_what_to_change(changes: dict[str, object],
                                                                       reason: str) -> None:
    """The reason was "the weights and activations leave no KV cache at the row's settings", without numbers or a
    way out."""
    [p] = predict_scenarios([example("ttft_ms_p99", max_model_len=None, **changes)])
    assert p.predicted is None
    assert p.skipped == reason


@pytest.mark.parametrize(
    "notes",
    ["MLPerf Inference v5.1 Server; latency constraints: TTFT p99 6s, TPOT p99 175ms",
     "TTFT p99 <= 6000 ms, TPOT p99 <= 175 ms", "TTFT p99: 6 s, TPOT p99 < 175 ms",
     "ttft p99 of 6 s and tpot p99 under 0.175 s"],
)
def test_slo_limits_read_their_common_spellings(notes: str) -> None:
    """Only `TTFT p99 <= 6 s` was read: an MLPerf Server line whose notes said "TTFT p99 6s, TPOT p99 175ms" was
    refused for lacking its limits."""
    assert slo_limits(notes) == pytest.approx({"ttft": 6.0, "tpot": 0.175})


@pytest.mark.parametrize("metric", ["output_tps_total", "tpot_ms_p50", "decode_tps_single"])
def test_output_metrics_of_a_run_without_output_are_refused(metric: str) -> None:
    """`output_tokens 0` got a TPOT skip "...at the row's KV capacity" and an output_tps_total of 22.4."""
    row = example("ttft_ms_p99", metric=metric, unit=METRIC_UNITS[metric], output_tokens=0)
    [p] = predict_scenarios([row])
    assert p.predicted is None
    assert p.skipped == (f"output_tokens 0: the run generated no tokens, so it has no {metric} (engines ask for at "
                         "least one output token: vLLM's max_tokens >= 1)")


def test_a_context_refusal_says_that_stating_max_model_len_gets_the_line_predicted() -> None:
    row = example("ttft_ms_p99", model="meta-llama/Meta-Llama-3-8B-Instruct", max_model_len=None, input_tokens=9000)
    [p] = predict_scenarios([row])
    assert p.skipped is not None and p.skipped.endswith(
        "exceed the model's context of 8192 tokens, which the engine rejects; state the max_model_len the run served "
        "(rope scaling extends it) to get the line predicted")


@pytest.mark.parametrize(
    ("weights", "value"),
    [("bfloat16", "bf16"), ("float16", "fp16"), ("awq", "int4-awq"), ("fp8_e4m3", "fp8"), ("float8", "fp8"),
     ("w4a16", "int4-gptq"), ("awq_marlin", "int4-awq")],
)
def test_a_spelling_of_one_weight_format_is_predicted_as_it(weights: str, value: str) -> None:
    """`bfloat16`, `fp8_e4m3`, `w4a16` and the like were refused, though each names one supported format (a
    compressed-tensors W4A16 config reads as int4-gptq): vendor runs write them so, and the line is that format's."""
    [spelt, written] = predict_scenarios([example("e2e_ms_mean", weights=weights), example("e2e_ms_mean",
                                                                                         weights=value)])
    assert spelt.skipped is None and spelt.predicted == written.predicted


@pytest.mark.parametrize(
    ("model", "gpu", "engine", "precision"),
    [("deepseek-ai/DeepSeek-R1-0528", "B200", "sglang", "nvfp4"),
     ("deepseek-ai/DeepSeek-R1-0528", "MI355X", "sglang", "mxfp4-w4a4"),
     ("meta-llama/Llama-3.1-405B-Instruct", "B200", "tensorrt-llm", "nvfp4"),
     ("openai/gpt-oss-120b", "NVIDIA-H200", "vllm", "mxfp4"), ("openai/gpt-oss-120b", "MI355X", "vllm", "mxfp4")],
)
def test_fp4_is_the_fp4_format_the_models_repositories_hold_for_the_gpu(model: str, gpu: str, engine: str,
                                                                          precision: str) -> None:
    """InferenceMAX writes `fp4` for NVIDIA's NVFP4 DeepSeek on a B200, AMD's MXFP4 one on an MI355X and gpt-oss's
    MXFP4 on both; such lines were refused as an unknown weight precision."""
    arch = resolve_served(model, variants=True)[0]
    assert stated_precision("fp4", arch, engine, resolve_gpu(gpu).family) == precision
    row = example("output_tps_total", model=model, gpu=gpu, engine=engine, weights="fp4", gpus=8, tensor_parallel=8,
                  replicas=1, engine_version=None, kv_cache="auto")
    [p] = predict_scenarios([row])
    assert p.skipped is None or "weight format" not in p.skipped


def test_fp4_follows_the_checkpoint_the_line_names() -> None:
    arch = resolve_served("deepseek-ai/DeepSeek-R1-0528", variants=True)[0]
    assert stated_precision("fp4", arch, "sglang", "cdna4", "amd/DeepSeek-R1-0528-MXFP4-Preview") == "mxfp4-w4a4"


@pytest.mark.parametrize(
    ("weights", "spelt"),
    [("gptq", "'int4-gptq' or 'int8-gptq'"), ("w8a8", "'int8-w8a8' or 'fp8'"), ("int8", "'int8-w8a8' or 'int8-gptq'"),
     # vLLM's --quantization names, which a converter copies from the serve command
     ("gptq_marlin", "'int4-gptq' or 'int8-gptq'"), ("compressed-tensors", "'fp8' or 'int8-w8a8' or 'int4-gptq'")],
)
def test_a_spelling_of_several_weight_formats_is_refused_with_the_formats_own(weights: str, spelt: str) -> None:
    """Where neither the line's checkpoint nor the model's catalogued repositories settle which format a spelling
    means, the reason names the values to write."""
    [p] = predict_scenarios([example("e2e_ms_mean", weights=weights)])
    assert p.skipped == (f"weight format {weights!r} is not a value of the format and the line's checkpoint does not "
                         f"settle which it means: write {spelt}")


def test_amd_labeller_spelling_of_the_mi355x_resolves() -> None:
    assert resolve_gpu("AMD_Instinct_MI355X_OAM").key == "MI355X"  # as AMD_Instinct_MI325X_OAM did


@pytest.mark.parametrize(
    ("name", "key"),
    [("NVIDIA B200 SXM 180GB", "B200"), ("B200 192GB", "B200"), ("DGX B200", "B200"),
     ("H200 SXM5 141GB", "H200-SXM-141GB")],
)
def test_published_spellings_of_the_b200_and_h200_resolve(name: str, key: str) -> None:
    """Vendor runs write the B200 as `NVIDIA B200 SXM 180GB` (MLPerf's system names) or by its 192 GB of HBM3e;
    each line so written was refused as a GPU not in the catalog."""
    assert resolve_gpu(name).key == key


@pytest.mark.parametrize(
    ("text", "version"),
    [("rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715", (0, 9, 1)), ("cuda12.4-vllm0.8.5", (0, 8, 5)),
     ("0.6.4.dev4+gc9fc1608 (ROCm 6.2)", (0, 6, 4)), ("NIM 1.8.0", (1, 8, 0)), ("~0.6.3", (0, 6, 3))],
)
def test_a_version_text_gives_the_engines_release_not_the_platforms(text: str, version: tuple[int, ...]) -> None:
    """AMD's container tag `rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715` parsed as vLLM 6.4.1."""
    assert parse_version(text) == version


def test_vllm_wide_expert_parallelism_is_one_instance_of_its_data_parallel_ranks() -> None:
    """`vllm serve --data-parallel-size 8 --enable-expert-parallel` (tensor_parallel 1, as vLLM's docs deploy the
    large MoE models) is one instance of eight ranks, the attention data-parallel and the experts spread over all:
    predicted, not eight copies of a 235B model on one GPU each. Without expert parallelism the ranks are copies;
    on a model without experts the line says to write them as replicas."""
    def line(notes: str, model: str = "Qwen/Qwen3-235B-A22B") -> Scenario:
        return example("output_tps_total", model=model, gpu="NVIDIA-H200", gpus=8, tensor_parallel=1, replicas=None,
                       engine="vllm", engine_version="0.10.1", weights="fp8", input_tokens=1024, output_tokens=1024,
                       load={"kind": "concurrency", "value": 64}, gpu_memory_utilization=None, max_model_len=None,
                       dataset=None, notes=notes)

    wide, copies, dense = predict_scenarios([
        line("vllm serve Qwen/Qwen3-235B-A22B-FP8 --data-parallel-size 8 --enable-expert-parallel"),
        line("vllm serve Qwen/Qwen3-235B-A22B-FP8 --data-parallel-size 8"),
        line("vllm serve meta-llama/Llama-3.3-70B-Instruct -dp 8 --enable-expert-parallel",
             model="meta-llama/Llama-3.3-70B-Instruct"),
    ])
    assert wide.skipped is None and wide.predicted is not None and wide.predicted > 0
    tp8 = predict_scenarios([replace_row(line("vllm serve Qwen/Qwen3-235B-A22B-FP8 --tensor-parallel-size 8 "
                                              "--enable-expert-parallel"), tensor_parallel=8)])[0]
    assert tp8.predicted is not None and 0.5 < wide.predicted / tp8.predicted < 2.0  # the same GPUs, laid out anew
    assert copies.predicted is None and "GiB per GPU at tensor_parallel 1" in (copies.skipped or "")
    assert dense.predicted is None and "write them as replicas" in (dense.skipped or "")


def replace_row(row: Scenario, **changes: object) -> Scenario:
    data = json.loads(row.model_dump_json(by_alias=True))
    data.update(changes)
    parsed = parse_scenario_line(json.dumps(data), 1)
    assert isinstance(parsed, Scenario), parsed
    return parsed


def test_a_decode_speed_that_does_not_say_whether_it_counts_the_prefill_is_refused() -> None:
    """`includes_prefill` null on decode_tps_single was read as false (1 / TPOT), though a speed over the whole
    request (the format's `true`) is slower by the prefill: the line is refused, naming the field."""
    [p] = predict_scenarios([example("decode_tps_single", includes_prefill=None)])
    assert p.predicted is None
    assert p.skipped is not None and p.skipped.startswith("decode_tps_single with includes_prefill null")
    [stated] = predict_scenarios([example("decode_tps_single", includes_prefill=False)])
    assert stated.predicted is not None


@pytest.mark.parametrize("engine", ["tensorrt-llm", "lmdeploy", "tgi"])
def test_a_stated_gpu_memory_utilization_is_a_fraction_of_the_total_memory_on_every_engine(engine: str) -> None:
    """The format's `gpu_memory_utilization` is a fraction of the total GPU memory (vLLM's meaning; TensorRT-LLM's
    fraction of the free memory is left in the notes). On the engines that size their pool from the memory free
    after loading it was read as that fraction of the free memory: 0.5 on an A100 80GB gave Qwen2-7B 31 GiB of KV
    cache under TensorRT-LLM, not 22.5, and each 0.1 more gave 0.1 of what the weights left, not of the 79 GiB."""
    def pool(fraction: float) -> float:
        row = example("kv_cache_tokens", engine=engine, engine_version="1.0.0", gpu_memory_utilization=fraction,
                      metric="kv_cache_gib", unit="GiB/GPU")
        [p] = predict_scenarios([row])
        assert p.predicted is not None, p.skipped
        return p.predicted

    total = resolve_gpu("NVIDIA-A100-SXM4-80GB").usable_memory_bytes / 2**30
    assert pool(0.9) - pool(0.5) == pytest.approx(0.4 * total)
    weights = example("kv_cache_tokens", engine=engine, engine_version="1.0.0", gpu_memory_utilization=0.5,
                      metric="weights_gib", unit="GiB/GPU")
    [w] = predict_scenarios([weights])
    assert w.predicted is not None and pool(0.5) < 0.5 * total - w.predicted


def test_data_parallel_attention_holds_tp_pools_of_one_rank_not_tp_squared() -> None:
    """With data-parallel attention each of the TP ranks keeps its own requests' latent KV: the instance holds at most
    TP times the pool of the same launch without it (less: the attention weights are on every rank). The startup
    lines multiplied the pool by TP once more (64 rank pools on eight GPUs)."""
    line = dict(model="deepseek-ai/DeepSeek-V3", gpu="H200-SXM-141GB", gpus=8, tensor_parallel=8, replicas=1,
                engine="sglang", engine_version="0.5.3", weights="fp8", kv_cache="auto", max_model_len=8192,
                gpu_memory_utilization=None)
    plain, dp = predict_scenarios([
        example("kv_cache_tokens", id="tp8", notes="python3 -m sglang.launch_server --tp 8", **line),
        example("kv_cache_tokens", id="dp8", notes="python3 -m sglang.launch_server --tp 8 --enable-dp-attention",
                **line)])
    assert plain.skipped is None and dp.skipped is None
    assert 4 * plain.predicted < dp.predicted < 8 * plain.predicted


FRONTIER = Path(__file__).parent / "data" / "frontier-spellings.jsonl"


def test_frontier_lines_as_vendor_runs_write_them_are_predicted() -> None:
    """Synthetic lines naming B200/H200/MI3xx GPUs, FP4/FP8/W4A16 checkpoints and engine releases the way vendor
    runs and InferenceMAX/MLPerf-style tables write them (`NVIDIA B200 SXM 180GB`, `fp4`, `fp8_e4m3`, `w4a16`,
    `0.5.4.post1`, `1.0.0rc4`): each is predicted, a positive finite figure, but the one that cannot have run
    (Llama 4 Scout in bf16 on one H200: 200 GiB of weights on 139 GiB)."""
    rows = read_scenarios(FRONTIER)
    assert not rows.errors and len(rows.scenarios) == 12
    for row, p in zip(rows.scenarios, predict_scenarios(list(rows.scenarios)), strict=True):
        if row.model.startswith("meta-llama/Llama-4-Scout") and row.weights == "bf16":
            assert p.skipped is not None and "more than the 138.9 GiB of the H200-SXM-141GB" in p.skipped
        else:
            assert p.skipped is None and p.predicted is not None, (row.id, p.skipped)
            assert math.isfinite(p.predicted) and p.predicted > 0, row.id
