"""Capacity search: from a workload and its SLOs to the cheapest deployment and its Pareto alternatives.

Every (GPU type x tensor-parallel size x weight precision x KV dtype x max batch) is a candidate. The
candidates pass through gates in a fixed order (`GATES`); each that passes the SLO gate gets the highest
request rate one replica sustains within every SLO and the utilisation cap, found by one vectorised
bisection over all candidates at once, and from it the replicas, GPUs and cost. The recommendation is
the cheapest feasible candidate, ties broken by headroom; the alternatives are the Pareto frontier over
(cost, TTFT, TPOT, end-to-end latency at the SLO percentiles), sorted by cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.engines import ENGINES, SERVED_PRECISIONS, EngineProfile, EngineSettings
from inferplan.planner.factors import FactorSet, load_factors
from inferplan.planner.gpus import GpuSpec, load_gpu_catalog
from inferplan.planner.memory import GIB, MemoryPlan, plan_memory_for_settings
from inferplan.planner.performance import Hardware, build_hardware, stack_hardware, take_hardware
from inferplan.planner.precisions import kv_dtype_bytes, weight_precision
from inferplan.planner.results import (
    Candidate,
    Cost,
    Infeasible,
    Percentiles,
    PlanResult,
    Predicted,
    rounded,
)
from inferplan.planner.serving import LoadResult, normal_ppf, poisson, poisson_capacity
from inferplan.planner.spec import PlanRequest, SloTarget

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
GATES = ("placement", "memory", "precision", "slo", "utilization", "maxReplicas", "inventory", "maxGpus", "budget",
         "verify")  # verify: only when the plan asks for simulation (inferplan.planner.verification)
QUANTILE_NAMES = {0.5: "p50", 0.9: "p90", 0.95: "p95", 0.99: "p99"}
SEARCH_SAMPLES = 64      # stratified sample size while bisecting (coarse, fast)
REPORT_SAMPLES = 512     # ... and for the numbers reported
BISECTION_STEPS = 10       # geometric, over three decades of rate: 0.7% precision
BRACKET_FLOOR = 1e-3       # the bisection's lower end, as a share of capacity
HIGH_VARIANCE_CV2 = 4.0  # at or above this arrival/service CV^2 the analytic tail is optimistic
LENGTH_QUANTILE = 0.99   # the sequence length max_model_len must hold
PRACTICAL_COST_FACTOR = 3.0  # candidates costing more than this x the cheapest feasible one are not searched
FIRST_PASS_ROWS = 64         # rows bisected first (cheapest cost floors) to find the cheapest feasible cost


@dataclass(frozen=True)
class _Shape:
    """One (GPU, TP, precision, KV dtype): everything but the batch cap."""

    gpu: GpuSpec
    tp: int
    precision: str
    kv_dtype: str


@dataclass
class _Rejected:
    shape: _Shape
    batch: int | None
    gate: str
    reason: str
    cost: float


def lognormal_quantile(mean: float, cv: float, q: float) -> float:
    """The q-quantile of a lognormal with this mean and coefficient of variation."""
    s2 = math.log1p(cv * cv)
    return mean * math.exp(math.sqrt(s2) * float(normal_ppf(q)) - s2 / 2.0)


def _settings(req: PlanRequest, engine: EngineProfile, max_batch: int) -> EngineSettings:
    long_prompt = lognormal_quantile(req.prompt_mean, req.prompt_cv, LENGTH_QUANTILE)
    long_output = lognormal_quantile(req.output_mean, req.output_cv, LENGTH_QUANTILE)
    needed = 2 ** math.ceil(math.log2(max(long_prompt + long_output, 256.0)))
    max_len = req.max_model_len or min(req.arch.max_position_embeddings, needed)
    chunked = engine.chunked_prefill if req.chunked_prefill is None else req.chunked_prefill
    budget = req.max_num_batched_tokens or max(engine.default_max_batched_tokens, 0 if chunked else max_len)
    return EngineSettings(
        memory_fraction=req.memory_fraction or engine.default_memory_fraction,
        max_model_len=max_len,
        max_num_seqs=max_batch,
        chunk_tokens=float(budget) if chunked else math.inf,
        profile_tokens=budget,
    )


def _candidate_gpus(req: PlanRequest) -> list[GpuSpec]:
    catalog = load_gpu_catalog()
    if req.gpu_types:
        return [catalog.get(key) for key in req.gpu_types]
    if req.available_gpus is not None:
        return [catalog.get(key) for key, count in sorted(req.available_gpus.items()) if count > 0]
    return list(catalog)


def _precision_problem(engine: EngineProfile, gpu: GpuSpec, precision: str) -> str | None:
    if precision not in SERVED_PRECISIONS.get(engine.name, ()):
        return f"{engine.name} does not serve {precision} weights"
    compute = weight_precision(precision).compute
    if compute == "fp8" and not gpu.fp8_tflops:
        return f"{precision} needs FP8 tensor cores; {gpu.key} has none"
    if compute == "int8" and not gpu.int8_tops:
        return f"{precision} needs INT8 tensor cores; {gpu.key} has none in the catalog"
    return None


def _memory_problem(req: PlanRequest, shape: _Shape, memory: MemoryPlan, settings: EngineSettings) -> str | None:
    usable = shape.gpu.usable_memory_bytes / GIB
    budget = settings.memory_fraction * usable
    fixed = (memory.weights_per_gpu + memory.activation_per_gpu + memory.non_torch_per_gpu) / GIB
    if fixed >= budget:
        return (f"{req.served_model} {shape.precision} needs {memory.weights_per_gpu / GIB:.1f} GiB of weights "
                f"plus {fixed - memory.weights_per_gpu / GIB:.1f} GiB of activations and runtime per GPU at "
                f"TP {shape.tp}; "
                f"{shape.gpu.key} gives the engine {budget:.1f} GiB ({settings.memory_fraction:g} x {usable:.1f})")
    if memory.kv_cache_tokens < settings.max_model_len:
        return (f"the KV cache holds {memory.kv_cache_tokens} tokens on {shape.tp} x {shape.gpu.key}, "
                f"less than one {settings.max_model_len}-token sequence")
    if memory.headroom_per_gpu < 0:
        return (f"gpu memory utilization {settings.memory_fraction:g} leaves no room for "
                f"{memory.cuda_graph_per_gpu / GIB:.1f} GiB of CUDA graphs on {shape.gpu.key}")
    return None


def _slo_values(result: LoadResult, slos: Sequence[SloTarget]) -> NDArray[np.float64]:
    """Per SLO (rows) and candidate (columns): the predicted latency at the SLO's percentile [s]."""
    table = {"ttft": result.ttft_q, "tpot": result.tpot_q, "e2e": result.e2e_q}
    return np.array([np.asarray(table[s.metric][s.quantile], dtype=float) for s in slos])


def _describe_slo(slo: SloTarget) -> str:
    return f"{slo.metric.upper()} {QUANTILE_NAMES[slo.quantile]}"


def plan(req: PlanRequest, factors: FactorSet | None = None) -> PlanResult:
    """Search every candidate deployment of `req` and return the recommendation and its alternatives."""
    factors = factors or load_factors()
    engine = ENGINES[req.engine]
    engine_factors = factors.engine(engine.name)
    rejected: list[_Rejected] = []
    warnings: list[str] = []
    tail_warning = _tail_warning(req)
    if tail_warning:
        warnings.append(tail_warning)

    # Shapes through the placement, memory and precision gates (cheap, per shape).
    rows: list[tuple[_Shape, int, MemoryPlan, EngineSettings]] = []
    shapes_hw: dict[_Shape, Hardware] = {}
    # Without continuous batching an engine runs one sequence per replica: it scales by replicas only.
    batch_sizes = BATCH_SIZES if engine.continuous_batching else (1,)
    batch_settings = [_settings(req, engine, batch) for batch in batch_sizes]
    for gpu in _candidate_gpus(req):
        price = req.prices.get(gpu.key, gpu.usd_per_hour)
        per_node = req.gpus_per_node.get(gpu.key, 8)
        for tp in req.tp_sizes:
            for precision in req.precisions:
                for kv_dtype in req.kv_dtypes:
                    shape = _Shape(gpu, tp, precision, kv_dtype)
                    if tp > per_node:
                        rejected.append(_Rejected(shape, None, "placement",
                                                  f"TP {tp} needs {tp} {gpu.key} in one node; nodes have {per_node}",
                                                  tp * price))
                        continue
                    kv_bytes = kv_dtype_bytes(kv_dtype, precision)
                    prec = weight_precision(precision)
                    fitting: list[tuple[_Shape, int, MemoryPlan, EngineSettings]] = []
                    memories = plan_memory_for_settings(req.arch, gpu, prec, kv_bytes, engine, batch_settings,
                                                        engine_factors, tp)
                    for batch, settings, memory in zip(batch_sizes, batch_settings, memories, strict=True):
                        problem = _memory_problem(req, shape, memory, settings)
                        if problem:
                            if not fitting:
                                rejected.append(_Rejected(shape, batch, "memory", problem, tp * price))
                            break
                        fitting.append((shape, batch, memory, settings))
                        if memory.kv_cache_tokens / (req.prompt_mean + req.output_mean / 2.0) <= batch:
                            break  # the KV pool, not the cap, bounds concurrency from here on
                    if not fitting:
                        continue
                    problem = _precision_problem(engine, gpu, precision)
                    if problem:
                        rejected.append(_Rejected(shape, None, "precision", problem, tp * price))
                        continue
                    rows.extend(fitting)
                    shapes_hw[shape] = build_hardware(req.arch, gpu, prec, kv_bytes, engine,
                                                      factors.engine_on(engine.name, gpu.key),
                                                      factors.family(gpu.family), tp)
    if not rows:
        return _finish(req, [], rejected, warnings)

    # Vectorised over every (shape, batch) row from here on.
    shape_index = {shape: k for k, shape in enumerate(shapes_hw)}
    hw = take_hardware(stack_hardware(list(shapes_hw.values())), [shape_index[shape] for shape, _, _, _ in rows])
    batch = np.array([b for _, b, _, _ in rows], dtype=float)
    kv_tokens = np.array([m.kv_cache_tokens for _, _, m, _ in rows], dtype=float)
    chunk = np.array([s.chunk_tokens for _, _, _, s in rows])
    p, o = req.prompt_mean, req.output_mean
    slots = np.maximum(np.minimum(batch, kv_tokens / (p + o / 2.0)), 1.0)
    fraction = 1.0 - req.prefix_hit_rate
    capacity = poisson_capacity(hw, p, o, slots, chunk, fraction)

    def evaluate_rows(rows_index: NDArray[np.intp], rate: NDArray[np.float64], samples: int,
                      metrics: tuple[str, ...] = ("ttft", "tpot", "e2e")) -> LoadResult:
        return poisson(take_hardware(hw, rows_index), rate, p, o, slots[rows_index], chunk[rows_index],
                       req.prompt_cv, req.output_cv, req.arrival_cv2, service_cv2=req.service_cv2,
                       prefill_fraction=fraction, capacity=capacity[rows_index], samples=samples, metrics=metrics)

    slo_metrics = tuple(sorted({s.metric for s in req.slos}))

    def meets_slos(rows_index: NDArray[np.intp], rate: NDArray[np.float64]) -> NDArray[np.bool_]:
        values = _slo_values(evaluate_rows(rows_index, rate, SEARCH_SAMPLES, slo_metrics), req.slos)
        return np.all(values <= targets, axis=0)

    targets = np.array([s.max_s for s in req.slos])[:, None]
    low, high = capacity * 1e-4, capacity * req.max_utilization
    # At light load nothing queues, so the batch cap does not matter: evaluate one row per shape.
    first_of_shape = np.array([shape_index[shape] for shape, _, _, _ in rows])
    representative = np.unique(first_of_shape, return_index=True)[1]
    light_shapes = _slo_values(evaluate_rows(representative, low[representative], SEARCH_SAMPLES, slo_metrics),
                               req.slos)
    light = light_shapes[:, np.searchsorted(first_of_shape[representative], first_of_shape)]
    slo_ok = np.all(light <= targets, axis=0)
    price = np.array([req.prices.get(shape.gpu.key, shape.gpu.usd_per_hour) for shape, _, _, _ in rows])
    tp = np.array([shape.tp for shape, _, _, _ in rows])
    # No candidate can cost less than the replicas its utilisation cap alone requires.
    cost_floor = np.ceil(req.rate_rps / np.maximum(high, 1e-12) - 1e-9) * tp * price
    best_rate = np.zeros(len(rows))

    def bisect(rows_index: NDArray[np.intp]) -> None:
        """Highest rate within every SLO and the utilisation cap, for these rows (geometric bisection)."""
        if not len(rows_index):
            return
        # Below a thousandth of capacity no SLO that passed at light load fails; start the bracket there.
        lo, hi = np.minimum(high, capacity * BRACKET_FLOOR)[rows_index], high[rows_index]
        at_cap = meets_slos(rows_index, hi)
        for _ in range(BISECTION_STEPS):
            mid = np.sqrt(lo * hi)
            ok = meets_slos(rows_index, mid)
            lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
        best_rate[rows_index] = np.where(at_cap, high[rows_index], lo)

    def limits(i: int) -> tuple[int, float, str, str]:
        """(replicas, cost, gate, reason) of row i at its best rate; gate empty when every limit holds."""
        replicas = max(1, math.ceil(req.rate_rps / best_rate[i] - 1e-9))
        cost = float(replicas * tp[i] * price[i])
        gate, reason = _limit_problem(req, rows[i][0], replicas, int(replicas * tp[i]), cost)
        return replicas, cost, gate, reason

    # Bisect the cheapest rows first; then only rows whose cost floor is within reach of the alternatives
    # (PRACTICAL_COST_FACTOR x the cheapest feasible cost found). The cheapest candidate is never skipped.
    passing = np.flatnonzero(slo_ok)
    by_floor = passing[np.argsort(cost_floor[passing], kind="stable")]
    first, later = by_floor[:FIRST_PASS_ROWS], by_floor[FIRST_PASS_ROWS:]
    bisect(first)
    first_costs = [limits(int(i))[1] for i in first if best_rate[i] > 0 and not limits(int(i))[2]]
    if first_costs:
        later = later[cost_floor[later] <= PRACTICAL_COST_FACTOR * min(first_costs)]
    bisect(later)
    searched = np.zeros(len(rows), dtype=bool)
    searched[first] = True
    searched[later] = True

    feasible_rows: list[int] = []
    replicas_of: dict[int, int] = {}
    for i, (shape, b, _memory, _settings_i) in enumerate(rows):
        if not slo_ok[i]:
            worst = int(np.argmax(light[:, i] / targets[:, 0]))
            slo = req.slos[worst]
            rejected.append(_Rejected(
                shape, b, "slo",
                f"{_describe_slo(slo)} at batch {b} on {shape.tp} x {shape.gpu.key} ({shape.precision}) is "
                f"{light[worst, i] * 1e3:.0f} ms even at light load > {slo.max_s * 1e3:.0f} ms target",
                shape.tp * price[i]))
            continue
        if not searched[i]:
            continue  # costs more than PRACTICAL_COST_FACTOR x the cheapest feasible candidate
        if best_rate[i] <= 0:
            rejected.append(_Rejected(shape, b, "utilization",
                                      f"no rate within max utilization {req.max_utilization:g}", shape.tp * price[i]))
            continue
        replicas, cost, gate, reason = limits(i)
        if gate:
            rejected.append(_Rejected(shape, b, gate, reason, cost))
            continue
        feasible_rows.append(i)
        replicas_of[i] = replicas

    if not feasible_rows:
        return _finish(req, [], rejected, warnings)

    # Objectives of every feasible row at its planned per-replica rate (search sample), then the
    # Pareto frontier; only the rows shown are evaluated again with the full sample.
    index = np.array(feasible_rows)
    replicas = np.array([replicas_of[i] for i in feasible_rows])
    planned = req.rate_rps / replicas

    coarse = evaluate_rows(index, planned, SEARCH_SAMPLES)
    cost = replicas * tp[index] * price[index]
    headroom = np.maximum(0.0, 1.0 - req.rate_rps / (replicas * best_rate[index]))
    objectives = np.column_stack([_objective_matrix(req, coarse, cost), -headroom])
    chosen = _select(objectives, headroom, replicas * tp[index], req.alternatives)
    rows_chosen = index[chosen]
    report = evaluate_rows(rows_chosen, planned[chosen], REPORT_SAMPLES)
    candidates = [
        _candidate(req, engine, rows[i], int(replicas[k]), report, j, float(best_rate[i]), float(capacity[i]),
                   float(slots[i]))
        for j, (k, i) in enumerate(zip(chosen, rows_chosen, strict=True))
    ]
    return _finish(req, candidates, rejected, warnings)


def _objective_matrix(req: PlanRequest, result: LoadResult, cost: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rows: candidates; columns: cost, TTFT, TPOT, e2e at each metric's SLO percentile (p95 without SLO)."""
    quantile = {s.metric: s.quantile for s in req.slos}
    columns = [cost]
    for metric, table in (("ttft", result.ttft_q), ("tpot", result.tpot_q), ("e2e", result.e2e_q)):
        columns.append(np.asarray(table[quantile.get(metric, 0.95)], dtype=float))
    return np.stack(columns, axis=1)


def non_dominated(objectives: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Mask of rows no other row beats on every column (lower is better) and strictly on one.

    Rows are visited in lexicographic order, in which a dominating row always comes before the rows it
    dominates, so each row only needs checking against the front kept so far.
    """
    order = np.lexsort(objectives.T[::-1])
    keep = np.zeros(len(objectives), dtype=bool)
    front: list[int] = []
    for i in order:
        point = objectives[i]
        if front:
            others = objectives[front]
            if np.any(np.all(others <= point, axis=1) & np.any(others < point, axis=1)):
                continue
            if np.any(np.all(others == point, axis=1)):
                continue  # an identical point is already on the front
        front.append(i)
        keep[i] = True
    return keep


def _select(objectives: NDArray[np.float64], headroom: NDArray[np.float64], gpus: NDArray[np.int_],
            alternatives: int) -> NDArray[np.intp]:
    """Indices to show: the cheapest (ties: most headroom); then, among frontier points costing at most
    `PRACTICAL_COST_FACTOR` times the cheapest, each latency objective's best, the most headroom and the
    fewest GPUs; then the cheapest other frontier points, up to 1 + alternatives."""
    front = np.flatnonzero(non_dominated(objectives))
    by_cost = front[np.lexsort((-headroom[front], objectives[front, 0]))]
    picks = [int(by_cost[0])]
    practical = front[objectives[front, 0] <= PRACTICAL_COST_FACTOR * objectives[by_cost[0], 0]]
    extremes = [practical[np.argmin(objectives[practical, col])] for col in range(1, 4)]
    extremes += [practical[np.argmax(headroom[practical])], practical[np.argmin(gpus[practical])]]
    for i in [*extremes, *by_cost]:
        if len(picks) > alternatives:
            break
        if int(i) not in picks:
            picks.append(int(i))
    return np.array(picks)


def _tail_warning(req: PlanRequest) -> str:
    """A warning when the traffic is too variable for the analytic tail to be trusted (else empty)."""
    if req.arrival_cv2 < HIGH_VARIANCE_CV2 and (req.service_cv2 or 0.0) < HIGH_VARIANCE_CV2:
        return ""
    service = "from the lengths" if req.service_cv2 is None else f"{req.service_cv2:g}"
    return (f"arrival CV^2 {req.arrival_cv2:g}, service CV^2 {service}: the analytic latency tail is optimistic "
            "for traffic this variable (TTFT p99 up to several times at high utilisation); unless the plan sets "
            "verify: false, the candidates shown are checked in the simulator")


def _limit_problem(req: PlanRequest, shape: _Shape, replicas: int, gpus: int, cost: float) -> tuple[str, str]:
    key = shape.gpu.key
    if req.max_replicas is not None and replicas > req.max_replicas:
        return "maxReplicas", f"needs {replicas} replicas of {shape.tp} x {key}; maxReplicas is {req.max_replicas}"
    if req.available_gpus is not None and key in req.available_gpus and gpus > req.available_gpus[key]:
        return "inventory", f"needs {gpus} {key} but only {req.available_gpus[key]} available"
    if key in req.max_gpus_per_type and gpus > req.max_gpus_per_type[key]:
        return "maxGpus", f"needs {gpus} {key}; maxGpusPerType allows {req.max_gpus_per_type[key]}"
    if req.max_gpus is not None and gpus > req.max_gpus:
        return "maxGpus", f"needs {gpus} GPUs ({replicas} x {shape.tp} {key}); maxGpus is {req.max_gpus}"
    if req.budget_usd_per_hour is not None and cost > req.budget_usd_per_hour:
        return "budget", f"{gpus} x {key} cost ${cost:.2f}/h; the budget is ${req.budget_usd_per_hour:.2f}/h"
    return "", ""


def _percentiles(samples: dict[float, NDArray[np.float64]], i: int) -> Percentiles:
    return Percentiles(**{name: rounded(float(samples[q][i]) * 1e3) for q, name in QUANTILE_NAMES.items()})


def _candidate(
    req: PlanRequest,
    engine: EngineProfile,
    row: tuple[_Shape, int, MemoryPlan, EngineSettings],
    replicas: int,
    report: LoadResult,
    i: int,
    best_rate: float,
    capacity: float,
    slots: float,
) -> Candidate:
    shape, batch, _memory, settings = row
    gpu = shape.gpu
    price = req.prices.get(gpu.key, gpu.usd_per_hour)
    gpus = replicas * shape.tp
    per_replica = req.rate_rps / replicas
    dollars_per_hour = gpus * price
    tokens_per_hour = req.rate_rps * req.output_mean * 3600.0
    label_key, label = node_selector(gpu)
    warnings = [f"{gpu.key}: figures not yet verified against a datasheet: {', '.join(gpu.unverified_fields)}"
                ] if {"memory_bandwidth_gb_s", "fp16_tflops"} & set(gpu.unverified_fields) else []
    if _tail_warning(req):
        warnings.append(_tail_warning(req))
    return Candidate(
        gpu_type=gpu.key,
        node_selector={label_key: label},
        gpus_per_replica=shape.tp,
        replicas=replicas,
        gpus=gpus,
        max_batch=batch,
        precision=shape.precision,
        kv_cache_dtype=shape.kv_dtype,
        predicted=Predicted(
            ttft_ms=_percentiles(report.ttft_q, i),
            tpot_ms=_percentiles(report.tpot_q, i),
            e2e_ms=_percentiles(report.e2e_q, i),
            output_tokens_per_second=rounded(req.rate_rps * req.output_mean),
            utilization=rounded(per_replica / capacity),
            max_concurrency=rounded(slots),
            requests_per_second_per_replica=rounded(per_replica),
            max_requests_per_second_per_replica=rounded(best_rate),
        ),
        cost=Cost(dollars_per_hour=rounded(dollars_per_hour),
                  dollars_per_million_tokens=rounded(dollars_per_hour / tokens_per_hour * 1e6)),
        headroom=rounded(max(0.0, 1.0 - req.rate_rps / (replicas * best_rate))),
        engine_args=engine_args(engine.name, req.served_model, shape.tp, batch, shape.precision, shape.kv_dtype,
                                settings),
        provenance={
            "predicted": "calibrated",
            "cost": "spec" if gpu.key in req.prices else "catalog",
            "memory": "calibrated",
            "engineDefaults": "assumed",
        },
        warnings=warnings,
    )


def node_selector(gpu: GpuSpec) -> tuple[str, str]:
    """The node label and value that select `gpu` (GPU Feature Discovery or the AMD labeller)."""
    return gpu.product_label_key, gpu.product_label


_QUANTIZATION_FLAG = {"fp8": "fp8", "int4-awq": "awq", "int4-gptq": "gptq", "int8-gptq": "gptq",
                      "int8-w8a8": "compressed-tensors", "mxfp4": "mxfp4"}


def engine_args(engine: str, model: str, tp: int, batch: int, precision: str, kv_dtype: str,
                settings: EngineSettings) -> list[str]:
    """Command-line arguments that make `engine` serve `model` (a Hugging Face id or path) this way."""
    quant = _QUANTIZATION_FLAG.get(precision)
    fp8_kv = kv_dtype == "fp8"
    chunked = math.isfinite(settings.chunk_tokens)
    if engine == "vllm":
        args = ["--model", model, "--tensor-parallel-size", str(tp), "--max-num-seqs", str(batch),
                "--gpu-memory-utilization", f"{settings.memory_fraction:g}", "--max-model-len",
                str(settings.max_model_len)]
        args += ["--quantization", quant] if quant else []
        args += ["--kv-cache-dtype", "fp8"] if fp8_kv else []
        args += ["--max-num-batched-tokens", str(int(settings.chunk_tokens))] if chunked else []
        return args
    if engine == "sglang":
        args = ["--model-path", model, "--tp-size", str(tp), "--max-running-requests", str(batch),
                "--mem-fraction-static", f"{settings.memory_fraction:g}", "--context-length",
                str(settings.max_model_len)]
        args += ["--quantization", quant] if quant else []
        args += ["--kv-cache-dtype", "fp8_e5m2"] if fp8_kv else []
        return args
    if engine == "tgi":
        args = ["--model-id", model, "--num-shard", str(tp), "--max-concurrent-requests", str(batch),
                "--cuda-memory-fraction", f"{settings.memory_fraction:g}", "--max-total-tokens",
                str(settings.max_model_len)]
        tgi_quant = {"fp8": "fp8", "int4-awq": "awq", "int4-gptq": "gptq"}.get(precision)
        args += ["--quantize", tgi_quant] if tgi_quant else []
        args += ["--kv-cache-dtype", "fp8_e5m2"] if fp8_kv else []
        return args
    if engine == "tensorrt-llm":
        args = [model, "--tp_size", str(tp), "--max_batch_size", str(batch),
                "--kv_cache_free_gpu_memory_fraction", f"{settings.memory_fraction:g}", "--max_seq_len",
                str(settings.max_model_len)]
        return args
    if engine == "lmdeploy":
        return ["serve", "api_server", model, "--tp", str(tp), "--max-batch-size", str(batch),
                "--cache-max-entry-count", f"{settings.memory_fraction:g}",
                "--session-len", str(settings.max_model_len)]
    if engine == "mlc-llm":
        return ["serve", model, "--mode", "server", "--overrides",
                f"tensor_parallel_shards={tp};max_num_sequence={batch};gpu_memory_utilization="
                f"{settings.memory_fraction:g};context_window_size={settings.max_model_len}"]
    if engine == "llama.cpp":  # one sequence per replica; layers fully offloaded to the GPU
        return ["-m", model, "--parallel", "1", "--ctx-size", str(settings.max_model_len), "--n-gpu-layers", "999"]
    if engine == "exllama":
        return ["--model", model, "--length", str(settings.max_model_len)]
    raise ValueError(f"no argument mapping for engine {engine!r}")


def _objectives(req: PlanRequest, c: Candidate) -> NDArray[np.float64]:
    """(cost, TTFT, TPOT, e2e at each metric's SLO percentile (p95 without SLO), -headroom) of a reported
    candidate: all lower-is-better, the columns the frontier is computed on."""
    quantile = {s.metric: s.quantile for s in req.slos}
    values = [c.cost.dollars_per_hour]
    for metric, stats in (("ttft", c.predicted.ttft_ms), ("tpot", c.predicted.tpot_ms), ("e2e", c.predicted.e2e_ms)):
        values.append(getattr(stats, QUANTILE_NAMES[quantile.get(metric, 0.95)]))
    values.append(-c.headroom)
    return np.array(values)


def tag_candidates(req: PlanRequest, front: list[Candidate]) -> list[Candidate]:
    """The candidates with tags saying which objective each is best at (cheapest, lowestTtft, ...)."""
    objectives = np.array([_objectives(req, c) for c in front])
    tags: list[list[str]] = [[] for _ in front]
    for name, column in (("cheapest", 0), ("lowestTtft", 1), ("lowestTpot", 2), ("lowestLatency", 3)):
        for i in np.flatnonzero(objectives[:, column] == objectives[:, column].min()):
            tags[i].append(name)
    most, fewest = max(c.headroom for c in front), min(c.gpus for c in front)
    for t, c in zip(tags, front, strict=True):
        if c.headroom == most:
            t.append("mostHeadroom")
        if c.gpus == fewest:
            t.append("fewestGpus")
    return [c.model_copy(update={"tags": t}) for c, t in zip(front, tags, strict=True)]


def _finish(req: PlanRequest, candidates: list[Candidate], rejected: list[_Rejected],
            warnings: list[str]) -> PlanResult:
    # The reported numbers come from a finer sample than the search's: drop any shown candidate another
    # shown one now dominates; the recommendation is the cheapest left, ties broken by headroom.
    if candidates:
        keep = non_dominated(np.array([_objectives(req, c) for c in candidates]))
        candidates = [c for c, k in zip(candidates, keep, strict=True) if k]
    shown = sorted(tag_candidates(req, candidates) if candidates else [],
                   key=lambda c: (c.cost.dollars_per_hour, -c.headroom, c.gpus))
    recommendation = shown[0] if shown else None
    alternatives = shown[1:]
    # Nearest infeasible: those that got furthest through the gates, cheapest first, one per reason.
    order = {gate: i for i, gate in enumerate(GATES)}
    nearest: list[Infeasible] = []
    seen: set[object] = set()
    for r in sorted(rejected, key=lambda r: (-order[r.gate], r.cost, r.batch or 0)):
        if (r.shape, r.gate) in seen or r.reason in seen:
            continue  # one line per deployment shape and gate (its smallest failing batch) and per reason
        seen.update({(r.shape, r.gate), r.reason})
        nearest.append(Infeasible(gpu_type=r.shape.gpu.key, gpus_per_replica=r.shape.tp,
                                  precision=r.shape.precision, kv_cache_dtype=r.shape.kv_dtype, max_batch=r.batch,
                                  gate=r.gate, reason=r.reason))
        if len(nearest) >= req.alternatives:
            break
    if recommendation is None:
        warnings = [*warnings, "no candidate meets every gate; see infeasible for the nearest ones and why"]
    return PlanResult(recommendation=recommendation, alternatives=alternatives, infeasible=nearest,
                      warnings=warnings)


@dataclass(frozen=True)
class Deployment:
    """What the search evaluated for one candidate: the hardware, the engine settings and the memory plan
    (KV capacity) of one replica. Rebuilt from a candidate by `deployment_of`, e.g. to simulate it."""

    hardware: Hardware
    settings: EngineSettings
    memory: MemoryPlan


def deployment_of(req: PlanRequest, candidate: Candidate, factors: FactorSet | None = None) -> Deployment:
    """The deployment behind `candidate` of `req`, built as the search built it."""
    factors = factors or load_factors()
    engine = ENGINES[req.engine]
    gpu = load_gpu_catalog().get(candidate.gpu_type)
    precision = weight_precision(candidate.precision)
    kv_bytes = kv_dtype_bytes(candidate.kv_cache_dtype, candidate.precision)
    settings = _settings(req, engine, candidate.max_batch)
    engine_factors = factors.engine(engine.name)
    memory = plan_memory_for_settings(req.arch, gpu, precision, kv_bytes, engine, [settings], engine_factors,
                                      candidate.gpus_per_replica)[0]
    hardware = build_hardware(req.arch, gpu, precision, kv_bytes, engine, factors.engine_on(engine.name, gpu.key),
                              factors.family(gpu.family), candidate.gpus_per_replica)
    return Deployment(hardware, settings, memory)
