"""Plain-text tables for the command line: plan results and the catalogs. ASCII only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.engine_args import DYNAMO_ENTRY_POINTS
from inferplan.planner.catalog.gpus import GpuSpec, resolve_gpu
from inferplan.planner.quantiles import QUANTILE_NAMES, percent_text
from inferplan.planner.request import PlanRequest
from inferplan.planner.results import Candidate, Percentiles, PlanResult, dollar_figure, per_hour, replica_shape
from inferplan.planner.search.core import PRACTICAL_COST_FACTOR


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], right: Sequence[bool] | None = None) -> list[str]:
    rows = [list(r) for r in rows]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    right = right or [False] * len(header)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True))

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _ms(value: float) -> str:
    return f"{value / 1000:.1f} s" if value >= 10_000 else f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"


def _figure(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def _times(factor: float) -> str:
    """"1.38x"; "14,294x" from 100 up, where the hundredths say nothing."""
    return f"{factor:.2f}x" if factor < 100 else f"{factor:,.0f}x"


def latency_figures(values_ms: Sequence[float | None]) -> tuple[str, list[str]]:
    """One unit for a set of latencies [ms] shown together (a column, a metric's percentiles): ms, or s when any
    reaches 10 s; the unit and the figures without it, "-" for a latency there is none of (None: the TPOT of a
    workload without a second token)."""
    scale = 1000 if max((v for v in values_ms if v is not None), default=0.0) >= 10_000 else 1
    return "s" if scale > 1 else "ms", ["-" if v is None else _figure(v / scale) for v in values_ms]


SHOWN_PERCENTILES = {"ttft": ("p50", "p95", "p99"), "tpot": ("p50", "p95", "p99"), "e2e": ("p95",)}
"""The percentiles of each metric the recommendation's latency line prints."""


def in_metric_unit(c: Candidate, metric: str, values_ms: Sequence[float]) -> tuple[str, list[str]]:
    """`values_ms` in the unit `c`'s latency line prints `metric` in (`SHOWN_PERCENTILES`, `latency_figures`): the
    prediction then reads the same in its interval and its SLO check as on that line, whatever their bounds reach."""
    stats = getattr(c.predicted, f"{metric}_ms")
    unit, _ = latency_figures([] if stats is None else [getattr(stats, q) for q in SHOWN_PERCENTILES[metric]])
    scale = 1000 if unit == "s" else 1
    return unit, [_figure(v / scale) for v in values_ms]


def _percentiles_text(name: str, stats: Percentiles | None, quantiles: Sequence[str]) -> str:
    """"TTFT p50/p95 32.1 / 82.2 ms": a metric's percentiles in one unit; "TPOT -" where there are none (no
    request generates a second token)."""
    if stats is None:
        return f"{name} -"
    unit, figures = latency_figures([getattr(stats, q) for q in quantiles])
    return f"{name} {'/'.join(quantiles)} {' / '.join(figures)} {unit}"


def interval_text(c: Candidate, req: PlanRequest) -> str:
    """"TTFT p95 82.2 ms (80%: 61-120 ms); TPOT p95 19.5 ms (80%: 16-25 ms); ...": each latency at its SLO's
    percentile (p95 without one) with its prediction interval (none for a TPOT there is none of); empty without
    intervals."""
    intervals, confidence = c.predicted.intervals, c.predicted.confidence
    if intervals is None or confidence is None:
        return ""
    parts = []
    for metric, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "e2e")):
        q = QUANTILE_NAMES[{s.metric: s.quantile for s in req.slos}.get(metric, 0.95)]
        bounds = getattr(intervals, f"{metric}_ms")
        if bounds is None:
            continue
        low, high = getattr(bounds, q)
        if (point := _percentile(c, metric, req)) is None:
            continue
        unit, (value, low_text, high_text) = in_metric_unit(c, metric, [point, low, high])
        parts.append(f"{name} {q} {value} {unit} ({percent_text(confidence)}: {low_text}-{high_text} {unit})")
    # A disaggregated pair's capacity and concurrency are its decode pool's (its top-level fields), as are the
    # intervals around them; the headroom line counts the pool that serves fewer.
    replica, pool = ("decode replica", "decode ") if c.roles else ("replica", "")
    if (rate := intervals.max_requests_per_second_per_replica) is not None:
        parts.append(f"capacity {c.predicted.max_requests_per_second_per_replica:.3g} requests/s per {replica} "
                     f"({percent_text(confidence)}: {rate[0]:.3g}-{rate[1]:.3g})")
    if (slots := intervals.max_concurrency) is not None:
        parts.append(f"{pool}KV-bound concurrency {c.predicted.max_concurrency:.0f} ({percent_text(confidence)}: "
                     f"{slots[0]:.0f}-{slots[1]:.0f})")
    return "; ".join(parts)


def slo_check_text(c: Candidate) -> str:
    """"TTFT p95 <= 500 ms holds with 0.93 (bound at 80%: 36.6 x2.42 = 88.6 ms, 82% margin); ...": each SLO by the
    held-out errors (`Predicted.slo_checks`); empty without checks."""
    parts = []
    for check in c.predicted.slo_checks:
        unit, (value, bound, target) = in_metric_unit(c, check.metric, [check.predicted_ms, check.bound_ms,
                                                                        check.target_ms])
        holds = f"{check.holds_with:.2f}" if check.holds_with else "under 0.5"
        parts.append(f"{check.metric.upper()} {check.percentile} <= {target} {unit} holds with {holds} (bound at "
                     f"{percent_text(c.predicted.confidence or 0)}: {value} x{check.ratio:.2f} = {bound} {unit}, "
                     f"{check.margin:.0%} margin)")
    return "; ".join(parts)


def _slo_text(req: PlanRequest) -> str:
    names = QUANTILE_NAMES
    return ", ".join(f"{s.metric.upper()} {names[s.quantile]} <= {_ms(s.max_s * 1000)}" for s in req.slos)


def _percentile(c: Candidate, metric: str, req: PlanRequest) -> float | None:
    """`c`'s `metric` at its SLO's percentile (p95 without one) [ms]; None where it has none (TPOT, no second
    token)."""
    quantile = {s.metric: s.quantile for s in req.slos}.get(metric, 0.95)
    stats = {"ttft": c.predicted.ttft_ms, "tpot": c.predicted.tpot_ms, "e2e": c.predicted.e2e_ms}[metric]
    return None if stats is None else float(getattr(stats, QUANTILE_NAMES[quantile]))


def gpu_name(key: str, req: PlanRequest | None = None) -> str:
    """The GPU of catalog key `key` as the plan named it: its node label (NVIDIA-H100-80GB-HBM3) where the plan's
    constraints name it so, else the key (H100-SXM5-80GB)."""
    return resolve_gpu(key).product_label if req is not None and key in req.named_by_label else key


def per_replica(gpus_per_replica: int, gpu: str) -> str:
    """A replica's GPUs: "H100" for one, "2 H100" for two; "3 x " before it reads 3 replicas of that."""
    return gpu if gpus_per_replica == 1 else f"{gpus_per_replica} {gpu}"


def _shape_lines(c: Candidate, req: PlanRequest) -> list[str]:
    """A disaggregated recommendation's pools, one line each."""
    lines = [f"  disaggregated: {c.gpus} GPU(s) in two pools, {c.precision} weights, KV {c.kv_cache_dtype}"]
    for r in c.roles:
        label = ", ".join(f"{k}={v}" for k, v in r.node_selector.items())
        gpus = per_replica(r.gpus_per_replica, gpu_name(r.gpu_type, req))
        lines.append(f"    {r.role}: {r.replicas} replica(s) x {gpus} = {r.gpus} GPU(s), max batch {r.max_batch}, "
                     f"utilization {r.utilization:.2f} (planned rate / saturated rate), node selector {label}")
    return lines


def gpu_column(c: Candidate, req: PlanRequest | None = None) -> str:
    """`c`'s GPU type (each pool's for a disaggregated one), named as the plan named it when `req` is given."""
    return " / ".join(gpu_name(r.gpu_type, req) for r in c.roles) if c.roles else gpu_name(c.gpu_type, req)


def shape_text(c: Candidate, req: PlanRequest) -> str:
    """Replicas and the GPUs of each: "3 x H100", "3 x 2 H100"; each pool's, prefill first, when disaggregated."""
    if c.roles:
        return " / ".join(f"{r.role} {replica_shape(r.replicas, r.gpus_per_replica, gpu_name(r.gpu_type, req))}"
                          for r in c.roles)
    return replica_shape(c.replicas, c.gpus_per_replica, gpu_name(c.gpu_type, req))


def role_column(c: Candidate, field: str) -> str:
    return " / ".join(str(getattr(r, field)) for r in c.roles) if c.roles else str(getattr(c, field))


def parallelism_column(c: Candidate) -> str:
    """GPUs per replica as TP, or TP and pipeline stages ("8 PP2": 2 stages of 8); then "DP" for data-parallel
    attention, "DP+EP" with the experts expert-parallel ("8 DP+EP"), which rows of the same TP otherwise hide; a
    disaggregated one's each pool's, prefill first ("8 DP+EP / 4")."""
    if c.roles:
        return " / ".join(_parallelism(r.gpus_per_replica, 1, r.data_parallel_attention, r.expert_parallel)
                          for r in c.roles)
    return _parallelism(c.gpus_per_replica, c.pipeline_parallel, c.data_parallel_attention, c.expert_parallel)


def _parallelism(gpus_per_replica: int, pipeline_parallel: int, dp_attention: bool, expert_parallel: bool) -> str:
    stages = f" PP{pipeline_parallel}" if pipeline_parallel > 1 else ""
    attention = (" DP+EP" if expert_parallel else " DP") if dp_attention else ""
    return f"{gpus_per_replica // pipeline_parallel}{stages}{attention}"


RECOMMENDATION_HEADING = "Recommendation (cheapest feasible; ties broken by headroom, then by fewer GPUs)"
"""What heads the recommendation: the order it is chosen in (`select.by_cost`)."""


def fewer_alternatives(result: PlanResult, req: PlanRequest) -> str | None:
    """Why fewer alternatives are shown than the plan asks for (`alternatives`); None when they are not."""
    shown = len(result.alternatives)
    if result.recommendation is None or shown >= req.alternatives:
        return None
    missed = sum(1 for i in result.infeasible if i.gate == "verify")
    return (f"{shown} of the {req.alternatives} alternatives asked: each other feasible candidate costs over "
            f"{PRACTICAL_COST_FACTOR:g}x the recommendation, or one shown beats it on cost, latency and headroom at "
            "once or nearly repeats it"
            + (f"; {missed} missed an SLO in simulation (gate verify, below)" if missed else ""))


def unmeasured_text(c: Candidate) -> str:
    """The line that opens a plan whose recommendation rests on no measurement (`Candidate.measured`): what is
    missing and the cost range it implies (`Candidate.upper_cost`)."""
    cost = per_hour(c.cost.dollars_per_hour)
    if c.upper_cost is not None:
        cost += f", {c.upper_cost.words()}"
    kernels, lines = c.provenance.get("kernels", "unknown"), c.provenance.get("measuredLines", "0")
    return (f"UNMEASURED: the recommendation rests on no measurement of its GPU (kernels {kernels}, measured serving "
            f"lines {lines}): {cost}; docs/planning.md#unmeasured-candidates")


def _upper_dollars(c: Candidate) -> str:
    upper = c.upper_cost
    if upper is None or upper.dollars_per_hour is None:
        return ""
    return f", up to {per_hour(upper.dollars_per_hour)} if its steps are {upper.step_slowdown - 1:.0%} slower"


def format_plan(result: PlanResult, req: PlanRequest) -> str:
    """The recommendation, the alternatives and the nearest infeasible candidates as text."""
    lines = [f"{req.served_model} on {req.engine}: {req.rate_rps:g} requests/s, "
             f"prompt {req.prompt_mean:.0f} / output {req.output_mean:.0f} tokens (mean); SLO {_slo_text(req)}", ""]
    c = result.recommendation
    if c is not None and not c.measured:  # said before anything else: every figure below rests on it
        lines += [unmeasured_text(c), ""]
    if c is None:
        lines.append("No deployment meets every gate.")
    else:
        label = ", ".join(f"{k}={v}" for k, v in c.node_selector.items())
        simulated = c.provenance.get("predicted") == "simulated"
        load = ("" if c.roles else  # a disaggregated one's: each pool's, on its line
                f"utilization {c.predicted.utilization:.2f}: the planned rate over the rate that keeps every batch "
                "slot busy; ")
        capacity = c.max_requests_per_second()  # not rate / (1 - headroom): rounded, that divides by 0 near 100%
        lines += [
            RECOMMENDATION_HEADING + (", latencies from the simulator:" if simulated else ":"),
            *(_shape_lines(c, req) if c.roles else [
                f"  {c.replicas} replica(s) x {per_replica(c.gpus_per_replica, gpu_name(c.gpu_type, req))} = "
                f"{c.gpus} GPU(s), max batch {c.max_batch}, {c.precision} weights, KV {c.kv_cache_dtype}"
                + (", data-parallel attention" if c.data_parallel_attention else "")
                + (", experts expert-parallel (DeepEP)" if c.expert_parallel else "")
                + (f", {c.pipeline_parallel} pipeline stages of {c.gpus_per_replica // c.pipeline_parallel} GPUs "
                   f"on {c.nodes_per_replica} nodes" if c.pipeline_parallel > 1 else "")]),
            f"  {_percentiles_text('TTFT', c.predicted.ttft_ms, SHOWN_PERCENTILES['ttft'])}; "
            f"{_percentiles_text('TPOT', c.predicted.tpot_ms, SHOWN_PERCENTILES['tpot'])}; "
            f"{_percentiles_text('e2e', c.predicted.e2e_ms, SHOWN_PERCENTILES['e2e'])}",
            *([f"  intervals from held-out errors: {interval_text(c, req)}"] if interval_text(c, req) else []),
            *([f"  SLOs by held-out error: {slo_check_text(c)}"] if slo_check_text(c) else []),
            # Two different shares, each said with its reference: headroom against the rate the SLOs allow,
            # utilization against the rate that saturates a replica.
            f"  headroom {c.headroom:.0%}: every SLO holds up to {capacity:.1f} requests/s, "
            f"{_times(capacity / req.rate_rps)} the planned {req.rate_rps:g}",
            f"  {load}{c.predicted.output_tokens_per_second:g} output tokens/s",
            f"  {per_hour(c.cost.dollars_per_hour)}, ${dollar_figure(c.cost.dollars_per_million_tokens)} per million "
            "output tokens",
            *([] if c.roles else [f"  node selector: {label}"]),
            f"  checkpoint: {c.checkpoint}",
            *([f"  {r.role} command: {c.engine_command or req.engine} {' '.join(r.engine_args)}" for r in c.roles]
              or [f"  command: {c.engine_command or req.engine} {' '.join(c.engine_args)}"]),
            *(f"  {r.role} as a Dynamo worker: {DYNAMO_ENTRY_POINTS[req.engine]} {' '.join(r.dynamo_args)}"
              for r in c.roles if r.dynamo_args),
            *(f"  file {name}:\n" + "\n".join(f"    {line}" for line in text.splitlines())
              for name, text in c.engine_files.items()),
            *(f"  because: {note}" for note in c.engine_notes),
            "  provenance: " + ", ".join(f"{k} {v}" for k, v in c.provenance.items()),
            *([f"  tags: {','.join(c.tags)}" + (f" ({c.why})" if c.why else "")] if c.tags else []),
        ]
        lines += [f"  warning: {w}" for w in c.warnings]
    if result.alternatives:
        lines += ["", "Alternatives (Pareto frontier over cost, latency and headroom):"]
        latencies = {m: latency_figures([_percentile(a, m, req) for a in result.alternatives])
                     for m in ("ttft", "tpot", "e2e")}
        rows = [
            (gpu_column(a, req), parallelism_column(a), role_column(a, "replicas"),
             role_column(a, "max_batch"), a.precision, *(latencies[m][1][i] for m in ("ttft", "tpot", "e2e")),
             f"{a.headroom:.0%}", f"{a.cost.dollars_per_hour:.2f}", a.provenance.get("predicted", ""),
             ",".join(a.tags))
            for i, a in enumerate(result.alternatives)
        ]
        header = ("GPU", "TP", "replicas", "batch", "precision",
                  *(f"{name} {latencies[m][0]}" for name, m in (("TTFT", "ttft"), ("TPOT", "tpot"), ("e2e", "e2e"))),
                  "headroom", "$/h", "predicted", "tags")
        lines += ["  " + row.rstrip()
                  for row in _table(header, rows, [False, *[True] * 3, False, *[True] * 5, False, False])]
        lines.append("  (latencies at each SLO's percentile, p95 where the metric has no SLO)")
        lines += [f"  why {shape_text(a, req)} ({','.join(a.tags) or 'frontier'}): {a.why}"
                  + ("" if a.measured else f"; unmeasured{_upper_dollars(a)}") for a in result.alternatives]
        if any(a.roles for a in result.alternatives):
            lines.append("  (disaggregated rows: prefill / decode pool, each GPU type, TP, replicas and batch cap)")
    if (fewer := fewer_alternatives(result, req)) is not None:
        lines += [*([] if result.alternatives else ["", "Alternatives:"]), f"  {fewer}"]
    if result.infeasible:
        lines += ["", "Nearest infeasible candidates:"]
        for i in result.infeasible:
            lines.append(f"  [{i.gate}] {f'{i.layout()}: ' if i.layout() else ''}{i.reason}")
            lines += [f"      also {also}" for also in i.also]
    if result.shapes:
        lines += ["", "Deployment shapes compared (cheapest of each):", *(f"  {line}" for line in result.shapes)]
    if result.suggestions:
        lines += ["", "What would make it feasible:", *(f"  {s}" for s in result.suggestions)]
    if result.warnings:
        lines += ["", *(f"warning: {w}" for w in result.warnings)]
    if result.assumptions:
        lines += ["", "Assumed:", *(f"  {a}" for a in result.assumptions)]
    return "\n".join(lines)


def format_gpus(gpus: Iterable[GpuSpec]) -> str:
    """The GPU catalog, one row a GPU: its price as a plan multiplies it (USD per GPU-hour, unrounded), whether that
    is a quote or the catalog author's estimate (a plan's `provenance.cost`: `catalog` or `estimate`) and its date."""
    rows = []
    for g in gpus:
        rows.append((g.key, g.product_label, f"{g.memory_gib:.1f}", f"{g.memory_bandwidth_gb_s:g}",
                     f"{g.fp16_tflops:g}", f"{g.fp8_tflops:g}" if g.fp8_tflops else "-",
                     g.interconnect, f"{g.usd_per_hour:g}",
                     "estimate" if "usd_per_hour" in g.unverified_fields else "quoted", g.price_as_of,
                     str(len(g.unverified_fields))))
    header = ("key", "node label", "GiB", "GB/s", "FP16 TF", "FP8 TF", "link", "$/GPU-h", "price", "price date",
              "unverified")
    return "\n".join(_table(header, rows, [False, False, True, True, True, True, False, True, False, False, True]))


def format_models(models: Iterable[ModelArchitecture]) -> str:
    rows = []
    for m in models:
        active = m.active_param_count() if m.is_moe else None
        rows.append((m.repo_id, f"{m.param_count() / 1e9:.2f}",
                     f"{active / 1e9:.2f}" if active else "-", str(m.num_layers),
                     str(m.num_kv_heads), f"{m.kv_bytes_per_token(2.0) / 1024:.0f}",
                     str(m.max_position_embeddings)))
    header = ("model", "params B", "active B", "layers", "KV heads", "KV KiB/token (16-bit)", "context")
    return "\n".join(_table(header, rows, [False, True, True, True, True, True, True]))
