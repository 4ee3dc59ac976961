"""engine_launch: the arguments each engine gets use only flags its pinned parser accepts, with valid values,
and the named behaviours of the user report hold (AWQ never on a 16-bit repository, TGI queues rather than
refusing, TensorRT-LLM precision from the checkpoint, the step budget explained)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import yaml

from inferplan.planner.catalog.engine_args import (
    DEFAULT_VERSIONS,
    ENGINE_FLAGS,
    SOME_LINES_ROLES,
    TRT_OPTIONS_FILE,
    VERSION_LINES,
    EngineLaunch,
    engine_flags,
    engine_launch,
    flag_problems,
    flag_spellings,
    mtp_problem,
    stated_chunked_prefill,
    stated_layout,
    stated_mtp,
    stated_scheduler_steps,
    version_line,
)
from inferplan.planner.catalog.engines import SERVED_PRECISIONS, EngineSettings
from inferplan.planner.search.core import dp_attention_args, expert_parallel_args

# One version inside each pinned line (the line's first version is the pinned wheel or tag).
PINNED: list[tuple[str, str]] = [
    ("vllm", "0.6.3.post1"), ("vllm", "0.11.2"), ("sglang", "0.4.6.post5"), ("sglang", "0.5.2"),
    ("tensorrt-llm", "0.18.2"), ("tensorrt-llm", "1.0.0"), ("tgi", "2.4.1"), ("tgi", "3.3.7"),
    ("lmdeploy", "0.10.2"),
]
FORMATS: dict[str, list[str]] = {
    "bf16": ["native"], "fp16": ["native"], "fp8": ["online", "modelopt-fp8", "compressed-tensors-fp8", "autofp8"],
    "int8-w8a8": ["compressed-tensors-int8"], "int4-awq": ["awq"], "int4-gptq": ["gptq"], "int8-gptq": ["gptq"],
    "mxfp4": ["native"], "nvfp4": ["modelopt-nvfp4", "compressed-tensors-nvfp4"], "mxfp4-w4a4": ["quark-mxfp4"],
}


def _settings(chunked: bool, max_model_len: int = 8192, step: float = 4096.0) -> EngineSettings:
    return EngineSettings(memory_fraction=0.9, max_model_len=max_model_len, max_num_seqs=128,
                          chunk_tokens=step if chunked else math.inf, profile_tokens=int(step),
                          step_tokens=step if chunked else math.inf)


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _grid(engine: str, version: str) -> list[EngineLaunch]:
    launches = []
    for precision in SERVED_PRECISIONS[engine]:
        for fmt, kv, chunked, context in itertools.product(FORMATS[precision], ("fp8", "bf16", "auto"),
                                                           (True, False), (8192, 65536)):
            try:
                launches.append(engine_launch(engine, version, "org/model", fmt, precision, 2, 64, kv,
                                              _settings(chunked, context), kv_tokens=200_000))
            except ValueError:
                continue  # a combination the engine cannot serve (e.g. online FP8 on TensorRT-LLM)
    return launches


def test_every_pinned_line_has_a_flag_list() -> None:
    flags = engine_flags()
    for engine, lines in VERSION_LINES.items():
        for _, line in lines:
            entry = flags[engine][line]
            assert entry["flags"] and entry["source"] and entry["version"]
        assert version_line(engine, None) == version_line(engine, DEFAULT_VERSIONS[engine])


@pytest.mark.parametrize(("engine", "version"), PINNED)
def test_grid_uses_only_accepted_flags_with_valid_values(engine: str, version: str) -> None:
    launches = _grid(engine, version)
    assert len(launches) >= 8
    for launch in launches:
        assert launch.version_line == version_line(engine, version)
        assert flag_problems(engine, version, launch.args) == [], launch.args
        assert all(a.isascii() for a in launch.args) and all(n.isascii() for n in launch.notes)
        for name in launch.files:
            assert name in launch.args


def test_flag_problems_catches_bad_args() -> None:
    assert flag_problems("vllm", None, ["--model", "m", "--no-such-flag", "1"])
    assert flag_problems("vllm", None, ["--model", "m", "--kv-cache-dtype", "fp9"])
    assert flag_problems("sglang", "0.5.2", ["--model-path", "m", "--tp-size"])
    assert flag_problems("tgi", "3.3.7", ["--model-id", "m", "--max-concurrent-requests", "--num-shard", "1"])


def test_version_lines() -> None:
    assert version_line("vllm", "0.6.3.post1") == "0.6" and version_line("vllm", "0.7.3") == "0.6"
    assert version_line("vllm", "0.8.0") == "0.11" and version_line("vllm", None) == "0.11"
    assert version_line("sglang", "0.4.10") == "0.4" and version_line("sglang", "0.5.9") == "0.5"
    assert version_line("tensorrt-llm", "0.21.0") == "0.18" and version_line("tensorrt-llm", "1.2.1") == "1"
    assert version_line("tgi", "2.0.4") == "2" and version_line("tgi", "3.0.0") == "3"
    assert version_line("llama.cpp", None) == ""


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "lmdeploy", "tensorrt-llm"])
def test_quantised_precision_on_native_checkpoint_is_refused(engine: str) -> None:
    for precision in ("int4-awq", "int4-gptq", "int8-w8a8", "fp8"):
        with pytest.raises(ValueError):
            engine_launch(engine, None, "meta-llama/Llama-3.1-8B-Instruct", "native", precision, 1, 32, "auto",
                          _settings(True))


@pytest.mark.parametrize(("engine", "version"), PINNED)
def test_awq_flag_only_with_an_awq_checkpoint(engine: str, version: str) -> None:
    for launch in _grid(engine, version):
        joined = " ".join(launch.args)
        if "awq" in joined:
            assert "int4-awq" in " ".join(launch.notes)


def test_vllm_and_sglang_give_no_quantization_flag_for_prequantised_checkpoints() -> None:
    for engine in ("vllm", "sglang"):
        for fmt, precision in (("awq", "int4-awq"), ("gptq", "int4-gptq"), ("compressed-tensors-fp8", "fp8"),
                               ("compressed-tensors-int8", "int8-w8a8"), ("modelopt-fp8", "fp8")):
            launch = engine_launch(engine, None, "org/model-q", fmt, precision, 1, 32, "auto", _settings(True))
            assert "--quantization" not in launch.args
    # vLLM 0.6 reads config.json only, so a ModelOpt export is named
    old = engine_launch("vllm", "0.6.3.post1", "nvidia/m-FP8", "modelopt-fp8", "fp8", 1, 32, "auto", _settings(True))
    assert _value(old.args, "--quantization") == "modelopt"


def test_vllm_online_fp8_quantises_the_16bit_repository() -> None:
    launch = engine_launch("vllm", None, "meta-llama/Llama-3.1-8B-Instruct", "online", "fp8", 1, 64, "fp8",
                           _settings(True))
    assert _value(launch.args, "--model") == "meta-llama/Llama-3.1-8B-Instruct"
    assert _value(launch.args, "--quantization") == "fp8"
    assert _value(launch.args, "--kv-cache-dtype") == "fp8"
    sgl = engine_launch("sglang", None, "meta-llama/Llama-3.1-8B-Instruct", "online", "fp8", 1, 64, "fp8",
                        _settings(True))
    assert _value(sgl.args, "--quantization") == "fp8" and _value(sgl.args, "--kv-cache-dtype") == "fp8_e4m3"
    tgi = engine_launch("tgi", None, "meta-llama/Llama-3.1-8B-Instruct", "online", "fp8", 1, 64, "auto",
                        _settings(True))
    assert _value(tgi.args, "--quantize") == "fp8"


def test_online_quantisation_refused_where_the_engine_has_none() -> None:
    for engine in ("tensorrt-llm", "lmdeploy"):
        with pytest.raises(ValueError):
            engine_launch(engine, None, "meta-llama/Llama-3.1-8B-Instruct", "online", "fp8", 1, 32, "auto",
                          _settings(True))


@pytest.mark.parametrize("version", ["2.4.1", "3.3.7"])
def test_tgi_queues_rather_than_refusing(version: str) -> None:
    for batch in (1, 32, 256):
        launch = engine_launch("tgi", version, "org/model", "native", "bf16", 1, batch, "auto", _settings(True),
                               kv_tokens=500_000)
        assert int(_value(launch.args, "--max-batch-size")) == batch
        assert int(_value(launch.args, "--max-concurrent-requests")) > batch
        assert int(_value(launch.args, "--max-concurrent-requests")) >= 128
        assert _value(launch.args, "--max-batch-total-tokens") == "500000"
        assert "--max-waiting-tokens" in launch.args
        assert any("429" in n for n in launch.notes)
    queued = engine_launch("tgi", version, "org/model", "native", "bf16", 1, 32, "auto", _settings(True),
                           expected_queue=400)
    assert int(_value(queued.args, "--max-concurrent-requests")) >= 32 + 800


@pytest.mark.parametrize("version", ["0.18.2", "1.0.0"])
def test_tensorrt_llm_names_the_checkpoint_and_no_quantization_flag(version: str) -> None:
    launch = engine_launch("tensorrt-llm", version, "nvidia/Llama-3.1-8B-Instruct-FP8", "modelopt-fp8", "fp8", 2, 64,
                           "auto", _settings(True))
    assert launch.args[0] == "nvidia/Llama-3.1-8B-Instruct-FP8"
    assert not any("quant" in a for a in launch.args)
    assert any("no precision flag" in n and "ModelOpt" in n for n in launch.notes)
    assert ("--backend" in launch.args) == (version_line("tensorrt-llm", version) == "1")
    fp8_kv = engine_launch("tensorrt-llm", version, "nvidia/Llama-3.1-8B-Instruct-FP8", "modelopt-fp8", "fp8", 2, 64,
                           "fp8", _settings(False))
    assert _value(fp8_kv.args, "--extra_llm_api_options") == TRT_OPTIONS_FILE
    assert "dtype: fp8" in fp8_kv.files[TRT_OPTIONS_FILE]


@pytest.mark.parametrize("version", ["0.18.2", "1.0.0"])
def test_tensorrt_llm_options_file_keeps_the_memory_fraction_of_its_kv_cache(version: str) -> None:
    """trtllm-serve builds kv_cache_config from --kv_cache_free_gpu_memory_fraction, then replaces the whole of it with
    the options file's kv_cache_config where the file has one (`update_llm_args_with_extra_dict`: one KvCacheConfig
    from the file's keys, merged over the command line's arguments key by key): the file must carry the fraction too,
    or the engine sizes its KV cache at KvCacheConfig's default (0.9) whatever the plan says."""
    settings = dataclasses.replace(_settings(True), memory_fraction=0.75)
    launch = engine_launch("tensorrt-llm", version, "nvidia/Llama-3.1-8B-Instruct-FP8", "modelopt-fp8", "fp8", 2, 64,
                           "fp8", settings)
    options = yaml.safe_load(launch.files[TRT_OPTIONS_FILE])
    assert options["kv_cache_config"] == {"dtype": "fp8", "free_gpu_memory_fraction": 0.75}
    assert _value(launch.args, "--kv_cache_free_gpu_memory_fraction") == "0.75"


def test_tensorrt_llm_turns_its_block_reuse_off_where_the_plan_has_prefix_caching_off() -> None:
    """trtllm-serve 1.x reuses KV blocks across requests by default (`KvCacheConfig.enable_block_reuse = True`): a
    plan with prefix caching off gets `enable_block_reuse: false` in its options file (with the fraction, which the
    file's kv_cache_config replaces), and nothing where the plan leaves it on or to the engine."""
    settings = dataclasses.replace(_settings(True), memory_fraction=0.8)

    def options(prefix_caching: bool | None, kv: str = "auto") -> dict:
        launch = engine_launch("tensorrt-llm", "1.0.0", "meta-llama/Llama-3.1-8B-Instruct", "native", "bf16", 1, 64,
                               kv, settings, prefix_caching=prefix_caching)
        return yaml.safe_load(launch.files.get(TRT_OPTIONS_FILE, "{}")) or {}

    assert options(False)["kv_cache_config"] == {"enable_block_reuse": False, "free_gpu_memory_fraction": 0.8}
    assert options(False, "fp8")["kv_cache_config"] == {"dtype": "fp8", "enable_block_reuse": False,
                                                         "free_gpu_memory_fraction": 0.8}
    assert "kv_cache_config" not in options(True) and "kv_cache_config" not in options(None)


def test_notes_explain_the_step_token_budget() -> None:
    expected = {"vllm": "--max-num-batched-tokens", "sglang": "--chunked-prefill-size",
                "tgi": "--max-batch-prefill-tokens", "tensorrt-llm": "--max_num_tokens"}
    for engine, flag in expected.items():
        launch = engine_launch(engine, None, "org/model", "native", "bf16", 1, 64, "auto", _settings(True, step=3072))
        assert _value(launch.args, flag) == "3072"
        assert any(n.startswith(flag) and "step token budget" in n for n in launch.notes), launch.notes


def test_vllm_budget_always_set_and_chunking_only_where_needed() -> None:
    v1 = engine_launch("vllm", None, "org/model", "native", "bf16", 1, 64, "auto", _settings(True))
    assert "--max-num-batched-tokens" in v1.args and "--no-enable-chunked-prefill" not in v1.args
    off = engine_launch("vllm", None, "org/model", "native", "bf16", 1, 64, "auto", _settings(False))
    assert "--no-enable-chunked-prefill" in off.args
    assert int(_value(off.args, "--max-num-batched-tokens")) >= 8192  # >= max_model_len without chunking
    v0_long = engine_launch("vllm", "0.6.3.post1", "org/model", "native", "bf16", 1, 64, "auto",
                            _settings(True, max_model_len=65536))
    assert "--enable-chunked-prefill" not in v0_long.args  # V0 turns it on by itself above 32k
    v0_short = engine_launch("vllm", "0.6.3.post1", "org/model", "native", "bf16", 1, 64, "auto", _settings(True))
    assert _value(v0_short.args, "--enable-chunked-prefill") == "True"


def test_lmdeploy_names_the_awq_format_and_other_engines_keep_their_mapping() -> None:
    awq = engine_launch("lmdeploy", None, "org/model-AWQ", "awq", "int4-awq", 1, 32, "auto", _settings(False))
    assert _value(awq.args, "--model-format") == "awq" and awq.args[2] == "org/model-AWQ"
    gguf = engine_launch("llama.cpp", None, "org/model-GGUF", "native", "gguf-q4_k_m", 1, 1, "auto", _settings(False))
    assert gguf.args[:2] == ["-m", "org/model-GGUF"]
    mlc = engine_launch("mlc-llm", None, "mlc-ai/model-q4f16_1-MLC", "native", "mlc-q4f16_1", 1, 8, "auto",
                        _settings(False))
    assert mlc.args[1] == "mlc-ai/model-q4f16_1-MLC"
    with pytest.raises(ValueError):
        engine_launch("lmdeploy", None, "org/model", "native", "bf16", 1, 8, "fp8", _settings(False))


def test_every_spelling_of_the_flags_table_is_accepted_by_the_engines_parser() -> None:
    """The flags the planner writes and the operator reads back (ENGINE_FLAGS) exist in each engine's
    parser at every pinned version line (short aliases such as vLLM's -tp are not in the pinned lists)."""
    pinned = engine_flags()
    for engine, flags in ENGINE_FLAGS.items():
        for role, spellings in flags.roles.items():
            for flag in (f for f in spellings if f.startswith("--")):
                known = [line for line, parser in pinned[engine].items() if flag in parser["flags"]]
                if role in SOME_LINES_ROLES:  # read (and written) where its release has it
                    assert known, f"{engine}: {role} flag {flag} in no pinned release"
                else:
                    assert known == list(pinned[engine]), f"{engine}: {role} flag {flag} only in {known}"


def test_flag_spellings_put_the_plans_engine_first() -> None:
    assert flag_spellings("batch", "tgi")[:2] == ("--max-batch-size", "--max-concurrent-requests")
    assert flag_spellings("tp", "sglang")[0] == "--tp-size"
    assert set(flag_spellings("tp")) >= {"--tensor-parallel-size", "-tp", "--tp-size", "--num-shard", "--tp_size",
                                          "--tp"}


@pytest.mark.parametrize(("engine", "version"), [p for p in PINNED if p[0] in ("vllm", "sglang", "tensorrt-llm")])
def test_pipeline_stages_follow_the_tensor_parallel_size_with_the_engines_flag(engine: str, version: str) -> None:
    launch = engine_launch(engine, version, "org/model", "native", "bf16", 8, 64, "auto", _settings(True), pp=2)
    tp, pp = ENGINE_FLAGS[engine].tp[0], ENGINE_FLAGS[engine].pp[0]
    at = launch.args.index(tp)
    assert launch.args[at:at + 4] == [tp, "8", pp, "2"]
    assert not flag_problems(engine, version, launch.args)
    assert any(n.startswith(f"{pp} 2") and "2 stages of 8 GPUs" in n for n in launch.notes)
    single = engine_launch(engine, version, "org/model", "native", "bf16", 8, 64, "auto", _settings(True))
    assert pp not in single.args


def test_engines_without_pipeline_stages_refuse_them() -> None:
    for engine in ("tgi", "lmdeploy"):
        with pytest.raises(ValueError, match="no pipeline parallelism"):
            engine_launch(engine, None, "org/model", "native", "bf16", 8, 64, "auto", _settings(True), pp=2)


def test_a_stated_layout_is_read_with_the_tables_spellings() -> None:
    """Data-parallel attention and expert parallelism as a launch command or a run's description states them, read
    with ENGINE_FLAGS' spellings only (what the planner writes for SGLang reads back)."""
    written = " ".join(["python3 -m sglang.launch_server", *dp_attention_args(8), *expert_parallel_args("0.5.5", 8)])
    assert stated_layout(written) == (True, True)
    assert stated_layout("trtllm-bench throughput --tp 8 --ep 8 with `enable_attention_dp: true`") == (True, True)
    assert stated_layout("trtllm-serve --tp_size 8 --ep_size 8") == (False, True)
    assert stated_layout("vllm serve org/m --tensor-parallel-size 8 --enable-expert-parallel") == (False, True)
    assert stated_layout("--ep-size=1 enable_attention_dp: false --enable-dp-attention-x") == (False, False)


def test_chunked_prefill_is_read_as_a_command_line_or_a_settings_table_states_it() -> None:
    assert stated_chunked_prefill("vllm serve M --enable-chunked-prefill=False --num-scheduler-step 15") is False
    assert stated_chunked_prefill("vllm serve M --no-enable-chunked-prefill") is False
    assert stated_chunked_prefill("CSV: num-scheduler-step 15, enable-chunked-prefill FALSE, max-num-seqs 1024") \
        is False
    assert stated_chunked_prefill("the CSV lists enable-chunked-prefill TRUE, max-num-batched-tokens 512") is True
    assert stated_chunked_prefill("`trtllm-serve M --max_seq_len=40960 --enable_chunked_prefill` (no other flags)")
    assert stated_chunked_prefill("vllm serve M --enable-chunked-prefill --max-num-batched-tokens 2048")
    # A description that only mentions the feature states nothing.
    assert stated_chunked_prefill("TensorRT-LLM, chunked prefill on; prefix caching off") is None


def test_multi_step_scheduling_is_read_as_a_command_line_or_a_settings_table_states_it() -> None:
    assert stated_scheduler_steps("vllm serve M --num-scheduler-steps 10 --max_model_len 4096") == 10
    assert stated_scheduler_steps("CSV: num-scheduler-step 15, enable-chunked-prefill FALSE") == 15
    assert stated_scheduler_steps("vllm serve M --num_scheduler_steps=8") == 8
    assert stated_scheduler_steps("vllm serve M --max-num-seqs 256") is None


@pytest.mark.parametrize(("engine", "version"), [("vllm", "0.11.2"), ("sglang", "0.4.6.post5"), ("sglang", "0.5.2"),
                                                 ("tensorrt-llm", "1.0.0")])
def test_multi_token_prediction_drafts_with_the_engines_own_switches(engine: str, version: str) -> None:
    """A launch that drafts 3 tokens a step with DeepSeek's MTP module: vLLM's speculative config (method mtp),
    SGLang's EAGLE over the NextN weights (3 steps, 4 draft tokens, top-1), TensorRT-LLM's MTP in its options file;
    every flag in the pinned parser of the line, and a note that says what it does."""
    launch = engine_launch(engine, version, "deepseek-ai/DeepSeek-R1", "fp8-native", "fp8", 8, 64, "auto",
                           _settings(True), mtp_draft_tokens=3)
    assert flag_problems(engine, version, launch.args) == []
    if engine == "vllm":
        assert _value(launch.args, "--speculative-config") == '{"method":"mtp","num_speculative_tokens":3}'
    elif engine == "sglang":
        assert [_value(launch.args, f) for f in ("--speculative-algorithm", "--speculative-num-steps",
                                                 "--speculative-eagle-topk", "--speculative-num-draft-tokens")] == [
            "EAGLE", "3", "1", "4"]
    else:
        assert "speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 3}\n" in next(
            iter(launch.files.values()))
    assert any(n.startswith("multi-token prediction:") and "drafts 3 tokens" in n for n in launch.notes)
    plain = engine_launch(engine, version, "deepseek-ai/DeepSeek-R1", "fp8-native", "fp8", 8, 64, "auto",
                          _settings(True))
    assert not any("specul" in a for a in plain.args) and not any("speculative" in f for f in plain.files.values())


@pytest.mark.parametrize(("engine", "version", "reason"), [
    ("vllm", "0.6.3.post1", "vllm 0.6.x does not draft with MTP modules"),
    ("tensorrt-llm", "0.18.2", "tensorrt-llm 0.18.x does not draft with MTP modules"),
    ("tgi", "3.3.7", "tgi 3.x does not draft with MTP modules"),
    ("vllm", "0.8.5", "vllm 0.8.5 drafts with MTP modules only on its V0 engine"),  # V1 took them from 0.9.0
    # Before 0.4.6.post2 SGLang loads DeepSeek's module only from a separately exported NextN repository.
    ("sglang", "0.4.6.post1", "sglang 0.4.6.post1 drafts only from a separately exported NextN repository"),
    ("sglang", "0.4.3.post2", "sglang 0.4.3.post2 drafts only from a separately exported NextN repository"),
])
def test_lines_that_cannot_draft_with_mtp_modules_refuse_it(engine: str, version: str, reason: str) -> None:
    assert mtp_problem(engine, version).startswith(reason)
    with pytest.raises(ValueError, match=reason):
        engine_launch(engine, version, "deepseek-ai/DeepSeek-R1", "fp8-native", "fp8", 8, 64, "auto", _settings(True),
                      mtp_draft_tokens=1)


@pytest.mark.parametrize(("version", "kv"), [("0.4.1", "fp8_e5m2"), ("0.4.2", "fp8_e4m3"), (None, "fp8_e4m3")])
def test_sglang_gets_the_fp8_kv_cache_its_release_takes(version: str | None, kv: str) -> None:
    # SGLang 0.4.0 and 0.4.1 take --kv-cache-dtype auto or fp8_e5m2 only (fp8_e4m3 from 0.4.2, read in the sdists).
    launch = engine_launch("sglang", version, "meta-llama/Llama-3.1-8B-Instruct", "native", "bf16", 1, 64, "fp8",
                           _settings(True))
    assert _value(launch.args, "--kv-cache-dtype") == kv


def test_sglang_drafts_from_the_models_own_checkpoint_from_0_4_6_post2() -> None:
    assert mtp_problem("sglang", "0.4.6.post2") is None and mtp_problem("sglang", "0.4.7") is None
    assert mtp_problem("sglang", None) is None  # the pinned release
    launch = engine_launch("sglang", "0.4.6.post2", "deepseek-ai/DeepSeek-R1", "fp8-native", "fp8", 8, 64, "auto",
                           _settings(True), mtp_draft_tokens=1)
    assert "--speculative-draft-model-path" not in launch.args  # it sets the model's own path itself


@pytest.mark.parametrize(("version", "method"), [("0.9.2", "deepseek_mtp"), ("0.10.2", "deepseek_mtp"),
                                                 ("0.11.0", "mtp"), (None, "mtp")])
def test_vllm_names_the_mtp_method_its_release_takes(version: str | None, method: str) -> None:
    # vLLM's SpeculativeMethod has "deepseek_mtp" only from 0.9.0 to 0.10.2 and adds "mtp" in 0.11.0: a 0.9 or 0.10
    # release refuses "mtp" when it validates the config, so it gets the name it knows.
    launch = engine_launch("vllm", version, "deepseek-ai/DeepSeek-R1", "fp8-native", "fp8", 8, 64, "auto",
                           _settings(True), mtp_draft_tokens=2)
    assert _value(launch.args, "--speculative-config") == f'{{"method":"{method}","num_speculative_tokens":2}}'
    assert stated_mtp(" ".join(launch.args)) == (2, None)


def test_drafting_with_an_mtp_module_is_read_in_the_launches_spellings() -> None:
    """Each engine's way of asking for MTP drafts, and a stated mean acceptance length; not a mention of MTP alone,
    nor SGLang's speculative steps without its EAGLE/NextN algorithm."""
    assert stated_mtp("speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 3}") == (3, None)
    assert stated_mtp("--speculative-algorithm NEXTN --speculative-num-steps 2 --speculative-eagle-topk 1") == (2, None)
    assert stated_mtp('--speculative-config \'{"method": "deepseek_mtp", "num_speculative_tokens": 1}\'; '
                      "accept len: 1.9") == (1, 1.9)
    assert stated_mtp("DeepSeek-R1 without MTP; acceptance length 2.5") == (0, None)
    assert stated_mtp("--speculative-algorithm NGRAM --speculative-num-steps 4") == (0, None)
    for engine, version in (("vllm", "0.11.2"), ("sglang", "0.5.2"), ("tensorrt-llm", "1.0.0")):
        launch = engine_launch(engine, version, "deepseek-ai/DeepSeek-R1", "fp8-native", "fp8", 8, 64, "auto",
                               _settings(True), mtp_draft_tokens=2)
        assert stated_mtp(" ".join(launch.args) + " " + " ".join(launch.files.values())) == (2, None)


@pytest.mark.parametrize("version", ["0.8.5", "0.9.2", "0.10.1.1", "0.11.0"])
def test_vllm_v1_before_0_11_1_is_not_told_to_send_prompts_whole(version: str) -> None:
    """vLLM 0.8.0-0.11.0 set enable_chunked_prefill for every generative model over --no-enable-chunked-prefill
    (engine/arg_utils.py `_set_default_args_v1`): a launch that says prompts go whole would not run as planned."""
    with pytest.raises(ValueError, match=r"chunks prompts whatever the command line says.*0\.11\.1"):
        engine_launch("vllm", version, "org/model", "native", "bf16", 1, 64, "auto", _settings(False))
    chunked = engine_launch("vllm", version, "org/model", "native", "bf16", 1, 64, "auto", _settings(True))
    assert "--no-enable-chunked-prefill" not in chunked.args


@pytest.mark.parametrize("version", [None, "0.11.1", "0.11.2", "0.6.3.post1", "0.7.3"])
def test_releases_that_honour_chunked_prefill_off_get_it(version: str | None) -> None:
    launch = engine_launch("vllm", version, "org/model", "native", "bf16", 1, 64, "auto", _settings(False))
    if version_line("vllm", version) == "0.11":
        assert "--no-enable-chunked-prefill" in launch.args
    else:
        assert "--enable-chunked-prefill" not in launch.args  # V0 keeps whole prompts at 8192 by default


@pytest.mark.parametrize(("engine", "version", "on", "off"), [
    ("vllm", "0.6.3.post1", ["--enable-prefix-caching"], []),
    ("vllm", "0.9.2", [], ["--no-enable-prefix-caching"]),
    ("vllm", None, [], ["--no-enable-prefix-caching"]),
    ("sglang", "0.4.6.post5", [], ["--disable-radix-cache"]),
    ("sglang", None, [], ["--disable-radix-cache"]),
    ("lmdeploy", None, ["--enable-prefix-caching"], []),
])
def test_prefix_caching_is_switched_where_the_engines_default_differs(engine: str, version: str | None,
                                                                      on: list[str], off: list[str]) -> None:
    """engine.prefixCaching (or a planned hit rate) reaches the command: vLLM V0 and LMDeploy cache no prefixes unless
    told, vLLM V1 and SGLang cache them unless told not to; every switch is one the pinned parser takes."""
    flags = {"--enable-prefix-caching", "--no-enable-prefix-caching", "--disable-radix-cache"}

    def switches(prefix_caching: bool | None) -> list[str]:
        launch = engine_launch(engine, version, "org/model", "native", "bf16", 1, 64, "auto", _settings(True),
                               prefix_caching=prefix_caching)
        assert flag_problems(engine, version, launch.args) == []
        return [arg for arg in launch.args if arg in flags]

    assert (switches(True), switches(False), switches(None)) == (on, off, [])


def test_vllm_before_0_11_has_no_v1_fp8_kv_cache_off_hopper() -> None:
    """vLLM 0.8-0.10 fall back to V0 for an FP8 KV cache where V1's attention has none (A100, L40S; AMD on 0.8; B200
    before 0.10.1), and V0 refuses the V1 launch's step budget below max_model_len: such a KV dtype is refused."""
    from inferplan.planner.catalog.engine_args import kv_dtype_problem

    for version, family, gpu in (("0.9.2", "ampere", "A100-SXM4-80GB"), ("0.10.2", "ada", "L40S"),
                                 ("0.8.5", "cdna3", "MI300X"), ("0.9.2", "blackwell", "B200"),
                                 ("0.10.2", "blackwell", "B300-SXM6-AC")):
        assert "falling back to its V0 engine" in (kv_dtype_problem("vllm", version, family, "fp8", gpu) or "")
    for version, family, gpu in (("0.9.2", "hopper", "H100-SXM5-80GB"), ("0.9.2", "cdna3", "MI300X"),
                                 ("0.10.1.1", "blackwell", "B200"), ("0.11.0", "ampere", "A100-SXM4-80GB"),
                                 (None, "ada", "L40S"), ("0.6.3", "ampere", "A100-SXM4-80GB")):
        assert kv_dtype_problem("vllm", version, family, "fp8", gpu) is None
    assert kv_dtype_problem("vllm", "0.9.2", "ampere", "auto", "A100-SXM4-80GB") is None
    assert kv_dtype_problem("sglang", "0.4.6.post5", "ampere", "fp8", "A100-SXM4-80GB") is None


def test_a_data_parallel_size_is_read_in_each_spelling_vllm_takes() -> None:
    from inferplan.planner.catalog.engine_args import stated_vllm_data_parallel

    assert stated_vllm_data_parallel("vllm serve m --data-parallel-size 8 --enable-expert-parallel") == 8
    assert stated_vllm_data_parallel("vllm serve m -dp 4") == 4
    assert stated_vllm_data_parallel("vllm serve m --data-parallel-size=2") == 2
    assert stated_vllm_data_parallel("vllm serve m --data-parallel-size-local 2 --tensor-parallel-size 8") == 1
    assert stated_vllm_data_parallel("vllm serve m") == 1
