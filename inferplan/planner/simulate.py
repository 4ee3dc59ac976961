"""Discrete-event simulation of N replicas of a continuous-batching engine, to check the analytic model.

Each replica runs vLLM's step loop: at every step boundary it admits waiting requests (FIFO) while the
batch has a free slot and the KV cache has room for the prompt, prefills admitted prompts within a
per-step token budget (chunked prefill) alongside the decode of the running sequences, and when the KV
cache runs out during decode it preempts the most recently admitted sequence, which goes back to the
front of the queue and later recomputes its prompt plus the tokens it had generated.

Step time is the step model of `performance`: the roofline of the weight and KV reads against the
decode and prompt FLOPs of the step, plus all-reduces and overheads. A decode-only step is exactly
`decode_step_s(hw, batch, mean_context)`; a prefill-only step of one prompt is `prefill_s(hw, prompt)`.

Speed: while no sequence is in prefill the batch is fixed until the next event (a completion, the KV
cache filling up, an arrival that could be admitted), so the loop jumps over all the steps in between
at once, with the step time of the mean context over the jump.

Times are seconds; lengths are tokens. `simulate_queue` is the plain G/G/c queue (batch 1, a given
service-time distribution) whose mean waits have closed forms.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.performance import Hardware

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

ROUTERS = ("round_robin", "least_outstanding")
QUANTILES = (0.5, 0.9, 0.95, 0.99)


# --------------------------------------------------------------------------------------------------
# Workloads


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order: arrival time [s], prompt and output lengths [tokens]."""

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray

    def __len__(self) -> int:
        return len(self.arrival_s)


def trace_workload(arrival_s: ArrayLike, prompt_tokens: ArrayLike, output_tokens: ArrayLike) -> Workload:
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
    return Workload(t, p, o)


def read_trace(path: str | Path) -> Workload:
    """A trace from JSON lines `{"t": seconds, "prompt": tokens, "output": tokens}`; blank lines skipped.

    Errors name the file and line.
    """
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not JSON: {error.msg}") from None
            if not isinstance(row, dict) or set(row) != {"t", "prompt", "output"}:
                raise ValueError(f'{where}: expected an object with keys "t", "prompt", "output"')
            t, prompt, output = row["t"], row["prompt"], row["output"]
            if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
                raise ValueError(f'{where}: "t" must be a non-negative number of seconds, got {t!r}')
            for key, value in (("prompt", prompt), ("output", output)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f'{where}: "{key}" must be an integer of at least 1, got {value!r}')
            if times and t < times[-1]:
                raise ValueError(f"{where}: arrival time {t} is earlier than the line before ({times[-1]})")
            times.append(float(t))
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


def generate_workload(
    rate: float,
    requests: int,
    prompt_tokens: float,
    output_tokens: float,
    prompt_cv: float = 0.0,
    output_cv: float = 0.0,
    arrival_cv2: float = 1.0,
    seed: int = 0,
) -> Workload:
    """`requests` requests at `rate` per second with lognormal lengths (mean, CV); deterministic per seed."""
    rng = np.random.default_rng(seed)
    t = arrival_times(rng, rate, requests, arrival_cv2)
    return Workload(t, lognormal_lengths(rng, prompt_tokens, prompt_cv, requests),
                    lognormal_lengths(rng, output_tokens, output_cv, requests))


# --------------------------------------------------------------------------------------------------
# Step time


class _StepModel:
    """The step model of `performance` as scalar Python arithmetic (numpy per step would dominate).

    `time(batch, context, prefill_tokens, prefill_compute_s, sequences)`: a step that decodes `batch`
    sequences of mean context `context` and prefills `prefill_tokens` prompt tokens costing
    `prefill_compute_s` of compute per pipeline stage, with `sequences` per-sequence overheads.
    """

    def __init__(self, hw: Hardware) -> None:
        f = {name: float(np.asarray(getattr(hw, name))) for name in hw.__dataclass_fields__}
        self.pp = f["pp"]
        self.weights_s = f["decode_dense_bytes_per_gpu"] / f["bandwidth_bytes_s"]
        self.experts_s = f["expert_bytes_per_gpu"] / f["bandwidth_bytes_s"]
        experts = max(f["num_experts"], 1.0)
        self.moe = f["num_experts"] > 0
        self.miss = min(max(1.0 - f["experts_per_token"] / experts, 0.0), 1.0)
        self.window = f["window_tokens"]
        self.kv_full_s = f["kv_full_bytes_per_token_per_gpu"] / f["kv_bandwidth_bytes_s"]
        self.kv_window_s = f["kv_window_bytes_per_token_per_gpu"] / f["kv_bandwidth_bytes_s"]
        self.decode_s = f["decode_flops_per_token_per_gpu"] / f["decode_flops_s"]
        self.attn_full_decode_s = f["attention_full_flops_per_pair_per_gpu"] / f["decode_flops_s"]
        self.attn_window_decode_s = f["attention_window_flops_per_pair_per_gpu"] / f["decode_flops_s"]
        self.prefill_token_s = f["prefill_flops_per_token_per_gpu"] / f["prefill_flops_s"]
        self.attn_full_prefill_s = f["attention_full_flops_per_pair_per_gpu"] / f["prefill_flops_s"]
        self.attn_window_prefill_s = f["attention_window_flops_per_pair_per_gpu"] / f["prefill_flops_s"]
        tp = f["tp"]
        ring = 2.0 * (tp - 1.0) / max(tp, 1.0) * f["allreduce_bytes_per_token"] / f["link_bytes_s"]
        self.allreduce_token_s = f["allreduces_per_step"] * ring
        self.allreduce_latency_s = f["allreduces_per_step"] * f["link_latency_s"]
        self.overlap = f["overlap_penalty"]
        self.step_overhead_s = f["step_overhead_s"]
        self.sequence_overhead_s = f["sequence_overhead_s"]
        self.request_overhead_s = f["request_overhead_s"]

    def _windowed(self, context: float) -> float:
        return min(context, self.window) if self.window > 0 else context

    def prefill_token_compute_s(self, prompt_tokens: float) -> float:
        """Compute per prompt token per stage in a prompt of `prompt_tokens` (`prefill_compute_s_per_token`
        / pp)."""
        half = prompt_tokens / 2.0
        windowed = self._windowed(half)
        return self.prefill_token_s + self.attn_full_prefill_s * half + self.attn_window_prefill_s * windowed

    def time(self, batch: int, context: float, prefill_tokens: float, prefill_compute_s: float,
             sequences: int) -> float:
        memory = self.weights_s
        compute = prefill_compute_s
        tokens = batch + prefill_tokens
        if batch:
            windowed = self._windowed(context)
            memory += batch * (self.kv_full_s * context + self.kv_window_s * windowed)
            compute += batch * (self.decode_s + self.attn_full_decode_s * context
                                + self.attn_window_decode_s * windowed)
        else:
            tokens = max(tokens, 1.0)
        if self.moe:
            memory += self.experts_s * (1.0 - self.miss**tokens)
        big, small = (memory, compute) if memory >= compute else (compute, memory)
        stage = big + self.overlap * small + self.allreduce_latency_s + self.allreduce_token_s * tokens
        return self.pp * stage + self.step_overhead_s + self.sequence_overhead_s * sequences


# --------------------------------------------------------------------------------------------------
# Replica


class _Replica:
    """One engine instance. State lives in plain Python containers; `advance` runs its step loop."""

    def __init__(self, model: _StepModel, max_batch: int, kv_tokens: int, chunk_tokens: float,
                 shared: _Shared, series_points: int) -> None:
        self.model = model
        self.max_batch = max_batch
        self.kv_cap = kv_tokens
        self.chunk = chunk_tokens
        self.s = shared
        self.queue: deque[int] = deque()
        self.running: dict[int, None] = {}      # admission order; the last is preempted first
        self.prefilling: list[list[int]] = []   # [request, tokens left to prefill, tokens to prefill]
        self.heap: list[tuple[int, int]] = []   # (decode counter at which it finishes, request)
        self.counter = 0                        # decode steps run so far
        self.kv_used = 0                        # prompt + generated tokens of the running sequences
        self.dec_ctx = 0                        # the same over the decoding sequences only
        self.now = 0.0
        self.busy_s = 0.0
        self.kv_max = 0
        self.preemptions = 0
        self.produced = 0
        self.series_stride = 1
        self.series_points = series_points
        self.series_tick = 0
        self.series: tuple[list[float], list[int], list[int]] = ([], [], [])

    def outstanding(self) -> int:
        return len(self.running) + len(self.queue)

    def _record(self) -> None:
        self.series_tick += 1
        if self.series_tick < self.series_stride:
            return
        self.series_tick = 0
        t, q, kv = self.series
        t.append(self.now)
        q.append(len(self.queue))
        kv.append(self.kv_used)
        if len(t) >= 2 * self.series_points:
            for column in self.series:
                del column[1::2]
            self.series_stride *= 2

    def _generated(self, i: int) -> int:
        s = self.s
        return s.base_gen[i] + self.counter - s.base_counter[i]

    def _preempt_last(self) -> None:
        s = self.s
        victim = next(reversed(self.running))
        del self.running[victim]
        if self.prefilling and self.prefilling[-1][0] == victim:
            # Partial prefill is lost; generated tokens (kept in base_gen) stay in the output.
            self.kv_used -= self.prefilling.pop()[2]
        else:
            g = self._generated(victim)
            s.base_gen[victim] = g
            tokens = s.prompt[victim] + g
            self.kv_used -= tokens
            self.dec_ctx -= tokens
            self._drop_from_heap(victim)
        self.queue.appendleft(victim)
        self.preemptions += 1
        s.preempted[victim] += 1

    def _drop_from_heap(self, victim: int) -> None:
        self.heap = [entry for entry in self.heap if entry[1] != victim]
        heapq.heapify(self.heap)

    def _admit(self) -> None:
        s = self.s
        queue, running = self.queue, self.running
        arrival, prompt, base_gen = s.arrival, s.prompt, s.base_gen
        while queue and len(running) < self.max_batch:
            i = queue[0]
            if arrival[i] > self.now:
                return
            need = prompt[i] + base_gen[i]
            # Room for the prompt, its first token and this step's decode tokens.
            if self.kv_used + need + 1 + len(self.heap) > self.kv_cap:
                return
            queue.popleft()
            running[i] = None
            self.prefilling.append([i, need, need])
            self.kv_used += need

    def _complete(self, now: float) -> None:
        s = self.s
        heap, counter = self.heap, self.counter
        while heap and heap[0][0] <= counter:
            _, i = heapq.heappop(heap)
            del self.running[i]
            tokens = s.prompt[i] + s.output[i]
            self.kv_used -= tokens
            self.dec_ctx -= tokens
            s.done[i] = now

    def _prefill_step(self, t_limit: float) -> bool:
        """One step with prompt work in it; False if it would end after `t_limit`."""
        s, model = self.s, self.model
        while True:
            b = len(self.heap)
            budget = self.chunk - b
            tokens = 0
            compute = 0.0
            finishing = 0
            plan: list[tuple[list[int], int]] = []
            for entry in self.prefilling:
                if budget <= 0:
                    break
                take = entry[1] if entry[1] <= budget else int(budget)
                budget -= take
                tokens += take
                compute += take * model.prefill_token_compute_s(entry[2])
                plan.append((entry, take))
                if take == entry[1]:
                    finishing += 1
            if self.kv_used + b + finishing <= self.kv_cap:
                break
            self._preempt_last()
        step = model.time(b, self.dec_ctx / b if b else 0.0, tokens, compute, b + finishing)
        end = self.now + step
        if end > t_limit:
            return False
        self.now = end
        self.busy_s += step
        self.counter += 1
        self.kv_used += b
        self.dec_ctx += b
        self.produced += b + finishing
        for entry, take in plan:
            entry[1] -= take
        if finishing:
            keep = []
            for entry in self.prefilling:
                if entry[1] > 0:
                    keep.append(entry)
                    continue
                i = entry[0]
                g = s.base_gen[i] + 1
                if s.first[i] < 0:
                    s.first[i] = end
                self.kv_used += 1
                self.dec_ctx += entry[2] + 1
                s.base_gen[i] = g
                s.base_counter[i] = self.counter
                heapq.heappush(self.heap, (self.counter + s.output[i] - g, i))
            self.prefilling = keep
        self._complete(end)
        if self.kv_used > self.kv_max:
            self.kv_max = self.kv_used
        return True

    def advance(self, t_limit: float) -> None:
        """Run every step that ends by `t_limit` (all of them when it is infinite)."""
        s, model = self.s, self.model
        arrival, prompt, base_gen = s.arrival, s.prompt, s.base_gen
        while True:
            self._admit()
            self._record()
            if self.prefilling:
                if not self._prefill_step(t_limit):
                    return
                continue
            heap = self.heap
            if not heap:
                if not self.queue:
                    return
                head_arrival = arrival[self.queue[0]]
                if head_arrival > t_limit:
                    return
                self.now = max(self.now, head_arrival)
                continue
            b = len(heap)
            room = self.kv_cap - self.kv_used
            k_kv = room // b
            if k_kv == 0:
                self._preempt_last()
                continue
            k = min(heap[0][0] - self.counter, k_kv)
            context = self.dec_ctx / b
            step = model.time(b, context + (k - 1) / 2.0, 0, 0.0, b)
            k_time = k
            if self.queue and len(self.running) < self.max_batch:
                i = self.queue[0]
                if self.kv_used + prompt[i] + base_gen[i] + 1 + b <= self.kv_cap and arrival[i] > self.now:
                    k_time = max(math.ceil((arrival[i] - self.now) / step), 1)
            if t_limit != math.inf:
                k_time = min(k_time, int((t_limit - self.now) / step))
            if k_time < k:
                if k_time <= 0:
                    return
                k = k_time
                step = model.time(b, context + (k - 1) / 2.0, 0, 0.0, b)
            duration = k * step
            self.now += duration
            self.busy_s += duration
            self.counter += k
            self.kv_used += k * b
            self.dec_ctx += k * b
            self.produced += k * b
            if self.kv_used > self.kv_max:
                self.kv_max = self.kv_used
            self._complete(self.now)


class _Shared:
    """Per-request state as Python lists (indexing lists is several times faster than numpy scalars)."""

    def __init__(self, workload: Workload) -> None:
        n = len(workload)
        self.arrival: list[float] = workload.arrival_s.tolist()
        self.prompt: list[int] = workload.prompt_tokens.tolist()
        self.output: list[int] = workload.output_tokens.tolist()
        self.base_gen = [0] * n       # tokens generated when it was last (re)admitted to decode or preempted
        self.base_counter = [0] * n   # its replica's decode counter at that moment
        self.first = [-1.0] * n
        self.done = [-1.0] * n
        self.preempted = [0] * n


# --------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class TimeSeries:
    """One replica's queue length and KV usage sampled at events (at most 2 x series_points rows)."""

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


def _latency(values: FloatArray) -> Latency:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return Latency(*(math.nan,) * 5)
    q = np.quantile(finite, QUANTILES)
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
    workload: Workload,
    *,
    replicas: int = 1,
    max_batch: int = 256,
    kv_tokens: int = 1_000_000,
    chunk_tokens: float = 8192,
    router: str = "round_robin",
    series_points: int = 256,
) -> SimulationResult:
    """Serve `workload` on `replicas` copies of the engine on `hw` (one deployment, scalar fields).

    `max_batch`: running sequences per replica (max_num_seqs); `kv_tokens`: KV cache per replica;
    `chunk_tokens`: token budget per step, decode tokens included (math.inf: whole prompts in one step);
    `router`: "round_robin" or "least_outstanding" (fewest queued plus running, lowest index on ties).
    TTFT and end-to-end latency include the engine's per-request overhead.
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
    shared = _Shared(workload)
    pool = [_Replica(model, max_batch, kv_tokens, chunk_tokens, shared, series_points) for _ in range(replicas)]
    assigned = np.empty(n, dtype=np.int64)
    if router == "round_robin":
        assigned[:] = np.arange(n) % replicas
        for r, replica in enumerate(pool):
            replica.queue.extend(range(r, n, replicas))
            replica.advance(math.inf)
    else:
        arrival = shared.arrival
        for i in range(n):
            t = arrival[i]
            best, best_load = 0, -1
            for r, replica in enumerate(pool):
                replica.advance(t)
                load = len(replica.running) + len(replica.queue)
                if best_load < 0 or load < best_load:
                    best, best_load = r, load
            pool[best].queue.append(i)
            assigned[i] = best
        for replica in pool:
            replica.advance(math.inf)

    arrival_s = workload.arrival_s
    overhead = model.request_overhead_s
    first = np.asarray(shared.first)
    done = np.asarray(shared.done)
    ttft = first - arrival_s + overhead
    e2e = done - arrival_s + overhead
    outputs = workload.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (done - first) / (outputs - 1), np.nan)
    start = float(arrival_s[0]) if n else 0.0
    duration = float(done.max()) - start if n else 0.0
    busy = np.array([r.busy_s for r in pool])
    series = tuple(TimeSeries(np.asarray(r.series[0]), np.asarray(r.series[1], dtype=np.int64),
                              np.asarray(r.series[2], dtype=np.int64)) for r in pool)
    rate = 1.0 / duration if duration > 0 else math.nan
    return SimulationResult(
        ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, replica=assigned, preempted=np.asarray(shared.preempted),
        ttft=_latency(ttft), tpot=_latency(tpot), e2e=_latency(e2e),
        duration_s=duration,
        output_tokens_per_s=float(outputs.sum()) * rate,
        requests_per_s=n * rate,
        utilisation=float(busy.mean()) / duration if duration > 0 else 0.0,
        busy_s=busy,
        preemptions=sum(r.preemptions for r in pool),
        generated_tokens=sum(r.produced for r in pool),
        kv_tokens_max=np.array([r.kv_max for r in pool], dtype=np.int64),
        series=series,
    )


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
    """
    t = np.asarray(arrival_s, dtype=float)
    n = len(t)
    service = np.asarray(service_s(np.random.default_rng(seed), n), dtype=float)
    if service.shape != (n,) or np.any(service < 0):
        raise ValueError("service_s must return n non-negative times")
    arrivals, services = t.tolist(), service.tolist()
    start = [0.0] * n
    server = [0] * n
    if router == "central":
        free = [(0.0, r) for r in range(servers)]
        for i in range(n):
            f, r = heapq.heappop(free)
            begin = arrivals[i] if arrivals[i] > f else f
            start[i] = begin
            server[i] = r
            heapq.heappush(free, (begin + services[i], r))
    elif router in ROUTERS:
        free_at = [0.0] * servers
        pending: list[deque[float]] = [deque() for _ in range(servers)]
        for i in range(n):
            a = arrivals[i]
            if router == "round_robin":
                r = i % servers
            else:
                for ends in pending:
                    while ends and ends[0] <= a:
                        ends.popleft()
                r = min(range(servers), key=lambda k: len(pending[k]))
            begin = a if a > free_at[r] else free_at[r]
            start[i] = begin
            server[i] = r
            free_at[r] = begin + services[i]
            pending[r].append(free_at[r])
    else:
        raise ValueError(f"router must be central, round_robin or least_outstanding, got {router!r}")
    wait = np.asarray(start) - t
    end = np.asarray(start) + service
    duration = float(end.max() - t[0]) if n else 0.0
    return QueueResult(wait, wait + service, np.asarray(server, dtype=np.int64), float(wait.mean()) if n else 0.0,
                       float(service.sum()) / (servers * duration) if duration > 0 else 0.0)
