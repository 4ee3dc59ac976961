"""Online calibration: fit one engine's speed on one GPU type from a deployment's observed latencies.

Two multipliers on the kernel model's speed (inferplan.planner.model.kernels, with the engine terms of
inferplan/planner/data/factors.json) are fitted per plan:
- `decode`: scales the speed of the decode step's kernels (weights, KV and compute), fitted so that the predicted
  mean time per output token equals the observed one (vLLM's histogram `_sum / _count`: exact, no bucket error);
- `prefill`: scales the speed of prefill, fitted to the mean time to first token, only when TTFT is
  not dominated by queueing (then prefill speed cannot be told apart from the wait).

The estimator is bounded and smoothed:
- each fit is a bisection for the multiplier in [MIN_SCALE, MAX_SCALE]; a fit that
  ends at a bound is rejected: no speed within the bounds explains the data, which points at a wrong
  description of the deployment (spec.observe.current) rather than at the engine;
- a window with fewer than MIN_REQUESTS completed requests updates nothing;
- the update moves the multiplier towards the fit in log space by n / (n + PRIOR_REQUESTS) for n requests,
  and by at most a factor MAX_STEP per update, so one odd window cannot swing the plan.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from inferplan.planner.calibration.observed import CurrentShape, predict_current
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.model.factors import EngineFactors, FactorSet, load_factors
from inferplan.planner.request import PlanRequest

MIN_SCALE, MAX_SCALE = 0.25, 4.0
MIN_REQUESTS = 200
PRIOR_REQUESTS = 500.0
MAX_STEP = 1.5
QUEUE_DOMINATED = 0.5   # skip the prefill fit when waiting requests exceed this per replica (observed mean)
_BISECTION_STEPS = 24   # log2(16) / 2^24: far finer than any data


@dataclass(frozen=True)
class Calibration:
    """The multipliers in use and where they come from."""

    decode: float = 1.0
    prefill: float = 1.0
    samples: int = 0          # requests behind the accepted updates, all windows together
    updates: int = 0          # accepted updates
    note: str = "catalog factors"  # the last update's outcome, in words

    @property
    def provenance(self) -> str:
        return "observed" if self.updates else "catalog"


def calibrated_factors(factors: FactorSet, engine: str, gpu_key: str, calibration: Calibration,
                       release: str | None = None) -> FactorSet:
    """`factors` with `engine`'s decode and prefill speed on `gpu_key` (its factor line at `release`; None: the
    current one) multiplied by the calibration."""
    if calibration.decode == 1.0 and calibration.prefill == 1.0:
        return factors
    base = factors.engine_on(engine, gpu_key, load_gpu_catalog().get(gpu_key).vendor, release)
    scaled = _scaled(base, calibration.decode, calibration.prefill)
    return dataclasses.replace(factors, overrides={**factors.overrides, (engine, gpu_key): scaled})


def _scaled(base: EngineFactors, decode: float, prefill: float) -> EngineFactors:
    return dataclasses.replace(base, decode_speed=base.decode_speed * decode,
                               prefill_speed=base.prefill_speed * prefill)


def _solve(predicted: Callable[[float], float], observed: float) -> float | None:
    """The multiplier s in [MIN_SCALE, MAX_SCALE] with predicted(s) = observed (predicted falls as s grows);
    None when the observed value lies outside what the bounds can produce."""
    lo, hi = math.log(MIN_SCALE), math.log(MAX_SCALE)
    if not predicted(math.exp(hi)) <= observed <= predicted(math.exp(lo)):
        return None
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2.0
        if predicted(math.exp(mid)) > observed:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2.0)


def _smoothed(old: float, fit: float, requests: float) -> float:
    weight = requests / (requests + PRIOR_REQUESTS)
    step = weight * (math.log(fit) - math.log(old))
    step = max(-math.log(MAX_STEP), min(math.log(MAX_STEP), step))
    return min(MAX_SCALE, max(MIN_SCALE, math.exp(math.log(old) + step)))


def update_calibration(req: PlanRequest, shape: CurrentShape, observed_mean: dict[str, float], requests: float,
                       waiting: float | None, previous: Calibration,
                       factors: FactorSet | None = None) -> Calibration:
    """The next calibration from one window: `req` carries the observed workload, `observed_mean` the observed
    mean TTFT and TPOT [s], `requests` how many completed in the window, `waiting` the mean number of waiting
    requests (all replicas). Returns `previous` with a new note when the data cannot support an update."""
    factors = factors or load_factors()
    if requests < MIN_REQUESTS:
        return dataclasses.replace(previous, note=f"not updated: {requests:.0f} requests in the window, fewer "
                                                  f"than {MIN_REQUESTS}")
    tpot = observed_mean.get("tpot")
    if tpot is None or not tpot > 0:
        return dataclasses.replace(previous, note="not updated: no observed time per output token")
    base = factors.engine_on(req.engine, shape.gpu_type, load_gpu_catalog().get(shape.gpu_type).vendor, shape.release)

    def predict(decode: float, prefill: float) -> dict[str, float]:
        scaled = dataclasses.replace(factors, overrides={**factors.overrides,
                                                         (req.engine, shape.gpu_type): _scaled(base, decode, prefill)})
        return predict_current(req, shape, scaled).mean

    decode_fit = _solve(lambda s: predict(s, previous.prefill)["tpot"], tpot)
    if decode_fit is None:
        return dataclasses.replace(previous, note=(
            f"rejected: an observed mean TPOT of {tpot * 1e3:.1f} ms needs a decode speed outside "
            f"{MIN_SCALE:g}-{MAX_SCALE:g}x the catalog's; check spec.observe.current"))
    decode = _smoothed(previous.decode, decode_fit, requests)
    prefill, prefill_note = previous.prefill, ""
    ttft = observed_mean.get("ttft")
    if ttft is None or not ttft > 0:
        prefill_note = "; prefill not fitted (no observed TTFT)"
    elif waiting is not None and waiting / shape.replicas > QUEUE_DOMINATED:
        prefill_note = f"; prefill not fitted (TTFT dominated by queueing: {waiting:.1f} requests waiting)"
    else:
        prefill_fit = _solve(lambda s: predict(decode, s)["ttft"], ttft)
        if prefill_fit is None:
            prefill_note = (f"; prefill not fitted (an observed mean TTFT of {ttft * 1e3:.0f} ms needs a prefill "
                            f"speed outside {MIN_SCALE:g}-{MAX_SCALE:g}x the catalog's)")
        else:
            prefill = _smoothed(previous.prefill, prefill_fit, requests)
    return Calibration(decode=decode, prefill=prefill, samples=previous.samples + int(requests),
                       updates=previous.updates + 1,
                       note=f"updated from {requests:.0f} requests: decode x{decode:.3f}, prefill x{prefill:.3f}"
                            f"{prefill_note}")
