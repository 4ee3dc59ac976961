"""Which public repository an engine loads to serve a model at a weight precision (`data/checkpoints.json`).

Rules of `checkpoint_for`, in order:
1. A repository the catalog lists for the precision, when the engine loads its format (`FORMAT_LOADERS`) or the
   entry's source names the engine. The `engines` lists name the engines a model card or tag mentions; they
   are not complete (the nvidia/*-FP8 ModelOpt repositories are TensorRT-LLM's own format even where the card
   names only vLLM), so they only rank: repositories whose source names the engine come first, then data order.
   AMD Quark repositories come after all others: AMD publishes them for Instinct GPUs (the ROCm vLLM guide) and
   the choice here does not know the GPU. A pre-quantised repository is preferred over quantising at load (static
   scales, no start-up cost).
2. Quantising at load (`ONLINE`): FP8 from a 16-bit repository, by vLLM and SGLang (`--quantization fp8`) and
   TGI (`--quantize fp8`). TensorRT-LLM's trtllm-serve and LMDeploy's TurboMind load pre-quantised weights only.
3. bf16 and fp16 are served from the native repository when it is 16-bit (the engine casts with `--dtype`).
   DeepSeek-V3 (FP8 block-scaled) and gpt-oss (MXFP4 experts) publish no 16-bit repository in the catalog.
4. `declared=True` (the plan says its repository holds the precision): when rules 1-3 find nothing, the model
   name is taken as that repository (source "plan"), for a model outside the catalog at a quantised precision
   and for GGUF and MLC precisions, which the catalog does not list. A catalogued model's name is its public
   repository: a precision none of its repositories hold is refused, declared or not.
A model outside the catalog is served at bf16/fp16 from the name as given, and at FP8 by engines that quantise
at load (its repository is assumed 16-bit).

A repository quantised from another model of the same architecture (nvidia/DeepSeek-R1-0528-FP4 beside
DeepSeek-V3, nvidia/Llama-3.1-8B-Instruct-FP8 beside the base Llama-3.1-8B) names that model in `quantizedFrom`: it
serves only a plan naming that model by its repo id (or a former one, `formerNames`), never its siblings, the base
model or a short alias of the entry; those get their own repository quantised at load, where the engine does.

Which GPUs an engine runs a checkpoint on (`gpu_problem`): FP4 formats need FP4 tensor cores except where an engine
dequantises them (vLLM's Marlin kernels for compressed-tensors NVFP4), and some formats are newer than the older
release lines (`FORMAT_SUPPORT`).

What an engine downloads from a repository (`download_bytes`, which sizes the pod's cache): every weight file its
download rule takes (`DOWNLOAD_RULES`), which includes the extra copies some repositories hold
(`repository_files`: Mistral AI's consolidated.safetensors beside the Hugging Face shards).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.engines import engine_profile, parse_version
from inferplan.planner.catalog.model_configs import load_model_catalog, resolve_model
from inferplan.planner.catalog.precisions import WEIGHT_PRECISIONS, WeightPrecision, weight_precision
from inferplan.planner.names import CatalogLookupError, closest_names, normalize_name

SIXTEEN_BIT = ("bf16", "fp16")

# Engines that load each pre-quantised format. Read in this pass: vLLM 0.33.0
# `vllm/model_executor/layers/quantization/__init__.py` (awq, fp8, modelopt, gptq, compressed-tensors, mxfp4,
# gpt_oss_mxfp4), SGLang 0.5.2 `sglang/srt/layers/quantization/__init__.py` (fp8, modelopt, w8a8_int8, awq, gptq,
# compressed-tensors, mxfp4), LMDeploy 0.18.0 `lmdeploy/turbomind/converter.py` 191-213 (awq gemm, gptq,
# blocked fp8, mxfp4, compressed-tensors pack-quantized int4 only; anything else fails an assert).
# Not read: TensorRT-LLM (ModelOpt is its own format; FP8 block scales for DeepSeek-V3 and Qwen FP8, and
# gpt-oss MXFP4, per its model docs), TGI (awq and gptq from its launcher's --quantize list), ExLlama (GPTQ).
# NVFP4 and AMD Quark, read in vLLM 0.11.0 and 0.11.2 `quantization/__init__.py` (modelopt_fp4, compressed-tensors,
# quark), SGLang 0.5.2 (`modelopt_fp4`; `quark` is its Quark loader only on ROCm gfx95x, on CUDA it names the
# gpt-oss MXFP4 loader; compressed-tensors has no FP4 scheme there), and TensorRT-LLM's deployment guides
# (ModelOpt NVFP4 repositories, shared/catalog-facts/checkpoints.json). Meta's FP8 (`fbgemm-fp8`): vLLM's
# `quantization/fbgemm_fp8.py` (0.8.5, 0.9.2, 0.10.1.1 wheels; `fbgemm_fp8` is in the ROCm platform's list too),
# Marlin weight-only below capability 8.9; not in SGLang 0.5.2's list.
FORMAT_LOADERS: dict[str, frozenset[str]] = {
    "native-16bit": frozenset({"vllm", "sglang", "tgi", "tensorrt-llm", "lmdeploy", "mlc-llm"}),
    "native-fp8": frozenset({"vllm", "sglang", "tensorrt-llm", "lmdeploy"}),
    "native-mxfp4": frozenset({"vllm", "sglang", "tensorrt-llm", "lmdeploy"}),
    "fp8-block": frozenset({"vllm", "sglang", "tensorrt-llm", "lmdeploy"}),
    "modelopt-fp8": frozenset({"vllm", "sglang", "tensorrt-llm"}),
    "compressed-tensors-fp8": frozenset({"vllm", "sglang"}),
    "compressed-tensors-int8": frozenset({"vllm", "sglang"}),
    # W4A16 INT4 (LLM Compressor): vLLM's compressed-tensors loader (the card names vLLM). Not listed for SGLang,
    # LMDeploy or TGI: their W4A16 paths were not read for the launch flags a plan would give them.
    "compressed-tensors-w4a16": frozenset({"vllm"}),
    "autofp8": frozenset({"vllm", "sglang"}),
    "awq": frozenset({"vllm", "sglang", "tgi", "lmdeploy"}),
    "gptq": frozenset({"vllm", "sglang", "tgi", "lmdeploy", "exllama"}),
    "modelopt-nvfp4": frozenset({"vllm", "sglang", "tensorrt-llm"}),
    "compressed-tensors-nvfp4": frozenset({"vllm"}),
    "quark-fp8": frozenset({"vllm"}),
    "fbgemm-fp8": frozenset({"vllm"}),
    "quark-mxfp4": frozenset({"vllm", "sglang"}),
}

_BLACKWELL = frozenset({"blackwell"})
_CDNA4 = frozenset({"cdna4"})
_CUDA_SM80_UP = frozenset({"ampere", "ada", "hopper", "blackwell"})
_NVIDIA = frozenset({"volta", "turing", "ampere", "ada", "hopper", "blackwell"})
_NVIDIA_FP8 = frozenset({"ada", "hopper", "blackwell"})


@dataclass(frozen=True)
class FormatSupport:
    """Where one engine runs one checkpoint format: GPU families (None: any the precision allows) and the first
    release read to load it (None: every pinned release line)."""

    families: frozenset[str] | None
    since: tuple[int, ...] | None
    source: str


# (format, engine) -> support, for the formats whose GPUs or releases an engine restricts. Read from the release
# wheels (`pip download --no-deps`) unless the source says otherwise; vLLM 0.6.3.post1 has none of these formats
# (`quantization/modelopt.py` holds ModelOptFp8Config only, and there is no quark package).
FORMAT_SUPPORT: dict[tuple[str, str], FormatSupport] = {
    ("modelopt-nvfp4", "tensorrt-llm"): FormatSupport(
        _BLACKWELL, None, "TensorRT-LLM deployment guides (Llama 3.3 70B, DeepSeek-R1, Llama 4 Scout): 'NVFP4 is only "
        "supported on NVIDIA Blackwell'; the nvidia/*-FP4 model cards: Blackwell"),
    ("modelopt-nvfp4", "vllm"): FormatSupport(
        _BLACKWELL, (0, 11), "vLLM 0.11.0/0.11.2 `quantization/modelopt.py` ModelOptNvFp4LinearMethod: the linear "
        "layers take FlashInfer's FP4 GEMM whenever FlashInfer is installed (a requirement of 0.11.2), which needs "
        "SM100; the Marlin fallback for older GPUs (min capability 80) is reached only without FlashInfer"),
    ("modelopt-nvfp4", "sglang"): FormatSupport(
        _BLACKWELL, (0, 5, 2), "SGLang 0.5.2 `quantization/modelopt_quant.py` ModelOptFp4Config.get_min_capability 100 "
        "(0.4.6.post5: linear layers only, no NVFP4 MoE method)"),
    ("compressed-tensors-nvfp4", "vllm"): FormatSupport(
        _CUDA_SM80_UP, (0, 9, 1), "vLLM 0.11.2 `compressed_tensors/compressed_tensors.py`: W4A4 NVFP4 on GPUs with "
        "CUTLASS FP4 (Blackwell), else CompressedTensorsW4A16Fp4 (Marlin, weight-only, min capability 80) with a "
        "warning; MoE layers likewise (`nvfp4_moe_support.py`); 'vLLM>=0.9.1' per the RedHatAI NVFP4 card"),
    ("quark-mxfp4", "vllm"): FormatSupport(
        _CDNA4, (0, 11, 2), "vLLM 0.11.2 `quark/schemes/quark_w4a4_mxfp4.py` and `quark/quark_moe.py`: "
        "native MXFP4 (AITER) only where `supports_mx()` (ROCm gfx95x); elsewhere weights are dequantised and "
        "activations fake-quantised in 16-bit math ('emulation'), not planned here; 0.11.0 emulates the MoE experts "
        "on gfx950 too"),
    ("quark-mxfp4", "sglang"): FormatSupport(
        _CDNA4, (0, 5, 2), "SGLang 0.5.2 `quantization/__init__.py`: the Quark loader is registered only "
        "on ROCm where `mxfp_supported()` (gfx95x)"),
    ("modelopt-fp8", "vllm"): FormatSupport(
        _NVIDIA_FP8, None, "vLLM 0.11.0, 0.11.2 and 0.12.0 `platforms/rocm.py` supported_quantization (awq, gptq, "
        "fp8, compressed-tensors, fbgemm_fp8, gguf, quark, ptpc_fp8, mxfp4, petit_nvfp4, torchao) has no 'modelopt': "
        "ROCm refuses ModelOpt checkpoints; on AMD GPUs FP8 is quantised at load or read from a compressed-tensors "
        "or Quark repository. `quantization/modelopt.py` ModelOptFp8Config.get_min_capability 89 (0.11.0): no "
        "Ampere either, where FP8 runs weight-only from the other formats (`FP8_WEIGHT_ONLY`)"),
    ("compressed-tensors-int8", "vllm"): FormatSupport(
        frozenset({"turing", "ampere", "ada", "hopper", "cdna3", "cdna4"}), None,
        "vLLM 0.11.0-0.12.0 `quantization/kernels/scaled_mm/__init__.py`: on CUDA the only W8A8 kernel is CUTLASS "
        "(min capability 75), whose SM100/SM120 entry raises 'Int8 not supported for this architecture' (0.11.0 "
        "`_C.abi3.so`; 'Int8 not supported on SM' in 0.11.2 and 0.12.0): no INT8 W8A8 on Blackwell; on ROCm the "
        "AITER and Triton kernels run it"),
    ("quark-fp8", "vllm"): FormatSupport(
        None, (0, 11), "vLLM 0.11.2 `quark/schemes/quark_w8a8_fp8.py` (min capability 89); 'quark' is in the ROCm "
        "platform's supported_quantization"),
}
# Where an engine runs FP8 checkpoints on GPUs without FP8 tensor cores: weight-only, each weight dequantised to 16-bit
# math in a Marlin kernel (W8A16), activations unquantised; engine -> (GPU families, first release, formats). vLLM:
# `Fp8Config.get_min_capability` 80 and `use_marlin` below capability 8.9 for linear and fused-MoE layers, block
# scales included, from 0.9.0 (`quantization/fp8.py` in the 0.9.0, 0.10.x sdists and the 0.11.0 wheel; 0.8.x turns
# Marlin off for block scales and has no FP8 MoE Marlin); compressed-tensors FP8 runs as `CompressedTensorsW8A16Fp8`
# (min capability 80). ModelOpt and Quark FP8 need 8.9 (`FORMAT_SUPPORT`). SGLang 0.5.2's Marlin FP8 imports vLLM's
# kernels and is off without them: not planned.
FP8_WEIGHT_ONLY: dict[str, tuple[frozenset[str], tuple[int, ...], frozenset[str]]] = {
    "vllm": (frozenset({"ampere"}), (0, 9, 0),
             frozenset({"online", "fp8-native", "fp8-block", "autofp8", "compressed-tensors-fp8", "fbgemm-fp8"})),
}


def fp8_weight_only_problem(checkpoint: Checkpoint, engine: str, gpu_family: str,
                            version: str | None = None) -> str | None:
    """Why `engine` (at `version`, None: its current release) cannot run FP8 `checkpoint` weight-only on a GPU of
    `gpu_family` that has no FP8 tensor cores (`FP8_WEIGHT_ONLY`); None where it can."""
    support = FP8_WEIGHT_ONLY.get(engine)
    if support is None or gpu_family not in support[0]:
        return f"{engine} runs FP8 weights only on FP8 tensor cores"
    fmt = "online" if checkpoint.online else checkpoint.launch_format
    if fmt not in support[2]:
        return f"{engine} runs {fmt} checkpoints only on FP8 tensor cores"
    released = parse_version(version)
    if released is not None and released < support[1]:
        return (f"{engine} {version} runs FP8 weights on {gpu_family} GPUs only from "
                f"{'.'.join(map(str, support[1]))} (Marlin, weight-only)")
    return None


# The GPUs a precision runs on where `FORMAT_SUPPORT` has no row for the checkpoint's format and engine (a checkpoint
# the plan declares, a model's own repository): NVFP4 on Blackwell, Quark's MXFP4 on CDNA 4, and gpt-oss's MXFP4
# from compute capability 8.0 (vLLM 0.11.0 and SGLang 0.5.2 `quantization/mxfp4.py`: `Mxfp4Config.get_min_capability`
# 80; on ROCm vLLM's Triton kernels run it).
_PRECISION_FAMILIES: dict[str, frozenset[str]] = {"nvfp4": _BLACKWELL, "mxfp4-w4a4": _CDNA4,
                                                  "mxfp4": _CUDA_SM80_UP | {"cdna3", "cdna4"}}


# Engines that quantise a 16-bit repository at load: precision -> engine -> (how, source).
ONLINE: dict[str, dict[str, tuple[str, str]]] = {
    "fp8": {
        "vllm": ("--quantization fp8 (dynamic FP8)",
                 "vllm 0.33.0 vllm/model_executor/layers/quantization/fp8.py line 388: "
                 "'If checkpoint not serialized fp8, quantize the weights.'"),
        "sglang": ("--quantization fp8",
                   "sglang 0.5.2 sglang/srt/layers/quantization/fp8.py line 817: "
                   "'If checkpoint is fp16 or bfloat16, quantize in place.'"),
        "tgi": ("--quantize fp8",
                "https://huggingface.co/docs/text-generation-inference/reference/launcher (--quantize fp8); "
                "not read from source"),
    },
}


@dataclass(frozen=True)
class Checkpoint:
    """A repository an engine loads, and how it holds the precision."""

    repo: str                 # what the engine loads (Hugging Face id)
    precision: str            # planner precision name
    format: str               # native, modelopt-fp8, ..., or "online" when the engine quantises a 16-bit repo
    kv_cache: str | None      # "fp8" when the checkpoint declares an FP8 KV cache, else None
    online: bool              # True: quantised by the engine at load time (e.g. vLLM --quantization fp8)
    source: str
    note: str = ""
    quantizes: str | None = None  # what it quantises where less than its precision does (`WeightPrecision.quantizes`)

    @property
    def launch_format(self) -> str:
        """The format as `engine_args.engine_launch` takes it: a model published in FP8 (DeepSeek-V3's own
        repository) is "fp8-native" there, where "native" means 16-bit weights."""
        return "fp8-native" if self.format == "native" and self.precision == "fp8" else self.format


def gpu_problem(checkpoint: Checkpoint, engine: str, gpu_family: str, version: str | None = None) -> str | None:
    """Why `engine` (at `version`, None: its current release) cannot run `checkpoint` on a GPU of `gpu_family`, or
    None when it can (`FORMAT_SUPPORT`; for a format not listed there, the precision's FP4 GPUs)."""
    support = FORMAT_SUPPORT.get((checkpoint.format, engine))
    families = support.families if support is not None else _PRECISION_FAMILIES.get(checkpoint.precision)
    if families is not None and gpu_family not in families:
        return (f"{engine} runs {checkpoint.precision} ({checkpoint.format}) only on {', '.join(sorted(families))} "
                f"GPUs, not {gpu_family}")
    released = parse_version(version)
    if support is not None and support.since is not None and released is not None and released < support.since:
        return (f"{engine} {version} does not load {checkpoint.format} checkpoints (first read in "
                f"{'.'.join(map(str, support.since))})")
    return None


@dataclass(frozen=True)
class _Entry:
    checkpoint: Checkpoint
    engines: tuple[str, ...]
    quantized_from: str | None = None  # another model of the key's architecture whose weights these are


@cache
def _data() -> dict[str, Any]:
    text = resources.files("inferplan.planner").joinpath("data/checkpoints.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@cache
def _former_names() -> dict[str, tuple[str, ...]]:
    """Repo ids each model was published under before a rename (`formerNames`), by its current repo id."""
    return {repo: tuple(names) for repo, names in _data()["formerNames"].items()}


@cache
def _catalog() -> dict[str, dict[str, tuple[_Entry, ...]]]:
    data = _data()
    catalog: dict[str, dict[str, tuple[_Entry, ...]]] = {}
    for repo_id, by_precision in data["models"].items():
        catalog[repo_id] = {
            precision: tuple(
                _Entry(Checkpoint(repo=row["repo"], precision=precision, format=row["format"],
                                  kv_cache=row["kvCache"], online=False, source=row["source"],
                                  note=row.get("note", ""), quantizes=row.get("quantizes")),
                       tuple(row["engines"]), row.get("quantizedFrom"))
                for row in rows)
            for precision, rows in by_precision.items()
        }
    return catalog


def _model_key(model: str) -> str | None:
    """The catalog repo id `model` names (repo id or alias, as `resolve_model` matches), None if none or if `model`
    is a derivative of it (`ModelCatalog.is_derivative`: other weights of the same architecture, which none of its
    repositories hold; served from its own repository as an uncatalogued model is)."""
    try:
        repo_id = resolve_model(model).repo_id
    except CatalogLookupError:
        return None
    if load_model_catalog().is_derivative(model):
        return None
    return repo_id if repo_id in _catalog() else None


@dataclass(frozen=True)
class NamedCheckpoint:
    """A quantised repository of the catalog that a plan names as its model (`model.name`)."""

    model: str                 # the model whose weights it holds: its quantizedFrom, else the catalog's key
    checkpoint: Checkpoint
    engines: tuple[str, ...]   # the engines its source names (FORMAT_LOADERS has the rest)
    entry: str                 # the catalog's key, whose architecture it has (`model` where that is the key)


@cache
def _quantised_repositories() -> dict[str, NamedCheckpoint]:
    return {normalize_name(entry.checkpoint.repo): NamedCheckpoint(entry.quantized_from or key, entry.checkpoint,
                                                                   entry.engines, key)
            for key, by_precision in _catalog().items() for entries in by_precision.values() for entry in entries
            if entry.checkpoint.format != "native"}


def named_checkpoint(name: str) -> NamedCheckpoint | None:
    """The catalogued quantised repository whose Hugging Face id `name` is (case and separators ignored), e.g.
    nvidia/DeepSeek-R1-FP4 or Qwen/Qwen3-235B-A22B-FP8; None for any other name, a model's own repository among
    them (DeepSeek-R1's block-scaled FP8 is the model's repository, and a model name)."""
    return _quantised_repositories().get(normalize_name(name))


def checkpoint_precision(precision: str, repo: str | None) -> WeightPrecision:
    """Precision `precision` as repository `repo` holds it: a catalogued checkpoint that quantises less than its
    precision does (`Checkpoint.quantizes`: Meta's FP8 Llama 3.1 405B leaves its attention and its first and last
    layers 16-bit) with that scope, any other repository (or None) with the precision's own."""
    base = WEIGHT_PRECISIONS.get(precision) or weight_precision(precision)  # canonical names directly
    named = named_checkpoint(repo) if repo else None
    if named is None or named.checkpoint.quantizes is None or named.checkpoint.precision != base.name:
        return base
    return replace(base, quantizes=named.checkpoint.quantizes)


_HUB_PREFIX = re.compile(r"^(https?://)?(www\.)?(hf\.co|huggingface\.co)/", re.IGNORECASE)


def _bare(name: str) -> str:
    """`name` without an hf.co/ or Hugging Face URL prefix and trailing slashes."""
    return _HUB_PREFIX.sub("", name.strip()).rstrip("/") or name


@cache
def _spellings() -> dict[str, str]:
    """Every catalogued repository id (models, their aliases and former names, quantised repositories) by its
    normalised name."""
    found: dict[str, str] = {}
    for model in load_model_catalog():
        for repo in (model.repo_id, *model.aliases):
            if "/" in repo:
                found.setdefault(normalize_name(repo), repo)
    for names in _former_names().values():
        for repo in names:
            found.setdefault(normalize_name(repo), repo)
    for named in _quantised_repositories().values():
        found.setdefault(normalize_name(named.checkpoint.repo), named.checkpoint.repo)
    return found


def served_repository(name: str) -> str:
    """The repository an engine is given for `model.name`: a catalogued repository as Hugging Face spells it, however
    the plan wrote it (`qwen/qwen3-32b/`, `hf.co/Qwen/Qwen3-32B`: Qwen/Qwen3-32B), any other name without an hf.co/
    prefix and trailing slashes (a short alias stays: `checkpoint_for` finds its repository)."""
    bare = _bare(name)
    return _spellings().get(normalize_name(bare), bare) if "/" in bare else bare


def resolve_served(name: str, variants: bool = False) -> tuple[ModelArchitecture, NamedCheckpoint | None]:
    """The architecture `model.name` plans, and the quantised repository it names where it names one: a model of
    the catalog by repo id or alias (`resolve_model`, which wins), else a catalogued quantised repository of one.
    With `variants` (a scenario line, whose `weights` states the format), else a name that a catalogued model's
    extends only by variant words (`ModelCatalog.variant_of`: `RedHatAI/Qwen2.5-72B-Instruct-FP8-dynamic`).
    Raises CatalogLookupError (the model catalog's) for none of them. An hf.co/ or URL prefix is ignored."""
    written, name = name, _bare(name)
    try:
        return resolve_model(name), None
    except CatalogLookupError as exc:
        named = named_checkpoint(name)
        if named is not None:
            # The model it was quantised from where the catalog names it (with that repository's own context),
            # else its entry (amd/Mixtral-8x22B-Instruct-v0.1-FP8-KV: an -Instruct model not catalogued apart).
            try:
                return resolve_model(named.model), named
            except CatalogLookupError:
                return resolve_model(named.entry), named
        variant = load_model_catalog().variant_of(name) if variants else None
        if variant is not None:
            return variant, None
        # the closest names among the models and the quantised repositories
        repos = [n.checkpoint.repo for n in _quantised_repositories().values()]
        # A path in the image or on a volume (`vllm serve /models/llama`) names no repository the catalogs know.
        local = ("a local path: give that checkpoint's config.json as model.configFile" if
                 written.strip().startswith(("/", "./", "../", "~")) else "")
        raise CatalogLookupError("model", written, closest_names(name, [*exc.suggestions, *repos]), local) from None


def _named(named: NamedCheckpoint, precision: str, engine: str) -> Checkpoint | str:
    """What `checkpoint_for` answers for a plan naming the quantised repository itself: that repository only."""
    checkpoint = named.checkpoint
    if precision != checkpoint.precision:
        return f"{checkpoint.repo} holds {checkpoint.precision} weights, not {precision}"
    if engine not in FORMAT_LOADERS.get(_loader_key(checkpoint), frozenset()) and engine not in named.engines:
        loaders = sorted(FORMAT_LOADERS.get(_loader_key(checkpoint), frozenset()) | set(named.engines))
        return (f"{engine} does not load {checkpoint.format} checkpoints such as {checkpoint.repo}"
                + (f" ({', '.join(loaders)} {'does' if len(loaders) == 1 else 'do'})" if loaders else ""))
    return checkpoint


def _loader_key(entry: Checkpoint) -> str:
    if entry.format != "native":
        return entry.format
    return "native-16bit" if entry.precision in SIXTEEN_BIT else f"native-{entry.precision}"


_REPO_SUFFIX = re.compile(r"-(hf|v\d+(\.\d+)*)$", re.IGNORECASE)  # Llama 2's -hf, Mistral AI's -v0.1


def _repository_named(model: str) -> str | None:
    """The repository `model` names: itself where it has an organisation, else the catalogued repository id whose
    last part the short alias is, a trailing -hf or version aside (`llama-3.1-8b-instruct`:
    meta-llama/Llama-3.1-8B-Instruct; `llama-2-7b-chat`: meta-llama/Llama-2-7b-chat-hf; `deepseek-r1`:
    deepseek-ai/DeepSeek-R1); None for a short name of no catalogued repository (the entry's own then)."""
    if "/" in model:
        return model
    try:
        arch = resolve_model(model)
    except CatalogLookupError:
        return None
    key = normalize_name(model)
    for repo in (arch.repo_id, *arch.aliases):
        last = repo.rsplit("/", 1)[-1]
        if "/" in repo and key in (normalize_name(last), normalize_name(_REPO_SUFFIX.sub("", last))):
            return repo
    return None


def _names_model(name: str, repo: str) -> bool:
    """Whether `name` (a repo id or its last part, case and separators ignored) is the repository `repo`."""
    return normalize_name(name) in (normalize_name(repo), normalize_name(repo.rsplit("/", 1)[-1]))


def _serves(entry: _Entry, model: str) -> bool:
    """A repository quantised from a sibling model serves only a plan that names that model (its repo id, a former
    one or the id's last part)."""
    source = entry.quantized_from
    return source is None or any(_names_model(model, repo) for repo in (source, *_former_names().get(source, ())))


def known_precisions(model: str) -> dict[str, list[Checkpoint]]:
    """Every repository the catalog lists for `model`, by precision ({} for a model outside the catalog)."""
    key = _model_key(model)
    if key is None:
        return {}
    return {p: [e.checkpoint for e in entries] for p, entries in _catalog()[key].items()}


def native_precision(model: str) -> str | None:
    """The precision of the weights `model` is published in (its native checkpoint's), None for a model outside
    the catalog."""
    native = [c for rows in known_precisions(model).values() for c in rows if c.format == "native"]
    return native[0].precision if native else None


def _native(entries: dict[str, tuple[_Entry, ...]]) -> Checkpoint | None:
    for rows in entries.values():
        for entry in rows:
            if entry.checkpoint.format == "native":
                return entry.checkpoint
    return None


def _plan_checkpoint(model: str, precision: str, why: str) -> Checkpoint:
    return Checkpoint(repo=model, precision=precision, format="native" if precision in SIXTEEN_BIT else "declared",
                      kv_cache=None, online=False, source="plan", note=f"assumed: {model} holds {precision} weights"
                      f" ({why})")


def _online(repo: str, precision: str, engine: str, source_note: str) -> Checkpoint | None:
    how = ONLINE.get(precision, {}).get(engine)
    if how is None:
        return None
    return Checkpoint(repo=repo, precision=precision, format="online", kv_cache=None, online=True, source=how[1],
                      note=f"{engine} quantises the 16-bit weights of {repo} at load ({how[0]}){source_note}")


UNCATALOGUED = ("gguf-", "mlc-")  # precision families the catalog does not list


def checkpoint_for(model: str, precision: str, engine: str, *, declared: bool = False, gpu_family: str | None = None,
                   version: str | None = None) -> Checkpoint | str:
    """The checkpoint `engine` loads to serve `model` at `precision`, or the reason there is none (a string). With
    `gpu_family`, the first catalogued one that `engine` (at `version`) runs on that family (`gpu_problem`), else
    the engine's quantisation at load, else the first catalogued one (whose problem the precision gate states). A
    `model` that names a catalogued quantised repository (`named_checkpoint`) is that repository or nothing."""
    precision = weight_precision(precision).name
    engine = engine_profile(engine).name
    if (named := named_checkpoint(model)) is not None:
        return _named(named, precision, engine)
    key = _model_key(model)
    if key is None:
        if precision in SIXTEEN_BIT:
            return _plan_checkpoint(model, precision, "not in the checkpoint catalog; the model name is the repository")
        online = _online(model, precision, engine, "; the repository is assumed 16-bit")
        if declared:
            return _plan_checkpoint(model, precision, "the plan lists this precision, or its config.json states it")
        if online is not None:
            return online
        return (f"{model} is not in the checkpoint catalog and {engine} does not quantise to {precision} at load: "
                f"list {precision} in model.precisions if your repository holds {precision} weights")
    entries = _catalog()[key]
    native = _native(entries)
    lookup = "bf16" if precision in SIXTEEN_BIT else precision  # the catalog keeps 16-bit repos under bf16
    # A repository that quantises less than its precision does (`Checkpoint.quantizes`: Meta's FP8 405B) serves only a
    # plan that names it (`named_checkpoint`), never as the catalog's choice of the precision: an all-linear
    # repository of the same precision is smaller and faster, and without one so is the engine's quantisation at load.
    candidates = [e for e in entries.get(lookup, ()) if _serves(e, model) and e.checkpoint.quantizes is None and (
        engine in FORMAT_LOADERS.get(_loader_key(e.checkpoint), frozenset()) or engine in e.engines)]
    candidates.sort(key=lambda e: (e.checkpoint.format.startswith("quark-"), engine not in e.engines))  # stable
    # A repository id as the plan gives it (an -Instruct variant the catalog keys under its base model, a
    # fine-tune, DeepSeek-R1 beside DeepSeek-V3), or the one a short alias names, is what the engine loads in the
    # format the model is published in (16-bit, or DeepSeek's block-scaled FP8), and what it quantises at load.
    own = _repository_named(model)
    if gpu_family is not None and candidates:
        runs = [e for e in candidates if gpu_problem(e.checkpoint, engine, gpu_family, version) is None]
        if runs:
            candidates = runs
        elif native is not None and native.precision in SIXTEEN_BIT and (
                online := _online(own or native.repo, precision, engine, "")) is not None:
            return online
    if candidates:
        chosen = candidates[0].checkpoint
        if own and own != chosen.repo and chosen.format == "native":
            chosen = replace(chosen, repo=own, note=f"{own} as the plan names it; the catalog's {chosen.precision} "
                                                    f"repository of this architecture is {chosen.repo}")
        if chosen.precision != precision:  # fp16 served from the 16-bit repository
            return Checkpoint(repo=chosen.repo, precision=precision, format=chosen.format, kv_cache=chosen.kv_cache,
                              online=False, source=chosen.source,
                              note=(chosen.note.rstrip(".") + ". " if chosen.note else "")
                              + f"Served as {precision} (--dtype).")
        return chosen
    if native is not None and native.precision in SIXTEEN_BIT:
        online = _online(own or native.repo, precision, engine, "")
        if online is not None:
            return online
    # GGUF and MLC files are not catalogued: they are served only from a repository the plan declares. Other
    # precisions of a catalogued model are not taken on the plan's word: the model name is the public repository.
    if declared and precision.startswith(UNCATALOGUED):
        return _plan_checkpoint(model, precision, "the plan lists this precision; no such repository is catalogued")
    return _reason(key, model, precision, engine, entries, native)


def _reason(key: str, model: str, precision: str, engine: str, entries: dict[str, tuple[_Entry, ...]],
            native: Checkpoint | None) -> str:
    lookup = "bf16" if precision in SIXTEEN_BIT else precision
    listed = [e for e in entries.get(lookup, ()) if _serves(e, model)]
    siblings = [e for e in entries.get(lookup, ()) if not _serves(e, model)]
    if listed:
        head = (f"no {precision} checkpoint of {key} that {engine} loads is known "
                f"(listed: {', '.join(f'{e.checkpoint.repo} [{e.checkpoint.format}]' for e in listed)})")
    else:
        head = f"no public {precision} checkpoint of {key} is known"
        if native is not None and native.precision not in SIXTEEN_BIT:
            head += f" (its weights ship as {native.precision.upper()})"
        if siblings:
            by_model: dict[str, list[str]] = {}
            for e in siblings:
                by_model.setdefault(str(e.quantized_from), []).append(e.checkpoint.repo)
            head += (" (other models of its architecture have them: "
                     + "; ".join(f"{model}: {', '.join(repos)}" for model, repos in by_model.items()) + ")")
    online_engines = sorted(ONLINE.get(precision, {}))
    if precision.startswith(("gguf-", "mlc-")):
        tail = "GGUF and MLC builds are not in the checkpoint catalog"
    elif precision in SIXTEEN_BIT:
        tail = "no engine turns it into 16-bit weights at load"
    elif native is not None and native.precision in SIXTEEN_BIT and online_engines:
        tail = f"{engine} does not quantise to {precision} at load ({', '.join(online_engines)} do)"
    else:
        tail = f"{engine} does not quantise at load"
    known = "; ".join(f"{p} ({', '.join(e.checkpoint.repo for e in rows)})" for p, rows in entries.items())
    own = (f"list {precision} in model.precisions" if precision.startswith(UNCATALOGUED)
           else "plan it from its config.json (model.configFile) and list "
                f"{precision} in model.precisions")
    return f"{head}; {tail}. Known: {known}. If your own repository holds {precision} weights, {own}"


# ----------------------------------------------------------------------------------------------------------
# What an engine downloads

@dataclass(frozen=True)
class DownloadRule:
    """Which weight files of a Hugging Face repository an engine downloads (config and tokenizer files aside,
    which are small): every `*.safetensors`, in the top level only or also in folders other than `original/`."""

    top_level_only: bool
    source: str

    def takes(self, path: str) -> bool:
        """Whether the repository file `path` is downloaded."""
        if not path.endswith(".safetensors"):
            return False
        return "/" not in path if self.top_level_only else not path.startswith("original/")


# vLLM and SGLang list the repository, download every file matching the first pattern that matches one
# (`*.safetensors`; fnmatch's `*` crosses `/`) except under `original/`, and only then drop the files
# model.safetensors.index.json does not name: a consolidated.safetensors beside the shards is downloaded, then
# ignored.
DOWNLOAD_RULES: dict[str, DownloadRule] = {
    "vllm": DownloadRule(False, "vllm 0.11.2 model_loader/default_loader.py _prepare_weights (allow_patterns "
                                "['*.safetensors', '*.bin'], filter_duplicate_safetensors_files after the download), "
                                "model_loader/weight_utils.py download_weights_from_hf (snapshot_download), "
                                "config/load.py (ignore_patterns default ['original/**/*'])"),
    "sglang": DownloadRule(False, "sglang 0.5.2 srt/model_loader/loader.py _prepare_weights, "
                                  "srt/model_loader/weight_utils.py download_weights_from_hf, "
                                  "srt/configs/load_config.py (ignore_patterns default ['original/**/*'])"),
    "tgi": DownloadRule(True, "inferplan issue 36: TGI 3.3.7 downloads every top-level *.safetensors, "
                              "consolidated.safetensors included (its download code was not read)"),
    "tensorrt-llm": DownloadRule(False, "not read: assumed as vLLM's"),
    "lmdeploy": DownloadRule(False, "not read: assumed as vLLM's"),
}


@dataclass(frozen=True)
class RepositoryFile:
    """A weight file of a repository besides the ones the catalog sizes from the architecture."""

    path: str                 # within the repository
    size_bytes: float | None  # None: a copy of the weights (e.g. Mistral's consolidated.safetensors)
    source: str
    note: str = ""


@cache
def _repository_files() -> dict[str, tuple[RepositoryFile, ...]]:
    data = _data()
    return {normalize_name(repo): tuple(
        RepositoryFile(path=row["path"], size_bytes=None if row["size"] == "weights" else float(row["size"]),
                       source=row["source"], note=row.get("note", ""))
        for row in rows) for repo, rows in data.get("repositoryFiles", {}).items()}


def repository_files(repo: str) -> tuple[RepositoryFile, ...]:
    """The extra weight files the catalog knows `repo` holds (case and separators ignored); () for others."""
    return _repository_files().get(normalize_name(repo), ())


def download_bytes(repo: str, engine: str, weights_bytes: Any) -> Any:
    """Bytes `engine` downloads from `repo` [bytes]: its weights (`weights_bytes`, sized from the architecture)
    plus every extra weight file of `repository_files(repo)` the engine's `DOWNLOAD_RULES` takes (a copy of the
    weights counts `weights_bytes` again; an engine without a rule is taken as vLLM). Accepts a scalar or an
    array of weight sizes."""
    rule = DOWNLOAD_RULES.get(engine, DOWNLOAD_RULES["vllm"])
    extra = [f for f in repository_files(repo) if rule.takes(f.path)]
    copies = sum(1 for f in extra if f.size_bytes is None)
    return weights_bytes * (1 + copies) + sum(f.size_bytes or 0.0 for f in extra)
