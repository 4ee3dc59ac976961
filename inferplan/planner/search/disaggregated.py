"""The disaggregated candidates of a plan (`constraints.shapes` lists "disaggregated"): a prefill pool and a
decode pool, each of its own GPU type, tensor-parallel size and replica count, the model of `disaggregated`.

The search splits each latency target between the pools and searches each pool's rows on its own:

- A TTFT target T is split: the prefill pool (its queue, the prompt's prefill and the KV transfer) gets f x T,
  the decode pool (the wait for a slot and the first step) the rest, for f in `TTFT_SPLITS`. Without a TTFT
  target, an end-to-end target E is split the same way with f in `E2E_SPLITS` (decode takes most of a request's
  life). The decode pool also gets every TPOT target and what is left of an end-to-end target.
- Every shape of the aggregated grid is a prefill row (at its largest batch cap, a prefill worker holds prompts
  only until they are sent), once per decode tensor-parallel size (the transfer runs over min(TP) links); every
  (shape, batch) row is a decode row. Each row gets the highest rate within its share of the targets and the
  utilisation cap, under every split at once, by the aggregated search's `_RateSearch`, and from it its
  replicas and cost. Cost floors bound what is searched: the cheapest floors first, then the rows whose pair
  floor is within PRACTICAL_COST_FACTOR of the cheapest aggregated cost and within the SHOWN-th cheapest pair.
- Per split, (weight precision, KV dtype) (both pools share them: the KV cache moves between them) and decode
  TP, the PAIRS cheapest rows of each pool are paired, cheapest first, within the plan's limits (GPUs of a type
  counted over both pools): an offer; where the cheapest pair breaks a limit by the search's coarse sample, it is
  offered too (confirmed, it may need fewer replicas). The SHOWN cheapest offers are confirmed with the report's
  sample (each pool's rate searched again with it, the replicas that follow, the limits, the combined latencies per
  sampled request against every target) and become candidates.

The candidates join the aggregated ones before the frontier is drawn, so the recommendation is the cheapest of
either shape and the alternatives show both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.catalog.engine_args import ROUTER_REPLICAS, disaggregation_args, dynamo_args, engine_launch
from inferplan.planner.catalog.engines import EngineProfile
from inferplan.planner.catalog.precisions import resolve_kv_dtype
from inferplan.planner.model.disaggregated import Pool, combined, decode_pool, prefill_pool
from inferplan.planner.model.factors import FactorSet
from inferplan.planner.model.performance import prefill_s
from inferplan.planner.model.serving import (
    LoadResult,
    Traffic,
    poisson_capacity,
    pool_arrival_cv2,
    sample_quantiles,
)
from inferplan.planner.quantiles import QUANTILES
from inferplan.planner.request import PlanRequest
from inferplan.planner.results import (
    Candidate,
    Role,
    cost_of,
    dollars_per_hour,
    headroom,
    per_hour,
    replica_shape,
    rounded,
)
from inferplan.planner.search.core import (
    _COUNTED,
    BOTH_POOLS_METRICS,
    FIRST_PASS_ROWS,
    PRACTICAL_COST_FACTOR,
    PREFILL_LINES,
    REPORT_SAMPLES,
    SEARCH_SAMPLES,
    _Grid,
    _RateSearch,
    _replicas,
    _Rows,
    _Shape,
    dp_attention_args,
    expert_parallel_args,
    kv_hint,
    measured_lines_on,
    node_selector,
    output_tokens_per_hour,
    over_budget,
    pools_placed,
    price_basis,
    price_warning,
)
from inferplan.planner.search.core import (
    _candidate as aggregated_candidate,
)

TTFT_SPLITS = (0.6, 0.8, 0.9, 0.97)  # share of a TTFT target given to the prefill pool and the transfer
E2E_SPLITS = (0.1, 0.25, 0.5)   # ... of an end-to-end target, when the plan has no TTFT target
PAIRS = 4                       # cheapest rows of each pool paired, per split and (precision, KV dtype)
SHOWN = 4                       # disaggregated candidates built (cheapest offers first) for the frontier


@dataclass(frozen=True)
class _Split:
    """One division of the targets between the pools: (metric, quantile) wanted and targets [s] of each."""

    prefill_wanted: list[tuple[str, float]]
    prefill_targets: NDArray[np.float64]  # (len(prefill_wanted), 1)
    decode_wanted: list[tuple[str, float]]
    decode_targets: NDArray[np.float64]


def _splits(req: PlanRequest, limits: NDArray[np.float64]) -> list[_Split]:
    """The divisions of each SLO's limit (`limits`, per SLO [s]: the target at the plan's confidence) between the
    pools."""
    limit = {id(s): float(x) for s, x in zip(req.slos, limits, strict=True)}
    ttft = [s for s in req.slos if s.metric == "ttft"]
    e2e = [s for s in req.slos if s.metric == "e2e"]
    tpot = [s for s in req.slos if s.metric == "tpot"]
    spanning = ttft or e2e  # the targets whose time both pools share
    out = []
    for f in (TTFT_SPLITS if ttft else E2E_SPLITS if e2e else (1.0,)):
        prefill = [("ttft", s.quantile, f * limit[id(s)]) for s in spanning] or [("ttft", 0.95, math.inf)]
        prefill_share = f * limit[id(spanning[0])] if spanning else 0.0
        decode = ([("tpot", s.quantile, limit[id(s)]) for s in tpot]
                  + [("ttft", s.quantile, (1.0 - f) * limit[id(s)]) for s in ttft]
                  + [("e2e", s.quantile, limit[id(s)] - prefill_share) for s in e2e])
        out.append(_Split([(m, q) for m, q, _ in prefill], np.array([t for _, _, t in prefill])[:, None],
                          [(m, q) for m, q, _ in decode], np.array([t for _, _, t in decode])[:, None]))
    return out


def disaggregated_candidates(req: PlanRequest, engine: EngineProfile, factors: FactorSet, grid: _Grid,
                             rows: _Rows, warnings: list[str], cheapest: float = math.inf) -> list[Candidate]:
    """The disaggregated candidates of `req` over the aggregated search's `grid` and `rows`; `cheapest`: the
    cheapest aggregated candidate's cost (inf: none), which bounds what is worth searching. A warning in
    `warnings` where the engine has no disaggregated serving or no pair meets the targets and limits."""
    if disaggregation_args(req.engine, req.engine_version, "prefill") is None:
        warnings.append(f"{req.engine} {req.engine_version or ''}".rstrip() + ": no disaggregated serving inferplan "
                        "can configure (vLLM 0.9 and later, SGLang 0.4.6 and later); only aggregated candidates "
                        "were planned")
        return []
    # The pools are searched within the strictest limits of the GPUs planned (each SLO's target at the plan's
    # confidence, `slo_limits`); a pair is then judged within its own GPUs' (`_candidate`).
    splits = _splits(req, grid.slo_limits.min(axis=1) if grid.slo_limits.size else np.zeros(len(req.slos)))
    pools = _Pools(req, engine, factors, grid, rows, splits)
    # Cost floors (what the utilisation cap alone needs) bound every pair's cost from below: search the cheapest
    # floors first, then only rows whose pair floor is within PRACTICAL_COST_FACTOR of the cheapest cost found.
    reach = PRACTICAL_COST_FACTOR * cheapest
    pre_keep, dec_keep = pools.within(reach)
    pools.build(pre_keep, dec_keep)  # reach only narrows from here
    pre_first = pre_keep[np.argsort(pools.pre_floor[pre_keep], kind="stable")][:FIRST_PASS_ROWS]
    dec_first = dec_keep[np.argsort(pools.dec_floor[dec_keep], kind="stable")][:FIRST_PASS_ROWS]
    pools.search(pre_first, dec_first)
    offers = [offer for offer in pools.all_offers() if offer[4]]  # those within the limits by the search's counts
    if offers:
        # Only the SHOWN cheapest offers become candidates: one dearer than the SHOWN-th found so far never will.
        reach = min(reach, PRACTICAL_COST_FACTOR * offers[0][0], offers[min(SHOWN, len(offers)) - 1][0])
        pre_keep, dec_keep = pools.within(reach)
    pools.search(pre_keep, dec_keep)
    # The offers cheapest first, each pair once, until SHOWN candidates meet every target by their combined
    # latencies: the frontier and the alternatives are drawn from these and the aggregated ones. The next offers
    # that could make up the SHOWN are confirmed together (the same ones, one at a time, would be tried).
    found: dict[tuple[int, ...], Candidate] = {}
    tried: set[tuple[int, int]] = set()
    untried = iter(pools.all_offers())
    while len(found) < SHOWN:
        picks: list[tuple[int, int, int]] = []
        for _, pair, i, k, _ in untried:
            if pair not in tried:
                tried.add(pair)
                picks.append((k, i, pair[1]))
                if len(picks) == SHOWN - len(found):
                    break
        if not picks:
            break
        for (_, i, dec), candidate in zip(picks, pools.candidates(picks), strict=True):
            if candidate is not None:
                found[(int(pools.pre_row[i]), dec, *(r.replicas for r in candidate.roles))] = candidate
    if not found:
        over = not any(offer[4] for offer in pools.all_offers()) and pools.broken
        warnings.append("no disaggregated deployment meets every target within the plan's limits" + (
            f": the cheapest pair of pools that meets them breaks {pools.broken[min(pools.broken)]} by the search's "
            "coarse count (the suggestions give the limit that suffices)" if over else ""))
    return list(found.values())


class _Pools:
    """The prefill and decode rows of a plan, their cost floors, and their best rates per split as searched.

    Prefill rows: each shape's last (largest batch) row, once per decode TP size (the transfer depends on it).
    Decode rows: every row of the aggregated search. The pools' models are built once (`build`), for the rows
    within the first reach."""

    def __init__(self, req: PlanRequest, engine: EngineProfile, factors: FactorSet, grid: _Grid, rows: _Rows,
                 splits: list[_Split]) -> None:
        self.req, self.engine, self.factors, self.grid, self.rows = req, engine, factors, grid, rows
        self.splits = splits
        p, o = req.prompt_mean, req.output_mean
        last = np.flatnonzero(np.r_[rows.shape[1:] != rows.shape[:-1], True])
        tps = np.unique(rows.tp)
        self.pre_row = np.tile(last, len(tps))
        self.pre_tp_d = np.repeat(tps, len(last))
        self.pre_slots = np.maximum(np.minimum(rows.batch[self.pre_row], grid.row_kv_tokens[self.pre_row] / p), 1.0)
        pre_hw = rows.hardware(self.pre_row)
        # Above what a prefill pool sustains: one mean prompt's prefill at a time (the model's bound, over the
        # sampled prompts, is lower still), and no more than its slots allow.
        prompts_only = Traffic(p, 1.0, prefill_fraction=rows.fraction)
        bound = np.minimum(poisson_capacity(pre_hw, prompts_only, self.pre_slots, rows.chunk),
                           1.0 / prefill_s(pre_hw, max(p * rows.fraction, 1.0), 1.0, rows.chunk))
        self.pre_cost_per_replica = rows.tp[self.pre_row] * rows.price[self.pre_row]
        # Pools of pipelined replicas are not planned (docs/planning.md): no floor, so never within reach.
        self.pre_floor = np.where(rows.pp[self.pre_row] > 1, np.inf,
                                  _replicas(req, bound * req.max_utilization) * self.pre_cost_per_replica)
        self.dec_capacity = poisson_capacity(rows.hardware(np.arange(len(rows.shape))),
                                             Traffic(p, o, output_cv=req.output_cv, prefill_fraction=0.0), rows.slots,
                                             rows.chunk)
        self.dec_cost_per_replica = rows.tp * rows.price
        self.dec_floor = np.where(rows.pp > 1, np.inf,
                                  _replicas(req, self.dec_capacity * req.max_utilization) * self.dec_cost_per_replica)
        self.pre_group = grid.precision[rows.shape[self.pre_row]] * len(req.kv_dtypes) + grid.kv[
            rows.shape[self.pre_row]]
        self.dec_group = grid.precision[rows.shape] * len(req.kv_dtypes) + grid.kv[rows.shape]
        # Best rates per split (NaN: not searched yet).
        self.pre_best = [np.full(len(self.pre_row), np.nan) for _ in splits]
        self.dec_best = [np.full(len(rows.shape), np.nan) for _ in splits]
        self._pre_pool: Pool | None = None
        self._dec_pool: Pool | None = None
        # The limit each offer over one breaks, by its cost: why no pair is offered where none is within them.
        self.broken: dict[float, str] = {}

    def within(self, reach: float) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
        """The prefill and decode rows with a partner (same precision and KV dtype; the decode TP the prefill row
        was built for) with which the pair's floor is at most `reach`."""
        pre_key = self.pre_group * 1024 + self.pre_tp_d
        dec_key = self.dec_group * 1024 + self.rows.tp
        keys, pre_at = np.unique(pre_key, return_inverse=True)
        dec_at = np.searchsorted(keys, dec_key)
        known = (dec_at < len(keys)) & (keys[np.minimum(dec_at, len(keys) - 1)] == dec_key)
        pre_min = np.full(len(keys), np.inf)
        np.minimum.at(pre_min, pre_at, self.pre_floor)
        dec_min = np.full(len(keys), np.inf)
        np.minimum.at(dec_min, dec_at[known], self.dec_floor[known])
        dec_partner = np.where(known, pre_min[np.minimum(dec_at, len(keys) - 1)], np.inf)
        pre_total, dec_total = self.pre_floor + dec_min[pre_at], self.dec_floor + dec_partner
        return (np.flatnonzero(np.isfinite(pre_total) & (pre_total <= reach)),
                np.flatnonzero(np.isfinite(dec_total) & (dec_total <= reach)))

    def build(self, pre: NDArray[np.intp], dec: NDArray[np.intp]) -> None:
        """The pools' models (their rate-free part, the search's sample) for prefill rows `pre` and the shapes of
        decode rows `dec`: every row searched later must be among them (the rows within the first reach)."""
        req, rows = self.req, self.rows
        p, o = req.prompt_mean, req.output_mean
        arrival_cv2 = pool_arrival_cv2(req.arrival_cv2, ROUTER_REPLICAS)
        self.pre_at = np.full(len(self.pre_row), -1)
        self.pre_at[pre] = np.arange(len(pre))
        self._pre_pool = prefill_pool(rows.hardware(self.pre_row[pre]), self.pre_tp_d[pre], p, self.pre_slots[pre],
                                      rows.chunk, req.prompt_cv, arrival_cv2, rows.fraction, req.network_gbps,
                                      SEARCH_SAMPLES)
        self.pre_capacity = np.full(len(self.pre_row), np.nan)
        self.pre_capacity[pre] = self._pre_pool.capacity
        shapes = np.unique(rows.shape_of_row[dec])
        first = rows.first_row[shapes]
        self.dec_shape_at = np.full(len(rows.first_row), -1)
        self.dec_shape_at[shapes] = np.arange(len(shapes))
        self._dec_pool = decode_pool(rows.hardware(first), p, o, rows.slots[first], rows.chunk, req.output_cv,
                                     arrival_cv2, req.service_cv2, SEARCH_SAMPLES)

    def search(self, pre: NDArray[np.intp], dec: NDArray[np.intp]) -> None:
        """Best rates of prefill rows `pre` and decode rows `dec` under each split (rows searched before are
        kept), one rate search per pool over every (split, row) at once."""
        pre_pool, dec_pool, splits = self._pre_pool, self._dec_pool, self.splits
        assert pre_pool is not None and dec_pool is not None, "build() first"
        rows = self.rows

        def prefill_model(index: NDArray[np.intp]) -> Pool:
            return pre_pool.take(self.pre_at[index])

        def decode_model(index: NDArray[np.intp]) -> Pool:
            return dec_pool.take(self.dec_shape_at[rows.shape_of_row[index]], rows.slots[index],
                                 self.dec_capacity[index])

        for best, index, model_of, capacity, wanted, targets in (
                (self.pre_best, pre, prefill_model, self.pre_capacity, splits[0].prefill_wanted,
                 [s.prefill_targets for s in splits]),
                (self.dec_best, dec, decode_model, self.dec_capacity, splits[0].decode_wanted,
                 [s.decode_targets for s in splits])):
            todo = [index[np.isnan(b[index])] for b in best]
            stacked = np.concatenate(todo)
            per_row = np.concatenate([np.repeat(t, len(i), axis=1) for t, i in zip(targets, todo, strict=True)],
                                     axis=1)
            n = len(capacity)
            offset = np.concatenate([np.full(len(i), k * n) for k, i in enumerate(todo)]).astype(np.intp)

            def stacked_model(at: NDArray[np.intp], model_of: Any = model_of, n: int = n) -> Any:
                return model_of(at % n)

            rates = _best_rates(stacked_model, np.tile(capacity, len(splits)), self.req, wanted, per_row,
                                stacked + offset, period=n)
            start = 0
            for b, i in zip(best, todo, strict=True):
                b[i] = rates[start:start + len(i)]
                start += len(i)

    def all_offers(self) -> list[tuple[float, tuple[int, int], int, int, bool]]:
        """Every split's offers, cheapest first."""
        return sorted(offer for k in range(len(self.splits)) for offer in self.offers(k))

    def offers(self, k: int) -> list[tuple[float, tuple[int, int], int, int, bool]]:
        """Per (precision, KV dtype) and decode TP, the cheapest pair of searched rows within the plan's limits,
        among the PAIRS cheapest rows of each pool, and the cheapest pair where that one is not: (cost, (prefill row,
        decode row), prefill pool index, the split's position `k`, whether it is within the limits)."""
        req, rows = self.req, self.rows
        pre_best = np.nan_to_num(self.pre_best[k], nan=0.0)
        dec_best = np.nan_to_num(self.dec_best[k], nan=0.0)
        pre_replicas = _replicas(req, np.maximum(pre_best, 1e-12))
        dec_replicas = _replicas(req, np.maximum(dec_best, 1e-12))
        pre_cost = np.where(pre_best > 0, pre_replicas * self.pre_cost_per_replica, np.inf)
        dec_cost = np.where(dec_best > 0, dec_replicas * self.dec_cost_per_replica, np.inf)
        out = []
        pre_rows, pre_keys = _cheapest_per_key(self.pre_group * 1024 + self.pre_tp_d, pre_cost)
        dec_rows, dec_keys = _cheapest_per_key(self.dec_group * 1024 + rows.tp, dec_cost)
        for key in np.unique(dec_keys):  # (precision, KV dtype) then decode TP, in order
            pres, decs = pre_rows[pre_keys == key], dec_rows[dec_keys == key]
            pairs = sorted(((int(i), int(j)) for i in pres for j in decs),
                           key=lambda ij: (pre_cost[ij[0]] + dec_cost[ij[1]], ij))
            for n, (i, j) in enumerate(pairs):
                pre = int(self.pre_row[i])
                broken = _broken_limit(req, self.grid, rows, pre, int(pre_replicas[i]), j, int(dec_replicas[j]))
                within = broken is None
                if broken is not None and n == 0:
                    self.broken[float(pre_cost[i] + dec_cost[j])] = broken
                # The cheapest pair is offered even where the search's coarse sample puts it over a limit: confirmed
                # with the report's sample it may need fewer replicas (`candidates` holds it to the limits again).
                if within or n == 0:
                    out.append((float(pre_cost[i] + dec_cost[j]), (pre, j), i, k, within))
                if within:
                    break
        return out

    def candidates(self, picks: list[tuple[int, int, int]]) -> list[Candidate | None]:
        """Each pick (split `k`, prefill pool row `i`, decode row `dec`) confirmed with the report's sample: each
        pool's best rate searched again with it (a tail percentile of the search's coarse sample can sit under its
        target where the full sample's does not), its replicas from that, the plan's limits, and the combined
        latencies against every target; None where any of that fails. The picks' pools are built and searched
        together (each row on its own: the same numbers as one pick at a time)."""
        req, rows = self.req, self.rows
        p, o = req.prompt_mean, req.output_mean
        arrival_cv2 = pool_arrival_cv2(req.arrival_cv2, ROUTER_REPLICAS)
        ks, pres_i, decs = (np.array(v) for v in zip(*picks, strict=True))
        pres = self.pre_row[pres_i]
        pre_pool = prefill_pool(rows.hardware(pres), self.pre_tp_d[pres_i].astype(float), p, self.pre_slots[pres_i],
                                rows.chunk, req.prompt_cv, arrival_cv2, rows.fraction, req.network_gbps,
                                REPORT_SAMPLES)
        dec_pool = decode_pool(rows.hardware(decs), p, o, rows.slots[decs], rows.chunk, req.output_cv,
                               arrival_cv2, req.service_cv2, REPORT_SAMPLES)
        every = np.arange(len(picks))
        pre_targets = np.concatenate([self.splits[k].prefill_targets for k in ks], axis=1)
        dec_targets = np.concatenate([self.splits[k].decode_targets for k in ks], axis=1)
        # Each pool's rate as the search found it (with its coarser sample) is the rate search's first guess.
        pre_guess = np.array([self.pre_best[k][i] for k, i in zip(ks, pres_i, strict=True)])
        dec_guess = np.array([self.dec_best[k][d] for k, d in zip(ks, decs, strict=True)])
        pre_best = _best_rates(pre_pool.take, pre_pool.capacity, req, self.splits[0].prefill_wanted, pre_targets,
                               every, guess=pre_guess)
        dec_best = _best_rates(dec_pool.take, dec_pool.capacity, req, self.splits[0].decode_wanted, dec_targets,
                               every, guess=dec_guess)
        out: list[Candidate | None] = []
        for j in every:
            pre, dec = int(pres[j]), int(decs[j])
            if pre_best[j] <= 0 or dec_best[j] <= 0:
                out.append(None)
                continue
            pre_replicas, dec_replicas = (int(n) for n in _replicas(req, np.array([pre_best[j], dec_best[j]])))
            if not _within_limits(req, self.grid, rows, pre, pre_replicas, dec, dec_replicas):
                out.append(None)
                continue
            one = np.array([j])
            out.append(_candidate(req, self.engine, self.factors, self.grid, rows, (pre_pool.take(one),
                                  dec_pool.take(one)), pre, pre_replicas, float(pre_best[j]),
                                  float(pre_pool.capacity[j]), dec, dec_replicas, float(dec_best[j]),
                                  float(dec_pool.capacity[j])))
        return out


def _cheapest_per_key(key: NDArray[np.int_], cost: NDArray[np.float64]) -> tuple[NDArray[np.intp], NDArray[np.int_]]:
    """The PAIRS cheapest rows of finite `cost` per value of `key` (ties: the lower row first), in (key, cost)
    order, and their keys."""
    index = np.flatnonzero(np.isfinite(cost))
    order = index[np.lexsort((index, cost[index], key[index]))]
    keys = key[order]
    first = np.r_[True, keys[1:] != keys[:-1]] if len(order) else np.zeros(0, dtype=bool)
    place = np.arange(len(order))
    rank = place - np.maximum.accumulate(np.where(first, place, 0))
    keep = order[rank < PAIRS]
    return keep, key[keep]


def _best_rates(model_of: Callable[[NDArray[np.intp]], Any], capacity: NDArray[np.float64], req: PlanRequest,
                wanted: list[tuple[str, float]], targets: NDArray[np.float64], index: NDArray[np.intp],
                period: int | None = None, guess: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
    """Per row of `index`: the highest rate within its targets (`targets`, one column per row of `index`) and the
    utilisation cap (0 where a target is missed even at light load), on the aggregated search's grid of rates.
    `period`: rows i and i + k x period are the same model at the same capacity (the splits of `_Pools.search`,
    stacked), so their latencies at light load and at the cap are computed once. `guess` (per row of `index`): a
    rate near each row's answer, which the rate search tries first (`_RateSearch.refine`)."""
    best = np.zeros(len(index))
    if not len(index):
        return best
    base = index % period if period else index
    unique, back = np.unique(base, return_inverse=True)
    light = model_of(unique).quantiles(capacity[unique] * 1e-4, wanted)[:, back]
    every = np.full((len(wanted), len(capacity)), np.inf)
    every[:, index] = targets
    with np.errstate(divide="ignore"):
        light_margin = np.full(len(capacity), np.nan)
        light_margin[index] = np.max(np.log(light / targets), axis=0)
    rates = _RateSearch(model_of, capacity, req.max_utilization, wanted, every, light_margin)
    fine = np.flatnonzero(np.all(light <= targets, axis=0))
    ok, cap_margin = rates.at_cap(index[fine], period)
    best[fine[ok]] = capacity[index[fine[ok]]] * req.max_utilization
    pending = fine[~ok]
    best[pending] = rates.refine(index[pending], cap_margin[~ok], None if guess is None else guess[pending])
    return best


def _within_limits(req: PlanRequest, grid: _Grid, rows: _Rows, pre: int, pre_replicas: int, dec: int,
                   dec_replicas: int) -> bool:
    """Whether the pair breaks none of the plan's limits (`_broken_limit`)."""
    return _broken_limit(req, grid, rows, pre, pre_replicas, dec, dec_replicas) is None


def _broken_limit(req: PlanRequest, grid: _Grid, rows: _Rows, pre: int, pre_replicas: int, dec: int,
                  dec_replicas: int) -> str | None:
    """The first of the plan's limits the pair breaks, in words; None where it breaks none: replicas per pool; GPUs
    of a type (both pools' when they share it) against what is available, the replicas on the nodes of their type
    (both pools' together when they share it, `pools_placed`) and maxGpusPerType; all GPUs against maxGpus; cost
    against the budget. Each need compared with an available count is recorded for the count ranges
    (`count_bounds`)."""
    need: dict[str, int] = {}
    for row, replicas in ((pre, pre_replicas), (dec, dec_replicas)):
        key = grid.gpus[grid.gpu[rows.shape[row]]].key
        need[key] = need.get(key, 0) + replicas * int(rows.tp[row])
    cost = dollars_per_hour(_pool_prices(rows, pre, pre_replicas, dec, dec_replicas))
    available = req.available_gpus or {}
    recorder = _COUNTED.get()
    if recorder is not None:
        for key, gpus in need.items():
            if key in available:
                recorder.note(key, np.array([gpus]), available[key])
    if req.max_replicas is not None and max(pre_replicas, dec_replicas) > req.max_replicas:
        return f"maxReplicas {req.max_replicas} (a pool needs {max(pre_replicas, dec_replicas)})"
    for key, gpus in need.items():
        if gpus > available.get(key, math.inf):
            return f"the {available[key]} {key} GPUs available (the pools need {gpus})"
    # The pools' replicas on the nodes of their types, together where both pools share one (`core.pools_placed`).
    pools: dict[str, list[tuple[int, int]]] = {}
    for row, replicas in ((pre, pre_replicas), (dec, dec_replicas)):
        pools.setdefault(grid.gpus[grid.gpu[rows.shape[row]]].key, []).append((replicas, int(rows.tp[row])))
    for key, pooled in pools.items():
        if not pools_placed(req, key, pooled):
            return f"the {key} nodes, on which the pools' replicas do not fit"
    for key, gpus in need.items():
        if gpus > req.max_gpus_per_type.get(key, math.inf):
            return f"maxGpusPerType {key}: {req.max_gpus_per_type[key]} (the pools need {gpus})"
    if req.max_gpus is not None and sum(need.values()) > req.max_gpus:
        return f"maxGpus {req.max_gpus} (the pools need {sum(need.values())})"
    if over_budget(req, cost):
        return f"the budget of {per_hour(req.budget_usd_per_hour)} (the pools cost {per_hour(cost)})"
    return None


def _pool_prices(rows: _Rows, pre: int, pre_replicas: int, dec: int, dec_replicas: int) -> list[tuple[int, float]]:
    """(replicas, price of one replica an hour) of the prefill pool (row `pre`), then of the decode pool."""
    pools = ((pre, pre_replicas), (dec, dec_replicas))
    return [(replicas, float(rows.tp[row] * rows.price[row])) for row, replicas in pools]


def _candidate(req: PlanRequest, engine: EngineProfile, factors: FactorSet, grid: _Grid, rows: _Rows,
               pools: tuple[Pool, Pool], pre: int, pre_replicas: int, pre_best: float, pre_capacity: float, dec: int,
               dec_replicas: int, dec_best: float, dec_capacity: float) -> Candidate | None:
    """The pair (prefill row `pre`, decode row `dec`) as a candidate, its latencies from the two pools' samples
    (`pools`, one row each, the report's sample) at their planned rates; None where that misses a target."""
    pre_pool, dec_pool = pools
    samples = combined(pre_pool.latency_samples(req.rate_rps / pre_replicas, {"ttft"}),
                       dec_pool.latency_samples(req.rate_rps / dec_replicas, {"ttft", "tpot"}),
                       dec_pool.model.outputs)
    # TTFT and the end-to-end time add the prefill pool's time: each is judged within the stricter of the two GPUs'
    # limits (`core.BOTH_POOLS_METRICS`), TPOT within the decode GPU's.
    pre_limits, limits = grid.slo_limits[:, grid.gpu[rows.shape[pre]]], grid.slo_limits[:, grid.gpu[rows.shape[dec]]]
    limits = [min(limit, pre_limit) if slo.metric in BOTH_POOLS_METRICS else limit
              for slo, limit, pre_limit in zip(req.slos, limits, pre_limits, strict=True)]
    if any(sample_quantiles(samples[slo.metric], [slo.quantile])[0][0] > limit
           for slo, limit in zip(req.slos, limits, strict=True)):
        return None
    q = {metric: dict(zip(QUANTILES, sample_quantiles(values, QUANTILES), strict=True))
         for metric, values in samples.items()}
    report = LoadResult(samples["ttft"].mean(axis=-1), q["ttft"], samples["tpot"].mean(axis=-1), q["tpot"],
                        samples["e2e"].mean(axis=-1), np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1, dtype=bool),
                        q["e2e"])
    dec_shape, pre_shape = grid.shape(req, int(rows.shape[dec])), grid.shape(req, int(rows.shape[pre]))
    settings = grid.settings[grid.row_batch[dec]]
    checkpoint = grid.checkpoints[grid.gpu[rows.shape[dec]]][grid.precision[rows.shape[dec]]]
    lines = factors.lines_measured_on(engine.name, dec_shape.gpu.family)
    base = aggregated_candidate(req, engine, dec_shape, int(rows.batch[dec]), settings, dec_replicas, report, 0,
                                dec_best, dec_capacity, float(rows.slots[dec]), lines, checkpoint,
                                float(grid.row_kv_tokens[dec]))
    kv = resolve_kv_dtype(pre_shape.kv_dtype, pre_shape.precision, engine.name, kv_hint(checkpoint))
    pre_settings = grid.settings[grid.row_batch[pre]]
    assert not isinstance(checkpoint, str)
    # A drafting decode pool needs the MTP layer's KV of each prompt: the prefill pool loads and runs the module too.
    pre_launch = engine_launch(engine.name, req.engine_version, checkpoint.repo, checkpoint.launch_format,
                               pre_shape.precision, pre_shape.tp, int(rows.batch[pre]), kv, pre_settings,
                               kv_tokens=int(grid.row_kv_tokens[pre]), mtp_draft_tokens=req.mtp_draft_tokens,
                               gpu_family=pre_shape.gpu.family)
    pre_args = [*(expert_parallel_args(req.engine_version, pre_shape.tp) if pre_shape.ep else []),
                *(dp_attention_args(pre_shape.tp) if pre_shape.dp_attention else []),
                *(disaggregation_args(req.engine, req.engine_version, "prefill") or [])]
    dec_args = disaggregation_args(req.engine, req.engine_version, "decode") or []

    def role(name: str, shape: _Shape, replicas: int, batch: int, best: float, capacity: float,
             args: list[str]) -> Role:
        key, label = node_selector(shape.gpu, req)
        return Role(role=name, gpu_type=shape.gpu.key, node_selector={key: label}, gpus_per_replica=shape.tp,
                    nodes_per_replica=max(1, shape.tp // req.gpus_per_node.get(shape.gpu.key, 8)),
                    replicas=replicas, gpus=replicas * shape.tp, max_batch=batch,
                    data_parallel_attention=shape.dp_attention, expert_parallel=shape.ep,
                    utilization=rounded(req.rate_rps / replicas / capacity),
                    max_requests_per_second_per_replica=rounded(best), engine_args=args[:64],
                    dynamo_args=(dynamo_args(req.engine, name, args) or [])[:64])

    roles = [role("prefill", pre_shape, pre_replicas, int(rows.batch[pre]), pre_best, pre_capacity,
                  [*pre_launch.args, *pre_args]),
             role("decode", dec_shape, dec_replicas, int(rows.batch[dec]), dec_best, dec_capacity,
                  [*base.engine_args, *dec_args])]
    gpus = sum(r.gpus for r in roles)
    spare = min(headroom(req.rate_rps, pre_replicas * pre_best), headroom(req.rate_rps, dec_replicas * dec_best))
    notes = [f"disaggregated: {replica_shape(pre_replicas, pre_shape.tp, pre_shape.gpu.key)} prefill send each "
             f"prompt's KV cache to {replica_shape(dec_replicas, dec_shape.tp, dec_shape.gpu.key)} decode at "
             f"{req.network_gbps:g} "
             "Gb/s per GPU (constraints.networkGbps); needs RDMA between the pods and a P/D router in front"]
    # The cost is both pools': so are its basis and the warning of a price that is an estimate.
    estimate = price_warning(req, pre_shape.gpu)
    warnings = base.warnings if estimate is None or estimate in base.warnings else [*base.warnings, estimate][:16]
    return base.model_copy(update={
        "shape": "disaggregated", "roles": roles, "gpus": gpus, "warnings": warnings,
        "engine_args": roles[1].engine_args,
        "cost": cost_of(_pool_prices(rows, pre, pre_replicas, dec, dec_replicas), output_tokens_per_hour(req)),
        "headroom": rounded(max(0.0, spare)),
        "engine_notes": [*base.engine_notes, *notes][:8],
        "provenance": base.provenance | {"cost": price_basis(req, pre_shape.gpu, dec_shape.gpu),
                                         "kvTransfer": f"{req.network_gbps:g}Gbps-per-gpu",
                                         PREFILL_LINES: str(measured_lines_on(req, factors, pre_shape.gpu))},
    })


__all__ = ["E2E_SPLITS", "PAIRS", "TTFT_SPLITS", "disaggregated_candidates"]
