"""Fit the efficiency factors on measured scenarios.

Procedure (docs/calibration.md): minimise, over the factors of every engine and GPU family present,

    sum over non-suspect rows of w x cauchy(log(predicted / measured))  +  weight x sum (log factor - log prior)^2

with w = 1 / sqrt(rows of the row's source), scaled to average 1 (`source_weights`).

Log errors make a 2x over- and under-prediction cost the same; the Cauchy loss log(1 + (e / 0.3)^2)
grows only logarithmically beyond about 35% error, so rows with a physical caveat (an overloaded run
whose queue the model places a little off) cannot drag the fit; the prior term pulls every factor
towards the neutral starting value `default_engine` (and 1.0 for GPU families), so an engine with
little data keeps values near it instead of fitting noise. The fit always starts from that prior, so
refitting the same file reproduces the shipped factors. The search is coordinate descent in log space: each
factor in turn is set to the best of a shrinking grid around its current value, re-evaluating only
the rows that factor touches; a per-SM streaming cap moves on a grid together with its line's bandwidth
efficiency (`JOINT_FACTORS`), and the GPTQ/AWQ dequantisation factors hold one value across an engine's
release lines (`TIED_FACTORS`). Deterministic for the same input.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from inferplan.planner.engines import base_line, engine_of_line, engine_profile, factor_key
from inferplan.planner.factors import (
    ENGINE_FACTOR_NAMES,
    FAMILY_FACTOR_NAMES,
    NO_SM_CAP_GB_S,
    EngineFactors,
    FactorSet,
    FamilyFactors,
    load_factors,
)
from inferplan.planner.gpus import GpuSpec, resolve_gpu
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import Scenario

# Physical bounds of each factor (the search never leaves them).
BOUNDS = {
    "bandwidth_efficiency": (0.3, 0.95),
    "decode_compute_efficiency": (0.1, 0.9),
    "prefill_compute_efficiency": (0.2, 0.9),
    "overlap_penalty": (0.0, 1.0),
    "step_overhead_ms": (0.1, 30.0),
    "sequence_overhead_ms": (0.005, 1.0),
    "request_overhead_ms": (0.0, 100.0),
    "quantized_bandwidth_scale": (0.3, 1.0),
    "expert_quantized_bandwidth_scale": (0.3, 1.0),
    "quantized_compute_scale": (0.3, 1.0),
    "non_torch_gib": (0.05, 6.0),
    "activation_scale": (0.2, 5.0),
    # GB/s one SM streams with the engine's own kernels: 3 is below any card's measured share, 100 (the prior)
    # caps nothing (rated bandwidth per SM is at most about 55 GB/s in the catalog).
    "sm_stream_gb_s": (3.0, NO_SM_CAP_GB_S),
    # GPU-family corrections on top of the catalog's peaks and the engine's efficiencies: bounded to what
    # the physics leaves room for (a family whose fit lands on a bound is a defect to look into).
    "bandwidth_scale": (0.6, 1.4),
    "compute_scale": (0.5, 1.5),
    "attention_scale": (0.5, 1.5),
    "overhead_scale": (0.5, 10.0),
}
# Factors whose prior is zero or whose scale is additive: searched and penalised on a linear scale. The
# per-sequence overhead is searched in log space (its prior is 0.05 ms; a linear grid over 0-1 ms steps by
# 0.06-0.25 ms and never resolves the values near the prior that large batches are sensitive to).
LINEAR_FACTORS = ("overlap_penalty", "request_overhead_ms")
PRIOR_WEIGHT = 0.5
CAUCHY_SCALE = 0.3
MIN_ROWS_FOR_ENGINE = 3
# Factors searched together with a partner: a per-SM cap changes only the cards with many GB/s per SM, and it
# pays only if the bandwidth efficiency rises on the others at the same time, a move one factor at a time
# never makes. The cap's first sweep spans its whole range (its prior caps nothing).
JOINT_FACTORS = {"sm_stream_gb_s": "bandwidth_efficiency"}
# Factors of an engine's kernels rather than of one release: a single value for all CUDA release lines of an
# engine, fitted on their rows together (vLLM's V0 and V1 lines dequantise GPTQ/AWQ with the same Marlin
# kernels). The bandwidth scale is what small batches show, the compute scale what large ones do.
TIED_FACTORS = ("quantized_bandwidth_scale", "quantized_compute_scale")


@dataclass(frozen=True)
class Calibration:
    factors: FactorSet
    loss_before: float
    loss_after: float
    rows: int
    rows_by_engine: dict[str, int]


def _cauchy(x: np.ndarray) -> np.ndarray:
    return np.log1p((x / CAUCHY_SCALE) ** 2)


# What a row the factors make unpredictable costs (a memory factor can leave a run no KV cache): as much as
# a 10x error, so that a fit can never improve its loss by making hard rows disappear. Rows no factor can
# make predictable (an unknown model) pay it whatever the factors, which moves no optimum.
UNPREDICTABLE_LOSS = float(np.log1p((math.log(10.0) / CAUCHY_SCALE) ** 2))


def source_weights(rows: Sequence[Scenario]) -> dict[str, float]:
    """Each row's weight in the loss: 1 / sqrt(rows of its source), scaled to average 1. A source is one
    harness on one set of machines, so its rows share its errors; weighting them this way keeps the largest
    source (GPUStack's 177 lines) from setting the factors it shares with the others on its own, while a source
    with more lines still counts for more."""
    per_source = Counter(r.source_name for r in rows)
    raw = {r.id: 1.0 / math.sqrt(per_source[r.source_name]) for r in rows}
    mean = sum(raw.values()) / len(raw) if raw else 1.0
    return {key: value / mean for key, value in raw.items()}


def _row_loss(rows: Sequence[Scenario], factors: FactorSet, weights: Mapping[str, float]) -> np.ndarray:
    """Each row's weighted loss (`weights` by row id, `source_weights`)."""
    preds = predict_scenarios(rows, factors)
    out = np.zeros(len(rows))
    for i, (row, pred) in enumerate(zip(rows, preds, strict=True)):
        if pred.predicted is not None and pred.predicted > 0 and row.value > 0:
            out[i] = _cauchy(np.array(math.log(pred.predicted / row.value)))
        elif row.value > 0:
            out[i] = UNPREDICTABLE_LOSS
    return out * np.array([weights[row.id] for row in rows])


# Factors of the memory a run takes, not of its speed: a stack line (`vllm-rocm`) keeps its engine's.
MEMORY_FACTOR_NAMES = ("non_torch_gib", "activation_scale")


def _gpu(row: Scenario) -> GpuSpec | None:
    try:
        return resolve_gpu(row.gpu) if row.gpu else None
    except CatalogLookupError:
        return None


def _family(row: Scenario) -> str | None:
    gpu = _gpu(row)
    return gpu.family if gpu else None


def row_line(row: Scenario) -> str | None:
    """The factor line (`engines.factor_key`) that predicts `row`: its engine at its version on its GPU's stack."""
    if not row.engine:
        return None
    gpu = _gpu(row)
    return factor_key(row.engine, row.engine_version, gpu.vendor if gpu else "nvidia", row.published)


def _rows_by_engine_family(rows: Sequence[Scenario], fitted_lines: set[str]) -> dict[str, dict[str, int]]:
    """Measured lines per fitted engine line and GPU family: what a plan's provenance cites (a line with too few
    rows to fit has its engine's factors or the prior, so no measured line stands behind it)."""
    counts: dict[str, Counter[str]] = {}
    for row in rows:
        family, line = _family(row), row_line(row)
        if line in fitted_lines and family:
            counts.setdefault(line, Counter())[family] += 1
    return {engine: dict(sorted(c.items())) for engine, c in sorted(counts.items())}


def _inherit_memory(factors: FactorSet, lines: set[str]) -> FactorSet:
    """`factors` with every stack line among `lines` (`vllm-rocm`) holding its engine line's memory factors."""
    engines = dict(factors.engines)
    for line in lines:
        parent = engines.get(base_line(line))
        if base_line(line) != line and parent is not None:
            engines[line] = replace(engines[line], **{n: getattr(parent, n) for n in MEMORY_FACTOR_NAMES})
    return replace(factors, engines=engines)


def identifiable_families(rows: Sequence[Scenario], fitted_lines: set[str]) -> set[str]:
    """GPU families whose corrections the rows can tell apart from the engines' factors: those measured with at
    least two fitted factor lines. A family seen through one line only (CDNA3: vLLM on ROCm) keeps 1.0, and
    that line's factors carry what the rows show."""
    lines: dict[str, set[str]] = {}
    for row in rows:
        family, line = _family(row), row_line(row)
        if family and line in fitted_lines:
            lines.setdefault(family, set()).add(line)
    return {family for family, seen in lines.items() if len(seen) >= 2}


def _own_kernels(line: str) -> bool:
    """Whether factor line `line`'s engine streams weights with its own kernels (the per-SM cap is fitted)."""
    try:
        return engine_profile(engine_of_line(line)).own_weight_kernels
    except CatalogLookupError:
        return False


def tied_lines(fitted_lines: set[str]) -> dict[str, list[str]]:
    """The CUDA release lines of each engine among `fitted_lines` (`vllm`: vllm, vllm-v0), which share the
    `TIED_FACTORS`; a stack line (`vllm-rocm`: other kernels) keeps its own."""
    groups: dict[str, list[str]] = {}
    for line in sorted(fitted_lines):
        if base_line(line) == line:
            groups.setdefault(engine_of_line(line), []).append(line)
    return groups


def training_rows(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """The rows a fit uses: not suspect, with an engine, a GPU and a positive value."""
    return [r for r in scenarios if not r.suspect and r.engine and r.gpu and r.value > 0]


def calibrate(scenarios: Sequence[Scenario], start: FactorSet | None = None, sweeps: int = 4) -> Calibration:
    """Fit engine and GPU-family factors on the non-suspect rows of `scenarios`.

    Every engine with data starts from, and is pulled towards, `start.default_engine` (the shipped
    neutral prior unless `start` is given); every GPU family with data from 1.0. Engines and families
    without data keep their values in `start`.
    """
    start = start or load_factors()
    rows = training_rows(scenarios)
    weights = source_weights(rows)
    lines = [row_line(r) for r in rows]
    engines = Counter(line for line in lines if line)
    fitted_lines = {e for e, n in engines.items() if n >= MIN_ROWS_FOR_ENGINE}
    engine_rows = {e: [r for r, line in zip(rows, lines, strict=True) if line == e] for e in engines}
    family_rows = {f: [r for r in rows if _family(r) == f] for f in identifiable_families(rows, fitted_lines)}
    seen_families = {f for f in (_family(r) for r in rows) if f}

    current = FactorSet(
        engines={e: start.default_engine for e in fitted_lines} | {
            e: f for e, f in start.engines.items() if e not in engines},
        families={f: FamilyFactors() for f in seen_families} | {
            f: v for f, v in start.families.items() if f not in seen_families},
        default_engine=start.default_engine,
        meta=dict(start.meta),
    )
    prior = current

    def total(factors: FactorSet) -> float:
        return float(_row_loss(rows, factors, weights).sum())

    loss_before = total(current)

    def penalty(value: float, prior_value: float, name: str) -> float:
        if name in LINEAR_FACTORS:
            lo, hi = BOUNDS[name]
            return PRIOR_WEIGHT * ((value - prior_value) / (0.5 * (hi - lo))) ** 2
        return PRIOR_WEIGHT * math.log(max(value, 1e-6) / max(prior_value, 1e-6)) ** 2

    def set_engine(fs: FactorSet, engine: str, name: str, value: float) -> FactorSet:
        return replace(fs, engines=fs.engines | {engine: replace(fs.engines[engine], **{name: value})})

    def set_family(fs: FactorSet, family: str, name: str, value: float) -> FactorSet:
        return replace(fs, families=fs.families | {family: replace(fs.families[family], **{name: value})})

    groups = tied_lines(fitted_lines)
    grouped = {line for members in groups.values() for line in members}

    def set_group(fs: FactorSet, group: str, name: str, value: float) -> FactorSet:
        for line in groups[group]:
            fs = set_engine(fs, line, name, value)
        return fs

    targets: list[tuple[str, str, str]] = [
        ("engine", e, n) for e in sorted(fitted_lines) for n in ENGINE_FACTOR_NAMES
        if not (n in MEMORY_FACTOR_NAMES and base_line(e) != e) and (n != "sm_stream_gb_s" or _own_kernels(e))
        and not (n in TIED_FACTORS and e in grouped)]
    targets += [("group", g, n) for g in sorted(groups) for n in TIED_FACTORS]
    targets += [("family", f, n) for f in sorted(family_rows) for n in FAMILY_FACTOR_NAMES]
    for sweep in range(sweeps):
        spread = 1.0 / (sweep + 1)
        current = _inherit_memory(current, fitted_lines)
        for kind, key, name in targets:
            if kind == "family":
                subset, setter, table, holder = family_rows[key], set_family, "families", key
            elif kind == "engine":
                subset, setter, table, holder = engine_rows[key], set_engine, "engines", key
            else:  # a tied factor: every line of the group holds the same value
                subset = [r for line in groups[key] for r in engine_rows[line]]
                setter, table, holder = set_group, "engines", groups[key][0]

            def getter(fs: FactorSet, table: str = table, holder: str = holder, name: str = name) -> float:
                return float(getattr(getattr(fs, table)[holder], name))

            prior_value = getter(prior)
            lo, hi = BOUNDS[name]
            value = getter(current)
            if name in JOINT_FACTORS:  # a grid over the pair (the cap's first sweep spans its bounds)
                partner = JOINT_FACTORS[name]
                first = np.geomspace(lo, hi, 13) if sweep == 0 else value * np.exp(np.linspace(-spread, spread, 9))
                other = getattr(current.engines[key], partner)
                seconds = other * np.exp(np.linspace(-spread, spread, 9))
                pairs = [(float(a), float(b)) for a in np.unique(np.clip(first, lo, hi))
                         for b in np.unique(np.clip(seconds, *BOUNDS[partner]))]
                best_pair, best_loss = (value, other), math.inf
                for a, b in [(value, other), *pairs]:
                    trial = set_engine(set_engine(current, key, name, a), key, partner, b)
                    loss = (float(_row_loss(subset, trial, weights).sum()) + penalty(a, prior_value, name)
                            + penalty(b, getattr(prior.engines[key], partner), partner))
                    if loss < best_loss - 1e-9:
                        best_pair, best_loss = (a, b), loss
                current = set_engine(set_engine(current, key, name, best_pair[0]), key, partner, best_pair[1])
                continue
            best = (float(_row_loss(subset, current, weights).sum()) + penalty(value, prior_value, name), value)
            if name in LINEAR_FACTORS:
                grid = value + np.linspace(-spread, spread, 9) * (hi - lo)
            else:
                grid = value * np.exp(np.linspace(-spread, spread, 9))  # first sweep: within e (2.7x) either way
            for candidate in np.clip(grid, lo, hi):
                trial = setter(current, key, name, float(candidate))
                loss = float(_row_loss(subset, trial, weights).sum()) + penalty(float(candidate), prior_value, name)
                if loss < best[0] - 1e-9:
                    best = (loss, float(candidate))
            current = setter(current, key, name, best[1])
    current = _inherit_memory(current, fitted_lines)
    meta = {
        "about": "efficiency factors fitted by inferplan calibrate; default_engine is the neutral prior",
        "fitted_on_rows": len(rows),
        "rows_by_engine": dict(sorted(engines.items())),
        "rows_by_engine_family": _rows_by_engine_family(rows, fitted_lines),
        "procedure": "docs/calibration.md",
        "prior_weight": PRIOR_WEIGHT,
        "cauchy_scale": CAUCHY_SCALE,
    }
    fitted = replace(current, meta=meta)
    return Calibration(fitted, loss_before, total(fitted), len(rows), dict(engines))


def format_calibration(result: Calibration) -> str:
    lines = [f"fitted on {result.rows} rows; loss {result.loss_before:.2f} -> {result.loss_after:.2f}"]
    header = "engine".ljust(14) + " ".join(f"{n[:12]:>12s}" for n in ENGINE_FACTOR_NAMES)
    lines.append(header)
    for name, ef in sorted(result.factors.engines.items()):
        lines.append(name.ljust(14) + " ".join(f"{getattr(ef, n):12.4g}" for n in ENGINE_FACTOR_NAMES))
    lines.append("family".ljust(14) + " ".join(f"{n:>16s}" for n in FAMILY_FACTOR_NAMES))
    for name, ff in sorted(result.factors.families.items()):
        lines.append(name.ljust(14) + " ".join(f"{getattr(ff, n):16.4g}" for n in FAMILY_FACTOR_NAMES))
    return "\n".join(lines)


__all__ = ["Calibration", "EngineFactors", "FamilyFactors", "calibrate", "format_calibration", "identifiable_families",
           "row_line", "source_weights", "tied_lines", "training_rows"]
