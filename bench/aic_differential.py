"""Differential check: the planner's kernel step times against NVIDIA AIConfigurator's own estimate (prints only).

Usage (from the repository root; the project must be importable, e.g. PYTHONPATH=.):

    python bench/aic_differential.py [--csv FILE] [--worst N] [--phase both|decode|prefill]
                                     [--gpus SYSTEM ...] [--engines ENGINE ...] [--explain N] [--quiet]

On a grid of configurations that AIConfigurator (`aiconfigurator-core` 0.12.0, Apache-2.0, on PyPI) covers,
the script computes two step times and prints how far apart they are:

  * planner: `decode_step_s(hw, b, isl + osl / 2)` and `prefill_s(hw, isl, b)` (b prompts as one step), with
    `hw = build_hardware(arch, gpu, precision, kv_bytes, engine, factors, tp, 1)` and `factors` the neutral
    engine factors with every overhead at zero (step, sequence, request), so the planner's figure is its kernel
    sum; the `shipped` column repeats it with the shipped factors (`load_factors().engine(name)`);
  * AIC: AIConfigurator's compiled engine for the same model, system, backend, TP (experts split by TP,
    no expert parallelism) and weight / KV dtype (`EngineHandle.compile(...)`, the backend's `current` data
    version): `decode_step_latency(b, isl, osl)` (one decode step of b sequences at KV length
    isl + osl // 2 + 1) and `predict_prefill_latency(b, isl)` (the context phase of b prompts of isl tokens).
    Both are sums of per-op times: GEMMs, attention, all-reduces and the LM head from its measured tables;
    embedding, norms and activation from its bandwidth model; no framework, scheduling or launch overhead.

deviation = planner / AIC - 1. Printed per (GPU, engine) and phase: count, median |deviation|, signed median,
90th percentile of |deviation|, the signed median with the shipped factors, and the worst |deviation| (signed,
with its configuration); then a summary overall and per model kind (dense / MoE), weight dtype, TP, GPU and
engine; per model kind and batch (decode) or prompt length and tokens per step (prefill); per model; the largest
deviations; then the configurations skipped (by reason) and those AIConfigurator could not estimate (by reason,
with where). `--explain N` adds the planner's terms and AIC's per-op times for the worst row of each model kind
and phase and the N largest deviations. `--csv FILE` writes every compared row. Progress lines go to stderr
(`--quiet` drops them); the elapsed time is printed last.

Grid: GPUs a100_sxm, h100_sxm, h200_sxm, b200_sxm, l40s (b300_sxm and gb200 only if the planner's GPU
catalog has them); engines vllm, sglang, tensorrt-llm (AIC backend trtllm); dense Llama-3.1 8B / 70B / 405B,
Qwen3 8B / 32B, MoE Qwen3-30B-A3B, Qwen3-235B-A22B, Mixtral-8x7B, gpt-oss-120b (in its MXFP4 format only: AIC's
weight-only `w4a16_mxfp4` experts, the other GEMMs and the KV 16-bit) and MLA DeepSeek-V3 (a MoE whose attention is
multi-head latent; AIC costs it with its measured MLA tables, except on vLLM, which it prices as plain attention
over the un-absorbed heads; the planner reads the same MLA tables, TensorRT-LLM's for vLLM); TP 1, 2, 4, 8 where
the weights per GPU are at most 90% of its memory; bf16 weights with bf16 KV, and on Ada, Hopper and Blackwell
FP8 weights (per-tensor W8A8) with FP8 KV; decode at batch 1, 16, 128, 512 for (isl, osl) = (128, 128), (1024, 1024),
(4096, 512), (2048, 32768), (32768, 256); prefill of b prompts of isl tokens for b in 1, 4, 32, 256 with
b * isl <= 32768. A point is skipped when weights plus the batch's KV at isl + osl tokens exceed 90% of the
GPU memory.

Needs aiconfigurator-core (with pandas and pyarrow); without it the script prints how to install it
(pip install aiconfigurator-core pyarrow pandas) and exits 0. Asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import logging
import math
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.engines import engine_profile
from inferplan.planner.catalog.gpus import GpuSpec, resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import EngineFactors, load_factors
from inferplan.planner.model.memory import kv_bytes_per_token_per_gpu, weight_bytes
from inferplan.planner.model.performance import (
    allreduce_s,
    attention_flops,
    build_hardware,
    decode_step,
    decode_step_s,
    experts_touched_fraction,
    prefill_s,
)
from inferplan.planner.names import CatalogLookupError

INSTALL_HINT = "pip install aiconfigurator-core pyarrow pandas"

# (AIC system, planner GPU name)
GPUS = (
    ("a100_sxm", "A100-SXM4-80GB"),
    ("h100_sxm", "NVIDIA-H100-80GB-HBM3"),
    ("h200_sxm", "H200-SXM-141GB"),
    ("b200_sxm", "B200"),
    ("l40s", "L40S"),
    ("b300_sxm", "B300"),
    ("gb200", "GB200"),
)
# (planner engine, AIC backend)
ENGINES = (("vllm", "vllm"), ("sglang", "sglang"), ("tensorrt-llm", "trtllm"))
# (planner model, AIC model, kind)
MODELS = (
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B", "dense"),
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", "dense"),
    ("Qwen/Qwen3-32B", "Qwen/Qwen3-32B", "dense"),
    ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B", "dense"),
    ("meta-llama/Llama-3.1-405B-Instruct", "meta-llama/Meta-Llama-3.1-405B", "dense"),
    ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", "moe"),
    ("mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-v0.1", "moe"),
    ("Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B", "moe"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "mla"),
    ("openai/gpt-oss-120b", "openai/gpt-oss-120b", "moe"),
)
MOE_KINDS = ("moe", "mla")  # MLA: DeepSeek-V3, a mixture of experts with multi-head latent attention
SKIPPED_MODELS: tuple[tuple[str, str], ...] = ()
# (name, planner weight precision, KV bytes per element, AIC GEMM/MoE quant mode, AIC KV-cache quant mode)
DTYPES = (
    ("bf16", "bf16", 2.0, "bfloat16", "bfloat16"),
    ("fp8", "fp8", 1.0, "fp8", "fp8"),
)
# A model published in one format only is compared in it: gpt-oss's MXFP4 experts (AIC's weight-only
# `w4a16_mxfp4` MoE, its other GEMMs 16-bit, 16-bit KV), in place of DTYPES.
MODEL_DTYPES = {"openai/gpt-oss-120b": (("mxfp4", "mxfp4", 2.0, "bfloat16", "bfloat16"),)}
MOE_QUANT = {"mxfp4": "w4a16_mxfp4"}  # AIC's MoE quant mode where it differs from the GEMMs'
DTYPE_NAMES = {d[0]: d for dtypes in (DTYPES, *MODEL_DTYPES.values()) for d in dtypes}
FP8_FAMILIES = ("ada", "hopper", "blackwell")
TP_SIZES = (1, 2, 4, 8)
DECODE_BATCHES = (1, 16, 128, 512)
ISL_OSL = ((128, 128), (1024, 1024), (4096, 512), (2048, 32768), (32768, 256))
PREFILL_BATCHES = (1, 4, 32, 256)
PREFILL_MAX_TOKENS = 32768
MEMORY_SHARE = 0.9


@dataclass(frozen=True)
class Config:
    gpu: str          # AIC system
    engine: str       # planner engine
    model: str        # planner model
    kind: str         # dense | moe | mla
    dtype: str
    tp: int
    phase: str        # decode | prefill
    batch: int
    isl: int
    osl: int          # 0 for prefill

    def label(self) -> str:
        shape = f"b={self.batch} isl={self.isl}" + (f" osl={self.osl}" if self.phase == "decode" else "")
        return f"{self.model.split('/')[-1]} {self.dtype} tp{self.tp} {shape}"


@dataclass(frozen=True)
class Row:
    config: Config
    planner_ms: float
    shipped_ms: float
    aic_ms: float
    provenance: str
    version: str

    @property
    def deviation(self) -> float:
        return self.planner_ms / self.aic_ms - 1.0

    @property
    def shipped_deviation(self) -> float:
        return self.shipped_ms / self.aic_ms - 1.0


# -- AIConfigurator --------------------------------------------------------------------------------------------


def aic_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("aiconfigurator_core", "pandas", "pyarrow"))


class Aic:
    """Compiled AIConfigurator engines, one per (model, system, backend, TP, dtype), and their failures."""

    def __init__(self) -> None:
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        import aiconfigurator_core
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.common import DefaultHFModels
        from aiconfigurator_core.sdk.engine import EngineHandle

        try:
            self.version_of_package = dist_version("aiconfigurator-core")
        except PackageNotFoundError:
            self.version_of_package = getattr(aiconfigurator_core, "__version__", "?")
        self._handle = EngineHandle
        self._perf_database = perf_database
        self._known = set(DefaultHFModels)
        self._package = Path(next(iter(importlib.util.find_spec("aiconfigurator_core").submodule_search_locations)))
        self._tmp = Path(tempfile.mkdtemp(prefix="aic-differential-"))
        self._paths: dict[str, str | None] = {}
        self.versions: dict[tuple[str, str], str] = {}

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def config_file(self, model: str) -> Path:
        return self._package / "model_configs" / f"{model.replace('/', '--')}_config.json"

    def model_path(self, model: str) -> str | None:
        """What AIConfigurator is given for `model`: the repo id when it ships the config under it, else a local
        folder holding the config file it packages (no download); None where it has neither."""
        if model not in self._paths:
            if model in self._known:
                self._paths[model] = model
            elif self.config_file(model).is_file():
                folder = self._tmp / model.replace("/", "--")
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.config_file(model), folder / "config.json")
                self._paths[model] = str(folder)
            else:
                self._paths[model] = None
        return self._paths[model]

    def version(self, system: str, backend: str) -> str:
        key = (system, backend)
        if key not in self.versions:
            try:
                self.versions[key] = str(self._perf_database.resolve_query_version(system, backend, "current"))
            except Exception:  # reported as unknown; the compile reports the real error
                self.versions[key] = "?"
        return self.versions[key]

    def compile(self, model: str, moe: bool, system: str, backend: str, tp: int, quant: str, kv: str,
                moe_quant: str | None = None) -> Any:
        path = self.model_path(model)
        if path is None:
            raise LookupError("model not in AIConfigurator's packaged configs")
        kwargs: dict[str, Any] = {"tp_size": tp, "gemm_quant_mode": quant, "kvcache_quant_mode": kv}
        if moe:
            kwargs.update(moe_tp_size=tp, moe_ep_size=1, moe_quant_mode=moe_quant or quant)
        return self._handle.compile(path, system, backend, **kwargs)


def failure_reason(exc: BaseException) -> str:
    """A short, countable reason for an AIConfigurator error (numbers and key details dropped)."""
    text = str(exc).replace("\n", " ")
    text = re.sub(r"^perf database error: ", "", text)
    text = re.split(r" at /| \(| for ContextKey| for GenerationKey|: tried", text)[0]
    text = re.sub(r"\{[^}]*\}", "{..}", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return f"{type(exc).__name__}: {text[:110]}"


# -- the planner -----------------------------------------------------------------------------------------------


def kernel_factors() -> EngineFactors:
    return replace(load_factors().default_engine, step_overhead_ms=0.0, sequence_overhead_ms=0.0,
                   request_overhead_ms=0.0)


def fits(arch: ModelArchitecture, gpu: GpuSpec, precision_name: str, kv_bytes: float, tp: int,
         tokens: float) -> bool:
    weights = weight_bytes(arch, weight_precision(precision_name)) / tp
    kv = float(kv_bytes_per_token_per_gpu(arch, kv_bytes, tp)) * tokens
    return weights + kv <= MEMORY_SHARE * gpu.memory_bytes


def arch_mismatches(arch: ModelArchitecture, config: dict[str, Any]) -> list[str]:
    """Fields where the planner's catalog entry and AIConfigurator's packaged config disagree."""
    pairs = (
        ("num_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
        ("num_attention_heads", "num_attention_heads"), ("num_kv_heads", "num_key_value_heads"),
        ("vocab_size", "vocab_size"), ("intermediate_size", "intermediate_size"),
        ("num_experts", "num_experts"), ("num_experts", "num_local_experts"),
        ("experts_per_token", "num_experts_per_tok"), ("expert_intermediate_size", "moe_intermediate_size"),
    )
    out = []
    for ours, theirs in pairs:
        if theirs in config and config[theirs] is not None and getattr(arch, ours) != config[theirs]:
            if ours == "intermediate_size" and arch.is_moe:
                continue  # MoE: the dense width is unused
            out.append(f"{ours} {getattr(arch, ours)} vs {theirs} {config[theirs]}")
    head_dim = config.get("head_dim") or config.get("hidden_size", 0) // max(config.get("num_attention_heads", 1), 1)
    if arch.is_mla:  # MLA's query/key head is qk_nope_head_dim + qk_rope_head_dim, not hidden_size / heads
        head_dim = config.get("qk_nope_head_dim", 0) + config.get("qk_rope_head_dim", 0)
    if head_dim and head_dim != arch.head_dim:
        out.append(f"head_dim {arch.head_dim} vs {head_dim}")
    return out


# -- the grid --------------------------------------------------------------------------------------------------


def workload(phase_filter: str) -> list[tuple[str, int, int, int]]:
    """(phase, batch, isl, osl) points of one engine."""
    points: list[tuple[str, int, int, int]] = []
    if phase_filter in ("both", "decode"):
        points += [("decode", b, isl, osl) for isl, osl in ISL_OSL for b in DECODE_BATCHES]
    if phase_filter in ("both", "prefill"):
        isls = sorted({isl for isl, _ in ISL_OSL})
        points += [("prefill", b, isl, 0) for isl in isls for b in PREFILL_BATCHES if b * isl <= PREFILL_MAX_TOKENS]
    return points


def run(aic: Aic, phase_filter: str, progress: Callable[[str], None], only_gpus: Sequence[str] | None = None,
        only_engines: Sequence[str] | None = None) -> tuple[list[Row], Counter, Counter, list[str]]:
    rows: list[Row] = []
    skipped: Counter = Counter()
    failed: Counter = Counter()
    notes: list[str] = []
    zero = kernel_factors()
    shipped_factors = load_factors()
    points = workload(phase_filter)

    gpus: list[tuple[str, GpuSpec]] = []
    for system, name in GPUS:
        if only_gpus and system not in only_gpus:
            continue
        try:
            gpus.append((system, resolve_gpu(name)))
        except CatalogLookupError:
            skipped[f"GPU {system}: not in the planner's GPU catalog"] += 1
    for model, reason in SKIPPED_MODELS:
        skipped[f"model {model}: {reason}"] += 1

    models: list[tuple[str, str, str, ModelArchitecture]] = []
    for ours, theirs, kind in MODELS:
        try:
            arch = resolve_model(ours)
        except CatalogLookupError:
            skipped[f"model {ours}: not in the planner's model catalog"] += 1
            continue
        if aic.model_path(theirs) is None:
            skipped[f"model {ours}: AIConfigurator ships no config for {theirs}"] += 1
            continue
        if aic.config_file(theirs).is_file():
            bad = arch_mismatches(arch, json.loads(aic.config_file(theirs).read_text()))
            if bad:
                notes.append(f"{ours} vs AIC {theirs}: " + "; ".join(bad))
        models.append((ours, theirs, kind, arch))

    for system, gpu in gpus:
        for engine, backend in ENGINES:
            if only_engines and engine not in only_engines:
                continue
            profile = engine_profile(engine)
            shipped = shipped_factors.engine(engine)
            version = aic.version(system, backend)
            progress(f"{system} {engine} (AIC {backend} {version})")
            for ours, theirs, kind, arch in models:
                for dtype, precision_name, kv_bytes, quant, kv_mode in MODEL_DTYPES.get(ours, DTYPES):
                    if dtype != "bf16" and gpu.family not in FP8_FAMILIES:
                        continue
                    precision = weight_precision(precision_name)
                    for tp in TP_SIZES:
                        if not fits(arch, gpu, precision_name, kv_bytes, tp, 0.0):
                            continue
                        todo = []
                        for phase, b, isl, osl in points:
                            config = Config(system, engine, ours, kind, dtype, tp, phase, b, isl, osl)
                            if not fits(arch, gpu, precision_name, kv_bytes, tp, b * (isl + osl)):
                                skipped["weights + KV of the batch over 90% of GPU memory"] += 1
                                continue
                            todo.append(config)
                        if not todo:
                            continue
                        where = f"{system} {engine} {kind} {dtype}"
                        try:
                            handle = aic.compile(theirs, kind in MOE_KINDS, system, backend, tp, quant, kv_mode,
                                                 MOE_QUANT.get(dtype))
                        except Exception as exc:  # counted by reason
                            failed[(f"compile: {failure_reason(exc)}", where)] += len(todo)
                            continue
                        hw = build_hardware(arch, gpu, precision, kv_bytes, profile, zero, tp, 1)
                        hw_shipped = build_hardware(arch, gpu, precision, kv_bytes, profile, shipped, tp, 1)
                        for c in todo:
                            try:
                                if c.phase == "decode":
                                    aic_ms = handle.decode_step_latency(c.batch, c.isl, c.osl)
                                else:
                                    aic_ms = handle.predict_prefill_latency(c.batch, c.isl)
                                provenance = handle.last_provenance() or "silicon"
                            except Exception as exc:  # counted by reason
                                failed[(f"{c.phase}: {failure_reason(exc)}", where)] += 1
                                continue
                            if not (aic_ms > 0 and math.isfinite(aic_ms)):
                                failed[(f"{c.phase}: non-positive or non-finite estimate", where)] += 1
                                continue
                            if c.phase == "decode":
                                context = c.isl + c.osl / 2.0
                                ours_ms = float(decode_step_s(hw, c.batch, context)) * 1e3
                                ship_ms = float(decode_step_s(hw_shipped, c.batch, context)) * 1e3
                            else:
                                ours_ms = float(prefill_s(hw, c.isl, c.batch)) * 1e3
                                ship_ms = float(prefill_s(hw_shipped, c.isl, c.batch)) * 1e3
                            rows.append(Row(c, ours_ms, ship_ms, float(aic_ms), provenance, version))
    return rows, skipped, failed, notes


# -- printing --------------------------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def pct(x: float) -> str:
    return f"{100.0 * x:+.0f}%"


def apct(x: float) -> str:
    return f"{100.0 * x:.0f}%"


def table(headers: Sequence[str], body: Iterable[Sequence[str]], right: Sequence[bool]) -> None:
    body = [list(r) for r in body]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def fmt(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True))
        return "| " + " | ".join(padded) + " |"

    print(line)
    print(fmt(headers))
    print(line)
    for r in body:
        print(fmt(r))
    print(line)


GROUP_HEADERS = ("n", "med |dev|", "signed med", "p90 |dev|", "shipped med", "worst", "worst configuration")
GROUP_RIGHT = (True, True, True, True, True, True, False)


def group_cells(rows: Sequence[Row], with_config: bool = True) -> list[str]:
    devs = [r.deviation for r in rows]
    absd = sorted(abs(d) for d in devs)
    worst = max(rows, key=lambda r: abs(r.deviation))
    p90 = absd[min(len(absd) - 1, math.ceil(0.9 * len(absd)) - 1)]
    cells = [str(len(rows)), apct(median(absd)), pct(median(devs)), apct(p90),
             pct(median([r.shipped_deviation for r in rows])), pct(worst.deviation)]
    cells.append(worst.config.label() if with_config else "")
    return cells


def grouped(rows: Sequence[Row], key: Callable[[Row], tuple[str, ...]]) -> dict[tuple[str, ...], list[Row]]:
    out: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for r in rows:
        out[key(r)].append(r)
    return dict(sorted(out.items()))


def print_report(rows: Sequence[Row], skipped: Counter, failed: Counter, notes: Sequence[str], worst: int) -> None:
    gpu_order = {system: i for i, (system, _) in enumerate(GPUS)}
    engine_order = {e: i for i, (e, _) in enumerate(ENGINES)}
    print("deviation = planner / AIC - 1 (planner: zero engine overheads; 'shipped med': signed median with the")
    print("shipped engine factors). |dev| medians and p90 over the group; worst = the largest |dev|, signed.")
    print()
    for phase in ("decode", "prefill"):
        sel = [r for r in rows if r.config.phase == phase]
        if not sel:
            continue
        print(f"== {phase}: per GPU and engine ==")
        groups = grouped(sel, lambda r: (r.config.gpu, r.config.engine))
        order = sorted(groups, key=lambda k: (gpu_order[k[0]], engine_order[k[1]]))
        table(("gpu", "engine", "AIC version", *GROUP_HEADERS),
              ([k[0], k[1], groups[k][0].version, *group_cells(groups[k])] for k in order),
              (False, False, False, *GROUP_RIGHT))
        print()

    print("== summary ==")
    body = []
    for phase in ("decode", "prefill", "all"):
        sel = [r for r in rows if phase == "all" or r.config.phase == phase]
        if sel:
            body.append(["all", phase, *group_cells(sel)])
    for label, key in (("kind", lambda r: r.config.kind), ("dtype", lambda r: r.config.dtype),
                       ("tp", lambda r: f"tp{r.config.tp}"), ("gpu", lambda r: r.config.gpu),
                       ("engine", lambda r: r.config.engine)):
        for phase in ("decode", "prefill"):
            groups = grouped([r for r in rows if r.config.phase == phase], lambda r, key=key: (key(r),))
            for k, sel in groups.items():
                body.append([f"{label} {k[0]}", phase, *group_cells(sel)])
    table(("group", "phase", *GROUP_HEADERS), body, (False, False, *GROUP_RIGHT))
    print()

    print("== per model kind and batch (decode), prompt length and prompt tokens per step (prefill) ==")
    shape_rows = []
    for kind in ("dense", *MOE_KINDS):
        sel = [r for r in rows if r.config.kind == kind]
        for label, phase, key in (("batch", "decode", lambda r: r.config.batch),
                                  ("isl", "prefill", lambda r: r.config.isl),
                                  ("tokens", "prefill", lambda r: r.config.batch * r.config.isl)):
            groups: dict[int, list[Row]] = defaultdict(list)
            for r in sel:
                if r.config.phase == phase:
                    groups[key(r)].append(r)
            for value in sorted(groups):
                shape_rows.append([kind, phase, f"{label} {value}", *group_cells(groups[value])[:4]])
    table(("kind", "phase", "shape", *GROUP_HEADERS[:4]), shape_rows, (False, False, False, *GROUP_RIGHT[:4]))
    print()

    by_model = grouped(rows, lambda r: (r.config.kind, r.config.model, r.config.phase))
    print("== per model ==")
    table(("kind", "model", "phase", *GROUP_HEADERS[:5]),
          ([*k, *group_cells(v, with_config=False)[:5]] for k, v in by_model.items()),
          (False, False, False, *GROUP_RIGHT[:5]))
    print()

    if worst > 0:
        print(f"== the {worst} largest |deviation| ==")
        top = sorted(rows, key=lambda r: -abs(r.deviation))[:worst]
        table(("gpu", "engine", "phase", "configuration", "planner ms", "AIC ms", "dev", "AIC provenance"),
              ([r.config.gpu, r.config.engine, r.config.phase, r.config.label(), f"{r.planner_ms:.3f}",
                f"{r.aic_ms:.3f}", pct(r.deviation), r.provenance] for r in top),
              (False, False, False, False, True, True, True, False))
        print()

    prov = Counter(r.provenance for r in rows)
    print("AIC provenance of the compared rows (worst tier across ops; 'silicon' = measured tables only):")
    for name, n in prov.most_common():
        print(f"    {n:6d}  {name}")
    print()
    if notes:
        print("Architecture differences between the planner's catalog and AIConfigurator's config:")
        for n in notes:
            print(f"    {n}")
        print()
    print(f"Compared: {len(rows)} configurations "
          f"({sum(r.config.phase == 'decode' for r in rows)} decode, "
          f"{sum(r.config.phase == 'prefill' for r in rows)} prefill)")
    print(f"Skipped: {sum(skipped.values())}")
    for reason, n in skipped.most_common():
        print(f"    {n:6d}  {reason}")
    print(f"AIConfigurator could not estimate: {sum(failed.values())}")
    by_reason: dict[str, Counter] = defaultdict(Counter)
    for (reason, where), n in failed.items():
        by_reason[reason][where] += n
    for reason, wheres in sorted(by_reason.items(), key=lambda kv: -sum(kv[1].values())):
        print(f"    {sum(wheres.values()):6d}  {reason}")
        print("            " + ", ".join(f"{w}: {n}" for w, n in sorted(wheres.items())))


def explain(aic: Aic, rows: Sequence[Row], count: int) -> None:
    """The planner's terms and AIConfigurator's per-op times for the worst row of each (kind, phase) and the
    `count` largest deviations."""
    picked: list[Row] = []
    for key in sorted({(r.config.kind, r.config.phase) for r in rows}):
        picked.append(max((r for r in rows if (r.config.kind, r.config.phase) == key), key=lambda r: abs(r.deviation)))
    for r in sorted(rows, key=lambda r: -abs(r.deviation))[:count]:
        if r not in picked:
            picked.append(r)
    gpus = dict(GPUS)
    backends = dict(ENGINES)
    models = {ours: theirs for ours, theirs, _ in MODELS}
    zero = kernel_factors()
    print("== breakdowns (ms per step; planner terms as performance.py sums them) ==")
    for r in picked:
        c = r.config
        _, precision_name, kv_bytes, quant, kv_mode = DTYPE_NAMES[c.dtype]
        arch, gpu = resolve_model(c.model), resolve_gpu(gpus[c.gpu])
        hw = build_hardware(arch, gpu, weight_precision(precision_name), kv_bytes, engine_profile(c.engine), zero,
                            c.tp, 1)
        handle = aic.compile(models[c.model], c.kind in MOE_KINDS, c.gpu, backends[c.engine], c.tp, quant, kv_mode,
                             MOE_QUANT.get(c.dtype))
        print(f"{c.gpu} {c.engine} {c.phase} {c.label()}: planner {r.planner_ms:.3f}, AIC {r.aic_ms:.3f} "
              f"({pct(r.deviation)})")
        if c.phase == "decode":
            step = decode_step(hw, c.isl + c.osl / 2.0)
            touched = float(experts_touched_fraction(hw, c.batch))
            terms = {
                "dense weights": float(step.dense_weights_s),
                f"experts x {touched:.2f} touched": float(step.expert_weights_s) * touched,
                "MoE floor": float(step.moe_floor_s),
                "MoE compute": c.batch * float(step.expert_s_per_sequence),
                "KV reads": c.batch * float(step.kv_s_per_sequence),
                "GEMM compute": c.batch * float(step.compute_s_per_sequence),
                "all-reduce": float(allreduce_s(hw, c.batch)),
            }
            ops = handle.decode_step_per_op(c.batch, c.isl, c.osl)
        else:
            tokens = float(c.batch * c.isl)
            touched = float(experts_touched_fraction(hw, tokens))
            terms = {
                "dense weights": float(hw.decode_dense_bytes_per_gpu / hw.bandwidth_bytes_s),
                f"experts x {touched:.2f} touched": float(hw.expert_bytes_per_gpu / hw.expert_bandwidth_bytes_s)
                * touched,
                "MoE floor": float(hw.moe_floor_s),
                "MoE compute": tokens * float(hw.expert_s_per_token),
                "GEMM compute": tokens * float(hw.prefill_flops_per_token_per_gpu / hw.prefill_flops_s),
                "attention": tokens * float(attention_flops(hw, c.isl / 2.0) / hw.attention_flops_s),
                "all-reduce": float(allreduce_s(hw, tokens)),
            }
            ops = handle.run_static_per_op(batch_size=c.batch, isl=c.isl, osl=2)[0]
        # The fused MoE layers' three terms add to the step; the rest share the roofline (`performance.DecodeStep`).
        print("    planner: " + ", ".join(f"{k} {1e3 * v:.3f}" for k, v in terms.items())
              + f"; overlap {float(hw.overlap_penalty):.2f}; rates GB/s: weights {hw.bandwidth_bytes_s / 1e9:.0f}, "
              f"experts {hw.expert_bandwidth_bytes_s / 1e9:.0f}, KV {hw.kv_bandwidth_bytes_s / 1e9:.0f} "
              f"(HBM {gpu.memory_bandwidth_gb_s:.0f}); TFLOP/s: prefill GEMM {hw.prefill_flops_s / 1e12:.0f}, "
              f"attention {hw.attention_flops_s / 1e12:.0f}")
        print("    AIC:     " + ", ".join(f"{name.split('_', 1)[1]} {ms:.3f}" for name, ms, _, _ in ops if ms > 0.0005))
    print()


def write_csv(path: Path, rows: Sequence[Row]) -> None:
    fields = ("gpu", "engine", "aic_version", "model", "kind", "dtype", "tp", "phase", "batch", "isl", "osl",
              "planner_ms", "planner_shipped_ms", "aic_ms", "deviation", "deviation_shipped", "aic_provenance")
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in rows:
            c = r.config
            w.writerow([c.gpu, c.engine, r.version, c.model, c.kind, c.dtype, c.tp, c.phase, c.batch, c.isl, c.osl,
                        f"{r.planner_ms:.6g}", f"{r.shipped_ms:.6g}", f"{r.aic_ms:.6g}", f"{r.deviation:.6g}",
                        f"{r.shipped_deviation:.6g}", r.provenance])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="write every compared row to this CSV file")
    parser.add_argument("--worst", type=int, default=15, help="list the N largest deviations (default 15)")
    parser.add_argument("--explain", type=int, default=0, metavar="N",
                        help="print the planner's terms and AIC's per-op times for the worst row of each model kind "
                             "and phase and the N largest deviations")
    parser.add_argument("--phase", choices=("both", "decode", "prefill"), default="both", help="phases to compare")
    parser.add_argument("--gpus", nargs="*", help="AIC systems to compare (default: all of the grid)")
    parser.add_argument("--engines", nargs="*", help="planner engines to compare (default: all of the grid)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if not aic_available():
        print("aiconfigurator-core (with pandas and pyarrow) is not installed. Install it with:")
        print(f"    {INSTALL_HINT}")
        return 0
    start = time.perf_counter()
    aic = Aic()

    def progress(text: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - start:6.1f}s] {text}", file=sys.stderr, flush=True)

    try:
        print(f"aiconfigurator-core {aic.version_of_package}; AIC estimate: EngineHandle.decode_step_latency / "
              "predict_prefill_latency")
        shipped = load_factors()
        for engine, _ in ENGINES:
            f = shipped.engine(engine)
            print(f"shipped factors {engine}: step {f.step_overhead_ms:g} ms, sequence {f.sequence_overhead_ms:g} ms, "
                  f"decode_speed {f.decode_speed:g}, prefill_speed {f.prefill_speed:g}, "
                  f"sm_stream {f.sm_stream_gb_s:g} GB/s")
        print()
        rows, skipped, failed, notes = run(aic, args.phase, progress, args.gpus, args.engines)
        print_report(rows, skipped, failed, notes, args.worst)
        if args.explain > 0 and rows:
            print()
            explain(aic, rows, args.explain)
    finally:
        aic.close()
    if args.csv:
        write_csv(args.csv, rows)
        print(f"\nrows written to {args.csv}")
    print(f"\nelapsed: {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
