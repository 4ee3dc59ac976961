"""Checkpoint catalog: which repository an engine loads for a model at a precision."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from inferplan.planner.architectures import load_model_catalog, resolve_model
from inferplan.planner.checkpoints import FORMAT_LOADERS, Checkpoint, checkpoint_for, known_precisions
from inferplan.planner.engines import ENGINES
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.precisions import WEIGHT_PRECISIONS

SHARED_FACTS = Path(__file__).resolve().parents[3] / "shared" / "catalog-facts" / "checkpoints.json"
PENDING_FORMATS = {"modelopt-nvfp4", "compressed-tensors-nvfp4", "quark-fp8", "quark-mxfp4"}
# Repositories and KV schemes added to the facts on 2026-12-03 that the catalog takes with the issue on deployable
# answers (36): checkpoints that exist but the catalog does not list yet, and an FP8 KV scheme read since.
PENDING_REPOS = {"nvidia/Llama-3.3-70B-Instruct-FP8", "Qwen/Qwen3-235B-A22B-FP8"}
PENDING_KV = {"nvidia/Llama-3.1-70B-Instruct-FP8"}
FORMATS = {"native", "modelopt-fp8", "compressed-tensors-fp8", "compressed-tensors-int8", "autofp8", "fp8-block",
           "awq", "gptq"}


def _bundled() -> dict:
    text = resources.files("inferplan.planner").joinpath("data/checkpoints.json").read_text(encoding="utf-8")
    return json.loads(text)


def test_every_catalog_model_has_a_native_checkpoint() -> None:
    for arch in load_model_catalog():
        native = [c for rows in known_precisions(arch.repo_id).values() for c in rows if c.format == "native"]
        assert [c.repo for c in native] == [arch.repo_id], arch.repo_id


def test_bundled_data_is_well_formed() -> None:
    data = _bundled()
    assert data["about"].isascii() and "catalog-facts" in data["about"]
    catalog_ids = {m.repo_id for m in load_model_catalog()}
    assert set(data["models"]) == catalog_ids
    for by_precision in data["models"].values():
        for precision, rows in by_precision.items():
            assert precision in WEIGHT_PRECISIONS
            for row in rows:
                assert row["source"].startswith("https://"), row
                assert row["format"] in FORMATS
                assert row["kvCache"] in (None, "fp8")
                assert set(row["engines"]) <= set(ENGINES)


def test_llama31_8b_fp8_prefers_a_prequantised_repo_over_online() -> None:
    known = known_precisions("llama-3.1-8b")["fp8"]
    for engine in ("vllm", "sglang"):
        chosen = checkpoint_for("llama-3.1-8b", "fp8", engine)
        assert isinstance(chosen, Checkpoint)
        assert not chosen.online and chosen in known
        assert engine in FORMAT_LOADERS[chosen.format]


def test_llama31_8b_fp8_on_tensorrt_llm_is_the_modelopt_repo() -> None:
    chosen = checkpoint_for("meta-llama/Llama-3.1-8B-Instruct", "fp8", "tensorrt-llm")
    assert isinstance(chosen, Checkpoint)
    assert chosen.format == "modelopt-fp8" and not chosen.online


def test_online_fp8_only_where_no_repo_fits_and_the_engine_quantises() -> None:
    chosen = checkpoint_for("llama-3.1-8b", "fp8", "tgi")  # TGI loads none of the listed FP8 formats
    assert isinstance(chosen, Checkpoint) and chosen.online and chosen.format == "online"
    assert chosen.repo == resolve_model("llama-3.1-8b").repo_id
    reason = checkpoint_for("qwen3-14b", "fp8", "tensorrt-llm")  # no FP8 repo listed, no online path
    assert isinstance(reason, str) and "does not quantise" in reason


def test_sixteen_bit_from_native_repo() -> None:
    for precision in ("bf16", "fp16"):
        chosen = checkpoint_for("llama-2-7b", precision, "vllm")
        assert isinstance(chosen, Checkpoint)
        assert (chosen.repo, chosen.precision, chosen.format) == ("meta-llama/Llama-2-7b-hf", precision, "native")


def test_int4_awq_on_deepseek_v3_is_a_reason_naming_what_exists() -> None:
    reason = checkpoint_for("deepseek-v3", "int4-awq", "tensorrt-llm")
    assert isinstance(reason, str)
    assert "int4-awq" in reason and "FP8" in reason and "deepseek-ai/DeepSeek-V3" in reason
    assert "model.precisions" in reason


@pytest.mark.parametrize(("model", "precision"), [("deepseek-v3", "bf16"), ("gpt-oss-20b", "bf16"),
                                                  ("gpt-oss-20b", "fp8")])
def test_no_sixteen_bit_source_for_fp8_and_mxfp4_models(model: str, precision: str) -> None:
    assert isinstance(checkpoint_for(model, precision, "vllm"), str)


def test_unknown_model_declared_is_accepted_from_the_plan() -> None:
    chosen = checkpoint_for("acme/house-model-13b", "int4-awq", "vllm", declared=True)
    assert isinstance(chosen, Checkpoint)
    assert chosen.source == "plan" and chosen.repo == "acme/house-model-13b"
    assert chosen.note.startswith("assumed: acme/house-model-13b holds int4-awq weights")


def test_a_catalogued_model_is_not_taken_on_the_plan_word() -> None:
    # Its name is its public repository: listing AWQ does not make deepseek-ai/DeepSeek-V3 hold AWQ weights.
    reason = checkpoint_for("deepseek-v3", "int4-awq", "vllm", declared=True)
    assert isinstance(reason, str) and "model.configFile" in reason


def test_unknown_model_quantised_not_declared_is_a_reason() -> None:
    reason = checkpoint_for("acme/house-model-13b", "int4-awq", "vllm")
    assert isinstance(reason, str) and "model.precisions" in reason
    sixteen = checkpoint_for("acme/house-model-13b", "bf16", "tensorrt-llm")
    assert isinstance(sixteen, Checkpoint) and sixteen.repo == "acme/house-model-13b"


def test_gguf_only_when_declared() -> None:
    assert isinstance(checkpoint_for("llama-3.1-8b", "gguf-q4_k_m", "llama.cpp"), str)
    chosen = checkpoint_for("llama-3.1-8b", "gguf-q4_k_m", "llama.cpp", declared=True)
    assert isinstance(chosen, Checkpoint) and chosen.source == "plan"


def test_reasons_are_ascii() -> None:
    for arch in load_model_catalog():
        for precision in ("bf16", "fp8", "int4-awq", "mxfp4"):
            for engine in ENGINES:
                result = checkpoint_for(arch.repo_id, precision, engine)
                text = result if isinstance(result, str) else repr(result)
                assert text.isascii()


def test_bundled_data_agrees_with_catalog_facts() -> None:
    if not SHARED_FACTS.is_file():
        pytest.skip("shared/catalog-facts is not beside this clone")
    facts = json.loads(SHARED_FACTS.read_text(encoding="utf-8"))
    bundled = _bundled()["models"]
    for key, by_precision in facts.items():
        try:
            repo = resolve_model(key).repo_id
        except CatalogLookupError:
            continue  # a model the catalog does not hold yet (test_architectures.PENDING_MODELS)
        if repo != key:
            continue  # named beside its architecture (DeepSeek-R1): its own rule, tested below
        ours = bundled[repo]
        # The formats and precisions added to the facts on 2026-12-03 (NVFP4, AMD Quark FP8 and MXFP4, all-linear
        # MXFP4 of a dense model) come with the issues on today's models (35) and deployable answers (36).
        known = {p: [r for r in rows if r["format"] not in PENDING_FORMATS and r["repo"] not in PENDING_REPOS]
                 for p, rows in by_precision.items()
                 if p in WEIGHT_PRECISIONS and not (p == "mxfp4" and not resolve_model(key).is_moe)}
        assert set(p for p, rows in known.items() if rows) == set(ours), key
        for precision, rows in known.items():
            if rows:
                assert [(r["repo"], r["source"], r["engines"]) for r in rows] == [
                    (r["repo"], r["source"], r["engines"]) for r in ours[precision]], (key, precision)
                assert [r["kvCache"] for r in rows if r["repo"] not in PENDING_KV] == [
                    r["kvCache"] for r in ours[precision] if r["repo"] not in PENDING_KV], (key, precision)


def test_a_model_named_beside_its_architecture_is_loaded_from_its_own_repository() -> None:
    # DeepSeek-R1 has DeepSeek-V3's architecture and is published, like it, in block-scaled FP8: the engine loads
    # R1's repository, not V3's, and the note says which catalog entry it stands beside.
    r1 = checkpoint_for("deepseek-ai/DeepSeek-R1", "fp8", "sglang")
    assert isinstance(r1, Checkpoint) and r1.repo == "deepseek-ai/DeepSeek-R1" and r1.format == "native"
    assert "deepseek-ai/DeepSeek-V3" in r1.note
    v3 = checkpoint_for("deepseek-ai/DeepSeek-V3", "fp8", "sglang")
    assert isinstance(v3, Checkpoint) and v3.repo == "deepseek-ai/DeepSeek-V3"
