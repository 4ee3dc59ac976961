"""Achievable-efficiency figures from NVIDIA AIConfigurator's measured operator tables (prints; asserts nothing).

Usage (from the repository root):

    python bench/aic_tables.py [--aic-dir DIR]

Data: the `aiconfigurator-core` package (0.12.0, Apache-2.0, on PyPI) ships per-operator timing tables
under aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/*.parquet (a collection_meta.yaml
beside each) and each system's peak figures in aiconfigurator_core/systems/<system>.yaml. The package dir is
found with importlib (`importlib.util.find_spec("aiconfigurator_core")`, not imported), or taken from
--aic-dir: either the package dir itself (holding systems/) or a folder holding aiconfigurator_core/. When
neither is there, or pandas/pyarrow are missing, the script prints how to install them and exits 0:

    pip install aiconfigurator-core pyarrow pandas

The project does not depend on these; pandas (with pyarrow) and yaml are imported inside functions.

Units assumed (checked against the tables, the yaml comments and the package's op signatures):
  * `latency` in every table is milliseconds per call (e.g. H200 bf16 GEMM 32768x65536x12288 at 63.8 ms is
    827 TFLOP/s, 84% of the 989 TFLOP/s in h200_sxm.yaml; read as microseconds it would be ~840x the peak).
  * GEMM rows are y[m, n] = x[m, k] @ W[k, n]: 2*m*n*k FLOPs; weight bytes n*k*bytes_per_weight (bf16 2,
    fp8/fp8_block/int8 1, nvfp4/int4 0.5). Activation and output bytes are ignored (tiny for m <= 8).
  * Generation (decode) attention: one query token per sequence (isl = 1); the KV length is isl + step;
    KV bytes read = 2 (K and V) * batch_size * kv_len * num_key_value_heads * head_dim * kv bytes
    (bfloat16 2, fp8 1). Only full-attention rows (window_size 0, beam_width 1) with head_dim 64, 128 or
    256 are used: head_dim 192 rows (MLA-style, V narrower than K) reach up to 1.07x mem_bw under this
    formula, and head_dim 512 rows (likely an MLA latent shared by K and V) would be double counted.
  * Comm tables: `message_size` is a number of ELEMENTS (the ops take num_elements_per_token / hidden
    size), so message bytes = message_size * 2 for half/bfloat16. Only half/bfloat16 all_reduce rows are
    used. algbw = bytes / time; busbw = 2 (n - 1) / n * bytes / time; GB/s = 1e9 bytes/s.
  * Yaml peaks are dense tensor-core FLOP/s (bfloat16_tc_flops, fp8_tc_flops, int8_tc_flops,
    fp4_tc_flops) and HBM bytes/s (mem_bw). A dtype without a yaml peak (fp8 on A100) gets no fraction.

Selection: for each system among a100_sxm, h100_sxm, h200_sxm, b200_sxm that has data, and for each of
vllm, sglang, trtllm, the newest version dir that holds the table (a newer dir with only a reuse.yaml is
reported and skipped). NCCL uses the newest nccl/<version> with nccl_perf.parquet (the yaml's
misc.nccl_version, which AIConfigurator itself uses, is printed beside it). Where a table has several
kernel_source values (or repeated rows) for one shape, the fastest row is kept ("best kernel per shape");
`rows` counts table rows behind a figure, `shapes` the distinct shapes after that reduction.

Sections:
  1. dense GEMM throughput / dtype peak over compute-bound shapes (m >= 4096, n >= 4096, k >= 4096);
  2. weight-streaming bandwidth / mem_bw over memory-bound GEMMs (m <= 8, weights >= 64 MiB), and KV bytes
     / time / mem_bw over decode attention rows with KV >= 64 MiB;
  3. all-reduce per TP size (2, 4, 8): latency at the smallest message, algbw and busbw at the largest.
A figure above 1.0 of a yaml peak is physically impossible; `>peak` counts such shapes, and records with
any are printed but left out of the summary (e.g. a100_sxm trtllm 1.0.0 decode attention).

`efficiency_figures(aic_dir)` returns the same numbers as plain data.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm")
BACKENDS = ("vllm", "sglang", "trtllm")
TP_SIZES = (2, 4, 8)
MIB = 2**20
MIN_WEIGHT_BYTES = 64 * MIB
MIN_KV_BYTES = 64 * MIB
INSTALL_HINT = "pip install aiconfigurator-core pyarrow pandas"

# gemm_dtype -> (yaml peak key, bytes per weight element)
GEMM_DTYPES: dict[str, tuple[str, float]] = {
    "bfloat16": ("bfloat16_tc_flops", 2.0),
    "float16": ("bfloat16_tc_flops", 2.0),
    "fp16": ("bfloat16_tc_flops", 2.0),
    "fp8": ("fp8_tc_flops", 1.0),
    "fp8_block": ("fp8_tc_flops", 1.0),
    "sq": ("int8_tc_flops", 1.0),
    "int8_wo": ("bfloat16_tc_flops", 1.0),
    "int4_wo": ("bfloat16_tc_flops", 0.5),
    "nvfp4": ("fp4_tc_flops", 0.5),
}
KV_BYTES = {"bfloat16": 2, "float16": 2, "fp16": 2, "fp8": 1, "int8": 1}
ATTN_HEAD_DIMS = (64, 128, 256)
HALF_DTYPES = ("half", "bfloat16", "float16", "fp16")


# ----------------------------------------------------------------------------------------------------------
# locating data


def find_aic_dir(aic_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Return the aiconfigurator_core package dir (the one holding systems/), or None."""
    if aic_dir is not None:
        base = Path(aic_dir).expanduser()
        for cand in (base, base / "aiconfigurator_core"):
            if (cand / "systems").is_dir():
                return cand
        print(f"note: --aic-dir {base} holds no systems/ or aiconfigurator_core/systems/", file=sys.stderr)
    try:
        spec = importlib.util.find_spec("aiconfigurator_core")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            if (Path(loc) / "systems").is_dir():
                return Path(loc)
    return None


def _version_key(version: str) -> tuple[tuple[int, ...], int, int]:
    """Sort key for versions like 2.23, 0.5.6.post2, 1.3.0rc20, 0.1.dev19262 (newest sorts last)."""
    m = re.match(r"^v?(\d+(?:\.\d+)*)[.\-_]?(dev|a|b|rc|post)?[.\-_]?(\d*)", version)
    if not m:
        return ((0,), 0, 0)
    release = tuple(int(p) for p in m.group(1).split("."))
    release = release + (0,) * (4 - len(release))
    phase = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4, "post": 5}[m.group(2)]
    return (release, phase, int(m.group(3) or 0))


def _newest_with(table_dir: Path, filename: str) -> tuple[str | None, list[str]]:
    """(newest version dir under table_dir holding filename, notes about newer dirs without it)."""
    if not table_dir.is_dir():
        return None, []
    notes: list[str] = []
    for vdir in sorted((d for d in table_dir.iterdir() if d.is_dir()), key=lambda d: _version_key(d.name),
                       reverse=True):
        if (vdir / filename).is_file():
            return vdir.name, notes
        why = "reuse.yaml only" if (vdir / "reuse.yaml").is_file() else "no such table"
        notes.append(f"{table_dir.name}/{vdir.name} skipped for {filename} ({why})")
    return None, notes


def _load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    with path.open() as fh:
        data = yaml.safe_load(fh)
    return data if isinstance(data, dict) else {}


def _read(path: Path) -> Any:
    import pandas as pd

    return pd.read_parquet(path)


# ----------------------------------------------------------------------------------------------------------
# statistics on plain floats


def _median(xs: Sequence[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _quantile(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _summary(xs: Sequence[float]) -> dict[str, float | None]:
    return {"median": _median(xs), "p90": _quantile(xs, 0.9), "max": max(xs) if xs else None,
            "over_peak": sum(1 for x in xs if x > 1.0)}


# ----------------------------------------------------------------------------------------------------------
# per-table figures


def _gemm_figures(df: Any, gpu: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(compute-bound records, memory-bound records), one per gemm_dtype present."""
    compute: list[dict[str, Any]] = []
    membw: list[dict[str, Any]] = []
    mem_bw = float(gpu.get("mem_bw") or 0)
    for dtype in sorted(df["gemm_dtype"].unique()):
        if dtype not in GEMM_DTYPES:
            continue
        peak_key, bpw = GEMM_DTYPES[dtype]
        peak = float(gpu.get(peak_key) or 0)
        sub = df[df["gemm_dtype"] == dtype]
        big = sub[(sub["m"] >= 4096) & (sub["n"] >= 4096) & (sub["k"] >= 4096)]
        best = big.groupby(["m", "n", "k"], as_index=False)["latency"].min()
        fr = (2.0 * best["m"] * best["n"] * best["k"] / (best["latency"] * 1e-3) / peak).tolist() if peak else []
        compute.append({"dtype": dtype, "peak_tflops": peak / 1e12 if peak else None, "rows": len(big),
                        "shapes": len(best), **_summary(fr)})
        small = sub[(sub["m"] <= 8) & (sub["n"] * sub["k"] * bpw >= MIN_WEIGHT_BYTES)]
        best = small.groupby(["m", "n", "k"], as_index=False)["latency"].min()
        bw = (best["n"] * best["k"] * bpw / (best["latency"] * 1e-3)).tolist()
        fr = [b / mem_bw for b in bw] if mem_bw else []
        membw.append({"source": f"gemm {dtype}", "rows": len(small), "shapes": len(best),
                      "median_tb_s": (_median(bw) or 0) / 1e12 if bw else None, **_summary(fr)})
    return compute, membw


def _attention_figures(df: Any, gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """KV-bound decode attention: KV bytes / time / mem_bw, one record per kv_cache_dtype."""
    out: list[dict[str, Any]] = []
    mem_bw = float(gpu.get("mem_bw") or 0)
    if "window_size" in df.columns:
        df = df[df["window_size"] == 0]
    if "beam_width" in df.columns:
        df = df[df["beam_width"] == 1]
    df = df[df["head_dim"].isin(ATTN_HEAD_DIMS)]
    for kvd in sorted(df["kv_cache_dtype"].unique()):
        if kvd not in KV_BYTES:
            continue
        sub = df[df["kv_cache_dtype"] == kvd]
        kv = 2.0 * sub["batch_size"] * (sub["isl"] + sub["step"]) * sub["num_key_value_heads"] * sub["head_dim"]
        sub = sub.assign(kv_bytes=kv * KV_BYTES[kvd])
        sub = sub[sub["kv_bytes"] >= MIN_KV_BYTES]
        keys = ["batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim"]
        best = sub.groupby(keys, as_index=False).agg(latency=("latency", "min"), kv_bytes=("kv_bytes", "first"))
        bw = (best["kv_bytes"] / (best["latency"] * 1e-3)).tolist()
        fr = [b / mem_bw for b in bw] if mem_bw else []
        out.append({"source": f"decode attn kv {kvd}", "rows": len(sub), "shapes": len(best),
                    "median_tb_s": (_median(bw) or 0) / 1e12 if bw else None, **_summary(fr)})
    return out


def _allreduce_figures(df: Any, source: str, version: str) -> list[dict[str, Any]]:
    """Per (variant, TP) all-reduce figures from an nccl_perf or custom_allreduce_perf table."""
    if "op_name" in df.columns:
        df = df[df["op_name"] == "all_reduce"]
    dcol = "nccl_dtype" if "nccl_dtype" in df.columns else "allreduce_dtype"
    if dcol in df.columns:
        df = df[df[dcol].isin(HALF_DTYPES)]
    vcol = next((c for c in ("backend", "implementation") if c in df.columns), None)
    out: list[dict[str, Any]] = []
    variants = sorted(df[vcol].unique()) if vcol else [None]
    for variant in variants:
        vdf = df if vcol is None else df[df[vcol] == variant]
        for tp in TP_SIZES:
            sub = vdf[vdf["num_gpus"] == tp]
            if sub.empty:
                continue
            best = sub.groupby("message_size", as_index=False)["latency"].min().sort_values("message_size")
            small, large = best.iloc[0], best.iloc[-1]
            large_bytes = float(large["message_size"]) * 2
            t = float(large["latency"]) * 1e-3
            algbw = large_bytes / t / 1e9
            out.append({"source": source, "version": version, "variant": str(variant or source), "tp": tp,
                        "rows": len(sub), "small_bytes": int(small["message_size"]) * 2,
                        "latency_us": float(small["latency"]) * 1e3, "large_bytes": int(large_bytes),
                        "algbw_gb_s": algbw, "bus_gb_s": algbw * 2 * (tp - 1) / tp})
    return out


# ----------------------------------------------------------------------------------------------------------
# public entry point


def _system_figures(systems_dir: Path, system: str) -> dict[str, Any] | None:
    yaml_path = systems_dir / f"{system}.yaml"
    if not yaml_path.is_file():
        return None
    spec = _load_yaml(yaml_path)
    gpu = spec.get("gpu") or {}
    data_dir = systems_dir / str(spec.get("data_dir") or f"data/{system}")
    if not data_dir.is_dir():
        return None
    detail: dict[str, list[dict[str, Any]]] = {"gemm": [], "bandwidth": [], "allreduce": []}
    notes: list[str] = []
    for backend in BACKENDS:
        version, skipped = _newest_with(data_dir / "gemm" / backend, "gemm_perf.parquet")
        notes += [f"gemm/{n}" for n in skipped]
        if version:
            compute, membw = _gemm_figures(_read(data_dir / "gemm" / backend / version / "gemm_perf.parquet"), gpu)
            tag = {"backend": backend, "version": version}
            detail["gemm"] += [{**tag, **r} for r in compute]
            detail["bandwidth"] += [{**tag, **r} for r in membw]
        version, skipped = _newest_with(data_dir / "attention" / backend, "generation_attention_perf.parquet")
        notes += [f"attention/{n}" for n in skipped]
        if version:
            df = _read(data_dir / "attention" / backend / version / "generation_attention_perf.parquet")
            detail["bandwidth"] += [{"backend": backend, "version": version, **r} for r in _attention_figures(df, gpu)]
    version, skipped = _newest_with(data_dir / "comm" / "nccl", "nccl_perf.parquet")
    notes += [f"comm/{n}" for n in skipped]
    if version:
        df = _read(data_dir / "comm" / "nccl" / version / "nccl_perf.parquet")
        detail["allreduce"] += _allreduce_figures(df, "nccl", version)
    for backend in BACKENDS:
        version, skipped = _newest_with(data_dir / "comm" / backend, "custom_allreduce_perf.parquet")
        if version:
            df = _read(data_dir / "comm" / backend / version / "custom_allreduce_perf.parquet")
            detail["allreduce"] += _allreduce_figures(df, backend, version)
    if not any(detail.values()):
        return None
    yaml_nccl = (spec.get("misc") or {}).get("nccl_version")
    if yaml_nccl:
        notes.append(f"yaml misc.nccl_version is {yaml_nccl}")
    return {**_summarise(detail), "peaks": {k: gpu.get(k) for k in
            ("mem_bw", "bfloat16_tc_flops", "fp8_tc_flops", "int8_tc_flops", "fp4_tc_flops")},
            "notes": notes, "detail": detail}


def _best(records: Iterable[dict[str, Any]], key: str) -> dict[str, Any] | None:
    cands = [r for r in records if r.get(key) is not None and not r.get("over_peak")]
    return max(cands, key=lambda r: r[key]) if cands else None


def _summarise(detail: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Headline numbers: the best backend's median (sources say which), and per-TP best all-reduce."""
    out: dict[str, Any] = {"sources": {}}
    picks = {
        "gemm_bf16_fraction": _best((r for r in detail["gemm"] if r["dtype"] == "bfloat16"), "median"),
        "gemm_fp8_fraction": _best((r for r in detail["gemm"] if r["dtype"] == "fp8"), "median"),
        "bandwidth_fraction": _best((r for r in detail["bandwidth"] if r["source"] == "gemm bfloat16"), "median"),
        "attention_bandwidth_fraction": _best(
            (r for r in detail["bandwidth"] if r["source"] == "decode attn kv bfloat16"), "median"),
    }
    for name, rec in picks.items():
        out[name] = rec["median"] if rec else None
        out["sources"][name] = f"{rec['backend']} {rec['version']} ({rec['rows']} rows)" if rec else None
    allreduce: dict[int, dict[str, Any]] = {}
    for tp in TP_SIZES:
        recs = [r for r in detail["allreduce"] if r["tp"] == tp]
        if not recs:
            continue
        fast = min(recs, key=lambda r: r["latency_us"])
        wide = max(recs, key=lambda r: r["bus_gb_s"])
        allreduce[tp] = {"latency_us": fast["latency_us"], "bus_gb_s": wide["bus_gb_s"],
                         "latency_source": f"{fast['variant']} {fast['version']}",
                         "bus_source": f"{wide['variant']} {wide['version']}"}
    out["allreduce"] = allreduce
    return out


def efficiency_figures(aic_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Achievable-efficiency figures per system from AIConfigurator tables, as plain data.

    `aic_dir` is the aiconfigurator_core package dir (or a folder holding it). Returns
    {system: {"gemm_bf16_fraction", "gemm_fp8_fraction", "bandwidth_fraction", "attention_bandwidth_fraction",
    "allreduce": {tp: {"latency_us", "bus_gb_s", "latency_source", "bus_source"}}, "sources", "peaks",
    "notes", "detail"}}. Fractions are the best backend's median (None when no table or no yaml peak);
    all-reduce latency is the lowest smallest-message latency and bus_gb_s the highest largest-message bus
    bandwidth over NCCL and the frameworks' custom all-reduce. Needs pandas with pyarrow.
    """
    pkg = find_aic_dir(aic_dir)
    if pkg is None:
        raise FileNotFoundError(f"no aiconfigurator_core systems/ under {aic_dir}")
    out: dict[str, Any] = {}
    for system in SYSTEMS:
        figs = _system_figures(pkg / "systems", system)
        if figs is not None:
            out[system] = figs
    return out


# ----------------------------------------------------------------------------------------------------------
# printing


def _fmt(value: Any, spec: str = ".3f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", MIB), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return f"{n}B"


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    print(title)
    print(line)
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print(line)
    for r in rows:
        print("| " + " | ".join(c.rjust(w) if i >= left else c.ljust(w)
                                for i, (c, w) in enumerate(zip(r, widths, strict=True))) + " |")
    print(line)
    print()


def print_tables(figs: dict[str, Any]) -> None:
    """Print the three sections and a per-system summary."""
    rows = [[s, r["backend"], r["version"], r["dtype"], _fmt(r["peak_tflops"], ".0f"), str(r["rows"]),
             str(r["shapes"]), _fmt(r["median"]), _fmt(r["p90"]), _fmt(r["max"]), str(r["over_peak"])]
            for s, f in figs.items() for r in f["detail"]["gemm"]]
    _table("1. Dense GEMM throughput / yaml peak (2mnk/time), compute-bound shapes m,n,k >= 4096",
           ["system", "backend", "version", "dtype", "peak TF/s", "rows", "shapes", "median", "p90", "max", ">peak"],
           rows, 4)
    rows = [[s, r["backend"], r["version"], r["source"], _fmt(f["peaks"]["mem_bw"] / 1e12, ".2f"), str(r["rows"]),
             str(r["shapes"]), _fmt(r["median_tb_s"], ".2f"), _fmt(r["median"]), _fmt(r["max"]), str(r["over_peak"])]
            for s, f in figs.items() for r in f["detail"]["bandwidth"]]
    _table("2. Achieved bytes/time / yaml mem_bw: GEMM m <= 8 with weights >= 64 MiB; decode attention KV >= 64 MiB",
           ["system", "backend", "version", "source", "mem_bw TB/s", "rows", "shapes", "med TB/s", "median", "max",
            ">peak"], rows, 4)
    rows = [[s, r["variant"], r["version"], str(r["tp"]), str(r["rows"]), _bytes(r["small_bytes"]),
             _fmt(r["latency_us"], ".1f"), _bytes(r["large_bytes"]), _fmt(r["algbw_gb_s"], ".0f"),
             _fmt(r["bus_gb_s"], ".0f")]
            for s, f in figs.items() for r in f["detail"]["allreduce"]]
    _table("3. All-reduce (bf16/half): latency at smallest message; algbw, busbw = 2(n-1)/n*bytes/time at largest",
           ["system", "source", "version", "tp", "rows", "small msg", "lat us", "large msg", "algbw GB/s",
            "busbw GB/s"], rows, 3)
    rows = []
    for s, f in figs.items():
        ar = f["allreduce"]
        rows.append([s, _fmt(f["gemm_bf16_fraction"]), _fmt(f["gemm_fp8_fraction"]), _fmt(f["bandwidth_fraction"]),
                     _fmt(f["attention_bandwidth_fraction"]),
                     *(f"{ar[tp]['latency_us']:.1f} / {ar[tp]['bus_gb_s']:.0f}" if tp in ar else "-"
                       for tp in TP_SIZES)])
    _table("Summary: best backend's median fraction; all-reduce best latency us / best busbw GB/s",
           ["system", "gemm bf16", "gemm fp8", "bw (gemm)", "bw (attn)", "AR tp2", "AR tp4", "AR tp8"], rows, 1)
    for s, f in figs.items():
        for name, src in f["sources"].items():
            if src:
                print(f"  {s} {name}: {src}")
        for tp, rec in f["allreduce"].items():
            print(f"  {s} allreduce tp{tp}: latency from {rec['latency_source']}, busbw from {rec['bus_source']}")
        for note in f["notes"]:
            print(f"  note: {s} {note}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic-dir", help="unpacked aiconfigurator_core package dir (or a folder holding it)")
    args = parser.parse_args(argv)
    pkg = find_aic_dir(args.aic_dir)
    if pkg is None:
        print("aiconfigurator-core not found (no installed package, no usable --aic-dir). Install it with:")
        print(f"    {INSTALL_HINT}")
        return 0
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        print("pandas and pyarrow are needed to read the parquet tables. Install them with:")
        print(f"    {INSTALL_HINT}")
        return 0
    print(f"aiconfigurator_core dir: {pkg}")
    print("units: latency ms; message_size in elements (x2 bytes for bf16/half); GB/s and TB/s are 1e9/1e12 B/s")
    print()
    figs = efficiency_figures(pkg)
    if not figs:
        print(f"no data for {', '.join(SYSTEMS)} under {pkg / 'systems'}")
        return 0
    print_tables(figs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
