"""Derive the planner's compact kernel tables from NVIDIA AIConfigurator's measured operator timings.

Usage (from the repository root; needs `pip install aiconfigurator-core==0.12.0 pandas pyarrow pyyaml`, none of
which the project depends on, or `--aic-dir` a folder the whole 0.12.0 wheel is unzipped in):

    python scripts/derive_kernel_tables.py [--aic-dir DIR] [--out inferplan/planner/data/kernels] [--check]

`aiconfigurator-core` 0.12.0 (Apache-2.0, PyPI; data at ai-dynamo/aiconfigurator commit 095f58a5) ships
per-operator latencies measured on each GPU under each engine's kernels:
aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/*.parquet, with each system's peaks in
systems/<system>.yaml. This script reduces them to what `inferplan.planner.model.kernels` reads, per system, from
the version of each backend's data AIConfigurator itself queries as current (`systems/query_versions.yaml`; the
newest folder where the current one lacks a table):

- `gemm[backend][dtype]`: latency [us] of y = x W on a grid of M (tokens) x N x K, the fastest kernel the
  backend's table holds for each shape (the table's own values; a grid point the table lacks, the A100 tables'
  missing large M, is interpolated log-log along M from its neighbours, or extended at the compute-bound slope
  of the last two measured M, and counted in `filled`; a smaller M never takes longer than a larger one, which
  a padded call would run in: the few table rows that do are replaced by the larger M's time);
- `decode_attention[backend][kv dtype]`: latency [us] of one layer's decode attention on a grid of
  log2(KV bytes read) x log2(batch x KV heads), each node the least-squares value of the measured rows around it
  (bilinear in log space, head dims 64 and 128, full attention);
- `mla_decode[backend][kv dtype]`: absorbed MLA decode attention (DeepSeek-V3's latent, kv_lora_rank 512 and rope
  64) per query head count a GPU, 1, 2, 4, ..., 128: nanoseconds per (sequence, context token) of one layer, the
  median of latency / (batch x context) over the table's rows of at least 2^20 such pairs (where the time is
  linear in them: their 10th and 90th percentiles within 10% of the median on the H200 and B200), fewer heads never
  slower than more (a padded call runs in the larger count's time). TensorRT-LLM's
  and SGLang's `generation_mla` tables (vLLM's AIConfigurator data has only the whole MLA module, projections
  included);
- `mla_prefill[backend]`: MLA context (prefill) attention at the same head counts: TFLOPS of its causal FLOPs,
  2 x batch x heads x (qk 192 + v 128) x prompt^2 / 2, the median over the `context_mla` table's rows of 16-bit
  latent with prompts of 2048 tokens or more and at least 8192 tokens a call;
- `prefill_attention[backend]`: the same for context (prefill) attention on log2(causal FLOPs) x
  log2(batch x query heads), 16-bit KV;
- `allreduce[tp]`: latency [us] of a 16-bit all-reduce of 2^i bytes on `tp` GPUs, the faster of NCCL and the
  backends' custom all-reduce kernels (what the engines choose between);
- `moe[backend][dtype]`: the fused MoE layer (routing, the experts' two grouped GEMMs, the combine) reduced to
  three curves over log2(bytes of one expert's weights on one GPU, 3 x hidden x intermediate / TP x bytes per
  weight), each the median over the measured model shapes in that bin (AIConfigurator's default power-law routing
  with alpha 1.01, so expert load imbalance is in them; tensor-parallel experts, no expert parallelism; the
  fastest kernel per shape): `floor_us`, the layer's time less its weight reads at few tokens (the intercept of
  a least-squares line of latency on the bytes of the experts a batch of up to 32 tokens routes to, uniform
  routing assumed as the planner assumes it); `stream`, that line's rate over the HBM peak; `compute`, the
  experts' FLOPs per routed token over the marginal time per token at 4096 tokens and more, as a share of the
  dtype's tensor peak (16-bit for weight-only formats); and `shapes`, the same three figures of each measured
  shape itself (key `HIDDENxINTERMEDIATExEXPERTSxTOPK/tpTP`), which the planner reads for a model of that shape
  in place of the bin's medians (the narrow experts of a wide TP run far below the medians of their bin:
  DeepSeek-V3's at TP 8 on the H200 stream at 0.84 of the HBM peak and compute at 0.21 of FP8's). A bin whose
  layer takes longer than the next larger bin's at any measured routing and 1 to 4096 tokens runs faster by the
  smallest factor that closes the gap (`monotone_moe_bins`, counted in `repaired`): a layer of smaller experts
  never takes longer than one of larger experts, which it could run on padded weights;
- `peaks`: the system file's HBM bandwidth and dense tensor FLOPS, which the planner uses to carry a system's
  measured efficiency to a GPU of the same architecture without tables of its own.

Rows that imply more than the HBM peak (the A100 trtllm 1.0.0 decode-attention table, docs/aic-tables.md) are
dropped. `--check` prints, per table, the median and 90th-percentile error of the compact table against every
measured row it was built from (what the reduction costs). The output is deterministic for the same package.
Attribution and licence: NOTICE and inferplan/planner/data/LICENSE-aiconfigurator.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "inferplan" / "planner" / "data" / "kernels"
SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "l40s",
           "rtx_pro_6000_server")
BACKENDS = ("vllm", "sglang", "trtllm")
GEMM_DTYPES = ("bfloat16", "fp8", "fp8_block", "nvfp4", "int8_wo", "int4_wo", "sq")
GEMM_M = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_NK = (512, 1024, 2048, 4096, 8192, 16384, 65536)
DECODE_BYTES_LOG2 = tuple(range(12, 37, 2))   # 4 KiB .. 64 GiB of KV read per layer
DECODE_UNITS_LOG2 = tuple(range(0, 15))       # batch x KV heads 1 .. 16384
MLA_HEADS_LOG2 = tuple(range(0, 8))          # query heads a GPU 1 .. 128
MLA_LINEAR_PAIRS = 2**20                      # (sequence, context token) pairs from which the time is linear
MLA_LATENT_ELEMENTS = 512 + 64                # kv_lora_rank + qk_rope_head_dim, the bytes a pair reads per element
MLA_PREFILL_DIMS = 192 + 128                  # DeepSeek-V3's query-key (nope 128 + rope 64) and value head dims
MLA_PREFILL_MIN_PROMPT, MLA_PREFILL_MIN_TOKENS = 2048, 8192
PREFILL_FLOPS_LOG2 = tuple(range(20, 49, 2))  # 1 MFLOP .. 256 TFLOP per layer
PREFILL_UNITS_LOG2 = tuple(range(0, 13))      # batch x query heads 1 .. 4096
ALLREDUCE_BYTES_LOG2 = tuple(range(10, 31))   # 1 KiB .. 1 GiB
TP_SIZES = (2, 4, 8)
MOE_SHARD_LOG2 = tuple(range(16, 31))  # log2 bytes of one expert's weights on one GPU
# Bytes per weight of AIConfigurator's MoE dtypes (4-bit formats with their block scales); the dtype whose tensor
# peak the compute share is of (weight-only formats run 16-bit math).
MOE_DTYPES = {"bfloat16": (2.0, "bf16_tflops"), "fp8": (1.0, "fp8_tflops"), "fp8_block": (1.0, "fp8_tflops"),
              "int4_wo": (0.5 + 2.0 / 128, "bf16_tflops"), "w4a16_mxfp4": (0.5 + 1.0 / 32, "bf16_tflops"),
              "nvfp4": (0.5 + 1.0 / 16, "fp4_tflops")}
MOE_DISTRIBUTION = "power_law_1.01"  # AIConfigurator's default routing (sdk/models: power-law alpha 1.01)
# The routings (experts, top-k) and token counts at which a bin's layer time must not fall below a smaller bin's
# (`monotone_moe_bins`): those of every shape the 0.12.0 MoE tables measured (Mixtral's 8 x 2 to 896 x 16), from
# one decode token to a prefill chunk.
MOE_MONOTONE_ROUTINGS = ((8, 2), (16, 1), (32, 4), (128, 1), (128, 4), (128, 6), (128, 8), (160, 8), (256, 6),
                         (256, 8), (384, 6), (384, 8), (512, 10), (512, 22), (896, 16))
MOE_MONOTONE_TOKENS = (1, 8, 64, 512, 4096)
AIC_VERSION = "0.12.0"  # the package the shipped tables (data/kernels/) were derived from (SOURCE, NOTICE)
INSTALL_HINT = f"pip install aiconfigurator-core=={AIC_VERSION} pandas pyarrow pyyaml"
SOURCE = ("NVIDIA AIConfigurator (aiconfigurator-core "
          f"{AIC_VERSION} on PyPI, Apache-2.0; data at "
          "https://github.com/ai-dynamo/aiconfigurator/tree/095f58a51c4ca8e61b66ec108d86f223f8d559ce"
          "/aic-core/src/aiconfigurator_core/systems/data)")


def find_systems_dir(aic_dir: str | None) -> Path | None:
    """The package's systems/ folder: under `aic_dir` (the package or a folder holding it) or the installed one."""
    if aic_dir:
        base = Path(aic_dir)
        for candidate in (base / "systems", base / "aiconfigurator_core" / "systems"):
            if candidate.is_dir():
                return candidate
        return None
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "systems"
    return path if path.is_dir() else None


def missing_systems(systems: Path) -> list[str]:
    """The systems of `SYSTEMS` whose spec (`<system>.yaml`) or measured data (`data/<system>/`) the package folder
    lacks: a wheel unpacked without its data gives all of them, and tables derived from it would be empty."""
    return [name for name in SYSTEMS if not (systems / f"{name}.yaml").is_file()
            or not (systems / "data" / name).is_dir()]


def package_version(systems: Path) -> str | None:
    """The version of the aiconfigurator-core whose `systems` folder this is: the `.dist-info` beside the package (a
    wheel unpacked or installed), None where there is none."""
    found = sorted(systems.parent.parent.glob("aiconfigurator_core-*.dist-info"))
    return found[-1].name.removeprefix("aiconfigurator_core-").removesuffix(".dist-info") if found else None


def _version_key(version: str) -> tuple[tuple[int, ...], int, int]:
    """Sort key of a version folder: the release numbers, then final above pre-release, then the pre-release number."""
    numbers = tuple(int(x) for x in re.findall(r"\d+", version.split("rc")[0].split(".post")[0].split(".dev")[0]))
    pre = re.search(r"rc(\d+)", version)
    return numbers, 0 if pre else 1, int(pre.group(1)) if pre else 0


def current_versions(systems: Path) -> dict[str, Any]:
    """AIConfigurator's `systems/query_versions.yaml`: the version of each backend's data it queries as "current"
    (its defaults, and overrides per system); {} where the file is absent (older packages)."""
    import yaml

    path = systems / "query_versions.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {} if path.is_file() else {}


def current_version(slots: dict[str, Any], system: str, backend: str) -> str | None:
    """The version AIConfigurator's own estimates read for `backend` on `system` (`current_versions`)."""
    entry = (slots.get("overrides") or {}).get(system, {}).get(backend) or (slots.get("defaults") or {}).get(backend)
    return (entry or {}).get("current")


def newest(folder: Path, filename: str, current: str | None = None) -> tuple[str, Path] | None:
    """(version, file) of the `current` version folder under `folder` where it holds `filename` (the data
    AIConfigurator's estimates read; a newer folder can be a partial collection of the next release: TensorRT-LLM
    1.3.0rc23's MoE table on the H200 holds 3 of rc20's shapes in two of its four dtypes), else of the newest one
    that does."""
    if not folder.is_dir():
        return None
    if current and (folder / current / filename).is_file():
        return current, folder / current / filename
    versions = sorted((p.name for p in folder.iterdir() if (p / filename).is_file()), key=_version_key)
    return (versions[-1], folder / versions[-1] / filename) if versions else None


def _sig(x: float, digits: int = 4) -> float:
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"not a positive latency: {x}")
    return float(f"{x:.{digits}g}")


def gemm_table(frame: Any, dtype: str) -> tuple[list[list[list[float]]], int, int] | None:
    """The GEMM grid of one dtype [us], how many grid points were filled rather than measured, and how many were
    replaced by a larger M's shorter time.

    Per (N, K) the table's latencies over M, fastest kernel per shape. A grid M the table lacks is interpolated
    log-log between its measured neighbours (below the smallest: that one's value; above the largest: the
    compute-bound slope of the last two). Where the table skips a whole (N, K) (65536 x 65536), the largest
    smaller K with the same N is scaled by K / K' (a shape that large is bound by its size)."""
    import numpy as np

    rows = frame[frame.gemm_dtype == dtype]
    if rows.empty:
        return None
    best = rows.groupby(["n", "k", "m"]).latency.min()
    curves: dict[tuple[int, int], tuple[Any, Any]] = {}
    for (n, k), part in best.groupby(level=["n", "k"]):
        ms = part.index.get_level_values("m").to_numpy(dtype=float)
        curves[(int(n), int(k))] = (ms, part.to_numpy(dtype=float) * 1e3)
    filled = 0
    repaired = [0]  # a list: counted inside the loops below
    grid = [[[0.0] * len(GEMM_NK) for _ in GEMM_NK] for _ in GEMM_M]
    for ni, n in enumerate(GEMM_NK):
        for ki, k in enumerate(GEMM_NK):
            scale = 1.0
            curve = curves.get((n, k))
            if curve is None:
                smaller = sorted(kk for nn, kk in curves if nn == n and kk < k)
                if not smaller:
                    return None
                curve, scale = curves[(n, smaller[-1])], k / smaller[-1]
                filled += len(GEMM_M)
            ms, us = curve
            order = np.argsort(ms)
            ms, us = ms[order], us[order] * scale
            for mi, m in enumerate(GEMM_M):
                hit = np.nonzero(ms == m)[0]
                if hit.size:
                    value = float(us[hit[0]])
                else:
                    if scale == 1.0:
                        filled += 1
                    if m < ms[0]:
                        value = float(us[0])
                    elif m > ms[-1]:
                        value = float(us[-1] + (us[-1] - us[-2]) / (ms[-1] - ms[-2]) * (m - ms[-1]))
                    else:
                        value = float(np.exp(np.interp(np.log(m), np.log(ms), np.log(us))))
                grid[mi][ni][ki] = _sig(value)
            # A call of more tokens is never faster: the smaller one can always run the larger one's kernel on
            # padded rows. Where a table says otherwise (B200 vLLM FP8 at M <= 8: several times slower than at
            # M = 16, docs/aic-tables.md), the larger M's time stands (a suffix minimum along M). Along N and K the
            # planner repairs the tables as it reads them (`kernels._gemm_grid`), so the shipped tables keep them.
            for mi in range(len(GEMM_M) - 2, -1, -1):
                if grid[mi + 1][ni][ki] < grid[mi][ni][ki]:
                    grid[mi][ni][ki] = grid[mi + 1][ni][ki]
                    repaired[0] += 1
    return grid, filled, repaired[0]


def surface(x: Sequence[float], y: Sequence[float], t: Sequence[float], gx: Sequence[float],
            gy: Sequence[float]) -> tuple[list[list[float]], float, float]:
    """Node values [us] of a bilinear surface in (log2 x, log2 y) -> log latency fitted to the rows by least
    squares with a light second-difference smoothing (nodes without rows follow their neighbours); the median and
    90th-percentile absolute relative error of the surface on the rows."""
    import numpy as np

    lx, ly, lt = np.log2(np.asarray(x, float)), np.log2(np.asarray(y, float)), np.log(np.asarray(t, float))
    gx_, gy_ = np.asarray(gx, float), np.asarray(gy, float)
    fx = np.clip(np.interp(lx, gx_, np.arange(len(gx_))), 0, len(gx_) - 1)
    fy = np.clip(np.interp(ly, gy_, np.arange(len(gy_))), 0, len(gy_) - 1)
    x0 = np.minimum(np.floor(fx).astype(int), len(gx_) - 2)
    y0 = np.minimum(np.floor(fy).astype(int), len(gy_) - 2)
    wx, wy = fx - x0, fy - y0
    nx, ny = len(gx_), len(gy_)
    size = nx * ny
    cols = [x0 * ny + y0, (x0 + 1) * ny + y0, x0 * ny + y0 + 1, (x0 + 1) * ny + y0 + 1]
    weights = [(1 - wx) * (1 - wy), wx * (1 - wy), (1 - wx) * wy, wx * wy]
    normal = np.zeros((size, size))
    rhs = np.zeros(size)
    for ci, wi in zip(cols, weights, strict=True):
        np.add.at(rhs, ci, wi * lt)
        for cj, wj in zip(cols, weights, strict=True):
            np.add.at(normal, (ci, cj), wi * wj)
    smooth = 0.02 * max(len(lt), 1) / size
    for i in range(nx):
        for j in range(ny):
            for di, dj in ((1, 0), (0, 1)):
                if i + 2 * di < nx and j + 2 * dj < ny:
                    idx = [i * ny + j, (i + di) * ny + j + dj, (i + 2 * di) * ny + j + 2 * dj]
                    coef = np.array([1.0, -2.0, 1.0])
                    normal[np.ix_(idx, idx)] += smooth * np.outer(coef, coef)
    nodes = np.linalg.solve(normal + 1e-9 * np.eye(size), rhs)
    fitted = sum(w * nodes[c] for c, w in zip(cols, weights, strict=True))
    error = np.abs(np.exp(fitted - lt) - 1.0)
    table = [[_sig(float(np.exp(nodes[i * ny + j]))) for j in range(ny)] for i in range(nx)]
    return table, float(np.median(error)), float(np.quantile(error, 0.9))


def moe_shape_key(hidden: int, inter: int, experts: int, topk: int, tp: int) -> str:
    """The key of one measured MoE shape in `moe[backend][dtype]["shapes"]` (the planner builds the same key)."""
    return f"{hidden}x{inter}x{experts}x{topk}/tp{tp}"


def moe_layer_terms(figures: Sequence[float], log2_shard: float, per_weight: float, bandwidth: float, peak: float
                    ) -> tuple[Any, Any, Any]:
    """One fused MoE layer's time [s] from a bin's (floor [us], stream, compute) at experts of 2^`log2_shard` bytes
    on one GPU, as the planner reads them (`kernels.GpuKernels.moe_layer`, `performance.moe_step_s`), in its three
    terms per (experts, top-k) of `MOE_MONOTONE_ROUTINGS` x `MOE_MONOTONE_TOKENS`: the floor, the read of the
    experts the tokens route to (uniform routing) at `stream` of `bandwidth` [bytes/s] (capped at it) and their
    FLOPs at `compute` of `peak` [FLOP/s]."""
    import numpy as np

    floor, stream, compute = (float(v) for v in figures)
    shard = 2.0 ** log2_shard
    experts, topk = (np.array([r[i] for r in MOE_MONOTONE_ROUTINGS], float)[:, None] for i in (0, 1))
    n = np.asarray(MOE_MONOTONE_TOKENS, float)[None, :]
    touched = experts * (1.0 - (1.0 - topk / experts) ** n)
    return (np.full(touched.shape, floor * 1e-6), touched * shard / (min(stream, 1.0) * bandwidth),
            n * topk * 2.0 * shard / per_weight / (compute * peak))


def monotone_moe_bins(curves: dict[str, list[float]], per_weight: float, bandwidth: float, peak: float) -> int:
    """Make `curves`' layer time (the sum of `moe_layer_terms`) non-decreasing in the bins' expert bytes, in place;
    how many bins were repaired.

    A layer of smaller experts can run a larger one's kernels on padded weights, so it never takes longer; the bins'
    medians say otherwise where a bin's shapes differ from the next one's (GB200 and B300 under vLLM in FP8: the
    2^18-byte bin holds one narrow TP-32 shape, whose layer takes three times the 2^19-byte bin's). The floor is an
    intercept fitted together with the stream rate, and the next bin's figures belong to other shapes, so neither
    one figure is clipped nor the next bin's taken: from the largest bin down, a bin whose layer takes longer than
    the next larger bin's (as repaired) at any of the representative routings and token counts runs faster by the
    smallest factor that brings it to that bin's time at all of them (its floor times the factor, its stream and
    compute shares over it), keeping its own balance of floor, read and compute. Where that would read faster than
    the HBM, the stream share stops at 1 and the floor and compute take the rest (the larger bin reads at least
    twice the bytes at no more than the HBM's rate, so the rest is always positive)."""
    import numpy as np

    names = ("floor_us", "stream", "compute")
    repaired = 0
    for i in range(len(MOE_SHARD_LOG2) - 2, -1, -1):
        floor, stream, compute = (curves[name][i] for name in names)
        own = moe_layer_terms((floor, stream, compute), MOE_SHARD_LOG2[i], per_weight, bandwidth, peak)
        target = sum(moe_layer_terms([curves[name][i + 1] for name in names], MOE_SHARD_LOG2[i + 1], per_weight,
                                     bandwidth, peak))
        factor = float(np.min(target / sum(own)))
        if factor >= 1.0:
            continue
        stream = min(stream, 1.0)
        if stream / factor <= 1.0:
            fixed = (floor * factor, stream / factor, compute / factor)
        else:
            factor = float(np.min((target - own[1] * stream) / (own[0] + own[2])))
            fixed = (floor * factor, 1.0, compute / factor)
        for name, value in zip(names, fixed, strict=True):
            curves[name][i] = _sig(value)
        repaired += 1
    return repaired


def moe_curves(frame: Any, peaks: dict[str, Any], label: str, check: list[str]
               ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """`moe[backend]` of one system from its moe_perf table (module docstring), per dtype with at least three
    shapes; bins without a shape take the nearest bin's values; and per dtype how many bins
    `monotone_moe_bins` repaired."""
    import numpy as np

    frame = frame[(frame.distribution == MOE_DISTRIBUTION) & (frame.moe_ep_size == 1)]
    keys = ["moe_dtype", "hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size"]
    fastest = frame.groupby([*keys, "num_tokens"]).latency.min().reset_index()
    out: dict[str, dict[str, list[float]]] = {}
    repairs: dict[str, int] = {}
    for dtype, (per_weight, peak_name) in MOE_DTYPES.items():
        peak = (peaks.get(peak_name) or peaks.get("fp8_tflops") or peaks["bf16_tflops"]) * 1e12
        fits = []
        keys_of_fits: list[str] = []
        for (_, h, inter, experts, topk, tp), rows in fastest[fastest.moe_dtype == dtype].groupby(keys):
            rows = rows.sort_values("num_tokens")
            n = rows.num_tokens.to_numpy(float)
            t = rows.latency.to_numpy(float) * 1e-3
            shard = 3.0 * h * inter / tp * per_weight
            small, large = n <= 32, n >= 4096
            if small.sum() < 4 or large.sum() < 2:
                continue
            touched = experts * (1.0 - (1.0 - topk / experts) ** n[small]) * shard
            (floor, per_byte), *_ = np.linalg.lstsq(np.vstack([np.ones(small.sum()), touched]).T, t[small],
                                                     rcond=None)
            slope = np.polyfit(n[large], t[large], 1)[0]
            if floor <= 0 or per_byte <= 0 or slope <= 0:
                continue  # a shape whose small calls do not follow the line (noise): left out
            fits.append((math.log2(shard), floor * 1e6, 1.0 / per_byte / (peaks["mem_bw_gb_s"] * 1e9),
                         topk * 6.0 * h * inter / tp / slope / peak))
            keys_of_fits.append(moe_shape_key(int(h), int(inter), int(experts), int(topk), int(tp)))
        if len(fits) < 3:
            continue
        table = np.array(fits)
        curves: dict[str, Any] = {"floor_us": [], "stream": [], "compute": []}
        for b in MOE_SHARD_LOG2:
            near = np.abs(np.round(table[:, 0]) - b)
            chosen = table[near == near.min()]
            for name, column in (("floor_us", 1), ("stream", 2), ("compute", 3)):
                curves[name].append(_sig(float(np.median(chosen[:, column]))))
        repaired = monotone_moe_bins(curves, per_weight, peaks["mem_bw_gb_s"] * 1e9, peak)
        curves["shapes"] = {key: [_sig(float(v)) for v in row[1:]] for key, row in zip(keys_of_fits, fits, strict=True)}
        out[dtype] = curves
        if repaired:
            repairs[dtype] = repaired
        check.append(f"{label} moe {dtype:12s} shapes {len(fits):4d}  floor {np.median(table[:, 1]):5.1f} us  "
                     f"stream {np.median(table[:, 2]):.2f}  compute {np.median(table[:, 3]):.2f}  "
                     f"bins repaired {repaired}")
    return out, repairs


def _full_attention(frame: Any) -> Any:
    """Rows of full attention (no sliding window; older tables have no window column), beam 1, head dim 64/128."""
    keep = (frame.beam_width == 1) & frame.head_dim.isin([64, 128])
    if "window_size" in frame.columns:
        keep &= frame.window_size == 0
    return frame[keep]


def mla_decode_table(frame: Any, peak_bytes_s: float, label: str, check: list[str]) -> dict[str, list[float]]:
    """Per KV dtype, ns per (sequence, context token) of one layer's absorbed MLA decode at 1, 2, 4, ..., 128 query
    heads a GPU (the module docstring); a dtype without rows at every head count is left out."""
    tables: dict[str, list[float]] = {}
    for kv, rows in frame.groupby("kv_cache_dtype"):
        kv_bytes = 2.0 if kv in ("bfloat16", "float16") else 1.0
        pairs = rows.batch_size * (rows.step + 1)
        ns = rows.latency * 1e6 / pairs
        keep = (pairs >= MLA_LINEAR_PAIRS) & (MLA_LATENT_ELEMENTS * kv_bytes / (ns * 1e-9) <= peak_bytes_s)
        values, spread = [], []
        for log2_heads in MLA_HEADS_LOG2:
            at = ns[keep & (rows.num_heads == 2**log2_heads)]
            if len(at) < 5:
                break
            median = float(at.median())
            values.append(_sig(median))
            spread.append(max(abs(float(at.quantile(0.1)) / median - 1), abs(float(at.quantile(0.9)) / median - 1)))
        if len(values) == len(MLA_HEADS_LOG2):
            # Fewer heads never take longer than more, which a padded call would run in (B200's 32-head rows are
            # slower than its 64- and 128-head ones).
            values = [min(values[i:]) for i in range(len(values))]
            key = "bf16" if kv_bytes == 2.0 else "fp8"
            tables[key] = values
            check.append(f"{label} {key:4s} ns/pair at 1..128 heads {values}  p10/p90 within "
                         f"{100 * max(spread):4.1f}% of the median")
    return tables


def mla_prefill_rates(frame: Any, label: str, check: list[str]) -> list[float] | None:
    """TFLOPS of MLA context attention at 1, 2, 4, ..., 128 query heads a GPU (the module docstring); None where a
    head count has too few rows."""
    rows = frame[frame.kv_cache_dtype == "bfloat16"]
    if "mla_dtype" in rows:
        rows = rows[rows.mla_dtype == "bfloat16"]
    rows = rows[(rows.isl >= MLA_PREFILL_MIN_PROMPT) & (rows.batch_size * rows.isl >= MLA_PREFILL_MIN_TOKENS)]
    flops = rows.batch_size * rows.num_heads * MLA_PREFILL_DIMS * rows.isl.astype(float) ** 2
    tflops = flops / (rows.latency * 1e-3) / 1e12
    values = []
    for log2_heads in MLA_HEADS_LOG2:
        at = tflops[rows.num_heads == 2**log2_heads]
        if len(at) < 5:
            return None
        values.append(_sig(float(at.median())))
    check.append(f"{label} TFLOPS at 1..128 heads {values}")
    return values


def _system(systems: Path, name: str, check: list[str], slots: dict[str, Any]) -> dict[str, Any] | None:
    import pandas as pd
    import yaml

    spec_path = systems / f"{name}.yaml"
    data = systems / "data" / name
    if not spec_path.is_file() or not data.is_dir():
        return None
    spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    gpu, node = spec["gpu"], spec.get("node", {})
    out: dict[str, Any] = {
        "device": None,
        "peaks": {
            "mem_bw_gb_s": gpu["mem_bw"] / 1e9,
            "bf16_tflops": gpu["bfloat16_tc_flops"] / 1e12,
            "fp8_tflops": (gpu.get("fp8_tc_flops") or 0) / 1e12 or None,
            "fp4_tflops": (gpu.get("fp4_tc_flops") or 0) / 1e12 or None,
            "int8_tops": (gpu.get("int8_tc_flops") or 0) / 1e12 or None,
            "intra_node_gb_s": node.get("intra_node_bw", 0) / 1e9 or None,
        },
        "versions": {}, "gemm": {}, "decode_attention": {}, "mla_decode": {}, "mla_prefill": {},
        "prefill_attention": {}, "allreduce": {}, "moe": {},
        "filled": {}, "repaired": {},
    }
    peak_bytes_s = gpu["mem_bw"]
    for backend in BACKENDS:
        current = current_version(slots, name, backend)
        found = newest(data / "gemm" / backend, "gemm_perf.parquet", current)
        if found:
            version, path = found
            frame = pd.read_parquet(path, columns=["device", "gemm_dtype", "m", "n", "k", "latency"])
            out["device"] = out["device"] or str(frame.device.iloc[0])
            tables = {}
            for dtype in GEMM_DTYPES:
                made = gemm_table(frame, dtype)
                if made:
                    tables[dtype], filled, repaired = made
                    if filled:
                        out["filled"][f"gemm/{backend}/{dtype}"] = filled
                    if repaired:
                        out["repaired"][f"gemm/{backend}/{dtype}"] = repaired
            if tables:
                out["gemm"][backend] = tables
                out["versions"][f"gemm/{backend}"] = version
        found = newest(data / "attention" / backend, "generation_attention_perf.parquet", current)
        if found:
            version, path = found
            frame = _full_attention(pd.read_parquet(path))
            tables = {}
            for kv, rows in frame.groupby("kv_cache_dtype"):
                kv_bytes = 2.0 if kv in ("bfloat16", "float16") else 1.0
                tokens = rows.batch_size * (rows.isl + rows.step)
                read = 2.0 * tokens * rows.num_key_value_heads * rows.head_dim * kv_bytes
                seconds = rows.latency * 1e-3
                keep = read / seconds <= peak_bytes_s  # faster than HBM allows: a collection artefact
                if keep.sum() < 100:
                    continue
                units = rows.batch_size * rows.num_key_value_heads
                table, med, p90 = surface(read[keep], units[keep], rows.latency[keep] * 1e3, DECODE_BYTES_LOG2,
                                          DECODE_UNITS_LOG2)
                key = "bf16" if kv_bytes == 2.0 else "fp8"
                tables[key] = table
                check.append(f"{name:20s} decode attention {backend:6s} {key:4s} rows {int(keep.sum()):6d} "
                             f"dropped {int((~keep).sum()):5d}  median {100 * med:5.1f}%  p90 {100 * p90:5.1f}%")
            if tables:
                out["decode_attention"][backend] = tables
                out["versions"][f"decode_attention/{backend}"] = version
        for kind, filename in (("mla_decode", "generation_mla_perf.parquet"),
                               ("mla_prefill", "context_mla_perf.parquet")):
            found = newest(data / "mla" / backend, filename, current)
            label = f"{name:20s} {kind.replace('_', ' ')} {backend:6s}"
            reduced = None if not found else (
                mla_decode_table(pd.read_parquet(found[1]), peak_bytes_s, label, check) if kind == "mla_decode"
                else mla_prefill_rates(pd.read_parquet(found[1]), label, check))
            if found and reduced:
                out[kind][backend] = reduced
                out["versions"][f"{kind}/{backend}"] = found[0]
        found = newest(data / "attention" / backend, "context_attention_perf.parquet", current)
        if found:
            version, path = found
            frame = _full_attention(pd.read_parquet(path))
            rows = frame[(frame.kv_cache_dtype == "bfloat16") & (frame.attn_dtype == "bfloat16")]
            if len(rows) >= 100:
                flops = 2.0 * rows.batch_size * rows.num_heads * rows.head_dim * rows.isl.astype(float) ** 2
                units = rows.batch_size * rows.num_heads
                table, med, p90 = surface(flops, units, rows.latency * 1e3, PREFILL_FLOPS_LOG2, PREFILL_UNITS_LOG2)
                out["prefill_attention"][backend] = table
                out["versions"][f"prefill_attention/{backend}"] = version
                check.append(f"{name:20s} prefill attention {backend:6s}      rows {len(rows):6d}"
                             f"               median {100 * med:5.1f}%  p90 {100 * p90:5.1f}%")
        found = newest(data / "moe" / backend, "moe_perf.parquet", current)
        if found:
            version, path = found
            curves, repairs = moe_curves(pd.read_parquet(path), out["peaks"], f"{name:20s} {backend:6s}", check)
            if curves:
                out["moe"][backend] = curves
                out["versions"][f"moe/{backend}"] = version
                out["repaired"].update({f"moe/{backend}/{dtype}": n for dtype, n in repairs.items()})
    # All-reduce: the faster of NCCL and any backend's custom kernel, per size.
    curves: dict[int, list[tuple[Any, Any]]] = {tp: [] for tp in TP_SIZES}
    found = newest(data / "comm" / "nccl", "nccl_perf.parquet")
    if found:
        frame = pd.read_parquet(found[1])
        frame = frame[(frame.op_name == "all_reduce") & frame.nccl_dtype.isin(["half", "bfloat16"])]
        out["versions"]["allreduce/nccl"] = found[0]
        for tp in TP_SIZES:
            rows = frame[frame.num_gpus == tp].groupby("message_size").latency.min()
            if len(rows):
                curves[tp].append((rows.index.values * 2.0, rows.values * 1e3))
    for backend in BACKENDS:
        found = newest(data / "comm" / backend, "custom_allreduce_perf.parquet",
                       current_version(slots, name, backend))
        if not found:
            continue
        frame = pd.read_parquet(found[1])
        out["versions"][f"allreduce/{backend}"] = found[0]
        for tp in TP_SIZES:
            rows = frame[frame.num_gpus == tp].groupby("message_size").latency.min()
            if len(rows):
                curves[tp].append((rows.index.values * 2.0, rows.values * 1e3))
    import numpy as np

    for tp, measured in curves.items():
        if not measured:
            continue
        sizes = 2.0 ** np.array(ALLREDUCE_BYTES_LOG2)
        best = np.full(len(sizes), np.inf)
        for size, us in measured:
            order = np.argsort(size)
            size, us = size[order], us[order]
            inside = (sizes >= size[0]) & (sizes <= size[-1])
            interp = np.exp(np.interp(np.log(sizes), np.log(size), np.log(us)))
            best = np.where(inside, np.minimum(best, interp), best)
        if np.all(np.isfinite(best)):
            out["allreduce"][str(tp)] = [_sig(float(v)) for v in best]
    return out


def derive(systems: Path, check: list[str]) -> dict[str, Any]:
    """Every system's tables: {"meta": what they share, "systems": {name: tables}} (`write_tables` writes them)."""
    result: dict[str, Any] = {
        "meta": {
            "about": ("Measured kernel latencies reduced for inferplan's step-time model "
                      "(inferplan/planner/model/kernels.py)"),
            "source": SOURCE,
            "licence": "Apache-2.0; see NOTICE and inferplan/planner/data/LICENSE-aiconfigurator",
            "derived_by": "scripts/derive_kernel_tables.py",
            "units": "latency in microseconds per call on one GPU",
            "gemm_m": list(GEMM_M),
            "gemm_nk": list(GEMM_NK),
            "decode_attention_axes": {"log2_kv_bytes": list(DECODE_BYTES_LOG2),
                                      "log2_batch_x_kv_heads": list(DECODE_UNITS_LOG2)},
            "mla_log2_heads": list(MLA_HEADS_LOG2),
            "mla_decode_units": "ns per (sequence, context token) of one layer's decode attention",
            "mla_prefill_units": "TFLOPS of causal context attention, 2 x heads x (192 + 128) per (query, key) pair",
            "prefill_attention_axes": {"log2_causal_flops": list(PREFILL_FLOPS_LOG2),
                                       "log2_batch_x_heads": list(PREFILL_UNITS_LOG2)},
            "allreduce_log2_bytes": list(ALLREDUCE_BYTES_LOG2),
            "moe_shard_log2_bytes": list(MOE_SHARD_LOG2),
            "moe_distribution": MOE_DISTRIBUTION,
        },
        "systems": {},
    }
    slots = current_versions(systems)
    for name in SYSTEMS:
        made = _system(systems, name, check, slots)
        if made and made["gemm"]:
            result["systems"][name] = made
    return result


def write_tables(tables: dict[str, Any], out: Path) -> int:
    """Write `tables` (`derive`) into the folder `out` as the planner reads them (`kernels.system_tables`): one file
    per system, `<system>.json`, and `meta.json` with what they share and `systems`, their names in sorted order,
    so a plan reads only the systems its GPUs use. Returns the bytes written."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"meta": {**tables["meta"], "systems": sorted(tables["systems"])}, **tables["systems"]}
    size = 0
    for name, content in files.items():
        text = json.dumps(content, separators=(",", ":"), sort_keys=True) + "\n"
        (out / f"{name}.json").write_text(text, encoding="ascii")
        size += len(text)
    return size


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic-dir", help="an unpacked aiconfigurator-core (the package dir or a folder holding it)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the folder to write (default {OUT.relative_to(REPO)})")
    parser.add_argument("--check", action="store_true", help="print what the reduction costs per table")
    args = parser.parse_args(argv)
    systems = find_systems_dir(args.aic_dir)
    if systems is None:
        print(f"aiconfigurator-core not found: {INSTALL_HINT} (or pass --aic-dir)", file=sys.stderr)
        return 2
    missing = missing_systems(systems)
    if missing:
        print(f"{systems} holds no measured data for {', '.join(missing)} (a wheel unpacked in part? unzip all of "
              f"it): nothing written", file=sys.stderr)
        return 2
    version = package_version(systems)
    if version != AIC_VERSION:
        print(f"note: aiconfigurator-core {version or '(version unknown)'} at {systems.parent}; the shipped tables "
              f"and meta.source are of {AIC_VERSION} ({INSTALL_HINT})", file=sys.stderr)
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        import yaml  # noqa: F401
    except ImportError as exc:
        print(f"{exc.name} is missing: {INSTALL_HINT}", file=sys.stderr)
        return 2
    check: list[str] = []
    tables = derive(systems, check)
    empty = [name for name in SYSTEMS if name not in tables["systems"]]
    if empty:
        print(f"no GEMM table derived for {', '.join(empty)}: nothing written", file=sys.stderr)
        return 2
    size = write_tables(tables, args.out)
    print(f"wrote {args.out} ({size / 1024:.0f} KiB): {', '.join(sorted(tables['systems']))}")
    if args.check:
        print("\n".join(check))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
