"""The replica bounds of a planned deployment: the fewest and most replicas an autoscaler (`autoscaling.py`) or
KServe (`manifests.inference_service`) may run (docs/deploy.md, "Autoscaling").

- min replicas: the plan's availability floor (constraints.minReplicas, default 2), never above the
  recommendation (the point prediction's replicas);
- max replicas: the tightest cap the plan sets on this GPU type (maxReplicas, the budget at the GPU's price,
  maxGpus, maxGpusPerType, availableGpus); without one, twice the recommendation, or, where the recommendation
  states prediction intervals and more are needed, the replicas that hold every SLO with each latency at the high
  end of its interval (`pessimistic_replicas`); at most the replicas the type's nodes hold, where the request knows
  each node's GPUs (`PlanRequest.node_gpus`), placed by the planner's own rule (`core.most_replicas_placed`).

The counts these caps read (availableGpus, the nodes' GPUs) may differ within the count ranges the operator records
for an answer (`PlanResult.count_bounds`), which hold only for the comparisons planning made, so the bounds may
differ between two counts the operator treats as one. That is sound only while no status carries them: the operator
writes none of them (its manifests reference and digest are the default rendering, `manifests.render` without an
autoscaler or KServe, whose objects read no bound; tests/operator/test_reconcile.py holds it to that). A status that
came to carry a bound would have to record the bound's comparisons in the count ranges too.

Both `manifests.py` and `autoscaling.py` import this module; it imports neither (no import circle).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from inferplan.planner.calibration.observed import CurrentShape, predict_current
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.quantiles import QUANTILE_NAMES, percent_text
from inferplan.planner.request import PlanRequest
from inferplan.planner.results import Candidate, rounded
from inferplan.planner.search.core import BUDGET_TOLERANCE, gpu_price, most_replicas_placed, nodes_words


@dataclass(frozen=True)
class ReplicaBounds:
    """Fewest and most replicas the autoscaler may run, where each comes from, and what they rest on in words (the
    rendered autoscaler's `inferplan.io/replica-bounds` annotation), for docs and review."""

    min: int
    max: int
    min_from: str
    max_from: str
    basis: str = ""


@dataclass(frozen=True)
class Pessimistic:
    """What the recommendation needs if each latency its SLOs bound comes out at the high end of its prediction
    interval: `replicas`, or None where no count holds an SLO then; `slo` says which SLO sets the count (or is
    missed even at light load), at what ratio of high end to prediction, and the latency it reaches there."""

    confidence: float
    slo: str
    replicas: int | None = None
    checks: bool = False  # the ratios are the SLO checks' one-sided bounds, not the intervals' high ends

    def words(self) -> str:
        """"every SLO holds with 9 replicas at the one-sided 80% bounds of the SLO checks (TTFT p95 <= 500 ms, ...)",
        or "no replica count holds TPOT p95 <= 50 ms at ... (... at light load)"; "at the high end of the 80%
        prediction intervals" where the candidate carries no SLO checks."""
        at = (f"at the one-sided {percent_text(self.confidence)} bounds of the SLO checks" if self.checks else
              f"at the high end of the {percent_text(self.confidence)} prediction intervals")
        if self.replicas is None:
            return f"no replica count holds every SLO {at} ({self.slo})"
        return f"every SLO holds with {self.replicas} replicas {at} ({self.slo})"


RATE_STEPS = 24
"""Bisections of the per-replica rate between light load and the point capacity (in log space: 1e4 ** 2 ** -24,
a relative step under 1e-6)."""
LIGHT_LOAD = 1e-4
"""Light load, as a share of the point capacity: where the latencies are their floor."""
PESSIMISTIC_CEILING = 4
"""Without a cap of the plan, the intervals raise maxReplicas to at most this many times the recommendation. Where
the high end of a latency lies near its SLO even at light load, the count that holds it grows without bound (the
examples ask for up to 300x the recommendation): an autoscaler bound that far above the reviewed plan is a cost
nobody agreed to. A plan that wants more says so with constraints.maxReplicas or budgetDollarsPerHour, and the
rendered annotation gives the count the intervals ask for."""


def pessimistic_replicas(request: PlanRequest, candidate: Candidate) -> Pessimistic | None:
    """The replicas that keep every SLO if each latency an SLO bounds is at the high end of its prediction interval
    (`predicted.intervals`, at `predicted.confidence`): the highest per-replica rate at which each SLO's predicted
    percentile x (its interval's high end / its prediction) stays within the SLO, found by bisection with the
    planner's model (`observed.predict_current`, its curve anchored on the candidate's own prediction at the planned
    rate, so a verified or calibrated candidate keeps its numbers), and the replicas of that rate as the search
    counts them (the plan's rate, minHeadroom and minReplicas), at least the recommendation's. None without
    intervals or SLOs, and for a disaggregated candidate."""
    intervals, p = candidate.predicted.intervals, candidate.predicted
    if intervals is None or candidate.roles or not request.slos:
        return None
    shape = CurrentShape(candidate.gpu_type, 1, candidate.gpus_per_replica, candidate.precision,
                         candidate.kv_cache_dtype, candidate.max_batch, candidate.data_parallel_attention,
                         candidate.expert_parallel, candidate.pipeline_parallel)

    def latency(rate: float) -> dict[str, dict[float, float]]:
        return predict_current(dataclasses.replace(request, rate_rps=rate), shape).latency

    planned = latency(p.requests_per_second_per_replica)
    # An SLO's pessimistic end is the bound its SLO check states (`predicted.sloChecks`: the one-sided bound at the
    # confidence, the limit the plan's search and verification judged the candidate by), so that the bounds never
    # call a recommendation out of reach that the plan says holds at that confidence; the interval's high end (a
    # central interval's, one-sided at (1 + c) / 2 and joining more groups) only for a status without checks.
    checks = {(c.metric, c.percentile): c.ratio for c in p.slo_checks}
    slos = []  # (SLO, its pessimistic end / the prediction, the end / the model's latency at the planned rate)
    for slo in request.slos:
        name = QUANTILE_NAMES[slo.quantile]
        point = getattr(getattr(p, f"{slo.metric}_ms"), name) * 1e-3
        ratio = checks.get((slo.metric, name))
        high = point * ratio if ratio is not None else getattr(getattr(intervals, f"{slo.metric}_ms"), name)[1] * 1e-3
        model = planned[slo.metric][slo.quantile]
        slos.append((slo, max(high / point, 1.0) if point > 0 else 1.0, max(high, point) / model if model > 0 else 1.0))

    def load(rate: float) -> list[float]:
        """Each SLO's latency at the high end at `rate`, over the SLO: every one <= 1 where every SLO holds."""
        at = latency(rate)
        return [at[s.metric][s.quantile] * scale / s.max_s for s, _, scale in slos]

    def text(rate: float, where: str) -> str:
        shares = load(rate)
        i = max(range(len(slos)), key=shares.__getitem__)
        s, ratio, _ = slos[i]
        return (f"{s.metric.upper()} {QUANTILE_NAMES[s.quantile]} <= {_ms(s.max_s)} ms: up to {ratio:.3g}x the "
                f"prediction, {_ms(shares[i] * s.max_s)} ms {where}")

    confidence = p.confidence or 0.8
    best = p.max_requests_per_second_per_replica
    low, top = best * LIGHT_LOAD, best
    if max(load(low)) > 1.0:
        return Pessimistic(confidence, text(low, "at light load"), checks=bool(checks))
    if max(load(top)) <= 1.0:
        low = top
    else:
        for _ in range(RATE_STEPS):
            middle = math.sqrt(low * top)
            low, top = (middle, top) if max(load(middle)) <= 1.0 else (low, middle)
    usable = max(low * (1.0 - request.min_headroom), 1e-12)
    replicas = max(request.min_replicas, math.ceil(request.rate_rps / usable - 1e-9), candidate.replicas)
    return Pessimistic(confidence, text(low, f"at {rounded(low)} requests/s per replica"), replicas, bool(checks))


def _ms(seconds: float) -> str:
    """Milliseconds in words: 4 significant digits, whole above 1000 (60000, not 6e+04)."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.4g}"


PLACED = "the replicas the cluster's nodes hold"
"""`ReplicaBounds.max_from` where the nodes' GPUs (`PlanRequest.node_gpus`) set maxReplicas."""


def replica_bounds(request: PlanRequest, candidate: Candidate) -> ReplicaBounds:
    """min: the plan's floor (constraints.minReplicas), at most the recommendation; max: the tightest of the
    plan's caps on this GPU type, else twice the recommendation or, where more, the replicas that hold every SLO at
    the high end of the prediction intervals (`pessimistic_replicas`); at most the replicas the type's nodes hold
    (where the request knows them: `PlanRequest.node_gpus`); never below the recommendation (which meets every cap
    and was placed on those nodes). `basis` says all of it in words."""
    gpus = candidate.gpus_per_replica
    caps: list[tuple[int, str]] = []
    if request.max_replicas is not None:
        caps.append((request.max_replicas, "constraints.maxReplicas"))
    if request.budget_usd_per_hour is not None:
        # The replicas whose cost `over_budget` lets through.
        per_replica = gpus * gpu_price(request, load_gpu_catalog().get(candidate.gpu_type))
        caps.append((math.floor(request.budget_usd_per_hour * (1.0 + BUDGET_TOLERANCE) / per_replica),
                     "constraints.budgetDollarsPerHour"))
    if request.max_gpus is not None:
        caps.append((request.max_gpus // gpus, "constraints.maxGpus"))
    if candidate.gpu_type in request.max_gpus_per_type:
        caps.append((request.max_gpus_per_type[candidate.gpu_type] // gpus, "constraints.maxGpusPerType"))
    if request.available_gpus and candidate.gpu_type in request.available_gpus:
        caps.append((request.available_gpus[candidate.gpu_type] // gpus, "constraints.availableGpus"))
    pessimistic = pessimistic_replicas(request, candidate)
    needed = None if pessimistic is None else pessimistic.replicas
    ceiling = PESSIMISTIC_CEILING * candidate.replicas
    if caps:
        most, source = min(caps)
    elif needed is not None and needed > 2 * candidate.replicas:
        most = min(needed, ceiling)
        source = ("the SLOs at the prediction intervals' high end" if needed <= ceiling else
                  f"the SLOs at the prediction intervals' high end, at most {PESSIMISTIC_CEILING}x the recommendation")
    else:
        most, source = 2 * candidate.replicas, "twice the recommendation (the plan sets no cap)"
    # The nodes are no cap the plan sets but what can run at all: they bound whichever maximum the above gives. Their
    # GPUs may add up to more replicas than they hold (two nodes of 7, TP 4: 14 GPUs, 2 replicas, not 3).
    placed = None if candidate.roles else most_replicas_placed(request, candidate.gpu_type, gpus)
    if placed is not None and placed < most:
        most, source = placed, PLACED
    least = min(request.min_replicas, candidate.replicas)
    source = source if most >= candidate.replicas else "the recommendation"
    most = max(most, candidate.replicas)
    basis = [f"minReplicas {least}: constraints.minReplicas ({request.min_replicas}), at most the recommendation's "
             f"{candidate.replicas} replicas (the point prediction)", f"maxReplicas {most}: {source}"]
    if source == PLACED:
        nodes = (request.node_gpus or {})[candidate.gpu_type]
        basis.append(f"{placed} replicas of {gpus} GPUs fit on {nodes_words(candidate.gpu_type, nodes)}")
    if pessimistic is None:
        basis.append("the recommendation states no prediction interval: the bounds rest on the point prediction")
    else:
        basis.append(pessimistic.words())
        if needed is not None and needed > most:
            stop = ("the cluster's nodes hold no more" if source == PLACED else
                    f"{min(caps)[1]} allows no more" if caps else  # the plan's own cap: naming another misleads
                    "constraints.maxReplicas or budgetDollarsPerHour allow more")
            basis.append(f"maxReplicas stops at {most}: {stop}")
    return ReplicaBounds(min=least, max=most, min_from="constraints.minReplicas", max_from=source,
                         basis="; ".join(basis))


__all__ = [
    "LIGHT_LOAD",
    "PESSIMISTIC_CEILING",
    "PLACED",
    "RATE_STEPS",
    "Pessimistic",
    "ReplicaBounds",
    "pessimistic_replicas",
    "replica_bounds",
]
