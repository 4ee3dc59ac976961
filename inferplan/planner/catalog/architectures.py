"""Model architectures: the shapes the planner sizes memory and compute from.

One parsing path serves every source of an architecture: the packaged catalog
(`data/models.json`, stored in Hugging Face `config.json` vocabulary), a user's
`config.json` file, and a config dict. Each becomes a frozen `ModelArchitecture`
through `from_hf_config`. An inline architecture written with this module's own
field names goes through `architecture_from_inline` and the same validation.

Counts are plain numbers of parameters; KV sizes are bytes; contexts are tokens.
Nothing here downloads anything or reads files outside the package, except the
path a caller hands to `load_config_json`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferplan.planner.names import CatalogLookupError, closest_names, normalize_name

MAX_PARAMETERS = 1e13
"""Parameter counts above this are treated as a broken config, not a model."""
MAX_LAYERS = 10_000
"""More layers than any model has (the deepest have about 130): per-layer bookkeeping (the attention window of
each layer) would run away with the memory and CPU of whoever resolves the config."""
MAX_CONFIG_BYTES = 4 * 2**20
"""The largest config.json file read (real ones are a few KiB)."""

# Family traits that config.json does not spell out: the modelling code of each
# architecture hard-codes them. Keyed by HF `architectures[0]`.
_GEMMA3 = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}
_QKV_BIAS = {"Qwen2ForCausalLM", "Qwen2MoeForCausalLM"}
_ATTENTION_BIAS = {"GptOssForCausalLM"}  # q, k, v and o projections all carry a bias
_ATTENTION_SINKS = {"GptOssForCausalLM"}  # one learned sink logit per attention head
_EXPERT_BIAS = {"GptOssForCausalLM"}  # expert projections and router carry biases
_ROUTER_CORRECTION_BIAS = {"DeepseekV3ForCausalLM"}  # e_score_correction_bias, one per expert
_SHARED_EXPERT_GATE = {"Qwen2MoeForCausalLM"}  # a hidden -> 1 gate on the shared expert
_LLAMA4 = {"Llama4ForConditionalGeneration", "Llama4ForCausalLM"}
# One shared expert of the routed experts' width in every MoE layer, which the config does not state
# (transformers `Llama4TextMoe.shared_expert = Llama4TextMLP(config)`).
_SHARED_EXPERT_UNSTATED = _LLAMA4
_QK_NORM = {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", *_GEMMA3}  # RMSNorm over head_dim on q and k
_FOUR_NORMS_PER_LAYER = {"Gemma2ForCausalLM", *_GEMMA3}  # pre and post norms around attention and FFN
_ALTERNATING_SLIDING = {"Gemma2ForCausalLM"}  # even layers slide, odd layers are global
_UNGATED_MLP = {"GPTNeoXForCausalLM", "GPTBigCodeForCausalLM", "FalconForCausalLM", "PhiForCausalLM"}
_TIED_BY_DEFAULT_PREFIXES = ("Gemma",)  # families whose config class defaults tie_word_embeddings to true

# Names of dataclass fields as config.json calls them, for error messages.
_CONFIG_KEY = {
    "num_layers": "num_hidden_layers",
    "num_kv_heads": "num_key_value_heads",
    "num_experts": "num_local_experts / num_experts / n_routed_experts",
    "experts_per_token": "num_experts_per_tok",
    "expert_intermediate_size": "moe_intermediate_size",
    "num_shared_experts": "n_shared_experts",
    "first_dense_layers": "first_k_dense_replace / mlp_only_layers / interleave_moe_layer_step",
    "layer_windows": "sliding_window / layer_types",
}


def _field_label(name: str) -> str:
    hf_key = _CONFIG_KEY.get(name)
    return f"{name} (config.json {hf_key})" if hf_key else name


@dataclass(frozen=True)
class ModelArchitecture:
    """The shape of a decoder-only transformer, enough to size weights, KV cache and FLOPs.

    `intermediate_size` is the dense FFN width. In MoE models the experts use
    `expert_intermediate_size`; `intermediate_size` only matters for the dense layers and is
    the config's (Llama 4's `intermediate_size_mlp`, where its `intermediate_size` is the experts').
    `first_dense_layers` is the number of layers of an MoE model whose FFN is dense: DeepSeek's
    leading `first_k_dense_replace`, Qwen's `mlp_only_layers`, or the layers an interleave leaves
    dense (Llama-4 Maverick, `interleave_moe_layer_step` 2: every other layer). Sizes, memory and
    step times depend on the count only, not on where the dense layers sit.
    `head_dim` is the query/key head size; for MLA it is `qk_nope_head_dim + qk_rope_head_dim`
    and the value head is `v_head_dim`. `layer_windows` holds one entry per layer (None for
    full attention, an int for a sliding window in tokens), or is empty when every layer
    attends to the full context.
    """

    repo_id: str
    architecture: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    first_dense_layers: int = 0
    layer_windows: tuple[int | None, ...] = ()
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    aliases: tuple[str, ...] = ()
    params_total_published: float | None = None
    params_active_published: float | None = None
    unverified_fields: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("layer_windows", "aliases", "unverified_fields", "sources"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                if not isinstance(value, list | tuple):  # a number or a string is not a list (tuple("ab") would be)
                    raise ValueError(f"{_field_label(name)} must be a list, got {value!r}")
                object.__setattr__(self, name, tuple(value))
        _validate(self)

    # -- kinds -------------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        """True when the FFN is a routed mixture of experts."""
        return self.num_experts > 0

    @property
    def moe_layer_count(self) -> int:
        """Layers whose FFN is a routed mixture of experts (0 for a dense model)."""
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one latent."""
        return self.kv_lora_rank > 0

    # -- parameter counts --------------------------------------------------------------------

    def embedding_param_count(self) -> int:
        """Input embedding plus the lm_head when it is not tied to it [parameters]."""
        table = self.vocab_size * self.hidden_size
        return table if self.tie_word_embeddings else 2 * table

    def attention_param_count(self) -> int:
        """Parameters of every attention block, their norms included [parameters]."""
        return self.num_layers * self._attention_params()

    def _attention_params(self) -> int:
        """Parameters of one attention block, its norms included [parameters]."""
        h, heads = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            qk_dim = self.head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk_dim
            else:
                q = h * heads * qk_dim
            qk_nope = self.head_dim - self.qk_rope_head_dim
            kv = (
                h * (self.kv_lora_rank + self.qk_rope_head_dim)  # kv_a_proj_with_mqa
                + self.kv_lora_rank  # kv_a_layernorm
                + self.kv_lora_rank * heads * (qk_nope + self.v_head_dim)  # kv_b_proj
            )
            return q + kv + heads * self.v_head_dim * h
        q_out = heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        params = h * (q_out + 2 * kv_out) + q_out * h
        if self.architecture in _QKV_BIAS or self.architecture in _ATTENTION_BIAS:
            params += q_out + 2 * kv_out
        if self.architecture in _ATTENTION_BIAS:
            params += h
        if self.architecture in _ATTENTION_SINKS:
            params += heads
        if self.architecture in _QK_NORM:
            params += 2 * self.head_dim
        return params

    def _mlp_params(self, width: int) -> int:
        """One dense FFN of the given width (gated: gate, up, down) [parameters]."""
        matrices = 2 if self.architecture in _UNGATED_MLP else 3
        params = matrices * self.hidden_size * width
        if self.architecture in _EXPERT_BIAS:
            params += (matrices - 1) * width + self.hidden_size
        return params

    def _router_params(self) -> int:
        params = self.hidden_size * self.num_experts
        if self.architecture in _EXPERT_BIAS or self.architecture in _ROUTER_CORRECTION_BIAS:
            params += self.num_experts
        return params

    def _shared_expert_params(self) -> int:
        if not self.num_shared_experts:
            return 0
        params = self.num_shared_experts * self._mlp_params(self.shared_expert_intermediate_size)
        if self.architecture in _SHARED_EXPERT_GATE:
            params += self.hidden_size
        return params

    def _norms_per_layer(self) -> int:
        count = 4 if self.architecture in _FOUR_NORMS_PER_LAYER else 2
        return count * self.hidden_size

    def _count(self, routed_experts: int) -> int:
        """Total with `routed_experts` experts per MoE layer (all of them, or the active ones)."""
        moe_layers = self.moe_layer_count
        dense_layers = self.num_layers - moe_layers
        per_moe_layer = (
            routed_experts * self._mlp_params(self.expert_intermediate_size)
            + self._shared_expert_params()
            + self._router_params()
        )
        return (
            self.embedding_param_count()
            + self.hidden_size  # final norm
            + self.num_layers * (self._attention_params() + self._norms_per_layer())
            + dense_layers * self._mlp_params(self.intermediate_size)
            + moe_layers * per_moe_layer
        )

    def param_count(self) -> int:
        """All parameters of the language model [parameters].

        Counts embeddings, the lm_head unless tied, attention (with the biases, sinks and
        q/k norms the family has), dense FFNs, every routed and shared expert, routers and
        norms. Not counted: vision towers of multimodal wrappers (only the text decoder is
        described) and DeepSeek's multi-token-prediction module (not used for plain decoding).
        """
        return self._count(self.num_experts)

    def active_param_count(self) -> int:
        """Parameters one token passes through [parameters].

        MoE: `experts_per_token` routed experts plus shared experts, routers, attention,
        dense layers, norms and both embedding tables. Equals `param_count()` for dense models.
        """
        if not self.is_moe:
            return self.param_count()
        return self._count(self.experts_per_token)

    # -- attention layout ---------------------------------------------------------------------

    def _windows(self) -> tuple[int | None, ...]:
        return self.layer_windows or (None,) * self.num_layers

    def full_attention_layers(self) -> int:
        """Number of layers that attend to the whole context."""
        return sum(1 for window in self._windows() if window is None)

    def _kv_bytes_per_token_per_layer(self, kv_dtype_bytes: float) -> float:
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        return 2 * self.num_kv_heads * self.head_dim * kv_dtype_bytes

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV cache bytes of one token when every layer keeps it [bytes/token].

        Per layer: K and V, `2 * num_kv_heads * head_dim * kv_dtype_bytes`; with MLA one latent
        of `(kv_lora_rank + qk_rope_head_dim) * kv_dtype_bytes`. Sliding-window layers are
        counted as well; use `kv_bytes_for_context` for what a sequence really holds.
        """
        return self.num_layers * self._kv_bytes_per_token_per_layer(kv_dtype_bytes)

    def _effective_context_sum(self, context_tokens: Any) -> Any:
        """Sum over layers of the tokens each layer sees: min(window, context) on sliding layers."""
        tokens = np.asarray(context_tokens, dtype=float)
        total = self.full_attention_layers() * tokens
        for window in self._windows():
            if window is not None:
                total = total + np.minimum(tokens, window)
        return total

    def kv_bytes_for_context(self, context_tokens: Any, kv_dtype_bytes: float) -> Any:
        """KV cache bytes one sequence of `context_tokens` tokens holds [bytes].

        Full-attention layers keep every token; sliding layers keep at most their window.
        Accepts a scalar (returns a float) or an array of token counts (returns an array).
        """
        total = self._effective_context_sum(context_tokens) * self._kv_bytes_per_token_per_layer(
            kv_dtype_bytes
        )
        return float(total) if np.ndim(total) == 0 else total

    def attention_flops_per_token(self, context_tokens: Any) -> Any:
        """Attention-score FLOPs for one new token attending to `context_tokens` tokens [FLOP].

        Formula: `2 * num_attention_heads * (qk_dim + v_dim) * sum_over_layers(effective_context)`:
        a multiply-add (2 FLOPs) per element of QK^T (`qk_dim` per head) and of the
        attention-weighted sum of V (`v_dim` per head). Without MLA `qk_dim = v_dim = head_dim`,
        which gives `2 * 2 * heads * head_dim * context` per layer. A sliding layer's effective
        context is `min(window, context)`. MLA uses the un-absorbed dims (qk = nope + rope,
        v = v_head_dim). Projections are not included: they are part of `2 * active params`.
        Accepts a scalar (returns a float) or an array of contexts (returns an array).
        """
        v_dim = self.v_head_dim if self.is_mla else self.head_dim
        per_context_token = 2 * self.num_attention_heads * (self.head_dim + v_dim)
        total = per_context_token * self._effective_context_sum(context_tokens)
        return float(total) if np.ndim(total) == 0 else total


# -- validation ----------------------------------------------------------------------------------


def _validate(arch: ModelArchitecture) -> None:
    """Reject shapes no real model has; every message names the offending field."""
    for field in dataclasses.fields(arch):
        value = getattr(arch, field.name)
        if field.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{_field_label(field.name)} must be an integer, got {value!r}")
    for name in (
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "vocab_size",
        "max_position_embeddings",
    ):
        if getattr(arch, name) <= 0:
            raise ValueError(f"{_field_label(name)} must be > 0, got {getattr(arch, name)}")
    if arch.num_layers > MAX_LAYERS:
        raise ValueError(f"{_field_label('num_layers')} must be <= {MAX_LAYERS}, got {arch.num_layers}")
    for name in (
        "intermediate_size",
        "num_experts",
        "experts_per_token",
        "expert_intermediate_size",
        "num_shared_experts",
        "shared_expert_intermediate_size",
        "first_dense_layers",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_rope_head_dim",
        "v_head_dim",
    ):
        if getattr(arch, name) < 0:
            raise ValueError(f"{_field_label(name)} must be >= 0, got {getattr(arch, name)}")
    if arch.num_attention_heads % arch.num_kv_heads:
        raise ValueError(
            f"num_attention_heads ({arch.num_attention_heads}) is not divisible by "
            f"{_field_label('num_kv_heads')} ({arch.num_kv_heads})"
        )
    if arch.is_moe:
        if not 0 < arch.experts_per_token <= arch.num_experts:
            raise ValueError(
                f"{_field_label('experts_per_token')} must be between 1 and num_experts "
                f"({arch.num_experts}), got {arch.experts_per_token}"
            )
        if arch.expert_intermediate_size <= 0:
            raise ValueError(f"{_field_label('expert_intermediate_size')} must be > 0 for an MoE model")
        if arch.first_dense_layers > arch.num_layers:
            raise ValueError(f"{_field_label('first_dense_layers')} exceeds num_layers ({arch.num_layers})")
    elif arch.experts_per_token or arch.first_dense_layers:
        raise ValueError(f"{_field_label('num_experts')} is 0 but expert fields are set")
    if arch.num_shared_experts and arch.shared_expert_intermediate_size <= 0:
        raise ValueError("shared_expert_intermediate_size must be > 0 when num_shared_experts is set")
    if arch.is_mla and not (0 < arch.qk_rope_head_dim < arch.head_dim and arch.v_head_dim > 0):
        raise ValueError("MLA needs 0 < qk_rope_head_dim < head_dim and v_head_dim > 0")
    if arch.layer_windows:
        if len(arch.layer_windows) != arch.num_layers:
            raise ValueError(
                f"{_field_label('layer_windows')} has {len(arch.layer_windows)} entries for "
                f"{arch.num_layers} layers"
            )
        for window in arch.layer_windows:
            if window is not None and (
                isinstance(window, bool) or not isinstance(window, int) or window <= 0
            ):
                raise ValueError(f"{_field_label('layer_windows')}: window {window!r} is not a positive int")
    if not isinstance(arch.tie_word_embeddings, bool):
        raise ValueError(f"tie_word_embeddings must be true or false, got {arch.tie_word_embeddings!r}")
    if not (isinstance(arch.architecture, str) and arch.architecture):
        raise ValueError(f"architecture must be a non-empty string, got {arch.architecture!r}")
    if not (isinstance(arch.repo_id, str) and arch.repo_id):
        raise ValueError(f"repo_id must be a non-empty string, got {arch.repo_id!r}")
    total = arch.param_count()
    if total > MAX_PARAMETERS:
        size = f"{total:.3g}" if total < 1e300 else f"about 10^{len(str(total)) - 1}"  # ints beyond a float
        raise ValueError(
            f"parameter count {size} exceeds {MAX_PARAMETERS:.0e}: check num_layers, hidden_size, "
            "intermediate_size, vocab_size and num_experts"
        )


# -- Hugging Face config.json ------------------------------------------------------------------


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

    num_layers = _require_int(config, "num_hidden_layers", "n_layer", "num_layers")
    if num_layers > MAX_LAYERS:  # before a per-layer window tuple is built
        raise ValueError(f"config.json field 'num_hidden_layers' must be <= {MAX_LAYERS}, got {num_layers}")
    hidden_size = _require_int(config, "hidden_size", "n_embd", "d_model")
    heads = _require_int(config, "num_attention_heads", "n_head")
    if heads <= 0:
        raise ValueError(f"config.json field 'num_attention_heads' must be > 0, got {heads}")
    kv_heads = (
        heads if config.get("num_key_value_heads") is None else _require_int(config, "num_key_value_heads")
    )
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
        **moe,
    )


def load_config_json(path: str | Path) -> ModelArchitecture:
    """Read a Hugging Face `config.json` file; malformed JSON raises ValueError with path and line."""
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
    try:
        return from_hf_config(config, repo_id=config.get("_name_or_path") or str(path))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


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


# -- the packaged catalog --------------------------------------------------------------------


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


class ModelCatalog:
    """The packaged model architectures, looked up by repo id or alias (case and separators ignored).

    `served` maps an alias to the architecture as that repository's own config.json states it, where it differs
    from the entry's (an -Instruct model's shorter context): the alias, and a short alias naming the same
    repository, resolve to it."""

    def __init__(self, models: list[ModelArchitecture],
                 served: Mapping[str, ModelArchitecture] | None = None) -> None:
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

    def resolve(self, name: str) -> ModelArchitecture:
        """The model a repo id or alias names, with that repository's own context where the catalog records one
        that differs from the entry's (`served`); unknown names raise CatalogLookupError with close names."""
        key = normalize_name(name)
        model = self._served.get(key) or self._by_key.get(key)
        if model is None:
            raise CatalogLookupError("model", name, closest_names(name, self.names()))
        return model

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
        models.append(arch)
    return ModelCatalog(models, served)


def resolve_model(name: str) -> ModelArchitecture:
    """Look a model up in the packaged catalog by repo id or alias."""
    return load_model_catalog().resolve(name)
