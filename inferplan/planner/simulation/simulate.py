"""Discrete-event simulation of N replicas of a continuous-batching engine, to check the analytic model.

Each replica runs vLLM's step loop: at every step boundary it admits waiting requests (FIFO) while the
batch has a free slot and the KV cache has room for the prompt, prefills admitted prompts within a
per-step token budget (chunked prefill) alongside the decode of the running sequences, and when the KV
cache runs out during decode it preempts the most recently admitted sequence, which goes back to the
front of the queue and later recomputes its prompt plus the tokens it had generated.

Step time is the step model of `performance`: the roofline of the weight and KV reads against the
decode and prompt FLOPs of the step, plus all-reduces and overheads. A decode-only step is exactly
`decode_step_s(hw, batch, mean_context)`; a prefill-only step of one prompt is `prefill_s(hw, prompt)`.

Event loop: one coroutine per replica (`_replica_loop`) keeps that replica's state in local variables
and plain ints, floats, lists and dicts (numpy scalars would dominate). While no sequence is in prefill
the batch is fixed until the next event (a completion, the KV cache filling up, an arrival that could be
admitted), so it jumps over all the steps in between at once, with the step time of the mean context
over the jump. The commonest event, one request arriving at a replica with nobody waiting, has a
shortcut with the same arithmetic. Random and round-robin routing are decided in advance (`routed`), so each
replica runs alone over its requests; least outstanding requests decides at each arrival and wakes only the
replicas whose next event is due by then (only a completion changes a replica's count).

Memory: requests become small Python lists a chunk at a time as they are routed and are dropped when they
complete; what spans the whole run is numpy arrays (the workload, and first-token and completion times
as outputs), so the Python objects alive at once are those of the requests in flight plus one chunk.

Times are seconds; lengths are tokens. `simulate_queue` is the plain G/G/c queue (batch 1, a given
service-time distribution) whose mean waits have closed forms; it runs on the same event loop.
"""

from __future__ import annotations

import codecs
import heapq
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from inferplan.planner.catalog.engines import Scheduling
from inferplan.planner.model.performance import Hardware
from inferplan.planner.model.serving import Traffic, sample_quantiles
from inferplan.planner.quantiles import QUANTILES
from inferplan.planner.simulation.engine import (
    FloatArray,
    IntArray,
    _serve,
    _Served,
    _StepModel,
)
from inferplan.planner.spec_parsing import KeyGivenTwice, unique_keys

ROUTERS = ("random", "round_robin", "least_outstanding")
"""How requests reach replicas: `random` each to a replica drawn uniformly (a Kubernetes Service: kube-proxy's iptables
and nftables modes pick a backend at random for each new connection), `round_robin` in turn (a router's round-robin
policy), `least_outstanding` to the replica with the fewest queued plus running requests."""


# --------------------------------------------------------------------------------------------------
# Workloads


@dataclass(frozen=True)
class RequestTrace:
    """Requests in arrival order: arrival time [s], prompt and output lengths [tokens]."""

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray

    def __len__(self) -> int:
        return len(self.arrival_s)


def trace_workload(arrival_s: ArrayLike, prompt_tokens: ArrayLike, output_tokens: ArrayLike) -> RequestTrace:
    """A workload replayed from arrays (arrival times non-decreasing, lengths at least 1)."""
    t = np.asarray(arrival_s, dtype=float)
    p = np.asarray(prompt_tokens, dtype=np.int64)
    o = np.asarray(output_tokens, dtype=np.int64)
    if not (t.ndim == p.ndim == o.ndim == 1 and len(t) == len(p) == len(o)):
        raise ValueError("arrival_s, prompt_tokens and output_tokens must be 1-D arrays of one length")
    if len(t) and (not np.all(np.isfinite(t)) or np.any(np.diff(t) < 0)):
        raise ValueError("arrival times must be finite and non-decreasing")
    if np.any(p < 1) or np.any(o < 1):
        raise ValueError("prompt and output lengths must be at least 1 token")
    return RequestTrace(t, p, o)


# Longest prompt or output a trace line may give [tokens]: far beyond any context (longer requests are served
# shortened to it), and small enough that lengths and their sums stay exact in int64.
MAX_TRACE_TOKENS = 2**31 - 1


def read_trace(path: str | Path) -> RequestTrace:
    """A trace from JSON lines `{"t": seconds, "prompt": tokens, "output": tokens}` in UTF-8 (a leading byte order
    mark, as some Windows tools write, is skipped); blank lines skipped. Arrival times count from the first
    line's `t` (an epoch time works: the differences are taken before the latencies, which would otherwise lose
    their digits against a large `t`).

    Errors name the file and line.
    """
    times: list[float] = []
    first: int | float = 0
    previous: int | float = 0
    prompts: list[int] = []
    outputs: list[int] = []
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{path}:{number}"
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{where}: not UTF-8 text (byte {error.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line, object_pairs_hook=unique_keys)
            except KeyGivenTwice as error:  # JSON would keep the last
                raise ValueError(f"{where}: key {error.key!r} is given twice") from None
            except ValueError as error:  # a JSONDecodeError, or a number of more digits than Python converts
                raise ValueError(f"{where}: not JSON: {getattr(error, 'msg', error)}") from None
            if not isinstance(row, dict) or set(row) != {"t", "prompt", "output"}:
                raise ValueError(f'{where}: expected an object with keys "t", "prompt", "output"')
            t, prompt, output = row["t"], row["prompt"], row["output"]
            try:
                seconds = math.nan if isinstance(t, bool) or not isinstance(t, int | float) else float(t)
            except OverflowError:  # an integer beyond float's range
                seconds = math.inf
            if not math.isfinite(seconds) or seconds < 0:
                raise ValueError(f'{where}: "t" must be a non-negative number of seconds, got {t!r}')
            for key, value in (("prompt", prompt), ("output", output)):
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TRACE_TOKENS:
                    raise ValueError(f'{where}: "{key}" must be an integer from 1 to {MAX_TRACE_TOKENS}, got {value!r}')
            if not times:
                first = previous = t
            since = float(t - first)  # exact for integers (epoch milliseconds or nanoseconds)
            if times and since < times[-1]:
                raise ValueError(f"{where}: arrival time {t} is earlier than the line before ({previous})")
            times.append(since)
            previous = t
            prompts.append(prompt)
            outputs.append(output)
    return trace_workload(times, prompts, outputs)


def lognormal_lengths(rng: np.random.Generator, mean: float, cv: float, n: int) -> IntArray:
    """`n` integer lengths, lognormal of mean `mean` and coefficient of variation `cv`, at least 1."""
    if cv <= 0:
        return np.full(n, max(round(mean), 1), dtype=np.int64)
    s2 = math.log1p(cv * cv)
    x = rng.lognormal(math.log(mean) - s2 / 2.0, math.sqrt(s2), n)
    return np.maximum(np.rint(x), 1).astype(np.int64)


def arrival_times(rng: np.random.Generator, rate: float, n: int, arrival_cv2: float = 1.0) -> FloatArray:
    """`n` arrival times at `rate` per second: Poisson (CV^2 = 1) or gamma inter-arrivals of that CV^2
    (0: evenly spaced)."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    if arrival_cv2 <= 0:
        gaps = np.full(n, 1.0 / rate)
    else:
        shape = 1.0 / arrival_cv2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    return np.cumsum(gaps)


def generate_workload(rate: float, requests: int, traffic: Traffic, seed: int = 0) -> RequestTrace:
    """`requests` requests at `rate` per second of `traffic` (its arrival CV^2, lognormal lengths of its means
    and CVs); deterministic per seed."""
    rng = np.random.default_rng(seed)
    t = arrival_times(rng, rate, requests, traffic.arrival_cv2)
    return RequestTrace(t, lognormal_lengths(rng, traffic.prompt_tokens, traffic.prompt_cv, requests),
                        lognormal_lengths(rng, traffic.output_tokens, traffic.output_cv, requests))


# --------------------------------------------------------------------------------------------------
# Routing

ROUTE_STREAM = 0x5EED
"""Mixed into a routing seed so that a random router's draws are not the workload's own (`generate_workload` draws its
gaps from `default_rng(seed)`: the same seed would tie a request's replica to its gap)."""


def routed(requests: int, replicas: int, router: str, *, seed: int = 0, fronts: int = 1, stages: int = 1) -> IntArray:
    """The engine each of `requests` requests (in arrival order) goes to, decided in advance: `replicas` x `stages`
    engines, replica r's stages r x stages ... r x stages + stages - 1.

    `router` "random" or "round_robin" (`ROUTERS`; least outstanding is decided while serving) picks the replica; with
    `fronts` > 1, `fronts` routers of that policy each take a request drawn at random (the router's own replicas behind
    a Kubernetes Service) and keep their own turn, starting at replica 0. Within a replica, its stages take its requests
    in turn (a pipeline-parallel engine keeps one batch in flight per stage). Deterministic per `seed`."""
    if router not in ("random", "round_robin"):
        raise ValueError(f"requests are routed in advance only at random or round robin, not {router!r}")
    if replicas < 1 or fronts < 1 or stages < 1:
        raise ValueError("replicas, fronts and stages must be at least 1")
    rng = np.random.default_rng((ROUTE_STREAM, seed))
    if router == "random":
        replica = rng.integers(replicas, size=requests, dtype=np.int64)
    else:
        front = (rng.integers(fronts, size=requests, dtype=np.int64) if fronts > 1
                 else np.zeros(requests, dtype=np.int64))
        replica = _turns(front, fronts) % replicas
    if stages == 1:
        return replica
    return replica * stages + _turns(replica, replicas) % stages


def _turns(group: IntArray, groups: int) -> IntArray:
    """Per element, how many earlier elements have its `group` (0, 1, 2, ... within each group)."""
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=groups)
    starts = np.cumsum(counts) - counts
    turns = np.empty(len(group), dtype=np.int64)
    turns[order] = np.arange(len(group), dtype=np.int64) - np.repeat(starts, counts)
    return turns


# --------------------------------------------------------------------------------------------------
# Step time


# --------------------------------------------------------------------------------------------------
# Event loop
#
# A request in flight is a plain list (indexing a list is the cheapest per-request state Python has):
#   [0] workload index   [1] arrival time     [2] prompt tokens   [3] output tokens
#   [4] prefill compute per prompt token of its next prefill (its service time in simulate_queue)
#   [5] tokens generated when it last entered decode or was preempted
#   [6] its replica's decode counter at that moment
#   [7] first-token time (-1 before)
#   [8] tokens left to prefill while it prefills
#   [9] prompt tokens found in the prefix cache (`cached_prompt_tokens`): held in the KV cache, never computed
# The loop uses the literal indices: a named constant costs a global lookup per access.


def cached_prompt_tokens(prompt_tokens: IntArray, prefix_hit_rate: float) -> IntArray | None:
    """Per prompt, the tokens a prefix cache serving `prefix_hit_rate` of prompt tokens holds already (the plan's
    `workload.prefixCacheHitRate`, as the analytic model computes `1 - prefix_hit_rate` of each prompt): at most the
    prompt less one token, which the engine always computes to make the first token. None for a rate of 0."""
    if prefix_hit_rate <= 0.0:
        return None
    return np.minimum(np.floor(prompt_tokens * prefix_hit_rate).astype(np.int64), prompt_tokens - 1)


# --------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class TimeSeries:
    """One replica's queue length (requests arrived and waiting) and KV usage, sampled at step boundaries
    at least an interval apart that doubles whenever the series fills (at most 2 x series_points rows)."""

    t_s: FloatArray
    queue_length: IntArray
    kv_tokens: IntArray


@dataclass(frozen=True)
class Latency:
    """Mean and quantiles (0.5, 0.9, 0.95, 0.99) of one per-request latency [s]."""

    mean_s: float
    p50_s: float
    p90_s: float
    p95_s: float
    p99_s: float


def latency_stats(values: FloatArray) -> Latency:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return Latency(*(math.nan,) * 5)
    q = sample_quantiles(finite, QUANTILES)  # np.quantile's arithmetic, without its import of numpy.ma
    return Latency(float(finite.mean()), *(float(v) for v in q))


@dataclass(frozen=True)
class SimulationResult:
    """Per-request latencies [s] in workload order, their statistics and per-replica counters.

    TPOT is NaN for single-token outputs. Utilisation is the share of the run (first arrival to last
    completion) a replica spends running steps, averaged over replicas.
    """

    ttft_s: FloatArray
    tpot_s: FloatArray
    e2e_s: FloatArray
    replica: IntArray
    preempted: IntArray                  # times each request was preempted
    ttft: Latency
    tpot: Latency
    e2e: Latency
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float
    utilisation: float
    busy_s: FloatArray                   # per replica
    preemptions: int
    generated_tokens: int                # tokens the replicas produced (equals the requested outputs)
    kv_tokens_max: IntArray              # per replica; never above kv_tokens
    series: tuple[TimeSeries, ...]


# --------------------------------------------------------------------------------------------------
# Simulation


def simulate(
    hw: Hardware,
    workload: RequestTrace,
    *,
    replicas: int = 1,
    max_batch: int = 256,
    kv_tokens: int = 1_000_000,
    chunk_tokens: float = 8192,
    router: str = "round_robin",
    series_points: int = 256,
    policy: Scheduling | None = None,
    clients: int = 0,
    front_end: bool = False,
    front_end_max_s: float = math.inf,
    prefix_hit_rate: float = 0.0,
    route_seed: int = 0,
    stages: int = 1,
) -> SimulationResult:
    """Serve `workload` on `replicas` copies of the engine on `hw` (one deployment, scalar fields).

    `max_batch`: running sequences per replica (max_num_seqs); `kv_tokens`: KV cache per replica;
    `chunk_tokens`: token budget per step, decode tokens included (math.inf: whole prompts in one step);
    `router`: "random", "round_robin" or "least_outstanding" (fewest queued plus running, lowest index on ties;
    `ROUTERS`); a random router draws from `route_seed`. `stages` > 1 (random or round robin): each `stages`
    consecutive replicas are the pipeline stages of one replica, which the router picks and whose stages take its
    requests in turn (`routed`).
    `series_points`: the queue and KV series per replica keeps 2 x that many rows at most (`TimeSeries`; 0: none,
    and no step is sampled).
    `policy`: how the engine fills a step (`Scheduling`; default vLLM V1's). `clients` > 0: a closed loop
    of that many clients on one replica (each sends its next request, the next one of the workload, when
    its last one completes; the workload's arrival times count only for the first `clients` requests, and
    the result's latencies are measured from the times the loop sent them).
    TTFT and end-to-end latency include the engine's per-request overhead: a constant delay, or with `front_end`
    (an open loop only) the service time of a first-in, first-out stage every request passes one at a time before
    the engine sees it (a server front end or a client that prepares one request after another), so that requests
    sent together queue for it; of an overhead above `front_end_max_s` only that much is served one at a time and
    the rest is a constant delay. `prefix_hit_rate`: the share of each prompt found in the prefix cache
    (`cached_prompt_tokens`): it takes KV but neither compute nor the step's token budget.

    Closed forms: with `max_batch=1`, `chunk_tokens=math.inf` and room in the KV cache, a replica serves
    one request at a time, FIFO, for its prefill step plus one jump over its remaining output tokens, a
    service time fixed by its lengths; so one replica under Poisson arrivals is an M/G/1 queue
    (Pollaczek-Khinchine) and with fixed lengths exactly M/D/1. M/M/1 has no exact counterpart (service
    is a whole number of steps, so never exponential) and neither has M/M/c (replicas keep their own
    queues; a central queue exists only in `simulate_queue`).
    """
    if router not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    if replicas < 1 or max_batch < 1:
        raise ValueError("replicas and max_batch must be at least 1")
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be at least 1")
    n = len(workload)
    if n and int((workload.prompt_tokens + workload.output_tokens).max()) + 1 > kv_tokens:
        raise ValueError("a request's prompt plus output does not fit in kv_tokens; it could never finish")
    model = _StepModel(hw)
    # A step takes whole tokens: a fractional budget would leave a fraction nobody can use.
    chunk = chunk_tokens if math.isinf(chunk_tokens) else int(chunk_tokens)
    if stages < 1 or replicas % stages:
        raise ValueError("stages must be at least 1 and divide replicas")
    assigned = (None if router == "least_outstanding"
                else routed(n, replicas // stages, router, seed=route_seed, stages=stages))
    if clients < 0:
        raise ValueError("clients must be at least 0")
    arrival_s = workload.arrival_s.copy() if clients else workload.arrival_s
    engine_s, overhead = arrival_s, model.request_overhead_s
    if front_end and not clients and overhead > 0 and n:
        serial = min(overhead, front_end_max_s)
        engine_s, overhead = serial_stage(arrival_s, serial), overhead - serial
    served = _serve(model, engine_s, workload.prompt_tokens, workload.output_tokens, None, replicas,
                    max_batch, kv_tokens, chunk, assigned, series_points, policy, clients,
                    cached_prompt_tokens(workload.prompt_tokens, prefix_hit_rate))

    return _result(arrival_s, workload.output_tokens, overhead, served)


def serial_stage(arrival_s: FloatArray, service_s: float) -> FloatArray:
    """When each request leaves a first-in, first-out stage of one server with a fixed `service_s`, requests
    arriving at `arrival_s` (workload order; ties keep it): d_i = max(a_i, d_(i-1)) + s, which is
    (i + 1) s + max over j <= i of (a_j - j s) in arrival order."""
    order = np.argsort(arrival_s, kind="stable")
    ranks = np.arange(len(order), dtype=float)
    leave = (ranks + 1.0) * service_s + np.maximum.accumulate(arrival_s[order] - ranks * service_s)
    out = np.empty_like(leave)
    out[order] = leave
    return out


def _result(arrival: FloatArray, outputs: IntArray, overhead: float, served: _Served) -> SimulationResult:
    """The result of `served` (first-token and completion times in workload order) for requests arriving at
    `arrival` with `outputs` tokens: latencies with the engine's per-request `overhead` once, rates over the run,
    and the replicas' counters."""
    n = len(arrival)
    first, done = served.first_s, served.done_s
    ttft = first - arrival + overhead
    e2e = done - arrival + overhead
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (done - first) / (outputs - 1), np.nan)
    start = float(arrival[0]) if n else 0.0
    duration = float(done.max()) - start if n else 0.0
    busy = np.array([s[0] for s in served.stats])
    series = tuple(TimeSeries(np.asarray(t, dtype=float), np.asarray(q, dtype=np.int64),
                              np.asarray(kv, dtype=np.int64)) for t, q, kv in (s[4] for s in served.stats))
    rate = 1.0 / duration if duration > 0 else math.nan
    return SimulationResult(
        ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, replica=served.replica, preempted=served.preempted,
        ttft=latency_stats(ttft), tpot=latency_stats(tpot), e2e=latency_stats(e2e),
        duration_s=duration,
        output_tokens_per_s=float(outputs.sum()) * rate,
        requests_per_s=n * rate,
        utilisation=float(busy.mean()) / duration if duration > 0 else 0.0,
        busy_s=busy,
        preemptions=sum(s[2] for s in served.stats),
        generated_tokens=sum(s[3] for s in served.stats),
        kv_tokens_max=np.array([s[1] for s in served.stats], dtype=np.int64),
        series=series,
    )


def simulate_disaggregated(
    prefill_hw: Hardware,
    decode_hw: Hardware,
    workload: RequestTrace,
    transfer_s: FloatArray,
    *,
    prefill_replicas: int,
    decode_replicas: int,
    prefill_max_batch: int,
    decode_max_batch: int,
    prefill_kv_tokens: int,
    decode_kv_tokens: int,
    chunk_tokens: float,
    policy: Scheduling | None = None,
    prefix_hit_rate: float = 0.0,
    routers: int = 1,
    route_seed: int = 0,
) -> SimulationResult:
    """Serve `workload` on a disaggregated deployment: `prefill_replicas` replicas on `prefill_hw` that only
    prefill (each request with one output token, the engine's step loop as `simulate` runs it), the KV transfer
    of each request (`transfer_s`, per request) after its prefill, then `decode_replicas` replicas on
    `decode_hw` that admit the request when it arrives there (as any request: a free slot and room in the KV
    cache for its prompt) and decode it; its prompt costs no compute there (its KV is already computed) and
    takes no token budget, so the step that admits it makes its first token. Routed as sglang-router does in
    prefill-decode mode: on arrival, a prefill and a decode replica each in turn (round robin in both pools);
    with `routers` > 1, that many such routers, each request going to one at random (drawn from `route_seed`:
    replicas of the router behind a Kubernetes Service), each with its own turn (`routed`).
    `prefix_hit_rate`: the share of each prompt the prefill pool finds in its prefix cache, as in `simulate`.

    TTFT: from arrival to the decode replica's first token, with the engine's per-request overhead once; TPOT
    and end-to-end latency as `simulate` measures them. Busy time, utilisation and the KV peaks are the decode
    pool's. Closed form: with one replica each, `max_batch` 1 and fixed lengths, the prefill pool is an M/D/1
    queue and the decode pool another fed by its departures (delayed by the transfer).
    """
    if prefill_replicas < 1 or decode_replicas < 1:
        raise ValueError("each pool needs at least one replica")
    n = len(workload)
    prompt, output = workload.prompt_tokens, workload.output_tokens
    if n and int((prompt + output).max()) + 1 > decode_kv_tokens:
        raise ValueError("a request's prompt plus output does not fit in the decode pool's KV cache")
    if n and int(prompt.max()) + 2 > prefill_kv_tokens:
        raise ValueError("a request's prompt does not fit in the prefill pool's KV cache")
    chunk = chunk_tokens if math.isinf(chunk_tokens) else int(chunk_tokens)
    pre_model, dec_model = _StepModel(prefill_hw), _StepModel(decode_hw)
    dec_model.prompts_computed = True
    arrival = workload.arrival_s
    ones = np.ones(n, dtype=np.int64)
    # Both replicas are chosen on arrival, by the same router: the decode pool's turn is the arrival order's.
    to_prefill = routed(n, prefill_replicas, "round_robin", seed=route_seed, fronts=routers)
    to_decode = routed(n, decode_replicas, "round_robin", seed=route_seed, fronts=routers)
    prefilled = _serve(pre_model, arrival, prompt, ones, None, prefill_replicas, prefill_max_batch,
                       prefill_kv_tokens, chunk, to_prefill, 2, policy,
                       cached=cached_prompt_tokens(prompt, prefix_hit_rate))
    at_decode = prefilled.first_s + np.asarray(transfer_s, dtype=float)
    order = np.argsort(at_decode, kind="stable")  # the decode pool sees requests in the order they arrive
    served = _serve(dec_model, at_decode[order], prompt[order], output[order], np.zeros(n), decode_replicas,
                    decode_max_batch, decode_kv_tokens, math.inf, to_decode[order], 256, policy)
    # Back in workload order: the decode pool's first token is the request's.
    first, done = np.empty(n), np.empty(n)
    replica, preempted = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    first[order], done[order] = served.first_s, served.done_s
    replica[order], preempted[order] = served.replica, served.preempted
    return _result(arrival, output, pre_model.request_overhead_s, _Served(first, done, replica, preempted,
                                                                            served.stats))


# --------------------------------------------------------------------------------------------------
# Plain G/G/c queue


@dataclass(frozen=True)
class QueueResult:
    """Waits before service and sojourn times (wait + service) [s] per request, in arrival order."""

    wait_s: FloatArray
    sojourn_s: FloatArray
    server: IntArray
    wait_mean_s: float
    utilisation: float


def simulate_queue(
    arrival_s: ArrayLike,
    service_s: Callable[[np.random.Generator, int], FloatArray],
    servers: int = 1,
    router: str = "central",
    seed: int = 0,
) -> QueueResult:
    """FIFO queue of `servers` servers of batch 1; `service_s(rng, n)` draws the n service times.

    `router`: "central" (one shared queue, the first free server takes the head: G/G/c),
    "round_robin" or "least_outstanding" (each server its own FIFO queue, chosen at arrival).

    It runs on `simulate`'s event loop and routers (`_serve`, `_replica_loop`): each server is a replica
    of batch 1 whose step model is bare (a step takes exactly its prefill compute), and each request a
    one-token prompt whose prefill compute is its service time and whose one output token is that step's.
    Only the central queue is routed differently: for servers of batch 1 a shared FIFO queue is the same
    as sending each arrival to the server that frees first, computed here ahead of the loop.
    """
    t = np.asarray(arrival_s, dtype=float)
    n = len(t)
    service = np.asarray(service_s(np.random.default_rng(seed), n), dtype=float)
    if service.shape != (n,) or np.any(service < 0):
        raise ValueError("service_s must return n non-negative times")
    if t.ndim != 1 or (n and (not np.all(np.isfinite(t)) or np.any(np.diff(t) < 0))):
        raise ValueError("arrival times must be finite and non-decreasing")
    if servers < 1:
        raise ValueError("servers must be at least 1")
    if router == "central":
        assigned: IntArray | None = _first_free_server(t, service, servers)
    elif router == "round_robin":
        assigned = np.arange(n, dtype=np.int64) % servers
    elif router == "least_outstanding":
        assigned = None
    else:
        raise ValueError(f"router must be central, round_robin or least_outstanding, got {router!r}")
    one = np.ones(n, dtype=np.int64)
    served = _serve(_StepModel(None), t, one, one, service, servers, 1, 2**62, math.inf, assigned, 1)
    # The first (and only) token comes at the end of the request's service.
    wait = np.maximum(served.first_s - service - t, 0.0)
    duration = float(served.done_s.max() - t[0]) if n else 0.0
    return QueueResult(wait, wait + service, served.replica, float(wait.mean()) if n else 0.0,
                       float(service.sum()) / (servers * duration) if duration > 0 else 0.0)


def _first_free_server(arrival_s: FloatArray, service_s: FloatArray, servers: int) -> IntArray:
    """The server each request of a central FIFO queue gets: the one that frees first (lowest index on
    ties), as Kiefer and Wolfowitz's recursion over the servers' free times."""
    n = len(arrival_s)
    if servers == 1:
        return np.zeros(n, dtype=np.int64)
    free = [(0.0, r) for r in range(servers)]
    chosen = [0] * n
    for i, (a, s) in enumerate(zip(arrival_s.tolist(), service_s.tolist(), strict=True)):
        f, r = heapq.heappop(free)
        chosen[i] = r
        heapq.heappush(free, ((a if a > f else f) + s, r))
    return np.asarray(chosen, dtype=np.int64)
