"""Checkpoint catalog: which repository an engine loads for a model at a precision."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from inferplan.planner.catalog.checkpoints import (
    DOWNLOAD_RULES,
    FORMAT_LOADERS,
    FORMAT_SUPPORT,
    Checkpoint,
    checkpoint_for,
    download_bytes,
    gpu_problem,
    known_precisions,
    named_checkpoint,
    repository_files,
    resolve_served,
)
from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.model_configs import load_model_catalog, resolve_model
from inferplan.planner.catalog.precisions import WEIGHT_PRECISIONS
from inferplan.planner.names import CatalogLookupError, normalize_name

SHARED_FACTS = Path(__file__).resolve().parents[4] / "shared" / "catalog-facts" / "checkpoints.json"
PENDING_FORMATS: set[str] = set()  # the NVFP4 and AMD Quark formats came with the issue on today's models (35)
# Repositories and KV schemes added to the facts on 2026-12-03 that the catalog takes with the issue on deployable
# answers (36): checkpoints that exist but the catalog does not list yet, and an FP8 KV scheme read since.
PENDING_REPOS: set[str] = set()
PENDING_KV: set[str] = set()
# Repositories the catalog holds from sources of its own, not (yet) in the facts: Meta's FP8 Llama 3.1 405B, whose
# layout is the Llama 3 paper's (section 6.2) and whose weights dstack measured; NVIDIA's
# ModelOpt FP8 and NVFP4 Llama 4 Maverick, which the facts read no source for (their notes list what is unverified).
OWN_REPOS = {"meta-llama/Llama-3.1-405B-Instruct-FP8", "meta-llama/Llama-3.1-405B-FP8",
             "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP4"}
FORMATS = {"native", "modelopt-fp8", "compressed-tensors-fp8", "compressed-tensors-int8", "autofp8", "fp8-block",
           "awq", "gptq", "modelopt-nvfp4", "compressed-tensors-nvfp4", "quark-fp8", "quark-mxfp4", "fbgemm-fp8",
           "compressed-tensors-w4a16"}
# catalog-facts keeps AMD Quark's all-linear MXFP4 under "mxfp4"; the planner calls it "mxfp4-w4a4". Its int4-w4a16
# (LLM Compressor's W4A16 INT4) is the planner's int4-gptq, as `stated_precision` reads such a config.
QUARK_MXFP4 = "mxfp4-w4a4"
FACT_PRECISIONS = {"int4-w4a16": "int4-gptq"}
# The facts' format names that the catalog spells otherwise; "fp8-native" is "native" for a model's own repository
# and "fp8-block" for a vendor's FP8 repository beside it (Qwen/Qwen3-32B-FP8).
FACT_FORMATS = {"bf16-native": "native", "mxfp4-native": "native", "autofp8 (not in enum)": "autofp8",
                "compressed-tensors-w8a8-int8": "compressed-tensors-int8",
                "compressed-tensors-w4a16-int4": "compressed-tensors-w4a16"}


def _planner_precision(precision: str, row: dict) -> str:
    return QUARK_MXFP4 if row["format"] == "quark-mxfp4" else FACT_PRECISIONS.get(precision, precision)


def _catalog_format(key: str, row: dict) -> str:
    if row["format"] == "fp8-native":
        return "native" if row["repo"] == key else "fp8-block"
    return FACT_FORMATS.get(row["format"], row["format"])


def _kv(row: dict) -> str | None:
    return row["kvCache"].split()[0] if row["kvCache"] else None  # "fp8 (pre-calibrated scales)" is fp8


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
    for key, by_precision in data["models"].items():
        for precision, rows in by_precision.items():
            assert precision in WEIGHT_PRECISIONS
            for row in rows:
                assert row["source"].startswith("https://"), row
                assert row["format"] in FORMATS
                assert row["kvCache"] in (None, "fp8")
                assert set(row["engines"]) <= set(ENGINES)
                assert set(row) <= {"repo", "format", "kvCache", "engines", "source", "note", "quantizedFrom",
                                    "quantizes"}
                assert row.get("quantizes") in (None, "inner-ffn"), row  # what WeightPrecision.quantizes knows
                if row.get("quantizes") == "inner-ffn":  # a dense model's scope (memory.inner_ffn_params)
                    assert not resolve_model(key).is_moe, (key, row["repo"])
    names = {normalize_name(name) for name in load_model_catalog().names()}
    for repo, files in data["repositoryFiles"].items():
        assert normalize_name(repo) in names, repo  # a repository a plan can name
        for row in files:
            assert row["source"].startswith("https://") and row["note"].isascii(), row
            assert row["size"] == "weights" or (isinstance(row["size"], int) and row["size"] > 0), row
            assert set(row) <= {"path", "size", "source", "note"}


def test_llama31_8b_fp8_prefers_a_prequantised_repo_over_online() -> None:
    known = known_precisions("meta-llama/Llama-3.1-8B-Instruct")["fp8"]
    for engine in ("vllm", "sglang"):
        chosen = checkpoint_for("meta-llama/Llama-3.1-8B-Instruct", "fp8", engine)
        assert isinstance(chosen, Checkpoint)
        assert not chosen.online and chosen in known
        assert engine in FORMAT_LOADERS[chosen.format]


@pytest.mark.parametrize("name", ["meta-llama/Llama-3.1-8B", "llama-3.1-8b"])
def test_a_base_model_is_not_served_from_its_instruct_models_quantised_repositories(name: str) -> None:
    # The facts keep Llama 3.1's quantised -Instruct repositories under the base model (same architecture, other
    # weights): a plan for the base model, or for the entry's short alias (whose 16-bit repository is the base
    # model's), is served its own weights, quantised at load where the engine does, refused where it does not.
    online = checkpoint_for(name, "fp8", "vllm")
    assert isinstance(online, Checkpoint) and online.online and online.repo == "meta-llama/Llama-3.1-8B"
    assert checkpoint_for(name, "bf16", "vllm").repo == "meta-llama/Llama-3.1-8B"  # type: ignore[union-attr]
    refused = checkpoint_for(name, "fp8", "tensorrt-llm")
    assert isinstance(refused, str)
    assert "have them: meta-llama/Llama-3.1-8B-Instruct: nvidia/Llama-3.1-8B-Instruct-FP8, RedHatAI/" in refused
    assert isinstance(checkpoint_for(name, "int4-awq", "vllm"), str)  # no engine makes AWQ at load


@pytest.mark.parametrize("name", ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct",
                                  "Llama-3.1-8B-Instruct"])
def test_an_instruct_model_is_served_from_its_quantised_repositories_by_any_of_its_names(name: str) -> None:
    # The repo id, the id it had before Meta's rename (formerNames) and the id's last part.
    chosen = checkpoint_for(name, "fp8", "tensorrt-llm")
    assert isinstance(chosen, Checkpoint) and chosen.repo == "nvidia/Llama-3.1-8B-Instruct-FP8"
    awq = checkpoint_for(name, "int4-awq", "vllm")
    assert isinstance(awq, Checkpoint) and awq.repo == "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"


def test_a_repository_quantised_from_another_model_names_one_of_its_entry() -> None:
    # quantizedFrom and formerNames name models of the key's architecture, so that a plan can name them.
    data = _bundled()
    for key, by_precision in data["models"].items():
        for rows in by_precision.values():
            for row in rows:
                source = row.get("quantizedFrom")
                if source is not None and source != "mistralai/Mixtral-8x22B-Instruct-v0.1":  # not catalogued yet
                    assert resolve_model(source).repo_id == key, (key, row["repo"])
    for repo, former in data["formerNames"].items():
        assert all(resolve_model(name).repo_id == resolve_model(repo).repo_id for name in former), repo


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
        # Rows quantised from a sibling model the facts key apart (quantizedFrom: DeepSeek-R1) are compared with that
        # model's facts, below; the -Instruct models' rows are kept under their base model in the facts too.
        apart = {row["repo"] for rows in bundled[repo].values() for row in rows if row.get("quantizedFrom") in facts
                 and any(f["repo"] == row["repo"] for fs in facts[row["quantizedFrom"]].values() for f in fs)}
        ours = {p: own for p, rows in bundled[repo].items()
                if (own := [r for r in rows if r["repo"] not in apart and r["repo"] not in OWN_REPOS])}
        # Repositories added to the facts on 2026-12-03 that come with the issue on deployable answers (36).
        known: dict[str, list[dict]] = {}
        for p, rows in by_precision.items():
            for row in rows:
                if row["format"] not in PENDING_FORMATS and row["repo"] not in PENDING_REPOS:
                    assert _planner_precision(p, row) in WEIGHT_PRECISIONS, (key, p)  # never skipped unseen
                    known.setdefault(_planner_precision(p, row), []).append(row)
        assert set(known) == set(ours), key
        for precision, rows in known.items():
            assert [(r["repo"], r["source"], r["engines"]) for r in rows] == [
                (r["repo"], r["source"], r["engines"]) for r in ours[precision]], (key, precision)
            assert [_kv(r) for r in rows if r["repo"] not in PENDING_KV] == [
                r["kvCache"] for r in ours[precision] if r["repo"] not in PENDING_KV], (key, precision)


def test_every_fact_repository_is_catalogued_as_the_facts_state_it() -> None:
    # One pass over every repository of the facts: it is in the catalog under the planner's precision, with the
    # facts' spelling, format, KV cache, engines and source, kept under the catalogued model whose architecture it
    # has (quantizedFrom naming the model it holds where that is an alias of the entry), and an engine that loads it
    # is given it for that model; a model's own repository (DeepSeek-R1's FP8, Qwen2.5-72B-Instruct's 16 bits) is
    # served from the model's name. Before 2026-12-06 the facts' int4-w4a16 row was skipped, and with it the one
    # public INT4 checkpoint of Llama 4 Scout.
    if not SHARED_FACTS.is_file():
        pytest.skip("shared/catalog-facts is not beside this clone")
    facts = json.loads(SHARED_FACTS.read_text(encoding="utf-8"))
    bundled = _bundled()["models"]
    rows_of = {row["repo"]: (key, precision, row) for key, by_precision in bundled.items()
               for precision, rows in by_precision.items() for row in rows}
    seen = 0
    for model, by_precision in facts.items():
        key = resolve_model(model).repo_id
        for precision, rows in by_precision.items():
            for fact in rows:
                seen += 1
                planner_precision = _planner_precision(precision, fact)
                fmt = _catalog_format(model, fact)
                engines = sorted(set(fact["engines"]) | FORMAT_LOADERS.get(fmt, frozenset())) or ["vllm"]
                if fact["repo"] == model and key != model:  # the model's own repository, named beside its entry
                    chosen = checkpoint_for(model, planner_precision, "vllm")
                    assert isinstance(chosen, Checkpoint) and chosen.repo == model, (model, chosen)
                    continue
                assert fact["repo"] in rows_of, (model, precision, fact["repo"])
                entry, ours_precision, ours = rows_of[fact["repo"]]
                assert (entry, ours_precision) == (key, planner_precision), fact["repo"]
                assert (ours["format"], ours["kvCache"], ours["engines"], ours["source"]) == (
                    fmt, _kv(fact), fact["engines"], fact["source"]), fact["repo"]
                holds = ours.get("quantizedFrom") or key
                if key != model:
                    assert holds == model, fact["repo"]
                chosen = {engine: checkpoint_for(holds, planner_precision, engine) for engine in engines}
                if holds != "mistralai/Mixtral-8x22B-Instruct-v0.1":  # not catalogued apart: named only
                    assert any(isinstance(c, Checkpoint) and c.repo == fact["repo"] for c in chosen.values()) or (
                        fact["repo"] in (c.repo for rows in known_precisions(holds).values() for c in rows)), chosen
    assert seen == sum(len(rows) for by_precision in facts.values() for rows in by_precision.values()) == 89


def test_a_model_named_beside_its_architecture_is_loaded_from_its_own_repository() -> None:
    # DeepSeek-R1 has DeepSeek-V3's architecture and is published, like it, in block-scaled FP8: the engine loads
    # R1's repository, not V3's, and the note says which catalog entry it stands beside.
    r1 = checkpoint_for("deepseek-ai/DeepSeek-R1", "fp8", "sglang")
    assert isinstance(r1, Checkpoint) and r1.repo == "deepseek-ai/DeepSeek-R1" and r1.format == "native"
    assert "deepseek-ai/DeepSeek-V3" in r1.note
    v3 = checkpoint_for("deepseek-ai/DeepSeek-V3", "fp8", "sglang")
    assert isinstance(v3, Checkpoint) and v3.repo == "deepseek-ai/DeepSeek-V3"
    terminus = checkpoint_for("deepseek-ai/DeepSeek-V3.1-Terminus", "fp8", "sglang")  # an alias of V3 as V3.1 is
    assert isinstance(terminus, Checkpoint) and terminus.repo == "deepseek-ai/DeepSeek-V3.1-Terminus"
    assert (terminus.format, terminus.online) == ("native", False)  # its published FP8, not quantised at load


# -- NVFP4, AMD Quark and models beside their architecture (issue 35) ------------------------------------------------


def test_sibling_repositories_agree_with_catalog_facts() -> None:
    # DeepSeek-R1, R1-0528 and V3.1 are aliases of DeepSeek-V3: their quantised repositories are kept under V3 with
    # quantizedFrom naming the model, in the facts' order; their own (native FP8) repositories come from the name.
    if not SHARED_FACTS.is_file():
        pytest.skip("shared/catalog-facts is not beside this clone")
    facts = json.loads(SHARED_FACTS.read_text(encoding="utf-8"))
    bundled = _bundled()["models"]
    for key, by_precision in facts.items():
        repo = resolve_model(key).repo_id
        if repo == key or key == "Qwen/Qwen2.5-72B-Instruct":  # the Instruct variant holds only its native repo
            continue
        for precision, rows in by_precision.items():
            expected = [(r["repo"], r["source"], r["engines"], _kv(r)) for r in rows if r["format"] != "fp8-native"]
            if not expected:
                continue
            ours = [(r["repo"], r["source"], r["engines"], r["kvCache"])
                    for p in {_planner_precision(precision, r) for r in rows}
                    for r in bundled[repo][p] if r.get("quantizedFrom") == key]
            assert ours == expected, (key, precision)


@pytest.mark.parametrize(("model", "engine", "repo"), [
    ("deepseek-ai/DeepSeek-R1", "tensorrt-llm", "nvidia/DeepSeek-R1-FP4"),
    ("deepseek-r1", "sglang", "nvidia/DeepSeek-R1-FP4"),
    ("deepseek-ai/DeepSeek-R1-0528", "tensorrt-llm", "nvidia/DeepSeek-R1-0528-FP4"),
    ("deepseek-ai/DeepSeek-V3.1", "vllm", "nvidia/DeepSeek-V3.1-NVFP4"),
    ("meta-llama/Llama-3.3-70B-Instruct", "tensorrt-llm", "nvidia/Llama-3.3-70B-Instruct-FP4"),
    ("llama-4-scout", "vllm", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-NVFP4"),  # the repo whose source names vLLM
    ("llama-4-scout", "tensorrt-llm", "nvidia/Llama-4-Scout-17B-16E-Instruct-FP4"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "tensorrt-llm", "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP4"),
])
def test_nvfp4_checkpoint_is_the_named_models_own(model: str, engine: str, repo: str) -> None:
    chosen = checkpoint_for(model, "nvfp4", engine)
    assert isinstance(chosen, Checkpoint) and chosen.repo == repo and chosen.precision == "nvfp4"


def test_a_sibling_models_checkpoint_is_never_served() -> None:
    reason = checkpoint_for("deepseek-ai/DeepSeek-V3", "nvfp4", "tensorrt-llm")
    assert isinstance(reason, str)
    assert "deepseek-ai/DeepSeek-R1: nvidia/DeepSeek-R1-FP4, nvidia/DeepSeek-R1-FP4-v2" in reason  # said, not served
    assert isinstance(checkpoint_for("deepseek-ai/DeepSeek-R1", "mxfp4-w4a4", "vllm"), str)  # only R1-0528 has one
    chosen = checkpoint_for("deepseek-ai/DeepSeek-R1-0528", "mxfp4-w4a4", "vllm")
    assert isinstance(chosen, Checkpoint) and chosen.repo == "amd/DeepSeek-R1-0528-MXFP4-Preview"


def test_every_quantised_repository_names_the_model_it_holds() -> None:
    # A plan's model.name may be the quantised repository itself: it resolves to the architecture of the model
    # whose weights it holds, and an engine that loads its format loads exactly it, at its precision only.
    repos = [c for model in load_model_catalog() for rows in known_precisions(model.repo_id).values() for c in rows
             if c.format != "native"]
    assert len(repos) >= 40
    for checkpoint in repos:
        arch, named = resolve_served(checkpoint.repo.upper())  # case and separators ignored, as for models
        assert named is not None and named.checkpoint == checkpoint
        # The model it holds where the catalog names it, else its entry's architecture (an -Instruct model that is
        # no alias of its base entry: amd/Mixtral-8x22B-Instruct-v0.1-FP8-KV).
        holds = named.model if named.model != "mistralai/Mixtral-8x22B-Instruct-v0.1" else named.entry
        assert arch == resolve_model(holds) and arch.repo_id == resolve_model(named.entry).repo_id
        engine = sorted(named.engines or FORMAT_LOADERS[checkpoint.format])[0]
        assert checkpoint_for(checkpoint.repo, checkpoint.precision, engine) == checkpoint
        other = "bf16" if checkpoint.precision != "bf16" else "fp8"
        assert checkpoint_for(checkpoint.repo, other, engine) == (
            f"{checkpoint.repo} holds {checkpoint.precision} weights, not {other}")
    # A model's own repository stays a model name, whatever precision it is published in.
    assert named_checkpoint("deepseek-ai/DeepSeek-R1") is None and named_checkpoint("openai/gpt-oss-120b") is None
    assert resolve_served("meta-llama/Llama-3.1-8B-Instruct")[1] is None
    with pytest.raises(CatalogLookupError) as raised:
        resolve_served("nvidia/DeepSeek-R1-NVFP4")  # a misspelt repository: the closest names include repositories
    assert raised.value.suggestions[0] == "nvidia/DeepSeek-R1-FP4"


def test_quark_formats_keep_their_precisions() -> None:
    mxfp4 = checkpoint_for("llama-3.3-70b-instruct", "mxfp4-w4a4", "vllm")
    assert isinstance(mxfp4, Checkpoint) and mxfp4.format == "quark-mxfp4"
    assert isinstance(checkpoint_for("llama-3.3-70b-instruct", "mxfp4", "vllm"), str)  # gpt-oss's MXFP4: none
    fp8 = known_precisions("llama-3.1-8b")["fp8"]
    assert fp8[-1].format == "quark-fp8" and fp8[-1].kv_cache == "fp8"
    chosen = checkpoint_for("llama-3.1-8b-instruct", "fp8", "vllm")  # the ModelOpt repository stays first
    assert isinstance(chosen, Checkpoint) and chosen.format == "modelopt-fp8"


def _checkpoint(fmt: str, precision: str) -> Checkpoint:
    return Checkpoint(repo="org/model", precision=precision, format=fmt, kv_cache=None, online=False, source="test")


@pytest.mark.parametrize(("fmt", "precision", "engine", "family", "ok"), [
    ("modelopt-nvfp4", "nvfp4", "tensorrt-llm", "blackwell", True),
    ("modelopt-nvfp4", "nvfp4", "tensorrt-llm", "hopper", False),
    ("modelopt-nvfp4", "nvfp4", "vllm", "hopper", False),   # FlashInfer's FP4 GEMM is taken first: SM100 only
    ("modelopt-nvfp4", "nvfp4", "sglang", "blackwell", True),
    ("compressed-tensors-nvfp4", "nvfp4", "vllm", "hopper", True),  # Marlin W4A16 fallback
    ("compressed-tensors-nvfp4", "nvfp4", "vllm", "ampere", True),
    ("compressed-tensors-nvfp4", "nvfp4", "vllm", "cdna3", False),
    ("quark-mxfp4", "mxfp4-w4a4", "vllm", "cdna4", True),
    ("quark-mxfp4", "mxfp4-w4a4", "vllm", "cdna3", False),  # emulated only
    ("quark-mxfp4", "mxfp4-w4a4", "sglang", "blackwell", False),
    ("quark-fp8", "fp8", "vllm", "cdna3", True),
    ("declared", "nvfp4", "vllm", "blackwell", True),  # a plan's own repository: the precision's GPUs
    ("declared", "nvfp4", "vllm", "hopper", False),
    ("modelopt-fp8", "fp8", "vllm", "hopper", True),
    ("modelopt-fp8", "fp8", "vllm", "ampere", False),  # ModelOptFp8Config needs capability 8.9; others run weight-only
    ("compressed-tensors-fp8", "fp8", "vllm", "ampere", True),  # FP8 on Ampere: fp8_weight_only_problem
    ("native", "mxfp4", "vllm", "ampere", True),  # gpt-oss: Mxfp4Config needs capability 8.0 (Marlin below 9.0)
    ("native", "mxfp4", "sglang", "turing", False),
    ("native", "mxfp4", "vllm", "cdna3", True),
])
def test_fp4_formats_run_on_their_gpus(fmt: str, precision: str, engine: str, family: str, ok: bool) -> None:
    problem = gpu_problem(_checkpoint(fmt, precision), engine, family)
    assert (problem is None) == ok, problem
    if problem:
        assert problem.isascii() and family in problem


def test_fp4_formats_need_a_release_that_loads_them() -> None:
    nvfp4 = _checkpoint("modelopt-nvfp4", "nvfp4")
    assert gpu_problem(nvfp4, "vllm", "blackwell", "0.11.0") is None
    assert gpu_problem(nvfp4, "vllm", "blackwell", None) is None  # the current release
    assert "0.6.3" in (gpu_problem(nvfp4, "vllm", "blackwell", "0.6.3.post1") or "")
    assert gpu_problem(_checkpoint("quark-fp8", "fp8"), "vllm", "cdna3", "0.6.3") is not None
    assert gpu_problem(nvfp4, "tensorrt-llm", "blackwell", "0.18.2") is None
    for (fmt, engine), support in FORMAT_SUPPORT.items():
        assert engine in FORMAT_LOADERS[fmt] and support.source.isascii()


@pytest.mark.parametrize("version", ["0.11.0", "0.11.2", "0.12.0", None])
def test_vllm_on_rocm_does_not_load_modelopt_and_blackwell_runs_no_int8_w8a8(version: str | None) -> None:
    # vLLM's ROCm platform lists no 'modelopt' among its quantisations; its only CUDA INT8 W8A8 kernel (CUTLASS)
    # refuses SM100. Both were recommended: nvidia/Llama-3.1-70B-Instruct-FP8 on MI300X, INT8 W8A8 on B200.
    modelopt = _checkpoint("modelopt-fp8", "fp8")
    assert "cdna3" in (gpu_problem(modelopt, "vllm", "cdna3", version) or "")
    assert gpu_problem(modelopt, "vllm", "hopper", version) is None
    assert gpu_problem(modelopt, "tensorrt-llm", "hopper", version) is None
    int8 = _checkpoint("compressed-tensors-int8", "int8-w8a8")
    assert "blackwell" in (gpu_problem(int8, "vllm", "blackwell", version) or "")
    assert gpu_problem(int8, "vllm", "ampere", version) is None and gpu_problem(int8, "vllm", "cdna3", version) is None


@pytest.mark.parametrize("family", [None, "ampere", "ada", "hopper", "blackwell", "cdna3"])
def test_a_checkpoint_that_quantises_less_than_its_precision_is_served_only_by_name(family: str | None) -> None:
    # Meta's FP8 405B keeps its attention 16-bit: 19% larger and slower than an all-linear FP8 repository. Chosen
    # for the model's fp8, it had replaced AMD's FP8-KV repository on MI300X (which vLLM runs tuned) and been
    # planned with all-linear weights; it is loaded only where the plan names it.
    chosen = checkpoint_for("meta-llama/Llama-3.1-405B-Instruct", "fp8", "vllm", gpu_family=family)
    assert not (isinstance(chosen, Checkpoint) and chosen.quantizes is not None), chosen
    named = checkpoint_for("meta-llama/Llama-3.1-405B-Instruct-FP8", "fp8", "vllm", gpu_family=family)
    assert isinstance(named, Checkpoint) and (named.repo, named.quantizes) == (
        "meta-llama/Llama-3.1-405B-Instruct-FP8", "inner-ffn")


def test_the_checkpoint_is_chosen_for_the_gpu_it_runs_on() -> None:
    # The same FP8 plan loads NVIDIA's ModelOpt repository on an H100 and one ROCm loads on an MI300X.
    on_h100 = checkpoint_for("meta-llama/Llama-3.1-70B-Instruct", "fp8", "vllm", gpu_family="hopper")
    on_mi300x = checkpoint_for("meta-llama/Llama-3.1-70B-Instruct", "fp8", "vllm", gpu_family="cdna3",
                               version="0.11.0")
    assert isinstance(on_h100, Checkpoint) and on_h100.format == "modelopt-fp8"
    assert isinstance(on_mi300x, Checkpoint) and on_mi300x.format != "modelopt-fp8"
    assert gpu_problem(on_mi300x, "vllm", "cdna3", "0.11.0") is None
    # Where no catalogued repository runs there and the engine quantises at load, it does so.
    llama33 = checkpoint_for("meta-llama/Llama-3.3-70B-Instruct", "fp8", "vllm", gpu_family="cdna3")
    assert isinstance(llama33, Checkpoint) and gpu_problem(llama33, "vllm", "cdna3") is None


def test_public_fp8_repositories_are_served_not_refused_or_quantised_at_load() -> None:
    # TensorRT-LLM FP8 Llama-3.3-70B was refused for want of a checkpoint, though NVIDIA's recipe names one; Qwen3-235B
    # in FP8 was quantised at load from 470 GB of bf16, though Qwen publishes its block-scaled FP8 weights.
    llama = checkpoint_for("meta-llama/Llama-3.3-70B-Instruct", "fp8", "tensorrt-llm")
    assert isinstance(llama, Checkpoint) and llama.repo == "nvidia/Llama-3.3-70B-Instruct-FP8"
    assert llama.format == "modelopt-fp8"
    qwen = checkpoint_for("Qwen/Qwen3-235B-A22B", "fp8", "vllm")
    assert isinstance(qwen, Checkpoint) and qwen.repo == "Qwen/Qwen3-235B-A22B-FP8" and not qwen.online
    # vLLM keeps the compressed-tensors repository first for Llama-3.3 (its loader on every platform).
    vllm = checkpoint_for("meta-llama/Llama-3.3-70B-Instruct", "fp8", "vllm")
    assert isinstance(vllm, Checkpoint) and vllm.repo.startswith("RedHatAI/")


# ----------------------------------------------------------------------------------------------------------
# What an engine downloads


def test_every_engine_downloads_a_mistral_repositorys_consolidated_copy_too() -> None:
    weights = 14.5e9
    assert [f.path for f in repository_files("mistralai/Mistral-7B-Instruct-v0.3")] == ["consolidated.safetensors"]
    for engine in ("vllm", "sglang", "tgi", "tensorrt-llm", "lmdeploy"):
        assert download_bytes("mistralai/Mistral-7B-Instruct-v0.3", engine, weights) == 2 * weights, engine
    assert download_bytes("meta-llama/Llama-3.1-8B-Instruct", "vllm", weights) == weights  # one copy
    assert list(download_bytes("mistralai/mistral-7b-instruct-v0.2", "tgi", np.array([1.0, 2.0]))) == [2.0, 4.0]


def test_download_rules_follow_each_engines_patterns() -> None:
    assert set(DOWNLOAD_RULES) == {"vllm", "sglang", "tgi", "tensorrt-llm", "lmdeploy"}
    vllm, tgi = DOWNLOAD_RULES["vllm"], DOWNLOAD_RULES["tgi"]
    assert vllm.takes("consolidated.safetensors") and vllm.takes("subfolder/model.safetensors")
    assert not vllm.takes("original/consolidated.00.safetensors")  # vLLM's default --ignore-patterns
    assert not vllm.takes("consolidated.00.pth") and not vllm.takes("pytorch_model.bin")
    assert tgi.takes("consolidated.safetensors") and not tgi.takes("subfolder/model.safetensors")


@pytest.mark.parametrize(("derivative", "base_alias"), [
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "meta-llama/Llama-3.1-8B-Instruct"),
    ("Qwen/QwQ-32B", "Qwen/Qwen2.5-32B-Instruct"),
    # Qwen3-30B-A3B's FP8 and NVFP4 repositories hold the April release's weights, not the 2507 release's.
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", "Qwen/Qwen3-30B-A3B"),
])
def test_a_derivative_is_served_from_its_own_repository_only(derivative: str, base_alias: str) -> None:
    # A distillation or fine-tune of a catalogued architecture is planned with that architecture, but none of the
    # entry's quantised repositories holds its weights: Llama-3.1-8B's INT8 repository is Meta's instruct model.
    arch, named = resolve_served(derivative)
    assert named is None and arch.repo_id == resolve_model(base_alias).repo_id  # the base's architecture
    own = checkpoint_for(derivative, "bf16", "vllm")
    assert isinstance(own, Checkpoint) and own.repo == derivative
    at_load = checkpoint_for(derivative, "fp8", "vllm")
    assert isinstance(at_load, Checkpoint) and (at_load.repo, at_load.online) == (derivative, True)
    for precision in ("int8-w8a8", "int4-awq"):
        assert isinstance(checkpoint_for(derivative, precision, "vllm"), str)
    assert known_precisions(derivative) == {}
    assert known_precisions(base_alias)  # the entry's own names keep its repositories


@pytest.mark.parametrize(("alias", "precision", "engine", "repo"), [
    ("llama-3.1-8b-instruct", "bf16", "vllm", "meta-llama/Llama-3.1-8B-Instruct"),
    ("llama-3.1-8b-instruct", "fp8", "sglang", "nvidia/Llama-3.1-8B-Instruct-FP8"),
    ("llama-2-7b-chat", "bf16", "vllm", "meta-llama/Llama-2-7b-chat-hf"),
    ("codellama-7b-instruct", "bf16", "tgi", "codellama/CodeLlama-7b-Instruct-hf"),
    ("mixtral-8x7b-instruct", "bf16", "vllm", "mistralai/Mixtral-8x7B-Instruct-v0.1"),
    ("qwen2.5-72b-instruct", "bf16", "vllm", "Qwen/Qwen2.5-72B-Instruct"),
    ("gemma-2-9b-it", "bf16", "vllm", "google/gemma-2-9b-it"),
    ("deepseek-r1", "fp8", "sglang", "deepseek-ai/DeepSeek-R1"),
    ("deepseek-v3.1", "fp8", "vllm", "deepseek-ai/DeepSeek-V3.1"),
    ("mistral-7b-instruct-v0.3", "bf16", "vllm", "mistralai/Mistral-7B-Instruct-v0.3"),
    # a short alias of the entry itself keeps the entry's repository
    ("llama-3.1-8b", "bf16", "vllm", "meta-llama/Llama-3.1-8B"),
    ("mistral-7b", "bf16", "vllm", "mistralai/Mistral-7B-v0.1"),
    ("gemma-3-27b", "bf16", "vllm", "google/gemma-3-27b-it"),
])
def test_a_short_alias_loads_the_repository_it_names(alias: str, precision: str, engine: str, repo: str) -> None:
    # A short alias of an instruct, chat or R1 repository loads that repository, as its repo id does: it loaded the
    # entry's own (the base model, DeepSeek-V3) in 16 bits or the published FP8, the -Instruct weights only where
    # a quantised repository was chosen.
    chosen = checkpoint_for(alias, precision, engine)
    assert isinstance(chosen, Checkpoint) and chosen.repo == repo, chosen
    online = checkpoint_for(alias, "fp8", "vllm")
    if isinstance(online, Checkpoint) and online.online:
        assert online.repo == repo


@pytest.mark.parametrize(("written", "repo"), [
    ("Qwen/Qwen3-32B/", "Qwen/Qwen3-32B"),
    ("qwen/qwen3-32b", "Qwen/Qwen3-32B"),
    ("hf.co/Qwen/Qwen3-32B", "Qwen/Qwen3-32B"),
    ("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/", "meta-llama/Llama-3.1-8B-Instruct"),
    ("meta-llama/meta-llama-3.1-8b-instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    ("hf.co/nvidia/DeepSeek-R1-FP4", "nvidia/DeepSeek-R1-FP4"),
])
def test_the_engine_loads_a_repository_as_hugging_face_spells_it(written: str, repo: str) -> None:
    # model.name as users write it (a trailing slash, another case, the hf.co/ or URL prefix) went to the engine
    # verbatim (vllm serve --model Qwen/Qwen3-32B/, which the Hub refuses as a repo id), or was an unknown model.
    from inferplan.planner.request import resolve_plan
    from inferplan.planner.spec_parsing import parse_plan

    data = {"model": {"name": written, "precisions": ["bf16"] if "FP4" not in written else ["nvfp4"]},
            "engine": {"name": "vllm"},
            "workload": {"requestsPerSecond": "1", "promptTokens": {"mean": 500}, "outputTokens": {"mean": 200}},
            "slo": {"ttft": {"maxMs": 2000, "percentile": "p95"}}}
    request = resolve_plan(parse_plan(data))
    assert request.served_model == repo
    assert resolve_served(written)[0] is resolve_served(repo)[0]
    chosen = checkpoint_for(request.served_model, request.precisions[0], "vllm")
    assert isinstance(chosen, Checkpoint) and chosen.repo == repo


def test_a_local_path_as_the_model_name_is_told_to_give_its_config_json() -> None:
    # `vllm serve /models/...` is how images with baked-in weights run; the planner reads architectures from the
    # catalog or a config.json, and said only "unknown model" with catalog names beside it.
    with pytest.raises(CatalogLookupError, match=r"unknown model '/models/Llama-3.1-8B-Instruct'.*model\.configFile"):
        resolve_served("/models/Llama-3.1-8B-Instruct")
    with pytest.raises(CatalogLookupError) as caught:
        resolve_served("acme/not-a-model")
    assert "configFile" not in str(caught.value)
