"""Choosing what a plan shows: the Pareto frontier over cost, latency and headroom, tags, near duplicates, the nearest
infeasible rows and the comparison of deployment shapes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.model.serving import (
    PoissonModel,
    poisson_model,
)
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.request import PlanRequest
from inferplan.planner.results import (
    Candidate,
    PlanResult,
    ShapeOption,
    cents,
    headroom,
    per_hour,
    replica_shape,
    rounded,
)
from inferplan.planner.search.core import (
    PRACTICAL_COST_FACTOR,
    REPORT_SAMPLES,
    _Grid,
    _RateSearch,
    _Rejections,
    _Rows,
    tpot_defined,
    union_rows,
)
from inferplan.planner.search.grid import (
    pipeline_possible,
)

GATES = ("parallelism", "placement", "memory", "precision", "slo", "utilization", "maxReplicas", "inventory", "nodes",
         "maxGpus", "budget", "verify")  # verify: the simulator's check (inferplan.planner.simulation.verification)
# (nodes: the replicas do not fit on the cluster's nodes of their GPU type, `core.placement`)


SHAPE_GATES = frozenset(GATES[:4])  # gates of a whole shape (every batch cap); the later ones are per row


NEAR_DUPLICATE = 0.1         # alternatives within this relative distance on every latency objective, at one cost,


def _feasible_rows(req: PlanRequest, rows: _Rows, searched: NDArray[np.bool_]
                   ) -> tuple[NDArray[np.intp], NDArray[np.int_], NDArray[np.int_], NDArray[np.float64]]:
    """(rows, replicas, GPUs, cost) of the searched rows with a rate that pass every limit."""
    rated = np.flatnonzero(searched & (rows.best_rate > 0))
    replicas, gpus, cost, check = rows.limits(rated)
    feasible = check < 0
    return rated[feasible], replicas[feasible], gpus[feasible], cost[feasible]


def _shown_rows(req: PlanRequest, rows: _Rows, searched: NDArray[np.bool_], confirm: bool = True
                ) -> tuple[NDArray[np.intp], NDArray[np.int_], NDArray[np.intp]]:
    """(feasible rows, their replicas, the positions among them of the rows to show).

    Objectives of every feasible row at its planned per-replica rate (search sample), then the Pareto
    frontier. The rows to show are then confirmed with the report's sample, whose numbers they will show: the
    search's coarse sample can put a tail percentile (TTFT p99 of a long-tailed prompt mix) under its target
    where the full sample puts it over. A shown row whose best rate the full sample lowers (`_confirm`) costs
    more replicas, so the frontier is chosen again, until every row shown is confirmed (`confirm`), and with them
    every row the full sample could make as cheap as the cheapest shown (`_could_undercut`)."""
    confirmed = np.full(len(rows.shape), not confirm)
    # Each row's objective latencies at the rate and arrival CV^2 they were last worked out at: a row's latencies
    # depend on those and on its own model only (each row is evaluated on its own, `_concurrency`), so a row that the
    # last confirmation left as it was is not evaluated again (the same numbers, to the bit).
    known = np.full((3, len(rows.shape)), np.nan)
    known_at = np.full((2, len(rows.shape)), np.nan)  # (rate, arrival CV^2) of `known`
    while True:
        index, replicas, gpus, cost = _feasible_rows(req, rows, searched)
        if not len(index):
            return index, replicas, np.zeros(0, dtype=np.intp)
        planned = req.rate_rps / replicas
        at = np.stack([planned, rows.arrival_cv2(index)])
        stale = np.any(known_at[:, index] != at, axis=0)
        if np.any(stale):
            known[:, index[stale]] = rows.model_of(index[stale]).quantiles(planned[stale], _objective_latencies(req))
            known_at[:, index[stale]] = at[:, stale]
        latencies = known[:, index]
        if not tpot_defined(req):  # no second token: the model's step time of a request that takes none
            latencies[1] = 0.0
        spare = np.maximum(0.0, headroom(req.rate_rps, replicas * rows.best_rate[index]))
        objectives = np.column_stack([cost, latencies.T, -spare])
        chosen = _select(objectives, spare, gpus, req.alternatives)
        todo = index[chosen][~confirmed[index[chosen]]]
        todo = union_rows(len(rows.shape), todo, _could_undercut(rows, searched, confirmed, float(cost[chosen[0]])))
        if not len(todo):
            return index, replicas, chosen
        confirmed[todo] = True
        _confirm(req, rows, todo)


def _could_undercut(rows: _Rows, searched: NDArray[np.bool_], confirmed: NDArray[np.bool_], cheapest: float
                    ) -> NDArray[np.intp]:
    """The searched rows not yet confirmed that the report's sample could make as cheap as `cheapest` [$/h]: its
    rate can be higher than the search's, and fewer replicas then cost less (qwen2-5-72b-rag unverified: 6 x 2 H200
    by the search's sample, 5 x 2 at $35.0/h by the report's, under the $35.4/h recommended). Only a row whose
    cost floor (its replicas at the utilisation cap) is within `cheapest` can (0.1% over: costs that print alike
    tie, `by_cost`), and not one the search already put at the cap."""
    cap = rows.capacity * rows.req.max_utilization
    return np.flatnonzero(searched & rows.slo_ok & ~confirmed & (rows.best_rate < cap)
                          & (rows.cost_floor <= cheapest * (1.0 + 1e-3)))


def _confirm(req: PlanRequest, rows: _Rows, index: NDArray[np.intp]) -> None:
    """Search the best rates of rows `index` again with the report's sample (`REPORT_SAMPLES`); a row that
    misses an SLO with it even at light load fails the slo gate (its light-load latencies are updated)."""
    model = poisson_model(rows.hardware(index), rows.traffic, rows.slots[index], rows.chunk,
                          capacity=rows.capacity[index], samples=REPORT_SAMPLES, streams=rows.pp[index])
    local = np.full(len(rows.shape), -1)
    local[index] = np.arange(len(index))

    def model_of(at: NDArray[np.intp]) -> PoissonModel:
        return model.take(local[at], rows.slots[at], rows.capacity[at], rows.arrival_cv2(at))

    light = model.quantiles(rows.capacity[index] * 1e-4, rows.wanted)
    rows.light[:, index] = light
    ok = np.all(light <= rows.targets[:, index], axis=0)
    rows.slo_ok[index[~ok]] = False
    rows.best_rate[index[~ok]] = 0.0
    keep = index[ok]
    margin = np.full(len(rows.shape), np.nan)
    margin[index] = np.max(np.log(light / rows.targets[:, index]), axis=0)
    rates = _RateSearch(model_of, rows.capacity, req.max_utilization, rows.wanted, rows.targets, margin)
    at_cap, cap_margin = rates.at_cap(keep)
    rows.best_rate[keep[at_cap]] = rows.capacity[keep[at_cap]] * req.max_utilization
    pending = keep[~at_cap]  # the search's rates (its coarser sample) are the first guesses
    rows.best_rate[pending] = rates.refine(pending, cap_margin[~at_cap], rows.best_rate[pending])
    rows.settle(rates, keep)


def _compare_shapes(req: PlanRequest, grid: _Grid, rows: _Rows, searched: NDArray[np.bool_],
                    separate: list[Candidate], result: PlanResult, rejected: list[_Rejections]) -> list[ShapeOption]:
    """Where the plan allows more than one deployment shape: each shape's cheapest feasible candidate (the
    recommendation where it is of that shape; else the search's analytic figures), or that none was found within
    PRACTICAL_COST_FACTOR of the cheapest cost, with the nearest miss of that shape where the gates rejected all
    of it (`_nearest_miss`). `shape_lines` puts them in words against the recommendation."""
    aggregated = "aggregated" in req.shapes
    kinds = ([("aggregated, a replica within a node", 0)] if aggregated else []) + (
        [("aggregated, tensor or expert parallel over nodes", 1)] if aggregated and req.max_nodes_per_replica > 1
        else []) + (
        [("aggregated, pipeline stages over nodes", 2)] if aggregated and pipeline_possible(req) else []) + (
        [("disaggregated", None)] if "disaggregated" in req.shapes else [])
    if len(kinds) < 2:
        return []
    rec = result.recommendation
    index, replicas, gpus, cost = _feasible_rows(req, rows, searched)
    node_gpus = np.array([req.gpus_per_node.get(g.key, 8) for g in grid.gpus])
    shape_layout = np.where(grid.pp > 1, 2, np.where(grid.tp > node_gpus[grid.gpu], 1, 0))
    layout = shape_layout[rows.shape[index]]
    spare = np.maximum(0.0, headroom(req.rate_rps, np.maximum(replicas * rows.best_rate[index], 1e-12)))
    options = []
    for name, kind in kinds:
        if kind is None:
            best = rec if rec is not None and rec.roles else min(separate, key=by_cost, default=None)
            found = None if best is None else (best.cost.dollars_per_hour, describe_shape(best), best.headroom,
                                               best.gpus)
        elif rec is not None and shape_layout_of(rec) == kind:
            found = (rec.cost.dollars_per_hour, describe_shape(rec), rec.headroom, rec.gpus)
        else:
            mine = np.flatnonzero(layout == kind)
            k = mine[recommendation_order(cost[mine], spare[mine], gpus[mine])[0]] if len(mine) else None
            shape = None if k is None else grid.shape(req, int(rows.shape[index[k]]))
            found = None if k is None or shape is None else (float(cost[k]), _shape_words(
                int(replicas[k]), shape.gpus, shape.gpu.key, shape.precision, int(rows.batch[index[k]]),
                shape.dp_attention, shape.pp, shape.ep), rounded(float(spare[k])), int(gpus[k]))
        miss = None if found is not None or kind is None else _nearest_miss(rejected, shape_layout == kind)
        options.append(ShapeOption(name=name, layout=kind, miss=miss) if found is None else ShapeOption(
            name=name, layout=kind, cost=found[0], words=found[1], headroom=found[2], gpus=found[3]))
    return options


def shape_lines(options: list[ShapeOption], rec: Candidate | None) -> list[str]:
    """`PlanResult.shapes`: each shape's option in words, against the recommendation `rec`."""
    lines = []
    for option in options:
        name, cost, words = option.name, option.cost, option.words
        if cost is None or words is None:
            nearest = f"; nearest: {option.miss[:600]}" if option.miss else ""
            lines.append(f"{name}: no feasible candidate found (within the targets, the limits and "
                         f"{PRACTICAL_COST_FACTOR:g}x the cheapest cost){nearest}")
        elif rec is not None and words == describe_shape(rec):
            lines.append(f"{name}: {per_hour(cost)}, {words}: the recommendation")
        elif rec is not None:
            extra = cost / rec.cost.dollars_per_hour - 1.0
            lines.append(f"{name}: {per_hour(cost)} ({extra:+.0%} against the recommendation), {words}")
        else:
            lines.append(f"{name}: {per_hour(cost)}, {words}")
    return lines


def _nearest_miss(rejected: list[_Rejections], mine: NDArray[np.bool_]) -> str | None:
    """The rejection of the shapes `mine` (a mask over the grid's shapes) that got furthest through the gates,
    nearest to passing that gate first (`_nearness`), then cheapest (a shape failing several shape gates counts
    under the first), as "gate: reason"; None when none of them was rejected."""
    order = {gate: i for i, gate in enumerate(GATES)}
    first_gate = np.full(len(mine), len(GATES))
    for r in rejected:
        if r.gate in SHAPE_GATES and len(r.shape):
            np.minimum.at(first_gate, r.shape, order[r.gate])
    best: tuple[int, float, float, int] | None = None
    chosen: _Rejections | None = None
    for r in rejected:
        keep = mine[r.shape] & ((first_gate[r.shape] == order[r.gate]) if r.gate in SHAPE_GATES else True)
        near = _nearness(r)
        for k in np.flatnonzero(keep):
            key = (-order[r.gate], float(near[k]), float(r.cost[k]), int(r.index[k]))
            if best is None or key < best:
                best, chosen = key, r
    if chosen is None or best is None:
        return None
    return f"{chosen.gate}: {chosen.reason(best[3])}"


def _nearness(r: _Rejections) -> NDArray[np.float64]:
    """How near each of `r` is to passing its gate, the order of the nearest infeasible candidates within a gate:
    its miss (the value over the gate's limit, e.g. 1.25 for a 10 ms TPOT against an 8 ms target), inf where the
    gate has no measure of it (parallelism, placement, precision: cost orders those)."""
    return np.full(len(r.index), np.inf) if r.miss is None else np.asarray(r.miss, dtype=float)


def _objective_latencies(req: PlanRequest) -> list[tuple[str, float]]:
    """The latencies the frontier compares: TTFT, TPOT and e2e, each at its SLO percentile (p95 without SLO)."""
    quantile = {s.metric: s.quantile for s in req.slos}
    return [(metric, quantile.get(metric, 0.95)) for metric in ("ttft", "tpot", "e2e")]


def non_dominated(objectives: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Mask of rows no other row beats on every column (lower is better) and strictly on one; of identical
    rows only the first is kept.

    Dominance is transitive, so a row is off the frontier exactly when some row dominates it (or is an
    identical earlier one), and a row that a dominated row would dominate is dominated too. The rows are
    compared pairwise, one column at a time: first against the cheapest few (which usually remove most), then
    the rows left among themselves.
    """
    n = len(objectives)

    def beaten(rows: NDArray[np.intp], by: NDArray[np.intp]) -> NDArray[np.bool_]:
        """For each of `rows`: whether one of `by` dominates it or is an identical earlier row."""
        no_worse = np.ones((len(rows), len(by)), dtype=bool)   # [i, j]: by[j] <= rows[i] in every column
        better = np.zeros((len(rows), len(by)), dtype=bool)    # [i, j]: by[j] < rows[i] in some column
        for column in objectives.T:
            no_worse &= column[by][None, :] <= column[rows][:, None]
            better |= column[by][None, :] < column[rows][:, None]
        identical_before = no_worse & ~better & (by[None, :] < rows[:, None])
        return np.any((no_worse & better) | identical_before, axis=1)

    every = np.arange(n)
    cheapest = np.argsort(objectives[:, 0], kind="stable")[:32] if n else every
    left = every[~beaten(every, cheapest)]
    keep = np.zeros(n, dtype=bool)
    keep[left[~beaten(left, left)]] = True
    return keep


def undominated(req: PlanRequest, candidates: list[Candidate]) -> list[Candidate]:
    """`candidates` (in their order) without those another of them beats on every objective of the frontier by the
    numbers they show (`_objectives`); of identical ones the first."""
    if not candidates:
        return []
    keep = non_dominated(np.array([_objectives(req, c) for c in candidates]))
    return [c for c, k in zip(candidates, keep, strict=True) if k]


def _select(objectives: NDArray[np.float64], headroom: NDArray[np.float64], gpus: NDArray[np.int_],
            alternatives: int) -> NDArray[np.intp]:
    """Indices to show: the first in the recommendation's order (`recommendation_order`); then, among frontier
    points costing at most `PRACTICAL_COST_FACTOR` times the cheapest, each latency objective's best, the most
    headroom and the fewest GPUs; then the cheapest others within that bound, up to 1 + alternatives."""
    front = np.flatnonzero(non_dominated(objectives))
    ordered = front[recommendation_order(objectives[front, 0], headroom[front], gpus[front])]
    picks = [int(ordered[0])]
    practical = ordered[objectives[ordered, 0] <= PRACTICAL_COST_FACTOR * objectives[ordered[0], 0]]
    if not len(practical):  # costs that are not finite (absurd rates): no latency extremes to pick
        practical = ordered[:1]
    extremes = [practical[np.argmin(objectives[practical, col])] for col in range(1, 4)]
    extremes += [practical[np.argmax(headroom[practical])], practical[np.argmin(gpus[practical])]]
    for i in [*extremes, *practical]:
        if len(picks) > alternatives:
            break
        if int(i) not in picks:
            picks.append(int(i))
    return np.array(picks)


def _objectives(req: PlanRequest, c: Candidate) -> NDArray[np.float64]:
    """(cost, TTFT, TPOT, e2e at each metric's SLO percentile (p95 without SLO), -headroom) of a reported
    candidate: all lower-is-better, the columns the frontier is computed on. No TPOT (no second token) counts 0,
    as on the frontier of the search (`_shown_rows`)."""
    quantile = {s.metric: s.quantile for s in req.slos}
    values = [c.cost.dollars_per_hour]
    for metric, stats in (("ttft", c.predicted.ttft_ms), ("tpot", c.predicted.tpot_ms), ("e2e", c.predicted.e2e_ms)):
        values.append(0.0 if stats is None else getattr(stats, QUANTILE_NAMES[quantile.get(metric, 0.95)]))
    values.append(-c.headroom)
    return np.array(values)


TAG_COLUMNS = (("cheapest", 0), ("lowestTtft", 1), ("lowestTpot", 2), ("lowestLatency", 3), ("mostHeadroom", 4))


def tag_candidates(req: PlanRequest, front: list[Candidate]) -> list[Candidate]:
    """The candidates (in the order shown: the recommendation first) with tags saying which objective each is
    best at (cheapest, lowestTtft, lowestTpot, lowestLatency, mostHeadroom, fewestGpus; each tag on one row,
    the first of those tied; lowestTpot only where every one has a TPOT) and a line saying why each is worth
    reading (`why`)."""
    if not front:
        return []
    objectives = np.array([_objectives(req, c) for c in front])
    tags: list[list[str]] = [[] for _ in front]
    for name, column in TAG_COLUMNS:
        if name == "lowestTpot" and any(c.predicted.tpot_ms is None for c in front):
            continue  # no TPOT to be lowest in
        tags[int(np.argmin(objectives[:, column]))].append(name)
    tags[int(np.argmin([c.gpus for c in front]))].append("fewestGpus")
    first = front[0]
    return [c.model_copy(update={"tags": t, "why": _why(req, c, t, first, k == 0)})
            for k, (c, t) in enumerate(zip(front, tags, strict=True))]


def _why(req: PlanRequest, c: Candidate, tags: list[str], first: Candidate, is_first: bool) -> str:
    """One line: what `c` is best at, against the recommendation `first`, and what that costs."""
    quantile = {s.metric: s.quantile for s in req.slos}

    def latency(x: Candidate, metric: str) -> tuple[str, float]:
        name = QUANTILE_NAMES[quantile.get(metric, 0.95)]
        return name, float(getattr(getattr(x.predicted, f"{metric}_ms"), name))

    shape = describe_shape(c)
    if is_first:
        return (f"cheapest that meets every target: {shape}, {per_hour(c.cost.dollars_per_hour)}, "
                f"{c.headroom:.0%} headroom")
    extra = c.cost.dollars_per_hour - first.cost.dollars_per_hour
    cost = (f"+{per_hour(extra)} (+{extra / first.cost.dollars_per_hour:.0%})" if extra > 0.005
            else "at the same cost")
    for tag, metric, label in (("lowestTtft", "ttft", "TTFT"), ("lowestTpot", "tpot", "TPOT"),
                               ("lowestLatency", "e2e", "end-to-end latency")):
        if tag in tags:
            name, value = latency(c, metric)
            return f"lowest {label} {name}: {value:g} ms vs {latency(first, metric)[1]:g} ms, {cost}: {shape}"
    if "mostHeadroom" in tags:
        return f"most headroom: {c.headroom:.0%} vs {first.headroom:.0%}, {cost}: {shape}"
    if "fewestGpus" in tags:
        return f"fewest GPUs: {c.gpus} vs {first.gpus}, {cost}: {shape}"
    return f"a further choice on the frontier, {cost}: {shape}"


def describe_shape(c: Candidate) -> str:
    """`c`'s replicas, GPUs, precision and batch cap in a few words (each pool's, for a disaggregated one)."""
    if c.roles:
        pools = c.pools()
        return f"{pools} ({c.precision}, decode batch {c.max_batch})"
    return _shape_words(c.replicas, c.gpus_per_replica, c.gpu_type, c.precision, c.max_batch,
                        c.data_parallel_attention, c.pipeline_parallel, c.expert_parallel)


def _shape_words(replicas: int, gpus: int, gpu_type: str, precision: str, batch: int, dp_attention: bool,
                 pp: int, ep: bool = False) -> str:
    dp = ", DP attention" + (" + EP" if ep else "") if dp_attention else ""
    stages = f", {pp} pipeline stages" if pp > 1 else ""
    return f"{replica_shape(replicas, gpus, gpu_type)} ({precision}, batch {batch}{dp}{stages})"


def shape_layout_of(c: Candidate) -> int | None:
    """`ShapeOption.layout` of `c`: None for a disaggregated one; aggregated, 0: a replica within a node; 1: tensor
    (or expert) parallel over nodes; 2: pipeline stages over nodes."""
    if c.roles:
        return None
    return 2 if c.pipeline_parallel > 1 else 1 if c.nodes_per_replica > 1 else 0


def distinct(req: PlanRequest, ordered: list[Candidate]) -> list[Candidate]:
    """`ordered` without near-duplicates: a candidate at the cost of one kept before it whose latency
    objectives are all within NEAR_DUPLICATE of that one's and whose headroom is within 5 points."""
    kept: list[tuple[Candidate, NDArray[np.float64]]] = []
    for c in ordered:
        mine = _objectives(req, c)
        if not any(abs(mine[0] - theirs[0]) <= 1e-9 * max(1.0, theirs[0])
                   and np.all(np.abs(mine[1:4] - theirs[1:4]) <= NEAR_DUPLICATE * np.maximum(theirs[1:4], 1e-9))
                   and abs(mine[4] - theirs[4]) <= 0.05 for _, theirs in kept):
            kept.append((c, mine))
    return [c for c, _ in kept]


def by_cost(c: Candidate) -> tuple[float, float, int]:
    """The recommendation's order: the cost as shown (`cents`: to the cent, so costs that print alike tie), then the
    most headroom as shown (`rounded`), then the fewest GPUs. `recommendation_order` is the same over arrays."""
    return c.cost.dollars_per_hour, -c.headroom, c.gpus


def recommendation_order(cost: NDArray[np.float64], spare: NDArray[np.float64], gpus: NDArray[np.int_]
                         ) -> NDArray[np.intp]:
    """Positions of the rows of `cost` [$/h], headroom `spare` and GPUs in the recommendation's order (`by_cost`,
    on the values a candidate of each would show); equal keys keep their order."""
    def shown(values: NDArray[np.float64], kept: Callable[[float], float]) -> NDArray[np.float64]:
        return np.array([kept(float(v)) if np.isfinite(v) else float(v) for v in values])

    return np.lexsort((gpus, -shown(spare, rounded), shown(cost, cents)))
