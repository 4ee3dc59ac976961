"""Weight precisions and KV-cache dtypes: bytes per parameter including quantisation scales.

A quantised checkpoint keeps some tensors unquantised: AWQ/GPTQ/FP8/NVFP4 checkpoints keep the token embedding
and the LM head in 16 bits, MXFP4 (gpt-oss) quantises only the MoE experts, GGUF and MLC quantise
everything (GGUF mixes block types per tensor; the figure here is the file's average bits per weight).

MXFP4 comes under two names because what it quantises differs and the weight bytes follow the name: `mxfp4` is
gpt-oss's (the MoE experts only, the scenario format's `mxfp4`), `mxfp4-w4a4` AMD Quark's (every linear layer,
weights and activations in MXFP4 on CDNA 4). The checkpoint catalog keeps Quark's repositories under
`mxfp4-w4a4` (format `quark-mxfp4`).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.planner.names import CatalogLookupError, normalize_name


@dataclass(frozen=True)
class WeightPrecision:
    """How one weight format stores parameters and what the matmuls compute in.

    bits_per_param: average bits of a quantised parameter, scales and zero points included.
    quantizes: which parameters use `bits_per_param`; the rest stay 16-bit:
      "all" (GGUF, MLC), "linear" (every linear layer but embedding and LM head), "experts" (MoE experts),
      "inner-ffn" (a dense model's feed-forward layers but the first and the last layer's: Meta's FP8 recipe for
      Llama 3.1 405B, whose attention projections stay 16-bit; a checkpoint's scope, `Checkpoint.quantizes`).
    compute: the tensor-core dtype of the matmuls: "fp16" (16-bit activations, weight-only quantisation
      dequantises on the fly), "fp8" or "int8" (weights and activations in 8 bits), "fp4" (weights and activations
      in 4 bits on FP4 tensor cores: NVFP4 on Blackwell, MXFP4 on CDNA 4; on other GPUs an engine that runs the
      format at all dequantises the weights to 16-bit math, which `checkpoints.gpu_problem` says where).
    """

    name: str
    bits_per_param: float
    quantizes: str
    compute: str
    description: str

    @property
    def bytes_per_param(self) -> float:
        return self.bits_per_param / 8.0


def _p(name: str, bits: float, quantizes: str, compute: str, description: str) -> WeightPrecision:
    return WeightPrecision(name, bits, quantizes, compute, description)


# Scale overheads: AWQ/GPTQ group 128 with an fp16 scale and a packed zero point per group
# (4 + (16 + 4) / 128 bits); MXFP4 blocks of 32 with an 8-bit shared exponent (4 + 8 / 32); NVFP4 blocks of 16
# with an FP8 E4M3 scale (4 + 8 / 16) and one FP32 scale per tensor (nothing per parameter);
# MLC q4f16_1 groups of 32 with an fp16 scale (4 + 16 / 32); GGUF figures are llama.cpp's quoted
# bits per weight for the whole model file (ggml quantize table).
WEIGHT_PRECISIONS: dict[str, WeightPrecision] = {
    p.name: p
    for p in (
        _p("fp16", 16, "all", "fp16", "unquantised 16-bit"),
        _p("bf16", 16, "all", "fp16", "unquantised 16-bit"),
        _p("fp8", 8, "linear", "fp8", "FP8 weights and activations (W8A8-FP8), per-channel scales"),
        _p("int8-w8a8", 8, "linear", "int8", "INT8 weights and activations (SmoothQuant-style)"),
        _p("int4-awq", 4 + 20 / 128, "linear", "fp16", "AWQ 4-bit weights, group 128, fp16 activations"),
        _p("int4-gptq", 4 + 20 / 128, "linear", "fp16", "GPTQ 4-bit weights, group 128, fp16 activations"),
        _p("int8-gptq", 8 + 24 / 128, "linear", "fp16", "GPTQ 8-bit weights, group 128, fp16 activations"),
        _p("gguf-f16", 16, "all", "fp16", "GGUF F16"),
        _p("gguf-q8_0", 8.5, "all", "fp16", "GGUF Q8_0 (blocks of 32, fp16 scale)"),
        _p("gguf-q6_k", 6.5625, "all", "fp16", "GGUF Q6_K"),
        _p("gguf-q5_k_m", 5.69, "all", "fp16", "GGUF Q5_K_M (mixed Q5_K/Q6_K)"),
        _p("gguf-q4_k_m", 4.89, "all", "fp16", "GGUF Q4_K_M (mixed Q4_K/Q6_K), about 4.9 bits/weight"),
        _p("gguf-q4_0", 4.55, "all", "fp16", "GGUF Q4_0"),
        _p("gguf-q3_k_m", 3.91, "all", "fp16", "GGUF Q3_K_M"),
        _p("gguf-q2_k", 3.35, "all", "fp16", "GGUF Q2_K"),
        _p("mxfp4", 4.25, "experts", "fp16", "MXFP4 MoE experts (gpt-oss); other weights bf16"),
        _p("mxfp4-w4a4", 4 + 8 / 32, "linear", "fp4",
           "MXFP4 weights and activations on every linear layer (AMD Quark), blocks of 32 with an E8M0 scale"),
        _p("nvfp4", 4 + 8 / 16, "linear", "fp4",
           "NVFP4 (E2M1) weights and activations on every linear layer, an FP8 scale per 16 and an FP32 scale per "
           "tensor; embedding and LM head 16-bit"),
        _p("mlc-q4f16_1", 4.5, "all", "fp16", "MLC-LLM 4-bit groups of 32 with fp16 scale"),
    )
}

KV_DTYPE_BYTES: dict[str, float] = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0}


def weight_precision(name: str) -> WeightPrecision:
    """The precision named `name` (case and separators ignored)."""
    key = normalize_name(name)
    for precision in WEIGHT_PRECISIONS.values():
        if normalize_name(precision.name) == key:
            return precision
    from inferplan.planner.names import closest_names

    raise CatalogLookupError("weight precision", name, closest_names(name, WEIGHT_PRECISIONS))


def resolve_kv_dtype(kv_dtype: str, weights: str, engine: str | None = None, checkpoint: str | None = None) -> str:
    """The KV dtype an engine runs with: `kv_dtype` itself unless it is `auto` (the engine's default for
    the checkpoint; docs/engines.md quotes the sources).

    - TensorRT-LLM (`KvCacheConfig.dtype = 'auto'`) follows the checkpoint's `kv_cache_quant_algo`: NVIDIA
      ModelOpt FP8 checkpoints (the nvidia/*-FP8 repositories, NIM, TensorRT-LLM's own quantize step)
      declare an FP8 KV cache. A model vendor's own FP8 repository (Qwen/*-FP8, fine-grained block
      scales) declares none. `checkpoint`: the repository or format when known; None on FP8 weights
      means ModelOpt, TensorRT-LLM's quantisation toolkit.
      On NVFP4 weights it is FP8 only where the checkpoint is known to declare it (`checkpoint` "modelopt":
      the catalog read `kv_cache_quant_algo: FP8` in its hf_quant_config.json); two of the nvidia/*-NVFP4
      repositories read do, the others were not read.
    - vLLM, SGLang and the rest use the model's activation dtype: vLLM reads checkpoint KV scales but
      keeps a 16-bit cache unless `--kv-cache-dtype fp8` is given.
    """
    if kv_dtype != "auto":
        return kv_dtype
    name = (checkpoint or "").lower()
    if engine == "tensorrt-llm" and weights == "fp8":
        if not name or "modelopt" in name or name.startswith("nvidia/") or "nim" in name.split():
            return "fp8"
    if engine == "tensorrt-llm" and weights == "nvfp4" and "modelopt" in name:
        return "fp8"
    return "bf16"


def kv_dtype_bytes(kv_dtype: str, weights: str, engine: str | None = None, checkpoint: str | None = None) -> float:
    """Bytes of one KV element; `auto` resolves as the engine does for the checkpoint (`resolve_kv_dtype`)."""
    resolved = resolve_kv_dtype(kv_dtype, weights, engine, checkpoint)
    try:
        return KV_DTYPE_BYTES[resolved]
    except KeyError:
        raise CatalogLookupError("KV cache dtype", kv_dtype, list(KV_DTYPE_BYTES)) from None
