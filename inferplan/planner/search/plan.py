"""Capacity search: from a workload and its SLOs to the cheapest deployment and its Pareto alternatives.

Every (GPU type x tensor-parallel size x weight precision x KV dtype x max batch) is a candidate. The
candidates pass through gates in a fixed order (`GATES`); each that passes the SLO gate gets the highest
request rate one replica sustains within every SLO and the utilisation cap, and from it the replicas, GPUs
and cost. The recommendation is the cheapest feasible candidate, ties broken by headroom, then by fewer GPUs
(`select.by_cost`); the alternatives are the Pareto frontier over (cost, TTFT, TPOT, end-to-end latency at the SLO
percentiles), sorted by cost.

Everything is computed as arrays over the candidates, without a Python loop over shapes or batch sizes:
memory and hardware for the whole (GPU, TP, precision, KV dtype, batch) grid at once; the queueing model's
rate-free part once per shape (`serving.poisson_model`); the highest rate by a search that lands where a
geometric bisection would, in fewer evaluations of the model (`_RateSearch`). Reasons for rejections are
only worded for the few shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.catalog.engine_args import release_warning
from inferplan.planner.catalog.engines import (
    ENGINES,
    MTP_ACCEPTANCE,
    EngineProfile,
    EngineSettings,
)
from inferplan.planner.catalog.gpus import GpuSpec, load_gpu_catalog
from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.model.serving import (
    poisson,
)
from inferplan.planner.request import PlanRequest, SloTarget
from inferplan.planner.results import (
    Candidate,
    Infeasible,
    PlanResult,
    cost_of,
    headroom,
    per_hour,
    replica_shape,
    rounded,
)
from inferplan.planner.search.advice import (
    CONTEXT_LIMIT_SHARE,
    suggestions_for,
)
from inferplan.planner.search.annotate import (
    _describe_slo,
    with_intervals,
    with_upper_cost,
)
from inferplan.planner.search.core import (
    FIRST_PASS_ROWS,
    PRACTICAL_COST_FACTOR,
    REPORT_SAMPLES,
    _candidate,
    _Grid,
    _limit_checks,
    _RateSearch,
    _Rejections,
    _Rows,
    _Shape,
    _tail_warning,
    gpu_price,
    limit_words,
    miss_ms_text,
    ms_text,
    output_tokens_per_hour,
    placement_words,
    pod_slots,
    recording,
    replica_pods,
    traffic_of,
    union_rows,
)
from inferplan.planner.search.grid import (
    CONTEXT_WARN_SHARE,
    _candidate_gpus,
    _grid,
    _settings,
    context_overflow,
)
from inferplan.planner.search.select import (
    GATES,
    SHAPE_GATES,
    _compare_shapes,
    _nearness,
    _shown_rows,
    by_cost,
    distinct,
    shape_lines,
    tag_candidates,
    undominated,
)

# The limits checked after the SLOs, in order: the gate each reports ("nodes": the GPUs are there, but the replicas
# do not fit on the nodes of their GPU type, `core.placement`).
LIMIT_CHECKS = ("maxReplicas", "inventory", "nodes", "maxGpus", "maxGpus", "budget")
                             # are one choice: only the first (cheapest, most headroom) is shown
_NONE = np.zeros(0, dtype=np.intp)
_EMPTY = np.zeros(0)


def _limit_reason(req: PlanRequest, check: int, shape: _Shape, replicas: int, gpus: int, cost: float) -> str:
    key = shape.gpu.key
    return (
        lambda: f"needs {replicas} replicas of {shape.parallelism()}; maxReplicas is {req.max_replicas}",
        # Not the count available: a result that names it changes with every count within the status's range, and
        # the operator would write a status where only the count moved (test_the_same_answer_for_a_count_...).
        lambda: f"needs {gpus} {key}, more than are available",
        lambda: (f"needs {replicas} replicas of {shape.parallelism()}, which do not fit on the nodes: "
                 f"{placement_words(req, key, replicas, shape.gpus)}"),
        lambda: f"needs {gpus} {key}; maxGpusPerType allows {req.max_gpus_per_type.get(key)}",
        lambda: f"needs {gpus} GPUs ({replica_shape(replicas, shape.gpus, key)}); maxGpus is {req.max_gpus}",
        lambda: f"{gpus} x {key} cost {per_hour(cost)}; the budget is {per_hour(req.budget_usd_per_hour or 0.0)}",
    )[check]()


def _search_rates(rows: _Rows) -> NDArray[np.bool_]:
    """Find the best rates of the rows worth searching (into `rows.best_rate`); return which those are.

    The cheapest rows (`FIRST_PASS_ROWS` cost floors) are searched first; then only the rows whose cost floor
    is within reach of the alternatives: PRACTICAL_COST_FACTOR x the cheapest feasible cost of the first pass.
    The cheapest candidate is never skipped.
    """
    req = rows.req
    rates = _RateSearch(rows.model_of, rows.capacity, req.max_utilization, rows.wanted, rows.targets,
                        np.max(np.log(rows.light / rows.targets), axis=0))

    def search(index: NDArray[np.intp], pending: NDArray[np.intp] = _NONE, margin: NDArray[np.float64] = _EMPTY
               ) -> None:
        """Best rates of `index`, and of `pending` (rows already found to miss an SLO at the cap, by `margin`)."""
        ok, cap_margin = rates.at_cap(index)
        rows.best_rate[index[ok]] = rows.capacity[index[ok]] * req.max_utilization
        pending = np.concatenate([pending, index[~ok]])
        rows.best_rate[pending] = rates.refine(pending, np.concatenate([margin, cap_margin[~ok]]))
        rows.settle(rates, union_rows(len(rows.shape), index, pending))

    passing = np.flatnonzero(rows.slo_ok)
    by_floor = passing[np.argsort(rows.cost_floor[passing], kind="stable")]
    first, later = by_floor[:FIRST_PASS_ROWS], by_floor[FIRST_PASS_ROWS:]
    ok, cap_margin = rates.at_cap(first)
    rows.best_rate[first[ok]] = rows.capacity[first[ok]] * req.max_utilization
    rows.settle(rates, first[ok])
    # A row that meets its SLOs at the cap costs its floor (settled: its cost, which may be more), so the cheapest
    # of those bounds the cheapest first-pass cost from above: the later rows within reach of that bound include
    # every row to search, and are searched together with the rest of the first pass (fewer evaluations); those
    # out of reach of the cheapest cost, once known, are then left out as if never searched.
    bound = rows.cheapest(first[ok])
    if math.isfinite(bound):
        later = later[rows.cost_floor[later] <= PRACTICAL_COST_FACTOR * bound]
        search(later, first[~ok], cap_margin[~ok])
        later = later[rows.cost_floor[later] <= PRACTICAL_COST_FACTOR * rows.cheapest(first)]
    else:
        search(_NONE, first[~ok], cap_margin[~ok])
        cheapest = rows.cheapest(first)
        if math.isfinite(cheapest):  # else every later row is searched
            later = later[rows.cost_floor[later] <= PRACTICAL_COST_FACTOR * cheapest]
        search(later)
    searched = np.zeros(len(rows.shape), dtype=bool)
    searched[first] = True
    searched[later] = True
    return searched


def plan(req: PlanRequest, factors: FactorSet | None = None, *, suggest: bool = True, confirm: bool = True
         ) -> PlanResult:
    """Search every candidate deployment of `req` and return the recommendation and its alternatives, the
    assumptions made, and, when nothing is feasible, the smallest changes that would make it (`suggest`).

    `confirm`: search the rows shown again with the sample their numbers are shown with (`_shown_rows`), so
    that each meets every SLO by its own numbers. Off when the simulator verifies the candidates instead
    (`verification.planned`): it accepts rows the analytic tail rejects (16 of 120 random plans were
    recommended one or more replicas cheaper by it), and the recommendation then shows simulated numbers.

    The result holds the counts of each available GPU type within which the same planning gives the same answer
    (`PlanResult.count_bounds`, from every need the planning compared with an available count, its suggestions'
    included), so that a count moving within them needs no new plan (the operator's inventory)."""
    with recording() as counted:
        result, settings = _plan(req, factors or load_factors(), suggest, confirm)
    return result.model_copy(update={"assumptions": _assumptions(req, settings), "count_bounds": counted.bounds()})


def _plan(req: PlanRequest, factors: FactorSet, suggest: bool, confirm: bool) -> tuple[PlanResult, EngineSettings]:
    """`plan`'s search, suggestions included, and the engine settings its assumptions are worded from."""
    engine = ENGINES[req.engine]
    settings = _settings(req, engine, 1)
    warnings: list[str] = []
    if (newer := release_warning(req.engine, req.engine_version)) is not None:
        warnings.append(newer)
    tail_warning = _tail_warning(req)
    if tail_warning:
        warnings.append(tail_warning)
    if req.arch.is_mla:
        warnings.append(MLA_WARNING)
    if req.min_replicas == 1:
        warnings.append("minReplicas 1: a single replica has no redundancy; a node or pod failure, or a rollout, "
                        "stops the service")
    overflow = context_overflow(req, settings.max_model_len)
    if overflow >= CONTEXT_WARN_SHARE:
        warnings.append(_context_warning(req, settings.max_model_len, overflow))
    if overflow > CONTEXT_LIMIT_SHARE:
        result = PlanResult(recommendation=None, alternatives=[], infeasible=[], warnings=[
            *warnings, f"no candidate: more than {CONTEXT_LIMIT_SHARE:.0%} of requests would be rejected"])
    elif not _candidate_gpus(req):  # e.g. available_gpus with every count 0 and no gpu_types
        result = PlanResult(recommendation=None, alternatives=[], infeasible=[],
                            warnings=[*warnings, "no GPU type to consider: every available count is 0"])
    else:
        result = _search(req, engine, factors, warnings, confirm)
        if confirm:  # the answer as shown; verification, which searches unconfirmed, ranges its own
            result = with_intervals(req, with_upper_cost(req, result))
    suggestions = (suggestions_for(req, lambda changed: plan(changed, factors, suggest=False), factors)
                   if suggest and not result.recommendation else [])
    return result.model_copy(update={"suggestions": suggestions}), settings


# What the step model does not yet get right for multi-head latent attention models, and how far off it was where
# measured (`python bench/leave_one_source_out.py --predictions`: the in-sample predictions of its MLA rows, which
# are scored apart and never fitted on; 2026-12-04).
MLA_WARNING = ("multi-head latent attention (DeepSeek-V3/R1, Kimi-K2) is not calibrated: its step times come from "
               "measured kernels (MLA decode and prefill, fused-MoE tables by tokens per expert, expert-parallel "
               "all-to-all), but on the only published serving runs (dstack, March 2025: DeepSeek-R1 on eight H200 "
               "or MI300X; SGLang 0.4, vLLM 0.7, TensorRT-LLM 0.17) the predicted TPOT was 0.26-0.90 of the "
               "measured (median 0.44) and TTFT 0.03-0.68 (median 0.19); the prediction intervals carry those "
               "errors: treat these latencies as optimistic")


def _context_warning(req: PlanRequest, max_len: int, overflow: float) -> str:
    source = ("engine.maxModelLen" if req.max_model_len else "the model's context"
              if max_len == req.arch.max_position_embeddings else "chosen for the workload")
    return (f"max model length {max_len} ({source}) is below the workload's tail: {overflow:.1%} of requests "
            "(prompt + output) exceed it; the engine rejects them, or cuts their output short where clients set "
            "no max_tokens, and the predictions are for the rest")


def _assumptions(req: PlanRequest, settings: EngineSettings) -> list[str]:
    """What the plan left open and the planner assumed, in words (the plan's own notes first)."""
    notes = list(req.notes)
    if not req.gpu_types and req.available_gpus is None:
        notes.append("GPU types: the catalog's datacenter and workstation GPUs; consumer (GeForce) cards are left "
                     "out, their driver licence forbids datacenter use: name them in constraints.gpuTypes to plan "
                     "them")
    notes.append("GPUs per node: the catalog's common chassis (HGX and OAM boards 8, GB200 NVL72 trays 4 in one "
                 "NVLink domain of 72, GH200 1, PCIe servers 8, workstations 4) unless constraints.gpusPerNode or the "
                 "cluster's nodes say otherwise")
    if req.max_model_len is None:
        covers = 1.0 - context_overflow(req, settings.max_model_len)
        notes.append(f"max model length {settings.max_model_len}: "
                     + (f"the model's context, which holds {covers:.2%} of requests"
                        if settings.max_model_len == req.arch.max_position_embeddings
                        else "the shortest power of two that holds 99.9% of requests (engine.maxModelLen sets it)"))
    overhead = load_factors().engine(req.engine).request_overhead_ms
    notes.append(f"TTFT as the engine measures it, from a request's arrival at the server (vLLM's "
                 f"vllm:time_to_first_token_seconds): {overhead:g} ms of per-request time on top of the step model; "
                 "no benchmark client's tokenising, HTTP or streaming time, which published clients add on top "
                 "(docs/calibration.md)")
    if req.mtp_draft_tokens:
        drafts = req.mtp_draft_tokens
        notes.append(f"multi-token prediction: {drafts} draft token{'s' if drafts > 1 else ''} a step, "
                     f"{req.mtp_tokens_per_step:.3g} tokens emitted a step on average ("
                     + ("engine.multiTokenPrediction.acceptedPerStep" if req.mtp_accepted_stated else
                        f"each draft accepted with {MTP_ACCEPTANCE:g} once the one before it was: DeepSeek-V3's report "
                        "gives 85-90% for its first draft; acceptedPerStep sets what your engine reports")
                     + "); a step verifies every draft and runs the module once per draft (docs/model.md)")
    notes.append(f"at least {req.min_replicas} replica{'s' if req.min_replicas > 1 else ''} and "
                 f"{req.min_headroom:.0%} headroom (constraints.minReplicas, minHeadroom)")
    if req.network_from != "plan" and (req.max_nodes_per_replica > 1 or "disaggregated" in req.shapes):
        notes.append(f"network between nodes: {req.network_gbps:g} Gb/s per GPU, "
                     + ("the least inferplan.io/network-gbps label of the plan's GPU nodes"
                        if req.network_from == "nodes" else
                        "one 400G NIC per GPU (constraints.networkGbps, or the nodes' inferplan.io/network-gbps "
                        "label, says otherwise)"))
    return notes


def _search(req: PlanRequest, engine: EngineProfile, factors: FactorSet, warnings: list[str], confirm: bool = True
            ) -> PlanResult:
    grid = _grid(req, engine, factors)
    rejected = list(grid.rejected)
    if not len(grid.row_shape):
        return _finish(req, grid, [], rejected, warnings)
    # Vectorised over every (shape, batch) row from here on.
    rows = _Rows(req, grid)

    searched = np.zeros(len(rows.shape), dtype=bool)

    def finish(candidates: list[Candidate]) -> PlanResult:
        separate: list[Candidate] = []
        if "disaggregated" in req.shapes:
            # Imported when asked for: most plans are aggregated only, and `inferplan plan` pays for every import.
            from inferplan.planner.search.disaggregated import disaggregated_candidates

            cheapest = min((c.cost.dollars_per_hour for c in candidates), default=math.inf)
            separate = disaggregated_candidates(req, engine, factors, grid, rows, warnings, cheapest)
        result = _finish(req, grid, candidates + separate, rejected, warnings)
        options = _compare_shapes(req, grid, rows, searched, separate, result, rejected)
        return result.model_copy(update={"shapes": shape_lines(options, result.recommendation),
                                         "shape_options": options})

    if "aggregated" not in req.shapes:
        return finish([])
    searched = _search_rates(rows)
    index, replicas, chosen = _shown_rows(req, rows, searched, confirm)
    batch, best_rate = rows.batch, rows.best_rate

    def row_shape(i: int) -> _Shape:
        return grid.shape(req, rows.shape[i])

    def light_text(value: float, slo: SloTarget, limit: float) -> str:
        """The light-load latency [ms]: whole, or as precise as the limit at a confidence (`limit_words`); more
        precise where that would not read over the limit (`miss_ms_text`)."""
        text = ms_text(value) if req.confidence is not None else f"{value * 1e3:.0f}"
        return miss_ms_text(req, slo, value, limit, text)

    def slo_reason(i: int) -> str:
        worst = int(np.argmax(rows.light[:, i] / rows.targets[:, i]))
        slo, shape, limit = req.slos[worst], row_shape(i), float(rows.targets[worst, i])
        return (f"{_describe_slo(slo)} at batch {batch[i]} on {shape.parallelism()} ({shape.precision}) is "
                f"{light_text(float(rows.light[worst, i]), slo, limit)} ms even at light load > "
                f"{limit_words(req, slo, limit)}")

    def rejections(gate: str, index: NDArray[np.intp], cost: NDArray[np.float64],
                   reason: Callable[[int], str], miss: NDArray[np.float64] | None = None) -> _Rejections:
        return _Rejections(gate, index, rows.shape[index], batch[index], cost, reason, miss)

    light_miss = np.max(rows.light / rows.targets, axis=0)  # each row's worst light-load latency over its target
    slow = np.flatnonzero(~rows.slo_ok)
    rejected.append(rejections("slo", slow, (rows.gpus * rows.price)[slow], slo_reason, light_miss[slow]))
    stuck = np.flatnonzero(searched & rows.slo_ok & (best_rate <= 0))
    rejected.append(rejections("utilization", stuck, (rows.gpus * rows.price)[stuck],
                               lambda i: f"no rate within max utilization {req.max_utilization:g}",
                               light_miss[stuck]))
    rated = np.flatnonzero(searched & (best_rate > 0))
    rated_replicas, rated_gpus, rated_cost, check = rows.limits(rated)
    position = np.zeros(len(rows.shape), dtype=int)
    position[rated] = np.arange(len(rated))

    def limit_reason(i: int) -> str:
        j = position[i]
        return _limit_reason(req, int(check[j]), row_shape(i), int(rated_replicas[j]), int(rated_gpus[j]),
                             float(rated_cost[j]))

    over = _limit_miss(req, grid.gpus, grid.gpu[rows.shape[rated]], rated_replicas, rated_gpus, rated_cost, check)
    for k, gate in enumerate(LIMIT_CHECKS):
        rejected.append(rejections(gate, rated[check == k], rated_cost[check == k], limit_reason, over[check == k]))
    if not len(index):
        return finish([])
    shown = index[chosen]
    planned = req.rate_rps / replicas
    traffic = traffic_of(req, rows.fraction, replicas[chosen], rows.pp[shown])
    report = poisson(rows.hardware(shown), planned[chosen], traffic, rows.slots[shown], rows.chunk,
                     capacity=rows.capacity[shown], samples=REPORT_SAMPLES, streams=rows.pp[shown])
    candidates = [
        _candidate(req, engine, row_shape(i), int(batch[i]), grid.settings[grid.row_batch[i]], int(replicas[k]),
                   report, j, float(best_rate[i]), float(rows.capacity[i]), float(rows.slots[i] * rows.pp[i]),
                   factors.lines_measured_on(engine.name, row_shape(i).gpu.family),
                   grid.checkpoints[grid.gpu[rows.shape[i]]][grid.precision[rows.shape[i]]],
                   float(grid.row_kv_tokens[i]))
        for j, (k, i) in enumerate(zip(chosen, shown, strict=True))
    ]
    return finish(candidates)


def _limit_miss(req: PlanRequest, gpu_types: Sequence[GpuSpec], gpu: NDArray[np.intp], replicas: NDArray[np.int_],
                gpus: NDArray[np.int_], cost: NDArray[np.float64], check: NDArray[np.intp]) -> NDArray[np.float64]:
    """Per row, the need over the limit `check` says it breaks (`_limit_checks`; 1 where it breaks none): replicas
    over maxReplicas, GPUs over those available, pods over the slots the nodes have for them (half a slot where
    they have none), GPUs over maxGpusPerType or maxGpus, cost over the budget."""
    def cap(value: float | None) -> float:
        return math.inf if value is None else max(value, 1e-12)

    available = req.available_gpus or {}
    pods, slots = _placement_need(req, gpu_types, gpu, replicas, gpus)
    need = [replicas, gpus, pods, gpus, gpus, cost]
    limit = [np.full(len(replicas), cap(req.max_replicas)),
             np.array([cap(available.get(g.key)) for g in gpu_types])[gpu],
             np.maximum(slots, 0.5),
             np.array([cap(req.max_gpus_per_type.get(g.key)) for g in gpu_types])[gpu],
             np.full(len(replicas), cap(req.max_gpus)),
             np.full(len(replicas), cap(req.budget_usd_per_hour))]
    out = np.ones(len(replicas))
    for k in range(len(need)):
        mine = check == k
        out[mine] = need[k][mine] / limit[k][mine]
    return out


def _placement_need(req: PlanRequest, gpu_types: Sequence[GpuSpec], gpu: NDArray[np.intp], replicas: NDArray[np.int_],
                    gpus: NDArray[np.int_]) -> tuple[NDArray[np.int_], NDArray[np.float64]]:
    """Per row: the pods its replicas need and the slots the nodes of its GPU type have for pods of their size
    (`core.replica_pods`, `core.pod_slots`; inf where the nodes' counts are not known)."""
    pods = np.array(replicas, dtype=int)
    slots = np.full(len(replicas), math.inf)
    for t, g in enumerate(gpu_types):
        nodes = (req.node_gpus or {}).get(g.key)
        mine = np.flatnonzero(gpu == t)
        if nodes is None or not len(mine):
            continue
        per_replica, size = replica_pods(gpus[mine] // np.maximum(replicas[mine], 1), req.gpus_per_node.get(g.key, 8))
        pods[mine] = replicas[mine] * per_replica
        slots[mine] = pod_slots(nodes, size)
    return pods, slots


def _finish(req: PlanRequest, grid: _Grid, candidates: list[Candidate], rejected: list[_Rejections],
            warnings: list[str]) -> PlanResult:
    # The reported numbers come from a finer sample than the search's: drop any shown candidate another
    # shown one now dominates; the recommendation is the first left in `by_cost`'s order.
    shown = tag_candidates(req, distinct(req, sorted(undominated(req, candidates), key=by_cost)))
    if shown:  # each shape's search bounded its own; merged, the bound is the cheapest of all (`_select`)
        bound = PRACTICAL_COST_FACTOR * shown[0].cost.dollars_per_hour
        shown = [shown[0], *(c for c in shown[1:] if c.cost.dollars_per_hour <= bound)]
    if len(shown) > req.alternatives + 1:
        # Each shape's search chose its own few; beside the recommendation keep the tagged ones, then the cheapest.
        tagged = [c for c in shown[1:] if c.tags]
        others = [c for c in shown[1:] if not c.tags]
        kept = {id(c) for c in [*tagged, *others][:req.alternatives]}
        shown = [shown[0], *(c for c in shown[1:] if id(c) in kept)]
    recommendation = shown[0] if shown else None
    alternatives = shown[1:]
    # Nearest infeasible: those that got furthest through the gates, within a gate the nearest to passing it first
    # (`_nearness`: 9 ms against an 8 ms target before 30 ms; the cheapest first among equals and where a gate has no
    # measure), one per reason. Beside a recommendation, a row that broke a limit (replicas, GPUs available,
    # budget) at more than PRACTICAL_COST_FACTOR x its cost is no near miss: it would not be shown if the limit
    # allowed it (`_select`), and listing it would tie the status to GPU counts that change nothing else (a
    # candidate of 2,004 GPUs listed while 2,000 are available goes when 8 more come).
    order = {gate: i for i, gate in enumerate(GATES)}
    blocks = [r for r in rejected if len(r.index)]
    if recommendation is not None:
        reach = PRACTICAL_COST_FACTOR * recommendation.cost.dollars_per_hour
        blocks = [_only(r, r.cost <= reach) if r.gate in LIMIT_CHECKS else r for r in blocks]
        blocks = [r for r in blocks if len(r.index)]
    # A shape that fails several of the shape gates is listed under the first it fails, the rest in `also`.
    first_gate = np.full(len(grid.gpu), len(GATES))
    for r in blocks:
        if r.gate in SHAPE_GATES:
            np.minimum.at(first_gate, r.shape, order[r.gate])
    blocks = [r if r.gate not in SHAPE_GATES else _only(r, first_gate[r.shape] == order[r.gate]) for r in blocks]
    blocks = [r for r in blocks if len(r.index)]
    nearest: list[Infeasible] = []
    if blocks:
        gate = np.concatenate([np.full(len(r.index), order[r.gate]) for r in blocks])
        cost = np.concatenate([r.cost for r in blocks])
        near = np.concatenate([_nearness(r) for r in blocks])
        batch = np.concatenate([np.zeros(len(r.index), dtype=int) if r.batch is None else r.batch for r in blocks])
        found = np.concatenate([r.index for r in blocks])  # equal keys keep the order the search found them in
        block = np.concatenate([np.full(len(r.index), k) for k, r in enumerate(blocks)])
        position = np.concatenate([np.arange(len(r.index)) for r in blocks])
        seen: set[object] = set()
        for k in np.lexsort((found, batch, cost, near, -gate)):
            r, j = blocks[block[k]], position[k]
            shape = grid.shape(req, int(r.shape[j]))
            # One line per deployment shape and gate (its nearest, then smallest, failing batch) and per reason.
            if (shape, r.gate) in seen:
                continue
            reason = r.reason(int(r.index[j]))
            if reason in seen:
                continue
            seen.update({(shape, r.gate), reason})
            also = [f"{other.gate}: {other.reason(int(other.index[hit[0]]))}" for other in rejected
                    if other.gate in SHAPE_GATES and other.gate != r.gate
                    and len(hit := np.flatnonzero(other.shape == r.shape[j]))]
            nearest.append(Infeasible(gpu_type=shape.gpu.key, gpus_per_replica=shape.gpus, precision=shape.precision,
                                      kv_cache_dtype=shape.kv_dtype,
                                      max_batch=None if r.batch is None else int(r.batch[j]),
                                      gate=r.gate, reason=reason, also=also, pipeline_parallel=shape.pp,
                                      data_parallel_attention=shape.dp_attention, expert_parallel=shape.ep))
            if len(nearest) >= req.alternatives:
                break
    if recommendation is None:
        # Where no nearest one is kept (a disaggregated plan whose pairs a limit rules out), pointing at an empty
        # `infeasible` explains nothing: the suggestions name the limit.
        warnings = [*warnings, "no candidate meets every gate; " + (
            "see infeasible for the nearest ones and why, and suggestions for what would make it feasible" if nearest
            else "see suggestions for what would make it feasible")]
    return PlanResult(recommendation=recommendation, alternatives=alternatives, infeasible=nearest,
                      warnings=warnings)


def with_replicas(req: PlanRequest, c: Candidate, replicas: int) -> Candidate | None:
    """`c` scaled to `replicas` replicas at the plan's rate (its latencies kept: the caller re-evaluates them),
    None where that breaks a limit of the plan."""
    if c.roles:
        return None  # a disaggregated candidate's pools are sized by its own search, not scaled here
    gpus = replicas * c.gpus_per_replica
    gpu = load_gpu_catalog().get(c.gpu_type)
    price = gpu_price(req, gpu)  # not c's rounded cost / its GPUs
    cost = gpus * price
    if _limit_checks(req, [gpu], np.zeros(1, dtype=np.intp), np.array([replicas]), np.array([gpus]),
                     np.array([cost]))[0] >= 0:
        return None
    capacity = c.predicted.requests_per_second_per_replica / c.predicted.utilization
    per_replica = req.rate_rps / replicas
    predicted = c.predicted.model_copy(update={"utilization": rounded(per_replica / capacity),
                                               "requests_per_second_per_replica": rounded(per_replica)})
    best = c.predicted.max_requests_per_second_per_replica
    return c.model_copy(update={
        "replicas": replicas, "gpus": gpus, "predicted": predicted,
        "cost": cost_of([(gpus, price)], output_tokens_per_hour(req)),
        "headroom": rounded(max(0.0, headroom(req.rate_rps, replicas * best)))})


def _only(r: _Rejections, mask: NDArray[np.bool_]) -> _Rejections:
    return replace(r, index=r.index[mask], shape=r.shape[mask], batch=None if r.batch is None else r.batch[mask],
                   cost=r.cost[mask], miss=None if r.miss is None else r.miss[mask])


