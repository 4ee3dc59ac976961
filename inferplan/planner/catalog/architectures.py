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
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_PARAMETERS = 1e13
"""Parameter counts above this are treated as a broken config, not a model."""
MAX_REPO_ID_CHARS = 128
"""The longest repo_id: it is the checkpoint the engine loads, which a result holds (Candidate.checkpoint, the
CRD's status) in at most this many characters."""
MAX_LAYERS = 10_000
"""More layers than any model has (the deepest have about 130): per-layer bookkeeping (the attention window of
each layer) would run away with the memory and CPU of whoever resolves the config."""

# Family traits that config.json does not spell out: the modelling code of each
# architecture hard-codes them. Keyed by HF `architectures[0]`.
_GEMMA3 = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}
_QKV_BIAS = {"Qwen2ForCausalLM", "Qwen2MoeForCausalLM"}
_ATTENTION_BIAS = {"GptOssForCausalLM"}  # q, k, v and o projections all carry a bias
_ATTENTION_SINKS = {"GptOssForCausalLM"}  # one learned sink logit per attention head
_EXPERT_BIAS = {"GptOssForCausalLM"}  # expert projections and router carry biases
_ROUTER_CORRECTION_BIAS = {"DeepseekV3ForCausalLM"}  # e_score_correction_bias, one per expert
_SHARED_EXPERT_GATE = {"Qwen2MoeForCausalLM"}  # a hidden -> 1 gate on the shared expert
_QK_NORM = {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", *_GEMMA3}  # RMSNorm over head_dim on q and k
_FOUR_NORMS_PER_LAYER = {"Gemma2ForCausalLM", *_GEMMA3}  # pre and post norms around attention and FFN
_UNGATED_MLP = {"GPTNeoXForCausalLM", "GPTBigCodeForCausalLM", "FalconForCausalLM", "PhiForCausalLM"}

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
    "mtp_layers": "num_nextn_predict_layers",
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
    attends to the full context. `mtp_layers` counts the multi-token-prediction modules the
    checkpoint ships (DeepSeek-V3's `num_nextn_predict_layers`), which engines load only to draft
    tokens for speculative decoding (`mtp_param_count`).
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
    mtp_layers: int = 0
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

    def _moe_ffn_params(self, routed_experts: int) -> int:
        """One MoE layer's feed-forward with `routed_experts` routed experts, its shared experts and its router."""
        return (routed_experts * self._mlp_params(self.expert_intermediate_size) + self._shared_expert_params()
                + self._router_params())

    def _count(self, routed_experts: int) -> int:
        """Total with `routed_experts` experts per MoE layer (all of them, or the active ones)."""
        moe_layers = self.moe_layer_count
        dense_layers = self.num_layers - moe_layers
        per_moe_layer = self._moe_ffn_params(routed_experts)
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

    def mtp_param_count(self) -> int:
        """Parameters of the multi-token-prediction modules [parameters]: per module two norms, the projection of
        the concatenated hidden state and embedding (2h x h) and one decoder layer like the model's last (MoE where
        the model is), and once their own embedding and LM head (DeepSeek-V3's checkpoint holds 685B parameters,
        671B of the model and 14B of its one module). 0 without such modules."""
        if not self.mtp_layers:
            return 0
        h = self.hidden_size
        ffn = self._moe_ffn_params(self.num_experts) if self.is_moe else self._mlp_params(self.intermediate_size)
        module = 2 * h + 2 * h * h + self._attention_params() + self._norms_per_layer() + ffn
        return self.mtp_layers * module + 2 * self.vocab_size * h

    def mtp_active_param_count(self) -> int:
        """Parameters one drafted token passes through in one module: its layer with `experts_per_token` experts,
        the projection and the LM head [parameters]; 0 without modules."""
        if not self.mtp_layers:
            return 0
        h = self.hidden_size
        ffn = self._moe_ffn_params(self.experts_per_token) if self.is_moe else self._mlp_params(self.intermediate_size)
        return 2 * h * h + self._attention_params() + ffn + self.vocab_size * h

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
        "mtp_layers",
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
    if len(arch.repo_id) > MAX_REPO_ID_CHARS:  # it is the checkpoint the engine loads, which a result holds
        raise ValueError(f"repo_id (the checkpoint the engine loads) must be at most {MAX_REPO_ID_CHARS} characters, "
                         f"got {len(arch.repo_id)}: {arch.repo_id[:40]!r}...")
    total = arch.param_count()
    if total > MAX_PARAMETERS:
        size = f"{total:.3g}" if total < 1e300 else f"about 10^{len(str(total)) - 1}"  # ints beyond a float
        raise ValueError(
            f"parameter count {size} exceeds {MAX_PARAMETERS:.0e}: check num_layers, hidden_size, "
            "intermediate_size, vocab_size and num_experts"
        )


# -- Hugging Face config.json ------------------------------------------------------------------


# -- the packaged catalog --------------------------------------------------------------------


