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
shortcut with the same arithmetic. Round robin routes in advance, so each replica runs alone over its
requests; least outstanding requests decides at each arrival and wakes only the replicas whose next
event is due by then (only a completion changes a replica's count).

Memory: requests become small Python lists a chunk at a time as they are routed and are dropped when they
complete; what spans the whole run is numpy arrays (the workload, and first-token and completion times
as outputs), so the Python objects alive at once are those of the requests in flight plus one chunk.

Times are seconds; lengths are tokens. `simulate_queue` is the plain G/G/c queue (batch 1, a given
service-time distribution) whose mean waits have closed forms; it runs on the same event loop.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.catalog.engines import Scheduling
from inferplan.planner.model.performance import Hardware
from inferplan.planner.model.serving import sample_quantiles
from inferplan.planner.quantiles import QUANTILES

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

ROUTERS = ("round_robin", "least_outstanding")


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


def read_trace(path: str | Path) -> RequestTrace:
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
) -> RequestTrace:
    """`requests` requests at `rate` per second with lognormal lengths (mean, CV); deterministic per seed."""
    rng = np.random.default_rng(seed)
    t = arrival_times(rng, rate, requests, arrival_cv2)
    return RequestTrace(t, lognormal_lengths(rng, prompt_tokens, prompt_cv, requests),
                    lognormal_lengths(rng, output_tokens, output_cv, requests))


# --------------------------------------------------------------------------------------------------
# Step time


class _StepModel:
    """The step model of `performance` as scalar Python arithmetic (numpy per step would dominate).

    `time(batch, context, prefill_tokens, prefill_compute_s, sequences)`: a step that decodes `batch`
    sequences of mean context `context` and prefills `prefill_tokens` prompt tokens costing
    `prefill_compute_s` of compute per pipeline stage, with `sequences` per-sequence overheads. The event
    loop inlines this arithmetic; a test pins the two together.
    """

    def __init__(self, hw: Hardware | None) -> None:
        """The step model of `hw`; None: a bare server whose step takes exactly its prefill compute (for
        `simulate_queue`, where a request's one-token prompt costs its service time)."""
        f = {name: float(np.asarray(getattr(hw, name))) for name in hw.__dataclass_fields__} if hw else {}

        def ratio(top: str, bottom: str) -> float:
            # The bare server has no weights, KV, decode, all-reduce or overhead time, one stage, no window.
            return f[top] / f[bottom] if hw else 0.0

        self.pp = f.get("pp", 1.0)
        self.weights_s = ratio("decode_dense_bytes_per_gpu", "bandwidth_bytes_s")
        self.experts_s = ratio("expert_bytes_per_gpu", "expert_bandwidth_bytes_s")
        experts = max(f.get("num_experts", 0.0), 1.0)
        self.moe = f.get("num_experts", 0.0) > 0
        self.miss = min(max(1.0 - f.get("experts_per_token", 0.0) / experts, 0.0), 1.0)
        self.window = f.get("window_tokens", 0.0)
        self.kv_full_s = ratio("kv_full_bytes_per_token_per_gpu", "kv_bandwidth_bytes_s")
        self.kv_window_s = ratio("kv_window_bytes_per_token_per_gpu", "kv_bandwidth_bytes_s")
        self.decode_s = ratio("decode_flops_per_token_per_gpu", "decode_flops_s")
        self.prefill_token_s = ratio("prefill_flops_per_token_per_gpu", "prefill_flops_s")
        self.attn_full_prefill_s = ratio("attention_full_flops_per_pair_per_gpu", "attention_flops_s")
        self.attn_window_prefill_s = ratio("attention_window_flops_per_pair_per_gpu", "attention_flops_s")
        self.allreduce_token_s = self.allreduce_latency_s = 0.0
        if hw:
            tp = f["tp"]
            ring = 2.0 * (tp - 1.0) / max(tp, 1.0) * f["allreduce_bytes_per_token"] / f["link_bytes_s"]
            self.allreduce_token_s = f["allreduces_per_step"] * ring + f["stage_send_s_per_token"]
            self.allreduce_latency_s = f["allreduces_per_step"] * f["link_latency_s"] + f["stage_send_latency_s"]
        self.overlap = f.get("overlap_penalty", 0.0)
        self.step_overhead_s = f.get("step_overhead_s", 0.0)
        self.sequence_overhead_s = f.get("sequence_overhead_s", 0.0)
        self.request_overhead_s = f.get("request_overhead_s", 0.0)
        # A decode replica of a disaggregated deployment receives prompts already computed (their KV sent by a
        # prefill replica): a prompt then passes through a step as one token, not as its length.
        self.prompts_computed = False

    def _windowed(self, context: float) -> float:
        return min(context, self.window) if self.window > 0 else context

    def prefill_token_compute_s(self, prompt_tokens: float) -> float:
        """Compute per prompt token per stage in a prompt of `prompt_tokens` (`prefill_compute_s_per_token`
        / pp)."""
        half = prompt_tokens / 2.0
        windowed = self._windowed(half)
        return self.prefill_token_s + self.attn_full_prefill_s * half + self.attn_window_prefill_s * windowed

    def prefill_token_compute_array(self, prompt_tokens: IntArray) -> FloatArray:
        """`prefill_token_compute_s` of many prompts at once (the same operations, so the same floats)."""
        half = prompt_tokens / 2.0
        windowed = np.minimum(half, self.window) if self.window > 0 else half
        return self.prefill_token_s + self.attn_full_prefill_s * half + self.attn_window_prefill_s * windowed

    def time(self, batch: int, context: float, prefill_tokens: float, prefill_compute_s: float,
             sequences: int) -> float:
        memory = self.weights_s
        compute = prefill_compute_s
        tokens = batch + prefill_tokens
        if batch:
            windowed = self._windowed(context)
            memory += batch * (self.kv_full_s * context + self.kv_window_s * windowed)
            compute += batch * self.decode_s
        else:
            tokens = max(tokens, 1.0)
        if self.moe:
            memory += self.experts_s * (1.0 - self.miss**tokens)
        big, small = (memory, compute) if memory >= compute else (compute, memory)
        stage = big + self.overlap * small + self.allreduce_latency_s + self.allreduce_token_s * tokens
        return self.pp * stage + self.step_overhead_s + self.sequence_overhead_s * sequences


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
# The loop uses the literal indices: a named constant costs a global lookup per access.

Request = list[Any]
ReplicaStats = tuple[float, int, int, int, tuple[list[float], list[int], list[int]]]
CHUNK = 4096  # requests turned into Python objects at a time


def _preempt_last(running: dict[int, Request], prefilling: list[Request], heap: list[tuple[int, int, Request]],
                  queue: deque[Request], counter: int, model: _StepModel, preempted: IntArray) -> tuple[int, int]:
    """Preempt the most recently admitted sequence back to the front of the queue (vLLM's recompute
    preemption); returns the KV tokens and the decode context it held (0 if it was prefilling). Rare, so
    a plain function."""
    i, req = running.popitem()  # dicts pop the last inserted item
    if prefilling and prefilling[-1] is req:
        # Its partial prefill is lost; tokens it generated before (kept in [5]) stay in the output.
        prefilling.pop()
        kv = req[2] + req[5]
        context = 0
    else:
        generated = req[5] + counter - req[6]
        req[5] = generated
        kv = context = req[2] + generated
        heap[:] = [entry for entry in heap if entry[1] != i]
        heapq.heapify(heap)
    # It will prefill its prompt and the tokens it had generated again.
    req[4] = model.prefill_token_compute_s(req[2] + req[5])
    queue.appendleft(req)
    preempted[i] += 1
    return kv, context


def _replica_loop(model: _StepModel, max_batch: int, kv_cap: int, chunk: float, pending: deque[Request],
                  load: list[int] | None, r: int, first_s: memoryview, done_s: memoryview, preempted: IntArray,
                  series_points: int, policy: Scheduling | None = None,
                  follow: Callable[[int, float], Request | None] | None = None,
                  ) -> Generator[float, float | None, ReplicaStats]:
    """One replica's engine step loop, as a coroutine holding its state in local variables.

    `pending`: requests routed to this replica that have not yet arrived, in arrival order (the router
    appends to it). `send(t)` runs every step that ends by `t` and answers the time of the replica's next
    state change: the end of the step it would run next, the next arrival when it is idle, inf when it has
    nothing to do. A step that would end after `t` is not committed: it runs when a later `send` reaches its
    end, or is planned again if an arrival it did not know of could change it (one before the end of a
    decode jump, which it may cut short; one at the start of a step, which joins it), so results do not
    depend on how often the router polls. The router only appends, so the first pending request changes
    only when `pending` was empty.
    `send(None)` ends the loop and returns (busy seconds, KV peak, preemptions, tokens produced, series).
    First-token and completion times go straight into `first_s` and `done_s` (views of the result arrays:
    no Python object per request outlives it), and each completion counts `load[r]` down (the router's
    count of outstanding requests; None: nobody counts).
    `policy`: how the engine schedules (see `Scheduling`; None: vLLM V1's mixed, chunked, prompt-admitted
    steps). `follow(i, now)`: a closed loop's next request of the client whose request `i` completed at
    `now` (arriving then), or None when that client is done; None: an open loop.
    """
    inf = math.inf
    ceil = math.ceil
    pp, overlap, moe, miss, experts_s = model.pp, model.overlap, model.moe, model.miss, model.experts_s
    weights_s, kv_full_s, kv_window_s = model.weights_s, model.kv_full_s, model.kv_window_s
    decode_s = model.decode_s
    allreduce_s, allreduce_token_s = model.allreduce_latency_s, model.allreduce_token_s
    step_overhead_s, sequence_overhead_s = model.step_overhead_s, model.sequence_overhead_s
    computed = model.prompts_computed
    window = model.window if model.window > 0 else inf
    # Per decode batch size: the memory time that does not depend on the context, and the time outside the
    # roofline (all-reduces, overheads), so that a decode step costs a dozen float operations. A decoding
    # sequence holds at least two tokens of KV, which bounds the batch too.
    sizes = range(min(max_batch, kv_cap // 2) + 1)
    memory_base = [weights_s + (experts_s * (1.0 - miss**b) if moe else 0.0) for b in sizes]
    outside = [pp * (allreduce_s + allreduce_token_s * b) + step_overhead_s + sequence_overhead_s * b for b in sizes]
    heappush, heappop = heapq.heappush, heapq.heappop
    policy = policy or Scheduling()
    mixed, whole, reserve = policy.mixed, not policy.chunked, policy.reserve_output
    fast = mixed and not whole and not reserve  # the shortcut below is vLLM V1's step
    reserved = 0                                 # KV tokens promised to running sequences (reserve only)
    counting = load is not None
    outstanding = load if load is not None else []

    queue: deque[Request] = deque()              # arrived and waiting; preempted ones go back to the front
    running: dict[int, Request] = {}             # admission order; the last is preempted first
    prefilling: list[Request] = []               # admission order
    heap: list[tuple[int, int, Request]] = []    # decoding: (decode counter at which it finishes, index, request)
    n_running = n_decoding = 0                   # len(running), len(heap), kept as ints
    next_finish = inf                            # heap[0][0]: the decode counter of the next completion
    now = 0.0
    counter = 0                                  # decode steps run so far
    kv_used = 0                                  # prompt + generated tokens of the running sequences
    context_sum = 0                              # the same over the decoding sequences only
    idle = 0.0                                   # time with nothing to run (the rest is busy)
    kv_max = preemptions = produced = 0
    # Queue length and KV use, sampled at step boundaries at least `sample_s` apart; when the series is
    # full every other row goes and the spacing doubles.
    series_t: list[float] = []
    series_q: list[int] = []
    series_kv: list[int] = []
    sample_s = sample_at = 0.0

    t_limit = yield inf
    next_arrival = pending[0][1] if pending else inf
    while t_limit is not None:
        if fast and next_arrival <= now and not queue and not prefilling and n_running < max_batch \
                and kv_used + (need := pending[0][2]) + 1 + n_decoding <= kv_cap and need + n_decoding <= chunk \
                and (len(pending) == 1 or pending[1][1] > now):
            # The common case, taken out of the general path below for speed (the same arithmetic): one
            # request arrives, nothing waits, and its whole prompt fits this step's budget and the KV
            # cache: admit it and run its prefill step with the decode of the others.
            req = pending.popleft()
            next_arrival = pending[0][1] if pending else inf
            running[req[0]] = req
            n_running += 1
            kv_used += need
            if now >= sample_at:
                series_t.append(now)
                series_q.append(0)
                series_kv.append(kv_used)
                if len(series_t) >= 2 * series_points:
                    del series_t[1::2], series_q[1::2], series_kv[1::2]
                    sample_s = max(2.0 * sample_s, (series_t[-1] - series_t[0]) / series_points)
                sample_at = now + sample_s
            b = n_decoding
            tokens = b + (1 if computed else need)
            if b:
                c = context_sum / b
                w = c if c < window else window
                memory = weights_s + b * (kv_full_s * c + kv_window_s * w)
                compute = need * req[4] + b * decode_s
            else:
                memory = weights_s
                compute = need * req[4]
            if moe:
                memory += experts_s * (1.0 - miss**tokens)
            step = pp * ((memory + overlap * compute if memory >= compute else compute + overlap * memory)
                         + allreduce_s + allreduce_token_s * tokens) + step_overhead_s + sequence_overhead_s * (b + 1)
            end = now + step
            if end > t_limit:
                # Only an arrival at this very moment could change a prefill step; later ones wait for it.
                t_limit = yield end
                while t_limit is not None and t_limit < end:
                    t_limit = yield end
                next_arrival = pending[0][1] if pending else inf
                if t_limit is None or next_arrival <= now:
                    # Admitted; the general path plans its step again.
                    req[8] = need
                    prefilling.append(req)
                    continue
            now = end
            counter += 1
            kv_used += b + 1
            context_sum += b + need + 1
            produced += b + 1
            req[5] = 1
            req[6] = counter
            req[7] = now
            first_s[req[0]] = now
            finish = counter + req[3] - 1
            heappush(heap, (finish, req[0], req))
            if finish < next_finish:
                next_finish = finish
            n_decoding += 1
        else:
            if next_arrival <= now or queue:
                while pending and pending[0][1] <= now:
                    queue.append(pending.popleft())
                next_arrival = pending[0][1] if pending else inf
                while queue and n_running < max_batch:
                    req = queue[0]
                    need = req[2] + req[5]
                    # Room for the prompt, its first token and this step's decode tokens; with reservation,
                    # for the whole sequence next to what the running ones were promised.
                    if reserve:
                        if reserved + req[2] + req[3] > kv_cap:
                            break
                        reserved += req[2] + req[3]
                    elif kv_used + need + 1 + n_decoding > kv_cap:
                        break
                    queue.popleft()
                    running[req[0]] = req
                    req[8] = need
                    prefilling.append(req)
                    kv_used += need
                    n_running += 1
            if now >= sample_at:
                series_t.append(now)
                series_q.append(len(queue))
                series_kv.append(kv_used)
                if len(series_t) >= 2 * series_points:
                    del series_t[1::2], series_q[1::2], series_kv[1::2]
                    sample_s = max(2.0 * sample_s, (series_t[-1] - series_t[0]) / series_points)
                sample_at = now + sample_s

            if prefilling:
                # One step: the decode of every decoding sequence plus prompt chunks, first come first
                # served, within the token budget. Preempt while the step's new tokens do not fit in the KV
                # cache.
                while True:
                    budget = chunk - n_decoding if mixed else chunk
                    prompt_tokens = finishing = touched = take = 0
                    prompt_s = 0.0
                    for req in prefilling:
                        if budget <= 0:
                            break
                        left = req[8]
                        if whole and left > budget:
                            if touched:
                                break  # unchunked: a prompt goes whole, in a later step if need be
                            take = left  # a prompt longer than the budget alone still runs whole
                        else:
                            take = left if left <= budget else budget
                        budget -= take
                        prompt_tokens += take
                        prompt_s += take * req[4]
                        touched += 1
                        if take == left:
                            finishing += 1
                    if kv_used + (n_decoding if mixed else 0) + finishing <= kv_cap:
                        break
                    kv, context = _preempt_last(running, prefilling, heap, queue, counter, model, preempted)
                    kv_used -= kv
                    context_sum -= context
                    preemptions += 1
                    n_running -= 1
                    if context:
                        n_decoding -= 1
                        next_finish = heap[0][0] if heap else inf
                b = n_decoding if mixed else 0  # prefill first: the decoding sequences wait this step
                tokens = b + (touched if computed else prompt_tokens)
                memory = weights_s
                compute = prompt_s
                if b:
                    c = context_sum / b
                    w = c if c < window else window
                    memory += b * (kv_full_s * c + kv_window_s * w)
                    compute += b * decode_s
                elif tokens < 1:
                    tokens = 1
                if moe:
                    memory += experts_s * (1.0 - miss**tokens)
                stage = memory + overlap * compute if memory >= compute else compute + overlap * memory
                step = pp * (stage + allreduce_s + allreduce_token_s * tokens) + step_overhead_s \
                    + sequence_overhead_s * (b + finishing)
                end = now + step
                if end > t_limit:
                    t_limit = yield end
                    while t_limit is not None and t_limit < end:
                        t_limit = yield end
                    next_arrival = pending[0][1] if pending else inf
                    if t_limit is None or next_arrival <= now:
                        continue
                now = end
                if b:
                    counter += 1
                kv_used += b
                context_sum += b
                produced += b + finishing
                if touched:
                    # Greedy chunking: every prompt touched but the last is finished.
                    last = prefilling[touched - 1]
                    last[8] -= take
                    if finishing:
                        done = touched if last[8] == 0 else touched - 1
                        for req in prefilling[:done]:
                            generated = req[5] + 1
                            req[5] = generated
                            req[6] = counter
                            if req[7] < 0.0:
                                req[7] = now
                                first_s[req[0]] = now
                            kv_used += 1
                            context_sum += req[2] + generated
                            finish = counter + req[3] - generated
                            heappush(heap, (finish, req[0], req))
                            if finish < next_finish:
                                next_finish = finish
                        n_decoding += done
                        del prefilling[:done]
            elif n_decoding:
                # Decode only: the batch is fixed until a sequence finishes, the KV cache fills up or an
                # admissible request arrives, so run all the steps up to that at once.
                b = n_decoding
                k = next_finish - counter
                if k * b > kv_cap - kv_used:
                    k = (kv_cap - kv_used) // b
                    if k == 0:
                        kv, context = _preempt_last(running, prefilling, heap, queue, counter, model, preempted)
                        kv_used -= kv
                        context_sum -= context
                        preemptions += 1
                        n_running -= 1
                        n_decoding -= 1
                        next_finish = heap[0][0] if heap else inf
                        continue
                c = context_sum / b
                # The step time of the mean context over the jump (exact where the step is linear in it).
                m = c + (k - 1) / 2.0
                w = m if m < window else window
                memory = memory_base[b] + b * (kv_full_s * m + kv_window_s * w)
                compute = b * decode_s
                step = pp * (memory + overlap * compute if memory >= compute else compute + overlap * memory) \
                    + outside[b]
                if next_arrival < inf and not queue and n_running < max_batch \
                        and kv_used + pending[0][2] + 1 + b <= kv_cap:
                    # The next arrival could join: stop at the first step boundary after it.
                    k_arrival = ceil((next_arrival - now) / step)
                    if k_arrival < k:
                        k = k_arrival if k_arrival > 0 else 1
                        m = c + (k - 1) / 2.0
                        w = m if m < window else window
                        memory = memory_base[b] + b * (kv_full_s * m + kv_window_s * w)
                        compute = b * decode_s
                        step = pp * (memory + overlap * compute if memory >= compute else compute + overlap * memory) \
                            + outside[b]
                duration = k * step
                end = now + duration
                if end > t_limit:
                    # A new first arrival before the end may cut the jump short: plan it again then.
                    t_limit = yield end
                    while t_limit is not None and t_limit < end \
                            and (next_arrival < inf or not pending or pending[0][1] >= end):
                        t_limit = yield end
                    if t_limit is None or (next_arrival == inf and pending and pending[0][1] < end):
                        next_arrival = pending[0][1] if pending else inf
                        continue
                    next_arrival = pending[0][1] if pending else inf
                now = end
                counter += k
                grown = k * b
                kv_used += grown
                context_sum += grown
                produced += grown
            else:
                # Nothing running, so nothing waits either (an empty replica admits any request): idle until
                # the next arrival.
                if next_arrival == inf or next_arrival > t_limit:
                    t_limit = yield next_arrival
                    next_arrival = pending[0][1] if pending else inf
                    continue
                idle += next_arrival - now
                now = next_arrival
                continue

        if kv_used > kv_max:
            kv_max = kv_used
        while next_finish <= counter:
            _, i, req = heappop(heap)
            del running[i]
            tokens = req[2] + req[3]
            kv_used -= tokens
            context_sum -= tokens
            done_s[i] = now
            if reserve:
                reserved -= tokens
            if counting:
                outstanding[r] -= 1
            if follow is not None and (nxt := follow(i, now)) is not None:
                pending.append(nxt)
                next_arrival = pending[0][1]
            n_running -= 1
            n_decoding -= 1
            next_finish = heap[0][0] if heap else inf
    return now - idle, kv_max, preemptions, produced, (series_t, series_q, series_kv)


def _stop(loop: Generator[float, float | None, ReplicaStats]) -> ReplicaStats:
    try:
        loop.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("a replica loop did not stop")


@dataclass(frozen=True)
class _Served:
    first_s: FloatArray        # first-token time per request (without the request overhead)
    done_s: FloatArray         # completion time per request
    replica: IntArray
    preempted: IntArray
    stats: list[ReplicaStats]


def _serve(model: _StepModel, arrival: FloatArray, prompt: IntArray, output: IntArray,
           prefill_s_per_token: FloatArray | None, replicas: int, max_batch: int, kv_cap: int, chunk: float,
           assigned: IntArray | None, series_points: int, policy: Scheduling | None = None,
           clients: int = 0) -> _Served:
    """Run `replicas` replica loops over the requests. `assigned`: a replica per request fixed in advance
    (round robin, or the central queue of `simulate_queue`), each replica then runs alone over its own
    requests; None: least outstanding requests, decided at each arrival with the replicas whose next event
    is due brought up to that time. `prefill_s_per_token`: per request, instead of the step model's cost
    of its prompt. `clients` > 0: a closed loop of that many clients on one replica; the first `clients`
    requests arrive at their `arrival` times and each later one when its client's previous one completes
    (request i + clients follows request i); `arrival` is overwritten with those times."""
    n = len(arrival)
    first = np.full(n, math.nan)
    done = np.full(n, math.nan)
    preempted = np.zeros(n, dtype=np.int64)

    def requests(indices: IntArray) -> list[Request]:
        # A chunk of requests as Python objects, when routed (not before: memory follows the flight).
        compute = (model.prefill_token_compute_array(prompt[indices]) if prefill_s_per_token is None
                   else prefill_s_per_token[indices])
        return [[i, a, p, o, s, 0, 0, -1.0, 0] for i, a, p, o, s in zip(
            indices.tolist(), arrival[indices].tolist(), prompt[indices].tolist(), output[indices].tolist(),
            compute.tolist(), strict=True)]

    load = [0] * replicas  # outstanding requests per replica, for least outstanding
    pending: list[deque[Request]] = [deque() for _ in range(replicas)]
    first_s, done_s = memoryview(first), memoryview(done)
    counted = load if assigned is None else None
    follow = None
    if clients > 0:
        if replicas != 1:
            raise ValueError("a closed loop runs on one replica")
        arrivals = memoryview(arrival)
        successors = list(range(clients, n)) + [-1] * min(clients, n)
        # A closed loop makes its requests one at a time: their fields as plain lists, computed once (the same
        # floats `requests` gives, element by element).
        every = np.arange(n)
        compute_of = (model.prefill_token_compute_array(prompt[every]) if prefill_s_per_token is None
                      else prefill_s_per_token[every]).tolist()
        prompt_of, output_of = prompt.tolist(), output.tolist()

        def follow(i: int, now: float) -> Request | None:
            j = successors[i]
            if j < 0:
                return None
            arrivals[j] = now
            return [j, now, prompt_of[j], output_of[j], compute_of[j], 0, 0, -1.0, 0]

    loops = [_replica_loop(model, max_batch, kv_cap, chunk, pending[r], counted, r, first_s, done_s, preempted,
                           series_points, policy, follow) for r in range(replicas)]
    for loop in loops:
        next(loop)
    if clients > 0:
        pending[0].extend(requests(np.arange(min(clients, n))))
        loops[0].send(math.inf)
    elif assigned is not None:
        for r, loop in enumerate(loops):
            mine = np.flatnonzero(assigned == r)
            for start in range(0, len(mine), CHUNK):
                indices = mine[start:start + CHUNK]
                pending[r].extend(requests(indices))
                # Every arrival up to the last one of the chunk is known: run the replica up to it.
                loop.send(float(arrival[indices[-1]]))
            loop.send(math.inf)
    else:
        assigned = np.empty(n, dtype=np.int64)
        next_change = [math.inf] * replicas
        for start in range(0, n, CHUNK):
            chosen = []
            for req in requests(np.arange(start, min(start + CHUNK, n))):
                t = req[1]
                # Only a replica whose next state change is due can have finished a request by now.
                for r in range(replicas):
                    if next_change[r] <= t:
                        next_change[r] = loops[r].send(t)
                best = load.index(min(load))
                pending[best].append(req)
                load[best] += 1
                # Its planned step may now stop at this arrival: let it plan again.
                next_change[best] = loops[best].send(t)
                chosen.append(best)
            assigned[start:start + len(chosen)] = chosen
        for loop in loops:
            loop.send(math.inf)
    return _Served(first, done, assigned, preempted, [_stop(loop) for loop in loops])


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
) -> SimulationResult:
    """Serve `workload` on `replicas` copies of the engine on `hw` (one deployment, scalar fields).

    `max_batch`: running sequences per replica (max_num_seqs); `kv_tokens`: KV cache per replica;
    `chunk_tokens`: token budget per step, decode tokens included (math.inf: whole prompts in one step);
    `router`: "round_robin" or "least_outstanding" (fewest queued plus running, lowest index on ties).
    `policy`: how the engine fills a step (`Scheduling`; default vLLM V1's). `clients` > 0: a closed loop
    of that many clients on one replica (each sends its next request, the next one of the workload, when
    its last one completes; the workload's arrival times count only for the first `clients` requests, and
    the result's latencies are measured from the times the loop sent them).
    TTFT and end-to-end latency include the engine's per-request overhead: a constant delay, or with `front_end`
    (an open loop only) the service time of a first-in, first-out stage every request passes one at a time before
    the engine sees it (a server front end or a client that prepares one request after another), so that requests
    sent together queue for it; of an overhead above `front_end_max_s` only that much is served one at a time and
    the rest is a constant delay.

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
    assigned = np.arange(n, dtype=np.int64) % replicas if router == "round_robin" else None
    if clients < 0:
        raise ValueError("clients must be at least 0")
    arrival_s = workload.arrival_s.copy() if clients else workload.arrival_s
    engine_s, overhead = arrival_s, model.request_overhead_s
    if front_end and not clients and overhead > 0 and n:
        serial = min(overhead, front_end_max_s)
        engine_s, overhead = serial_stage(arrival_s, serial), overhead - serial
    served = _serve(model, engine_s, workload.prompt_tokens, workload.output_tokens, None, replicas,
                    max_batch, kv_tokens, chunk, assigned, series_points, policy, clients)

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
) -> SimulationResult:
    """Serve `workload` on a disaggregated deployment: `prefill_replicas` replicas on `prefill_hw` that only
    prefill (each request with one output token, the engine's step loop as `simulate` runs it), the KV transfer
    of each request (`transfer_s`, per request) after its prefill, then `decode_replicas` replicas on
    `decode_hw` that admit the request when it arrives there (as any request: a free slot and room in the KV
    cache for its prompt) and decode it; its prompt costs no compute there (its KV is already computed) and
    takes no token budget, so the step that admits it makes its first token. Round robin in both pools.

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
    prefilled = _serve(pre_model, arrival, prompt, ones, None, prefill_replicas, prefill_max_batch,
                       prefill_kv_tokens, chunk, np.arange(n, dtype=np.int64) % prefill_replicas, 2, policy)
    at_decode = prefilled.first_s + np.asarray(transfer_s, dtype=float)
    order = np.argsort(at_decode, kind="stable")  # the decode pool sees requests in the order they arrive
    served = _serve(dec_model, at_decode[order], prompt[order], output[order], np.zeros(n), decode_replicas,
                    decode_max_batch, decode_kv_tokens, math.inf, np.arange(n, dtype=np.int64) % decode_replicas,
                    256, policy)
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
