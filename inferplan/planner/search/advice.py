"""Advice for a plan with no feasible answer: the smallest changes (SLO, limits, GPU type, precision, tensor-parallel
size, context) that make it feasible, each checked by planning again with the search it is given."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from inferplan.planner.catalog.engines import (
    ENGINES,
    SERVED_PRECISIONS,
)
from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.request import PlanRequest, SloTarget
from inferplan.planner.results import (
    Candidate,
    PlanResult,
    per_hour,
    replica_shape,
)
from inferplan.planner.search.annotate import (
    _describe_slo,
)
from inferplan.planner.search.core import (
    _COUNTED,
    BUDGET_TOLERANCE,
    cost_per_hour,
    over_budget,
    pools_placed,
)
from inferplan.planner.search.grid import (
    CONTEXT_WARN_SHARE,
    _auto_max_len,
    _candidate_gpus,
    _grid,
    _settings,
    context_overflow,
)
from inferplan.planner.spec import TP_SIZES

CONTEXT_LIMIT_SHARE = 0.05   # ... and above this share the plan is infeasible: a plan for errors


def _tokens_for(req: PlanRequest, share: float) -> int:
    """The fewest tokens (a multiple of 256) that all but `share` of requests fit in (prompt + output)."""
    low, high = 256, 256
    while context_overflow(req, high) > share and high < 1 << 24:
        low, high = high, high * 2
    while high - low > 256:
        mid = (low + high) // 512 * 256
        low, high = (mid, high) if context_overflow(req, mid) > share else (low, mid)
    return high


SLO_RELAXED = 100.0  # a suggestion looks for the target one SLO would need within this factor of the plan's


def _describe(c: Candidate) -> str:
    if c.roles:
        pools = c.pools()
        return f"{pools} ({c.precision}) at {per_hour(c.cost.dollars_per_hour)}"
    shape = replica_shape(c.replicas, c.gpus_per_replica, c.gpu_type)
    return f"{shape} ({c.precision}) at {per_hour(c.cost.dollars_per_hour)}"


Answer = Callable[[PlanRequest], PlanResult]
"""What a plan answers for a request: the analytic search's (`plan`), or the candidates verified in the simulator
(`verification.planned`). Suggestions judge each change they try with the plan's own."""


def suggestions_for(req: PlanRequest, answer: Answer, factors: FactorSet | None = None) -> list[str]:
    """For a plan with no feasible candidate: the smallest changes that make one feasible (`_suggestions`), each
    judged by `answer`: verification passes its own, so that a plan whose every candidate the simulator dropped
    gets suggestions, and each suggested deployment passes the simulator too."""
    factors = factors or load_factors()
    return _suggestions(req, factors, _settings(req, ENGINES[req.engine], 1).max_model_len, answer)


def _suggestions(req: PlanRequest, factors: FactorSet, max_len: int, answer: Answer) -> list[str]:
    """For a plan with no feasible candidate: the smallest changes that make one feasible, one line each (the
    context, the limits (budget, GPU counts, replicas), the GPU types, the precision, the KV-cache dtype, the TP, a
    shorter context, each SLO), with the deployment it gives (`answer`'s recommendation for the changed plan)."""
    def best(changed: PlanRequest) -> Candidate | None:
        return answer(changed).recommendation

    overflow = context_overflow(req, max_len)
    if overflow > CONTEXT_LIMIT_SHARE:
        return [_context_suggestion(req, max_len, overflow, best)]
    out: list[str] = []
    types = req.gpu_types or tuple(g.key for g in _candidate_gpus(req))

    if types:
        free = best(replace(req, gpu_types=types, available_gpus=None, node_gpus=None, max_gpus=None,
                            max_gpus_per_type={}, max_replicas=None, budget_usd_per_hour=None))
        if free is not None:
            changes = []
            cost = cost_per_hour(req, free)  # unrounded: the budget suggested admits it (`over_budget`)
            if over_budget(req, cost):
                changes.append(f"budgetDollarsPerHour {math.ceil(cost / (1.0 + BUDGET_TOLERANCE))} "
                               f"(now {req.budget_usd_per_hour:g})")
            if req.max_gpus is not None and free.gpus > req.max_gpus:
                changes.append(f"maxGpus {free.gpus} (now {req.max_gpus})")
            # The GPUs of each type and the replicas of each pool: a disaggregated one's top-level type and replicas
            # are its decode pool's, its GPUs both pools'.
            pools: dict[str, list[tuple[int, int]]] = {}
            for pool in free.roles or [free]:
                pools.setdefault(pool.gpu_type, []).append((pool.replicas, pool.gpus_per_replica))
            for key, pooled in pools.items():
                gpus = sum(r * g for r, g in pooled)
                limit = req.max_gpus_per_type.get(key)
                if limit is not None and gpus > limit:
                    changes.append(f"maxGpusPerType {key}: {gpus} (now {limit})")
                have = (req.available_gpus or {}).get(key, math.inf)
                recorder = _COUNTED.get()
                if recorder is not None:
                    recorder.note(key, np.array([gpus]), have)
                if gpus > have:
                    # "fewer", not the count: the suggestion is part of the result, which must not change with the
                    # count within its range (as `plan._limit_reason`'s words)
                    changes.append(f"{gpus} {key} GPUs in the cluster (now fewer)")
            # Its replicas on the nodes of their type (both pools' together where they share one): where they do not
            # fit, room for them, in words that name no count of nodes (as above).
            for key, pooled in pools.items():
                if not pools_placed(req, key, pooled):
                    shapes = " and ".join(replica_shape(r, g, key) for r, g in pooled)
                    changes.append(f"room for {shapes} on the cluster's nodes (now less)")
            most = max(pool.replicas for pool in free.roles or [free])
            if req.max_replicas is not None and most > req.max_replicas:
                changes.append(f"maxReplicas {most} (now {req.max_replicas})")
            if changes:
                out.append(f"limits: {'; '.join(changes)} gives {_describe(free)}")
    if req.gpu_types or req.available_gpus is not None:
        other = best(replace(req, gpu_types=None, available_gpus=None, node_gpus=None))
        if other is not None and other.gpu_type not in types:
            out.append(f"GPU type: {_describe(other)} meets every target (a type this plan does not consider)")
    out += [line for line in (_precision_suggestion(req, best), _kv_suggestion(req, best), _tp_suggestion(req, best),
                              _shorter_context_suggestion(req, factors, max_len, best)) if line]
    for k, slo in enumerate(req.slos):
        name = QUANTILE_NAMES[slo.quantile]

        def value(c: Candidate, k: int = k, metric: str = slo.metric, name: str = name) -> float:
            """The target `c` meets: with a plan confidence its bound there (`Predicted.slo_checks`), else its
            prediction [s]."""
            checks = c.predicted.slo_checks
            if req.confidence is not None and checks:
                return checks[k].bound_ms / 1e3
            return float(getattr(getattr(c.predicted, f"{metric}_ms"), name)) / 1e3

        def at(target_s: float, k: int = k, slo: SloTarget = slo) -> list[Candidate]:
            changed = replace(req, slos=(*req.slos[:k], replace(slo, max_s=target_s), *req.slos[k + 1:]))
            result = answer(changed)
            shown = [c for c in [result.recommendation, *result.alternatives] if c is not None]
            # Verified: the alternatives the simulator did not reach keep their analytic (lower) tails; the target
            # reached is one a simulated candidate reaches.
            simulated = [c for c in shown if c.provenance.get("predicted") == "simulated"]
            return simulated if shown and shown[0] in simulated else shown

        # Nearly without this target, the candidates shown include the lowest on its metric (within
        # PRACTICAL_COST_FACTOR of the cheapest). The target suggested is one the plan was answered at (`high`):
        # the value a candidate reached is no such target (replanned at it, the answer can differ: the bursty
        # 72B example was told TPOT p99 <= 118 ms, which gave no recommendation). First that lowest value is
        # tried, then the geometric middle of the plan's target and the lowest answered.
        reached = at(slo.max_s * SLO_RELAXED)
        if not reached:
            continue
        found, high = reached[0], slo.max_s * SLO_RELAXED
        low, target = slo.max_s, max(min(value(c) for c in reached), slo.max_s)
        for _ in range(2):
            shown = at(target)
            if shown:
                found, high = shown[0], target
            else:
                low = target
            target = math.sqrt(low * high)
        out.append(f"SLO: {_describe_slo(slo)} <= {math.ceil(high * 1e3)} ms (now {slo.max_s * 1e3:g}) gives "
                   f"{_describe(found)}")
    if not out:
        out.append(f"no single change among the limits, the GPU types, the precision, the KV cache, the TP, the "
                   f"context and one SLO (up to {SLO_RELAXED:g}x) makes this plan feasible: see infeasible for what "
                   "each candidate fails")
    return out


def _precision_suggestion(req: PlanRequest, best: Callable[[PlanRequest], Candidate | None]) -> str | None:
    """The cheapest deployment in a weight precision the engine serves that the plan does not list (each from the
    checkpoint the engine would load: the catalog's, or the plan's model quantised at load), in words; None where
    none is feasible."""
    others = tuple(p for p in SERVED_PRECISIONS.get(req.engine, ()) if p not in req.precisions)
    found = best(replace(req, precisions=others, precisions_listed=False)) if others else None
    if found is None:
        return None
    source = "quantised at load from" if found.provenance.get("checkpoint") == "online" else "from"
    return (f"precision: {found.precision} weights {source} {found.checkpoint} (model.precisions, now "
            f"{', '.join(req.precisions)}) gives {_describe(found)}")


def _kv_suggestion(req: PlanRequest, best: Callable[[PlanRequest], Candidate | None]) -> str | None:
    """The cheapest deployment with the KV-cache dtype the plan does not list of the engine's default (`auto`) and
    FP8, in words; None where the plan lists both or neither makes it feasible."""
    others = tuple(kv for kv in ("auto", "fp8") if kv not in req.kv_dtypes)
    found = best(replace(req, kv_dtypes=others)) if others else None
    if found is None:
        return None
    return (f"KV cache: {found.kv_cache_dtype} (model.kvCacheDtypes, now {', '.join(req.kv_dtypes)}) gives "
            f"{_describe(found)}")


def _tp_suggestion(req: PlanRequest, best: Callable[[PlanRequest], Candidate | None]) -> str | None:
    """The cheapest deployment at a tensor-parallel size the plan does not list (constraints.tensorParallelSizes),
    within a node or over two (or the plan's maxNodesPerReplica, where more), in words; None where none is feasible.
    Over nodes it names the maxNodesPerReplica it needs, and the pipeline stages where it has them."""
    nodes = max(req.max_nodes_per_replica, 2)
    node_gpus = max((req.gpus_per_node.get(g.key, 8) for g in _candidate_gpus(req)), default=8)
    extra = tuple(t for t in TP_SIZES if t not in req.tp_sizes and t <= node_gpus * nodes)
    found = best(replace(req, tp_sizes=extra, max_nodes_per_replica=nodes)) if extra else None
    if found is None or found.roles:
        return None
    tp = found.gpus_per_replica // found.pipeline_parallel
    stages = f" x {found.pipeline_parallel} pipeline stages" if found.pipeline_parallel > 1 else ""
    spans = (f"; maxNodesPerReplica {found.nodes_per_replica}"
             if found.nodes_per_replica > req.max_nodes_per_replica else "")
    return (f"TP: {tp}{stages} (tensorParallelSizes, now {', '.join(map(str, req.tp_sizes))}{spans}) gives "
            f"{_describe(found)}")


def _context_suggestion(req: PlanRequest, max_len: int, overflow: float,
                        best: Callable[[PlanRequest], Candidate | None]) -> str:
    """Where more than CONTEXT_LIMIT_SHARE of requests exceed `max_len`: the plan's own engine.maxModelLen raised
    within the model's context where that holds 99.9% of requests (with the deployment it gives), else a model of
    a longer context or shorter prompts, with the share the model's whole context holds where the plan set less."""
    need = _tokens_for(req, CONTEXT_WARN_SHARE)
    context = req.arch.max_position_embeddings
    held = f"context: {max_len} tokens hold {1.0 - overflow:.1%} of requests"
    if req.max_model_len is not None and max_len < context:
        if need <= context:
            found = best(replace(req, max_model_len=need))
            return (f"context: maxModelLen {need} (now {max_len}: it holds {1.0 - overflow:.1%} of requests, {need} "
                    f"99.9%; the model's context is {context})"
                    + (f" gives {_describe(found)}" if found is not None else ""))
        held = (f"context: maxModelLen {max_len} holds {1.0 - overflow:.1%} of requests, the model's context of "
                f"{context} tokens {1.0 - context_overflow(req, context):.1%}")
    return (f"{held}; serve a model with a context (and maxModelLen) of at least {need} tokens, or cut prompts so "
            "that 99.9% fit")


def _shorter_context_suggestion(req: PlanRequest, factors: FactorSet, max_len: int,
                                best: Callable[[PlanRequest], Candidate | None]) -> str | None:
    """Where the context binds memory (a shorter maxModelLen lets more (shape, batch) rows through the memory
    gate: a KV cache that holds one sequence, a profile run that fits), the deployment at the shortest power of two
    that holds 99.9% of requests, else 99%, in words; None where neither is shorter, binds or is feasible."""
    engine = ENGINES[req.engine]
    lengths = sorted({min(_auto_max_len(req, share), req.arch.max_position_embeddings)
                      for share in (CONTEXT_WARN_SHARE, 10 * CONTEXT_WARN_SHARE)} - {max_len}, reverse=True)
    lengths = [length for length in lengths if length < max_len]
    if not lengths:
        return None
    fitting = len(_grid(req, engine, factors).row_shape)
    for length in lengths:
        shorter = replace(req, max_model_len=length)
        if len(_grid(shorter, engine, factors).row_shape) > fitting:
            found = best(shorter)
            if found is not None:
                return (f"context: maxModelLen {length} (now {max_len}; it holds "
                        f"{1.0 - context_overflow(req, length):.1%} of requests) gives {_describe(found)}")
    return None
