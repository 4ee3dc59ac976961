"""Check a planned deployment with the simulator: serve the plan's workload on the recommended (or any)
candidate's replicas and compare the simulated latency percentiles with the analytic ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferplan.planner.factors import FactorSet
from inferplan.planner.results import Candidate, Percentiles
from inferplan.planner.search import deployment_of
from inferplan.planner.simulate import SimulationResult, Workload, generate_workload, simulate, trace_workload
from inferplan.planner.spec import PlanRequest

QUANTILE_FIELDS = (("p50", "p50_s"), ("p90", "p90_s"), ("p95", "p95_s"), ("p99", "p99_s"))


def plan_workload(req: PlanRequest, requests: int, seed: int, max_model_len: int) -> Workload:
    """`requests` requests of the plan's workload (rate, lognormal lengths, arrival CV^2), deterministic per
    seed. Lengths are cut so that prompt + output fits `max_model_len`, as the engine would enforce."""
    generated = generate_workload(req.rate_rps, requests, req.prompt_mean, req.output_mean, req.prompt_cv,
                                  req.output_cv, req.arrival_cv2, seed)
    return fit_to_context(generated, max_model_len)


def fit_to_context(workload: Workload, max_model_len: int) -> Workload:
    prompts = np.minimum(workload.prompt_tokens, max_model_len - 1)
    outputs = np.maximum(np.minimum(workload.output_tokens, max_model_len - prompts), 1)
    return trace_workload(workload.arrival_s, prompts, outputs)


def simulate_candidate(req: PlanRequest, candidate: Candidate, *, requests: int = 20_000, seed: int = 0,
                       router: str = "round_robin", workload: Workload | None = None,
                       factors: FactorSet | None = None) -> SimulationResult:
    """Simulate `candidate`'s replicas serving the plan's workload (or `workload`, e.g. a replayed trace)."""
    deployment = deployment_of(req, candidate, factors)
    max_len = deployment.settings.max_model_len
    served = plan_workload(req, requests, seed, max_len) if workload is None else fit_to_context(workload, max_len)
    return simulate(deployment.hardware, served, replicas=candidate.replicas, max_batch=candidate.max_batch,
                    kv_tokens=deployment.memory.kv_cache_tokens, chunk_tokens=deployment.settings.chunk_tokens,
                    router=router)


@dataclass(frozen=True)
class Comparison:
    metric: str        # ttft | tpot | e2e
    quantile: str      # p50 | p90 | p95 | p99
    analytic_ms: float
    simulated_ms: float

    @property
    def ratio(self) -> float:
        """simulated / analytic (above 1: the analytic model was optimistic)."""
        return self.simulated_ms / self.analytic_ms if self.analytic_ms else float("nan")


def compare(candidate: Candidate, result: SimulationResult) -> list[Comparison]:
    """Analytic versus simulated percentiles of TTFT, TPOT and end-to-end latency."""
    rows = []
    for metric, analytic, simulated in (("ttft", candidate.predicted.ttft_ms, result.ttft),
                                        ("tpot", candidate.predicted.tpot_ms, result.tpot),
                                        ("e2e", candidate.predicted.e2e_ms, result.e2e)):
        for name, field in QUANTILE_FIELDS:
            rows.append(Comparison(metric, name, float(getattr(analytic, name)),
                                   float(getattr(simulated, field)) * 1e3))
    return rows


__all__ = ["Comparison", "Percentiles", "compare", "fit_to_context", "plan_workload", "simulate_candidate"]
