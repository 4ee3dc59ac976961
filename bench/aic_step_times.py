"""Step times from AIConfigurator's measured operator tables against the planner and measured lines (prints only).

Usage (from the repository root; the project must be importable, e.g. PYTHONPATH=.):

    python bench/aic_step_times.py [--aic-dir DIR] [--allreduce nccl|custom] [--lines FILE ...]

For each public measured line (../shared/accuracy/scenarios.jsonl and latency-under-load.jsonl) that gives a
per-token decode latency at a known batch, or the TTFT of a prefill at a known batch, on a GPU that
AIConfigurator (`aiconfigurator-core`, Apache-2.0, on PyPI) has tables for (A100 SXM, H100 SXM, H200 SXM,
B200) and an engine it has a backend for (vllm, sglang, trtllm), the script prints three figures:

  * measured: the line's value, as ms (decode_tps_single becomes 1000 / value);
  * planner: `decode_step_s(hw, batch, context)` or `prefill_s(hw, prompt, batch)` with `hw` built as
    inferplan.planner.calibration.predict builds it and the shipped fitted factors (`load_factors()`);
  * AIC: the step assembled from AIConfigurator's measured tables (best kernel per shape) for the line's
    GPU and engine, newest table version (found as bench/aic_tables.py finds it):
      decode at batch b, context c, per layer times the number of layers: QKV GEMM (m=b, n=(H/TP+2*KVr)*d,
      k=hidden; column-parallel), O GEMM (n=hidden, k=H*d/TP; row-parallel), fused gate/up GEMM
      (n=2*I/TP, k=hidden), down GEMM (n=hidden, k=I/TP), generation attention (batch b, KV length c,
      H/TP query heads, KVr = max(KV/TP, 1) KV heads), and two all-reduces of b*hidden elements when TP > 1;
      plus the LM head once (m=b, n=vocab/TP, k=hidden, bf16, as AIConfigurator models it);
      prefill of N prompts of p tokens: the same GEMMs at m = N*p, context attention (batch N, length p),
      two all-reduces of N*p*hidden elements per layer, and the LM head at m = N.
    Not included: embedding, norms, activation, RoPE, sampling and framework overhead (AIConfigurator
    estimates those from bandwidth, not from tables), so the AIC figure is a kernel sum. `AIC+ovh` adds the
    planner's fitted per-step and per-sequence overheads to it.

Interpolation: log-log (log latency linear in the log of each axis), one axis at a time over the measured
grid: GEMM (m, n, k); generation attention (batch, KV length = isl + step, query heads) at the exact KV-head
count, head_dim and KV dtype; context attention (batch, isl, query heads) likewise; all-reduce (message
elements) at the exact GPU count. Beyond the largest measured value the edge value is scaled (linear in m, n,
k, batch, KV length, context-attention heads and message size; quadratic in the context-attention length;
flat in generation-attention query heads, which share the KV heads' reads); below the smallest it is
clamped. Each lookup that needed either, or that fell into a hole of the grid (nearest side used), is
counted as outside the measured range and summarised at the end.

Which lines: decode metric tpot_ms_mean, else itl_ms_mean, else tpot_ms_p50, else decode_tps_single (one per
run); batch 1 for single-stream loads (single, concurrency / burst / static batch of 1), N for a static batch
of N or a closed loop of N clients, N for a burst of N <= 16 fixed-length requests; context = prompt +
output / 2 (the planner's convention; dataset means for ShareGPT). decode_tps_single that includes prefill
is compared as ms per output token, (TTFT + o * step) / o. TTFT (ttft_ms_mean, else ttft_ms_p50) of
single-stream runs and static batches only. Lines flagged suspect, MoE, MLA and sliding-window models and
weight formats without a table are skipped with a counted reason.

Needs pandas with pyarrow and the aiconfigurator-core data; without them it prints how to install them
(pip install aiconfigurator-core pyarrow pandas) and exits 0. Asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from inferplan.planner.calibration.predict import row_checkpoint
from inferplan.planner.calibration.scenarios import Scenario, read_scenarios
from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.datasets import dataset_lengths
from inferplan.planner.catalog.engines import engine_profile, factor_key
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import kv_dtype_bytes, resolve_kv_dtype, weight_precision
from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.model.performance import Hardware, build_hardware, decode_step_s, prefill_s
from inferplan.planner.names import CatalogLookupError


def _load_aic_tables() -> ModuleType:
    """bench/aic_tables.py, imported from its path (it is a script, not a package module)."""
    path = Path(__file__).resolve().with_name("aic_tables.py")
    spec = importlib.util.spec_from_file_location("aic_tables", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("aic_tables", module)
    spec.loader.exec_module(module)
    return module


AT: Any = _load_aic_tables()

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LINES = (REPO.parent / "shared" / "accuracy" / "scenarios.jsonl",
                 REPO.parent / "shared" / "accuracy" / "latency-under-load.jsonl")
GPU_SYSTEMS = {
    "NVIDIA-A100-SXM4-80GB": "a100_sxm",
    "NVIDIA-A100-SXM4-40GB": "a100_sxm",
    "NVIDIA-H100-80GB-HBM3": "h100_sxm",
    "NVIDIA-H200": "h200_sxm",
    "NVIDIA-B200": "b200_sxm",
}
ENGINE_BACKENDS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}
DECODE_METRICS = ("tpot_ms_mean", "itl_ms_mean", "tpot_ms_p50", "decode_tps_single")
PREFILL_METRICS = ("ttft_ms_mean", "ttft_ms_p50")
MAX_BURST = 16  # a burst of at most this many fixed-length requests is read as a batch of that size
# weights -> AIConfigurator gemm_dtype (fp8 is resolved per checkpoint in `_gemm_dtype`)
WEIGHT_GEMM = {"bf16": "bfloat16", "fp16": "bfloat16", "int8-w8a8": "sq", "int4-awq": "int4_wo",
               "int4-gptq": "int4_wo", "int8-gptq": "int8_wo"}


# ----------------------------------------------------------------------------------------------------------
# interpolated tables


Node = Any  # a float (latency, ms) or (sorted axis values, children)


def _tree(columns: Sequence[Sequence[float]], latency: Sequence[float]) -> Node:
    """Nested (keys, children) levels, one per axis, from parallel columns (best latency per shape)."""
    root: dict[float, Any] = {}
    for *coords, lat in zip(*columns, latency, strict=True):
        node = root
        for c in coords[:-1]:
            node = node.setdefault(float(c), {})
        key = float(coords[-1])
        node[key] = min(node.get(key, math.inf), float(lat))

    def freeze(node: Any) -> Node:
        if not isinstance(node, dict):
            return node
        keys = sorted(node)
        return (keys, [freeze(node[k]) for k in keys])

    return freeze(root)


@dataclass
class Table:
    """A measured latency table on a (possibly ragged) grid, interpolated log-log one axis at a time."""

    name: str
    axes: tuple[str, ...]
    powers: tuple[float, ...]  # exponent used to scale past the largest measured value of each axis
    root: Node

    def lookup(self, coords: Sequence[float], outside: set[str]) -> float | None:
        return self._at(self.root, coords, 0, outside)

    def _at(self, node: Node, coords: Sequence[float], depth: int, outside: set[str]) -> float | None:
        if depth == len(self.axes):
            return float(node)
        keys, kids = node
        x = float(coords[depth])
        axis = f"{self.name} {self.axes[depth]}"
        if x > keys[-1]:
            outside.add(f"{axis} > {keys[-1]:g}")
            v = self._at(kids[-1], coords, depth + 1, outside)
            return None if v is None else v * (x / keys[-1]) ** self.powers[depth]
        if x < keys[0]:
            outside.add(f"{axis} < {keys[0]:g}")
            return self._at(kids[0], coords, depth + 1, outside)
        i = bisect_left(keys, x)
        if keys[i] == x:
            return self._at(kids[i], coords, depth + 1, outside)
        lo = self._at(kids[i - 1], coords, depth + 1, outside)
        hi = self._at(kids[i], coords, depth + 1, outside)
        if lo is None or hi is None:
            if lo is not None or hi is not None:
                outside.add(f"{axis} grid hole")
            return lo if hi is None else hi
        t = (math.log(x) - math.log(keys[i - 1])) / (math.log(keys[i]) - math.log(keys[i - 1]))
        return math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))


class AicData:
    """The tables of one aiconfigurator_core package dir, loaded lazily and cached."""

    def __init__(self, pkg: Path, allreduce: str) -> None:
        self.pkg = pkg
        self.allreduce = allreduce
        self._frames: dict[tuple[str, str, str], tuple[Any, str] | None] = {}
        self._tables: dict[tuple[Any, ...], Table | None] = {}
        self.versions: set[str] = set()

    def _frame(self, system: str, op: str, backend: str, filename: str) -> Any | None:
        key = (system, f"{op}/{backend}", filename)
        if key not in self._frames:
            table_dir = self.pkg / "systems" / "data" / system / op / backend
            version, _ = AT._newest_with(table_dir, filename)
            self._frames[key] = None if version is None else (AT._read(table_dir / version / filename), version)
            if version is not None:
                self.versions.add(f"{system} {op}/{backend} {version} ({filename})")
        got = self._frames[key]
        return None if got is None else got[0]

    def gemm(self, system: str, backend: str, dtype: str) -> Table | None:
        key = ("gemm", system, backend, dtype)
        if key not in self._tables:
            df = self._frame(system, "gemm", backend, "gemm_perf.parquet")
            table = None
            if df is not None:
                sub = df[df["gemm_dtype"] == dtype]
                if not sub.empty:
                    table = Table(f"gemm {dtype}", ("m", "n", "k"), (1.0, 1.0, 1.0),
                                  _tree([sub["m"].tolist(), sub["n"].tolist(), sub["k"].tolist()],
                                        sub["latency"].tolist()))
            self._tables[key] = table
        return self._tables[key]

    def attention(self, system: str, backend: str, phase: str, kv_dtype: str, kv_heads: int,
                  head_dim: int) -> Table | None:
        key = ("attn", system, backend, phase, kv_dtype, kv_heads, head_dim)
        if key not in self._tables:
            df = self._frame(system, "attention", backend, f"{phase}_attention_perf.parquet")
            table = None
            if df is not None:
                for col, val in (("window_size", 0), ("beam_width", 1)):
                    if col in df.columns:
                        df = df[df[col] == val]
                sub = df[(df["kv_cache_dtype"] == kv_dtype) & (df["num_key_value_heads"] == kv_heads)
                         & (df["head_dim"] == head_dim)]
                if not sub.empty:
                    if phase == "generation":
                        # query heads share the KV heads' reads: flat in heads past the grid (clamped)
                        length, axes, powers = (sub["isl"] + sub["step"]).tolist(), ("batch", "kv_len", "heads"), \
                            (1.0, 1.0, 0.0)
                    else:
                        length, axes, powers = sub["isl"].tolist(), ("batch", "isl", "heads"), (1.0, 2.0, 1.0)
                    table = Table(f"{phase} attn", axes, powers,
                                  _tree([sub["batch_size"].tolist(), length, sub["num_heads"].tolist()],
                                        sub["latency"].tolist()))
            self._tables[key] = table
        return self._tables[key]

    def all_reduce(self, system: str, backend: str, tp: int) -> Table | None:
        key = ("ar", system, backend, tp, self.allreduce)
        if key not in self._tables:
            df = None
            if self.allreduce == "custom":
                df = self._frame(system, "comm", backend, "custom_allreduce_perf.parquet")
            if df is None:
                df = self._frame(system, "comm", "nccl", "nccl_perf.parquet")
            table = None
            if df is not None:
                if "op_name" in df.columns:
                    df = df[df["op_name"] == "all_reduce"]
                dcol = "nccl_dtype" if "nccl_dtype" in df.columns else "allreduce_dtype"
                if dcol in df.columns:
                    df = df[df[dcol].isin(AT.HALF_DTYPES)]
                sub = df[df["num_gpus"] == tp]
                if not sub.empty:
                    table = Table("all-reduce", ("elements",), (1.0,),
                                  _tree([sub["message_size"].tolist()], sub["latency"].tolist()))
            self._tables[key] = table
        return self._tables[key]


# ----------------------------------------------------------------------------------------------------------
# selecting lines


@dataclass(frozen=True)
class Case:
    """One measured line that the bench compares."""

    index: int
    row: Scenario
    kind: str  # "decode", "decode+pf" (decode_tps_single including prefill), "prefill"
    system: str
    backend: str
    arch: ModelArchitecture
    tp: int
    batch: int
    prompt: float
    output: float
    gemm_dtype: str
    kv_dtype: str  # AIConfigurator's name: bfloat16 or fp8
    measured_ms: float


def _lengths(row: Scenario) -> tuple[float | None, float | None]:
    """(prompt tokens, output tokens): stated values, else the dataset's means, else None."""
    prompt, output = row.input_tokens, row.output_tokens
    if row.dataset is not None:
        try:
            lengths = dataset_lengths(row.dataset)
        except CatalogLookupError:
            return (None if prompt is None else float(prompt), None if output is None else float(output))
        prompt = lengths.prompt_mean if prompt is None else prompt
        output = lengths.output_mean if output is None else output
    return (None if prompt is None else float(prompt), None if output is None else float(output))


def _batch(row: Scenario, decode: bool) -> int | str:
    load = row.load
    value = int(getattr(load, "value", 1) or 1)
    if load.kind == "single" or (load.kind in ("concurrency", "burst", "static_batch") and value == 1):
        return 1
    if load.kind == "static_batch":
        return value
    if not decode:
        return f"TTFT under load ({load.kind}): queueing, not a single prefill"
    if load.kind == "concurrency":
        return value
    if load.kind == "burst":
        if row.dataset is None and value <= MAX_BURST:
            return value
        return f"burst of N > {MAX_BURST} or of variable lengths: the batch drains and waits for admission"
    return f"{load.kind} load: batch not fixed"


def _gemm_dtype(row: Scenario) -> str | None:
    if row.weights == "fp8":
        checkpoint = (row_checkpoint(row) or "").lower()
        return "fp8_block" if checkpoint.startswith("qwen/") else "fp8"  # Qwen/*-FP8: 128x128 block scales
    return WEIGHT_GEMM.get(row.weights)


def _run_key(row: Scenario, kind: str) -> tuple[Any, ...]:
    return (kind, row.source, row.model, row.gpu, row.gpus, row.tensor_parallel, row.engine, row.engine_version,
            row.weights, row.kv_cache, row.input_tokens, row.output_tokens, row.dataset, row.load.model_dump_json(),
            row.max_model_len, row.max_num_seqs, row.max_num_batched_tokens, row.gpu_memory_utilization)


def select_cases(rows: Sequence[Scenario], aic: AicData) -> tuple[list[Case], Counter[str]]:
    """The lines the bench compares, and the count of every other line by reason."""
    cases: list[Case] = []
    skipped: Counter[str] = Counter()
    best: dict[tuple[Any, ...], tuple[int, int]] = {}  # run -> (metric rank, position in `cases`)
    for row in rows:
        decode = row.metric in DECODE_METRICS
        if not decode and row.metric not in PREFILL_METRICS:
            skipped[f"metric {row.metric} is not a decode or TTFT latency"] += 1
            continue
        if row.metric == "decode_tps_single" and row.includes_prefill is None:
            skipped["decode_tps_single without includes_prefill"] += 1
            continue
        system = GPU_SYSTEMS.get(row.gpu or "")
        if system is None:
            skipped["GPU without AIC tables (or not stated)"] += 1
            continue
        backend = ENGINE_BACKENDS.get(row.engine or "")
        if backend is None:
            skipped["engine without an AIC backend"] += 1
            continue
        if row.suspect:
            skipped["suspect line (excluded from scoring)"] += 1
            continue
        if row.pipeline_parallel != 1 or (row.tensor_parallel is None and row.gpus != 1):
            skipped["pipeline parallel or sharding not stated"] += 1
            continue
        batch = _batch(row, decode)
        if isinstance(batch, str):
            skipped[batch] += 1
            continue
        prompt, output = _lengths(row)
        if prompt is None or (decode and output is None):
            skipped["token counts not stated"] += 1
            continue
        try:
            arch = resolve_model(row.model)
        except CatalogLookupError:
            skipped["model not in the catalog"] += 1
            continue
        if arch.is_moe or arch.is_mla or arch.layer_windows:
            skipped["MoE, MLA or sliding-window model (not assembled from the tables here)"] += 1
            continue
        tp = row.tensor_parallel or 1
        gemm_dtype = _gemm_dtype(row)
        if gemm_dtype is None or aic.gemm(system, backend, gemm_dtype) is None:
            skipped[f"no AIC {backend} GEMM rows for {row.weights} weights on {system}"] += 1
            continue
        kv = resolve_kv_dtype(row.kv_cache, row.weights, row.engine, row_checkpoint(row))
        kv_dtype = "fp8" if kv == "fp8" else "bfloat16"
        phases = ["generation", "context"] if decode and row.includes_prefill else [
            "generation" if decode else "context"]
        missing = [ph for ph in phases if aic.attention(system, backend, ph, kv_dtype, max(arch.num_kv_heads // tp, 1),
                                                         arch.head_dim) is None]
        if missing:
            skipped[f"no AIC {backend} {missing[0]} attention rows for this KV-head count / head_dim / KV dtype"] += 1
            continue
        if tp > 1 and aic.all_reduce(system, backend, tp) is None:
            skipped[f"no AIC all-reduce rows for TP {tp} on {system}"] += 1
            continue
        if row.metric == "decode_tps_single":
            kind = "decode+pf" if row.includes_prefill else "decode"
            measured = 1e3 / row.value if row.value > 0 else math.nan
        else:
            kind = "decode" if decode else "prefill"
            measured = row.value
        if not (measured > 0):
            skipped["measured value is zero"] += 1
            continue
        order = DECODE_METRICS if decode else PREFILL_METRICS
        run = _run_key(row, "decode" if decode else "prefill")
        rank = order.index(row.metric)
        case = Case(0, row, kind, system, backend, arch, tp, batch, prompt, output or 1.0, gemm_dtype, kv_dtype,
                    measured)
        if run in best:
            old_rank, pos = best[run]
            skipped["another metric of the same run is compared"] += 1
            if rank < old_rank:
                cases[pos] = case
                best[run] = (rank, pos)
            continue
        best[run] = (rank, len(cases))
        cases.append(case)
    return [replace(c, index=i + 1) for i, c in enumerate(cases)], skipped


# ----------------------------------------------------------------------------------------------------------
# step times


@dataclass
class Lookups:
    """Counts of table lookups on one line and the ones outside the measured range."""

    total: int = 0
    outside: int = 0
    notes: Counter[str] = field(default_factory=Counter)

    def take(self, table: Table, coords: Sequence[float]) -> float:
        seen: set[str] = set()
        value = table.lookup(coords, seen)
        self.total += 1
        if seen:
            self.outside += 1
            self.notes.update(seen)
        if value is None:
            raise LookupError(f"{table.name}: no rows near {tuple(coords)}")
        return value


def aic_step_ms(aic: AicData, c: Case, tokens: float, batch: int, context: float, phase: str,
                lookups: Lookups) -> float:
    """A forward pass from the tables [ms]: `tokens` GEMM rows, `batch` sequences of `context` tokens."""
    a, tp = c.arch, c.tp
    heads = a.num_attention_heads // tp
    kv_heads = max(a.num_kv_heads // tp, 1)
    d = a.head_dim
    gemm = aic.gemm(c.system, c.backend, c.gemm_dtype)
    head = aic.gemm(c.system, c.backend, "bfloat16") or gemm
    attn = aic.attention(c.system, c.backend, phase, c.kv_dtype, kv_heads, d)
    assert gemm is not None and head is not None and attn is not None  # checked in select_cases
    h, inter = a.hidden_size, a.intermediate_size
    layer = (lookups.take(gemm, (tokens, heads * d + 2 * kv_heads * d, h))
             + lookups.take(gemm, (tokens, h, heads * d))
             + lookups.take(gemm, (tokens, 2 * inter // tp, h))
             + lookups.take(gemm, (tokens, h, inter // tp))
             + lookups.take(attn, (batch, context, heads)))
    if tp > 1:
        ar = aic.all_reduce(c.system, c.backend, tp)
        assert ar is not None
        layer += 2 * lookups.take(ar, (tokens * h,))
    logits_rows = batch if phase == "context" else tokens
    return a.num_layers * layer + lookups.take(head, (logits_rows, a.vocab_size // tp, h))


def planner_hardware(c: Case, factors: FactorSet) -> Hardware:
    """`hw` as inferplan.planner.calibration.predict._hardware builds it."""
    row = c.row
    assert row.gpu is not None and row.engine is not None
    gpu = resolve_gpu(row.gpu)
    kv = kv_dtype_bytes(row.kv_cache, row.weights, row.engine, row_checkpoint(row))
    return build_hardware(c.arch, gpu, weight_precision(row.weights), kv, engine_profile(row.engine),
                          factors.engine(factor_key(row.engine, row.engine_version, gpu.vendor, row.published)),
                          c.tp, row.pipeline_parallel)


@dataclass(frozen=True)
class Result:
    case: Case
    planner_ms: float
    aic_ms: float | None
    aic_ovh_ms: float | None
    lookups: Lookups
    error: str | None = None


def evaluate(c: Case, aic: AicData, factors: FactorSet) -> Result:
    """Planner and AIC step times of one line [ms]; decode+pf lines as ms per output token with the prefill."""
    hw = planner_hardware(c, factors)
    overhead_ms = 1e3 * (float(hw.step_overhead_s) + float(hw.sequence_overhead_s) * c.batch)
    context = c.prompt + c.output / 2.0
    if c.kind == "prefill":
        planner = 1e3 * float(prefill_s(hw, c.prompt, c.batch))
    else:
        planner = 1e3 * float(decode_step_s(hw, c.batch, context))
    if c.kind == "decode+pf":
        planner = (1e3 * float(prefill_s(hw, c.prompt, 1.0)) + c.output * planner) / c.output
    lookups = Lookups()
    try:
        if c.kind == "prefill":
            aic_ms = aic_step_ms(aic, c, c.batch * c.prompt, c.batch, c.prompt, "context", lookups)
            return Result(c, planner, aic_ms, aic_ms + overhead_ms, lookups)
        aic_ms = aic_step_ms(aic, c, c.batch, c.batch, context, "generation", lookups)
        if c.kind == "decode":
            return Result(c, planner, aic_ms, aic_ms + overhead_ms, lookups)
        pf = aic_step_ms(aic, c, c.prompt, 1, c.prompt, "context", lookups)
        aic_total = (pf + c.output * aic_ms) / c.output
        ovh_total = (pf + overhead_ms + c.output * (aic_ms + overhead_ms)) / c.output
        return Result(c, planner, aic_total, ovh_total, lookups)
    except LookupError as exc:
        return Result(c, planner, None, None, lookups, str(exc))


# ----------------------------------------------------------------------------------------------------------
# printing


def _ape(pred: float | None, measured: float) -> float | None:
    return None if pred is None else abs(pred / measured - 1.0)


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.0f}%" if signed else f"{100 * x:.0f}%"


def _short_model(model: str) -> str:
    return model.split("/")[-1]


def _load_label(row: Scenario) -> str:
    load = row.load
    value = getattr(load, "value", None)
    return {"single": "single", "concurrency": f"c{value}", "burst": f"burst{value}",
            "static_batch": f"static{value}"}.get(load.kind, load.kind)


def print_results(results: Sequence[Result]) -> None:
    rows = []
    for r in results:
        c = r.case
        row = c.row
        ctx = c.prompt if c.kind == "prefill" else c.prompt + c.output / 2.0
        rows.append([
            str(c.index), row.source_name, _short_model(row.model), f"{c.system.split('_')[0]}x{c.tp}",
            f"{row.weights}/{'fp8' if c.kv_dtype == 'fp8' else '16b'}", c.backend, _load_label(row),
            row.metric.replace("_ms", ""), c.kind, str(c.batch), f"{ctx:.0f}", f"{c.measured_ms:.2f}",
            f"{r.planner_ms:.2f}", "-" if r.aic_ms is None else f"{r.aic_ms:.2f}",
            "-" if r.aic_ovh_ms is None else f"{r.aic_ovh_ms:.2f}",
            _pct(r.planner_ms / c.measured_ms - 1.0, True),
            "-" if r.aic_ms is None else _pct(r.aic_ms / c.measured_ms - 1.0, True),
            "-" if r.aic_ovh_ms is None else _pct(r.aic_ovh_ms / c.measured_ms - 1.0, True),
            f"{r.lookups.outside}/{r.lookups.total}",
        ])
    AT._table("Lines (ms; decode+pf = ms per output token including the prefill; err = predicted / measured - 1)",
              ["#", "source", "model", "gpu x tp", "weights/kv", "engine", "load", "metric", "kind", "batch", "ctx",
               "measured", "planner", "AIC", "AIC+ovh", "planner err", "AIC err", "AIC+ovh err", "outside"],
              rows, 9)
    print("Line ids:")
    for r in results:
        print(f"  {r.case.index:>3}  {r.case.row.id}" + (f"  [AIC: {r.error}]" if r.error else ""))
    print()


def summary_rows(results: Sequence[Result]) -> list[list[str]]:
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.case.backend, r.case.system), []).append(r)
    for kind in ("decode", "decode+pf", "prefill"):
        sub = [r for r in results if r.case.kind == kind]
        if sub:
            groups[("all", f"kind {kind}")] = sub
    groups[("all", "all")] = list(results)
    rows = []
    for (engine, gpu), rs in groups.items():
        pl = [x for r in rs if (x := _ape(r.planner_ms, r.case.measured_ms)) is not None]
        ai = [x for r in rs if (x := _ape(r.aic_ms, r.case.measured_ms)) is not None]
        ao = [x for r in rs if (x := _ape(r.aic_ovh_ms, r.case.measured_ms)) is not None]
        closer = sum(1 for r in rs if r.aic_ms is not None
                     and abs(r.aic_ms - r.case.measured_ms) < abs(r.planner_ms - r.case.measured_ms))
        rows.append([engine, gpu, str(len(rs)), _pct(AT._median(pl)), _pct(AT._median(ai)), _pct(AT._median(ao)),
                     f"{closer}/{len(ai)}"])
    return rows


def print_summary(results: Sequence[Result], skipped: Counter[str], aic: AicData) -> None:
    AT._table("Summary: median absolute percentage error (MdAPE) of step times against the measured lines",
              ["engine", "gpu", "lines", "planner", "AIC", "AIC+ovh", "AIC closer"], summary_rows(results), 2)
    total = sum(r.lookups.total for r in results)
    outside = sum(r.lookups.outside for r in results)
    print(f"Table lookups: {total}, outside the measured range (scaled past an edge, clamped, or a grid hole): "
          f"{outside}")
    notes: Counter[str] = Counter()
    for r in results:
        notes.update(r.lookups.notes)
    for note, n in sorted(notes.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:>4}  {note}")
    print()
    print(f"Lines compared: {len(results)}; skipped: {sum(skipped.values())}")
    for reason, n in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:>4}  {reason}")
    print()
    print("AIC tables used (newest version holding the table):")
    for v in sorted(aic.versions):
        print(f"  {v}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic-dir", help="unpacked aiconfigurator_core package dir (or a folder holding it)")
    parser.add_argument("--allreduce", choices=("nccl", "custom"), default="nccl",
                        help="all-reduce table: NCCL (default) or the engine's custom all-reduce (NCCL if none)")
    parser.add_argument("--lines", nargs="*", type=Path, default=list(DEFAULT_LINES), help="scenario files")
    args = parser.parse_args(argv)
    pkg = AT.find_aic_dir(args.aic_dir)
    if pkg is None:
        print("aiconfigurator-core not found (no installed package, no usable --aic-dir). Install it with:")
        print(f"    {AT.INSTALL_HINT}")
        return 0
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        print("pandas and pyarrow are needed to read the parquet tables. Install them with:")
        print(f"    {AT.INSTALL_HINT}")
        return 0
    rows: list[Scenario] = []
    for path in args.lines:
        if not path.is_file():
            print(f"note: {path} not found, skipped")
            continue
        rows += list(read_scenarios(path).scenarios)
    print(f"aiconfigurator_core dir: {pkg}")
    print(f"lines: {', '.join(str(p) for p in args.lines)} ({len(rows)} read)")
    print(f"interpolation: log-log per axis; all-reduce table: {args.allreduce}")
    print()
    aic = AicData(pkg, args.allreduce)
    cases, skipped = select_cases(rows, aic)
    factors = load_factors()
    results = [evaluate(c, aic, factors) for c in cases]
    print_results(results)
    print_summary(results, skipped, aic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
