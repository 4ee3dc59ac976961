"""Reading model architectures: the bundled catalog (data/models.json, `resolve_model`), a Hugging Face config.json
(`from_hf_config`, `load_config_json`) and a plan's inline architecture. `architectures.py` holds the type they
make."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferplan.planner.catalog.architectures import (
    MAX_LAYERS,
    ModelArchitecture,
)
from inferplan.planner.names import CatalogLookupError, closest_names, normalize_name

MAX_CONFIG_BYTES = 4 * 2**20
"""The largest config.json file read (real ones are a few KiB)."""


_LLAMA4 = {"Llama4ForConditionalGeneration", "Llama4ForCausalLM"}


# One shared expert of the routed experts' width in every MoE layer, which the config does not state
# (transformers `Llama4TextMoe.shared_expert = Llama4TextMLP(config)`).
_SHARED_EXPERT_UNSTATED = _LLAMA4


_ALTERNATING_SLIDING = {"Gemma2ForCausalLM"}  # even layers slide, odd layers are global


_TIED_BY_DEFAULT_PREFIXES = ("Gemma",)  # families whose config class defaults tie_word_embeddings to true


# The values transformers' config class gives the keys a family's published config.json leaves out (it writes only
# what differs from them): Gemma 3's text_config omits its vocabulary, context, sliding-window pattern and, for the
# 4B model, its heads (transformers 4.50 `Gemma3TextConfig.__init__`). vLLM reads the file through that class.
_CONFIG_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {"vocab_size": 262208, "max_position_embeddings": 131072, "num_attention_heads": 8,
               "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6},
}
_CONFIG_CLASS_OF = {"Gemma3ForConditionalGeneration": "gemma3", "Gemma3ForCausalLM": "gemma3",
                    "gemma3": "gemma3", "gemma3_text": "gemma3"}


def _get(config: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    """The first of `keys` present with a non-null value."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


def _require_int(config: Mapping[str, Any], *keys: str) -> int:
    value = _get(config, *keys)
    if value is None:
        raise ValueError(f"config.json is missing required field {keys[0]!r}")
    return _as_int(value, keys[0])


def _as_int(value: Any, key: str) -> int:
    # json.loads reads 1e400 as inf and NaN as nan: neither is an integer (int() of them would raise a bare
    # OverflowError / a ValueError without the field's name).
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or (isinstance(value, float) and not math.isfinite(value)) or value != int(value)):
        raise ValueError(f"config.json field {key!r} must be an integer, got {value!r}")
    return int(value)


def _optional_int(config: Mapping[str, Any], *keys: str) -> int:
    value = _get(config, *keys)
    return 0 if value is None else _as_int(value, keys[0])


def _layer_windows(config: Mapping[str, Any], architecture: str, num_layers: int) -> tuple[int | None, ...]:
    """Per-layer attention windows from the config's sliding-window layout (empty = all full)."""
    window = _get(config, "sliding_window")
    if window is not None:
        window = _as_int(window, "sliding_window")
    layer_types = config.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            raise ValueError(f"config.json field 'layer_types' must list one type per layer ({num_layers})")
        windows: list[int | None] = []
        for kind in layer_types:
            if kind == "full_attention":
                windows.append(None)
            elif kind == "sliding_attention":
                if not window:
                    raise ValueError("config.json has sliding_attention layer_types but no 'sliding_window'")
                windows.append(window)
            elif kind == "chunked_attention":
                windows.append(_require_int(config, "attention_chunk_size"))
            else:
                raise ValueError(f"config.json field 'layer_types' has unknown type {kind!r}")
        return _drop_useless_windows(tuple(windows), config)
    if architecture in _LLAMA4:
        return _llama4_windows(config, num_layers)
    if not window:
        return ()
    if "use_sliding_window" in config:  # Qwen2 / Qwen3: off unless switched on, then only upper layers
        if not config["use_sliding_window"]:
            return ()
        first_sliding = _optional_int(config, "max_window_layers")
        windows = tuple(None if i < first_sliding else window for i in range(num_layers))
    elif architecture in _ALTERNATING_SLIDING:
        windows = tuple(window if i % 2 == 0 else None for i in range(num_layers))
    elif config.get("sliding_window_pattern") is not None:  # Gemma 3: every Nth layer is global
        pattern = _as_int(config["sliding_window_pattern"], "sliding_window_pattern")
        if pattern <= 0:
            raise ValueError("config.json field 'sliding_window_pattern' must be > 0")
        windows = tuple(None if (i + 1) % pattern == 0 else window for i in range(num_layers))
    else:  # Mistral, Phi-3 and others apply the window on every layer
        windows = (window,) * num_layers
    return _drop_useless_windows(windows, config)


def _llama4_windows(config: Mapping[str, Any], num_layers: int) -> tuple[int | None, ...]:
    """Llama 4: chunked local attention (`attention_chunk_size` tokens) on the RoPE layers, global attention on
    the NoPE ones. `no_rope_layers` holds 1 for a RoPE layer; absent or empty, every `no_rope_layer_interval`-th
    layer (default 4) is NoPE, as transformers' `Llama4TextConfig` builds it. A chunk keeps at most its length of
    KV per sequence, so it is a window here."""
    chunk = _optional_int(config, "attention_chunk_size")
    if chunk <= 0:
        return ()
    rope = config.get("no_rope_layers") or None
    if rope is None:
        interval = _optional_int(config, "no_rope_layer_interval") or 4
        if interval <= 0:
            raise ValueError("config.json field 'no_rope_layer_interval' must be > 0")
        rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    elif not (isinstance(rope, list) and len(rope) == num_layers and all(v in (0, 1) for v in rope)):
        raise ValueError(f"config.json field 'no_rope_layers' must list 0 or 1 for each layer ({num_layers})")
    return _drop_useless_windows(tuple(chunk if uses_rope else None for uses_rope in rope), config)


def _drop_useless_windows(
    windows: tuple[int | None, ...], config: Mapping[str, Any]
) -> tuple[int | None, ...]:
    """A window as long as the model's context is full attention; all-full layouts become ()."""
    limit = _get(config, "max_position_embeddings")
    if isinstance(limit, int):
        windows = tuple(None if w is not None and w >= limit else w for w in windows)
    return () if all(w is None for w in windows) else windows


def _moe_fields(config: Mapping[str, Any], architecture: str, intermediate_size: int,
                num_layers: int) -> dict[str, int]:
    num_experts = _optional_int(config, "num_local_experts", "num_experts", "n_routed_experts")
    if not num_experts:
        return {}
    expert_width = _optional_int(config, "moe_intermediate_size") or intermediate_size
    shared_width = _optional_int(config, "shared_expert_intermediate_size")
    num_shared = _optional_int(config, "n_shared_experts")
    if shared_width and not num_shared:
        num_shared = 1  # Qwen2-MoE: one shared expert of shared_expert_intermediate_size
    if not num_shared and config.get("n_shared_experts") is None and architecture in _SHARED_EXPERT_UNSTATED:
        num_shared = 1
    if num_shared and not shared_width:
        shared_width = expert_width  # DeepSeek, Llama 4: shared experts are expert-sized
    first_dense = _optional_int(config, "first_k_dense_replace")
    if first_dense > num_layers:
        raise ValueError(
            f"config.json field 'first_k_dense_replace' ({first_dense}) exceeds num_hidden_layers"
        )
    return {
        "num_experts": num_experts,
        "experts_per_token": _require_int(config, "num_experts_per_tok"),
        "expert_intermediate_size": expert_width,
        "num_shared_experts": num_shared,
        "shared_expert_intermediate_size": shared_width,
        "first_dense_layers": num_layers - len(_moe_layers(config, first_dense, num_layers)),
    }


def _layer_indices(config: Mapping[str, Any], key: str) -> list[int]:
    value = config.get(key) or []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ValueError(f"config.json field {key!r} must be a list of layer indices")
    return value


def _moe_layers(config: Mapping[str, Any], first_dense: int, num_layers: int) -> set[int]:
    """Indices of the MoE layers: Llama 4's `moe_layers` where listed, else every layer from `first_dense` on whose
    number is a multiple of the interleave step (`interleave_moe_layer_step`, Qwen's `decoder_sparse_step`:
    layer i is MoE when (i + 1) % step == 0), less Qwen's `mlp_only_layers`."""
    stated = _get(config, "interleave_moe_layer_step", "decoder_sparse_step")
    step = 1 if stated is None else _as_int(stated, "interleave_moe_layer_step")
    if step < 1:
        raise ValueError(f"config.json field 'interleave_moe_layer_step' / 'decoder_sparse_step' must be >= 1, "
                         f"got {step}")
    listed = _layer_indices(config, "moe_layers")
    if listed and not all(0 <= i < num_layers for i in listed):
        raise ValueError(f"config.json field 'moe_layers' has an index outside 0..{num_layers - 1}")
    moe = set(listed) if listed else {i for i in range(first_dense, num_layers) if (i + 1) % step == 0}
    return moe - set(_layer_indices(config, "mlp_only_layers"))


def _kv_heads(config: Mapping[str, Any], heads: int) -> int:
    """KV heads: `num_key_value_heads`, Falcon's `num_kv_heads`, else one for a multi-query config (`multi_query`:
    GPTBigCode/StarCoder, Falcon-7B; vLLM reads it so), else one per attention head."""
    stated = _get(config, "num_key_value_heads", "num_kv_heads")
    if stated is not None:
        return _as_int(stated, "num_key_value_heads" if "num_key_value_heads" in config else "num_kv_heads")
    multi_query = config.get("multi_query")
    if multi_query is not None and not isinstance(multi_query, bool):
        raise ValueError(f"config.json field 'multi_query' must be true or false, got {multi_query!r}")
    return 1 if multi_query else heads


def from_hf_config(config: Mapping[str, Any], repo_id: str | None = None) -> ModelArchitecture:
    """Parse a Hugging Face `config.json` dict into a `ModelArchitecture`.

    Multimodal wrappers are read through their `text_config` (only the text decoder is
    described). `head_dim` is the config's explicit value, else `hidden_size /
    num_attention_heads`; MLA models use `qk_nope_head_dim + qk_rope_head_dim`. Missing
    required fields and absurd values raise `ValueError` naming the field.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a JSON object, got {type(config).__name__}")
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ValueError("config.json field 'architectures' must be a list of strings")
    text = config.get("text_config")
    if text is not None:
        if not isinstance(text, Mapping):
            raise ValueError("config.json field 'text_config' must be an object")
        merged = {k: v for k, v in config.items() if k != "text_config"}
        merged.update(text)
        config = merged
    architecture = architectures[0] if architectures else str(config.get("model_type") or "")
    if not architecture:
        raise ValueError("config.json is missing required field 'architectures'")
    defaults = _CONFIG_CLASS_DEFAULTS.get(_CONFIG_CLASS_OF.get(architecture, ""), {})
    if defaults and "layer_types" in config:  # a newer config lists the layout the pattern would make
        defaults = {k: v for k, v in defaults.items() if k != "sliding_window_pattern"}
    if any(key not in config for key in defaults):
        config = {**defaults, **config}

    num_layers = _require_int(config, "num_hidden_layers", "n_layer", "num_layers")
    if num_layers > MAX_LAYERS:  # before a per-layer window tuple is built
        raise ValueError(f"config.json field 'num_hidden_layers' must be <= {MAX_LAYERS}, got {num_layers}")
    hidden_size = _require_int(config, "hidden_size", "n_embd", "d_model")
    heads = _require_int(config, "num_attention_heads", "n_head")
    if heads <= 0:
        raise ValueError(f"config.json field 'num_attention_heads' must be > 0, got {heads}")
    kv_heads = _kv_heads(config, heads)
    intermediate_size = _require_int(config, "intermediate_size", "ffn_dim", "n_inner")
    moe = _moe_fields(config, architecture, intermediate_size, num_layers)
    if moe and config.get("intermediate_size_mlp") is not None:  # Llama 4: intermediate_size is the experts'
        intermediate_size = _as_int(config["intermediate_size_mlp"], "intermediate_size_mlp")
    kv_lora_rank = _optional_int(config, "kv_lora_rank")
    qk_rope = _optional_int(config, "qk_rope_head_dim")
    v_head_dim = _optional_int(config, "v_head_dim")
    if kv_lora_rank:
        head_dim = _require_int(config, "qk_nope_head_dim") + qk_rope
        kv_heads = heads  # MLA decompresses one latent into every head
    elif config.get("head_dim") is not None:
        head_dim = _as_int(config["head_dim"], "head_dim")
    else:
        if hidden_size % heads:
            raise ValueError(
                f"config.json field 'head_dim' is absent and hidden_size {hidden_size} is not "
                f"divisible by num_attention_heads {heads}"
            )
        head_dim = hidden_size // heads
    if "tie_word_embeddings" in config:
        tied = config["tie_word_embeddings"]
        tied = False if tied is None else tied
        if not isinstance(tied, bool):  # bool("false") is True: a string must not flip the lm_head count
            raise ValueError(f"config.json field 'tie_word_embeddings' must be true or false, got {tied!r}")
    else:
        tied = architecture.startswith(_TIED_BY_DEFAULT_PREFIXES)
    max_positions = _require_int(config, "max_position_embeddings", "n_positions", "max_sequence_length")

    return ModelArchitecture(
        repo_id=repo_id or str(config.get("_name_or_path") or architecture),
        architecture=architecture,
        num_layers=num_layers,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=_require_int(config, "vocab_size"),
        tie_word_embeddings=tied,
        max_position_embeddings=max_positions,
        layer_windows=_layer_windows(config, architecture, num_layers),
        kv_lora_rank=kv_lora_rank,
        q_lora_rank=_optional_int(config, "q_lora_rank"),
        qk_rope_head_dim=qk_rope if kv_lora_rank else 0,
        v_head_dim=v_head_dim if kv_lora_rank else 0,
        mtp_layers=_optional_int(config, "num_nextn_predict_layers"),
        **moe,
    )


def read_config_json(path: str | Path) -> dict[str, Any]:
    """The JSON object of a Hugging Face `config.json` file; malformed JSON raises ValueError with path and line."""
    path = Path(path)
    try:
        if not path.is_file():  # a FIFO would block and /dev/zero never end
            why = "not a regular file" if path.exists() else "no such file"
            raise ValueError(f"{path}: cannot read the file: {why}")
        with path.open("rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ValueError(f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; not a config.json")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the file: {exc}") from exc
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    except (ValueError, RecursionError) as exc:  # an integer of > 4300 digits; nesting deeper than Python's stack
        raise ValueError(f"{path}: unusable JSON: {str(exc)[:200]}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    return config


def load_config_file(path: str | Path, precision_listed: bool = False) -> tuple[ModelArchitecture, str | None]:
    """A `config.json` file's architecture and the weight precision its `quantization_config` states
    (`stated_precision`; None for 16-bit weights, or with `precision_listed` for a method the planner does not
    model, whose precision the plan lists). Problems raise ValueError starting with the path."""
    config = read_config_json(path)
    try:
        arch = from_hf_config(config, repo_id=config.get("_name_or_path") or str(path))
        return arch, stated_precision(config, precision_listed)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def load_config_json(path: str | Path) -> ModelArchitecture:
    """Read a Hugging Face `config.json` file; malformed JSON raises ValueError with path and line."""
    return load_config_file(path, precision_listed=True)[0]


# quantization_config.quant_method -> {bits: precision} of the weight-only integer methods.
_INT_METHODS = {"awq": {4: "int4-awq"}, "gptq": {4: "int4-gptq", 8: "int8-gptq"}}
_QUANT_METHODS = "awq, gptq, fp8, fbgemm_fp8, compressed-tensors, modelopt, mxfp4, quark"


def _compressed_tensors_precision(quant: Mapping[str, Any]) -> str | None:
    """The precision of a compressed-tensors `quantization_config`: its first scheme's weights and activations."""
    groups = quant.get("config_groups")
    scheme = next(iter(groups.values()), None) if isinstance(groups, Mapping) and groups else None
    weights = scheme.get("weights") if isinstance(scheme, Mapping) else None
    if not isinstance(weights, Mapping):
        return None
    inputs = scheme.get("input_activations")
    bits, kind = weights.get("num_bits"), weights.get("type")
    acts = isinstance(inputs, Mapping) and inputs.get("num_bits") is not None
    if kind == "float" and bits == 8:
        return "fp8"
    if kind == "float" and bits == 4:
        return "nvfp4"
    if kind == "int" and bits == 8:
        return "int8-w8a8" if acts else "int8-gptq"
    if kind == "int" and bits == 4 and not acts:
        return "int4-gptq"  # W4A16: the same packed 4-bit groups, dequantised in the matmul
    return None


def _quark_precision(quant: Mapping[str, Any]) -> str | None:
    scheme = quant.get("global_quant_config")
    weight = scheme.get("weight") if isinstance(scheme, Mapping) else None
    dtype = str(weight.get("dtype") or "") if isinstance(weight, Mapping) else ""
    return "fp8" if dtype.startswith("fp8") else "mxfp4-w4a4" if dtype.startswith("fp4") else None


def stated_precision(config: Mapping[str, Any], precision_listed: bool = False) -> str | None:
    """The weight precision (a `precisions.WEIGHT_PRECISIONS` name) that a config.json's `quantization_config` states:
    AWQ and GPTQ by their bits, FP8 (`fp8`, `fbgemm_fp8`, a compressed-tensors or ModelOpt FP8 scheme), INT8 W8A8,
    NVFP4, MXFP4 (gpt-oss) and AMD Quark's FP8 and MXFP4. None when the config states no quantisation. A method or
    scheme outside those raises ValueError naming it, unless `precision_listed` (the plan lists the precision its
    repository holds), which returns None."""
    quant = config.get("quantization_config")
    if quant is None and isinstance(config.get("text_config"), Mapping):
        quant = config["text_config"].get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, Mapping):
        raise ValueError("config.json field 'quantization_config' must be an object")
    method = str(quant.get("quant_method") or "").lower().replace("_", "-")
    precision: str | None = None
    if method in _INT_METHODS:
        bits = quant.get("bits", quant.get("w_bit"))
        precision = _INT_METHODS[method].get(bits) if isinstance(bits, int) else None
    elif method in ("fp8", "fbgemm-fp8"):
        precision = "fp8"
    elif method == "mxfp4":
        precision = "mxfp4"
    elif method == "compressed-tensors":
        precision = _compressed_tensors_precision(quant)
    elif method == "modelopt":
        algo = str(quant.get("quant_algo") or "").upper()
        precision = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo)
    elif method == "quark":
        precision = _quark_precision(quant)
    if precision is None and not precision_listed:
        raise ValueError(
            f"config.json field 'quantization_config' states weights the planner does not model "
            f"(quant_method {quant.get('quant_method')!r}; known: {_QUANT_METHODS}): list the precision your "
            "repository holds in model.precisions")
    return precision


_FIELD_NAMES = {f.name for f in dataclasses.fields(ModelArchitecture)}


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])([A-Z])")


def _snake_case(key: str) -> str:
    return _CAMEL_HUMP.sub(r"_\1", key).lower()


def architecture_from_inline(data: Mapping[str, Any]) -> ModelArchitecture:
    """Build an architecture written inline with this class's field names, snake_case or camelCase.

    `repo_id` defaults to "inline", `architecture` to "LlamaForCausalLM" (a plain gated-MLP
    decoder), `num_kv_heads` to `num_attention_heads`, `head_dim` to `hidden_size /
    num_attention_heads` and `tie_word_embeddings` to false. A dict in `config.json`
    vocabulary (it has `num_hidden_layers` or `architectures`) is parsed by `from_hf_config`.
    Unknown or missing fields and absurd values raise ValueError naming the field.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"an inline architecture must be an object, got {type(data).__name__}")
    if "num_hidden_layers" in data or "architectures" in data or "text_config" in data:
        return from_hf_config(data, repo_id=data.get("repo_id") or data.get("repoId"))
    fields: dict[str, Any] = {}
    for key, value in data.items():
        name = _snake_case(key)
        if name not in _FIELD_NAMES:
            raise ValueError(f"unknown architecture field {key!r}; known: {', '.join(sorted(_FIELD_NAMES))}")
        fields[name] = value
    for name in (
        "num_layers",
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "vocab_size",
        "max_position_embeddings",
    ):
        if fields.get(name) is None:
            raise ValueError(f"inline architecture is missing required field {name!r}")
    fields.setdefault("repo_id", "inline")
    fields.setdefault("architecture", "LlamaForCausalLM")
    fields.setdefault("num_kv_heads", fields["num_attention_heads"])
    fields.setdefault("tie_word_embeddings", False)
    if "head_dim" not in fields:
        for name in ("num_attention_heads", "hidden_size"):  # head_dim is derived from them: check them first
            value = fields[name]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        heads = fields["num_attention_heads"]
        if fields["hidden_size"] % heads:
            raise ValueError("head_dim is absent and hidden_size is not divisible by num_attention_heads")
        fields["head_dim"] = fields["hidden_size"] // heads
    try:
        return ModelArchitecture(**fields)
    except TypeError as exc:  # a list where a number belongs and the like
        raise ValueError(f"inline architecture: {exc}") from exc


class _ServedConfig(BaseModel):
    """The config.json fields in which one of an entry's aliases (a repository of the same weights' architecture,
    e.g. the -Instruct model of a base model) differs from the entry's: its own context. `rope_scaling` is the
    repository's as published (null: none, so the engines allow `max_position_embeddings` tokens; a YaRN
    extension is the user's to set, in a config.json given with model.configFile)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_position_embeddings: int = Field(gt=0)
    rope_scaling: None = None
    sources: list[str] = Field(min_length=1)
    unverified_fields: list[str] = []
    notes: str = ""


class _CatalogEntry(BaseModel):
    """One model in `data/models.json`: its config.json fields plus provenance."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo_id: str = Field(min_length=3)
    aliases: list[str] = []
    # Aliases whose repositories hold other weights of this architecture (a distillation or fine-tune published
    # under its own name): planned and predicted with it, served from their own repository only.
    derivatives: list[str] = []
    served_configs: dict[str, _ServedConfig] = {}
    config: dict[str, Any]
    params_total_published: float | None = Field(default=None, gt=0)
    params_active_published: float | None = Field(default=None, gt=0)
    params_published_as: str | None = None
    unverified_fields: list[str] = []
    sources: list[str] = Field(min_length=1)
    notes: str = ""


class _CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    about: str
    models: list[_CatalogEntry] = Field(min_length=1)


# Words a repository's name adds to a catalogued model's without changing its architecture: the training stage
# (`-Base`, `-Instruct`, `-it`), a release date (`-2507`) and a quantisation format (`-FP8-Dynamic`, `-AWQ`,
# `.w8a8`; a scenario line states the format in `weights`). Whole words of the name's last part, split at `-`,
# `_` and `.`; the rest, compared as `normalize_name` does, is the name's stem (`variant_of`).
VARIANT_WORDS = frozenset({"base", "instruct", "chat", "it", "pt", "hf", "thinking"})
QUANTISED_WORDS = frozenset({"fp8", "dynamic", "static", "awq", "gptq", "int4", "int8", "w8a8", "w4a16", "w8a16",
                             "quantized", "nvfp4", "fp4", "mxfp4", "kv", "bnb", "4bit", "8bit", "gguf"})
_DATE = re.compile(r"^\d{4}$")


def _stem(name: str) -> tuple[str, frozenset[str]]:
    """(the stem of `name`'s last part, the release dates it names)."""
    words = [w for w in re.split(r"[-_.]", name.rsplit("/", 1)[-1].lower()) if w]
    dates = frozenset(w for w in words if _DATE.match(w))
    kept = [w for w in words if w not in VARIANT_WORDS and w not in QUANTISED_WORDS and w not in dates]
    return normalize_name("".join(kept)), dates


class ModelCatalog:
    """The packaged model architectures, looked up by repo id or alias (case and separators ignored).

    `served` maps an alias to the architecture as that repository's own config.json states it, where it differs
    from the entry's (an -Instruct model's shorter context): the alias, and a short alias naming the same
    repository, resolve to it. `derivatives` are aliases whose repositories hold other weights of their entry's
    architecture (`is_derivative`)."""

    def __init__(self, models: list[ModelArchitecture],
                 served: Mapping[str, ModelArchitecture] | None = None, derivatives: Sequence[str] = ()) -> None:
        self._models = list(models)
        self._by_key: dict[str, ModelArchitecture] = {}
        for model in self._models:
            for name in (model.repo_id, *model.aliases):
                key = normalize_name(name)
                other = self._by_key.get(key)
                if other is not None and other is not model:
                    raise ValueError(f"model name {name!r} is claimed by {other.repo_id} and {model.repo_id}")
                self._by_key[key] = model
        self._served: dict[str, ModelArchitecture] = {}
        for repo, arch in (served or {}).items():
            base = self._by_key.get(normalize_name(repo))
            if base is None or base.repo_id != arch.repo_id:
                raise ValueError(f"served config {repo!r} is not an alias of {arch.repo_id}")
            short = normalize_name(repo.rsplit("/", 1)[-1])
            for name in base.aliases:
                if normalize_name(name) in (normalize_name(repo), short):
                    self._served[normalize_name(name)] = arch
        self._derivatives = frozenset(normalize_name(name) for name in derivatives)
        for name in derivatives:
            model = self._by_key.get(normalize_name(name))
            if model is None or normalize_name(name) == normalize_name(model.repo_id):
                raise ValueError(f"derivative {name!r} is not an alias of a catalogued model")

    def is_derivative(self, name: str) -> bool:
        """Whether `name` is a repository of other weights than its entry's (a distillation or fine-tune of the
        same architecture, `derivatives` in data/models.json): no quantised repository of the entry serves it."""
        return normalize_name(name) in self._derivatives

    def resolve(self, name: str) -> ModelArchitecture:
        """The model a repo id or alias names, with that repository's own context where the catalog records one
        that differs from the entry's (`served`); unknown names raise CatalogLookupError with close names."""
        key = normalize_name(name)
        model = self._served.get(key) or self._by_key.get(key)
        if model is None:
            raise CatalogLookupError("model", name, closest_names(name, self.names()))
        return model

    @cached_property
    def _stems(self) -> dict[str, list[tuple[ModelArchitecture, frozenset[str]]]]:
        """Every catalogued name by its stem (`_stem`), with the release dates it names."""
        stems: dict[str, list[tuple[ModelArchitecture, frozenset[str]]]] = {}
        for model in self._models:
            for alias in (model.repo_id, *model.aliases):
                stem, dates = _stem(alias)
                stems.setdefault(stem, []).append((model, dates))
        return stems

    def variant_of(self, name: str) -> ModelArchitecture | None:
        """The one catalogued model whose name `name` extends only by variant words (`VARIANT_WORDS`,
        `QUANTISED_WORDS`, a date), whatever its organisation: `Qwen/Qwen3-8B-Base` and
        `RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8` name Qwen3-8B and Llama-3.1-8B. Where several models share the
        stem (Qwen3-235B-A22B and its -2507 release), the one with a name of the same release date (none for an
        undated name); None where that leaves none or several."""
        stem, dates = _stem(name)
        if not stem:
            return None
        matches: dict[str, ModelArchitecture] = {}
        same_date: set[str] = set()
        for model, own_dates in self._stems.get(stem, ()):
            matches[model.repo_id] = model
            if own_dates == dates:
                same_date.add(model.repo_id)
        if len(matches) > 1:
            matches = {k: v for k, v in matches.items() if k in same_date}
        return next(iter(matches.values())) if len(matches) == 1 else None

    def names(self) -> list[str]:
        """Every repo id and alias the catalog answers to."""
        return [name for model in self._models for name in (model.repo_id, *model.aliases)]

    def __iter__(self) -> Iterator[ModelArchitecture]:
        return iter(self._models)

    def __len__(self) -> int:
        return len(self._models)


def _architecture_from_entry(entry: _CatalogEntry) -> ModelArchitecture:
    arch = from_hf_config(entry.config, repo_id=entry.repo_id)
    return dataclasses.replace(
        arch,
        aliases=tuple(entry.aliases),
        params_total_published=entry.params_total_published,
        params_active_published=entry.params_active_published,
        unverified_fields=tuple(entry.unverified_fields),
        sources=tuple(entry.sources),
    )


@cache
def load_model_catalog() -> ModelCatalog:
    """The packaged catalog (`inferplan/planner/data/models.json`), validated on first use and cached."""
    text = resources.files("inferplan.planner").joinpath("data/models.json").read_text(encoding="utf-8")
    try:
        data = _CatalogFile.model_validate_json(text)
    except ValidationError as exc:
        raise ValueError(f"packaged models.json is invalid: {exc}") from exc
    models = []
    served: dict[str, ModelArchitecture] = {}
    derivatives: list[str] = []
    for entry in data.models:
        try:
            arch = _architecture_from_entry(entry)
            for repo, own in entry.served_configs.items():
                served[repo] = dataclasses.replace(
                    arch, max_position_embeddings=own.max_position_embeddings,
                    unverified_fields=(*arch.unverified_fields, *own.unverified_fields),
                    sources=(*own.sources, *arch.sources))
        except ValueError as exc:
            raise ValueError(f"packaged models.json entry {entry.repo_id}: {exc}") from exc
        if not set(entry.derivatives) <= set(entry.aliases):
            raise ValueError(f"packaged models.json entry {entry.repo_id}: a derivative that is not one of its aliases")
        models.append(arch)
        derivatives += entry.derivatives
    return ModelCatalog(models, served, derivatives)


def resolve_model(name: str) -> ModelArchitecture:
    """Look a model up in the packaged catalog by repo id or alias."""
    return load_model_catalog().resolve(name)
