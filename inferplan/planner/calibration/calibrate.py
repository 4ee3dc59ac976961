"""Fit the engine terms on measured scenarios; the kernel times under them are measured and never fitted.

Procedure (docs/calibration.md): minimise, over the engine terms of every engine release line present and the
harness time of every scenario source and engine line with online runs,

    sum over non-suspect rows of w x cauchy(log(predicted / measured))  +  PRIOR_WEIGHT x sum (log term - log prior)^2

with w = 1 / sqrt(rows of the row's source), scaled to average 1 (`source_weights`).

What is fitted (`FITTED_ENGINE_FACTORS`, `BOUNDS`): per engine line its per-step CPU time, its per-sequence time,
its memory outside the allocator and its activation peak (fitted on the line's startup rows only; a stack line such
as `vllm-rocm` keeps its engine's memory terms); one per-SM streaming rate that every fitted line of an engine with
its own weight kernels (llama.cpp, ExLlama, MLC) shares (`OWN_KERNELS`: fitted per line, the rate of llama.cpp was
set by the one source that ran it on HBM cards); per scenario source and engine line the time its harness (client
and server front end as deployed) adds to every online TTFT (`FactorSet.harness_ms`), which predictions of that
source's rows carry and plans never do.
Nothing of a GPU or GPU family is fitted: the step times come from measured kernels (`inferplan.planner.model.kernels`).

Log errors make a 2x over- and under-prediction cost the same; the Cauchy loss log(1 + (e / 0.3)^2) grows only
logarithmically beyond about 35% error, so a row with a physical caveat cannot drag the fit; the prior pulls every
term towards `default_engine` (0 for a harness), so a line with little data keeps values near it. The search is
coordinate descent in log space (linear for the harness), each term in turn walked out from its current value along
a shrinking grid within its bounds while each step improves, re-evaluating only the rows that term touches; it
always starts from the prior, so refitting the same files reproduces the shipped factors. Deterministic for the same
input.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from inferplan.planner.calibration.predict import ONLINE_LOADS, predict_scenarios, unmodelled
from inferplan.planner.calibration.scenarios import Scenario
from inferplan.planner.catalog.engines import (
    GRAPH_CAPPED_LINES,
    base_line,
    engine_of_line,
    engine_profile,
    factor_key,
    line_profiles_sampler,
)
from inferplan.planner.catalog.gpus import GpuSpec, resolve_gpu
from inferplan.planner.model.factors import FITTED_ENGINE_FACTORS, NO_SM_CAP_GB_S, FactorSet, harness_key, load_factors
from inferplan.planner.names import CatalogLookupError

# The range each fitted term may take: what the physics leaves room for. A fitted term that ends on a bound is a
# defect to look into (tests/planner/model/test_factors.py fails on one).
BOUNDS = {
    "step_overhead_ms": (0.02, 40.0),
    "sequence_overhead_ms": (0.001, 2.0),
    "non_torch_gib": (0.05, 8.0),
    "activation_scale": (0.1, 8.0),
    # GB/s one SM streams with the engine's own kernels: 3 is below any card's measured share, 100 (the prior)
    # caps nothing (rated bandwidth per SM is at most about 55 GB/s in the catalog).
    "sm_stream_gb_s": (3.0, NO_SM_CAP_GB_S),
    # A layer's kernels launched from Python one by one: from a few kernels at a microsecond each to some dozens at
    # tens of microseconds with the framework's per-module overhead.
    "eager_layer_ms": (0.005, 2.0),
    "harness_ms": (0.0, 400.0),
}
PRIOR_WEIGHT = 2.0  # chosen by leave-one-source-out among 0.5, 2 and 4 (docs/calibration.md)
CAUCHY_SCALE = 0.3
MIN_ROWS_FOR_ENGINE = 3
# An engine line's terms are fitted only where at least this many sources measured it: a term one source sets is
# that source's harness and machines as much as the engine's (a line of one source keeps the prior).
MIN_SOURCES_FOR_ENGINE = 2
HARNESS_PRIOR_SPAN_MS = 100.0  # the harness prior's scale: a 100 ms move costs PRIOR_WEIGHT
MEMORY_FACTOR_NAMES = ("non_torch_gib", "activation_scale")
# The per-SM streaming rate is fitted once for the lines of every engine with its own weight kernels, on all their
# rows: a kernel that keeps a fixed number of loads in flight per SM streams at most bytes in flight / memory latency,
# a bound of the kind of kernel and the memory, not of one engine. Fitted per line, llama.cpp's was set by the one
# source that ran it on HBM cards, where such a cap binds (XiongjieDai: its leave-one-out fold moved it 1,026%, to
# no cap); MLC-LLM's two sources put theirs within 20% of it.
OWN_KERNELS = "own-weight-kernels"
MEMORY_LOAD = "startup"  # the load kind of the rows a memory term is fitted on


@dataclass(frozen=True)
class FactorFit:
    factors: FactorSet
    loss_before: float
    loss_after: float
    rows: int
    rows_by_engine: dict[str, int]


@dataclass(frozen=True)
class CalibrationProgress:
    """Where a fit stands after one term's walk: what `calibrate` passes to its `progress` callback.

    `done` and `total` count rows: each term walked adds the rows it moves, about what its walk costs, so that
    `done / total` is the share of the fit's time spent. `loss` is the loss without the prior's terms (what
    `FactorFit.loss_before` and `loss_after` report) of the factors as they stand, each row as last evaluated:
    exact as each sweep ends (and after the last one, `loss_after`)."""

    sweep: int  # 1-based
    sweeps: int
    term: int  # 1-based, within the sweep
    terms: int
    done: int
    total: int
    loss: float


def _cauchy(x: np.ndarray) -> np.ndarray:
    return np.log1p((x / CAUCHY_SCALE) ** 2)


# What a row the factors make unpredictable costs (a memory factor can leave a run no KV cache): as much as
# a 10x error, so that a fit can never improve its loss by making hard rows disappear. Rows no factor can
# make predictable (an unknown model) pay it whatever the factors, which moves no optimum.
UNPREDICTABLE_LOSS = float(np.log1p((math.log(10.0) / CAUCHY_SCALE) ** 2))


def source_weights(rows: Sequence[Scenario]) -> dict[str, float]:
    """Each row's weight in the loss: 1 / sqrt(rows of its source), scaled to average 1. A source is one
    harness on one set of machines, so its rows share its errors; weighting them this way keeps the largest
    source from setting the terms it shares with the others on its own, while a source with more lines still
    counts for more."""
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
    return factor_key(row.engine, row.version, gpu.vendor if gpu else "nvidia", row.published)


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


def _own_kernels(line: str) -> bool:
    """Whether factor line `line`'s engine streams weights with its own kernels (the per-SM cap is fitted)."""
    try:
        return engine_profile(engine_of_line(line)).own_weight_kernels
    except CatalogLookupError:
        return False


def training_rows(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """The rows a fit uses: not suspect, with an engine, a GPU and a positive value, of a modelled architecture."""
    return [r for r in scenarios if not r.suspect and r.engine and r.gpu and r.value > 0 and not unmodelled(r)]


def fittable_lines(rows: Sequence[Scenario]) -> set[str]:
    """The engine lines whose terms `rows` fit: at least MIN_ROWS_FOR_ENGINE rows from at least
    MIN_SOURCES_FOR_ENGINE sources."""
    counts: Counter[str] = Counter()
    sources: dict[str, set[str]] = {}
    for row in rows:
        line = row_line(row)
        if line:
            counts[line] += 1
            sources.setdefault(line, set()).add(row.source_name)
    return {line for line, n in counts.items()
            if n >= MIN_ROWS_FOR_ENGINE and len(sources[line]) >= MIN_SOURCES_FOR_ENGINE}


def harness_keys(rows: Sequence[Scenario]) -> dict[str, list[Scenario]]:
    """The rows of each (source, engine line) with online runs (a server measured through a client), by
    `harness_key`: each such pair has a harness time, and the pair's rows are what it moves."""
    online = {harness_key(r.source_name, line) for r in rows if r.load.kind in ONLINE_LOADS
              and (line := row_line(r))}
    out: dict[str, list[Scenario]] = {key: [] for key in sorted(online)}
    for row in rows:
        line = row_line(row)
        key = harness_key(row.source_name, line) if line else None
        if key in out:
            out[key].append(row)
    return out


def engine_targets(line: str) -> tuple[str, ...]:
    """The terms fitted for factor line `line`: a stack line keeps its engine's memory terms, only engines
    with their own weight kernels have a per-SM streaming rate, and only lines whose defaults leave some batches
    outside their CUDA graphs (`GRAPH_CAPPED_LINES`) an eager time per layer. A line whose activation peak is its
    sampler profile's, read from the engine's code (`line_profiles_sampler`: vLLM V1), keeps `activation_scale` at
    its prior of 1: fitted, it was set by one source (llm-d's profiles) and its leave-one-out fold moved it 34%."""
    return tuple(n for n in FITTED_ENGINE_FACTORS
                 if not (n in MEMORY_FACTOR_NAMES and base_line(line) != line)
                 and (n != "activation_scale" or not line_profiles_sampler(line))
                 and (n != "sm_stream_gb_s" or _own_kernels(line))
                 and (n != "eager_layer_ms" or base_line(line) in GRAPH_CAPPED_LINES))


def calibrate(scenarios: Sequence[Scenario], start: FactorSet | None = None, sweeps: int = 3,
              prior_weight: float = PRIOR_WEIGHT,
              progress: Callable[[CalibrationProgress], None] | None = None) -> FactorFit:
    """Fit the engine terms and harness times on the non-suspect rows of `scenarios`.

    Every engine line with data starts from, and is pulled towards (with `prior_weight`), `start.default_engine`
    (the shipped neutral prior unless `start` is given); every harness from 0. Engine lines without data keep their
    values in `start`. `progress`, if given, is called after each term's walk; it only observes (the fit is the same
    with or without it), and an exception it raises (KeyboardInterrupt) ends the fit.
    """
    if prior_weight < 0:
        raise ValueError(f"prior_weight must be >= 0, got {prior_weight}")
    start = start or load_factors()
    rows = training_rows(scenarios)
    weights = source_weights(rows)
    lines = [row_line(r) for r in rows]
    engines = Counter(line for line in lines if line)
    fitted_lines = fittable_lines(rows)
    own_lines = sorted(e for e in fitted_lines if "sm_stream_gb_s" in engine_targets(e))  # they share OWN_KERNELS
    engine_rows = {e: [r for r, line in zip(rows, lines, strict=True) if line == e] for e in engines}
    source_rows = harness_keys(rows)
    position = {id(r): i for i, r in enumerate(rows)}
    # Rows a walk moves without evaluating them: a stack line without terms of its own follows its engine line's,
    # and a fitted stack line takes its engine line's memory terms as each sweep starts. `progress` evaluates them
    # again as each sweep ends.
    followers = [i for i, line in enumerate(lines)
                 if line and base_line(line) != line and base_line(line) in fitted_lines]
    sources = set(source_rows)

    current = FactorSet(
        engines={e: start.default_engine for e in fitted_lines} | {
            e: f for e, f in start.engines.items() if e not in engines},
        default_engine=start.default_engine,
        meta=dict(start.meta),
        harness_ms=dict.fromkeys(sorted(sources), 0.0),
    )
    prior = current

    def total(factors: FactorSet) -> float:
        return float(_row_loss(rows, factors, weights).sum())

    row_losses = _row_loss(rows, current, weights)  # each row as last evaluated: what `progress` reports
    loss_before = float(row_losses.sum())

    def penalty(name: str, value: float, prior_value: float) -> float:
        if name == "sm_stream_gb_s":  # its prior is "no cap", not a rate to pull towards: flat within its bounds
            return 0.0
        if name == "harness_ms":
            return prior_weight * ((value - prior_value) / HARNESS_PRIOR_SPAN_MS) ** 2
        return prior_weight * math.log(max(value, 1e-9) / max(prior_value, 1e-9)) ** 2

    def get(fs: FactorSet, kind: str, key: str, name: str) -> float:
        if kind == "harness":
            return fs.harness_ms[key]
        return float(getattr(fs.engines[own_lines[0] if kind == "shared" else key], name))

    def put(fs: FactorSet, kind: str, key: str, name: str, value: float) -> FactorSet:
        if kind == "harness":
            return replace(fs, harness_ms=fs.harness_ms | {key: value})
        lines = own_lines if kind == "shared" else [key]
        return replace(fs, engines=fs.engines | {e: replace(fs.engines[e], **{name: value}) for e in lines})

    # A memory term moves only with what a server reports as it starts (its weights, KV cache, activation peak):
    # a speed row it would also move (through the KV cache's concurrency) must not bend the memory a line is
    # measured to have. A line whose startup rows would not fit its terms on their own (`fittable_lines`: too few,
    # or of one source, whose servers' report is its machines' as much as the engine's) keeps the prior's.
    memory_lines = fittable_lines([r for r in rows if r.load.kind == MEMORY_LOAD])
    memory_rows = {e: [r for r in engine_rows[e] if r.load.kind == MEMORY_LOAD] if e in memory_lines else []
                   for e in engine_rows}

    def subset_of(kind: str, key: str, name: str) -> list[Scenario]:
        if kind == "harness":
            return source_rows[key]
        if kind == "shared":
            return [r for e in own_lines for r in engine_rows[e]]
        return memory_rows[key] if name in MEMORY_FACTOR_NAMES else engine_rows[key]

    targets = [("engine", e, n) for e in sorted(fitted_lines) for n in engine_targets(e)
               if (n not in MEMORY_FACTOR_NAMES or memory_rows[e]) and n != "sm_stream_gb_s"]
    if own_lines:
        targets.append(("shared", OWN_KERNELS, "sm_stream_gb_s"))
    targets += [("harness", s, "harness_ms") for s in sorted(sources)]
    per_sweep = sum(len(subset_of(*target)) for target in targets)
    done = 0
    for sweep in range(sweeps):
        spread = 1.0 / (sweep + 1)
        current = _inherit_memory(current, fitted_lines)
        for term, (kind, key, name) in enumerate(targets, start=1):
            subset = subset_of(kind, key, name)
            lo, hi = BOUNDS[name]
            value, prior_value = get(current, kind, key, name), get(prior, kind, key, name)
            if kind == "harness":  # additive: steps of up to 100 ms either way, shrinking
                grid = value + np.linspace(-spread, spread, 9) * HARNESS_PRIOR_SPAN_MS
            elif name == "sm_stream_gb_s" and sweep == 0:  # its prior caps nothing: the first sweep spans its range
                grid = np.geomspace(lo, hi, 13)
            else:
                grid = value * np.exp(np.linspace(-2.0 * spread, 2.0 * spread, 9))  # within e^2 (7.4x) either way
            best_rows = _row_loss(subset, current, weights)
            best = (float(best_rows.sum()) + penalty(name, value, prior_value), value)
            candidates = np.unique(np.clip(grid, lo, hi))
            # Walk out from the current value, upwards first, while each step improves; downwards only if the first
            # step up did not (the loss of one term is near enough unimodal that the far side is never better). The
            # SM cap's first sweep scans its whole range: its loss is flat until the cap binds.
            scan = name == "sm_stream_gb_s" and sweep == 0
            sides = [[c] for c in candidates if c != value] if scan else [
                candidates[candidates > value], candidates[candidates < value][::-1]]
            for side in sides:
                moved = False
                for candidate in side:
                    trial = put(current, kind, key, name, float(candidate))
                    trial_rows = _row_loss(subset, trial, weights)
                    loss = float(trial_rows.sum()) + penalty(name, float(candidate), prior_value)
                    if loss >= best[0] - 1e-9:
                        break
                    best, best_rows, moved = (loss, float(candidate)), trial_rows, True
                if moved and not scan:
                    break
            current = put(current, kind, key, name, best[1])
            if progress is not None:
                row_losses[[position[id(r)] for r in subset]] = best_rows
                if kind == "engine" and name in MEMORY_FACTOR_NAMES and best[1] != value:
                    # The line's speed rows moved too (their KV cache), which the walk did not evaluate.
                    row_losses[[position[id(r)] for r in engine_rows[key]]] = _row_loss(engine_rows[key], current,
                                                                                        weights)
                if term == len(targets) and followers:
                    row_losses[followers] = _row_loss([rows[i] for i in followers],
                                                      _inherit_memory(current, fitted_lines), weights)
                done += len(subset)
                progress(CalibrationProgress(sweep + 1, sweeps, term, len(targets), done, per_sweep * sweeps,
                                             float(row_losses.sum())))
    current = _inherit_memory(current, fitted_lines)
    # A line without rows here keeps `start`'s factors, and so the measured lines they were fitted on.
    kept = start.meta.get("rows_by_engine_family", {})
    by_family = {line: kept[line] for line in current.engines if line in kept and line not in engines}
    meta = {
        "about": "engine terms fitted by inferplan calibrate on measured kernel times; default_engine is the prior",
        "fitted_on_rows": len(rows),
        "rows_by_engine": dict(sorted(engines.items())),
        "rows_by_engine_family": dict(sorted((by_family | _rows_by_engine_family(rows, fitted_lines)).items())),
        "procedure": "docs/calibration.md",
        "prior_weight": prior_weight,
        "cauchy_scale": CAUCHY_SCALE,
    }
    fitted = replace(current, meta=meta)
    return FactorFit(fitted, loss_before, total(fitted), len(rows), dict(engines))


def format_calibration(result: FactorFit) -> str:
    lines = [f"fitted on {result.rows} rows; loss {result.loss_before:.2f} -> {result.loss_after:.2f}"]
    lines.append("engine".ljust(16) + " ".join(f"{n[:14]:>14s}" for n in FITTED_ENGINE_FACTORS))
    for name, ef in sorted(result.factors.engines.items()):
        lines.append(name.ljust(16) + " ".join(f"{getattr(ef, n):14.4g}" for n in FITTED_ENGINE_FACTORS))
    unfitted = {line: n for line, n in sorted(result.rows_by_engine.items()) if line not in result.factors.engines}
    if unfitted:
        lines.append(f"not fitted (a line needs {MIN_ROWS_FOR_ENGINE} rows from {MIN_SOURCES_FOR_ENGINE} sources; "
                     "these keep the neutral prior): "
                     + ", ".join(f"{line} ({n} rows)" for line, n in unfitted.items()))
    lines.append("harness (ms added to an online TTFT, per scenario source and engine line)")
    for source, ms in sorted(result.factors.harness_ms.items()):
        lines.append(f"  {source:40s} {ms:8.1f}")
    return "\n".join(lines)


__all__ = ["BOUNDS", "CalibrationProgress", "FactorFit", "calibrate", "engine_targets", "fittable_lines",
           "format_calibration", "harness_keys", "row_line", "source_weights", "training_rows"]
