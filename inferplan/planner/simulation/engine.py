"""The engine loop of one replica in the simulator: its step model, admission, chunked prefill, decode and
preemption, as each engine schedules them (`simulate.py` serves a workload on replicas with it)."""

from __future__ import annotations

import gc
import heapq
import math
from collections import deque
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.catalog.engines import Scheduling
from inferplan.planner.model.performance import Hardware

FloatArray = NDArray[np.float64]


IntArray = NDArray[np.int64]


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
        # The fused MoE layers add their floor, the read of the experts routed to and a compute per routed token to
        # a step, after the dense roofline (`performance.moe_step_s`).
        self.moe_floor_s = f.get("moe_floor_s", 0.0)
        self.expert_token_s = f.get("expert_s_per_token", 0.0)
        self.window = f.get("window_tokens", 0.0)
        # Decode attention per context token: the KV read; for MLA its measured time, else the larger of its read
        # and its FLOPs (`performance.decode_attention_s_per_token`).
        mla_s = f.get("mla_decode_s_per_pair_per_gpu", 0.0)
        self.kv_full_s = mla_s if mla_s > 0 else max(ratio("kv_full_bytes_per_token_per_gpu", "kv_bandwidth_bytes_s"),
                                                     ratio("mla_decode_flops_per_pair_per_gpu", "attention_flops_s"))
        self.kv_window_s = ratio("kv_window_bytes_per_token_per_gpu", "kv_bandwidth_bytes_s")
        self.decode_s = ratio("decode_flops_per_token_per_gpu", "decode_flops_s")
        self.prefill_token_s = ratio("prefill_flops_per_token_per_gpu", "prefill_flops_s")
        # Data-parallel attention (`Hardware.dp_ranks`): a prompt token's attention (its projections and pairs, all of
        # its per-token compute but the rest of the GEMMs' share) runs on its request's rank alone.
        self.dp = f.get("dp_ranks", 1.0)
        self.shared_token_s = self.prefill_token_s - ratio("attention_projection_flops_per_token_per_gpu",
                                                           "prefill_flops_s")
        self.attn_full_prefill_s = ratio("attention_full_flops_per_pair_per_gpu", "attention_flops_s")
        self.attn_window_prefill_s = ratio("attention_window_flops_per_pair_per_gpu", "attention_flops_s")
        self.allreduce_token_s = self.allreduce_latency_s = self.knee_token_s = 0.0
        self.knee_tokens = 0.0
        if hw:
            tp = f["tp"]
            ring = 2.0 * (tp - 1.0) / max(tp, 1.0) * f["allreduce_bytes_per_token"]
            self.allreduce_token_s = f["allreduces_per_step"] * ring / f["link_bytes_s"] + f["stage_send_s_per_token"]
            self.allreduce_latency_s = f["allreduces_per_step"] * f["link_latency_s"] + f["stage_send_latency_s"]
            # Below the all-reduce curve's knee each token costs more (`performance.allreduce_message_s`).
            self.knee_token_s = f["allreduces_per_step"] * ring * f["link_knee_s_per_byte"]
            self.knee_tokens = f["link_knee_bytes"] / f["allreduce_bytes_per_token"] if self.knee_token_s else 0.0
        # Drafting with MTP modules (`Hardware.verify_tokens`): each decoding sequence passes `verify` tokens through
        # the step, the drafts add `draft` times the plain decode GPU time, and a step is charged per token emitted:
        # the real step less (1 - 1 / tokens_per_step) of its decode-only part (`decode_only`), exact in expectation
        # for TPOT since the prompt work a sequence waits through is the same however many tokens each step emits.
        self.verify = f.get("verify_tokens", 1.0)
        self.draft = f.get("draft_passes", 0.0) * f.get("draft_share", 0.0)
        self.emitted = f.get("tokens_per_step", 1.0)
        self.mtp = self.draft > 0
        self.overlap = f.get("overlap_penalty", 0.0)
        self.step_overhead_s = f.get("step_overhead_s", 0.0)
        self.sequence_overhead_s = f.get("sequence_overhead_s", 0.0)
        self.request_overhead_s = f.get("request_overhead_s", 0.0)
        # A step whose decode batch is above the largest captured CUDA graph runs eagerly (`Hardware.eager_step_s`).
        self.graph_max_batch = f.get("graph_max_batch", math.inf)
        self.eager_step_s = f.get("eager_step_s", 0.0)
        # A decode replica of a disaggregated deployment receives prompts already computed (their KV sent by a
        # prefill replica): a prompt then passes through a step as one token, not as its length.
        self.prompts_computed = False
        self._outside: dict[int, list[float]] = {}

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

    def _stage(self, batch: int, context: float, prefill_tokens: float, prefill_compute_s: float,
               verified: float) -> float:
        """One stage's GPU time: `batch` sequences passing `verified` tokens each, and the prompt work."""
        memory = self.weights_s
        compute = prefill_compute_s
        tokens = batch * verified + prefill_tokens
        if batch:
            windowed = self._windowed(context)
            memory += batch * (self.kv_full_s * context + self.kv_window_s * windowed)
            compute += batch * verified * self.decode_s
        else:
            tokens = max(tokens, 1.0)
        big, small = (memory, compute) if memory >= compute else (compute, memory)
        stage = big + self.overlap * small + self.allreduce_latency_s + self.allreduce_token_s * tokens \
            + self.knee_token_s * min(tokens, self.knee_tokens)
        return stage + self.moe_s(tokens)  # without experts + 0.0, which leaves the (non-negative) stage as it is

    def decode_only(self, batch: int, context: float) -> float:
        """A decode-only step of `batch` sequences as it runs, drafts included (with MTP: before the charge per
        token emitted)."""
        stage = self._stage(batch, context, 0.0, 0.0, self.verify)
        if self.mtp:
            stage += self.draft * self._stage(batch, context, 0.0, 0.0, 1.0)
        return self.pp * stage + self.step_overhead_s + self.sequence_overhead_s * batch + self.eager(batch)

    def outside_s(self, sizes: int) -> list[float]:
        """Per decode batch size below `sizes`, a decode step's time outside the roofline (all-reduces, the fused MoE
        layers, overheads), so that the event loop's decode step costs a dozen float operations. Made once per model
        and size: every replica of a run reads the same list (it is never written)."""
        outside = self._outside.get(sizes)
        if outside is None:
            outside = self._outside[sizes] = [
                self.pp * (self.allreduce_latency_s + self.allreduce_token_s * b
                           + self.knee_token_s * min(b, self.knee_tokens) + self.moe_s(b))
                + self.step_overhead_s + self.sequence_overhead_s * b + self.eager(b) for b in range(sizes)]
        return outside

    def moe_s(self, tokens: float) -> float:
        """What the fused MoE layers add to a stage of `tokens` tokens (0 without experts)."""
        return (self.moe_floor_s + self.experts_s * (1.0 - self.miss**tokens) + self.expert_token_s * tokens
                if self.moe else 0.0)

    def eager(self, batch: float) -> float:
        """What running a step of `batch` decoding sequences eagerly adds: `eager_step_s` above the graphs' batch."""
        return self.eager_step_s if batch > self.graph_max_batch else 0.0

    def time(self, batch: int, context: float, prefill_tokens: float, prefill_compute_s: float,
             sequences: int) -> float:
        stage = self._stage(batch, context, prefill_tokens, prefill_compute_s, self.verify)
        if self.mtp and batch:
            stage += self.draft * self._stage(batch, context, 0.0, 0.0, 1.0)
        step = self.pp * stage + self.step_overhead_s + self.sequence_overhead_s * sequences + self.eager(batch)
        if self.mtp and batch:
            step -= (1.0 - 1.0 / self.emitted) * self.decode_only(batch, context)
        return step


Request = list[Any]


ReplicaStats = tuple[float, int, int, int, tuple[list[float], list[int], list[int]]]


CHUNK = 4096  # requests turned into Python objects at a time

# SGLang's admission estimate (`Scheduling.estimate_output`; sglang 0.5.5 `srt/environ.py`,
# `srt/managers/schedule_policy.py`): the new-token ratio starts at 0.7, falls to 0.7 x 0.14 over 600 decode
# steps, and a request's own output counts up to 4,096 tokens. A retraction re-estimates the ratio as the
# tokens decoded plus 20 per running request over their whole outputs.
RATIO_INIT = 0.7
RATIO_MIN = RATIO_INIT * 0.14
RATIO_DECAY = (RATIO_INIT - RATIO_MIN) / 600
RATIO_RETRACT_STEPS = 20
OUTPUT_CLIP = 4096
# A run of identical prompt steps (`_replica_loop`) this long or longer is one jump at its mean context; a shorter one
# is stepped in one pass with the arithmetic of a pass per step, so its floats are those of a pass per step (with
# jumps from 16 steps on, some of the four published files' predictions moved in their last digit; from 32 on none).
JUMP_MIN_STEPS = 64


def _preempt_last(running: dict[int, Request], prefilling: list[Request], heap: list[tuple[int, int, Request]],
                  queue: deque[Request], counter: int, model: _StepModel, preempted: IntArray,
                  by_chunk: bool = False, retract: bool = False) -> tuple[int, int, Request]:
    """Preempt the most recently admitted sequence back to the front of the queue (vLLM's recompute
    preemption); returns the KV tokens and the decode context it held (0 if it was prefilling) and the request.
    Rare, so a plain function. `by_chunk`: a prefilling sequence holds the chunks it computed only, and what it held
    stays in the prefix cache for its readmission (`Scheduling.admit_first_chunk`). `retract`: SGLang's retraction
    of a decoding sequence (`Scheduling.estimate_output`): the one with the fewest tokens generated (of those the
    longest prompt, then the last admitted) goes to the back of the queue."""
    if retract:
        # (min keeps the first of equals, so the running sequences are looked at last admitted first.)
        i, req = min(reversed(running.items()), key=lambda item: (item[1][5] + counter - item[1][6], -item[1][2]))
        del running[i]
    else:
        i, req = running.popitem()  # dicts pop the last inserted item
    if prefilling and prefilling[-1] is req:
        # Its partial prefill is lost; tokens it generated before (kept in [5]) stay in the output.
        prefilling.pop()
        kv = req[2] + req[5] - (req[8] if by_chunk else 0)
        context = 0
    else:
        generated = req[5] + counter - req[6]
        req[5] = generated
        kv = context = req[2] + generated
        heap[:] = [entry for entry in heap if entry[1] != i]
        heapq.heapify(heap)
    # It will prefill its prompt and the tokens it had generated again.
    req[4] = model.prefill_token_compute_s(req[2] + req[5])
    if by_chunk:
        # The prefix cache keeps what it held, short of the last token (a hit is at most the sequence less one).
        req[9] = min(kv, req[2] + req[5] - 1)
    if retract:
        queue.append(req)
    else:
        queue.appendleft(req)
    preempted[i] += 1
    return kv, context, req


def _overfilled(kv_used: int, kv_cap: int, counter: int) -> NoReturn:
    """Stop a loop whose KV cache is overfilled. Never: its steps are sized to the free cache. Where its accounting
    is wrong, an overfilled cache makes the decode jump's length negative and the loop spin without end (a first
    token left uncounted did, 2026-12-06), so the loop checks where a pass ends and where a jump would go negative."""
    raise ValueError(f"the simulator overfilled its KV cache ({kv_used} of {kv_cap} tokens after {counter} decode "
                     f"steps): a bug in its accounting")


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
    moe_floor_s, expert_token_s = model.moe_floor_s, model.expert_token_s
    weights_s, kv_full_s, kv_window_s = model.weights_s, model.kv_full_s, model.kv_window_s
    decode_s = model.decode_s
    allreduce_s, allreduce_token_s = model.allreduce_latency_s, model.allreduce_token_s
    knee_token_s, knee_tokens = model.knee_token_s, model.knee_tokens
    step_overhead_s, sequence_overhead_s = model.step_overhead_s, model.sequence_overhead_s
    graph_max_batch, eager_step_s = model.graph_max_batch, model.eager_step_s
    computed = model.prompts_computed
    # Data-parallel attention: a step's prompt attention is its busiest rank's (`_StepModel.dp`).
    dp, shared_token_s = model.dp, model.shared_token_s
    ranked = dp > 1.0 and not computed
    window = model.window if model.window > 0 else inf
    mtp, verify, emitted = model.mtp, model.verify, model.emitted
    # A decoding sequence holds at least two tokens of KV, which bounds the batch too.
    outside = model.outside_s(min(max_batch, kv_cap // 2) + 1)
    policy = policy or Scheduling()
    # Multi-step scheduling: the scheduler runs once per `multi` decode steps (from the last prompt step on), so
    # a run of decode steps admits new requests only at its end (its CPU time is charged per step as without it).
    multi = policy.steps_per_schedule
    last_sched = 0
    heappush, heappop = heapq.heappush, heapq.heappop

    mixed, whole, reserve = policy.mixed, not policy.chunked, policy.reserve_output
    estimate = policy.estimate_output
    # vLLM V1: admitted on its first chunk, the KV cache filled chunk by chunk (`Scheduling.admit_first_chunk`).
    # After a preemption nothing is admitted until a request completes: the preempted request (first in the queue)
    # did not fit, and until something frees the space only shrinks.
    by_chunk = policy.admit_first_chunk and mixed and not whole
    held = False
    # SGLang: once a request did not fit, nothing is admitted until a request leaves the running batch (it completes
    # or is retracted) or a chunked prompt's step ends (`batch_is_full`).
    full = False
    fast = mixed and not whole and not reserve and not mtp  # the shortcut below is vLLM V1's step
    reserved = 0                                 # KV tokens promised to running sequences (reserve only)
    prompts = outputs = 0                        # prompt and output tokens of the running sequences (estimate only)
    ratio = RATIO_INIT                           # SGLang's new-token ratio (estimate only)
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
    sample_s = 0.0
    sample_at = 0.0 if series_points else inf  # 0 points: no series, no step sampled

    t_limit = yield inf
    next_arrival = pending[0][1] if pending else inf
    while t_limit is not None:
        if fast and next_arrival <= now and not queue and not prefilling and n_running < max_batch \
                and kv_used + (need := pending[0][2]) + 1 + n_decoding <= kv_cap \
                and (new := need - pending[0][9]) + n_decoding <= chunk \
                and (len(pending) == 1 or pending[1][1] > now):
            # The common case, taken out of the general path below for speed (the same arithmetic): one
            # request arrives, nothing waits, and the part of its prompt not in the prefix cache fits this step's
            # budget and the whole prompt the KV cache: admit it and run its prefill step with the decode of the
            # others.
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
            tokens = b + (1 if computed else new)
            if b:
                c = context_sum / b
                w = c if c < window else window
                memory = weights_s + b * (kv_full_s * c + kv_window_s * w)
                compute = new * req[4] + b * decode_s
            else:
                memory = weights_s
                compute = new * req[4]
            if ranked and req[4] > shared_token_s:
                compute += (dp - 1.0) * new * (req[4] - shared_token_s)  # its rank alone prefills it
            step = pp * ((memory + overlap * compute if memory >= compute else compute + overlap * memory)
                         + allreduce_s + allreduce_token_s * tokens
                         + knee_token_s * (tokens if tokens < knee_tokens else knee_tokens)
                         + (moe_floor_s + experts_s * (1.0 - miss**tokens) + expert_token_s * tokens if moe else 0.0)) \
                + step_overhead_s + sequence_overhead_s * (b + 1) + (eager_step_s if b > graph_max_batch else 0.0)
            end = now + step
            if end > t_limit:
                # Only an arrival at this very moment could change a prefill step; later ones wait for it.
                t_limit = yield end
                while t_limit is not None and t_limit < end:
                    t_limit = yield end
                next_arrival = pending[0][1] if pending else inf
                if t_limit is None or next_arrival <= now:
                    # Admitted; the general path plans its step again (by chunk: with its prompt to allocate).
                    req[8] = new
                    prefilling.append(req)
                    if by_chunk:
                        kv_used -= new
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
                # SGLang: the running sequences' remaining output at the ratio, this round's admissions' whole.
                estimated = kv_used + ratio * (prompts + outputs - kv_used) if estimate else 0.0
                scheduling = (multi == 1 or not n_decoding or (counter - last_sched) % multi == 0) and not full
                if scheduling and queue:
                    last_sched = counter
                    if by_chunk:
                        # The step's budget and free KV cache after the decode and the running prompts' next chunks
                        # (a chunk that ends its prompt with the first token's).
                        budget_left = chunk - (int(n_decoding * verify) if mtp else n_decoding)
                        free = kv_cap - kv_used - n_decoding
                        for req in prefilling:
                            if budget_left <= 0:
                                break
                            left = req[8]
                            if left < budget_left:
                                budget_left -= left
                                free -= left + 1
                            else:
                                free -= budget_left + (left == budget_left)
                                budget_left = 0
                        if held:
                            if n_running:
                                scheduling = False
                            else:
                                held = False  # nothing left to complete: it may run alone
                while scheduling and queue and n_running < max_batch:
                    req = queue[0]
                    need = req[2] + req[5]
                    # Room for the prompt, its first token and this step's decode tokens; with reservation,
                    # for the whole sequence next to what the running ones were promised; with an estimate,
                    # for the prompt and the whole output next to the running ones' estimated remainder.
                    if reserve:
                        if reserved + req[2] + req[3] > kv_cap:
                            break
                        reserved += req[2] + req[3]
                    elif by_chunk:
                        # Room for its first chunk and what the prefix cache holds of it: no more than is free for
                        # a preempted request (the rest was evicted for others).
                        if budget_left <= 0:
                            break
                        hit = req[9]
                        if hit > free and preempted[req[0]]:
                            hit = req[9] = free if free > 0 else 0
                        left = need - hit
                        if left < budget_left:
                            budget_left -= left
                            left += 1
                        else:
                            left = budget_left + (left == budget_left)
                            budget_left = 0
                        if hit + left > free:
                            break
                        free -= hit + left
                    elif kv_used + need + 1 + n_decoding > kv_cap:
                        full = estimate
                        break
                    elif estimate:
                        # A retracted request's whole output again (SGLang keeps its `max_new_tokens`).
                        whole_output = need + (req[3] if req[3] < OUTPUT_CLIP else OUTPUT_CLIP)
                        if estimated + whole_output >= kv_cap and n_running:
                            full = True
                            break
                        estimated += whole_output
                        prompts += req[2]
                        outputs += req[3]
                    queue.popleft()
                    running[req[0]] = req
                    req[8] = need - req[9]  # the prompt's prefix-cache hit is not computed again
                    prefilling.append(req)
                    kv_used += req[9] if by_chunk else need
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
                    # The decoding sequences' tokens come out of the step's budget (with MTP, every verified one).
                    budget = chunk - (int(n_decoding * verify) if mtp else n_decoding) if mixed else chunk
                    prompt_tokens = finishing = touched = take = 0
                    prompt_s = rank_max = 0.0
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
                        if ranked and take * (req[4] - shared_token_s) > rank_max:
                            rank_max = take * (req[4] - shared_token_s)
                        touched += 1
                        if take == left:
                            finishing += 1
                    # (By chunk, the cache takes the step's prompt tokens too.)
                    if kv_used + (n_decoding if mixed else 0) + finishing + (prompt_tokens if by_chunk else 0) \
                            <= kv_cap:
                        break
                    kv, context, last = _preempt_last(running, prefilling, heap, queue, counter, model, preempted,
                                                      by_chunk)
                    if estimate:
                        prompts -= last[2]
                        outputs -= last[3]
                    held = by_chunk
                    full = False
                    kv_used -= kv
                    context_sum -= context
                    preemptions += 1
                    n_running -= 1
                    if estimate:
                        # SGLang re-estimates: the tokens decoded plus 20 per request over their whole outputs.
                        ratio = min(1.0, (kv_used - prompts + RATIO_RETRACT_STEPS * n_running) / (outputs + 1))
                    if context:
                        n_decoding -= 1
                        next_finish = heap[0][0] if heap else inf
                if ranked and rank_max > 0.0:
                    # Each prompt's chunk on its own rank (its largest on one GPU), or all of them spread over the
                    # ranks where several prefill at once, whichever takes longer.
                    spread = prompt_s - shared_token_s * prompt_tokens
                    if dp * rank_max > spread:
                        prompt_s += dp * rank_max - spread
                b = n_decoding if mixed else 0  # prefill first: the decoding sequences wait this step
                if mtp and b:
                    # Drafting: the real step, less what its decode part saves per token emitted.
                    c = context_sum / b
                    step = model.time(b, c, touched if computed else prompt_tokens, prompt_s, b + finishing)
                else:
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
                    stage = memory + overlap * compute if memory >= compute else compute + overlap * memory
                    stage += moe_floor_s + experts_s * (1.0 - miss**tokens) + expert_token_s * tokens if moe else 0.0
                    step = pp * (stage + allreduce_s + allreduce_token_s * tokens
                                 + knee_token_s * (tokens if tokens < knee_tokens else knee_tokens)) \
                        + step_overhead_s + sequence_overhead_s * (b + finishing) \
                        + (eager_step_s if b > graph_max_batch else 0.0)
                k = 1
                end = now + step
                jumped = False
                if touched <= 1 and not finishing and not mtp and prefilling and (not queue or (multi == 1 and (
                        by_chunk or not estimate or not b or ratio == RATIO_MIN))):
                    # The same step again and again: one prompt's chunk that takes the whole budget and does not end
                    # it (or no chunk: the decoding sequences take the budget), nothing admitted meanwhile (nothing
                    # waits, no budget is left for it, or what stopped the admission only grows: the KV cache used,
                    # SGLang's estimate once its ratio stops falling). The steps up to the prompt's last chunk, a
                    # completion, a full KV cache or the next arrival run in one pass: a run of JUMP_MIN_STEPS or
                    # more as the decode jump does, with the step at the jump's mean context; a shorter one step by
                    # step with the arithmetic of a pass per step (the same floats). A budget of 16 tokens and
                    # prompts of 100k had run a pass per chunk, 31M of them for a burst of 5,000; a budget of 64
                    # that 256 decoding sequences take, a pass per step of the prompts waiting.
                    k = (prefilling[0][8] - 1) // take if touched else next_finish - counter
                    if b and next_finish - counter < k:
                        k = next_finish - counter
                    grown = b + prompt_tokens if by_chunk else b
                    if grown and k * grown > kv_cap - kv_used:
                        k = (kv_cap - kv_used) // grown
                    # The next arrival ends the run where it could be admitted: not behind a waiting request, nor
                    # where the step leaves it no budget (by chunk). The jump's step is no shorter than this one, so
                    # an arrival within JUMP_MIN_STEPS of these cuts it below that.
                    cuts = not queue and not by_chunk
                    arrival = next_arrival if cuts else inf
                    prompt_part = touched if computed else prompt_tokens
                    if k >= JUMP_MIN_STEPS and (arrival == inf or (arrival - now) / step > JUMP_MIN_STEPS - 1):
                        jump_step = model.time(b, context_sum / b + (k - 1) / 2.0 if b else 0.0, prompt_part,
                                               prompt_s, b)
                        if arrival < inf and (k_arrival := ceil((arrival - now) / jump_step)) < k:
                            k = k_arrival
                            if k >= JUMP_MIN_STEPS:
                                jump_step = model.time(b, context_sum / b + (k - 1) / 2.0 if b else 0.0,
                                                       prompt_part, prompt_s, b)
                        if k >= JUMP_MIN_STEPS:
                            end = now + k * jump_step
                            jumped = True
                    if not jumped and k > 1:
                        j = 1
                        if b:
                            tokens = b + prompt_part
                            sequences_s = sequence_overhead_s * b
                            eager_s = eager_step_s if b > graph_max_batch else 0.0
                            # What every step of the run shares, worked out once: the same floats as the pass
                            # above works out per step (only the context, and with it the memory term, grows).
                            compute = prompt_s + b * decode_s
                            overlap_compute = overlap * compute
                            moe_part_s = moe_floor_s + experts_s * (1.0 - miss**tokens) + expert_token_s * tokens \
                                if moe else 0.0
                            links_s = allreduce_token_s * tokens
                            knee_s = knee_token_s * (tokens if tokens < knee_tokens else knee_tokens)
                            summed = context_sum
                            while j < k and arrival > end:
                                summed += b
                                c = summed / b
                                w = c if c < window else window
                                memory = weights_s + b * (kv_full_s * c + kv_window_s * w)
                                stage = memory + overlap_compute if memory >= compute else compute + overlap * memory
                                stage += moe_part_s
                                end += pp * (stage + allreduce_s + links_s + knee_s) \
                                    + step_overhead_s + sequences_s + eager_s
                                j += 1
                        else:
                            while j < k and arrival > end:
                                end += step
                                j += 1
                        k = j
                if end > t_limit:
                    t_limit = yield end
                    if k > 1 and cuts:
                        # A new first arrival before the end may cut the jump short: plan it again then.
                        while t_limit is not None and t_limit < end \
                                and (next_arrival < inf or not pending or pending[0][1] >= end):
                            t_limit = yield end
                        if t_limit is None or (next_arrival == inf and pending and pending[0][1] < end):
                            next_arrival = pending[0][1] if pending else inf
                            continue
                    while t_limit is not None and t_limit < end:
                        t_limit = yield end
                    next_arrival = pending[0][1] if pending else inf
                    if t_limit is None or next_arrival <= now:
                        continue
                now = end
                if b:
                    counter += k
                    if estimate:
                        if jumped:
                            ratio = max(ratio - k * RATIO_DECAY, RATIO_MIN)
                        else:
                            for _ in range(k):
                                ratio = max(ratio - RATIO_DECAY, RATIO_MIN)
                kv_used += k * (b + prompt_tokens) if by_chunk else k * b
                context_sum += k * b
                produced += k * b + finishing
                if touched:
                    # Greedy chunking: every prompt touched but the last is finished.
                    last = prefilling[touched - 1]
                    last[8] -= k * take
                    if last[8]:
                        full = False  # (SGLang: the chunked prompt leaves the batch)
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
                    if k < 1:
                        if k < 0:
                            _overfilled(kv_used, kv_cap, counter)
                        # (SGLang retracts here only: a prefill batch was admitted with room for it.)
                        kv, context, last = _preempt_last(running, prefilling, heap, queue, counter, model,
                                                          preempted, by_chunk, estimate)
                        if estimate:
                            prompts -= last[2]
                            outputs -= last[3]
                        held = by_chunk
                        full = False
                        kv_used -= kv
                        context_sum -= context
                        preemptions += 1
                        n_running -= 1
                        if estimate:
                            ratio = min(1.0, (kv_used - prompts + RATIO_RETRACT_STEPS * n_running) / (outputs + 1))
                        n_decoding -= 1
                        next_finish = heap[0][0] if heap else inf
                        continue
                c = context_sum / b
                if multi > 1:
                    to_schedule = multi - (counter - last_sched) % multi  # decode steps to the scheduler's next run
                    if queue and to_schedule < k:
                        k = to_schedule  # the waiting requests are scheduled there
                # The next arrival could join: then the jump stops at the first step boundary after it (with
                # multi-step scheduling, at the first run of the scheduler after it), found with the step of the
                # whole jump, and its step is worked out again for the shorter jump (the second pass).
                # (By chunk: its first chunk and cached prefix, no more than its prompt and first token.)
                joins = next_arrival < inf and not queue and n_running < max_batch \
                    and (kv_used + b + pending[0][2] + 1 <= kv_cap
                         or (by_chunk and kv_used + pending[0][9] + chunk <= kv_cap))
                while True:
                    # The step at the jump's mean context (exact where the step is linear in it), inlined here as
                    # a call per jump costs more than its arithmetic.
                    m = c + (k - 1) / 2.0
                    if mtp:  # charged per token emitted (`_StepModel.decode_only`)
                        step = model.decode_only(b, m) / emitted
                    else:
                        w = m if m < window else window
                        memory = weights_s + b * (kv_full_s * m + kv_window_s * w)
                        compute = b * decode_s
                        step = pp * (memory + overlap * compute if memory >= compute
                                     else compute + overlap * memory) + outside[b]
                    if not joins:
                        break
                    joins = False
                    k_arrival = ceil((next_arrival - now) / step)
                    if multi > 1:
                        k_arrival = to_schedule + max(ceil((k_arrival - to_schedule) / multi), 0) * multi
                    if k_arrival >= k:
                        break
                    k = k_arrival if k_arrival > 0 else 1
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
                if estimate:
                    ratio = max(ratio - k * RATIO_DECAY, RATIO_MIN)
                grown = k * b
                kv_used += grown
                context_sum += grown
                produced += grown
            else:
                # Nothing running, so nothing waits either (an empty replica admits any request): idle until
                # the next arrival. An idle SGLang resets its new-token ratio.
                ratio = RATIO_INIT
                if next_arrival == inf or next_arrival > t_limit:
                    t_limit = yield next_arrival
                    next_arrival = pending[0][1] if pending else inf
                    continue
                idle += next_arrival - now
                now = next_arrival
                continue

        if kv_used > kv_max:
            if kv_used > kv_cap:
                _overfilled(kv_used, kv_cap, counter)
            kv_max = kv_used
        if held and next_finish <= counter:
            held = False
            if queue[0][9] > kv_cap - kv_used:
                # The running requests grew into the blocks the preempted request left cached: those are evicted.
                queue[0][9] = kv_cap - kv_used
        while next_finish <= counter:
            _, i, req = heappop(heap)
            del running[i]
            tokens = req[2] + req[3]
            kv_used -= tokens
            context_sum -= tokens
            done_s[i] = now
            full = False
            if reserve:
                reserved -= tokens
            elif estimate:
                prompts -= req[2]
                outputs -= req[3]
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


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the duration (as it was after). The replica loops allocate a list per
    request and a tuple per completion and free each when it is done with (no reference cycles), so the
    collector's passes, set off by the allocations, find nothing to free; they took about 7% of the verification's
    runs. What the loops compute does not depend on it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class _Served:
    first_s: FloatArray        # first-token time per request (without the request overhead)
    done_s: FloatArray         # completion time per request
    replica: IntArray
    preempted: IntArray
    stats: list[ReplicaStats]


@_collector_paused()
def _serve(model: _StepModel, arrival: FloatArray, prompt: IntArray, output: IntArray,
           prefill_s_per_token: FloatArray | None, replicas: int, max_batch: int, kv_cap: int, chunk: float,
           assigned: IntArray | None, series_points: int, policy: Scheduling | None = None,
           clients: int = 0, cached: IntArray | None = None) -> _Served:
    """Run `replicas` replica loops over the requests. `assigned`: a replica per request fixed in advance
    (round robin, or the central queue of `simulate_queue`), each replica then runs alone over its own
    requests; None: least outstanding requests, decided at each arrival with the replicas whose next event
    is due brought up to that time. `prefill_s_per_token`: per request, instead of the step model's cost
    of its prompt. `clients` > 0: a closed loop of that many clients on one replica; the first `clients`
    requests arrive at their `arrival` times and each later one when its client's previous one completes
    (request i + clients follows request i); `arrival` is overwritten with those times. `cached`: per request,
    the prompt tokens found in the prefix cache (in the KV cache from its admission, never computed; at most its
    prompt less one token); None: none."""
    n = len(arrival)
    hits = np.zeros(n, dtype=np.int64) if cached is None else np.asarray(cached, dtype=np.int64)
    first = np.full(n, math.nan)
    done = np.full(n, math.nan)
    preempted = np.zeros(n, dtype=np.int64)

    def requests(indices: IntArray) -> list[Request]:
        # A chunk of requests as Python objects, when routed (not before: memory follows the flight).
        compute = (model.prefill_token_compute_array(prompt[indices]) if prefill_s_per_token is None
                   else prefill_s_per_token[indices])
        return [[i, a, p, o, s, 0, 0, -1.0, 0, c] for i, a, p, o, s, c in zip(
            indices.tolist(), arrival[indices].tolist(), prompt[indices].tolist(), output[indices].tolist(),
            compute.tolist(), hits[indices].tolist(), strict=True)]

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
        prompt_of, output_of, hits_of = prompt.tolist(), output.tolist(), hits.tolist()

        def follow(i: int, now: float) -> Request | None:
            j = successors[i]
            if j < 0:
                return None
            arrivals[j] = now
            return [j, now, prompt_of[j], output_of[j], compute_of[j], 0, 0, -1.0, 0, hits_of[j]]

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
